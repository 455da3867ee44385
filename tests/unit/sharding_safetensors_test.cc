// The safetensors reader on hand-made valid and corrupt files (the diffusers checkpoint layout: pipeline_utils.py, modeling_utils.py): every error is a Status
// naming the file and the tensor, never a crash or an out-of-bounds read.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <iterator>

#include "sharding/safetensors.h"
#include "sharding/safetensors_writer.h"
#include "tests/support/fixtures.h"
#include "tests/unit/sharding_test_util.h"

namespace ditserve::sharding {
namespace {

using ::testing::HasSubstr;
using ::ditserve::testing::TempDir;
using ::ditserve::testing::WriteRawSafetensors;

// Opens a file made of `header` + `data` and returns the error.
absl::Status OpenError(const TempDir& dir, const std::string& header, const std::string& data,
                       int64_t declared_len = -1) {
  const std::string path = dir.File("corrupt.safetensors");
  WriteRawSafetensors(path, header, data, declared_len);
  auto f = SafetensorsFile::Open(path);
  if (f.ok()) return absl::OkStatus();
  return f.status();
}

TEST(SafetensorsTest, RoundTripsWrittenFile) {
  TempDir dir;
  const std::vector<float> a = {1, 2, 3, 4, 5, 6};
  const std::vector<uint16_t> b = {0x3f80, 0x4000};
  const int64_t scalar = -7;
  const std::string path = dir.File("ok.safetensors");
  ASSERT_TRUE(WriteSafetensors(path,
                               {{"a", DType::kF32, {2, 3}, a.data()},
                                {"b", DType::kBF16, {2}, b.data()},
                                {"empty", DType::kF16, {0, 4}, nullptr},
                                {"scalar", DType::kI64, {}, &scalar}},
                               {{"format", "pt"}})
                  .ok());
  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->metadata().at("format"), "pt");
  ASSERT_EQ((*f)->tensors().size(), 4u);
  auto ta = (*f)->Find("a");
  ASSERT_TRUE(ta.ok());
  EXPECT_EQ((*ta)->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ((*ta)->nbytes(), 24u);
  EXPECT_EQ(std::memcmp((*f)->Data(**ta), a.data(), 24), 0);
  float got[3];
  ASSERT_TRUE((*f)->ReadTensorBytes(**ta, 12, 12, got).ok());
  EXPECT_EQ(got[0], 4.f);
  EXPECT_EQ(got[2], 6.f);
  auto ts = (*f)->Find("scalar");
  ASSERT_TRUE(ts.ok());
  EXPECT_EQ((*ts)->numel(), 1u);
  int64_t s = 0;
  ASSERT_TRUE((*f)->ReadTensorBytes(**ts, 0, 8, &s).ok());
  EXPECT_EQ(s, -7);
  auto missing = (*f)->Find("nope");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr(path));
  // Reads outside the tensor are refused, not performed.
  auto oob = (*f)->ReadTensorBytes(**ta, 20, 8, got);
  EXPECT_EQ(oob.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(oob.message()), HasSubstr("'a'"));
}

std::string FileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST(SafetensorsTest, StreamingWriterWritesWhatWriteSafetensorsWrites) {
  TempDir dir;
  const std::vector<float> a = {1, 2, 3, 4, 5, 6};
  const std::vector<uint16_t> b = {0x3f80, 0x4000};
  const std::vector<TensorToWrite> tensors = {{"a", DType::kF32, {2, 3}, a.data()},
                                              {"b", DType::kBF16, {2}, b.data()}};
  ASSERT_TRUE(WriteSafetensors(dir.File("whole.safetensors"), tensors, {{"format", "pt"}}).ok());
  const std::string path = dir.File("streamed.safetensors");
  auto w = SafetensorsFileWriter::Create(path, {{"a", DType::kF32, {2, 3}, nullptr},
                                                {"b", DType::kBF16, {2}, nullptr}},
                                         {{"format", "pt"}});
  ASSERT_TRUE(w.ok()) << w.status();
  // Wrong size for the next tensor: refused, naming it; nothing is written.
  absl::Status wrong = (*w)->Append(b.data(), 4);
  EXPECT_EQ(wrong.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(wrong.message()), HasSubstr("'a' needs 24 bytes, got 4"));
  ASSERT_TRUE((*w)->Append(a.data(), 24).ok());
  // Finishing with a tensor missing is refused; the writer stays usable.
  absl::Status early = (*w)->Finish();
  EXPECT_EQ(early.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(early.message()), HasSubstr("'b'"));
  EXPECT_FALSE(std::ifstream(path).good());
  ASSERT_TRUE((*w)->Append(b.data(), 4).ok());
  EXPECT_EQ((*w)->Append(b.data(), 4).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE((*w)->Finish().ok());
  EXPECT_FALSE(std::ifstream(path + ".tmp").good());
  EXPECT_EQ(FileBytes(path), FileBytes(dir.File("whole.safetensors")));
}

TEST(SafetensorsTest, StreamingWriterDestroyedUnfinishedLeavesNothing) {
  TempDir dir;
  const std::string path = dir.File("abandoned.safetensors");
  {
    auto w = SafetensorsFileWriter::Create(path, {{"a", DType::kF32, {2}, nullptr}});
    ASSERT_TRUE(w.ok()) << w.status();
    EXPECT_TRUE(std::ifstream(path + ".tmp").good());
  }
  EXPECT_FALSE(std::ifstream(path + ".tmp").good());
  EXPECT_FALSE(std::ifstream(path).good());
  // What WriteSafetensors refuses, Create refuses too.
  EXPECT_EQ(SafetensorsFileWriter::Create(path, {{"a", DType::kF32, {2}, nullptr},
                                                 {"a", DType::kF32, {2}, nullptr}})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SafetensorsTest, HeaderIsPaddedToEightBytes) {
  const std::vector<float> a = {1};
  std::string bytes = SafetensorsHeaderBytes({{"a", DType::kF32, {1}, a.data()}});
  EXPECT_EQ(bytes.size() % 8, 0u);
}

TEST(SafetensorsTest, OpensEveryFixtureFile) {
  const std::string root = ditserve::testing::FixturesDir();
  for (const char* p : {"/flux2-tiny/transformer/diffusion_pytorch_model.safetensors",
                        "/qwenimage-tiny/transformer/diffusion_pytorch_model.safetensors",
                        "/reference.safetensors"}) {
    auto f = SafetensorsFile::Open(root + p);
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_FALSE((*f)->tensors().empty());
  }
}

TEST(SafetensorsTest, FileErrors) {
  TempDir dir;
  auto missing = SafetensorsFile::Open(dir.File("absent.safetensors"));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("absent.safetensors"));

  ditserve::testing::WriteTextFile(dir.File("short.safetensors"), "abc");
  auto shrt = SafetensorsFile::Open(dir.File("short.safetensors"));
  EXPECT_EQ(shrt.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(shrt.status().message()), HasSubstr("short.safetensors"));

  auto d = SafetensorsFile::Open(dir.path());
  EXPECT_FALSE(d.ok());
}

TEST(SafetensorsTest, HeaderLengthErrors) {
  TempDir dir;
  // Declared longer than the file.
  auto s = OpenError(dir, "{}", "", 1000);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(s.message()), HasSubstr("header length 1000 exceeds"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("corrupt.safetensors"));
  // Absurdly long (would overflow 8 + N).
  s = OpenError(dir, "{}", "", std::numeric_limits<int64_t>::max());
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  // Zero-length header is not JSON.
  s = OpenError(dir, "", "", 0);
  EXPECT_THAT(std::string(s.message()), HasSubstr("not valid JSON"));
  // A 2 GiB header in a file that really is that long (sparse): refused by the header limit
  // before anything is parsed or copied.
  const std::string big = dir.File("big_header.safetensors");
  const uint64_t n = 2ull << 30;
  WriteRawSafetensors(big, "{", "", static_cast<int64_t>(n));
  ASSERT_EQ(::truncate(big.c_str(), static_cast<off_t>(8 + n)), 0);
  auto opened = SafetensorsFile::Open(big);
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(opened.status().message()),
              HasSubstr("header length 2147483648 exceeds the file size 2147483656 (or the "
                        "104857600-byte limit)"));
  EXPECT_THAT(std::string(opened.status().message()), HasSubstr("big_header.safetensors"));
}

struct HeaderCase {
  const char* what;
  std::string header;
  uint64_t data_size;
  std::string tensor;   // must be named in the message ("" = none)
  std::string message;  // substring
};

TEST(SafetensorsTest, EveryHeaderError) {
  const std::string ok_entry = R"("dtype":"F32","shape":[2],"data_offsets":[0,8])";
  const std::vector<HeaderCase> cases = {
      {"not json", "{\"a\": ", 8, "", "not valid JSON"},
      {"not an object", "[1,2]", 8, "", "not a JSON object"},
      {"bad utf8", "{\"\xff\xfe\":{}}", 8, "", "not valid JSON"},
      {"duplicate", "{\"w\":{" + ok_entry + "},\"w\":{" + ok_entry + "}}", 8, "w",
       "duplicate tensor name"},
      {"entry not object", R"({"w": 3})", 8, "w", "entry is not an object"},
      {"missing dtype", R"({"w":{"shape":[2],"data_offsets":[0,8]}})", 8, "w", "dtype"},
      {"dtype not string", R"({"w":{"dtype":4,"shape":[2],"data_offsets":[0,8]}})", 8, "w",
       "dtype"},
      {"unknown dtype", R"({"w":{"dtype":"F42","shape":[2],"data_offsets":[0,8]}})", 8, "w",
       "unknown dtype 'F42'"},
      {"missing shape", R"({"w":{"dtype":"F32","data_offsets":[0,8]}})", 8, "w", "shape"},
      {"negative dim", R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8, "w",
       "non-negative"},
      {"float dim", R"({"w":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", 8, "w",
       "non-negative"},
      {"huge shape", R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,8]}})",
       8, "w", "too large"},
      {"dim over int64", R"({"w":{"dtype":"U8","shape":[18446744073709551615],"data_offsets":[0,8]}})",
       8, "w", "too large"},
      {"missing offsets", R"({"w":{"dtype":"F32","shape":[2]}})", 8, "w", "data_offsets"},
      {"three offsets", R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4,8]}})", 8, "w",
       "data_offsets"},
      {"negative offset", R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", 8, "w",
       "non-negative"},
      {"end before begin", R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", 8, "w",
       "end before begin"},
      {"past the buffer", R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 8, "w",
       "run past the data buffer (8 bytes)"},
      {"offset overflow",
       R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[18446744073709551615,18446744073709551615]}})",
       8, "w", "run past"},
      {"length mismatch", R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 16, "w",
       "byte length 8 does not match dtype F32 x 3 elements"},
      {"numel x size overflow",
       R"({"w":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,8]}})", 8, "w",
       "does not match"},
      {"overlap",
       R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
       16, "b", "overlap tensor 'a'"},
      {"contained overlap",
       R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},"c":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
       16, "b", "overlap tensor 'a'"},
      {"metadata not object", R"({"__metadata__":[1]})", 0, "", "__metadata__"},
      {"metadata value", R"({"__metadata__":{"k":1}})", 0, "", "__metadata__"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    auto r = ParseSafetensorsHeader(c.header, c.data_size, "model.safetensors");
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
    const std::string msg(r.status().message());
    EXPECT_THAT(msg, HasSubstr("model.safetensors"));
    EXPECT_THAT(msg, HasSubstr(c.message));
    if (!c.tensor.empty()) {
      EXPECT_THAT(msg, HasSubstr("tensor '" + c.tensor + "'"));
    }
  }
}

TEST(SafetensorsTest, AcceptsEdgeCases) {
  // Trailing padding spaces, gaps between tensors, empty tensors anywhere, every known dtype.
  std::string h = R"({"__metadata__":{"format":"pt"},)";
  uint64_t off = 0;
  const std::vector<std::pair<std::string, int>> dtypes = {
      {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4}, {"I16", 2},
      {"I8", 1}, {"U8", 1}, {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  for (const auto& [name, size] : dtypes) {
    h += "\"t_" + name + "\":{\"dtype\":\"" + name + "\",\"shape\":[3],\"data_offsets\":[" +
         std::to_string(off) + "," + std::to_string(off + 3 * size) + "]},";
    off += 3 * size + 5;  // a gap
  }
  h += R"("z":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}}     )";
  auto r = ParseSafetensorsHeader(h, off, "ok.safetensors");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->size(), dtypes.size() + 1);
}

TEST(SafetensorsTest, TruncatedAfterOpenIsDataLossNotCrash) {
  TempDir dir;
  const std::string path = dir.File("t.safetensors");
  std::vector<float> a(1024, 1.f);
  ASSERT_TRUE(WriteSafetensors(path, {{"w", DType::kF32, {1024}, a.data()}}).ok());
  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok());
  ASSERT_EQ(::truncate(path.c_str(), 200), 0);
  std::vector<float> out(1024);
  auto s = (*f)->ReadTensorBytes((*f)->tensors()[0], 0, 4096, out.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(s.message()), HasSubstr(path));
  EXPECT_THAT(std::string(s.message()), HasSubstr("'w'"));
}

}  // namespace
}  // namespace ditserve::sharding
