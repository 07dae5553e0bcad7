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

struct CallContext {
  bool authenticated = false;  // over the Unix socket, or with a valid bearer token
};

// Twirp code and HTTP status for an error.
std::pair<const char*, int> TwirpCode(ErrorCode code);
HttpResponse TwirpError(const char* code, int status, const std::string& message);

class TwirpRouter {
 public:
  template <typename Request, typename Response>
  using Method = std::function<Result<Response>(const Request&, const CallContext&)>;

  // Registers `service`/`method`; `mutates` marks calls restricted to token holders when so configured.
  template <typename Request, typename Response>
  void Add(const std::string& service, const std::string& method, Method<Request, Response> fn, bool mutates = false) {
    routes_["/twirp/edgecost.v1." + service + "/" + method] = Route{
        [] { return std::unique_ptr<google::protobuf::Message>(new Request); },
        [fn](const google::protobuf::Message& request,
             const CallContext& ctx) -> Result<std::unique_ptr<google::protobuf::Message>> {
          Result<Response> response = fn(static_cast<const Request&>(request), ctx);
          if (!response.ok()) return response.status();
          return std::unique_ptr<google::protobuf::Message>(new Response(std::move(response).value()));
        },
        mutates};
  }

  // Decodes, dispatches and encodes one call. `ctx` says who is calling.
  HttpResponse Handle(const HttpRequest& request, const CallContext& ctx) const;
  bool Mutates(const std::string& target) const;
  bool Has(const std::string& target) const { return routes_.count(target) > 0; }

 private:
  struct Route {
    std::function<std::unique_ptr<google::protobuf::Message>()> make_request;
    std::function<Result<std::unique_ptr<google::protobuf::Message>>(const google::protobuf::Message&,
                                                                     const CallContext&)> call;
    bool mutates;
  };
  std::map<std::string, Route> routes_;
};

}  // namespace edgecost::daemon
