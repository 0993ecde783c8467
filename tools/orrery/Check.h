//===- Check.h - `orrery check` and `orrery report` ------------*- C++ -*-===//
#ifndef ORRERY_TOOLS_CHECK_H
#define ORRERY_TOOLS_CHECK_H

#include "Common.h"

namespace orrery {
namespace cli {

/// Checks a plan document against the workload and cluster it was made
/// for (`checkPlan` names it in messages): re-simulates it, compares the
/// stages and the step, and prints "valid; ..." — or, with `reportOut`,
/// writes the HTML report there (with a measured run beside it when
/// `reportMeasured` names one; `announce` prints the report's line).
/// Returns the exit code; errors through fail().
int checkPlanDoc(const nlohmann::json &planDoc, const std::string &checkPlan,
                 const Workload &workload, const Cluster &cluster,
                 const std::string &reportOut,
                 const std::string &reportMeasured, bool announce = true);

} // namespace cli
} // namespace orrery

#endif // ORRERY_TOOLS_CHECK_H
