// Real training steps under a schedule, as `edgecost train`, `bench train` and
// the daemon's train jobs run them: the schedule is resolved (a file, a stored
// one, one solved now, or none for the plain step) and checked against the
// model and its budgets before anything runs; then N steps run on the executor,
// and a run record holds what the schedule predicted next to what the steps
// measured. The per-node times inside the steps become the `measured-in-step`
// cost table, which `solve --cost-source measured-in-step` plans with: each node's
// median time per execution plus the step's time outside its nodes (binding,
// the arena, dispatch) spread over every execution alike (InStepOverheadS), so
// that the table's costs add up to the measured step.
#pragma once

#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "costdb/costdb.h"
#include "costdb/store.h"
#include "graph/resolve.h"
#include "profiler/measure.h"
#include "proto/edgecost.pb.h"
#include "solver/plan.h"
#include "solver/problem.h"
#include "solver/simulator.h"
#include "train/data.h"
#include "train/executor.h"
#include "train/optimizer.h"

namespace edgecost::service {

inline constexpr char kMeasuredInStepSource[] = "measured-in-step";

struct TrainJobOptions {
  costdb::Store* database = nullptr;  // the cost database; required
  graph::GraphSpec graph;  // the derivation is always exact: the executor runs real gradients
  // The schedule, at most one of: a protobuf JSON file (`edgecost solve --out`), a
  // stored schedule, or a request solved now (activation_budget_bytes > 0). None: the plain step.
  std::string schedule_file;
  uint64_t schedule_id = 0;
  v1::ScheduleRequest solve;
  // Of the predictions (and of a schedule solved now): measured, measured-in-step, or auto
  // (measured-in-step where a table of it exists at the run's thread count, else measured).
  std::string cost_source = "auto";
  // Solve in a child process, so that this process holds none of the solver's memory and its peak
  // is the training's. Only where no other thread may hold a lock at the fork (the CLI).
  bool solve_in_child = false;
  int steps = 10;
  double lr = 0.01;
  v1::TrainOptimizer optimizer;  // unset: SGD without momentum
  v1::LrSchedule lr_schedule;    // unset: lr at every step
  int threads = 0;               // 0: all cores
  uint32_t seed = 1;
  // Steps run epochs x batches per epoch of the data instead of `steps` when epochs > 0 (needs data_file).
  int epochs = 0;
  // A user's data set (train/data.h: an image folder, .npy, .npz or CIFAR-10 .bin); empty: synthetic.
  std::string data_file;
  std::vector<float> mean, std;                  // per-channel normalization of the data
  std::string input_key = "x", label_key = "y";  // an .npz's arrays
  double val_split = 0;                          // the fraction of data_file held out for per-epoch loss and accuracy
  std::string val_data;                          // or a held-out data set of its own
  // Where the parameters start: "file", an ONNX model's own initializers (a zoo model has none and
  // draws them from the seed), or "random", drawn from the seed.
  std::string init = "file";
  // An ONNX model only: the same graph with the trained initializers, and a NumPy .npz state dict of
  // them (empty: out_onnx with .npz for its extension).
  std::string out_onnx;
  std::string out_npz;
  // Checkpoints: the run's state goes to `checkpoint_path` every `checkpoint_every` steps and after
  // the last one, replacing the file atomically. With `resume`, the run starts from the checkpoint
  // there (from step 1 while there is none yet) and ends at the weights of an unstopped run.
  std::string checkpoint_path;
  int checkpoint_every = 100;
  bool resume = false;
  bool verify = false;
  bool trace = false;
  std::string paging_dir;  // empty: "paging" beside the database
  bool store = true;       // the run record and the measured-in-step table
  bool store_schedule = true;  // a schedule solved for the run (not: a profile's paging steps)
  std::string probes_config;
  // A run most of whose steps were disturbed is stored marked; without this its
  // measured-in-step cost table is not.
  bool accept_noisy = false;
  // What disturbs a step; null: the scheduler's accounting of the training's
  // threads and /proc's steal and load (profiler::SchedInterferenceWatch). Tests pass a fake.
  profiler::InterferenceWatch* watch = nullptr;
};

struct TrainProgress {
  int step = 0;  // 1-based, of `steps`
  int steps = 0;
  double loss = 0;
  double runtime_s = 0;
  // Set on a second report of an epoch's last step, once the held-out part is evaluated.
  const v1::EpochStats* epoch = nullptr;
  int64_t held_out_records = 0;
  int64_t batches_per_epoch = 0;
};

struct TrainJobResult {
  v1::TrainRun run;
  int64_t run_id = 0;                     // 0 when not stored
  int64_t in_step_table_id = 0;           // the measured-in-step cost table, when stored
  std::string trace_json;                 // Chrome Trace Event JSON, with `trace`
  std::vector<std::string> notes;         // what could not be predicted or measured, and why
  double median_cpu_s = 0;                // the compute thread's CPU time per step, over the steps after the first
  std::string written_onnx, written_npz;  // the trained model's files, with out_onnx
};

// A train job's request (JobService.StartTrain) as options on `db_path`, its defaults resolved; its data
// paths as given (the agent resolves them inside its data folders first).
Result<TrainJobOptions> TrainJobOptionsOf(const v1::StartTrainRequest& request, costdb::Store& store);

// "INPUTS,LABELS": an .npz's array names; empty names when the text is not that.
std::pair<std::string, std::string> DataKeysOf(const std::string& text);

// The optimizer a request names, checked, with PyTorch's defaults for what it leaves unset.
Result<train::OptimizerOptions> OptimizerOptionsOf(const v1::TrainOptimizer& optimizer);
v1::TrainOptimizer ToProto(const train::OptimizerOptions& options);  // every default resolved
// The learning-rate schedule a request names, checked against a run of `steps` steps at `lr`;
// cosine's t_max defaults to the steps after warm-up.
Result<train::LrScheduleOptions> LrScheduleOptionsOf(const v1::LrSchedule& schedule, int steps, double lr);
v1::LrSchedule ToProto(const train::LrScheduleOptions& options);
// "sgd, momentum 0.9 ..., lr 0.01 cosine to 0 over 90 steps after 10 warm-up steps", for logs and `train`.
std::string DescribeTraining(const v1::TrainRun& run);
// The held-out part's mean loss and accuracy after an epoch, in inference mode, into `epoch`.
Status EvaluateHeldOut(const train::DataSource& data, train::Executor& executor, v1::EpochStats& epoch);
// The line `train` prints after an epoch.
std::string EpochLine(const v1::EpochStats& epoch, int64_t batches_per_epoch, int64_t held_out_records);

// The training data: the user's (--data, with its held-out part), else synthetic batches from the seed.
Result<train::DataSource> OpenTrainingData(const TrainJobOptions& options, const train::Executor& executor,
                                           std::vector<std::string>& notes);

// The .npz written beside an ONNX model: its path with .npz for .onnx (or added).
std::string NpzPathFor(const std::string& onnx_path);

// Whether one training step was disturbed, by the profiler's limits: its
// threads waited for a CPU longer than limits.wait_fraction of the step (and
// limits.min_wait_s), the hypervisor stole more than limits.max_steal_fraction,
// or (a team of several threads, over a window of at least min_shared_window_s:
// /proc/stat counts 10 ms ticks) other tasks used limits.shared_cpu_cores.
profiler::Verdict JudgeStep(const v1::Interference& interference, double runtime_s, double window_s, bool single_thread,
                            const profiler::InterferenceLimits& limits = {});
inline constexpr double kMinSharedWindowS = 0.1;

// Which steps the run's median is over: of the `disturbed` flags of the steps
// measured (after the first), the undisturbed ones when at least
// kMinUndisturbedSteps are (or all of them, when fewer steps ran), else every
// step. The run is disturbed when more than half its steps were.
inline constexpr size_t kMinUndisturbedSteps = 3;
struct StepSelection {
  std::vector<size_t> median_of;  // indexes into `disturbed`
  size_t disturbed_steps = 0;
  bool run_disturbed = false;
  bool undisturbed_only = false;  // the median leaves disturbed steps out
};
StepSelection SelectSteps(const std::vector<bool>& disturbed);

// The line `train` warns with about a disturbed run ("" when it was not): what
// disturbed it, what was not stored, and what to do.
std::string DisturbedRunWarning(const v1::TrainRun& run, bool accepted_noisy);

// A schedule checked against a training graph: its cost table must be the
// graph's (same nodes, bytes and edges) and its replay must keep to the budgets.
struct CheckedRun {
  v1::Schedule schedule;
  solver::Plan plan;
  v1::CostTable table;
  solver::Problem problem;
  solver::Replay replay;
};
Result<CheckedRun> CheckScheduleAgainstGraph(const v1::TrainingGraph& graph, const v1::Schedule& schedule,
                                             const v1::CostTable& table);

// The time a step spends outside its nodes, per node execution: (step - paging wait - the sum
// over nodes of time per execution x executions) / executions. A constant per-node dispatch
// overhead: a recomputed node pays it again. May be negative when medians of noisy nodes sum
// above the median step; the in-step table then keeps every node's time at least 0.
double InStepOverheadS(double step_s, double paging_wait_s, const std::vector<v1::NodeTime>& nodes);

Result<TrainJobResult> RunTrainJob(const TrainJobOptions& options, const std::atomic<bool>* stop,
                                   const std::function<void(const TrainProgress&)>& on_step,
                                   const std::function<void(const std::string&)>& log);

}  // namespace edgecost::service
