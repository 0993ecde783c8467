//===- Collective.cpp - ring and hierarchical collectives ----------------===//
#include "orrery/CostModel/Collective.h"

#include <algorithm>
#include <cmath>
#include <functional>

namespace orrery {

double ncclLinkEfficiency(const LinkSpec &link) {
  // NCCL's topology model: 20 GB/s per 25 GB/s NVLink (sm70/sm80), 20.6 on
  // sm90; PCIe gen3 x16 modelled at 12 of 15.75 GB/s; network cards at
  // 12 of 12.5 GB/s (100 Gb/s).
  if (link.kind == "nvlink")
    return link.name == "NVLink4" || link.name == "NVLink5" ? 20.6 / 25.0
                                                            : 20.0 / 25.0;
  if (link.kind == "pcie")
    return 12.0 / 15.75;
  if (link.kind == "xgmi")
    return 0.8;
  if (link.kind == "wan" || link.kind == "ethernet")
    return 0.9;
  return 12.0 / 12.5; // infiniband, roce
}

static double effectiveBandwidth(const LinkSpec &l, double parallel) {
  return l.bandwidthBytesPerS * ncclLinkEfficiency(l) *
         std::max(parallel, 1e-9);
}

int ringsInTopology(const std::vector<std::vector<int>> &links, int ranks) {
  if (ranks < 2 || ranks > int(links.size()))
    return 0;
  if (ranks == 2) // a two-rank ring uses both directions of one link
    return links[0][1];
  // Every directed Hamiltonian cycle through ranks 0..ranks-1 (at most 7!
  // for a node of 8), as lists of directed edges.
  std::vector<std::vector<std::pair<int, int>>> cycles;
  std::vector<int> path = {0};
  std::vector<bool> used(ranks, false);
  used[0] = true;
  std::function<void()> enumerate = [&]() {
    int last = path.back();
    if (int(path.size()) == ranks) {
      if (links[last][0] > 0) {
        std::vector<std::pair<int, int>> edges;
        for (int k = 0; k < ranks; ++k)
          edges.push_back({path[k], path[(k + 1) % ranks]});
        cycles.push_back(std::move(edges));
      }
      return;
    }
    for (int next = 1; next < ranks; ++next) {
      if (used[next] || links[last][next] <= 0)
        continue;
      used[next] = true;
      path.push_back(next);
      enumerate();
      path.pop_back();
      used[next] = false;
    }
  };
  enumerate();
  // The most cycles the directed capacities carry at once (each link
  // direction carries as many rings as there are links). Bounded search:
  // no rank can take part in more rings than it has outgoing links.
  std::vector<std::vector<int>> cap(ranks, std::vector<int>(ranks));
  int bound = INT32_MAX;
  for (int i = 0; i < ranks; ++i) {
    int out = 0;
    for (int j = 0; j < ranks; ++j) {
      cap[i][j] = links[i][j];
      if (j < ranks)
        out += links[i][j];
    }
    bound = std::min(bound, out);
  }
  int best = 0, budget = 200000;
  std::function<void(size_t, int)> pack = [&](size_t from, int count) {
    best = std::max(best, count);
    if (best >= bound || --budget <= 0)
      return;
    for (size_t c = from; c < cycles.size() && best < bound; ++c) {
      bool fits = true;
      for (auto [a, b] : cycles[c])
        fits &= cap[a][b] > 0;
      if (!fits)
        continue;
      for (auto [a, b] : cycles[c])
        cap[a][b]--;
      pack(c, count + 1);
      for (auto [a, b] : cycles[c])
        cap[a][b]++;
    }
  };
  pack(0, 0);
  return best;
}

double ringBusBandwidth(const GroupShape &g) {
  double intra = g.intraLink ? effectiveBandwidth(*g.intraLink, 1) : 1e30;
  if (g.intraLink && !g.intraLink->linkMultiplicity.empty()) {
    int local = std::min(g.ranks, g.ranksPerNode);
    int rings = ringsInTopology(g.intraLink->linkMultiplicity, local);
    if (rings > 0)
      intra = rings * g.intraLink->perLinkBandwidthBytesPerS *
              ncclLinkEfficiency(*g.intraLink);
    else if (g.fallback)
      intra = effectiveBandwidth(*g.fallback, 1);
  }
  if (g.ranksPerNode >= g.ranks)
    return intra;
  double inter = g.nic ? effectiveBandwidth(*g.nic, g.nicSharePerRank) : 1e9;
  return std::min(intra, inter);
}

// One ring pass: `steps` hops each moving bytes/ranks, plus a latency each.
static double ringTime(double bytes, int ranks, double factor, double bw,
                       double latency) {
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
    return double(g.ranks - 1) / g.ranks * bytes / busBw +
           (g.ranks - 1) * latency;
  double factor = kind == CollectiveKind::AllReduce ? 2.0 : 1.0;
  double flat = ringTime(bytes, g.ranks, factor, busBw, latency);
  if (kind == CollectiveKind::AllReduce) {
    // NCCL's (double binary) tree: the message goes up and down a pipelined
    // tree, 2·S through each rank's link, 2·log2(n) latencies; it wins on
    // small messages at large scale.
    double tree =
        2 * bytes / busBw + 2 * std::ceil(std::log2(double(g.ranks))) * latency;
    flat = std::min(flat, tree);
  }
  if (!spansNodes || g.ranksPerNode <= 1 || !g.intraLink)
    return flat;
  // Two levels: inside each node over the fast link, across nodes with the
  // node's data split over its ranks (each rank carries 1/ranksPerNode).
  int nodes = (g.ranks + g.ranksPerNode - 1) / g.ranksPerNode;
  GroupShape inside = g;
  inside.ranks = g.ranksPerNode;
  double intraBw = ringBusBandwidth(inside);
  double interBw = g.nic ? effectiveBandwidth(*g.nic, g.nicSharePerRank) : 1e9;
  double local = ringTime(bytes, g.ranksPerNode, 1.0, intraBw, intraLat);
  double across =
      ringTime(bytes / g.ranksPerNode, nodes, factor, interBw, netLat);
  double twoLevel =
      kind == CollectiveKind::AllReduce ? 2 * local + across : local + across;
  return std::min(flat, twoLevel);
}

} // namespace orrery
