#include "daemon/client.h"

#include <cstdlib>

#include <boost/asio.hpp>
#include <boost/beast.hpp>
#include <nlohmann/json.hpp>

namespace edgecost::daemon {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

// Twirp error codes back to ours, so exit codes and messages match local runs.
Status FromTwirp(const std::string& body, unsigned http_status) {
  std::string code = "internal", message = "HTTP " + std::to_string(http_status);
  try {
    const nlohmann::json error = nlohmann::json::parse(body);
    code = error.value("code", code);
    message = error.value("msg", message);
  } catch (const std::exception&) {
  }
  if (code == "invalid_argument" || code == "malformed" || code == "bad_route") return InvalidArgument(message);
  if (code == "not_found") return NotFound(message);
  // The token is the advice only where the refusal is about it: a data set outside the agent's
  // [train] data_dirs is refused as permission_denied too, and no token lets it in.
  if (code == "unauthenticated" || (code == "permission_denied" && message.find("token") != std::string::npos)) {
    return PermissionDenied(message + " (set $EDGECOST_TOKEN to the daemon's token)");
  }
  if (code == "permission_denied") return PermissionDenied(message);
  if (code == "failed_precondition") return FailedPrecondition(message);
  if (code == "unavailable") return Unavailable(message);
  if (code == "resource_exhausted") return ResourceExhausted(message);
  return Internal(message);
}

template <typename Stream>
Status Exchange(Stream& stream, const std::string& host, const std::string& method,
                const google::protobuf::Message& request, google::protobuf::Message& response) {
  http::request<http::string_body> call(http::verb::post, "/twirp/edgecost.v1." + method, 11);
  call.set(http::field::host, host);
  call.set(http::field::content_type, "application/protobuf");
  if (const char* token = std::getenv("EDGECOST_TOKEN"); token && *token) {
    call.set(http::field::authorization, std::string("Bearer ") + token);
  }
  call.body() = request.SerializeAsString();
  call.prepare_payload();
  beast::error_code written;
  http::write(stream, call, written);
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(256 << 20);  // cost tables of large graphs
  // A body over the daemon's limit is answered (413, saying which limit) before it is all sent,
  // and the connection closed: the answer says more than the broken pipe.
  beast::error_code read;
  http::read(stream, buffer, parser, read);
  if (read) throw beast::system_error(written ? written : read);
  const auto& reply = parser.get();
  if (reply.result() != http::status::ok) return FromTwirp(reply.body(), reply.result_int());
  if (!response.ParseFromString(reply.body())) return Internal("the daemon's reply to " + method + " does not parse");
  return Status::Ok();
}

template <typename Stream>
Status Get(Stream& stream, const std::string& host, const std::string& target, std::string& body) {
  http::request<http::empty_body> call(http::verb::get, target, 11);
  call.set(http::field::host, host);
  if (const char* token = std::getenv("EDGECOST_TOKEN"); token && *token) {
    call.set(http::field::authorization, std::string("Bearer ") + token);
  }
  http::write(stream, call);
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(4ull << 30);  // a trained model is as large as the model
  http::read(stream, buffer, parser);
  const auto& reply = parser.get();
  const std::string said = reply.body().substr(0, reply.body().find('\n'));
  if (reply.result() == http::status::not_found) return NotFound(target + ": " + said);
  if (reply.result() == http::status::unauthorized || reply.result() == http::status::forbidden) {
    return PermissionDenied(target + ": refused (set $EDGECOST_TOKEN to the daemon's token)");
  }
  if (reply.result() != http::status::ok) return Internal(target + ": HTTP " + std::to_string(reply.result_int()));
  body = reply.body();
  return Status::Ok();
}

// Connects to unix:PATH or http://HOST:PORT and runs `exchange(stream, host)`.
template <typename Talk>
Status WithConnection(const std::string& remote, const Talk& exchange) {
  try {
    asio::io_context io;
    if (remote.rfind("unix:", 0) == 0) {
      asio::local::stream_protocol::socket socket(io);
      socket.connect(asio::local::stream_protocol::endpoint(remote.substr(5)));
      return exchange(socket, std::string("localhost"));
    }
    if (remote.rfind("http://", 0) == 0) {
      std::string address = remote.substr(7);
      address = address.substr(0, address.find('/'));
      const size_t colon = address.rfind(':');
      if (colon == std::string::npos) return InvalidArgument("--remote " + remote + ": give http://HOST:PORT");
      asio::ip::tcp::resolver resolver(io);
      beast::tcp_stream stream(io);
      stream.connect(resolver.resolve(address.substr(0, colon), address.substr(colon + 1)));
      return exchange(stream, address);
    }
    return InvalidArgument("--remote " + remote + ": use unix:PATH or http://HOST:PORT");
  } catch (const std::exception& e) {
    return Unavailable("cannot reach the daemon at " + remote + ": " + e.what());
  }
}

}  // namespace

Status FetchRemote(const std::string& remote, const std::string& target, std::string& body) {
  return WithConnection(remote, [&](auto& stream, const std::string& host) { return Get(stream, host, target, body); });
}

Status CallRemote(const std::string& remote, const std::string& method, const google::protobuf::Message& request,
                  google::protobuf::Message& response) {
  return WithConnection(
      remote, [&](auto& stream, const std::string& host) { return Exchange(stream, host, method, request, response); });
}

}  // namespace edgecost::daemon
