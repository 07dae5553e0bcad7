#include "cli/cli.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <csignal>
#include <fstream>
#include <iostream>

#include "base/units.h"
#include "costdb/costdb.h"
#include "daemon/client.h"
#include "proto/json.h"
#include "service/step_memory.h"

namespace edgecost::cli {

Result<ActivationBudget> ParseActivationBudget(const std::string& text) {
  ActivationBudget budget;
  if (text.ends_with("%")) {
    char* end = nullptr;
    const std::string number = text.substr(0, text.size() - 1);
    budget.percent = std::strtod(number.c_str(), &end);
    if (number.empty() || end != number.c_str() + number.size() || !(budget.percent > 0) ||
        !std::isfinite(budget.percent)) {
      return InvalidArgument("--activation-budget " + text +
                             ": a percentage is a positive number of percent of the plain step's activation peak, "
                             "e.g. 50%");
    }
    return budget;
  }
  EC_ASSIGN_OR_RETURN(const int64_t bytes, ParseBytes(text));
  if (bytes <= 0) return InvalidArgument("--activation-budget must be positive");
  budget.bytes = static_cast<uint64_t>(bytes);
  return budget;
}

int Failure(const Status& status) {
  std::cerr << "edgecost: error: " << status.message() << "\n";
  return kExitFailure;
}

int UsageError(const Status& status) {
  std::cerr << "edgecost: error: " << status.message() << "\nRun with --help for more information.\n";
  return kExitUsage;
}

int LocalOnly(const Context& ctx, const std::function<int()>& run) {
  if (!ctx.remote.empty()) {
    return UsageError(InvalidArgument(
        "--remote serves models, costs, solve, schedules, profile, train, runs and jobs; this command runs on this "
        "machine"));
  }
  return run();
}

std::string DbPath(const Context& ctx) { return ctx.db_path.empty() ? costdb::DefaultDbPath() : ctx.db_path; }

costdb::Store& Context::Store(costdb::OpenMode mode) const {
  if (read_write_ || mode == costdb::OpenMode::kReadWrite) {
    if (!read_write_) read_write_ = std::make_unique<costdb::Store>(DbPath(*this), mode);
    return *read_write_;
  }
  if (!read_only_) read_only_ = std::make_unique<costdb::Store>(DbPath(*this), mode);
  return *read_only_;
}

namespace {
std::atomic<bool> g_interrupted{false};
void OnInterrupt(int) { g_interrupted.store(true); }
}  // namespace

InterruptScope::InterruptScope() {
  g_interrupted.store(false);
  std::signal(SIGINT, OnInterrupt);
  std::signal(SIGTERM, OnInterrupt);
}

InterruptScope::~InterruptScope() {
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
}

const std::atomic<bool>* InterruptScope::stop() const { return &g_interrupted; }

Result<v1::Job> FollowJob(const Context& ctx, v1::Job job,
                          const std::function<void(const v1::Job& before, const v1::Job& now)>& on_update) {
  const InterruptScope interrupt;
  bool cancelled = false;
  uint64_t after = 0;
  while (job.state() == v1::Job::STATE_QUEUED || job.state() == v1::Job::STATE_RUNNING) {
    if (interrupt.stop()->load() && !cancelled) {
      v1::CancelJobRequest cancel;
      cancel.set_id(job.id());
      (void)daemon::CallRemote(ctx.remote, "JobService/CancelJob", cancel, job);
      cancelled = true;
    }
    v1::WatchEventsRequest watch;  // a second at a time, so that Ctrl-C is seen
    watch.set_after_sequence(after);
    watch.set_wait_s(1);
    watch.set_job_id(job.id());
    v1::WatchEventsResponse events;
    EC_RETURN_IF_ERROR(daemon::CallRemote(ctx.remote, "JobService/WatchEvents", watch, events));
    for (const v1::Event& event : events.events()) {
      after = std::max(after, event.sequence());
      on_update(job, event.job());
      job = event.job();
    }
  }
  return job;
}

std::string EnergyText(double energy_j, v1::EnergySource source) {
  return FormatJoules(energy_j) + (source == v1::ENERGY_SOURCE_ESTIMATED ? " ESTIMATED" : "");
}

std::string BytesText(uint64_t bytes) {
  return FormatBytes(static_cast<double>(bytes)) + " (" + std::to_string(bytes) + " B)";
}

void PrintStepMemory(const v1::StepMemory& m, std::optional<uint64_t> schedule_peak_bytes) {
  const auto bytes = [](uint64_t b) { return FormatBytes(static_cast<double>(b)); };
  const uint64_t activations = schedule_peak_bytes.value_or(m.activation_peak_bytes());
  std::cout << "plain step     peak " << BytesText(m.activation_peak_bytes())
            << " of activations, as the executor's arena holds them (every output kept until its last reader; "
            << bytes(m.activation_total_bytes()) << " are all forward and loss outputs together)\n";
  std::cout << "whole memory   " << bytes(m.fixed_bytes() + activations) << " = "
            << service::FixedPartsText(m) << " + activations " << BytesText(activations)
            << (schedule_peak_bytes ? " (this schedule's peak)" : " (the plain step's peak)") << "\n";
  if (!m.note().empty()) std::cout << "               " << m.note() << "\n";
}

void PrintJson(const google::protobuf::Message& message) {
  auto json = proto::ToJson(message, {.indent = true});
  if (!json.ok()) {
    std::cerr << "edgecost: error: " << json.status().message() << "\n";
    return;
  }
  std::cout << *json;
}

CLI::Option* AddTrainableOption(CLI::App* command, std::string& trainable) {
  return command
      ->add_option("--trainable", trainable,
                   "Trained parameters: all; last:K, the last K layers with parameters; bias, biases only; "
                   "layers:NAME,..., the named layers alone (a sparse update: an ONNX import's PyTorch modules with "
                   "the modules inside them, or node names' layerN), NAME:SHARE for the first SHARE of a "
                   "convolution's or linear layer's output channels (a sparse tensor update); or @FILE, one NAME "
                   "or NAME:SHARE per line (`edgecost choose-update --out`)")
      ->capture_default_str()
      ->transform(
          [](std::string value) {
            if (!value.starts_with("@")) return value;
            Result<std::string> read = TrainableOfFile(value.substr(1));
            if (!read.ok()) throw CLI::ValidationError(read.status().message());
            return *read;
          },
          "", "@FILE");
}

Result<std::string> TrainableOfFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFound("@" + path + ": cannot read the file");
  std::string layers, line;
  while (std::getline(in, line)) {
    line.erase(0, line.find_first_not_of(" \t"));
    line.erase(line.find_last_not_of(" \t\r") + 1);
    if (line.empty() || line[0] == '#') continue;
    layers += (layers.empty() ? "" : ",") + line;
  }
  if (layers.empty()) return InvalidArgument("@" + path + ": the file names no layer");
  return "layers:" + layers;
}

}  // namespace edgecost::cli
