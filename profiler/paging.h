// The storage that will hold paged-out tensors, measured: page-out is write +
// fsync, page-in is a read that bypasses the page cache where the OS allows
// (O_DIRECT, else a cache drop with posix_fadvise). Times over a range of sizes
// are fitted to latency + bytes / throughput.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "proto/edgecost.pb.h"

namespace edgecost::profiler {

struct PagingOptions {
  std::string dir;  // where the test file goes (the paging directory)
  std::vector<uint64_t> sizes_bytes = {4096, 65536, 1u << 20, 8u << 20};
  int repetitions = 5;
};

struct PagingSample {
  uint64_t bytes = 0;
  double page_out_s = 0;  // median
  double page_in_s = 0;   // median
};

struct PagingMeasurement {
  v1::PagingCost cost;  // latencies and throughputs; powers are left to the energy source
  std::vector<PagingSample> samples;
  bool direct_io = false;  // page-in bypassed the page cache with O_DIRECT
};

// Least squares fit of seconds = latency_s + bytes / throughput; latency clamped at 0.
void FitAffine(const std::vector<uint64_t>& bytes, const std::vector<double>& seconds, double* latency_s,
               double* throughput_bytes_per_s);

Result<PagingMeasurement> MeasurePaging(const PagingOptions& options);

}  // namespace edgecost::profiler
