// Schedules built from one decision per long-lived tensor (an output still
// needed two or more stages after it is computed):
//   kKeep        resident until its last use (checkpoint);
//   kPage        written out after it is computed, read back before each use;
//   kRecompute   dropped, recomputed in every stage that needs it;
//   kRecomputeOnce  dropped, recomputed at its first later use and kept from
//                there (how checkpoint_sequential replays a segment).
// A paged or recomputed-once tensor may be held: resident through a given
// stage (over its forward reads, say) and let go only after it.
// The greedy heuristic starts from keeping everything and, while the schedule
// is over the RAM budget, gives the tensor resident at the peak with the best
// bytes-per-joule trade a cheaper-in-memory policy; then it undoes what it can.
#pragma once

#include <optional>
#include <vector>

#include "solver/deadline.h"
#include "solver/plan.h"
#include "solver/problem.h"
#include "solver/simulator.h"

namespace edgecost::solver {

enum class Policy { kKeep, kPage, kRecompute, kRecomputeOnce };

// The plan that carries out `policies` (indexed by node; ignored for short-lived nodes).
// A paged tensor u stays resident through stage hold_until[u] (at least u + 2,
// the default) and is read back only for the uses after it: holding it over
// its forward uses saves a page-in for each. A recomputed-once tensor stays
// resident through hold_until[u] (at least u + 1) and is recomputed once, at
// its first use after it: held over its forward uses, it is recomputed once
// for the backward ones instead of at its next forward use.
Plan BuildPlan(const Problem& problem, const std::vector<Policy>& policies, const std::vector<int>& hold_until = {});

struct Candidate {
  Plan plan;
  Replay replay;
};

// Every node computed once, every output kept until its last use.
Candidate CheckpointAll(const Problem& problem);
// Every long-lived output paged out and back in: the least memory without recomputation.
Candidate PagingOnly(const Problem& problem);
// Greedy memory reduction as described above; nullopt when it cannot meet the
// budget. At `deadline` it returns what it has.
std::optional<Candidate> Greedy(const Problem& problem, const Deadline& deadline = {});
// Greedy (until `greedy_deadline`), then a local search from it: exchanges (one
// tensor's cheaper policy paid for by another's leaner one) and kicks (a few
// let-go tensors kept again, from a fixed seed), until done or `deadline`.
std::optional<Candidate> GreedyWithExchanges(const Problem& problem, const Deadline& greedy_deadline,
                                             const Deadline& deadline);
// PyTorch's checkpoint_sequential on the forward chain, with the segment count that costs least.
std::optional<Candidate> SqrtCheckpointing(const Problem& problem);
// Binomial (Revolve-style) checkpoint placement on the forward chain with the fewest checkpoints
// that fit; segments are replayed once, as in one level of Revolve's recursion.
std::optional<Candidate> Revolve(const Problem& problem);

// Memory no schedule can go below: some node's inputs and output together.
int64_t MemoryLowerBound(const Problem& problem);

}  // namespace edgecost::solver
