//===- GradientSync.cpp - gradient reduction and the optimizer step -------===//
//
// After each stage's last backward: its gradients all-reduced over the
// data-parallel (and context-parallel) ranks, or reduce-scattered with the
// updated weights all-gathered under ZeRO-1/2 (ZeRO-3 reduces layer by
// layer in backward, priced there); the experts' over the ranks holding the
// same experts; overlapped with the last backward and the next forward by
// buckets; the tied weights' sync; then the optimizer step over the
// device's shard, on the device or (offload) on the host.
//
//===----------------------------------------------------------------------===//

#include "Simulation.h"
#include "orrery/CostModel/Collective.h"

#include <algorithm>

namespace orrery {
namespace detail {

GradientSync Simulation::syncGradients(const StepLayout &l, const Timeline &tl,
                                       StepResult &r) const {
  size_t pp = size_t(s.pp);
  GradientSync sync;
  for (auto *v : {&sync.dpExposedS, &sync.optS, &sync.finishS,
                  &sync.hostBytesPerNode, &sync.denseParams, &sync.expertParams,
                  &sync.tpGradParams, &sync.shardParams, &sync.optBytes})
    v->assign(pp, 0.0);
  for (int i = 0; i < s.pp; ++i) {
    syncStage(i, l, tl.lastBackwardS[i], sync, r);
    sync.finishS[i] = tl.free[i] + sync.dpExposedS[i] + sync.optS[i];
    if (sync.finishS[i] > sync.stepS) {
      sync.stepS = sync.finishS[i];
      sync.slowest = i;
    }
  }
  return sync;
}

void Simulation::syncStage(int i, const StepLayout &l, double lastBackwardS,
                           GradientSync &sync, StepResult &r) const {
  int v = s.virtualStages;
  double p = 0, tpGrad = 0, experts = 0, subnet = 0;
  for (int c2 = 0; c2 < v; ++c2) {
    p += l.params[s.chunkOnStage(i, c2)];
    tpGrad += l.tpGradParams[s.chunkOnStage(i, c2)];
    experts += l.expertParams[s.chunkOnStage(i, c2)];
    subnet += l.subnetParams[s.chunkOnStage(i, c2)];
  }
  double perDevice = p; // already per tp rank
  // The experts' gradients are reduced over the ranks that hold the same
  // experts (dp x cp / ep), the rest over dp x cp.
  double dense = perDevice - experts;
  sync.dpExposedS[i] = exposedReduction(i, l, lastBackwardS, perDevice, experts,
                                        subnet, tpGrad, r);
  optimizerStep(i, dense, experts, sync);
  sync.denseParams[i] = dense;
  sync.expertParams[i] = experts;
  sync.tpGradParams[i] = tpGrad;
}

double Simulation::gradientReduceS(CollectiveKind kind, double params,
                                   const GroupShape &g) const {
  return collectiveTime(kind, params * a.gradReduceBytes(), g,
                        int(a.gradReduceBytes()));
}

double Simulation::weightGatherS(double params, const GroupShape &g) const {
  return collectiveTime(CollectiveKind::AllGather,
                        params * a.weightBytesPerParam, g,
                        int(a.weightBytesPerParam));
}

/// Stage i's gradient reduction and weight gather as the step exposes
/// them, and the tied weights' sync.
double Simulation::exposedReduction(int i, const StepLayout &l,
                                    double lastBackwardS, double perDevice,
                                    double experts, double subnet,
                                    double tpGrad, StepResult &r) const {
  int v = s.virtualStages, m = int(s.microBatches());
  double dense = perDevice - experts;
  bool expertGroup = experts > 0 && s.ep > 1;
  // Gradients: all-reduced over dp, or (ZeRO-1/2, the distributed
  // optimizer) reduce-scattered, the updated 16-bit weights all-gathered
  // after the step. ZeRO-3 reduces gradients layer by layer in backward
  // (priced there).
  bool sharded = s.zeroStage == 1 || s.zeroStage == 2;
  CollectiveKind reduce =
      sharded ? CollectiveKind::ReduceScatter : CollectiveKind::AllReduce;
  // Subnetwork data parallelism: a block's gradients over its holders,
  // the rest (embedding, head) over every worker (no experts: sdp takes
  // ep 1).
  auto overGroups = [&](auto price) {
    if (s.subnetworkFraction > 0)
      return price(perDevice - subnet, at[i].dpGroup) +
             price(subnet, at[i].subnetworkGroup);
    return expertGroup ? price(dense, at[i].dpGroup) +
                             price(experts, at[i].expertDpGroup)
                       : price(perDevice, at[i].dpGroup);
  };
  auto reduced = [&](double params, const GroupShape &g) {
    return gradientReduceS(reduce, params, g);
  };
  auto gathered = [&](double params, const GroupShape &g) {
    return weightGatherS(params, g);
  };
  double grad = s.zeroStage == 3 ? 0 : overGroups(reduced);
  if (reduce == CollectiveKind::AllReduce && s.zeroStage != 3 &&
      at[i].dpGroup.aggregation.kind != InNetworkAggregation::Kind::None) {
    // Whether the switches' sum priced it: what the launch must enable.
    double bytes = dense * a.gradReduceBytes();
    int element = int(a.gradReduceBytes());
    double agg = aggregatedAllReduceTime(bytes, at[i].dpGroup, element);
    GroupShape plain = at[i].dpGroup;
    plain.aggregation = InNetworkAggregation{};
    if (agg >= 0 &&
        agg < collectiveTime(CollectiveKind::AllReduce, bytes, plain, element))
      r.inNetworkAggregation = aggregationName(at[i].dpGroup.aggregation.kind);
  }
  double gather = sharded ? overGroups(gathered) : 0;
  // Weights a batch or spatial split keeps whole on every tp rank: their
  // gradients are all-reduced across the tp group too.
  if (at[i].tp > 1 && tpGrad > 0)
    grad += gradientReduceS(CollectiveKind::AllReduce, tpGrad, at[i].tpGroup);
  // Overlapped (Megatron's --overlap-grad-reduce, DDP's buckets): the
  // reduction runs as the last micro-batch's backward fills the buckets;
  // the parameter all-gather (--overlap-param-gather) with the next
  // step's first forward, layer by layer.
  double firstForward = 0;
  for (int c2 = 0; c2 < v; ++c2)
    firstForward += l.fwdS[s.chunkOnStage(i, c2)];
  // The bucket holding the stage's first layer fills last and is gathered
  // first: nothing hides its reduction or its gather. A layer that occurs
  // once (an embedding: one table) is one bucket however large.
  double edge = 0;
  if (s.overlapGradReduce || s.overlapParamGather) {
    const LayerKind &first = w.kinds[l.sequence[l.chunkOf[i].front()]];
    double firstParams =
        first.count == 1
            ? double(first.parameters - first.replicatedParameters) / at[i].tp +
                  double(first.replicatedParameters)
            : 0;
    double bucket = std::max({a.gradBucketParams,
                              a.gradBucketParamsPerRank * at[i].dpGroup.ranks,
                              firstParams});
    edge = std::min(dense, bucket);
  }
  double lastBucket = sharded || s.zeroStage == 0
                          ? gradientReduceS(reduce, edge, at[i].dpGroup)
                          : 0;
  double firstBucket = sharded ? weightGatherS(edge, at[i].dpGroup) : 0;
  // ZeRO-2 holds only its gradient shard: every micro-batch's backward
  // reduce-scatters its gradients (DeepSpeed's partitioned gradients),
  // each exposed as the last one's is (no pipeline: refused above).
  double reductions = s.zeroStage == 2 ? double(m) : 1.0;
  return reductions * (s.overlapGradReduce
                           ? std::max(lastBucket, grad - lastBackwardS)
                           : grad) +
         (s.overlapParamGather ? std::max(firstBucket, gather - firstForward)
                               : gather) +
         l.tiedSyncS[i];
}

/// Stage i's optimizer step over the device's shard of `dense` and
/// `experts` parameters: on the device, or (offload) on the host.
void Simulation::optimizerStep(int i, double dense, double experts,
                               GradientSync &sync) const {
  // The distributed optimizer shards over the data-parallel ranks and
  // the context-parallel ones (they hold the same weights).
  double shard = s.zeroStage >= 1 ? double(at[i].dpGroup.ranks) : 1;
  // The parameters of the device's optimizer shard (the experts' shard
  // over dp x cp / ep ranks).
  double shardParams =
      dense / shard + experts / std::max(1.0, expertShard(shard));
  // Megatron-LM's step over the device's shard, per parameter: the
  // gradient read for its norm (clipping) and again by Adam; the fp32
  // master weight, momentum and variance read and written; the master
  // read again and copied into the half-precision weight; the gradient
  // buffer zeroed for the next step. Five kernels.
  double masterBytes = 4;
  double optBytes =
      shardParams * (3 * a.gradBytesPerParam + 2 * a.optimizerBytesPerParam +
                     masterBytes + a.weightBytesPerParam);
  if (s.offloadOptimizer) {
    // ZeRO-Offload (Ren et al. 2021) and Megatron-Core's CPU optimizer:
    // the host keeps the fp32 master weights, momentum, variance and
    // gradients of each device's shard (16 bytes per parameter); each
    // step the gradients go down over the device's PCIe link and the
    // updated 16-bit weights come back, and the node's CPUs run Adam over
    // every shard on the node at the host's memory bandwidth (it streams:
    // the fp32 state and gradient read, the state and the 16-bit copy
    // written).
    const NodeGroup &g = *at[i].group;
    double pcie = hostLinkOf(at[i])->bandwidthBytesPerS *
                  ncclLinkEfficiency(*hostLinkOf(at[i]));
    double moved = shardParams * (a.gradBytesPerParam + a.weightBytesPerParam);
    double cpuBytes = shardParams * g.devicesPerNode *
                      (2 * a.optimizerBytesPerParam + a.gradBytesPerParam +
                       a.weightBytesPerParam);
    sync.optS[i] = moved / pcie + cpuBytes / g.hostMemoryBandwidthBytesPerS;
    sync.hostBytesPerNode[i] =
        shardParams * g.devicesPerNode * (a.optimizerBytesPerParam + 4);
  } else {
    sync.optS[i] = opTime(*at[i].device, shardParams * 10, optBytes,
                          KernelClass::Pointwise, 5);
  }
  sync.shardParams[i] = shardParams;
  sync.optBytes[i] = optBytes;
}

} // namespace detail
} // namespace orrery
