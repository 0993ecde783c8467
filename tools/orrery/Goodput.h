//===- Goodput.h - a priced step's goodput, time-to-train and run -*- C++
//-*-===//
//
// What `simulate` and `plan` print and write when a token budget
// (`--tokens`) or a run's length (`--days`) is given: the plan's checkpoint
// and failure figures (Reliability.h), the expected effective training
// time, the time and cost to train the tokens, and the Monte-Carlo of the
// run's failures (FailureSimulation.h).
//
//===----------------------------------------------------------------------===//
#ifndef ORRERY_TOOLS_GOODPUT_H
#define ORRERY_TOOLS_GOODPUT_H

#include "Requests.h"
#include "orrery/CostModel/Cluster.h"
#include "orrery/CostModel/FailureSimulation.h"
#include "orrery/CostModel/Simulator.h"

#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>

namespace orrery {
namespace cli {

struct GoodputReport {
  GoodputInputs inputs;
  CheckpointPolicy policy;
  GoodputEstimate estimate;
  double tokens = 0;
  TimeToTrain train; ///< when tokens > 0
  std::optional<RunDistribution> run;
  double runDays = 0;
  uint64_t seed = 0;
};

/// Checks the request's values (one-line errors naming the flag).
llvm::Error checkGoodputRequest(const GoodputRequest &request);

/// What the step of `r` on `c` brings to its goodput.
GoodputInputs goodputInputs(const StepResult &r, const Cluster &c,
                            const Workload &w);

llvm::Expected<GoodputReport> priceGoodput(const GoodputRequest &request,
                                           const StepResult &r,
                                           const Cluster &c, const Workload &w);

void printGoodput(std::ostream &os, const GoodputReport &g,
                  const ReliabilitySpec &spec);
nlohmann::ordered_json goodputJson(const GoodputReport &g);

} // namespace cli
} // namespace orrery

#endif // ORRERY_TOOLS_GOODPUT_H
