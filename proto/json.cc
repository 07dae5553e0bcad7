#include "proto/json.h"

#include <cctype>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

namespace edgecost::proto {

namespace {

// JSON field names that a renamed field had, read as the new one: one table for every message.
// The proto keeps the field number, so binary records are unaffected; only JSON needs this.
struct DeprecatedJsonName {
  const char* message;   // full name
  const char* old_name;  // lowerCamel, as JSON printed it
  const char* new_name;
};
constexpr DeprecatedJsonName kDeprecatedJsonNames[] = {
    // "RAM budget" meant the activations' budget over RPC and the process's on the CLI.
    {"edgecost.v1.ScheduleRequest", "ramBudgetBytes", "activationBudgetBytes"},
    {"edgecost.v1.ScheduleRequest", "deviceRamBytes", "processRamBudgetBytes"},
    {"edgecost.v1.ScheduleRequest", "threads", "solverThreads"},  // "threads" is the cost table's elsewhere
    {"edgecost.v1.StartTrainRequest", "ramBudgetBytes", "activationBudgetBytes"},
    {"edgecost.v1.StartTrainRequest", "deviceRamBytes", "processRamBudgetBytes"},
    // Outputs read back: schedule files, check results and run records written before the rename.
    {"edgecost.v1.Schedule", "ramBudgetBytes", "activationBudgetBytes"},
    {"edgecost.v1.CheckResult", "ramBudgetBytes", "activationBudgetBytes"},
    {"edgecost.v1.TrainRun", "ramBudgetBytes", "activationBudgetBytes"},
};

std::string LowerCamel(const std::string& name) {
  std::string camel;
  bool upper = false;
  for (const char c : name) {
    if (c == '_') {
      upper = true;
      continue;
    }
    camel += upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
    upper = false;
  }
  return camel;
}

Status RenameDeprecated(const google::protobuf::Descriptor* descriptor, google::protobuf::Struct* object,
                        bool* renamed);

Status RenameInValue(const google::protobuf::FieldDescriptor* field, google::protobuf::Value* value,
                     bool* renamed) {
  if (field->type() != google::protobuf::FieldDescriptor::TYPE_MESSAGE || field->is_map()) return Status::Ok();
  const google::protobuf::Descriptor* type = field->message_type();
  if (type->file()->package() == "google.protobuf") return Status::Ok();  // Struct, Timestamp: no aliases
  if (value->has_struct_value()) return RenameDeprecated(type, value->mutable_struct_value(), renamed);
  if (value->has_list_value()) {
    for (auto& item : *value->mutable_list_value()->mutable_values()) {
      if (item.has_struct_value()) EC_RETURN_IF_ERROR(RenameDeprecated(type, item.mutable_struct_value(), renamed));
    }
  }
  return Status::Ok();
}

Status RenameDeprecated(const google::protobuf::Descriptor* descriptor, google::protobuf::Struct* object,
                        bool* renamed) {
  auto& fields = *object->mutable_fields();
  for (const DeprecatedJsonName& alias : kDeprecatedJsonNames) {
    if (descriptor->full_name() != alias.message) continue;
    for (auto it = fields.begin(); it != fields.end(); ++it) {
      if (LowerCamel(it->first) != alias.old_name) continue;
      for (const auto& [key, unused] : fields) {
        if (LowerCamel(key) == alias.new_name) {
          return InvalidArgument(std::string("give ") + alias.new_name + " or its deprecated name " + alias.old_name +
                                 ", not both");
        }
      }
      google::protobuf::Value value = it->second;
      fields.erase(it);
      fields[alias.new_name] = value;
      *renamed = true;
      break;
    }
  }
  for (auto& [key, value] : fields) {
    for (int i = 0; i < descriptor->field_count(); ++i) {
      const google::protobuf::FieldDescriptor* field = descriptor->field(i);
      if (field->json_name() == key || field->name() == key) EC_RETURN_IF_ERROR(RenameInValue(field, &value, renamed));
    }
  }
  return Status::Ok();
}

// The JSON with deprecated field names replaced, or unchanged (also when it is no JSON object:
// the parser below then says what is wrong with it).
// Whether `json` may hold a deprecated name (as lowerCamel or as the proto's snake_case spelled it).
bool MayHoldDeprecatedName(const std::string& json) {
  for (const DeprecatedJsonName& alias : kDeprecatedJsonNames) {
    std::string snake;
    for (const char* c = alias.old_name; *c; ++c) {
      if (std::isupper(static_cast<unsigned char>(*c))) snake += '_';
      snake += static_cast<char>(std::tolower(static_cast<unsigned char>(*c)));
    }
    for (const std::string& name : {std::string(alias.old_name), snake}) {
      if (json.find('"' + name + '"') != std::string::npos) return true;
    }
  }
  return false;
}

Result<std::string> WithCurrentNames(const std::string& json, const google::protobuf::Descriptor* descriptor) {
  // Most JSON holds no deprecated name: it is parsed once, by the caller, not here as well.
  if (!MayHoldDeprecatedName(json)) return json;
  google::protobuf::Struct object;
  if (!google::protobuf::util::JsonStringToMessage(json, &object).ok()) return json;
  bool renamed = false;
  EC_RETURN_IF_ERROR(RenameDeprecated(descriptor, &object, &renamed));
  if (!renamed) return json;
  std::string current;
  if (!google::protobuf::util::MessageToJsonString(object, &current).ok()) return json;
  return current;
}

}  // namespace

Result<std::string> ToJson(const google::protobuf::Message& message, JsonStyle style) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = style.indent;
  options.always_print_primitive_fields = true;
  std::string json;
  const auto status = google::protobuf::util::MessageToJsonString(message, &json, options);
  if (!status.ok()) return Internal("cannot encode " + message.GetTypeName() + " as JSON: " + status.ToString());
  return json;
}

Status FromJson(const std::string& json, google::protobuf::Message* message) {
  EC_ASSIGN_OR_RETURN(const std::string current, WithCurrentNames(json, message->GetDescriptor()));
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  const auto status = google::protobuf::util::JsonStringToMessage(current, message, options);
  if (status.ok()) return Status::Ok();
  std::string text = std::string(status.message());
  if (text.find("Cannot find field") != std::string::npos) {
    const google::protobuf::Descriptor* descriptor = message->GetDescriptor();
    text += " (" + descriptor->name() + " has:";
    for (int i = 0; i < descriptor->field_count(); ++i) text += (i ? ", " : " ") + descriptor->field(i)->json_name();
    if (descriptor->field_count() == 0) text += " no fields";
    text += ")";
  }
  return InvalidArgument(text);
}

}  // namespace edgecost::proto
