//===- Buckets.h - `orrery plan --length-buckets` -------------------------===//
#ifndef ORRERY_TOOLS_BUCKETS_H
#define ORRERY_TOOLS_BUCKETS_H

#include "Common.h"
#include "orrery/Search/LengthBuckets.h"

namespace orrery {
namespace cli {
/// Plans each length bucket of `buckets` (the model imported at each
/// length), chooses per bucket or one layout, prints the summary (or the
/// JSON with --json) and writes `out` when given. The exit code.
int planLengthBucketsCommand(mlir::MLIRContext &ctx, const ModelArgs &args,
                             const LengthBuckets &buckets, const Cluster &c,
                             const PlanOptions &o, const PlanInputs &inputs,
                             const Assumptions &framework,
                             const LayoutCosts &layoutCosts,
                             const std::string &out, bool json);
} // namespace cli
} // namespace orrery

#endif
