// Profiling a training graph on this device: every distinct op measured once per
// fingerprint (op signatures dedupe repeated blocks), in a shuffled order so
// that heat and frequency drift bias no op, each cost stored as soon as it is
// measured so that an interrupted run loses nothing and the next one resumes.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "costdb/costdb.h"
#include "graph/resolve.h"
#include "kernels/layers.h"
#include "profiler/measure.h"
#include "proto/edgecost.pb.h"

namespace edgecost::profiler {

struct ProfileProgress {
  int done = 0;   // ops measured so far in this pass
  int total = 0;  // ops of this pass
  std::string op_key;
  double elapsed_s = 0;  // since the profile began
  double eta_s = 0;      // until this pass ends, at most
  // 0: the first pass over every op. From 1: the disturbed ops measured again,
  // round `round` of at most `rounds`.
  int round = 0;
  int rounds = 0;
};

struct ProfileOptions {
  int threads = 1;
  bool force = false;  // measure again what the database already has
  MeasureOptions measure;
  uint32_t shuffle_seed = 1;
  std::function<void(const ProfileProgress&)> on_progress;
  const std::atomic<bool>* stop = nullptr;  // checked between ops (Ctrl-C, SIGTERM)
  // Interference: an op whose window was disturbed is measured again after the
  // others, in rounds of shuffled order (so that a burst of load hits other ops
  // each time), up to max_attempts windows in all and within retry_budget_s
  // (0: as long as the first pass took, at least 2 s). What stays disturbed is
  // stored marked unreliable with the reason.
  int max_attempts = 4;
  double retry_budget_s = 0;
  double retry_pause_s = 0.2;  // between rounds: a short burst of load may pass
  // Makes the watch for each window; unset: the scheduler's accounting under
  // /proc (SchedInterferenceWatch). Tests substitute fakes.
  std::function<std::unique_ptr<InterferenceWatch>()> make_watch;
  // Performance counters read around every op's window (OpenTeamCounters);
  // null: none are read.
  probes::CounterSource* counters = nullptr;
  // Where no sensor measures energy (an ESTIMATED meter): a counter-based model
  // fitted on this fingerprint, which estimates each op's energy from its
  // counters instead of the power model, labelled with its calibration. Ops
  // stored with the power model's estimate are re-estimated without measuring.
  std::optional<v1::EnergyCalibration> calibration;
  // Times a reference kernel on a team of `threads` (CpuCheckS), before and
  // after every window. Unset: CpuCheckS, unless make_watch is set (tests with
  // scripted watches script this too, or check nothing).
  std::function<double(int threads)> cpu_check;
  // Ops on one thread are timed on its CPU clock (MeasureOptions::cpu_clock).
  bool thread_cpu_time = true;
};

// RuntimeStats.clock: what an op's runtime was timed on.
inline constexpr char kThreadCpuClock[] = "thread-cpu";
inline constexpr char kWallClock[] = "wall";

// The reference kernel's usual time among `readings_s`: their 25th percentile
// (the lower one of a pair). Robust both ways: one fast outlier does not make
// every later reading "slow", and a quarter of the readings may be slowed
// before it moves.
double UsualCheckS(std::vector<double> readings_s);
// At least this many stored readings for a team size make its usual time;
// with fewer, the profile's own readings do.
inline constexpr size_t kMinStoredChecks = 5;

// Counters on this thread and the threads of its OpenMP team of `threads`
// (started now if they were not), for every hardware and software event that
// opens here; the rest are in Uncounted() with the reason.
std::unique_ptr<probes::CounterSource> OpenTeamCounters(int threads);

struct UnreliableOp {
  std::string op_key;
  std::string reason;
};

struct ProfileSummary {
  int nodes = 0;
  int distinct_ops = 0;
  int measured = 0;                      // this run
  int reused = 0;                        // already in the database for this fingerprint
  int without_work = 0;                  // the input layer and its gradient
  int imprecise_energy = 0;              // windows shorter than the energy source needs
  int remeasured = 0;                    // windows measured again because interference disturbed them
  std::vector<UnreliableOp> unreliable;  // stored marked unreliable: disturbed in every attempt
  double elapsed_s = 0;
  bool interrupted = false;
};

// "3 ops measured while the CPU was busy: re-run when the device is idle, or
// `--accept-noisy`" (with an empty hint: "..., stored marked unreliable"), or
// empty when every op was measured cleanly.
std::string UnreliableSummary(const ProfileSummary& summary, const std::string& accept_hint);

Result<ProfileSummary> ProfileGraph(costdb::CostDb& db, kernels::Backend& backend, const v1::TrainingGraph& graph,
                                    const std::string& fingerprint_hash, int64_t run_id, EnergyMeter* meter,
                                    const ProfileOptions& options);

// The cost table of `graph` from the measured op costs and paging costs of a
// fingerprint. A node whose op was never measured is a NotFound naming it.
Result<v1::CostTable> MeasuredCostTable(costdb::CostDb& db, const v1::TrainingGraph& graph, const std::string& device,
                                        const std::string& fingerprint_hash, int threads);

// Which thread count's stored table of `key` (key.threads ignored) to read. `asked_threads` > 0
// must have one; 0 asks for all cores when `this_device`, and for another device for the only
// count stored or the most, which `*stated` then says. A count without a table while other counts
// have one is a FailedPrecondition naming them and `command(threads)`, what would store it. With
// no table at all the count asked is returned, for the reader's own NotFound.
Result<uint32_t> ChooseTableThreads(costdb::CostDb& db, const costdb::CostTableKey& key, int asked_threads,
                                    bool this_device, const std::function<std::string(int)>& command,
                                    std::string* stated);

// The stored measured cost table of a zoo model on a device ("this": this machine), measured at
// `threads` compute threads (0: as ChooseTableThreads chooses, stated in the table's note).
Result<v1::CostTable> LoadMeasuredCostTable(costdb::CostDb& db, const graph::GraphSpec& spec, std::string device,
                                            int threads = 0);

// The `edgecost profile` command line that measures `graph` (derivation, batch size and trainable
// named; the thread count when above 0).
std::string ProfileCommand(const v1::TrainingGraph& graph, const std::string& model_or_file, int threads = 0);

// "1 thread" / "2 threads"; 0 is "unknown threads" (a table stored before thread counts were kept).
std::string ThreadsText(uint32_t threads);

// This machine's device name in the database: its host name.
std::string ThisDeviceName();

inline constexpr char kMeasuredSource[] = "measured";

}  // namespace edgecost::profiler
