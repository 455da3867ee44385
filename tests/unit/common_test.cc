#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "common/config_json.h"
#include "common/model_name.h"
#include "common/flags.h"
#include "common/grpc_status.h"
#include "common/model_flags.h"
#include "common/status_macros.h"

namespace ditserve {
namespace {

absl::StatusOr<int> Half(int x) {
  if (x % 2 != 0) return absl::InvalidArgumentError("odd");
  return x / 2;
}

absl::StatusOr<int> Quarter(int x) {
  ASSIGN_OR_RETURN(int h, Half(x));
  ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

absl::Status CheckEven(int x) {
  RETURN_IF_ERROR(Half(x).status());
  return absl::OkStatus();
}

TEST(StatusMacros, PropagateErrorsAndValues) {
  EXPECT_EQ(*Quarter(8), 2);
  EXPECT_EQ(Quarter(6).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(CheckEven(4).ok());
  EXPECT_FALSE(CheckEven(3).ok());
}

TEST(GrpcStatus, RoundTripsEveryCanonicalCode) {
  for (int c = 1; c <= 16; ++c) {
    absl::Status s(static_cast<absl::StatusCode>(c), "msg");
    grpc::Status g = ToGrpcStatus(s);
    EXPECT_EQ(static_cast<int>(g.error_code()), c);
    EXPECT_EQ(g.error_message(), "msg");
    EXPECT_EQ(FromGrpcStatus(g), s);
  }
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
}

TEST(Flags, ParsesTypedValuesAndPositionals) {
  std::string s = "a";
  int64_t i = 1;
  uint64_t u = 2;
  double d = 0.5;
  bool b = false;
  FlagParser p("prog", "test");
  p.AddString("name", &s, "a string");
  p.AddInt("count", &i, "an int");
  p.AddUint("size", &u, "a uint");
  p.AddDouble("scale", &d, "a double");
  p.AddBool("verbose", &b, "a bool");
  const char* argv[] = {"prog", "gen", "--name", "x", "--count=-3", "--size", "7",
                        "--scale=2.5", "--verbose", "tail"};
  ASSERT_TRUE(p.Parse(10, argv).ok());
  EXPECT_EQ(s, "x");
  EXPECT_EQ(i, -3);
  EXPECT_EQ(u, 7u);
  EXPECT_DOUBLE_EQ(d, 2.5);
  EXPECT_TRUE(b);
  EXPECT_TRUE(p.WasSet("size"));
  EXPECT_EQ(p.Positional(), (std::vector<std::string>{"gen", "tail"}));
  EXPECT_NE(p.Help().find("--count VALUE"), std::string::npos);
}

TEST(Flags, ErrorsNameTheFlag) {
  int64_t i = 0;
  uint64_t u = 0;
  FlagParser p("prog", "test");
  p.AddInt("count", &i, "");
  p.AddUint("size", &u, "");
  const char* bad_int[] = {"prog", "--count", "x"};
  auto s = p.Parse(3, bad_int);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--count"), std::string::npos);
  const char* neg[] = {"prog", "--size=-1"};
  EXPECT_NE(p.Parse(2, neg).message().find("--size"), std::string::npos);
  const char* unknown[] = {"prog", "--nope"};
  EXPECT_NE(p.Parse(2, unknown).message().find("unknown flag --nope"), std::string::npos);
  const char* missing[] = {"prog", "--count"};
  EXPECT_NE(p.Parse(2, missing).message().find("needs a value"), std::string::npos);
}

TEST(Flags, ListFlagsCollectEveryValueInOrder) {
  std::vector<std::string> loras;
  std::vector<std::string> tags = {"default"};
  FlagParser p("prog", "test");
  p.AddStringList("lora", &loras, "NAME=PATH");
  p.AddStringList("tag", &tags, "a tag");
  EXPECT_NE(p.Help().find("--tag VALUE\n      a tag (repeatable) (default: default)"),
            std::string::npos)
      << p.Help();
  const char* argv[] = {"prog", "--lora", "a=x.safetensors", "--lora=b=y,z", "--tag", "t1"};
  ASSERT_TRUE(p.Parse(6, argv).ok());
  // Values are taken whole (no splitting at ',' or '='); the first one replaces the default.
  EXPECT_EQ(loras, (std::vector<std::string>{"a=x.safetensors", "b=y,z"}));
  EXPECT_EQ(tags, (std::vector<std::string>{"t1"}));
  EXPECT_TRUE(p.WasSet("lora"));

  std::vector<std::string> kept = {"default"};
  FlagParser q("prog", "test");
  q.AddStringList("tag", &kept, "");
  const char* none[] = {"prog"};
  ASSERT_TRUE(q.Parse(1, none).ok());
  EXPECT_EQ(kept, (std::vector<std::string>{"default"}));
  EXPECT_FALSE(q.WasSet("tag"));
  const char* missing[] = {"prog", "--tag"};
  EXPECT_NE(q.Parse(2, missing).message().find("--tag needs a value"), std::string::npos);
}

// common/model_flags.h: each value set parses its spellings, names them back, and refuses anything
// else with INVALID_ARGUMENT naming the caller's field and listing the accepted values.
TEST(ModelFlags, ParseEachValueAndNameItBack) {
  for (ModelDtype d : {ModelDtype::kFloat32, ModelDtype::kBFloat16}) {
    EXPECT_EQ(*ParseModelDtype(ModelDtypeName(d), "--dtype"), d);
  }
  EXPECT_STREQ(ModelDtypeName(ModelDtype::kBFloat16), "bfloat16");
  for (DeviceKind k : {DeviceKind::kCpu, DeviceKind::kCuda}) {
    EXPECT_EQ(*ParseDeviceKind(DeviceKindName(k), "--device"), k);
  }
  EXPECT_STREQ(DeviceKindName(DeviceKind::kCuda), "cuda");
  for (TextEncoderPlacement p :
       {TextEncoderPlacement::kAuto, TextEncoderPlacement::kSharded, TextEncoderPlacement::kRank0}) {
    EXPECT_EQ(*ParseTextEncoderPlacement(TextEncoderPlacementName(p), "x"), p);
  }
  EXPECT_STREQ(TextEncoderPlacementName(TextEncoderPlacement::kRank0), "rank0");
  for (LoraMode m : {LoraMode::kMerge, LoraMode::kRuntime}) {
    EXPECT_EQ(*ParseLoraMode(LoraModeName(m), "x"), m);
  }
  EXPECT_STREQ(LoraModeName(LoraMode::kRuntime), "runtime");
  for (WeightFormat f : {WeightFormat::kModelDtype, WeightFormat::kFp8}) {
    EXPECT_EQ(*ParseWeightFormat(WeightFormatName(f)), f);
  }
}

TEST(ModelFlags, ErrorsNameTheFieldAndTheAcceptedValues) {
  auto expect = [](const absl::Status& s, const std::string& message) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(s.message(), message);
  };
  expect(ParseModelDtype("float16", "--dtype").status(),
         "--dtype must be float32 or bfloat16, got 'float16'");
  expect(ParseModelDtype("", "dtype").status(), "dtype must be float32 or bfloat16, got ''");
  expect(ParseDeviceKind("gpu", "--device").status(), "--device must be cpu or cuda, got 'gpu'");
  expect(ParseTextEncoderPlacement("rank1", "--text-encoder-placement").status(),
         "--text-encoder-placement must be auto, sharded or rank0, got 'rank1'");
  expect(ParseLoraMode("fast", "lora_mode").status(),
         "lora_mode must be merge or runtime, got 'fast'");
  expect(ParseWeightFormat("int8").status(), "--weights must be 'dtype' or 'fp8', got 'int8'");
  // Case and whitespace matter: the values are exact spellings.
  EXPECT_FALSE(ParseModelDtype("Float32", "--dtype").ok());
  EXPECT_FALSE(ParseDeviceKind("cpu ", "--device").ok());
}

}  // namespace
}  // namespace ditserve

TEST(ModelNameFromDir, IgnoresTrailingSlashes) {
  EXPECT_EQ(::ditserve::ModelNameFromDir("/x/FLUX.1-dev"), "FLUX.1-dev");
  EXPECT_EQ(::ditserve::ModelNameFromDir("/x/FLUX.1-dev/"), "FLUX.1-dev");
  EXPECT_EQ(::ditserve::ModelNameFromDir("/x/FLUX.1-dev//"), "FLUX.1-dev");
  EXPECT_EQ(::ditserve::ModelNameFromDir("rel/Qwen-Image/./"), "Qwen-Image");
}

// ParseJsonObjectFile (the config fuzzer's entry point) is what ReadJsonObjectFile does with the
// file's text: the same value, the same errors naming the same path.
TEST(ConfigJsonTest, ParseJsonObjectFileIsReadJsonObjectFileWithoutTheRead) {
  const std::string path = ::testing::TempDir() + "/common_test_config.json";
  const std::string deep = std::string(70, '[') + std::string(70, ']');
  for (const std::string& text :
       {std::string(R"({"a": [1, {"b": "c"}]})"), std::string("[1, 2]"), std::string("{\"a\": "),
        std::string(""), "{\"x\": " + deep + "}"}) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
    auto read = ::ditserve::ReadJsonObjectFile(path);
    auto parsed = ::ditserve::ParseJsonObjectFile(text, path);
    ASSERT_EQ(read.status(), parsed.status()) << text;
    if (read.ok()) {
      EXPECT_EQ(*read, *parsed);
    } else {
      EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_EQ(read.status().message().substr(0, path.size()), path);
    }
  }
  EXPECT_EQ(::ditserve::ReadJsonObjectFile(path + ".missing").status().code(),
            absl::StatusCode::kNotFound);
}
