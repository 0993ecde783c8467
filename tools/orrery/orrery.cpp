//===- orrery.cpp - the user CLI ------------------------------------------===//
//
//   orrery import MODEL.onnx [--dim NAME=VALUE]... [--outline]
//   orrery stats  MODEL.onnx [--dim NAME=VALUE]... [--json]
//   orrery simulate MODEL --cluster SPEC --strategy "tp=8,pp=8,..." [--json]
//                  [--trace FILE]
//   orrery serve MODEL --cluster SPEC [--workload W]
//   orrery plan MODEL --cluster SPEC [--global-batch N] [--objective
//   time|cost|energy]
//               [--budget USD_PER_HOUR] [--top K] [--explain] [-o plan.json]
//               [--json]
//   orrery check plan.json [--model MODEL] [--cluster SPEC]
//   orrery report | export | lower | run | profile plan.json ...
//
// Each subcommand is a struct of its own (commands/, Lower.h, Run.h): this
// file registers them in order and runs the one given. Every user error is
// one line on stderr, "orrery: error: ...", and exit 1.
//
//===----------------------------------------------------------------------===//

#include "Lower.h"
#include "Run.h"
#include "commands/Commands.h"

#include <CLI/CLI.hpp>

#ifndef ORRERY_VERSION
#define ORRERY_VERSION "0.0.0"
#endif

int main(int argc, char **argv) {
  using namespace orrery::cli;
  CLI::App app{"Orrery: plans how to train a model on a cluster of GPUs.",
               "orrery"};
  app.set_version_flag("--version", std::string("orrery ") + ORRERY_VERSION);
  app.require_subcommand(1);
  ImportCommand importCmd;
  StatsCommand statsCmd;
  SimulateCommand simulateCmd;
  ServeCommand serveCmd;
  PlanCommand planCmd;
  CheckCommand checkCmd;
  ReportCommand reportCmd;
  ExportCommand exportCmd;
  LowerCommand lowerCmd;
  RunCommand runCmd;
  ProfileCommand profileCmd;
  importCmd.add(app);
  statsCmd.add(app);
  simulateCmd.add(app);
  serveCmd.add(app);
  planCmd.add(app);
  checkCmd.add(app);
  reportCmd.add(app);
  exportCmd.add(app);
  lowerCmd.add(app);
  runCmd.add(app);
  profileCmd.add(app);

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

  if (*lowerCmd.cmd)
    return lowerCmd.run();
  if (*runCmd.cmd)
    return runCmd.run(argc, argv);
  if (*profileCmd.cmd)
    return profileCmd.run(argc, argv);
  if (*importCmd.cmd)
    return importCmd.run();
  if (*exportCmd.cmd)
    return exportCmd.run();
  if (*simulateCmd.cmd)
    return simulateCmd.run();
  if (*checkCmd.cmd)
    return checkCmd.run();
  if (*reportCmd.cmd)
    return reportCmd.run();
  if (*planCmd.cmd)
    return planCmd.run();
  if (*serveCmd.cmd)
    return serveCmd.run();
  return statsCmd.run();
}
