#include "solver/milp.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include <CbcEventHandler.hpp>
#include <CbcModel.hpp>
#include <CglClique.hpp>
#include <CglGomory.hpp>
#include <CglKnapsackCover.hpp>
#include <CglMixedIntegerRounding2.hpp>
#include <CglProbing.hpp>
#include <ClpEventHandler.hpp>
#include <CoinPackedMatrix.hpp>
#include <OsiClpSolverInterface.hpp>

#include "solver/bound.h"
#include "solver/deadline.h"

namespace edgecost::solver {
namespace {


// Columns, rows and their bounds, built up before handing them to CBC.
class Model {
 public:
  int AddBinary(double cost) { return AddColumn(cost, 0, 1, true); }
  int AddFixedOne(double cost) { return AddColumn(cost, 1, 1, true); }
  int AddContinuous(double lo, double hi) { return AddColumn(0, lo, hi, false); }

  // lo <= sum coef * x <= hi
  void AddRow(const std::vector<std::pair<int, double>>& terms, double lo, double hi) {
    const size_t before = entry_col_.size();
    for (const auto& [col, coef] : terms) {
      if (col < 0 || coef == 0) continue;
      entry_row_.push_back(rows());
      entry_col_.push_back(col);
      entry_value_.push_back(coef);
    }
    if (entry_col_.size() == before) return;
    row_lo_.push_back(lo);
    row_hi_.push_back(hi);
  }

  // Rows that `values` break, beyond a tolerance: before row `first_cut`, and from it on.
  BrokenRows RowsBrokenBy(const std::vector<double>& values, int first_cut) const {
    std::vector<double> activity(static_cast<size_t>(rows()), 0.0);
    for (size_t e = 0; e < entry_value_.size(); ++e) {
      activity[static_cast<size_t>(entry_row_[e])] += entry_value_[e] * values[static_cast<size_t>(entry_col_[e])];
    }
    BrokenRows broken;
    for (size_t r = 0; r < activity.size(); ++r) {
      const bool b = activity[r] < row_lo_[r] - 1e-7 || activity[r] > row_hi_[r] + 1e-7;
      (r < static_cast<size_t>(first_cut) ? broken.model : broken.cuts) += b;
    }
    return broken;
  }

  int columns() const { return static_cast<int>(cost_.size()); }
  int rows() const { return static_cast<int>(row_lo_.size()); }

  void LoadInto(OsiClpSolverInterface& solver) {
    // Built from triplets in one go: appending rows one at a time copies the matrix each time.
    CoinPackedMatrix matrix(false, entry_row_.data(), entry_col_.data(), entry_value_.data(),
                            static_cast<CoinBigIndex>(entry_value_.size()));
    matrix.setDimensions(rows(), columns());
    solver.loadProblem(matrix, col_lo_.data(), col_hi_.data(), cost_.data(), row_lo_.data(), row_hi_.data());
    for (int c = 0; c < columns(); ++c) {
      if (integer_[static_cast<size_t>(c)]) solver.setInteger(c);
    }
  }

 private:
  int AddColumn(double cost, double lo, double hi, bool integer) {
    cost_.push_back(cost);
    col_lo_.push_back(lo);
    col_hi_.push_back(hi);
    integer_.push_back(integer);
    return columns() - 1;
  }

  std::vector<int> entry_row_, entry_col_;
  std::vector<double> entry_value_;
  std::vector<double> cost_, col_lo_, col_hi_, row_lo_, row_hi_;
  std::vector<bool> integer_;
};

// When to stop: the caller's flag, a soft deadline at which CBC stops at its
// next event, and a hard one a little later at which running LPs are cut short.
// An LP cut short may look like a pruned node to CBC, so afterwards only bounds
// recorded before it are trusted.
// What a caller that stops waiting keeps: the best schedule and bound so far.
struct Salvage {
  std::mutex mutex;
  std::optional<Plan> plan;
  double objective_j = std::numeric_limits<double>::infinity();
  double lower_bound_j = 0;
  bool root_solved = false;
  int columns = 0;
  int rows = 0;
};

struct Formulation;
Plan PlanOf(const Formulation& f, const double* v);

struct StopState {
  const std::atomic<bool>* stop = nullptr;
  Salvage* salvage = nullptr;
  const Formulation* formulation = nullptr;
  double soft_deadline = 0;
  double hard_deadline = 0;
  std::atomic<bool> lp_interrupted{false};
  std::atomic<double> trusted_bound{-1e300};  // CBC's best possible objective (scaled), last seen intact
  double energy_scale = 1;
  std::function<void(double, double)> on_progress;
  std::mutex progress_mutex;
  double reported_objective = std::numeric_limits<double>::infinity();
  double reported_bound = -std::numeric_limits<double>::infinity();

  bool Stopped() const { return stop && stop->load(); }
};

// Records when CBC first holds a solution and its bound as it improves, and stops the search when asked to.
class SearchEvents : public CbcEventHandler {
 public:
  void Report() {
    const double objective = model_->bestSolution() ? model_->getObjValue() : std::numeric_limits<double>::infinity();
    const double bound = state_->trusted_bound.load();
    std::lock_guard<std::mutex> lock(state_->progress_mutex);
    if (objective < state_->reported_objective || bound > state_->reported_bound) {
      state_->reported_objective = std::min(objective, state_->reported_objective);
      state_->reported_bound = std::max(bound, state_->reported_bound);
      state_->on_progress(state_->reported_objective * state_->energy_scale,
                          state_->reported_bound * state_->energy_scale);
    }
  }

  // Copies an improved schedule and bound for a caller that may stop waiting.
  void Keep() {
    Salvage& salvage = *state_->salvage;
    const double objective_j =
        model_->bestSolution() ? model_->getObjValue() * state_->energy_scale : std::numeric_limits<double>::infinity();
    const double bound_j = state_->trusted_bound.load() * state_->energy_scale;
    std::lock_guard<std::mutex> lock(salvage.mutex);
    salvage.lower_bound_j = std::max(salvage.lower_bound_j, bound_j);
    if (objective_j < salvage.objective_j) {
      salvage.objective_j = objective_j;
      salvage.plan = PlanOf(*state_->formulation, model_->bestSolution());
    }
  }

  SearchEvents(double start, double* first, StopState* state) : start_(start), first_(first), state_(state) {}
  CbcEventHandler* clone() const override { return new SearchEvents(*this); }
  CbcAction event(CbcEvent which) override {
    if ((which == solution || which == heuristicSolution) && *first_ < 0) *first_ = SteadyNowS() - start_;
    if (which == node && model_ && !state_->lp_interrupted.load()) {
      const double bound = model_->getBestPossibleObjValue();
      if (std::isfinite(bound) && bound > state_->trusted_bound.load()) state_->trusted_bound = bound;
    }
    if (model_ && state_->on_progress && !state_->lp_interrupted.load()) Report();
    if (model_ && state_->salvage && !state_->lp_interrupted.load()) Keep();
    return state_->Stopped() || SteadyNowS() >= state_->soft_deadline ? stop : noAction;
  }

 private:
  double start_;
  double* first_;
  StopState* state_;
};

// Stops Clp's simplex when asked to or past the hard deadline: the root LP of a
// large graph, or one node's LP, can take minutes.
class LpStop : public ClpEventHandler {
 public:
  explicit LpStop(StopState* state) : state_(state) {}
  ClpEventHandler* clone() const override { return new LpStop(*this); }
  int event(Event which) override {
    if (which != endOfIteration) return -1;
    if (!state_->Stopped() && SteadyNowS() < state_->hard_deadline) return -1;
    state_->lp_interrupted = true;
    return 0;  // stop
  }

 private:
  StopState* state_;
};

struct Formulation {
  int n = 0;
  std::vector<std::vector<int>> x, s, d, in, out;  // [t][i], -1 when absent
  std::map<std::tuple<int, int, int>, int> free;   // (t, i, k) -> column
  std::vector<std::vector<int>> u;                 // memory after step k of stage t
  std::vector<std::vector<int>> reach;             // [t][i]: see AddReachRows
  int first_cut = 0;                               // rows from here on are cuts: valid, not needed
  double energy_scale = 1;
  double bytes_scale = 1;
};

// next[i][t]: the first stage at or after t that reads tensor i, or -1.
std::vector<std::vector<int>> NextReads(const Problem& p) {
  const int n = p.size();
  std::vector<std::vector<int>> next(static_cast<size_t>(n), std::vector<int>(static_cast<size_t>(n), -1));
  for (int v = n - 1; v >= 0; --v) {
    for (int i = 0; i < n; ++i) next[i][v] = v + 1 < n ? next[i][v + 1] : -1;
    for (int i : p.preds[static_cast<size_t>(v)]) next[i][v] = v;
  }
  return next;
}

// A tensor not resident at the start of stage t is back for its next read u
// only if it is recomputed in stages t..u or was paged out before u. The LP
// relaxation otherwise pages a stored sliver back in at every stage and pays
// for one page-out of a sliver only (d stays set), so these rows,
//   s[t][i] + reach[t][i] >= 1,  reach[t][i] <= sum x[t..u][i] + sum out[<u][i],
// lift its bound on graphs with paging. reach is a chain through a gap: one
// row per stage and one long row per read.
void AddReachRows(const Problem& p, Formulation& f, Model& m) {
  const int n = p.size();
  const std::vector<std::vector<int>> next = NextReads(p);
  f.reach.assign(static_cast<size_t>(n), std::vector<int>(static_cast<size_t>(n), -1));
  for (int i = 0; i < n; ++i) {
    for (int t = n - 1; t > i; --t) {
      const int u = next[i][t];
      if (u < 0 || u == t || f.s[t][i] < 0) continue;  // no later read, or read here: the input row covers it
      const int col = m.AddContinuous(0, 1);
      f.reach[t][i] = col;
      std::vector<std::pair<int, double>> terms = {{col, 1}, {f.x[t][i], -1}};
      if (t + 1 < u) {
        terms.push_back({f.reach[t + 1][i], -1});
      } else {
        terms.push_back({f.x[u][i], -1});
        for (int r = i + 1; r < u; ++r) terms.push_back({f.out[r][i], -1});
      }
      m.AddRow(terms, -1e30, 0);
      m.AddRow({{f.s[t][i], 1}, {col, 1}}, 1, 1e30);
    }
  }
}

// The eviction bound's rows (solver/bound.h) in this model's terms: a tensor
// resident after stage t and not paged in during it was in RAM when node t was
// computed. With the reach rows they lift the root LP to the eviction bound on
// the demo's instance (the memory rows alone leave it below), so what branching
// proves comes on top of that bound.
void AddEvictionRows(const Problem& p, const Formulation& f, Model& m) {
  for (const EvictionRow& row : EvictionRows(p)) {
    const int t = row.stage;
    std::vector<std::pair<int, double>> terms;
    double rhs = 1;  // sum share * (1 - s[t+1][i] + in[t][i]) >= 1
    for (const auto& [i, share] : row.shares) {
      terms.push_back({f.s[t + 1][i], -share});
      if (f.in[t][i] >= 0) terms.push_back({f.in[t][i], share});
      rhs -= share;
    }
    m.AddRow(terms, rhs, 1e30);
  }
}

Formulation Build(const Problem& p, const MilpOptions& options, Model& m) {
  const int n = p.size();
  const bool prune = !options.poet_formulation;
  Formulation f;
  f.n = n;
  std::vector<int> last_use(static_cast<size_t>(n), -1);
  std::vector<std::vector<int>> succs(static_cast<size_t>(n));
  for (int v = 0; v < n; ++v) {
    for (int w : p.preds[static_cast<size_t>(v)]) {
      last_use[static_cast<size_t>(w)] = std::max(last_use[static_cast<size_t>(w)], v);
      succs[static_cast<size_t>(w)].push_back(v);
    }
  }
  double mean_j = 0;
  for (double j : p.compute_j) mean_j += j;
  mean_j /= n;
  f.energy_scale = mean_j > 0 ? mean_j : 1;
  f.bytes_scale = static_cast<double>(std::max<int64_t>(1, p.activation_budget_bytes));
  auto E = [&](double joules) { return joules / f.energy_scale; };
  auto B = [&](int i) { return static_cast<double>(p.ram_bytes[static_cast<size_t>(i)]) / f.bytes_scale; };
  auto lu = [&](int i) { return prune ? last_use[static_cast<size_t>(i)] : n; };

  auto grid = [n] {
    return std::vector<std::vector<int>>(static_cast<size_t>(n), std::vector<int>(static_cast<size_t>(n), -1));
  };
  f.x = grid();
  f.s = grid();
  f.d = grid();
  f.in = grid();
  f.out = grid();
  f.u = grid();
  for (int t = 0; t < n; ++t) {
    f.x[t][t] = m.AddFixedOne(E(p.compute_j[static_cast<size_t>(t)]));
    for (int i = 0; i < t; ++i) {
      const bool has_consumers = !succs[static_cast<size_t>(i)].empty() || !prune;
      if (p.Recomputable(i) && has_consumers) f.x[t][i] = m.AddBinary(E(p.compute_j[static_cast<size_t>(i)]));
      if (lu(i) >= t) f.s[t][i] = m.AddBinary(0);
      if (p.allow_paging) {
        if (lu(i) >= t + 1 && t >= i + 2) f.d[t][i] = m.AddBinary(0);
        if (f.d[t][i] >= 0 && t + 1 < n && lu(i) >= t + 1)
          f.in[t][i] = m.AddBinary(E(p.page_in_j[static_cast<size_t>(i)]));
        if (f.s[t][i] >= 0 && lu(i) >= t + 2) f.out[t][i] = m.AddBinary(E(p.page_out_j[static_cast<size_t>(i)]));
      }
    }
  }
  // Transitions between stages and paging preconditions.
  for (int t = 0; t < n; ++t) {
    for (int i = 0; i < t; ++i) {
      if (f.in[t][i] >= 0) m.AddRow({{f.in[t][i], 1}, {f.d[t][i], -1}}, -1e30, 0);
      if (f.out[t][i] >= 0) m.AddRow({{f.out[t][i], 1}, {f.s[t][i], -1}}, -1e30, 0);
    }
    if (t + 1 >= n) continue;
    for (int i = 0; i <= t; ++i) {
      if (f.s[t + 1][i] >= 0) {
        m.AddRow({{f.s[t + 1][i], 1}, {f.s[t][i], -1}, {f.x[t][i], -1}, {f.in[t][i], -1}}, -1e30, 0);
      }
      if (f.d[t + 1][i] >= 0) {
        m.AddRow({{f.d[t + 1][i], 1}, {f.d[t][i], -1}, {f.out[t][i], -1}}, -1e30, 0);
      }
    }
  }
  // Inputs present, frees, and memory.
  double big_runtime = 0;
  std::vector<std::pair<int, double>> runtime_terms;
  const double runtime_scale = std::max(p.PlainRuntimeS(), 1e-12);
  for (int t = 0; t < n; ++t) {
    for (int k = 0; k <= t; ++k) {
      if (f.x[t][k] < 0) continue;
      runtime_terms.push_back({f.x[t][k], p.runtime_s[static_cast<size_t>(k)] / runtime_scale});
      for (int i : p.preds[static_cast<size_t>(k)]) {
        m.AddRow({{f.x[t][k], 1}, {f.s[t][i], -1}, {f.x[t][i], -1}}, -1e30, 0);
        if (f.x[t][i] < 0 && f.s[t][i] < 0) continue;  // can never be present: no free
        const int col = m.AddBinary(0);
        f.free[{t, i, k}] = col;
        m.AddRow({{col, 1}, {f.x[t][k], -1}}, -1e30, 0);
        if (t + 1 < n && f.s[t + 1][i] >= 0) m.AddRow({{col, 1}, {f.s[t + 1][i], 1}}, -1e30, 1);
        std::vector<std::pair<int, double>> hazard = {{col, 1.0}};
        for (int j : succs[static_cast<size_t>(i)]) {
          if (j <= k || j > t || f.x[t][j] < 0) continue;
          m.AddRow({{col, 1}, {f.x[t][j], 1}}, -1e30, 1);
          hazard.push_back({f.x[t][j], 1.0});
        }
        if (options.poet_formulation) {
          // POET's lower side: free >= compute(k) - kept - later uses.
          std::vector<std::pair<int, double>> lower = {{col, 1}, {f.x[t][k], -1}};
          if (t + 1 < n && f.s[t + 1][i] >= 0) lower.push_back({f.s[t + 1][i], 1});
          for (size_t h = 1; h < hazard.size(); ++h) lower.push_back({hazard[h].first, 1});
          m.AddRow(lower, 0, 1e30);
        }
      }
    }
    // u[t][k] = resident + outputs so far - frees before k, within the budget (column bounds).
    int previous = -1;
    int previous_k = -1;
    for (int k = 0; k <= t; ++k) {
      if (f.x[t][k] < 0) continue;
      const int col = m.AddContinuous(0, 1.0);
      f.u[t][k] = col;
      std::vector<std::pair<int, double>> terms = {{col, 1}, {f.x[t][k], -B(k)}};
      if (previous < 0) {
        for (int i = 0; i < t; ++i) {
          if (f.s[t][i] >= 0) terms.push_back({f.s[t][i], -B(i)});
        }
      } else {
        terms.push_back({previous, -1});
        for (int i : p.preds[static_cast<size_t>(previous_k)]) {
          auto it = f.free.find({t, i, previous_k});
          if (it != f.free.end()) terms.push_back({it->second, B(i)});
        }
      }
      m.AddRow(terms, 0, 0);
      previous = col;
      previous_k = k;
    }
  }
  big_runtime = p.runtime_budget_s / runtime_scale;
  if (p.count_paging_time) {
    for (int t = 0; t < n; ++t) {
      for (int i = 0; i < t; ++i) {
        if (f.in[t][i] >= 0) runtime_terms.push_back({f.in[t][i], p.page_in_s[static_cast<size_t>(i)] / runtime_scale});
        if (f.out[t][i] >= 0)
          runtime_terms.push_back({f.out[t][i], p.page_out_s[static_cast<size_t>(i)] / runtime_scale});
      }
    }
  }
  m.AddRow(runtime_terms, -1e30, big_runtime + 1e-9);
  f.first_cut = m.rows();
  if (prune && p.allow_paging) AddReachRows(p, f, m);
  if (prune) AddEvictionRows(p, f, m);
  return f;
}

// Column values of a plan, including the frees and memory the simulator would see.
std::vector<double> Values(const Problem& p, const Formulation& f, const Plan& plan, int columns) {
  std::vector<double> v(static_cast<size_t>(columns), 0.0);
  const int n = f.n;
  auto set = [&](int col, double value) {
    if (col >= 0) v[static_cast<size_t>(col)] = value;
  };
  for (int t = 0; t < n; ++t) {
    for (int i = 0; i <= t; ++i) {
      set(f.x[t][i], plan.compute[t][i]);
      if (i < t) {
        set(f.s[t][i], plan.resident[t][i]);
        set(f.d[t][i], plan.stored[t][i]);
        set(f.in[t][i], plan.page_in[t][i]);
        set(f.out[t][i], plan.page_out[t][i]);
      }
    }
  }
  for (const auto& [key, col] : f.free) {
    const auto [t, i, k] = key;
    bool freed = plan.compute[t][k] && !(t + 1 < n && plan.resident[t + 1][i]);
    for (int j = k + 1; j <= t && freed; ++j) {
      if (plan.compute[t][j] &&
          std::find(p.preds[static_cast<size_t>(j)].begin(), p.preds[static_cast<size_t>(j)].end(), i) !=
              p.preds[static_cast<size_t>(j)].end()) {
        freed = false;
      }
    }
    set(col, freed ? 1 : 0);
  }
  if (!f.reach.empty()) {  // as AddReachRows chains them, from each read back through its gap
    const std::vector<std::vector<int>> next = NextReads(p);
    for (int i = 0; i < n; ++i) {
      std::vector<int> outs_before(static_cast<size_t>(n) + 1, 0);  // page-outs of i in stages i+1 .. t-1
      for (int t = i + 1; t < n; ++t) outs_before[t + 1] = outs_before[t] + plan.page_out[t][i];
      int supply = 0;
      for (int t = n - 1; t > i; --t) {
        if (next[i][t] == t) {
          supply = plan.compute[t][i] + outs_before[t];
        } else if (f.reach[t][i] >= 0) {
          supply += plan.compute[t][i];
          set(f.reach[t][i], std::min(1, supply));
        }
      }
    }
  }
  for (int t = 0; t < n; ++t) {
    double memory = 0;
    for (int i = 0; i < t; ++i) {
      if (plan.resident[t][i]) memory += static_cast<double>(p.ram_bytes[static_cast<size_t>(i)]) / f.bytes_scale;
    }
    int previous_k = -1;
    for (int k = 0; k <= t; ++k) {
      if (f.u[t][k] < 0) continue;
      if (previous_k >= 0) {
        for (int i : p.preds[static_cast<size_t>(previous_k)]) {
          auto it = f.free.find({t, i, previous_k});
          if (it != f.free.end() && v[static_cast<size_t>(it->second)] > 0.5) {
            memory -= static_cast<double>(p.ram_bytes[static_cast<size_t>(i)]) / f.bytes_scale;
          }
        }
      }
      if (plan.compute[t][k]) memory += static_cast<double>(p.ram_bytes[static_cast<size_t>(k)]) / f.bytes_scale;
      set(f.u[t][k], memory);
      previous_k = k;
    }
  }
  return v;
}

Plan PlanOf(const Formulation& f, const double* v) {
  Plan plan(f.n);
  auto on = [&](int col) { return col >= 0 && v[col] > 0.5; };
  for (int t = 0; t < f.n; ++t) {
    for (int i = 0; i < f.n; ++i) {
      plan.compute[t][i] = on(f.x[t][i]);
      plan.resident[t][i] = on(f.s[t][i]);
      plan.stored[t][i] = on(f.d[t][i]);
      plan.page_in[t][i] = on(f.in[t][i]);
      plan.page_out[t][i] = on(f.out[t][i]);
    }
  }
  return plan;
}

}  // namespace

BrokenRows MilpRowsBrokenBy(const Problem& p, const Plan& plan) {
  Model m;
  const Formulation f = Build(p, MilpOptions{}, m);
  return m.RowsBrokenBy(Values(p, f, plan, m.columns()), f.first_cut);
}

namespace {

MilpResult SolveMilpHere(const Problem& p, const MilpOptions& options, Salvage* salvage) {
  const double start = SteadyNowS();
  MilpResult result;
  StopState state;
  state.stop = options.stop;
  // The caller may overrun by max(1 s, 5%): CBC is asked to stop a little before
  // the limit (it finishes a cut pass or a node first), LPs are cut short a little after.
  const double limit_s = std::max(0.0, options.time_limit_s);
  const double slack_s = std::min(std::max(1.0, 0.05 * limit_s), 0.5 * limit_s);
  state.soft_deadline = start + limit_s - 0.3 * slack_s;
  state.hard_deadline = start + limit_s + 0.1 * slack_s;
  state.on_progress = options.on_progress;
  // Asked to stop before it began, or no time: the caller keeps its incumbent.
  if (state.Stopped() || options.time_limit_s <= 0) return result;
  Model m;
  const Formulation f = Build(p, options, m);
  result.columns = m.columns();
  result.rows = m.rows();
  state.salvage = salvage;
  state.formulation = &f;
  {
    std::lock_guard<std::mutex> lock(salvage->mutex);
    salvage->columns = result.columns;
    salvage->rows = result.rows;
  }

  OsiClpSolverInterface solver;
  m.LoadInto(solver);
  solver.messageHandler()->setLogLevel(0);
  solver.setHintParam(OsiDoReducePrint, true, OsiHintTry);
  // Presolve halves the root LP (resnet18_cifar at half its checkpoint-all peak: 3.4 s of CPU against 6.5 s).
  solver.setHintParam(OsiDoPresolveInInitial, true, OsiHintDo);
  // The root LP alone can take minutes on graphs of a few hundred nodes, and CBC
  // neither bounds its time nor tells a stopped LP from a cut-off one (it then
  // calls the incumbent optimal). So solve it here, within the time limit.
  {
    LpStop lp_stop(&state);
    solver.getModelPtr()->passInEventHandler(&lp_stop);  // Clp keeps a copy
  }
  solver.initialSolve();
  result.solve_time_s = SteadyNowS() - start;
  if (state.lp_interrupted) return result;  // out of time (or stopped): no bound, no schedule beyond the incumbent
  if (solver.isProvenPrimalInfeasible()) {
    result.proven_infeasible = !options.incumbent;
    return result;
  }
  if (!solver.isProvenOptimal()) return result;
  result.root_solved = true;
  result.lower_bound_j = solver.getObjValue() * f.energy_scale;
  state.energy_scale = f.energy_scale;
  state.trusted_bound = solver.getObjValue();
  {
    std::lock_guard<std::mutex> lock(salvage->mutex);
    salvage->root_solved = true;
    salvage->lower_bound_j = result.lower_bound_j;
  }
  if (state.on_progress) state.on_progress(std::numeric_limits<double>::infinity(), result.lower_bound_j);
  if (state.Stopped() || SteadyNowS() >= state.soft_deadline) return result;
  CbcModel model(solver);
  const int cbc_log = std::getenv("EDGECOST_CBC_LOG") ? 1 : 0;  // CBC's own progress, for diagnosis
  model.setLogLevel(cbc_log);
  model.messageHandler()->setLogLevel(cbc_log);
  model.setMaximumSeconds(std::max(0.01, state.soft_deadline - SteadyNowS()));
  if (options.threads > 1) model.setNumberThreads(options.threads);
  // Prove, don't stop early: the default gap tolerances would let "optimal" mean "close".
  model.setAllowableGap(1e-9);
  model.setAllowableFractionGap(1e-9);
  CglProbing probing;
  probing.setUsingObjective(1);
  probing.setMaxPass(1);
  probing.setMaxLook(20);
  CglGomory gomory;
  CglKnapsackCover knapsack;
  CglClique clique;
  clique.setStarCliqueReport(false);
  clique.setRowCliqueReport(false);
  CglMixedIntegerRounding2 mir;
  model.addCutGenerator(&probing, -1, "Probing");
  model.addCutGenerator(&gomory, -1, "Gomory");
  model.addCutGenerator(&knapsack, -1, "Knapsack");
  model.addCutGenerator(&clique, -1, "Clique");
  model.addCutGenerator(&mir, -1, "MIR");
  SearchEvents handler(start, &result.first_solution_s, &state);
  model.passInEventHandler(&handler);
  if (options.incumbent) {
    const std::vector<double> values = Values(p, f, *options.incumbent, m.columns());
    double objective = 0;
    const double* cost = model.solver()->getObjCoefficients();
    for (int c = 0; c < m.columns(); ++c) objective += cost[c] * values[static_cast<size_t>(c)];
    model.setBestSolution(values.data(), m.columns(), objective, true);
    result.first_solution_s = SteadyNowS() - start;
  }
  try {
    model.branchAndBound();
  } catch (const CoinError& e) {
    // CBC failed: the caller keeps the schedule it already has, and says why there is no more.
    result.error = "CBC failed in " + e.className() + "::" + e.methodName() + ": " + e.message();
    result.solve_time_s = SteadyNowS() - start;
    return result;
  }
  result.solve_time_s = SteadyNowS() - start;
  const bool trusted = !state.lp_interrupted.load();
  result.proven_infeasible = trusted && model.isProvenInfeasible() && !options.incumbent;
  if (model.bestSolution()) {
    result.plan = PlanOf(f, model.bestSolution());
    result.objective_j = model.getObjValue() * f.energy_scale;
    result.proven_optimal = trusted && model.isProvenOptimal();
  }
  const double bound = trusted ? model.getBestPossibleObjValue() : state.trusted_bound.load();
  if (std::isfinite(bound)) result.lower_bound_j = std::max(result.lower_bound_j, bound * f.energy_scale);
  return result;
}

// What a solve on its own thread owns: copies of everything it reads, so that it
// may outlive a caller that stopped waiting for it.
struct MilpJob {
  Problem problem;
  std::optional<Plan> incumbent;
  MilpOptions options;
  std::atomic<bool> stop{false};
  std::mutex mutex;  // guards the fields below, and calls of the caller's progress callback
  std::condition_variable changed;
  bool done = false;
  bool abandoned = false;
  MilpResult result;
  Salvage salvage;
};

// The MILP threads of this process. A thread the caller stopped waiting for is
// joined here, never detached: one still inside CBC while the process tears
// down at exit would crash it. Finished threads are joined at the next start;
// the rest are told to stop and joined when the process exits.
class MilpThreads {
 public:
  static MilpThreads& Get() {
    static MilpThreads threads;  // constructed after CBC's libraries, so destroyed before them
    return threads;
  }
  ~MilpThreads() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [thread, job] : running_) {
      job->stop = true;
      thread.join();
    }
  }
  void Start(const std::shared_ptr<MilpJob>& job) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::erase_if(running_, [](auto& entry) {
      std::lock_guard<std::mutex> job_lock(entry.second->mutex);
      if (!entry.second->done) return false;
      entry.first.join();  // done: it has returned, or is about to
      return true;
    });
    running_.emplace_back(std::thread([job] {
                            MilpResult result = SolveMilpHere(job->problem, job->options, &job->salvage);
                            std::lock_guard<std::mutex> lock(job->mutex);
                            job->result = std::move(result);
                            job->done = true;
                            job->changed.notify_all();
                          }),
                          job);
  }

 private:
  std::mutex mutex_;
  std::vector<std::pair<std::thread, std::shared_ptr<MilpJob>>> running_;
};

}  // namespace

// Building the model, Clp's setup before its first iteration and some of CBC's
// cut passes cannot be interrupted, and on graphs of a few hundred nodes they
// take seconds. So the MILP runs on a thread of its own: at the hard deadline
// the caller stops waiting, keeps its incumbent, and the thread, told to stop,
// ends at its next check without calling back.
MilpResult SolveMilp(const Problem& p, const MilpOptions& options) {
  const double start = SteadyNowS();
  if ((options.stop && options.stop->load()) || options.time_limit_s <= 0) return {};
  auto job = std::make_shared<MilpJob>();
  job->problem = p;
  if (options.incumbent) job->incumbent = *options.incumbent;
  job->options = options;
  job->options.incumbent = job->incumbent ? &*job->incumbent : nullptr;
  job->options.stop = &job->stop;
  const std::function<void(double, double)> caller_progress = options.on_progress;
  job->options.on_progress = nullptr;
  if (caller_progress) {
    std::weak_ptr<MilpJob> weak = job;
    job->options.on_progress = [weak, caller_progress](double energy_j, double bound_j) {
      std::shared_ptr<MilpJob> j = weak.lock();
      if (!j) return;
      std::lock_guard<std::mutex> lock(j->mutex);
      if (!j->abandoned) caller_progress(energy_j, bound_j);
    };
  }
  MilpThreads::Get().Start(job);
  const double limit_s = std::max(0.0, options.time_limit_s);
  const double give_up = start + limit_s + 0.2 * std::min(std::max(1.0, 0.05 * limit_s), 0.5 * limit_s);
  std::unique_lock<std::mutex> lock(job->mutex);
  double heartbeat = start;
  while (!job->done) {
    if (caller_progress && SteadyNowS() - heartbeat >= 1.0) {  // no news, e.g. during the root LP: say so once a second
      heartbeat = SteadyNowS();
      caller_progress(std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity());
    }
    if (options.stop && options.stop->load()) job->stop = true;  // the caller's stop, passed on
    if (SteadyNowS() >= give_up) {
      job->abandoned = true;
      job->stop = true;
      MilpResult late;
      std::lock_guard<std::mutex> salvage_lock(job->salvage.mutex);
      late.plan = job->salvage.plan;
      late.objective_j = job->salvage.objective_j;
      late.lower_bound_j = job->salvage.lower_bound_j;
      late.root_solved = job->salvage.root_solved;
      late.columns = job->salvage.columns;
      late.rows = job->salvage.rows;
      late.solve_time_s = SteadyNowS() - start;
      // Said as it is: with no schedule found, "its best schedule" would contradict "no schedule".
      late.error = !late.root_solved ? "the MILP was left to stop by itself at the time limit"
                   : late.plan       ? "CBC had not stopped at the time limit and was left to stop by itself; the "
                                       "schedule and bound it had reached are used"
                                     : "CBC had not stopped at the time limit and was left to stop by itself; it had "
                                       "found no schedule by then, only a lower bound";
      return late;
    }
    job->changed.wait_for(lock, std::chrono::milliseconds(20));
  }
  return std::move(job->result);
}

}  // namespace edgecost::solver
