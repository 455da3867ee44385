// Every JSON reader of a model folder (configs, indexes, tokenizer files, adapter configs) refuses a
// wrong-typed field with INVALID_ARGUMENT naming the file (where the reader knows it) and the
// field's path, never with an exception (issue 31: a config.json whose model_type was an object
// aborted the process through nlohmann's type_error.302).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "common/config_json.h"
#include "common/remove_tree.h"
#include "models/flux1/flux1_config.h"
#include "models/flux2/flux2_config.h"
#include "models/lora/lora_format.h"
#include "models/qwenimage/qwenimage_config.h"
#include "models/text/causal_lm_config.h"
#include "models/text/clip_text_config.h"
#include "models/text/qwen2_5_vl_vision_config.h"
#include "models/text/t5_config.h"
#include "models/tokenizers/bpe_model.h"
#include "models/tokenizers/hf_tokenizer_json.h"
#include "models/tokenizers/t5_tokenizer.h"
#include "models/tokenizers/tokenizer_files.h"
#include "models/vae/autoencoder_kl_config.h"
#include "models/vae/autoencoder_kl_flux2_config.h"
#include "models/vae/autoencoder_kl_qwenimage_config.h"
#include "sharding/checkpoint.h"
#include "sharding/pipeline_index.h"
#include "sharding/tp_plan.h"
#include "tests/support/fixtures.h"

namespace ditserve {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

// The status is INVALID_ARGUMENT and its message holds every one of `parts`.
template <typename T>
void ExpectInvalid(const absl::StatusOr<T>& result, std::initializer_list<std::string> parts) {
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << result.status();
  for (const std::string& part : parts) {
    EXPECT_THAT(std::string(result.status().message()), HasSubstr(part));
  }
}

// A private folder, removed at the end.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "ditserve-typed-XXXXXX").string();
    EXPECT_NE(::mkdtemp(tmpl.data()), nullptr);
    path_ = tmpl;
  }
  ~TempDir() { (void)RemoveTree(path_); }
  const std::string& path() const { return path_; }
  std::string Write(const std::string& name, const std::string& text) const {
    const std::string file = path_ + "/" + name;
    fs::create_directories(fs::path(file).parent_path());
    std::ofstream(file, std::ios::binary) << text;
    return file;
  }

 private:
  std::string path_;
};

TEST(ConfigJsonTest, JsonFieldAtNamesFileFieldExpectedAndGot) {
  const nlohmann::json j = {{"a", {{"b", "x"}}}, {"n", 2.5}, {"s", {1, "x"}}};
  ExpectInvalid(JsonFieldAt<int64_t>(j["a"], "b", 0, "f.json", "a"),
                {"f.json: field 'a.b' must be an integer in", "got a string"});
  ExpectInvalid(JsonFieldAt<int32_t>(j, "n", 0, "f.json"),
                {"f.json: field 'n' must be an integer", "got a number with a fraction"});
  ExpectInvalid(JsonFieldAt<std::vector<int64_t>>(j, "s", {}, "f.json"),
                {"field 's' must be a list of an integer", "got an array"});
  auto absent = JsonFieldAt<std::string>(j, "missing", "d", "f.json");
  ASSERT_TRUE(absent.ok());
  EXPECT_EQ(*absent, "d");
  auto not_object = JsonFieldAt<std::string>(nlohmann::json(3), "k", "d", "f.json");
  ASSERT_TRUE(not_object.ok());
  EXPECT_EQ(*not_object, "d");
  ExpectInvalid(absl::StatusOr<int>(WithFile(absl::InvalidArgumentError("bad"), "x/config.json")),
                {"x/config.json: bad"});
  EXPECT_TRUE(WithFile(absl::OkStatus(), "x").ok());
}

// The fuzzer's input of issue 31 (tests/fuzz/seeds/config/regression_model_type_object.json).
TEST(CausalLmConfigTypedTest, ModelTypeObjectIsRefusedNotThrown) {
  const std::string text =
      R"({"metadata": {"total_size": 96}, "model_type": {"a.weight": "..."}})";
  ExpectInvalid(text::ParseCausalLmConfig(text, "text_encoder/config.json"),
                {"text_encoder/config.json: field 'model_type' must be a string, got an object"});
  TempDir dir;
  dir.Write("text_encoder/config.json", text);
  ExpectInvalid(text::LoadCausalLmConfig(dir.path() + "/text_encoder"),
                {dir.path() + "/text_encoder/config.json: field 'model_type'", "got an object"});
}

TEST(CausalLmConfigTypedTest, EveryClassAndRopeFieldIsTyped) {
  ExpectInvalid(text::ParseCausalLmConfig(R"({"architectures": "Mistral3ForConditionalGeneration"})",
                                          "c.json"),
                {"c.json: field 'architectures' must be a list of strings, got a string"});
  ExpectInvalid(text::ParseCausalLmConfig(R"({"architectures": [3]})", "c.json"),
                {"c.json: field 'architectures[0]' must be a string, got an integer"});
  ExpectInvalid(
      text::ParseCausalLmConfig(
          R"({"architectures": ["Mistral3ForConditionalGeneration"], "text_config": {"model_type": 7}})",
          "c.json"),
      {"c.json: field 'text_config.model_type' must be a string, got an integer"});
  ExpectInvalid(
      text::ParseCausalLmConfig(
          R"({"architectures": ["Mistral3ForConditionalGeneration"],
              "text_config": {"rope_parameters": {"rope_type": ["default"]}}})",
          "c.json"),
      {"c.json: field 'text_config.rope_parameters.rope_type' must be a string, got an array"});
  ExpectInvalid(
      text::ParseCausalLmConfig(
          R"({"architectures": ["Mistral3ForConditionalGeneration"],
              "text_config": {"hidden_size": "64"}})",
          "c.json"),
      {"c.json: field 'text_config.hidden_size' must be a positive integer"});
}

TEST(TextEncoderConfigTypedTest, ClipAndT5NameFileAndField) {
  TempDir dir;
  const std::string clip = dir.Write("text_encoder/config.json", R"({"hidden_act": {"x": 1}})");
  ExpectInvalid(text::LoadClipTextConfig(clip),
                {clip, "field 'hidden_act'", "expected a string, got an object"});
  const std::string t5 = dir.Write("text_encoder_2/config.json", R"({"d_model": "512"})");
  ExpectInvalid(text::LoadT5Config(t5), {t5, "field 'd_model'", "got a string"});
  ExpectInvalid(text::ParseT5Config(R"({"feed_forward_proj": 1})"),
                {"field 'feed_forward_proj'", "expected a string, got an integer"});
}

TEST(VaeConfigTypedTest, EveryVaeParserNamesTheField) {
  TempDir dir;
  const std::string kl = dir.Write("vae/config.json", R"({"block_out_channels": "128"})");
  ExpectInvalid(vae::LoadAutoencoderKLConfig(kl),
                {kl, "field 'block_out_channels'", "a list of an integer", "got a string"});
  ExpectInvalid(vae::ParseAutoencoderKLConfig(R"({"act_fn": null, "up_block_types": [1]})"),
                {"field 'up_block_types'", "a list of a string"});
  ExpectInvalid(vae::ParseAutoencoderKLConfig(std::string(100, '[') + std::string(100, ']')),
                {"nests deeper than 64"});
  const std::string flux2 = dir.Write("vae2/config.json", R"({"patch_size": {"h": 2}})");
  ExpectInvalid(vae::LoadAutoencoderKLFlux2Config(flux2),
                {flux2, "'patch_size' must be a non-empty list, got an object"});
  ExpectInvalid(vae::ParseAutoencoderKLFlux2Config(R"({"batch_norm_eps": "1e-4"})"),
                {"'batch_norm_eps' must be a number"});
  const std::string qwen = dir.Write("vae3/config.json", R"({"latents_mean": "0"})");
  ExpectInvalid(vae::LoadAutoencoderKLQwenImageConfig(qwen),
                {qwen, "'latents_mean' must be a list of numbers, got a string"});
  ExpectInvalid(vae::ParseAutoencoderKLQwenImageConfig(R"({"temperal_downsample": [true, "no"]})"),
                {"'temperal_downsample' must be a list of booleans, got a string in it"});
  ExpectInvalid(vae::ParseAutoencoderKLQwenImageConfig(R"({"z_dim": 16.5})"),
                {"'z_dim' must be an integer, got a number with a fraction"});
}

// The *FromJson entry points (a parsed object; what the config fuzzer drives) are the text
// parsers past their parse: the same verdict and message on the fixtures' real configs and on
// wrong-typed fields, and a JSON value that is not an object is refused, not thrown on.
TEST(ConfigFromJsonTest, ParsedObjectEntryPointsAgreeWithTheTextParsers) {
  const std::string fx = testing::FixturesDir();
  auto text_of = [](const std::string& path) { return ReadTextFile(path).value(); };
  auto same = [](const auto& from_text, const auto& from_json, const std::string& what) {
    ASSERT_EQ(from_text.ok(), from_json.ok())
        << what << ": " << from_text.status() << " / " << from_json.status();
    if (!from_text.ok()) EXPECT_EQ(from_text.status(), from_json.status()) << what;
  };
  auto check = [&](const std::string& text) {
    nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    ASSERT_TRUE(j.is_object()) << text;
    same(text::ParseClipTextConfig(text), text::ClipTextConfigFromJson(j), "clip " + text);
    same(text::ParseT5Config(text), text::T5ConfigFromJson(j), "t5 " + text);
    same(text::ParseCausalLmConfig(text, "c.json"), text::CausalLmConfigFromJson(j, "c.json"),
         "causal lm " + text);
    same(text::ParseQwen25VlVisionConfig(text, "c.json"),
         text::Qwen25VlVisionConfigFromJson(j, "c.json"), "vision " + text);
    same(vae::ParseAutoencoderKLConfig(text), vae::AutoencoderKLConfigFromJson(j), "kl " + text);
    same(vae::ParseAutoencoderKLFlux2Config(text), vae::AutoencoderKLFlux2ConfigFromJson(j),
         "flux2 vae " + text);
    same(vae::ParseAutoencoderKLQwenImageConfig(text), vae::AutoencoderKLQwenImageConfigFromJson(j),
         "qwen vae " + text);
  };
  for (const char* rel :
       {"flux1-tiny/text_encoder/config.json", "flux1-tiny/text_encoder_2/config.json",
        "flux1-tiny/vae/config.json", "flux2-tiny/text_encoder/config.json",
        "flux2-tiny/vae/config.json", "qwenimage-tiny/text_encoder/config.json",
        "qwenimage-tiny/vae/config.json"}) {
    check(text_of(fx + "/" + rel));
  }
  EXPECT_TRUE(text::ClipTextConfigFromJson(
                  nlohmann::json::parse(text_of(fx + "/flux1-tiny/text_encoder/config.json")))
                  .ok());
  for (const char* bad : {R"({"hidden_act": {"x": 1}})", R"({"d_model": "512"})",
                          R"({"model_type": {"a": 1}})", R"({"block_out_channels": "128"})",
                          R"({"patch_size": {"h": 2}})", R"({"z_dim": 16.5})", R"({})"}) {
    check(bad);
  }
  for (const nlohmann::json& not_object :
       {nlohmann::json::array(), nlohmann::json(3), nlohmann::json("config"), nlohmann::json()}) {
    ExpectInvalid(text::ClipTextConfigFromJson(not_object), {"not a JSON object"});
    ExpectInvalid(text::T5ConfigFromJson(not_object), {"not a JSON object"});
    ExpectInvalid(text::CausalLmConfigFromJson(not_object, "c.json"),
                  {"c.json", "not a JSON object"});
    ExpectInvalid(text::Qwen25VlVisionConfigFromJson(not_object, "c.json"),
                  {"c.json", "not a JSON object"});
    ExpectInvalid(vae::AutoencoderKLConfigFromJson(not_object), {"not a JSON object"});
    ExpectInvalid(vae::AutoencoderKLFlux2ConfigFromJson(not_object), {"not a JSON object"});
    ExpectInvalid(vae::AutoencoderKLQwenImageConfigFromJson(not_object), {"not a JSON object"});
  }
}

TEST(TransformerConfigTypedTest, TheThreeFamiliesNameTheField) {
  const nlohmann::json layers_string = {{"num_layers", "2"}};
  ExpectInvalid(models::flux1::ParseFluxTransformerConfig(layers_string),
                {"'num_layers' must be an integer, got a string"});
  ExpectInvalid(models::flux2::ParseFlux2TransformerConfig({{"guidance_embeds", "yes"}}),
                {"'guidance_embeds' must be a boolean, got a string"});
  ExpectInvalid(models::qwenimage::ParseQwenImageTransformerConfig({{"axes_dims_rope", {16, "x"}}}),
                {"'axes_dims_rope' entries must be positive even integers", "got a string"});
  ExpectInvalid(models::flux2::ParseFlux2TransformerConfig({{"mlp_ratio", {{"a", 1}}}}),
                {"'mlp_ratio' must be a number, got an object"});
  // The long fuzz run's finding (tests/fuzz/seeds/config/regression-crash-989db538...): a ratio
  // whose MLP width does not fit an int64 was cast (undefined behaviour) instead of refused.
  ExpectInvalid(models::flux2::ParseFlux2TransformerConfig({{"mlp_ratio", 3.2e94}}),
                {"mlp_ratio", "gives an MLP of", "features (at most 2147483647)"});
  // A caller that knows the file puts it in front (the status keeps its code).
  ExpectInvalid(absl::StatusOr<int>(WithFile(
                    models::flux1::ParseFluxTransformerConfig(layers_string).status(),
                    "transformer/config.json")),
                {"transformer/config.json: transformer config: 'num_layers'"});
}

TEST(ShardingReadersTypedTest, PipelineIndexNamesTheField) {
  TempDir dir;
  const std::string index = dir.Write("model_index.json", R"({"_class_name": {"a": 1}})");
  ExpectInvalid(sharding::ReadPipelineIndex(dir.path()),
                {index, "field '_class_name' must be a string, got an object"});
  dir.Write("model_index.json", R"({"_class_name": "FluxPipeline", "vae": ["diffusers", 3]})");
  ExpectInvalid(sharding::ReadPipelineIndex(dir.path()),
                {index, "field 'vae[1]' must be a string", "got an integer"});
  // The long fuzz run's finding (tests/fuzz/seeds/config/regression-crash-e73efd04...): a
  // component under the empty name was accepted, and its folder was the pipeline folder itself.
  dir.Write("model_index.json", R"({"_class_name": "FluxPipeline", "": ["transformers", "X"]})");
  ExpectInvalid(sharding::ReadPipelineIndex(dir.path()),
                {index, "a component [library, class] under an empty name"});
}

TEST(ShardingReadersTypedTest, WeightIndexNamesTheField) {
  TempDir dir;
  dir.Write("t/config.json", "{}");
  const std::string index =
      dir.Write("t/diffusion_pytorch_model.safetensors.index.json", R"({"weight_map": ["a"]})");
  auto opened = sharding::ComponentCheckpoint::Open(dir.path() + "/t");
  ExpectInvalid(opened, {index, "field 'weight_map' must be an object, got an array"});
  dir.Write("t/diffusion_pytorch_model.safetensors.index.json", R"({"weight_map": {"w": 5}})");
  opened = sharding::ComponentCheckpoint::Open(dir.path() + "/t");
  ExpectInvalid(opened, {index, "field 'weight_map.w' must be a string", "got an integer"});
}

TEST(ShardingReadersTypedTest, ComponentConfigClassNameIsTyped) {
  TempDir dir;
  const std::string config = dir.Write("t/config.json", R"({"_class_name": ["Flux"]})");
  ExpectInvalid(sharding::ReadComponentConfig(dir.path() + "/t"),
                {config, "field '_class_name' must be a string, got an array"});
}

TEST(ShardingReadersTypedTest, TpPlanNamesTheKeyAndType) {
  ExpectInvalid(sharding::ParseTpPlanJson({{"blocks.*.attn", 3}}, "X", nlohmann::json::object()),
                {"tp plan key 'blocks.*.attn'", "got an integer"});
  ExpectInvalid(sharding::ParseTpPlanJson({{"a", {{"style", {1}}}}}, "X", nlohmann::json::object()),
                {"tp plan key 'a': 'style' must be a style name, got an array"});
  ExpectInvalid(sharding::ParseTpPlanJson({{"a", {{"style", "colwise"}, {"blocks", "1"}}}}, "X",
                                          nlohmann::json::object()),
                {"tp plan key 'a': 'blocks' must be an array, got a string"});
}

TEST(TokenizerFilesTypedTest, TokenizerConfigNamesTheField) {
  TempDir dir;
  const std::string config = dir.Write("tokenizer_config.json", R"({"bos_token": 5})");
  ExpectInvalid(tokenizers::LoadTokenizerConfig(config),
                {config, "field 'bos_token' must be a string or {\"content\": string}, got an integer"});
  dir.Write("tokenizer_config.json", R"({"additional_special_tokens": ["<a>", [1]]})");
  ExpectInvalid(tokenizers::LoadTokenizerConfig(config),
                {config, "field 'additional_special_tokens[1]'", "got an array"});
  dir.Write("tokenizer_config.json",
            R"({"added_tokens_decoder": {"7": {"content": "<x>", "special": "yes"}}})");
  ExpectInvalid(tokenizers::LoadTokenizerConfig(config),
                {config, "field 'added_tokens_decoder.7.special' must be a boolean, got a string"});
  dir.Write("tokenizer_config.json", R"({"model_max_length": "77"})");
  ExpectInvalid(tokenizers::LoadTokenizerConfig(config),
                {config, "field 'model_max_length' must be a number, got a string"});
  dir.Write("tokenizer_config.json", R"({"extra_ids": -1})");
  ExpectInvalid(tokenizers::LoadTokenizerConfig(config),
                {config, "field 'extra_ids' must be a non-negative integer, got -1"});
  dir.Write("tokenizer_config.json", std::string(100, '[') + std::string(100, ']'));
  ExpectInvalid(tokenizers::LoadTokenizerConfig(config), {config, "nests deeper than 64"});
}

TEST(TokenizerFilesTypedTest, TokenizerJsonAndVocabNameTheField) {
  TempDir dir;
  const std::string json = dir.Write(
      "tokenizer.json", R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [],
                                     "byte_fallback": "no"}})");
  ExpectInvalid(tokenizers::ReadHfTokenizerJson(json),
                {json, "model.byte_fallback", "expected a boolean, got a string"});
  dir.Write("tokenizer.json", R"({"model": {"type": "BPE", "vocab": ["a"], "merges": []}})");
  ExpectInvalid(tokenizers::ReadHfTokenizerJson(json),
                {json, "model.vocab", "got an array"});
  dir.Write("tokenizer.json", R"({"model": )" + std::string(100, '[') + std::string(100, ']') + "}");
  ExpectInvalid(tokenizers::ReadHfTokenizerJson(json), {json, "nests deeper than 64"});
  const std::string vocab = dir.Write("vocab.json", R"({"a": 0, "b": "1"})");
  ExpectInvalid(tokenizers::BpeModel::ReadVocabFile(vocab),
                {vocab, "id of token \"b\"", "got a string"});
}

// T5's tokenizer.json is read beside spiece.model: its Metaspace options were read with unchecked
// conversions.
TEST(TokenizerFilesTypedTest, T5MetaspaceOptionsAreTyped) {
  TempDir dir;
  const std::string spiece = std::string(DITSERVE_FIXTURES_DIR) + "/tokenizer-sources/t5/spiece.model";
  ASSERT_TRUE(fs::exists(spiece)) << spiece;
  fs::copy_file(spiece, dir.path() + "/spiece.model");
  const std::string json = dir.Write(
      "tokenizer.json",
      R"({"pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"},
             {"type": "Metaspace", "prepend_scheme": 1}]}})");
  ExpectInvalid(tokenizers::T5Tokenizer::Load(dir.path()),
                {json, "field 'pre_tokenizer.pretokenizers[1].prepend_scheme' must be a string, "
                       "got an integer"});
  dir.Write("tokenizer.json",
            R"({"pre_tokenizer": {"type": "Metaspace", "add_prefix_space": "true"}})");
  ExpectInvalid(tokenizers::T5Tokenizer::Load(dir.path()),
                {json, "field 'pre_tokenizer.add_prefix_space' must be a boolean, got a string"});
  dir.Write("tokenizer.json", R"({"pre_tokenizer": {"type": 5}, "model": {"type": {}}})");
  EXPECT_TRUE(tokenizers::T5Tokenizer::Load(dir.path()).ok());  // neither names a Metaspace/Unigram
}

TEST(LoraConfigTypedTest, AdapterConfigFlagsAreTyped) {
  const std::vector<sharding::TensorMeta> tensors = {
      {"x.lora_A.weight", sharding::DType::kF32, {4, 8}},
      {"x.lora_B.weight", sharding::DType::kF32, {8, 4}}};
  const nlohmann::json rslora = {{"r", 4}, {"lora_alpha", 8}, {"use_rslora", "true"}};
  ExpectInvalid(lora::MapLoraLayout(tensors, {}, &rslora, "adapter_config.json"),
                {"adapter_config.json", "'use_rslora' must be a boolean, got a string"});
  const nlohmann::json dora = {{"r", 4}, {"use_dora", 1}};
  ExpectInvalid(lora::MapLoraLayout(tensors, {}, &dora, "adapter_config.json"),
                {"'use_dora' must be a boolean, got an integer"});
  const nlohmann::json alpha = {{"r", 4}, {"lora_alpha", "8"}};
  ExpectInvalid(lora::MapLoraLayout(tensors, {}, &alpha, "adapter_config.json"),
                {"'lora_alpha' must be a number, got a string"});
  const nlohmann::json pattern = {{"r", 4}, {"rank_pattern", {{"x", 1e300}}}};
  ExpectInvalid(lora::MapLoraLayout(tensors, {}, &pattern, "adapter_config.json"),
                {"rank_pattern 'x' must be a positive integer"});
  const nlohmann::json nulls = {{"r", 4}, {"use_rslora", nullptr}, {"use_dora", nullptr}};
  EXPECT_TRUE(lora::MapLoraLayout(tensors, {}, &nulls, "adapter_config.json").ok());
}

}  // namespace
}  // namespace ditserve
