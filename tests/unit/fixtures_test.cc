// The reference fixtures are readable through our own safetensors reader.
#include <gtest/gtest.h>

#include "tests/support/fixtures.h"

namespace ditserve::testing {
namespace {

TEST(Fixtures, ReferenceTensorsLoadWithIndexedShapes) {
  EXPECT_EQ(Ref("flux1.step0.out").sizes(), (torch::IntArrayRef{1, 64, 16}));
  EXPECT_EQ(Ref("clip.ids.0").scalar_type(), torch::kInt64);
  EXPECT_EQ(Ref("t5.ids_unpadded.4").numel(), 441);
}

TEST(Fixtures, ComponentLoadsEveryShard) {
  auto sd = LoadComponentFullFloat32(FixturesDir() + "/flux1-tiny/transformer");
  EXPECT_TRUE(sd.Contains("x_embedder.weight"));
  EXPECT_TRUE(sd.Contains("proj_out.bias"));
  EXPECT_GT(sd.Names().size(), 20u);
}

}  // namespace
}  // namespace ditserve::testing
