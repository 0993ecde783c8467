//===- Collective.cpp - ring and hierarchical collectives ----------------===//
#include "orrery/CostModel/Collective.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string_view>

namespace orrery {

double ncclLinkEfficiency(const LinkSpec &link) {
  // NCCL's topology model: 20 GB/s per 25 GB/s NVLink (sm70/sm80), 20.6 on
  // sm90; PCIe gen3 x16 modelled at 12 of 15.75 GB/s; network cards at
  // 12 of 12.5 GB/s (100 Gb/s).
  // (string_view: compared by length first, on the search's hot path.)
  using sv = std::string_view;
  const std::string &kind = link.kind;
  if (kind == sv("nvlink"))
    return link.name == sv("NVLink4") || link.name == sv("NVLink5")
               ? 20.6 / 25.0
               : 20.0 / 25.0;
  if (kind == sv("pcie"))
    return 12.0 / 15.75;
  if (kind == sv("xgmi"))
    return 0.8;
  if (kind == sv("wan") || kind == sv("ethernet"))
    return 0.9;
  return 12.0 / 12.5; // infiniband, roce
}

static double effectiveBandwidth(const LinkSpec &l, double parallel) {
  return l.bandwidthBytesPerS * ncclLinkEfficiency(l) *
         std::max(parallel, 1e-9);
}

// Directed Hamiltonian cycles through ranks 0..ranks-1 (at most 7! for a
// node of 8), each hop realised by `hop(a, b)`: the alternative lists of
// directed links that carry it (empty: the hop is impossible). A cycle
// becomes one candidate ring per combination of alternatives.
using Ring = std::vector<std::pair<int, int>>;
static std::vector<Ring>
enumerateRings(int ranks, const std::function<std::vector<Ring>(int, int)> &hop,
               size_t limit) {
  std::vector<Ring> rings;
  std::vector<int> order = {0};
  std::vector<bool> used(ranks, false);
  used[0] = true;
  std::function<void(size_t, Ring &)> expand = [&](size_t k, Ring &acc) {
    if (rings.size() >= limit)
      return;
    if (k == size_t(ranks)) {
      rings.push_back(acc);
      return;
    }
    for (const Ring &alt : hop(order[k], order[(k + 1) % ranks])) {
      acc.insert(acc.end(), alt.begin(), alt.end());
      expand(k + 1, acc);
      acc.resize(acc.size() - alt.size());
    }
  };
  std::function<void()> enumerate = [&]() {
    if (rings.size() >= limit)
      return;
    if (int(order.size()) == ranks) {
      Ring acc;
      expand(0, acc);
      return;
    }
    for (int next = 1; next < ranks; ++next) {
      if (used[next] || hop(order.back(), next).empty())
        continue;
      used[next] = true;
      order.push_back(next);
      enumerate();
      order.pop_back();
      used[next] = false;
    }
  };
  enumerate();
  return rings;
}

// The most candidate rings the directed capacities carry at once (each link
// direction carries as many rings as there are links). Bounded search: no
// rank can take part in more rings than it has outgoing links.
static int packRings(const std::vector<std::vector<int>> &links, int ranks,
                     const std::vector<Ring> &rings) {
  std::vector<std::vector<int>> cap(ranks, std::vector<int>(ranks));
  int bound = INT32_MAX;
  for (int i = 0; i < ranks; ++i) {
    int out = 0;
    for (int j = 0; j < ranks; ++j)
      out += cap[i][j] = links[i][j];
    bound = std::min(bound, out);
  }
  int best = 0, budget = 200000;
  std::function<void(size_t, int)> pack = [&](size_t from, int count) {
    best = std::max(best, count);
    if (best >= bound || --budget <= 0)
      return;
    for (size_t c = from; c < rings.size() && best < bound; ++c) {
      for (auto [a, b] : rings[c])
        cap[a][b]--;
      bool fits = true;
      for (auto [a, b] : rings[c])
        fits &= cap[a][b] >= 0;
      if (fits)
        pack(c, count + 1);
      for (auto [a, b] : rings[c])
        cap[a][b]++;
    }
  };
  pack(0, 0);
  return best;
}

int ringsInTopology(const std::vector<std::vector<int>> &links, int ranks) {
  if (ranks < 2 || ranks > int(links.size()))
    return 0;
  if (ranks == 2) // a two-rank ring uses both directions of one link
    return links[0][1];
  auto direct = [&](int a, int b) {
    return links[a][b] > 0 ? std::vector<Ring>{{{a, b}}} : std::vector<Ring>{};
  };
  int rings = packRings(links, ranks, enumerateRings(ranks, direct, 100000));
  if (rings > 0)
    return rings;
  // No ring of direct links: NCCL's search then relaxes the path type to
  // NVB, a hop through one intermediate GPU of the group over NVLink, which
  // takes capacity on both links (src/graph/search.cc, PATH_NVB).
  auto relayed = [&](int a, int b) {
    std::vector<Ring> alts = direct(a, b);
    if (!alts.empty())
      return alts;
    for (int c = 0; c < ranks; ++c)
      if (c != a && c != b && links[a][c] > 0 && links[c][b] > 0)
        alts.push_back({{a, c}, {c, b}});
    return alts;
  };
  return packRings(links, ranks, enumerateRings(ranks, relayed, 20000));
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
  if (g.intraLink && g.intraLink->ncclBusBandwidthCapBytesPerS > 0)
    intra = std::min(intra, g.intraLink->ncclBusBandwidthCapBytesPerS);
  if (g.ranksPerNode >= g.ranks)
    return intra;
  // Across nodes NCCL runs one ring per channel and spreads the channels
  // over the network cards near the group's GPUs: each ring crosses a node
  // boundary on one card, so the node's ranks of the group together reach
  // the bandwidth of all their cards.
  double inter =
      g.nic ? effectiveBandwidth(*g.nic, g.nicSharePerRank *
                                             std::max(1, g.ranksPerNode))
            : 1e9;
  return std::min(intra, inter / std::max(1.0, g.ringTierFactor));
}

void placeOnTiers(GroupShape &g, const std::vector<FabricTier> &tiers,
                  int devicesPerNode, int64_t stride) {
  g.ringTierFactor = 1;
  g.allToAllTierFactor = 0;
  if (g.ranks <= 1 || g.ranksPerNode >= g.ranks)
    return;
  for (const FabricTier &t : tiers) {
    int64_t blockRanks = int64_t(t.nodes) * std::max(1, devicesPerNode);
    // The group's members inside one block: those within its ranks.
    int64_t inBlock = std::min<int64_t>(
        g.ranks,
        std::max<int64_t>(1, blockRanks / std::max<int64_t>(1, stride)));
    if (inBlock >= g.ranks)
      continue; // the whole group inside one block of this tier
    double nodesInBlock =
        std::ceil(double(inBlock) / std::max(1, g.ranksPerNode));
    g.ringTierFactor =
        std::max(g.ringTierFactor, t.oversubscription / nodesInBlock);
    g.allToAllTierFactor =
        std::max(g.allToAllTierFactor,
                 double(g.ranks - inBlock) / g.ranks * t.oversubscription);
  }
}

// One ring pass: `steps` hops each moving bytes/ranks, plus a latency each;
// of the steps, those that cross a node boundary (one per node and pass)
// pay the network's latency, the others the link inside the node's.
static double ringTime(double bytes, int ranks, double factor, double bw,
                       double latency, int nodes = 1, double netLatency = 0) {
  if (ranks <= 1 || bytes <= 0)
    return 0;
  int steps = int(std::lround(factor * (ranks - 1)));
  int interSteps =
      nodes > 1 ? std::min(steps, int(std::lround(factor * (nodes - 1)))) : 0;
  return factor * (ranks - 1) / ranks * bytes / bw +
         (steps - interSteps) * latency + interSteps * netLatency;
}

/// The time a measured curve gives (piecewise linear in bytes, the first
/// point's time below it, the last segment's slope above it); < 0 when the
/// link has no curve for this kind and group size.
static double measuredTime(const LinkSpec &l, CollectiveKind kind, double bytes,
                           int ranks) {
  const char *name = kind == CollectiveKind::AllReduce       ? "all-reduce"
                     : kind == CollectiveKind::AllGather     ? "all-gather"
                     : kind == CollectiveKind::ReduceScatter ? "reduce-scatter"
                     : kind == CollectiveKind::AllToAll      ? "all-to-all"
                                                             : "send-recv";
  const LinkSpec::MeasuredPoint *prev = nullptr, *last = nullptr,
                                *beforeLast = nullptr;
  for (const LinkSpec::MeasuredPoint &p : l.measured) {
    if (p.collective != name || p.ranks != ranks)
      continue;
    if (p.bytes >= bytes) {
      if (!prev)
        return p.seconds;
      double f = (bytes - prev->bytes) / std::max(1e-30, p.bytes - prev->bytes);
      return prev->seconds + f * (p.seconds - prev->seconds);
    }
    beforeLast = last;
    last = prev = &p;
  }
  if (!last)
    return -1;
  if (!beforeLast)
    return last->seconds * bytes / last->bytes;
  double slope = (last->seconds - beforeLast->seconds) /
                 std::max(1e-30, last->bytes - beforeLast->bytes);
  return last->seconds + slope * (bytes - last->bytes);
}

// What every NCCL collective pays before its first step: launch and
// set-up of the Simple protocol (src/graph/tuning.cc, baseLat ring/Simple).
static constexpr double kCollectiveBaseLatencyS = 8.4e-6;

// NCCL's latency model for NVLink SHARP inside one node: one 25 us figure
// and no per-step or base term (tuning.cc, hwLatencies NVLINK NVLS/Simple).
static constexpr double kNvlsLatencyS = 25e-6;

/// How much slower than at its full chunk NVLS moves a message of `bytes`
/// over `ranks` ranks: NCCL's enqueue (calcCollChunking) halves the
/// 128 KiB chunk (NCCL_NVLS_CHUNKSIZE) below 64, 8 and 2 loops of its 16
/// channels x `ranks` heads of chunks in flight, to 64, 32 and 16 KiB, and
/// each chunk step costs what moving `stepBytes` more would.
static double nvlsChunkFactor(double bytes, int ranks, double stepBytes) {
  if (stepBytes <= 0)
    return 1;
  const double full = 128 * 1024, inFlight = 16.0 * ranks;
  double chunk = full;
  if (bytes < 64 * inFlight * chunk)
    chunk = 64 * 1024;
  if (bytes < 8 * inFlight * chunk)
    chunk = 32 * 1024;
  if (bytes < 2 * inFlight * chunk)
    chunk = 16 * 1024;
  return (chunk + stepBytes) / chunk * full / (full + stepBytes);
}

/// A ring inside one node on NCCL's low-latency protocols, as its tuning
/// model prices them (src/graph/tuning.cc): LL sends 8-byte words that carry
/// their own 4-byte flag, so half the ring's bus bandwidth and no more than
/// the GPU generation's llMaxBw, at 6.6 us + 0.6 us a step on NVLink (1.0 on
/// PCIe); LL128 sends 128-byte lines with 8 bytes of flag each, 0.92 of the
/// bus bandwidth at 14 us + 1.9 us a step, and runs over NVLink only. NCCL
/// picks, by size, the fastest of these and Simple (the caller's ring);
/// +infinity where neither applies.
static double lowLatencyRingTime(double bytes, int ranks, double factor,
                                 double busBw, const LinkSpec &link) {
  using sv = std::string_view;
  bool nvlink = link.kind == sv("nvlink");
  if (!nvlink && link.kind != sv("pcie"))
    return std::numeric_limits<double>::infinity();
  double steps = std::round(factor * (ranks - 1));
  double moved = factor * (ranks - 1) / ranks * bytes;
  double llBw = 0.5 * busBw;
  if (link.ncclLlMaxBusBandwidthBytesPerS > 0)
    llBw = std::min(llBw, link.ncclLlMaxBusBandwidthBytesPerS);
  double ll = 6.6e-6 + steps * (nvlink ? 0.6e-6 : 1.0e-6) + moved / llBw;
  if (!nvlink)
    return ll;
  double ll128 = 14e-6 + steps * 1.9e-6 + moved / (0.92 * busBw);
  return std::min(ll, ll128);
}

/// The group's `local` ranks of one node (or scale-up domain) alone.
static GroupShape localShape(const GroupShape &g, int local) {
  GroupShape node = g;
  node.ranks = node.ranksPerNode = local;
  return node;
}

double aggregatedAllReduceTime(double bytes, const GroupShape &g,
                               int elementBytes) {
  const InNetworkAggregation &agg = g.aggregation;
  int local = std::max(1, std::min(g.ranks, g.ranksPerNode));
  int nodes = (g.ranks + local - 1) / local;
  if (agg.kind == InNetworkAggregation::Kind::None || !g.nic || nodes < 2 ||
      (agg.maxNodes > 0 && nodes > agg.maxNodes) || bytes <= 0)
    return -1;
  // Inside the node: reduce-scatter, then all-gather of the sums (a ring
  // over the local ranks, or NVLS where the switch has it).
  double intraS = 0;
  double intraLat = g.intraLink ? g.intraLink->latencyS : 0;
  if (local > 1) {
    double busBw = ringBusBandwidth(localShape(g, local));
    intraS = 2.0 * (local - 1) / local * bytes / busBw;
    if (g.nvls && g.intraLink && g.intraLink->ncclNvlsEfficiency > 0)
      intraS = std::min(intraS, bytes * (local + 1) / local /
                                    (busBw * g.intraLink->ncclNvlsEfficiency));
  }
  // Through the network: each local rank's shard up its share of the cards
  // once and the sum down once (the cards are full duplex), on the wire
  // in the aggregation's element format.
  double wire = bytes;
  if (agg.wireElementBytes > 0 && elementBytes > 0)
    wire *= double(agg.wireElementBytes) / elementBytes;
  double cards = g.nic->bandwidthBytesPerS * g.nicSharePerRank * local;
  // Above a fabric tier's oversubscribed uplinks the switches still sum:
  // each block sends the group's reduced stream up once, as a ring leaves
  // it once, at the same k over the group's nodes in the block.
  double netS =
      wire / (cards * agg.efficiency) * std::max(1.0, g.ringTierFactor);
  // The phases pipeline chunk by chunk: the slower one sets the pace.
  return kCollectiveBaseLatencyS + std::max(intraS, netS) +
         2 * (local - 1) * intraLat + g.nic->latencyS;
}

double collectiveTime(CollectiveKind kind, double bytes, const GroupShape &g,
                      int elementBytes) {
  if (g.ranks <= 1 || bytes <= 0)
    return 0;
  if (g.intraLink && !g.intraLink->measured.empty() &&
      g.ranksPerNode >= g.ranks) {
    double t = measuredTime(*g.intraLink, kind, bytes, g.ranks);
    if (t >= 0)
      return t;
  }
  double intraLat = g.intraLink ? g.intraLink->latencyS : 0;
  double netLat = g.nic ? g.nic->latencyS : intraLat;
  bool spansNodes = g.ranksPerNode < g.ranks;
  double latency = spansNodes ? netLat : intraLat;
  double busBw = ringBusBandwidth(g);
  if (kind == CollectiveKind::SendRecv)
    return latency + bytes / busBw;
  int nodes = (g.ranks + g.ranksPerNode - 1) / std::max(1, g.ranksPerNode);
  if (kind == CollectiveKind::AllToAll) {
    // Each rank sends 1/n of its buffer to every other rank at once: to
    // the group's ranks of its node (or scale-up domain) over the link
    // inside, to the others through its own share of the node's cards
    // (no ring pools a node's cards for it, as DeepEP's and NCCL's
    // all-to-all keep each GPU on its nearest NIC); both proceed together.
    double moveS = double(g.ranks - 1) / g.ranks * bytes / busBw;
    if (spansNodes && g.nic) {
      int local = std::max(1, std::min(g.ranks, g.ranksPerNode));
      double inside =
          local > 1 ? double(local - 1) / g.ranks * bytes /
                          ringBusBandwidth(localShape(g, local))
                    : 0.0;
      double across = double(g.ranks - local) / g.ranks * bytes /
                      effectiveBandwidth(*g.nic, g.nicSharePerRank);
      moveS = std::max(inside, across);
    }
    // What leaves a tier block shares the block's uplinks, k times fewer
    // than its ranks' cards.
    if (g.allToAllTierFactor > 0 && g.nic)
      moveS =
          std::max(moveS, g.allToAllTierFactor * bytes /
                              effectiveBandwidth(*g.nic, g.nicSharePerRank));
    return kCollectiveBaseLatencyS + moveS + (g.ranks - 1) * latency;
  }
  double factor = kind == CollectiveKind::AllReduce ? 2.0 : 1.0;
  double flat = kCollectiveBaseLatencyS +
                ringTime(bytes, g.ranks, factor, busBw, intraLat,
                         spansNodes ? nodes : 1, netLat);
  if (!spansNodes && g.intraLink)
    flat = std::min(flat, lowLatencyRingTime(bytes, g.ranks, factor, busBw,
                                             *g.intraLink));
  if (kind == CollectiveKind::AllReduce) {
    // NCCL's (double binary) tree: the message goes up and down a pipelined
    // tree, 2·S through each rank's link; a chain through the node's ranks
    // and a binary tree over the nodes, so 2·((local − 1) intra-node +
    // log2(nodes) network) latencies (tuning.cc); it wins on small messages
    // at large scale.
    int local = std::max(1, std::min(g.ranks, g.ranksPerNode));
    double tree =
        kCollectiveBaseLatencyS + 2 * bytes / busBw +
        2 * ((local - 1) * intraLat +
             (spansNodes ? std::ceil(std::log2(double(nodes))) * netLat : 0));
    flat = std::min(flat, tree);
    // NVLink SHARP inside one node: (n+1)/n of the message each way, at
    // NCCL's NVLS efficiency of the link's bus bandwidth.
    if (g.nvls && g.intraLink && g.intraLink->ncclNvlsEfficiency > 0 &&
        !spansNodes) {
      double n = g.ranks;
      double nvls =
          kNvlsLatencyS +
          bytes * (n + 1) / n / (busBw * g.intraLink->ncclNvlsEfficiency) *
              nvlsChunkFactor(bytes, g.ranks,
                              g.intraLink->ncclNvlsChunkStepBytes);
      flat = std::min(flat, nvls);
    }
    // SHARP (NCCL's CollNet) or SwitchML where the network reduces; NCCL
    // takes the faster.
    double agg = aggregatedAllReduceTime(bytes, g, elementBytes);
    if (agg >= 0)
      flat = std::min(flat, agg);
  }
  return flat;
}

/// The chance that none of a token's k experts, drawn without repeats
/// from `experts`, is among `held` of them.
static double missesAll(int experts, int topK, double held) {
  double p = 1;
  for (int i = 0; i < topK; ++i)
    p *= std::max(0.0, (experts - held - i) / double(experts - i));
  return p;
}

double routedDispatchTime(double tokenBytes, int experts, int topK,
                          const GroupShape &g) {
  if (g.ranks <= 1 || tokenBytes <= 0 || experts < 1 || topK < 1)
    return 0;
  int local = std::max(1, std::min(g.ranks, g.ranksPerNode));
  int nodes = (g.ranks + local - 1) / local;
  // Distinct ranks and nodes a token reaches, its experts spread evenly.
  double ranksHit =
      g.ranks * (1 - missesAll(experts, topK, double(experts) / g.ranks));
  double nodesHit =
      nodes * (1 - missesAll(experts, topK, double(experts) / nodes));
  double intraLat = g.intraLink ? g.intraLink->latencyS : 0;
  // Over the link inside: one copy to every other rank reached (directly,
  // or forwarded by the rank that took it off the network).
  double insideS = tokenBytes * ranksHit * (g.ranks - 1) / g.ranks /
                       ringBusBandwidth(localShape(g, local)) +
                   (local - 1) * intraLat;
  double acrossS = 0;
  if (nodes > 1 && g.nic) {
    // One copy to every other node reached, through the rank's own cards;
    // what leaves a tier block shares its uplinks (allToAllTierFactor:
    // the share of a rank's bytes leaving the block, times k).
    double leaving = g.allToAllTierFactor * g.ranks / double(g.ranks - local);
    acrossS = tokenBytes * nodesHit * (nodes - 1) / nodes /
                  effectiveBandwidth(*g.nic, g.nicSharePerRank) *
                  std::max(1.0, leaving) +
              (nodes - 1) * g.nic->latencyS;
  }
  return kCollectiveBaseLatencyS + std::max(insideS, acrossS);
}

} // namespace orrery
