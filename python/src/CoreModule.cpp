//===- CoreModule.cpp - the Python extension `orrery._core` ---------------===//
//
// A thin nanobind layer over tools/orrery/Api.h: every call is the CLI's
// own code, its error the CLI's one line, raised as orrery.Error. The GIL is
// released while a call imports, simulates or searches. The Python API
// proper (classes, keywords, from_torch) is python/orrery/__init__.py.
//
//===----------------------------------------------------------------------===//

#include "Api.h"

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

orrery::cli::FrameworkOptions frameworkOptions(
    std::optional<bool> separateGradAccumulation,
    std::optional<double> gradBytes, std::optional<double> gradReduceBytes,
    std::optional<double> zero3PrefetchParams,
    std::optional<std::vector<std::string>> freeze,
    std::optional<std::string> lora, std::optional<std::string> layerProfile,
    std::optional<std::string> pipelineGradients,
    std::optional<bool> pipelineMask) {
  orrery::cli::FrameworkOptions o;
  o.layerProfile = std::move(layerProfile);
  o.pipelineGradients = std::move(pipelineGradients);
  o.pipelineMask = pipelineMask;
  o.separateGradAccumulation = separateGradAccumulation;
  o.gradBytes = gradBytes;
  o.gradReduceBytes = gradReduceBytes;
  o.zero3PrefetchParams = zero3PrefetchParams;
  o.freeze = std::move(freeze);
  o.lora = std::move(lora);
  return o;
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
         bool json, const std::string &trace,
         std::optional<bool> separateGradAccumulation,
         std::optional<double> gradBytes, std::optional<double> gradReduceBytes,
         std::optional<double> zero3PrefetchParams,
         std::optional<std::vector<std::string>> freeze,
         std::optional<std::string> lora,
         std::optional<std::string> layerProfile,
         std::optional<std::string> pipelineGradients,
         std::optional<bool> pipelineMask) {
        auto framework = frameworkOptions(
            separateGradAccumulation, gradBytes, gradReduceBytes,
            zero3PrefetchParams, std::move(freeze), std::move(lora),
            std::move(layerProfile), std::move(pipelineGradients),
            pipelineMask);
        nb::gil_scoped_release release;
        return take(
            orrery::api::simulate(*h.ref, clusterSource(spec, clusterJson),
                                  strategy, planJson ? &*planJson : nullptr,
                                  framework, useMeasuredKernels, json, trace));
      },
      "model"_a, "spec"_a, "cluster_json"_a.none(), "strategy"_a,
      "plan_json"_a.none(), "use_measured_kernels"_a, "json"_a, "trace"_a,
      "separate_grad_accumulation"_a.none(), "grad_bytes"_a.none(),
      "grad_reduce_bytes"_a.none(), "zero3_prefetch_params"_a.none(),
      "freeze"_a.none(), "lora"_a.none(), "layer_profile"_a.none(),
      "pipeline_gradients"_a.none(), "pipeline_mask"_a.none(),
      "`orrery simulate` of a strategy string or a plan's JSON.");

  m.def(
      "plan",
      [](ModelHandle &h, const std::string &spec,
         std::optional<std::string> clusterJson, int64_t globalBatch,
         const std::string &objective, double budget, int top,
         const std::string &precision, const std::string &framework,
         const std::string &strategy, bool explain,
         std::optional<bool> separateGradAccumulation,
         std::optional<double> gradBytes, std::optional<double> gradReduceBytes,
         std::optional<double> zero3PrefetchParams,
         std::optional<std::vector<std::string>> freeze,
         std::optional<std::string> lora,
         std::optional<std::string> layerProfile,
         std::optional<std::string> pipelineGradients,
         std::optional<bool> pipelineMask) {
        orrery::cli::PlanRequest request;
        request.globalBatch = globalBatch;
        request.objective = objective;
        request.budgetUsdPerHour = budget;
        request.topK = top;
        request.precision = precision;
        request.framework = framework;
        request.fixedStrategy = strategy;
        request.flags = frameworkOptions(
            separateGradAccumulation, gradBytes, gradReduceBytes,
            zero3PrefetchParams, std::move(freeze), std::move(lora),
            std::move(layerProfile), std::move(pipelineGradients),
            pipelineMask);
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
      "strategy"_a, "explain"_a, "separate_grad_accumulation"_a.none(),
      "grad_bytes"_a.none(), "grad_reduce_bytes"_a.none(),
      "zero3_prefetch_params"_a.none(), "freeze"_a.none(), "lora"_a.none(),
      "layer_profile"_a.none(), "pipeline_gradients"_a.none(),
      "pipeline_mask"_a.none(),
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

  m.def("set_builtin_models_dir", &orrery::api::setBuiltinModelsDir, "dir"_a,
        "Where built-in model names resolve.");
}
