#include "profiler/nnls.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace edgecost::profiler {
namespace {

double Norm(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x * x;
  return std::sqrt(s);
}

std::vector<double> Residual(const Matrix& a, const std::vector<double>& b, const std::vector<double>& x) {
  std::vector<double> r(b);
  for (size_t i = 0; i < a.rows; ++i) {
    for (size_t j = 0; j < a.cols; ++j) r[i] -= a(i, j) * x[j];
  }
  return r;
}

}  // namespace

std::vector<double> LeastSquares(const Matrix& a, const std::vector<double>& b, const std::vector<size_t>& active) {
  const size_t m = a.rows, n = active.size();
  Matrix q(m, n);
  for (size_t i = 0; i < m; ++i) {
    for (size_t k = 0; k < n; ++k) q(i, k) = a(i, active[k]);
  }
  std::vector<double> rhs(b);
  // Householder: reduce q to upper triangular R, applying each reflection to rhs.
  for (size_t k = 0; k < n && k < m; ++k) {
    double norm = 0;
    for (size_t i = k; i < m; ++i) norm += q(i, k) * q(i, k);
    norm = std::sqrt(norm);
    if (norm == 0) continue;
    const double alpha = q(k, k) > 0 ? -norm : norm;
    std::vector<double> v(m, 0.0);
    for (size_t i = k; i < m; ++i) v[i] = q(i, k);
    v[k] -= alpha;
    double vv = 0;
    for (size_t i = k; i < m; ++i) vv += v[i] * v[i];
    if (vv == 0) continue;
    for (size_t j = k; j < n; ++j) {
      double dot = 0;
      for (size_t i = k; i < m; ++i) dot += v[i] * q(i, j);
      for (size_t i = k; i < m; ++i) q(i, j) -= 2 * dot / vv * v[i];
    }
    double dot = 0;
    for (size_t i = k; i < m; ++i) dot += v[i] * rhs[i];
    for (size_t i = k; i < m; ++i) rhs[i] -= 2 * dot / vv * v[i];
  }
  std::vector<double> z(n, 0.0);
  for (size_t k = std::min(n, m); k-- > 0;) {
    double s = rhs[k];
    for (size_t j = k + 1; j < n; ++j) s -= q(k, j) * z[j];
    z[k] = q(k, k) != 0 ? s / q(k, k) : 0;
  }
  return z;
}

std::vector<double> InverseGram(const Matrix& a) {
  const size_t n = a.cols;
  std::vector<double> g(n * n, 0.0), inv(n * n, 0.0);
  for (size_t i = 0; i < a.rows; ++i) {
    for (size_t j = 0; j < n; ++j) {
      for (size_t k = 0; k < n; ++k) g[j * n + k] += a(i, j) * a(i, k);
    }
  }
  for (size_t j = 0; j < n; ++j) inv[j * n + j] = 1;
  // Gauss-Jordan with partial pivoting: a few columns only.
  for (size_t c = 0; c < n; ++c) {
    size_t pivot = c;
    for (size_t r = c + 1; r < n; ++r) {
      if (std::fabs(g[r * n + c]) > std::fabs(g[pivot * n + c])) pivot = r;
    }
    if (std::fabs(g[pivot * n + c]) < 1e-300) return {};
    for (size_t k = 0; k < n; ++k) {
      std::swap(g[c * n + k], g[pivot * n + k]);
      std::swap(inv[c * n + k], inv[pivot * n + k]);
    }
    const double d = g[c * n + c];
    for (size_t k = 0; k < n; ++k) {
      g[c * n + k] /= d;
      inv[c * n + k] /= d;
    }
    for (size_t r = 0; r < n; ++r) {
      if (r == c) continue;
      const double f = g[r * n + c];
      for (size_t k = 0; k < n; ++k) {
        g[r * n + k] -= f * g[c * n + k];
        inv[r * n + k] -= f * inv[c * n + k];
      }
    }
  }
  return inv;
}

double StudentT975(int dof) {
  static const double kTable[] = {12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
                                  2.201,  2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
                                  2.080,  2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042};
  if (dof < 1) return std::numeric_limits<double>::infinity();
  if (dof <= 30) return kTable[dof - 1];
  return 1.96 + 2.4 / dof;  // within 0.3% of the exact quantile beyond 30
}

Result<NnlsResult> SolveNnls(const Matrix& a, const std::vector<double>& b, const std::vector<std::string>& names) {
  const size_t m = a.rows, n = a.cols;
  if (b.size() != m)
    return InvalidArgument("the right-hand side has " + std::to_string(b.size()) + " rows, not " + std::to_string(m));
  if (m < n) {
    return InvalidArgument("too few samples: " + std::to_string(m) + " for " + std::to_string(n) +
                           " unknowns; measure more windows");
  }
  auto name = [&](size_t j) { return j < names.size() ? names[j] : "column " + std::to_string(j); };
  // Linear dependence: modified Gram-Schmidt on the columns scaled to unit norm.
  std::vector<std::vector<double>> basis;
  for (size_t j = 0; j < n; ++j) {
    std::vector<double> col(m);
    for (size_t i = 0; i < m; ++i) col[i] = a(i, j);
    const double norm = Norm(col);
    if (norm == 0) {
      return InvalidArgument("singular design: " + name(j) +
                             " is zero in every sample, so its weight cannot be told; run workloads that exercise it, "
                             "or leave it out");
    }
    for (double& x : col) x /= norm;
    for (const std::vector<double>& e : basis) {
      double dot = 0;
      for (size_t i = 0; i < m; ++i) dot += e[i] * col[i];
      for (size_t i = 0; i < m; ++i) col[i] -= dot * e[i];
    }
    const double rest = Norm(col);
    if (rest < 1e-9) {
      return InvalidArgument("singular design: " + name(j) +
                             " moves in proportion to the other columns in every sample, so its weight cannot be "
                             "told apart from theirs; run workloads in which they vary independently, or leave it out");
    }
    for (double& x : col) x /= rest;
    basis.push_back(std::move(col));
  }

  // Lawson-Hanson: P (passive, free) and Z (held at zero).
  NnlsResult out;
  std::vector<double> x(n, 0.0);
  std::vector<bool> passive(n, false);
  double bnorm = Norm(b);
  const double tol = 1e-12 * std::max(1.0, bnorm);
  const int max_iterations = static_cast<int>(30 * n + 30);
  for (;;) {
    const std::vector<double> r = Residual(a, b, x);
    std::vector<double> w(n, 0.0);  // the negative gradient A^T (b - A x)
    for (size_t j = 0; j < n; ++j) {
      for (size_t i = 0; i < m; ++i) w[j] += a(i, j) * r[i];
    }
    size_t t = n;
    double best = 0;
    for (size_t j = 0; j < n; ++j) {
      if (!passive[j] && w[j] > best * (1 + 1e-12) && w[j] > tol) {
        best = w[j];
        t = j;
      }
    }
    if (t == n || out.iterations >= max_iterations) break;
    ++out.iterations;
    passive[t] = true;
    for (;;) {
      std::vector<size_t> active;
      for (size_t j = 0; j < n; ++j) {
        if (passive[j]) active.push_back(j);
      }
      const std::vector<double> zp = LeastSquares(a, b, active);
      std::vector<double> z(n, 0.0);
      bool feasible = true;
      for (size_t k = 0; k < active.size(); ++k) {
        z[active[k]] = zp[k];
        if (zp[k] <= 0) feasible = false;
      }
      if (feasible) {
        x = z;
        break;
      }
      // Step from x towards z as far as stays non-negative; drop what hits zero.
      double alpha = 1;
      size_t drop = n;
      for (size_t j : active) {
        if (z[j] <= 0 && x[j] / (x[j] - z[j]) <= alpha) {
          alpha = x[j] / (x[j] - z[j]);
          drop = j;
        }
      }
      for (size_t j = 0; j < n; ++j) {
        x[j] += alpha * (z[j] - x[j]);
        if (passive[j] && (j == drop || x[j] <= 1e-15 * std::max(1.0, std::fabs(z[j])))) {
          passive[j] = false;  // the one that reached zero first leaves, at least
          x[j] = 0;
        }
      }
      if (std::none_of(passive.begin(), passive.end(), [](bool p) { return p; })) break;
    }
  }
  out.x = x;
  out.residual_norm = Norm(Residual(a, b, x));
  return out;
}

}  // namespace edgecost::profiler
