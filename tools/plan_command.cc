// `ditserve-tool plan --model DIR --tp N`: validates the tensor-parallel plan of a transformer
// checkpoint for N ranks and prints, as JSON, every tensor with its style, global and per-rank
// shape and bytes, and the total bytes per rank. For a pipeline root whose text encoder is
// sharded too (FLUX.2's Mistral3, Qwen-Image's Qwen2.5-VL), "text_encoder" holds the same report
// for the text model's tensors (the ones the loader reads), and for a Qwen-Image-Edit root
// (QwenImageEditPipeline / QwenImageEditPlusPipeline) "vision_tower" the Qwen2.5-VL vision tower's
// bytes, which rank 0 alone holds (it encodes the condition images once and broadcasts the
// embeddings; the tower is ~8 % of Qwen2.5-VL-7B and runs once a request, so sharding it would save
// little and add collectives). Reads safetensors headers only. Exit 1
// (with the error on stderr and {"valid": false, "error": ...} on stdout) when a plan does not
// validate. --weights fp8 counts the transformer's block linears as each rank holds them under
// `--weights fp8` (models/common/fp8_linear.h: one byte an element plus a float32 scale a row,
// where the rank's shape suits the FP8 GEMM).
#include <cstdio>
#include <functional>
#include <iostream>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/config_json.h"
#include "common/flags.h"
#include "common/model_flags.h"
#include "common/status_macros.h"
#include "models/common/fp8_linear.h"
#include "sharding/checkpoint.h"
#include "sharding/pipeline_index.h"
#include "sharding/plan_report.h"
#include "sharding/tp_plan.h"
#include "tools/dtype_flag.h"
#include "tools/tool_registry.h"

namespace ditserve::tools {
namespace {

struct PlanToolOptions {
  std::string model;
  int64_t tp = 1;
  std::string plan_file;  // optional JSON plan instead of the model class's built-in one
  std::string dtype;      // "", f32, bf16, f16: count floating tensors in this dtype
  bool replicated = false;
  bool replicate_modulation = false;  // the reference's plan (as the frontend's flag)
  std::string weights = "dtype";       // dtype | fp8 (the transformer's block linears)
};

// Rewrites a transformer report's byte counts for FP8 block linears (IsFp8BlockLinear, and a rank
// shape Fp8Shape takes: rows × cols bytes + 4 bytes a row), and its totals.
void CountFp8Weights(nlohmann::ordered_json& report) {
  const size_t ranks = report["total_bytes_per_rank"].size();
  std::vector<uint64_t> per_rank(ranks, 0);
  uint64_t total = 0, sharded = 0, replicated = 0;
  for (auto& t : report["tensors"]) {
    const std::string name = t["name"];
    const std::string module = t["module"];
    const std::string dot_weight = ".weight";
    const bool weight = name.size() > dot_weight.size() &&
                        name.compare(name.size() - dot_weight.size(), dot_weight.size(), dot_weight) == 0;
    const std::string path = module.empty() && weight ? name.substr(0, name.size() - dot_weight.size()) : module;
    const bool candidate = weight && t["global_shape"].size() == 2 && models::IsFp8BlockLinear(path);
    uint64_t global = 0;
    for (size_t r = 0; r < ranks; ++r) {
      const auto& shape = t["rank_shapes"][r];
      uint64_t bytes = t["bytes_per_rank"][r];
      if (candidate && shape.size() == 2) {
        const int64_t rows = shape[0], cols = shape[1];
        if (models::Fp8Shape(rows, cols)) {
          bytes = static_cast<uint64_t>(rows * cols + rows * 4);
          t["bytes_per_rank"][r] = bytes;
          t["fp8"] = true;
        }
      }
      per_rank[r] += bytes;
    }
    const std::vector<int64_t> g = t["global_shape"];
    if (t.value("fp8", false)) {
      global = static_cast<uint64_t>(g[0] * g[1] + g[0] * 4);
    } else {
      global = t["bytes_per_rank"][0];
      if (t["style"] != "replicated") {
        global = 0;
        for (size_t r = 0; r < ranks; ++r) global += static_cast<uint64_t>(t["bytes_per_rank"][r]);
      }
    }
    total += global;
    (t["style"] == "replicated" ? replicated : sharded) += global;
  }
  report["weights"] = "fp8";
  report["total_bytes_per_rank"] = per_rank;
  report["total_bytes"] = total;
  report["sharded_bytes"] = sharded;
  report["replicated_bytes"] = replicated;
}

// The report of one component: its built-in plan (or --plan / --replicated) and, for a text
// encoder, only the text model's tensors (what the loader reads).
absl::StatusOr<nlohmann::ordered_json> DescribeComponent(const sharding::ComponentCheckpoint& ckpt,
                                                         const PlanToolOptions& o,
                                                         std::optional<sharding::DType> dtype) {
  std::optional<sharding::TpPlan> plan;
  const std::string cls = sharding::ConfigClassName(ckpt.config());
  if (!o.plan_file.empty()) {
    ASSIGN_OR_RETURN(nlohmann::json j, ReadJsonObjectFile(o.plan_file));
    auto parsed = sharding::ParseTpPlanJson(j, cls, ckpt.config());
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(o.plan_file, ": ", parsed.status().message()));
    }
    plan = std::move(*parsed);
  } else if (!o.replicated) {
    ASSIGN_OR_RETURN(plan, sharding::BuiltinTpPlanForCheckpoint(ckpt));
    if (!o.replicate_modulation) sharding::AddModulationSharding(&*plan);
  }
  std::function<bool(const std::string&)> select;
  if (!sharding::TextModelPrefixes(cls).empty()) {
    ASSIGN_OR_RETURN(std::string prefix, sharding::DetectTextModelPrefix(cls, [&](const std::string& n) {
                       return ckpt.tensors().count(n) > 0;
                     }));
    select = [prefix](const std::string& n) { return n.rfind(prefix, 0) == 0; };
  }
  return sharding::DescribeShardPlan(ckpt, plan ? &*plan : nullptr, static_cast<int>(o.tp), dtype,
                                     select);
}

// The vision tower's tensors ("visual." / "model.visual.") of a Qwen2.5-VL text encoder, counted
// in `dtype` (stored dtypes when unset), placed on rank 0 of `tp` ranks.
nlohmann::ordered_json DescribeVisionTower(const sharding::ComponentCheckpoint& te, int64_t tp,
                                           std::optional<sharding::DType> dtype) {
  uint64_t bytes = 0, tensors = 0;
  for (const auto& [name, loc] : te.tensors()) {
    if (name.rfind("visual.", 0) != 0 && name.rfind("model.visual.", 0) != 0) continue;
    bytes += dtype ? loc.info->numel() * sharding::DTypeSize(*dtype) : loc.info->nbytes();
    ++tensors;
  }
  std::vector<uint64_t> per_rank(static_cast<size_t>(tp), 0);
  per_rank[0] = bytes;
  nlohmann::ordered_json out;
  out["tensors"] = tensors;
  out["total_bytes"] = bytes;
  out["placement"] = "rank 0 (its image embeddings are broadcast)";
  out["total_bytes_per_rank"] = per_rank;
  return out;
}

absl::StatusOr<nlohmann::ordered_json> Describe(const PlanToolOptions& o) {
  if (o.model.empty()) return absl::InvalidArgumentError("--model is required");
  if (o.tp < 1 || o.tp > 4096) {
    return absl::InvalidArgumentError(absl::StrCat("`tp_degree` must be >= 1 (got ", o.tp, ")."));
  }
  std::optional<sharding::DType> dtype;
  if (!o.dtype.empty()) {
    ASSIGN_OR_RETURN(dtype, ParseDTypeFlag(o.dtype, {sharding::DType::kF32, sharding::DType::kBF16,
                                                     sharding::DType::kF16}));
  }
  ASSIGN_OR_RETURN(std::string dir, sharding::ResolveComponentDir(o.model, "transformer"));
  ASSIGN_OR_RETURN(auto ckpt, sharding::ComponentCheckpoint::Open(dir));
  ASSIGN_OR_RETURN(const WeightFormat weights, ParseWeightFormat(o.weights));
  ASSIGN_OR_RETURN(nlohmann::ordered_json report, DescribeComponent(*ckpt, o, dtype));
  if (weights == WeightFormat::kFp8) CountFp8Weights(report);
  // A pipeline root's text encoder, when it is sharded too (its class has a built-in plan).
  if (sharding::IsPipelineRoot(o.model) && o.plan_file.empty()) {
    ASSIGN_OR_RETURN(sharding::PipelineIndex index, sharding::ReadPipelineIndex(o.model));
    if (auto te_dir = index.ComponentDir("text_encoder"); te_dir.ok()) {
      ASSIGN_OR_RETURN(auto te, sharding::ComponentCheckpoint::Open(*te_dir));
      if (!sharding::TextModelPrefixes(sharding::ConfigClassName(te->config())).empty()) {
        ASSIGN_OR_RETURN(report["text_encoder"], DescribeComponent(*te, o, dtype));
      }
      if (index.class_name == "QwenImageEditPipeline" ||
          index.class_name == "QwenImageEditPlusPipeline") {
        report["vision_tower"] = DescribeVisionTower(*te, o.tp, dtype);
      }
    }
  }
  return report;
}

int PlanMain(int argc, const char* const* argv) {
  PlanToolOptions o;
  FlagParser p("ditserve-tool plan",
               "Validates the tensor-parallel plan of a checkpoint and prints what each rank loads.");
  p.AddString("model", &o.model, "component folder, or pipeline root (its transformer/, and its text_encoder/ when sharded)");
  p.AddInt("tp", &o.tp, "tensor-parallel degree");
  p.AddString("plan", &o.plan_file,
              "JSON plan {key: style | {style, blocks}} instead of the model's built-in plan");
  p.AddString("dtype", &o.dtype, "count floating tensors as f32 | bf16 | f16 (default: stored)");
  p.AddBool("replicated", &o.replicated, "no plan: every tensor replicated");
  p.AddString("weights", &o.weights,
              "dtype | fp8: count the transformer's block linears as --weights fp8 holds them");
  p.AddBool("replicate-modulation", &o.replicate_modulation,
            "the reference's plan: AdaLN modulation replicated (default: sharded, as served)");
  if (absl::Status s = p.Parse(argc, argv); !s.ok()) {
    std::fprintf(stderr, "%s\n\n%s", std::string(s.message()).c_str(), p.Help().c_str());
    return 2;
  }
  if (p.HelpRequested()) {
    std::fprintf(stdout, "%s", p.Help().c_str());
    return 0;
  }
  auto report = Describe(o);
  if (!report.ok()) {
    nlohmann::ordered_json err = {{"model", o.model}, {"tp_degree", o.tp}, {"valid", false},
                          {"error", std::string(report.status().message())}};
    std::cout << err.dump(2) << std::endl;
    std::fprintf(stderr, "ditserve-tool plan: %s\n", report.status().ToString().c_str());
    return 1;
  }
  std::cout << report->dump(2) << std::endl;
  return 0;
}

}  // namespace

DITSERVE_TOOL_COMMAND("plan", "validate a tensor-parallel plan and show each rank's slices",
                      PlanMain);

}  // namespace ditserve::tools
