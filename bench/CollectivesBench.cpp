//===- CollectivesBench.cpp - the collective model against NCCL data -----===//
//
//   orrery-bench-collectives shared/validation/published_runs.json
//
// For each NCCL measurement in the file (nccl-tests all-reduce inside one
// node, and maintainers' statements of peak bus bandwidth), prints measured
// and predicted bus bandwidth and the error, then the mean and worst error
// over messages of 64 MiB and more. Bus bandwidth is nccl-tests' figure:
// algorithm bandwidth x 2(n-1)/n for all-reduce. Points of 1 to 64 MiB
// with a time are compared as times, in a table of their own
// (bench/published/nccl_allreduce_runs.json: 8 and 4 x H100).
//
//===----------------------------------------------------------------------===//

#include "orrery/CostModel/Collective.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <nlohmann/json.hpp>

using namespace orrery;

static GroupShape nodeGroup(const DeviceSpec &dev, int ranks, int perNode,
                            const LinkSpec *nic, double nicShare) {
  const HardwareCatalog &cat = HardwareCatalog::builtin();
  GroupShape g;
  g.ranks = ranks;
  g.ranksPerNode = perNode;
  g.intraLink = cat.link(dev.intraNodeLink);
  if (g.intraLink && !g.intraLink->fallbackLink.empty())
    g.fallback = cat.link(g.intraLink->fallbackLink);
  g.nic = nic;
  g.nicSharePerRank = nicShare;
  return g;
}

static GroupShape ringOnly(GroupShape g) {
  g.nvls = false;
  return g;
}

static double busBw(double bytes, const GroupShape &g) {
  double t = collectiveTime(CollectiveKind::AllReduce, bytes, g);
  return bytes / t * 2.0 * (g.ranks - 1) / g.ranks;
}

/// Mean and worst of absolute errors, as "mean abs error M%, worst W% (N
/// points)".
static std::string errorSummary(const std::vector<double> &errors) {
  double sum = 0, worst = 0;
  for (double e : errors) {
    sum += e;
    worst = std::max(worst, e);
  }
  return llvm::formatv("mean abs error {0:F1}%, worst {1:F1}% ({2} points)",
                       sum / errors.size(), worst, errors.size())
      .str();
}

/// The nccl-tests all-reduce cases inside one node: bus bandwidth at 64 MiB
/// and more, then time at 1 to 64 MiB (a serving step's tensor-parallel
/// all-reduce, a bucket of gradients) where the point has one.
static void printIntraNodeCurves(const nlohmann::json &data) {
  const HardwareCatalog &cat = HardwareCatalog::builtin();
  std::vector<double> errors, midErrors;
  std::string midSizes;
  llvm::outs() << "NCCL all-reduce bus bandwidth inside one node (GB/s), "
                  "messages >= 64 MiB\n";
  llvm::outs() << llvm::format("  %-28s %10s %10s %10s %8s\n", "case", "MiB",
                               "measured", "predicted", "error");
  for (const auto &c : data["cases"]) {
    if (c.value("group", "") != "NCCL_allreduce_intra_node")
      continue;
    std::string gpu = c["hardware"].value("gpu", "");
    const DeviceSpec *dev = cat.device(gpu == "V100"   ? "V100-32G"
                                       : gpu == "A100" ? "A100-80G"
                                                       : gpu);
    int n = c["hardware"].value("num_gpus", 0);
    if (!dev || n < 2)
      continue;
    GroupShape g = nodeGroup(*dev, n, n, nullptr, 1);
    std::string id = c["id"].get<std::string>();
    for (const auto &p : c["measured"]["points"]) {
      double bytes = p["bytes"].get<double>(), mib = bytes / (1 << 20);
      if (mib < 64) {
        if (mib < 1 || !p.contains("time_us_out_of_place"))
          continue;
        double us = p["time_us_out_of_place"].get<double>(),
               priced = collectiveTime(CollectiveKind::AllReduce, bytes, g) * 1e6;
        double e = 100 * (priced - us) / us;
        midErrors.push_back(std::fabs(e));
        midSizes += llvm::formatv("  {0,-32} {1,10:F0} {2,10:F1} {3,10:F1} "
                                  "{4,7:F1}%\n",
                                  id, mib, us, priced, e)
                        .str();
        continue;
      }
      double measured = p["busbw_GBps"].get<double>(),
             predicted = busBw(bytes, g) / 1e9;
      double e = 100 * (predicted - measured) / measured;
      errors.push_back(std::fabs(e));
      llvm::outs() << llvm::format("  %-28s %10.0f %10.1f %10.1f %+7.1f%%\n",
                                   id.c_str(), mib, measured, predicted, e);
    }
  }
  if (!errors.empty())
    llvm::outs() << "  intra-node all-reduce: " << errorSummary(errors)
                 << "\n";
  if (midErrors.empty())
    return;
  llvm::outs() << "\nNCCL all-reduce time inside one node (us), messages "
                  "of 1 to 64 MiB\n"
               << llvm::format("  %-32s %10s %10s %10s %8s\n", "case", "MiB",
                               "measured", "predicted", "error")
               << midSizes << "  mid-size all-reduce: "
               << errorSummary(midErrors) << "\n";
}

static void printStatement(llvm::StringRef id, const std::string &what,
                           double measured, double predicted) {
  llvm::outs() << llvm::format(
      "  %-36s %-40s measured %6.1f  predicted %6.1f  %+6.1f%%\n",
      id.str().c_str(), what.c_str(), measured, predicted,
      100 * (predicted - measured) / measured);
}

/// Maintainers' and users' statements of peak bus bandwidth (large
/// messages), each priced on the setup it names.
static void printStatements(const nlohmann::json &data) {
  const HardwareCatalog &cat = HardwareCatalog::builtin();
  llvm::outs() << "\nNCCL bandwidth statements (GB/s)\n";
  struct Statement {
    const char *id, *what;
    double predicted;
  };
  const LinkSpec *hdr = cat.link("IB-HDR"), *edr = cat.link("IB-EDR"),
                 *ndr = cat.link("IB-NDR");
  const DeviceSpec *a100 = cat.device("A100-80G"),
                   *h100 = cat.device("H100-SXM");
  double big = 8.0 * (1ull << 30);
  std::vector<Statement> statements = {
      {"nccl_stmt_a100_8gpu_allreduce_peak", "8 x A100 NVSwitch all-reduce",
       busBw(big, nodeGroup(*a100, 8, 8, nullptr, 1)) / 1e9},
      {"nccl_stmt_a100_8gpu_user", "8 x A100 NVSwitch all-reduce",
       busBw(4.0 * (1ull << 30), nodeGroup(*a100, 8, 8, nullptr, 1)) / 1e9},
      {"nccl_stmt_a100_2node_4xHDR", "2 nodes x 8 A100, 4 HDR NICs per node",
       busBw(big, nodeGroup(*a100, 16, 8, hdr, 0.5)) / 1e9},
      {"nccl_stmt_hdr_per_nic", "one HDR NIC, ring over nodes",
       busBw(big, nodeGroup(*a100, 4, 1, hdr, 1)) / 1e9},
      {"nccl_stmt_edr_per_nic", "one EDR NIC, ring over nodes",
       busBw(big, nodeGroup(*a100, 4, 1, edr, 1)) / 1e9},
      {"nccl_stmt_ndr_per_nic", "one NDR NIC, ring over nodes",
       busBw(big, nodeGroup(*h100, 4, 1, ndr, 1)) / 1e9},
      {"nccl_stmt_h100_8gpu_ring", "8 x H100 NVSwitch ring all-reduce",
       busBw(big, ringOnly(nodeGroup(*h100, 8, 8, nullptr, 1))) / 1e9},
      {"nccl_stmt_h100_8gpu_nvls", "8 x H100 NVLink SHARP all-reduce",
       busBw(big, nodeGroup(*h100, 8, 8, nullptr, 1)) / 1e9},
  };
  for (const Statement &st : statements) {
    for (const auto &c : data["cases"]) {
      if (c.value("id", "") != st.id)
        continue;
      const auto &m = c["measured"];
      double lo = 0, hi = 0;
      for (const char *key : {"busbw_GBps", "GBps_per_nic"}) {
        if (!m.contains(key))
          continue;
        lo = m[key].is_array() ? m[key].front().get<double>()
                               : m[key].get<double>();
        hi = m[key].is_array() ? m[key].back().get<double>() : lo;
      }
      printStatement(st.id, st.what, (lo + hi) / 2, st.predicted);
    }
  }
  // A user's NVLS bus bandwidth at 5 to 8 H100 of one node.
  for (const auto &c : data["cases"]) {
    if (c.value("id", "") != "nccl_stmt_h100_ring_vs_nvls_user" ||
        !c["measured"].contains("nvls_busbw_GBps_5to8"))
      continue;
    int n = 5;
    for (const auto &v : c["measured"]["nvls_busbw_GBps_5to8"]) {
      printStatement("nccl_stmt_h100_ring_vs_nvls_user",
                     std::to_string(n) + " x H100 NVLink SHARP all-reduce",
                     v.get<double>(),
                     busBw(big, nodeGroup(*h100, n, n, nullptr, 1)) / 1e9);
      ++n;
    }
  }
  llvm::outs() << "  not modelled: nccl_stmt_h800_nvls_user (no H800 in the "
                  "catalog)\n";
}

int main(int argc, char **argv) {
  if (argc != 2) {
    llvm::errs() << "usage: orrery-bench-collectives published_runs.json\n";
    return 2;
  }
  auto buf = llvm::MemoryBuffer::getFile(argv[1]);
  if (!buf) {
    llvm::errs() << "orrery-bench-collectives: error: " << argv[1]
                 << ": cannot open file\n";
    return 1;
  }
  nlohmann::json data =
      nlohmann::json::parse((*buf)->getBuffer().str(), nullptr, false);
  if (data.is_discarded() || !data.contains("cases") ||
      !data["cases"].is_array()) {
    llvm::errs() << "orrery-bench-collectives: error: " << argv[1]
                 << ": not the expected JSON\n";
    return 1;
  }
  printIntraNodeCurves(data);
  printStatements(data);
  return 0;
}
