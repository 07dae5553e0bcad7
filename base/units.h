// Parsing and printing of quantities with units, for flags and tables.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"

namespace edgecost {

// "3000000B", "3MB" (10^6), "2.5MiB" (2^20), "512KiB", "1.5GB", "2TB", "1TiB". Case-insensitive units;
// a number without a unit is refused, naming the units ("0.9" is not a byte).
Result<int64_t> ParseBytes(std::string_view text);

// A runtime budget: a multiple of one plain training step ("7.6x") or seconds ("1.2s", "800ms").
struct RuntimeBudget {
  enum class Kind { kMultiple, kSeconds } kind = Kind::kMultiple;
  double value = 1.0;
  // Seconds, given the runtime of one plain (no recompute) training step.
  double Seconds(double plain_step_s) const { return kind == Kind::kMultiple ? value * plain_step_s : value; }
};
Result<RuntimeBudget> ParseRuntimeBudget(std::string_view text);

// "2.98 MB", "512 B", "1.20 GB": SI units, three significant digits.
std::string FormatBytes(double bytes);
// "1.23 s", "45.6 ms", "789 us", "12 ns"; from 100 s on "2 min 19 s", "4 h 03 min", "2 d 5 h".
std::string FormatSeconds(double seconds);
// "7.89 J", "12.3 mJ", "4.56 uJ".
std::string FormatJoules(double joules);

}  // namespace edgecost
