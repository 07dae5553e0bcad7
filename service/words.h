// Words for the states people read about, in text output and the web view:
// never a raw enum name.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "proto/edgecost.pb.h"

namespace edgecost::service {

std::string_view JobStateText(v1::Job::State state);                // "succeeded"
std::string_view ScheduleStatusText(v1::Schedule::Status status);  // "optimal (proven)"

// "1 recomputation", "2 page-outs": a count with its noun, singular for one.
std::string CountText(uint64_t count, std::string_view noun);
// "3 recomputations, 2 page-outs, 2 page-ins": a schedule's operations, the same in the CLI, the web
// view and a training run's log.
std::string OperationsText(uint64_t recomputations, uint64_t page_outs, uint64_t page_ins);

// A feasible schedule's distance from the optimum, the same words in the CLI and the web view:
// "at most 0.19% above optimal (203 uJ); 13.9% of the energy above the floor unproven".
std::string GapText(const v1::Schedule& schedule);

// When a schedule's parameters are updated: "after the step (every gradient held until then)", or
// in the backward pass, each layer after its last backward node, with the gradients' bytes.
std::string UpdatesText(const v1::Schedule& schedule);

// A budget as its user gave it, short, the same in every table: "RAM 60.0 MB" (the RAM budget, the
// training process's peak RSS), "activations 9.00 MB" or "activations 50%" (the activation budget,
// a share of the plain step's activation peak); "-" for none.
std::string BudgetAsGiven(uint64_t process_ram_budget_bytes, uint64_t activation_budget_bytes,
                          double activation_budget_percent);
std::string BudgetAsGiven(const v1::ScheduleRequest& request);
std::string PercentText(double percent);  // "50%", "12.5%"
std::string BudgetAsGiven(const v1::TrainRun& run);

// One plain sentence for each term of the solver's output, for help texts and tooltips.
inline constexpr const char* kUnprovenMeaning =
    "The floor is the energy of computing every node once, which no schedule goes below; of what this schedule "
    "spends above the floor, this share is not yet proven necessary: the optimum lies between the lower bound and "
    "this schedule.";
inline constexpr const char* kEvictionBoundMeaning =
    "The eviction bound is a lower bound on the energy from memory alone: wherever a stage would hold more than the "
    "budget, outputs must be let go, and each one let go costs a recomputation or a page-out and page-in.";
inline constexpr const char* kRootLpMeaning =
    "The root LP is the MILP with whole-number choices relaxed to fractions, solved before any branching; its "
    "optimum is the MILP's first lower bound on the energy.";
inline constexpr const char* kStageMeaning =
    "A stage is one slice of the training step: stage t computes node t for the first time, and may first "
    "recompute earlier nodes or page their outputs in or out.";

}  // namespace edgecost::service
