// What the commands ask of the cost database, answered by the daemon's own service handlers
// (daemon/services.h): in this process over the command's store, or by a daemon with --remote.
// One call per use case and the same messages either way, so that a command is written once.
#pragma once

#include <string>

#include "base/status.h"
#include "cli/cli.h"
#include "proto/edgecost.pb.h"

namespace edgecost::cli {

class Services {
 public:
  explicit Services(const Context& ctx) : ctx_(ctx) {}

  // A missing database lists the zoo alone, and is not created.
  Result<v1::ListModelsResponse> ListModels(const v1::ListModelsRequest& request);
  Result<v1::AddModelResponse> AddModel(const v1::AddModelRequest& request);
  Result<v1::RemoveModelResponse> RemoveModel(const v1::RemoveModelRequest& request);
  Result<v1::ListSchedulesResponse> ListSchedules(const v1::ListSchedulesRequest& request);
  Result<v1::ListRunsResponse> ListRuns(const v1::ListRunsRequest& request);
  Result<v1::ListTrainRunsResponse> ListTrainRuns(const v1::ListTrainRunsRequest& request);

  // Where the answers come from: the daemon's address, or the database (printable).
  std::string where() const;

 private:
  const Context& ctx_;
};

}  // namespace edgecost::cli
