// When a search must stop: a steady-clock time, and a flag set from another
// thread (shutdown, a cancelled job). Every loop of the solver that is not
// bounded by the graph's size asks it, so no input can make a solve outlive
// its time limit or hold up a daemon's shutdown.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>

#include "base/clock.h"

namespace edgecost::solver {

struct Deadline {
  double at_s = std::numeric_limits<double>::infinity();  // steady clock
  const std::atomic<bool>* stop = nullptr;

  bool Stopped() const { return stop && stop->load(std::memory_order_relaxed); }
  bool Passed() const { return Stopped() || SteadyNowS() >= at_s; }
  // The same stop flag, and the earlier of the two times.
  Deadline Before(double at) const { return {std::min(at_s, at), stop}; }
};

// Whether `energy_j` improves on `than_j` by more than rounding: a strict
// decrease, also where energies are zero (a search that accepted equal
// energies could go round in circles).
inline bool Cheaper(double energy_j, double than_j) {
  return energy_j < than_j - 1e-12 * std::abs(than_j);
}

}  // namespace edgecost::solver
