// Small problems for solver tests.
#pragma once

#include <string>
#include <vector>

#include "solver/problem.h"

namespace edgecost::solver::testing {

// Nodes 0..n-1 with the given edges (u, v), unit costs unless changed.
inline Problem Graph(int n, const std::vector<std::pair<int, int>>& edges, int64_t ram_budget) {
  Problem p;
  for (int i = 0; i < n; ++i) {
    p.names.push_back("n" + std::to_string(i));
    p.backward.push_back(i >= n / 2);
    p.runtime_s.push_back(1.0);
    p.compute_j.push_back(1.0);
    p.ram_bytes.push_back(10);
    p.page_in_j.push_back(0.3);
    p.page_out_j.push_back(0.3);
  }
  p.preds.resize(static_cast<size_t>(n));
  for (auto [u, v] : edges) p.preds[static_cast<size_t>(v)].push_back(u);
  p.activation_budget_bytes = ram_budget;
  p.runtime_budget_s = 100.0 * n;
  return p;
}

// A training-like chain: forward 0..k-1, backward nodes reading their forward twin.
inline Problem TrainingChain(int forward, int64_t ram_budget) {
  const int n = 2 * forward;
  std::vector<std::pair<int, int>> edges;
  for (int i = 0; i + 1 < n; ++i) edges.push_back({i, i + 1});
  // Backward node forward + j differentiates forward layer forward - 1 - j and reads its output.
  for (int j = 1; j < forward; ++j) edges.push_back({forward - 1 - j, forward + j});
  return Graph(n, edges, ram_budget);
}

}  // namespace edgecost::solver::testing
