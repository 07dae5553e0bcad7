#include "profiler/cpu_speed.h"

#include <omp.h>
#include <time.h>

#include <algorithm>

namespace edgecost::profiler {
namespace {

constexpr int kSide = 32;         // 32x32 floats: three matrices in 12 KiB of L1
constexpr int kRepetitions = 16;  // per thread; the best one counts

// The thread's own CPU time: a repetition during which the thread was descheduled
// is not slower for it, so that the kernel measures the core's speed, not its availability.
double ThreadCpuS() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

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
    double best_s = 1e9, read_s = 1e9;
    for (int repetition = 0; repetition < kRepetitions; ++repetition) {
      const double start_s = ThreadCpuS();
      for (int i = 0; i < kSide; ++i) {
        for (int k = 0; k < kSide; ++k) {
          const float x = a[i * kSide + k];
          for (int j = 0; j < kSide; ++j) c[i * kSide + j] += x * b[k * kSide + j];
        }
      }
      best_s = std::min(best_s, ThreadCpuS() - start_s);
      asm volatile("" : : "r"(c) : "memory");  // the products are used: not optimised away
      const double read_start_s = ThreadCpuS();
      read_s = std::min(read_s, ThreadCpuS() - read_start_s);
    }
    slowest_s = std::max(best_s - read_s, 1e-9);  // the clock's own cost (a system call) left out
  }
  return slowest_s;
}

}  // namespace edgecost::profiler
