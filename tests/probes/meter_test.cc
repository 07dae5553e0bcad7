// SCPI meters against a loopback fake: a TCP server on 127.0.0.1 (port chosen
// by the kernel) that answers newline-terminated queries as a script says.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "probes/probe.h"
#include "probes/scpi_meter.h"
#include "tests/loopback_meter.h"

namespace edgecost::probes {
namespace {

using edgecost::testing::LoopbackMeter;

using ::testing::AnyOf;
using ::testing::HasSubstr;

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// A meter with a 12.5 W load, and a 0.25 A x 12 V one, both always answering.
std::optional<std::string> Bench(const std::string& query, int) {
  if (query == "MEAS:POW?") return std::string("12.5\n");
  if (query == "MEAS:CURR?") return std::string("0.25\n");
  if (query == "MEAS:VOLT?") return std::string("+1.200000E+01\n");
  return std::string("-113,\"Undefined header\"\n");
}

TEST(MeterLoopback, ReadsWatts) {
  LoopbackMeter meter(Bench);
  auto probe = ConnectMeter(meter.Config());
  ASSERT_TRUE(probe.ok()) << probe.status().message();
  const ProbeInfo& info = (*probe)->info();
  EXPECT_EQ(info.source, "meter");
  EXPECT_TRUE(info.available);
  EXPECT_TRUE(info.measured);
  EXPECT_EQ(info.kind, ReadingKind::kPower);
  for (int i = 0; i < 3; ++i) {
    auto watts = (*probe)->Read();
    ASSERT_TRUE(watts.ok()) << watts.status().message();
    EXPECT_EQ(*watts, std::vector<double>{12.5});
    EXPECT_EQ(watts->size(), info.domains.size());
  }
  for (const std::string& query : meter.Queries()) EXPECT_EQ(query, "MEAS:POW?");
  EXPECT_GE(meter.Queries().size(), 3u);
}

TEST(MeterLoopback, CurrentTimesVoltage) {
  LoopbackMeter meter(Bench);
  MeterConfig config = meter.Config();
  config.power_query = "";
  config.current_query = "MEAS:CURR?";
  config.voltage_query = "MEAS:VOLT?";
  auto probe = ConnectMeter(config);
  ASSERT_TRUE(probe.ok()) << probe.status().message();
  auto watts = (*probe)->Read();
  ASSERT_TRUE(watts.ok()) << watts.status().message();
  ASSERT_EQ(watts->size(), 1u);
  EXPECT_DOUBLE_EQ(watts->front(), 3.0);
  const auto queries = meter.Queries();
  EXPECT_NE(std::find(queries.begin(), queries.end(), "MEAS:CURR?"), queries.end());
  EXPECT_NE(std::find(queries.begin(), queries.end(), "MEAS:VOLT?"), queries.end());
  EXPECT_EQ(std::find(queries.begin(), queries.end(), "MEAS:POW?"), queries.end());
}

TEST(MeterLoopback, CrLfAndAnswersSplitAcrossSegments) {
  LoopbackMeter meter([](const std::string&, int) -> std::optional<std::string> { return "12.5\r\n"; },
                      /*trickle=*/true);
  auto probe = ConnectMeter(meter.Config());
  ASSERT_TRUE(probe.ok()) << probe.status().message();
  auto watts = (*probe)->Read();
  ASSERT_TRUE(watts.ok()) << watts.status().message();
  EXPECT_EQ(*watts, std::vector<double>{12.5});
}

// The error of connecting and then reading once: whichever fails first.
Status ConnectAndRead(const MeterConfig& config) {
  auto probe = ConnectMeter(config);
  if (!probe.ok()) return probe.status();
  auto watts = (*probe)->Read();
  if (!watts.ok()) return watts.status();
  return Status::Ok();
}

TEST(MeterLoopback, SilentMeterIsAnErrorNotAHang) {
  LoopbackMeter meter([](const std::string&, int) -> std::optional<std::string> { return std::string(); });
  const Status status = ConnectAndRead(meter.Config(/*timeout_s=*/0.2));
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(Lower(status.message()),
              AnyOf(HasSubstr("timeout"), HasSubstr("timed out"), HasSubstr("did not answer")));
}

TEST(MeterLoopback, GarbageIsAnErrorThatQuotesIt) {
  LoopbackMeter meter([](const std::string&, int) -> std::optional<std::string> { return "hello\n"; });
  const Status status = ConnectAndRead(meter.Config());
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("hello"));
}

TEST(MeterLoopback, HangUpMidRunMakesLaterReadsFail) {
  LoopbackMeter meter([](const std::string&, int n) -> std::optional<std::string> {
    if (n == 0) return "7.25\n";
    return std::nullopt;
  });
  auto probe = ConnectMeter(meter.Config());
  ASSERT_TRUE(probe.ok()) << probe.status().message();
  auto first = (*probe)->Read();
  if (first.ok()) {  // connecting did not ask already
    EXPECT_EQ(*first, std::vector<double>{7.25});
  }
  auto later = (*probe)->Read();
  ASSERT_FALSE(later.ok()) << "read " << later->front() << " W from a meter that hung up";
  EXPECT_FALSE(later.status().message().empty());
  EXPECT_FALSE((*probe)->Read().ok());  // and stays failed
}

TEST(MeterLoopback, HangUpWhileSampledIsReportedByTheMonitor) {
  LoopbackMeter meter([](const std::string&, int n) -> std::optional<std::string> {
    if (n < 4) return "2.0\n";
    return std::nullopt;
  });
  MeterConfig config = meter.Config(0.2);
  config.update_interval_s = 0.002;
  auto probe = ConnectMeter(config);
  ASSERT_TRUE(probe.ok()) << probe.status().message();
  EnergyMonitor monitor(std::move(*probe), 0.002);
  ASSERT_TRUE(monitor.Start().ok());
  for (int i = 0; i < 1000 && monitor.SamplerStatus().ok(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  const Status status = monitor.SamplerStatus();
  monitor.Stop();
  EXPECT_FALSE(status.ok()) << "the monitor's sampler never noticed the meter hung up";
}

TEST(MeterLoopback, NothingListening) {
  // A port that was bound and released, with no listener on it.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  socklen_t length = sizeof address;
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length), 0);
  ::close(fd);
  MeterConfig config;
  config.host = "127.0.0.1";
  config.port = ntohs(address.sin_port);
  config.timeout_s = 0.5;
  auto probe = ConnectMeter(config);
  ASSERT_FALSE(probe.ok());
  EXPECT_THAT(Lower(probe.status().message()),
              AnyOf(HasSubstr(std::to_string(config.port)), HasSubstr("connect"), HasSubstr("refused")));
}

TEST(MeterLoopback, IncompleteCurrentAndVoltageConfigIsRejected) {
  LoopbackMeter meter(Bench);
  MeterConfig config = meter.Config();
  config.power_query = "";
  config.current_query = "MEAS:CURR?";  // but no voltage query
  auto probe = ConnectMeter(config);
  EXPECT_FALSE(probe.ok());
}

}  // namespace
}  // namespace edgecost::probes
