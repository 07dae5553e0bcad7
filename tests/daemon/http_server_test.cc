// The transport's limits with an injected handler: oversized bodies and
// headers, garbage, slow and surplus clients are answered or dropped without
// stalling anyone else; and the daemon's restriction of state-changing calls.
#include "daemon/http_server.h"

#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <boost/asio.hpp>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "daemon/daemon.h"

namespace edgecost::daemon {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using ::testing::HasSubstr;
using ::testing::StartsWith;

class HttpServerTest : public ::testing::Test {
 protected:
  // Answers "/throw" by throwing, "/close" with a response that closes the
  // connection; everything else from another thread, later, as Solve and WatchEvents do.
  void Start(ServerLimits limits) {
    server_ = std::make_unique<HttpServer>(
        [this](HttpRequest request, HttpReply reply) {
          if (request.target == "/throw") throw std::runtime_error("a handler's bug");
          if (request.target == "/close") return reply({401, "text/plain", "go away", /*close_connection=*/true});
          std::lock_guard lock(repliers_mutex_);
          repliers_.emplace_back([request = std::move(request), reply = std::move(reply)] {
            reply({200, "text/plain", "echo " + request.target + " " + std::to_string(request.body.size())});
          });
        },
        limits);
    unix_path_ =
        (std::filesystem::temp_directory_path() / ("edgecost_http_test_" + std::to_string(::getpid()) + ".sock"))
            .string();
    ASSERT_TRUE(server_->ListenUnix(unix_path_, 0600, "").ok());
    auto port = server_->ListenTcp("127.0.0.1", 0);
    ASSERT_TRUE(port.ok()) << port.status().message();
    port_ = *port;
    runner_ = std::thread([this] { server_->Run(); });
  }
  void TearDown() override {
    if (server_) server_->Stop();
    if (runner_.joinable()) runner_.join();
    // The replying threads use the server: they end before it is destroyed, with the fixture.
    for (std::thread& replier : repliers_) replier.join();
  }

  tcp::socket Connect() {
    tcp::socket socket(io_);
    socket.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(port_)));
    return socket;
  }
  asio::local::stream_protocol::socket ConnectUnix() {
    asio::local::stream_protocol::socket socket(io_);
    socket.connect(asio::local::stream_protocol::endpoint(unix_path_));
    return socket;
  }
  // Writes `raw` and reads until the server closes or a full response with a body arrives.
  template <typename Socket>
  static std::string Exchange(Socket& socket, const std::string& raw) {
    boost::system::error_code ec;  // a write to a connection the server closed fails; the read says so
    asio::write(socket, asio::buffer(raw), ec);
    return ReadAll(socket);
  }
  template <typename Socket>
  static std::string ReadAll(Socket& socket) {
    std::string out;
    char buffer[4096];
    boost::system::error_code ec;
    for (;;) {
      const size_t n = socket.read_some(asio::buffer(buffer), ec);
      out.append(buffer, n);
      if (ec) return out;
      const size_t end = out.find("\r\n\r\n");
      const size_t length_at = out.find("Content-Length: ");
      if (end != std::string::npos && length_at != std::string::npos &&
          out.size() >= end + 4 + std::stoul(out.substr(length_at + 16))) {
        return out;
      }
    }
  }
  static std::string Post(const std::string& target, const std::string& body) {
    return "POST " + target + " HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" +
           body;
  }

  asio::io_context io_;
  std::string unix_path_;
  std::unique_ptr<HttpServer> server_;
  std::thread runner_;
  std::mutex repliers_mutex_;
  std::vector<std::thread> repliers_;  // one per echoed request
  int port_ = 0;
};

TEST_F(HttpServerTest, OversizedBodiesHeadersAndGarbageAreRefusedAndOthersServed) {
  ServerLimits limits;
  limits.max_body_bytes = 1000;
  limits.max_header_bytes = 512;
  Start(limits);

  auto big_body = Connect();
  EXPECT_THAT(Exchange(big_body, Post("/a", std::string(2000, 'x'))), StartsWith("HTTP/1.1 413"));
  auto big_header = Connect();
  EXPECT_THAT(Exchange(big_header, "GET / HTTP/1.1\r\nX-Pad: " + std::string(1000, 'y') + "\r\n\r\n"),
              StartsWith("HTTP/1.1 431"));
  auto garbage = Connect();
  EXPECT_THAT(Exchange(garbage, "NOT HTTP AT ALL\r\n\r\n"), HasSubstr("malformed"));

  auto fine = Connect();
  const std::string answer = Exchange(fine, Post("/b", std::string(999, 'z')));
  EXPECT_THAT(answer, StartsWith("HTTP/1.1 200"));
  EXPECT_THAT(answer, HasSubstr("echo /b 999"));
}

TEST_F(HttpServerTest, ASlowClientIsDroppedAndDoesNotStallOthers) {
  ServerLimits limits;
  limits.read_timeout_s = 0.3;
  Start(limits);

  auto slow = Connect();
  asio::write(slow, asio::buffer(std::string("POST /slow HTTP/1.1\r\nContent-Le")));  // and nothing more
  auto other = Connect();
  EXPECT_THAT(Exchange(other, Post("/other", "hi")), HasSubstr("echo /other 2"));
  // The server closes the slow connection after its read limit: the read ends.
  EXPECT_THAT(ReadAll(slow), ::testing::Not(HasSubstr("echo")));
}

TEST_F(HttpServerTest, ConnectionsBeyondTheLimitAreClosedAtOnce) {
  ServerLimits limits;
  limits.max_connections = 2;
  Start(limits);

  auto first = Connect();
  auto second = Connect();
  EXPECT_THAT(Exchange(first, Post("/1", "")), HasSubstr("echo /1"));  // both are held open (keep-alive)
  EXPECT_THAT(Exchange(second, Post("/2", "")), HasSubstr("echo /2"));
  auto third = Connect();
  EXPECT_EQ(Exchange(third, Post("/3", "")), "");  // closed without an answer

  first.close();
  // Once a slot is free, new connections are served (bounded retries: the close takes effect asynchronously).
  std::string answer;
  for (int i = 0; i < 100 && answer.empty(); ++i) {
    auto again = Connect();
    answer = Exchange(again, Post("/4", ""));
    if (answer.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_THAT(answer, HasSubstr("echo /4"));
}

// Each listener has its own limit: connections on TCP, which anyone on the
// network can open before any token is checked, never lock out the socket.
TEST_F(HttpServerTest, TcpConnectionsCannotUseUpTheSocketsConnections) {
  ServerLimits limits;
  limits.max_connections = 2;
  Start(limits);
  std::vector<tcp::socket> idle;
  // Two held; the third is admitted by closing the oldest, which has not sent a request.
  for (int i = 0; i < 3; ++i) idle.push_back(Connect());
  EXPECT_EQ(ReadAll(idle.front()), "");
  // Both of the socket's own slots serve, kept alive, call after call.
  std::vector<asio::local::stream_protocol::socket> local;
  for (int i = 0; i < limits.max_connections; ++i) local.push_back(ConnectUnix());
  for (int call = 0; call < 3; ++call) {
    for (auto& socket : local) {
      EXPECT_THAT(Exchange(socket, Post("/local", "")), HasSubstr("echo /local 0")) << "call " << call;
    }
  }
}

TEST_F(HttpServerTest, AThrowingHandlerAnswers500AndTheServerGoesOn) {
  Start(ServerLimits{});
  auto client = Connect();
  const std::string answer = Exchange(client, Post("/throw", ""));
  EXPECT_THAT(answer, StartsWith("HTTP/1.1 500"));
  EXPECT_THAT(answer, HasSubstr("a handler's bug"));
  auto next = Connect();
  EXPECT_THAT(Exchange(next, Post("/after", "")), HasSubstr("echo /after"));
}

TEST_F(HttpServerTest, AResponseCanCloseAKeptAliveConnection) {
  Start(ServerLimits{});
  auto client = Connect();  // HTTP/1.1 keeps the connection open unless the response closes it
  EXPECT_THAT(Exchange(client, Post("/close", "")), HasSubstr("go away"));
  EXPECT_EQ(Exchange(client, Post("/again", "")), "") << "the connection was closed";
}

// Calls straight into Daemon::Handle: state-changing calls need the token
// when restrict_mutations is set, even over the Unix socket; reads do not.
TEST(DaemonAuth, RestrictedCallsNeedTheToken) {
  const auto dir = std::filesystem::temp_directory_path() / ("edgecost_auth_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "token") << "0123456789abcdef0123456789abcdef\n";
  DaemonConfig config;
  config.db_path = (dir / "costs.db").string();
  config.token_file = (dir / "token").string();
  config.restrict_mutations = true;
  config.fingerprint_check_s = 0;
  Daemon daemon(config);
  auto call = [&](const std::string& method, const std::string& authorization, bool over_tcp = false,
                  const std::string& content_type = "application/json") {
    HttpRequest request{.method = "POST",
                        .target = method.starts_with("/") ? method : "/twirp/edgecost.v1." + method,
                        .content_type = content_type,
                        .authorization = authorization,
                        .body = R"({"id":"42"})",
                        .over_tcp = over_tcp};
    std::promise<HttpResponse> answer;
    daemon.Handle(request, [&](HttpResponse response) { answer.set_value(std::move(response)); });
    return answer.get_future().get();
  };
  const std::string token = "Bearer 0123456789abcdef0123456789abcdef";
  EXPECT_EQ(call("JobService/CancelJob", "").status, 403);
  EXPECT_EQ(call("JobService/CancelJob", "Bearer wrong").status, 403);
  EXPECT_EQ(call("JobService/CancelJob", token).status, 404);  // past the check: there is no job 42
  EXPECT_EQ(call("JobService/GetJob", "").status, 404);        // reads need no token on the socket
  EXPECT_EQ(call("JobService/GetJob", "", /*over_tcp=*/true).status, 401);
  EXPECT_EQ(call("JobService/GetJob", token, /*over_tcp=*/true).status, 404);
  const HttpResponse refused = call("JobService/GetJob", "", /*over_tcp=*/true);
  EXPECT_TRUE(refused.close_connection) << "an unauthenticated caller keeps no connection";
  // Metrics over TCP are the daemon's business too; /healthz says nothing and stays open.
  EXPECT_EQ(call("/metrics", "", /*over_tcp=*/true).status, 401);
  EXPECT_EQ(call("/metrics", token, /*over_tcp=*/true).status, 200);
  EXPECT_EQ(call("/healthz", "", /*over_tcp=*/true).status, 200);
  // Media types are matched whole: parameters are fine, a longer name is not JSON.
  EXPECT_EQ(call("JobService/GetJob", "", false, "application/json; charset=utf-8").status, 404);
  EXPECT_EQ(
      call("JobService/GetJob", "", false, "application/jsonx").body,
      R"({"code":"bad_route","msg":"unexpected Content-Type 'application/jsonx'; use application/json or application/protobuf"})");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace edgecost::daemon
