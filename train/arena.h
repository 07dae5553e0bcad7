// The activation arena of a training step: every activation buffer comes from
// one region laid out in advance for the schedule, and is counted while it is
// live, so the step's peak live activation bytes are measured, not estimated.
// The limit is the peak the schedule planned; an allocation over it is refused,
// so a step never holds more than planned.
//
// Why one region: buffers taken from malloc and given back each step leave the
// heap fragmented and the process's resident memory several times the live
// bytes (resnet18_cifar: 11 MB above its 3.1 MB of activations), and a budget
// is only worth what the process holds. Laid out once per schedule (LayOut), the
// region is what the process holds for activations, and it is known before the
// first step.
//
// PlanMemory replays a schedule's memory walk exactly as the solver's
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

// Buffers of paged nodes are aligned and sized for O_DIRECT reads; the others
// for the cache line. The arena counts the bytes asked for.
inline constexpr uint64_t kBufferAlignment = 4096;
inline constexpr uint64_t kCacheLineBytes = 64;

// Where each buffer of a step lives in the arena's region: offsets[v][j] is the
// offset of node v's j-th allocation in the step (a recomputed or paged-in node
// has several). Buffers whose lifetimes overlap never share bytes.
struct ArenaLayout {
  std::vector<std::vector<uint64_t>> offsets;
  std::vector<uint64_t> buffer_bytes;  // per node: its buffer's size in the region (rounded up)
  uint64_t region_bytes = 0;           // at least the planned peak; the excess is fragmentation
  uint64_t peak_bytes = 0;             // the planned peak of live bytes (PlanMemory)
};

class Arena {
 public:
  explicit Arena(int nodes);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  // Starts a step under `layout`: every buffer must be free; the peak restarts at
  // zero and the limit is the layout's peak. The region is mapped again only
  // when the layout needs a different size.
  Status BeginStep(const ArenaLayout& layout);
  // A buffer of `bytes` for `node`'s output. `headroom_bytes` must stay free under
  // the limit after it (the I/O thread leaves what the compute thread will need).
  // ResourceExhausted when it does not fit.
  Result<float*> Allocate(int node, uint64_t bytes, uint64_t headroom_bytes = 0);
  void Free(int node);
  float* Get(int node) const;  // nullptr when not live
  uint64_t Bytes(int node) const;
  bool Live(int node) const { return Get(node) != nullptr; }
  // The nodes with a buffer now, in increasing order, into `nodes` (a vector reused every stage).
  void LiveNodes(std::vector<int>& nodes) const;

  uint64_t live_bytes() const;
  uint64_t peak_bytes() const;
  uint64_t limit_bytes() const;
  uint64_t region_bytes() const;

 private:
  struct Buffer {
    float* data = nullptr;
    uint64_t bytes = 0;
    uint64_t offset = 0, span = 0;  // in the region
  };
  mutable std::mutex mutex_;
  std::vector<Buffer> buffers_;
  std::vector<int> live_nodes_;  // increasing
  std::vector<uint32_t> allocations_;  // per node: allocations so far in this step
  const ArenaLayout* layout_ = nullptr;
  char* region_ = nullptr;
  uint64_t region_bytes_ = 0;
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

// Offsets for every buffer of a step under `plan`, in the order the executor
// allocates and frees them (Executor::Step, with page-ins counted from the start
// of their stage, where the I/O thread may read them), placed largest first at
// the lowest offset free over their lifetime.
ArenaLayout LayOut(const std::vector<int64_t>& bytes, const std::vector<std::vector<int>>& preds,
                   const solver::Plan& plan);

// The plain step as a plan: stage t computes node t, and every output stays
// resident until its last reader has run.
solver::Plan PlainPlan(const std::vector<std::vector<int>>& preds);

}  // namespace edgecost::train
