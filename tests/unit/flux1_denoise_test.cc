// The FLUX.1 denoising loop on the tiny checkpoint, float32 CPU: initial noise, packing, image ids
// and every latents_after_step.K of the reference pipeline call (fixtures/flux1_call.json).
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "models/transformer_factory.h"
#include "pipeline/latents.h"
#include "pipeline/scheduler.h"
#include "tests/support/fixtures.h"
#include "comm/local_communicator.h"

namespace ditserve {
namespace {

using testing::FixturesDir;
using testing::Ref;
using testing::RelativeError;

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

struct Geometry {
  int64_t channels, height, width;  // unpacked latent
};

Geometry CallGeometry() {
  const auto call = ReadJson(FixturesDir() + "/flux1_call.json");
  const auto vae = ReadJson(FixturesDir() + "/flux1-tiny/vae/config.json");
  const auto tr = ReadJson(FixturesDir() + "/flux1-tiny/transformer/config.json");
  const int64_t factor = pipeline::VaeScaleFactor(vae["block_out_channels"].size());
  return {tr["in_channels"].get<int64_t>() / 4,
          pipeline::LatentSide(call["height"].get<int64_t>(), factor),
          pipeline::LatentSide(call["width"].get<int64_t>(), factor)};
}

TEST(Flux1Latents, InitialNoiseIsBitIdentical) {
  const auto call = ReadJson(FixturesDir() + "/flux1_call.json");
  const auto g = CallGeometry();
  auto noise = pipeline::InitialNoise({1, g.channels, g.height, g.width},
                                      call["seed"].get<uint64_t>(), torch::kFloat32, torch::kCPU);
  ASSERT_TRUE(noise.ok()) << noise.status();
  EXPECT_TRUE(torch::equal(*noise, Ref("flux1.initial_noise")))
      << "max diff " << (*noise - Ref("flux1.initial_noise")).abs().max().item<float>();
  // A different seed gives different noise.
  auto other = pipeline::InitialNoise({1, g.channels, g.height, g.width}, 43, torch::kFloat32,
                                      torch::kCPU);
  ASSERT_TRUE(other.ok());
  EXPECT_FALSE(torch::equal(*other, *noise));
}

TEST(Flux1Latents, PackUnpackAndIds) {
  const auto g = CallGeometry();
  auto packed = pipeline::PackLatents(Ref("flux1.initial_noise"));
  ASSERT_TRUE(packed.ok());
  // The first transformer call's latents are the packed noise.
  EXPECT_TRUE(torch::equal(*packed, Ref("flux1.step0.in.hidden_states")));
  auto unpacked = pipeline::UnpackLatents(*packed, g.height, g.width);
  ASSERT_TRUE(unpacked.ok());
  EXPECT_TRUE(torch::equal(*unpacked, Ref("flux1.initial_noise")));
  // Token index y·(w/2) + x, channel c·4 + dy·2 + dx.
  auto noise = Ref("flux1.initial_noise");
  EXPECT_EQ(packed->index({0, 1 * (g.width / 2) + 2, 3 * 4 + 1 * 2 + 0}).item<float>(),
            noise.index({0, 3, 2 * 1 + 1, 2 * 2 + 0}).item<float>());
  auto ids = pipeline::LatentImageIds(g.height / 2, g.width / 2, torch::kFloat32, torch::kCPU);
  EXPECT_TRUE(torch::equal(ids, Ref("flux1.step0.in.img_ids")));
  EXPECT_FALSE(pipeline::PackLatents(torch::zeros({1, 4, 3, 4})).ok());
  EXPECT_FALSE(pipeline::UnpackLatents(*packed, g.height, g.width + 2).ok());
}

TEST(Flux1Denoise, LoopReproducesEveryStep) {
  const auto call = ReadJson(FixturesDir() + "/flux1_call.json");
  const auto g = CallGeometry();
  const std::string dir = FixturesDir() + "/flux1-tiny/transformer";
  auto sd = testing::LoadComponentFullFloat32(dir);
  auto comm = comm::MakeSingleRankCommunicator();
  auto model = models::CreateTransformer(ReadJson(dir + "/config.json"), sd, comm.get());
  ASSERT_TRUE(model.ok()) << model.status();

  auto config = pipeline::ParseFlowMatchSchedulerConfig(
      ReadJson(FixturesDir() + "/flux1-tiny/scheduler/scheduler_config.json"));
  ASSERT_TRUE(config.ok());
  pipeline::FlowMatchEulerScheduler sched(*config);
  const int steps = call["steps"].get<int>();
  const int64_t seq = (g.height / 2) * (g.width / 2);
  ASSERT_TRUE(sched.SetTimesteps(pipeline::FluxSigmas(steps),
                                 pipeline::CalculateShift(seq, *config)).ok());

  auto latents = Ref("flux1.step0.in.hidden_states");
  std::map<std::string, torch::Tensor> args;
  for (const char* name : {"encoder_hidden_states", "pooled_projections", "img_ids", "txt_ids",
                           "guidance"}) {
    args[name] = Ref(std::string("flux1.step0.in.") + name);
  }
  EXPECT_FLOAT_EQ(Ref("flux1.step0.in.guidance").item<float>(),
                  call["guidance_scale"].get<float>());
  for (int i = 0; i < steps; ++i) {
    // timestep = t.expand(B).to(latents.dtype); the model gets timestep / 1000.
    auto t = sched.timesteps()[i].expand({latents.size(0)}).to(latents.scalar_type());
    args["timestep"] = t / 1000;
    if (i == 0) {
      EXPECT_TRUE(torch::equal(args["timestep"], Ref("flux1.step0.in.timestep")));
    }
    args["hidden_states"] = latents;
    auto v = (*model)->Forward(args);
    ASSERT_TRUE(v.ok()) << v.status();
    if (i == 0) {
      EXPECT_LT(RelativeError(*v, Ref("flux1.step0.out")), 1e-4);
    }
    auto next = sched.Step(*v, i, latents);
    ASSERT_TRUE(next.ok()) << next.status();
    latents = *next;
    const std::string ref = "flux1.latents_after_step." + std::to_string(i);
    const double err = RelativeError(latents, Ref(ref));
    EXPECT_LT(err, 1e-4) << ref << " relative error " << err;
  }
}

}  // namespace
}  // namespace ditserve
