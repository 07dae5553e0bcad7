// `edgecost bench probes`: the cost of one probe read and the CPU used by a
// 1 kHz sampling thread, printed as figures (a benchmark, not a test).
#pragma once

#include <ostream>

#include "base/status.h"

namespace edgecost::probes {

Status RunProbesBenchmark(std::ostream& out);

}  // namespace edgecost::probes
