// Timestamps as stored and shown: RFC 3339 in UTC.
#pragma once

#include <string>

namespace edgecost {

// Now, to the second: "2026-11-25T07:45:00Z".
std::string NowRfc3339();

}  // namespace edgecost
