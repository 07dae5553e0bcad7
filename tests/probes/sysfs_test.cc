// Detection on fake sysfs trees with the standard Linux layouts: RAPL through
// powercap, hwmon power monitors (INA3221, INA219), battery fuel gauges.
#include "probes/sysfs.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "probes/probe.h"
#include "probes/registry.h"

namespace edgecost::probes {
namespace {

namespace fs = std::filesystem;
using ::testing::AnyOf;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

bool Has(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

class SysfsTree : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "edgecost_sysfs_XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    root_ = pattern;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  // Writes a sysfs attribute as the kernel shows it: the value and a newline.
  // Rewrites truncate the same file, as a changing sysfs value does.
  void Write(const std::string& path, const std::string& value) {
    fs::create_directories((root_ / path).parent_path());
    std::ofstream out(root_ / path, std::ios::trunc);
    out << value << "\n";
    ASSERT_TRUE(out.good()) << path;
  }
  void Link(const std::string& target, const std::string& link) {
    fs::create_directories((root_ / link).parent_path());
    fs::create_directory_symlink(target, root_ / link);
  }
  std::string Root() const { return root_.string(); }

  // The info whose source is `source` and whose name contains `part`.
  static const ProbeInfo* FindInfo(const Detected& d, const std::string& source, const std::string& part) {
    for (const ProbeInfo& info : d.infos) {
      if (info.source == source && info.name.find(part) != std::string::npos) return &info;
    }
    return nullptr;
  }
  // The probe that has domain `domain`.
  static Probe* FindProbeWithDomain(const Detected& d, const std::string& domain) {
    for (const auto& p : d.probes) {
      if (Has(p->info().domains, domain)) return p.get();
    }
    return nullptr;
  }
  static Probe* FindProbeNamed(const Detected& d, const std::string& part) {
    for (const auto& p : d.probes) {
      if (p->info().name.find(part) != std::string::npos) return p.get();
    }
    return nullptr;
  }
  // Reads `probe` and returns the value of `domain`.
  static double ValueOf(Probe& probe, const std::string& domain) {
    auto values = probe.Read();
    EXPECT_TRUE(values.ok()) << values.status().message();
    if (!values.ok()) return -1;
    const auto& domains = probe.info().domains;
    EXPECT_EQ(values->size(), domains.size());
    const auto it = std::find(domains.begin(), domains.end(), domain);
    EXPECT_NE(it, domains.end()) << domain;
    if (it == domains.end() || static_cast<size_t>(it - domains.begin()) >= values->size()) return -1;
    return (*values)[static_cast<size_t>(it - domains.begin())];
  }

  fs::path root_;
};

// ---- RAPL -------------------------------------------------------------------

constexpr char kPkg[] = "class/powercap/intel-rapl:0/";
constexpr char kCore[] = "class/powercap/intel-rapl:0/intel-rapl:0:0/";

TEST_F(SysfsTree, RaplPackageAndCoreInJoules) {
  Write(std::string(kPkg) + "name", "package-0");
  Write(std::string(kPkg) + "energy_uj", "123456789");
  Write(std::string(kPkg) + "max_energy_range_uj", "262143328850");
  Write(std::string(kCore) + "name", "core");
  Write(std::string(kCore) + "energy_uj", "45678901");
  Write(std::string(kCore) + "max_energy_range_uj", "262143328850");
  Detected d;
  DetectRapl(Root(), d);
  const auto available = std::count_if(d.infos.begin(), d.infos.end(),
                                       [](const ProbeInfo& i) { return i.source == "rapl" && i.available; });
  EXPECT_EQ(available, 1);
  ASSERT_EQ(d.probes.size(), 1u);
  Probe& probe = *d.probes[0];
  const ProbeInfo& info = probe.info();
  EXPECT_EQ(info.source, "rapl");
  EXPECT_TRUE(info.available);
  EXPECT_TRUE(info.measured);
  EXPECT_EQ(info.kind, ReadingKind::kEnergyCounter);
  EXPECT_THAT(info.domains, Contains("package-0"));
  EXPECT_THAT(info.domains, Contains("core"));
  EXPECT_NEAR(ValueOf(probe, "package-0"), 123.456789, 1e-9);
  EXPECT_NEAR(ValueOf(probe, "core"), 45.678901, 1e-9);
  // Counters wrap at max_energy_range_uj.
  const auto& domains = info.domains;
  const size_t pkg = static_cast<size_t>(std::find(domains.begin(), domains.end(), "package-0") - domains.begin());
  EXPECT_NEAR(probe.WrapJ(pkg), 262143.328850, 1e-6);

  // A later read sees the new value of the same file.
  Write(std::string(kPkg) + "energy_uj", "124456789");
  EXPECT_NEAR(ValueOf(probe, "package-0"), 124.456789, 1e-9);
}

TEST_F(SysfsTree, RaplCounterWrapsBetweenReadsOfAnEnergyMonitor) {
  Write(std::string(kPkg) + "name", "package-0");
  Write(std::string(kPkg) + "energy_uj", "262000000");
  Write(std::string(kPkg) + "max_energy_range_uj", "262143328");
  Write(std::string(kCore) + "name", "core");
  Write(std::string(kCore) + "energy_uj", "1000000");
  Write(std::string(kCore) + "max_energy_range_uj", "262143328");
  Detected d;
  DetectRapl(Root(), d);
  ASSERT_EQ(d.probes.size(), 1u);
  const std::vector<std::string> domains = d.probes[0]->info().domains;
  const auto index = [&](const std::string& name) {
    return static_cast<size_t>(std::find(domains.begin(), domains.end(), name) - domains.begin());
  };
  ASSERT_LT(index("package-0"), domains.size());
  ASSERT_LT(index("core"), domains.size());

  double now_s = 0;
  EnergyMonitor monitor(std::move(d.probes[0]), 0, [&now_s] { return now_s; });
  ASSERT_TRUE(monitor.Start().ok());
  // 262.000000 J -> 262.100000 J -> wraps at 262.143328 J -> 0.200000 J -> 0.900000 J
  Write(std::string(kPkg) + "energy_uj", "262100000");
  Write(std::string(kCore) + "energy_uj", "2000000");
  now_s = 0.1;
  auto mid = monitor.EnergyJ();
  ASSERT_TRUE(mid.ok()) << mid.status().message();
  EXPECT_NEAR((*mid)[index("package-0")], 0.1, 1e-9);
  Write(std::string(kPkg) + "energy_uj", "200000");
  Write(std::string(kCore) + "energy_uj", "2500000");
  now_s = 0.2;
  auto wrapped = monitor.EnergyJ();
  ASSERT_TRUE(wrapped.ok()) << wrapped.status().message();
  EXPECT_NEAR((*wrapped)[index("package-0")], 0.143328 + 0.2, 1e-9);
  Write(std::string(kPkg) + "energy_uj", "900000");
  Write(std::string(kCore) + "energy_uj", "4000000");
  now_s = 0.3;
  monitor.Stop();
  auto energy = monitor.EnergyJ();
  ASSERT_TRUE(energy.ok()) << energy.status().message();
  EXPECT_NEAR((*energy)[index("package-0")], 0.143328 + 0.9, 1e-9);
  EXPECT_NEAR((*energy)[index("core")], 3.0, 1e-9);
}

TEST_F(SysfsTree, RaplWrapsWithOnlyStartAndStop) {
  Write(std::string(kPkg) + "name", "package-0");
  Write(std::string(kPkg) + "energy_uj", "262000000");
  Write(std::string(kPkg) + "max_energy_range_uj", "262143328");
  Detected d;
  DetectRapl(Root(), d);
  ASSERT_EQ(d.probes.size(), 1u);
  EnergyMonitor monitor(std::move(d.probes[0]));
  ASSERT_TRUE(monitor.Start().ok());
  Write(std::string(kPkg) + "energy_uj", "856672");
  monitor.Stop();
  auto energy = monitor.EnergyJ();
  ASSERT_TRUE(energy.ok()) << energy.status().message();
  ASSERT_EQ(energy->size(), 1u);
  EXPECT_NEAR((*energy)[0], 1.0, 1e-9);  // 0.143328 J to the wrap, 0.856672 J after
}

TEST_F(SysfsTree, RaplRealLayoutWithSymlinksCountsEachPackageOnce) {
  // As the kernel lays it out: class/powercap entries are symlinks into
  // devices/virtual/powercap, subzones appear both nested and at the top level,
  // and the control type "intel-rapl" has no energy_uj.
  const std::string dev = "devices/virtual/powercap/intel-rapl/";
  for (const std::string pkg : {"0", "1"}) {
    const std::string zone = dev + "intel-rapl:" + pkg + "/";
    Write(zone + "name", "package-" + pkg);
    Write(zone + "energy_uj", pkg == "0" ? "5000000" : "7000000");
    Write(zone + "max_energy_range_uj", "262143328850");
    Write(zone + "intel-rapl:" + pkg + ":0/name", "core");
    Write(zone + "intel-rapl:" + pkg + ":0/energy_uj", "1000000");
    Write(zone + "intel-rapl:" + pkg + ":0/max_energy_range_uj", "262143328850");
    Write(zone + "intel-rapl:" + pkg + ":1/name", "dram");
    Write(zone + "intel-rapl:" + pkg + ":1/energy_uj", "2000000");
    Write(zone + "intel-rapl:" + pkg + ":1/max_energy_range_uj", "65712999613");
    Link("../../" + zone, "class/powercap/intel-rapl:" + pkg);
    Link("../../" + zone + "intel-rapl:" + pkg + ":0", "class/powercap/intel-rapl:" + pkg + ":0");
    Link("../../" + zone + "intel-rapl:" + pkg + ":1", "class/powercap/intel-rapl:" + pkg + ":1");
  }
  Write(dev + "enabled", "1");
  Link("../../" + dev, "class/powercap/intel-rapl");

  Detected d;
  DetectRapl(Root(), d);
  ASSERT_EQ(d.probes.size(), 2u);  // one per package, never one per subzone
  size_t domains = 0;
  for (const auto& p : d.probes) {
    EXPECT_THAT(p->info().domains, Contains("core"));
    EXPECT_THAT(p->info().domains, Contains("dram"));
    domains += p->info().domains.size();
  }
  EXPECT_EQ(domains, 6u);
  Probe* p0 = FindProbeWithDomain(d, "package-0");
  Probe* p1 = FindProbeWithDomain(d, "package-1");
  ASSERT_NE(p0, nullptr);
  ASSERT_NE(p1, nullptr);
  EXPECT_NEAR(ValueOf(*p0, "package-0"), 5.0, 1e-9);
  EXPECT_NEAR(ValueOf(*p1, "package-1"), 7.0, 1e-9);
  EXPECT_NEAR(ValueOf(*p1, "dram"), 2.0, 1e-9);
}

TEST_F(SysfsTree, RaplEnergyReadableOnlyByRoot) {
  if (::geteuid() == 0) GTEST_SKIP() << "running as root: file permissions do not stop root's reads";
  Write(std::string(kPkg) + "name", "package-0");
  Write(std::string(kPkg) + "energy_uj", "123");
  Write(std::string(kPkg) + "max_energy_range_uj", "262143328850");
  fs::permissions(root_ / kPkg / "energy_uj", fs::perms::none);
  Detected d;
  DetectRapl(Root(), d);
  EXPECT_TRUE(d.probes.empty());
  const ProbeInfo* info = FindInfo(d, "rapl", "");
  ASSERT_NE(info, nullptr);
  EXPECT_FALSE(info->available);
  EXPECT_THAT(info->reason, AnyOf(HasSubstr("CVE-2020-8694"), HasSubstr("root")));
  EXPECT_FALSE(info->fix.empty());
}

TEST_F(SysfsTree, NoRaplIsReportedNotFatal) {
  Detected d;
  DetectRapl(Root(), d);
  EXPECT_TRUE(d.probes.empty());
  ASSERT_FALSE(d.infos.empty());
  for (const ProbeInfo& info : d.infos) {
    EXPECT_FALSE(info.available);
    EXPECT_FALSE(info.reason.empty());
  }
}

// ---- hwmon ------------------------------------------------------------------

void WriteBoard(const std::function<void(const std::string&, const std::string&)>& write) {
  // INA3221: three channels, voltage (mV) and current (mA), labelled rails.
  write("class/hwmon/hwmon0/name", "ina3221");
  write("class/hwmon/hwmon0/in1_label", "VDD_IN");
  write("class/hwmon/hwmon0/in1_input", "5080");
  write("class/hwmon/hwmon0/curr1_input", "1520");
  write("class/hwmon/hwmon0/in2_label", "VDD_CPU");
  write("class/hwmon/hwmon0/in2_input", "5072");
  write("class/hwmon/hwmon0/curr2_input", "610");
  // INA219 with the power register only (uW).
  write("class/hwmon/hwmon1/name", "ina219");
  write("class/hwmon/hwmon1/power1_input", "2345678");
  // INA219 with current and bus voltage only.
  write("class/hwmon/hwmon2/name", "ina219");
  write("class/hwmon/hwmon2/in1_input", "3312");
  write("class/hwmon/hwmon2/curr1_input", "456");
  // A temperature sensor: nothing to measure energy with.
  write("class/hwmon/hwmon3/name", "coretemp");
  write("class/hwmon/hwmon3/temp1_input", "45000");
  write("class/hwmon/hwmon3/temp1_label", "Package id 0");
}

TEST_F(SysfsTree, HwmonIna3221AndIna219InWatts) {
  WriteBoard([this](const std::string& p, const std::string& v) { Write(p, v); });
  Detected d;
  DetectHwmon(Root(), {}, d);
  ASSERT_EQ(d.probes.size(), 3u);
  for (const auto& p : d.probes) {
    EXPECT_EQ(p->info().source, "hwmon");
    EXPECT_TRUE(p->info().available);
    EXPECT_TRUE(p->info().measured);
    EXPECT_EQ(p->info().kind, ReadingKind::kPower);
    EXPECT_GT(p->info().update_interval_s, 0);
  }
  Probe* ina3221 = FindProbeWithDomain(d, "VDD_IN");
  ASSERT_NE(ina3221, nullptr);
  EXPECT_THAT(ina3221->info().domains, Contains("VDD_CPU"));
  EXPECT_NEAR(ValueOf(*ina3221, "VDD_IN"), 5080.0 * 1520.0 / 1e6, 1e-9);
  EXPECT_NEAR(ValueOf(*ina3221, "VDD_CPU"), 5072.0 * 610.0 / 1e6, 1e-9);

  Probe* power_only = FindProbeNamed(d, "hwmon1");
  ASSERT_NE(power_only, nullptr) << "probe names should say which hwmon device they read";
  auto watts = power_only->Read();
  ASSERT_TRUE(watts.ok()) << watts.status().message();
  ASSERT_EQ(watts->size(), 1u);
  EXPECT_NEAR(watts->front(), 2.345678, 1e-9);

  Probe* current_voltage = FindProbeNamed(d, "hwmon2");
  ASSERT_NE(current_voltage, nullptr);
  watts = current_voltage->Read();
  ASSERT_TRUE(watts.ok()) << watts.status().message();
  ASSERT_EQ(watts->size(), 1u);
  EXPECT_NEAR(watts->front(), 3312.0 * 456.0 / 1e6, 1e-9);

  EXPECT_EQ(FindProbeNamed(d, "hwmon3"), nullptr);  // coretemp
  const ProbeInfo* coretemp = FindInfo(d, "hwmon", "hwmon3");
  if (coretemp != nullptr) {
    EXPECT_FALSE(coretemp->available);
  }

  // Values are read afresh each time.
  Write("class/hwmon/hwmon1/power1_input", "1000000");
  EXPECT_NEAR(power_only->Read()->front(), 1.0, 1e-9);
}

TEST_F(SysfsTree, HwmonNestedRailIsNotCountedTwice) {
  WriteBoard([this](const std::string& p, const std::string& v) { Write(p, v); });
  Detected d;
  DetectHwmon(Root(), {{"VDD_CPU", "VDD_IN"}}, d);
  Probe* ina3221 = FindProbeWithDomain(d, "VDD_IN");
  ASSERT_NE(ina3221, nullptr);
  EXPECT_NEAR(ValueOf(*ina3221, "VDD_IN"), 5080.0 * 1520.0 / 1e6, 1e-9);
  const ProbeInfo& info = ina3221->info();
  // Either the child rail is left out, or the info says it is inside VDD_IN.
  const bool left_out = !Has(info.domains, "VDD_CPU");
  EXPECT_TRUE(left_out || info.reason.find("VDD_IN") != std::string::npos)
      << "domains keep VDD_CPU and the reason ('" << info.reason << "') does not say it is included in VDD_IN";
  // And no other probe reports VDD_CPU as a separate rail.
  for (const auto& p : d.probes) {
    if (p.get() != ina3221) {
      EXPECT_THAT(p->info().domains, Not(Contains("VDD_CPU")));
    }
  }
  EXPECT_EQ(d.probes.size(), 3u);  // the INA219s are unaffected
}

TEST_F(SysfsTree, HwmonThroughDeviceSymlinks) {
  // Real class/hwmon entries are symlinks into the device tree.
  const std::string dev = "devices/platform/3160000.i2c/i2c-0/0-0040/hwmon/hwmon4/";
  Write(dev + "name", "ina3221");
  Write(dev + "in1_label", "VDD_IN");
  Write(dev + "in1_input", "19000");
  Write(dev + "curr1_input", "500");
  Link("../../" + dev, "class/hwmon/hwmon4");
  Detected d;
  DetectHwmon(Root(), {}, d);
  Probe* probe = FindProbeWithDomain(d, "VDD_IN");
  ASSERT_NE(probe, nullptr);
  EXPECT_NEAR(ValueOf(*probe, "VDD_IN"), 9.5, 1e-9);
}

TEST_F(SysfsTree, NoHwmonPowerIsReportedNotFatal) {
  Write("class/hwmon/hwmon0/name", "coretemp");
  Write("class/hwmon/hwmon0/temp1_input", "45000");
  Detected d;
  DetectHwmon(Root(), {}, d);
  EXPECT_TRUE(d.probes.empty());
  for (const ProbeInfo& info : d.infos) EXPECT_FALSE(info.available);
}

// ---- Batteries --------------------------------------------------------------

TEST_F(SysfsTree, BatteriesUsableOnlyWhileDischargingWithAPowerReading) {
  Write("class/power_supply/AC/type", "Mains");
  Write("class/power_supply/AC/online", "1");
  Write("class/power_supply/BAT0/type", "Battery");
  Write("class/power_supply/BAT0/status", "Discharging");
  Write("class/power_supply/BAT0/power_now", "8123456");
  Write("class/power_supply/BAT0/energy_now", "41230000");
  Write("class/power_supply/BAT1/type", "Battery");
  Write("class/power_supply/BAT1/status", "Charging");
  Write("class/power_supply/BAT1/current_now", "1500000");
  Write("class/power_supply/BAT1/voltage_now", "12300000");
  Write("class/power_supply/BAT2/type", "Battery");
  Write("class/power_supply/BAT2/status", "Discharging");
  Write("class/power_supply/BAT2/energy_now", "41230000");
  Detected d;
  DetectBatteries(Root(), d);

  ASSERT_EQ(d.probes.size(), 1u);
  const ProbeInfo& bat0 = d.probes[0]->info();
  EXPECT_EQ(bat0.source, "battery");
  EXPECT_TRUE(bat0.available);
  EXPECT_EQ(bat0.kind, ReadingKind::kPower);
  EXPECT_THAT(bat0.name, HasSubstr("BAT0"));
  auto watts = d.probes[0]->Read();
  ASSERT_TRUE(watts.ok()) << watts.status().message();
  ASSERT_EQ(watts->size(), 1u);
  EXPECT_NEAR(watts->front(), 8.123456, 1e-9);

  const ProbeInfo* charging = FindInfo(d, "battery", "BAT1");
  ASSERT_NE(charging, nullptr);
  EXPECT_FALSE(charging->available);
  EXPECT_THAT(Lower(charging->reason), HasSubstr("charging"));

  const ProbeInfo* no_power = FindInfo(d, "battery", "BAT2");
  ASSERT_NE(no_power, nullptr);
  EXPECT_FALSE(no_power->available);
  EXPECT_THAT(no_power->reason, AnyOf(HasSubstr("power_now"), HasSubstr("current_now")));

  const ProbeInfo* mains = FindInfo(d, "battery", "AC");
  if (mains != nullptr) {
    EXPECT_FALSE(mains->available);
  }
}

TEST_F(SysfsTree, DischargingBatteryFromCurrentAndVoltage) {
  Write("class/power_supply/BAT0/type", "Battery");
  Write("class/power_supply/BAT0/status", "Discharging");
  Write("class/power_supply/BAT0/current_now", "1500000");   // uA
  Write("class/power_supply/BAT0/voltage_now", "12300000");  // uV
  Write("class/power_supply/BAT0/charge_now", "3000000");    // uAh
  Detected d;
  DetectBatteries(Root(), d);
  ASSERT_EQ(d.probes.size(), 1u);
  auto watts = d.probes[0]->Read();
  ASSERT_TRUE(watts.ok()) << watts.status().message();
  ASSERT_EQ(watts->size(), 1u);
  EXPECT_NEAR(watts->front(), 1.5 * 12.3, 1e-9);
}

TEST_F(SysfsTree, BatteryThroughDeviceSymlink) {
  const std::string dev = "devices/LNXSYSTM:00/LNXSYBUS:00/PNP0C0A:00/power_supply/BAT0/";
  Write(dev + "type", "Battery");
  Write(dev + "status", "Discharging");
  Write(dev + "power_now", "5000000");
  Link("../../" + dev, "class/power_supply/BAT0");
  Detected d;
  DetectBatteries(Root(), d);
  ASSERT_EQ(d.probes.size(), 1u);
  EXPECT_NEAR(d.probes[0]->Read()->front(), 5.0, 1e-9);
}

// ---- Reading attributes -----------------------------------------------------

TEST_F(SysfsTree, ReadSysfsTrimsAndNamesThePathOnError) {
  Write("class/thing/value", "42000");
  auto text = ReadSysfs((root_ / "class/thing/value").string());
  ASSERT_TRUE(text.ok()) << text.status().message();
  EXPECT_EQ(text->find('\n'), std::string::npos);
  auto number = ReadSysfsNumber((root_ / "class/thing/value").string());
  ASSERT_TRUE(number.ok()) << number.status().message();
  EXPECT_DOUBLE_EQ(*number, 42000);

  const std::string missing = (root_ / "class/thing/missing").string();
  auto absent = ReadSysfs(missing);
  ASSERT_FALSE(absent.ok());
  EXPECT_THAT(absent.status().message(), HasSubstr(missing));
  EXPECT_THAT(absent.status().message(), HasSubstr("No such file"));

  Write("class/thing/word", "hello");
  auto word = ReadSysfsNumber((root_ / "class/thing/word").string());
  ASSERT_FALSE(word.ok());
  EXPECT_THAT(word.status().message(), HasSubstr("word"));
}

// ---- The perf power PMU and the config ----------------------------------------

TEST_F(SysfsTree, PerfPowerPmuIsListedWithItsEvents) {
  Write("bus/event_source/devices/power/type", "23");
  Write("bus/event_source/devices/power/events/energy-pkg", "event=0x02");
  Write("bus/event_source/devices/power/events/energy-pkg.unit", "Joules");
  Detected d;
  DetectRapl(Root(), d);
  const ProbeInfo* pmu = FindInfo(d, "rapl", "perf power PMU");
  ASSERT_NE(pmu, nullptr);
  EXPECT_THAT(pmu->domains, ::testing::ElementsAre("energy-pkg"));
}

TEST_F(SysfsTree, ConfigPointsEveryReaderAtTheTree) {
  Write("class/hwmon/hwmon0/name", "ina219");
  Write("class/hwmon/hwmon0/power1_input", "1000000");
  const fs::path config = root_ / "edgecost.toml";
  std::ofstream(config) << "[probes]\nsysfs_root = \"" << Root() << "\"\n"
                        << "nested_rails = { VDD_CPU = \"VDD_IN\" }\n[probes.estimate]\nidle_w = 3.5\n";
  auto loaded = LoadProbesConfig(config.string());
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  EXPECT_EQ(loaded->sys_root, Root());
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

}  // namespace
}  // namespace edgecost::probes
