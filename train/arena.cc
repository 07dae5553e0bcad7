#include "train/arena.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

namespace edgecost::train {

Arena::Arena(int nodes) : buffers_(static_cast<size_t>(nodes)), allocations_(static_cast<size_t>(nodes), 0) {}

Arena::~Arena() {
  if (region_) ::munmap(region_, region_bytes_);
}

Status Arena::BeginStep(const ArenaLayout& layout) {
  std::lock_guard lock(mutex_);
  if (live_ != 0) return Internal("the activation arena holds " + std::to_string(live_) + " B between steps");
  if (layout.offsets.size() != buffers_.size()) {
    return Internal("an arena layout for " + std::to_string(layout.offsets.size()) + " nodes, not " +
                    std::to_string(buffers_.size()));
  }
  if (layout.region_bytes != region_bytes_) {
    if (region_) ::munmap(region_, region_bytes_);
    region_ = nullptr;
    region_bytes_ = 0;
    if (layout.region_bytes > 0) {
      void* p = ::mmap(nullptr, layout.region_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) {
        return ResourceExhausted("cannot map the activation arena of " + std::to_string(layout.region_bytes) +
                                 " B: " + std::strerror(errno));
      }
      region_ = static_cast<char*>(p);
      region_bytes_ = layout.region_bytes;
    }
  }
  layout_ = &layout;
  std::fill(allocations_.begin(), allocations_.end(), 0);
  limit_ = layout.peak_bytes;
  peak_ = 0;
  return Status::Ok();
}

Result<float*> Arena::Allocate(int node, uint64_t bytes, uint64_t headroom_bytes) {
  std::lock_guard lock(mutex_);
  const size_t v = static_cast<size_t>(node);
  Buffer& b = buffers_.at(v);
  if (b.data) return Internal("node " + std::to_string(node) + " already has a buffer");
  if (live_ + bytes + headroom_bytes > limit_) {
    return ResourceExhausted("node " + std::to_string(node) + " needs " + std::to_string(bytes) + " B with " +
                             std::to_string(live_) + " B live and " + std::to_string(headroom_bytes) +
                             " B reserved, over the arena's limit of " + std::to_string(limit_) + " B");
  }
  if (!layout_) return Internal("the arena has no layout: BeginStep first");
  const std::vector<uint64_t>& offsets = layout_->offsets[v];
  const uint32_t j = allocations_[v];
  if (j >= offsets.size() || bytes > layout_->buffer_bytes[v]) {
    return Internal("node " + std::to_string(node) + "'s allocation " + std::to_string(j + 1) + " of " +
                    std::to_string(bytes) + " B is not in the arena's layout");
  }
  // The layout is the executor's order replayed; a buffer over a live one would be a bug, not a slow step.
  const uint64_t offset = offsets[j], span = layout_->buffer_bytes[v];
  for (int w : live_nodes_) {
    const Buffer& other = buffers_[static_cast<size_t>(w)];
    if (offset < other.offset + other.span && other.offset < offset + span) {
      return Internal("node " + std::to_string(node) + "'s buffer would overlap node " + std::to_string(w) +
                      "'s in the arena's layout");
    }
  }
  ++allocations_[v];
  b = {reinterpret_cast<float*>(region_ + offset), bytes, offset, span};
  live_nodes_.insert(std::upper_bound(live_nodes_.begin(), live_nodes_.end(), node), node);
  live_ += bytes;
  peak_ = std::max(peak_, live_);
  return b.data;
}

void Arena::Free(int node) {
  std::lock_guard lock(mutex_);
  Buffer& b = buffers_.at(static_cast<size_t>(node));
  if (!b.data) return;
  live_ -= b.bytes;
  b = {};
  live_nodes_.erase(std::find(live_nodes_.begin(), live_nodes_.end(), node));
}

void Arena::LiveNodes(std::vector<int>& nodes) const {
  std::lock_guard lock(mutex_);
  nodes = live_nodes_;
}

float* Arena::Get(int node) const {
  std::lock_guard lock(mutex_);
  return buffers_.at(static_cast<size_t>(node)).data;
}

uint64_t Arena::Bytes(int node) const {
  std::lock_guard lock(mutex_);
  return buffers_.at(static_cast<size_t>(node)).bytes;
}

uint64_t Arena::live_bytes() const {
  std::lock_guard lock(mutex_);
  return live_;
}
uint64_t Arena::peak_bytes() const {
  std::lock_guard lock(mutex_);
  return peak_;
}
uint64_t Arena::limit_bytes() const {
  std::lock_guard lock(mutex_);
  return limit_;
}
uint64_t Arena::region_bytes() const {
  std::lock_guard lock(mutex_);
  return region_bytes_;
}

ArenaLayout LayOut(const std::vector<int64_t>& bytes, const std::vector<std::vector<int>>& preds,
                   const solver::Plan& plan) {
  const int n = plan.size();
  ArenaLayout layout;
  layout.offsets.resize(static_cast<size_t>(n));
  layout.buffer_bytes.assign(static_cast<size_t>(n), 0);
  layout.peak_bytes = static_cast<uint64_t>(PlanMemory(bytes, preds, plan).peak_bytes);
  std::vector<uint64_t> alignment(static_cast<size_t>(n), kCacheLineBytes);
  for (int t = 0; t < n; ++t) {
    for (int i = 0; i < n; ++i) {
      if (plan.page_in[t][i] || plan.page_out[t][i]) alignment[static_cast<size_t>(i)] = kBufferAlignment;
    }
  }
  for (int v = 0; v < n; ++v) {
    const uint64_t a = alignment[static_cast<size_t>(v)];
    layout.buffer_bytes[static_cast<size_t>(v)] = (static_cast<uint64_t>(bytes[static_cast<size_t>(v)]) + a - 1) / a * a;
  }
  std::vector<std::vector<int>> succs(static_cast<size_t>(n));
  for (int v = 0; v < n; ++v) {
    for (int u : preds[static_cast<size_t>(v)]) succs[static_cast<size_t>(u)].push_back(v);
  }
  // Every buffer's lifetime, in events of the executor's walk (Executor::Step).
  struct Use {
    int node;
    uint64_t start, end;
  };
  std::vector<Use> uses;
  std::vector<int> open(static_cast<size_t>(n), -1);
  uint64_t event = 0;
  auto allocate = [&](int v, uint64_t at) {
    if (bytes[static_cast<size_t>(v)] <= 0 || open[static_cast<size_t>(v)] >= 0) return;
    open[static_cast<size_t>(v)] = static_cast<int>(uses.size());
    uses.push_back({v, at, UINT64_MAX});
  };
  auto release = [&](int v) {
    int& use = open[static_cast<size_t>(v)];
    if (use < 0) return;
    uses[static_cast<size_t>(use)].end = event++;
    use = -1;
  };
  for (int t = 0; t < n; ++t) {
    const bool has_next = t + 1 < n;
    const uint64_t stage_start = event++;  // the I/O thread may read a page-in from here on
    for (int i = 0; i < n; ++i) {
      if (plan.page_in[t][i]) allocate(i, stage_start);
    }
    for (int k = 0; k <= t; ++k) {
      if (!plan.compute[t][k]) continue;
      allocate(k, event++);
      for (int u : preds[static_cast<size_t>(k)]) {
        if (has_next && plan.resident[t + 1][u]) continue;
        bool used_later = false;
        for (int j : succs[static_cast<size_t>(u)]) used_later = used_later || (j > k && j <= t && plan.compute[t][j]);
        if (!used_later) release(u);
      }
    }
    for (int i = 0; i < n; ++i) {
      if (!(has_next && plan.resident[t + 1][i])) release(i);
    }
  }
  for (int i = 0; i < n; ++i) release(i);
  // Largest first, each at the lowest aligned offset free over its lifetime.
  std::vector<size_t> order(uses.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  auto span = [&](size_t u) { return layout.buffer_bytes[static_cast<size_t>(uses[u].node)]; };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return span(a) > span(b); });
  std::vector<uint64_t> offset(uses.size(), 0);
  std::vector<size_t> placed;
  std::vector<std::pair<uint64_t, uint64_t>> taken;  // [begin, end) of placed buffers alive at the same time
  for (size_t u : order) {
    taken.clear();
    for (size_t p : placed) {
      if (uses[p].start < uses[u].end && uses[u].start < uses[p].end) taken.push_back({offset[p], offset[p] + span(p)});
    }
    std::sort(taken.begin(), taken.end());
    const uint64_t a = alignment[static_cast<size_t>(uses[u].node)];
    uint64_t at = 0;
    for (const auto& [begin, end] : taken) {
      if (at + span(u) <= begin) break;
      at = std::max(at, (end + a - 1) / a * a);
    }
    offset[u] = at;
    placed.push_back(u);
    layout.region_bytes = std::max(layout.region_bytes, at + span(u));
  }
  for (size_t u = 0; u < uses.size(); ++u) layout.offsets[static_cast<size_t>(uses[u].node)].push_back(offset[u]);
  // The region is mapped in whole pages.
  layout.region_bytes = (layout.region_bytes + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment;
  return layout;
}

PlannedMemory PlanMemory(const std::vector<int64_t>& bytes, const std::vector<std::vector<int>>& preds,
                         const solver::Plan& plan) {
  const int n = plan.size();
  std::vector<std::vector<int>> succs(static_cast<size_t>(n));
  for (int v = 0; v < n; ++v) {
    for (int u : preds[static_cast<size_t>(v)]) succs[static_cast<size_t>(u)].push_back(v);
  }
  PlannedMemory planned;
  planned.rest_peak_bytes.resize(static_cast<size_t>(n));
  for (int t = 0; t < n; ++t) {
    const auto& R = plan.compute[t];
    const bool has_next = t + 1 < n;
    int64_t memory = 0;
    for (int i = 0; i < n; ++i) {
      if (plan.resident[t][i]) memory += bytes[static_cast<size_t>(i)];
    }
    std::vector<int64_t> after;  // memory after each computation, before its frees
    for (int k = 0; k <= t; ++k) {
      if (!R[k]) continue;
      memory += bytes[static_cast<size_t>(k)];
      after.push_back(memory);
      for (int u : preds[static_cast<size_t>(k)]) {
        if (has_next && plan.resident[t + 1][u]) continue;
        bool used_later = false;
        for (int j : succs[static_cast<size_t>(u)]) used_later = used_later || (j > k && j <= t && R[j]);
        if (!used_later) memory -= bytes[static_cast<size_t>(u)];
      }
    }
    std::vector<int64_t>& rest = planned.rest_peak_bytes[static_cast<size_t>(t)];
    rest.assign(after.size() + 1, memory);
    for (int j = static_cast<int>(after.size()) - 1; j >= 0; --j) {
      rest[static_cast<size_t>(j)] = std::max(rest[static_cast<size_t>(j) + 1], after[static_cast<size_t>(j)]);
    }
    // The stage's start counts too (resident outputs before any computation).
    int64_t start = 0;
    for (int i = 0; i < n; ++i) {
      if (plan.resident[t][i]) start += bytes[static_cast<size_t>(i)];
    }
    rest[0] = std::max(rest[0], start);
    planned.peak_bytes = std::max(planned.peak_bytes, rest[0]);
  }
  return planned;
}

solver::Plan PlainPlan(const std::vector<std::vector<int>>& preds) {
  const int n = static_cast<int>(preds.size());
  std::vector<int> last_use(static_cast<size_t>(n), -1);
  for (int v = 0; v < n; ++v) {
    for (int u : preds[static_cast<size_t>(v)]) last_use[static_cast<size_t>(u)] = std::max(last_use[u], v);
  }
  solver::Plan plan(n);
  for (int t = 0; t < n; ++t) {
    plan.compute[t][t] = 1;
    if (t + 1 < n) {
      for (int i = 0; i <= t; ++i) plan.resident[t + 1][i] = last_use[static_cast<size_t>(i)] > t;
    }
  }
  return plan;
}

}  // namespace edgecost::train
