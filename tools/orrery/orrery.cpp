//===- orrery.cpp - the user CLI ------------------------------------------===//
//
//   orrery import MODEL.onnx [--dim NAME=VALUE]... [--outline]
//   orrery stats  MODEL.onnx [--dim NAME=VALUE]... [--json]
//   orrery simulate MODEL --cluster SPEC --strategy "tp=8,pp=8,..." [--json]
//                  [--trace FILE]
//
// Every user error is one line on stderr, "orrery: error: ...", and exit 1.
//
//===----------------------------------------------------------------------===//

#include "Simulate.h"
#include "Stats.h"
#include "orrery/Import/Importer.h"
#include "orrery/Transforms/Passes.h"
#include "orrery/Workload/BuildWorkload.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/raw_ostream.h"

#include <CLI/CLI.hpp>
#include <fstream>
#include <iostream>
#include <sys/stat.h>

#ifndef ORRERY_VERSION
#define ORRERY_VERSION "0.0.0"
#endif

namespace {

int fail(const std::string &message) {
  std::string line = message;
  std::replace(line.begin(), line.end(), '\n', ' ');
  std::cerr << "orrery: error: " << line << "\n";
  return 1;
}

/// Parses NAME=VALUE pairs of --dim; returns an error message or "".
std::string parseDims(const std::vector<std::string> &specs,
                      orrery::onnx::LoadOptions &options) {
  for (const std::string &spec : specs) {
    size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0)
      return "--dim '" + spec + "': expected NAME=VALUE";
    std::string name = spec.substr(0, eq), value = spec.substr(eq + 1);
    char *end = nullptr;
    errno = 0;
    long long v = std::strtoll(value.c_str(), &end, 10);
    if (value.empty() || *end || errno || v <= 0)
      return "--dim '" + spec + "': value must be a positive integer";
    options.dims[name] = v;
  }
  return "";
}

struct ModelArgs {
  std::string path;
  std::vector<std::string> dims;
};

void addModelArgs(CLI::App *cmd, ModelArgs &args) {
  cmd->add_option("model", args.path, "ONNX model file (.onnx)")->required();
  cmd->add_option("--dim", args.dims,
                  "bind a symbolic dimension, NAME=VALUE (repeatable)")
      ->type_name("NAME=VALUE");
}

/// A model argument: an existing file, or the name of a built-in model
/// (`orrery simulate gpt3-175b`), written at build time by models/generate.py.
std::string resolveModel(const std::string &arg) {
  struct stat st;
  if (stat(arg.c_str(), &st) == 0 || arg.find('/') != std::string::npos ||
      arg.find(".onnx") != std::string::npos)
    return arg;
  const char *dir = std::getenv("ORRERY_MODELS_DIR");
  std::string base = dir ? dir : ORRERY_MODELS_DIR;
  std::string path = base + "/" + arg + ".onnx";
  return stat(path.c_str(), &st) == 0 ? path : arg;
}

/// Import and (optionally) outline; on error prints it and returns null.
mlir::OwningOpRef<mlir::ModuleOp> frontEnd(mlir::MLIRContext &ctx,
                                           const ModelArgs &args, bool outline,
                                           std::map<std::string, int64_t> *hist,
                                           int &rc) {
  orrery::onnx::LoadOptions options;
  std::string err = parseDims(args.dims, options);
  if (!err.empty()) {
    rc = fail(err);
    return nullptr;
  }
  auto module = orrery::importOnnxFile(ctx, resolveModel(args.path), options);
  if (!module) {
    rc = fail(llvm::toString(module.takeError()));
    return nullptr;
  }
  if (hist)
    *hist = orrery::opHistogram(**module);
  if (outline) {
    mlir::PassManager pm(&ctx);
    pm.addPass(orrery::createOutlineLayersPass());
    std::string diag;
    mlir::ScopedDiagnosticHandler handler(&ctx, [&](mlir::Diagnostic &d) {
      if (diag.empty())
        diag = d.str();
      return mlir::success();
    });
    if (mlir::failed(pm.run(**module))) {
      rc = fail(args.path + ": layer outlining failed: " + diag);
      return nullptr;
    }
  }
  rc = 0;
  return std::move(*module);
}

} // namespace

int main(int argc, char **argv) {
  CLI::App app{"Orrery: plans how to train a model on a cluster of GPUs.",
               "orrery"};
  app.set_version_flag("--version", std::string("orrery ") + ORRERY_VERSION);
  app.require_subcommand(1);

  ModelArgs importArgs;
  bool outline = false;
  CLI::App *importCmd = app.add_subcommand(
      "import", "Import an ONNX model and print it in the orrery MLIR dialect");
  addModelArgs(importCmd, importArgs);
  importCmd->add_flag("--outline", outline,
                      "outline repeated layers into functions");

  ModelArgs statsArgs;
  bool json = false;
  CLI::App *statsCmd =
      app.add_subcommand("stats", "Print parameters, FLOPs, activation memory "
                                  "and the layer list of a model");
  addModelArgs(statsCmd, statsArgs);
  statsCmd->add_flag("--json", json, "print JSON instead of a table");

  ModelArgs simArgs;
  std::string clusterSpec, strategyText, traceFile;
  bool simJson = false;
  CLI::App *simCmd = app.add_subcommand(
      "simulate", "Simulate one training step of a strategy on a cluster, without hardware");
  simCmd->add_option("model", simArgs.path,
                     "ONNX model file, or a built-in model name (models/generate.py --list)")
      ->required();
  simCmd->add_option("--dim", simArgs.dims,
                     "bind a symbolic dimension, NAME=VALUE (batch defaults to 1: the "
                     "micro-batch comes from the strategy)")
      ->type_name("NAME=VALUE");
  simCmd->add_option("--cluster", clusterSpec,
                     "cluster spec: a JSON file (docs/cluster.md) or a preset such as "
                     "8xA100-80G or 4x8xH100-SXM")
      ->required();
  simCmd->add_option("--strategy", strategyText,
                     "e.g. tp=8,pp=8,dp=16,mbs=1,gbs=1536,vpp=2,recompute=full (docs/strategy.md)")
      ->required();
  simCmd->add_flag("--json", simJson, "print JSON instead of a table");
  simCmd->add_option("--trace", traceFile, "write a Chrome-trace / Perfetto timeline to FILE");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp &e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp &e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion &e) {
    return app.exit(e);
  } catch (const CLI::ParseError &e) {
    return fail(e.what());
  }

  mlir::MLIRContext ctx;
  ctx.disableMultithreading();
  int rc = 0;
  if (*importCmd) {
    auto module = frontEnd(ctx, importArgs, outline, nullptr, rc);
    if (!module)
      return rc;
    module->print(llvm::outs());
    llvm::outs() << "\n";
    return 0;
  }
  if (*simCmd) {
    // The workload is built at batch 1; the strategy sets the micro-batch.
    bool batchBound = false;
    for (const std::string &d : simArgs.dims)
      batchBound |= d.rfind("batch=", 0) == 0;
    if (!batchBound)
      simArgs.dims.push_back("batch=1");
    auto module = frontEnd(ctx, simArgs, true, nullptr, rc);
    if (!module)
      return rc;
    auto workload = orrery::buildWorkload(*module);
    if (!workload)
      return fail(simArgs.path + ": " + llvm::toString(workload.takeError()));
    auto cluster = orrery::loadCluster(clusterSpec, orrery::HardwareCatalog::builtin());
    if (!cluster)
      return fail(llvm::toString(cluster.takeError()));
    auto strategy = orrery::parseStrategy(strategyText);
    if (!strategy)
      return fail(llvm::toString(strategy.takeError()));
    auto result = orrery::simulateStep(*workload, *cluster, *strategy, {}, !traceFile.empty());
    if (!result)
      return fail(llvm::toString(result.takeError()));
    if (!traceFile.empty()) {
      std::ofstream out(traceFile);
      out << orrery::chromeTraceJson(*result);
      if (!out)
        return fail("--trace " + traceFile + ": cannot write the file");
    }
    if (simJson)
      std::cout << orrery::simulateJson(*result, *cluster, *workload).dump(2) << "\n";
    else
      orrery::printSimulation(std::cout, *result, *cluster, *workload);
    return 0;
  }

  std::map<std::string, int64_t> hist;
  auto module = frontEnd(ctx, statsArgs, true, &hist, rc);
  if (!module)
    return rc;
  auto workload = orrery::buildWorkload(*module);
  if (!workload)
    return fail(statsArgs.path + ": " + llvm::toString(workload.takeError()));
  workload->opHistogram = hist;
  for (const auto &[name, count] : hist)
    if (llvm::StringRef(name).starts_with("onnx_op:"))
      workload->opsWithoutCostFormula[name.substr(8)] = count;
  std::map<std::string, int64_t> dims;
  if (auto d = (*module)->getAttrOfType<mlir::DictionaryAttr>("orrery.dims"))
    for (auto named : d)
      dims[named.getName().str()] =
          mlir::cast<mlir::IntegerAttr>(named.getValue()).getInt();
  if (json)
    std::cout << orrery::statsJson(*workload, dims).dump(2) << "\n";
  else
    orrery::printStats(std::cout, *workload, dims);
  return 0;
}
