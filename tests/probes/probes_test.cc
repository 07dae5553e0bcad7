// Probes on fake sysfs trees, a loopback SCPI meter, synthetic power traces,
// and this machine's software perf events.
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numbers>
#include <random>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "probes/perf_counters.h"
#include "probes/registry.h"

namespace edgecost::probes {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// ---- Energy over a window ----------------------------------------------------

std::vector<PowerSample> Trace(const std::function<double(double)>& watts, double from_s, double to_s, double step_s,
                               double jitter_s) {
  std::mt19937 random(7);
  std::uniform_real_distribution<double> noise(-jitter_s, jitter_s);
  std::vector<PowerSample> trace;
  for (double t = from_s; t <= to_s; t += step_s) {
    const double stamp = t + noise(random);
    trace.push_back({stamp, watts(stamp)});
  }
  return trace;
}

TEST(IntegratePower, KnownIntegralsWithinHalfAPercent) {
  struct Case {
    const char* name;
    std::function<double(double)> watts;
    double t0, t1, exact_j;
  };
  const double pi = std::numbers::pi;
  const std::vector<Case> cases = {
      {"constant", [](double) { return 3.0; }, 0.1234, 1.8765, 3.0 * (1.8765 - 0.1234)},
      {"ramp", [](double t) { return 1 + 2 * t; }, 0.2005, 1.7003,
       (1.7003 + 1.7003 * 1.7003) - (0.2005 + 0.2005 * 0.2005)},
      {"sine", [pi](double t) { return 5 + 2 * std::sin(2 * pi * 10 * t); }, 0.0, 1.0, 5.0},
      {"sine, window between samples", [pi](double t) { return 5 + 2 * std::sin(2 * pi * 3 * t); }, 0.00047, 1.00047,
       5.0},
  };
  for (const Case& c : cases) {
    const auto trace = Trace(c.watts, -0.01, 2.0, 1e-3, 2e-4);  // 1 kHz with jittered stamps
    const double energy = IntegratePowerJ(trace, c.t0, c.t1);
    EXPECT_NEAR(energy, c.exact_j, 0.005 * c.exact_j) << c.name;
  }
}

TEST(IntegratePower, EdgesAreInterpolatedAndEmptyWindowsAreZero) {
  const std::vector<PowerSample> trace = {{0, 0}, {1, 10}};
  EXPECT_DOUBLE_EQ(IntegratePowerJ(trace, 0.5, 1.0), 0.5 * (5 + 10) * 0.5);
  EXPECT_DOUBLE_EQ(IntegratePowerJ(trace, 1.0, 3.0), 20.0);  // held after the last sample
  EXPECT_EQ(IntegratePowerJ(trace, 0.7, 0.7), 0);
  EXPECT_EQ(IntegratePowerJ({}, 0, 1), 0);
}

// A counter the test moves by hand; wraps at 100 J.
class FakeCounter : public Probe {
 public:
  explicit FakeCounter(double* joules) : joules_(joules) {
    info_.source = "fake";
    info_.kind = ReadingKind::kEnergyCounter;
    info_.domains = {"package"};
    info_.update_interval_s = 1e-3;
    info_.available = true;
  }
  const ProbeInfo& info() const override { return info_; }
  Result<std::vector<double>> Read() override { return std::vector<double>{std::fmod(*joules_, 100.0)}; }
  double WrapJ(size_t) const override { return 100; }

 private:
  double* joules_;
  ProbeInfo info_;
};

TEST(EnergyMonitor, CounterWrapInsideTheWindow) {
  double joules = 90;
  double now_s = 5;
  EnergyMonitor monitor(std::make_unique<FakeCounter>(&joules), 0, [&now_s] { return now_s; });
  ASSERT_TRUE(monitor.Start().ok());
  joules = 98;
  ASSERT_TRUE(monitor.EnergyJ().ok());
  joules = 115;  // reads 15: wrapped
  now_s = 6;
  monitor.Stop();
  auto energy = monitor.EnergyJ();
  ASSERT_TRUE(energy.ok());
  EXPECT_NEAR(energy->front(), 25.0, 1e-9);
  EXPECT_NEAR(monitor.UpdatesSinceStart(), 1000, 1e-6);
}

// ---- Fake sysfs trees --------------------------------------------------------

class FakeSys : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("edgecost_probes_" + std::to_string(::getpid()) + "_" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  void Write(const std::string& path, const std::string& value) {
    fs::create_directories((root_ / path).parent_path());
    std::ofstream(root_ / path) << value << "\n";
  }
  const ProbeInfo* Find(const Detected& d, const std::string& source, const std::string& name_part) {
    for (const ProbeInfo& info : d.infos) {
      if (info.source == source && info.name.find(name_part) != std::string::npos) return &info;
    }
    return nullptr;
  }
  fs::path root_;
};

TEST_F(FakeSys, RaplPackageAndCoreWithWraparound) {
  Write("class/powercap/intel-rapl:0/name", "package-0");
  Write("class/powercap/intel-rapl:0/energy_uj", "262000000");
  Write("class/powercap/intel-rapl:0/max_energy_range_uj", "262143328");
  Write("class/powercap/intel-rapl:0/intel-rapl:0:0/name", "core");
  Write("class/powercap/intel-rapl:0/intel-rapl:0:0/energy_uj", "1000000");
  Write("class/powercap/intel-rapl:0/intel-rapl:0:0/max_energy_range_uj", "262143328");
  Detected d;
  DetectRapl(root_.string(), d);
  ASSERT_EQ(d.probes.size(), 1u);
  EXPECT_THAT(d.probes[0]->info().domains, ::testing::ElementsAre("package-0", "core"));
  EnergyMonitor monitor(std::move(d.probes[0]));
  ASSERT_TRUE(monitor.Start().ok());
  // The package counter wraps: 262.000000 J -> (262.143328 wraps) -> 0.856672 J.
  Write("class/powercap/intel-rapl:0/energy_uj", "856672");
  Write("class/powercap/intel-rapl:0/intel-rapl:0:0/energy_uj", "1500000");
  monitor.Stop();
  auto energy = monitor.EnergyJ();
  ASSERT_TRUE(energy.ok()) << energy.status().message();
  EXPECT_NEAR((*energy)[0], 1.0, 1e-6);
  EXPECT_NEAR((*energy)[1], 0.5, 1e-6);
}

TEST_F(FakeSys, RaplReadableOnlyByRootIsExplained) {
  Write("class/powercap/intel-rapl:0/name", "package-0");
  Write("class/powercap/intel-rapl:0/energy_uj", "1");
  fs::permissions(root_ / "class/powercap/intel-rapl:0/energy_uj", fs::perms::owner_read);
  // Detect as an ordinary user: as root (CI), in a child that gives up root first.
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) ::_exit(2);
    Detected d;
    DetectRapl(root_.string(), d);
    const bool explained = d.probes.empty() && d.infos.size() == 1 &&
                           d.infos[0].reason.find("CVE-2020-8694") != std::string::npos &&
                           d.infos[0].fix.find("chmod") != std::string::npos;
    ::_exit(explained ? 0 : 1);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 2) GTEST_SKIP() << "cannot drop root here";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "an unreadable energy_uj was not reported with its CVE and fix";
}

TEST_F(FakeSys, PerfPowerPmuIsListedWithItsEvents) {
  Write("bus/event_source/devices/power/type", "23");
  Write("bus/event_source/devices/power/events/energy-pkg", "event=0x02");
  Write("bus/event_source/devices/power/events/energy-pkg.unit", "Joules");
  Detected d;
  DetectRapl(root_.string(), d);
  const ProbeInfo* pmu = Find(d, "rapl", "perf power PMU");
  ASSERT_NE(pmu, nullptr);
  EXPECT_THAT(pmu->domains, ::testing::ElementsAre("energy-pkg"));
}

TEST_F(FakeSys, NoRaplSaysSo) {
  Detected d;
  DetectRapl(root_.string(), d);
  ASSERT_EQ(d.infos.size(), 1u);
  EXPECT_FALSE(d.infos[0].available);
  EXPECT_THAT(d.infos[0].reason, HasSubstr("does not exist"));
  EXPECT_THAT(d.infos[0].fix, HasSubstr("intel_rapl"));
}

TEST_F(FakeSys, HwmonIna3221RailsWithNestingAndIna219BothForms) {
  Write("class/hwmon/hwmon0/name", "ina3221");
  Write("class/hwmon/hwmon0/in1_label", "VDD_IN");
  Write("class/hwmon/hwmon0/in1_input", "5000");    // mV
  Write("class/hwmon/hwmon0/curr1_input", "1200");  // mA
  Write("class/hwmon/hwmon0/in2_label", "VDD_CPU");
  Write("class/hwmon/hwmon0/in2_input", "5000");
  Write("class/hwmon/hwmon0/curr2_input", "400");
  Write("class/hwmon/hwmon1/name", "ina219");
  Write("class/hwmon/hwmon1/power1_input", "2500000");  // uW
  Write("class/hwmon/hwmon2/name", "ina219");
  Write("class/hwmon/hwmon2/in1_input", "3300");
  Write("class/hwmon/hwmon2/curr1_input", "500");
  Write("class/hwmon/hwmon3/name", "coretemp");
  Write("class/hwmon/hwmon3/temp1_input", "45000");

  Detected flat;
  DetectHwmon(root_.string(), {}, flat);
  ASSERT_EQ(flat.probes.size(), 3u);
  EXPECT_THAT(flat.probes[0]->info().domains, ::testing::ElementsAre("VDD_IN", "VDD_CPU"));
  auto watts = flat.probes[0]->Read();
  ASSERT_TRUE(watts.ok());
  EXPECT_NEAR((*watts)[0], 6.0, 1e-9);
  EXPECT_NEAR((*watts)[1], 2.0, 1e-9);
  EXPECT_NEAR(flat.probes[1]->Read()->front(), 2.5, 1e-9);
  EXPECT_NEAR(flat.probes[2]->Read()->front(), 1.65, 1e-9);

  Detected nested;
  DetectHwmon(root_.string(), {{"VDD_CPU", "VDD_IN"}}, nested);
  ASSERT_EQ(nested.probes.size(), 3u);
  EXPECT_THAT(nested.probes[0]->info().domains, ::testing::ElementsAre("VDD_IN"));  // never counted twice
  EXPECT_THAT(nested.probes[0]->info().reason, HasSubstr("VDD_CPU (included in VDD_IN)"));
}

TEST_F(FakeSys, BatteryOnlyWhileDischarging) {
  Write("class/power_supply/AC/type", "Mains");
  Write("class/power_supply/BAT0/type", "Battery");
  Write("class/power_supply/BAT0/status", "Discharging");
  Write("class/power_supply/BAT0/power_now", "7500000");
  Write("class/power_supply/BAT0/energy_now", "40000000");
  Write("class/power_supply/BAT1/type", "Battery");
  Write("class/power_supply/BAT1/status", "Charging");
  Write("class/power_supply/BAT1/current_now", "1000000");
  Write("class/power_supply/BAT1/voltage_now", "12000000");
  Write("class/power_supply/BAT2/type", "Battery");
  Write("class/power_supply/BAT2/status", "Discharging");
  Write("class/power_supply/BAT2/energy_now", "40000000");
  Detected d;
  DetectBatteries(root_.string(), d);
  ASSERT_EQ(d.probes.size(), 1u);
  EXPECT_NEAR(d.probes[0]->Read()->front(), 7.5, 1e-9);
  const ProbeInfo* charging = Find(d, "battery", "BAT1");
  ASSERT_NE(charging, nullptr);
  EXPECT_FALSE(charging->available);
  EXPECT_THAT(charging->reason, HasSubstr("Charging"));
  const ProbeInfo* missing = Find(d, "battery", "BAT2");
  ASSERT_NE(missing, nullptr);
  EXPECT_FALSE(missing->available);
  EXPECT_THAT(missing->reason, HasSubstr("power_now"));
  EXPECT_EQ(Find(d, "battery", "AC"), nullptr);
}

TEST_F(FakeSys, CurrentAndVoltageBatteryInWatts) {
  Write("class/power_supply/BAT0/type", "Battery");
  Write("class/power_supply/BAT0/status", "Discharging");
  Write("class/power_supply/BAT0/current_now", "500000");    // uA
  Write("class/power_supply/BAT0/voltage_now", "11000000");  // uV
  Detected d;
  DetectBatteries(root_.string(), d);
  ASSERT_EQ(d.probes.size(), 1u);
  EXPECT_NEAR(d.probes[0]->Read()->front(), 5.5, 1e-9);
}

TEST_F(FakeSys, ConfigAndEnvironmentPointEveryReaderAtTheTree) {
  Write("class/hwmon/hwmon0/name", "ina219");
  Write("class/hwmon/hwmon0/power1_input", "1000000");
  const fs::path config = root_ / "edgecost.toml";
  std::ofstream(config) << "[probes]\nsysfs_root = \"" << root_.string() << "\"\n"
                        << "nested_rails = { VDD_CPU = \"VDD_IN\" }\n[probes.estimate]\nidle_w = 3.5\n";
  auto loaded = LoadProbesConfig(config.string());
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  EXPECT_EQ(loaded->sys_root, root_.string());
  EXPECT_EQ(loaded->nested_rails.at("VDD_CPU"), "VDD_IN");
  EXPECT_DOUBLE_EQ(loaded->estimate.idle_w, 3.5);
  Detected all = DetectAll(*loaded);
  ASSERT_FALSE(all.probes.empty());
  EXPECT_EQ(all.probes.front()->info().source, "hwmon");
  EXPECT_EQ(all.infos.back().source, "estimate");
  EXPECT_FALSE(all.infos.back().measured);

  std::ofstream(config) << "[probes]\nsysfs_root = 3\n";
  EXPECT_FALSE(LoadProbesConfig(config.string()).ok());
}

// ---- A loopback SCPI meter ---------------------------------------------------

// Answers each query line with `reply(query)`; an empty optional closes the connection.
class FakeMeter {
 public:
  explicit FakeMeter(std::function<std::optional<std::string>(const std::string&)> reply) : reply_(std::move(reply)) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&address), sizeof address);
    ::listen(listen_fd_, 4);
    socklen_t length = sizeof address;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~FakeMeter() {
    ::shutdown(listen_fd_, SHUT_RDWR);
    ::close(listen_fd_);
    if (client_fd_ >= 0) ::shutdown(client_fd_, SHUT_RDWR);
    thread_.join();
  }
  MeterConfig Config() const {
    MeterConfig c;
    c.port = port_;
    c.timeout_s = 0.3;
    return c;
  }

 private:
  void Serve() {
    client_fd_ = ::accept(listen_fd_, nullptr, nullptr);
    if (client_fd_ < 0) return;
    std::string buffer;
    char chunk[256];
    ssize_t n = 0;
    while ((n = ::recv(client_fd_, chunk, sizeof chunk, 0)) > 0) {
      buffer.append(chunk, static_cast<size_t>(n));
      size_t end = 0;
      while ((end = buffer.find('\n')) != std::string::npos) {
        const std::optional<std::string> answer = reply_(buffer.substr(0, end));
        buffer.erase(0, end + 1);
        if (!answer) {
          ::close(client_fd_);
          return;
        }
        if (!answer->empty()) (void)!::send(client_fd_, answer->data(), answer->size(), MSG_NOSIGNAL);
      }
    }
    ::close(client_fd_);
  }

  std::function<std::optional<std::string>(const std::string&)> reply_;
  int listen_fd_ = -1;
  int client_fd_ = -1;
  int port_ = 0;
  std::thread thread_;
};

TEST(ScpiMeter, ReadsPowerAndCurrentTimesVoltage) {
  FakeMeter meter([](const std::string& q) -> std::optional<std::string> {
    if (q == "MEAS:POW?") return "12.5\n";
    if (q == "MEAS:CURR?") return "0.5\r\n";
    if (q == "MEAS:VOLT?") return "+1.2000E+01\n";
    return "ERR\n";
  });
  auto probe = ConnectMeter(meter.Config());
  ASSERT_TRUE(probe.ok()) << probe.status().message();
  EXPECT_DOUBLE_EQ((*probe)->Read()->front(), 12.5);
  EXPECT_EQ((*probe)->info().kind, ReadingKind::kPower);
}

TEST(ScpiMeter, CurrentAndVoltageQueries) {
  FakeMeter meter([](const std::string& q) -> std::optional<std::string> {
    return q == "MEAS:CURR?" ? "0.5\n" : q == "MEAS:VOLT?" ? "12\n" : "ERR\n";
  });
  MeterConfig config = meter.Config();
  config.power_query.clear();
  config.current_query = "MEAS:CURR?";
  config.voltage_query = "MEAS:VOLT?";
  auto probe = ConnectMeter(config);
  ASSERT_TRUE(probe.ok()) << probe.status().message();
  EXPECT_DOUBLE_EQ((*probe)->Read()->front(), 6.0);
}

TEST(ScpiMeter, SilentMeterTimesOut) {
  FakeMeter meter([](const std::string&) -> std::optional<std::string> { return std::string(); });
  auto probe = ConnectMeter(meter.Config());
  ASSERT_FALSE(probe.ok());
  EXPECT_THAT(probe.status().message(), HasSubstr("timeout"));
}

TEST(ScpiMeter, GarbageIsNamed) {
  FakeMeter meter([](const std::string&) -> std::optional<std::string> { return "hello\n"; });
  auto probe = ConnectMeter(meter.Config());
  ASSERT_FALSE(probe.ok());
  EXPECT_THAT(probe.status().message(), HasSubstr("'hello'"));
}

TEST(ScpiMeter, DisconnectMidRunIsAnErrorNotAHang) {
  int answers = 0;
  FakeMeter meter([&answers](const std::string&) -> std::optional<std::string> {
    if (answers++ == 0) return "3.0\n";
    return std::nullopt;  // hang up
  });
  auto probe = ConnectMeter(meter.Config());
  ASSERT_TRUE(probe.ok()) << probe.status().message();
  auto second = (*probe)->Read();
  ASSERT_FALSE(second.ok());
  EXPECT_THAT(second.status().message(), HasSubstr("closed the connection"));
  EXPECT_FALSE((*probe)->Read().ok());  // and stays failed
}

TEST(ScpiMeter, NothingListening) {
  MeterConfig config;
  {
    FakeMeter gone([](const std::string&) -> std::optional<std::string> { return "1\n"; });
    config = gone.Config();
  }
  auto probe = ConnectMeter(config);
  ASSERT_FALSE(probe.ok());
  EXPECT_THAT(probe.status().message(), HasSubstr("cannot connect"));
}

TEST(ScpiMeter, SampledByTheMonitorIntoEnergy) {
  FakeMeter meter([](const std::string&) -> std::optional<std::string> { return "4\n"; });
  MeterConfig config = meter.Config();
  config.update_interval_s = 0.005;
  auto probe = ConnectMeter(config);
  ASSERT_TRUE(probe.ok());
  double now_s = 0;
  EnergyMonitor monitor(std::move(*probe), 0, [&now_s] { return now_s += 0.01; });
  ASSERT_TRUE(monitor.Start().ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  monitor.Stop();
  auto energy = monitor.EnergyJ();
  ASSERT_TRUE(energy.ok()) << energy.status().message();
  EXPECT_NEAR(energy->front(), 4.0 * (now_s - 0.01), 1e-9);  // constant 4 W over the fake clock's window
}

// ---- perf_event_open -------------------------------------------------------------

TEST(Perf, PermissionFailuresSayWhatToChange) {
  for (int error : {EACCES, EPERM}) {
    const PerfFailure f = ExplainPerfError(error, 3, true);
    EXPECT_THAT(f.reason, HasSubstr("perf_event_paranoid is 3"));
    EXPECT_THAT(f.fix, HasSubstr("perf_event_paranoid"));
    EXPECT_THAT(f.fix, HasSubstr("CAP_PERFMON"));
  }
  EXPECT_THAT(ExplainPerfError(ENOENT, 2, true).reason, HasSubstr("PMU"));
  EXPECT_THAT(ExplainPerfError(ENOSYS, 2, false).fix, HasSubstr("seccomp"));
}

TEST(Perf, SoftwareEventsCountThisProcess) {
  std::vector<ProbeInfo> infos;
  PerfCounters counters = PerfCounters::Open({"task-clock", "page-faults", "context-switches"}, "/proc", infos);
  ASSERT_EQ(infos.size(), 3u);
  if (counters.size() == 0) GTEST_SKIP() << "perf_event_open refused here: " << infos[0].reason;
  ASSERT_TRUE(counters.Start().ok());
  volatile double sink = 0;
  std::vector<char> touched(8 << 20, 1);  // page faults
  for (int i = 0; i < 2000000; ++i) sink = sink + std::sqrt(static_cast<double>(i));
  auto values = counters.Read();
  ASSERT_TRUE(values.ok());
  EXPECT_EQ(values->front().event, "task-clock");
  EXPECT_GT(values->front().value, 0);
  EXPECT_GT(values->front().running_fraction, 0);
}

TEST(Perf, UnknownEventIsNamed) {
  std::vector<ProbeInfo> infos;
  PerfCounters counters = PerfCounters::Open({"no-such-event-xyz"}, "/proc", infos);
  EXPECT_EQ(counters.size(), 0u);
  ASSERT_EQ(infos.size(), 1u);
  EXPECT_FALSE(infos[0].available);
  EXPECT_THAT(infos[0].reason, HasSubstr("libpfm4"));
}

}  // namespace
}  // namespace edgecost::probes
