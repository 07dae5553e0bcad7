// Energy per domain: each domain's idle power measured before the run, each
// op's energy and dynamic energy per domain, nested domains (RAPL's core inside
// its package, a rail inside another) kept out of the totals. On fake sysfs
// trees (RAPL package, core and dram; an hwmon chip with two rails and one
// nested) and the loopback SCPI meter, whose per-domain powers are known.
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "graph/derive.h"
#include "probes/scpi_meter.h"
#include "probes/sysfs.h"
#include "profiler/measure.h"
#include "profiler/power_model.h"
#include "profiler/probe_meter.h"
#include "profiler/profile.h"
#include "tests/loopback_meter.h"
#include "tests/temp_dir.h"

namespace edgecost::profiler {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;

// Atomic: a power meter's sampling thread stamps its samples with it.
class FakeClock : public Clock {
 public:
  double NowS() override { return now_s; }
  std::atomic<double> now_s = 1000.0;
};

// Energy counter files (microjoules) of a fake tree, each domain at its idle
// or its load power, advanced with a fake clock.
class FakeEnergyFiles {
 public:
  void Add(const fs::path& file, double idle_w, double load_w) {
    domains_.push_back({file, idle_w, load_w, 1000.0});
    Write(domains_.back());
  }
  void Advance(FakeClock& clock, double seconds, bool load) {
    clock.now_s += seconds;
    for (Domain& d : domains_) {
      d.energy_j += (load ? d.load_w : d.idle_w) * seconds;
      Write(d);
    }
  }

 private:
  struct Domain {
    fs::path file;
    double idle_w, load_w, energy_j;
  };
  // In place at a fixed width, as sysfs changes a value: a reader never sees the file empty.
  static void Write(const Domain& d) {
    char text[32];
    const int n = std::snprintf(text, sizeof text, "%020lld\n", static_cast<long long>(std::llround(d.energy_j * 1e6)));
    const int fd = ::open(d.file.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0) << d.file;
    EXPECT_EQ(::pwrite(fd, text, static_cast<size_t>(n), 0), n);
    ::close(fd);
  }
  std::vector<Domain> domains_;
};

const v1::DomainEnergy* Find(const std::vector<v1::DomainEnergy>& domains, const std::string& name) {
  for (const v1::DomainEnergy& d : domains) {
    if (d.domain() == name) return &d;
  }
  return nullptr;
}

class Domains : public edgecost::testing::TempDirTest {
 protected:
  void WriteText(const std::string& relative, const std::string& text) {
    fs::create_directories((dir_ / relative).parent_path());
    std::ofstream(dir_ / relative) << text << "\n";
  }

  // The meter on the first probe found, its idle window run on the fake clock.
  Result<std::unique_ptr<ProbeMeter>> StartMeter(std::unique_ptr<probes::Probe> probe) {
    IdleTiming timing;
    timing.clock = [this] { return clock_.now_s.load(); };
    timing.wait = [this](double seconds) { files_.Advance(clock_, seconds, /*load=*/false); };
    return ProbeMeter::Start(std::move(probe), /*idle_window_s=*/2.0, timing);
  }

  // Ops of 10 ms at load, back to back, on the fake clock.
  Result<Measurement> MeasureLoad(EnergyMeter& meter) {
    MeasureOptions options;
    options.min_window_s = 0.5;
    options.min_sensor_updates = 1;
    return Measure([this] { files_.Advance(clock_, 0.01, /*load=*/true); }, clock_, &meter, options);
  }

  FakeClock clock_;
  FakeEnergyFiles files_;
};

TEST_F(Domains, RaplPackageCoreAndDramEachRecoverTheirIdleAndLoadPower) {
  // package-0 3 W idle, 9 W busy; core (inside the package) 0.5 W and 5 W; dram 1 W and 2 W.
  const std::string pkg = "class/powercap/intel-rapl:0/";
  WriteText(pkg + "name", "package-0");
  WriteText(pkg + "max_energy_range_uj", "262143328850");
  WriteText(pkg + "intel-rapl:0:0/name", "core");
  WriteText(pkg + "intel-rapl:0:0/max_energy_range_uj", "262143328850");
  WriteText(pkg + "intel-rapl:0:1/name", "dram");
  WriteText(pkg + "intel-rapl:0:1/max_energy_range_uj", "65712999613");
  files_.Add(dir_ / pkg / "energy_uj", 3.0, 9.0);
  files_.Add(dir_ / pkg / "intel-rapl:0:0/energy_uj", 0.5, 5.0);
  files_.Add(dir_ / pkg / "intel-rapl:0:1/energy_uj", 1.0, 2.0);
  probes::Detected detected;
  probes::DetectRapl(dir_.string(), detected);
  ASSERT_EQ(detected.probes.size(), 1u);
  EXPECT_THAT(detected.probes[0]->info().domains, ElementsAre("package-0", "core", "dram"));
  EXPECT_THAT(detected.probes[0]->info().inside, ElementsAre("", "package-0", ""));

  auto meter = StartMeter(std::move(detected.probes[0]));
  ASSERT_TRUE(meter.ok()) << meter.status().message();
  // Idle: package and dram, not the core a second time.
  EXPECT_NEAR((*meter)->IdlePowerW(), 4.0, 1e-6);
  const std::vector<MeterDomain> domains = (*meter)->Domains();
  ASSERT_EQ(domains.size(), 3u);
  EXPECT_NEAR(domains[0].idle_power_w, 3.0, 1e-6);
  EXPECT_NEAR(domains[1].idle_power_w, 0.5, 1e-6);
  EXPECT_EQ(domains[1].inside, "package-0");
  EXPECT_NEAR(domains[2].idle_power_w, 1.0, 1e-6);

  auto m = MeasureLoad(**meter);
  ASSERT_TRUE(m.ok()) << m.status().message();
  ASSERT_EQ(m->domains.size(), 3u);
  const std::map<std::string, std::pair<double, double>> expected = {
      {"package-0", {3.0, 9.0}}, {"core", {0.5, 5.0}}, {"dram", {1.0, 2.0}}};
  for (const auto& [name, powers] : expected) {
    SCOPED_TRACE(name);
    const v1::DomainEnergy* d = Find(m->domains, name);
    ASSERT_NE(d, nullptr);
    EXPECT_NEAR(d->idle_power_w(), powers.first, 1e-6);
    EXPECT_NEAR(d->energy_j(), powers.second * 0.01, 1e-7);
    EXPECT_NEAR(d->dynamic_energy_j(), (powers.second - powers.first) * 0.01, 1e-7);
    EXPECT_EQ(d->inside(), name == "core" ? "package-0" : "");
  }
  // The totals are the top-level domains' sums: the core is inside the package already.
  EXPECT_NEAR(m->energy_j, (9.0 + 2.0) * 0.01, 1e-7);
  EXPECT_NEAR(m->dynamic_energy_j, (9.0 - 3.0 + 2.0 - 1.0) * 0.01, 1e-7);
  EXPECT_NEAR(m->energy_j, Find(m->domains, "package-0")->energy_j() + Find(m->domains, "dram")->energy_j(), 1e-12);
}

TEST_F(Domains, HwmonEnergyRailsEachRecoverTheirIdleAndLoadPower) {
  // An INA3221-like chip: two top-level rails, and VDD_GPU, which the config
  // says VDD_SOC already includes.
  WriteText("class/hwmon/hwmon0/name", "ina3221");
  WriteText("class/hwmon/hwmon0/in1_label", "VDD_CPU");
  WriteText("class/hwmon/hwmon0/in2_label", "VDD_SOC");
  WriteText("class/hwmon/hwmon0/in3_label", "VDD_GPU");
  files_.Add(dir_ / "class/hwmon/hwmon0/energy1_input", 0.8, 4.8);
  files_.Add(dir_ / "class/hwmon/hwmon0/energy2_input", 1.2, 1.7);
  files_.Add(dir_ / "class/hwmon/hwmon0/energy3_input", 0.3, 0.6);
  probes::Detected detected;
  probes::DetectHwmon(dir_.string(), {{"VDD_GPU", "VDD_SOC"}}, detected);
  ASSERT_EQ(detected.probes.size(), 1u);
  EXPECT_THAT(detected.probes[0]->info().domains, ElementsAre("VDD_CPU", "VDD_SOC", "VDD_GPU"));
  EXPECT_THAT(detected.probes[0]->info().inside, ElementsAre("", "", "VDD_SOC"));
  EXPECT_THAT(detected.probes[0]->info().reason, ::testing::HasSubstr("VDD_GPU (inside VDD_SOC)"));

  auto meter = StartMeter(std::move(detected.probes[0]));
  ASSERT_TRUE(meter.ok()) << meter.status().message();
  EXPECT_NEAR((*meter)->IdlePowerW(), 2.0, 1e-6);  // VDD_CPU + VDD_SOC; VDD_GPU is inside VDD_SOC
  auto m = MeasureLoad(**meter);
  ASSERT_TRUE(m.ok()) << m.status().message();
  ASSERT_EQ(m->domains.size(), 3u);
  const v1::DomainEnergy* cpu = Find(m->domains, "VDD_CPU");
  const v1::DomainEnergy* soc = Find(m->domains, "VDD_SOC");
  const v1::DomainEnergy* gpu = Find(m->domains, "VDD_GPU");
  ASSERT_TRUE(cpu && soc && gpu);
  EXPECT_NEAR(cpu->idle_power_w(), 0.8, 1e-6);
  EXPECT_NEAR(cpu->energy_j(), 4.8 * 0.01, 1e-7);
  EXPECT_NEAR(cpu->dynamic_energy_j(), 4.0 * 0.01, 1e-7);
  EXPECT_NEAR(soc->idle_power_w(), 1.2, 1e-6);
  EXPECT_NEAR(soc->energy_j(), 1.7 * 0.01, 1e-7);
  EXPECT_NEAR(soc->dynamic_energy_j(), 0.5 * 0.01, 1e-7);
  EXPECT_NEAR(gpu->idle_power_w(), 0.3, 1e-6);
  EXPECT_NEAR(gpu->energy_j(), 0.6 * 0.01, 1e-7);
  EXPECT_NEAR(gpu->dynamic_energy_j(), 0.3 * 0.01, 1e-7);
  EXPECT_TRUE(cpu->inside().empty());
  EXPECT_EQ(gpu->inside(), "VDD_SOC");
  EXPECT_NEAR(m->energy_j, cpu->energy_j() + soc->energy_j(), 1e-12);
  EXPECT_NEAR(m->dynamic_energy_j, cpu->dynamic_energy_j() + soc->dynamic_energy_j(), 1e-12);
}

// A sampled power meter: idle 4 W while the meter measures idle power, then 11 W
// for the whole window (power constant within each phase, so the integral is exact).
TEST_F(Domains, ALoopbackMeterRecoversItsIdleAndLoadPower) {
  std::atomic<double> watts{4.0};
  std::atomic<int> answered_at_load{0};
  edgecost::testing::LoopbackMeter loopback([&](const std::string& query, int) -> std::optional<std::string> {
    if (query != "MEAS:POW?") return std::string("-113,\"Undefined header\"\n");
    const double w = watts.load();
    if (w > 10) ++answered_at_load;
    return std::to_string(w) + "\n";
  });
  probes::MeterConfig config = loopback.Config();
  config.update_interval_s = 0.002;
  auto probe = probes::ConnectMeter(config);
  ASSERT_TRUE(probe.ok()) << probe.status().message();
  // The meter's samples are stamped by the fake clock, which moves only when the test says.
  IdleTiming timing;
  timing.clock = [this] { return clock_.now_s.load(); };
  timing.wait = [this](double seconds) { clock_.now_s += seconds; };
  auto meter = ProbeMeter::Start(std::move(*probe), /*idle_window_s=*/2.0, timing);
  ASSERT_TRUE(meter.ok()) << meter.status().message();
  EXPECT_NEAR((*meter)->IdlePowerW(), 4.0, 1e-6);
  ASSERT_EQ((*meter)->Domains().size(), 1u);
  EXPECT_EQ((*meter)->Domains()[0].name, "loopback");

  // Load from now on; the window starts once the sampler has seen it twice.
  watts = 11.0;
  while (answered_at_load.load() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  MeasureOptions options;
  options.min_window_s = 0.5;
  options.min_sensor_updates = 1;
  auto m = Measure([this] { clock_.now_s += 0.01; }, clock_, meter->get(), options);
  ASSERT_TRUE(m.ok()) << m.status().message();
  ASSERT_EQ(m->domains.size(), 1u);
  const v1::DomainEnergy& d = m->domains[0];
  EXPECT_NEAR(d.idle_power_w(), 4.0, 1e-6);
  EXPECT_NEAR(d.energy_j(), 11.0 * 0.01, 1e-9);
  EXPECT_NEAR(d.dynamic_energy_j(), 7.0 * 0.01, 1e-9);
  EXPECT_NEAR(m->energy_j, d.energy_j(), 1e-12);
  EXPECT_NEAR(m->dynamic_energy_j, d.dynamic_energy_j(), 1e-12);
}

// A watch that sees no interference: these tests are about energy, not the machine's load.
class QuietWatch : public InterferenceWatch {
 public:
  Status BeginWindow() override { return Status::Ok(); }
  Result<double> WaitSinceLastS() override { return 0.0; }
  Result<v1::Interference> EndWindow(double) override { return v1::Interference(); }
};

class ProfileDomains : public Domains {
 protected:
  void SetUp() override {
    Domains::SetUp();
    db_ = std::make_unique<costdb::CostDb>(costdb::CostDb::Open((dir_ / "costs.db").string()).value());
    v1::Device device;
    device.set_name("test-device");
    device.set_kind(v1::Device::KIND_MEASURED);
    device.mutable_fingerprint()->set_hash("fp");
    ASSERT_TRUE(db_->UpsertDevice(device).ok());
    options_.threads = 1;
    options_.measure.min_window_s = 0.002;
    options_.measure.warmup_runs = 1;
    options_.measure.min_repetitions = 2;
    options_.measure.min_sensor_updates = 1;
    options_.make_watch = [] { return std::make_unique<QuietWatch>(); };
    options_.retry_pause_s = 0;
  }
  void TearDown() override {
    db_.reset();
    Domains::TearDown();
  }
  Result<ProfileSummary> Profile(EnergyMeter& meter) {
    auto graph = graph::ZooTrainingGraph("linear", 1, graph::Derivation::kExact);
    if (!graph.ok()) return graph.status();
    auto run = db_->BeginRun("fp", kMeasuredSource);
    if (!run.ok()) return run.status();
    return ProfileGraph(*db_, backend_, *graph, "fp", *run, &meter, options_);
  }

  std::unique_ptr<costdb::CostDb> db_;
  kernels::Backend backend_;
  ProfileOptions options_;
};

// Every op stores its energy per domain (in the cost and in op_domain_energy),
// its totals the sums over the top-level domains; an estimate stores none.
TEST_F(ProfileDomains, EveryOpStoresItsDomainsAndAnEstimateStoresNone) {
  const std::string pkg = "class/powercap/intel-rapl:0/";
  WriteText(pkg + "name", "package-0");
  WriteText(pkg + "intel-rapl:0:0/name", "core");
  WriteText(pkg + "intel-rapl:0:1/name", "dram");
  files_.Add(dir_ / pkg / "energy_uj", 3.0, 3.0);
  files_.Add(dir_ / pkg / "intel-rapl:0:0/energy_uj", 0.5, 0.5);
  files_.Add(dir_ / pkg / "intel-rapl:0:1/energy_uj", 1.0, 1.0);
  probes::Detected detected;
  probes::DetectRapl(dir_.string(), detected);
  ASSERT_EQ(detected.probes.size(), 1u);
  // The counters advance in real time, as RAPL's do, while the ops run.
  std::atomic<bool> running{true};
  std::thread ticking([&] {
    FakeClock unused;
    while (running) {
      files_.Advance(unused, 0.0005, false);
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
  });
  auto meter = ProbeMeter::Start(std::move(detected.probes[0]), /*idle_window_s=*/0.02);
  ASSERT_TRUE(meter.ok()) << meter.status().message();
  auto summary = Profile(**meter);
  running = false;
  ticking.join();
  ASSERT_TRUE(summary.ok()) << summary.status().message();
  ASSERT_GT(summary->measured, 0);

  auto costs = db_->ListOpCosts("fp");
  ASSERT_TRUE(costs.ok());
  ASSERT_FALSE(costs->empty());
  for (const v1::OpCost& cost : *costs) {
    SCOPED_TRACE(cost.signature().key());
    ASSERT_EQ(cost.domains_size(), 3);
    const std::vector<v1::DomainEnergy> domains(cost.domains().begin(), cost.domains().end());
    const v1::DomainEnergy* package = Find(domains, "package-0");
    const v1::DomainEnergy* core = Find(domains, "core");
    const v1::DomainEnergy* dram = Find(domains, "dram");
    ASSERT_TRUE(package && core && dram);
    EXPECT_EQ(core->inside(), "package-0");
    EXPECT_NEAR(cost.energy_j(), package->energy_j() + dram->energy_j(), 1e-9 * (1 + cost.energy_j()));
    EXPECT_NEAR(cost.dynamic_energy_j(), package->dynamic_energy_j() + dram->dynamic_energy_j(),
                1e-9 * (1 + std::fabs(cost.dynamic_energy_j())));
    EXPECT_NEAR(cost.idle_power_w(), package->idle_power_w() + dram->idle_power_w(), 1e-9);
    auto rows = db_->ListOpDomainEnergy("fp", cost.signature().key());
    ASSERT_TRUE(rows.ok()) << rows.status().message();
    ASSERT_EQ(rows->size(), 3u);  // ordered by domain name
    EXPECT_EQ((*rows)[0].domain(), "core");
    EXPECT_EQ((*rows)[0].inside(), "package-0");
    EXPECT_DOUBLE_EQ((*rows)[2].energy_j(), package->energy_j());
  }
  // The measured table shows each node's domains, as GetCostTable sends them.
  auto graph = graph::ZooTrainingGraph("linear", 1, graph::Derivation::kExact);
  ASSERT_TRUE(graph.ok());
  v1::PagingCost paging;
  paging.set_storage_path("/var/tmp");
  paging.set_page_in_throughput_bytes_per_s(1e9);
  paging.set_page_out_throughput_bytes_per_s(1e9);
  ASSERT_TRUE(db_->PutPagingCost("fp", paging).ok());
  auto table = MeasuredCostTable(*db_, *graph, "test-device", "fp", 1);
  ASSERT_TRUE(table.ok()) << table.status().message();
  ASSERT_TRUE(db_->PutCostTable(*table).ok());
  auto loaded =
      LoadMeasuredCostTable(*db_, {.model_or_file = "linear", .derivation = graph::Derivation::kExact}, "test-device");
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  for (const v1::CostTable* t : {&*table, &*loaded}) {
    int with_domains = 0;
    for (const v1::NodeCost& c : t->costs()) {
      if (c.op_key().empty()) continue;
      EXPECT_EQ(c.domains_size(), 3) << c.op_key();
      with_domains += c.domains_size() > 0;
    }
    EXPECT_GT(with_domains, 0);
  }

  // Measured again by the power model: the domains go, in the cost and in the table.
  options_.force = true;
  EstimatedMeter estimate{probes::EstimateModel{}};
  auto again = Profile(estimate);
  ASSERT_TRUE(again.ok()) << again.status().message();
  costs = db_->ListOpCosts("fp");
  ASSERT_TRUE(costs.ok());
  for (const v1::OpCost& cost : *costs) {
    EXPECT_EQ(cost.domains_size(), 0) << cost.signature().key();
    EXPECT_TRUE(db_->ListOpDomainEnergy("fp", cost.signature().key())->empty());
  }
}

}  // namespace
}  // namespace edgecost::profiler
