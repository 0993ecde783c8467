//===- Report.h - `orrery report`: a plan as one self-contained HTML page --===//
#ifndef ORRERY_TOOLS_REPORT_H
#define ORRERY_TOOLS_REPORT_H

#include "orrery/CostModel/Simulator.h"

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

struct ReportData {
  std::string model, cluster, strategy;
  /// Headline figures: label and formatted value.
  std::vector<std::pair<std::string, std::string>> figures;
  std::vector<ReportStage> stages; ///< one track each in the timeline
  std::vector<TraceEvent> trace;   ///< track = index into stages
  double stepS = 0;
  std::vector<ReportNode> nodes;
  std::vector<ReportRow> top; ///< the plan first, then its runners-up
};

/// One HTML file: no scripts, no fetches; the timeline, the memory bars and
/// the topology are inline SVG.
std::string reportHtml(const ReportData &d);

} // namespace orrery

#endif // ORRERY_TOOLS_REPORT_H
