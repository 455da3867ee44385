// ditserve-mistral-encoder-bench: FLUX.2-dev's text encoder (Mistral-Small-3.1-24B's text model at
// its released size, random weights) encoding one prompt of --tokens tokens, as the FLUX.2 pipeline
// does: hidden states 10, 20 and 30 (so layers 31..40 are not run). Prints the weight bytes and the
// median wall time. --layers shrinks the model for a CPU smoke run. Not used by serving code.
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "bench/step/step_bench.h"
#include "comm/local_communicator.h"
#include "models/text/causal_lm_config.h"
#include "models/text/causal_lm_encoder.h"

namespace ditserve::text {
namespace {

// mistralai/Mistral-Small-3.1-24B-Instruct-2503's text_config (FLUX.2-dev's text_encoder).
std::string ReleasedConfig(int64_t layers) {
  return absl::StrCat(R"({"architectures": ["Mistral3ForConditionalGeneration"],
    "text_config": {"model_type": "mistral", "hidden_size": 5120, "intermediate_size": 32768,
    "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "num_hidden_layers": )",
                      layers, R"(, "rms_norm_eps": 1e-05, "rope_theta": 1000000000.0,
    "vocab_size": 131072, "max_position_embeddings": 131072, "sliding_window": null}})");
}

std::map<std::string, std::vector<int64_t>> Shapes(const CausalLmConfig& c) {
  const std::string p = "model.language_model.";
  const int64_t h = c.hidden_size, q = c.num_attention_heads * c.head_dim,
                kv = c.num_key_value_heads * c.head_dim, ff = c.intermediate_size;
  std::map<std::string, std::vector<int64_t>> s = {{p + "embed_tokens.weight", {c.vocab_size, h}},
                                                   {p + "norm.weight", {h}}};
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string l = absl::StrCat(p, "layers.", i, ".");
    s[l + "input_layernorm.weight"] = {h};
    s[l + "post_attention_layernorm.weight"] = {h};
    s[l + "self_attn.q_proj.weight"] = {q, h};
    s[l + "self_attn.k_proj.weight"] = {kv, h};
    s[l + "self_attn.v_proj.weight"] = {kv, h};
    s[l + "self_attn.o_proj.weight"] = {h, q};
    s[l + "mlp.gate_proj.weight"] = {ff, h};
    s[l + "mlp.up_proj.weight"] = {ff, h};
    s[l + "mlp.down_proj.weight"] = {h, ff};
  }
  return s;
}

int Main(int argc, char** argv) {
  bench::CommonBenchOptions flags;
  int64_t layers = 40;
  FlagParser parser("ditserve-mistral-encoder-bench",
                    "FLUX.2-dev's Mistral text encoder, one prompt");
  bench::AddCommonBenchFlags(&parser, &flags);
  parser.AddInt("layers", &layers, "text-model layers (released: 40)");
  const int64_t& tokens = flags.text_tokens;  // --text-tokens: the prompt length (FLUX.2: 512)
  if (absl::Status s = parser.Parse(argc, argv); !s.ok() || parser.HelpRequested()) {
    std::fprintf(s.ok() ? stdout : stderr, "%s\n%s", std::string(s.message()).c_str(),
                 parser.Help().c_str());
    return s.ok() ? 0 : 2;
  }
  auto target = bench::ResolveBenchTarget(flags);
  if (!target.ok()) {
    std::fprintf(stderr, "%s\n", target.status().ToString().c_str());
    return 2;
  }
  auto config = ParseCausalLmConfig(ReleasedConfig(layers), "released config");
  if (!config.ok()) {
    std::fprintf(stderr, "%s\n", config.status().ToString().c_str());
    return 1;
  }
  int64_t params = 0;
  auto sd = bench::RandomStateDict(Shapes(*config), target->options(), flags.seed, &params);
  auto comm = comm::MakeSingleRankCommunicator();
  auto model = CausalLmTextEncoder::Load(*config, sd, comm.get());
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", model.status().ToString().c_str());
    return 1;
  }
  const auto opts = torch::TensorOptions().device(target->device);
  torch::Tensor ids = torch::randint(0, config->vocab_size, {1, tokens}, opts.dtype(torch::kInt64));
  torch::Tensor mask = torch::ones({1, tokens}, opts.dtype(torch::kInt64));
  mask.slice(1, 0, tokens / 2).zero_();  // a left-padded prompt, as FLUX.2 encodes them
  auto times = bench::TimeSteps(
      [&]() -> absl::StatusOr<torch::Tensor> {
        ASSIGN_OR_RETURN(std::vector<torch::Tensor> h, (*model)->Forward(ids, mask, {10, 20, 30}));
        return torch::cat(h, -1);
      },
      target->device, flags.warmup, flags.runs);
  if (!times.ok()) {
    std::fprintf(stderr, "%s\n", times.status().ToString().c_str());
    return 1;
  }
  std::printf(
      "mistral text encoder: %lld layers, %lld params (%.2f GB in %s), %lld tokens: median %.2f ms "
      "(min %.2f, max %.2f, %zu runs)\n",
      static_cast<long long>(layers), static_cast<long long>(params),
      params * c10::elementSize(target->dtype) / 1e9, c10::toString(target->dtype),
      static_cast<long long>(tokens), times->median_ms, times->min_ms, times->max_ms, times->runs);
  return 0;
}

}  // namespace
}  // namespace ditserve::text

int main(int argc, char** argv) {
  return ditserve::text::Main(argc, argv);
}
