#include "probes/registry.h"

#include <cstdlib>

#include <toml++/toml.h>

namespace edgecost::probes {
namespace {

template <typename T>
Status Get(const toml::table& table, const std::string& key, T& value, const std::string& where) {
  const toml::node* node = table.get(key);
  if (!node) return Status::Ok();
  if constexpr (std::is_same_v<T, std::string>) {
    if (!node->is_string()) return InvalidArgument(where + "." + key + " must be a string");
    value = node->value<std::string>().value();
  } else if constexpr (std::is_same_v<T, int>) {
    if (!node->is_integer()) return InvalidArgument(where + "." + key + " must be an integer");
    value = static_cast<int>(node->value<int64_t>().value());
  } else {
    if (!node->is_number()) return InvalidArgument(where + "." + key + " must be a number");
    value = node->value<double>().value();
  }
  return Status::Ok();
}

}  // namespace

Result<ProbesConfig> LoadProbesConfig(const std::string& path) {
  ProbesConfig config;
  if (!path.empty()) {
    toml::table file;
    try {
      file = toml::parse_file(path);
    } catch (const toml::parse_error& e) {
      return InvalidArgument(path + ": " + std::string(e.description()));
    }
    if (const toml::table* probes = file["probes"].as_table()) {
      EC_RETURN_IF_ERROR(Get(*probes, "sysfs_root", config.sys_root, "probes"));
      if (const toml::table* nested = (*probes)["nested_rails"].as_table()) {
        for (const auto& [child, parent] : *nested) {
          if (!parent.is_string()) return InvalidArgument("probes.nested_rails values name the parent rail");
          config.nested_rails[std::string(child.str())] = parent.value<std::string>().value();
        }
      }
      if (const toml::table* estimate = (*probes)["estimate"].as_table()) {
        EC_RETURN_IF_ERROR(Get(*estimate, "idle_w", config.estimate.idle_w, "probes.estimate"));
        EC_RETURN_IF_ERROR(Get(*estimate, "active_w_per_core", config.estimate.active_w_per_core, "probes.estimate"));
      }
      if (const toml::array* meters = (*probes)["meter"].as_array()) {
        for (const toml::node& node : *meters) {
          const toml::table* m = node.as_table();
          if (!m) return InvalidArgument("each [[probes.meter]] must be a table");
          MeterConfig meter;
          const std::string where = "probes.meter";
          EC_RETURN_IF_ERROR(Get(*m, "name", meter.name, where));
          EC_RETURN_IF_ERROR(Get(*m, "host", meter.host, where));
          EC_RETURN_IF_ERROR(Get(*m, "port", meter.port, where));
          EC_RETURN_IF_ERROR(Get(*m, "power_query", meter.power_query, where));
          EC_RETURN_IF_ERROR(Get(*m, "current_query", meter.current_query, where));
          EC_RETURN_IF_ERROR(Get(*m, "voltage_query", meter.voltage_query, where));
          EC_RETURN_IF_ERROR(Get(*m, "timeout_s", meter.timeout_s, where));
          EC_RETURN_IF_ERROR(Get(*m, "update_interval_s", meter.update_interval_s, where));
          if (m->contains("current_query") && !m->contains("power_query")) meter.power_query.clear();
          if (meter.port <= 0 || meter.port > 65535) return InvalidArgument(where + ".port must be 1..65535");
          if (meter.timeout_s <= 0) return InvalidArgument(where + ".timeout_s must be positive");
          config.meters.push_back(meter);
        }
      }
    }
  }
  if (const char* root = std::getenv("EDGECOST_SYSFS_ROOT"); root && *root) config.sys_root = root;
  return config;
}

Detected DetectAll(const ProbesConfig& config) {
  Detected detected;
  DetectRapl(config.sys_root, detected);
  DetectHwmon(config.sys_root, config.nested_rails, detected);
  for (const MeterConfig& meter : config.meters) {
    Result<std::unique_ptr<Probe>> probe = ConnectMeter(meter);
    if (probe.ok()) {
      detected.infos.push_back((*probe)->info());
      detected.probes.push_back(std::move(*probe));
    } else {
      ProbeInfo info{.source = "meter", .name = meter.name + " " + meter.host + ":" + std::to_string(meter.port)};
      info.reason = probe.status().message();
      info.fix = "check the meter's address, that it speaks SCPI over TCP, and its queries in [[probes.meter]]";
      detected.infos.push_back(info);
    }
  }
  if (config.meters.empty()) {
    ProbeInfo info{.source = "meter", .name = "external SCPI meter"};
    info.reason = "none configured";
    info.fix = "add a [[probes.meter]] with host, port (5025) and power_query to the config file";
    detected.infos.push_back(info);
  }
  DetectBatteries(config.sys_root, detected);
  ProbeInfo estimate{.source = "estimate",
                     .name = "device power model",
                     .available = true,
                     .kind = ReadingKind::kPower,
                     .domains = {"device"},
                     .resolution = 0,
                     .update_interval_s = 1e-6,
                     .measured = false};
  estimate.reason = "ESTIMATED from runtime and CPU time: idle " + std::to_string(config.estimate.idle_w).substr(0, 4) +
                    " W + " + std::to_string(config.estimate.active_w_per_core).substr(0, 4) +
                    " W per busy core; used only when nothing above measures energy";
  estimate.fix = "set [probes.estimate] idle_w and active_w_per_core for this board";
  detected.infos.push_back(estimate);
  return detected;
}

}  // namespace edgecost::probes
