// `ditserve-tool plan --model DIR --tp N`: validates the tensor-parallel plan of a transformer
// checkpoint for N ranks and prints, as JSON, every tensor with its style, global and per-rank
// shape and bytes, and the total bytes per rank. For a pipeline root whose text encoder is
// sharded too (FLUX.2's Mistral3, Qwen-Image's Qwen2.5-VL), "text_encoder" holds the same report
// for the text model's tensors (the ones the loader reads). Reads safetensors headers only. Exit 1
// (with the error on stderr and {"valid": false, "error": ...} on stdout) when a plan does not
// validate.
#include <cstdio>
#include <functional>
#include <iostream>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/config_json.h"
#include "common/flags.h"
#include "common/status_macros.h"
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
};

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

absl::StatusOr<nlohmann::ordered_json> Describe(const PlanToolOptions& o) {
  if (o.model.empty()) return absl::InvalidArgumentError("--model is required");
  if (o.tp < 1 || o.tp > 4096) {
    return absl::InvalidArgumentError(absl::StrCat("`tp_degree` must be >= 1 (got ", o.tp, ")."));
  }
  std::optional<sharding::DType> dtype;
  if (o.dtype == "f32" || o.dtype == "float32") dtype = sharding::DType::kF32;
  else if (o.dtype == "bf16" || o.dtype == "bfloat16") dtype = sharding::DType::kBF16;
  else if (o.dtype == "f16" || o.dtype == "float16") dtype = sharding::DType::kF16;
  else if (!o.dtype.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--dtype must be f32, bf16 or f16, got '",
                                                   o.dtype, "'"));
  }
  ASSIGN_OR_RETURN(std::string dir, sharding::ResolveComponentDir(o.model, "transformer"));
  ASSIGN_OR_RETURN(auto ckpt, sharding::ComponentCheckpoint::Open(dir));
  ASSIGN_OR_RETURN(nlohmann::ordered_json report, DescribeComponent(*ckpt, o, dtype));
  // A pipeline root's text encoder, when it is sharded too (its class has a built-in plan).
  if (sharding::IsPipelineRoot(o.model) && o.plan_file.empty()) {
    ASSIGN_OR_RETURN(sharding::PipelineIndex index, sharding::ReadPipelineIndex(o.model));
    if (auto te_dir = index.ComponentDir("text_encoder"); te_dir.ok()) {
      ASSIGN_OR_RETURN(auto te, sharding::ComponentCheckpoint::Open(*te_dir));
      if (!sharding::TextModelPrefixes(sharding::ConfigClassName(te->config())).empty()) {
        ASSIGN_OR_RETURN(report["text_encoder"], DescribeComponent(*te, o, dtype));
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
