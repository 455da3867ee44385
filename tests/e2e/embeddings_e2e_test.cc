// FLUX.2 and Qwen-Image served from precomputed prompt embeddings, end to end: the real frontend
// with two spawned CPU workers (Gloo) on the tiny fixture transformers, driven over gRPC. The
// latents it returns must equal the same pipeline run in this process at tp = 1; requests without
// embeddings, with the wrong width or asking for an image are refused naming the field.
#include <gtest/gtest.h>

#include <mutex>

#include "ditserve/v1/ditserve.grpc.pb.h"
#include "pipeline/pipeline.h"
#include "worker/job_codec.h"
#include "worker/tensor_proto.h"
#include "tests/support/fixtures.h"
#include "tests/support/server_process.h"
#include "comm/local_communicator.h"

namespace ditserve::testing {
namespace {

using v1::GenerateRequest;
using v1::GenerateResponse;

struct Family {
  std::string name;  // fixture prefix and model family
  std::string dir;   // transformer folder under the fixtures
  bool mask = false;
};
void PrintTo(const Family& f, std::ostream* os) { *os << f.name; }

GenerateRequest EmbeddingsRequest(const Family& f) {
  GenerateRequest r;
  r.set_height(128);
  r.set_width(128);
  r.set_num_inference_steps(3);
  r.set_seed(11);
  r.set_guidance_scale(4.0f);
  auto* pe = r.mutable_prompt_embeddings();
  *pe->mutable_prompt_embeds() = worker::TensorToProto(Ref(f.name + ".encoder_hidden_states"));
  if (f.mask) {
    *pe->mutable_text_mask() = worker::TensorToProto(Ref(f.name + ".encoder_hidden_states_mask"));
  }
  return r;
}

// The same request through the pipeline in this process, one rank.
torch::Tensor InProcessLatents(const Family& f, const GenerateRequest& g) {
  worker::v1::RunRequest r;
  r.set_job_id("in-process");
  r.set_height(g.height());
  r.set_width(g.width());
  r.set_num_inference_steps(g.num_inference_steps());
  r.set_max_sequence_length(512);
  r.set_output_format(v1::OUTPUT_FORMAT_LATENTS);
  auto* item = r.add_items();
  item->set_seed(g.seed());
  item->set_guidance_scale(g.guidance_scale());
  item->set_true_cfg_scale(1.0f);
  *item->mutable_prompt_embeddings() = g.prompt_embeddings();
  torch::Tensor latents;
  absl::Status s = comm::RunLocalGroup(1, [&](comm::Communicator& c) -> absl::Status {
    pipeline::PipelineOptions opts;
    opts.model_dir = FixturesDir() + "/" + f.dir;
    auto p = pipeline::LoadPipeline(opts, &c);
    if (!p.ok()) return p.status();
    auto job = worker::JobFromRunRequest(r);
    if (!job.ok()) return job.status();
    auto out = (*p)->Run(*job, [](const pipeline::StepEvent&) {}, [] { return false; });
    if (!out.ok()) return out.status();
    if (out->latents.size() != 1) return absl::InternalError("no latents");
    latents = out->latents[0];
    return absl::OkStatus();
  });
  EXPECT_TRUE(s.ok()) << s;
  return latents;
}

class EmbeddingsE2E : public ::testing::TestWithParam<Family> {
 protected:
  void SetUp() override {
    auto server = ServerProcess::Start({"--model", FixturesDir() + "/" + GetParam().dir,
                                        "--spawn-workers", "2", "--log-level", "info"});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    ASSERT_TRUE(server_->WaitUntilServing(std::chrono::seconds(180)))
        << "never became SERVING; log: " << server_->log_path();
    stub_ = v1::ImageGeneration::NewStub(server_->Channel());
  }
  void TearDown() override {
    if (server_) {
      EXPECT_EQ(server_->Stop(), 0) << "log: " << server_->log_path();
    }
  }
  grpc::Status Generate(const GenerateRequest& r, GenerateResponse* resp) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
    return stub_->Generate(&ctx, r, resp);
  }

  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<v1::ImageGeneration::Stub> stub_;
};

TEST_P(EmbeddingsE2E, ModelInfoSaysEmbeddingsAreRequired) {
  grpc::ClientContext ctx;
  v1::ModelInfo info;
  ASSERT_TRUE(stub_->GetModelInfo(&ctx, v1::GetModelInfoRequest(), &info).ok());
  EXPECT_EQ(info.family(), GetParam().name);
  EXPECT_EQ(info.tp_degree(), 2u);
  EXPECT_FALSE(info.inputs().accepts_text_prompt());
  EXPECT_TRUE(info.inputs().requires_prompt_embeddings());
  EXPECT_EQ(info.inputs().accepts_text_mask(), GetParam().mask);
}

TEST_P(EmbeddingsE2E, LatentsEqualTheInProcessPipeline) {
  const GenerateRequest request = EmbeddingsRequest(GetParam());  // output format left unspecified
  GenerateResponse resp;
  grpc::Status s = Generate(request, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.format(), v1::OUTPUT_FORMAT_LATENTS);
  EXPECT_EQ(resp.seed(), 11u);
  auto served = worker::TensorFromProto(resp.latents(), "latents");
  ASSERT_TRUE(served.ok()) << served.status();
  torch::Tensor expected = InProcessLatents(GetParam(), request);
  ASSERT_TRUE(expected.defined());
  ASSERT_EQ(served->sizes(), expected.sizes());
  EXPECT_LT(RelativeError(*served, expected), 1e-5);  // tp 2 across processes == tp 1
}

TEST_P(EmbeddingsE2E, RequestsTheModelCannotServeAreInvalid) {
  GenerateResponse resp;
  GenerateRequest text_only;
  text_only.set_prompt("a cat");
  grpc::Status s = Generate(text_only, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("prompt_embeddings"), std::string::npos) << s.error_message();

  GenerateRequest png = EmbeddingsRequest(GetParam());
  png.set_output_format(v1::OUTPUT_FORMAT_PNG);
  s = Generate(png, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("OUTPUT_FORMAT_LATENTS"), std::string::npos) << s.error_message();

  GenerateRequest narrow = EmbeddingsRequest(GetParam());
  auto* embeds = narrow.mutable_prompt_embeddings()->mutable_prompt_embeds();
  embeds->set_shape(2, embeds->shape(2) - 1);
  embeds->mutable_data()->resize(embeds->data().size() / (embeds->shape(2) + 1) * embeds->shape(2));
  s = Generate(narrow, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("prompt_embeds"), std::string::npos) << s.error_message();

  // The group is unharmed.
  ASSERT_TRUE(Generate(EmbeddingsRequest(GetParam()), &resp).ok());
}

INSTANTIATE_TEST_SUITE_P(Families, EmbeddingsE2E,
                         ::testing::Values(Family{"flux2", "flux2-tiny/transformer", false},
                                           Family{"qwenimage", "qwenimage-tiny/transformer", true}),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace ditserve::testing
