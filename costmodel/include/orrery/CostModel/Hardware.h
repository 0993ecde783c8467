//===- Hardware.h - the catalog of devices and links ---------------------===//
//
// Datasheet peaks for GPUs and links (costmodel/data/hardware.json, built
// into the library). Units are SI and in every field name: FLOP/s, bytes,
// bytes/s, seconds, watts.
//
//===----------------------------------------------------------------------===//
#ifndef ORRERY_COSTMODEL_HARDWARE_H
#define ORRERY_COSTMODEL_HARDWARE_H

#include "llvm/Support/Error.h"

#include <nlohmann/json_fwd.hpp>

#include <array>
#include <map>
#include <string>
#include <vector>

namespace orrery {

/// Numeric precisions of tensor math. FP8 is per-tensor scaled (Hopper's
/// and Ada's tensor cores, Transformer Engine's delayed and current
/// scaling); the block-scaled formats carry a scale per block of elements
/// and run on Blackwell's (and CDNA 4's) block-scaled MMA: MXFP8 and MXFP4
/// (OCP microscaling: an 8-bit power-of-two scale per 32 elements) and
/// NVFP4 (an FP8 E4M3 scale per 16 elements, with a per-tensor FP32 one).
enum class Precision { FP32, TF32, FP16, BF16, FP8, MXFP8, NVFP4, MXFP4 };
constexpr size_t kPrecisions = 8;
/// Every precision, in the enum's order.
constexpr Precision kAllPrecisions[kPrecisions] = {
    Precision::FP32,  Precision::TF32,  Precision::FP16,  Precision::BF16,
    Precision::FP8,   Precision::MXFP8, Precision::NVFP4, Precision::MXFP4};

/// "fp32", "tf32", "fp16", "bf16", "fp8", "mxfp8", "nvfp4", "mxfp4".
const char *precisionName(Precision p);
/// Bytes per element of a precision, its block scales included (TF32 is
/// stored as fp32; NVFP4 half a byte and one E4M3 byte per 16, MXFP4 and
/// MXFP8 one E8M0 byte per 32).
double precisionBytes(Precision p);
/// An 8-bit float format of Transformer Engine's recipes (fp8, mxfp8).
inline bool isFp8(Precision p) {
  return p == Precision::FP8 || p == Precision::MXFP8;
}
/// A 4-bit float format (nvfp4, mxfp4).
inline bool isFp4(Precision p) {
  return p == Precision::NVFP4 || p == Precision::MXFP4;
}

/// What bounds a kernel that moves more bytes than it computes: a GEMM's
/// operands and result, an elementwise pass, a reduction along rows
/// (softmax, normalizations, reductions), or a pass that draws random
/// numbers (dropout). Each reaches its own fraction of HBM bandwidth. A
/// fused attention kernel (FlashAttention) runs on tensor cores at its own
/// efficiency (KernelModel::attentionEfficiency).
enum class KernelClass { Gemm, Pointwise, Reduction, Random, Attention };

/// How fast one kernel runs against the device's peaks (docs/costmodel.md):
/// a GEMM reaches gemmEfficiency · t / (t + gemmHalfEfficiencyS) of the
/// tensor-core peak (t: its duration at peak), a memory-bound kernel its
/// class's fraction of HBM bandwidth, and each kernel costs kernelLaunchS.
///
/// Without a device's own profile: GEMMs reach 80 % of peak, half of that
/// at 15 µs (a rule of thumb; the GEMM rate depends on the chip), and
/// memory-bound kernels reach the fraction of HBM bandwidth their class
/// reached on the one device measured so far (the H200's profile, fitted
/// to bench/measured/h200-sxm-pytorch.json): the same softmax, norm, dropout
/// and elementwise kernels run on every NVIDIA GPU, and their share of the
/// bandwidth is a property of the kernel (passes, reductions, random-number
/// generation) more than of the chip. A test keeps the two equal.
struct KernelModel {
  double gemmEfficiency = 0.8;
  double gemmHalfEfficiencyS = 15e-6;
  /// Fraction of HBM bandwidth by KernelClass.
  double gemmMemoryEfficiency = 0.788, pointwiseMemoryEfficiency = 0.743,
         reductionMemoryEfficiency = 0.413, randomMemoryEfficiency = 0.358;
  double kernelLaunchS = 3e-6;
  /// Fused attention (docs/costmodel.md): forward and backward reach
  /// e · k / (k + k½) of the tensor-core peak, k the keys each query row
  /// visits in one kernel call (half of them under a causal mask): the
  /// per-query-block prologue and epilogue (loading Q, rescaling and
  /// writing O) cost about k½ keys' worth of work. Read off the FlashAttention-3
  /// paper's measurements of cuDNN's fused attention (what Transformer
  /// Engine runs on Hopper) at head dim 128 on an H100 SXM (Shah et al.
  /// 2024, Fig. 5 and 6, non-causal): forward 497, 574, 617 and 600
  /// TFLOP/s at 512, 1k, 2k and 8k keys; backward 305, 408, 465, 518.
  double attentionForwardEfficiency = 0.62, attentionForwardHalfKeys = 120;
  double attentionBackwardEfficiency = 0.53, attentionBackwardHalfKeys = 360;
  double attentionEfficiency(double keys, bool backward) const {
    double e = backward ? attentionBackwardEfficiency
                        : attentionForwardEfficiency;
    double half =
        backward ? attentionBackwardHalfKeys : attentionForwardHalfKeys;
    return keys > 0 ? e * keys / (keys + half) : e;
  }
  double memoryEfficiency(KernelClass c) const {
    switch (c) {
    case KernelClass::Attention:
    case KernelClass::Gemm:
      return gemmMemoryEfficiency;
    case KernelClass::Reduction:
      return reductionMemoryEfficiency;
    case KernelClass::Random:
      return randomMemoryEfficiency;
    case KernelClass::Pointwise:
      break;
    }
    return pointwiseMemoryEfficiency;
  }
};

/// The attention kernel PyTorch's scaled_dot_product_attention runs on a
/// device where it is not Transformer Engine's (the catalog's
/// `sdpa_attention`): SDPA's flash backend is FlashAttention-2 on Ampere and
/// Hopper, which on a Hopper GPU reaches about half of what cuDNN's fused
/// attention does (docs/costmodel.md, "Attention kernels"). Its curves have
/// KernelModel's attention form; a device without one runs SDPA at its fused
/// attention's curve (torchtitan puts cuDNN first on Blackwell).
struct AttentionCurve {
  std::string kernel; ///< "FlashAttention-2"
  double forwardEfficiency = 0, forwardHalfKeys = 0;
  double backwardEfficiency = 0, backwardHalfKeys = 0;
  std::string source;
  void applyTo(KernelModel &k) const {
    k.attentionForwardEfficiency = forwardEfficiency;
    k.attentionForwardHalfKeys = forwardHalfKeys;
    k.attentionBackwardEfficiency = backwardEfficiency;
    k.attentionBackwardHalfKeys = backwardHalfKeys;
  }
};

/// One GPU (or accelerator) type.
/// The power one device draws by what it is doing (docs/costmodel.md,
/// "Energy"): running tensor-core math (GEMMs, fused attention), running
/// memory-bound kernels (elementwise, normalizations, the optimizer step),
/// communicating with nothing to compute (an exposed collective, a pipeline
/// transfer), and waiting (the pipeline bubble, a stage that finished
/// early). Compute overlapped with communication draws the compute's power.
struct PowerByActivity {
  double gemmW = 0, memoryBoundW = 0, communicationW = 0, idleW = 0;
  std::string source;
  /// The device type whose power nobody published (TPUs, Trainium): the
  /// watts above are then unknown, not zero, and energy is not priced for
  /// it. Empty when known. A cluster's `power_w` makes it known.
  std::string unknownFor;
  bool known() const { return unknownFor.empty(); }
  /// Without a measurement: stated fractions of the board power `boardW`
  /// (docs/costmodel.md says why): 1.0 for tensor-core math, 0.7 for
  /// memory-bound kernels, 0.45 for communication, 0.2 waiting.
  static PowerByActivity ofBoardPower(double boardW);
  /// The same shape at another board power (a cluster's `power_w`).
  PowerByActivity scaledTo(double boardW) const;
};

/// Reads a `power_w_by_activity` object ({"gemm_w", "memory_bound_w",
/// "communication_w", "idle_w"}, positive watts, and an optional
/// "source") into `out`. Returns the problem ("idle_w: must be a positive
/// number") or "".
std::string readPowerByActivity(const nlohmann::json &o,
                                PowerByActivity &out);

struct DeviceSpec {
  std::string name;
  std::string vendor;
  std::vector<std::string> aliases;
  /// Dense peak by precision name ("fp16", ...).
  std::map<std::string, double> peakFlopPerS;
  double memoryBytes = 0;
  double memoryBandwidthBytesPerS = 0;
  double powerW = 0; ///< board power (TDP)
  /// Streaming multiprocessors (the catalog's `sm_count`; 0: not stated):
  /// what a kernel launched on fewer of them gives up (Transformer
  /// Engine's communication SMs).
  int smCount = 0;
  /// Power by activity: the catalog's `power_w_by_activity`, else the
  /// stated fractions of powerW.
  PowerByActivity power;
  /// The host of the device's reference server (a DGX), per node: its
  /// memory and memory bandwidth; 0 when the catalog states none (a
  /// cluster spec then states them for optimizer offload).
  double hostMemoryBytes = 0, hostMemoryBandwidthBytesPerS = 0;
  /// Memory a process holds on the device besides the model's (the CUDA
  /// context, cuBLAS and NCCL buffers on a GPU); 0: Assumptions'.
  double workspaceBytes = 0;
  /// The link between devices of one node, by name.
  std::string intraNodeLink;
  /// The scale-out network of the device's reference platform (the
  /// catalog's `scale_out_nic`: Gaudi's own RoCE ports, an MI300X
  /// platform's 400G NIC a GPU, a trn1 instance's EFA port for two chips):
  /// a node's cards when a cluster spec names none. Ports per device, or
  /// devices sharing a port (one of them is set); empty: the rule of the
  /// device's DGX generation (Cluster.cpp).
  std::string scaleOutLink;
  int scaleOutPortsPerDevice = 0, scaleOutDevicesPerPort = 0;
  /// The rack system the device is sold in, whose scale-up link joins
  /// more devices than a node holds (the catalog's `rack`: GB200 NVL72,
  /// 18 trays of 4 GPUs on one NVLink switch fabric); the preset
  /// `NxDEVICE-NAME` builds N of them. Empty name: none.
  struct Rack {
    std::string name;
    int devicesPerNode = 0, nodes = 0;
    std::string source;
  } rack;
  std::string source;
  /// Kernel speeds measured on this device type (the catalog's
  /// `measured_kernel_profile`), which replace the stated assumptions.
  std::optional<KernelModel> measuredKernels;
  std::string measuredKernelsSource;
  /// What scaled_dot_product_attention runs here, where it is not the fused
  /// attention's curve (AttentionCurve).
  std::optional<AttentionCurve> sdpaAttention;

  /// Peak FLOP/s of tensor-core math in `p`; the fp32 peak where the device
  /// has no tensor cores for `p` (cuBLAS's fallback: bf16 on a V100 or T4).
  double tensorPeak(Precision p) const;
  /// Whether the device has tensor cores for `p` (fp32 always counts).
  bool hasTensorCores(Precision p) const {
    return p == Precision::FP32 || peakFlopPerS.count(precisionName(p));
  }
  /// Peak FLOP/s of vector (non-tensor-core) math: the catalog's
  /// `vector_flop_per_s` where given (a device whose fp32 matrix rate is
  /// not published: Gaudi's TPCs), else its fp32 peak.
  double vectorPeak() const;
  /// Why linear layers in `p` cannot be priced on this device, or empty.
  /// Without a rate for `p` an NVIDIA GPU computes in fp32 on its CUDA
  /// cores (cuBLAS's fallback: bf16 on a V100) and a CPU in fp32
  /// (OpenBLAS); no such fallback is known for the other vendors, whose
  /// matrix units run the listed precisions only as far as the catalog
  /// knows, so their missing precisions are refused rather than priced at
  /// another unit's rate. The block-scaled formats (mxfp8, nvfp4, mxfp4)
  /// have no fallback on any device: a device without their rate is
  /// refused. fp8 is the callers' to check (Transformer Engine has no
  /// fallback either).
  std::string precisionProblem(Precision p) const;
  double vectorFlopPerS = 0; ///< the catalog's vector_flop_per_s; 0: fp32's
  /// tensorPeak and vectorPeak per precision, resolved once from the maps
  /// above when the device is read (a search prices kernels in its inner
  /// loop); a spec changed after that resolves again.
  void resolvePeaks();

private:
  double tensorPeakOf(Precision p) const;
  double vectorPeakOf() const;
  std::array<double, kPrecisions> tensorPeaks{};
  double vectorPeakS = 0;
  bool peaksResolved = false;
};

/// One link type: bandwidth per direction per device port.
struct LinkSpec {
  std::string name;
  std::string kind; ///< nvlink, pcie, infiniband, roce, ethernet, wan, xgmi
  double bandwidthBytesPerS = 0;
  double latencyS = 0;
  /// Every device reaches every other at full bandwidth (NVSwitch, a fabric).
  bool switched = true;
  /// Point-to-point topologies (DGX-1's hybrid cube-mesh): links between
  /// local ranks i and j, the bandwidth of one link, and the path used when
  /// no ring of these links exists.
  std::vector<std::vector<int>> linkMultiplicity;
  double perLinkBandwidthBytesPerS = 0;
  /// The most bus bandwidth NCCL reaches over this link whatever the link
  /// count (0: no cap), as NCCL's own model caps it.
  double ncclBusBandwidthCapBytesPerS = 0;
  /// NVLink SHARP (NVLS): the switch reduces; the fraction of the link's
  /// NCCL bandwidth NVLS reaches (NCCL's nvlsEfficiency; 0: no NVLS).
  double ncclNvlsEfficiency = 0;
  /// What one NVLS chunk step costs beyond its bytes, as bytes moved at the
  /// NVLS rate (0: nothing): at NCCL's smaller chunks for smaller messages
  /// the rate falls as chunk / (chunk + this).
  double ncclNvlsChunkStepBytes = 0;
  /// The most bus bandwidth NCCL's LL protocol reaches on one node of this
  /// GPU generation (its llMaxBws: 39 GB/s Volta, 87.7 Ampere, 141 Hopper,
  /// 282 Blackwell; 0: no cap beyond LL's half of the ring's bandwidth).
  double ncclLlMaxBusBandwidthBytesPerS = 0;
  std::string fallbackLink;
  std::string source;
  /// Collectives measured over this link (`orrery profile`): per kind
  /// ("all-reduce", ...) and group size, seconds at message sizes (bytes
  /// as collectiveTime takes them), ascending. Where a group inside one
  /// node matches a curve, its time is read off it.
  struct MeasuredPoint {
    std::string collective;
    int ranks = 0;
    double bytes = 0, seconds = 0;
  };
  std::vector<MeasuredPoint> measured;
};

/// Reduction in the network between nodes (docs/costmodel.md, "In-network
/// aggregation"): the switches sum what the nodes send, so an all-reduce
/// across nodes sends each byte up once and receives the sum once, instead
/// of a ring's 2(n-1)/n passes.
struct InNetworkAggregation {
  enum class Kind {
    None,
    /// InfiniBand SHARP through NCCL's CollNet (Graham et al., COMHPC'16;
    /// NCCL_COLLNET_ENABLE=1 with the SHARP plugin): a tree of switches,
    /// any number of nodes; at NCCL's CollNet efficiency.
    Sharp,
    /// SwitchML (Sapio et al., NSDI'21): one programmable switch sums
    /// 32-bit fixed-point packets of 64 elements; the nodes a switch
    /// reaches (its ports) at most; a 16-bit gradient doubles on the wire.
    SwitchML,
  } kind = Kind::None;
  /// The fraction of the cards' line rate the aggregated stream reaches.
  double efficiency = 0;
  /// The most nodes one aggregation spans (0: any).
  int maxNodes = 0;
  /// Bytes each element takes on the wire (0: the element's own).
  int wireElementBytes = 0;
};
const char *aggregationName(InNetworkAggregation::Kind k);
/// Reads `in_network_aggregation` — "sharp", "switchml", "none", or
/// {"kind", "efficiency", "max_nodes"} — for nodes whose cards are `nic`.
/// Returns the problem (": unknown kind 'x' ...") or "".
std::string readAggregation(const nlohmann::json &v, const LinkSpec &nic,
                            InNetworkAggregation &out);

/// The catalog of known devices and links.
class HardwareCatalog {
public:
  /// The catalog built into the library.
  static const HardwareCatalog &builtin();
  /// Parses a catalog in the hardware.json format.
  static llvm::Expected<HardwareCatalog> parse(const std::string &json,
                                               const std::string &what);

  /// A device by name or alias (case-insensitive); null when unknown.
  const DeviceSpec *device(const std::string &name) const;
  /// A link by name (case-insensitive); null when unknown.
  const LinkSpec *link(const std::string &name) const;
  const std::vector<DeviceSpec> &devices() const { return devices_; }
  const std::vector<LinkSpec> &links() const { return links_; }
  /// "A100-80G, H100-SXM, ..." for error messages.
  std::string deviceNames() const;
  std::string linkNames() const;

  /// For the parser.
  static std::vector<DeviceSpec> &mutableDevices(HardwareCatalog &c) {
    return c.devices_;
  }
  static std::vector<LinkSpec> &mutableLinks(HardwareCatalog &c) {
    return c.links_;
  }

private:
  std::vector<DeviceSpec> devices_;
  std::vector<LinkSpec> links_;
};

} // namespace orrery

#endif // ORRERY_COSTMODEL_HARDWARE_H
