//===- LayerProfile.h - a stack's measured time per layer -----------------===//
//
// What AMP, Galvatron and Metis take as input: the forward time of one of
// the model's repeated layers as the user's training stack runs it, on a
// device type at a tensor-parallel degree and micro-batch. Orrery prices
// the same layer there; what its device model does not explain is the
// stack's host time per layer (Python, dispatch, synchronising timers and
// prints), which does not shrink with the device nor grow with the
// micro-batch (docs/costmodel.md, "Layer profiles").
//
//===----------------------------------------------------------------------===//
#ifndef ORRERY_COSTMODEL_LAYERPROFILE_H
#define ORRERY_COSTMODEL_LAYERPROFILE_H

#include "llvm/Support/Error.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace orrery {

struct LayerProfile {
  struct Entry {
    std::string device; ///< catalog or inline device name
    int tp = 1;
    int64_t microBatch = 1; ///< samples
    double forwardS = 0;    ///< measured, one layer's forward
  };
  std::vector<Entry> entries;
  std::string source;
  /// The entry of this device at this tp, or null.
  const Entry *find(const std::string &device, int tp) const {
    for (const Entry &e : entries)
      if (e.device == device && e.tp == tp)
        return &e;
    return nullptr;
  }
};

/// Backward host time per forward's: AMP's own model prices a layer's
/// backward as twice its forward (src/cost_het_cluster.py: 3 x the
/// profiled forward for both).
constexpr double kLayerProfileBackwardRatio = 2.0;

/// Reads a layer profile (schema "orrery-layer-profile", version 1); a
/// one-line error naming the offending field otherwise.
llvm::Expected<LayerProfile> parseLayerProfile(const nlohmann::json &j,
                                               const std::string &what);
llvm::Expected<LayerProfile> parseLayerProfileText(const std::string &text,
                                                   const std::string &what);
/// The same document back (what a plan records).
nlohmann::ordered_json layerProfileJson(const LayerProfile &p);

} // namespace orrery

#endif
