// Qwen-Image RoPE for several image shapes per sample (the edit pipelines' img_shapes =
// [[(1, h, w), (1, h1, w1), ...]]: generated latents first, then each condition image), against
// diffusers' QwenEmbedRope (transformer_qwenimage.py at 58eb52c0) re-written step by step below
// with its own 4096-row pos/neg tables and slicing, independently of
// models/qwenimage/qwenimage_rope.h. Bit for bit on the CPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <tuple>
#include <vector>

#include <torch/torch.h>

#include "models/qwenimage/qwenimage_rope.h"

namespace ditserve {
namespace {

using models::qwenimage::ImageShape;
using models::qwenimage::QwenRopeFrequencies;

// QwenImageTransformer2DModel's axes_dims_rope default and QwenEmbedRope(theta=10000, ...).
const std::vector<int64_t> kAxes = {16, 56, 56};
constexpr int64_t kTheta = 10000;

// def rope_params(self, index, dim, theta=10000):
//     freqs = torch.outer(index, 1.0 / torch.pow(theta, torch.arange(0, dim,
//     2).to(torch.float32).div(dim))) freqs = torch.polar(torch.ones_like(freqs), freqs)
torch::Tensor RopeParams(const torch::Tensor& index, int64_t dim, int64_t theta) {
  auto exponent = torch::arange(0, dim, 2).to(torch::kFloat32).div(dim);
  auto freqs = torch::outer(index, 1.0 / torch::pow(theta, exponent));
  return torch::polar(torch::ones_like(freqs), freqs);
}

struct DiffusersQwenEmbedRope {
  torch::Tensor pos_freqs, neg_freqs;

  DiffusersQwenEmbedRope() {
    // pos_index = torch.arange(4096)
    // neg_index = torch.arange(4096).flip(0) * -1 - 1
    auto pos_index = torch::arange(4096);
    auto neg_index = torch::arange(4096).flip(0) * -1 - 1;
    // self.pos_freqs = torch.cat([self.rope_params(pos_index, self.axes_dim[i], self.theta) ...],
    // dim=1)
    pos_freqs = torch::cat(
        {RopeParams(pos_index, kAxes[0], kTheta), RopeParams(pos_index, kAxes[1], kTheta),
         RopeParams(pos_index, kAxes[2], kTheta)},
        1);
    neg_freqs = torch::cat(
        {RopeParams(neg_index, kAxes[0], kTheta), RopeParams(neg_index, kAxes[1], kTheta),
         RopeParams(neg_index, kAxes[2], kTheta)},
        1);
  }

  // _compute_video_freqs(frame, height, width, idx) with scale_rope=True.
  torch::Tensor VideoFreqs(int64_t frame, int64_t height, int64_t width, int64_t idx) const {
    // seq_lens = frame * height * width
    const int64_t seq_lens = frame * height * width;
    // freqs_pos = pos_freqs.split([x // 2 for x in self.axes_dim], dim=1)
    std::vector<int64_t> halves = {kAxes[0] / 2, kAxes[1] / 2, kAxes[2] / 2};
    auto freqs_pos = pos_freqs.split_with_sizes(halves, 1);
    auto freqs_neg = neg_freqs.split_with_sizes(halves, 1);
    // freqs_frame = freqs_pos[0][idx : idx + frame].view(frame, 1, 1, -1).expand(frame, height,
    // width, -1)
    auto freqs_frame = freqs_pos[0]
                           .slice(0, idx, idx + frame)
                           .view({frame, 1, 1, -1})
                           .expand({frame, height, width, -1});
    // freqs_height = torch.cat([freqs_neg[1][-(height - height // 2) :], freqs_pos[1][: height //
    // 2]], dim=0) freqs_height = freqs_height.view(1, height, 1, -1).expand(frame, height, width,
    // -1)
    const int64_t rows = freqs_neg[1].size(0);
    auto freqs_height = torch::cat({freqs_neg[1].slice(0, rows - (height - height / 2), rows),
                                    freqs_pos[1].slice(0, 0, height / 2)},
                                   0)
                            .view({1, height, 1, -1})
                            .expand({frame, height, width, -1});
    // freqs_width = torch.cat([freqs_neg[2][-(width - width // 2) :], freqs_pos[2][: width // 2]],
    // dim=0) freqs_width = freqs_width.view(1, 1, width, -1).expand(frame, height, width, -1)
    auto freqs_width = torch::cat({freqs_neg[2].slice(0, rows - (width - width / 2), rows),
                                   freqs_pos[2].slice(0, 0, width / 2)},
                                  0)
                           .view({1, 1, width, -1})
                           .expand({frame, height, width, -1});
    // freqs = torch.cat([freqs_frame, freqs_height, freqs_width], dim=-1).reshape(seq_lens, -1)
    return torch::cat({freqs_frame, freqs_height, freqs_width}, -1)
        .reshape({seq_lens, -1})
        .contiguous();
  }

  // forward(video_fhw=img_shapes[0], max_txt_seq_len): (vid_freqs, txt_freqs).
  std::pair<torch::Tensor, torch::Tensor> Forward(
      const std::vector<std::tuple<int64_t, int64_t, int64_t>>& video_fhw,
      int64_t max_txt_seq_len) const {
    std::vector<torch::Tensor> vid_freqs;
    int64_t max_vid_index = 0;
    // for idx, fhw in enumerate(video_fhw):
    for (size_t idx = 0; idx < video_fhw.size(); ++idx) {
      const auto [frame, height, width] = video_fhw[idx];
      vid_freqs.push_back(VideoFreqs(frame, height, width, static_cast<int64_t>(idx)));
      // if self.scale_rope: max_vid_index = max(height // 2, width // 2, max_vid_index)
      max_vid_index = std::max({height / 2, width / 2, max_vid_index});
    }
    // txt_freqs = pos_freqs_device[max_vid_index : max_vid_index + max_txt_seq_len_int, ...]
    auto txt_freqs = pos_freqs.slice(0, max_vid_index, max_vid_index + max_txt_seq_len);
    // vid_freqs = torch.cat(vid_freqs, dim=0)
    return {torch::cat(vid_freqs, 0), txt_freqs};
  }
};

const DiffusersQwenEmbedRope& Reference() {
  static const DiffusersQwenEmbedRope* rope = new DiffusersQwenEmbedRope();
  return *rope;
}

models::qwenimage::QwenRopeFreqs Ours(const std::vector<ImageShape>& shapes, int64_t text_len) {
  auto rope =
      QwenRopeFrequencies(shapes, text_len, kAxes, static_cast<double>(kTheta), torch::kCPU);
  EXPECT_TRUE(rope.ok()) << rope.status();
  return *std::move(rope);
}

TEST(QwenMultiShapeRope, SingleShapeIsDiffusersBitForBit) {
  for (const ImageShape& s : {ImageShape{1, 6, 10}, ImageShape{1, 7, 5}, ImageShape{1, 64, 64}}) {
    auto rope = Ours({s}, 9);
    auto [vid, txt] = Reference().Forward({{s.frames, s.height, s.width}}, 9);
    EXPECT_TRUE(torch::equal(rope.image, vid)) << s.height << "x" << s.width;
    EXPECT_TRUE(torch::equal(rope.text, txt)) << s.height << "x" << s.width;
    EXPECT_TRUE(torch::equal(rope.joint.freqs, torch::cat({txt, vid}, 0)));
  }
}

// The edit pipelines: target latents (1, 6, 10), then two condition images of other sizes.
TEST(QwenMultiShapeRope, ConditionImagesFollowWithFrameIndexAndTextAfterTheLargestGrid) {
  const ImageShape target{1, 6, 10}, cond1{1, 14, 8}, cond2{1, 5, 3};
  const int64_t text_len = 11;
  auto single = Ours({target}, text_len);
  auto multi = Ours({target, cond1, cond2}, text_len);
  const int64_t n0 = 60, n1 = 14 * 8, n2 = 15;
  ASSERT_EQ(multi.image.size(0), n0 + n1 + n2);
  ASSERT_EQ(multi.text.size(0), text_len);

  // The first shape's rows are the single-shape rows (idx = 0 either way).
  EXPECT_TRUE(torch::equal(multi.image.slice(0, 0, n0), single.image));
  // The whole thing is diffusers' forward over the list.
  auto [vid, txt] = Reference().Forward({{1, 6, 10}, {1, 14, 8}, {1, 5, 3}}, text_len);
  EXPECT_TRUE(torch::equal(multi.image, vid));
  EXPECT_TRUE(torch::equal(multi.text, txt));
  // Condition image k: _compute_video_freqs(1, h_k, w_k, idx=k) (frame position k).
  EXPECT_TRUE(torch::equal(multi.image.slice(0, n0, n0 + n1), Reference().VideoFreqs(1, 14, 8, 1)));
  EXPECT_TRUE(torch::equal(multi.image.slice(0, n0 + n1), Reference().VideoFreqs(1, 5, 3, 2)));
  // Text starts at max over the shapes of max(h // 2, w // 2) = 14 // 2 = 7 (single: 10 // 2 = 5).
  EXPECT_TRUE(torch::equal(multi.text, Reference().pos_freqs.slice(0, 7, 7 + text_len)));
  EXPECT_TRUE(torch::equal(single.text, Reference().pos_freqs.slice(0, 5, 5 + text_len)));
  EXPECT_FALSE(torch::equal(multi.text, single.text));
  // Joint order: text first, then every image token in list order.
  EXPECT_TRUE(torch::equal(multi.joint.freqs, torch::cat({txt, vid}, 0)));

  // Spot values: condition 1's first token is (frame 1, row -7, column -4).
  auto first = multi.image[n0];
  EXPECT_TRUE(torch::equal(first.slice(0, 0, 8), Reference().pos_freqs[1].slice(0, 0, 8)));
  EXPECT_TRUE(torch::equal(first.slice(0, 8, 36), Reference().neg_freqs[4096 - 7].slice(0, 8, 36)));
  EXPECT_TRUE(
      torch::equal(first.slice(0, 36, 64), Reference().neg_freqs[4096 - 4].slice(0, 36, 64)));
}

// The frame offset is the shape's index in the list, not the frames before it (diffusers slices
// freqs_pos[0][idx : idx + frame]).
TEST(QwenMultiShapeRope, FrameOffsetIsTheListIndex) {
  auto multi = Ours({ImageShape{2, 4, 4}, ImageShape{3, 2, 6}}, 4);
  auto [vid, txt] = Reference().Forward({{2, 4, 4}, {3, 2, 6}}, 4);
  EXPECT_TRUE(torch::equal(multi.image, vid));
  EXPECT_TRUE(torch::equal(multi.text, txt));
  // Second shape, first token: frame position 1 (= idx), overlapping the first shape's frame 1.
  EXPECT_TRUE(
      torch::equal(multi.image[32].slice(0, 0, 8), Reference().pos_freqs[1].slice(0, 0, 8)));
}

// img_shapes as a (B, K, 3) tensor gives the list in order.
TEST(QwenMultiShapeRope, BatchOfShapeListsFromTensor) {
  auto shapes =
      torch::tensor({{1, 6, 10}, {1, 14, 8}}, torch::kInt64).unsqueeze(0).repeat({2, 1, 1});
  auto parsed = models::qwenimage::ImageShapesFromTensor(shapes, 2, 60 + 112);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed, (std::vector<ImageShape>{{1, 6, 10}, {1, 14, 8}}));
  EXPECT_FALSE(models::qwenimage::ImageShapesFromTensor(shapes, 2, 60).ok());
}

}  // namespace
}  // namespace ditserve
