// The VAE encoders (FLUX.1's AutoencoderKL, FLUX.2's AutoencoderKLFlux2), two executables from
// this file:
//   vae_encoder_test: config fields, the Downsample2D padding against an explicit sum, the
//     DiagonalGaussianDistribution arithmetic, the pipelines' latent maps (img2img / Kontext
//     scaling, FLUX.2's patchify + BatchNorm normalisation), loading and input refusals on the tiny
//     fixture VAEs (flux1-tiny/vae, flux2-tiny/vae);
//   vae_encoder_parity_test (DITSERVE_VAE_ENCODER_PARITY; registered once the GPU host has made
//     the data): parity with diffusers (tests/fixtures/image-inputs: flux1-vae, flux2-vae,
//     image_reference.safetensors from make_image_fixtures.py), float32 on the CPU.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/torch_compat.h"
#include "models/vae/autoencoder_kl.h"
#include "models/vae/autoencoder_kl_encoder.h"
#include "models/vae/autoencoder_kl_flux2.h"
#include "models/vae/down_encoder_block.h"
#include "models/vae/flux2_latents.h"
#include "sharding/torch_tensor.h"
#include "tests/support/fixtures.h"

namespace ditserve::vae {
namespace {

using ::ditserve::testing::FixturesDir;
using ::ditserve::testing::LoadComponentEdited;
using ::ditserve::testing::LoadComponentFullFloat32;
using ::ditserve::testing::RelativeError;
using ::ditserve::testing::ValueOrAddFailure;

// The tests on the tiny fixture VAEs (vae_encoder_test) ------------------------------------------
#ifndef DITSERVE_VAE_ENCODER_PARITY

std::string Flux1TinyDir() {
  return FixturesDir() + "/flux1-tiny/vae";
}
std::string Flux2TinyDir() {
  return FixturesDir() + "/flux2-tiny/vae";
}

bool Mentions(const absl::Status& s, const std::string& text) {
  return std::string(s.message()).find(text) != std::string::npos;
}

AutoencoderKLConfig Flux1TinyConfig() {
  return ValueOrAddFailure(LoadAutoencoderKLConfig(Flux1TinyDir() + "/config.json"));
}
AutoencoderKLFlux2Config Flux2TinyConfig() {
  return ValueOrAddFailure(LoadAutoencoderKLFlux2Config(Flux2TinyDir() + "/config.json"));
}

// An image in [-1, 1] (B, 3, h, w), seeded.
torch::Tensor Image(int64_t b, int64_t h, int64_t w, uint64_t seed = 3) {
  auto gen = compat::SeededCpuGenerator(seed);
  return torch::rand({b, 3, h, w}, gen, torch::TensorOptions().dtype(torch::kFloat)) * 2.0 - 1.0;
}

// --- Config ----------------------------------------------------------------------------------

TEST(VaeEncoderConfig, AutoencoderKLFields) {
  AutoencoderKLConfig c = Flux1TinyConfig();
  VaeEncoderConfig e = c.encoder();
  EXPECT_EQ(e.in_channels, 3);
  EXPECT_EQ(e.latent_channels, 4);
  EXPECT_EQ(e.block_out_channels, (std::vector<int64_t>{8, 16}));
  EXPECT_EQ(e.down_block_types, (std::vector<std::string>(2, "DownEncoderBlock2D")));
  EXPECT_EQ(e.layers_per_block, 1);
  EXPECT_EQ(e.norm_num_groups, 4);
  EXPECT_FALSE(e.use_quant_conv);
  EXPECT_TRUE(e.mid_block_add_attention);
  EXPECT_EQ(e.scale_factor(), 2);

  // AutoencoderKL.__init__ defaults.
  auto d = ParseAutoencoderKLConfig("{}");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(d->use_quant_conv);
  EXPECT_EQ(d->in_channels, 3);
  EXPECT_EQ(d->down_block_types, (std::vector<std::string>{"DownEncoderBlock2D"}));

  auto bad = ParseAutoencoderKLConfig(R"({"down_block_types": ["CrossAttnDownBlock2D"]})");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Mentions(bad.status(), "down block type 'CrossAttnDownBlock2D'")) << bad.status();
  bad = ParseAutoencoderKLConfig(R"({"use_quant_conv": "yes"})");
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(Mentions(bad.status(), "use_quant_conv")) << bad.status();
  bad = ParseAutoencoderKLConfig(R"({"in_channels": 0})");
  EXPECT_FALSE(bad.ok());
}

TEST(VaeEncoderConfig, AutoencoderKLFlux2Fields) {
  AutoencoderKLFlux2Config c = Flux2TinyConfig();
  EXPECT_EQ(c.encoder.block_out_channels, (std::vector<int64_t>{8, 16}));
  EXPECT_EQ(c.encoder.latent_channels, 4);
  EXPECT_TRUE(c.encoder.use_quant_conv);
  EXPECT_EQ(c.encoder.scale_factor(), c.pipeline_vae_scale_factor());

  // AutoencoderKLFlux2.__init__ defaults.
  auto d = ParseAutoencoderKLFlux2Config("{}");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->encoder.block_out_channels, (std::vector<int64_t>{128, 256, 512, 512}));
  EXPECT_EQ(d->encoder.down_block_types, (std::vector<std::string>(4, "DownEncoderBlock2D")));
  EXPECT_EQ(d->encoder.latent_channels, 32);
  EXPECT_EQ(d->encoder.layers_per_block, 2);
  EXPECT_TRUE(d->encoder.use_quant_conv);

  // The encoder keeps block_out_channels when the decoder has its own.
  auto sep = ParseAutoencoderKLFlux2Config(R"({"block_out_channels": [32, 64],
      "decoder_block_out_channels": [16, 32], "norm_num_groups": 8, "use_quant_conv": false,
      "down_block_types": ["DownEncoderBlock2D", "DownEncoderBlock2D"],
      "up_block_types": ["UpDecoderBlock2D", "UpDecoderBlock2D"]})");
  ASSERT_TRUE(sep.ok()) << sep.status();
  EXPECT_EQ(sep->encoder.block_out_channels, (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(sep->decoder.block_out_channels, (std::vector<int64_t>{16, 32}));
  EXPECT_FALSE(sep->encoder.use_quant_conv);

  auto bad = ParseAutoencoderKLFlux2Config(R"({"down_block_types": ["DownBlock2D"]})");
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(Mentions(bad.status(), "down block type 'DownBlock2D'")) << bad.status();
}

// --- Building blocks ---------------------------------------------------------------------------

// Downsample2D(padding=0): zero pad one column right and one row below, 3x3 conv, stride 2; an
// explicit sum over the kernel window, so the pad's sides are pinned.
TEST(DownEncoderBlock, DownsamplePadsRightAndBottom) {
  torch::manual_seed(11);
  const int64_t c = 2, h = 6, w = 4;
  auto weight = torch::randn({c, c, 3, 3});
  auto bias = torch::randn({c});
  sharding::ShardedStateDict state(
      0, 1, {{"blk.downsamplers.0.conv.weight", weight}, {"blk.downsamplers.0.conv.bias", bias}},
      {});
  auto blk = DownEncoderBlock::Load(state, "blk", c, c, /*num_resnets=*/0,
                                    /*add_downsample=*/true, /*groups=*/1, VaeActivation::kSilu);
  ASSERT_TRUE(blk.ok()) << blk.status();
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

TEST(LatentDistribution, FromMomentsClampsLogvar) {
  auto mean = torch::randn({2, 3, 2, 2});
  auto logvar = torch::tensor({-40.0f, -30.0f, -1.0f, 0.0f, 5.0f, 20.0f, 25.0f, 100.0f})
                    .repeat({3})
                    .view({1, 3, 2, 4})
                    .reshape({2, 3, 2, 2});
  auto dist = LatentDistributionFromMoments(torch::cat({mean, logvar}, 1));
  ASSERT_TRUE(dist.ok()) << dist.status();
  EXPECT_TRUE(torch::equal(dist->mean, mean));
  EXPECT_TRUE(torch::allclose(dist->std, torch::exp(0.5 * logvar.clamp(-30.0, 20.0))));
  EXPECT_FALSE(LatentDistributionFromMoments(torch::randn({1, 3, 2, 2})).ok());
  EXPECT_FALSE(LatentDistributionFromMoments(torch::randn({6, 2, 2})).ok());
}

TEST(LatentDistribution, SampleIsMeanPlusStdTimesEps) {
  LatentDistribution dist{torch::randn({1, 4, 3, 3}), torch::rand({1, 4, 3, 3}) + 0.5};
  auto eps = torch::randn({1, 4, 3, 3}, torch::kDouble);
  auto z = SampleLatent(dist, eps);
  ASSERT_TRUE(z.ok()) << z.status();
  EXPECT_EQ(z->scalar_type(), torch::kFloat);
  EXPECT_TRUE(torch::equal(*z, dist.mean + dist.std * eps.to(torch::kFloat)));
  auto wrong = SampleLatent(dist, torch::randn({1, 4, 3, 2}));
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(SampleLatent(dist, torch::zeros({1, 4, 3, 3}, torch::kLong)).ok());
}

TEST(Flux2Latents, PatchifyInvertsUnpatchifyAndNormalizeInvertsDenormalize) {
  auto z = torch::randn({2, 3, 4, 6});
  auto p = PatchifyFlux2Latents(z);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->sizes(), (torch::IntArrayRef{2, 12, 2, 3}));
  // Channel c * 4 + dy * 2 + dx holds pixel (2y + dy, 2x + dx) of channel c.
  EXPECT_EQ((*p)[1][2 * 4 + 1 * 2 + 0][1][2].item<float>(), z[1][2][3][4].item<float>());
  auto back = UnpatchifyFlux2Latents(*p);
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(torch::equal(*back, z));
  EXPECT_FALSE(PatchifyFlux2Latents(torch::randn({1, 3, 5, 4})).ok());
  EXPECT_FALSE(PatchifyFlux2Latents(torch::randn({3, 4, 4})).ok());

  auto mean = torch::randn({12});
  auto var = torch::rand({12}) + 0.1;
  auto n = NormalizeFlux2Latents(*p, mean, var, 1e-4);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_TRUE(torch::allclose(
      *n, (*p - mean.view({1, -1, 1, 1})) / torch::sqrt(var.view({1, -1, 1, 1}) + 1e-4)));
  auto d = DenormalizeFlux2Latents(*n, mean, var, 1e-4);
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(torch::allclose(*d, *p, 1e-5, 1e-5));
  EXPECT_FALSE(NormalizeFlux2Latents(*p, torch::randn({4}), var, 1e-4).ok());
}

// --- FLUX.1's AutoencoderKL on the tiny fixture VAE (no parity here) --------------------------

TEST(AutoencoderKL, TinyEncodeShapesAndScaling) {
  auto vae = AutoencoderKL::Create(Flux1TinyConfig(), LoadComponentFullFloat32(Flux1TinyDir()));
  ASSERT_TRUE(vae.ok()) << vae.status();
  ASSERT_TRUE(vae->has_encoder());
  EXPECT_EQ(vae->scale_factor(), 2);
  auto image = Image(2, 16, 12);
  auto dist = vae->EncodeLatentDistribution(image);
  ASSERT_TRUE(dist.ok()) << dist.status();
  EXPECT_EQ(dist->mean.sizes(), (torch::IntArrayRef{2, 4, 8, 6}));
  EXPECT_EQ(dist->std.sizes(), (torch::IntArrayRef{2, 4, 8, 6}));
  EXPECT_GT(dist->std.min().item<float>(), 0.0f);
  EXPECT_EQ(dist->mean.scalar_type(), torch::kFloat);

  // Each sample encodes independently of the batch; a float64 image is cast to the VAE dtype.
  auto one = vae->EncodeLatentDistribution(image.slice(0, 1, 2).to(torch::kDouble));
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_LT(RelativeError(one->mean, dist->mean.slice(0, 1, 2)), 1e-6);
  EXPECT_LT(RelativeError(one->std, dist->std.slice(0, 1, 2)), 1e-6);

  // Kontext: (mode - shift) * scale; img2img: the same map of a sample.
  auto kontext = vae->ImageLatents(*dist);
  ASSERT_TRUE(kontext.ok()) << kontext.status();
  EXPECT_TRUE(torch::equal(*kontext, (dist->mean - 0.1159) * 0.3611));
  auto z = SampleLatent(*dist, torch::randn(dist->mean.sizes(), compat::SeededCpuGenerator(1)));
  ASSERT_TRUE(z.ok());
  auto img2img = vae->ImageLatents(*z);
  ASSERT_TRUE(img2img.ok());
  EXPECT_TRUE(torch::equal(*img2img, (*z - 0.1159) * 0.3611));
  EXPECT_FALSE(vae->ImageLatents(torch::randn({1, 3, 4, 4})).ok());

  // The decoder still answers as before.
  auto decoded = vae->DecodeLatents(*kontext);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->sizes(), (torch::IntArrayRef{2, 3, 16, 12}));
  auto direct = vae->decoder().DecodeLatents(*kontext);
  ASSERT_TRUE(direct.ok());
  EXPECT_TRUE(torch::equal(*decoded, *direct));
}

TEST(AutoencoderKL, RefusesBadImages) {
  auto vae = AutoencoderKL::Create(Flux1TinyConfig(), LoadComponentFullFloat32(Flux1TinyDir()));
  ASSERT_TRUE(vae.ok()) << vae.status();
  const torch::Tensor bad[] = {
      torch::Tensor(),                             // nothing
      torch::rand({3, 16, 16}),                    // no batch
      torch::rand({1, 4, 16, 16}),                 // 4 channels
      torch::rand({1, 3, 15, 16}),                 // odd height (scale factor 2)
      torch::rand({1, 3, 16, 0}),                  // empty
      torch::rand({0, 3, 16, 16}),                 // empty batch
      torch::zeros({1, 3, 16, 16}, torch::kByte),  // not floating
  };
  for (const auto& image : bad) {
    auto dist = vae->EncodeLatentDistribution(image);
    ASSERT_FALSE(dist.ok()) << (image.defined() ? c10::str(image.sizes()) : "undefined");
    EXPECT_EQ(dist.status().code(), absl::StatusCode::kInvalidArgument) << dist.status();
    EXPECT_TRUE(Mentions(dist.status(), "(B, 3, H, W)")) << dist.status();
  }
}

TEST(AutoencoderKL, EncoderTensorsAreCheckedAndNamed) {
  const std::string name = "encoder.down_blocks.0.resnets.0.conv1.weight";
  auto missing = AutoencoderKL::Create(
      Flux1TinyConfig(), LoadComponentEdited(Flux1TinyDir(), [&](auto& t) { t.erase(name); }));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Mentions(missing.status(), name)) << missing.status();

  const std::string mid = "encoder.mid_block.attentions.0.to_q.weight";
  auto misshaped =
      AutoencoderKL::Create(Flux1TinyConfig(), LoadComponentEdited(Flux1TinyDir(), [&](auto& t) {
                              t[mid] = torch::zeros({16, 8});
                            }));
  ASSERT_FALSE(misshaped.ok());
  EXPECT_EQ(misshaped.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Mentions(misshaped.status(), mid)) << misshaped.status();

  // use_quant_conv needs quant_conv (absent from the FLUX VAE, whose config turns it off).
  AutoencoderKLConfig with_quant = Flux1TinyConfig();
  with_quant.use_quant_conv = true;
  auto no_quant = AutoencoderKL::Create(with_quant, LoadComponentFullFloat32(Flux1TinyDir()));
  ASSERT_FALSE(no_quant.ok());
  EXPECT_TRUE(Mentions(no_quant.status(), "quant_conv.weight")) << no_quant.status();

  // down_block_types must name one block per block_out_channels entry.
  AutoencoderKLConfig short_types = Flux1TinyConfig();
  short_types.down_block_types.pop_back();
  auto refused = AutoencoderKL::Create(short_types, LoadComponentFullFloat32(Flux1TinyDir()));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Mentions(refused.status(), "down blocks")) << refused.status();
}

TEST(AutoencoderKL, WithoutEncoderTensorsDecodesAndTakesNoImage) {
  auto vae = AutoencoderKL::Create(
      Flux1TinyConfig(), LoadComponentEdited(Flux1TinyDir(), [](auto& t) {
        for (auto it = t.begin(); it != t.end();) {
          it = it->first.rfind("encoder.", 0) == 0 ? t.erase(it) : std::next(it);
        }
      }));
  ASSERT_TRUE(vae.ok()) << vae.status();
  EXPECT_FALSE(vae->has_encoder());
  auto dist = vae->EncodeLatentDistribution(Image(1, 16, 16));
  ASSERT_FALSE(dist.ok());
  EXPECT_EQ(dist.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(vae->DecodeLatents(torch::randn({1, 4, 8, 8})).ok());
}

// --- FLUX.2's AutoencoderKLFlux2 on the tiny fixture VAE (no parity here) ----------------------

TEST(AutoencoderKLFlux2Encode, TinyReferenceIsPatchifiedNormalizedMode) {
  const AutoencoderKLFlux2Config config = Flux2TinyConfig();
  const auto state = LoadComponentFullFloat32(Flux2TinyDir());
  auto vae = AutoencoderKLFlux2::Create(config, state);
  ASSERT_TRUE(vae.ok()) << vae.status();
  ASSERT_TRUE(vae->has_encoder());
  auto image = Image(1, 16, 24);
  auto dist = vae->EncodeLatentDistribution(image);
  ASSERT_TRUE(dist.ok()) << dist.status();
  EXPECT_EQ(dist->mean.sizes(), (torch::IntArrayRef{1, 4, 8, 12}));
  auto ref = vae->EncodeReference(image);
  ASSERT_TRUE(ref.ok()) << ref.status();
  ASSERT_EQ(ref->sizes(), (torch::IntArrayRef{1, 16, 4, 6}));
  auto mean = state.Get("bn.running_mean").value().view({1, -1, 1, 1});
  auto var = state.Get("bn.running_var").value().view({1, -1, 1, 1});
  auto expected =
      (PatchifyFlux2Latents(dist->mean).value() - mean) / torch::sqrt(var + config.batch_norm_eps);
  EXPECT_LT(RelativeError(*ref, expected), 1e-6);

  // The patchify needs an even latent grid: 2 * scale factor = 4 pixels per side.
  auto odd = vae->EncodeReference(Image(1, 16, 18));
  ASSERT_FALSE(odd.ok());
  EXPECT_EQ(odd.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Mentions(odd.status(), "multiples of 4")) << odd.status();
  EXPECT_TRUE(vae->EncodeLatentDistribution(Image(1, 16, 18)).ok());
}

TEST(AutoencoderKLFlux2Encode, EncoderIsOptionalButCheckedWhenPresent) {
  const std::string name = "quant_conv.weight";
  auto missing = AutoencoderKLFlux2::Create(
      Flux2TinyConfig(), LoadComponentEdited(Flux2TinyDir(), [&](auto& t) { t.erase(name); }));
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(Mentions(missing.status(), name)) << missing.status();

  const std::string conv = "encoder.down_blocks.0.downsamplers.0.conv.weight";
  auto misshaped = AutoencoderKLFlux2::Create(Flux2TinyConfig(),
                                              LoadComponentEdited(Flux2TinyDir(), [&](auto& t) {
                                                t[conv] = torch::zeros({8, 8, 1, 1});
                                              }));
  ASSERT_FALSE(misshaped.ok());
  EXPECT_TRUE(Mentions(misshaped.status(), conv)) << misshaped.status();

  auto decoder_only = AutoencoderKLFlux2::Create(
      Flux2TinyConfig(), LoadComponentEdited(Flux2TinyDir(), [](auto& t) {
        for (auto it = t.begin(); it != t.end();) {
          const bool enc =
              it->first.rfind("encoder.", 0) == 0 || it->first.rfind("quant_conv.", 0) == 0;
          it = enc ? t.erase(it) : std::next(it);
        }
      }));
  ASSERT_TRUE(decoder_only.ok()) << decoder_only.status();
  EXPECT_FALSE(decoder_only->has_encoder());
  auto ref = decoder_only->EncodeReference(Image(1, 16, 16));
  ASSERT_FALSE(ref.ok());
  EXPECT_EQ(ref.status().code(), absl::StatusCode::kFailedPrecondition);
}

#else  // DITSERVE_VAE_ENCODER_PARITY: vae_encoder_parity_test -----------------------------------

std::string ImageInputsDir() {
  return FixturesDir() + "/image-inputs";
}

// Every tensor of tests/fixtures/image-inputs/image_reference.safetensors, loaded once (the test
// is registered only once the file exists); null (and a failure) if it cannot be read.
const std::map<std::string, torch::Tensor>* ImageReference() {
  static const auto* ref = []() -> const std::map<std::string, torch::Tensor>* {
    auto all = sharding::ReadAllTensors(ImageInputsDir() + "/image_reference.safetensors");
    if (!all.ok()) {
      ADD_FAILURE() << all.status();
      return nullptr;
    }
    return new std::map<std::string, torch::Tensor>(std::move(*all));
  }();
  return ref;
}

torch::Tensor ImageRef(const std::string& name) {
  const auto* ref = ImageReference();
  if (ref == nullptr) return {};
  auto it = ref->find(name);
  if (it == ref->end()) {
    ADD_FAILURE() << "image_reference.safetensors has no tensor " << name;
    return {};
  }
  return it->second;
}

#define REQUIRE_IMAGE_REFERENCE() \
  if (ImageReference() == nullptr) FAIL() << "cannot read image_reference.safetensors"

double TimeMs(const std::function<void()>& fn, int runs) {
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < runs; ++i) fn();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
             .count() /
         runs;
}

// --- Parity with diffusers (tests/fixtures/image-inputs) ---------------------------------------

TEST(VaeEncoderParity, Flux1LatentDistributionAndImageLatents) {
  REQUIRE_IMAGE_REFERENCE();
  const std::string dir = ImageInputsDir() + "/flux1-vae";
  auto config = LoadAutoencoderKLConfig(dir + "/config.json");
  ASSERT_TRUE(config.ok()) << config.status();
  auto vae = AutoencoderKL::Create(*config, LoadComponentFullFloat32(dir));
  ASSERT_TRUE(vae.ok()) << vae.status();
  ASSERT_TRUE(vae->has_encoder());
  auto image = ImageRef("vae1.encode.in");
  auto dist = vae->EncodeLatentDistribution(image);
  ASSERT_TRUE(dist.ok()) << dist.status();
  auto mean = ImageRef("vae1.encode.mean");
  auto std = ImageRef("vae1.encode.std");
  ASSERT_EQ(dist->mean.sizes(), mean.sizes());
  ASSERT_EQ(dist->std.sizes(), std.sizes());
  const double mean_err = RelativeError(dist->mean, mean);
  const double std_err = RelativeError(dist->std, std);
  EXPECT_LT(mean_err, 1e-5);
  EXPECT_LT(std_err, 1e-5);
  auto latents = vae->ImageLatents(*dist);
  ASSERT_TRUE(latents.ok()) << latents.status();
  auto ref_latents = ImageRef("vae1.image_latents");
  ASSERT_EQ(latents->sizes(), ref_latents.sizes());
  const double latents_err = RelativeError(*latents, ref_latents);
  EXPECT_LT(latents_err, 1e-5);
  std::cout << "[timing] FLUX.1 VAE encode " << c10::str(image.sizes()) << " (cpu f32): "
            << TimeMs([&] { ASSERT_TRUE(vae->EncodeLatentDistribution(image).ok()); }, 5)
            << " ms; rel err mean " << mean_err << ", std " << std_err << ", image latents "
            << latents_err << "\n";
}

TEST(VaeEncoderParity, Flux2LatentDistributionAndReferenceLatents) {
  REQUIRE_IMAGE_REFERENCE();
  const std::string dir = ImageInputsDir() + "/flux2-vae";
  auto config = LoadAutoencoderKLFlux2Config(dir + "/config.json");
  ASSERT_TRUE(config.ok()) << config.status();
  auto vae = AutoencoderKLFlux2::Create(*config, LoadComponentFullFloat32(dir));
  ASSERT_TRUE(vae.ok()) << vae.status();
  ASSERT_TRUE(vae->has_encoder());
  auto image = ImageRef("vae2.encode.in");
  auto dist = vae->EncodeLatentDistribution(image);
  ASSERT_TRUE(dist.ok()) << dist.status();
  auto mean = ImageRef("vae2.encode.mean");
  auto std = ImageRef("vae2.encode.std");
  ASSERT_EQ(dist->mean.sizes(), mean.sizes());
  ASSERT_EQ(dist->std.sizes(), std.sizes());
  const double mean_err = RelativeError(dist->mean, mean);
  const double std_err = RelativeError(dist->std, std);
  EXPECT_LT(mean_err, 1e-5);
  EXPECT_LT(std_err, 1e-5);
  auto reference = vae->EncodeReference(image);
  ASSERT_TRUE(reference.ok()) << reference.status();
  auto ref_latents = ImageRef("vae2.reference_latents");
  ASSERT_EQ(reference->sizes(), ref_latents.sizes());
  const double ref_err = RelativeError(*reference, ref_latents);
  EXPECT_LT(ref_err, 1e-5);
  std::cout << "[timing] FLUX.2 VAE reference encode " << c10::str(image.sizes())
            << " (cpu f32): " << TimeMs([&] { ASSERT_TRUE(vae->EncodeReference(image).ok()); }, 5)
            << " ms; rel err mean " << mean_err << ", std " << std_err << ", reference latents "
            << ref_err << "\n";
}

#endif  // DITSERVE_VAE_ENCODER_PARITY

}  // namespace
}  // namespace ditserve::vae
