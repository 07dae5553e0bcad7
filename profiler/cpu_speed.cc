#include "profiler/cpu_speed.h"

#include <omp.h>

#include <algorithm>
#include <chrono>

namespace edgecost::profiler {
namespace {

constexpr int kSide = 32;         // 32x32 floats: three matrices in 12 KiB of L1
constexpr int kRepetitions = 16;  // per thread; the best one counts

double NowS() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

}  // namespace

double CpuCheckS(int threads) {
  double slowest_s = 0;
#pragma omp parallel num_threads(std::max(1, threads)) reduction(max : slowest_s)
  {
    alignas(64) float a[kSide * kSide], b[kSide * kSide], c[kSide * kSide];
    for (int i = 0; i < kSide * kSide; ++i) {
      a[i] = 1.0f + static_cast<float>(i % 7) * 0.01f;
      b[i] = 1.0f - static_cast<float>(i % 5) * 0.01f;
      c[i] = 0;
    }
    double best_s = 1e9;
    for (int repetition = 0; repetition < kRepetitions; ++repetition) {
      const double start_s = NowS();
      for (int i = 0; i < kSide; ++i) {
        for (int k = 0; k < kSide; ++k) {
          const float x = a[i * kSide + k];
          for (int j = 0; j < kSide; ++j) c[i * kSide + j] += x * b[k * kSide + j];
        }
      }
      best_s = std::min(best_s, NowS() - start_s);
      asm volatile("" : : "r"(c) : "memory");  // the products are used: not optimised away
    }
    slowest_s = best_s;
  }
  return slowest_s;
}

}  // namespace edgecost::profiler
