// libFuzzer target: a Hugging Face tokenizer folder (tokenizer.json, optionally
// tokenizer_config.json) loaded with LoadHfTokenizer, and, when it loads, a fuzzer-chosen text
// encoded with it.
//
// Input layout (the seeds follow it):  <text to encode> NUL <tokenizer.json> [NUL <tokenizer_config.json>]
// Without a NUL the whole input is tokenizer.json and the text is a fixed sentence. The files are
// written into a private temporary folder and read by the real loader. Every call must return a
// Status: no crash, no exception, no sanitizer report, no unbounded time or memory.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/string_view.h"
#include "models/tokenizers/hf_tokenizer.h"
#include "models/tokenizers/hf_tokenizer_loader.h"
#include "tests/fuzz/fuzz_workdir.h"

namespace {

namespace fs = std::filesystem;

std::string g_dir;

void WriteFile(const std::string& path, absl::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

void RemoveDir() {
  if (g_dir.empty()) return;
  std::error_code ec;
  fs::remove_all(g_dir, ec);
}

void CheckEncoding(const ditserve::tokenizers::HfEncoding& e) {
  if (e.ids.size() != e.attention_mask.size()) __builtin_trap();
  for (int64_t id : e.ids) {
    if (id < 0 || id > INT32_MAX) __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  g_dir = ditserve_fuzz::MakeFuzzWorkdir("ditserve-tokenizer-fuzz");
  std::atexit(RemoveDir);
  return 0;
}

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
  WriteFile(g_dir + "/tokenizer.json", json);
  const std::string config_path = g_dir + "/tokenizer_config.json";
  if (has_config) {
    WriteFile(config_path, config);
  } else {
    std::error_code ec;
    fs::remove(config_path, ec);
  }

  auto tokenizer = ditserve::tokenizers::LoadHfTokenizer(g_dir);
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
