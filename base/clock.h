// The one clock for durations: seconds on the steady (monotonic) clock, comparable only with each other.
#pragma once

#include <chrono>

namespace edgecost {

inline double SteadyNowS() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace edgecost
