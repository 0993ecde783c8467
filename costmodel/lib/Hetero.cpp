//===- Hetero.cpp - plans over mixed device types and several sites ------===//
//
// Each replica group is priced by the pipeline simulator with a placement
// per stage (its pool's device, node group and links); the groups run side
// by side, and the step ends when the slowest has reduced its gradients
// and the groups have reduced theirs with each other:
//
//   step = max over groups (its pipeline, its own gradient all-reduce and
//          optimizer) + the all-reduce across groups
//
// The reduction across groups is hierarchical: after each group's
// reduce-scatter, every device holds 1/n of the group's gradients, so
// min(n) parallel rings, one per shard, all-reduce the shards across the
// G groups over the network cards; between sites all of them share the
// WAN link. This all-reduce is not overlapped with backward (the groups of
// a balanced plan finish together, and the fast ones wait anyway).
//
//===----------------------------------------------------------------------===//

#include "orrery/CostModel/Hetero.h"
#include "Simulation.h"
#include "orrery/CostModel/Collective.h"
#include "orrery/CostModel/Errors.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

namespace orrery {

static llvm::Error err(const std::string &msg) { return inputError(msg); }

std::vector<Pool> clusterPools(const Cluster &c) {
  std::vector<Pool> pools;
  int first = 0;
  for (int s = 0; s < int(c.sites.size()); ++s) {
    const Site &site = c.sites[s];
    std::string siteName =
        site.name.empty() ? "site" + std::to_string(s) : site.name;
    for (int g = 0; g < int(site.nodeGroups.size()); ++g) {
      const NodeGroup &ng = site.nodeGroups[g];
      Pool p;
      p.site = s;
      p.group = g;
      p.firstDevice = first;
      p.devices = ng.count * ng.devicesPerNode;
      p.nodes = &ng;
      bool twin = false; // another group of this type at this site
      for (int h = 0; h < int(site.nodeGroups.size()); ++h)
        twin |= h != g && site.nodeGroups[h].device == ng.device;
      p.name = siteName + "/" + ng.device->name +
               (twin ? "#" + std::to_string(g) : "");
      first += p.devices;
      pools.push_back(p);
    }
  }
  return pools;
}

int64_t ReplicaGroup::samples() const {
  int64_t m = 0;
  for (int64_t x : microBatches)
    m += x;
  return m * microBatch;
}

int ReplicaGroup::devices() const {
  int n = 0;
  for (const HeteroStage &st : stages)
    n += st.tp * replicas;
  return n;
}

std::string HeteroStrategy::str(const std::vector<Pool> &pools) const {
  std::string out;
  for (size_t g = 0; g < groups.size(); ++g) {
    const ReplicaGroup &rg = groups[g];
    out += g ? " + " : "";
    out += "[";
    // Runs of stages on one pool with one tp: "A100-80G tp8 pp2 (40 layers)"
    for (size_t i = 0; i < rg.stages.size();) {
      size_t j = i;
      int layers = 0;
      while (j < rg.stages.size() && rg.stages[j].pool == rg.stages[i].pool &&
             rg.stages[j].tp == rg.stages[i].tp)
        layers += rg.stages[j++].layers;
      const HeteroStage &st = rg.stages[i];
      std::string type = st.pool < int(pools.size())
                             ? pools[st.pool].name
                             : "pool" + std::to_string(st.pool);
      out += (i ? " | " : "") + type + " tp" + std::to_string(st.tp) + " pp" +
             std::to_string(j - i) + " (" + std::to_string(layers) + " layers)";
      i = j;
    }
    int64_t lo = rg.microBatches.empty() ? 0 : rg.microBatches.front(), hi = lo;
    for (int64_t m : rg.microBatches) {
      lo = std::min(lo, m);
      hi = std::max(hi, m);
    }
    out += "] x" + std::to_string(rg.replicas) + " mbs" +
           std::to_string(rg.microBatch) + " m" + std::to_string(lo) +
           (hi != lo ? "-" + std::to_string(hi) : "") +
           (rg.recompute != Recompute::None
                ? std::string(" recompute=") + recomputeName(rg.recompute)
                : "");
  }
  out += ", gbs=" + std::to_string(globalBatch) +
         ", zero=" + std::to_string(zeroStage) +
         ", precision=" + precisionName(precision);
  return out;
}

llvm::Error placeDevices(HeteroStrategy &s, const Workload &w,
                         const Cluster &c) {
  std::vector<Pool> pools = clusterPools(c);
  if (s.groups.empty())
    return err("strategy: replica_groups: at least one group is needed");
  if (s.zeroStage < 0 || s.zeroStage > 3)
    return err("strategy: zero_stage: must be 0 to 3");
  int heads = w.attentionHeads();
  int64_t layers = w.totalLayers(), samples = 0;
  std::vector<int> used(pools.size(), 0);
  for (size_t g = 0; g < s.groups.size(); ++g) {
    ReplicaGroup &rg = s.groups[g];
    std::string at = "strategy: replica_groups[" + std::to_string(g) + "]";
    if (rg.replicas < 1)
      return err(at + ".replicas: must be at least 1");
    if (rg.microBatch < 1)
      return err(at + ".micro_batch_size_samples: must be at least 1");
    if (int(rg.microBatches.size()) != rg.replicas)
      return err(at + ".micro_batches_per_replica: " +
                 std::to_string(rg.microBatches.size()) + " entries for " +
                 std::to_string(rg.replicas) + " replicas");
    for (int64_t m : rg.microBatches) {
      if (m < 1)
        return err(at + ".micro_batches_per_replica: every replica needs at "
                        "least one micro-batch (leave a replica out instead)");
      if (m * int64_t(std::max<size_t>(1, rg.stages.size())) > kMaxStepTasks)
        return err(
            at + ".micro_batches_per_replica: " + std::to_string(m) +
            " micro-batches through " + std::to_string(rg.stages.size()) +
            " stages are more than the " + std::to_string(kMaxStepTasks) +
            " the simulator takes in one step");
    }
    if (rg.stages.empty())
      return err(at + ".stages: at least one stage is needed");
    samples += rg.samples();
    int64_t sum = 0;
    for (size_t i = 0; i < rg.stages.size(); ++i) {
      HeteroStage &st = rg.stages[i];
      std::string where = at + ".stages[" + std::to_string(i) + "]";
      if (st.pool < 0 || st.pool >= int(pools.size()))
        return err(where + ".pool: no pool " + std::to_string(st.pool) +
                   " (the cluster has " + std::to_string(pools.size()) + ")");
      const Pool &p = pools[st.pool];
      if (st.tp < 1 || p.nodes->scaleUpDevices() % st.tp)
        return err(where + ".tp: " + std::to_string(st.tp) +
                   " must divide the " +
                   std::to_string(p.nodes->scaleUpDevices()) +
                   " devices of a node (or scale-up domain) of " + p.name);
      if (heads > 0 && heads % st.tp)
        return err(where + ".tp: " + std::to_string(st.tp) +
                   " does not divide the model's " + std::to_string(heads) +
                   " attention heads");
      if (st.layers < 1)
        return err(where + ".layers: must be at least 1");
      sum += st.layers;
      // tp devices of a replica sit in one node: start on a multiple of tp.
      int start = (used[st.pool] + st.tp - 1) / st.tp * st.tp;
      int need = rg.replicas * st.tp;
      if (start + need > p.devices)
        return err(where + ": needs " + std::to_string(need) + " devices of " +
                   p.name + " but only " +
                   std::to_string(std::max(0, p.devices - start)) +
                   " are left of its " + std::to_string(p.devices));
      st.devices.clear();
      for (int d = 0; d < need; ++d)
        st.devices.push_back(p.firstDevice + start + d);
      used[st.pool] = start + need;
    }
    if (sum != layers)
      return err(at + ".stages: the layers sum to " + std::to_string(sum) +
                 ", the model has " + std::to_string(layers));
  }
  if (s.globalBatch < 1)
    return err("strategy: global_batch_size_samples: must be at least 1");
  if (samples != s.globalBatch)
    return err("strategy: the replicas' shares sum to " +
               std::to_string(samples) + " samples, the global batch is " +
               std::to_string(s.globalBatch));
  return llvm::Error::success();
}

/// The site link between two sites (null when none).
static const SiteLink *siteLink(const Cluster &c, int a, int b) {
  for (const SiteLink &sl : c.siteLinks)
    if ((sl.siteA == a && sl.siteB == b) || (sl.siteA == b && sl.siteB == a))
      return &sl;
  return nullptr;
}

/// A node's network bandwidth per device (bytes/s of line rate).
static double nicPerDevice(const NodeGroup &ng) {
  return ng.nic
             ? ng.nic->bandwidthBytesPerS * ng.nicsPerNode / ng.devicesPerNode
             : 0;
}

/// The transfer path between device `a` and device `b`: inside a node,
/// across nodes over the slower of the two nodes' cards, or over the WAN
/// link between their sites, shared by the concurrent transfers: the
/// sending stage's `nodeStreams` ranks on a's node share its cards, all
/// its `siteStreams` ranks the WAN link.
static GroupShape pathBetween(const Cluster &c, int a, int b, int nodeStreams,
                              int siteStreams) {
  const DevicePlace &pa = c.devices()[a], &pb = c.devices()[b];
  const NodeGroup &na = c.groupOf(a), &nb = c.groupOf(b);
  if (pa.node == pb.node)
    return groupShapeIn(na, 1, 2);
  GroupShape g;
  g.ranks = 2;
  g.ranksPerNode = 1;
  if (pa.site != pb.site) {
    const SiteLink *sl = siteLink(c, pa.site, pb.site);
    g.nic = sl ? &sl->link : na.nic;
    g.nicSharePerRank = 1.0 / std::max(1, siteStreams);
    return g;
  }
  const NodeGroup &slow = nicPerDevice(na) <= nicPerDevice(nb) ? na : nb;
  g.intraLink = na.intraNodeLink;
  g.nic = slow.nic;
  // The node's cards are shared by the transfers that cross at this
  // boundary at once (the stage's ranks on the node, at most all of its
  // devices), each using at most one card.
  int sharing = std::max(1, std::min(nodeStreams, slow.devicesPerNode));
  g.nicSharePerRank = std::min(1.0, double(slow.nicsPerNode) / sharing);
  return g;
}

namespace detail {

bool alignedGroups(const Cluster &c, const HeteroStrategy &s) {
  if (s.groups.size() < 2)
    return false;
  const ReplicaGroup &a = s.groups.front();
  int site = -1;
  for (const ReplicaGroup &b : s.groups) {
    if (b.stages.size() != a.stages.size())
      return false;
    for (size_t i = 0; i < a.stages.size(); ++i) {
      if (b.stages[i].tp != a.stages[i].tp ||
          b.stages[i].layers != a.stages[i].layers)
        return false;
      for (int d : b.stages[i].devices) {
        if (site >= 0 && c.devices()[d].site != site)
          return false;
        site = c.devices()[d].site;
      }
    }
  }
  return true;
}

void groupPipeline(const Cluster &c, const HeteroStrategy &s, size_t g,
                   const std::vector<Pool> &pools, Strategy &st,
                   std::vector<StagePlacement> &at) {
  const ReplicaGroup &rg = s.groups[g];
  int pp = int(rg.stages.size());
  st = Strategy();
  st.pp = pp;
  st.dp = rg.replicas;
  st.microBatch = rg.microBatch;
  int64_t most =
      *std::max_element(rg.microBatches.begin(), rg.microBatches.end());
  st.globalBatch = most * rg.microBatch * rg.replicas;
  st.zeroStage = s.zeroStage;
  st.recompute = rg.recompute;
  st.precision = s.precision;
  st.overlapGradReduce = s.overlapGradReduce;
  st.overlapParamGather = s.overlapParamGather;
  st.sequenceParallel = true; // only where a stage has tp > 1
  for (const HeteroStage &hs : rg.stages)
    st.stageLayers.push_back(hs.layers);
  at.clear();
  bool aligned = alignedGroups(c, s);
  for (int i = 0; i < pp; ++i) {
    const HeteroStage &hs = rg.stages[i];
    const NodeGroup &ng = *pools[hs.pool].nodes;
    StagePlacement p;
    p.device = ng.device;
    p.group = &ng;
    p.tp = hs.tp;
    p.tpGroup = groupShapeIn(ng, 1, hs.tp);
    p.dpGroup = groupShapeIn(ng, hs.tp, rg.replicas);
    if (aligned) {
      // Groups that split the model alike reduce each stage's gradients in
      // one collective over every group's replicas of it (one data-parallel
      // group per stage, as a framework that runs them as one job does),
      // at the pace of the slowest of their nodes.
      int replicas = 0;
      const NodeGroup *slow = &ng;
      for (const ReplicaGroup &o : s.groups) {
        replicas += o.replicas;
        const NodeGroup &on = *pools[o.stages[i].pool].nodes;
        if (nicPerDevice(on) < nicPerDevice(*slow))
          slow = &on;
      }
      p.dpGroup = groupShapeIn(*slow, hs.tp, replicas);
    }
    if (i + 1 < pp) {
      // The stage's ranks on the node of its first: they cross together.
      int node = c.devices()[hs.devices.front()].node, onNode = 0;
      for (int d : hs.devices)
        onNode += c.devices()[d].node == node;
      p.toNext =
          pathBetween(c, hs.devices.front(), rg.stages[i + 1].devices.front(),
                      onNode, rg.replicas * hs.tp);
    }
    at.push_back(p);
  }
}

} // namespace detail

std::vector<int64_t> pinnedSamples(const Cluster &c, int64_t globalBatch) {
  std::vector<int64_t> out;
  for (const Site &site : c.sites)
    out.push_back(
        int64_t(std::ceil(site.dataShare * double(globalBatch) - 1e-9)));
  return out;
}

/// Where a site holds pinned data, the replicas that start there (their
/// first stage reads the samples) take at least its share.
std::string dataShareProblem(const Cluster &c, const HeteroStrategy &s,
                             const std::vector<Pool> &pools) {
  std::vector<int64_t> pinned = pinnedSamples(c, s.globalBatch);
  std::vector<int64_t> taken(c.sites.size(), 0);
  for (const ReplicaGroup &rg : s.groups)
    taken[pools[rg.stages.front().pool].site] += rg.samples();
  for (size_t i = 0; i < pinned.size(); ++i)
    if (taken[i] < pinned[i]) {
      char share[32];
      std::snprintf(share, sizeof share, "%g", c.sites[i].dataShare);
      return "site " + c.sites[i].name + " holds " + std::to_string(pinned[i]) +
             " of the " + std::to_string(s.globalBatch) +
             " samples (data_share " + share +
             "), and the replicas whose first stage is there take " +
             std::to_string(taken[i]);
    }
  return "";
}

/// Replica group g's pipeline priced, its cost, WAN bytes and memory
/// added to `r`, its devices' peak to `peakFlops`.
static llvm::Error simulateGroup(const Workload &w, const Cluster &c,
                                 const HeteroStrategy &s, size_t g,
                                 const std::vector<Pool> &pools,
                                 const Assumptions &a, bool keepTrace,
                                 HeteroResult &r, double &peakFlops) {
  const ReplicaGroup &rg = s.groups[g];
  int pp = int(rg.stages.size());
  Strategy st;
  std::vector<StagePlacement> at;
  detail::groupPipeline(c, s, g, pools, st, at);
  for (int i = 0; i < pp; ++i) {
    const HeteroStage &hs = rg.stages[i];
    const NodeGroup &ng = *pools[hs.pool].nodes;
    peakFlops +=
        double(hs.tp) * rg.replicas * ng.device->tensorPeak(s.precision);
    for (int d : hs.devices)
      r.costUsd += c.groupOf(d).priceUsdPerDeviceHour / 3600.0;
  }
  auto res = simulatePipeline(w, st, at, a, keepTrace);
  if (!res)
    return res.takeError();
  for (size_t i = 0; i < res->stages.size(); ++i)
    res->stages[i].label = "group " + std::to_string(g) + " stage " +
                           std::to_string(i) + " " +
                           pools[rg.stages[i].pool].name;
  // WAN bytes of pipeline boundaries between sites: activations forward,
  // their gradients backward, every micro-batch of every replica.
  int64_t microBatches = 0;
  for (int64_t m : rg.microBatches)
    microBatches += m;
  for (int i = 0; i + 1 < pp; ++i) {
    int sa = c.devices()[rg.stages[i].devices.front()].site,
        sb = c.devices()[rg.stages[i + 1].devices.front()].site;
    if (sa == sb)
      continue;
    double bytes = res->boundaryBytesPerMicroBatch[i] * microBatches;
    r.wanBytesPerStep += bytes;
    if (const SiteLink *sl = siteLink(c, sa, sb))
      r.wanUsdPerStep += bytes / 1e9 * sl->egressUsdPerGB;
  }
  r.devicesUsed += rg.devices();
  r.groupsS = std::max(r.groupsS, res->stepS);
  r.peakMemoryBytes = std::max(r.peakMemoryBytes, res->peakMemoryBytes);
  if (g == 0 || res->memoryShortfallBytes > r.memoryShortfallBytes)
    r.memoryShortfallBytes = res->memoryShortfallBytes;
  if (!res->fits && r.fits) {
    r.fits = false;
    r.doesNotFit =
        "replica group " + std::to_string(g) + ": " + res->doesNotFit;
  }
  r.groups.push_back(std::move(*res));
  return llvm::Error::success();
}

/// Gradients across groups: min(n) rings of shards over the network (each
/// device's card share, the slowest pool's), and the WAN between sites
/// carrying the whole gradient on every ring edge that crosses it.
static void crossGroupSync(const Workload &w, const Cluster &c,
                           const HeteroStrategy &s,
                           const std::vector<Pool> &pools, const Assumptions &a,
                           HeteroResult &r) {
  int G = int(s.groups.size());
  double grad = double(w.parameters()) * a.gradReduceBytes();
  int streams = s.groups.front().devices();
  const NodeGroup *slow = nullptr;
  for (const ReplicaGroup &rg : s.groups) {
    streams = std::min(streams, rg.devices());
    for (const HeteroStage &hs : rg.stages) {
      const NodeGroup &ng = *pools[hs.pool].nodes;
      if (!slow || nicPerDevice(ng) < nicPerDevice(*slow))
        slow = &ng;
    }
  }
  GroupShape net;
  net.ranks = G;
  net.ranksPerNode = 1;
  net.nic = slow->nic;
  net.nicSharePerRank = double(slow->nicsPerNode) / slow->devicesPerNode;
  // The switches reduce across the groups where every group's nodes hang
  // off the same kind of aggregating fabric at one site.
  bool oneFabric = true;
  int site0 = c.devices()[s.groups.front().stages.front().devices.front()].site;
  for (const ReplicaGroup &rg : s.groups)
    for (const HeteroStage &hs : rg.stages)
      oneFabric &=
          pools[hs.pool].nodes->aggregation.kind == slow->aggregation.kind &&
          c.devices()[hs.devices.front()].site == site0;
  if (oneFabric)
    net.aggregation = slow->aggregation;
  double sync =
      collectiveTime(CollectiveKind::AllReduce, grad / std::max(1, streams),
                     net, int(a.gradReduceBytes()));
  double perEdge = 2.0 * (G - 1) / G * grad;
  for (int g = 0; g < G; ++g) {
    int sa = c.devices()[s.groups[g].stages.front().devices.front()].site;
    int sb =
        c.devices()[s.groups[(g + 1) % G].stages.front().devices.front()].site;
    if (sa == sb)
      continue;
    const SiteLink *sl = siteLink(c, sa, sb);
    if (!sl)
      continue;
    GroupShape wan;
    wan.ranks = G;
    wan.ranksPerNode = 1;
    wan.nic = &sl->link;
    sync = std::max(sync, collectiveTime(CollectiveKind::AllReduce, grad, wan,
                                         int(a.gradReduceBytes())));
    r.wanBytesPerStep += perEdge;
    r.wanUsdPerStep += perEdge / 1e9 * sl->egressUsdPerGB;
  }
  r.crossGroupSyncS = sync;
}

/// The step's figures, energy, cost and the trace of the sync.
static void heteroFigures(const Workload &w, const HeteroStrategy &s,
                          double peakFlops, bool keepTrace, HeteroResult &r) {
  r.stepS = r.groupsS + r.crossGroupSyncS;
  double perSample = 1.0 / std::max<int64_t>(1, w.batchSize);
  r.samplesPerS = double(s.globalBatch) / r.stepS;
  r.tokensPerS = r.samplesPerS * double(w.tokensPerSample);
  r.modelFlopsPerStep = double(w.forwardFlops() + w.backwardFlops()) *
                        perSample * double(s.globalBatch);
  r.modelTflopsPerDevice =
      r.modelFlopsPerStep / r.stepS / std::max(1, r.devicesUsed) / 1e12;
  r.mfu = r.modelFlopsPerStep / r.stepS / peakFlops;
  // Energy of the devices used (as the cost counts them): each group's as
  // its pipeline ran, then waiting for the slowest group and communicating
  // in the sync across groups.
  for (StepResult &g : r.groups)
    for (StageReport &st : g.stages) {
      st.activity.idleS += r.groupsS - g.stepS;
      st.activity.communicationS += r.crossGroupSyncS;
      r.energy.add(st.activity, st.power, st.devices);
    }
  r.energyJ = r.energy.total();
  r.costUsd = r.costUsd * r.stepS + r.wanUsdPerStep;
  if (keepTrace && r.crossGroupSyncS > 0)
    for (StepResult &g : r.groups)
      for (size_t i = 0; i < g.stages.size(); ++i)
        g.trace.push_back({int(i), "gradient all-reduce across groups", "dp",
                           r.groupsS, r.crossGroupSyncS});
}

llvm::Expected<HeteroResult> simulateHetero(const Workload &w, const Cluster &c,
                                            HeteroStrategy s,
                                            const Assumptions &a,
                                            bool keepTrace) {
  if (auto e = placeDevices(s, w, c))
    return std::move(e);
  std::vector<Pool> pools = clusterPools(c);
  std::string unread = dataShareProblem(c, s, pools);
  if (!unread.empty())
    return inputError(unread);
  HeteroResult r;
  r.strategy = s;
  double peakFlops = 0;
  for (size_t g = 0; g < s.groups.size(); ++g)
    if (auto e = simulateGroup(w, c, s, g, pools, a, keepTrace, r, peakFlops))
      return std::move(e);
  if (s.groups.size() > 1 && !detail::alignedGroups(c, s))
    crossGroupSync(w, c, s, pools, a, r);
  heteroFigures(w, s, peakFlops, keepTrace, r);
  return r;
}

std::string heteroTraceJson(const HeteroResult &r,
                            const std::vector<Pool> &pools) {
  StepResult merged;
  merged.stepS = r.stepS;
  for (const StepResult &g : r.groups) {
    int offset = int(merged.stages.size());
    for (const StageReport &st : g.stages)
      merged.stages.push_back(st);
    for (TraceEvent e : g.trace) {
      e.track += offset;
      merged.trace.push_back(e);
    }
  }
  return chromeTraceJson(merged, r.strategy.str(pools));
}

} // namespace orrery
