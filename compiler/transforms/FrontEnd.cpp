//===- FrontEnd.cpp - fusion and outlining in one call --------------------===//
//
// The pass pipeline every consumer of an imported model runs (the CLI, the
// ONNX fuzzer): one place, so the fuzzer exercises what users run. Experts
// as exporters write them become dispatched expert GEMMs first (not a
// fusion: without it expert parallelism has nothing to split).
//
//===----------------------------------------------------------------------===//
#include "orrery/Transforms/Passes.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/Pass/PassManager.h"

std::string orrery::fuseAndOutline(mlir::ModuleOp module, bool fuse,
                                   bool attention, bool others) {
  mlir::MLIRContext *ctx = module.getContext();
  mlir::PassManager pm(ctx);
  pm.addPass(createFormExpertsPass());
  if (fuse) {
    FuseKernelsPassOptions fusion;
    fusion.attention = attention;
    fusion.norms = fusion.gatedActivations = fusion.rotary = others;
    pm.addPass(createFuseKernelsPass(fusion));
  }
  pm.addPass(createOutlineLayersPass());
  std::string diag;
  mlir::ScopedDiagnosticHandler handler(ctx, [&](mlir::Diagnostic &d) {
    if (diag.empty())
      diag = d.str();
    return mlir::success();
  });
  if (mlir::succeeded(pm.run(module)))
    return "";
  return diag.empty() ? "a pass failed without a diagnostic" : diag;
}
