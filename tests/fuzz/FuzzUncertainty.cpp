//===- FuzzUncertainty.cpp - the band's basis reader on arbitrary text ----===//
#include "FuzzSupport.h"
#include "orrery/CostModel/Uncertainty.h"

#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string text(reinterpret_cast<const char *>(data), size);
  if (llvm::Error e = orrery::setUncertaintyBasisText(text, "fuzz.json")) {
    orrery::fuzz::expectOneLine(llvm::toString(std::move(e)));
  } else {
    // A basis that parsed gives every regime a band, finite and ordered.
    for (const orrery::Regime &r :
         {orrery::Regime{"A100", "fused", {"pipeline", "zero-bubble"}},
          orrery::Regime{"Hopper", "eager", {"fsdp", "context-parallel"}},
          orrery::Regime{"mixed", "unfused-attention", {}}}) {
      orrery::Uncertainty u = orrery::uncertaintyOf(r, 1.0, 1e9);
      if (u.stepRows > 0 &&
          !(u.stepS.p10 <= u.stepS.p50 && u.stepS.p50 <= u.stepS.p90))
        __builtin_trap();
    }
  }
  llvm::consumeError(orrery::setUncertaintyBasis(""));
  return 0;
}
