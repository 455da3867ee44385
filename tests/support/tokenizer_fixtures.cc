#include "common/remove_tree.h"
#include "tests/support/tokenizer_fixtures.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <thread>

#include "tests/support/fixtures.h"

namespace ditserve::testing {
namespace {

namespace fs = std::filesystem;

// Tokenizer::Load(dir), or a test failure naming the status and abort.
template <typename Tokenizer>
const Tokenizer* LoadOrAbort(const std::string& dir) {
  auto loaded = Tokenizer::Load(dir);
  if (!loaded.ok()) {
    ADD_FAILURE() << loaded.status();
    std::abort();
  }
  return new Tokenizer(std::move(*loaded));
}

}  // namespace

std::string FixturePath(const std::string& relative) { return FixturesDir() + "/" + relative; }

std::string ClipTokenizerDir() { return FixturesDir() + "/flux1-tiny/tokenizer"; }
std::string T5TokenizerDir() { return FixturesDir() + "/flux1-tiny/tokenizer_2"; }

const tokenizers::ClipTokenizer& FixtureClipTokenizer() {
  static const auto* tokenizer = LoadOrAbort<tokenizers::ClipTokenizer>(ClipTokenizerDir());
  return *tokenizer;
}

const tokenizers::T5Tokenizer& FixtureT5Tokenizer() {
  static const auto* tokenizer = LoadOrAbort<tokenizers::T5Tokenizer>(T5TokenizerDir());
  return *tokenizer;
}

fs::path CopyToTempDir(const std::string& dir, const std::string& name) {
  const fs::path copy = fs::path(::testing::TempDir()) / name;
  (void)ditserve::RemoveTree(copy);
  fs::create_directories(copy);
  for (const auto& entry : fs::directory_iterator(dir)) {
    fs::copy_file(entry.path(), copy / entry.path().filename());
    fs::permissions(copy / entry.path().filename(), fs::perms::owner_read | fs::perms::owner_write);
  }
  return copy;
}

std::string ReadTokenizerFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteTokenizerFile(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

void ExpectConcurrentEncodesAgree(const EncodeFn& serial, const EncodeFn& concurrent) {
  const std::vector<std::string> texts = {"a cat holding a sign", "naïve café 東京 🍣",
                                          "A photograph of an astronaut, 4k!!", ""};
  std::vector<std::vector<int64_t>> expected;
  for (const auto& t : texts) expected.push_back(serial(t));
  std::vector<std::thread> threads;
  std::vector<int> mismatches(8, 0);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 200; ++round) {
        const size_t i = (t + round) % texts.size();
        if (concurrent(texts[i]) != expected[i]) ++mismatches[t];
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int m : mismatches) EXPECT_EQ(m, 0);
}

std::vector<int64_t> Concat(std::initializer_list<std::vector<int64_t>> parts) {
  std::vector<int64_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

}  // namespace ditserve::testing
