// libFuzzer target: a Hugging Face tokenizer folder (tokenizer.json, optionally
// tokenizer_config.json) loaded with LoadHfTokenizer, and, when it loads, a fuzzer-chosen text
// encoded with it.
//
// Input layout (the seeds follow it):  <text to encode> NUL <tokenizer.json> [NUL <tokenizer_config.json>]
// Without a NUL the whole input is tokenizer.json and the text is a fixed sentence. The files are
// given to the real loader in memory (LoadHfTokenizer over TokenizerFolder::InMemory: the parsers
// the folder reader runs on the files' bytes; nothing is written or read per input). Every call
// must return a Status: no crash, no exception, no sanitizer report, no unbounded time or memory.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "absl/strings/string_view.h"
#include "models/tokenizers/hf_tokenizer.h"
#include "models/tokenizers/hf_tokenizer_loader.h"
#include "models/tokenizers/tokenizer_files.h"

namespace {

void CheckEncoding(const ditserve::tokenizers::HfEncoding& e) {
  if (e.ids.size() != e.attention_mask.size()) __builtin_trap();
  for (int64_t id : e.ids) {
    if (id < 0 || id > INT32_MAX) __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using ditserve::tokenizers::HfEncodeOptions;
  using ditserve::tokenizers::Side;
  absl::string_view input(reinterpret_cast<const char*>(data), size);
  absl::string_view text = "a cat holding a sign <|endoftext|> [INST]";
  absl::string_view json = input;
  absl::string_view config;
  bool has_config = false;
  if (size_t nul = input.find('\0'); nul != absl::string_view::npos) {
    text = input.substr(0, nul);
    json = input.substr(nul + 1);
    if (size_t nul2 = json.find('\0'); nul2 != absl::string_view::npos) {
      config = json.substr(nul2 + 1);
      json = json.substr(0, nul2);
      has_config = true;
    }
  }
  std::map<std::string, absl::string_view> files = {{"tokenizer.json", json}};
  if (has_config) files.emplace("tokenizer_config.json", config);
  auto tokenizer = ditserve::tokenizers::LoadHfTokenizer(
      ditserve::tokenizers::TokenizerFolder::InMemory("fuzz", std::move(files)));
  if (!tokenizer.ok()) return 0;

  auto plain = tokenizer->Encode(text);
  if (plain.ok()) CheckEncoding(*plain);
  (void)tokenizer->Tokenize(text);
  (void)tokenizer->TokenToId(text);

  // Truncated and padded, as the prompt encoders call it; the length comes from the text.
  HfEncodeOptions options;
  options.max_length = static_cast<int>(text.size() % 24);
  options.truncation = true;
  options.pad_to_max_length = true;
  options.truncation_side = text.size() % 2 ? Side::kLeft : Side::kRight;
  options.padding_side = text.size() % 3 ? Side::kRight : Side::kLeft;
  options.pad_id = tokenizer->pad_id().value_or(0);
  auto padded = tokenizer->Encode(text, options);
  if (padded.ok()) {
    CheckEncoding(*padded);
    if (padded->ids.size() != static_cast<size_t>(*options.max_length)) __builtin_trap();
  }
  options.add_special_tokens = false;
  auto bare = tokenizer->Encode(text, options);
  if (bare.ok()) {
    CheckEncoding(*bare);
    if (bare->ids.size() != static_cast<size_t>(*options.max_length)) __builtin_trap();
  }
  return 0;
}
