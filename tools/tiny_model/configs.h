// The configuration files of the tiny FLUX.1 pipeline: the JSON each component's save_pretrained
// writes (the same keys as a FLUX.1-dev checkpoint from the Hub and as
// fixtures/flux1-tiny), with small sizes. Torch-free.
//
// Default sizes (chosen so that a 256x256, 4-step generation takes seconds on two CPU cores):
//   transformer  FluxTransformer2DModel, 4 heads x 16, 2 double + 2 single blocks, in_channels 16
//                (= 4 latent channels x 2x2 packing), joint_attention_dim 32 (= T5 d_model),
//                pooled_projection_dim 32 (= CLIP hidden_size), axes_dims_rope [4, 6, 6],
//                guidance_embeds true (FLUX.1-dev)
//   text_encoder CLIPTextModel, 2 layers, width 32, 4 heads, MLP 64, 77 positions, vocab 1024
//   text_encoder_2 T5EncoderModel, 2 layers, d_model 32, 4 heads x 8, gated-GELU d_ff 64,
//                32 relative-position buckets (max distance 128), vocab 612 (512 + 100 extra ids)
//   vae          AutoencoderKL, block_out_channels [8, 16], 1 layer per block, 4 groups,
//                4 latent channels, no quant convs, FLUX.1's scaling/shift factors; vae_scale_factor
//                2, so the pipeline's default image is 128 x 2 = 256 pixels square. Unlike FLUX.1,
//                mid_block_add_attention is false (configs.cc says why; `--vae-mid-attention`
//                restores it)
//   scheduler    FlowMatchEulerDiscreteScheduler with FLUX.1-dev's settings (diffusers scheduling_flow_match_euler_discrete.py)
// The text encoders' vocab_size is the requested tokenizer size; GenerateTinyModel sets it to the
// size of the tokenizer it actually trained.
//
// Thread-safety: stateless functions returning values.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace ditserve::tiny_model {

// The versions whose on-disk format the files reproduce (the fixtures' writers).
inline constexpr char kDiffusersVersion[] = "0.40.0.dev0";
inline constexpr char kTransformersVersion[] = "5.17.0";

struct TinyModelConfigs {
  nlohmann::json model_index;
  nlohmann::json scheduler;
  nlohmann::json text_encoder;    // CLIPTextModel config.json
  nlohmann::json text_encoder_2;  // T5EncoderModel config.json
  nlohmann::json transformer;
  nlohmann::json vae;
  int64_t t5_extra_ids = 100;     // <extra_id_N> tokens after the SentencePiece pieces
  int clip_model_max_length = 77;
  int t5_model_max_length = 512;
};

TinyModelConfigs DefaultTinyModelConfigs();

// Preset "flux1-dev-size": the released FLUX.1-dev transformer (19 double + 38 single blocks, 24
// heads x 128, 11.9 B parameters) and VAE (block_out_channels [128, 256, 512, 512], 2 layers per
// block, 16 latent channels, mid-block attention), with text encoders of the released WIDTHS
// (CLIP hidden 768, T5 d_model 4096) but one layer each and the tiny tokenizers: a random-weight
// pipeline whose transformer and VAE cost exactly what FLUX.1-dev's do, for end-to-end GPU timing
// and memory without a download (about 24 GB in bfloat16).
TinyModelConfigs Flux1DevSizeConfigs();

// The default model's FluxTransformer2DModel config.
nlohmann::json TinyFluxTransformerConfig();

}  // namespace ditserve::tiny_model
