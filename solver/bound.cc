#include "solver/bound.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include <CbcModel.hpp>
#include <ClpSimplex.hpp>
#include <CoinPackedMatrix.hpp>
#include <OsiClpSolverInterface.hpp>

namespace edgecost::solver {
namespace {

// min c'x over 0 <= x <= upper, rows lower_r <= a_r x <= upper_r (one side finite).
struct CoveringLp {
  std::vector<double> cost, upper;
  std::vector<double> row_lower, row_upper;
  std::vector<std::vector<std::pair<int, double>>> rows;  // (column, coefficient)

  int AddColumn(double c, double ub) {
    cost.push_back(c);
    upper.push_back(ub);
    return static_cast<int>(cost.size()) - 1;
  }
  void AddRow(std::vector<std::pair<int, double>> entries, double lower, double upper_bound) {
    rows.push_back(std::move(entries));
    row_lower.push_back(lower);
    row_upper.push_back(upper_bound);
  }

  // The Lagrangian bound of any row multipliers y (projected onto the signs
  // that make it valid): every feasible x costs at least this, however
  // inexact the LP solver's duals were.
  double LagrangianBound(std::vector<double> y) const {
    std::vector<double> reduced = cost;
    double bound = 0;
    for (size_t r = 0; r < rows.size(); ++r) {
      const bool at_least = std::isfinite(row_lower[r]);
      y[r] = at_least ? std::max(0.0, y[r]) : std::min(0.0, y[r]);
      bound += y[r] * (at_least ? row_lower[r] : row_upper[r]);
      for (const auto& [column, a] : rows[r]) reduced[static_cast<size_t>(column)] -= y[r] * a;
    }
    for (size_t j = 0; j < cost.size(); ++j) bound += std::min(0.0, reduced[j]) * upper[j];
    return bound;
  }

  // Solves it; the bound from its duals (0 when the LP solver failed: no information).
  double Bound() const {
    if (rows.empty()) return 0;
    ClpSimplex lp;
    lp.setLogLevel(0);
    Load(lp);
    lp.dual();
    if (lp.status() != 0) return 0;  // infeasible or failed: the other checks say why, this bound says nothing
    std::vector<double> y(lp.dualRowSolution(), lp.dualRowSolution() + rows.size());
    for (double& v : y) v *= Scale();
    return std::max(0.0, LagrangianBound(std::move(y)));
  }

  // Solves it with every column a 0/1 decision, for at most `time_limit_s`:
  // CBC's proven bound (0 when it failed). A tensor is let go or not, so this
  // is valid too, and stronger where the LP lets go of a fraction of a large
  // tensor.
  double IntegerBound(double time_limit_s) const {
    if (rows.empty() || time_limit_s <= 0) return 0;
    OsiClpSolverInterface solver;
    solver.messageHandler()->setLogLevel(0);
    Load(*solver.getModelPtr());
    for (size_t j = 0; j < cost.size(); ++j) solver.setInteger(static_cast<int>(j));
    solver.initialSolve();
    if (!solver.isProvenOptimal()) return 0;
    CbcModel model(solver);
    model.setLogLevel(0);
    model.messageHandler()->setLogLevel(0);
    model.setMaximumSeconds(time_limit_s);
    model.setAllowableGap(1e-12);
    model.setAllowableFractionGap(1e-12);
    model.branchAndBound();
    const double bound = model.getBestPossibleObjValue();
    // CBC's tolerances: give back a billionth.
    return std::isfinite(bound) ? std::max(0.0, bound * Scale() * (1 - 1e-9)) : 0;
  }

 private:
  double Scale() const { return std::max(1e-300, *std::max_element(cost.begin(), cost.end())); }

  void Load(ClpSimplex& lp) const {
    const double scale = Scale();
    std::vector<double> scaled_cost(cost.size()), lower(cost.size(), 0.0);
    for (size_t j = 0; j < cost.size(); ++j) scaled_cost[j] = cost[j] / scale;
    CoinPackedMatrix matrix(false, 0, 0);
    matrix.setDimensions(0, static_cast<int>(cost.size()));
    for (const auto& entries : rows) {
      std::vector<int> index;
      std::vector<double> value;
      for (const auto& [column, a] : entries) {
        index.push_back(column);
        value.push_back(a);
      }
      matrix.appendRow(static_cast<int>(index.size()), index.data(), value.data());
    }
    lp.loadProblem(matrix, lower.data(), upper.data(), scaled_cost.data(), row_lower.data(), row_upper.data());
  }
};

}  // namespace

std::vector<EvictionRow> EvictionRows(const Problem& p) {
  const int n = p.size();
  std::vector<int> last_use(static_cast<size_t>(n), -1);
  for (int v = 0; v < n; ++v) {
    for (int u : p.preds[static_cast<size_t>(v)]) last_use[static_cast<size_t>(u)] = v;  // preds in order: v grows
  }
  std::vector<EvictionRow> rows;
  const double budget = static_cast<double>(p.activation_budget_bytes);
  for (int t = 0; t < n; ++t) {
    const auto& reads = p.preds[static_cast<size_t>(t)];
    double held = static_cast<double>(p.ram_bytes[static_cast<size_t>(t)]);
    for (int u : reads) held += static_cast<double>(p.ram_bytes[static_cast<size_t>(u)]);
    EvictionRow row{.stage = t};
    for (int i = 0; i < t; ++i) {
      const size_t k = static_cast<size_t>(i);
      if (last_use[k] <= t) continue;
      if (std::find(reads.begin(), reads.end(), i) != reads.end()) continue;  // an input: held, counted above
      held += static_cast<double>(p.ram_bytes[k]);
      row.shares.emplace_back(i, static_cast<double>(p.ram_bytes[k]));
    }
    const double excess = held - budget;
    if (excess <= 0 || row.shares.empty()) continue;
    // A tensor is let go or not, so one larger than the excess covers it
    // alone: capping its share at 1 keeps every schedule and tightens the LP.
    for (auto& [tensor, share] : row.shares) share = std::min(1.0, share / excess);
    rows.push_back(std::move(row));
  }
  return rows;
}

double EvictionLowerBoundJ(const Problem& p, double integer_time_limit_s) {
  const int n = p.size();
  const double floor_j = p.FloorJ();
  if (!p.allow_remat && !p.allow_paging) return floor_j;
  const std::vector<EvictionRow> rows = EvictionRows(p);
  if (rows.empty()) return floor_j;
  // Let-go columns per tensor that some stage may let go: recomputed, or paged out and in.
  CoveringLp lp;
  std::vector<int> recompute(static_cast<size_t>(n), -1), page(static_cast<size_t>(n), -1);
  std::vector<std::pair<int, double>> runtime_row;
  for (const EvictionRow& row : rows) {
    for (const auto& [i, share] : row.shares) {
      const size_t k = static_cast<size_t>(i);
      if (recompute[k] >= 0 || page[k] >= 0) continue;
      if (p.Recomputable(i)) {
        recompute[k] = lp.AddColumn(p.compute_j[k], 1);
        runtime_row.emplace_back(recompute[k], p.runtime_s[k]);
      }
      if (p.allow_paging) {
        page[k] = lp.AddColumn(p.page_out_j[k] + p.page_in_j[k], 1);
        if (p.count_paging_time && !p.page_in_s.empty() && !p.page_out_s.empty()) {
          runtime_row.emplace_back(page[k], p.page_in_s[k] + p.page_out_s[k]);
        }
      }
      if (recompute[k] >= 0 && page[k] >= 0) lp.AddRow({{recompute[k], 1.0}, {page[k], 1.0}}, -INFINITY, 1);
    }
  }
  for (const EvictionRow& row : rows) {
    std::vector<std::pair<int, double>> entries;
    for (const auto& [i, share] : row.shares) {
      if (recompute[static_cast<size_t>(i)] >= 0) entries.emplace_back(recompute[static_cast<size_t>(i)], share);
      if (page[static_cast<size_t>(i)] >= 0) entries.emplace_back(page[static_cast<size_t>(i)], share);
    }
    lp.AddRow(std::move(entries), 1, INFINITY);
  }
  const double room_s = p.runtime_budget_s - p.PlainRuntimeS();
  if (!runtime_row.empty()) lp.AddRow(std::move(runtime_row), -INFINITY, std::max(0.0, room_s));
  return floor_j + std::max(lp.Bound(), lp.IntegerBound(integer_time_limit_s));
}

}  // namespace edgecost::solver
