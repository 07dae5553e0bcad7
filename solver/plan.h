// A schedule as POET's decision matrices, indexed [stage][node]:
//   compute   R: node computed (or recomputed) in the stage; R[t][t] = 1
//   resident  S: output in RAM at the start of the stage
//   stored    D: output on storage at the start of the stage
//   page_in   In: read back during the stage (resident from the next one)
//   page_out  Out: written out during the stage (must be resident)
// Converts to and from the Schedule message.
#pragma once

#include <vector>

#include "proto/edgecost.pb.h"

namespace edgecost::solver {

using Matrix = std::vector<std::vector<char>>;

struct Plan {
  Matrix compute, resident, stored, page_in, page_out;

  explicit Plan(int n = 0)
      : compute(n, std::vector<char>(n, 0)),
        resident(n, std::vector<char>(n, 0)),
        stored(n, std::vector<char>(n, 0)),
        page_in(n, std::vector<char>(n, 0)),
        page_out(n, std::vector<char>(n, 0)) {}
  int size() const { return static_cast<int>(compute.size()); }
};

// Stages of the message: stage t's keep / on_storage describe the start of stage t + 1.
void PlanToStages(const Plan& plan, v1::Schedule& schedule);
Plan PlanFromStages(const v1::Schedule& schedule, int n);

}  // namespace edgecost::solver
