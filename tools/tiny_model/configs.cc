#include "tools/tiny_model/configs.h"

namespace ditserve::tiny_model {

using nlohmann::json;

namespace {

json FluxPipelineModelIndex() {
  return {
      {"_class_name", "FluxPipeline"},
      {"_diffusers_version", kDiffusersVersion},
      {"feature_extractor", {nullptr, nullptr}},
      {"image_encoder", {nullptr, nullptr}},
      {"scheduler", {"diffusers", "FlowMatchEulerDiscreteScheduler"}},
      {"text_encoder", {"transformers", "CLIPTextModel"}},
      {"text_encoder_2", {"transformers", "T5EncoderModel"}},
      {"tokenizer", {"transformers", "CLIPTokenizer"}},
      {"tokenizer_2", {"transformers", "T5Tokenizer"}},
      {"transformer", {"diffusers", "FluxTransformer2DModel"}},
      {"vae", {"diffusers", "AutoencoderKL"}},
  };
}


json FluxSchedulerConfig() {
  return {
      {"_class_name", "FlowMatchEulerDiscreteScheduler"},
      {"_diffusers_version", kDiffusersVersion},
      {"base_image_seq_len", 256},
      {"base_shift", 0.5},
      {"invert_sigmas", false},
      {"max_image_seq_len", 4096},
      {"max_shift", 1.15},
      {"num_train_timesteps", 1000},
      {"shift", 3.0},
      {"shift_terminal", nullptr},
      {"stochastic_sampling", false},
      {"time_shift_type", "exponential"},
      {"use_beta_sigmas", false},
      {"use_dynamic_shifting", true},
      {"use_exponential_sigmas", false},
      {"use_karras_sigmas", false},
  };
}

}  // namespace

json TinyFluxTransformerConfig() {
  return {
      {"_class_name", "FluxTransformer2DModel"},
      {"_diffusers_version", kDiffusersVersion},
      {"attention_head_dim", 16},
      {"axes_dims_rope", {4, 6, 6}},
      {"guidance_embeds", true},
      {"in_channels", 16},
      {"joint_attention_dim", 32},
      {"num_attention_heads", 4},
      {"num_layers", 2},
      {"num_single_layers", 2},
      {"out_channels", nullptr},
      {"patch_size", 1},
      {"pooled_projection_dim", 32},
  };
}

namespace {

json TinyClipTextConfig(int64_t vocab_size) {
  // bos/eos/pad ids are CLIPTextConfig's defaults, as in FLUX.1-dev's text_encoder/config.json
  // (eos_token_id 2 selects the legacy argmax(input_ids) pooling; <|endoftext|> is the top id).
  return {
      {"architectures", {"CLIPTextModel"}},
      {"attention_dropout", 0.0},
      {"bos_token_id", 0},
      {"dtype", "float32"},
      {"eos_token_id", 2},
      {"hidden_act", "quick_gelu"},
      {"hidden_size", 32},
      {"initializer_factor", 1.0},
      {"initializer_range", 0.02},
      {"intermediate_size", 64},
      {"layer_norm_eps", 1e-05},
      {"max_position_embeddings", 77},
      {"model_type", "clip_text_model"},
      {"num_attention_heads", 4},
      {"num_hidden_layers", 2},
      {"pad_token_id", 1},
      {"projection_dim", 32},
      {"transformers_version", kTransformersVersion},
      {"vocab_size", vocab_size},
  };
}


json TinyT5EncoderConfig(int64_t vocab_size) {
  return {
      {"architectures", {"T5EncoderModel"}},
      {"classifier_dropout", 0.0},
      {"d_ff", 64},
      {"d_kv", 8},
      {"d_model", 32},
      {"dense_act_fn", "gelu_new"},
      {"dropout_rate", 0.0},
      {"dtype", "float32"},
      {"eos_token_id", 1},
      {"feed_forward_proj", "gated-gelu"},
      {"initializer_factor", 1.0},
      {"is_decoder", false},
      {"is_encoder_decoder", false},
      {"is_gated_act", true},
      {"layer_norm_epsilon", 1e-06},
      {"model_type", "t5"},
      {"num_decoder_layers", 2},
      {"num_heads", 4},
      {"num_layers", 2},
      {"pad_token_id", 0},
      {"relative_attention_max_distance", 128},
      {"relative_attention_num_buckets", 32},
      {"scale_decoder_outputs", true},
      {"tie_word_embeddings", true},
      {"transformers_version", kTransformersVersion},
      {"use_cache", false},
      {"vocab_size", vocab_size},
  };
}


json TinyVaeConfig() {
  // mid_block_add_attention false: at the pipeline's default size the VAE mid block sees a
  // 128x128 latent grid, and its single-head attention over 16384 positions costs ~20 s and 2.2 GB
  // on two CPU cores (measured with LibTorch 1.13), 100x the rest of the decoder.
  return {
      {"_class_name", "AutoencoderKL"},
      {"_diffusers_version", kDiffusersVersion},
      {"act_fn", "silu"},
      {"block_out_channels", {8, 16}},
      {"down_block_types", {"DownEncoderBlock2D", "DownEncoderBlock2D"}},
      {"force_upcast", true},
      {"in_channels", 3},
      {"latent_channels", 4},
      {"latents_mean", nullptr},
      {"latents_std", nullptr},
      {"layers_per_block", 1},
      {"mid_block_add_attention", false},
      {"norm_num_groups", 4},
      {"out_channels", 3},
      {"sample_size", 256},
      {"scaling_factor", 0.3611},
      {"shift_factor", 0.1159},
      {"up_block_types", {"UpDecoderBlock2D", "UpDecoderBlock2D"}},
      {"use_post_quant_conv", false},
      {"use_quant_conv", false},
  };
}

}  // namespace

TinyModelConfigs DefaultTinyModelConfigs() {
  TinyModelConfigs c;
  c.model_index = FluxPipelineModelIndex();
  c.scheduler = FluxSchedulerConfig();
  c.text_encoder = TinyClipTextConfig(1024);   // 512 byte symbols + 510 merges + 2 specials
  c.text_encoder_2 = TinyT5EncoderConfig(612);  // 512 SentencePiece pieces + 100 extra ids
  c.transformer = TinyFluxTransformerConfig();
  c.vae = TinyVaeConfig();
  return c;
}

TinyModelConfigs Flux1DevSizeConfigs() {
  TinyModelConfigs c = DefaultTinyModelConfigs();
  c.transformer["attention_head_dim"] = 128;
  c.transformer["axes_dims_rope"] = {16, 56, 56};
  c.transformer["in_channels"] = 64;
  c.transformer["joint_attention_dim"] = 4096;
  c.transformer["num_attention_heads"] = 24;
  c.transformer["num_layers"] = 19;
  c.transformer["num_single_layers"] = 38;
  c.transformer["pooled_projection_dim"] = 768;
  c.text_encoder["hidden_size"] = 768;
  c.text_encoder["intermediate_size"] = 3072;
  c.text_encoder["num_attention_heads"] = 12;
  c.text_encoder["num_hidden_layers"] = 1;
  c.text_encoder["projection_dim"] = 768;
  c.text_encoder_2["d_model"] = 4096;
  c.text_encoder_2["d_kv"] = 64;
  c.text_encoder_2["num_heads"] = 64;
  c.text_encoder_2["d_ff"] = 10240;
  c.text_encoder_2["num_layers"] = 1;
  c.text_encoder_2["num_decoder_layers"] = 1;
  c.vae["block_out_channels"] = {128, 256, 512, 512};
  c.vae["down_block_types"] = {"DownEncoderBlock2D", "DownEncoderBlock2D", "DownEncoderBlock2D",
                               "DownEncoderBlock2D"};
  c.vae["up_block_types"] = {"UpDecoderBlock2D", "UpDecoderBlock2D", "UpDecoderBlock2D",
                             "UpDecoderBlock2D"};
  c.vae["latent_channels"] = 16;
  c.vae["layers_per_block"] = 2;
  c.vae["norm_num_groups"] = 32;
  c.vae["mid_block_add_attention"] = true;
  c.vae["sample_size"] = 1024;
  return c;
}

}  // namespace ditserve::tiny_model
