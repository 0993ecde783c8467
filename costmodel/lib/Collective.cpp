//===- Collective.cpp - ring and hierarchical collectives ----------------===//
#include "orrery/CostModel/Collective.h"

#include <algorithm>
#include <cmath>

namespace orrery {

double ncclLinkEfficiency(const LinkSpec &link) {
  // NCCL's topology model: 20 GB/s per 25 GB/s NVLink (sm70/sm80), 20.6 on
  // sm90; PCIe gen3 x16 modelled at 12 of 15.75 GB/s; network cards at
  // 12 of 12.5 GB/s (100 Gb/s).
  if (link.kind == "nvlink")
    return link.name == "NVLink4" || link.name == "NVLink5" ? 20.6 / 25.0 : 20.0 / 25.0;
  if (link.kind == "pcie")
    return 12.0 / 15.75;
  if (link.kind == "xgmi")
    return 0.8;
  if (link.kind == "wan" || link.kind == "ethernet")
    return 0.9;
  return 12.0 / 12.5; // infiniband, roce
}

static double effectiveBandwidth(const LinkSpec &l, double parallel) {
  return l.bandwidthBytesPerS * ncclLinkEfficiency(l) * std::max(parallel, 1e-9);
}

double ringBusBandwidth(const GroupShape &g) {
  double intra = g.intraLink ? effectiveBandwidth(*g.intraLink, 1) : 1e30;
  if (g.ranksPerNode >= g.ranks)
    return intra;
  double inter = g.nic ? effectiveBandwidth(*g.nic, g.nicSharePerRank) : 1e9;
  return std::min(intra, inter);
}

// One ring pass: `steps` hops each moving bytes/ranks, plus a latency each.
static double ringTime(double bytes, int ranks, double factor, double bw, double latency) {
  if (ranks <= 1 || bytes <= 0)
    return 0;
  int steps = int(std::lround(factor * (ranks - 1)));
  return factor * (ranks - 1) / ranks * bytes / bw + steps * latency;
}

double collectiveTime(CollectiveKind kind, double bytes, const GroupShape &g) {
  if (g.ranks <= 1 || bytes <= 0)
    return 0;
  double intraLat = g.intraLink ? g.intraLink->latencyS : 0;
  double netLat = g.nic ? g.nic->latencyS : intraLat;
  bool spansNodes = g.ranksPerNode < g.ranks;
  double latency = spansNodes ? netLat : intraLat;
  double busBw = ringBusBandwidth(g);
  if (kind == CollectiveKind::SendRecv)
    return latency + bytes / busBw;
  if (kind == CollectiveKind::AllToAll)
    return double(g.ranks - 1) / g.ranks * bytes / busBw + (g.ranks - 1) * latency;
  double factor = kind == CollectiveKind::AllReduce ? 2.0 : 1.0;
  double flat = ringTime(bytes, g.ranks, factor, busBw, latency);
  if (!spansNodes || g.ranksPerNode <= 1 || !g.intraLink)
    return flat;
  // Two levels: inside each node over the fast link, across nodes with the
  // node's data split over its ranks (each rank carries 1/ranksPerNode).
  int nodes = (g.ranks + g.ranksPerNode - 1) / g.ranksPerNode;
  double intraBw = effectiveBandwidth(*g.intraLink, 1);
  double interBw = g.nic ? effectiveBandwidth(*g.nic, g.nicSharePerRank) : 1e9;
  double local = ringTime(bytes, g.ranksPerNode, 1.0, intraBw, intraLat);
  double across = ringTime(bytes / g.ranksPerNode, nodes, factor, interBw, netLat);
  double twoLevel = kind == CollectiveKind::AllReduce ? 2 * local + across : local + across;
  return std::min(flat, twoLevel);
}

} // namespace orrery
