#include "daemon/config.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <toml++/toml.h>

#include "probes/registry.h"

namespace edgecost::daemon {
namespace {

std::string TrimRight(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ' || text.back() == '\t')) {
    text.pop_back();
  }
  return text;
}

// Typed reads of one key's value; each error names the key.
class Value {
 public:
  Value(const std::string& path, std::string name, const toml::node& node)
      : path_(path), name_(std::move(name)), node_(node) {}

  Result<std::string> Text() const {
    if (auto s = node_.value<std::string>()) return *s;
    return Error("must be a string");
  }
  Result<std::vector<std::string>> TextList() const {
    const toml::array* items = node_.as_array();
    if (!items) return Error("must be a list of strings");
    std::vector<std::string> texts;
    for (const toml::node& item : *items) {
      const std::optional<std::string> text = item.value<std::string>();
      if (!text || text->empty()) return Error("must be a list of non-empty strings");
      texts.push_back(*text);
    }
    return texts;
  }
  Result<bool> Bool() const {
    if (auto b = node_.value<bool>()) return *b;
    return Error("must be true or false");
  }
  Result<double> Number(double min) const {
    const std::optional<double> d = node_.value<double>();
    if (!d || !std::isfinite(*d) || *d < min) return Error("must be a number of at least " + Short(min));
    return *d;
  }
  Result<int64_t> Integer(int64_t min, int64_t max) const {
    const std::optional<double> d = node_.value<double>();
    if (!d || *d != std::floor(*d) || *d < static_cast<double>(min) || *d > static_cast<double>(max)) {
      return Error("must be a whole number from " + std::to_string(min) + " to " + std::to_string(max));
    }
    return static_cast<int64_t>(*d);
  }
  Status Error(const std::string& what) const { return InvalidArgument(path_ + ": " + name_ + " " + what); }

 private:
  static std::string Short(double v) {
    std::ostringstream out;
    out << v;
    return out.str();
  }
  const std::string& path_;
  std::string name_;
  const toml::node& node_;
};

constexpr int64_t kMaxBytesLimit = int64_t{1} << 30;  // body and header limits: 1 GiB is already far too much
constexpr int64_t kMaxCount = 1 << 20;                // connections, threads, solves

Status SetKey(const std::string& name, const Value& value, DaemonConfig& config) {
  if (name == "database.path") {
    EC_ASSIGN_OR_RETURN(config.db_path, value.Text());
  } else if (name == "server.socket") {
    EC_ASSIGN_OR_RETURN(config.socket_path, value.Text());
  } else if (name == "server.socket_mode") {
    EC_ASSIGN_OR_RETURN(std::string mode, value.Text());
    Result<unsigned> parsed = ParseSocketMode(mode);
    if (!parsed.ok()) return value.Error(parsed.status().message());
    config.socket_mode = *parsed;
  } else if (name == "server.socket_group") {
    EC_ASSIGN_OR_RETURN(config.socket_group, value.Text());
  } else if (name == "server.tcp_host") {
    EC_ASSIGN_OR_RETURN(config.tcp_host, value.Text());
  } else if (name == "server.tcp_port") {
    EC_ASSIGN_OR_RETURN(int64_t port, value.Integer(-1, 65535));
    config.tcp_port = static_cast<int>(port);
  } else if (name == "server.token_file") {
    EC_ASSIGN_OR_RETURN(config.token_file, value.Text());
  } else if (name == "server.restrict_mutations") {
    EC_ASSIGN_OR_RETURN(config.restrict_mutations, value.Bool());
  } else if (name == "server.fingerprint_check_s") {
    EC_ASSIGN_OR_RETURN(config.fingerprint_check_s, value.Number(0));
  } else if (name == "server.reprofile_on_change") {
    EC_ASSIGN_OR_RETURN(config.reprofile_on_change, value.Bool());
  } else if (name == "limits.max_body_bytes") {
    EC_ASSIGN_OR_RETURN(int64_t v, value.Integer(1, kMaxBytesLimit));
    config.limits.max_body_bytes = static_cast<size_t>(v);
  } else if (name == "limits.max_header_bytes") {
    EC_ASSIGN_OR_RETURN(int64_t v, value.Integer(1, kMaxBytesLimit));
    config.limits.max_header_bytes = static_cast<size_t>(v);
  } else if (name == "limits.read_timeout_s") {
    EC_ASSIGN_OR_RETURN(config.limits.read_timeout_s, value.Number(0.001));
  } else if (name == "limits.write_timeout_s") {
    EC_ASSIGN_OR_RETURN(config.limits.write_timeout_s, value.Number(0.001));
  } else if (name == "limits.max_connections") {
    EC_ASSIGN_OR_RETURN(int64_t v, value.Integer(1, kMaxCount));
    config.limits.max_connections = static_cast<int>(v);
  } else if (name == "limits.unauthenticated_read_timeout_s") {
    EC_ASSIGN_OR_RETURN(config.limits.unauthenticated_read_timeout_s, value.Number(0.001));
  } else if (name == "limits.max_unauthenticated_connections") {
    EC_ASSIGN_OR_RETURN(int64_t v, value.Integer(1, kMaxCount));
    config.limits.max_unauthenticated_connections = static_cast<int>(v);
  } else if (name == "limits.max_unauthenticated_per_address") {
    EC_ASSIGN_OR_RETURN(int64_t v, value.Integer(1, kMaxCount));
    config.limits.max_unauthenticated_per_address = static_cast<int>(v);
  } else if (name == "limits.concurrent_solves") {
    EC_ASSIGN_OR_RETURN(int64_t v, value.Integer(1, kMaxCount));
    config.concurrent_solves = static_cast<int>(v);
  } else if (name == "limits.finished_jobs_in_memory") {
    EC_ASSIGN_OR_RETURN(int64_t v, value.Integer(0, kMaxCount));
    config.finished_jobs_in_memory = static_cast<size_t>(v);
  } else if (name == "train.data_dirs") {
    EC_ASSIGN_OR_RETURN(config.train_data_dirs, value.TextList());
  } else if (name == "store.central") {
    EC_ASSIGN_OR_RETURN(config.central_store, value.Text());
  } else if (name == "store.push_interval_s") {
    EC_ASSIGN_OR_RETURN(config.push_interval_s, value.Number(0.01));
  } else if (name == "store.retry_max_s") {
    EC_ASSIGN_OR_RETURN(config.retry_max_s, value.Number(0.01));
  } else if (name == "limits.worker_threads") {
    EC_ASSIGN_OR_RETURN(int64_t v, value.Integer(1, kMaxCount));
    config.limits.worker_threads = static_cast<int>(v);
  } else {
    return value.Error("is not a key edgecost knows");
  }
  return Status::Ok();
}

}  // namespace

int DefaultConcurrentSolves() { return std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / 2); }

std::string DefaultSocketPath() {
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  return runtime && *runtime ? std::string(runtime) + "/edgecost.sock" : "/run/edgecost/edgecost.sock";
}

Result<unsigned> ParseSocketMode(const std::string& text) {
  char* end = nullptr;
  const unsigned long mode = std::strtoul(text.c_str(), &end, 8);
  if (text.empty() || *end != '\0' || text.find_first_not_of("01234567") != std::string::npos || mode > 0777) {
    return InvalidArgument("'" + text + "' is not an octal file mode such as \"0660\"");
  }
  return static_cast<unsigned>(mode);
}

Status ParseTcpAddress(const std::string& text, DaemonConfig& config) {
  const size_t colon = text.rfind(':');
  const std::string port = colon == std::string::npos ? text : text.substr(colon + 1);
  char* end = nullptr;
  const long value = std::strtol(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || port.find_first_not_of("0123456789") != std::string::npos || value > 65535) {
    return InvalidArgument("--tcp '" + text + "': the port must be a number from 0 (any free port) to 65535");
  }
  if (colon != std::string::npos) config.tcp_host = text.substr(0, colon);
  config.tcp_port = static_cast<int>(value);
  return Status::Ok();
}

Status LoadConfigFile(const std::string& path, DaemonConfig& config) {
  toml::table table;
  try {
    table = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    std::ostringstream where;
    where << e.source().begin;
    return InvalidArgument(path + ":" + where.str() + ": " + std::string(e.description()));
  }
  for (const auto& [section, node] : table) {
    if (section == "probes") {  // read by probes::LoadProbesConfig
      config.probes_config = path;
      continue;
    }
    if (section != "server" && section != "limits" && section != "database" && section != "train" &&
        section != "store") {
      return InvalidArgument(path + ": unknown section [" + std::string(section.str()) + "]");
    }
    const toml::table* entries = node.as_table();
    if (!entries) return InvalidArgument(path + ": '" + std::string(section.str()) + "' must be a section");
    for (const auto& [key, value] : *entries) {
      const std::string name = std::string(section.str()) + "." + std::string(key.str());
      EC_RETURN_IF_ERROR(SetKey(name, Value(path, name, value), config));
    }
  }
  return Status::Ok();
}

Result<std::string> ReadToken(const std::string& path) {
  std::ifstream in(path);
  if (!in) return PermissionDenied("cannot read the token file " + path);
  std::string token;
  std::getline(in, token);
  return TrimRight(token);
}

Status ValidateConfig(const DaemonConfig& config) {
  if (config.socket_path.empty() && config.tcp_port < 0) {
    return InvalidArgument("nothing to listen on: give a Unix socket, a TCP port, or both");
  }
  if (config.tcp_port >= 0 || config.restrict_mutations) {
    if (config.token_file.empty()) {
      return InvalidArgument("TCP and restricted calls need a bearer token: set server.token_file (or --token-file)");
    }
    EC_ASSIGN_OR_RETURN(std::string token, ReadToken(config.token_file));
    if (token.size() < 16)
      return InvalidArgument("the token in " + config.token_file + " is shorter than 16 characters");
  }
  if (!config.probes_config.empty()) EC_RETURN_IF_ERROR(probes::LoadProbesConfig(config.probes_config).status());
  if (config.limits.max_connections < 1 || config.limits.worker_threads < 1 || config.concurrent_solves < 1 ||
      config.limits.max_unauthenticated_connections < 1 || config.limits.max_unauthenticated_per_address < 1) {
    return InvalidArgument(
        "limits.max_connections, limits.worker_threads, limits.concurrent_solves, "
        "limits.max_unauthenticated_connections and limits.max_unauthenticated_per_address must be at least 1");
  }
  for (const std::string& dir : config.train_data_dirs) {
    std::error_code error;
    if (!std::filesystem::is_directory(dir, error)) {
      return InvalidArgument("train.data_dirs: '" + dir + "' is not a directory");
    }
  }
  return Status::Ok();
}

}  // namespace edgecost::daemon
