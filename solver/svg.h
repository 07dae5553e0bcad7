// A schedule as a picture, like Figure 2 of the POET paper: stages down, nodes
// across, each cell coloured by what happens to that node in that stage.
#pragma once

#include <string>

#include "base/markup.h"
#include "proto/edgecost.pb.h"
#include "solver/problem.h"

namespace edgecost::solver {

// "Optimal schedule (proven): 7.89 J ESTIMATED, peak 2.45 MB of 3.00 MB RAM"; a solve
// stopped by its time limit is the best schedule found, a baseline says its name.
std::string Headline(const v1::Schedule& schedule);

Markup ScheduleToSvg(const Problem& problem, const v1::Schedule& schedule);

}  // namespace edgecost::solver
