#include "cli/cli.h"

#include <iostream>

#include "base/units.h"
#include "costdb/costdb.h"
#include "proto/json.h"
#include "service/step_memory.h"

namespace edgecost::cli {

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

}  // namespace edgecost::cli
