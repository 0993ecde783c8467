//===- PlanReport.h - the `orrery plan` summary --------------------------===//
#ifndef ORRERY_TOOLS_PLANREPORT_H
#define ORRERY_TOOLS_PLANREPORT_H

#include "orrery/Search/HeteroPlanner.h"
#include "orrery/Search/Planner.h"

#include <ostream>

namespace orrery {
/// The winner, the runners-up and (with `explain`) why the winner wins.
void printPlan(std::ostream &os, const PlanResult &r, const Workload &w,
               Objective o, bool explain);
/// The same for a heterogeneous plan: its replica groups stage by stage.
void printHeteroPlan(std::ostream &os, const HeteroPlanResult &r,
                     const Workload &w, const Cluster &c, Objective o);
} // namespace orrery

#endif
