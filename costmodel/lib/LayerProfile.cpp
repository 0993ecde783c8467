//===- LayerProfile.cpp - reading a stack's measured time per layer -------===//
#include "orrery/CostModel/LayerProfile.h"
#include "orrery/CostModel/Errors.h"
#include "orrery/CostModel/JsonInput.h"
#include "orrery/CostModel/PrintableLine.h"

#include <cmath>

namespace orrery {

static llvm::Error err(const std::string &msg) { return inputError(msg); }

llvm::Expected<LayerProfile> parseLayerProfile(const nlohmann::json &j,
                                               const std::string &what) {
  if (!j.is_object())
    return err(what + ": a layer profile must be a JSON object");
  for (auto it = j.begin(); it != j.end(); ++it)
    if (it.key() != "schema" && it.key() != "version" && it.key() != "source" &&
        it.key() != "layers")
      return err(what + ": unknown field '" + printableLine(it.key()) +
                 "' (schema, version, source, layers)");
  if (!j.contains("schema") || j["schema"] != "orrery-layer-profile")
    return err(what + ": schema must be \"orrery-layer-profile\"");
  if (!j.contains("version") || !j["version"].is_number_integer() ||
      j["version"].get<int64_t>() != 1)
    return err(what + ": version must be 1");
  LayerProfile p;
  if (j.contains("source")) {
    if (!j["source"].is_string())
      return err(what + ": source must be a string");
    p.source = j["source"].get<std::string>();
  }
  if (!j.contains("layers") || !j["layers"].is_array() || j["layers"].empty())
    return err(what + ": layers must be a non-empty array");
  if (j["layers"].size() > 4096)
    return err(what + ": layers: more than 4096 entries");
  for (size_t i = 0; i < j["layers"].size(); ++i) {
    const nlohmann::json &e = j["layers"][i];
    std::string at = what + ": layers[" + std::to_string(i) + "]";
    if (!e.is_object())
      return err(at + ": must be an object");
    for (auto it = e.begin(); it != e.end(); ++it)
      if (it.key() != "device" && it.key() != "tp" &&
          it.key() != "micro_batch_size_samples" && it.key() != "forward_s")
        return err(at + ": unknown field '" + printableLine(it.key()) +
                   "' (device, tp, micro_batch_size_samples, forward_s)");
    LayerProfile::Entry entry;
    if (!e.contains("device") || !e["device"].is_string() ||
        e["device"].get<std::string>().empty())
      return err(at + ".device: must be a device name");
    entry.device = e["device"].get<std::string>();
    try {
      entry.tp = checkedIntegerOr<int>(e, "tp", 1);
      entry.microBatch =
          checkedIntegerOr<int64_t>(e, "micro_batch_size_samples", 1);
    } catch (const std::exception &) {
      return err(at + ": tp and micro_batch_size_samples must be integers");
    }
    if (entry.tp < 1 || entry.tp > 1024)
      return err(at + ".tp: must be from 1 to 1024");
    if (entry.microBatch < 1 || entry.microBatch > (int64_t(1) << 20))
      return err(at + ".micro_batch_size_samples: must be from 1 to 1048576");
    if (!e.contains("forward_s") || !e["forward_s"].is_number() ||
        !(e["forward_s"].get<double>() > 0) ||
        !std::isfinite(e["forward_s"].get<double>()) ||
        e["forward_s"].get<double>() > 3600)
      return err(at + ".forward_s: must be a number of seconds in (0, 3600]");
    entry.forwardS = e["forward_s"].get<double>();
    if (p.find(entry.device, entry.tp))
      return err(at + ": a second entry for " + printableLine(entry.device) +
                 " at tp " + std::to_string(entry.tp));
    p.entries.push_back(entry);
  }
  return p;
}

llvm::Expected<LayerProfile> parseLayerProfileText(const std::string &text,
                                                   const std::string &what) {
  std::string error;
  nlohmann::json j = parseJsonInput(text, error);
  if (!error.empty())
    return err(what + ": " + error);
  return parseLayerProfile(j, what);
}

nlohmann::ordered_json layerProfileJson(const LayerProfile &p) {
  nlohmann::ordered_json layers = nlohmann::ordered_json::array();
  for (const LayerProfile::Entry &e : p.entries)
    layers.push_back({{"device", e.device},
                      {"tp", e.tp},
                      {"micro_batch_size_samples", e.microBatch},
                      {"forward_s", e.forwardS}});
  return {{"schema", "orrery-layer-profile"},
          {"version", 1},
          {"source", p.source},
          {"layers", layers}};
}

} // namespace orrery
