// Words for the states people read about, in text output and the web view:
// never a raw enum name.
#pragma once

#include <string_view>

#include "proto/edgecost.pb.h"

namespace edgecost::service {

std::string_view JobStateText(v1::Job::State state);                // "succeeded"
std::string_view ScheduleStatusText(v1::Schedule::Status status);  // "optimal (proven)"

}  // namespace edgecost::service
