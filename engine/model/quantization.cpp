#include "engine/model/quantization.h"

#include <nlohmann/json.hpp>
#include <regex>

namespace llmq {

namespace {

using json = nlohmann::json;

Status Bad(const std::string& file, const std::string& field, const std::string& what) {
  return Status::InvalidArgument(file + ": field 'quantization_config." + field + "' " + what);
}
Status NotLoaded(const std::string& file, const std::string& field, const json& v,
                 const std::string& supported) {
  return Status::Unsupported(file + ": field 'quantization_config." + field + "' " + v.dump() +
                             " is not supported (supported: " + supported + ")");
}

// [rows, cols], two positive integers.
Status ParseBlock(const json& v, const std::string& file, const std::string& field, int* rows,
                  int* cols) {
  const auto dim = [&](size_t i) {
    return v[i].is_number_integer() && v[i].get<int64_t>() > 0 && v[i].get<int64_t>() <= 65536;
  };
  if (!v.is_array() || v.size() != 2 || !dim(0) || !dim(1))
    return Bad(file, field, "must be [rows, cols], two positive integers");
  *rows = v[0].get<int>();
  *cols = v[1].get<int>();
  return Status::Ok();
}

// Whether "re:<pattern>" matches `module` as Python's re.match does (anchored at its start);
// false for a pattern that does not compile (refused at parse: ParseNames).
bool PatternMatches(const std::string& pattern, const std::string& module, bool* compiles) {
  try {
    const std::regex re(pattern);
    *compiles = true;
    return std::regex_search(module, re, std::regex_constants::match_continuous);
  } catch (const std::regex_error&) {  // a pattern std::regex cannot compile
    *compiles = false;
    return false;
  }
}

Status ParseNames(const json& qc, const char* key, const std::string& file,
                  std::vector<std::string>* out) {
  if (!qc.contains(key) || qc[key].is_null()) return Status::Ok();
  if (!qc[key].is_array()) return Bad(file, key, "must be a list of module names");
  for (const json& n : qc[key]) {
    if (!n.is_string()) return Bad(file, key, "must be a list of module names");
    const std::string name = n.get<std::string>();
    bool compiles = true;
    if (name.rfind("re:", 0) == 0) (void)PatternMatches(name.substr(3), "", &compiles);
    if (!compiles)
      return Bad(file, std::string(key) + "[" + std::to_string(out->size()) + "]",
                 "is not a regular expression llmq can read: " + n.dump());
    out->push_back(name);
  }
  return Status::Ok();
}

// compressed-tensors: one group of 8-bit symmetric float weights on Linear.
Status ParseCompressedTensors(const json& qc, const std::string& file, WeightQuantization* q) {
  const json format = qc.value("format", json());
  if (format != "float-quantized")
    return NotLoaded(file, "format", format, "\"float-quantized\" (FP8 weights)");
  if (!qc.contains("config_groups") || !qc["config_groups"].is_object() ||
      qc["config_groups"].empty())
    return Bad(file, "config_groups", "must be an object of one or more groups");
  if (qc["config_groups"].size() != 1)
    return NotLoaded(file, "config_groups", json(qc["config_groups"].size()),
                     "one group: every Linear quantized alike");
  const auto& [group, g] = *qc["config_groups"].items().begin();
  const std::string at = "config_groups." + group;
  if (!g.is_object()) return Bad(file, at, "must be an object");
  const json targets = g.value("targets", json());
  if (targets != json::array({"Linear"}))
    return NotLoaded(file, at + ".targets", targets, "[\"Linear\"]");
  if (!g.contains("weights") || !g["weights"].is_object())
    return Bad(file, at + ".weights", "must be an object");
  const json& w = g["weights"];
  const std::pair<const char*, json> expect[] = {
      {"num_bits", 8}, {"type", "float"}, {"symmetric", true}};
  for (const auto& [k, v] : expect)
    if (w.value(k, json()) != v)
      return NotLoaded(file, at + ".weights." + k, w.value(k, json()), v.dump());
  for (const char* k : {"group_size", "actorder"})
    if (w.contains(k) && !w[k].is_null())
      return NotLoaded(file, at + ".weights." + k, w[k], "null");
  const json strategy = w.value("strategy", json());
  if (strategy == "block") {
    LLMQ_RETURN_IF_ERROR(ParseBlock(w.value("block_structure", json()), file,
                                    at + ".weights.block_structure", &q->block_rows,
                                    &q->block_cols));
  } else if (strategy != "tensor" && strategy != "channel") {
    return NotLoaded(file, at + ".weights.strategy", strategy,
                     "\"tensor\", \"channel\", \"block\"");
  }
  q->scale_suffix = "weight_scale";
  return ParseNames(qc, "ignore", file, &q->ignore);
}

// transformers' fine-grained FP8: blocks of weight_block_size, scales weight_scale_inv.
Status ParseFineGrainedFp8(const json& qc, const std::string& file, WeightQuantization* q) {
  if (qc.contains("fmt") && qc["fmt"] != "e4m3")
    return NotLoaded(file, "fmt", qc["fmt"], "\"e4m3\"");
  if (!qc.contains("weight_block_size") || qc["weight_block_size"].is_null())
    return NotLoaded(file, "weight_block_size", json(), "[rows, cols]");
  LLMQ_RETURN_IF_ERROR(ParseBlock(qc["weight_block_size"], file, "weight_block_size",
                                  &q->block_rows, &q->block_cols));
  q->scale_suffix = "weight_scale_inv";
  return ParseNames(qc, "modules_to_not_convert", file, &q->ignore);
}

}  // namespace

Status ParseQuantizationConfig(const json& qc, const std::string& file, WeightQuantization* out) {
  WeightQuantization q;
  if (qc.is_null()) {
    *out = q;
    return Status::Ok();
  }
  if (!qc.is_object())
    return Status::InvalidArgument(file + ": field 'quantization_config' must be an object");
  const json method = qc.value("quant_method", json());
  if (!method.is_string()) return Bad(file, "quant_method", "must be a string");
  q.quant_method = method.get<std::string>();
  q.fp8 = true;
  if (q.quant_method == "compressed-tensors") {
    LLMQ_RETURN_IF_ERROR(ParseCompressedTensors(qc, file, &q));
  } else if (q.quant_method == "fp8") {
    LLMQ_RETURN_IF_ERROR(ParseFineGrainedFp8(qc, file, &q));
  } else {
    return NotLoaded(file, "quant_method", method,
                     "\"compressed-tensors\" with FP8 weights, \"fp8\"");
  }
  *out = std::move(q);
  return Status::Ok();
}

bool WeightQuantization::Quantizes(const std::string& module) const {
  if (!fp8) return false;
  for (const std::string& n : ignore) {
    if (quant_method == "fp8") {
      if (module.find(n) != std::string::npos) return false;
    } else if (n.rfind("re:", 0) == 0) {
      bool compiles = true;
      if (PatternMatches(n.substr(3), module, &compiles)) return false;
    } else if (module == n) {
      return false;
    }
  }
  return true;
}

}  // namespace llmq
