//===- AssumptionFields.h - the framework assumptions as one table -*- C++
//-*-===//
//
// Each framework assumption a plan records and a user may set (how the
// framework keeps, accumulates and reduces gradients, ZeRO-3's prefetch,
// which kernels it runs, what its pipeline sends) is one row of one table:
// its key in a plan's `predicted`, its flag of `orrery simulate` and
// `orrery plan` (the Python keyword is the flag with `_` for `-`), its
// values, its help, and the Assumptions member it reads and sets. The plan
// writer and reader, the plan checker's field types, the CLI's flags and
// the Python keywords are loops over this table, so a new knob is one row
// (and its Assumptions member).
//
// Fine-tuning (a plan's `fine_tuning`; --freeze, --lora) and the layer
// profile (a file on the command line, an object in a plan) are structured
// values and are read beside the table (Plan.cpp, tools/orrery/Common.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef ORRERY_COSTMODEL_ASSUMPTIONFIELDS_H
#define ORRERY_COSTMODEL_ASSUMPTIONFIELDS_H

#include "orrery/CostModel/Simulator.h"

#include "llvm/Support/Error.h"
#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace orrery {

/// One framework assumption, everywhere it is named. Its value is a double:
/// a choice's index in `names`, or a number.
struct AssumptionField {
  const char *planKey; ///< predicted.<planKey> of a plan
  const char *flag;    ///< --<flag>; the Python keyword: `-` as `_`
  const char *help;    ///< the flag's help
  /// A choice's values, as the plan and the flag spell them; empty: a
  /// number.
  std::vector<std::string> names;
  /// A two-valued choice the CLI sets by a flag without a value (names[1])
  /// and Python by a bool.
  bool isSwitch = false;
  /// A number's allowed values; empty: any finite number >= 0 (`range`
  /// says what it means).
  std::vector<double> allowed;
  const char *range = "a non-negative number";
  /// A number's largest value (with `range` saying so).
  double maxValue = 1e300;
  /// What a plan written before the key existed was priced with; empty:
  /// Assumptions' default.
  std::optional<double> absentFromPlan;
  /// A keyword of Python's simulate and plan; false: set where the model is
  /// loaded (the workload is built for it).
  bool pythonKeyword = true;
  double (*get)(const Assumptions &) = nullptr;
  void (*set)(Assumptions &, double) = nullptr;

  bool isChoice() const { return !names.empty(); }
  /// The Python keyword.
  std::string keyword() const;
  /// "a, b or c" (quoted: "\"a\", \"b\" or \"c\""), a choice's names or a
  /// number's allowed values.
  std::string expected(bool quoted) const;
  /// The plan's JSON value of `a`'s setting.
  nlohmann::ordered_json planValue(const Assumptions &a) const;
};

/// The table, in the order a plan writes it.
const std::vector<AssumptionField> &assumptionFields();
/// The row of `--flag` or of a Python keyword; null when none.
const AssumptionField *assumptionFieldByFlag(const std::string &flag);
const AssumptionField *assumptionFieldByKeyword(const std::string &keyword);

/// A choice's index of `name`; an error "--flag 'name': expected ...".
llvm::Expected<double> assumptionChoice(const AssumptionField &f,
                                        const std::string &name);
/// Sets `f` to `v` (a choice's index, or a number) after checking it; an
/// error names the flag and the value.
llvm::Error setAssumption(const AssumptionField &f, double v, Assumptions &a);

/// Writes every row of `a` into a plan's `predicted`, in table order.
void writeAssumptionFields(const Assumptions &a,
                           nlohmann::ordered_json &predicted);
/// Reads the rows a plan's `predicted` has into `a` (a missing row keeps
/// `absentFromPlan` or `a`'s own); an error names `what: predicted.key`.
llvm::Error readAssumptionFields(const nlohmann::json &predicted,
                                 const std::string &what, Assumptions &a);

} // namespace orrery

#endif // ORRERY_COSTMODEL_ASSUMPTIONFIELDS_H
