#include "probes/scpi_meter.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>

namespace edgecost::probes {
namespace {

class ScpiMeter : public Probe {
 public:
  ScpiMeter(MeterConfig config, int fd) : config_(std::move(config)), fd_(fd) {
    info_.source = "meter";
    info_.name = config_.name + " " + Address();
    info_.available = true;
    info_.kind = ReadingKind::kPower;
    info_.domains = {config_.name};
    info_.resolution = 1e-3;
    info_.update_interval_s = config_.update_interval_s;
  }
  ~ScpiMeter() override { ::close(fd_); }

  const ProbeInfo& info() const override { return info_; }

  Result<std::vector<double>> Read() override {
    if (!config_.power_query.empty()) {
      EC_ASSIGN_OR_RETURN(double watts, Query(config_.power_query));
      return std::vector<double>{watts};
    }
    EC_ASSIGN_OR_RETURN(double amperes, Query(config_.current_query));
    EC_ASSIGN_OR_RETURN(double volts, Query(config_.voltage_query));
    return std::vector<double>{amperes * volts};
  }

  std::string Address() const { return config_.host + ":" + std::to_string(config_.port); }

 private:
  Result<double> Query(const std::string& command) {
    if (fd_ < 0) return Unavailable("meter " + Address() + ": the connection was closed");
    const std::string line = command + "\n";
    if (::send(fd_, line.data(), line.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(line.size())) {
      return Fail("sending '" + command + "' failed: " + std::strerror(errno));
    }
    // Read one reply line, never waiting longer than the timeout in all.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(config_.timeout_s);
    std::string reply;
    while (true) {
      if (const size_t end = buffer_.find('\n'); end != std::string::npos) {
        reply = buffer_.substr(0, end);
        buffer_.erase(0, end + 1);
        break;
      }
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        return Fail("did not answer '" + command + "' within " + std::to_string(config_.timeout_s) + " s (timeout)");
      }
      pollfd p{fd_, POLLIN, 0};
      const int ready = ::poll(&p, 1, static_cast<int>(left.count()));
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0) continue;  // the deadline check above reports the timeout
      char chunk[256];
      const ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
      if (n == 0) return Fail("closed the connection while answering '" + command + "'");
      if (n < 0) return Fail("reading the answer to '" + command + "' failed: " + std::strerror(errno));
      buffer_.append(chunk, static_cast<size_t>(n));
      if (buffer_.size() > 4096) return Fail("sent more than 4 KiB without a newline: not an SCPI meter?");
    }
    while (!reply.empty() && (reply.back() == '\r' || reply.back() == ' ')) reply.pop_back();
    char* end = nullptr;
    const double value = std::strtod(reply.c_str(), &end);
    if (reply.empty() || end == reply.c_str() || *end != '\0' || !std::isfinite(value)) {
      return Fail("answered '" + reply.substr(0, 80) + "' to '" + command + "', which is not a number");
    }
    return value;
  }

  Status Fail(const std::string& what) {
    ::close(fd_);
    fd_ = -1;  // a half-read reply would desynchronise every later query
    return Unavailable("meter " + Address() + " " + what);
  }

  MeterConfig config_;
  int fd_;
  std::string buffer_;
  ProbeInfo info_;
};

}  // namespace

Result<std::unique_ptr<Probe>> ConnectMeter(const MeterConfig& config) {
  if (config.power_query.empty() && (config.current_query.empty() || config.voltage_query.empty())) {
    return InvalidArgument("meter " + config.name + ": set power_query, or both current_query and voltage_query");
  }
  const std::string address = config.host + ":" + std::to_string(config.port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(config.host.c_str(), std::to_string(config.port).c_str(), &hints, &found); rc != 0) {
    return InvalidArgument("meter " + address + ": " + ::gai_strerror(rc));
  }
  std::string error = "no address";
  int fd = -1;
  for (addrinfo* a = found; a && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    // Connect with the timeout, then read and write with poll().
    const int rc = ::connect(fd, a->ai_addr, a->ai_addrlen);
    int so_error = rc == 0 ? 0 : errno;
    if (rc < 0 && errno == EINPROGRESS) {
      so_error = ETIMEDOUT;
      pollfd p{fd, POLLOUT, 0};
      if (::poll(&p, 1, static_cast<int>(config.timeout_s * 1000)) == 1) {
        socklen_t length = sizeof so_error;
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &length);
      }
    }
    if (so_error != 0) {
      error = std::strerror(so_error);
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  if (fd < 0) return Unavailable("meter " + address + ": cannot connect: " + error);
  auto meter = std::make_unique<ScpiMeter>(config, fd);
  EC_RETURN_IF_ERROR(meter->Read().status());  // a meter that does not answer fails here, not mid-profile
  return std::unique_ptr<Probe>(std::move(meter));
}

}  // namespace edgecost::probes
