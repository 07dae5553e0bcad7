// The Twirp wire protocol over HttpServer: POST /twirp/<package>.<Service>/<Method>
// with a protobuf body (application/protobuf) or protobuf's canonical JSON
// (application/json); errors are Twirp error objects with their HTTP status.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include <google/protobuf/message.h>

#include "base/status.h"
#include "daemon/http_server.h"

namespace edgecost::daemon {

// Runs `fn`, turning an exception that escapes it into an Internal error, so
// that a bug answers one call with 500 and the daemon goes on serving.
template <typename Fn>
auto Guarded(Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const std::exception& e) {
    return Internal(std::string("unexpected error: ") + e.what());
  } catch (...) {
    return Internal("unexpected error");
  }
}

// True for "application/json", with or without parameters; the other encoding is "application/protobuf".
bool IsJson(const std::string& content_type);

// Twirp code and HTTP status for an error.
std::pair<const char*, int> TwirpCode(ErrorCode code);
HttpResponse TwirpError(const char* code, int status, const std::string& message);

class TwirpRouter {
 public:
  template <typename Response>
  using Done = std::function<void(Result<Response>)>;  // called once, from any thread
  template <typename Request, typename Response>
  using Method = std::function<Result<Response>(const Request&)>;
  template <typename Request, typename Response>
  using AsyncMethod = std::function<void(const Request&, Done<Response>)>;

  // Registers `service`/`method`, answered on the calling worker thread.
  // `mutates` marks calls restricted to token holders when so configured.
  template <typename Request, typename Response>
  void Add(const std::string& service, const std::string& method, Method<Request, Response> fn, bool mutates = false) {
    AddAsync<Request, Response>(
        service, method, [fn = std::move(fn)](const Request& request, Done<Response> done) { done(fn(request)); },
        mutates);
  }

  // Registers a method that answers later through `done`, e.g. from its own pool
  // or when an event arrives, so that it holds no worker thread while it waits.
  template <typename Request, typename Response>
  void AddAsync(const std::string& service, const std::string& method, AsyncMethod<Request, Response> fn,
                bool mutates = false) {
    routes_["/twirp/edgecost.v1." + service + "/" + method] =
        Route{[] { return std::unique_ptr<google::protobuf::Message>(new Request); },
              [fn = std::move(fn)](std::unique_ptr<google::protobuf::Message> request,
                                   Done<std::unique_ptr<google::protobuf::Message>> done) {
                const Request& typed = static_cast<const Request&>(*request);
                fn(typed, [done = std::move(done)](Result<Response> response) {
                  if (!response.ok()) return done(response.status());
                  done(std::unique_ptr<google::protobuf::Message>(new Response(std::move(response).value())));
                });
              },
              mutates};
  }

  // Decodes, dispatches and encodes one call; `reply` gets the answer.
  void Handle(const HttpRequest& request, HttpReply reply) const;
  bool Mutates(const std::string& target) const;
  bool Has(const std::string& target) const { return routes_.count(target) > 0; }

 private:
  struct Route {
    std::function<std::unique_ptr<google::protobuf::Message>()> make_request;
    std::function<void(std::unique_ptr<google::protobuf::Message>, Done<std::unique_ptr<google::protobuf::Message>>)>
        call;
    bool mutates;
  };
  std::map<std::string, Route> routes_;
};

}  // namespace edgecost::daemon
