//===- UncertaintyText.cpp - a prediction's band as text lines ------------===//
#include "UncertaintyText.h"

#include <cstdio>

namespace orrery::cli {

static std::string joined(const std::vector<std::string> &v) {
  std::string out;
  for (const std::string &s : v)
    out += (out.empty() ? "" : ", ") + s;
  return out;
}

std::string uncertaintyLines(const Uncertainty &u) {
  if (u.stepRows == 0)
    return "";
  char buf[512];
  std::string mechanisms = joined(u.regime.mechanisms);
  std::snprintf(buf, sizeof buf,
                "band         p10 %.3f s   p50 %.3f s   p90 %.3f s   (%d "
                "published runs%s: %s, %s kernels%s%s)\n",
                u.stepS.p10, u.stepS.p50, u.stepS.p90, u.stepRows,
                u.borrowed ? ", few of this regime: widened" : "",
                u.regime.deviceFamily.c_str(), u.regime.kernels.c_str(),
                mechanisms.empty() ? "" : "; ", mechanisms.c_str());
  std::string out = buf;
  if (u.memoryRows > 0) {
    constexpr double kGiB = 1024.0 * 1024 * 1024;
    std::snprintf(buf, sizeof buf,
                  "memory band  p10 %.1f GiB   p50 %.1f GiB   p90 %.1f GiB   "
                  "(%d published runs)\n",
                  u.peakMemoryBytes.p10 / kGiB, u.peakMemoryBytes.p50 / kGiB,
                  u.peakMemoryBytes.p90 / kGiB, u.memoryRows);
    out += buf;
  }
  if (!u.unvalidated.empty()) {
    out += "unvalidated  " + joined(u.unvalidated) +
           ": no published run checks it; the band is widened by how far "
           "the published stacks sit from the model\n";
  }
  return out;
}

std::string stepBandFigure(const Uncertainty &u) {
  if (u.stepRows == 0)
    return "";
  char buf[128];
  std::snprintf(buf, sizeof buf, "%.3f / %.3f / %.3f s", u.stepS.p10,
                u.stepS.p50, u.stepS.p90);
  return buf;
}

} // namespace orrery::cli
