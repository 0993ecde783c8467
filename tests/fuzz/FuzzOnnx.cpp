//===- FuzzOnnx.cpp - the ONNX loader on arbitrary bytes ------------------===//
//
// Any byte string is either a model or a one-line error; never a crash, a
// hang or a leak. The symbolic dims the seed corpus uses are bound.
//
//===----------------------------------------------------------------------===//
#include "orrery/Onnx/GraphDesc.h"
#include "FuzzSupport.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string bytes(reinterpret_cast<const char *>(data), size);
  orrery::onnx::LoadOptions options;
  for (const char *dim : {"batch", "seq", "sequence", "N", "enc_seq",
                          "dec_seq", "DynamicDimension.0"})
    options.dims[dim] = 2;
  orrery::onnx::LoadResult r =
      orrery::onnx::loadOnnxModelFromBytes(bytes, "fuzz.onnx", options);
  if (!r.model == r.error.empty()) {
    std::fprintf(stderr, "neither a model nor an error\n");
    std::abort();
  }
  if (!r.model)
    orrery::fuzz::expectOneLine(r.error);
  return 0;
}
