#include "cli/cli.h"

#include <iostream>

#include <google/protobuf/util/json_util.h>

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

void PrintJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.always_print_primitive_fields = true;
  std::string json;
  const auto status = google::protobuf::util::MessageToJsonString(message, &json, options);
  if (!status.ok()) {
    std::cerr << "edgecost: error: cannot print JSON: " << status.ToString() << "\n";
    return;
  }
  std::cout << json;
}

}  // namespace edgecost::cli
