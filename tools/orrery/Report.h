//===- Report.h - `orrery report`: a plan as one self-contained HTML page --===//
#ifndef ORRERY_TOOLS_REPORT_H
#define ORRERY_TOOLS_REPORT_H

#include "orrery/CostModel/Simulator.h"

#include <nlohmann/json.hpp>

#include <string>
#include <utility>
#include <vector>

namespace orrery {

struct ReportStage {
  std::string label, device;
  int tp = 1, layers = 0;
  MemoryBreakdown memory;
  double capacityBytes = 0;
  std::vector<int> devices; ///< cluster device indices
};

struct ReportNode {
  std::string site, pool;
  int firstDevice = 0, devices = 0;
};

struct ReportRow {
  std::string plan;
  double stepS = 0, mfu = 0, peakMemoryBytes = 0;
  int devices = 0;
};

/// A step measured by `orrery run` (its --json), beside the prediction.
struct MeasuredRun {
  std::string source, backend;
  double stepS = 0, predictedStepS = 0;
  std::vector<std::string> tracks; ///< one per rank
  std::vector<TraceEvent> trace;   ///< track = index into tracks
  /// The largest resident peak over the ranks of each stage (0: none ran).
  std::vector<double> stagePeakBytes;
};

struct ReportData {
  std::string model, cluster, strategy;
  /// Headline figures: label and formatted value.
  std::vector<std::pair<std::string, std::string>> figures;
  std::vector<ReportStage> stages; ///< one track each in the timeline
  std::vector<TraceEvent> trace;   ///< track = index into stages
  double stepS = 0;
  std::vector<ReportNode> nodes;
  std::vector<ReportRow> top; ///< the plan first, then its runners-up
  bool hasMeasured = false;
  MeasuredRun measured;
};

/// Reads `orrery run --json` output into d.measured (ranks onto the plan's
/// stages in order); an error names the field.
llvm::Error addMeasuredRun(ReportData &d, const nlohmann::json &run,
                           const std::string &what);

/// One HTML file: no scripts, no fetches; the timeline, the memory bars and
/// the topology are inline SVG.
std::string reportHtml(const ReportData &d);

} // namespace orrery

#endif // ORRERY_TOOLS_REPORT_H
