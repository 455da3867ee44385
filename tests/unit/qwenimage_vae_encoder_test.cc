// AutoencoderKLQwenImage's encoder for one frame (the Qwen-Image edit pipelines' input images):
// the config's encoder plan, the downsampler's asymmetric zero pad, the whole encode against a
// literal 5-D transcription of autoencoder_kl_qwenimage.py's first-chunk arithmetic (causal
// conv3d with its zero time padding, "downsample3d" skipping time_conv on an empty cache slot,
// quant_conv), the posterior split, the edit pipeline's normalisation and packing, shapes, batch
// and input-layout independence, determinism, bfloat16, loading errors naming the tensor, and a
// decoder-only VAE. On the tiny fixture VAE (tests/fixtures/qwenimage-tiny/vae, made by diffusers)
// and on random weights for the real VAE's 8x layout.
//
// No parity with diffusers' own encode yet: its numbers come from the GPU host. A parity case
// follows vae_encoder_test.cc's DITSERVE_VAE_ENCODER_PARITY pattern: the fixture maker records
// diffusers' vae.encode(x).latent_dist (mean, std) and _encode_vae_image(x) of a seeded
// (B, 3, 1, H, W) input for the tiny VAE, and a test registered with
// `ditserve_add_test(... REQUIRES <that file>)` compares EncodeLatentDistribution /
// EncodeImageLatents with them (float32 on the CPU, 1e-5).
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/torch_compat.h"
#include "models/vae/autoencoder_kl_qwenimage.h"
#include "models/vae/autoencoder_kl_qwenimage_encoder.h"
#include "models/vae/qwenimage_down_block.h"
#include "models/vae/qwenimage_latents.h"
#include "pipeline/latents.h"
#include "tests/support/fixtures.h"
#include "tests/support/qwen_edit_tiny_folder.h"

namespace ditserve::vae {
namespace {

namespace F = torch::nn::functional;
using ::ditserve::testing::FixturesDir;
using ::ditserve::testing::LoadComponentEdited;
using ::ditserve::testing::LoadComponentFullFloat32;
using ::ditserve::testing::RelativeError;
using ::ditserve::testing::ValueOrAddFailure;
using Weights = std::map<std::string, torch::Tensor>;

std::string TinyDir() {
  return FixturesDir() + "/qwenimage-tiny/vae";
}

bool Mentions(const absl::Status& s, const std::string& text) {
  return std::string(s.message()).find(text) != std::string::npos;
}

AutoencoderKLQwenImageConfig TinyConfig() {
  return ValueOrAddFailure(LoadAutoencoderKLQwenImageConfig(TinyDir() + "/config.json"));
}

Weights TinyWeights() {
  return LoadComponentFullFloat32(TinyDir()).tensors();
}

sharding::ShardedStateDict Replicated(Weights t) {
  return sharding::ShardedStateDict(0, 1, std::move(t), {});
}

// Pixels in [-1, 1], (B, 3, 1, H, W) as the edit pipeline hands them to vae.encode; seeded.
torch::Tensor Pixels(int64_t b, int64_t h, int64_t w, uint64_t seed = 5) {
  auto gen = compat::SeededCpuGenerator(seed);
  return torch::rand({b, 3, 1, h, w}, gen, torch::TensorOptions().dtype(torch::kFloat)) * 2.0 - 1.0;
}

// --- The real VAE's layout on random weights (3 downsamplers: 8x) -----------------------------
// base_dim 4, z_dim 4, dim_mult [1, 2, 2, 2], num_res_blocks 2, temperal_downsample
// [false, true, true]: the default config's structure at a small width.

constexpr char kEightXJson[] = R"({"_class_name": "AutoencoderKLQwenImage", "base_dim": 4,
    "z_dim": 4, "dim_mult": [1, 2, 2, 2], "num_res_blocks": 2, "attn_scales": [],
    "temperal_downsample": [false, true, true], "dropout": 0.0, "input_channels": 3,
    "latents_mean": [0.5, -1.25, 0.75, 2.0], "latents_std": [1.5, 0.5, 2.5, 3.0]})";

AutoencoderKLQwenImageConfig EightXConfig() {
  return ValueOrAddFailure(ParseAutoencoderKLQwenImageConfig(kEightXJson));
}

// The encoder tensors of `config` as QwenImageEncoder3d.__init__ names them (no attention in
// down_blocks: attn_scales is []), random; "downsample3d" resamples get a time_conv too
// (tests/support/qwen_edit_tiny_folder.h's enumerator).
Weights RandomEncoderWeights(const AutoencoderKLQwenImageConfig& config, uint64_t seed) {
  return ::ditserve::testing::RandomQwenImageVaeWeights(
      config, seed, ::ditserve::testing::QwenImageVaeParts{/*encoder=*/true, /*decoder=*/false});
}

// --- The reference's first-chunk arithmetic, transcribed literally on 5-D tensors ------------
// AutoencoderKLQwenImage._encode of one frame: clear_cache() (every slot None), then
// self.encoder(x[:, :, :1], feat_cache=..., feat_idx=[0]) and self.quant_conv(out). Each
// QwenImageCausalConv3d below is called with its cache slot None (cache_x = None).

// QwenImageCausalConv3d.forward(x, None): F.pad(x, (p, p, p, p, 2 * pt, 0)) (zeros), conv3d.
torch::Tensor RefCausalConv(const Weights& w, const std::string& p, const torch::Tensor& x) {
  auto weight = w.at(p + ".weight");
  const int64_t pt = (weight.size(2) - 1) / 2, ps = weight.size(-1) / 2;
  auto padded = F::pad(x, F::PadFuncOptions({ps, ps, ps, ps, 2 * pt, 0}));
  return torch::conv3d(padded, weight, w.at(p + ".bias"));
}

// QwenImageRMS_norm: F.normalize(x, dim=1) * dim**0.5 * gamma (+ 0.0); float32 for half types.
torch::Tensor RefRms(const Weights& w, const std::string& p, const torch::Tensor& x) {
  const bool half = x.scalar_type() == torch::kBFloat16 || x.scalar_type() == torch::kHalf;
  auto n = F::normalize(half ? x.to(torch::kFloat) : x, F::NormalizeFuncOptions().dim(1))
               .to(x.scalar_type());
  return n * std::sqrt(static_cast<double>(x.size(1))) * w.at(p + ".gamma");
}

torch::Tensor RefResidual(const Weights& w, const std::string& p, const torch::Tensor& x) {
  auto h = w.count(p + ".conv_shortcut.weight") ? RefCausalConv(w, p + ".conv_shortcut", x) : x;
  auto y = RefCausalConv(w, p + ".conv1", torch::silu(RefRms(w, p + ".norm1", x)));
  y = RefCausalConv(w, p + ".conv2", torch::silu(RefRms(w, p + ".norm2", y)));
  return y + h;
}

// QwenImageAttentionBlock.forward; attention written out as softmax(q k^T / sqrt(C)) v.
torch::Tensor RefAttention(const Weights& w, const std::string& p, const torch::Tensor& x) {
  const int64_t b = x.size(0), c = x.size(1), t = x.size(2), h = x.size(3), wd = x.size(4);
  auto x4 = x.permute({0, 2, 1, 3, 4}).reshape({b * t, c, h, wd});
  x4 = RefRms(w, p + ".norm", x4);
  auto qkv = torch::conv2d(x4, w.at(p + ".to_qkv.weight"), w.at(p + ".to_qkv.bias"));
  qkv = qkv.reshape({b * t, 1, c * 3, -1}).permute({0, 1, 3, 2}).contiguous();
  auto parts = qkv.chunk(3, -1);
  auto scores = torch::matmul(parts[0], parts[1].transpose(-2, -1)) / std::sqrt(double(c));
  auto o = torch::matmul(torch::softmax(scores, -1), parts[2]);
  o = o.squeeze(1).permute({0, 2, 1}).reshape({b * t, c, h, wd});
  o = torch::conv2d(o, w.at(p + ".proj.weight"), w.at(p + ".proj.bias"));
  return o.view({b, t, c, h, wd}).permute({0, 2, 1, 3, 4}) + x;
}

// QwenImageResample.forward in "downsample2d" / "downsample3d" mode: per frame
// nn.ZeroPad2d((0, 1, 0, 1)) and Conv2d(stride 2); then, for "downsample3d", the first chunk finds
// feat_cache[idx] None, stores x.clone() there and does not call time_conv.
torch::Tensor RefDownsample(const Weights& w, const std::string& p, const torch::Tensor& x) {
  const int64_t b = x.size(0), c = x.size(1), t = x.size(2), h = x.size(3), wd = x.size(4);
  auto x4 = x.permute({0, 2, 1, 3, 4}).reshape({b * t, c, h, wd});
  x4 = F::pad(x4, F::PadFuncOptions({0, 1, 0, 1}));
  x4 = torch::conv2d(x4, w.at(p + ".resample.1.weight"), w.at(p + ".resample.1.bias"), 2);
  return x4.view({b, t, x4.size(1), x4.size(2), x4.size(3)}).permute({0, 2, 1, 3, 4});
}

// quant_conv(QwenImageEncoder3d(x)) for x (B, 3, 1, H, W), walking down_blocks as __init__ builds
// it (attn_scales []).
torch::Tensor RefMoments(const Weights& w, const AutoencoderKLQwenImageConfig& config,
                         const torch::Tensor& x) {
  auto h = RefCausalConv(w, "encoder.conv_in", x);
  int index = 0;
  for (size_t i = 0; i < config.dim_mult.size(); ++i) {
    for (int64_t j = 0; j < config.num_res_blocks; ++j) {
      h = RefResidual(w, absl::StrCat("encoder.down_blocks.", index++), h);
    }
    if (i + 1 != config.dim_mult.size()) {
      h = RefDownsample(w, absl::StrCat("encoder.down_blocks.", index++), h);
    }
  }
  h = RefResidual(w, "encoder.mid_block.resnets.0", h);
  h = RefAttention(w, "encoder.mid_block.attentions.0", h);
  h = RefResidual(w, "encoder.mid_block.resnets.1", h);
  h = RefCausalConv(w, "encoder.conv_out", torch::silu(RefRms(w, "encoder.norm_out", h)));
  return RefCausalConv(w, "quant_conv", h);
}

// --- Config --------------------------------------------------------------------------------

TEST(QwenImageVaeEncoderConfig, EncoderPlanAndAttnScales) {
  AutoencoderKLQwenImageConfig tiny = TinyConfig();
  EXPECT_EQ(tiny.encoder_dims(), (std::vector<int64_t>{4, 4, 8, 8}));
  EXPECT_EQ(tiny.scale_factor(), 4);
  EXPECT_TRUE(tiny.attn_scales.empty());
  auto defaults = ParseAutoencoderKLQwenImageConfig("{}");
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_EQ(defaults->encoder_dims(), (std::vector<int64_t>{96, 96, 192, 384, 384}));
  EXPECT_TRUE(defaults->attn_scales.empty());
  auto listed = ParseAutoencoderKLQwenImageConfig(R"({"attn_scales": [0.5]})");
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(listed->attn_scales, (std::vector<double>{0.5}));
  auto bad = ParseAutoencoderKLQwenImageConfig(R"({"attn_scales": ["half"]})");
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(Mentions(bad.status(), "attn_scales")) << bad.status();
}

// --- Building blocks -------------------------------------------------------------------------

// nn.ZeroPad2d((0, 1, 0, 1)) then Conv2d(3, stride 2): an explicit sum over the kernel window, so
// the pad's sides are pinned (one zero column right, one zero row below).
TEST(QwenDownBlock, DownsamplePadsRightAndBottom) {
  torch::manual_seed(21);
  const int64_t c = 2, h = 6, w = 4;
  auto weight = torch::randn({c, c, 3, 3});
  auto bias = torch::randn({c});
  sharding::ShardedStateDict state(
      0, 1, {{"list.0.resample.1.weight", weight}, {"list.0.resample.1.bias", bias}}, {});
  auto blk = QwenDownBlock::Load(state, "list", 0, c, c, /*num_res_blocks=*/0,
                                 QwenDownsampleMode::kDownsample3d);
  ASSERT_TRUE(blk.ok()) << blk.status();
  EXPECT_EQ(blk->num_layers(), 1);
  auto x = torch::randn({1, c, h, w});
  auto out = blk->Forward(x);
  ASSERT_EQ(out.sizes(), (torch::IntArrayRef{1, c, h / 2, w / 2}));
  auto xa = x.accessor<float, 4>();
  auto wa = weight.accessor<float, 4>();
  for (int64_t o = 0; o < c; ++o) {
    for (int64_t i = 0; i < h / 2; ++i) {
      for (int64_t j = 0; j < w / 2; ++j) {
        double sum = bias[o].item<double>();
        for (int64_t ci = 0; ci < c; ++ci) {
          for (int64_t ky = 0; ky < 3; ++ky) {
            for (int64_t kx = 0; kx < 3; ++kx) {
              const int64_t y = 2 * i + ky, xx = 2 * j + kx;
              if (y < h && xx < w) sum += double{wa[o][ci][ky][kx]} * xa[0][ci][y][xx];
            }
          }
        }
        EXPECT_NEAR(out[0][o][i][j].item<double>(), sum, 1e-5) << o << " " << i << " " << j;
      }
    }
  }
}

// A stage reads its layers from its first index of the flat down_blocks list.
TEST(QwenDownBlock, StagesTakeConsecutiveEntriesOfTheFlatList) {
  const Weights w = TinyWeights();
  auto stage1 = QwenDownBlock::Load(Replicated(w), "encoder.down_blocks", 2, 4, 8, 1,
                                    QwenDownsampleMode::kDownsample3d);
  ASSERT_TRUE(stage1.ok()) << stage1.status();
  EXPECT_EQ(stage1->num_layers(), 2);
  torch::manual_seed(22);
  auto x = torch::randn({2, 4, 1, 6, 10});
  auto expected =
      RefDownsample(w, "encoder.down_blocks.3", RefResidual(w, "encoder.down_blocks.2", x));
  EXPECT_LT(RelativeError(stage1->Forward(x.squeeze(2)), expected.squeeze(2)), 1e-6);
  auto last = QwenDownBlock::Load(Replicated(w), "encoder.down_blocks", 4, 8, 8, 1,
                                  QwenDownsampleMode::kNone);
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ(last->num_layers(), 1);
}

// --- The whole encode against the transcription ----------------------------------------------

TEST(QwenImageVaeEncoder, TinyFixtureMatchesTheFirstChunkArithmetic) {
  const Weights w = TinyWeights();
  const AutoencoderKLQwenImageConfig config = TinyConfig();
  auto vae = AutoencoderKLQwenImage::Create(config, Replicated(w));
  ASSERT_TRUE(vae.ok()) << vae.status();
  ASSERT_TRUE(vae->has_encoder());
  for (auto [h, wd] : {std::pair<int64_t, int64_t>{32, 32}, {48, 64}}) {
    auto x = Pixels(2, h, wd);
    auto moments = vae->encoder().EncodeMoments(x);
    ASSERT_TRUE(moments.ok()) << moments.status();
    auto expected = RefMoments(w, config, x);
    ASSERT_EQ(moments->sizes(), expected.sizes());
    EXPECT_EQ(moments->sizes(), (torch::IntArrayRef{2, 8, 1, h / 4, wd / 4}));
    const double err = RelativeError(*moments, expected);
    EXPECT_LT(err, 1e-6) << h << "x" << wd;
    std::cout << "[transcription] tiny encode " << h << "x" << wd << ": rel err " << err << "\n";
  }
}

TEST(QwenImageVaeEncoder, EightXLayoutMatchesTheFirstChunkArithmetic) {
  const AutoencoderKLQwenImageConfig config = EightXConfig();
  EXPECT_EQ(config.scale_factor(), 8);
  const Weights w = RandomEncoderWeights(config, 23);
  auto enc = AutoencoderKLQwenImageEncoder::Create(config, Replicated(w));
  ASSERT_TRUE(enc.ok()) << enc.status();
  for (auto [h, wd] : {std::pair<int64_t, int64_t>{32, 32}, {48, 64}}) {
    auto x = Pixels(1, h, wd, 7);
    auto moments = enc->EncodeMoments(x);
    ASSERT_TRUE(moments.ok()) << moments.status();
    EXPECT_EQ(moments->sizes(), (torch::IntArrayRef{1, 8, 1, h / 8, wd / 8}));
    EXPECT_LT(RelativeError(*moments, RefMoments(w, config, x)), 1e-6) << h << "x" << wd;
    auto mode = enc->EncodeMode(x);
    ASSERT_TRUE(mode.ok()) << mode.status();
    EXPECT_EQ(mode->sizes(), (torch::IntArrayRef{1, 4, 1, h / 8, wd / 8}));
  }
  // The first frame never runs the "downsample3d" resamples' time_conv: it is not needed.
  Weights no_time_conv = w;
  for (auto it = no_time_conv.begin(); it != no_time_conv.end();) {
    it =
        it->first.find(".time_conv.") != std::string::npos ? no_time_conv.erase(it) : std::next(it);
  }
  ASSERT_LT(no_time_conv.size(), w.size());
  EXPECT_TRUE(AutoencoderKLQwenImageEncoder::Create(config, Replicated(no_time_conv)).ok());
}

// --- Posterior, normalisation, packing ----------------------------------------------------

TEST(QwenImageVaeEncoder, ModeIsTheMeanHalfOfTheMoments) {
  auto vae = AutoencoderKLQwenImage::Create(TinyConfig(), LoadComponentFullFloat32(TinyDir()));
  ASSERT_TRUE(vae.ok()) << vae.status();
  auto x = Pixels(2, 32, 32);
  auto moments = vae->encoder().EncodeMoments(x);
  auto dist = vae->EncodeLatentDistribution(x);
  auto mode = vae->EncodeMode(x);
  ASSERT_TRUE(moments.ok() && dist.ok() && mode.ok());
  // DiagonalGaussianDistribution: mean, logvar = torch.chunk(parameters, 2, dim=1).
  auto halves = moments->chunk(2, 1);
  EXPECT_TRUE(torch::equal(*mode, halves[0]));
  EXPECT_TRUE(torch::equal(dist->mean, halves[0]));
  EXPECT_EQ(dist->mean.sizes(), (torch::IntArrayRef{2, 4, 1, 8, 8}));
  EXPECT_TRUE(torch::equal(dist->std, torch::exp(0.5 * torch::clamp(halves[1], -30.0, 20.0))));
  // The logvar half is not the mean half (the split is along the channels, not a copy).
  EXPECT_FALSE(torch::equal(halves[0], halves[1]));
}

TEST(QwenImageVaeEncoder, ImageLatentsAreTheNormalisedModePacked) {
  const AutoencoderKLQwenImageConfig config = TinyConfig();
  auto vae = AutoencoderKLQwenImage::Create(config, LoadComponentFullFloat32(TinyDir()));
  ASSERT_TRUE(vae.ok()) << vae.status();
  auto x = Pixels(1, 48, 64);
  auto mode = vae->EncodeMode(x);
  auto latents = vae->EncodeImageLatents(x);
  ASSERT_TRUE(mode.ok() && latents.ok()) << latents.status();
  ASSERT_EQ(latents->sizes(), (torch::IntArrayRef{1, 4, 1, 12, 16}));
  // _encode_vae_image: (image_latents - latents_mean) / latents_std, constants from config.json.
  std::vector<float> mean(config.latents_mean.begin(), config.latents_mean.end());
  std::vector<float> std(config.latents_std.begin(), config.latents_std.end());
  auto m = torch::tensor(mean).view({1, 4, 1, 1, 1});
  auto s = torch::tensor(std).view({1, 4, 1, 1, 1});
  EXPECT_TRUE(torch::equal(*latents, (*mode - m) / s));
  EXPECT_EQ(config.latents_mean[0], 0.5542);  // the fixture's own values, not the defaults
  // _pack_latents (the pipeline's PackLatents of the frame): view (B, C, h/2, 2, w/2, 2),
  // permute (0, 2, 4, 1, 3, 5), reshape.
  auto packed = pipeline::PackLatents(latents->select(2, 0));
  ASSERT_TRUE(packed.ok()) << packed.status();
  auto expected = latents->contiguous()
                      .view({1, 4, 6, 2, 8, 2})
                      .permute({0, 2, 4, 1, 3, 5})
                      .reshape({1, 6 * 8, 16});
  EXPECT_TRUE(torch::equal(*packed, expected));
  auto unpacked = UnpackQwenImageTokens(*packed, 12, 16);
  ASSERT_TRUE(unpacked.ok());
  EXPECT_TRUE(torch::equal(*unpacked, *latents));
  // Packing needs an even latent grid: 36 px is 9 latents with the 4x VAE.
  auto nine = vae->EncodeImageLatents(Pixels(1, 36, 32));
  ASSERT_TRUE(nine.ok()) << nine.status();
  EXPECT_FALSE(pipeline::PackLatents(nine->select(2, 0)).ok());
  EXPECT_FALSE(NormalizeQwenImageLatents(torch::zeros({1, 3, 1, 4, 4}), config.latents_mean,
                                         config.latents_std)
                   .ok());
}

// --- Inputs, determinism, batches ---------------------------------------------------------

TEST(QwenImageVaeEncoder, DeterministicAndIndependentOfBatchAndLayout) {
  auto vae = AutoencoderKLQwenImage::Create(TinyConfig(), LoadComponentFullFloat32(TinyDir()));
  ASSERT_TRUE(vae.ok()) << vae.status();
  auto x = Pixels(3, 48, 64, 9);
  auto a = vae->EncodeImageLatents(x);
  auto b = vae->EncodeImageLatents(x);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(torch::equal(*a, *b));
  // (B, 3, H, W) and (B, 3, 1, H, W) are the same input.
  auto four_d = vae->EncodeImageLatents(x.squeeze(2));
  ASSERT_TRUE(four_d.ok()) << four_d.status();
  EXPECT_TRUE(torch::equal(*four_d, *a));
  // Each sample encodes independently of the batch; a float64 input is cast to the VAE dtype.
  auto one = vae->EncodeImageLatents(x.slice(0, 1, 2).to(torch::kDouble));
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->scalar_type(), torch::kFloat);
  EXPECT_LT(RelativeError(*one, a->slice(0, 1, 2)), 1e-6);
}

TEST(QwenImageVaeEncoder, RefusesBadPixels) {
  auto vae = AutoencoderKLQwenImage::Create(TinyConfig(), LoadComponentFullFloat32(TinyDir()));
  ASSERT_TRUE(vae.ok()) << vae.status();
  const torch::Tensor bad[] = {
      torch::Tensor(),                             // nothing
      torch::rand({3, 32, 32}),                    // no batch
      torch::rand({1, 4, 32, 32}),                 // 4 channels
      torch::rand({1, 3, 30, 32}),                 // not a multiple of the scale factor 4
      torch::rand({1, 3, 32, 0}),                  // empty
      torch::rand({0, 3, 1, 32, 32}),              // empty batch
      torch::zeros({1, 3, 32, 32}, torch::kByte),  // not floating
      torch::rand({1, 3, 1, 1, 32, 32}),           // 6-D
  };
  for (const auto& pixels : bad) {
    auto latents = vae->EncodeImageLatents(pixels);
    ASSERT_FALSE(latents.ok()) << (pixels.defined() ? c10::str(pixels.sizes()) : "undefined");
    EXPECT_EQ(latents.status().code(), absl::StatusCode::kInvalidArgument) << latents.status();
    EXPECT_TRUE(Mentions(latents.status(), "(B, 3, H, W)")) << latents.status();
  }
  auto video = vae->EncodeLatentDistribution(torch::rand({1, 3, 2, 32, 32}));
  ASSERT_FALSE(video.ok());
  EXPECT_EQ(video.status().code(), absl::StatusCode::kUnimplemented) << video.status();
}

// --- bfloat16 --------------------------------------------------------------------------------

TEST(QwenImageVaeEncoder, RunsInBfloat16) {
  // Weights rounded to bfloat16 for both, so that only the activations' rounding differs.
  Weights w = TinyWeights();
  for (auto& [k, v] : w) v = v.to(torch::kBFloat16);
  auto bf = AutoencoderKLQwenImage::Create(TinyConfig(), Replicated(w));
  for (auto& [k, v] : w) v = v.to(torch::kFloat);
  auto f32 = AutoencoderKLQwenImage::Create(TinyConfig(), Replicated(w));
  ASSERT_TRUE(f32.ok() && bf.ok()) << bf.status();
  auto x = Pixels(1, 48, 64, 13);
  auto a = f32->EncodeMode(x);
  auto b = bf->EncodeMode(x.to(torch::kBFloat16));
  ASSERT_TRUE(a.ok() && b.ok()) << b.status();
  EXPECT_EQ(b->scalar_type(), torch::kBFloat16);
  const double err = RelativeError(*b, *a);
  // The fixtures' bfloat16 bar (vae_qwenimage_test); about 0.003 here with LibTorch 1.13 on the
  // CPU.
  EXPECT_LT(err, 2e-2) << "bf16 rel err";
  std::cout << "[bf16] Qwen-Image VAE encode mode rel err " << err << "\n";
  // The normalisation runs in the VAE dtype: bfloat16 constants, bfloat16 arithmetic.
  auto latents = bf->EncodeImageLatents(x);
  ASSERT_TRUE(latents.ok()) << latents.status();
  EXPECT_EQ(latents->scalar_type(), torch::kBFloat16);
  const auto& c = bf->config();
  std::vector<float> mean(c.latents_mean.begin(), c.latents_mean.end());
  std::vector<float> std(c.latents_std.begin(), c.latents_std.end());
  auto m = torch::tensor(mean).view({1, 4, 1, 1, 1}).to(torch::kBFloat16);
  auto s = torch::tensor(std).view({1, 4, 1, 1, 1}).to(torch::kBFloat16);
  EXPECT_TRUE(torch::equal(*latents, (*b - m) / s));
}

// --- Loading ---------------------------------------------------------------------------------

TEST(QwenImageVaeEncoder, EncoderTensorsAreCheckedAndNamed) {
  for (const char* name : {"encoder.conv_in.weight", "encoder.down_blocks.3.resample.1.weight",
                           "encoder.down_blocks.2.conv_shortcut.weight",
                           "encoder.mid_block.attentions.0.norm.gamma", "quant_conv.weight"}) {
    auto misshaped =
        AutoencoderKLQwenImage::Create(TinyConfig(), LoadComponentEdited(TinyDir(), [&](auto& t) {
                                         auto& v = t.at(name);
                                         std::vector<int64_t> sizes = v.sizes().vec();
                                         sizes[0] += 1;
                                         v = torch::zeros(sizes);
                                       }));
    ASSERT_FALSE(misshaped.ok()) << name;
    EXPECT_EQ(misshaped.status().code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_TRUE(Mentions(misshaped.status(), name)) << misshaped.status();
  }
  for (const char* name : {"quant_conv.bias", "encoder.down_blocks.4.norm2.gamma"}) {
    auto missing = AutoencoderKLQwenImage::Create(
        TinyConfig(), LoadComponentEdited(TinyDir(), [&](auto& t) { t.erase(name); }));
    ASSERT_FALSE(missing.ok()) << name;
    EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound) << name;
    EXPECT_TRUE(Mentions(missing.status(), name)) << missing.status();
  }
}

TEST(QwenImageVaeEncoder, AttentionInTheDownPathIsRefused) {
  // Scales 1, 1/2, 1/4 for the tiny VAE's three stages: a listed one would add attention layers,
  // which diffusers' encoder cannot run; an unlisted scale changes nothing.
  AutoencoderKLQwenImageConfig config = TinyConfig();
  config.attn_scales = {0.5};
  auto refused = AutoencoderKLQwenImage::Create(config, LoadComponentFullFloat32(TinyDir()));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_TRUE(Mentions(refused.status(), "attn_scales")) << refused.status();
  config.attn_scales = {0.125};
  EXPECT_TRUE(AutoencoderKLQwenImage::Create(config, LoadComponentFullFloat32(TinyDir())).ok());
}

TEST(QwenImageVaeEncoder, DecoderOnlyVaeLoadsDecodesAndCannotEncode) {
  auto full = AutoencoderKLQwenImage::Create(TinyConfig(), LoadComponentFullFloat32(TinyDir()));
  auto decoder_only =
      AutoencoderKLQwenImage::Create(TinyConfig(), LoadComponentEdited(TinyDir(), [](auto& t) {
                                       for (auto it = t.begin(); it != t.end();) {
                                         const bool enc = it->first.rfind("encoder.", 0) == 0 ||
                                                          it->first.rfind("quant_conv.", 0) == 0;
                                         it = enc ? t.erase(it) : std::next(it);
                                       }
                                     }));
  ASSERT_TRUE(full.ok()) << full.status();
  ASSERT_TRUE(decoder_only.ok()) << decoder_only.status();
  EXPECT_TRUE(full->has_encoder());
  EXPECT_FALSE(decoder_only->has_encoder());
  auto x = Pixels(1, 32, 32);
  for (auto status :
       {decoder_only->EncodeLatentDistribution(x).status(), decoder_only->EncodeMode(x).status(),
        decoder_only->EncodeImageLatents(x).status()}) {
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
    EXPECT_TRUE(Mentions(status, "no encoder")) << status;
  }
  // The decoder is the same with or without the encoder.
  torch::manual_seed(31);
  auto z = torch::randn({1, 4, 1, 6, 8});
  auto a = full->Decode(z);
  auto b = decoder_only->Decode(z);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(torch::equal(*a, *b));
  // The encoder's latents round-trip through the decoder's shapes.
  auto latents = full->EncodeImageLatents(x);
  ASSERT_TRUE(latents.ok());
  auto image = full->DecodeLatents(*latents);
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(image->sizes(), (torch::IntArrayRef{1, 3, 32, 32}));
}

}  // namespace
}  // namespace ditserve::vae
