//===- ProfileFit.h - the profiler's fits ---------------------*- C++ -*-===//
#ifndef ORRERY_RUNTIME_LIB_PROFILEFIT_H
#define ORRERY_RUNTIME_LIB_PROFILEFIT_H

#include <utility>
#include <vector>

namespace orrery {
namespace runtime {

/// Least squares y = a + b·x.
inline std::pair<double, double> fitLine(const std::vector<double> &x,
                                  const std::vector<double> &y) {
  double n = double(x.size()), sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    sx += x[i];
    sy += y[i];
    sxx += x[i] * x[i];
    sxy += x[i] * y[i];
  }
  double d = n * sxx - sx * sx;
  double b = d != 0 ? (n * sxy - sx * sy) / d : 0;
  return {(sy - b * sx) / n, b};
}


/// A GEMM efficiency curve eff = e·t/(t + t½) from times at peak and
/// measured times: 1/eff = 1/e + (t½/e)/t is a line in 1/t (each point
/// weighs alike, small or large). Returns {e <= 1, t½ > 0}.
inline std::pair<double, double>
fitEfficiency(const std::vector<double> &atPeakS,
              const std::vector<double> &measuredS) {
  std::vector<double> invT, invEff;
  for (size_t i = 0; i < atPeakS.size(); ++i) {
    invT.push_back(1.0 / atPeakS[i]);
    invEff.push_back(measuredS[i] / atPeakS[i]);
  }
  auto [a, b] = fitLine(invT, invEff);
  double e = a > 0 ? 1.0 / a : 1.0;
  if (e > 1)
    e = 1;
  double half = b * e > 1e-9 ? b * e : 1e-9; // the catalog wants it positive
  return {e, half};
}

} // namespace runtime
} // namespace orrery

#endif // ORRERY_RUNTIME_LIB_PROFILEFIT_H
