// The tensors of a diffusers AutoencoderKL (FLUX.1 `vae/`), encoder and decoder, derived from its
// config.json: in_channels, out_channels, latent_channels, block_out_channels, layers_per_block,
// down_block_types (all "DownEncoderBlock2D") / up_block_types (all "UpDecoderBlock2D"),
// mid_block_add_attention, use_quant_conv, use_post_quant_conv. Torch-free.
//
// Encoder: conv_in; down_blocks.i with layers_per_block resnets (channels block_out_channels[i-1]
// -> [i]) and a downsampler conv except on the last block; mid_block (resnet, attention, resnet);
// conv_norm_out; conv_out to 2·latent_channels (mean and log-variance). Decoder (diffusers autoencoder_kl.py / vae.py): conv_in;
// mid_block; up_blocks.i over reversed(block_out_channels) with layers_per_block + 1 resnets and an
// upsampler conv except on the last; conv_norm_out; conv_out. A resnet has a 1x1 conv_shortcut
// iff its input and output channels differ. Optional quant_conv (2L -> 2L) and post_quant_conv
// (L -> L), 1x1.
//
// Thread-safety: stateless function.
#pragma once

#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "tools/tiny_model/tensor_spec.h"

namespace ditserve::tiny_model {

absl::StatusOr<std::vector<TensorSpec>> AutoencoderKlTensors(const nlohmann::json& config);

}  // namespace ditserve::tiny_model
