//===- Import.cpp - `orrery import`
//----------------------------------------===//
#include "Commands.h"

#include "llvm/Support/raw_ostream.h"

namespace orrery {
namespace cli {

void ImportCommand::add(CLI::App &app) {
  cmd = app.add_subcommand(
      "import", "Import an ONNX model and print it in the orrery MLIR dialect");
  addModelArgs(cmd, args);
  cmd->add_flag("--outline", outline, "outline repeated layers into functions");
  cmd->add_option("--kernels", kernels,
                  std::string("with --outline: ") + kernelsHelp())
      ->check(CLI::IsMember({"fused", "unfused-attention", "eager", "sdpa"}));
}

int ImportCommand::run() {
  mlir::MLIRContext ctx;
  ctx.disableMultithreading();
  int rc = 0;
  parseKernelFusion(kernels, args.kernels);
  defaultBatchToOne(args); // as every subcommand reads a model
  auto module = frontEnd(ctx, args, outline, nullptr, rc);
  if (!module)
    return rc;
  module->print(llvm::outs());
  llvm::outs() << "\n";
  return 0;
}

} // namespace cli
} // namespace orrery
