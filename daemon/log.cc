#include "daemon/log.h"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

namespace edgecost::daemon {

Status SetUpLogging(const std::string& level) {
  const spdlog::level::level_enum parsed = spdlog::level::from_str(level);
  if (parsed == spdlog::level::off && level != "off") {
    return InvalidArgument("unknown log level '" + level + "': use trace, debug, info, warn, error or off");
  }
  auto logger = spdlog::stderr_logger_mt("edgecost");
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%eZ level=%l %v", spdlog::pattern_time_type::utc);
  logger->set_level(parsed);
  logger->flush_on(spdlog::level::info);  // lines reach the journal as they happen
  spdlog::set_default_logger(std::move(logger));
  return Status::Ok();
}

std::string Quoted(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + '"';
}

}  // namespace edgecost::daemon
