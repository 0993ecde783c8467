//===- Buckets.cpp - `orrery plan --length-buckets` -----------------------===//
#include "Buckets.h"

#include "orrery/Workload/BuildWorkload.h"

#include <cstdio>
#include <fstream>
#include <iostream>

namespace orrery {
namespace cli {

int planLengthBucketsCommand(mlir::MLIRContext &ctx, const ModelArgs &args,
                             const LengthBuckets &spec, const Cluster &c,
                             const PlanOptions &o, const PlanInputs &inputs,
                             const Assumptions &framework,
                             const LayoutCosts &layoutCosts,
                             const std::string &outPath, bool json) {
  // The model at each bucket's length.
  std::vector<Workload> workloads;
  for (const LengthBucket &b : spec.buckets) {
    ModelArgs at = args;
    std::string prefix = spec.dim + "=";
    at.dims.erase(std::remove_if(at.dims.begin(), at.dims.end(),
                                 [&](const std::string &d) {
                                   return d.rfind(prefix, 0) == 0;
                                 }),
                  at.dims.end());
    at.dims.push_back(prefix + std::to_string(b.length));
    int rc = 0;
    auto module = frontEnd(ctx, at, true, nullptr, rc);
    if (!module)
      return rc;
    auto w = buildWorkload(*module, layoutCosts, framework.fusion,
                           framework.fineTuning);
    if (!w)
      return fail(args.path + " at " + prefix + std::to_string(b.length) +
                  ": " + llvm::toString(w.takeError()));
    workloads.push_back(std::move(*w));
  }
  auto r = planLengthBuckets(workloads, spec, c, o);
  if (!r)
    return fail(llvm::toString(r.takeError()));

  nlohmann::ordered_json doc;
  doc["schema"] = "orrery-length-bucket-plans";
  doc["version"] = 1;
  doc["dim"] = spec.dim;
  doc["choice"] = r->choice;
  doc["expected_step_time_s"] = r->expectedStepS;
  doc["expected_switch_s_per_step"] = r->expectedSwitchS;
  doc["alternatives"] = {
      {"per_bucket_step_time_s", r->perBucketS},
      {"per_bucket_switch_s_per_step", r->perBucketSwitchS},
      {"one_layout_step_time_s", r->oneLayoutS},
      {"one_strategy_step_time_s", r->oneStrategyS},
      {"one_strategy", r->oneStrategyS > 0 ? r->oneStrategy.str() : ""}};
  nlohmann::ordered_json buckets = nlohmann::ordered_json::array();
  for (size_t i = 0; i < spec.buckets.size(); ++i) {
    PlanResult one;
    one.top.push_back(r->plans[i]);
    one.candidatesPriced = r->candidatesPriced;
    one.cluster = c;
    PlanInputs at = inputs; // the model as this bucket imports it
    at.dims[spec.dim] = spec.buckets[i].length;
    buckets.push_back({{"length", spec.buckets[i].length},
                       {"fraction_of_tokens", spec.buckets[i].fraction},
                       {"global_batch_samples", spec.buckets[i].globalBatch},
                       {"plan", planJson(one, workloads[i], at)}});
  }
  doc["buckets"] = std::move(buckets);
  if (!outPath.empty()) {
    std::ofstream out(outPath);
    out << doc.dump(2) << "\n";
    if (!out)
      return fail("-o " + outPath + ": cannot write the file");
  }
  if (json) {
    std::cout << doc.dump(2) << "\n";
    return 0;
  }
  char buf[512];
  std::cout << "model        " << args.path << "\n"
            << "cluster      " << c.name << "\n";
  std::snprintf(buf, sizeof buf,
                "searched     %lld candidates over %zu length buckets of %s\n\n",
                (long long)r->candidatesPriced, spec.buckets.size(),
                spec.dim.c_str());
  std::cout << buf;
  std::cout << "  " << spec.dim << "     tokens  samples   step s  plan\n";
  for (size_t i = 0; i < spec.buckets.size(); ++i) {
    const LengthBucket &b = spec.buckets[i];
    std::snprintf(buf, sizeof buf, "  %-6lld %6.1f%%  %7lld  %7.3f  %s\n",
                  (long long)b.length, 100 * b.fraction,
                  (long long)b.globalBatch, r->plans[i].stepS,
                  r->plans[i].strategy.str().c_str());
    std::cout << buf;
  }
  std::snprintf(buf, sizeof buf,
                "\nchosen       %s: %.3f s per step on average, %.3f s of "
                "switching\n",
                r->choice == "one-layout"
                    ? "one layout (the model state stays; no switch)"
                    : "each bucket's fastest plan",
                r->expectedStepS, r->expectedSwitchS);
  std::cout << buf;
  std::string layout = "none", one = "none";
  if (r->oneLayoutS > 0) {
    std::snprintf(buf, sizeof buf, "%.3f s", r->oneLayoutS);
    layout = buf;
  }
  if (r->oneStrategyS > 0) {
    std::snprintf(buf, sizeof buf, "%.3f s (", r->oneStrategyS);
    one = buf + r->oneStrategy.str() + ")";
  }
  std::snprintf(buf, sizeof buf,
                "             each bucket's fastest %.3f s + %.3f s "
                "switching; one layout %s; one strategy for all %s\n",
                r->perBucketS, r->perBucketSwitchS, layout.c_str(),
                one.c_str());
  std::cout << buf;
  return 0;
}

} // namespace cli
} // namespace orrery
