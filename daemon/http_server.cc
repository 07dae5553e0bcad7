#include "daemon/http_server.h"

#include <grp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <future>
#include <list>
#include <mutex>
#include <optional>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace edgecost::daemon {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using local = asio::local::stream_protocol;
using tcp = asio::ip::tcp;

std::chrono::milliseconds Millis(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

class Evictable;

struct QueuedConnection {
  std::string address;
  Evictable* connection;  // removed from the queue before it is destroyed
  std::weak_ptr<Evictable> alive;
};

// A connection that can be told to close (from any thread), and whose place in
// the unauthenticated queue is kept under that queue's mutex.
class Evictable {
 public:
  virtual ~Evictable() = default;
  virtual void Evict() = 0;

  bool queued = false;  // in Unauthenticated's queue; under its mutex
  std::list<QueuedConnection>::iterator place;
};

// The TCP connections that have not shown a credential yet, oldest first.
class Unauthenticated {
 public:
  // Queues `connection`; returns the connections to close to keep within the quotas.
  std::vector<std::shared_ptr<Evictable>> Admit(const std::shared_ptr<Evictable>& connection,
                                                const std::string& address, const ServerLimits& limits) {
    std::vector<std::shared_ptr<Evictable>> evicted;
    std::lock_guard lock(mutex_);
    if (per_address_[address] >= limits.max_unauthenticated_per_address) RemoveOldest(&address, evicted);
    if (static_cast<int>(oldest_first_.size()) >= limits.max_unauthenticated_connections) {
      RemoveOldest(nullptr, evicted);
    }
    ++per_address_[address];
    connection->place = oldest_first_.insert(oldest_first_.end(), {address, connection.get(), connection});
    connection->queued = true;
    return evicted;
  }
  // Makes room in a full listener: the oldest unauthenticated connection, if any.
  std::shared_ptr<Evictable> EvictOldest() {
    std::vector<std::shared_ptr<Evictable>> evicted;
    std::lock_guard lock(mutex_);
    RemoveOldest(nullptr, evicted);
    return evicted.empty() ? nullptr : evicted.front();
  }
  // On authentication or destruction.
  void Remove(Evictable& connection) {
    std::lock_guard lock(mutex_);
    if (connection.queued) Erase(connection.place);
  }
  int size() {
    std::lock_guard lock(mutex_);
    return static_cast<int>(oldest_first_.size());
  }

 private:
  void Erase(std::list<QueuedConnection>::iterator it) {
    it->connection->queued = false;
    if (--per_address_[it->address] == 0) per_address_.erase(it->address);
    oldest_first_.erase(it);
  }
  // Dequeues the oldest (of `address`, if given) that is still alive.
  void RemoveOldest(const std::string* address, std::vector<std::shared_ptr<Evictable>>& evicted) {
    for (auto it = oldest_first_.begin(); it != oldest_first_.end();) {
      if (address && it->address != *address) {
        ++it;
        continue;
      }
      std::shared_ptr<Evictable> alive = it->alive.lock();
      const auto next = std::next(it);
      Erase(it);
      if (alive) {
        evicted.push_back(std::move(alive));
        return;
      }
      it = next;  // being destroyed: its slot was free anyway
    }
  }

  std::mutex mutex_;
  std::list<QueuedConnection> oldest_first_;
  std::unordered_map<std::string, int> per_address_;
};

}  // namespace

struct HttpServer::Impl {
  Impl(HttpHandler h, ServerLimits l, HttpAuthenticator a)
      : handler(std::move(h)),
        authenticate(std::move(a)),
        limits(l),
        workers(static_cast<size_t>(std::max(1, l.worker_threads))) {}

  HttpHandler handler;
  HttpAuthenticator authenticate;  // null: every request is authenticated
  ServerLimits limits;
  // Declared before io and workers, so they outlive the sessions whose pending
  // handlers are destroyed with them. Counted per listener, so that clients on
  // TCP, who may not even hold the token, can never use up the Unix socket's connections.
  std::atomic<int> unix_connections{0};
  std::atomic<int> tcp_connections{0};
  std::atomic<int> unanswered{0};   // requests read whose response is not yet written
  Unauthenticated unauthenticated;  // on TCP
  asio::io_context io;
  asio::thread_pool workers;
  std::unique_ptr<local::acceptor> unix_acceptor;
  std::vector<std::unique_ptr<local::acceptor>> retired_acceptors;  // replaced by a rebind, closed
  std::unique_ptr<tcp::acceptor> tcp_acceptor;
  std::string unix_path;
  unsigned unix_mode = 0660;
  std::string unix_group;
  // The socket file this server made: it removes that file and no other (the
  // folder may have been emptied and the path taken by another daemon since).
  dev_t unix_dev = 0;
  ino_t unix_ino = 0;

  template <typename Protocol>
  void Accept(typename Protocol::acceptor& acceptor, bool over_tcp);
  // Starts a session on an accepted connection, within the listener's limits and quotas.
  template <typename Protocol>
  void Admit(typename Protocol::socket socket, bool over_tcp);
  // Binds unix_path (its folder made if missing; a stale socket there replaced) and accepts on it.
  Status BindUnix();
  // Whether unix_path is still the socket file BindUnix made.
  bool OwnsUnixPath() const;
  std::atomic<int>& Connections(bool over_tcp) { return over_tcp ? tcp_connections : unix_connections; }
};

namespace {

template <typename Protocol>
class Session : public Evictable, public std::enable_shared_from_this<Session<Protocol>> {
 public:
  // Unix socket connections are authenticated by the socket file's permissions.
  Session(typename Protocol::socket socket, HttpServer::Impl& server, bool over_tcp)
      : stream_(std::move(socket)), server_(server), over_tcp_(over_tcp), authenticated_(!over_tcp) {}
  ~Session() override {
    server_.unauthenticated.Remove(*this);
    server_.Connections(over_tcp_).fetch_sub(1);
  }

  void Start() { ReadNext(); }

  void Evict() override {
    asio::post(stream_.get_executor(), [self = this->shared_from_this()] {
      if (self->authenticated_) return;  // showed its credential meanwhile: it stays
      self->stream_.close();             // the pending read ends with operation_aborted
    });
  }

 private:
  // The headers first: a connection that is not authenticated yet has a short
  // deadline for its whole request, and is known to be authenticated before its body.
  void ReadNext() {
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(server_.limits.max_header_bytes));
    parser_->body_limit(server_.limits.max_body_bytes);
    const double timeout_s =
        authenticated_ ? server_.limits.read_timeout_s
                       : std::min(server_.limits.read_timeout_s, server_.limits.unauthenticated_read_timeout_s);
    stream_.expires_after(Millis(timeout_s));
    http::async_read_header(stream_, buffer_, *parser_,
                            [self = this->shared_from_this()](beast::error_code ec, size_t) { self->OnHeader(ec); });
  }

  void OnHeader(beast::error_code ec) {
    if (ec) return OnRead(ec);
    if (!authenticated_) {
      const auto& message = parser_->get();
      HttpRequest headers;
      headers.method = std::string(message.method_string());
      headers.target = std::string(message.target());
      headers.authorization = std::string(message[http::field::authorization]);
      headers.cookie = std::string(message[http::field::cookie]);
      headers.over_tcp = over_tcp_;
      if (!server_.authenticate || server_.authenticate(headers)) {
        authenticated_ = true;
        server_.unauthenticated.Remove(*this);
        stream_.expires_after(Millis(server_.limits.read_timeout_s));  // the body, at the usual pace
      }
    }
    if (parser_->is_done()) return OnRead(ec);
    http::async_read(stream_, buffer_, *parser_,
                     [self = this->shared_from_this()](beast::error_code ec, size_t) { self->OnRead(ec); });
  }

  void OnRead(beast::error_code ec) {
    if (ec == http::error::body_limit) {
      return Respond(JsonError(413, "resource_exhausted",
                               "request body over the limit of " + std::to_string(server_.limits.max_body_bytes) +
                                   " bytes (limits.max_body_bytes in the daemon's config)"),
                     false);
    }
    if (ec == http::error::header_limit) {
      return Respond(JsonError(431, "resource_exhausted", "request headers over the limit"), false);
    }
    if (ec == http::error::end_of_stream || ec) {
      // A timeout, a reset or garbage: drop the connection; other clients are unaffected.
      if (ec && ec != http::error::end_of_stream && ec != beast::error::timeout && ec != asio::error::eof &&
          ec != asio::error::operation_aborted && ec != asio::error::connection_reset) {
        return Respond(JsonError(400, "malformed", "malformed HTTP request"), false);
      }
      beast::error_code ignored;
      stream_.socket().shutdown(Protocol::socket::shutdown_both, ignored);
      return;
    }
    auto& message = parser_->get();
    keep_alive_ = message.keep_alive();
    HttpRequest request;
    request.method = std::string(message.method_string());
    request.target = std::string(message.target());
    request.content_type = std::string(message[http::field::content_type]);
    request.authorization = std::string(message[http::field::authorization]);
    request.cookie = std::string(message[http::field::cookie]);
    request.body = std::move(message.body());
    request.over_tcp = over_tcp_;
    stream_.expires_never();  // the handler may take a while; the write has its own deadline
    server_.unanswered.fetch_add(1);
    asio::post(server_.workers, [self = this->shared_from_this(), request = std::move(request)]() mutable {
      auto answered = std::make_shared<std::atomic<bool>>(false);
      HttpReply reply = [self, answered](HttpResponse response) {
        if (answered->exchange(true)) return;  // one answer per request, whatever the handler does
        asio::post(self->stream_.get_executor(), [self, response = std::move(response)]() mutable {
          const bool keep_alive = self->keep_alive_ && !response.close_connection;
          self->Respond(std::move(response), keep_alive, /*answers_a_request=*/true);
        });
      };
      try {
        self->server_.handler(std::move(request), reply);
      } catch (const std::exception& e) {  // the handler's bug must not end the server
        reply(JsonError(500, "internal", std::string("unexpected error: ") + e.what()));
      } catch (...) {
        reply(JsonError(500, "internal", "unexpected error"));
      }
    });
  }

  void Respond(HttpResponse response, bool keep_alive, bool answers_a_request = false) {
    response_ = {};
    response_.version(11);
    response_.result(static_cast<http::status>(response.status));
    response_.set(http::field::server, "edgecost");
    response_.set(http::field::content_type, response.content_type);
    for (const auto& [name, value] : response.headers) response_.insert(name, value);
    response_.keep_alive(keep_alive);
    response_.body() = std::move(response.body);
    response_.prepare_payload();
    stream_.expires_after(Millis(server_.limits.write_timeout_s));
    http::async_write(stream_, response_,
                      [self = this->shared_from_this(), keep_alive, answers_a_request](beast::error_code ec, size_t) {
                        if (answers_a_request) self->server_.unanswered.fetch_sub(1);
                        if (!ec && keep_alive) return self->ReadNext();
                        beast::error_code ignored;
                        self->stream_.socket().shutdown(Protocol::socket::shutdown_both, ignored);
                      });
  }

  beast::basic_stream<Protocol> stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::response<http::string_body> response_;
  HttpServer::Impl& server_;
  bool over_tcp_;
  bool authenticated_;  // on the connection's strand
  bool keep_alive_ = false;
};

}  // namespace

template <typename Protocol>
void HttpServer::Impl::Accept(typename Protocol::acceptor& acceptor, bool over_tcp) {
  acceptor.async_accept(asio::make_strand(io),
                        [this, &acceptor, over_tcp](beast::error_code ec, typename Protocol::socket socket) {
                          if (ec == asio::error::operation_aborted) return;  // stopped
                          if (!ec) Admit<Protocol>(std::move(socket), over_tcp);
                          Accept<Protocol>(acceptor, over_tcp);
                        });
}

template <typename Protocol>
void HttpServer::Impl::Admit(typename Protocol::socket socket, bool over_tcp) {
  // Full: an unauthenticated connection makes room, else the new one is refused
  // rather than let one client starve the rest.
  std::shared_ptr<Evictable> room;
  if (Connections(over_tcp).fetch_add(1) >= limits.max_connections &&
      !(over_tcp && (room = unauthenticated.EvictOldest()))) {
    Connections(over_tcp).fetch_sub(1);
    beast::error_code ignored;
    socket.close(ignored);
    return;
  }
  if (room) room->Evict();
  std::string address;
  if constexpr (std::is_same_v<Protocol, tcp>) {
    beast::error_code peer_ec;
    address = socket.remote_endpoint(peer_ec).address().to_string();
  }
  auto session = std::make_shared<Session<Protocol>>(std::move(socket), *this, over_tcp);
  if (over_tcp) {
    for (const auto& evicted : unauthenticated.Admit(session, address, limits)) evicted->Evict();
  }
  session->Start();
}

HttpServer::HttpServer(HttpHandler handler, ServerLimits limits, HttpAuthenticator authenticate)
    : impl_(std::make_unique<Impl>(std::move(handler), limits, std::move(authenticate))) {}

HttpServer::~HttpServer() {
  Stop();
  if (impl_->OwnsUnixPath()) {  // another daemon's socket at the same path is left alone
    std::error_code ec;
    std::filesystem::remove(impl_->unix_path, ec);
  }
}

Status HttpServer::Impl::BindUnix() {
  const std::string& path = unix_path;
  std::error_code fs_ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), fs_ec);
  if (std::filesystem::is_socket(path, fs_ec)) {
    // A socket nobody answers on is left from a crash; one that answers belongs to a running daemon.
    local::socket probe(io);
    beast::error_code ec;
    probe.connect(local::endpoint(path), ec);
    if (!ec) return FailedPrecondition("another edgecost daemon is serving on " + path);
    std::filesystem::remove(path, fs_ec);
  }
  std::unique_ptr<local::acceptor> acceptor;
  try {
    acceptor = std::make_unique<local::acceptor>(io, local::endpoint(path));
  } catch (const boost::system::system_error& e) {
    return PermissionDenied("cannot listen on " + path + ": " + e.what() + "; choose another --socket");
  }
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return PermissionDenied("cannot stat " + path + " after binding it");
  unix_dev = st.st_dev;
  unix_ino = st.st_ino;
  if (::chmod(path.c_str(), unix_mode) != 0) return PermissionDenied("cannot set the mode of " + path);
  if (!unix_group.empty()) {
    const struct group* g = ::getgrnam(unix_group.c_str());
    if (!g) return InvalidArgument("no group '" + unix_group + "' for the socket");
    if (::chown(path.c_str(), static_cast<uid_t>(-1), g->gr_gid) != 0) {
      return PermissionDenied("cannot give " + path + " to group " + unix_group);
    }
  }
  if (unix_acceptor) {  // bound to a path that is gone: nobody can connect to it any more
    beast::error_code ignored;
    unix_acceptor->close(ignored);
    retired_acceptors.push_back(std::move(unix_acceptor));
  }
  unix_acceptor = std::move(acceptor);
  Accept<local>(*unix_acceptor, false);
  return Status::Ok();
}

bool HttpServer::Impl::OwnsUnixPath() const {
  struct stat st {};
  return unix_ino != 0 && ::lstat(unix_path.c_str(), &st) == 0 && st.st_dev == unix_dev && st.st_ino == unix_ino;
}

Status HttpServer::ListenUnix(const std::string& path, unsigned mode, const std::string& group) {
  impl_->unix_path = path;
  impl_->unix_mode = mode;
  impl_->unix_group = group;
  return impl_->BindUnix();
}

Result<HttpServer::SocketCheck> HttpServer::CheckUnixSocket() {
  if (impl_->unix_path.empty()) return SocketCheck::kPresent;
  // The acceptor belongs to the I/O thread: rebind there, and wait for it (bounded,
  // in case the server is not running).
  auto done = std::make_shared<std::promise<Result<SocketCheck>>>();
  std::future<Result<SocketCheck>> answer = done->get_future();
  asio::post(impl_->io, [this, done] {
    if (impl_->OwnsUnixPath()) return done->set_value(SocketCheck::kPresent);
    Status bound = impl_->BindUnix();
    if (!bound.ok()) return done->set_value(bound);
    done->set_value(SocketCheck::kRecreated);
  });
  if (answer.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    return Unavailable("the server did not look at " + impl_->unix_path + ": it is not running");
  }
  return answer.get();
}

Result<int> HttpServer::ListenTcp(const std::string& host, int port) {
  try {
    const auto address = asio::ip::make_address(host);
    impl_->tcp_acceptor =
        std::make_unique<tcp::acceptor>(impl_->io, tcp::endpoint(address, static_cast<uint16_t>(port)));
  } catch (const boost::system::system_error& e) {
    return Unavailable("cannot listen on " + host + ":" + std::to_string(port) + ": " + e.what());
  }
  impl_->Accept<tcp>(*impl_->tcp_acceptor, true);
  return static_cast<int>(impl_->tcp_acceptor->local_endpoint().port());
}

void HttpServer::Run() {
  std::vector<std::thread> threads;
  for (int i = 1; i < impl_->limits.io_threads; ++i) threads.emplace_back([this] { impl_->io.run(); });
  impl_->io.run();
  for (std::thread& t : threads) t.join();
}

void HttpServer::Stop() {
  asio::post(impl_->io, [this] {
    beast::error_code ignored;
    if (impl_->unix_acceptor) impl_->unix_acceptor->close(ignored);
    for (auto& retired : impl_->retired_acceptors) retired->close(ignored);
    if (impl_->tcp_acceptor) impl_->tcp_acceptor->close(ignored);
  });
  impl_->workers.join();
  // Answer what was asked: handlers that answer later (Solve, WatchEvents) are
  // told to stop by their owners first; wait for their writes, within the write limit.
  const auto deadline = std::chrono::steady_clock::now() + Millis(impl_->limits.write_timeout_s);
  while (impl_->unanswered.load() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  impl_->io.stop();
}

int HttpServer::active_connections() const { return impl_->unix_connections.load() + impl_->tcp_connections.load(); }

int HttpServer::unauthenticated_connections() const { return impl_->unauthenticated.size(); }

}  // namespace edgecost::daemon
