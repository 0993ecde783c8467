//===- orrery.cpp - the user CLI ------------------------------------------===//
//
//   orrery import MODEL.onnx [--dim NAME=VALUE]... [--outline]
//   orrery stats  MODEL.onnx [--dim NAME=VALUE]... [--json]
//
// Every user error is one line on stderr, "orrery: error: ...", and exit 1.
//
//===----------------------------------------------------------------------===//

#include "Stats.h"
#include "orrery/Import/Importer.h"
#include "orrery/Transforms/Passes.h"
#include "orrery/Workload/BuildWorkload.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/raw_ostream.h"

#include <CLI/CLI.hpp>
#include <iostream>

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
  auto module = orrery::importOnnxFile(ctx, args.path, options);
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
