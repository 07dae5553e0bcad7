// A training run as a picture: loss and step time over the steps, one SVG for
// `edgecost train --svg` and the web view's training run page.
#pragma once

#include "base/markup.h"
#include "proto/edgecost.pb.h"

namespace edgecost::service {

// Two panels over the steps: the loss, and the step time with the cost table's prediction as a
// dashed line; disturbed steps are hollow. Units in the axis titles; scales to its container.
Markup TrainRunSvg(const v1::TrainRun& run);

}  // namespace edgecost::service
