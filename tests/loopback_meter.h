// A loopback SCPI meter for tests: a TCP server on 127.0.0.1 (port chosen by
// the kernel) that answers newline-terminated queries as a script says.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "probes/scpi_meter.h"

namespace edgecost::testing {

// What the meter does with the n-th query (0-based) of a connection: the bytes
// to send back ("" sends nothing), or nullopt to hang up.
using Script = std::function<std::optional<std::string>(const std::string& query, int n)>;

class LoopbackMeter {
 public:
  explicit LoopbackMeter(Script script, bool trickle = false) : script_(std::move(script)), trickle_(trickle) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    EXPECT_GE(listen_fd_, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = 0;
    EXPECT_EQ(::bind(listen_fd_, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    EXPECT_EQ(::listen(listen_fd_, 4), 0);
    socklen_t length = sizeof address;
    EXPECT_EQ(::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&address), &length), 0);
    port_ = ntohs(address.sin_port);
    EXPECT_EQ(::pipe(wake_), 0);
    thread_ = std::thread([this] { Serve(); });
  }
  ~LoopbackMeter() {
    (void)!::write(wake_[1], "x", 1);
    thread_.join();
    ::close(listen_fd_);
    ::close(wake_[0]);
    ::close(wake_[1]);
  }

  probes::MeterConfig Config(double timeout_s = 0.5) const {
    probes::MeterConfig config;
    config.name = "loopback";
    config.host = "127.0.0.1";
    config.port = port_;
    config.timeout_s = timeout_s;
    return config;
  }
  std::vector<std::string> Queries() const {
    std::lock_guard lock(mutex_);
    return queries_;
  }

 private:
  // Waits for `fd` to be readable; false when the test is over.
  bool Wait(int fd) {
    pollfd p[2] = {{fd, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    while (true) {
      const int ready = ::poll(p, 2, -1);
      if (ready < 0) return false;
      if (p[1].revents != 0) return false;
      if (p[0].revents != 0) return true;
    }
  }

  void Serve() {
    while (Wait(listen_fd_)) {
      const int client = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) continue;
      const bool more = Converse(client);
      ::close(client);
      if (!more) return;
    }
  }

  // Answers one connection; false when the test is over.
  bool Converse(int client) {
    std::string buffer;
    int n = 0;
    while (true) {
      if (!Wait(client)) return false;
      char chunk[256];
      const ssize_t got = ::recv(client, chunk, sizeof chunk, 0);
      if (got <= 0) return true;  // the probe hung up
      buffer.append(chunk, static_cast<size_t>(got));
      for (size_t end; (end = buffer.find('\n')) != std::string::npos;) {
        std::string query = buffer.substr(0, end);
        buffer.erase(0, end + 1);
        if (!query.empty() && query.back() == '\r') query.pop_back();
        {
          std::lock_guard lock(mutex_);
          queries_.push_back(query);
        }
        const std::optional<std::string> reply = script_(query, n++);
        if (!reply) return true;  // hang up
        if (trickle_) {
          for (char c : *reply) {
            (void)!::send(client, &c, 1, MSG_NOSIGNAL);
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
          }
        } else if (!reply->empty()) {
          (void)!::send(client, reply->data(), reply->size(), MSG_NOSIGNAL);
        }
      }
    }
  }

  Script script_;
  bool trickle_;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};
  int port_ = 0;
  mutable std::mutex mutex_;
  std::vector<std::string> queries_;
  std::thread thread_;
};

}  // namespace edgecost::testing
