// Attack 5: 520 idle TCP connections that never sent a request held every slot
// of the TCP listener for its whole read timeout, so clients with the token got
// nothing. Reproduced on a real `edgecost serve`, from 127.0.0.1 and from other
// loopback addresses (127.0.0.2-9), then checked: token holders are served, the
// idle connections are let go, the Unix socket is unaffected.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "daemon/config.h"
#include "tests/daemon/serve_process.h"

namespace edgecost {
namespace {

namespace fs = std::filesystem;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using namespace test_support;

constexpr int kIdleConnections = 520;
const std::string kToken = "0123456789abcdef0123456789abcdef";

// A TCP connection to 127.0.0.1:port from `source` (a loopback address), or -1.
int Connect(int port, const char* source) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in from{};
  from.sin_family = AF_INET;
  ::inet_pton(AF_INET, source, &from.sin_addr);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from) != 0 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Whether the daemon has closed `fd` (a read would return end of file).
bool ClosedByPeer(int fd) {
  char byte = 0;
  const ssize_t n = ::recv(fd, &byte, 1, MSG_DONTWAIT | MSG_PEEK);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

// Sends GET /healthz with the token on `fd` and reads the whole answer ("ok\n").
std::string HealthzWithToken(int fd) {
  const std::string request = "GET /healthz HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + kToken + "\r\n\r\n";
  if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(request.size())) return "";
  std::string answer;
  char buffer[1024];
  while (answer.find("\r\n\r\nok\n") == std::string::npos) {
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) break;
    answer.append(buffer, static_cast<size_t>(n));
  }
  return answer;
}

TEST(TcpQuota, IdleConnectionsWithoutTheTokenDoNotStarveTokenHolders) {
  rlimit files{};  // the test holds 520 sockets; so may the daemon, which inherits the limit
  ::getrlimit(RLIMIT_NOFILE, &files);
  if (files.rlim_cur < 4096) {
    files.rlim_cur = std::min<rlim_t>(4096, files.rlim_max);
    ::setrlimit(RLIMIT_NOFILE, &files);
  }
  if (files.rlim_cur < 2 * kIdleConnections + 64) GTEST_SKIP() << "the file limit is " << files.rlim_cur;

  const fs::path dir = fs::temp_directory_path() / ("edgecost_tcp_quota_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "token") << kToken << "\n";
  const std::string socket = (dir / "edgecost.sock").string();
  const pid_t pid = SpawnServe({"--db", (dir / "costs.db").string(), "serve", "--socket", socket, "--tcp",
                                "127.0.0.1:0", "--token-file", (dir / "token").string()},
                               socket, "/nonexistent-sysfs", dir / "serve.log");
  std::smatch match;
  const std::string log = Shell("cat " + (dir / "serve.log").string());
  ASSERT_TRUE(std::regex_search(log, match, std::regex("tcp=http://127\\.0\\.0\\.1:([0-9]+)"))) << log;
  const int port = std::stoi(match[1]);
  const std::string url = "http://127.0.0.1:" + std::to_string(port);
  auto authenticated_call = [&] {
    return Shell("curl -s --max-time 20 -w ' %{http_code}' -H 'Authorization: Bearer " + kToken +
                 "' -H 'Content-Type: application/json' -d '{}' " + url + "/twirp/edgecost.v1.JobService/ListJobs");
  };

  // A token holder's keep-alive connection, opened before the flood.
  const int holder = Connect(port, "127.0.0.1");
  ASSERT_GE(holder, 0);
  ASSERT_THAT(HealthzWithToken(holder), HasSubstr("200 OK"));

  std::vector<int> idle;
  const char* sources[] = {"127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5",
                           "127.0.0.6", "127.0.0.7", "127.0.0.8", "127.0.0.9"};
  for (int i = 0; i < kIdleConnections; ++i) {
    // Half from the client's own address, the rest spread over eight others.
    const int fd = Connect(port, i % 2 == 0 ? sources[0] : sources[1 + (i / 2) % 8]);
    if (fd >= 0) idle.push_back(fd);
  }
  ASSERT_EQ(idle.size(), static_cast<size_t>(kIdleConnections));

  EXPECT_THAT(authenticated_call(), EndsWith(" 200"));         // promptly: the idle ones make room
  EXPECT_THAT(HealthzWithToken(holder), HasSubstr("200 OK"));  // never closed for them
  EXPECT_THAT(
      Shell("curl -s --max-time 20 -w ' %{http_code}' -d '{}' " + url + "/twirp/edgecost.v1.JobService/ListJobs"),
      EndsWith(" 401"));
  EXPECT_TRUE(Serving(socket));
  EXPECT_THAT(CallJson(socket, "CostService/GetCostTable", R"({"model":"linear","device":"a72"})"), EndsWith(" 200"));

  // Every idle connection is let go: the oldest beyond the quotas at once, the
  // rest at their short deadline (bounded poll, not a timing assertion).
  const std::string closed = PollUntil(
      [&] { return std::to_string(std::count_if(idle.begin(), idle.end(), [](int fd) { return ClosedByPeer(fd); })); },
      [](const std::string& n) { return n == std::to_string(kIdleConnections); });
  EXPECT_EQ(closed, std::to_string(kIdleConnections));
  for (int fd : idle) ::close(fd);
  ::close(holder);

  EXPECT_THAT(authenticated_call(), EndsWith(" 200"));
  EXPECT_EQ(::waitpid(pid, nullptr, WNOHANG), 0) << Shell("cat " + (dir / "serve.log").string());
  StopProcess(pid);
  fs::remove_all(dir);
}

TEST(TcpQuota, TheQuotasAreSetInTheConfigFile) {
  const fs::path file = fs::temp_directory_path() / ("edgecost_tcp_quota_" + std::to_string(::getpid()) + ".toml");
  std::ofstream(file) << "[limits]\nunauthenticated_read_timeout_s = 2.5\nmax_unauthenticated_connections = 8\n"
                         "max_unauthenticated_per_address = 2\n";
  daemon::DaemonConfig config;
  ASSERT_TRUE(daemon::LoadConfigFile(file.string(), config).ok());
  EXPECT_EQ(config.limits.unauthenticated_read_timeout_s, 2.5);
  EXPECT_EQ(config.limits.max_unauthenticated_connections, 8);
  EXPECT_EQ(config.limits.max_unauthenticated_per_address, 2);
  std::ofstream(file) << "[limits]\nmax_unauthenticated_per_address = 0\n";
  const Status refused = daemon::LoadConfigFile(file.string(), config);
  EXPECT_THAT(refused.message(), HasSubstr("limits.max_unauthenticated_per_address must be a whole number from 1"));
  fs::remove(file);
}

}  // namespace
}  // namespace edgecost
