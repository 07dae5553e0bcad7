// Protobuf's canonical JSON mapping, one way for the whole project: zero values
// printed (node 0 has its index), and decoding errors that name the valid fields.
#pragma once

#include <string>

#include <google/protobuf/message.h>

#include "base/status.h"

namespace edgecost::proto {

struct JsonStyle {
  bool indent = false;
};

Result<std::string> ToJson(const google::protobuf::Message& message, JsonStyle style = {});

// Unknown fields are refused; the error lists the fields the message has.
Status FromJson(const std::string& json, google::protobuf::Message* message);

}  // namespace edgecost::proto
