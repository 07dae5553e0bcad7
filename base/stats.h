// Order statistics, one definition for every figure that is a median or a percentile.
#pragma once

#include <vector>

namespace edgecost {

// The q-quantile (0 <= q <= 1) of `values`, interpolated linearly between the order statistics
// around it (numpy's default); 0 for none. Quantile(v, 0.5) averages the middle pair of an even count.
double Quantile(std::vector<double> values, double q);

inline double Median(std::vector<double> values) { return Quantile(std::move(values), 0.5); }

}  // namespace edgecost
