#include "bench/probes_bench.h"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "probes/registry.h"

namespace edgecost::probes {
namespace {

namespace fs = std::filesystem;

double CpuTimeS() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Mean seconds per call of `read` over about half a second.
template <typename F>
double PerCallS(F&& read) {
  int calls = 0;
  const double start = SteadyNowS();
  while (SteadyNowS() - start < 0.5) {
    for (int i = 0; i < 100; ++i) read();
    calls += 100;
  }
  return (SteadyNowS() - start) / calls;
}

// A RAPL package and an INA219 in a temporary tree: the same files, in
// tmpfs-like storage instead of a driver, since this machine has neither.
fs::path MakeTree() {
  const fs::path root = fs::temp_directory_path() / ("edgecost_probe_bench_" + std::to_string(::getpid()));
  fs::create_directories(root / "class/powercap/intel-rapl:0");
  fs::create_directories(root / "class/hwmon/hwmon0");
  std::ofstream(root / "class/powercap/intel-rapl:0/name") << "package-0\n";
  std::ofstream(root / "class/powercap/intel-rapl:0/energy_uj") << "123456789\n";
  std::ofstream(root / "class/powercap/intel-rapl:0/max_energy_range_uj") << "262143328850\n";
  std::ofstream(root / "class/hwmon/hwmon0/name") << "ina219\n";
  std::ofstream(root / "class/hwmon/hwmon0/power1_input") << "4200000\n";
  return root;
}

}  // namespace

Status RunProbesBenchmark(std::ostream& out) {
  char line[256];
  out << "Probe benchmark (targets: a sysfs counter read under 5 us; a 1 kHz sampling thread under 2% of a core)\n\n";
  // A real sysfs attribute, kept open and re-read as the probes do.
  for (const char* path : {"/sys/class/powercap/intel-rapl:0/energy_uj", "/sys/devices/system/cpu/online"}) {
    const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    char text[64];
    const double s = PerCallS([fd, &text] { (void)!::pread(fd, text, sizeof text, 0); });
    ::close(fd);
    std::snprintf(line, sizeof line, "%-52s %8.2f us per read\n", (std::string("sysfs pread ") + path).c_str(),
                  s * 1e6);
    out << line;
    break;
  }
  const fs::path root = MakeTree();
  Detected detected;
  DetectRapl(root.string(), detected);
  DetectHwmon(root.string(), {}, detected);
  if (detected.probes.size() != 2) return Internal("the benchmark's fake tree was not detected");
  Probe& rapl = *detected.probes[0];
  const double rapl_s = PerCallS([&rapl] { (void)rapl.Read(); });
  std::snprintf(line, sizeof line, "%-52s %8.2f us per read\n", "RAPL probe read (fake tree, 1 domain)", rapl_s * 1e6);
  out << line;

  // The sampling thread at 1 kHz on the hwmon probe, next to a thread that only
  // wakes at 1 kHz: the floor any sampler pays in wake-ups on this kernel.
  auto cpu_share = [](const std::function<void()>& run) {
    const double cpu = CpuTimeS();
    const double wall = SteadyNowS();
    run();
    return (CpuTimeS() - cpu) / (SteadyNowS() - wall);
  };
  const double idle_share = cpu_share([] {
    std::thread ticker([] {
      auto next = std::chrono::steady_clock::now();
      for (int i = 0; i < 2000; ++i) std::this_thread::sleep_until(next += std::chrono::milliseconds(1));
    });
    ticker.join();
  });
  EnergyMonitor monitor(std::move(detected.probes[1]), 1e-3);
  Status started;
  const double sampler_share = cpu_share([&] {
    started = monitor.Start();
    std::this_thread::sleep_for(std::chrono::seconds(2));
    monitor.Stop();
  });
  EC_RETURN_IF_ERROR(started);
  EC_ASSIGN_OR_RETURN(std::vector<double> energy, monitor.EnergyJ());
  std::snprintf(line, sizeof line, "%-52s %8.2f %% of a core\n", "1 kHz wake-up only (the floor)", 100 * idle_share);
  out << line;
  std::snprintf(line, sizeof line, "%-52s %8.2f %% of a core (%.2fx the floor; %.2f J at 4.2 W over 2 s)\n",
                "1 kHz sampling thread (hwmon power, fake tree)", 100 * sampler_share,
                sampler_share / std::max(idle_share, 1e-9), energy.front());
  out << line;
  std::error_code ec;
  fs::remove_all(root, ec);
  return Status::Ok();
}

}  // namespace edgecost::probes
