//===- Hardware.cpp - the catalog of devices and links -------------------===//
#include "orrery/CostModel/Hardware.h"
#include "orrery/CostModel/Collective.h"
#include "orrery/CostModel/Errors.h"
#include "orrery/CostModel/JsonInput.h"

#include "llvm/ADT/StringExtras.h"

#include <nlohmann/json.hpp>

namespace orrery {

// Generated from costmodel/data/hardware.json by CMake.
extern const char *const kBuiltinHardwareJson;

PowerByActivity PowerByActivity::ofBoardPower(double boardW) {
  PowerByActivity p;
  p.gemmW = boardW;
  p.memoryBoundW = 0.7 * boardW;
  p.communicationW = 0.45 * boardW;
  p.idleW = 0.2 * boardW;
  p.source = "stated fractions of the board power (docs/costmodel.md)";
  return p;
}

PowerByActivity PowerByActivity::scaledTo(double boardW) const {
  PowerByActivity p = *this;
  double r = gemmW > 0 ? boardW / gemmW : 0;
  p.gemmW *= r;
  p.memoryBoundW *= r;
  p.communicationW *= r;
  p.idleW *= r;
  return p;
}

std::string readPowerByActivity(const nlohmann::json &o, PowerByActivity &out) {
  if (!o.is_object())
    return ": must be an object";
  std::string problem = unknownField(
      o, {"gemm_w", "memory_bound_w", "communication_w", "idle_w", "source"});
  if (!problem.empty())
    return "." + problem;
  for (auto [key, field] :
       {std::pair<const char *, double *>{"gemm_w", &out.gemmW},
        {"memory_bound_w", &out.memoryBoundW},
        {"communication_w", &out.communicationW},
        {"idle_w", &out.idleW}}) {
    if (!o.contains(key) || !o[key].is_number() ||
        !(o[key].get<double>() > 0) || !std::isfinite(o[key].get<double>()))
      return std::string(".") + key + ": missing or not a positive number";
    *field = o[key].get<double>();
  }
  out.unknownFor.clear();
  if (out.idleW > out.gemmW || out.idleW > out.memoryBoundW ||
      out.idleW > out.communicationW)
    return ".idle_w: above the power of an activity (a device waiting draws "
           "the least)";
  out.source = o.contains("source") && o["source"].is_string()
                   ? o["source"].get<std::string>()
                   : "power_w_by_activity";
  return "";
}

const char *aggregationName(InNetworkAggregation::Kind k) {
  switch (k) {
  case InNetworkAggregation::Kind::None:
    return "none";
  case InNetworkAggregation::Kind::Sharp:
    return "sharp";
  case InNetworkAggregation::Kind::SwitchML:
    return "switchml";
  }
  return "?";
}

std::string readAggregation(const nlohmann::json &v, const LinkSpec &nic,
                            InNetworkAggregation &out) {
  if (!v.is_string() && !v.is_object())
    return ": must be \"sharp\", \"switchml\", \"none\" or an object";
  if (v.is_object()) {
    std::string problem = unknownField(v, {"kind", "efficiency", "max_nodes"});
    if (!problem.empty())
      return "." + problem;
  }
  const nlohmann::json &kind =
      v.is_string() ? v : v.value("kind", nlohmann::json());
  if (!kind.is_string())
    return v.is_string() ? ": must be a kind"
                         : ".kind: missing or not a string";
  std::string k = kind.get<std::string>();
  out = InNetworkAggregation{};
  if (k == "none")
    return "";
  if (k == "sharp" && nic.kind != "infiniband" && nic.kind != "custom")
    return ": sharp runs in InfiniBand switches, and the cards are " +
           nic.name + " (" + nic.kind + ")";
  if (k == "switchml" && nic.kind != "ethernet" && nic.kind != "roce" &&
      nic.kind != "custom")
    return ": switchml runs in an Ethernet switch, and the cards are " +
           nic.name + " (" + nic.kind + ")";
  if (k == "sharp") {
    // NCCL's CollNet: 0.9 of the card's NCCL bandwidth (src/graph/tuning.cc).
    out.kind = InNetworkAggregation::Kind::Sharp;
    out.efficiency = 0.9 * ncclLinkEfficiency(nic);
  } else if (k == "switchml") {
    // 64 32-bit elements (256 B) per packet behind about 74 B of Ethernet,
    // IPv4, UDP and SwitchML headers, preamble and gap; one switch's 64
    // ports (a Tofino at 100 Gb/s); floats sent as 32-bit fixed point.
    out.kind = InNetworkAggregation::Kind::SwitchML;
    out.efficiency = 256.0 / (256.0 + 74.0);
    out.maxNodes = 64;
    out.wireElementBytes = 4;
  } else {
    return (v.is_string() ? ": unknown kind '" : ".kind: unknown kind '") + k +
           "' (known: sharp, switchml, none)";
  }
  if (v.is_object()) {
    if (v.contains("efficiency")) {
      const nlohmann::json &e = v["efficiency"];
      if (!e.is_number() || !(e.get<double>() > 0) || e.get<double>() > 1)
        return ".efficiency: must be a number in (0, 1], got " + e.dump();
      out.efficiency = e.get<double>();
    }
    if (v.contains("max_nodes")) {
      const nlohmann::json &m = v["max_nodes"];
      if (!m.is_number_integer() || m.get<long long>() < 2 ||
          m.get<long long>() > 1000000)
        return ".max_nodes: must be an integer from 2, got " + m.dump();
      out.maxNodes = int(m.get<long long>());
    }
  }
  return "";
}

const char *precisionName(Precision p) {
  switch (p) {
  case Precision::FP32:
    return "fp32";
  case Precision::TF32:
    return "tf32";
  case Precision::FP16:
    return "fp16";
  case Precision::BF16:
    return "bf16";
  case Precision::FP8:
    return "fp8";
  case Precision::MXFP8:
    return "mxfp8";
  case Precision::NVFP4:
    return "nvfp4";
  case Precision::MXFP4:
    return "mxfp4";
  }
  return "fp32";
}

double precisionBytes(Precision p) {
  switch (p) {
  case Precision::FP32:
  case Precision::TF32:
    return 4;
  case Precision::FP16:
  case Precision::BF16:
    return 2;
  case Precision::FP8:
    return 1;
  case Precision::MXFP8:
    return 1 + 1.0 / 32;
  case Precision::NVFP4:
    return 0.5 + 1.0 / 16;
  case Precision::MXFP4:
    return 0.5 + 1.0 / 32;
  }
  return 4;
}

void DeviceSpec::resolvePeaks() {
  peaksResolved = false;
  for (Precision p : kAllPrecisions)
    tensorPeaks[size_t(p)] = tensorPeakOf(p);
  vectorPeakS = vectorPeakOf();
  peaksResolved = true;
}

double DeviceSpec::tensorPeak(Precision p) const {
  return peaksResolved ? tensorPeaks[size_t(p)] : tensorPeakOf(p);
}

double DeviceSpec::vectorPeak() const {
  return peaksResolved ? vectorPeakS : vectorPeakOf();
}

double DeviceSpec::tensorPeakOf(Precision p) const {
  auto find = [&](const char *key) {
    auto it = peakFlopPerS.find(key);
    return it == peakFlopPerS.end() ? 0.0 : it->second;
  };
  // Without tensor cores for the precision cuBLAS computes in fp32 on the
  // CUDA cores (bf16 on Volta and Turing; tf32 before Ampere). fp8 has no
  // such path: Transformer Engine refuses it (Simulation checks), as
  // precisionProblem refuses the other vendors' unlisted precisions.
  double v = find(precisionName(p));
  if (!v)
    v = find("fp32");
  return v ? v : vectorPeakOf();
}

double DeviceSpec::vectorPeakOf() const {
  if (vectorFlopPerS > 0)
    return vectorFlopPerS;
  auto it = peakFlopPerS.find("fp32");
  return it == peakFlopPerS.end() ? 0 : it->second;
}

std::string DeviceSpec::precisionProblem(Precision p) const {
  std::string name = precisionName(p);
  if (peakFlopPerS.count(name))
    return "";
  if (p == Precision::MXFP8 || isFp4(p))
    return this->name + " has no " + name +
           " tensor cores (the block-scaled formats run on Blackwell's, "
           "mxfp8 and mxfp4 on CDNA 4's too; the catalog lists no " + name +
           " rate for it)";
  if ((vendor == "NVIDIA" || vendor == "generic") && peakFlopPerS.count("fp32"))
    return "";
  std::string listed;
  for (const auto &[k, v] : peakFlopPerS)
    listed += (listed.empty() ? "" : ", ") + k;
  return this->name + " has no published " + name +
         " matrix rate (the catalog lists " + listed +
         "; a cluster file's inline device may state one)";
}

static llvm::Error fieldError(const std::string &what, const std::string &msg) {
  return inputError(what + ": " + msg);
}

/// A misspelt field of a device is an error, not its default (JsonInput.h).
static llvm::Error onlyKnownFields(const nlohmann::json &o,
                                   const std::string &what,
                                   const std::string &path,
                                   const std::vector<const char *> &known) {
  std::string problem = unknownField(o, known);
  if (problem.empty())
    return llvm::Error::success();
  return fieldError(what, path + "." + problem);
}

static llvm::Expected<HardwareCatalog> parseCatalog(const std::string &text,
                                                    const std::string &what);

llvm::Expected<HardwareCatalog>
HardwareCatalog::parse(const std::string &text, const std::string &what) {
  try {
    return parseCatalog(text, what);
  } catch (const nlohmann::json::exception &e) {
    return fieldError(what, std::string("malformed catalog: ") + e.what());
  }
}

namespace {

/// o[key]: present, a number, and positive.
llvm::Error positiveNumber(const std::string &what, const nlohmann::json &o,
                           const char *key, const std::string &path,
                           double &out) {
  if (!o.contains(key) || !o[key].is_number())
    return fieldError(what, path + "." + key + ": missing or not a number");
  out = o[key].get<double>();
  if (!(out > 0))
    return fieldError(what, path + "." + key + ": must be positive, got " +
                                std::to_string(out));
  return llvm::Error::success();
}

/// A chip's own scale-out ports (Gaudi's RoCE ports): its node's cards.
llvm::Error readScaleOutNic(const nlohmann::json &n, const std::string &path,
                            const std::string &what, DeviceSpec &s) {
  std::string npath = path + ".scale_out_nic";
  if (!n.is_object())
    return fieldError(what, npath + ": must be an object");
  if (auto e = onlyKnownFields(
          n, what, npath,
          {"link", "ports_per_device", "devices_per_port", "source"}))
    return e;
  if (!n.contains("link") || !n["link"].is_string() ||
      n["link"].get<std::string>().empty())
    return fieldError(what, npath + ".link: missing");
  if (n.contains("ports_per_device") == n.contains("devices_per_port"))
    return fieldError(what, npath + ": give ports_per_device or "
                                    "devices_per_port (one of them)");
  const char *key =
      n.contains("ports_per_device") ? "ports_per_device" : "devices_per_port";
  if (!n[key].is_number_integer() || n[key].get<long long>() <= 0 ||
      n[key].get<long long>() > 1024)
    return fieldError(what, npath + "." + key +
                                ": must be an integer from 1 to 1,024");
  s.scaleOutLink = n["link"].get<std::string>();
  (n.contains("ports_per_device") ? s.scaleOutPortsPerDevice
                                  : s.scaleOutDevicesPerPort) =
      n[key].get<int>();
  return llvm::Error::success();
}

/// The rack system whose scale-up domain spans several nodes.
llvm::Error readRack(const nlohmann::json &r, const std::string &path,
                     const std::string &what, DeviceSpec &s) {
  std::string rpath = path + ".rack";
  if (!r.is_object())
    return fieldError(what, rpath + ": must be an object");
  if (auto e = onlyKnownFields(r, what, rpath,
                               {"name", "devices_per_node", "nodes", "source"}))
    return e;
  if (!r.contains("name") || !r["name"].is_string() ||
      r["name"].get<std::string>().empty())
    return fieldError(what, rpath + ".name: missing");
  for (const char *key : {"devices_per_node", "nodes"})
    if (!r.contains(key) || !r[key].is_number_integer() ||
        r[key].get<long long>() < 1 || r[key].get<long long>() > 1024)
      return fieldError(what, rpath + "." + key +
                                  ": must be an integer from 1 to 1,024");
  s.rack.name = r["name"].get<std::string>();
  s.rack.devicesPerNode = r["devices_per_node"].get<int>();
  s.rack.nodes = r["nodes"].get<int>();
  s.rack.source = r.value("source", "");
  return llvm::Error::success();
}

/// The host memory beside the device.
llvm::Error readHost(const nlohmann::json &h, const std::string &path,
                     const std::string &what, DeviceSpec &s) {
  std::string hpath = path + ".host";
  if (!h.is_object())
    return fieldError(what, hpath + ": must be an object");
  if (auto e = onlyKnownFields(
          h, what, hpath,
          {"memory_bytes", "memory_bandwidth_bytes_per_s", "source"}))
    return e;
  if (auto e =
          positiveNumber(what, h, "memory_bytes", hpath, s.hostMemoryBytes))
    return e;
  if (auto e = positiveNumber(what, h, "memory_bandwidth_bytes_per_s", hpath,
                              s.hostMemoryBandwidthBytesPerS))
    return e;
  return llvm::Error::success();
}

/// Positive numbers of `o` into their fields, a key ending in
/// "efficiency" at most 1; with `optional`, absent keys keep the field.
llvm::Error readEfficiencyFields(
    const nlohmann::json &o, const std::string &opath, const std::string &what,
    std::initializer_list<std::pair<const char *, double *>> fields,
    bool optional = false) {
  for (auto [key, out] : fields) {
    if (optional && !o.contains(key))
      continue;
    if (auto e = positiveNumber(what, o, key, opath, *out))
      return e;
    if (llvm::StringRef(key).ends_with("efficiency") && *out > 1)
      return fieldError(what, opath + "." + key + ": an efficiency above 1");
  }
  return llvm::Error::success();
}

/// A measured kernel profile: efficiencies up to 1, the attention curve
/// where it was measured.
llvm::Error readKernelProfile(const nlohmann::json &k, const std::string &path,
                              const std::string &what, DeviceSpec &s) {
  std::string kpath = path + ".measured_kernel_profile";
  if (!k.is_object())
    return fieldError(what, kpath + ": must be an object");
  if (auto e = onlyKnownFields(
          k, what, kpath,
          {"gemm_efficiency", "gemm_half_efficiency_s",
           "gemm_memory_efficiency", "pointwise_memory_efficiency",
           "reduction_memory_efficiency", "random_memory_efficiency",
           "kernel_launch_s", "attention_forward_efficiency",
           "attention_forward_half_keys", "attention_backward_efficiency",
           "attention_backward_half_keys", "source"}))
    return e;
  KernelModel m;
  if (auto e = readEfficiencyFields(
          k, kpath, what,
          {{"gemm_efficiency", &m.gemmEfficiency},
           {"gemm_half_efficiency_s", &m.gemmHalfEfficiencyS},
           {"gemm_memory_efficiency", &m.gemmMemoryEfficiency},
           {"pointwise_memory_efficiency", &m.pointwiseMemoryEfficiency},
           {"reduction_memory_efficiency", &m.reductionMemoryEfficiency},
           {"random_memory_efficiency", &m.randomMemoryEfficiency},
           {"kernel_launch_s", &m.kernelLaunchS}}))
    return e;
  // Optional: the fused attention's curve where it was measured.
  if (auto e = readEfficiencyFields(
          k, kpath, what,
          {{"attention_forward_efficiency", &m.attentionForwardEfficiency},
           {"attention_forward_half_keys", &m.attentionForwardHalfKeys},
           {"attention_backward_efficiency", &m.attentionBackwardEfficiency},
           {"attention_backward_half_keys", &m.attentionBackwardHalfKeys}},
          /*optional=*/true))
    return e;
  s.measuredKernels = m;
  s.measuredKernelsSource = k.value("source", "");
  return llvm::Error::success();
}

/// The catalog's `sdpa_attention`: the kernel's name, its two curves
/// (efficiencies up to 1, positive half-keys) and their source.
llvm::Error readSdpaAttention(const nlohmann::json &a, const std::string &path,
                              const std::string &what, DeviceSpec &s) {
  std::string apath = path + ".sdpa_attention";
  if (!a.is_object())
    return fieldError(what, apath + ": must be an object");
  if (auto e = onlyKnownFields(
          a, what, apath,
          {"kernel", "forward_efficiency", "forward_half_keys",
           "backward_efficiency", "backward_half_keys", "source"}))
    return e;
  AttentionCurve c;
  if (!a.contains("kernel") || !a["kernel"].is_string())
    return fieldError(what, apath + ".kernel: missing (the kernel's name)");
  c.kernel = a["kernel"];
  if (auto e = readEfficiencyFields(
          a, apath, what,
          {{"forward_efficiency", &c.forwardEfficiency},
           {"forward_half_keys", &c.forwardHalfKeys},
           {"backward_efficiency", &c.backwardEfficiency},
           {"backward_half_keys", &c.backwardHalfKeys}}))
    return e;
  c.source = a.value("source", "");
  s.sdpaAttention = c;
  return llvm::Error::success();
}

llvm::Expected<DeviceSpec> readDevice(const nlohmann::json &d, size_t i,
                                      const std::string &what) {
  std::string path = "devices[" + std::to_string(i) + "]";
  if (!d.is_object() || !d.contains("name") || !d["name"].is_string())
    return fieldError(what, path + ".name: missing");
  DeviceSpec s;
  s.name = d["name"];
  path = "device '" + s.name + "'";
  if (auto e = onlyKnownFields(
          d, what, path,
          {"name", "aliases", "vendor", "source", "intra_node_link",
           "peak_flop_per_s", "memory_bytes", "memory_bandwidth_bytes_per_s",
           "power_w", "power_w_by_activity", "workspace_bytes",
           "measured_kernel_profile", "kernel_profile_of", "host",
           "scale_out_nic", "vector_flop_per_s", "sdpa_attention",
           "sm_count", "rack"}))
    return std::move(e);
  if (d.contains("rack"))
    if (auto e = readRack(d["rack"], path, what, s))
      return std::move(e);
  if (d.contains("scale_out_nic"))
    if (auto e = readScaleOutNic(d["scale_out_nic"], path, what, s))
      return std::move(e);
  if (d.contains("host"))
    if (auto e = readHost(d["host"], path, what, s))
      return std::move(e);
  s.vendor = d.value("vendor", "");
  s.source = d.value("source", "");
  s.intraNodeLink = d.value("intra_node_link", "PCIe4");
  for (const auto &a : d.value("aliases", nlohmann::json::array()))
    if (a.is_string())
      s.aliases.push_back(a);
  if (!d.contains("peak_flop_per_s") || !d["peak_flop_per_s"].is_object())
    return fieldError(what, path + ".peak_flop_per_s: missing");
  for (auto &[k, v] : d["peak_flop_per_s"].items()) {
    if (!v.is_number() || v.get<double>() <= 0)
      return fieldError(what, path + ".peak_flop_per_s." + k +
                                  ": must be a positive number");
    s.peakFlopPerS[k] = v.get<double>();
  }
  if (d.contains("vector_flop_per_s"))
    if (auto e = positiveNumber(what, d, "vector_flop_per_s", path,
                                s.vectorFlopPerS))
      return std::move(e);
  s.resolvePeaks();
  if (s.vectorPeak() <= 0)
    return fieldError(what, path + ".peak_flop_per_s.fp32: missing (or "
                                   "vector_flop_per_s: the rate of the "
                                   "non-matrix kernels)");
  if (auto e = positiveNumber(what, d, "memory_bytes", path, s.memoryBytes))
    return std::move(e);
  if (auto e = positiveNumber(what, d, "memory_bandwidth_bytes_per_s", path,
                              s.memoryBandwidthBytesPerS))
    return std::move(e);
  // Optional: Google and AWS publish no board power for their chips.
  if (d.contains("power_w")) {
    if (auto e = positiveNumber(what, d, "power_w", path, s.powerW))
      return std::move(e);
    s.power = PowerByActivity::ofBoardPower(s.powerW);
  } else {
    s.power.unknownFor = s.name;
    s.power.source = "no published board power";
  }
  if (d.contains("power_w_by_activity")) {
    std::string problem =
        readPowerByActivity(d["power_w_by_activity"], s.power);
    if (!problem.empty())
      return fieldError(what, path + ".power_w_by_activity" + problem);
  }
  if (d.contains("workspace_bytes"))
    if (auto e =
            positiveNumber(what, d, "workspace_bytes", path, s.workspaceBytes))
      return std::move(e);
  if (d.contains("measured_kernel_profile"))
    if (auto e = readKernelProfile(d["measured_kernel_profile"], path, what, s))
      return std::move(e);
  if (d.contains("sm_count")) {
    const nlohmann::json &n = d["sm_count"];
    if (!n.is_number_integer() || n.get<int64_t>() < 1 ||
        n.get<int64_t>() > 4096)
      return fieldError(what, path + ".sm_count: must be an integer from 1 "
                                     "to 4096");
    s.smCount = int(n.get<int64_t>());
  }
  if (d.contains("sdpa_attention"))
    if (auto e = readSdpaAttention(d["sdpa_attention"], path, what, s))
      return std::move(e);
  return s;
}

llvm::Expected<LinkSpec> readCatalogLink(const nlohmann::json &l, size_t i,
                                         const std::string &what) {
  std::string path = "links[" + std::to_string(i) + "]";
  if (!l.is_object() || !l.contains("name") || !l["name"].is_string())
    return fieldError(what, path + ".name: missing");
  LinkSpec s;
  s.name = l["name"];
  path = "link '" + s.name + "'";
  s.kind = l.value("kind", "");
  s.source = l.value("source", "");
  s.switched = l.value("switched", true);
  if (auto e = positiveNumber(what, l, "bandwidth_bytes_per_s", path,
                              s.bandwidthBytesPerS))
    return std::move(e);
  if (!l.contains("latency_s") || !l["latency_s"].is_number() ||
      l["latency_s"].get<double>() < 0)
    return fieldError(what, path + ".latency_s: missing or negative");
  s.latencyS = l["latency_s"];
  s.perLinkBandwidthBytesPerS = l.value("per_link_bandwidth_bytes_per_s", 0.0);
  s.fallbackLink = l.value("fallback_link", "");
  s.ncclBusBandwidthCapBytesPerS =
      l.value("nccl_bus_bandwidth_cap_bytes_per_s", 0.0);
  if (s.ncclBusBandwidthCapBytesPerS < 0)
    return fieldError(what, path + ".nccl_bus_bandwidth_cap_bytes_per_s: "
                                   "must not be negative");
  s.ncclLlMaxBusBandwidthBytesPerS =
      l.value("nccl_ll_max_bus_bandwidth_bytes_per_s", 0.0);
  if (s.ncclLlMaxBusBandwidthBytesPerS < 0)
    return fieldError(what, path + ".nccl_ll_max_bus_bandwidth_bytes_per_s: "
                                   "must not be negative");
  s.ncclNvlsChunkStepBytes = l.value("nccl_nvls_chunk_step_bytes", 0.0);
  if (s.ncclNvlsChunkStepBytes < 0)
    return fieldError(what, path + ".nccl_nvls_chunk_step_bytes: must not "
                                   "be negative");
  s.ncclNvlsEfficiency = l.value("nccl_nvls_efficiency", 0.0);
  if (s.ncclNvlsEfficiency < 0 || s.ncclNvlsEfficiency > 1)
    return fieldError(what, path + ".nccl_nvls_efficiency: must be 0 to 1");
  if (l.contains("link_multiplicity")) {
    s.linkMultiplicity =
        l["link_multiplicity"].get<std::vector<std::vector<int>>>();
    for (const auto &row : s.linkMultiplicity)
      if (row.size() != s.linkMultiplicity.size())
        return fieldError(what,
                          path + ".link_multiplicity: must be a square matrix");
    if (!(s.perLinkBandwidthBytesPerS > 0))
      return fieldError(what, path + ".per_link_bandwidth_bytes_per_s: "
                                     "needed with link_multiplicity");
  }
  return s;
}

} // namespace

static llvm::Expected<HardwareCatalog> parseCatalog(const std::string &text,
                                                    const std::string &what) {
  nlohmann::json j =
      nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return fieldError(what, "not valid JSON");
  HardwareCatalog c;
  auto &devicesOut = HardwareCatalog::mutableDevices(c);
  auto &linksOut = HardwareCatalog::mutableLinks(c);
  const nlohmann::json &devices = j.value("devices", nlohmann::json::array());
  for (size_t i = 0; i < devices.size(); ++i) {
    auto s = readDevice(devices[i], i, what);
    if (!s)
      return s.takeError();
    devicesOut.push_back(std::move(*s));
  }
  // A device built on the same chip as a measured one (same SMs, clocks
  // and tensor cores) takes its profile: a GEMM's share of the tensor-core
  // peak and a kernel's share of HBM bandwidth carry over.
  for (size_t i = 0; i < devices.size(); ++i) {
    const nlohmann::json &d = devices[i];
    if (!d.contains("kernel_profile_of"))
      continue;
    std::string path = "device '" + devicesOut[i].name + "'.kernel_profile_of";
    if (!d["kernel_profile_of"].is_string())
      return fieldError(what, path + ": must be a device name");
    std::string other = d["kernel_profile_of"];
    auto it = llvm::find_if(
        devicesOut, [&](const DeviceSpec &x) { return x.name == other; });
    if (it == devicesOut.end() || !it->measuredKernels ||
        &*it == &devicesOut[i])
      return fieldError(what, path + ": '" + other +
                                  "' is not a device with a measured profile");
    devicesOut[i].measuredKernels = it->measuredKernels;
    devicesOut[i].measuredKernelsSource =
        "the profile measured on " + other +
        " (the same chip): " + it->measuredKernelsSource;
  }
  const nlohmann::json &links = j.value("links", nlohmann::json::array());
  for (size_t i = 0; i < links.size(); ++i) {
    auto l = readCatalogLink(links[i], i, what);
    if (!l)
      return l.takeError();
    linksOut.push_back(std::move(*l));
  }
  return c;
}

const HardwareCatalog &HardwareCatalog::builtin() {
  static const HardwareCatalog catalog = [] {
    auto c = parse(kBuiltinHardwareJson, "built-in hardware catalog");
    if (!c) {
      llvm::consumeError(c.takeError());
      assert(false && "the built-in catalog must parse");
      return HardwareCatalog();
    }
    return std::move(*c);
  }();
  return catalog;
}

const DeviceSpec *HardwareCatalog::device(const std::string &name) const {
  for (const DeviceSpec &d : devices_) {
    if (llvm::StringRef(d.name).equals_insensitive(name))
      return &d;
    for (const std::string &a : d.aliases)
      if (llvm::StringRef(a).equals_insensitive(name))
        return &d;
  }
  return nullptr;
}

const LinkSpec *HardwareCatalog::link(const std::string &name) const {
  for (const LinkSpec &l : links_)
    if (llvm::StringRef(l.name).equals_insensitive(name))
      return &l;
  return nullptr;
}

std::string HardwareCatalog::deviceNames() const {
  std::string s;
  for (const DeviceSpec &d : devices_)
    s += (s.empty() ? "" : ", ") + d.name;
  return s;
}

std::string HardwareCatalog::linkNames() const {
  std::string s;
  for (const LinkSpec &l : links_)
    s += (s.empty() ? "" : ", ") + l.name;
  return s;
}

} // namespace orrery
