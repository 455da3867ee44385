// A test double of the ditserve frontend for the client tests: a real grpc::Server on
// 127.0.0.1:<ephemeral> serving ditserve.v1.ImageGeneration plus gRPC's default health service.
// It follows the public API's contract (Queued, one Progress per step, the result last; defaults
// for zero fields; INVALID_ARGUMENT for a size that is not a multiple of 16) with made-up but
// deterministic pixels, so a test can recompute every byte a client should have written. Its
// timings count every step as a full pass, or with cache_threshold > 0 the first one full and the
// others cached.
//
// Threads: the service runs on gRPC's threads; the setters and LastRequest() are mutex-protected
// and may be called from the test thread at any time.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "ditserve/v1/ditserve.grpc.pb.h"

namespace ditserve::testing {

inline constexpr uint32_t kFakeDefaultSize = 32;
inline constexpr uint32_t kFakeDefaultSteps = 4;
inline constexpr uint64_t kFakeDefaultSeed = 1234;
inline constexpr int kFakeLatentChannels = 64;

// The fake's pixels: an 8-bit RGB PNG of height x width depending on the seed, and the float32
// value of channel c at (y, x) of the raw output.
std::string FakePng(uint32_t height, uint32_t width, uint64_t seed);
float FakeRawValue(uint32_t y, uint32_t x, uint32_t c, uint32_t width, uint64_t seed);
float FakeLatentValue(uint64_t index);

class FakeImageGeneration final : public ditserve::v1::ImageGeneration::Service {
 public:
  grpc::Status Generate(grpc::ServerContext* context, const ditserve::v1::GenerateRequest* request,
                        ditserve::v1::GenerateResponse* response) override;
  grpc::Status GenerateStream(grpc::ServerContext* context,
                              const ditserve::v1::GenerateRequest* request,
                              grpc::ServerWriter<ditserve::v1::GenerateEvent>* writer) override;
  grpc::Status GetModelInfo(grpc::ServerContext* context,
                            const ditserve::v1::GetModelInfoRequest* request,
                            ditserve::v1::ModelInfo* response) override;

  // After this many Progress events the stream fails with INTERNAL "worker 1 failed" (0 = never).
  void FailAfterStep(uint32_t step);
  // Sleep per denoising step, to exercise client deadlines.
  void SetStepDelayMs(int ms);
  std::optional<ditserve::v1::GenerateRequest> LastRequest() const;
  int unary_calls() const { return unary_calls_.load(); }
  int stream_calls() const { return stream_calls_.load(); }

 private:
  // Validates and fills the response; INVALID_ARGUMENT like the real server for a bad size.
  grpc::Status Run(const ditserve::v1::GenerateRequest& request,
                   ditserve::v1::GenerateResponse* response);

  mutable std::mutex mu_;
  std::optional<ditserve::v1::GenerateRequest> last_request_;
  uint32_t fail_after_step_ = 0;
  int step_delay_ms_ = 0;
  std::atomic<int> unary_calls_{0};
  std::atomic<int> stream_calls_{0};
};

class FakeServer {
 public:
  // Starts on 127.0.0.1 with an ephemeral port; health is SERVING for "" and the service name.
  static std::unique_ptr<FakeServer> Start();
  ~FakeServer();

  std::string address() const { return address_; }
  FakeImageGeneration& service() { return service_; }
  // Sets the health status of "" and "ditserve.v1.ImageGeneration".
  void SetServing(bool serving);

 private:
  FakeServer() = default;
  FakeImageGeneration service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
};

}  // namespace ditserve::testing
