#include "daemon/twirp.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <memory>
#include <string_view>

#include "proto/json.h"

namespace edgecost::daemon {
namespace {

// The media type alone, before any parameters: "application/json; charset=utf-8" is JSON, "application/jsonx" is not.
bool IsMediaType(const std::string& content_type, std::string_view type) {
  if (content_type.size() < type.size() ||
      !std::equal(type.begin(), type.end(), content_type.begin(),
                  [](char a, char b) { return a == std::tolower(static_cast<unsigned char>(b)); })) {
    return false;
  }
  const std::string_view rest = std::string_view(content_type).substr(type.size());
  const size_t end = rest.find_first_not_of(" \t");
  return end == std::string_view::npos || rest[end] == ';';
}
bool IsProtobuf(const std::string& content_type) { return IsMediaType(content_type, "application/protobuf"); }

}  // namespace

bool IsJson(const std::string& content_type) { return IsMediaType(content_type, "application/json"); }

std::pair<const char*, int> TwirpCode(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk:
      return {"ok", 200};
    case ErrorCode::kInvalidArgument:
      return {"invalid_argument", 400};
    case ErrorCode::kNotFound:
      return {"not_found", 404};
    case ErrorCode::kAlreadyExists:
      return {"already_exists", 409};
    case ErrorCode::kFailedPrecondition:
      return {"failed_precondition", 412};
    case ErrorCode::kPermissionDenied:
      return {"permission_denied", 403};
    case ErrorCode::kUnavailable:
      return {"unavailable", 503};
    case ErrorCode::kResourceExhausted:
      return {"resource_exhausted", 429};
    case ErrorCode::kDeadlineExceeded:
      return {"deadline_exceeded", 408};
    case ErrorCode::kCancelled:
      return {"canceled", 408};
    case ErrorCode::kUnimplemented:
      return {"unimplemented", 501};
    case ErrorCode::kInternal:
      return {"internal", 500};
    case ErrorCode::kDataLoss:
      return {"data_loss", 500};
  }
  return {"unknown", 500};
}

HttpResponse TwirpError(const char* code, int status, const std::string& message) {
  return JsonError(status, code, message);
}

bool TwirpRouter::Mutates(const std::string& target) const {
  auto it = routes_.find(target);
  return it != routes_.end() && it->second.mutates;
}

void TwirpRouter::Handle(const HttpRequest& request, HttpReply reply) const {
  auto it = routes_.find(request.target);
  if (request.method != "POST" || it == routes_.end()) {
    return reply(TwirpError("bad_route", 404, "no route " + request.method + " " + request.target));
  }
  const bool json = IsJson(request.content_type);
  if (!json && !IsProtobuf(request.content_type)) {
    return reply(TwirpError(
        "bad_route", 404,
        "unexpected Content-Type '" + request.content_type + "'; use application/json or application/protobuf"));
  }
  std::unique_ptr<google::protobuf::Message> input = it->second.make_request();
  if (json) {
    const Status decoded = proto::FromJson(request.body.empty() ? "{}" : request.body, input.get());
    if (!decoded.ok())
      return reply(TwirpError("malformed", 400, "the JSON body does not decode: " + decoded.message()));
  } else if (!input->ParseFromString(request.body)) {
    return reply(TwirpError("malformed", 400, "the protobuf body does not decode"));
  }
  // Answered once: a handler that throws after answering is not answered twice.
  auto answered = std::make_shared<std::atomic<bool>>(false);
  auto done = [json, answered, reply](Result<std::unique_ptr<google::protobuf::Message>> output) {
    if (answered->exchange(true)) return;
    if (!output.ok()) {
      const auto [code, status] = TwirpCode(output.status().code());
      return reply(TwirpError(code, status, output.status().message()));
    }
    HttpResponse response;
    if (json) {
      auto encoded = proto::ToJson(**output);
      if (!encoded.ok()) return reply(TwirpError("internal", 500, encoded.status().message()));
      response.body = std::move(encoded).value();
      response.content_type = "application/json";
    } else {
      (*output)->SerializeToString(&response.body);
      response.content_type = "application/protobuf";
    }
    reply(std::move(response));
  };
  // The service boundary: no exception from a handler goes further.
  const Status thrown = Guarded([&]() -> Status {
    it->second.call(std::move(input), done);
    return Status::Ok();
  });
  if (!thrown.ok()) done(thrown);
}

}  // namespace edgecost::daemon
