//===- EmitSharded.cpp - the model annotated with a plan's shardings -----===//
//
// `orrery plan --emit-mlir` and `orrery export --to mlir`: the model at one
// step's micro-batch with the strategy's shardings in MLIR's shard dialect.
//
//===----------------------------------------------------------------------===//

#include "Commands.h"
#include "orrery/Transforms/ShardAnnotations.h"
#include "orrery/Transforms/UpstreamForm.h"

#include "mlir/IR/Verifier.h"
#include "llvm/Support/raw_ostream.h"

namespace orrery {
namespace cli {

/// Writes the model at one step's micro-batch (batch = mbs x dp) with the
/// strategy's shardings in MLIR's shard dialect to `path` ("-": stdout).
int emitSharded(ModelArgs args, const Strategy &st,
                const std::vector<int> &chunkLayers,
                const LayoutCosts &layoutCosts, const std::string &path,
                const std::string &what, bool upstream) {
  args.dims.erase(std::remove_if(args.dims.begin(), args.dims.end(),
                                 [](const std::string &d) {
                                   return d.rfind("batch=", 0) == 0;
                                 }),
                  args.dims.end());
  args.dims.push_back("batch=" + std::to_string(st.microBatch * st.dp));
  args.optionalDims.insert("batch"); // a model of fixed shapes keeps its own
  mlir::MLIRContext ctx;
  ctx.disableMultithreading();
  int rc = 0;
  auto module = frontEnd(ctx, args, true, nullptr, rc);
  if (!module)
    return rc;
  ShardGrid grid;
  for (auto it = st.order.rbegin(); it != st.order.rend(); ++it) {
    grid.axes.push_back(*it);
    grid.sizes.push_back(st.degree(*it));
  }
  LayoutCosts costs = layoutCosts;
  if (st.tpBatchSplit && st.tp > 1 && st.microBatch % st.tp == 0) {
    costs.batchSplit = true; // as the workload's batch-split layout
    costs.samples = std::max(1, costs.degree);
    costs.sequenceParallel = true;
  }
  annotateShardings(*module, grid, chunkLayers, st.pp, costs);
  std::string diag;
  mlir::ScopedDiagnosticHandler handler(&ctx, [&](mlir::Diagnostic &d) {
    if (diag.empty())
      diag = d.str();
    return mlir::success();
  });
  if (mlir::failed(mlir::verify(*module)))
    return fail(what + ": the annotated module does not verify: " + diag);
  if (upstream) {
    std::string why;
    mlir::OwningOpRef<mlir::ModuleOp> up = upstreamForm(*module, why);
    if (!up)
      return fail(what + ": " + why + " (plan --emit-mlir writes the model "
                  "in the orrery dialect instead)");
    if (mlir::failed(mlir::verify(*up)))
      return fail(what + ": the upstream module does not verify: " + diag);
    module = std::move(up);
  }
  if (path == "-") {
    module->print(llvm::outs());
    llvm::outs() << "\n";
    return 0;
  }
  std::error_code ec;
  llvm::raw_fd_ostream out(path, ec);
  if (ec)
    return fail(what + " " + path + ": " + ec.message());
  module->print(out);
  out << "\n";
  return 0;
}

} // namespace cli
} // namespace orrery
