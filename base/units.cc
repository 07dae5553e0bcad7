#include "base/units.h"

#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>

namespace edgecost {
namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Splits "2.5MiB" into 2.5 and "mib". Fails on an empty or malformed number.
bool SplitNumber(std::string_view text, double* number, std::string* unit) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  size_t end = 0;
  while (end < text.size() && (std::isdigit(static_cast<unsigned char>(text[end])) || text[end] == '.' ||
                               text[end] == 'e' || text[end] == 'E' || text[end] == '+' || text[end] == '-')) {
    // 'e' could start a unit only if nothing numeric follows; none of our units start with 'e'.
    ++end;
  }
  if (end == 0) return false;
  std::string number_text(text.substr(0, end));
  char* parse_end = nullptr;
  *number = std::strtod(number_text.c_str(), &parse_end);
  if (parse_end != number_text.c_str() + number_text.size() || !std::isfinite(*number)) return false;
  std::string_view rest = text.substr(end);
  while (!rest.empty() && std::isspace(static_cast<unsigned char>(rest.front()))) rest.remove_prefix(1);
  *unit = Lower(rest);
  return true;
}

std::string Format3(double value, const char* const* units, size_t n_units, double step) {
  size_t i = 0;
  double v = value;
  while (i + 1 < n_units && std::fabs(v) >= step) {
    v /= step;
    ++i;
  }
  char buf[64];
  if (i == 0 && v == std::floor(v)) {
    std::snprintf(buf, sizeof buf, "%.0f %s", v, units[i]);
  } else {
    const int digits = std::fabs(v) >= 100 ? 0 : std::fabs(v) >= 10 ? 1 : 2;
    std::snprintf(buf, sizeof buf, "%.*f %s", digits, v, units[i]);
  }
  return buf;
}

std::string FormatSmall(double value, const char* unit) {
  static constexpr std::array<std::pair<double, const char*>, 4> kScales = {
      {{1.0, ""}, {1e-3, "m"}, {1e-6, "u"}, {1e-9, "n"}}};
  const double a = std::fabs(value);
  for (const auto& [scale, prefix] : kScales) {
    if (a >= scale || scale == 1e-9) {
      const double v = value / scale;
      const int digits = std::fabs(v) >= 100 ? 0 : std::fabs(v) >= 10 ? 1 : 2;
      char buf[64];
      if (value == 0) {
        std::snprintf(buf, sizeof buf, "0 %s", unit);
      } else {
        std::snprintf(buf, sizeof buf, "%.*f %s%s", digits, v, prefix, unit);
      }
      return buf;
    }
  }
  return "?";
}

}  // namespace

Result<int64_t> ParseBytes(std::string_view text) {
  double number = 0;
  std::string unit;
  if (!SplitNumber(text, &number, &unit)) {
    return InvalidArgument("'" + std::string(text) + "' is not a size; write e.g. 3000000, 3MB or 2.5MiB");
  }
  if (unit.empty()) {  // "0.9" meant 0.9 MB or 0.9 GB, never a byte: said, not guessed
    const std::string t(text);
    return InvalidArgument("'" + t + "' has no unit; write it with one: " + t + "MB, " + t + "GB, " + t +
                           "MiB or " + t + "B (B, kB, MB, GB, TB: powers of 1000; KiB, MiB, GiB, TiB: of 1024)");
  }
  static constexpr std::array<std::pair<const char*, double>, 11> kUnits = {{{"b", 1.0},
                                                                             {"kb", 1e3},
                                                                             {"mb", 1e6},
                                                                             {"gb", 1e9},
                                                                             {"kib", 1024.0},
                                                                             {"mib", 1048576.0},
                                                                             {"gib", 1073741824.0},
                                                                             {"tb", 1e12},
                                                                             {"tib", 1099511627776.0},
                                                                             {"k", 1e3},
                                                                             {"m", 1e6}}};
  for (const auto& [name, scale] : kUnits) {
    if (unit == name) {
      const double bytes = number * scale;
      if (bytes < 0 || bytes > 9.2e18) return InvalidArgument("size '" + std::string(text) + "' is out of range");
      return static_cast<int64_t>(std::llround(bytes));
    }
  }
  return InvalidArgument("unknown size unit '" + unit + "' in '" + std::string(text) +
                         "'; use B, KB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024)");
}

Result<RuntimeBudget> ParseRuntimeBudget(std::string_view text) {
  double number = 0;
  std::string unit;
  if (!SplitNumber(text, &number, &unit)) {
    return InvalidArgument("'" + std::string(text) +
                           "' is not a runtime budget; write a multiple of one training step (7.6x) or seconds (1.2s)");
  }
  if (unit.empty()) {
    return InvalidArgument("'" + std::string(text) + "' has no unit; write " + std::string(text) +
                           "x (a multiple of one plain training step) or " + std::string(text) + "s (seconds)");
  }
  if (unit == "x") {
    if (!(number >= 1)) {
      return InvalidArgument("a runtime budget of " + std::string(text) +
                             " is below 1x; it must be at least 1x, since a step computes every node at least once");
    }
    return RuntimeBudget{RuntimeBudget::Kind::kMultiple, number};
  }
  if (!(number > 0)) return InvalidArgument("a runtime budget of " + std::string(text) + " is not positive");
  if (unit == "s") return RuntimeBudget{RuntimeBudget::Kind::kSeconds, number};
  if (unit == "ms") return RuntimeBudget{RuntimeBudget::Kind::kSeconds, number * 1e-3};
  return InvalidArgument("unknown runtime unit '" + unit + "' in '" + std::string(text) + "'; use x, s or ms");
}

std::string FormatBytes(double bytes) {
  static const char* const kUnits[] = {"B", "kB", "MB", "GB", "TB"};
  return Format3(bytes, kUnits, 5, 1000.0);
}

std::string FormatSeconds(double seconds) {
  if (!(std::fabs(seconds) >= 100) || !std::isfinite(seconds)) return FormatSmall(seconds, "s");
  // Long durations as a person reads them: "2 min 19 s", "4 h 03 min", "2 d 5 h".
  const long long total = std::llround(std::fabs(seconds));
  const char* sign = seconds < 0 ? "-" : "";
  char buf[64];
  if (total < 3600) {
    std::snprintf(buf, sizeof buf, "%s%lld min %lld s", sign, total / 60, total % 60);
  } else if (total < 86400) {
    const long long minutes = (total + 30) / 60;
    std::snprintf(buf, sizeof buf, "%s%lld h %02lld min", sign, minutes / 60, minutes % 60);
  } else {
    const long long hours = (total + 1800) / 3600;
    std::snprintf(buf, sizeof buf, "%s%lld d %lld h", sign, hours / 24, hours % 24);
  }
  return buf;
}
std::string FormatJoules(double joules) { return FormatSmall(joules, "J"); }

}  // namespace edgecost
