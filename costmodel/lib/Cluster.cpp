//===- Cluster.cpp - cluster specs and presets ---------------------------===//
#include "orrery/CostModel/Cluster.h"
#include "orrery/CostModel/Errors.h"
#include "orrery/CostModel/InputFile.h"
#include "orrery/CostModel/JsonInput.h"
#include "orrery/CostModel/Strategy.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"

#include <nlohmann/json.hpp>
#include <regex>
#include <vector>

namespace orrery {

using json = nlohmann::json;

static llvm::Error err(const std::string &what, const std::string &msg) {
  return inputError(what + ": " + msg);
}

const LinkSpec *hostLinkOf(const NodeGroup &group) {
  const LinkSpec *l = group.intraNodeLink;
  bool gen5 =
      l && (l->name == "NVLink4" || l->name == "NVLink5" || l->name == "PCIe5");
  return HardwareCatalog::builtin().link(gen5 ? "PCIe5" : "PCIe4");
}

Cluster::Cluster(const Cluster &other) { *this = other; }

Cluster &Cluster::operator=(const Cluster &other) {
  if (this == &other)
    return *this;
  name = other.name;
  sites = other.sites;
  siteLinks = other.siteLinks;
  reliability = other.reliability;
  inlineDevices = other.inlineDevices;
  inlineLinks = other.inlineLinks;
  devices_ = other.devices_;
  numNodes_ = other.numNodes_;
  // The same element of this copy's deque, for a pointer into other's.
  auto rebase = [](auto *p, const auto &from, auto &to) -> decltype(p) {
    for (size_t i = 0; i < from.size(); ++i)
      if (p == &from[i])
        return &to[i];
    return p;
  };
  for (Site &site : sites)
    for (NodeGroup &ng : site.nodeGroups) {
      ng.device = rebase(ng.device, other.inlineDevices, inlineDevices);
      ng.intraNodeLink =
          rebase(ng.intraNodeLink, other.inlineLinks, inlineLinks);
      ng.nic = rebase(ng.nic, other.inlineLinks, inlineLinks);
    }
  return *this;
}

const NodeGroup &Cluster::groupOf(int device) const {
  const DevicePlace &p = devices_.at(device);
  return sites[p.site].nodeGroups[p.group];
}

bool Cluster::homogeneous() const {
  for (const Site &site : sites)
    for (const NodeGroup &g : site.nodeGroups)
      if (g.count > 0 && g.devicesPerNode > 0 && g.device != &deviceSpec(0))
        return false;
  return true;
}

void Cluster::finalize() {
  devices_.clear();
  numNodes_ = 0;
  for (int s = 0; s < int(sites.size()); ++s)
    for (int g = 0; g < int(sites[s].nodeGroups.size()); ++g) {
      const NodeGroup &ng = sites[s].nodeGroups[g];
      for (int n = 0; n < ng.count; ++n, ++numNodes_)
        for (int r = 0; r < ng.devicesPerNode; ++r)
          devices_.push_back({s, numNodes_, r, g});
    }
}

/// The NIC a node of `device` has when the spec does not say: its
/// reference platform's where the catalog states it (`scale_out_nic`:
/// Gaudi's own RoCE ports, an MI300X platform's 400G NIC a GPU; a node of
/// fewer devices than share a port keeps one), else the InfiniBand
/// generation of its DGX/HGX system, one port per GPU; Ethernet otherwise.
/// Empty, or what is wrong (a scale-out link the catalog lacks).
static std::string defaultNic(const DeviceSpec &device,
                              const HardwareCatalog &catalog, NodeGroup &ng) {
  if (!device.scaleOutLink.empty()) {
    ng.nic = catalog.link(device.scaleOutLink);
    if (!ng.nic)
      return "scale_out_nic.link: unknown link '" + device.scaleOutLink +
             "' (known: " + catalog.linkNames() + ")";
    int per = device.scaleOutDevicesPerPort;
    ng.nicsPerNode = per > 0
                         ? (ng.devicesPerNode + per - 1) / per
                         : device.scaleOutPortsPerDevice * ng.devicesPerNode;
    return "";
  }
  const std::string &l = device.intraNodeLink;
  std::string nic = l == "NVLink2"   ? "IB-EDR"
                    : l == "NVLink3" ? "IB-HDR"
                    : l == "NVLink4" ? "IB-NDR"
                    : l == "NVLink5" ? "IB-XDR"
                                     : "Eth-100G";
  ng.nic = catalog.link(nic);
  ng.nicsPerNode = nic.rfind("IB-", 0) == 0 ? ng.devicesPerNode : 1;
  return "";
}

/// ", or a rack: GB200-NVL72, ..." for the catalog's rack systems.
static std::string rackNames(const HardwareCatalog &catalog) {
  std::string out;
  for (const DeviceSpec &d : catalog.devices())
    if (!d.rack.name.empty())
      out += (out.empty() ? "; or a rack: " : ", ") + d.name + "-" + d.rack.name;
  return out;
}

llvm::Expected<Cluster> parseClusterPreset(const std::string &preset,
                                           const HardwareCatalog &catalog) {
  static const std::regex re(R"(^(?:(\d+)x)?(\d+)x(.+)$)");
  std::smatch m;
  if (!std::regex_match(preset, m, re))
    return err("cluster preset '" + preset + "'",
               "expected DEVICESxTYPE or NODESxDEVICESxTYPE, e.g. 8xA100-80G "
               "or 4x8xH100-SXM");
  // -1 past nine significant digits (never a truncated count).
  auto count = [](const std::string &digits) -> long long {
    size_t first = std::min(digits.find_first_not_of('0'), digits.size());
    return digits.size() - first > 9 ? -1 : std::stoll(digits);
  };
  long long nodes = m[1].matched ? count(m[1].str()) : 1;
  long long perNode = count(m[2].str());
  if (nodes <= 0 || perNode <= 0 || nodes * perNode > 1000000)
    return err("cluster preset '" + preset + "'",
               "node and device counts must be 1 to 1,000,000 devices");
  const DeviceSpec *device = catalog.device(m[3]);
  // NxDEVICE-RACK: N of the device's rack systems (2xGB200-NVL72).
  const DeviceSpec *racked = nullptr;
  size_t dash = m[3].str().rfind('-');
  if (!device && dash != std::string::npos &&
      (racked = catalog.device(m[3].str().substr(0, dash))) &&
      racked->rack.name != m[3].str().substr(dash + 1))
    racked = nullptr;
  if (!device && !racked)
    return err("cluster preset '" + preset + "'",
               "unknown device type '" + m[3].str() +
                   "' (known: " + catalog.deviceNames() + rackNames(catalog) +
                   ")");
  if (racked && m[1].matched)
    return err("cluster preset '" + preset + "'",
               "a rack preset counts racks: RACKSx" + m[3].str() +
                   ", e.g. 2x" + m[3].str());
  if (racked) {
    device = racked;
    nodes = perNode * racked->rack.nodes;
    perNode = racked->rack.devicesPerNode;
    if (nodes * perNode > 1000000)
      return err("cluster preset '" + preset + "'",
                 "more than 1,000,000 devices");
  }
  Cluster c;
  c.name = preset;
  NodeGroup ng;
  ng.count = int(nodes);
  ng.devicesPerNode = int(perNode);
  ng.domainNodes = racked ? racked->rack.nodes : 1;
  ng.device = device;
  ng.intraNodeLink = catalog.link(device->intraNodeLink);
  ng.powerW = device->powerW;
  ng.power = device->power;
  ng.hostMemoryBytes = device->hostMemoryBytes;
  ng.hostMemoryBandwidthBytesPerS = device->hostMemoryBandwidthBytesPerS;
  std::string problem = defaultNic(*device, catalog, ng);
  if (!problem.empty())
    return err("cluster preset '" + preset + "'",
               "device '" + device->name + "'." + problem);
  c.sites.push_back({"site0", {ng}});
  c.finalize();
  return c;
}

/// Published fabric designs (docs/fabric-sources.md has the quotes): the
/// blocks each tier joins and its uplinks' oversubscription.
static const std::vector<BuiltinFabric> &builtinFabrics() {
  static const std::vector<BuiltinFabric> fabrics = {
      {"dgx-superpod-h100",
       {{"scalable unit", 32, 1}, {"spine (4 units)", 128, 1}},
       "NVIDIA DGX SuperPOD H100 reference architecture (RA-11333-001): 32 "
       "nodes a scalable unit, a leaf per rail, as many cables up as down "
       "at every tier"},
      {"dgx-superpod-b200",
       {{"scalable unit", 32, 1}, {"spine (4 units)", 128, 1}},
       "NVIDIA DGX SuperPOD B200 reference architecture: the H100 design's "
       "32-node units and leaf-spine-core cabling"},
      {"meta-roce-llama3",
       {{"rack", 2, 1}, {"AI zone", 384, 7}},
       "Llama 3 (arXiv 2407.21783, 3.3.1) and Meta's RoCE network (2024): "
       "racks of 16 GPUs, an AI zone of 3,072 GPUs with full bisection "
       "inside, zones joined through aggregation switches at 1:7"},
      {"alibaba-hpn7",
       {{"segment", 128, 1.067}, {"pod", 1920, 15}},
       "Alibaba HPN (SIGCOMM'24): 1,024-GPU segments under one rail-optimised "
       "ToR tier (128 x 200G down, 60 x 400G up), 15 segments a pod, pods "
       "joined at 15:1"},
      {"alibaba-dcn-plus",
       {{"segment", 16, 1}, {"pod", 64, 1}},
       "Alibaba DCN+ (HPN's appendix C): 128-GPU segments, 4 a pod, full "
       "bisection, ECMP"},
      {"bytedance-megascale",
       {{"ToR", 64, 0.5}},
       "MegaScale (NSDI'24, 3.6): 64 servers under one set of ToRs whose "
       "uplinks carry twice their downlinks, a non-blocking CLOS above"},
  };
  return fabrics;
}

const BuiltinFabric *builtinFabric(const std::string &name) {
  for (const BuiltinFabric &f : builtinFabrics())
    if (name == f.name)
      return &f;
  return nullptr;
}

std::string builtinFabricNames() {
  std::string out;
  for (const BuiltinFabric &f : builtinFabrics())
    out += (out.empty() ? "" : ", ") + std::string(f.name);
  return out;
}

namespace {

/// Reads a cluster spec (docs/cluster.md): every error names its field.
class ClusterReader {
public:
  ClusterReader(const std::string &what, const HardwareCatalog &catalog)
      : what(what), catalog(catalog) {}
  llvm::Expected<Cluster> read(const std::string &text);

private:
  const std::string &what;
  const HardwareCatalog &catalog;
  Cluster c;

  /// A misspelt field would otherwise fall back to its default and price a
  /// different cluster without a word (JsonInput.h).
  llvm::Error onlyKeys(const json &o, const std::string &path,
                       const std::vector<const char *> &known) const {
    std::string problem = unknownField(o, known);
    if (problem.empty())
      return llvm::Error::success();
    return err(what, (path.empty() ? "" : path + ".") + problem);
  }
  llvm::Error positiveInt(const json &o, const char *key,
                          const std::string &path, int dflt, int &out) const {
    if (!o.contains(key)) {
      out = dflt;
      return llvm::Error::success();
    }
    if (!o[key].is_number_integer() || o[key].get<long long>() <= 0 ||
        o[key].get<long long>() > 1000000)
      return err(what, path + "." + key + ": must be a positive integer, got " +
                           o[key].dump());
    out = o[key].get<int>();
    return llvm::Error::success();
  }
  llvm::Error nonNegative(const json &o, const char *key,
                          const std::string &path, double &out) const {
    if (!o.contains(key))
      return llvm::Error::success();
    if (!o[key].is_number() || o[key].get<double>() < 0)
      return err(what, path + "." + key +
                           ": must be a non-negative number, got " +
                           o[key].dump());
    out = o[key].get<double>();
    return llvm::Error::success();
  }
  llvm::Expected<const LinkSpec *> readLink(const json &v,
                                            const std::string &path,
                                            std::vector<const char *> known);
  llvm::Error readMeasured(const json &m, const std::string &path,
                           LinkSpec &l) const;
  llvm::Error readSite(const json &site, size_t s);
  llvm::Error readFabric(const json &f, const std::string &path,
                         std::vector<FabricTier> &tiers,
                         std::string &source) const;
  llvm::Expected<NodeGroup> readNodeGroup(const json &n,
                                          const std::string &path);
  llvm::Error readSiteLinks(const json &j);
};

/// A link: a catalog name, or an object with "link" plus overrides.
llvm::Expected<const LinkSpec *>
ClusterReader::readLink(const json &v, const std::string &path,
                        std::vector<const char *> known) {
  if (!v.is_string() && !v.is_object())
    return err(what, path + ": must be a link name or an object");
  if (v.is_object() && v.contains("link") && !v["link"].is_string())
    return err(what, path + ".link: expected a link name");
  std::string name = v.is_string() ? v.get<std::string>() : v.value("link", "");
  const LinkSpec *base = catalog.link(name);
  if (!base && !(v.is_object() && v.contains("bandwidth_bytes_per_s")))
    return err(what, path + ": unknown link type '" + name +
                         "' (known: " + catalog.linkNames() + ")");
  LinkSpec l;
  if (base) {
    l = *base;
  } else {
    l.name = name.empty() ? "custom" : name;
    l.kind = "custom";
    l.source = "inline in the cluster spec";
  }
  if (v.is_object()) {
    known.insert(known.begin(), {"link", "bandwidth_bytes_per_s", "latency_s",
                                 "measured_collectives"});
    if (auto e = onlyKeys(v, path, known))
      return std::move(e);
    for (const char *key : {"bandwidth_bytes_per_s", "latency_s"}) {
      if (!v.contains(key))
        continue;
      if (!v[key].is_number() || v[key].get<double>() < 0 ||
          (std::string(key) == "bandwidth_bytes_per_s" &&
           v[key].get<double>() == 0))
        return err(what, path + "." + key + ": must be " +
                             (std::string(key) == "latency_s" ? "non-negative"
                                                              : "positive") +
                             ", got " + v[key].dump());
    }
    l.bandwidthBytesPerS =
        v.value("bandwidth_bytes_per_s", l.bandwidthBytesPerS);
    l.latencyS = v.value("latency_s", l.latencyS);
    if (v.contains("measured_collectives"))
      if (auto e = readMeasured(v["measured_collectives"], path, l))
        return std::move(e);
  }
  c.inlineLinks.push_back(l);
  return &c.inlineLinks.back();
}

/// A link's measured collectives: (collective, ranks, bytes, seconds)
/// points, sorted by bytes.
llvm::Error ClusterReader::readMeasured(const json &m, const std::string &path,
                                        LinkSpec &l) const {
  std::string mpath = path + ".measured_collectives";
  if (!m.is_array() || m.size() > 10000)
    return err(what, mpath + ": expected an array of at most 10000 "
                             "points");
  static const char *kinds[] = {"all-reduce", "all-gather", "reduce-scatter",
                                "all-to-all", "send-recv"};
  for (size_t i = 0; i < m.size(); ++i) {
    std::string ip = mpath + "[" + std::to_string(i) + "]";
    const json &p = m[i];
    if (!p.is_object() || !p.contains("collective") ||
        !p["collective"].is_string() ||
        std::none_of(std::begin(kinds), std::end(kinds),
                     [&](const char *k) { return p["collective"] == k; }))
      return err(what, ip + ".collective: expected all-reduce, "
                            "all-gather, reduce-scatter, all-to-all or "
                            "send-recv");
    for (const char *key : {"ranks", "bytes", "seconds"})
      if (!p.contains(key) || !p[key].is_number() ||
          !(p[key].get<double>() > 0) || p[key].get<double>() > 1e18)
        return err(what, ip + "." + key + ": expected a positive number");
    if (!p["ranks"].is_number_integer() || p["ranks"].get<int64_t>() < 2 ||
        p["ranks"].get<int64_t>() > 1000000)
      return err(what, ip + ".ranks: expected an integer from 2");
    l.measured.push_back(
        {p["collective"].get<std::string>(), int(p["ranks"].get<int64_t>()),
         p["bytes"].get<double>(), p["seconds"].get<double>()});
  }
  std::stable_sort(
      l.measured.begin(), l.measured.end(),
      [](const LinkSpec::MeasuredPoint &a, const LinkSpec::MeasuredPoint &b) {
        return a.bytes < b.bytes;
      });
  return llvm::Error::success();
}

llvm::Error ClusterReader::readSite(const json &site, size_t s) {
  std::string spath = "sites[" + std::to_string(s) + "]";
  if (!site.is_object())
    return err(what, spath + ": must be an object");
  if (auto e = onlyKeys(site, spath, {"name", "nodes", "data_share", "fabric"}))
    return std::move(e);
  Site st;
  st.name = site.value("name", "site" + std::to_string(s));
  if (site.contains("data_share")) {
    const json &v = site["data_share"];
    if (!v.is_number() || !(v.get<double>() >= 0) || v.get<double>() > 1)
      return err(what, spath +
                           ".data_share: must be a fraction from 0 to "
                           "1, got " +
                           v.dump());
    st.dataShare = v.get<double>();
    double pinned = st.dataShare;
    for (const Site &prev : c.sites)
      pinned += prev.dataShare;
    if (pinned > 1 + 1e-9)
      return err(what, spath + ".data_share: the sites' shares add up to " +
                           std::to_string(pinned) +
                           ", more than the whole "
                           "batch");
  }
  for (const Site &prev : c.sites)
    if (prev.name == st.name)
      return err(what, spath + ".name: duplicate site name '" + st.name + "'");
  if (!site.contains("nodes") || !site["nodes"].is_array() ||
      site["nodes"].empty())
    return err(what, spath + ".nodes: missing or empty");
  for (size_t g = 0; g < site["nodes"].size(); ++g) {
    auto ng = readNodeGroup(site["nodes"][g],
                            spath + ".nodes[" + std::to_string(g) + "]");
    if (!ng)
      return ng.takeError();
    st.nodeGroups.push_back(*ng);
  }
  if (site.contains("fabric")) {
    std::vector<FabricTier> tiers;
    if (auto e = readFabric(site["fabric"], spath + ".fabric", tiers,
                            st.fabricSource))
      return e;
    for (size_t g = 0; g < st.nodeGroups.size(); ++g) {
      for (const FabricTier &t : tiers)
        if (t.nodes % st.nodeGroups[g].domainNodes)
          return err(what, spath + ".fabric: tier '" + t.name + "' of " +
                               std::to_string(t.nodes) +
                               " nodes splits the scale-up domains of " +
                               spath + ".nodes[" + std::to_string(g) + "] (" +
                               std::to_string(st.nodeGroups[g].domainNodes) +
                               " nodes)");
      st.nodeGroups[g].tiers = tiers;
    }
  }
  c.sites.push_back(std::move(st));
  return llvm::Error::success();
}

llvm::Error ClusterReader::readFabric(const json &f, const std::string &path,
                                      std::vector<FabricTier> &tiers,
                                      std::string &source) const {
  if (f.is_string()) {
    const BuiltinFabric *b = builtinFabric(f.get<std::string>());
    if (!b)
      return err(what, path + ": unknown fabric " + f.dump() +
                           " (known: " + builtinFabricNames() + ")");
    tiers = b->tiers;
    source = b->source;
    return llvm::Error::success();
  }
  if (!f.is_object())
    return err(what, path + ": a built-in fabric's name or an object with "
                            "tiers");
  if (auto e = onlyKeys(f, path, {"tiers", "source"}))
    return e;
  if (f.contains("source") && !f["source"].is_string())
    return err(what, path + ".source: must be a string");
  source = f.value("source", "");
  if (!f.contains("tiers") || !f["tiers"].is_array() || f["tiers"].empty() ||
      f["tiers"].size() > 8)
    return err(what, path + ".tiers: 1 to 8 tiers, smallest first");
  for (size_t i = 0; i < f["tiers"].size(); ++i) {
    const json &t = f["tiers"][i];
    std::string tp = path + ".tiers[" + std::to_string(i) + "]";
    if (!t.is_object())
      return err(what, tp + ": must be an object");
    if (auto e = onlyKeys(t, tp, {"name", "nodes", "oversubscription"}))
      return e;
    FabricTier tier;
    if (t.contains("name") && !t["name"].is_string())
      return err(what, tp + ".name: must be a string");
    tier.name = t.value("name", "tier " + std::to_string(i));
    const json *n = t.contains("nodes") ? &t["nodes"] : nullptr;
    if (!n || !n->is_number_integer() || n->get<int64_t>() < 1 ||
        n->get<int64_t>() > (1 << 24))
      return err(what, tp + ".nodes: the nodes under one block, an integer "
                            "from 1");
    tier.nodes = int(n->get<int64_t>());
    if (!tiers.empty() && tier.nodes % tiers.back().nodes != 0)
      return err(what, tp + ".nodes: " + std::to_string(tier.nodes) +
                           " is not a multiple of the tier below's " +
                           std::to_string(tiers.back().nodes) +
                           " (blocks nest, smallest first)");
    if (!tiers.empty() && tier.nodes == tiers.back().nodes)
      return err(what, tp + ".nodes: no larger than the tier below's");
    const json *k =
        t.contains("oversubscription") ? &t["oversubscription"] : nullptr;
    if (!k || !k->is_number() || !(k->get<double>() > 0) ||
        k->get<double>() > 1000)
      return err(what, tp + ".oversubscription: downlink over uplink "
                            "bandwidth of a block, a number above 0 (1: full "
                            "bisection)");
    tier.oversubscription = k->get<double>();
    tiers.push_back(tier);
  }
  return llvm::Error::success();
}

llvm::Expected<NodeGroup>
ClusterReader::readNodeGroup(const json &n, const std::string &path) {
  if (!n.is_object())
    return err(what, path + ": must be an object");
  if (auto e = onlyKeys(
          n, path,
          {"count", "devices_per_node", "device", "intra_node_link", "nic",
           "power_w", "power_w_by_activity", "price_usd_per_device_hour",
           "host_memory_bytes", "host_memory_bandwidth_bytes_per_s",
           "scale_up_domain_nodes"}))
    return std::move(e);
  NodeGroup ng;
  if (auto e = positiveInt(n, "count", path, 1, ng.count))
    return std::move(e);
  if (auto e = positiveInt(n, "devices_per_node", path, 8, ng.devicesPerNode))
    return std::move(e);
  if (auto e = positiveInt(n, "scale_up_domain_nodes", path, 1, ng.domainNodes))
    return std::move(e);
  if (ng.count % ng.domainNodes)
    return err(what, path + ".scale_up_domain_nodes: " +
                         std::to_string(ng.count) + " nodes are not whole " +
                         "domains of " + std::to_string(ng.domainNodes));
  if (!n.contains("device"))
    return err(what, path + ".device: missing");
  if (n["device"].is_string()) {
    ng.device = catalog.device(n["device"]);
    if (!ng.device)
      return err(what, path + ".device: unknown device type '" +
                           n["device"].get<std::string>() +
                           "' (known: " + catalog.deviceNames() + ")");
  } else if (n["device"].is_object()) {
    json wrapper = {{"devices", json::array({n["device"]})}};
    auto inlineCatalog =
        HardwareCatalog::parse(wrapper.dump(), what + " " + path + ".device");
    if (!inlineCatalog)
      return inlineCatalog.takeError();
    c.inlineDevices.push_back(inlineCatalog->devices().front());
    ng.device = &c.inlineDevices.back();
  } else {
    return err(what, path + ".device: must be a device name or an object");
  }
  std::string nicProblem = defaultNic(*ng.device, catalog, ng);
  if (!nicProblem.empty() && !n.contains("nic"))
    return err(what, path + ".device." + nicProblem);
  ng.intraNodeLink = catalog.link(ng.device->intraNodeLink);
  if (n.contains("intra_node_link")) {
    auto l = readLink(n["intra_node_link"], path + ".intra_node_link", {});
    if (!l)
      return l.takeError();
    ng.intraNodeLink = *l;
  }
  if (!ng.intraNodeLink)
    return err(what,
               path + ".intra_node_link: missing and the device names none");
  if (ng.domainNodes > 1 && !ng.intraNodeLink->switched)
    return err(what, path + ".scale_up_domain_nodes: " +
                         ng.intraNodeLink->name +
                         " is point to point; only a switched link (an "
                         "NVLink switch fabric) joins nodes into one domain");
  if (n.contains("nic")) {
    const json &nic = n["nic"];
    auto l = readLink(nic, path + ".nic", {"count", "in_network_aggregation"});
    if (!l)
      return l.takeError();
    ng.nic = *l;
    if (nic.is_object())
      if (auto e = positiveInt(nic, "count", path + ".nic", ng.nicsPerNode,
                               ng.nicsPerNode))
        return std::move(e);
    if (nic.is_object() && nic.contains("in_network_aggregation")) {
      std::string problem = readAggregation(nic["in_network_aggregation"],
                                            *ng.nic, ng.aggregation);
      if (!problem.empty())
        return err(what, path + ".nic.in_network_aggregation" + problem);
    }
  }
  ng.powerW = ng.device->powerW;
  if (auto e = nonNegative(n, "power_w", path, ng.powerW))
    return std::move(e);
  ng.power = !ng.device->power.known() && n.contains("power_w")
                 ? PowerByActivity::ofBoardPower(ng.powerW)
                 : ng.device->power.scaledTo(ng.powerW);
  if (n.contains("power_w_by_activity")) {
    std::string problem =
        readPowerByActivity(n["power_w_by_activity"], ng.power);
    if (!problem.empty())
      return err(what, path + ".power_w_by_activity" + problem);
  }
  ng.hostMemoryBytes = ng.device->hostMemoryBytes;
  ng.hostMemoryBandwidthBytesPerS = ng.device->hostMemoryBandwidthBytesPerS;
  if (auto e = nonNegative(n, "host_memory_bytes", path, ng.hostMemoryBytes))
    return std::move(e);
  if (auto e = nonNegative(n, "host_memory_bandwidth_bytes_per_s", path,
                           ng.hostMemoryBandwidthBytesPerS))
    return std::move(e);
  if (auto e = nonNegative(n, "price_usd_per_device_hour", path,
                           ng.priceUsdPerDeviceHour))
    return std::move(e);
  return ng;
}

/// The links between sites, and one for every pair of sites.
llvm::Error ClusterReader::readSiteLinks(const json &j) {
  const json &links = j.value("inter_site_links", json::array());
  for (size_t i = 0; i < links.size(); ++i) {
    const json &l = links[i];
    std::string path = "inter_site_links[" + std::to_string(i) + "]";
    if (!l.is_object() || !l.contains("sites") || !l["sites"].is_array() ||
        l["sites"].size() != 2)
      return err(what, path + ".sites: must name two sites");
    SiteLink sl;
    for (int k = 0; k < 2; ++k) {
      std::string name =
          l["sites"][k].is_string() ? l["sites"][k].get<std::string>() : "";
      int idx = -1;
      for (int s = 0; s < int(c.sites.size()); ++s)
        if (c.sites[s].name == name)
          idx = s;
      if (idx < 0)
        return err(what, path + ".sites[" + std::to_string(k) +
                             "]: unknown site '" + name + "'");
      (k ? sl.siteB : sl.siteA) = idx;
    }
    auto link = readLink(l, path, {"sites", "egress_usd_per_gb"});
    if (!link)
      return link.takeError();
    sl.link = **link;
    if (auto e = nonNegative(l, "egress_usd_per_gb", path, sl.egressUsdPerGB))
      return std::move(e);
    c.siteLinks.push_back(sl);
  }
  if (c.sites.size() > 1)
    for (int a = 0; a < int(c.sites.size()); ++a)
      for (int b = a + 1; b < int(c.sites.size()); ++b) {
        bool found = false;
        for (const SiteLink &sl : c.siteLinks)
          found |= (sl.siteA == a && sl.siteB == b) ||
                   (sl.siteA == b && sl.siteB == a);
        if (!found)
          return err(what, "inter_site_links: no link between sites '" +
                               c.sites[a].name + "' and '" + c.sites[b].name +
                               "'");
      }
  return llvm::Error::success();
}

llvm::Expected<Cluster> ClusterReader::read(const std::string &text) {
  std::string problem;
  json j = parseJsonInput(text, problem);
  if (j.is_discarded())
    return err(what, problem);
  if (!j.is_object())
    return err(what, "the cluster spec must be a JSON object");
  if (auto e =
          onlyKeys(j, "", {"name", "sites", "inter_site_links", "reliability"}))
    return std::move(e);
  if (j.contains("reliability"))
    if (auto e = detail::readReliability(j["reliability"], "reliability",
                                         c.reliability))
      return err(what, llvm::toString(std::move(e)));
  c.name = j.value("name", what);
  if (!j.contains("sites") || !j["sites"].is_array() || j["sites"].empty())
    return err(what, "sites: missing or empty");
  for (size_t s = 0; s < j["sites"].size(); ++s)
    if (auto e = readSite(j["sites"][s], s))
      return std::move(e);
  if (auto e = readSiteLinks(j))
    return std::move(e);
  // Counted before finalize() lists the devices one by one.
  int64_t devices = 0;
  for (const Site &site : c.sites)
    for (const NodeGroup &ng : site.nodeGroups)
      if ((devices += int64_t(ng.count) * ng.devicesPerNode) > kMaxDevices)
        return err(what, "the cluster has more than " +
                             std::to_string(kMaxDevices) + " devices");
  c.finalize();
  if (c.numDevices() == 0)
    return err(what, "the cluster has no devices");
  return std::move(c);
}

} // namespace

static llvm::Expected<Cluster>
parseClusterJsonImpl(const std::string &text, const std::string &what,
                     const HardwareCatalog &catalog) {
  return ClusterReader(what, catalog).read(text);
}

// nlohmann::json throws on a value of the wrong type; every such case is a
// malformed spec, reported as one line.
llvm::Expected<Cluster> parseClusterJson(const std::string &text,
                                         const std::string &what,
                                         const HardwareCatalog &catalog) {
  try {
    return parseClusterJsonImpl(text, what, catalog);
  } catch (const json::exception &e) {
    return err(what, std::string("malformed cluster spec: ") + e.what());
  }
}

llvm::Expected<Cluster> loadCluster(const std::string &spec,
                                    const HardwareCatalog &catalog) {
  if (spec.empty())
    return err("--cluster", "empty cluster spec");
  // A file that exists is a JSON spec whatever its name; otherwise a name
  // without a path or .json is a preset.
  if (spec.find('/') == std::string::npos &&
      spec.find(".json") == std::string::npos &&
      !llvm::sys::fs::is_regular_file(spec))
    return parseClusterPreset(spec, catalog);
  std::string text;
  std::string problem = readInputFile(spec, kMaxJsonInputBytes, text);
  if (!problem.empty())
    return err(spec, problem);
  return parseClusterJson(text, spec, catalog);
}

} // namespace orrery
