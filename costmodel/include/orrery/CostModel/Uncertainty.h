//===- Uncertainty.h - the band a prediction carries -------------*- C++ -*-===//
//
// Every simulated step carries p10 / p50 / p90 of the time (and, where
// published runs of its regime state it, of the peak memory) that runs
// like it measured: the simulator's prediction times the quantiles of
// measured / predicted over the published runs bench/validate.py prices
// (costmodel/data/validation_errors.json, which it writes) in the same
// regime — the device family and the kernels the stack runs — together with
// every run that used one of the less common mechanisms the prediction
// uses (pipeline and tensor parallelism and recompute are nearly every
// run's and stay in the regime). A band whose regime has too few runs of
// its own, or that leans on a mechanism no published run used (named),
// widens by how far the publications' stacks sit from the model
// (docs/costmodel.md, "Uncertainty band").
//
//===----------------------------------------------------------------------===//
#ifndef ORRERY_COSTMODEL_UNCERTAINTY_H
#define ORRERY_COSTMODEL_UNCERTAINTY_H

#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace orrery {

struct StepResult;
struct HeteroResult;

/// What a priced step's band is looked up by.
struct Regime {
  std::string deviceFamily; ///< "A100", "Hopper", "V100", ...; "mixed"
  std::string kernels;      ///< fused, unfused-attention or eager
  /// The mechanisms the step uses (pipeline, zero-bubble, fsdp, ...).
  std::vector<std::string> mechanisms;
};

Regime regimeOf(const StepResult &r);
Regime regimeOf(const HeteroResult &r);

struct Band {
  double p10 = 0, p50 = 0, p90 = 0;
};

struct Uncertainty {
  Band stepS;
  /// Peak memory per device; known when memoryRows > 0.
  Band peakMemoryBytes;
  int stepRows = 0, memoryRows = 0;
  Regime regime;
  /// The mechanisms used that no published run in the basis used.
  std::vector<std::string> unvalidated;
  /// Too few runs of the regime itself: the band rests on others' and is
  /// widened.
  bool borrowed = false;
};

/// The band of a step time and peak memory priced in `regime`.
Uncertainty uncertaintyOf(const Regime &regime, double stepS,
                          double peakMemoryBytes);
Uncertainty uncertaintyOf(const StepResult &r);
Uncertainty uncertaintyOf(const HeteroResult &r);

/// Replaces the built-in validation errors with a file of the same format
/// (a team's own measured runs, or bench/validate.py's held-out groups);
/// an error names the file and the field. An empty path restores the
/// built-in one.
llvm::Error setUncertaintyBasis(const std::string &path);
/// The same from the file's text (`what` names it in errors).
llvm::Error setUncertaintyBasisText(const std::string &text,
                                    const std::string &what);

} // namespace orrery

#endif
