#include "tests/integration/cli_fake_server.h"

#include <grpcpp/health_check_service_interface.h>
#include <png.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"

namespace ditserve::testing {
namespace {

using ditserve::v1::GenerateEvent;
using ditserve::v1::GenerateRequest;
using ditserve::v1::GenerateResponse;

constexpr char kServiceName[] = "ditserve.v1.ImageGeneration";

uint8_t FakeByte(uint32_t y, uint32_t x, uint32_t c, uint64_t seed) {
  return static_cast<uint8_t>((y * 31 + x * 17 + c * 85 + seed * 7) & 0xff);
}

void AppendToString(png_structp png, png_bytep data, png_size_t length) {
  static_cast<std::string*>(png_get_io_ptr(png))->append(reinterpret_cast<char*>(data), length);
}

}  // namespace

std::string FakePng(uint32_t height, uint32_t width, uint64_t seed) {
  std::string out;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    return "";
  }
  png_set_write_fn(png, &out, AppendToString, nullptr);
  png_set_IHDR(png, info, width, height, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  std::vector<uint8_t> row(width * 3);
  for (uint32_t y = 0; y < height; ++y) {
    for (uint32_t x = 0; x < width; ++x) {
      for (uint32_t c = 0; c < 3; ++c) row[x * 3 + c] = FakeByte(y, x, c, seed);
    }
    png_write_row(png, row.data());
  }
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

float FakeRawValue(uint32_t y, uint32_t x, uint32_t c, uint32_t width, uint64_t seed) {
  return FakeByte(y, x, c, seed) / 255.0f;
}

float FakeLatentValue(uint64_t index) { return static_cast<float>(index % 97) * 0.25f - 12.0f; }

void FakeImageGeneration::FailAfterStep(uint32_t step) {
  std::lock_guard<std::mutex> lock(mu_);
  fail_after_step_ = step;
}

void FakeImageGeneration::SetStepDelayMs(int ms) {
  std::lock_guard<std::mutex> lock(mu_);
  step_delay_ms_ = ms;
}

std::optional<GenerateRequest> FakeImageGeneration::LastRequest() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_request_;
}

grpc::Status FakeImageGeneration::Run(const GenerateRequest& request, GenerateResponse* response) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    last_request_ = request;
  }
  if (request.prompt().empty() && !request.has_prompt_embeddings()) {
    return {grpc::StatusCode::INVALID_ARGUMENT, "prompt: required unless prompt_embeddings is given"};
  }
  uint32_t height = request.height() != 0 ? request.height() : kFakeDefaultSize;
  uint32_t width = request.width() != 0 ? request.width() : kFakeDefaultSize;
  if (height % 16 != 0 || width % 16 != 0 || height > 2048 || width > 2048) {
    return {grpc::StatusCode::INVALID_ARGUMENT,
            absl::StrCat("height/width: must be multiples of 16 and at most 2048, got ", height,
                         "x", width)};
  }
  uint64_t seed = request.has_seed() ? request.seed() : kFakeDefaultSeed;
  response->set_request_id(request.request_id().empty() ? "fake-request" : request.request_id());
  response->set_height(height);
  response->set_width(width);
  response->set_seed(seed);
  response->set_num_inference_steps(request.num_inference_steps() != 0
                                        ? request.num_inference_steps()
                                        : kFakeDefaultSteps);
  ditserve::v1::OutputFormat format = request.output_format();
  if (format == ditserve::v1::OUTPUT_FORMAT_UNSPECIFIED) format = ditserve::v1::OUTPUT_FORMAT_PNG;
  response->set_format(format);
  switch (format) {
    case ditserve::v1::OUTPUT_FORMAT_RAW_F32: {
      std::string* image = response->mutable_image();
      image->resize(size_t{height} * width * 3 * sizeof(float));
      size_t i = 0;
      for (uint32_t y = 0; y < height; ++y) {
        for (uint32_t x = 0; x < width; ++x) {
          for (uint32_t c = 0; c < 3; ++c, ++i) {
            float v = FakeRawValue(y, x, c, width, seed);
            std::memcpy(image->data() + i * sizeof(float), &v, sizeof(float));
          }
        }
      }
      break;
    }
    case ditserve::v1::OUTPUT_FORMAT_LATENTS: {
      ditserve::v1::Tensor* t = response->mutable_latents();
      int64_t tokens = int64_t{height / 16} * (width / 16);
      t->add_shape(1);
      t->add_shape(tokens);
      t->add_shape(kFakeLatentChannels);
      t->set_dtype(ditserve::v1::DTYPE_FLOAT32);
      std::string* data = t->mutable_data();
      data->resize(tokens * kFakeLatentChannels * sizeof(float));
      for (int64_t i = 0; i < tokens * kFakeLatentChannels; ++i) {
        float v = FakeLatentValue(i);
        std::memcpy(data->data() + i * sizeof(float), &v, sizeof(float));
      }
      break;
    }
    default:
      response->set_image(FakePng(height, width, seed));
  }
  auto* timings = response->mutable_timings();
  timings->set_denoise_seconds(0.5);
  timings->set_total_seconds(0.75);
  // With the step cache on, the first step is full and the others "cached".
  const uint32_t steps = response->num_inference_steps();
  const uint32_t cached = request.cache_threshold() > 0 ? steps - 1 : 0;
  timings->set_full_steps(steps - cached);
  timings->set_cached_steps(cached);
  return grpc::Status::OK;
}

grpc::Status FakeImageGeneration::Generate(grpc::ServerContext*, const GenerateRequest* request,
                                           GenerateResponse* response) {
  ++unary_calls_;
  return Run(*request, response);
}

grpc::Status FakeImageGeneration::GenerateStream(grpc::ServerContext* context,
                                                 const GenerateRequest* request,
                                                 grpc::ServerWriter<GenerateEvent>* writer) {
  ++stream_calls_;
  GenerateResponse response;
  if (grpc::Status s = Run(*request, &response); !s.ok()) return s;
  uint32_t fail_after;
  int delay_ms;
  {
    std::lock_guard<std::mutex> lock(mu_);
    fail_after = fail_after_step_;
    delay_ms = step_delay_ms_;
  }
  GenerateEvent event;
  event.mutable_queued()->set_position(0);
  writer->Write(event);
  uint32_t total = response.num_inference_steps();
  for (uint32_t step = 1; step <= total; ++step) {
    if (delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    if (context->IsCancelled()) return {grpc::StatusCode::CANCELLED, "cancelled"};
    GenerateEvent progress;
    progress.mutable_progress()->set_step(step);
    progress.mutable_progress()->set_total_steps(total);
    progress.mutable_progress()->set_step_seconds(0.125);
    progress.mutable_progress()->set_elapsed_seconds(0.125 * step);
    writer->Write(progress);
    if (step == fail_after) return {grpc::StatusCode::INTERNAL, "worker 1 failed"};
  }
  GenerateEvent result;
  *result.mutable_result() = std::move(response);
  writer->Write(result);
  return grpc::Status::OK;
}

grpc::Status FakeImageGeneration::GetModelInfo(grpc::ServerContext*,
                                               const ditserve::v1::GetModelInfoRequest*,
                                               ditserve::v1::ModelInfo* info) {
  info->set_name("fake-flux1");
  info->set_family("flux1");
  info->set_tp_degree(2);
  info->set_dtype("float32");
  info->set_device("cpu");
  info->set_version("0.0.0-fake");
  info->set_guidance_distilled(true);
  auto* limits = info->mutable_limits();
  limits->set_max_height(2048);
  limits->set_max_width(2048);
  limits->set_size_multiple(16);
  limits->set_min_steps(1);
  limits->set_max_steps(100);
  limits->set_max_guidance_scale(20.0f);
  limits->set_max_sequence_length(512);
  auto* defaults = info->mutable_defaults();
  defaults->set_height(kFakeDefaultSize);
  defaults->set_width(kFakeDefaultSize);
  defaults->set_num_inference_steps(kFakeDefaultSteps);
  defaults->set_guidance_scale(3.5f);
  auto* inputs = info->mutable_inputs();
  inputs->set_accepts_text_prompt(true);
  inputs->add_prompt_embeds_shape(1);
  inputs->add_prompt_embeds_shape(-1);
  inputs->add_prompt_embeds_shape(4096);
  return grpc::Status::OK;
}

std::unique_ptr<FakeServer> FakeServer::Start() {
  grpc::EnableDefaultHealthCheckService(true);
  std::unique_ptr<FakeServer> fake(new FakeServer());
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&fake->service_);
  fake->server_ = builder.BuildAndStart();
  if (fake->server_ == nullptr || port == 0) return nullptr;
  fake->address_ = absl::StrCat("127.0.0.1:", port);
  fake->SetServing(true);
  return fake;
}

FakeServer::~FakeServer() {
  if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
}

void FakeServer::SetServing(bool serving) {
  grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
  health->SetServingStatus("", serving);
  health->SetServingStatus(kServiceName, serving);
}

}  // namespace ditserve::testing
