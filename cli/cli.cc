#include "cli/cli.h"

#include <iostream>

#include "base/units.h"
#include "costdb/costdb.h"
#include "proto/json.h"

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
    return UsageError(
        InvalidArgument("--remote serves costs, solve, profile, train and jobs; this command runs on this machine"));
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

void PrintJson(const google::protobuf::Message& message) {
  auto json = proto::ToJson(message, {.indent = true});
  if (!json.ok()) {
    std::cerr << "edgecost: error: " << json.status().message() << "\n";
    return;
  }
  std::cout << *json;
}

}  // namespace edgecost::cli
