//===- CoreModule.cpp - the Python extension `orrery._core` ---------------===//
//
// A thin nanobind layer over tools/orrery/Api.h: every call is the CLI's
// own code, its error the CLI's one line, raised as orrery.Error. The GIL is
// released while a call imports, simulates or searches. The Python API
// proper (classes, keywords, from_torch) is python/orrery/__init__.py.
//
//===----------------------------------------------------------------------===//

#include "Api.h"
#include "orrery/CostModel/AssumptionFields.h"

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <stdexcept>

namespace nb = nanobind;
using namespace nb::literals;

namespace {

/// The CLI's one-line message, raised in Python as orrery.Error.
struct OrreryError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <typename T> T take(orrery::api::Outcome<T> o) {
  if (!o.ok())
    throw OrreryError(o.error);
  return std::move(o.value);
}

/// A loaded model (the Python Model holds one).
struct ModelHandle {
  orrery::api::ModelRef ref;
};

orrery::cli::ClusterSource
clusterSource(const std::string &spec, const std::optional<std::string> &json) {
  orrery::cli::ClusterSource s;
  s.spec = spec;
  if (json)
    s.json = std::make_shared<const std::string>(*json);
  return s;
}

/// A framework assumption's keyword value as the table's value (a
/// choice's index or a number); a wrong type is a TypeError naming it.
double assumptionValue(const orrery::AssumptionField &f, const std::string &key,
                       nb::handle v) {
  auto wrong = [&](const std::string &expected) {
    return nb::type_error((key + ": expected " + expected).c_str());
  };
  if (f.isSwitch) {
    if (!nb::isinstance<bool>(v))
      throw wrong("True or False");
    return nb::cast<bool>(v) ? 1 : 0;
  }
  if (f.isChoice()) {
    if (!nb::isinstance<nb::str>(v))
      throw wrong("a string: " + f.expected(false));
    auto index = orrery::assumptionChoice(f, nb::cast<std::string>(v));
    if (!index)
      throw OrreryError(llvm::toString(index.takeError()));
    return *index;
  }
  if (nb::isinstance<bool>(v) ||
      !(nb::isinstance<int>(v) || nb::isinstance<nb::float_>(v)))
    throw wrong("a number: " + f.expected(false));
  return nb::cast<double>(v);
}

/// The framework keywords of simulate and plan: the assumptions table's
/// (AssumptionFields.h) and fine-tuning's and the layer profile's; None
/// leaves one unset.
orrery::cli::FrameworkOptions frameworkOptions(const nb::dict &keywords) {
  orrery::cli::FrameworkOptions o;
  for (auto [k, v] : keywords) {
    std::string key = nb::cast<std::string>(k);
    if (v.is_none())
      continue;
    if (key == "freeze")
      o.freeze = nb::cast<std::vector<std::string>>(v);
    else if (key == "lora")
      o.lora = nb::cast<std::string>(v);
    else if (key == "layer_profile")
      o.layerProfile = nb::cast<std::string>(v);
    else if (const orrery::AssumptionField *f =
                 orrery::assumptionFieldByKeyword(key))
      o.set(f->flag, assumptionValue(*f, key, v));
    else
      throw nb::type_error(
          ("unexpected keyword argument '" + key + "'").c_str());
  }
  return o;
}

/// `tokens`, `checkpoint`, `checkpoint_every`, `days`, `seed`, `trials`
/// (docs/reliability.md): the Python layer passes them typed.
orrery::cli::GoodputRequest goodputRequest(const nb::dict &d) {
  orrery::cli::GoodputRequest q;
  for (auto [key, value] : d) {
    std::string k = nb::cast<std::string>(key);
    if (k == "tokens")
      q.tokens = nb::cast<double>(value);
    else if (k == "checkpoint")
      q.checkpoint = nb::cast<std::string>(value);
    else if (k == "checkpoint_every")
      q.checkpointEvery = nb::cast<int64_t>(value);
    else if (k == "days")
      q.days = nb::cast<double>(value);
    else if (k == "seed")
      q.seed = nb::cast<uint64_t>(value);
    else if (k == "trials")
      q.trials = nb::cast<int>(value);
  }
  return q;
}

} // namespace

NB_MODULE(_core, m) {
  m.doc() = "Orrery's C++ core (use the `orrery` package, not this module)";
  nb::exception<OrreryError>(m, "Error");

  nb::class_<ModelHandle>(m, "ModelHandle")
      .def_prop_ro(
          "name",
          [](const ModelHandle &h) { return orrery::api::modelName(*h.ref); })
      .def_prop_ro("kernels", [](const ModelHandle &h) {
        return orrery::api::modelKernels(*h.ref);
      });

  m.def(
      "load",
      [](const std::string &name, std::optional<nb::bytes> data,
         const std::vector<std::string> &dims, const std::string &kernels) {
        std::optional<std::string> bytes;
        if (data)
          bytes.emplace(data->c_str(), data->size());
        nb::gil_scoped_release release;
        return ModelHandle{take(orrery::api::loadModel(
            name, bytes ? &*bytes : nullptr, dims, kernels))};
      },
      "name"_a, "data"_a.none(), "dims"_a, "kernels"_a,
      "Imports and outlines a model (a file, a built-in name, or bytes).");

  m.def(
      "stats",
      [](ModelHandle &h, bool json) {
        return take(orrery::api::stats(*h.ref, json));
      },
      "model"_a, "json"_a, nb::call_guard<nb::gil_scoped_release>(),
      "`orrery stats` of a loaded model.");

  m.def(
      "describe_cluster",
      [](const std::string &spec, std::optional<std::string> json) {
        return take(orrery::api::describeCluster(clusterSource(spec, json)));
      },
      "spec"_a, "json"_a.none(), "Parses a cluster; a JSON description.");

  m.def(
      "simulate",
      [](ModelHandle &h, const std::string &spec,
         std::optional<std::string> clusterJson, const std::string &strategy,
         std::optional<std::string> planJson, bool useMeasuredKernels,
         bool json, const std::string &trace, const nb::dict &keywords,
         const nb::dict &goodput) {
        auto framework = frameworkOptions(keywords);
        auto good = goodputRequest(goodput);
        nb::gil_scoped_release release;
        return take(
            orrery::api::simulate(*h.ref, clusterSource(spec, clusterJson),
                                  strategy, planJson ? &*planJson : nullptr,
                                  framework, useMeasuredKernels, json, trace,
                                  good));
      },
      "model"_a, "spec"_a, "cluster_json"_a.none(), "strategy"_a,
      "plan_json"_a.none(), "use_measured_kernels"_a, "json"_a, "trace"_a,
      "keywords"_a, "goodput"_a, "`orrery simulate` of a strategy string or a plan's JSON.");

  m.def(
      "plan",
      [](ModelHandle &h, const std::string &spec,
         std::optional<std::string> clusterJson, int64_t globalBatch,
         const std::string &objective, double budget, int top,
         const std::string &precision, const std::string &framework,
         const std::string &strategy, bool explain, const std::string &rankBy,
         const nb::dict &keywords, const nb::dict &goodput) {
        orrery::cli::PlanRequest request;
        request.goodput = goodputRequest(goodput);
        request.rankBy = rankBy;
        request.globalBatch = globalBatch;
        request.objective = objective;
        request.budgetUsdPerHour = budget;
        request.topK = top;
        request.precision = precision;
        request.framework = framework;
        request.fixedStrategy = strategy;
        request.flags = frameworkOptions(keywords);
        orrery::api::PlanText text;
        {
          nb::gil_scoped_release release;
          text = take(orrery::api::plan(
              *h.ref, clusterSource(spec, clusterJson), request, explain));
        }
        return nb::make_tuple(text.json, text.summary);
      },
      "model"_a, "spec"_a, "cluster_json"_a.none(), "global_batch"_a,
      "objective"_a, "budget"_a, "top"_a, "precision"_a, "framework"_a,
      "strategy"_a, "explain"_a, "rank_by"_a, "keywords"_a, "goodput"_a,
      "`orrery plan`: (the JSON text `--json` prints, the summary).");

  m.def(
      "export_plan",
      [](const std::string &planJson, const std::string &format) {
        return take(orrery::api::exportPlan(planJson, format));
      },
      "plan_json"_a, "format"_a, "`orrery export --to FORMAT` of plan JSON.");

  m.def(
      "report",
      [](ModelHandle &h, const std::string &planJson, const std::string &spec,
         std::optional<std::string> clusterJson, const std::string &out,
         const std::string &measured) {
        take(orrery::api::report(
            *h.ref, planJson, clusterSource(spec, clusterJson), out, measured));
      },
      "model"_a, "plan_json"_a, "spec"_a, "cluster_json"_a.none(), "out"_a,
      "measured"_a, nb::call_guard<nb::gil_scoped_release>(),
      "`orrery report`: checks the plan and writes its HTML page.");

  m.def(
      "assumption_keywords",
      [] {
        std::vector<std::string> keywords;
        for (const orrery::AssumptionField &f : orrery::assumptionFields())
          if (f.pythonKeyword)
            keywords.push_back(f.keyword());
        return keywords;
      },
      "The framework assumptions' keywords of simulate and plan, in the "
      "table's order (AssumptionFields.h).");

  m.def("set_builtin_models_dir", &orrery::api::setBuiltinModelsDir, "dir"_a,
        "Where built-in model names resolve.");
}
