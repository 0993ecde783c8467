//===- Hetero.h - plans over mixed device types and several sites --------===//
//
// A heterogeneous strategy is a list of replica groups. A replica group is
// one pipeline, replicated; each stage of it runs on devices of one pool
// (a node group: one device type at one site) with its own tensor-parallel
// degree and its own number of layers. Replicas take uneven shares of the
// global batch (whole micro-batches); the gradient average is weighted by
// those shares, so training is unchanged. Gradients are reduced
// hierarchically: inside each replica group (its data-parallel all-reduce),
// then across groups over the network, or over the WAN between sites.
//
// A homogeneous Strategy is the special case of one group whose stages all
// run on one pool with one tp; Simulator.h prices that case directly.
//
//===----------------------------------------------------------------------===//
#ifndef ORRERY_COSTMODEL_HETERO_H
#define ORRERY_COSTMODEL_HETERO_H

#include "orrery/CostModel/Simulator.h"

namespace orrery {

/// The devices of one node group: one device type, one site.
struct Pool {
  int site = 0, group = 0; ///< Cluster::sites[site].nodeGroups[group]
  int firstDevice = 0;     ///< cluster index of its first device
  int devices = 0;
  const NodeGroup *nodes = nullptr;
  std::string name; ///< "<site>/<device type>", or "<site>/<type>#<group>"
};

/// The cluster's pools, in device order.
std::vector<Pool> clusterPools(const Cluster &c);

/// Samples of the global batch each site must read itself a step (its
/// `data_share`, rounded up to whole samples), by site index.
std::vector<int64_t> pinnedSamples(const Cluster &c, int64_t globalBatch);

struct HeteroStage {
  int pool = 0;
  int tp = 1;
  int layers = 0;
  /// Cluster device indices, replica by replica, tp consecutive devices
  /// each (filled by placeDevices).
  std::vector<int> devices;
};

struct ReplicaGroup {
  std::vector<HeteroStage> stages; ///< the pipeline, in model order
  int replicas = 1;
  int64_t microBatch = 1; ///< samples per micro-batch
  /// Micro-batches of each replica (its share of the global batch is this
  /// times microBatch).
  std::vector<int64_t> microBatches;
  Recompute recompute = Recompute::None;
  int64_t samples() const;
  int devices() const;
};

struct HeteroStrategy {
  std::vector<ReplicaGroup> groups;
  int64_t globalBatch = 0;
  int zeroStage = 1;
  Precision precision = Precision::BF16;
  /// The overlaps of Strategy (docs/strategy.md): gradient reduction with
  /// the last backward, the distributed optimizer's all-gather with the
  /// next forward.
  bool overlapGradReduce = true, overlapParamGather = true;
  /// One line: "[H100-SXM tp8 x2 | A100-80G tp8 x4] x3 replicas, ..."
  std::string str(const std::vector<Pool> &pools) const;
};

/// "" when the replicas starting at each site take its pinned samples,
/// else the problem naming the site.
std::string dataShareProblem(const Cluster &c, const HeteroStrategy &s,
                             const std::vector<Pool> &pools);

struct HeteroResult {
  HeteroStrategy strategy;
  double stepS = 0, samplesPerS = 0, tokensPerS = 0;
  double modelFlopsPerStep = 0, modelTflopsPerDevice = 0, mfu = 0;
  /// Slowest replica group's step (its own data-parallel reduction and
  /// optimizer included), and the gradient reduction across groups.
  double groupsS = 0, crossGroupSyncS = 0;
  /// Bytes that cross a WAN link in one step, and their egress price.
  double wanBytesPerStep = 0, wanUsdPerStep = 0;
  /// Energy and cost of the devices used (cost plus WAN egress).
  double energyJ = 0, costUsd = 0;
  EnergyByActivity energy;
  int devicesUsed = 0;
  double peakMemoryBytes = 0; ///< the largest need of any device
  /// Per replica group: the pipeline's own simulation.
  std::vector<StepResult> groups;
  bool fits = true;
  std::string doesNotFit;
  double memoryShortfallBytes = 0;
};

/// Checks a strategy against the model and cluster (pools exist, tp divides
/// a node and the heads, layers sum to the model's, shares sum to the
/// global batch, enough devices in every pool) and fills every stage's
/// devices. Errors name the offending field.
llvm::Error placeDevices(HeteroStrategy &s, const Workload &w,
                         const Cluster &c);

/// Simulates one step of a heterogeneous strategy.
llvm::Expected<HeteroResult> simulateHetero(const Workload &w,
                                            const Cluster &c, HeteroStrategy s,
                                            const Assumptions &a = {},
                                            bool keepTrace = false);

/// Chrome trace of a heterogeneous step: one track per stage of every
/// replica group.
std::string heteroTraceJson(const HeteroResult &r,
                            const std::vector<Pool> &pools);

} // namespace orrery

#endif // ORRERY_COSTMODEL_HETERO_H
