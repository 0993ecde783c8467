//===- FrameworkFlags.h - the framework flags simulate and plan share ----===//
#ifndef ORRERY_TOOLS_COMMANDS_FRAMEWORKFLAGS_H
#define ORRERY_TOOLS_COMMANDS_FRAMEWORKFLAGS_H

#include "Common.h"
#include "orrery/CostModel/AssumptionFields.h"
#include "orrery/CostModel/Uncertainty.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <deque>
#include <string>
#include <vector>

namespace orrery {
namespace cli {

/// The help text of --kernels (also a flag of `stats` and `import`).
inline const char *kernelsHelp() {
  return assumptionFieldByFlag("kernels")->help;
}

/// How the framework that runs a plan keeps its gradients and which kernels
/// it runs: the flags `simulate` and `plan` share, one per row of the
/// assumptions table (AssumptionFields.h) besides fine-tuning and the layer
/// profile. Only flags given on the command line override (a plan's own
/// assumptions, for `simulate --plan`).
struct FrameworkFlags {
  /// A table row's flag and what CLI11 writes for it.
  struct Row {
    const AssumptionField *field = nullptr;
    bool on = false;   ///< a switch
    std::string name;  ///< a choice
    double number = 0; ///< a number
    CLI::Option *option = nullptr;
  };
  std::deque<Row> rows; // CLI11 keeps pointers into them
  std::vector<std::string> freeze;
  std::string lora;
  std::string layerProfile;
  std::string uncertaintyBasis;
  CLI::Option *freezeOpt = nullptr, *loraOpt = nullptr,
              *layerProfileOpt = nullptr, *basisOpt = nullptr;

  void add(CLI::App *cmd) {
    for (const AssumptionField &f : assumptionFields())
      addRow(cmd, f);
    layerProfileOpt = cmd->add_option(
        "--layer-profile", layerProfile,
        "a JSON file of your stack's measured forward time of the model's "
        "repeated layer per device type and tp (docs/costmodel.md, \"Layer "
        "profiles\"): what the device model does not explain is priced as "
        "host time per layer");
    freezeOpt = cmd->add_option(
        "--freeze", freeze,
        "fine-tuning: freeze these weights (a name, a dotted prefix or part "
        "of one, '*' for any run, or a layer kind): no gradient, no "
        "optimizer state (repeatable)");
    loraOpt = cmd->add_option(
        "--lora", lora,
        "fine-tuning with LoRA adapters, every base weight frozen: "
        "rank=R[,targets=attention|mlp|all-linear|NAME+...] (default "
        "targets: attention)");
    basisOpt = cmd->add_option(
        "--uncertainty-basis", uncertaintyBasis,
        "the published runs the p10/p50/p90 band is derived from: a JSON "
        "file of measured over predicted steps per regime (the format of "
        "costmodel/data/validation_errors.json, which bench/validate.py "
        "writes; docs/costmodel.md, \"Uncertainty band\"); default the "
        "built-in");
  }
  void addRow(CLI::App *cmd, const AssumptionField &f) {
    Row &r = rows.emplace_back();
    r.field = &f;
    std::string flag = std::string("--") + f.flag;
    if (f.isSwitch)
      r.option = cmd->add_flag(flag, r.on, f.help);
    else if (f.isChoice())
      r.option =
          cmd->add_option(flag, r.name, f.help)->check(CLI::IsMember(f.names));
    else if (!f.allowed.empty())
      r.option = cmd->add_option(flag, r.number, f.help)
                     ->check(CLI::IsMember(f.allowed));
    else
      r.option = cmd->add_option(flag, r.number, f.help)
                     ->check(CLI::NonNegativeNumber);
  }
  /// The flags given on the command line.
  FrameworkOptions options() const {
    FrameworkOptions o;
    for (const Row &r : rows) {
      if (!r.option->count())
        continue;
      double v = r.number;
      if (r.field->isSwitch)
        v = r.on ? 1 : 0;
      else if (r.field->isChoice()) // one of them: CLI11 checked
        v = double(
            std::find(r.field->names.begin(), r.field->names.end(), r.name) -
            r.field->names.begin());
      o.set(r.field->flag, v);
    }
    if (freezeOpt && freezeOpt->count())
      o.freeze = freeze;
    if (loraOpt && loraOpt->count())
      o.lora = lora;
    if (layerProfileOpt && layerProfileOpt->count())
      o.layerProfile = layerProfile;
    return o;
  }
  /// Whether the row of this flag was given on the command line.
  bool given(const std::string &flag) const {
    for (const Row &r : rows)
      if (flag == r.field->flag)
        return r.option->count() > 0;
    return false;
  }
  llvm::Error apply(Assumptions &a) const { return apply(options(), a); }
  /// `given` (options() with a caller's defaults) applied to `a`.
  llvm::Error apply(const FrameworkOptions &given, Assumptions &a) const {
    if (basisOpt && basisOpt->count())
      if (auto e = setUncertaintyBasis(uncertaintyBasis))
        return e;
    return applyFrameworkOptions(given, a);
  }
};

} // namespace cli
} // namespace orrery

#endif // ORRERY_TOOLS_COMMANDS_FRAMEWORKFLAGS_H
