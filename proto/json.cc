#include "proto/json.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/util/json_util.h>

namespace edgecost::proto {

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
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  const auto status = google::protobuf::util::JsonStringToMessage(json, message, options);
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
