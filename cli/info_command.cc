// ditserve-cli info: GetModelInfo, printed as JSON (protobuf's JSON mapping, field names as in the
// .proto, default values included so every key is always present). A server that is not serving
// because its worker group could not be formed says why in `not_serving_reason`. The input image
// spec (GenerateRequest.images, `generate --image`) is `inputs.image_inputs`: how many, what the
// model does with them (use), the model's size rules and the server's limits.
#include <cstdio>

#include <google/protobuf/util/json_util.h>

#include "absl/strings/str_cat.h"
#include "cli/channel.h"
#include "cli/commands.h"
#include "common/flags.h"
#include "common/grpc_status.h"
#include "ditserve/v1/ditserve.grpc.pb.h"

namespace ditserve::cli {
namespace {

struct InfoOptions {
  ConnectionFlags connection = WithTimeout(30);
};

}  // namespace

int RunInfo(int argc, const char* const* argv, int first) {
  InfoOptions o;
  FlagParser parser("ditserve-cli info", "Prints the served model and its limits as JSON.");
  BindConnectionFlags(&parser, &o.connection);
  bool done = false;
  int code = ParseFlags(&parser, argc, argv, first, &done);
  if (done) return code;
  if (absl::Status s = ValidateConnectionFlags(&o.connection); !s.ok()) {
    return PrintError(s, kExitUsage);
  }

  auto stub = ditserve::v1::ImageGeneration::NewStub(MakeChannel(o.connection));
  grpc::ClientContext context;
  ConfigureContext(o.connection, &context);
  ditserve::v1::ModelInfo info;
  grpc::Status status = stub->GetModelInfo(&context, ditserve::v1::GetModelInfoRequest(), &info);
  if (!status.ok()) return PrintError(FromGrpcStatus(status), kExitFailure);

  google::protobuf::util::JsonPrintOptions json;
  json.add_whitespace = true;
  json.always_print_primitive_fields = true;
  json.preserve_proto_field_names = true;
  std::string text;
  if (auto s = google::protobuf::util::MessageToJsonString(info, &text, json); !s.ok()) {
    return PrintError(absl::InternalError(absl::StrCat("JSON encoding: ", s.ToString())),
                      kExitFailure);
  }
  std::fputs(text.c_str(), stdout);
  if (text.empty() || text.back() != '\n') std::fputc('\n', stdout);
  return kExitOk;
}

}  // namespace ditserve::cli
