// A schedule as a picture, like Figure 2 of the POET paper: stages down, nodes
// across, each cell coloured by what happens to that node in that stage.
#pragma once

#include <string>

#include "proto/edgecost.pb.h"
#include "solver/problem.h"

namespace edgecost::solver {

std::string ScheduleToSvg(const Problem& problem, const v1::Schedule& schedule);

}  // namespace edgecost::solver
