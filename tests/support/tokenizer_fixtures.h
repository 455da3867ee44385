// Test support for the tokenizer tests: the fixture's CLIP and T5 tokenizers (loaded once), copies
// of their folders that a test may damage and the load errors those must give, concurrent encodes,
// and token id lists joined for expectations.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "models/tokenizers/clip_tokenizer.h"
#include "models/tokenizers/t5_tokenizer.h"

namespace ditserve::testing {

// FixturesDir()/`relative` (e.g. "flux2-tiny/tokenizer").
std::string FixturePath(const std::string& relative);

// FixturesDir()/flux1-tiny/tokenizer and .../tokenizer_2.
std::string ClipTokenizerDir();
std::string T5TokenizerDir();

// The fixture tokenizers, loaded on first use and kept; a load error fails the test and aborts
// (every test of the binary needs them).
const tokenizers::ClipTokenizer& FixtureClipTokenizer();
const tokenizers::T5Tokenizer& FixtureT5Tokenizer();

// A fresh, writable copy of the files of `dir` in TempDir()/`name` (replacing any earlier one).
std::filesystem::path CopyToTempDir(const std::string& dir, const std::string& name);
// The bytes of a file ("" if unreadable); `path` replaced by `text`.
std::string ReadTokenizerFile(const std::filesystem::path& path);
void WriteTokenizerFile(const std::filesystem::path& path, const std::string& text);

// One damaged tokenizer file: `file` of the folder replaced by `text`; the load error must contain
// `expect_in_message`.
struct CorruptFile {
  const char* file;
  std::string text;
  const char* expect_in_message;
};

// For every case, a fresh copy of `dir` in TempDir()/`temp_name` with the case's file damaged:
// Tokenizer::Load of it fails, naming what the case expects.
template <typename Tokenizer>
void ExpectCorruptFilesRejected(const std::string& dir, const std::string& temp_name,
                                const std::vector<CorruptFile>& cases) {
  for (const CorruptFile& c : cases) {
    const std::filesystem::path copy = CopyToTempDir(dir, temp_name);
    WriteTokenizerFile(copy / c.file, c.text);
    auto loaded = Tokenizer::Load(copy.string());
    ASSERT_FALSE(loaded.ok()) << c.file << ": " << c.text.substr(0, 40);
    EXPECT_NE(loaded.status().message().find(c.expect_in_message), absl::string_view::npos)
        << loaded.status();
  }
}

// A prompt's ids.
using EncodeFn = std::function<std::vector<int64_t>(const std::string&)>;

// Mixed prompts (ASCII, accents, CJK, emoji, punctuation, empty) encoded with `serial` on this
// thread, then 200 times each round-robin from 8 threads with `concurrent`: every concurrent
// result equals the serial one.
void ExpectConcurrentEncodesAgree(const EncodeFn& serial, const EncodeFn& concurrent);

// The id lists one after another.
std::vector<int64_t> Concat(std::initializer_list<std::vector<int64_t>> parts);

}  // namespace ditserve::testing
