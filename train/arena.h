// The activation arena of a training step: every activation buffer comes from
// here and is counted while it is live, so the step's peak live activation bytes
// are measured, not estimated. The limit is the peak the schedule planned; an
// allocation over it is refused, so a step never holds more than planned.
//
// PlannedMemory replays a schedule's memory walk exactly as the solver's
// simulator accounts it (resident outputs at a stage's start, plus each output
// as it is computed, minus each input after its last use in the stage unless
// kept), giving the limit and, for every point of a stage, the most the rest of
// the stage will hold: what the I/O thread may not take for early page-ins.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

#include "base/status.h"
#include "solver/plan.h"

namespace edgecost::train {

// Buffers are aligned and sized for O_DIRECT; the arena counts the bytes asked for.
inline constexpr uint64_t kBufferAlignment = 4096;

class Arena {
 public:
  explicit Arena(int nodes);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  // Starts a step: every buffer must be free; the peak restarts at zero.
  Status BeginStep(uint64_t limit_bytes);
  // A buffer of `bytes` for `node`'s output. `headroom_bytes` must stay free under
  // the limit after it (the I/O thread leaves what the compute thread will need).
  // ResourceExhausted when it does not fit.
  Result<float*> Allocate(int node, uint64_t bytes, uint64_t headroom_bytes = 0);
  void Free(int node);
  float* Get(int node) const;  // nullptr when not live
  uint64_t Bytes(int node) const;
  bool Live(int node) const { return Get(node) != nullptr; }

  uint64_t live_bytes() const;
  uint64_t peak_bytes() const;
  uint64_t limit_bytes() const;

 private:
  struct Buffer {
    float* data = nullptr;
    uint64_t bytes = 0;
  };
  mutable std::mutex mutex_;
  std::vector<Buffer> buffers_;
  uint64_t live_ = 0, peak_ = 0, limit_ = 0;
};

struct PlannedMemory {
  int64_t peak_bytes = 0;
  // rest_peak_bytes[t][j]: the most memory stage t holds from its j-th computation
  // on (j = number of computations: its end).
  std::vector<std::vector<int64_t>> rest_peak_bytes;
};

// preds[v]: the distinct nodes v reads (all lower than v).
PlannedMemory PlanMemory(const std::vector<int64_t>& bytes, const std::vector<std::vector<int>>& preds,
                         const solver::Plan& plan);

// The plain step as a plan: stage t computes node t, and every output stays
// resident until its last reader has run.
solver::Plan PlainPlan(const std::vector<std::vector<int>>& preds);

}  // namespace edgecost::train
