// Input images through the real frontend (FrontendServer: gRPC service, validation, admission
// queue, dispatcher, worker group in --workers mode) to a one-rank in-process worker that describes
// a FLUX.2-like model (reference images) and records every RunRequest it receives:
// - a request with two PNG images reaches the worker as the prepared RgbPixels, in order, at the
//   first image's size;
// - an invalid image is refused with INVALID_ARGUMENT naming images[1], and never reaches the
//   worker;
// - a request above the old 64 MiB gRPC limit is received (--max-request-bytes' automatic value)
//   and judged by the image checks;
// - GetModelInfo publishes inputs.image_inputs with the server's limits.
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "ditserve/v1/ditserve.grpc.pb.h"
#include "ditserve/worker/v1/worker.grpc.pb.h"
#include "imaging/preprocess.h"
#include "server/frontend_server.h"
#include "worker/png_encoder.h"

namespace ditserve::server {
namespace {

using std::chrono::seconds;

worker::v1::ModelDescription Flux2Like() {
  worker::v1::ModelDescription m;
  m.set_name("flux2-fake");
  m.set_family("flux2");
  m.set_tp_degree(1);
  m.set_dtype("float32");
  m.set_device("cpu");
  m.mutable_inputs()->set_accepts_text_prompt(true);
  m.mutable_defaults()->set_height(64);
  m.mutable_defaults()->set_width(64);
  m.mutable_defaults()->set_num_inference_steps(2);
  m.mutable_defaults()->set_guidance_scale(4.0f);
  m.mutable_defaults()->set_max_sequence_length(32);
  v1::ImageInputs* in = m.mutable_inputs()->mutable_image_inputs();
  in->set_max_images(10);
  in->set_use("reference");
  in->set_min_side(64);
  in->set_max_aspect_ratio(8);
  in->set_max_area(128 * 128);  // small, so that the test's images are resized
  in->set_size_multiple(16);
  return m;
}

// One rank that forms a group of one, describes Flux2Like() and answers every job at once with a
// fake image per item, recording the RunRequests.
class RecordingWorker final : public worker::v1::Worker::Service {
 public:
  grpc::Status GetRendezvous(grpc::ServerContext*, const worker::v1::GetRendezvousRequest*,
                             worker::v1::Rendezvous* resp) override {
    resp->set_world_size(1);
    resp->set_group_id("g1");
    return grpc::Status::OK;
  }
  grpc::Status Init(grpc::ServerContext*, const worker::v1::InitRequest*,
                    grpc::ServerWriter<worker::v1::InitEvent>* writer) override {
    worker::v1::InitEvent ready;
    ready.set_phase("ready");
    *ready.mutable_model() = Flux2Like();
    writer->Write(ready);
    return grpc::Status::OK;
  }
  grpc::Status Run(grpc::ServerContext*, const worker::v1::RunRequest* req,
                   grpc::ServerWriter<worker::v1::RunEvent>* writer) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      runs_.push_back(*req);
    }
    worker::v1::RunEvent result;
    for (const auto& item : req->items()) {
      result.mutable_result()->add_outputs()->set_image("fake image for " + item.request_id());
    }
    writer->Write(result);
    return grpc::Status::OK;
  }
  grpc::Status Cancel(grpc::ServerContext*, const worker::v1::CancelRequest*,
                      worker::v1::CancelResponse*) override {
    return grpc::Status::OK;
  }
  grpc::Status GetStatus(grpc::ServerContext*, const worker::v1::GetStatusRequest*,
                         worker::v1::WorkerStatus* resp) override {
    resp->set_ready(true);
    return grpc::Status::OK;
  }
  grpc::Status Shutdown(grpc::ServerContext*, const worker::v1::ShutdownRequest*,
                        worker::v1::ShutdownResponse*) override {
    return grpc::Status::OK;
  }

  std::vector<worker::v1::RunRequest> runs() {
    std::lock_guard<std::mutex> lock(mu_);
    return runs_;
  }

 private:
  std::mutex mu_;
  std::vector<worker::v1::RunRequest> runs_;
};

imaging::RgbImage PatternImage(int w, int h, int seed) {
  imaging::RgbImage im = imaging::MakeRgbImage(w, h);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      uint8_t* p = &im.pixels[im.Offset(x, y)];
      p[0] = static_cast<uint8_t>(x * 3 + seed);
      p[1] = static_cast<uint8_t>(y * 5 + x * y);
      p[2] = static_cast<uint8_t>((x ^ y) + seed * 11);
    }
  }
  return im;
}

std::string Png(const imaging::RgbImage& im) {
  auto png = worker::EncodePng(im.pixels.data(), static_cast<uint32_t>(im.height),
                               static_cast<uint32_t>(im.width), {});
  EXPECT_TRUE(png.ok()) << png.status();
  return png.ok() ? *png : std::string();
}

std::string Bytes(const imaging::RgbImage& im) {
  return std::string(im.pixels.begin(), im.pixels.end());
}

class ImageInputsFrontendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&worker_);
    builder.SetMaxReceiveMessageSize(256 << 20);
    worker_server_ = builder.BuildAndStart();
    ASSERT_TRUE(worker_server_ && port != 0);

    options_.workers = absl::StrCat("127.0.0.1:", port);
    options_.listen = "127.0.0.1:0";
    options_.metrics_listen = "";
    ASSERT_TRUE(ValidateFrontendOptions(options_).ok());
    auto server = FrontendServer::Start(options_, MakeWorkerGroupOptions(options_, ""));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);

    // Woken by the group's readiness change (no polling).
    std::mutex mu;
    std::condition_variable cv;
    const int id = server_->group().AddReadinessListener([&](bool) {
      std::lock_guard<std::mutex> lock(mu);
      cv.notify_all();
    });
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait_for(lock, seconds(20), [&] { return server_->group().ready(); });
    }
    server_->group().RemoveReadinessListener(id);
    ASSERT_TRUE(server_->group().ready()) << "the group never formed";
    stub_ = v1::ImageGeneration::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", server_->port()), grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    server_.reset();
    if (worker_server_) worker_server_->Shutdown();
  }

  grpc::Status Generate(const v1::GenerateRequest& req, v1::GenerateResponse* resp) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + seconds(60));
    return stub_->Generate(&ctx, req, resp);
  }

  RecordingWorker worker_;
  std::unique_ptr<grpc::Server> worker_server_;
  FrontendOptions options_;
  std::unique_ptr<FrontendServer> server_;
  std::unique_ptr<v1::ImageGeneration::Stub> stub_;
};

TEST_F(ImageInputsFrontendTest, TwoPngsArriveAsThePreparedPixelsInOrder) {
  const imaging::RgbImage a = PatternImage(200, 150, 1);  // above max_area: resized, then cropped
  const imaging::RgbImage b = PatternImage(70, 90, 2);    // below: cropped to 64x80
  v1::GenerateRequest req;
  req.set_prompt("a fake cat");
  req.set_seed(7);
  req.add_images(Png(a));
  req.add_images(Png(b));
  v1::GenerateResponse resp;
  grpc::Status s = Generate(req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();

  const auto runs = worker_.runs();
  ASSERT_EQ(runs.size(), 1u);
  const worker::v1::RunRequest& run = runs[0];
  ASSERT_EQ(run.items_size(), 1);
  const worker::v1::RunItem& item = run.items(0);
  ASSERT_EQ(item.images_size(), 2);
  const imaging::RgbImage pa = *imaging::PrepareReferenceImage(a, 128 * 128, 16);
  const imaging::RgbImage pb = *imaging::PrepareReferenceImage(b, 128 * 128, 16);
  EXPECT_EQ(pa.width, 144);  // int(200 * s) = 147 -> 144
  EXPECT_EQ(pa.height, 96);  // int(150 * s) = 110 -> 96
  EXPECT_EQ(item.images(0).width(), 144u);
  EXPECT_EQ(item.images(0).height(), 96u);
  EXPECT_EQ(item.images(0).rgb(), Bytes(pa));
  EXPECT_EQ(item.images(1).width(), 64u);
  EXPECT_EQ(item.images(1).height(), 80u);
  EXPECT_EQ(item.images(1).rgb(), Bytes(pb));
  EXPECT_EQ(item.strength(), 0.0);
  // No height / width in the request: the first reference's prepared size.
  EXPECT_EQ(run.width(), 144u);
  EXPECT_EQ(run.height(), 96u);
  EXPECT_EQ(resp.width(), 144u);
  EXPECT_EQ(resp.height(), 96u);
  EXPECT_EQ(resp.image(), "fake image for " + item.request_id());
}

TEST_F(ImageInputsFrontendTest, AnInvalidImageIsRefusedNamingItBeforeTheWorker) {
  v1::GenerateRequest req;
  req.set_prompt("a fake cat");
  req.add_images(Png(PatternImage(64, 64, 3)));
  std::string truncated = Png(PatternImage(96, 96, 4));
  truncated.resize(truncated.size() / 2);
  req.add_images(truncated);
  v1::GenerateResponse resp;
  grpc::Status s = Generate(req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StartsWith(s.error_message(), "images[1]")) << s.error_message();

  // Too small for the model: named with its limit.
  v1::GenerateRequest small;
  small.set_prompt("a fake cat");
  small.add_images(Png(PatternImage(64, 64, 3)));
  small.add_images(Png(PatternImage(40, 64, 5)));
  s = Generate(small, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StrContains(s.error_message(),
                                "images[1] is 40x64; each side must be at least "
                                "64 pixels"))
      << s.error_message();
  EXPECT_TRUE(worker_.runs().empty());
}

TEST_F(ImageInputsFrontendTest, RequestsAboveTheOld64MibLimitAreReceived) {
  // Three 25 MB images (within --max-input-image-bytes' 32 MiB): 75 MB in one message. The gRPC
  // server receives it (384 MiB by default) and the image checks judge it.
  v1::GenerateRequest req;
  req.set_prompt("a fake cat");
  const std::string header = Png(PatternImage(64, 64, 6));
  for (int i = 0; i < 3; ++i) req.add_images(header + std::string(25 << 20, '\0'));
  v1::GenerateResponse resp;
  grpc::Status s = Generate(req, &resp);
  EXPECT_NE(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  if (!s.ok()) {
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
    EXPECT_TRUE(absl::StartsWith(s.error_message(), "images[0]")) << s.error_message();
  }
}

TEST_F(ImageInputsFrontendTest, ModelInfoPublishesTheImageInputs) {
  grpc::ClientContext ctx;
  v1::ModelInfo info;
  grpc::Status s = stub_->GetModelInfo(&ctx, v1::GetModelInfoRequest(), &info);
  ASSERT_TRUE(s.ok()) << s.error_message();
  const v1::ImageInputs& in = info.inputs().image_inputs();
  EXPECT_EQ(in.max_images(), 10u);
  EXPECT_EQ(in.use(), "reference");
  EXPECT_EQ(in.max_image_bytes(), 32u << 20);
  EXPECT_EQ(in.max_image_pixels(), 16777216u);
  EXPECT_EQ(in.max_image_side(), 8192u);
}

}  // namespace
}  // namespace ditserve::server
