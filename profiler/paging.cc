#include "profiler/paging.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>

#include "base/clock.h"
#include "base/stats.h"

namespace edgecost::profiler {
namespace {

constexpr size_t kAlignment = 4096;  // O_DIRECT needs block-aligned buffers and sizes

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

Status Errno(const std::string& what, const std::string& path) {
  return Status(errno == EACCES || errno == EROFS ? ErrorCode::kPermissionDenied : ErrorCode::kUnavailable,
                what + " " + path + ": " + std::strerror(errno) + "; choose another --paging-dir");
}

Result<double> PageOut(const std::string& path, const char* data, size_t bytes) {
  const double start = SteadyNowS();
  const int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600);
  if (fd < 0) return Errno("cannot create", path);
  size_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::write(fd, data + done, bytes - done);
    if (n < 0) {
      ::close(fd);
      return Errno("cannot write", path);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    ::close(fd);
    return Errno("cannot fsync", path);
  }
  ::close(fd);
  return SteadyNowS() - start;
}

Result<double> PageIn(const std::string& path, char* buffer, size_t bytes, bool* direct) {
  const double start = SteadyNowS();
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  *direct = fd >= 0;
  if (fd < 0) {  // tmpfs and some filesystems refuse O_DIRECT: drop the cached pages instead
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Errno("cannot open", path);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  }
  const size_t aligned = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  size_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::read(fd, buffer + done, aligned - done);
    if (n < 0) {
      ::close(fd);
      return Errno("cannot read", path);
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return SteadyNowS() - start;
}

}  // namespace

void FitAffine(const std::vector<uint64_t>& bytes, const std::vector<double>& seconds, double* latency_s,
               double* throughput_bytes_per_s) {
  const double n = static_cast<double>(bytes.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    const double x = static_cast<double>(bytes[i]);
    sx += x;
    sy += seconds[i];
    sxx += x * x;
    sxy += x * seconds[i];
  }
  const double denominator = n * sxx - sx * sx;
  double slope = denominator > 0 ? (n * sxy - sx * sy) / denominator : 0;
  double intercept = (sy - slope * sx) / n;
  if (intercept < 0 || slope <= 0) {  // noise at small sizes: refit through the origin
    intercept = 0;
    slope = sxx > 0 ? sxy / sxx : 0;
  }
  *latency_s = intercept;
  *throughput_bytes_per_s = slope > 0 ? 1.0 / slope : 0;
}

Result<PagingMeasurement> MeasurePaging(const PagingOptions& options) {
  std::error_code ec;
  std::filesystem::create_directories(options.dir, ec);
  if (ec) return PermissionDenied("cannot create paging directory " + options.dir + ": " + ec.message());
  const std::string path = options.dir + "/edgecost-paging-probe." + std::to_string(::getpid());
  const uint64_t largest = *std::max_element(options.sizes_bytes.begin(), options.sizes_bytes.end());
  const size_t capacity = (largest + kAlignment - 1) / kAlignment * kAlignment;
  std::unique_ptr<char, FreeDeleter> buffer(static_cast<char*>(std::aligned_alloc(kAlignment, capacity)));
  if (!buffer) return Internal("cannot allocate the paging buffer");
  for (size_t i = 0; i < capacity; ++i) buffer.get()[i] = static_cast<char>(i * 131 + 7);  // not compressible

  PagingMeasurement m;
  m.direct_io = true;
  std::vector<uint64_t> xs;
  std::vector<double> outs, ins;
  for (uint64_t bytes : options.sizes_bytes) {
    std::vector<double> out_s, in_s;
    for (int r = 0; r < options.repetitions; ++r) {
      Result<double> out = PageOut(path, buffer.get(), bytes);
      if (!out.ok()) {
        std::filesystem::remove(path, ec);
        return out.status();
      }
      bool direct = false;
      Result<double> in = PageIn(path, buffer.get(), bytes, &direct);
      if (!in.ok()) {
        std::filesystem::remove(path, ec);
        return in.status();
      }
      m.direct_io = m.direct_io && direct;
      out_s.push_back(*out);
      in_s.push_back(*in);
    }
    m.samples.push_back({bytes, Median(out_s), Median(in_s)});
    xs.push_back(bytes);
    outs.push_back(m.samples.back().page_out_s);
    ins.push_back(m.samples.back().page_in_s);
  }
  std::filesystem::remove(path, ec);
  double latency = 0, throughput = 0;
  m.cost.set_storage_path(options.dir);
  FitAffine(xs, outs, &latency, &throughput);
  m.cost.set_page_out_latency_s(latency);
  m.cost.set_page_out_throughput_bytes_per_s(throughput);
  FitAffine(xs, ins, &latency, &throughput);
  m.cost.set_page_in_latency_s(latency);
  m.cost.set_page_in_throughput_bytes_per_s(throughput);
  return m;
}

}  // namespace edgecost::profiler
