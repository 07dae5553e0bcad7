#include "costdb/internal.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <vector>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

namespace edgecost::costdb::internal {

std::string UpsertSql(std::string_view table, std::initializer_list<std::string_view> key,
                      std::initializer_list<std::string_view> columns) {
  const auto join = [](const std::vector<std::string>& parts) {
    std::string out;
    for (const std::string& part : parts) out += (out.empty() ? "" : ", ") + part;
    return out;
  };
  std::vector<std::string> names, values, updates;
  for (std::string_view column : columns) {
    names.emplace_back(column);
    values.emplace_back("?");
    if (std::find(key.begin(), key.end(), column) == key.end()) {
      updates.push_back(std::string(column) + " = excluded." + std::string(column));
    }
  }
  return "INSERT INTO " + std::string(table) + " (" + join(names) + ") VALUES (" + join(values) + ") ON CONFLICT (" +
         join({key.begin(), key.end()}) + ") DO UPDATE SET " + join(updates);
}

std::string NowUtc() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char text[32];
  const size_t n = std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &utc);
  std::snprintf(text + n, sizeof text - n, ".%03dZ", static_cast<int>(ms));
  return text;
}

std::string Serialize(const google::protobuf::MessageLite& message) {
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);  // equal messages must give equal blobs
    message.SerializeToCodedStream(&coded);
  }
  return bytes;
}
std::string EnergySourceText(v1::EnergySource source) {
  std::string name = v1::EnergySource_Name(source);  // ENERGY_SOURCE_COUNTER -> counter
  name.erase(0, std::string_view("ENERGY_SOURCE_").size());
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  return name;
}

static constexpr std::pair<RunStatus, const char*> kRunStatusText[] = {
    {RunStatus::kRunning, "running"},
    {RunStatus::kComplete, "complete"},
    {RunStatus::kFailed, "failed"},
    {RunStatus::kCancelled, "cancelled"},
};

RunStatus RunStatusFromText(const std::string& text) {
  for (const auto& [value, name] : kRunStatusText) {
    if (text == name) return value;
  }
  return RunStatus::kRunning;
}

Result<std::string> DeviceKindText(const v1::Device& device) {
  switch (device.kind()) {
    case v1::Device::KIND_PRESET:
      return std::string("preset");
    case v1::Device::KIND_MEASURED:
      return std::string("measured");
    default:
      return InvalidArgument("device '" + device.name() + "' has no kind: set it to preset or measured");
  }
}

}  // namespace edgecost::costdb::internal

namespace edgecost::costdb {

const char* RunStatusText(RunStatus status) {
  for (const auto& [value, text] : internal::kRunStatusText) {
    if (value == status) return text;
  }
  return "running";
}

}  // namespace edgecost::costdb
