//===- PlanReport.h - the `orrery plan` summary --------------------------===//
#ifndef ORRERY_TOOLS_PLANREPORT_H
#define ORRERY_TOOLS_PLANREPORT_H

#include "orrery/Search/HeteroPlanner.h"
#include "orrery/Search/Planner.h"

#include <ostream>

#include <nlohmann/json.hpp>

namespace orrery {
/// The winner, the runners-up and (with `explain`) why the winner wins.
void printPlan(std::ostream &os, const PlanResult &r, const Workload &w,
               Objective o, bool explain);
/// One heterogeneous step: its strategy, figures and stages (`searched`
/// is printed before the strategy line; empty for a plain simulation).
void printHeteroResult(std::ostream &os, const HeteroResult &b,
                       const std::vector<Pool> &pools, const Workload &w,
                       const Cluster &c, Objective o,
                       const std::string &searched);
/// The same for a heterogeneous plan: its replica groups stage by stage,
/// and the export target that runs `planDoc` (its JSON), or why none does.
void printHeteroPlan(std::ostream &os, const HeteroPlanResult &r,
                     const Workload &w, const Cluster &c, Objective o,
                     const nlohmann::json &planDoc);
} // namespace orrery

#endif
