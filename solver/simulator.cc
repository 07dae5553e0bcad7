#include "solver/simulator.h"

#include <algorithm>

namespace edgecost::solver {
namespace {

class Replayer {
 public:
  Replayer(const Problem& p, const Plan& plan, SimulateOptions options)
      : p_(p), plan_(plan), n_(p.size()), options_(options) {
    succs_.resize(static_cast<size_t>(n_));
    for (int v = 0; v < n_; ++v) {
      for (int u : p.preds[static_cast<size_t>(v)]) succs_[static_cast<size_t>(u)].push_back(v);
    }
  }

  Replay Run() {
    if (plan_.size() != n_)
      return Fail(-1, -1,
                  "the schedule has " + std::to_string(plan_.size()) + " stages for " + std::to_string(n_) + " nodes");
    for (int i = 0; i < n_; ++i) {
      if (plan_.resident[0][i] || plan_.stored[0][i])
        return Fail(0, i, "nothing can be resident or stored before stage 0");
    }
    for (int t = 0; t < n_; ++t) {
      if (!Stage(t)) return replay_;
    }
    const double tolerance = 1e-9 * std::max(1.0, p_.runtime_budget_s);
    if (replay_.runtime_s > p_.runtime_budget_s + tolerance) {
      return Fail(-1, -1,
                  "runtime " + std::to_string(replay_.runtime_s) + " s exceeds the budget of " +
                      std::to_string(p_.runtime_budget_s) + " s");
    }
    v1::EnergyBreakdown& e = replay_.energy;
    e.set_total_j(e.compute_j() + e.recompute_j() + e.page_in_j() + e.page_out_j());
    replay_.valid = true;
    return replay_;
  }

 private:
  std::string Label(int node) const {
    return "node " + std::to_string(node) + " (" + p_.names[static_cast<size_t>(node)] + ")";
  }

  Replay Fail(int stage, int node, const std::string& what) {
    replay_.valid = false;
    replay_.violation_stage = stage;
    replay_.violation_node = node;
    replay_.violation = (stage >= 0 ? "stage " + std::to_string(stage) + ", " : std::string()) +
                        (node >= 0 ? Label(node) + ": " : std::string()) + what;
    return replay_;
  }

  bool Stage(int t) {
    const auto& R = plan_.compute[t];
    const auto& S = plan_.resident[t];
    const bool has_next = t + 1 < n_;
    if (!R[t]) return Fail(t, t, "stage " + std::to_string(t) + " must compute node " + std::to_string(t)).valid;
    for (int i = t + 1; i < n_; ++i) {
      if (R[i]) return Fail(t, i, "computed before its own stage").valid;
    }
    // Transitions into the next stage, and paging preconditions.
    const auto& out = plan_.page_out[t];
    const auto& in = plan_.page_in[t];
    const auto& D = plan_.stored[t];
    const auto& next_S = plan_.resident[has_next ? t + 1 : t];
    const auto& next_D = plan_.stored[has_next ? t + 1 : t];
    for (int i = 0; i < n_; ++i) {
      if (out[i] && !S[i]) return Fail(t, i, "paged out but not resident at the stage's start").valid;
      if (in[i] && !D[i]) return Fail(t, i, "paged in but not on storage").valid;
      if ((out[i] || in[i]) && !p_.allow_paging) return Fail(t, i, "paging is disabled for this problem").valid;
      if (has_next && next_S[i] && !(S[i] || R[i] || in[i])) {
        return Fail(t, i, "kept for the next stage but neither resident, computed nor paged in").valid;
      }
      if (has_next && next_D[i] && !(D[i] || out[i])) {
        return Fail(t, i, "on storage in the next stage but never paged out").valid;
      }
      if (i < t && R[i] && !p_.allow_remat) return Fail(t, i, "recomputation is disabled for this problem").valid;
      if (i < t && R[i] && !p_.Recomputable(i)) {
        return Fail(t, i, "a backward node is recomputed after its layer's update (updates in the backward pass)").valid;
      }
    }
    // Memory walk, in node order.
    int64_t memory = 0;
    for (int i = 0; i < n_; ++i) {
      if (S[i]) memory += p_.ram_bytes[static_cast<size_t>(i)];
    }
    Record(t, -1, MemoryPoint::When::kStageStart, memory);
    if (!Check(t, -1, memory)) return false;
    for (int k = 0; k <= t; ++k) {
      if (!R[k]) continue;
      for (int u : p_.preds[static_cast<size_t>(k)]) {
        if (!S[u] && !(R[u] && u < k)) {
          return Fail(t, k, "input " + Label(u) + " is neither resident nor computed earlier in the stage").valid;
        }
      }
      memory += p_.ram_bytes[static_cast<size_t>(k)];
      Record(t, k, MemoryPoint::When::kAfterCompute, memory);
      if (!Check(t, k, memory)) return false;
      // Inputs whose last use in this stage was k, and which are not kept, are freed.
      for (int u : p_.preds[static_cast<size_t>(k)]) {
        if (has_next && plan_.resident[t + 1][u]) continue;
        bool used_later = false;
        for (int j : succs_[static_cast<size_t>(u)]) used_later = used_later || (j > k && j <= t && R[j]);
        if (!used_later) memory -= p_.ram_bytes[static_cast<size_t>(u)];
      }
      Record(t, k, MemoryPoint::When::kAfterFree, memory);
      const double compute_j = p_.compute_j[static_cast<size_t>(k)];
      if (k == t) {
        replay_.energy.set_compute_j(replay_.energy.compute_j() + compute_j);
      } else {
        replay_.energy.set_recompute_j(replay_.energy.recompute_j() + compute_j);
        ++replay_.recomputations;
      }
      replay_.runtime_s += p_.runtime_s[static_cast<size_t>(k)];
    }
    for (int i = 0; i < n_; ++i) {
      const size_t u = static_cast<size_t>(i);
      if (plan_.page_in[t][i]) {
        replay_.energy.set_page_in_j(replay_.energy.page_in_j() + p_.page_in_j[u]);
        ++replay_.page_ins;
        if (p_.count_paging_time) replay_.runtime_s += p_.page_in_s[u];
      }
      if (plan_.page_out[t][i]) {
        replay_.energy.set_page_out_j(replay_.energy.page_out_j() + p_.page_out_j[u]);
        ++replay_.page_outs;
        if (p_.count_paging_time) replay_.runtime_s += p_.page_out_s[u];
      }
    }
    return true;
  }

  void Record(int t, int k, MemoryPoint::When when, int64_t memory) {
    if (options_.record_memory) replay_.memory.push_back({t, k, when, memory});
  }

  bool Check(int t, int k, int64_t memory) {
    replay_.peak_ram_bytes = std::max(replay_.peak_ram_bytes, memory);
    if (memory <= p_.activation_budget_bytes) return true;
    Fail(t, k,
         std::string(k < 0 ? "resident outputs at the stage's start take " : "memory after computing it is ") +
             std::to_string(memory) + " B, over the budget of " + std::to_string(p_.activation_budget_bytes) + " B");
    return false;
  }

  const Problem& p_;
  const Plan& plan_;
  const int n_;
  const SimulateOptions options_;
  std::vector<std::vector<int>> succs_;
  Replay replay_;
};

}  // namespace

Replay Simulate(const Problem& problem, const Plan& plan, SimulateOptions options) {
  return Replayer(problem, plan, options).Run();
}

Replay Simulate(const Problem& problem, const v1::Schedule& schedule, SimulateOptions options) {
  const int n = problem.size();
  Replay bad;
  if (schedule.stages_size() != n) {
    bad.violation =
        "the schedule has " + std::to_string(schedule.stages_size()) + " stages for " + std::to_string(n) + " nodes";
    return bad;
  }
  for (int t = 0; t < n; ++t) {
    const v1::Stage& s = schedule.stages(t);
    for (const auto* list : {&s.compute(), &s.keep(), &s.on_storage(), &s.page_in(), &s.page_out()}) {
      for (uint32_t i : *list) {
        if (i >= static_cast<uint32_t>(n)) {  // unsigned: ids of 2^31 and more too
          bad.violation = "stage " + std::to_string(t) + ": node " + std::to_string(i) + " does not exist";
          bad.violation_stage = t;
          return bad;
        }
      }
    }
  }
  return Simulate(problem, PlanFromStages(schedule, n), options);
}

double OverlappedRuntimeS(const Problem& problem, const Plan& plan) {
  const int n = problem.size();
  const bool timed = problem.page_in_s.size() == static_cast<size_t>(n) &&
                     problem.page_out_s.size() == static_cast<size_t>(n);
  constexpr double kNone = -1;
  std::vector<double> read_done(static_cast<size_t>(n), kNone), write_done(static_cast<size_t>(n), kNone);
  double now = 0, io_free = 0;
  const auto wait_for = [&](std::vector<double>& done, int u) {
    if (done[static_cast<size_t>(u)] != kNone) now = std::max(now, done[static_cast<size_t>(u)]);
    done[static_cast<size_t>(u)] = kNone;
  };
  const auto queue = [&](std::vector<double>& done, int u, double seconds) {
    io_free = std::max(io_free, now) + seconds;
    done[static_cast<size_t>(u)] = io_free;
  };
  for (int t = 0; t < n; ++t) {
    if (timed) {
      for (int i = 0; i < n; ++i) {
        if (plan.page_out[t][i]) queue(write_done, i, problem.page_out_s[static_cast<size_t>(i)]);
      }
      for (int i = 0; i < n; ++i) {
        if (plan.page_in[t][i]) queue(read_done, i, problem.page_in_s[static_cast<size_t>(i)]);
      }
    }
    for (int k = 0; k <= t; ++k) {
      if (!plan.compute[t][k]) continue;
      for (int u : problem.preds[static_cast<size_t>(k)]) wait_for(read_done, u);
      wait_for(write_done, k);  // a buffer being written out is not reused
      now += problem.runtime_s[static_cast<size_t>(k)];
    }
    // What the next stage does not keep is released: its page-out first.
    for (int i = 0; i < n; ++i) {
      if (t + 1 >= n || !plan.resident[t + 1][i]) wait_for(write_done, i);
    }
  }
  return std::max(now, io_free);  // the step ends when the I/O thread has drained
}

}  // namespace edgecost::solver
