//===- orrery-opt.cpp - MlirOptMain with the orrery dialect and passes ----===//
#include "orrery/Dialect/OrreryDialect.h"
#include "orrery/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  registry.insert<orrery::OrreryDialect, mlir::func::FuncDialect,
                  mlir::shard::ShardDialect>();
  orrery::registerOrreryPasses();
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  mlir::registerSymbolDCEPass();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "orrery optimizer driver\n", registry));
}
