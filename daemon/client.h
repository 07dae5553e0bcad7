// The client side of `--remote`: one Twirp call to an edgecost daemon at
// unix:PATH or http://HOST:PORT, in protobuf, with the bearer token from
// $EDGECOST_TOKEN when set. Twirp errors come back as Status with their message.
#pragma once

#include <string>

#include <google/protobuf/message.h>

#include "base/status.h"

namespace edgecost::daemon {

// `method` is "<Service>/<Method>", e.g. "CostService/GetCostTable".
Status CallRemote(const std::string& remote, const std::string& method, const google::protobuf::Message& request,
                  google::protobuf::Message& response);

// GET of one of the daemon's files (e.g. "/trained/7.onnx") into `body`, with the same token.
// NotFound on 404; PermissionDenied on 401 and 403.
Status FetchRemote(const std::string& remote, const std::string& target, std::string& body);

}  // namespace edgecost::daemon
