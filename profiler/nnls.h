// Non-negative least squares (Lawson and Hanson, "Solving Least Squares
// Problems", 1974, chapter 23): minimise |A x - b| subject to x >= 0, for the
// small dense systems of an energy-model fit (tens of rows, a few columns).
#pragma once

#include <string>
#include <vector>

#include "base/status.h"

namespace edgecost::profiler {

// A dense matrix, row-major: rows x cols.
struct Matrix {
  size_t rows = 0, cols = 0;
  std::vector<double> data;
  Matrix(size_t r, size_t c) : rows(r), cols(c), data(r * c, 0.0) {}
  double& operator()(size_t r, size_t c) { return data[r * cols + c]; }
  double operator()(size_t r, size_t c) const { return data[r * cols + c]; }
};

struct NnlsResult {
  std::vector<double> x;
  double residual_norm = 0;  // |A x - b|
  int iterations = 0;
};

// Refuses fewer rows than columns, and a design whose columns are linearly
// dependent (one is, to 1e-9 of its norm, a combination of the others): its
// message names the first such column by `names` (when given).
Result<NnlsResult> SolveNnls(const Matrix& a, const std::vector<double>& b, const std::vector<std::string>& names = {});

// Unconstrained least squares on the columns `active` of `a` (Householder QR):
// their coefficients, in the order of `active`.
std::vector<double> LeastSquares(const Matrix& a, const std::vector<double>& b, const std::vector<size_t>& active);

// (A^T A)^-1 of the columns of `a`, for the covariance of a fit; empty when singular.
std::vector<double> InverseGram(const Matrix& a);

// The two-sided 95% quantile of Student's t with `dof` degrees of freedom.
double StudentT975(int dof);

}  // namespace edgecost::profiler
