//===- Collective.h - time of collectives on the links a group crosses ---===//
//
// Ring collectives (NCCL's default for large messages): an all-reduce over n
// ranks moves 2(n-1)/n of the message through every rank's slowest link, in
// 2(n-1) steps. All-reduce also has NCCL's pipelined tree: 2 times the
// message through each link and 2·log2(n) latencies, faster for small
// messages on many ranks; and, inside one NVSwitch node that has NVLink
// SHARP (H100, B200), NVLS: the switch reduces, so each GPU sends its
// buffer once and receives the reduced buffer once, (n+1)/n of the message
// each way (reduce-scatter reads n shards of S/n, all-gather multicasts
// one), at NCCL's NVLS efficiency of the link. Across nodes whose network
// aggregates (InfiniBand SHARP, SwitchML): reduce-scatter inside each node,
// each local rank's shard up through its card once and the sum down once,
// all-gather inside, pipelined (aggregatedAllReduceTime). A group spanning
// nodes also has a two-level (hierarchical) form: reduce-scatter inside each
// node, all-reduce across nodes, all-gather inside; the faster of the two is
// used. Bandwidth is what NCCL reaches on a link: its own per-link figures
// (src/graph/topo.h: 20 GB/s per NVLink of A100/V100, 20.6 on H100, 12 GB/s for
// a PCIe gen3 x16 path; network cards at line rate less protocol overhead),
// scaled with the link's line rate.
//
//===----------------------------------------------------------------------===//
#ifndef ORRERY_COSTMODEL_COLLECTIVE_H
#define ORRERY_COSTMODEL_COLLECTIVE_H

#include "orrery/CostModel/Hardware.h"

#include <string>
#include <vector>

namespace orrery {

enum class CollectiveKind {
  AllReduce,
  AllGather,
  ReduceScatter,
  AllToAll,
  SendRecv
};

/// One tier of the scale-out fabric above the nodes (docs/cluster.md,
/// "Fabric tiers"): the site's nodes in consecutive blocks of `nodes`, each
/// block non-blocking inside (a leaf group, a scalable unit, a pod); what
/// leaves a block shares its uplinks, `oversubscription` k times fewer than
/// its nodes' cards (downlink over uplink bandwidth; 1: full bisection).
struct FabricTier {
  std::string name;
  int nodes = 0;
  double oversubscription = 1;
};

/// Where a group's ranks sit.
struct GroupShape {
  int ranks = 1;        ///< ranks in the group
  int ranksPerNode = 1; ///< of the group, inside one node
  /// Link between ranks of one node, and its parallel paths per rank.
  const LinkSpec *intraLink = nullptr;
  /// NVLink ports per device (12 on A100, 18 on H100); 1 for PCIe.
  double intraLinksPerRank = 1;
  /// Network between nodes: bandwidth per rank (its share of the node's NICs).
  const LinkSpec *nic = nullptr;
  double nicSharePerRank = 1; ///< NICs per node / devices per node
  /// Used when the intra-node link is point to point and no ring of its
  /// links joins the group (a PCIe path through the host).
  const LinkSpec *fallback = nullptr;
  /// Whether an all-reduce inside one node may use NVLink SHARP where the
  /// link has it (NCCL picks the faster of it and the ring).
  bool nvls = true;
  /// What the network between the nodes reduces (SHARP, SwitchML).
  InNetworkAggregation aggregation;
  /// Fabric tiers the group spans (placeOnTiers): how much slower its
  /// ring's crossing of a tier's uplinks runs than its cards (1: not at
  /// all), and for an all-to-all the share of each rank's bytes that
  /// leaves its tier block times that tier's oversubscription, the most
  /// constraining tier's (0: none leaves).
  double ringTierFactor = 1, allToAllTierFactor = 0;
};

/// Places a group of `ranks` ranks `stride` apart on the fabric's tiers
/// (nodes of `devicesPerNode` devices in consecutive blocks per tier), as
/// every group of the step does at once: a tier block's uplinks carry each
/// such group's ring once out of the block, k times fewer than the block's
/// cards, so a ring slows by k over the group's nodes inside one block
/// (never below 1); an all-to-all sends the share of its bytes addressed
/// outside the block through them.
void placeOnTiers(GroupShape &g, const std::vector<FabricTier> &tiers,
                  int devicesPerNode, int64_t stride);

/// Rings a point-to-point topology offers to local ranks 0..ranks-1: each
/// ring uses one link direction per hop, so a pair joined by k links carries
/// k rings each way. Where no ring of direct links exists, a hop may pass
/// through one other GPU of the group (NCCL's NVB path), using a link
/// direction on each leg.
int ringsInTopology(const std::vector<std::vector<int>> &links, int ranks);

/// Fraction of a link's line rate that NCCL reaches (see the file comment).
double ncclLinkEfficiency(const LinkSpec &link);
/// Bus bandwidth (bytes/s) a ring over this group reaches, per rank.
double ringBusBandwidth(const GroupShape &g);
/// Seconds for a collective of `bytes` (the full message) over the group;
/// `elementBytes`: the size of one element (a gradient's reduce precision;
/// what SwitchML's 32-bit wire format doubles or keeps).
double collectiveTime(CollectiveKind kind, double bytes, const GroupShape &g,
                      int elementBytes = 2);
/// One dispatch (or combine) of a mixture of experts as DeepEP's normal
/// kernels run it (Megatron-Core's flex dispatcher; HybridEP likewise):
/// each token of `tokenBytes` (one copy) goes once to every other node
/// holding one of its top-k experts, through the rank's own share of the
/// network cards, and once to every rank holding one, over the link inside
/// (forwarded there from the node's receiving rank); the two proceed
/// together. The experts sit evenly on the group's ranks and the tokens
/// route uniformly (the hits are the expectation of k draws without
/// repeats). Megatron-Core's alltoall dispatcher is collectiveTime's
/// all-to-all of all k copies.
double routedDispatchTime(double tokenBytes, int experts, int topK,
                          const GroupShape &g);
/// The same all-reduce through the network's aggregation; < 0 where the
/// group has none (inside one node, more nodes than it spans).
double aggregatedAllReduceTime(double bytes, const GroupShape &g,
                               int elementBytes);

} // namespace orrery

#endif // ORRERY_COSTMODEL_COLLECTIVE_H
