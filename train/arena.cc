#include "train/arena.h"

#include <algorithm>
#include <cstdlib>
#include <string>

namespace edgecost::train {

Arena::Arena(int nodes) : buffers_(static_cast<size_t>(nodes)) {}

Arena::~Arena() {
  for (Buffer& b : buffers_) std::free(b.data);
}

Status Arena::BeginStep(uint64_t limit_bytes) {
  std::lock_guard lock(mutex_);
  if (live_ != 0) return Internal("the activation arena holds " + std::to_string(live_) + " B between steps");
  limit_ = limit_bytes;
  peak_ = 0;
  return Status::Ok();
}

Result<float*> Arena::Allocate(int node, uint64_t bytes, uint64_t headroom_bytes) {
  std::lock_guard lock(mutex_);
  Buffer& b = buffers_.at(static_cast<size_t>(node));
  if (b.data) return Internal("node " + std::to_string(node) + " already has a buffer");
  if (live_ + bytes + headroom_bytes > limit_) {
    return ResourceExhausted("node " + std::to_string(node) + " needs " + std::to_string(bytes) + " B with " +
                             std::to_string(live_) + " B live and " + std::to_string(headroom_bytes) +
                             " B reserved, over the arena's limit of " + std::to_string(limit_) + " B");
  }
  const uint64_t rounded =
      std::max<uint64_t>(kBufferAlignment, (bytes + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment);
  b.data = static_cast<float*>(std::aligned_alloc(kBufferAlignment, rounded));
  if (!b.data) return ResourceExhausted("out of memory allocating " + std::to_string(rounded) + " B");
  b.bytes = bytes;
  live_ += bytes;
  peak_ = std::max(peak_, live_);
  return b.data;
}

void Arena::Free(int node) {
  std::lock_guard lock(mutex_);
  Buffer& b = buffers_.at(static_cast<size_t>(node));
  if (!b.data) return;
  std::free(b.data);
  live_ -= b.bytes;
  b = {};
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
