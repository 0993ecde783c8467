//===- Cluster.h - sites, nodes, devices and the links between them ------===//
//
// The cluster spec (docs/cluster.md): sites -> node groups -> devices, with a
// device type per node group (mixed types allowed), the link inside a node,
// NICs per node, links between sites, optional prices and power. Presets:
// "8xA100-80G" (one node of 8) and "4x8xH100-SXM" (4 nodes of 8).
//
//===----------------------------------------------------------------------===//
#ifndef ORRERY_COSTMODEL_CLUSTER_H
#define ORRERY_COSTMODEL_CLUSTER_H

#include "orrery/CostModel/Collective.h"
#include "orrery/CostModel/Hardware.h"
#include "orrery/CostModel/Reliability.h"

#include <deque>
#include <string>
#include <vector>

namespace orrery {

/// A published fabric design by name (`"fabric": "meta-roce-llama3"`), its
/// tiers and source; nullptr for an unknown name.
struct BuiltinFabric {
  const char *name;
  std::vector<FabricTier> tiers;
  const char *source;
};
const BuiltinFabric *builtinFabric(const std::string &name);
std::string builtinFabricNames();

/// Identical nodes: `count` nodes of `devicesPerNode` devices each, in
/// scale-up domains of `domainNodes` consecutive nodes joined by one
/// switched link (a GB200 NVL72 rack: 18 trays of 4 GPUs on one NVLink
/// switch fabric). Host memory, network cards and failures stay per node;
/// a collective among a domain's devices runs over the intra-node link.
struct NodeGroup {
  int count = 1;
  int devicesPerNode = 1;
  int domainNodes = 1;
  /// Devices one scale-up link joins: a node's, or a domain's.
  int scaleUpDevices() const { return devicesPerNode * domainNodes; }
  const DeviceSpec *device = nullptr;
  const LinkSpec *intraNodeLink = nullptr;
  const LinkSpec *nic = nullptr;
  int nicsPerNode = 1;
  /// What the switches behind the cards reduce (`nic.in_network_aggregation`).
  InNetworkAggregation aggregation;
  double priceUsdPerDeviceHour = 0;
  double powerW = 0; ///< per device; the device's datasheet power by default
  /// Per device by activity: the node's `power_w_by_activity`, else the
  /// device's scaled to powerW.
  PowerByActivity power;
  /// Host memory and its bandwidth per node (optimizer offload's limit and
  /// the CPU optimizer's speed); the device's reference server by default,
  /// 0 when neither states them.
  double hostMemoryBytes = 0, hostMemoryBandwidthBytesPerS = 0;
  /// The site's fabric tiers above the nodes, smallest first (none: one
  /// non-blocking network, as before tiers were stated).
  std::vector<FabricTier> tiers;
};

/// A node's device-to-host link: PCIe 5 beside NVLink 4/5 or PCIe 5
/// between the devices, else PCIe 4.
const LinkSpec *hostLinkOf(const NodeGroup &group);

struct Site {
  std::string name;
  std::vector<NodeGroup> nodeGroups;
  /// The fraction of the global batch whose samples live here and are read
  /// only here (`data_share`): the replicas whose first stage is at this
  /// site take at least that many samples a step; 0: none pinned.
  double dataShare = 0;
  /// Where the site's fabric tiers come from (a built-in's source, or the
  /// spec's `fabric.source`); empty when none are stated.
  std::string fabricSource;
};

/// A link between two sites.
struct SiteLink {
  int siteA = 0, siteB = 0;
  LinkSpec link;
  double egressUsdPerGB = 0;
};

/// One device of the cluster, with its place.
struct DevicePlace {
  int site = 0;
  int node = 0;      ///< global node index
  int localRank = 0; ///< index inside the node
  int group = 0;     ///< node group index inside the site
};

class Cluster {
public:
  Cluster() = default;
  /// Copies point their node groups at their own inline devices and
  /// links (a copy outlives the spec it was parsed into).
  Cluster(const Cluster &other);
  Cluster &operator=(const Cluster &other);
  Cluster(Cluster &&) = default; // a deque's elements keep their addresses
  Cluster &operator=(Cluster &&) = default;

  std::string name;
  std::vector<Site> sites;
  std::vector<SiteLink> siteLinks;
  /// Failure rates, restarts and checkpoint storage (`reliability`).
  ReliabilitySpec reliability;

  /// Devices in order: site by site, node by node, rank by rank.
  const std::vector<DevicePlace> &devices() const { return devices_; }
  int numDevices() const { return int(devices_.size()); }
  int numNodes() const { return numNodes_; }
  const NodeGroup &groupOf(int device) const;
  const DeviceSpec &deviceSpec(int device) const {
    return *groupOf(device).device;
  }
  /// True when every device has the same type.
  bool homogeneous() const;
  /// Recomputes devices() after sites change.
  void finalize();
  /// Owns inline device and link types the spec declares.
  std::deque<DeviceSpec> inlineDevices;
  std::deque<LinkSpec> inlineLinks;

private:
  std::vector<DevicePlace> devices_;
  int numNodes_ = 0;
};

/// Parses a cluster spec (JSON text); errors name the offending field.
llvm::Expected<Cluster> parseClusterJson(const std::string &text,
                                         const std::string &what,
                                         const HardwareCatalog &catalog);
/// Parses a preset: "8xA100-80G", "4x8xH100-SXM".
llvm::Expected<Cluster> parseClusterPreset(const std::string &preset,
                                           const HardwareCatalog &catalog);
/// A preset if `spec` looks like one, else a JSON file path.
llvm::Expected<Cluster> loadCluster(const std::string &spec,
                                    const HardwareCatalog &catalog);

} // namespace orrery

#endif // ORRERY_COSTMODEL_CLUSTER_H
