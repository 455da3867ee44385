// worker/job_codec.h for image inputs: RunItem.images -> JobItem::images and qwen_edit's
// RunItem.condition_images -> JobItem::condition_images (uint8 (H, W, 3) CPU tensors, in order,
// sizes checked against the bytes, none or one condition image per image), strength, and
// ModelCard::image_inputs -> ModelDescription.inputs.image_inputs (use names, min_images).
#include <gtest/gtest.h>

#include <string>

#include "absl/strings/match.h"
#include "worker/job_codec.h"

namespace ditserve::worker {
namespace {

v1::RgbPixels Pixels(uint32_t w, uint32_t h, int seed) {
  v1::RgbPixels p;
  p.set_width(w);
  p.set_height(h);
  std::string rgb(static_cast<size_t>(w) * h * 3, '\0');
  for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<char>((i * 7 + seed) & 255);
  p.set_rgb(rgb);
  return p;
}

// `t` is the uint8 (H, W, 3) contiguous CPU tensor of `p`'s bytes.
void ExpectTensorOfPixels(const torch::Tensor& t, const v1::RgbPixels& p) {
  EXPECT_EQ(t.scalar_type(), torch::kUInt8);
  EXPECT_TRUE(t.device().is_cpu());
  ASSERT_EQ(t.dim(), 3);
  EXPECT_EQ(t.size(0), p.height());
  EXPECT_EQ(t.size(1), p.width());
  EXPECT_EQ(t.size(2), 3);
  ASSERT_TRUE(t.is_contiguous());
  EXPECT_EQ(std::string(static_cast<const char*>(t.data_ptr()), p.rgb().size()), p.rgb());
}

v1::RunRequest Request() {
  v1::RunRequest r;
  r.set_height(64);
  r.set_width(64);
  r.set_num_inference_steps(2);
  v1::RunItem* item = r.add_items();
  item->set_prompt("a cat");
  *item->add_images() = Pixels(5, 3, 1);
  *item->add_images() = Pixels(2, 4, 2);
  item->set_strength(0.6);
  return r;
}

TEST(JobCodecImages, ImagesBecomeUint8HwcTensorsInOrder) {
  const v1::RunRequest r = Request();
  auto job = JobFromRunRequest(r);
  ASSERT_TRUE(job.ok()) << job.status();
  const pipeline::JobItem& item = job->items.at(0);
  ASSERT_EQ(item.images.size(), 2u);
  EXPECT_EQ(item.strength, 0.6);  // the double arrives unchanged
  for (int j = 0; j < 2; ++j) {
    ASSERT_NO_FATAL_FAILURE(
        ExpectTensorOfPixels(item.images[static_cast<size_t>(j)], r.items(0).images(j)));
  }
  // Pixel (x=1, y=2) of the first image: row 2, column 1.
  const auto px = item.images[0].index({2, 1});
  const size_t off = (2 * 5 + 1) * 3;
  EXPECT_EQ(px[0].item<uint8_t>(), static_cast<uint8_t>(r.items(0).images(0).rgb()[off]));
}

TEST(JobCodecImages, NoImagesNoTensors) {
  v1::RunRequest r = Request();
  r.mutable_items(0)->clear_images();
  r.mutable_items(0)->set_strength(0);
  auto job = JobFromRunRequest(r);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_TRUE(job->items[0].images.empty());
  EXPECT_EQ(job->items[0].strength, 0.0);
}

TEST(JobCodecImages, ByteCountsAreChecked) {
  v1::RunRequest r = Request();
  r.mutable_items(0)->mutable_images(1)->mutable_rgb()->pop_back();
  auto job = JobFromRunRequest(r);
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(job.status().message(),
                                "items[0].images[1].rgb holds 23 bytes; a 2x4 RGB image needs 24"))
      << job.status();
  r = Request();
  r.mutable_items(0)->mutable_images(0)->set_width(0);
  job = JobFromRunRequest(r);
  ASSERT_FALSE(job.ok());
  EXPECT_TRUE(absl::StrContains(job.status().message(), "items[0].images[0] is 0x3"))
      << job.status();
}

TEST(JobCodecImages, CardsDescribeTheirImageInputs) {
  pipeline::ModelCard card;
  card.name = "FLUX.2-tiny";
  card.family = "flux2";
  EXPECT_EQ(DescribeModel(card, 1, 0).inputs().image_inputs().max_images(), 0u);
  EXPECT_EQ(DescribeModel(card, 1, 0).inputs().image_inputs().use(), "");

  card.image_inputs.use = pipeline::ImageUse::kReference;
  card.image_inputs.max_images = 10;
  card.image_inputs.min_side = 64;
  card.image_inputs.max_aspect_ratio = 8;
  card.image_inputs.max_area = 1024 * 1024;
  card.image_inputs.size_multiple = 16;
  const auto in = DescribeModel(card, 2, 0).inputs().image_inputs();
  EXPECT_EQ(in.use(), "reference");
  EXPECT_EQ(in.max_images(), 10u);
  EXPECT_EQ(in.min_side(), 64u);
  EXPECT_EQ(in.max_aspect_ratio(), 8u);
  EXPECT_EQ(in.max_area(), 1024u * 1024u);
  EXPECT_EQ(in.size_multiple(), 16u);

  card.image_inputs = {};
  card.image_inputs.use = pipeline::ImageUse::kImageToImage;
  card.image_inputs.max_images = 1;
  card.image_inputs.default_strength = 0.6;
  const auto i2i = DescribeModel(card, 1, 0).inputs().image_inputs();
  EXPECT_EQ(i2i.use(), "image_to_image");
  EXPECT_EQ(i2i.default_strength(), 0.6);
  card.image_inputs.use = pipeline::ImageUse::kKontext;
  EXPECT_EQ(DescribeModel(card, 1, 0).inputs().image_inputs().use(), "kontext");
  EXPECT_EQ(DescribeModel(card, 1, 0).inputs().image_inputs().min_images(), 0u);

  card.image_inputs = {};
  card.image_inputs.use = pipeline::ImageUse::kQwenEdit;
  card.image_inputs.max_images = 4;
  card.image_inputs.min_images = 1;
  card.image_inputs.size_multiple = 16;
  const auto edit = DescribeModel(card, 1, 0).inputs().image_inputs();
  EXPECT_EQ(edit.use(), "qwen_edit");
  EXPECT_EQ(edit.max_images(), 4u);
  EXPECT_EQ(edit.min_images(), 1u);
  EXPECT_EQ(edit.size_multiple(), 16u);
}

// Qwen-Image-Edit: each image with its condition image (for the vision-language text encoder).
v1::RunRequest EditRequest() {
  v1::RunRequest r = Request();
  r.mutable_items(0)->set_strength(0);
  *r.mutable_items(0)->add_condition_images() = Pixels(3, 2, 3);
  *r.mutable_items(0)->add_condition_images() = Pixels(1, 6, 4);
  return r;
}

TEST(JobCodecImages, ConditionImagesBecomeUint8HwcTensorsInOrder) {
  const v1::RunRequest r = EditRequest();
  auto job = JobFromRunRequest(r);
  ASSERT_TRUE(job.ok()) << job.status();
  const pipeline::JobItem& item = job->items.at(0);
  ASSERT_EQ(item.images.size(), 2u);
  ASSERT_EQ(item.condition_images.size(), 2u);
  for (int j = 0; j < 2; ++j) {
    ASSERT_NO_FATAL_FAILURE(ExpectTensorOfPixels(item.condition_images[static_cast<size_t>(j)],
                                                 r.items(0).condition_images(j)));
  }
  // The images are still the VAE's, unchanged.
  EXPECT_EQ(item.images[0].size(1), 5);
  EXPECT_EQ(item.images[1].size(0), 4);
  // Other uses send none.
  auto plain = JobFromRunRequest(Request());
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_TRUE(plain->items[0].condition_images.empty());
}

TEST(JobCodecImages, ConditionImagesAreCheckedLikeImages) {
  v1::RunRequest r = EditRequest();
  r.mutable_items(0)->mutable_condition_images(1)->mutable_rgb()->pop_back();
  auto job = JobFromRunRequest(r);
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(
      job.status().message(),
      "items[0].condition_images[1].rgb holds 17 bytes; a 1x6 RGB image needs 18"))
      << job.status();
  r = EditRequest();
  r.mutable_items(0)->mutable_condition_images(0)->set_height(0);
  job = JobFromRunRequest(r);
  ASSERT_FALSE(job.ok());
  EXPECT_TRUE(absl::StrContains(job.status().message(), "items[0].condition_images[0] is 3x0"))
      << job.status();
}

TEST(JobCodecImages, ConditionImagesAreNoneOrOnePerImage) {
  v1::RunRequest r = EditRequest();
  r.mutable_items(0)->mutable_condition_images()->RemoveLast();
  auto job = JobFromRunRequest(r);
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(job.status().message(),
                                "items[0].condition_images holds 1 images but items[0].images "
                                "holds 2"))
      << job.status();
  r = EditRequest();
  r.mutable_items(0)->clear_images();
  job = JobFromRunRequest(r);
  ASSERT_FALSE(job.ok());
  EXPECT_TRUE(absl::StrContains(job.status().message(),
                                "items[0].condition_images holds 2 images but items[0].images "
                                "holds 0"))
      << job.status();
}

}  // namespace
}  // namespace ditserve::worker
