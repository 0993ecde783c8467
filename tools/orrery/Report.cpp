//===- Report.cpp - `orrery report`: a plan as one self-contained page ----===//
//
// Four parts, all inline SVG or HTML (no script, no external resource):
//   1. the pipeline timeline of one step: a row per stage, forward and
//      backward per micro-batch, exposed gradient reduction, optimizer;
//      spans closer than half a pixel merge, so a step of thousands of
//      micro-batches stays a small file;
//   2. memory per device of every stage as stacked bars against capacity;
//   3. the cluster: sites, pools and nodes, each device coloured by the
//      stage it serves (grey: unused);
//   4. the plan and its runners-up.
//
//===----------------------------------------------------------------------===//
#include "Report.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

namespace orrery {

namespace {

std::string esc(const std::string &s) {
  std::string out;
  for (char c : s) {
    switch (c) {
    case '&':
      out += "&amp;";
      break;
    case '<':
      out += "&lt;";
      break;
    case '>':
      out += "&gt;";
      break;
    case '"':
      out += "&quot;";
      break;
    default:
      out += c;
    }
  }
  return out;
}

std::string fmt(const char *f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

double gib(double b) { return b / double(1ull << 30); }

/// A stage's colour: hues spread around the wheel.
std::string stageColor(size_t i, size_t n) {
  double hue = n ? 360.0 * double(i) / double(std::max<size_t>(n, 1)) : 0;
  return "hsl(" + fmt("%.0f", hue) + ",62%," + (i % 2 ? "48%" : "60%") + ")";
}

const std::map<std::string, std::string> &categoryColors() {
  static const std::map<std::string, std::string> c = {
      {"forward", "#4e79a7"},
      {"backward", "#f28e2b"},
      {"dp", "#e15759"},
      {"optimizer", "#59a14f"},
      {"p2p", "#b07aa1"}};
  return c;
}

void timeline(std::ostringstream &o, const std::vector<std::string> &labels,
              const std::vector<TraceEvent> &trace, double stepS) {
  const double labelW = 260, plotW = 900, rowH = 22;
  size_t tracks = labels.size();
  double h = rowH * double(tracks) + 40;
  double span = std::max(stepS, 1e-12);
  for (const TraceEvent &e : trace)
    span = std::max(span, e.startS + e.durationS);
  double perPx = span / plotW;
  o << "<svg class=\"timeline\" width=\"" << labelW + plotW + 20
    << "\" height=\"" << h << "\" viewBox=\"0 0 " << labelW + plotW + 20 << " "
    << h << "\" xmlns=\"http://www.w3.org/2000/svg\">\n";
  // Per track, spans of one category closer than half a pixel merge.
  std::vector<std::vector<TraceEvent>> byTrack(tracks);
  for (const TraceEvent &e : trace)
    if (e.track >= 0 && size_t(e.track) < tracks)
      byTrack[e.track].push_back(e);
  for (size_t t = 0; t < tracks; ++t) {
    double y = rowH * double(t) + 4;
    o << "<text x=\"4\" y=\"" << y + 14 << "\" class=\"lbl\">"
      << esc(labels[t]) << "</text>\n";
    auto &ev = byTrack[t];
    std::stable_sort(ev.begin(), ev.end(),
                     [](const TraceEvent &a, const TraceEvent &b) {
                       return a.startS < b.startS;
                     });
    std::vector<TraceEvent> merged;
    for (const TraceEvent &e : ev) {
      if (!merged.empty() && merged.back().category == e.category &&
          e.startS - (merged.back().startS + merged.back().durationS) <
              0.5 * perPx) {
        TraceEvent &m = merged.back();
        m.durationS = std::max(m.durationS, e.startS + e.durationS - m.startS);
        m.name = "";
        continue;
      }
      merged.push_back(e);
    }
    for (const TraceEvent &e : merged) {
      auto it = categoryColors().find(e.category);
      std::string color = it == categoryColors().end() ? "#bab0ac" : it->second;
      double x = labelW + e.startS / perPx;
      double w = std::max(0.5, e.durationS / perPx);
      o << "<rect x=\"" << fmt("%.2f", x) << "\" y=\"" << y << "\" width=\""
        << fmt("%.2f", w) << "\" height=\"" << rowH - 6 << "\" fill=\""
        << color << "\"><title>" << esc(e.name.empty() ? e.category : e.name)
        << " " << fmt("%.4g", e.startS) << " s + " << fmt("%.3g", e.durationS)
        << " s</title></rect>\n";
    }
  }
  // Time axis.
  double axisY = rowH * double(tracks) + 10;
  o << "<line x1=\"" << labelW << "\" y1=\"" << axisY << "\" x2=\""
    << labelW + plotW << "\" y2=\"" << axisY << "\" stroke=\"#444\"/>\n";
  for (int i = 0; i <= 5; ++i) {
    double x = labelW + plotW * i / 5.0;
    o << "<text x=\"" << x << "\" y=\"" << axisY + 16
      << "\" class=\"tick\" text-anchor=\"middle\">"
      << fmt("%.3g", span * i / 5.0) << " s</text>\n";
  }
  o << "</svg>\n<p class=\"legend\">";
  for (auto &[name, color] : categoryColors())
    o << "<span><i style=\"background:" << color << "\"></i>" << name
      << "</span>";
  o << "</p>\n";
}

void memoryBars(std::ostringstream &o, const ReportData &d) {
  const double labelW = 260, barW = 640, rowH = 24;
  double h = rowH * double(d.stages.size()) + 8;
  double most = 0;
  for (const ReportStage &s : d.stages)
    most = std::max({most, s.capacityBytes, s.memory.total()});
  struct Part {
    const char *name, *color;
  };
  static const Part parts[] = {{"weights", "#4e79a7"},
                               {"gradients", "#f28e2b"},
                               {"optimizer", "#e15759"},
                               {"activations", "#76b7b2"},
                               {"workspace", "#9c755f"},
                               {"free", "#e8e8e8"}};
  o << "<svg class=\"memory\" width=\"" << labelW + barW + 200
    << "\" height=\"" << h << "\" viewBox=\"0 0 " << labelW + barW + 200 << " "
    << h << "\" xmlns=\"http://www.w3.org/2000/svg\">\n";
  for (size_t i = 0; i < d.stages.size(); ++i) {
    const ReportStage &s = d.stages[i];
    double y = rowH * double(i) + 4;
    o << "<text x=\"4\" y=\"" << y + 14 << "\" class=\"lbl\">"
      << esc(s.label) << "</text>\n";
    const MemoryBreakdown &m = s.memory;
    double values[] = {m.weightsBytes,     m.gradientsBytes,
                       m.optimizerBytes,   m.activationsBytes,
                       m.workspaceBytes,
                       std::max(0.0, s.capacityBytes - m.total())};
    double x = labelW;
    for (int p = 0; p < 6; ++p) {
      double w = most > 0 ? barW * values[p] / most : 0;
      if (w <= 0)
        continue;
      o << "<rect x=\"" << fmt("%.2f", x) << "\" y=\"" << y << "\" width=\""
        << fmt("%.2f", w) << "\" height=\"" << rowH - 8 << "\" fill=\""
        << parts[p].color << "\"><title>" << parts[p].name << " "
        << fmt("%.2f", gib(values[p])) << " GiB</title></rect>\n";
      x += w;
    }
    double measured = d.hasMeasured && i < d.measured.stagePeakBytes.size()
                          ? d.measured.stagePeakBytes[i]
                          : 0;
    if (measured > 0 && most > 0) {
      double mx = labelW + barW * std::min(measured, most) / most;
      o << "<line x1=\"" << fmt("%.2f", mx) << "\" y1=\"" << y - 2
        << "\" x2=\"" << fmt("%.2f", mx) << "\" y2=\"" << y + rowH - 6
        << "\" stroke=\"#000\" stroke-width=\"2\"><title>measured peak "
        << fmt("%.2f", gib(measured)) << " GiB</title></line>\n";
    }
    o << "<text x=\"" << labelW + barW + 8 << "\" y=\"" << y + 14
      << "\" class=\"lbl\">" << fmt("%.1f", gib(m.total())) << " / "
      << fmt("%.0f", gib(s.capacityBytes)) << " GiB " << esc(s.device)
      << (measured > 0 ? ", measured " + fmt("%.1f", gib(measured)) : "")
      << "</text>\n";
  }
  o << "</svg>\n<p class=\"legend\">";
  for (const Part &p : parts)
    o << "<span><i style=\"background:" << p.color << "\"></i>" << p.name
      << "</span>";
  o << "</p>\n";
}

void topology(std::ostringstream &o, const ReportData &d) {
  int total = 0;
  for (const ReportNode &n : d.nodes)
    total += n.devices;
  std::vector<int> stageOf(size_t(std::max(total, 0)), -1);
  for (size_t s = 0; s < d.stages.size(); ++s)
    for (int dev : d.stages[s].devices)
      if (dev >= 0 && dev < total)
        stageOf[dev] = int(s);
  bool compact = total > 4096; // one square per node
  const double cell = compact ? 10 : 12, gap = 2;
  o << "<div class=\"topology\">\n";
  std::string site, pool;
  for (const ReportNode &n : d.nodes) {
    if (n.site != site) {
      if (!site.empty())
        o << "</div></div>\n";
      site = n.site;
      pool.clear();
      o << "<div class=\"site\"><h3>site " << esc(site) << "</h3><div>\n";
    }
    if (n.pool != pool) {
      pool = n.pool;
      o << "<div class=\"pool\">" << esc(pool) << "</div>\n";
    }
    int shown = compact ? 1 : n.devices;
    double w = shown * (cell + gap) + gap;
    o << "<svg class=\"node\" width=\"" << w << "\" height=\"" << cell + 2 * gap
      << "\" xmlns=\"http://www.w3.org/2000/svg\">";
    for (int k = 0; k < shown; ++k) {
      int dev = n.firstDevice + k;
      int s = dev < total ? stageOf[dev] : -1;
      std::string color =
          s < 0 ? "#d0d0d0" : stageColor(size_t(s), d.stages.size());
      o << "<rect x=\"" << gap + k * (cell + gap) << "\" y=\"" << gap
        << "\" width=\"" << cell << "\" height=\"" << cell << "\" fill=\""
        << color << "\"><title>device " << dev
        << (s < 0 ? " (unused)" : " " + esc(d.stages[s].label))
        << "</title></rect>";
    }
    o << "</svg>\n";
  }
  if (!site.empty())
    o << "</div></div>\n";
  o << "</div>\n<p class=\"legend\">";
  for (size_t s = 0; s < d.stages.size(); ++s)
    o << "<span><i style=\"background:" << stageColor(s, d.stages.size())
      << "\"></i>" << esc(d.stages[s].label) << "</span>";
  o << "<span><i style=\"background:#d0d0d0\"></i>unused</span></p>\n";
}

} // namespace

std::string reportHtml(const ReportData &d) {
  std::ostringstream o;
  o << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
    << "<title>Orrery plan: " << esc(d.model) << "</title>\n"
    << "<style>\n"
       "body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;"
       "background:#fff}\n"
       "h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:28px 0 "
       "8px;border-bottom:1px solid #ddd}\n"
       "h3{font-size:13px;margin:8px 0 4px}\n"
       ".sub{color:#555;margin:0 0 12px;word-break:break-all}\n"
       ".figs{display:flex;flex-wrap:wrap;gap:10px}\n"
       ".fig{border:1px solid #ddd;border-radius:6px;padding:6px 12px}\n"
       ".fig b{display:block;font-size:18px}\n"
       ".lbl{font-size:12px;fill:#222}.tick{font-size:11px;fill:#444}\n"
       ".legend span{margin-right:14px;font-size:12px}\n"
       ".legend i{display:inline-block;width:10px;height:10px;"
       "margin-right:4px;vertical-align:middle}\n"
       ".site{border:1px solid #ccc;border-radius:6px;padding:6px 10px;"
       "margin:6px 0}\n"
       ".pool{font-size:12px;color:#555;margin:6px 0 2px}\n"
       ".node{margin:1px 4px 1px 0;border:1px solid #bbb;border-radius:3px}\n"
       "table{border-collapse:collapse;font-size:13px}\n"
       "td,th{border-bottom:1px solid #eee;padding:4px 10px;text-align:"
       "right}\n"
       "td.plan,th.plan{text-align:left;font-family:monospace;font-size:12px}"
       "\n"
       "tr.best{background:#f3f8ff}\n"
       "</style></head><body>\n";
  o << "<h1>Orrery plan</h1>\n<p class=\"sub\">" << esc(d.model) << " on "
    << esc(d.cluster) << "<br><code>" << esc(d.strategy) << "</code></p>\n";
  o << "<div class=\"figs\">";
  for (auto &[label, value] : d.figures)
    o << "<div class=\"fig\">" << esc(label) << "<b>" << esc(value)
      << "</b></div>";
  o << "</div>\n";
  o << "<h2>One step, stage by stage</h2>\n";
  std::vector<std::string> labels;
  for (const ReportStage &s : d.stages)
    labels.push_back(s.label);
  timeline(o, labels, d.trace, d.stepS);
  if (d.hasMeasured) {
    const MeasuredRun &m = d.measured;
    o << "<h2>Measured: one step, rank by rank</h2>\n<p class=\"sub\">"
      << esc(m.source) << " (" << esc(m.backend) << " backend): measured "
      << fmt("%.4g", m.stepS) << " s, predicted " << fmt("%.4g", m.predictedStepS)
      << " s ("
      << fmt("%+.1f%%", m.stepS > 0 ? 100 * (m.predictedStepS - m.stepS) / m.stepS
                                    : 0.0)
      << "), the same spans as the prediction above</p>\n";
    timeline(o, m.tracks, m.trace, std::max(m.stepS, d.stepS));
  }
  o << "<h2>Memory per device</h2>\n";
  memoryBars(o, d);
  o << "<h2>Stages on the cluster</h2>\n";
  topology(o, d);
  o << "<h2>The plan and its runners-up</h2>\n<table><tr><th>#</th><th>step "
       "s</th><th>MFU</th><th>peak GiB</th><th>devices</th><th "
       "class=\"plan\">plan</th></tr>\n";
  for (size_t i = 0; i < d.top.size(); ++i) {
    const ReportRow &r = d.top[i];
    o << "<tr" << (i == 0 ? " class=\"best\"" : "") << "><td>" << i + 1
      << "</td><td>" << fmt("%.3f", r.stepS) << "</td><td>"
      << fmt("%.1f%%", 100 * r.mfu) << "</td><td>"
      << fmt("%.1f", gib(r.peakMemoryBytes)) << "</td><td>" << r.devices
      << "</td><td class=\"plan\">" << esc(r.plan) << "</td></tr>\n";
  }
  o << "</table>\n</body></html>\n";
  return o.str();
}

llvm::Error addMeasuredRun(ReportData &d, const nlohmann::json &run,
                           const std::string &what) {
  auto err = [&](const std::string &m) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   what + ": " + m);
  };
  if (!run.is_object() || !run.contains("per_rank") ||
      !run["per_rank"].is_array())
    return err("per_rank: missing (write it with orrery run --json)");
  MeasuredRun m;
  m.source = what;
  m.backend = run.value("backend", "");
  try {
    m.stepS = run.at("measured").at("step_time_s").at("median").get<double>();
    m.predictedStepS = run.at("predicted").at("step_time_s").get<double>();
  } catch (const std::exception &) {
    return err("measured.step_time_s.median or predicted.step_time_s: "
               "missing or not a number");
  }
  m.stagePeakBytes.assign(d.stages.size(), 0.0);
  for (size_t i = 0; i < run["per_rank"].size(); ++i) {
    const nlohmann::json &r = run["per_rank"][i];
    std::string at = "per_rank[" + std::to_string(i) + "]";
    if (!r.is_object() || !r.contains("rank") || !r["rank"].is_number_integer())
      return err(at + ".rank: missing");
    int stage = r.value("stage", 0);
    int group = r.value("replica_group", 0);
    m.tracks.push_back("rank " + std::to_string(r["rank"].get<int>()) +
                       " (group " + std::to_string(group) + " stage " +
                       std::to_string(stage) + ", " +
                       r.value("device", std::string("?")) + ")");
    // Stages of the plan in order: group by group.
    size_t index = 0;
    for (size_t s = 0; s < d.stages.size(); ++s)
      if (d.stages[s].label == "stage " + std::to_string(stage) ||
          d.stages[s].label.rfind("group " + std::to_string(group) +
                                      " stage " + std::to_string(stage) + " ",
                                  0) == 0)
        index = s;
    if (index < m.stagePeakBytes.size())
      m.stagePeakBytes[index] = std::max(m.stagePeakBytes[index],
                                         r.value("peak_memory_bytes", 0.0));
    if (r.contains("spans") && r["spans"].is_array())
      for (const auto &sp : r["spans"])
        if (sp.is_object())
          m.trace.push_back({int(m.tracks.size()) - 1, sp.value("name", ""),
                             sp.value("category", ""), sp.value("start_s", 0.0),
                             sp.value("duration_s", 0.0)});
  }
  d.hasMeasured = true;
  d.measured = std::move(m);
  return llvm::Error::success();
}

} // namespace orrery
