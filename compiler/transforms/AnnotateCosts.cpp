//===- AnnotateCosts.cpp - write each op's cost into the IR ---------------===//
#include "orrery/Transforms/Passes.h"

#include "mlir/IR/Builders.h"

namespace orrery {
#define GEN_PASS_DEF_ANNOTATECOSTSPASS
#include "orrery/Transforms/Passes.h.inc"
} // namespace orrery

using namespace mlir;

namespace {
struct AnnotateCostsPass
    : orrery::impl::AnnotateCostsPassBase<AnnotateCostsPass> {
  void runOnOperation() override {
    Builder b(&getContext());
    getOperation()->walk([&](orrery::CostOpInterface op) {
      NamedAttribute fields[] = {
          b.getNamedAttr("fwd_flops",
                         b.getI64IntegerAttr(op.getForwardFlops())),
          b.getNamedAttr("bwd_flops",
                         b.getI64IntegerAttr(op.getBackwardFlops())),
          b.getNamedAttr("bytes_read", b.getI64IntegerAttr(op.getBytesRead())),
          b.getNamedAttr("bytes_written",
                         b.getI64IntegerAttr(op.getBytesWritten())),
          b.getNamedAttr("params", b.getI64IntegerAttr(op.getParameterCount())),
          b.getNamedAttr("saved_bytes",
                         b.getI64IntegerAttr(op.getSavedActivationBytes())),
      };
      op->setAttr("orrery.cost", b.getDictionaryAttr(fields));
    });
  }
};
} // namespace
