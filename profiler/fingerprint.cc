#include "profiler/fingerprint.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/utsname.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/hash.h"
#include "kernels/layers.h"

namespace edgecost::profiler {
namespace {

std::string ReadLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

uint64_t ReadNumber(const std::string& path) { return std::strtoull(ReadLine(path).c_str(), nullptr, 10); }

// "Field : value" from a /proc file such as cpuinfo or meminfo.
std::string ProcField(const std::string& path, const std::string& field) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field, 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string value = line.substr(colon + 1);
    value.erase(0, value.find_first_not_of(" \t"));
    return value;
  }
  return "";
}

// "0-3,6" -> 5
uint32_t CountCpuList(const std::string& list) {
  uint32_t count = 0;
  std::stringstream in(list);
  std::string range;
  while (std::getline(in, range, ',')) {
    if (range.empty()) continue;
    const size_t dash = range.find('-');
    const int first = std::atoi(range.c_str());
    const int last = dash == std::string::npos ? first : std::atoi(range.c_str() + dash + 1);
    if (last >= first) count += static_cast<uint32_t>(last - first + 1);
  }
  return count;
}

std::string StorageDevice(const SystemRoots& roots, const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return "unknown";
  const std::string id = std::to_string(major(st.st_dev)) + ":" + std::to_string(minor(st.st_dev));
  std::error_code ec;
  const auto target = std::filesystem::read_symlink(roots.sys + "/dev/block/" + id, ec);
  return ec ? id : target.filename().string() + " (" + id + ")";
}

}  // namespace

SystemRoots SystemRoots::FromEnvironment() {
  SystemRoots roots;
  if (const char* sys = std::getenv("EDGECOST_SYSFS_ROOT"); sys && *sys) roots.sys = sys;
  return roots;
}

v1::Fingerprint ReadFingerprint(const SystemRoots& roots, const std::string& dnnl_isa, const std::string& paging_dir) {
  v1::Fingerprint f;
  std::string model = ProcField(roots.proc + "/cpuinfo", "model name");
  if (model.empty()) model = ProcField(roots.proc + "/cpuinfo", "Model");  // ARM boards
  if (model.empty()) model = ProcField(roots.proc + "/cpuinfo", "CPU part");
  f.set_cpu_model(model.empty() ? "unknown" : model);
  f.set_online_cores(CountCpuList(ReadLine(roots.sys + "/devices/system/cpu/online")));
  const std::string cpufreq = roots.sys + "/devices/system/cpu/cpu0/cpufreq/";
  f.set_cpu_min_freq_khz(ReadNumber(cpufreq + "cpuinfo_min_freq"));
  f.set_cpu_max_freq_khz(ReadNumber(cpufreq + "cpuinfo_max_freq"));
  f.set_cpu_governor(ReadLine(cpufreq + "scaling_governor"));
  f.set_memory_bytes(std::strtoull(ProcField(roots.proc + "/meminfo", "MemTotal").c_str(), nullptr, 10) * 1024);
  std::string release = ReadLine(roots.proc + "/sys/kernel/osrelease");
  if (release.empty()) {
    struct utsname names {};
    if (::uname(&names) == 0) release = names.release;
  }
  f.set_kernel_release(release);
  f.set_dnnl_isa(dnnl_isa);
  f.set_storage_device(StorageDevice(roots, paging_dir));
  f.set_kernels_revision(kernels::kKernelsRevision);
  f.set_hash(FingerprintHash(f));
  return f;
}

std::string FingerprintHash(const v1::Fingerprint& fingerprint) {
  v1::Fingerprint copy = fingerprint;
  copy.clear_hash();
  std::string bytes;
  copy.SerializeToString(&bytes);  // field order is fixed; no maps in Fingerprint
  return Fnv1aHex(bytes);
}

}  // namespace edgecost::profiler
