// HTTP/1.1 transport (Boost.Beast on Boost.Asio) over a Unix socket and/or TCP,
// kept apart from request handling: the server is given a handler, so tests can
// inject one. Handlers start on a bounded worker pool, off the I/O threads, and
// every connection has limits on header size, body size, read and write time.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace edgecost::daemon {

struct HttpRequest {
  std::string method;
  std::string target;
  std::string content_type;
  std::string authorization;  // the Authorization header, if any
  std::string cookie;         // the Cookie header, if any (the web view's session)
  std::string body;
  bool over_tcp = false;  // false: the Unix socket, protected by file permissions
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  bool close_connection = false;                             // close after this response, whatever the client asked
  std::vector<std::pair<std::string, std::string>> headers;  // more fields: Set-Cookie, Location, ...
};

// An error as a Twirp error object, {"code":"...","msg":"..."}, with the message escaped.
inline HttpResponse JsonError(int status, std::string_view code, std::string_view message) {
  std::string body = "{\"code\":\"" + std::string(code) + "\",\"msg\":\"";
  for (char c : message) {
    if (c == '"' || c == '\\') body += '\\';
    body += static_cast<unsigned char>(c) < 0x20 ? ' ' : c;
  }
  return {status, "application/json", body + "\"}"};
}

// Whether a request carries a valid credential (token, session cookie). Only
// method, target, authorization, cookie and over_tcp are filled: it is asked
// once the headers are read, before the body, on an I/O thread, so it must be quick.
using HttpAuthenticator = std::function<bool(const HttpRequest&)>;

// Answers one request: called once, from any thread.
using HttpReply = std::function<void(HttpResponse)>;
// Runs on a worker thread, off the I/O threads, and answers through `reply`,
// at once or later (a long poll, a solve on its own pool) without holding the worker.
using HttpHandler = std::function<void(HttpRequest, HttpReply)>;

struct ServerLimits {
  size_t max_header_bytes = 16 * 1024;
  size_t max_body_bytes = 4 * 1024 * 1024;
  double read_timeout_s = 10;  // a slow client is dropped after this
  double write_timeout_s = 10;
  int max_connections = 512;  // per listener: beyond this, its new connections are closed at once
  // A TCP connection is unauthenticated until one of its requests carries a
  // valid credential (the server's HttpAuthenticator). Idle clients without the
  // token must not starve those with it: an unauthenticated connection has this
  // long for each whole request (or read_timeout_s if shorter), and each listener keeps at most so many of
  // them, and so many per client address; beyond either, the oldest such
  // connection (of that address) is closed to admit the new one, and so is one
  // when the listener is full. Authenticated connections are never closed for them.
  double unauthenticated_read_timeout_s = 3;
  int max_unauthenticated_connections = 64;
  int max_unauthenticated_per_address = 16;
  int io_threads = 1;
  int worker_threads = 2;  // handlers run here
};

class HttpServer {
 public:
  // Without an authenticator, every request counts as authenticated.
  HttpServer(HttpHandler handler, ServerLimits limits, HttpAuthenticator authenticate = nullptr);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Listens on a Unix socket with the given mode (and group, if not empty); replaces a stale socket file.
  // On destruction the socket file is removed only if it is still the one made here.
  Status ListenUnix(const std::string& path, unsigned mode, const std::string& group);
  // Whether the Unix socket file is still there; if it has vanished (its folder
  // removed, say), binds it again. Fails, changing nothing, if another daemon
  // now listens on the path or it cannot be bound. Call while Run() serves.
  enum class SocketCheck { kPresent, kRecreated };
  Result<SocketCheck> CheckUnixSocket();
  // Listens on TCP; port 0 picks a free one. Returns the bound port.
  Result<int> ListenTcp(const std::string& host, int port);

  // Serves until Stop(); returns after in-flight requests are answered.
  void Run();
  void Stop();

  int active_connections() const;           // on every listener
  int unauthenticated_connections() const;  // on TCP, not yet shown a credential

  struct Impl;  // opaque; public so that connection handlers in the .cc can name it

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace edgecost::daemon
