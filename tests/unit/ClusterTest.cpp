//===- ClusterTest.cpp - catalog, cluster specs, presets, strategies -----===//
#include "orrery/CostModel/Cluster.h"
#include "orrery/CostModel/Collective.h"
#include "orrery/CostModel/Simulator.h"
#include "orrery/CostModel/Strategy.h"
#include "orrery/CostModel/Workload.h"

#include <gtest/gtest.h>

#include <memory>

using namespace orrery;

namespace {

std::string errorOf(llvm::Error e) { return llvm::toString(std::move(e)); }
template <typename T> std::string errorOf(llvm::Expected<T> &v) {
  return v ? "" : llvm::toString(v.takeError());
}

TEST(Catalog, HasTheDatasheetPeaks) {
  const HardwareCatalog &c = HardwareCatalog::builtin();
  const DeviceSpec *a100 = c.device("a100-80g");
  ASSERT_TRUE(a100);
  EXPECT_EQ(a100->tensorPeak(Precision::BF16), 312e12);
  EXPECT_EQ(a100->memoryBandwidthBytesPerS, 2039e9);
  EXPECT_EQ(c.device("A100-SXM4-80GB"), a100); // alias
  for (const char *name :
       {"V100-16G", "V100-32G", "A100-40G", "A100-80G-PCIe", "H100-SXM",
        "H100-PCIe", "H200", "B200", "GH200", "L4", "L40S", "A10G", "T4",
        "RTX3090", "RTX4090", "MI250X", "MI300X", "GB200", "GB300", "B300",
        "RTX-PRO-6000", "MI355X", "TPU-v6e", "TPU7x"})
    EXPECT_TRUE(c.device(name)) << name;
  // Blackwell's rack systems: NVL72, 18 trays of 4.
  for (const char *name : {"GB200", "GB300"}) {
    EXPECT_EQ(c.device(name)->rack.name, "NVL72") << name;
    EXPECT_EQ(c.device(name)->rack.nodes * c.device(name)->rack.devicesPerNode,
              72);
  }
  for (const char *name :
       {"NVLink2", "NVLink3", "NVLink4", "NVLink5", "PCIe3", "PCIe4", "PCIe5",
        "IB-EDR", "IB-HDR", "IB-NDR", "IB-XDR", "RoCE-100G", "RoCE-200G",
        "RoCE-400G", "Eth-10G", "Eth-25G", "Eth-100G", "WAN-100G"})
    EXPECT_TRUE(c.link(name)) << name;
  for (const DeviceSpec &d : c.devices())
    EXPECT_FALSE(d.source.empty()) << d.name;
}

TEST(Catalog, MeasuredKernelProfiles) {
  // The H200 carries the profile fitted to kernels measured on one
  // (bench/measured/); a device without one has none.
  const HardwareCatalog &c = HardwareCatalog::builtin();
  const DeviceSpec *h200 = c.device("H200");
  ASSERT_TRUE(h200 && h200->measuredKernels);
  EXPECT_LT(h200->measuredKernels->gemmEfficiency, 0.8);
  EXPECT_LT(h200->measuredKernels->reductionMemoryEfficiency,
            h200->measuredKernels->pointwiseMemoryEfficiency);
  EXPECT_NE(h200->measuredKernelsSource.find("bench/measured/"),
            std::string::npos);
  EXPECT_FALSE(c.device("A100-80G")->measuredKernels);
  // Devices without a profile take the H200's memory-bound rates by kernel
  // class (docs/costmodel.md); the two must not drift apart.
  KernelModel stated;
  for (KernelClass k : {KernelClass::Gemm, KernelClass::Pointwise,
                        KernelClass::Reduction, KernelClass::Random})
    EXPECT_EQ(stated.memoryEfficiency(k),
              h200->measuredKernels->memoryEfficiency(k));
  EXPECT_EQ(stated.gemmEfficiency, 0.8);
  // Each field is checked and named.
  auto parse = [](const std::string &profile) {
    return HardwareCatalog::parse(
        R"({"devices": [{"name": "X", "peak_flop_per_s": {"fp32": 1e13, "fp16": 1e14},
            "memory_bytes": 1e10, "memory_bandwidth_bytes_per_s": 1e12,
            "power_w": 300, "measured_kernel_profile": )" +
            profile + "}]}",
        "catalog.json");
  };
  std::string good =
      R"({"gemm_efficiency": 0.7, "gemm_half_efficiency_s": 1e-6,
          "gemm_memory_efficiency": 0.8, "pointwise_memory_efficiency": 0.7,
          "reduction_memory_efficiency": 0.4, "random_memory_efficiency": 0.35,
          "kernel_launch_s": 3e-6})";
  auto ok = parse(good);
  ASSERT_TRUE(bool(ok)) << errorOf(ok);
  EXPECT_EQ(
      ok->devices()[0].measuredKernels->memoryEfficiency(KernelClass::Random),
      0.35);
  std::string above = good;
  above.replace(above.find("0.4"), 3, "1.4");
  auto bad = parse(above);
  EXPECT_NE(errorOf(bad).find("device 'X'.measured_kernel_profile."
                              "reduction_memory_efficiency: an efficiency "
                              "above 1"),
            std::string::npos)
      << errorOf(bad);
  auto missing = parse(R"({"gemm_efficiency": 0.7})");
  EXPECT_NE(errorOf(missing).find("measured_kernel_profile."
                                  "gemm_half_efficiency_s: missing"),
            std::string::npos)
      << errorOf(missing);
  // A device on the same chip takes another's profile; naming a device
  // without one is an error.
  EXPECT_TRUE(bool(c.device("H100-SXM")->measuredKernels));
  auto borrow = [](const std::string &from) {
    return HardwareCatalog::parse(
        R"({"devices": [{"name": "X", "peak_flop_per_s": {"fp32": 1e13, "fp16": 1e14},
            "memory_bytes": 1e10, "memory_bandwidth_bytes_per_s": 1e12,
            "power_w": 300, "kernel_profile_of": ")" +
            from + R"("}]})",
        "catalog.json");
  };
  auto unknown = borrow("Y");
  EXPECT_EQ(errorOf(unknown),
            "catalog.json: device 'X'.kernel_profile_of: 'Y' is not a device "
            "with a measured profile");
}

TEST(Cluster, SdpaAttentionCurve) {
  // SDPA's flash backend is FlashAttention-2 on the A100 and the H100: the
  // catalog states its curve there, below the fused (cuDNN) one on the
  // Hopper GPU; the B200 has none (torchtitan runs cuDNN there).
  const HardwareCatalog &c = HardwareCatalog::builtin();
  for (const char *name : {"A100-80G", "A100-40G", "H100-SXM", "H200"})
    ASSERT_TRUE(bool(c.device(name)->sdpaAttention)) << name;
  EXPECT_FALSE(bool(c.device("B200")->sdpaAttention));
  KernelModel fused, sdpa;
  c.device("H100-SXM")->sdpaAttention->applyTo(sdpa);
  for (double keys : {512.0, 8192.0})
    for (bool backward : {false, true})
      EXPECT_LT(sdpa.attentionEfficiency(keys, backward),
                0.8 * fused.attentionEfficiency(keys, backward));
  auto parse = [](const std::string &curve) {
    return HardwareCatalog::parse(
        R"({"devices": [{"name": "X", "peak_flop_per_s": {"fp32": 1e13, "fp16": 1e14},
            "memory_bytes": 1e10, "memory_bandwidth_bytes_per_s": 1e12,
            "power_w": 300, "sdpa_attention": )" +
            curve + "}]}",
        "catalog.json");
  };
  std::string good = R"({"kernel": "FlashAttention-2",
      "forward_efficiency": 0.4, "forward_half_keys": 100,
      "backward_efficiency": 0.3, "backward_half_keys": 200})";
  auto ok = parse(good);
  ASSERT_TRUE(bool(ok)) << errorOf(ok);
  EXPECT_EQ(ok->devices()[0].sdpaAttention->backwardHalfKeys, 200);
  std::string above = good;
  above.replace(above.find("0.3"), 3, "1.3");
  auto bad = parse(above);
  EXPECT_EQ(errorOf(bad),
            "catalog.json: device 'X'.sdpa_attention.backward_efficiency: an "
            "efficiency above 1");
  auto unnamed = parse(R"({"forward_efficiency": 0.4})");
  EXPECT_EQ(errorOf(unnamed),
            "catalog.json: device 'X'.sdpa_attention.kernel: missing (the "
            "kernel's name)");
}

TEST(Cluster, SmCount) {
  const HardwareCatalog &c = HardwareCatalog::builtin();
  EXPECT_EQ(c.device("H100-SXM")->smCount, 132);
  EXPECT_EQ(c.device("A100-80G")->smCount, 108);
  EXPECT_EQ(c.device("MI300X")->smCount, 0); // not stated: no SM margin
  auto bad = HardwareCatalog::parse(
      R"({"devices": [{"name": "X", "peak_flop_per_s": {"fp32": 1e13},
          "memory_bytes": 1e10, "memory_bandwidth_bytes_per_s": 1e12,
          "sm_count": 0}]})",
      "catalog.json");
  EXPECT_EQ(errorOf(bad), "catalog.json: device 'X'.sm_count: must be an "
                          "integer from 1 to 4096");
}

TEST(Catalog, NcclLinkFieldsRefuseNegatives) {
  // NCCL's LL cap and NVLS chunk step cost: a negative is refused, naming
  // the field.
  for (const char *field : {"nccl_ll_max_bus_bandwidth_bytes_per_s",
                            "nccl_nvls_chunk_step_bytes"}) {
    auto bad = HardwareCatalog::parse(
        std::string(R"({"links": [{"name": "L", "kind": "nvlink",
            "bandwidth_bytes_per_s": 1e11, "latency_s": 1e-6, ")") +
            field + R"(": -1}]})",
        "catalog.json");
    EXPECT_NE(errorOf(bad).find(std::string(field) + ": must not be negative"),
              std::string::npos)
        << errorOf(bad);
  }
}

TEST(Cluster, Presets) {
  auto one = parseClusterPreset("8xA100-80G", HardwareCatalog::builtin());
  ASSERT_TRUE(bool(one)) << errorOf(one);
  EXPECT_EQ(one->numDevices(), 8);
  EXPECT_EQ(one->numNodes(), 1);
  auto many = parseClusterPreset("4x8xH100-SXM", HardwareCatalog::builtin());
  ASSERT_TRUE(bool(many));
  EXPECT_EQ(many->numDevices(), 32);
  EXPECT_EQ(many->numNodes(), 4);
  EXPECT_EQ(many->devices()[9].node, 1);
  EXPECT_EQ(many->devices()[9].localRank, 1);
  EXPECT_EQ(many->groupOf(0).nic->name, "IB-NDR");
  EXPECT_EQ(many->groupOf(0).nicsPerNode, 8);
  auto bad = parseClusterPreset("4x8xA200", HardwareCatalog::builtin());
  EXPECT_NE(errorOf(bad).find("unknown device type 'A200'"), std::string::npos);
}

TEST(Cluster, RackPresetsSpanTheirScaleUpDomain) {
  // 2xGB200-NVL72: two racks of 18 trays of 4 GPUs, each rack one NVLink
  // domain; the trays keep their own cards (one ConnectX-7 a GPU) and
  // host memory.
  const HardwareCatalog &cat = HardwareCatalog::builtin();
  auto racks = parseClusterPreset("2xGB200-NVL72", cat);
  ASSERT_TRUE(bool(racks)) << errorOf(racks);
  EXPECT_EQ(racks->numDevices(), 144);
  EXPECT_EQ(racks->numNodes(), 36);
  const NodeGroup &g = racks->groupOf(0);
  EXPECT_EQ(g.devicesPerNode, 4);
  EXPECT_EQ(g.scaleUpDevices(), 72);
  EXPECT_EQ(g.nicsPerNode, 4);
  // A group of 64 consecutive ranks sits in one domain: no network card;
  // in 8-GPU nodes of B200 the same group spans 8 nodes.
  GroupShape in = groupShapeIn(g, 1, 64);
  EXPECT_EQ(in.ranksPerNode, 64);
  auto hgx = parseClusterPreset("18x8xB200", cat);
  ASSERT_TRUE(bool(hgx));
  GroupShape out = groupShapeIn(hgx->groupOf(0), 1, 64);
  EXPECT_EQ(out.ranksPerNode, 8);
  EXPECT_LT(collectiveTime(CollectiveKind::AllToAll, 1e9, in),
            collectiveTime(CollectiveKind::AllToAll, 1e9, out) / 2);
  // Across racks a group uses the trays' cards, each rank its own.
  GroupShape across = groupShapeIn(g, 72, 2);
  EXPECT_EQ(across.ranksPerNode, 1);
  EXPECT_DOUBLE_EQ(across.nicSharePerRank, 1.0);
  // A rack preset counts racks; an unknown rack is an unknown device.
  EXPECT_NE(errorOf(parseClusterPreset("2x4xGB200-NVL72", cat).takeError())
                .find("a rack preset counts racks"),
            std::string::npos);
  EXPECT_NE(errorOf(parseClusterPreset("2xB200-NVL72", cat).takeError())
                .find("or a rack: GB200-NVL72"),
            std::string::npos);
}

TEST(Cluster, ScaleUpDomainsFromJson) {
  const HardwareCatalog &cat = HardwareCatalog::builtin();
  auto spec = [](const std::string &group, const std::string &fabric = "") {
    return R"({"sites": [{)" + fabric + R"("nodes": [{"device": "GB200", )" +
           group + "}]}]}";
  };
  auto ok = parseClusterJson(
      spec(R"("count": 36, "devices_per_node": 4, "scale_up_domain_nodes": 18)"),
      "r.json", cat);
  ASSERT_TRUE(bool(ok)) << errorOf(ok);
  EXPECT_EQ(ok->groupOf(0).scaleUpDevices(), 72);
  auto partial = parseClusterJson(
      spec(R"("count": 20, "devices_per_node": 4, "scale_up_domain_nodes": 18)"),
      "r.json", cat);
  EXPECT_NE(errorOf(partial).find("sites[0].nodes[0].scale_up_domain_nodes: "
                                  "20 nodes are not whole domains of 18"),
            std::string::npos);
  auto mesh = parseClusterJson(
      spec(R"("count": 2, "scale_up_domain_nodes": 2, "intra_node_link": "InfinityFabric4")"),
      "r.json", cat);
  EXPECT_NE(errorOf(mesh).find("InfinityFabric4 is point to point"),
            std::string::npos);
  auto split = parseClusterJson(
      spec(R"("count": 36, "devices_per_node": 4, "scale_up_domain_nodes": 18)",
           R"("fabric": {"tiers": [{"name": "leaf", "nodes": 8, "oversubscription": 1}]}, )"),
      "r.json", cat);
  EXPECT_NE(errorOf(split).find("tier 'leaf' of 8 nodes splits the scale-up "
                                "domains"),
            std::string::npos);
}

TEST(Cluster, PresetsGetTheirPlatformsScaleOutNics) {
  // Gaudi's scale-out ports are on the chip: three a card (Intel's network
  // configuration), so an 8-card node has 24, not the one 100 GbE port a
  // node of another device gets when the spec names no cards.
  auto g3 = parseClusterPreset("4x8xGaudi3", HardwareCatalog::builtin());
  ASSERT_TRUE(bool(g3)) << errorOf(g3);
  EXPECT_EQ(g3->groupOf(0).nic->name, "RoCE-200G");
  EXPECT_EQ(g3->groupOf(0).nicsPerNode, 24);
  auto g2 = parseClusterPreset("2x4xGaudi2", HardwareCatalog::builtin());
  ASSERT_TRUE(bool(g2)) << errorOf(g2);
  EXPECT_EQ(g2->groupOf(0).nic->name, "RoCE-100G");
  EXPECT_EQ(g2->groupOf(0).nicsPerNode, 12);
  EXPECT_EQ(g2->groupOf(0).intraNodeLink->bandwidthBytesPerS, 262.5e9);
  // Other platforms' NICs as published (docs/scale-out-nic-sources.md):
  // an MI300X platform's 400G NIC a GPU, a trn1's EFA port for two chips,
  // a g6's one EFA port for 8 L4 (and a node of 4 keeps one), GH200's 200G.
  struct Expect {
    const char *preset, *link;
    int nics;
  };
  for (Expect e :
       {Expect{"2x8xMI300X", "RoCE-400G", 8},
        Expect{"2x16xTrainium", "EFA-100G", 8},
        Expect{"2x16xTrainium2", "EFA-200G", 16},
        Expect{"2x8xL4", "EFA-100G", 1}, Expect{"2x4xL4", "EFA-100G", 1},
        Expect{"2x8xTPU-v5e", "Eth-100G", 2},
        Expect{"2x4xGH200", "IB-NDR200", 4},
        Expect{"2x8xH100-SXM", "IB-NDR", 8},
        Expect{"2x8xRTX4090", "Eth-100G", 1}}) {
    auto c = parseClusterPreset(e.preset, HardwareCatalog::builtin());
    ASSERT_TRUE(bool(c)) << errorOf(c);
    EXPECT_EQ(c->groupOf(0).nic->name, e.link) << e.preset;
    EXPECT_EQ(c->groupOf(0).nicsPerNode, e.nics) << e.preset;
  }
  // Every catalog device's scale-out ports name a catalog link.
  for (const DeviceSpec &d : HardwareCatalog::builtin().devices())
    if (!d.scaleOutLink.empty())
      EXPECT_TRUE(HardwareCatalog::builtin().link(d.scaleOutLink)) << d.name;
  // A spec's own cards replace them.
  auto own = parseClusterJson(
      R"({"sites": [{"nodes": [{"count": 2, "device": "Gaudi3", "nic": {"link": "RoCE-400G", "count": 8}}]}]})",
      "c.json", HardwareCatalog::builtin());
  ASSERT_TRUE(bool(own)) << errorOf(own);
  EXPECT_EQ(own->groupOf(0).nic->name, "RoCE-400G");
  EXPECT_EQ(own->groupOf(0).nicsPerNode, 8);
  // An inline device's ports must name a known link and a count.
  auto check = [](const char *json, const char *expected) {
    auto c = parseClusterJson(json, "c.json", HardwareCatalog::builtin());
    std::string e = errorOf(c);
    EXPECT_NE(e.find(expected), std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos);
  };
  check(
      R"({"sites": [{"nodes": [{"count": 2, "device": {"name": "X", "peak_flop_per_s": {"fp32": 1e12}, "memory_bytes": 1e9, "memory_bandwidth_bytes_per_s": 1e12, "scale_out_nic": {"link": "RoCE-900G", "ports_per_device": 2}}}]}]})",
      "sites[0].nodes[0].device.scale_out_nic.link: unknown link 'RoCE-900G'");
  check(
      R"({"sites": [{"nodes": [{"count": 2, "device": {"name": "X", "peak_flop_per_s": {"fp32": 1e12}, "memory_bytes": 1e9, "memory_bandwidth_bytes_per_s": 1e12, "scale_out_nic": {"link": "RoCE-100G", "ports_per_device": 0}}}]}]})",
      "device 'X'.scale_out_nic.ports_per_device: must be an integer from 1");
  check(
      R"({"sites": [{"nodes": [{"count": 2, "device": {"name": "X", "peak_flop_per_s": {"fp32": 1e12}, "memory_bytes": 1e9, "memory_bandwidth_bytes_per_s": 1e12, "scale_out_nic": {"link": "RoCE-100G", "ports_per_device": 1, "devices_per_port": 2}}}]}]})",
      "device 'X'.scale_out_nic: give ports_per_device or devices_per_port "
      "(one of them)");
}

TEST(Catalog, UnlistedPrecisionsAreRefusedOffNvidia) {
  // cuBLAS runs bf16 on a V100's CUDA cores: priced at its fp32 rate. A
  // Gaudi's MME has no published fp16 or fp32 rate and its TPC rate is no
  // stand-in for one: refused, naming what the catalog lists.
  const HardwareCatalog &c = HardwareCatalog::builtin();
  EXPECT_EQ(c.device("V100-32G")->precisionProblem(Precision::BF16), "");
  EXPECT_EQ(c.device("V100-32G")->tensorPeak(Precision::BF16), 15.7e12);
  const DeviceSpec *g2 = c.device("Gaudi2");
  ASSERT_TRUE(g2);
  EXPECT_EQ(g2->precisionProblem(Precision::BF16), "");
  EXPECT_EQ(g2->precisionProblem(Precision::FP16),
            "Gaudi2 has no published fp16 matrix rate (the catalog lists "
            "bf16; a cluster file's inline device may state one)");
  EXPECT_NE(g2->precisionProblem(Precision::FP32), "");
  EXPECT_EQ(g2->vectorPeak(), 10.76e12);
  EXPECT_EQ(c.device("Gaudi3")->vectorPeak(), 28.7e12);
  EXPECT_EQ(c.device("TPU-v5e")->precisionProblem(Precision::FP32), "");
  // A device needs a rate for its non-matrix kernels.
  auto none = HardwareCatalog::parse(
      R"({"devices": [{"name": "X", "peak_flop_per_s": {"bf16": 1e14},
          "memory_bytes": 1e10, "memory_bandwidth_bytes_per_s": 1e12}]})",
      "catalog.json");
  EXPECT_EQ(errorOf(none),
            "catalog.json: device 'X'.peak_flop_per_s.fp32: missing (or "
            "vector_flop_per_s: the rate of the non-matrix kernels)");
}

TEST(Cluster, MixedSitesFromJson) {
  auto c = parseClusterJson(R"({
    "name": "two sites",
    "sites": [
      {"name": "east", "nodes": [{"count": 2, "device": "A100-80G", "devices_per_node": 8},
                                 {"count": 4, "device": "V100-32G", "devices_per_node": 8}]},
      {"name": "west", "nodes": [{"count": 1, "device": "H100-SXM", "devices_per_node": 8,
                                  "price_usd_per_device_hour": 2.5}]}],
    "inter_site_links": [{"sites": ["east", "west"], "link": "WAN-100G", "latency_s": 0.02,
                          "egress_usd_per_gb": 0.02}]})",
                            "c.json", HardwareCatalog::builtin());
  ASSERT_TRUE(bool(c)) << errorOf(c);
  EXPECT_EQ(c->numDevices(), 56);
  EXPECT_FALSE(c->homogeneous());
  EXPECT_EQ(c->deviceSpec(55).name, "H100-SXM");
  EXPECT_EQ(c->siteLinks[0].link.latencyS, 0.02);
  EXPECT_EQ(c->groupOf(55).priceUsdPerDeviceHour, 2.5);
}

TEST(Cluster, ErrorsNameTheField) {
  auto check = [](const char *json, const char *expected) {
    auto c = parseClusterJson(json, "c.json", HardwareCatalog::builtin());
    std::string e = errorOf(c);
    EXPECT_NE(e.find(expected), std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos);
  };
  check("{", "c.json: not valid JSON");
  check(R"({"sites": []})", "sites: missing or empty");
  check(R"({"sites": [{"nodes": [{"device": "A200"}]}]})",
        "sites[0].nodes[0].device: unknown device type 'A200'");
  check(R"({"sites": [{"nodes": [{"device": "A100-80G", "count": 0}]}]})",
        "sites[0].nodes[0].count: must be a positive integer");
  check(
      R"({"sites": [{"nodes": [{"device": "A100-80G", "nic": {"link": "IB-HDR", "bandwidth_bytes_per_s": -5}}]}]})",
      "sites[0].nodes[0].nic.bandwidth_bytes_per_s: must be positive");
  check(
      R"({"sites": [{"name": "a", "nodes": [{"device": "A100-80G"}]}, {"name": "b", "nodes": [{"device": "A100-80G"}]}]})",
      "no link between sites 'a' and 'b'");
  check(R"({"sites": [{"nodes": [{"device": 7}]}]})",
        "sites[0].nodes[0].device: must be a device name");
  check(R"({"sites": [{"name": 5, "nodes": [{"device": "A100-80G"}]}]})",
        "malformed cluster spec");
  // A misspelt field is refused rather than silently defaulted.
  check(
      R"({"sites": [{"nodes": [{"device": "A100-80G", "devices_pernode": 4}]}]})",
      "sites[0].nodes[0].devices_pernode: unknown field");
  check(
      R"({"sites": [{"nodes": [{"device": "A100-80G", "nic": {"link": "IB-HDR", "cnt": 2}}]}]})",
      "sites[0].nodes[0].nic.cnt: unknown field");
  check(R"({"site": [{"nodes": [{"device": "A100-80G"}]}]})",
        "site: unknown field");
  // Comments are allowed.
  auto commented = parseClusterJson(
      R"({"_comment": "lab", "sites": [{"_note": "x", "nodes": [{"device": "A100-80G"}]}]})",
      "c.json", HardwareCatalog::builtin());
  EXPECT_TRUE(bool(commented)) << errorOf(commented);
}

Workload gptLike(int layers, int heads, int64_t seq) {
  Workload w;
  LayerKind l;
  l.name = "transformer_layer";
  l.count = layers;
  l.attentionHeads = heads;
  w.kinds = {l};
  w.layers = {{0, layers}};
  w.tokensPerSample = seq;
  return w;
}

TEST(Strategy, ParsesAndCompletes) {
  auto s =
      parseStrategy("tp=8,pp=4,mbs=2,gbs=512,recompute=selective,sp=1,vpp=2");
  ASSERT_TRUE(bool(s)) << errorOf(s);
  auto c = parseClusterPreset("8x8xA100-80G", HardwareCatalog::builtin());
  Workload w = gptLike(48, 64, 2048);
  ASSERT_FALSE(bool(completeAndValidate(*s, w, *c)));
  EXPECT_EQ(s->dp, 2);
  EXPECT_EQ(s->microBatches(), 128);
  EXPECT_EQ(s->schedule, Schedule::Interleaved);
  EXPECT_TRUE(s->sequenceParallel);
}

TEST(Strategy, InvalidStrategiesAreNamed) {
  auto c = parseClusterPreset("8x8xA100-80G", HardwareCatalog::builtin());
  Workload w = gptLike(48, 64, 2048);
  auto check = [&](const char *text, const char *expected) {
    auto s = parseStrategy(text);
    std::string e = s ? errorOf(completeAndValidate(*s, w, *c)) : errorOf(s);
    EXPECT_NE(e.find(expected), std::string::npos) << text << ": " << e;
  };
  check("tp=3", "tp=3 does not divide the 64 attention heads");
  check("tp=8,pp=4,dp=4",
        "tp x pp x cp x dp = 128 differs from the 64 devices");
  check("tp=8,mbs=3,gbs=64",
        "mbs x dp = 24 does not divide the global batch gbs=64");
  check("tp=8,pp=64", "tp x pp x cp = 512 does not divide the 64 devices");
  check("tp=8,colour=red", "unknown key 'colour'");
  check("tp=eight", "tp must be an integer from 1 to 4194304");
  check("tp=4294967296", "tp must be an integer from 1 to 4194304");
  check("recompute=sometimes", "recompute must be none, selective, op or full");
  check("tp=2,tp=4", "tp is given twice");
  check("tp=8,vpp=2", "vpp=2 needs pp > 1");
}

} // namespace

TEST(Collective, AMeasuredCurveIsReadWhereItApplies) {
  auto spec = [](const std::string &points) {
    return R"({"name": "m", "sites": [{"name": "a", "nodes": [{"count": 1,
      "device": "CPU", "devices_per_node": 2, "intra_node_link": {"link":
      "Loopback-TCP", "measured_collectives": [)" +
           points + "]}}]}]}";
  };
  auto c = parseClusterJson(
      spec(
          R"({"collective": "all-reduce", "ranks": 2, "bytes": 1000, "seconds": 0.001},
              {"collective": "all-reduce", "ranks": 2, "bytes": 3000, "seconds": 0.002})"),
      "m.json", HardwareCatalog::builtin());
  ASSERT_TRUE(bool(c)) << llvm::toString(c.takeError());
  GroupShape g = groupShapeIn(c->groupOf(0), 1, 2);
  // Between the points, below the first, past the last (its slope).
  EXPECT_NEAR(collectiveTime(CollectiveKind::AllReduce, 2000, g), 0.0015,
              1e-12);
  EXPECT_NEAR(collectiveTime(CollectiveKind::AllReduce, 500, g), 0.001, 1e-12);
  EXPECT_NEAR(collectiveTime(CollectiveKind::AllReduce, 5000, g), 0.003, 1e-12);
  // A kind the curve does not hold is priced by the link's formula.
  auto plain = parseClusterPreset("2xCPU", HardwareCatalog::builtin());
  ASSERT_TRUE(bool(plain));
  GroupShape p = groupShapeIn(plain->groupOf(0), 1, 2);
  EXPECT_DOUBLE_EQ(collectiveTime(CollectiveKind::AllGather, 2000, g),
                   collectiveTime(CollectiveKind::AllGather, 2000, p));
  EXPECT_NE(collectiveTime(CollectiveKind::AllReduce, 2000, p), 0.0015);
  // Bad points name their field.
  auto bad = parseClusterJson(
      spec(
          R"({"collective": "broadcast", "ranks": 2, "bytes": 1, "seconds": 1})"),
      "m.json", HardwareCatalog::builtin());
  ASSERT_FALSE(bool(bad));
  EXPECT_NE(
      llvm::toString(bad.takeError())
          .find("sites[0].nodes[0].intra_node_link.measured_collectives[0]"
                ".collective"),
      std::string::npos);
  auto negative = parseClusterJson(
      spec(
          R"({"collective": "all-reduce", "ranks": 2, "bytes": 1, "seconds": -1})"),
      "m.json", HardwareCatalog::builtin());
  ASSERT_FALSE(bool(negative));
  EXPECT_NE(llvm::toString(negative.takeError())
                .find("seconds: expected a positive number"),
            std::string::npos);
}

namespace {
Cluster aggregatingCluster(const std::string &nic, const std::string &agg,
                           int nodes) {
  std::string text =
      R"({"sites": [{"nodes": [{"count": )" + std::to_string(nodes) +
      R"(, "device": "A100-80G", "devices_per_node": 8, "nic": )" + nic;
  if (!agg.empty())
    text.insert(text.size() - 1, R"(, "in_network_aggregation": )" + agg);
  text += "}]}]}";
  auto c = parseClusterJson(text, "agg.json", HardwareCatalog::builtin());
  EXPECT_TRUE(bool(c)) << (c ? "" : llvm::toString(c.takeError()));
  return c ? *c : Cluster{};
}
} // namespace

TEST(Collective, InNetworkAggregationSendsEachByteOnceThroughTheCards) {
  // 16 DGX A100 (8 HDR cards each), all 128 GPUs in one all-reduce of
  // 1 GiB: the ring moves 2·127/128 of it through the node's cards (NCCL's
  // 0.96 of 8 x 25 GB/s); SHARP sends each local rank's 1/8 up its card
  // once and the sum down once, at 0.9 of that, pipelined with the
  // reduce-scatter and all-gather over NVLink inside the node.
  Cluster sharp =
      aggregatingCluster(R"({"link": "IB-HDR", "count": 8})", R"("sharp")", 16);
  Cluster ring =
      aggregatingCluster(R"({"link": "IB-HDR", "count": 8})", "", 16);
  GroupShape gs = groupShapeIn(sharp.groupOf(0), 1, 128),
             gr = groupShapeIn(ring.groupOf(0), 1, 128);
  double S = double(1 << 30);
  double cards = 8 * 25e9;
  double intraBus = 235e9; // NVLink3's ring: NCCL's cap on sm80
  double intraS = 2.0 * 7 / 8 * S / intraBus;
  double netS = S / (cards * 0.9 * 0.96);
  double expected = 8.4e-6 + std::max(intraS, netS) + 14 * 3.4e-6 + 9.6e-6;
  EXPECT_NEAR(aggregatedAllReduceTime(S, gs, 2), expected, 1e-9);
  EXPECT_NEAR(collectiveTime(CollectiveKind::AllReduce, S, gs), expected, 1e-9);
  double ringS = collectiveTime(CollectiveKind::AllReduce, S, gr);
  EXPECT_GT(ringS, 1.3 * expected); // 2·127/128 of 192 GB/s vs 7/4 of 235
  EXPECT_LT(aggregatedAllReduceTime(S, gr, 2), 0); // no aggregation
  // Inside one node there is nothing for the network to sum.
  EXPECT_LT(aggregatedAllReduceTime(S, groupShapeIn(sharp.groupOf(0), 1, 8), 2),
            0);
  // Only the all-reduce: a reduce-scatter is the ring's.
  EXPECT_DOUBLE_EQ(collectiveTime(CollectiveKind::ReduceScatter, S, gs),
                   collectiveTime(CollectiveKind::ReduceScatter, S, gr));

  // SwitchML over one 100 GbE port per node: 32-bit fixed point on the
  // wire, 256 B of every 330 B a payload. fp32 gradients beat the ring;
  // bf16 ones double on the wire and lose to it.
  Cluster sw = aggregatingCluster(R"({"link": "Eth-100G", "count": 1})",
                                  R"("switchml")", 8);
  GroupShape g = groupShapeIn(sw.groupOf(0), 1, 64);
  double fp32 = aggregatedAllReduceTime(S, g, 4),
         bf16 = aggregatedAllReduceTime(S, g, 2);
  EXPECT_NEAR(bf16 - 8.4e-6 - 14 * 3.4e-6 - 20e-6,
              2 * (fp32 - 8.4e-6 - 14 * 3.4e-6 - 20e-6), 1e-9);
  EXPECT_NEAR(fp32, 8.4e-6 + S / (12.5e9 * 256.0 / 330.0) + 14 * 3.4e-6 + 20e-6,
              1e-9);
  GroupShape plain = g;
  plain.aggregation = InNetworkAggregation{};
  double ringT = collectiveTime(CollectiveKind::AllReduce, S, plain, 4);
  EXPECT_LT(fp32, ringT);
  EXPECT_GT(bf16, ringT);
  EXPECT_DOUBLE_EQ(collectiveTime(CollectiveKind::AllReduce, S, g, 2), ringT);
  // One switch's 64 ports: 65 nodes are beyond it.
  Cluster big = aggregatingCluster(R"({"link": "Eth-100G", "count": 1})",
                                   R"("switchml")", 65);
  EXPECT_LT(aggregatedAllReduceTime(S, groupShapeIn(big.groupOf(0), 1, 520), 4),
            0);
}

TEST(Cluster, InNetworkAggregationErrorsNameTheField) {
  auto bad = [](const std::string &nic) {
    auto c = parseClusterJson(
        R"({"sites": [{"nodes": [{"count": 2, "device": "A100-80G", "nic": )" +
            nic + "}]}]}",
        "agg.json", HardwareCatalog::builtin());
    EXPECT_FALSE(bool(c));
    return c ? std::string() : llvm::toString(c.takeError());
  };
  EXPECT_EQ(
      bad(R"({"link": "Eth-100G", "in_network_aggregation": "sharp"})"),
      "agg.json: sites[0].nodes[0].nic.in_network_aggregation: sharp runs "
      "in InfiniBand switches, and the cards are Eth-100G (ethernet)");
  EXPECT_EQ(
      bad(R"({"link": "IB-HDR", "in_network_aggregation": "switchml"})"),
      "agg.json: sites[0].nodes[0].nic.in_network_aggregation: switchml "
      "runs in an Ethernet switch, and the cards are IB-HDR (infiniband)");
  EXPECT_EQ(bad(R"({"link": "IB-HDR", "in_network_aggregation": "magic"})"),
            "agg.json: sites[0].nodes[0].nic.in_network_aggregation: unknown "
            "kind 'magic' (known: sharp, switchml, none)");
  EXPECT_NE(
      bad(R"({"link": "IB-HDR", "in_network_aggregation": {"kind": "sharp", "efficiency": 2}})")
          .find(".efficiency: must be a number in (0, 1]"),
      std::string::npos);
  EXPECT_NE(
      bad(R"({"link": "IB-HDR", "in_network_aggregation": {"kind": "sharp", "ports": 2}})")
          .find("nic.in_network_aggregation.ports: unknown field"),
      std::string::npos);
}

TEST(Cluster, ACopyOwnsItsInlineLinksAndDevices) {
  // Node groups point at the spec's inline links and devices: a copy must
  // point at its own, or it dangles once the original is gone.
  auto parsed = parseClusterJson(
      R"({"sites": [{"nodes": [{"count": 2, "devices_per_node": 8,
          "device": {"name": "MyGPU", "peak_flop_per_s": {"fp32": 50e12, "bf16": 400e12},
                     "memory_bytes": 68719476736, "memory_bandwidth_bytes_per_s": 2e12,
                     "power_w": 500, "intra_node_link": "PCIe5"},
          "nic": {"link": "IB-HDR", "count": 8, "in_network_aggregation": "sharp"}}]}]})",
      "copy.json", HardwareCatalog::builtin());
  ASSERT_TRUE(bool(parsed)) << llvm::toString(parsed.takeError());
  auto original = std::make_unique<Cluster>(*parsed);
  Cluster copy = *original;
  original.reset();
  const NodeGroup &g = copy.groupOf(0);
  EXPECT_EQ(g.nic, &copy.inlineLinks.front());
  EXPECT_EQ(g.device, &copy.inlineDevices.front());
  EXPECT_EQ(g.device->name, "MyGPU");
  EXPECT_EQ(g.nic->name, "IB-HDR");
}

namespace {
Cluster tieredCluster(int nodes, const std::string &fabric) {
  std::string text =
      R"({"name": "tiers", "sites": [{"name": "dc", "fabric": )" + fabric +
      R"(, "nodes": [{"count": )" + std::to_string(nodes) +
      R"(, "device": "H100-SXM", "devices_per_node": 8}]}]})";
  auto c = parseClusterJson(text, "tiers.json", HardwareCatalog::builtin());
  EXPECT_TRUE(bool(c)) << errorOf(c);
  return c ? *c : Cluster{};
}
} // namespace

TEST(Collective, AllToAllAcrossNodesUsesEachRanksOwnCard) {
  // 16 H100 over 2 nodes: each rank sends 8/16 of its buffer through its
  // own 400G card and 7/16 over NVLink at once; the card is the bound.
  auto c = parseClusterPreset("2x8xH100-SXM", HardwareCatalog::builtin());
  ASSERT_TRUE(bool(c));
  GroupShape g = groupShapeIn(c->groupOf(0), 1, 16);
  GroupShape one = groupShapeIn(c->groupOf(0), 1, 1);
  double card = 1e9 * 8 / 16 /
                (ringBusBandwidth(groupShapeIn(c->groupOf(0), 8, 2)));
  double t = collectiveTime(CollectiveKind::AllToAll, 1e9, g);
  EXPECT_GT(t, card);
  EXPECT_LT(t, card * 1.01 + 15 * 9.6e-6 + 1e-5);
  EXPECT_EQ(collectiveTime(CollectiveKind::AllToAll, 1e9, one), 0);
}

TEST(Collective, DeepEpSendsATokenOnceToANodeAndOnceToARank) {
  const HardwareCatalog &cat = HardwareCatalog::builtin();
  auto node = parseClusterPreset("8xH100-SXM", cat);
  ASSERT_TRUE(bool(node));
  GroupShape in = groupShapeIn(node->groupOf(0), 1, 8);
  // Top-1: one copy a token, to one rank: the all-to-all of that copy.
  EXPECT_NEAR(routedDispatchTime(1e8, 64, 1, in),
              collectiveTime(CollectiveKind::AllToAll, 1e8, in), 1e-12);
  // Top-8 of 128 experts on 8 ranks: a token reaches 8(1 - C(112,8)/
  // C(128,8)) ranks, not 8 copies.
  double miss = 1;
  for (int i = 0; i < 8; ++i)
    miss *= (112.0 - i) / (128.0 - i);
  double hit = 8 * (1 - miss);
  double k8 = routedDispatchTime(1e8, 128, 8, in);
  double hand = 8.4e-6 + 1e8 * hit * 7 / 8 / ringBusBandwidth(in) +
                7 * in.intraLink->latencyS;
  EXPECT_NEAR(k8, hand, 1e-12);
  EXPECT_LT(k8, collectiveTime(CollectiveKind::AllToAll, 8e8, in));
  // Over 2 nodes the network carries a token once to the other node
  // (nearly every token reaches it), not its 4 expected remote copies.
  auto two = parseClusterPreset("2x8xH100-SXM", cat);
  ASSERT_TRUE(bool(two));
  GroupShape over = groupShapeIn(two->groupOf(0), 1, 16);
  double deepep = routedDispatchTime(1e8, 128, 8, over);
  double alltoall = collectiveTime(CollectiveKind::AllToAll, 8e8, over);
  EXPECT_LT(deepep, alltoall / 3);
  EXPECT_GT(deepep, alltoall / 5);
}

TEST(Collective, FabricTiersSlowWhatLeavesABlock) {
  // 16 nodes in blocks of 4 whose uplinks are 8 times fewer than their
  // cards. A group of one rank a node over all 16 (stride 8): 4 of its
  // nodes in a block, so its ring leaves each block once, through uplinks
  // for 4/8 of a node's cards: half as fast across nodes; its all-to-all
  // sends 12/16 of its bytes out of the block at 1/8 of a card's rate.
  Cluster flat = tieredCluster(
      16,
      R"({"tiers": [{"name": "leaf", "nodes": 4, "oversubscription": 1}]})");
  Cluster tight = tieredCluster(
      16,
      R"({"tiers": [{"name": "leaf", "nodes": 4, "oversubscription": 8}]})");
  GroupShape f = groupShapeIn(flat.groupOf(0), 8, 16),
             t = groupShapeIn(tight.groupOf(0), 8, 16);
  EXPECT_DOUBLE_EQ(f.ringTierFactor, 1);
  EXPECT_DOUBLE_EQ(t.ringTierFactor, 2);
  EXPECT_DOUBLE_EQ(t.allToAllTierFactor, 12.0 / 16 * 8);
  EXPECT_NEAR(ringBusBandwidth(f), 2 * ringBusBandwidth(t), 1e-6);
  double S = double(1 << 30);
  double card = 50e9 * 0.96; // NDR400, one card a GPU, NCCL's efficiency
  double flatA2a = collectiveTime(CollectiveKind::AllToAll, S, f),
         tightA2a = collectiveTime(CollectiveKind::AllToAll, S, t);
  EXPECT_NEAR(tightA2a - flatA2a,
              12.0 / 16 * 8 * S / card - 15.0 / 16 * S / ringBusBandwidth(f),
              1e-3 * tightA2a);
  // Inside one block nothing changes: a tensor-parallel group in a node,
  // and a data-parallel ring over the 4 nodes of a block.
  GroupShape inNode = groupShapeIn(tight.groupOf(0), 1, 8),
             inBlock = groupShapeIn(tight.groupOf(0), 8, 4);
  EXPECT_DOUBLE_EQ(inNode.ringTierFactor, 1);
  EXPECT_DOUBLE_EQ(inBlock.ringTierFactor, 1);
  EXPECT_DOUBLE_EQ(inBlock.allToAllTierFactor, 0);
  EXPECT_DOUBLE_EQ(collectiveTime(CollectiveKind::AllToAll, S, inBlock),
                   collectiveTime(CollectiveKind::AllToAll, S,
                                  groupShapeIn(flat.groupOf(0), 8, 4)));
  // A ring with many nodes in each block fills no uplink: 8 of them.
  Cluster big = tieredCluster(
      64,
      R"({"tiers": [{"name": "leaf", "nodes": 16, "oversubscription": 8}]})");
  EXPECT_DOUBLE_EQ(groupShapeIn(big.groupOf(0), 8, 64).ringTierFactor, 1);
}

TEST(Cluster, BuiltinFabricsAndTheirErrors) {
  Cluster meta = tieredCluster(768, R"("meta-roce-llama3")");
  ASSERT_EQ(meta.groupOf(0).tiers.size(), 2u);
  EXPECT_EQ(meta.groupOf(0).tiers[1].nodes, 384); // 3,072 GPUs an AI zone
  EXPECT_DOUBLE_EQ(meta.groupOf(0).tiers[1].oversubscription, 7);
  EXPECT_NE(meta.sites[0].fabricSource.find("Llama 3"), std::string::npos);
  for (const char *name :
       {"dgx-superpod-h100", "dgx-superpod-b200", "alibaba-hpn7",
        "alibaba-dcn-plus", "bytedance-megascale"})
    EXPECT_NE(builtinFabric(name), nullptr) << name;
  auto check = [](const std::string &fabric, const char *expected) {
    std::string text =
        R"({"sites": [{"fabric": )" + fabric +
        R"(, "nodes": [{"count": 4, "device": "H100-SXM", "devices_per_node": 8}]}]})";
    auto c = parseClusterJson(text, "c.json", HardwareCatalog::builtin());
    std::string e = errorOf(c);
    EXPECT_NE(e.find(expected), std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos);
  };
  check(
      R"("fat-tree")",
      "sites[0].fabric: unknown fabric \"fat-tree\" (known: dgx-superpod-h100");
  check(R"({"tiers": []})", "sites[0].fabric.tiers: 1 to 8 tiers");
  check(R"({"tiers": [{"nodes": 0, "oversubscription": 1}]})",
        "sites[0].fabric.tiers[0].nodes: the nodes under one block");
  check(R"({"tiers": [{"nodes": 4, "oversubscription": 0}]})",
        "sites[0].fabric.tiers[0].oversubscription: downlink over uplink");
  check(
      R"({"tiers": [{"nodes": 4, "oversubscription": 1}, {"nodes": 6, "oversubscription": 2}]})",
      "sites[0].fabric.tiers[1].nodes: 6 is not a multiple of the tier below's "
      "4");
  check(R"({"tiers": [{"nodes": 4, "oversubscription": 1, "ratio": 2}]})",
        "sites[0].fabric.tiers[0].ratio: unknown field");
}
