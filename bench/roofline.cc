#include "bench/roofline.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <sstream>
#include <vector>

#include "kernels/layers.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace edgecost::bench {
namespace {

constexpr double kF32Bytes = 4;
constexpr int kRepeats = 10;  // fastest of: what the machine does when no other task interferes

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

StepWork StepWorkOf(const v1::TrainingGraph& graph) {
  StepWork work;
  for (const v1::TrainingNode& node : graph.nodes()) {
    work.flops += node.flops();
    double bytes = static_cast<double>(node.output_bytes()) + kF32Bytes * static_cast<double>(node.param_count());
    for (const uint32_t input : node.inputs()) {
      if (input < static_cast<uint32_t>(graph.nodes_size()))
        bytes += static_cast<double>(graph.nodes(input).output_bytes());
    }
    work.bytes += bytes;
  }
  return work;
}

double AttainableFlopsPerS(const StepWork& work, const Machine& machine) {
  if (!(work.bytes > 0) || !(machine.peak_flops_per_s > 0)) return 0;
  const double intensity_flops_per_byte = work.flops / work.bytes;
  return std::min(machine.peak_flops_per_s, machine.bandwidth_bytes_per_s * intensity_flops_per_byte);
}

double RooflineShare(const StepWork& work, const Machine& machine, double step_s) {
  const double attainable = AttainableFlopsPerS(work, machine);
  if (!(attainable > 0) || !(step_s > 0)) return 0;
  return work.flops / step_s / attainable;
}

double MeasurePeakFlopsPerS(int threads) {
  kernels::TeamScope team(threads);
  constexpr int64_t kN = 1024;
  using tag = dnnl::memory::format_tag;
  using dt = dnnl::memory::data_type;
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  const dnnl::memory::desc square({kN, kN}, dt::f32, tag::ab);
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(square, square, square), engine);  // oneDNN 2.x
  const dnnl::matmul gemm(pd);
  std::vector<float> a(kN * kN, 1.0f), b(kN * kN, 0.5f), c(kN * kN);
  dnnl::memory a_mem(square, engine, a.data()), b_mem(square, engine, b.data()), c_mem(square, engine, c.data());
  double best_s = 1e30;
  for (int i = 0; i < kRepeats + 1; ++i) {  // the first creates oneDNN's kernels and warms the caches
    const auto start = std::chrono::steady_clock::now();
    gemm.execute(stream, {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}});
    stream.wait();
    if (i > 0) best_s = std::min(best_s, SecondsSince(start));
  }
  return 2.0 * kN * kN * kN / best_s;
}

double MeasureBandwidthBytesPerS(int threads, size_t triad_bytes) {
  kernels::TeamScope team(threads);
  const size_t n = triad_bytes / sizeof(double);
  std::unique_ptr<double[]> a(new double[n]), b(new double[n]), c(new double[n]);
  // Touched by the threads that run the triad, so every page is resident before it is timed.
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) {
    a[i] = 0;
    b[i] = 1;
    c[i] = 2;
  }
  const double scale = 3;
  double best_s = 1e30;
  for (int r = 0; r < kRepeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; ++i) a[i] = b[i] + scale * c[i];
    best_s = std::min(best_s, SecondsSince(start));
  }
  volatile double sink = a[n / 2];  // the triad's result is used
  (void)sink;
  return 3.0 * static_cast<double>(n) * sizeof(double) / best_s;  // two arrays read, one written
}

TorchTimes ParseTorchTimes(const std::string& output) {
  TorchTimes times;
  std::istringstream lines(output);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::string first;
    words >> first;
    if (first == "#") {
      std::string key;
      words >> key;
      if (key == "torch") {
        words >> times.version;
        if (!times.version.empty() && times.version.back() == ',') times.version.pop_back();
      } else if (key == "blas") {
        for (std::string path; words >> path;) times.blas.push_back(path);
      }
      continue;
    }
    TorchTime time{first};
    if (words >> time.median_s >> time.fastest_s) times.models.push_back(time);
  }
  return times;
}

std::string DescribeBlas(const std::vector<std::string>& libraries) {
  for (const std::string& path : libraries) {
    if (path.find("libopenblas") != std::string::npos) return "OpenBLAS (" + path + ")";
  }
  for (const std::string& path : libraries) {
    if (path.find("libblas") != std::string::npos) return "reference BLAS (" + path + ")";
  }
  return "none found";
}

}  // namespace edgecost::bench
