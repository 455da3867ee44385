#include "pipeline/qwen_edit_prompt.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/status_macros.h"
#include "imaging/qwen2vl_image_processor.h"

namespace ditserve::pipeline {

const char kQwenEditTemplate[] =
    "<|im_start|>system\nDescribe the key features of the input image (color, shape, size, "
    "texture, objects, background), then explain how the user's text instruction should alter or "
    "modify the image. Generate a new image that meets the user's requirements while maintaining "
    "consistency with the original input where appropriate.<|im_end|>\n<|im_start|>user\n{}"
    "<|im_end|>\n<|im_start|>assistant\n";
const char kQwenEditImagePromptTemplate[] =
    "Picture {}: <|vision_start|><|image_pad|><|vision_end|>";
const char kQwenImagePadToken[] = "<|image_pad|>";
// QwenImageEditPipeline's prompt_template_encode holds it bare after "<|im_start|>user\n".
const char kQwenEditVisionBlock[] = "<|vision_start|><|image_pad|><|vision_end|>";

namespace {

// Occurrences of `needle` in `text`, left to right, not overlapping (re.finditer / str.count).
int64_t CountOf(absl::string_view text, absl::string_view needle) {
  int64_t n = 0;
  for (size_t pos = text.find(needle); pos != absl::string_view::npos;
       pos = text.find(needle, pos + needle.size())) {
    ++n;
  }
  return n;
}

}  // namespace

std::string QwenEditImagePrompt(int num_images, QwenEditImageLabels labels) {
  std::string out;
  for (int i = 0; i < num_images; ++i) {
    absl::StrAppend(
        &out, labels == QwenEditImageLabels::kNumbered
                  ? absl::StrReplaceAll(kQwenEditImagePromptTemplate, {{"{}", absl::StrCat(i + 1)}})
                  : std::string(kQwenEditVisionBlock));
  }
  return out;
}

std::string QwenEditTemplatedPrompt(absl::string_view prompt, int num_images,
                                    QwenEditImageLabels labels) {
  return absl::StrReplaceAll(
      kQwenEditTemplate, {{"{}", absl::StrCat(QwenEditImagePrompt(num_images, labels), prompt)}});
}

absl::StatusOr<std::vector<int64_t>> QwenEditImageTokenCounts(
    const std::vector<std::array<int64_t, 3>>& grids_thw, int merge_size) {
  if (merge_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("merge_size ", merge_size, " < 1"));
  }
  const int64_t merge_length = int64_t{merge_size} * merge_size;
  std::vector<int64_t> counts;
  counts.reserve(grids_thw.size());
  for (size_t i = 0; i < grids_thw.size(); ++i) {
    const auto& g = grids_thw[i];
    if (g[0] < 1 || g[1] < 1 || g[2] < 1 || (g[0] * g[1] * g[2]) % merge_length != 0) {
      return absl::InvalidArgumentError(absl::StrCat("image ", i, ": grid (", g[0], ", ", g[1],
                                                     ", ", g[2], ") with merge_size ", merge_size));
    }
    counts.push_back(imaging::Qwen2VlImageTokenCount(g, merge_size));
  }
  return counts;
}

absl::StatusOr<std::vector<std::string>> ExpandQwenImagePads(
    const std::vector<std::string>& texts, const std::vector<int64_t>& token_counts) {
  const absl::string_view pad = kQwenImagePadToken;
  std::vector<std::string> out;
  out.reserve(texts.size());
  size_t next = 0;
  for (const std::string& text : texts) {
    std::string expanded;
    size_t last = 0;
    for (size_t pos = text.find(pad.data(), 0, pad.size()); pos != std::string::npos;
         pos = text.find(pad.data(), last, pad.size())) {
      if (next == token_counts.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("the prompts hold more ", pad, " than the ", token_counts.size(),
                         " image(s) (transformers' processor fails the same way)"));
      }
      expanded.append(text, last, pos - last);
      for (int64_t k = 0; k < token_counts[next]; ++k) expanded.append(pad.data(), pad.size());
      ++next;
      last = pos + pad.size();
    }
    expanded.append(text, last, std::string::npos);
    out.push_back(std::move(expanded));
  }
  return out;
}

absl::StatusOr<QwenEditTokens> TokenizeQwenEditPrompts(
    const tokenizers::HfTokenizer& tokenizer, const std::vector<std::string>& prompts,
    const std::vector<std::array<int64_t, 3>>& grids_thw, int merge_size,
    QwenEditImageLabels labels) {
  if (prompts.empty()) return absl::InvalidArgumentError("no prompts");
  if (prompts.size() > 1 && !grids_thw.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(prompts.size(), " prompts with ", grids_thw.size(),
                     " image(s): the processor hands each image out once per call"));
  }
  if (!tokenizer.pad_id()) return absl::InvalidArgumentError("the tokenizer has no pad token");
  const std::optional<int64_t> image_pad_id = tokenizer.TokenToId(kQwenImagePadToken);
  if (!image_pad_id) {
    return absl::InvalidArgumentError(absl::StrCat("the tokenizer has no ", kQwenImagePadToken));
  }
  ASSIGN_OR_RETURN(std::vector<int64_t> counts, QwenEditImageTokenCounts(grids_thw, merge_size));
  std::vector<std::string> texts;
  texts.reserve(prompts.size());
  for (const std::string& p : prompts) {
    texts.push_back(QwenEditTemplatedPrompt(p, static_cast<int>(grids_thw.size()), labels));
  }
  ASSIGN_OR_RETURN(texts, ExpandQwenImagePads(texts, counts));

  std::vector<tokenizers::HfEncoding> encoded;
  encoded.reserve(texts.size());
  size_t longest = 0;
  for (size_t b = 0; b < texts.size(); ++b) {
    auto enc = tokenizer.Encode(texts[b]);  // no truncation, no padding yet
    if (!enc.ok()) {
      return absl::Status(enc.status().code(),
                          absl::StrCat("prompt ", b, ": ", enc.status().message()));
    }
    const int64_t in_ids = std::count(enc->ids.begin(), enc->ids.end(), *image_pad_id);
    const int64_t in_text = CountOf(texts[b], kQwenImagePadToken);
    if (in_ids != in_text) {
      return absl::InvalidArgumentError(absl::StrCat("prompt ", b, ": ", in_ids, " ",
                                                     kQwenImagePadToken, " ids for ", in_text,
                                                     " in the text"));
    }
    longest = std::max(longest, enc->ids.size());
    encoded.push_back(*std::move(enc));
  }
  // padding=True: to the longest of the batch, on the tokenizer's side (Qwen2: right).
  QwenEditTokens out;
  out.batch = static_cast<int64_t>(texts.size());
  out.length = static_cast<int64_t>(longest);
  out.input_ids.reserve(texts.size() * longest);
  out.attention_mask.reserve(texts.size() * longest);
  for (const auto& enc : encoded) {
    out.input_ids.insert(out.input_ids.end(), enc.ids.begin(), enc.ids.end());
    out.attention_mask.insert(out.attention_mask.end(), enc.attention_mask.begin(),
                              enc.attention_mask.end());
    out.input_ids.insert(out.input_ids.end(), longest - enc.ids.size(), *tokenizer.pad_id());
    out.attention_mask.insert(out.attention_mask.end(), longest - enc.ids.size(), 0);
  }
  return out;
}

}  // namespace ditserve::pipeline
