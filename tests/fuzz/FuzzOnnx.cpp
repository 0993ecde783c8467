//===- FuzzOnnx.cpp - the ONNX front end on arbitrary bytes ---------------===//
//
// Any byte string is either a model or a one-line error; never a crash, a
// hang or a leak. The symbolic dims the seed corpus uses are bound where a
// model has them (binding one it lacks is an error). A model
// that loads goes on through the rest of the front end as `orrery import
// --outline` runs it: the importer into the dialect, kernel fusion (the
// attention, mask and window patterns match on whatever graph arrives) and
// layer outlining, each of which either succeeds or fails in one line; then
// the plan's shardings and the upstream form of `export --to mlir`.
//
//===----------------------------------------------------------------------===//
#include "orrery/Import/Importer.h"
#include "orrery/Onnx/GraphDesc.h"
#include "orrery/Transforms/Passes.h"
#include "orrery/Transforms/ShardAnnotations.h"
#include "orrery/Transforms/UpstreamForm.h"
#include "FuzzSupport.h"

#include "mlir/IR/MLIRContext.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string bytes(reinterpret_cast<const char *>(data), size);
  orrery::onnx::LoadOptions options;
  for (const char *dim : {"batch", "seq", "sequence", "N", "enc_seq",
                          "dec_seq", "DynamicDimension.0"}) {
    options.dims[dim] = 2;
    options.optionalDims.insert(dim); // a model without it is no error
  }
  orrery::onnx::LoadResult r =
      orrery::onnx::loadOnnxModelFromBytes(bytes, "fuzz.onnx", options);
  if (!r.model == r.error.empty()) {
    std::fprintf(stderr, "neither a model nor an error\n");
    std::abort();
  }
  if (!r.model) {
    orrery::fuzz::expectOneLine(r.error);
    return 0;
  }
  mlir::MLIRContext ctx;
  ctx.disableMultithreading();
  orrery::registerOrreryDialects(ctx);
  auto module = orrery::importModel(ctx, *r.model);
  if (!orrery::fuzz::succeeded(module))
    return 0;
  std::string diag = orrery::fuseAndOutline(**module, true, true);
  if (!diag.empty()) {
    orrery::fuzz::expectOneLine(diag);
    return 0;
  }
  // `export --to mlir`: the shardings of a tp=2, dp=2 grid, then the module
  // in upstream dialects (whatever dims and ops arrive) or one line.
  orrery::ShardGrid grid{{"pp", "dp", "cp", "tp"}, {1, 2, 1, 2}};
  orrery::annotateShardings(**module, grid, {}, 1);
  std::string why;
  auto up = orrery::upstreamForm(**module, why);
  if (!up)
    orrery::fuzz::expectOneLine(why);
  return 0;
}
