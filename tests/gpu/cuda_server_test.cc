// The real binaries on a real GPU (skipped where torch sees no CUDA device): ditserve-frontend
// spawning one CUDA ditserve-worker on the flux1-tiny fixture. The fixture call through the
// server must reproduce diffusers' image in float32, and the worker's device memory must show in
// /metrics: allocated at least the weights, a peak above that once an image was made, the
// device's capacity.
#include <gtest/gtest.h>
#include <httplib.h>

#include <string>

#include <torch/torch.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "ditserve/v1/ditserve.grpc.pb.h"
#include "tests/support/fixture_requests.h"
#include "tests/support/fixtures.h"
#include "tests/support/server_process.h"

namespace ditserve::testing {
namespace {

// The value of the series `series` (exactly as exposed) on the frontend's /metrics, or -1.
double MetricValue(const ServerProcess& server, const std::string& series) {
  httplib::Client client("127.0.0.1", server.metrics_port());
  client.set_read_timeout(30, 0);
  const httplib::Result res = client.Get("/metrics");
  if (!res || res->status != 200) return -1;
  for (absl::string_view line : absl::StrSplit(res->body, '\n')) {
    double v = 0;
    if (absl::ConsumePrefix(&line, series + " ") && absl::SimpleAtod(line, &v)) return v;
  }
  return -1;
}

TEST(CudaServer, OneGpuWorkerServesTheReferenceImage) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible to torch";
  auto server = ServerProcess::Start({"--model", FixturesDir() + "/flux1-tiny", "--spawn-workers",
                                      "1", "--device", "cuda", "--dtype", "float32"});
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_TRUE((*server)->WaitUntilServing(std::chrono::seconds(300)))
      << "never became SERVING; log: " << (*server)->log_path();

  auto stub = v1::ImageGeneration::NewStub((*server)->Channel());
  for (int run = 0; run < 2; ++run) {  // the second run hits the warm caches: the same image
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
    v1::GenerateResponse resp;
    v1::GenerateRequest request = Flux1FixtureGenerateRequest();
    request.set_output_format(v1::OUTPUT_FORMAT_RAW_F32);
    const grpc::Status st = stub->Generate(&ctx, request, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
    torch::Tensor image = torch::empty({resp.height(), resp.width(), 3}, torch::kFloat32);
    ASSERT_EQ(resp.image().size(), static_cast<size_t>(image.nbytes()));
    std::memcpy(image.data_ptr(), resp.image().data(), image.nbytes());
    const double err = RelativeError(image, Ref("flux1.image"));
    EXPECT_LT(err, 1e-3) << "run " << run;
    std::printf("run %d through the server on cuda: relative error %.3g\n", run, err);
  }

  const std::string r0 = "{rank=\"0\"}";
  const double weights = MetricValue(**server, "ditserve_worker_weight_bytes" + r0);
  const double allocated = MetricValue(**server, "ditserve_worker_device_memory_allocated_bytes" + r0);
  const double peak = MetricValue(**server, "ditserve_worker_device_memory_peak_allocated_bytes" + r0);
  const double total = MetricValue(**server, "ditserve_worker_device_memory_total_bytes" + r0);
  std::printf("weights %.0f, allocated %.0f, peak %.0f, total %.0f bytes\n", weights, allocated,
              peak, total);
  EXPECT_GT(weights, 0);
  EXPECT_GE(allocated, weights);
  EXPECT_GT(peak, allocated);  // activations of the requests came and went
  EXPECT_GT(total, peak);
  EXPECT_EQ(MetricValue(**server, "ditserve_worker_denoise_steps_total" + r0), 8);
  EXPECT_EQ((*server)->Stop(), 0) << "frontend did not exit cleanly; log: " << (*server)->log_path();
}

}  // namespace
}  // namespace ditserve::testing
