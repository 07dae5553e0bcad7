// `edgecost bench solver`: the targets of the solver's issue on POET's
// instances, solved by edgecost and, for two of them, by POET's own formulation
// through the same CBC, printed as a table of figures (a benchmark, not a test).
#pragma once

#include <ostream>
#include <string>

#include "base/status.h"

namespace edgecost::solver {

struct SolverBenchOptions {
  double time_scale = 1.0;         // multiplies every instance's time limit (0.1 for a quick look)
  double poet_time_limit_s = 120;  // POET's formulation, per instance it runs on
  int threads = 1;
  std::string only;  // run only the instances whose model name contains this
  // Where a line goes every few seconds while an instance is solved (null: nowhere).
  std::ostream* progress = nullptr;
};

Status RunSolverBenchmark(std::ostream& out, const SolverBenchOptions& options);

}  // namespace edgecost::solver
