#include <gtest/gtest.h>

#include "common/model_name.h"
#include "common/flags.h"
#include "common/grpc_status.h"
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

}  // namespace
}  // namespace ditserve

TEST(ModelNameFromDir, IgnoresTrailingSlashes) {
  EXPECT_EQ(::ditserve::ModelNameFromDir("/x/FLUX.1-dev"), "FLUX.1-dev");
  EXPECT_EQ(::ditserve::ModelNameFromDir("/x/FLUX.1-dev/"), "FLUX.1-dev");
  EXPECT_EQ(::ditserve::ModelNameFromDir("/x/FLUX.1-dev//"), "FLUX.1-dev");
  EXPECT_EQ(::ditserve::ModelNameFromDir("rel/Qwen-Image/./"), "Qwen-Image");
}
