// Shared plumbing of the `edgecost` subcommands: exit codes, errors, JSON output.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>
#include <google/protobuf/message.h>

#include "base/status.h"
#include "costdb/store.h"
#include "proto/edgecost.pb.h"

namespace edgecost::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // the command ran and failed
inline constexpr int kExitUsage = 2;    // the command line is wrong

struct Context {
  std::string db_path;  // --db; empty means EDGECOST_DB or the default location
  std::string remote;   // --remote unix:PATH or http://HOST:PORT: ask a daemon instead
  bool verbose = false;  // --verbose: every detail (each op's progress and reasons), not a summary
  int exit_code = kExitOk;

  // The cost database at DbPath, opened and checked at most once per mode in this process (a
  // read-write one serves reads too); nothing is opened until a connection is asked for.
  costdb::Store& Store(costdb::OpenMode mode) const;

 private:
  mutable std::unique_ptr<costdb::Store> read_write_, read_only_;  // opened on first use
};

// --trainable for every command that takes it: one wording, and @FILE read here (a file of this
// machine: `choose-update --out`'s, one NAME or NAME:SHARE per line) into layers:NAME,...
CLI::Option* AddTrainableOption(CLI::App* command, std::string& trainable);
// The text of such a file as a --trainable value.
Result<std::string> TrainableOfFile(const std::string& path);
inline constexpr char kUpdateInBackwardHelp[] =
    "Update each layer's parameters as soon as its gradient is complete (after its last backward node) and free "
    "the gradient, instead of holding every gradient until the step ends: the schedule holds weight gradients as "
    "activations, the layers in flight only; the same weights, bit for bit";

// --activation-budget: bytes ("9MB") or a percentage of the plain step's activation peak ("50%", as
// the Python package takes it); sets one of the two.
struct ActivationBudget {
  uint64_t bytes = 0;
  double percent = 0;
};
Result<ActivationBudget> ParseActivationBudget(const std::string& text);

// Prints "edgecost: error: ..." and returns the exit code for it.
int Failure(const Status& status);
int UsageError(const Status& status);

// Runs a command that works on this machine only: with --remote it is refused, not silently run here.
int LocalOnly(const Context& ctx, const std::function<int()>& run);

// --db, else $EDGECOST_DB, else the default location.
std::string DbPath(const Context& ctx);

// While one lives, Ctrl-C and SIGTERM set stop() instead of killing the process, so that a long
// command ends cleanly (a job cancelled, a run's checkpoint kept); the default handlers after.
class InterruptScope {
 public:
  InterruptScope();
  ~InterruptScope();
  InterruptScope(const InterruptScope&) = delete;
  InterruptScope& operator=(const InterruptScope&) = delete;
  const std::atomic<bool>* stop() const;
};

// A daemon's job followed through WatchEvents (its events only) until it ends: `on_update` sees
// each new state with the one before it. Ctrl-C cancels the job, once. Returns the final job.
Result<v1::Job> FollowJob(const Context& ctx, v1::Job job,
                          const std::function<void(const v1::Job& before, const v1::Job& now)>& on_update);

// Protobuf's canonical JSON mapping, indented, on stdout.
void PrintJson(const google::protobuf::Message& message);

// Words for text output (enum states: service/words.h).
// "43.6 mJ", with " ESTIMATED" when a model, not a sensor, gave the figure.
std::string EnergyText(double energy_j, v1::EnergySource source);
// "1.50 MB (1500000 B)": readable, and exact where a budget is compared.
std::string BytesText(uint64_t bytes);

// "whole memory  X = parameters + gradients + optimizer state + workspace + activations", with the
// plain step's activation peak; `schedule_peak_bytes` (a schedule's activation peak) replaces it when set.
void PrintStepMemory(const v1::StepMemory& memory, std::optional<uint64_t> schedule_peak_bytes = std::nullopt);

// Each file cmd_*.cc registers one subcommand; its callback stores the exit code in ctx.
void RegisterModelsCommand(CLI::App& app, Context& ctx);
void RegisterGraphCommand(CLI::App& app, Context& ctx);
void RegisterCostsCommand(CLI::App& app, Context& ctx);
void RegisterDbCommand(CLI::App& app, Context& ctx);
void RegisterProfileCommand(CLI::App& app, Context& ctx);
void RegisterBenchCommand(CLI::App& app, Context& ctx);
void RegisterServeCommand(CLI::App& app, Context& ctx);
void RegisterJobsCommand(CLI::App& app, Context& ctx);
void RegisterSolveCommand(CLI::App& app, Context& ctx);
void RegisterProbesCommand(CLI::App& app, Context& ctx);
void RegisterTraceCommand(CLI::App& app, Context& ctx);
void RegisterTrainCommand(CLI::App& app, Context& ctx);
void RegisterChooseUpdateCommand(CLI::App& app, Context& ctx);
void RegisterCalibrateCommand(CLI::App& app, Context& ctx);

}  // namespace edgecost::cli
