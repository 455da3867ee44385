// The frontend's input images (server/input_images.h) through ValidateRequest: every refusal names
// images[i] (or strength) and the limit, the header limits refuse a decompression bomb before any
// decoder runs, the prepared pixels are imaging/preprocess.h's, FLUX.2's default size comes from
// the first reference, Qwen-Image-Edit's images are prepared twice (imaging/qwen_edit_sizes.h)
// and its output size comes from the last image (a given size floored), requests with images are
// never batched, and ModelInfo publishes the spec.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "imaging/decode.h"
#include "imaging/preprocess.h"
#include "imaging/qwen_edit_sizes.h"
#include "server/admission_queue.h"
#include "server/input_images.h"
#include "server/request_validator.h"
#include "worker/png_encoder.h"

namespace ditserve::server {
namespace {

worker::v1::ModelDescription Model(const std::string& name, uint32_t max_images,
                                   const std::string& use) {
  worker::v1::ModelDescription m;
  m.set_name(name);
  m.set_family(name == "flux2-tiny" ? "flux2" : "flux1");
  m.mutable_inputs()->set_accepts_text_prompt(true);
  m.mutable_defaults()->set_height(256);
  m.mutable_defaults()->set_width(256);
  m.mutable_defaults()->set_num_inference_steps(4);
  m.mutable_defaults()->set_guidance_scale(3.5f);
  m.mutable_defaults()->set_max_sequence_length(512);
  v1::ImageInputs* in = m.mutable_inputs()->mutable_image_inputs();
  in->set_max_images(max_images);
  in->set_use(use);
  in->set_size_multiple(16);
  return m;
}

// FLUX.2 as its pipeline will describe itself.
worker::v1::ModelDescription Flux2() {
  auto m = Model("flux2-tiny", 10, "reference");
  v1::ImageInputs* in = m.mutable_inputs()->mutable_image_inputs();
  in->set_min_side(64);
  in->set_max_aspect_ratio(8);
  in->set_max_area(1024 * 1024);
  return m;
}
worker::v1::ModelDescription Img2Img() {
  auto m = Model("flux1-img2img", 1, "image_to_image");
  m.mutable_inputs()->mutable_image_inputs()->set_default_strength(0.6);
  return m;
}
worker::v1::ModelDescription Kontext() {
  return Model("flux1-kontext", 1, "kontext");
}
// Qwen-Image-Edit-2509 (QwenImageEditPlusPipeline) as its pipeline describes itself.
worker::v1::ModelDescription QwenEdit() {
  auto m = Model("qwen-image-edit", 3, "qwen_edit");
  m.set_family("qwenimage");
  m.mutable_inputs()->mutable_image_inputs()->set_min_images(1);
  return m;
}
worker::v1::ModelDescription TextOnly() {
  return Model("flux1-tiny", 0, "");
}

// A w x h PNG of a deterministic pattern.
imaging::RgbImage PatternImage(int w, int h, int seed = 0) {
  imaging::RgbImage im = imaging::MakeRgbImage(w, h);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      uint8_t* p = &im.pixels[im.Offset(x, y)];
      p[0] = static_cast<uint8_t>(x * 5 + seed);
      p[1] = static_cast<uint8_t>(y * 3 + x * y);
      p[2] = static_cast<uint8_t>((x ^ y) + seed * 7);
    }
  }
  return im;
}

std::string Png(const imaging::RgbImage& im) {
  auto png = worker::EncodePng(im.pixels.data(), static_cast<uint32_t>(im.height),
                               static_cast<uint32_t>(im.width), {});
  EXPECT_TRUE(png.ok()) << png.status();
  return png.ok() ? *png : std::string();
}
std::string Png(int w, int h, int seed = 0) {
  return Png(PatternImage(w, h, seed));
}

uint32_t Crc(const std::string& bytes) {
  uint32_t c = 0xffffffffu;
  for (unsigned char b : bytes) {
    c ^= b;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
  }
  return c ^ 0xffffffffu;
}

std::string Be32(uint32_t v) {
  return std::string{static_cast<char>(v >> 24), static_cast<char>(v >> 16),
                     static_cast<char>(v >> 8), static_cast<char>(v)};
}

// A PNG signature and a valid IHDR claiming width x height, and nothing else: no pixel data.
std::string PngHeaderOnly(uint32_t width, uint32_t height) {
  std::string ihdr = "IHDR" + Be32(width) + Be32(height) + std::string("\x08\x02\0\0\0", 5);
  return std::string("\x89PNG\r\n\x1a\n", 8) + Be32(13) + ihdr + Be32(Crc(ihdr));
}

v1::GenerateRequest Request(std::vector<std::string> images = {}) {
  v1::GenerateRequest r;
  r.set_prompt("a cat");
  for (auto& i : images) r.add_images(std::move(i));
  return r;
}

void ExpectInvalid(const v1::GenerateRequest& r, const worker::v1::ModelDescription& m,
                   const std::vector<std::string>& needles,
                   const RequestLimits& limits = RequestLimits()) {
  auto v = ValidateRequest(r, m, limits);
  ASSERT_FALSE(v.ok()) << "expected an error mentioning " << needles.front();
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument) << v.status();
  for (const std::string& needle : needles) {
    EXPECT_TRUE(absl::StrContains(v.status().message(), needle))
        << "'" << needle << "' not in: " << v.status().message();
  }
}

TEST(InputImages, NoImagesIsPlainTextToImage) {
  for (const auto& m : {Flux2(), Img2Img(), Kontext(), TextOnly()}) {
    auto v = ValidateRequest(Request(), m, RequestLimits());
    ASSERT_TRUE(v.ok()) << m.name() << ": " << v.status();
    EXPECT_EQ(v->item.images_size(), 0);
    EXPECT_EQ(v->item.strength(), 0.0);
    EXPECT_EQ(v->shape.input_images, 0u);
    EXPECT_TRUE(v->shape.batchable());
    EXPECT_EQ(v->shape.height, 256u);
  }
}

TEST(InputImages, CountIsLimitedByTheModel) {
  std::vector<std::string> eleven(11, Png(64, 64));
  ExpectInvalid(Request(eleven), Flux2(),
                {"images: this model takes at most 10 input images, got 11"});
  ExpectInvalid(Request({Png(64, 64), Png(64, 64)}), Img2Img(),
                {"images: this model takes at most 1 input image, got 2"});
  ExpectInvalid(Request({Png(64, 64)}), TextOnly(), {"images: flux1-tiny takes no input image"});
}

TEST(InputImages, BadBytesAreRefusedNamingTheImage) {
  const std::string good = Png(64, 64);
  // Not an image at all.
  ExpectInvalid(Request({good, "certainly not an image"}), Flux2(), {"images[1]", "PNG"});
  // GIF: a real format, not one we take.
  ExpectInvalid(Request({std::string("GIF89a\x01\0\x01\0\x80\0\0", 13) + std::string(20, '\0')}),
                Flux2(), {"images[0]", "JPEG", "WebP"});
  // A PNG cut in half.
  const std::string noisy = Png(96, 96, 3);
  ExpectInvalid(Request({good, noisy.substr(0, noisy.size() / 2)}), Flux2(), {"images[1]: PNG"});
  // A PNG whose image data is garbage (the chunk's checksum kept valid).
  std::string corrupt = PngHeaderOnly(64, 64);
  const std::string idat = "IDAT" + std::string(40, '\x5a');
  corrupt += Be32(40) + idat + Be32(Crc(idat));
  const std::string iend = "IEND";
  corrupt += Be32(0) + iend + Be32(Crc(iend));
  ExpectInvalid(Request({corrupt}), Flux2(), {"images[0]"});
  // Empty.
  ExpectInvalid(Request({good, ""}), Flux2(), {"images[1] is empty"});
}

TEST(InputImages, ByteLimit) {
  const std::string png = Png(64, 64, 1);
  RequestLimits limits;
  limits.max_input_image_bytes = png.size() - 1;
  ExpectInvalid(Request({png}), Flux2(),
                {"images[0] is " + std::to_string(png.size()) + " bytes; the limit is " +
                 std::to_string(png.size() - 1) + " bytes"},
                limits);
  limits.max_input_image_bytes = png.size();
  EXPECT_TRUE(ValidateRequest(Request({png}), Flux2(), limits).ok());
}

TEST(InputImages, PixelLimitsComeFromTheHeaderBeforeDecoding) {
  // 100000 x 100000 claimed by a header with no pixel data: a decoder would report missing data;
  // the header check refuses it first, naming the limits.
  const std::string bomb = PngHeaderOnly(100000, 100000);
  ExpectInvalid(Request({Png(64, 64), bomb}), Flux2(),
                {"images[1]: the PNG header says 100000x100000 pixels", "8192 pixels a side",
                 "16777216 pixels"});
  RequestLimits wide;
  wide.max_input_image_side = 100000;  // the side passes; the pixel count does not
  ExpectInvalid(Request({bomb}), Flux2(), {"images[0]: the PNG header says 100000x100000"}, wide);
  RequestLimits small;
  small.max_input_image_side = 100;
  ExpectInvalid(Request({Png(128, 64)}), Flux2(), {"images[0]: the PNG header says 128x64"}, small);
  small.max_input_image_side = 8192;
  small.max_input_image_pixels = 64 * 64 - 1;
  ExpectInvalid(Request({Png(64, 64)}), Flux2(), {"4095 pixels (max_image_pixels)"}, small);
}

TEST(InputImages, ReferenceShapeChecks) {
  ExpectInvalid(Request({Png(64, 64), Png(63, 200)}), Flux2(),
                {"images[1] is 63x200; each side must be at least 64 pixels"});
  ExpectInvalid(Request({Png(1000, 100)}), Flux2(),
                {"images[0] is 1000x100, an aspect ratio of 10.0:1; the limit is 8:1"});
  EXPECT_TRUE(ValidateRequest(Request({Png(64, 512)}), Flux2(), RequestLimits()).ok());
}

TEST(InputImages, Strength) {
  const std::string png = Png(100, 80);
  auto with = [&](double s, std::vector<std::string> images) {
    auto r = Request(std::move(images));
    r.set_strength(s);
    return r;
  };
  ExpectInvalid(with(1.5, {png}), Img2Img(), {"strength must be in (0, 1]", "got 1.5"});
  ExpectInvalid(with(-0.1, {png}), Img2Img(), {"strength must be in (0, 1]"});
  ExpectInvalid(with(std::nan(""), {png}), Img2Img(), {"strength must be in (0, 1]", "nan"});
  ExpectInvalid(with(0.5, {}), Img2Img(), {"strength needs an input image"});
  ExpectInvalid(
      with(0.5, {Png(64, 64)}), Flux2(),
      {"strength is only for models whose image input use is image_to_image", "reference"});
  ExpectInvalid(with(0.5, {}), TextOnly(), {"strength is only for", "no input images"});

  auto defaulted = ValidateRequest(with(0, {png}), Img2Img(), RequestLimits());
  ASSERT_TRUE(defaulted.ok()) << defaulted.status();
  EXPECT_EQ(defaulted->item.strength(), 0.6);  // exactly, as a double
  auto explicit_one = ValidateRequest(with(1.0, {png}), Img2Img(), RequestLimits());
  ASSERT_TRUE(explicit_one.ok()) << explicit_one.status();
  EXPECT_EQ(explicit_one->item.strength(), 1.0);
}

TEST(InputImages, ReferencePixelsAndTheDefaultSizeFromTheFirstImage) {
  const imaging::RgbImage a = PatternImage(1500, 1100, 1);
  const imaging::RgbImage b = PatternImage(200, 330, 2);
  auto v = ValidateRequest(Request({Png(a), Png(b)}), Flux2(), RequestLimits());
  ASSERT_TRUE(v.ok()) << v.status();
  // The first reference's prepared size (area resize to 1195x877, floored to 1184x864).
  EXPECT_EQ(v->shape.width, 1184u);
  EXPECT_EQ(v->shape.height, 864u);
  EXPECT_EQ(v->shape.input_images, 2u);
  EXPECT_FALSE(v->shape.batchable());
  ASSERT_EQ(v->item.images_size(), 2);
  const imaging::RgbImage pa = *imaging::PrepareReferenceImage(a, 1024 * 1024, 16);
  const imaging::RgbImage pb = *imaging::PrepareReferenceImage(b, 1024 * 1024, 16);
  EXPECT_EQ(v->item.images(0).width(), 1184u);
  EXPECT_EQ(v->item.images(0).height(), 864u);
  EXPECT_EQ(v->item.images(0).rgb(), std::string(pa.pixels.begin(), pa.pixels.end()));
  EXPECT_EQ(v->item.images(1).width(), 192u);
  EXPECT_EQ(v->item.images(1).height(), 320u);
  EXPECT_EQ(v->item.images(1).rgb(), std::string(pb.pixels.begin(), pb.pixels.end()));

  // A side the request gives is kept; the other still comes from the image.
  auto r = Request({Png(a)});
  r.set_height(512);
  auto half = ValidateRequest(r, Flux2(), RequestLimits());
  ASSERT_TRUE(half.ok()) << half.status();
  EXPECT_EQ(half->shape.height, 512u);
  EXPECT_EQ(half->shape.width, 1184u);

  // The image's size is checked like any size.
  RequestLimits narrow;
  narrow.max_width = 1024;
  ExpectInvalid(Request({Png(a)}), Flux2(),
                {"width (images[0]'s prepared width; send width to choose another) must be a "
                 "multiple of 16 in 16..1024, got 1184"},
                narrow);
}

TEST(InputImages, ImageToImageIsSizedToTheOutput) {
  const imaging::RgbImage src = PatternImage(100, 80);
  auto r = Request({Png(src)});
  r.set_width(192);
  r.set_height(128);
  auto v = ValidateRequest(r, Img2Img(), RequestLimits());
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_EQ(v->item.images_size(), 1);
  const imaging::RgbImage expected = *imaging::PrepareImageToImage(src, 192, 128, 16);
  EXPECT_EQ(v->item.images(0).width(), 192u);
  EXPECT_EQ(v->item.images(0).height(), 128u);
  EXPECT_EQ(v->item.images(0).rgb(), std::string(expected.pixels.begin(), expected.pixels.end()));
  EXPECT_EQ(v->shape.width, 192u);  // the output size is the request's, not the image's
}

TEST(InputImages, KontextTakesThePreferredResolution) {
  auto v = ValidateRequest(Request({Png(700, 700)}), Kontext(), RequestLimits());
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->item.images(0).width(), 1024u);
  EXPECT_EQ(v->item.images(0).height(), 1024u);
  EXPECT_EQ(v->shape.width, 256u);  // the output keeps the requested (default) size
}

TEST(InputImages, JpegInputsDecodeLikeTheImagingLibrary) {
  std::ifstream in(std::string(DITSERVE_SOURCE_DIR) + "/tests/unit/data/imaging/q90_444.jpg",
                   std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  auto decoded = imaging::DecodeImage(bytes.str());
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  auto r = Request({bytes.str()});
  r.set_width(64);
  r.set_height(48);
  auto v = ValidateRequest(r, Img2Img(), RequestLimits());
  ASSERT_TRUE(v.ok()) << v.status();
  const imaging::RgbImage expected = *imaging::PrepareImageToImage(decoded->image, 64, 48, 16);
  EXPECT_EQ(v->item.images(0).rgb(), std::string(expected.pixels.begin(), expected.pixels.end()));
}

TEST(InputImages, RequestsWithImagesAreNeverBatched) {
  AdmissionQueue queue(8);
  auto pending = [&](v1::GenerateRequest r, const std::string& id) {
    r.set_width(256);
    r.set_height(256);
    auto v = ValidateRequest(r, Img2Img(), RequestLimits());
    EXPECT_TRUE(v.ok()) << v.status();
    return std::make_shared<PendingRequest>(id, *std::move(v),
                                            Clock::now() + std::chrono::seconds(60));
  };
  // Two image requests of the same shape, then two text requests of that shape.
  ASSERT_TRUE(queue.Push(pending(Request({Png(64, 64)}), "img1")).ok());
  ASSERT_TRUE(queue.Push(pending(Request({Png(64, 64)}), "img2")).ok());
  ASSERT_TRUE(queue.Push(pending(Request(), "txt1")).ok());
  ASSERT_TRUE(queue.Push(pending(Request(), "txt2")).ok());
  auto first = queue.PopBatch(8);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0]->id(), "img1");
  auto second = queue.PopBatch(8);
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0]->id(), "img2");
  auto third = queue.PopBatch(8);
  ASSERT_EQ(third.size(), 2u);  // the text requests still batch together
  EXPECT_EQ(third[0]->id(), "txt1");
  EXPECT_EQ(third[1]->id(), "txt2");
}

TEST(InputImages, ModelInfoPublishesTheSpecAndTheServerLimits) {
  RequestLimits limits;
  limits.max_input_image_bytes = 1 << 20;
  const v1::ModelInfo info = MakeModelInfo(Flux2(), limits, 16, 1);
  const v1::ImageInputs& in = info.inputs().image_inputs();
  EXPECT_EQ(in.max_images(), 10u);
  EXPECT_EQ(in.use(), "reference");
  EXPECT_EQ(in.min_side(), 64u);
  EXPECT_EQ(in.max_aspect_ratio(), 8u);
  EXPECT_EQ(in.max_area(), 1024u * 1024u);
  EXPECT_EQ(in.size_multiple(), 16u);
  EXPECT_EQ(in.max_image_bytes(), 1u << 20);
  EXPECT_EQ(in.max_image_pixels(), 16777216u);
  EXPECT_EQ(in.max_image_side(), 8192u);
  const v1::ModelInfo plain = MakeModelInfo(TextOnly(), RequestLimits(), 16, 1);
  EXPECT_EQ(plain.inputs().image_inputs().max_images(), 0u);
  EXPECT_EQ(plain.inputs().image_inputs().max_image_bytes(), 32u << 20);
}

TEST(InputImages, DecodedImagesCanBeShared) {
  // ImageGenerationService decodes a call's shared images once; the result validates alike.
  const auto r = Request({Png(300, 200)});
  auto decoded = DecodeInputImages(r, Flux2(), RequestLimits());
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  auto a = ValidateRequest(r, Flux2(), RequestLimits(), *decoded);
  auto b = ValidateRequest(r, Flux2(), RequestLimits());
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->item.images(0).rgb(), b->item.images(0).rgb());
  EXPECT_EQ(a->shape.width, 288u);
  EXPECT_EQ(a->shape.height, 192u);
}

std::string Rgb(const imaging::RgbImage& im) {
  return std::string(im.pixels.begin(), im.pixels.end());
}

// Qwen-Image-Edit (QwenImageEditPipeline): condition_area 1024², so the condition image is the
// VAE's image.
TEST(InputImages, QwenEditConditionAreaComesFromTheModel) {
  const imaging::RgbImage src = PatternImage(45, 61, 1);
  worker::v1::ModelDescription model = QwenEdit();
  model.mutable_inputs()->mutable_image_inputs()->set_condition_area(1024 * 1024);
  auto v = ValidateRequest(Request({Png(src)}), model, RequestLimits());
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_EQ(v->item.condition_images_size(), 1);
  EXPECT_EQ(v->item.condition_images(0).width(), 864u);
  EXPECT_EQ(v->item.condition_images(0).height(), 1184u);
  EXPECT_EQ(v->item.condition_images(0).rgb(), v->item.images(0).rgb());
}

TEST(InputImages, QwenEditKeepsAVaeAndAConditionImagePerImage) {
  const imaging::RgbImage src = PatternImage(45, 61, 1);
  auto v = ValidateRequest(Request({Png(src)}), QwenEdit(), RequestLimits());
  ASSERT_TRUE(v.ok()) << v.status();
  auto sizes = imaging::QwenEditImageSizesFor(45, 61, 16);
  ASSERT_TRUE(sizes.ok()) << sizes.status();
  EXPECT_EQ(sizes->condition, (imaging::ImageSize{320, 448}));
  EXPECT_EQ(sizes->vae, (imaging::ImageSize{864, 1184}));
  ASSERT_EQ(v->item.images_size(), 1);
  ASSERT_EQ(v->item.condition_images_size(), 1);
  EXPECT_EQ(v->item.images(0).width(), 864u);
  EXPECT_EQ(v->item.images(0).height(), 1184u);
  EXPECT_EQ(v->item.images(0).rgb(), Rgb(*imaging::PrepareQwenEditVaeImage(src, 16)));
  EXPECT_EQ(v->item.condition_images(0).width(), 320u);
  EXPECT_EQ(v->item.condition_images(0).height(), 448u);
  EXPECT_EQ(v->item.condition_images(0).rgb(), Rgb(*imaging::PrepareQwenEditConditionImage(src)));
  // The output: about 1024 x 1024 at the image's aspect ratio.
  EXPECT_EQ(v->shape.width, 864u);
  EXPECT_EQ(v->shape.height, 1184u);
  EXPECT_EQ(v->shape.input_images, 1u);
  EXPECT_FALSE(v->shape.batchable());
  EXPECT_EQ(v->item.strength(), 0.0);
}

TEST(InputImages, QwenEditImagesInOrderAndTheOutputSizeFromTheLastOne) {
  const imaging::RgbImage a = PatternImage(45, 61, 1);
  const imaging::RgbImage b = PatternImage(80, 36, 2);
  auto v = ValidateRequest(Request({Png(a), Png(b)}), QwenEdit(), RequestLimits());
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_EQ(v->item.images_size(), 2);
  ASSERT_EQ(v->item.condition_images_size(), 2);
  for (int i = 0; i < 2; ++i) {
    const imaging::RgbImage& src = i == 0 ? a : b;
    auto sizes = imaging::QwenEditImageSizesFor(src.width, src.height, 16);
    ASSERT_TRUE(sizes.ok()) << sizes.status();
    EXPECT_EQ(v->item.images(i).width(), static_cast<uint32_t>(sizes->vae.width)) << i;
    EXPECT_EQ(v->item.images(i).height(), static_cast<uint32_t>(sizes->vae.height)) << i;
    EXPECT_EQ(v->item.images(i).rgb(), Rgb(*imaging::PrepareQwenEditVaeImage(src, 16))) << i;
    EXPECT_EQ(v->item.condition_images(i).width(), static_cast<uint32_t>(sizes->condition.width));
    EXPECT_EQ(v->item.condition_images(i).height(), static_cast<uint32_t>(sizes->condition.height));
    EXPECT_EQ(v->item.condition_images(i).rgb(), Rgb(*imaging::PrepareQwenEditConditionImage(src)))
        << i;
  }
  EXPECT_EQ(v->item.condition_images(1).width(), 576u);
  EXPECT_EQ(v->item.condition_images(1).height(), 256u);
  EXPECT_EQ(v->item.images(1).width(), 1536u);
  EXPECT_EQ(v->item.images(1).height(), 672u);
  // The last image's (80x36) calculated size, not the first's.
  const imaging::ImageSize out = *imaging::QwenEditOutputSize(80, 36, 0, 0, 16);
  EXPECT_EQ(out, (imaging::ImageSize{1536, 672}));
  EXPECT_EQ(v->shape.width, 1536u);
  EXPECT_EQ(v->shape.height, 672u);
  EXPECT_EQ(v->shape.input_images, 2u);

  // Above the server's limit: refused, saying where the size came from.
  RequestLimits narrow;
  narrow.max_width = 1024;
  ExpectInvalid(Request({Png(a), Png(b)}), QwenEdit(),
                {"width (for images[1]'s aspect ratio; send width to choose another) must be a "
                 "multiple of 16 in 16..1024, got 1536"},
                narrow);
}

TEST(InputImages, QwenEditFloorsAGivenSizeToTheMultiple) {
  auto r = Request({Png(45, 61), Png(80, 36)});
  r.set_width(140);
  r.set_height(100);
  auto v = ValidateRequest(r, QwenEdit(), RequestLimits());
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->shape.width, 128u);
  EXPECT_EQ(v->shape.height, 96u);
  const imaging::ImageSize expected = *imaging::QwenEditOutputSize(80, 36, 140, 100, 16);
  EXPECT_EQ(v->shape.width, static_cast<uint32_t>(expected.width));
  EXPECT_EQ(v->shape.height, static_cast<uint32_t>(expected.height));
  // The images do not depend on the output size.
  EXPECT_EQ(v->item.images(1).width(), 1536u);

  // One side given: floored; the other calculated from the last image.
  auto one = Request({Png(45, 61), Png(80, 36)});
  one.set_width(140);
  auto w = ValidateRequest(one, QwenEdit(), RequestLimits());
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->shape.width, 128u);
  EXPECT_EQ(w->shape.height, 672u);

  // A side floored to 0 is refused, saying so.
  auto tiny = Request({Png(45, 61)});
  tiny.set_height(10);
  ExpectInvalid(tiny, QwenEdit(),
                {"height (10 floored to a multiple of 16) must be a multiple of 16 in 16..2048, "
                 "got 0"});

  // Other uses still refuse a size that is not a multiple.
  auto i2i = Request({Png(64, 64)});
  i2i.set_width(140);
  i2i.set_height(96);
  ExpectInvalid(i2i, Img2Img(), {"width must be a multiple of 16 in 16..2048, got 140"});
}

TEST(InputImages, QwenEditCountsAndShapes) {
  ExpectInvalid(Request(), QwenEdit(), {"images: this model needs at least 1 input image, got 0"});
  auto two = QwenEdit();
  two.mutable_inputs()->mutable_image_inputs()->set_min_images(2);
  ExpectInvalid(Request({Png(64, 64)}), two,
                {"images: this model needs at least 2 input images, got 1"});
  ExpectInvalid(Request({Png(64, 64), Png(64, 64), Png(64, 64), Png(64, 64)}), QwenEdit(),
                {"images: this model takes at most 3 input images, got 4"});
  // An aspect ratio whose condition image would have a side of 0 (PIL refuses such a resize).
  ExpectInvalid(Request({Png(64, 64), Png(1, 700)}), QwenEdit(),
                {"images[1] is 1x700; its condition size would be 0x"});
  // No strength: the edit pipeline does not noise its images.
  auto r = Request({Png(64, 64)});
  r.set_strength(0.5);
  ExpectInvalid(r, QwenEdit(), {"strength is only for", "qwen_edit"});
  // A model that needs none takes a request without images (min_images 0 by default).
  EXPECT_TRUE(ValidateRequest(Request(), Flux2(), RequestLimits()).ok());
}

TEST(InputImages, QwenEditDecodedImagesCanBeShared) {
  const auto r = Request({Png(80, 36)});
  auto decoded = DecodeInputImages(r, QwenEdit(), RequestLimits());
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->use, ImageInputUse::kQwenEdit);
  ASSERT_EQ(decoded->images.size(), 1u);
  ASSERT_EQ(decoded->condition_images.size(), 1u);
  EXPECT_EQ(decoded->default_width, 1536u);
  EXPECT_EQ(decoded->default_height, 672u);
  auto a = ValidateRequest(r, QwenEdit(), RequestLimits(), *decoded);
  auto b = ValidateRequest(r, QwenEdit(), RequestLimits());
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->item.images(0).rgb(), b->item.images(0).rgb());
  EXPECT_EQ(a->item.condition_images(0).rgb(), b->item.condition_images(0).rgb());
  // Other uses carry no condition images.
  auto flux2 = ValidateRequest(Request({Png(64, 64)}), Flux2(), RequestLimits());
  ASSERT_TRUE(flux2.ok()) << flux2.status();
  EXPECT_EQ(flux2->item.condition_images_size(), 0);
}

TEST(InputImages, ModelInfoPublishesMinImages) {
  const v1::ModelInfo info = MakeModelInfo(QwenEdit(), RequestLimits(), 16, 1);
  EXPECT_EQ(info.inputs().image_inputs().use(), "qwen_edit");
  EXPECT_EQ(info.inputs().image_inputs().min_images(), 1u);
  EXPECT_EQ(info.inputs().image_inputs().max_images(), 3u);
}

}  // namespace
}  // namespace ditserve::server
