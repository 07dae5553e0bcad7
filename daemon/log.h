// The daemon's structured logs: one line per event through spdlog, as
// `time level=info event=... key=value`, so that journald and log
// collectors can filter on keys.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"

namespace edgecost::daemon {

// Sets spdlog's default logger: stderr, UTC timestamps, the given level (trace, debug, info, warn, error).
Status SetUpLogging(const std::string& level);

// A logfmt value: quoted, with quotes, backslashes and newlines escaped.
std::string Quoted(std::string_view text);

}  // namespace edgecost::daemon
