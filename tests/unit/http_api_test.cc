// The OpenAI-style images HTTP API (server/http_api.h) through real HTTP (cpp-httplib's client)
// against a real FrontendServer over an in-process fake worker group (tests/support/fake_worker.h),
// as frontend_failure_test does for gRPC: success with n = 2 run as one batch, every error answer
// (400 of each kind, 401, 413, 429 with Retry-After, 503 while loading and while draining, 504 at
// --default-timeout), the model list and health, the metrics it shares with gRPC, and HTTPS with
// the gRPC API's certificate; POST /v1/images/edits' multipart forms (their errors, the model that
// takes no input image, and its own body limit).
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/remove_tree.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/subprocess.h"
#include "server/frontend_server.h"
#include "tests/support/fake_worker.h"

namespace ditserve::server {
namespace {

using Json = nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::FakeRankScript;
using testing::FakeWorkerCluster;

// Generous bounds: the machine running the tests may be busy.
constexpr auto kLong = seconds(20);
constexpr char kToken[] = "s3cret-token";

// A generation body for the fake model (64 x 64; the fake runs `steps` steps of 10 ms).
Json Images(uint32_t steps = 3, uint32_t n = 1) {
  return {{"model", "fake-model"},
          {"prompt", "a fake cat"},
          {"size", "64x64"},
          {"num_inference_steps", steps},
          {"seed", 7},
          {"n", n},
          {"response_format", "b64_json"}};
}

struct Answer {
  int status = 0;  // 0: no HTTP answer (connection failed)
  std::string body;
  Json json;
  std::string retry_after;
  std::string www_authenticate;
  std::string content_type;
};

Answer From(const httplib::Result& r) {
  Answer a;
  if (!r) return a;
  a.status = r->status;
  a.body = r->body;
  a.json = Json::parse(r->body, nullptr, /*allow_exceptions=*/false);
  a.retry_after = r->get_header_value("Retry-After");
  a.www_authenticate = r->get_header_value("WWW-Authenticate");
  a.content_type = r->get_header_value("Content-Type");
  return a;
}

std::string TempDir() {
  return ::testing::TempDir() + "ditserve-http-api-" + std::to_string(::getpid());
}

// Waits (bounded) for `done`, for the few states no event reports (the admission queue's size,
// a draining server's health): a short poll, only where the tests have nothing to wait on.
bool Eventually(const std::function<bool()>& done) {
  const auto until = Clock::now() + kLong;
  while (Clock::now() < until) {
    if (done()) return true;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return done();
}

class HttpApiTest : public ::testing::Test {
 protected:
  // Starts `world` fake ranks and a frontend over them with the HTTP API on a free port, and waits
  // until the group has formed; with `hold_init` the group never forms (the ranks hold Init).
  void StartFrontend(int world, const std::function<void(FrontendOptions&)>& tweak = {},
                     bool hold_init = false) {
    cluster_ = std::make_unique<FakeWorkerCluster>(world);
    ASSERT_TRUE(cluster_->Start().ok());
    for (int r = 0; r < world; ++r) {
      FakeRankScript script;
      script.step_delay = milliseconds(10);
      cluster_->SetScript(r, script);
    }
    if (hold_init) cluster_->HoldInit(true);
    options_.model_dir = "";
    options_.workers = absl::StrJoin(cluster_->addresses(), ",");
    options_.listen = "127.0.0.1:0";
    options_.metrics_listen = "127.0.0.1:0";
    options_.http_listen = "127.0.0.1:0";
    options_.max_queue = 4;
    if (tweak) tweak(options_);
    ASSERT_TRUE(ValidateFrontendOptions(options_).ok());
    WorkerGroupOptions group = MakeWorkerGroupOptions(options_, "");
    group.connect_timeout = milliseconds(300);
    group.retry_backoff = milliseconds(50);
    auto server = FrontendServer::Start(options_, group);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    ASSERT_NE(server_->http_port(), 0);
    if (!hold_init) {
      ASSERT_TRUE(Eventually([&] { return server_->group().ready(); })) << "the group never formed";
    }
  }
  void TearDown() override {
    if (cluster_) cluster_->HoldInit(false);
    server_.reset();  // drains (no drain time) before the fake ranks go
    cluster_.reset();
  }

  std::unique_ptr<httplib::Client> Client() const {
    auto c = std::make_unique<httplib::Client>("127.0.0.1", server_->http_port());
    c->set_connection_timeout(5, 0);
    c->set_read_timeout(30, 0);
    return c;
  }
  Answer Post(const std::string& body, const httplib::Headers& headers = {}) const {
    return From(Client()->Post("/v1/images/generations", headers, body, "application/json"));
  }
  Answer Post(const Json& body, const httplib::Headers& headers = {}) const {
    return Post(body.dump(), headers);
  }
  // A multipart/form-data POST /v1/images/edits (cpp-httplib's client writes the form).
  Answer PostEdit(const httplib::MultipartFormDataItems& form,
                  const httplib::Headers& headers = {}) const {
    return From(Client()->Post("/v1/images/edits", headers, form));
  }
  Answer Get(const std::string& path, const httplib::Headers& headers = {}) const {
    return From(Client()->Get(path.c_str(), headers));
  }
  // The value of one /metrics series ("name{labels}" exactly as exposed: labels in name order), or
  // -1 when absent.
  double Metric(const std::string& series) const {
    httplib::Client c("127.0.0.1", server_->metrics_port());
    auto r = c.Get("/metrics");
    if (!r) return -1;
    for (absl::string_view line : absl::StrSplit(r->body, '\n')) {
      if (absl::ConsumePrefix(&line, series + " ")) return std::stod(std::string(line));
    }
    return -1;
  }

  // An OpenAI error object with this status, type and param whose message holds `message`.
  static void ExpectError(const Answer& a, int status, const std::string& type, const Json& param,
                          const std::string& message) {
    EXPECT_EQ(a.status, status) << a.body;
    EXPECT_EQ(a.content_type, "application/json") << a.body;
    ASSERT_TRUE(a.json.is_object() && a.json.contains("error")) << a.body;
    const Json& e = a.json["error"];
    EXPECT_EQ(e["type"], type) << a.body;
    EXPECT_EQ(e["param"], param) << a.body;
    EXPECT_TRUE(e["code"].is_string()) << a.body;
    EXPECT_TRUE(absl::StrContains(e["message"].get<std::string>(), message))
        << "want \"" << message << "\" in " << a.body;
  }

  FrontendOptions options_;
  std::unique_ptr<FakeWorkerCluster> cluster_;
  std::unique_ptr<FrontendServer> server_;
};

TEST_F(HttpApiTest, GeneratesNImagesAsOneBatchWithConsecutiveSeeds) {
  StartFrontend(2, [](FrontendOptions& o) { o.max_batch = 2; });
  const Answer a = Post(Images(3, 2));
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(a.content_type, "application/json");
  EXPECT_TRUE(a.json["created"].is_number_integer());
  ASSERT_EQ(a.json["data"].size(), 2u) << a.body;

  // One job of two on every rank: the images were admitted together and batched.
  for (int r = 0; r < 2; ++r) {
    const auto jobs = cluster_->jobs(r);
    ASSERT_EQ(jobs.size(), 1u) << "rank " << r;
    EXPECT_EQ(jobs[0].batch_size, 2u);
    EXPECT_EQ(jobs[0].outcome, "ok");
    ASSERT_EQ(jobs[0].request_ids.size(), 2u);
    EXPECT_TRUE(absl::EndsWith(jobs[0].request_ids[0], ".0")) << jobs[0].request_ids[0];
    EXPECT_TRUE(absl::EndsWith(jobs[0].request_ids[1], ".1")) << jobs[0].request_ids[1];
  }
  const auto ids = cluster_->jobs(0)[0].request_ids;
  for (size_t i = 0; i < 2; ++i) {
    std::string image;
    ASSERT_TRUE(absl::Base64Unescape(a.json["data"][i]["b64_json"].get<std::string>(), &image));
    EXPECT_EQ(image, "fake image for " + ids[i]);  // in the order of the call's images
    EXPECT_EQ(a.json["data"][i]["seed"], 7 + i);   // seed, seed + 1
  }
  // Counted like a gRPC call: one call, two images.
  EXPECT_EQ(Metric(R"(ditserve_requests_total{code="OK",method="ImagesGenerations"})"), 1);
  EXPECT_EQ(Metric(R"(ditserve_request_duration_seconds_count{method="ImagesGenerations"})"), 1);
  EXPECT_EQ(Metric("ditserve_images_generated_total"), 2);
  EXPECT_EQ(Metric(R"(ditserve_requests_total{code="OK",method="Generate"})"), 0);
  EXPECT_EQ(Metric("ditserve_requests_in_flight"), 0);
}

// cache_threshold reaches the workers' jobs; with the cache on, the n images of a call run one job
// each (never batched), and the ranks' cached passes reach /metrics.
TEST_F(HttpApiTest, CacheThresholdReachesTheWorkersAndItsImagesRunAlone) {
  StartFrontend(2, [](FrontendOptions& o) { o.max_batch = 2; });
  Json body = Images(3, 2);
  body["cache_threshold"] = 0.3;
  const Answer a = Post(body);
  ASSERT_EQ(a.status, 200) << a.body;
  ASSERT_EQ(a.json["data"].size(), 2u) << a.body;
  for (int r = 0; r < 2; ++r) {
    const auto jobs = cluster_->jobs(r);
    ASSERT_EQ(jobs.size(), 2u) << "rank " << r;
    for (const auto& job : jobs) {
      EXPECT_EQ(job.batch_size, 1u) << job.job_id;
      EXPECT_EQ(job.cache_threshold, 0.3) << job.job_id;
    }
  }
  // The fake ranks: the first step of a job with the cache on is full, the other 2 cached.
  EXPECT_EQ(Metric(R"(ditserve_worker_cached_steps_total{rank="0"})"), 4);
  EXPECT_EQ(Metric(R"(ditserve_worker_cached_steps_total{rank="1"})"), 4);
  EXPECT_EQ(Metric(R"(ditserve_worker_denoise_steps_total{rank="1"})"), 6);
}

TEST_F(HttpApiTest, ModelListAndHealth) {
  StartFrontend(2);
  const Answer models = Get("/v1/models");
  ASSERT_EQ(models.status, 200) << models.body;
  EXPECT_EQ(models.json["object"], "list");
  ASSERT_EQ(models.json["data"].size(), 1u);
  EXPECT_EQ(models.json["data"][0]["id"], "fake-model");  // GetModelInfo's name
  EXPECT_EQ(models.json["data"][0]["object"], "model");
  const Answer one = Get("/v1/models/fake-model");
  ASSERT_EQ(one.status, 200) << one.body;
  EXPECT_EQ(one.json["id"], "fake-model");
  ExpectError(Get("/v1/models/dall-e-3"), 404, "not_found_error", nullptr,
              "model \"dall-e-3\" is not served here");

  const Answer health = Get("/health");
  EXPECT_EQ(health.status, 200);
  EXPECT_EQ(health.json["status"], "SERVING");

  ExpectError(Get("/v1/chat/completions"), 404, "not_found_error", nullptr,
              "no route for GET /v1/chat/completions");
  ExpectError(Get("/v1/images/generations"), 404, "not_found_error", nullptr, "no route");
}

TEST_F(HttpApiTest, InvalidInputIs400NamingTheFieldAndTheLimit) {
  StartFrontend(2);  // --max-queue 4: n is at most 4
  struct Case {
    std::string body;
    Json param;
    std::string message;
  };
  auto with = [](const char* key, Json value) {
    Json j = Images();
    j[key] = std::move(value);
    return j.dump();
  };
  Json no_prompt = Images();
  no_prompt.erase("prompt");
  const std::vector<Case> cases = {
      {"{\"prompt\": \"a cat\",", nullptr, "the request body is not valid JSON"},
      {"\"a cat\"", nullptr, "the request body must be a JSON object"},
      {with("n", "2"), "n", "n must be an integer in 1..4, got a string"},
      {with("n", 0), "n", "n must be in 1..4, got 0"},
      {with("n", 5), "n", "n must be in 1..4, got 5"},
      {with("prompt", 42), "prompt", "prompt must be a string"},
      {no_prompt.dump(), "prompt", "prompt is required"},
      // The image store is off by default: "url" is refused before anything runs.
      {with("response_format", "url"), "response_format",
       "response_format \"url\" is not available: this server keeps no images"},
      {with("response_format", "webp"), "response_format", "response_format must be \"b64_json\""},
      {with("background", "transparent"), "background",
       "background \"transparent\" is not supported"},
      {with("output_format", "gif"), "output_format", "output_format must be one of"},
      {with("output_compression", 101), "output_compression",
       "output_compression must be in 0..100, got 101"},
      {with("quality", "ultra"), "quality", "quality must be one of"},
      {with("style", "photo"), "style", "style must be one of"},
      {with("moderation", "strict"), "moderation", "moderation must be one of"},
      {with("size", "64by64"), "size", "size must be \"WIDTHxHEIGHT\" in pixels"},
      {with("model", "dall-e-3"), "model", "model \"dall-e-3\" is not served here"},
      {with("steps", 4), "steps", "unknown field \"steps\""},
      {with("num_inference_steps", 0), "num_inference_steps",
       "num_inference_steps must be in 1..200, got 0"},
      // The shared request validator's checks (server/request_validator.cc).
      {with("size", "72x64"), "size", "width must be a multiple of 16 in 16..2048, got 72"},
      {with("size", "64x4096"), "size", "height must be a multiple of 16 in 16..2048, got 4096"},
      {with("guidance_scale", 31), "guidance_scale", "guidance_scale must be in 0..30, got 31"},
      {with("cache_threshold", 2), "cache_threshold",
       "cache_threshold must be in 0..1 (ModelInfo.step_cache.max_threshold; 0 = off), got 2"},
      {with("cache_threshold", "on"), "cache_threshold",
       "cache_threshold must be a number, got a string"},
      {with("prompt", std::string(9000, 'a')), "prompt",
       "prompt is 9000 bytes; the limit is 8192 bytes"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.body.substr(0, 80));
    const Answer a = Post(c.body);
    ExpectError(a, 400, "invalid_request_error", c.param, c.message);
    EXPECT_EQ(a.json["error"]["code"], "invalid_argument");
  }
  // Nothing ran, and every call was counted like a refused gRPC call.
  EXPECT_TRUE(cluster_->jobs(0).empty());
  EXPECT_EQ(
      Metric(R"(ditserve_requests_total{code="INVALID_ARGUMENT",method="ImagesGenerations"})"),
      static_cast<double>(cases.size()));
}

// OpenAI's fields that change what runs or comes back: quality to steps (the fake model's default
// is 4 steps), the output format in the answer, and those without effect accepted.
TEST_F(HttpApiTest, OpenAIsFieldsAreHonouredOrAccepted) {
  StartFrontend(1, [](FrontendOptions& o) { o.quality_steps = "high=7"; });
  auto with = [](Json fields) {
    Json j = Images();
    j.erase("num_inference_steps");
    for (auto& [k, v] : fields.items()) j[k] = v;
    return j;
  };
  struct Case {
    Json fields;
    uint32_t steps;  // what the ranks ran
    std::string quality;
  };
  const std::vector<Case> cases = {
      {{{"quality", "low"}}, 2, "low"},        // 0.5x of 4
      {{{"quality", "medium"}}, 4, "medium"},  // 1x
      {{{"quality", "high"}}, 7, "high"},      // --quality-steps high=7
      {{{"quality", "hd"}}, 7, "high"},        // hd is high
      {{{"quality", "auto"}}, 4, "auto"},      // the model's default
      {{{"quality", "standard"}}, 4, "auto"},
      {{{"quality", "high"}, {"num_inference_steps", 3}}, 3, "high"},  // explicit steps win
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.fields.dump());
    const size_t before = cluster_->jobs(0).size();
    const Answer a = Post(with(c.fields));
    ASSERT_EQ(a.status, 200) << a.body;
    ASSERT_EQ(cluster_->jobs(0).size(), before + 1);
    EXPECT_EQ(cluster_->jobs(0).back().steps, c.steps);
    EXPECT_EQ(a.json["quality"], c.quality);
    EXPECT_EQ(a.json["output_format"], "png");
    EXPECT_EQ(a.json["background"], "opaque");
    EXPECT_EQ(a.json["size"], "64x64");
  }
  // The format the workers encode is what the answer says (the fake ranks send placeholder bytes).
  const Answer jpeg = Post(with({{"output_format", "jpeg"}, {"output_compression", 80}}));
  ASSERT_EQ(jpeg.status, 200) << jpeg.body;
  EXPECT_EQ(jpeg.json["output_format"], "jpeg");
  const Answer webp = Post(with({{"output_format", "webp"}}));
  ASSERT_EQ(webp.status, 200) << webp.body;
  EXPECT_EQ(webp.json["output_format"], "webp");
  // Accepted without effect; user is logged with the call's request id ("u...").
  const Answer quiet = Post(with(
      {{"style", "vivid"}, {"moderation", "low"}, {"background", "opaque"}, {"user", "user-42"}}));
  ASSERT_EQ(quiet.status, 200) << quiet.body;
  ASSERT_FALSE(cluster_->jobs(0).back().request_ids.empty());
  EXPECT_TRUE(absl::StartsWith(cluster_->jobs(0).back().request_ids[0], "u"))
      << cluster_->jobs(0).back().request_ids[0];
}

// response_format "url": the images go to the store and come back from GET /v1/images/files/{id}
// behind the same token; the URL is absolute, from the Host header or --http-public-url.
TEST_F(HttpApiTest, UrlResponsesAreServedFromTheImageStoreBehindTheToken) {
  std::filesystem::create_directories(TempDir());
  const std::string token_file = TempDir() + "/token";
  std::ofstream(token_file) << kToken << "\n";
  StartFrontend(2, [&](FrontendOptions& o) {
    o.security.api_token_file = token_file;
    o.max_batch = 2;
    o.http_image_store_bytes = 1 << 20;
  });
  const httplib::Headers auth = {{"Authorization", std::string("Bearer ") + kToken}};
  Json body = Images(3, 2);
  body["response_format"] = "url";
  body["output_format"] = "webp";
  const Answer a = Post(body, auth);
  ASSERT_EQ(a.status, 200) << a.body;
  ASSERT_EQ(a.json["data"].size(), 2u);
  const auto ids = cluster_->jobs(0)[0].request_ids;
  const std::string base = "http://127.0.0.1:" + std::to_string(server_->http_port());
  for (size_t i = 0; i < 2; ++i) {
    const Json& d = a.json["data"][i];
    EXPECT_FALSE(d.contains("b64_json"));
    const std::string url = d["url"];
    ASSERT_TRUE(absl::StartsWith(url, base + "/v1/images/files/img_")) << url;
    EXPECT_TRUE(absl::EndsWith(url, ".webp")) << url;
    const std::string path = url.substr(base.size());
    auto got = Client()->Get(path.c_str(), auth);
    ASSERT_TRUE(got);
    EXPECT_EQ(got->status, 200);
    EXPECT_EQ(got->body, "fake image for " + ids[i]);
    EXPECT_EQ(got->get_header_value("Content-Type"), "image/webp");
    // The same token as every route.
    ExpectError(Get(path), 401, "authentication_error", nullptr, "bearer token");
  }
  ExpectError(Get("/v1/images/files/img_0123.png", auth), 404, "not_found_error", nullptr,
              "does not exist or has expired");
  ExpectError(Get("/v1/images/files/../../etc/passwd", auth), 404, "not_found_error", nullptr,
              "no route");
  // A Host header the client sent names the server (behind a proxy, say).
  Json one = Images();
  one["response_format"] = "url";
  auto proxied = Client()->Post(
      "/v1/images/generations",
      {{"Authorization", std::string("Bearer ") + kToken}, {"Host", "images.example.com:8443"}},
      one.dump(), "application/json");
  ASSERT_TRUE(proxied);
  ASSERT_EQ(proxied->status, 200) << proxied->body;
  EXPECT_TRUE(absl::StartsWith(Json::parse(proxied->body)["data"][0]["url"].get<std::string>(),
                               "http://images.example.com:8443/v1/images/files/img_"))
      << proxied->body;
  (void)ditserve::RemoveTree(TempDir());
}

TEST_F(HttpApiTest, PublicUrlFlagStartsTheImageUrls) {
  StartFrontend(1, [&](FrontendOptions& o) {
    o.http_image_store_bytes = 1 << 20;
    o.http_public_url = "https://images.example.com/ditserve/";
  });
  Json body = Images();
  body["response_format"] = "url";
  const Answer a = Post(body);
  ASSERT_EQ(a.status, 200) << a.body;
  const std::string url = a.json["data"][0]["url"];
  const std::string prefix = "https://images.example.com/ditserve/v1/images/files/img_";
  ASSERT_TRUE(absl::StartsWith(url, prefix)) << url;
  const Answer image = Get(url.substr(std::string("https://images.example.com/ditserve").size()));
  EXPECT_EQ(image.status, 200);
  EXPECT_EQ(image.content_type, "image/png");
}

TEST_F(HttpApiTest, ImageFilesAre404WhenTheStoreIsOff) {
  StartFrontend(1);
  ExpectError(Get("/v1/images/files/img_0123.png"), 404, "not_found_error", nullptr,
              "this server keeps no images");
}

TEST_F(HttpApiTest, OpenAIFlagsAreValidated) {
  const auto error = [](const std::function<void(FrontendOptions&)>& tweak) {
    FrontendOptions o;
    o.model_dir = "/nonexistent";
    tweak(o);
    return std::string(ValidateFrontendOptions(o).message());
  };
  EXPECT_TRUE(absl::StrContains(error([](FrontendOptions& o) { o.quality_steps = "ultra=3"; }),
                                "--quality-steps"));
  EXPECT_TRUE(
      absl::StrContains(error([](FrontendOptions& o) { o.http_image_store_ttl_seconds = 0; }),
                        "--http-image-store-ttl must be in 1..86400"));
  for (const char* url :
       {"images.example.com", "ftp://x", "http://", "http:///x", "http://x/?q=1", "http://x y"}) {
    EXPECT_TRUE(absl::StrContains(error([&](FrontendOptions& o) { o.http_public_url = url; }),
                                  "--http-public-url must be"))
        << url;
  }
  FrontendOptions o;
  o.model_dir = "/nonexistent";
  o.quality_steps = "low=2,high=2x";
  ASSERT_TRUE(ValidateFrontendOptions(o).ok());
  EXPECT_EQ(o.quality_presets.low.steps, 2u);
  EXPECT_DOUBLE_EQ(o.quality_presets.high.factor, 2.0);
}

TEST_F(HttpApiTest, BearerTokenIsRequiredExceptForHealth) {
  std::filesystem::create_directories(TempDir());
  const std::string token_file = TempDir() + "/token";
  std::ofstream(token_file) << kToken << "\n";
  StartFrontend(2, [&](FrontendOptions& o) { o.security.api_token_file = token_file; });

  const Answer none = Post(Images());
  ExpectError(none, 401, "authentication_error", nullptr, "requires a bearer token");
  EXPECT_EQ(none.www_authenticate, "Bearer");
  ExpectError(Post(Images(), {{"Authorization", "Bearer wrong"}}), 401, "authentication_error",
              nullptr, "the bearer token is not valid");
  ExpectError(Post(Images(), {{"Authorization", kToken}}), 401, "authentication_error", nullptr,
              "must be 'Bearer <token>'");
  ExpectError(Get("/v1/models"), 401, "authentication_error", nullptr, "bearer token");
  EXPECT_TRUE(cluster_->jobs(0).empty());

  const httplib::Headers auth = {{"Authorization", std::string("Bearer ") + kToken}};
  const Answer ok = Post(Images(), auth);
  EXPECT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(Get("/v1/models", auth).status, 200);
  EXPECT_EQ(Get("/health").status, 200);  // probes carry no token
  (void)ditserve::RemoveTree(TempDir());
}

TEST_F(HttpApiTest, BodyOverTheLimitIs413) {
  StartFrontend(2);
  const size_t limit = MakeHttpApiOptions(options_).max_body_bytes;
  EXPECT_EQ(limit, (64u << 10) + 24u * 8192u);
  Json big = Images();
  big["prompt"] = std::string(limit, 'a');  // the JSON around it takes it over the limit
  const Answer a = Post(big);
  ExpectError(a, 413, "invalid_request_error", nullptr,
              "the request body is over the limit of " + std::to_string(limit) + " bytes");
  EXPECT_EQ(a.json["error"]["code"], "request_too_large");

  // Chunked (no Content-Length): counted as it arrives.
  const std::string chunk(16 << 10, 'a');
  size_t sent = 0;
  auto chunked = Client()->Post(
      "/v1/images/generations",
      [&](size_t, httplib::DataSink& sink) {
        if (sent > limit + (64 << 10)) {
          sink.done();
          return true;
        }
        sent += chunk.size();
        return sink.write(chunk.data(), chunk.size());
      },
      "application/json");
  const Answer c = From(chunked);
  ExpectError(c, 413, "invalid_request_error", nullptr, "over the limit");
  EXPECT_TRUE(cluster_->jobs(0).empty());
  // A body within the limit still works after that.
  EXPECT_EQ(Post(Images()).status, 200);
}

// A file part of an edit form.
httplib::MultipartFormData File(const std::string& name, const std::string& bytes) {
  return {name, bytes, name + ".png", "image/png"};
}
// A text part.
httplib::MultipartFormData Text(const std::string& name, const std::string& value) {
  return {name, value, "", ""};
}
// Bytes that start like a PNG (the fake model refuses every input image before decoding).
std::string PngLike(char fill, size_t size = 64) {
  return std::string("\x89PNG\r\n\x1a\n", 8) + std::string(size, fill);
}
// An edit form for the fake model: two images and the fields of Images().
httplib::MultipartFormDataItems EditForm() {
  return {Text("model", "fake-model"), Text("prompt", "make it a dog"),
          File("image", PngLike('a')), File("image", PngLike('b')),
          Text("size", "64x64"),       Text("num_inference_steps", "3"),
          Text("seed", "7"),           Text("response_format", "b64_json")};
}

TEST_F(HttpApiTest, EditsGoThroughTheOneGenerationPathWhichRefusesImagesTheModelDoesNotTake) {
  StartFrontend(2);
  const Answer model = Get("/v1/models/fake-model");
  ASSERT_EQ(model.status, 200) << model.body;
  // The fake model describes no image input (tests/support/fake_worker.cc): Serve refuses them,
  // naming images, and the form's field is `image`.
  ASSERT_EQ(model.json["image_inputs"]["max_images"], 0) << model.body;
  const Answer a = PostEdit(EditForm());
  ExpectError(a, 400, "invalid_request_error", "image", "images");
  EXPECT_TRUE(absl::StrContains(a.json["error"]["message"].get<std::string>(), "no input image"))
      << a.body;
  // The array form the openai clients send reaches the same answer.
  httplib::MultipartFormDataItems array = EditForm();
  for (auto& part : array) {
    if (part.name == "image") part.name = "image[]";
  }
  ExpectError(PostEdit(array), 400, "invalid_request_error", "image", "images");
  EXPECT_TRUE(cluster_->jobs(0).empty());
  // Counted like any refused call, under the edits' own label.
  EXPECT_EQ(Metric(R"(ditserve_requests_total{code="INVALID_ARGUMENT",method="ImagesEdits"})"), 2);
  EXPECT_EQ(
      Metric(R"(ditserve_requests_total{code="INVALID_ARGUMENT",method="ImagesGenerations"})"), 0);
  // Generations still work beside it.
  EXPECT_EQ(Post(Images()).status, 200);
}

TEST_F(HttpApiTest, EditFormErrorsAre400NamingTheField) {
  StartFrontend(2);  // --max-queue 4: n is at most 4
  struct Case {
    httplib::MultipartFormDataItems form;
    Json param;
    std::string message;
  };
  auto with = [](httplib::MultipartFormData part) {
    httplib::MultipartFormDataItems form = EditForm();
    for (auto& p : form) {
      if (p.name == part.name && part.name != "image") {
        p = part;
        return form;
      }
    }
    form.push_back(std::move(part));
    return form;
  };
  auto without = [](const std::string& name) {
    httplib::MultipartFormDataItems form;
    for (const auto& p : EditForm()) {
      if (p.name != name) form.push_back(p);
    }
    return form;
  };
  std::vector<Case> cases = {
      {without("image"), "image", "image is required"},
      {without("prompt"), "prompt", "prompt is required"},
      {with(File("mask", PngLike('m'))), "mask", "mask: inpainting is not supported"},
      {with(Text("n", "0")), "n", "n must be in 1..4, got 0"},
      {with(Text("n", "two")), "n", "n must be an integer in 1..4, got a string"},
      {with(Text("size", "64by64")), "size", "size must be \"WIDTHxHEIGHT\" in pixels"},
      {with(Text("response_format", "url")), "response_format",
       "response_format \"url\" is not available: this server keeps no images"},
      {with(Text("strength", "2")), "strength", "strength must be in (0, 1], got 2"},
      {with(Text("steps", "4")), "steps", "unknown field \"steps\""},
      {with(Text("quality", "ultra")), "quality", "quality must be one of"},
      {with(Text("background", "transparent")), "background",
       "background \"transparent\" is not supported"},
      {with(Text("output_compression", "200")), "output_compression",
       "output_compression must be in 0..100"},
      {with(Text("input_fidelity", "max")), "input_fidelity", "input_fidelity must be one of"},
      {with(Text("loras[][name]", "style")), "loras", "send loras as one text field"},
      {with(Text("model", "dall-e-2")), "model", "model \"dall-e-2\" is not served here"},
  };
  httplib::MultipartFormDataItems twice = EditForm();
  twice.push_back(Text("prompt", "again"));
  cases.push_back({twice, "prompt", "prompt is given twice"});
  for (const Case& c : cases) {
    SCOPED_TRACE(c.message);
    const Answer a = PostEdit(c.form);
    ExpectError(a, 400, "invalid_request_error", c.param, c.message);
    EXPECT_EQ(a.json["error"]["code"], "invalid_argument");
  }
  // A JSON body is not an edit form.
  ExpectError(From(Client()->Post("/v1/images/edits", Images().dump(), "application/json")), 400,
              "invalid_request_error", nullptr,
              "POST /v1/images/edits takes a multipart/form-data body");
  // A form whose parts do not end (no closing boundary) cannot be read.
  const std::string broken =
      "--XyZ\r\nContent-Disposition: form-data; name=\"prompt\"\r\n\r\nx\r\n--XyZ\r\n"
      "Content-Disposition: form-data; name=\"image\"; filename=\"a.png\"\r\n\r\nabc";
  const Answer b =
      From(Client()->Post("/v1/images/edits", broken, "multipart/form-data; boundary=XyZ"));
  ExpectError(b, 400, "invalid_request_error", nullptr, "could not be read");
  EXPECT_TRUE(cluster_->jobs(0).empty());
}

TEST_F(HttpApiTest, EditBodyOverItsOwnLimitIs413) {
  StartFrontend(2, [](FrontendOptions& o) { o.http_max_edit_body_bytes = 1 << 20; });
  const HttpApiOptions http = MakeHttpApiOptions(options_);
  ASSERT_EQ(http.max_edit_body_bytes, 1u << 20);
  // The default: 64 MiB + the generations limit.
  EXPECT_EQ(MakeHttpApiOptions(FrontendOptions()).max_edit_body_bytes,
            (64u << 20) + (64u << 10) + 24u * 8192u);

  // With a Content-Length: refused before the images are read on.
  httplib::MultipartFormDataItems big = EditForm();
  big.push_back(File("image", PngLike('c', 1 << 20)));
  const Answer a = PostEdit(big);
  ExpectError(a, 413, "invalid_request_error", nullptr,
              "the request body is over the limit of 1048576 bytes");
  EXPECT_EQ(a.json["error"]["code"], "request_too_large");

  // Chunked (no Content-Length): counted part by part as it arrives.
  const std::string head =
      "--XyZ\r\nContent-Disposition: form-data; name=\"prompt\"\r\n\r\nx\r\n--XyZ\r\n"
      "Content-Disposition: form-data; name=\"image\"; filename=\"a.png\"\r\n"
      "Content-Type: image/png\r\n\r\n";
  const std::string chunk(16 << 10, 'a');
  size_t sent = 0;
  auto chunked = Client()->Post(
      "/v1/images/edits", {},
      [&](size_t, httplib::DataSink& sink) {
        if (sent == 0) {
          sent += head.size();
          return sink.write(head.data(), head.size());
        }
        if (sent > (1u << 20) + (64u << 10)) {
          const std::string tail = "\r\n--XyZ--\r\n";
          sink.write(tail.data(), tail.size());
          sink.done();
          return true;
        }
        sent += chunk.size();
        return sink.write(chunk.data(), chunk.size());
      },
      "multipart/form-data; boundary=XyZ");
  ExpectError(From(chunked), 413, "invalid_request_error", nullptr,
              "over the limit of 1048576 bytes");

  // A generations body keeps its own, smaller limit though the server reads up to the larger.
  Json gen = Images();
  gen["prompt"] = std::string(http.max_body_bytes, 'a');
  ExpectError(Post(gen), 413, "invalid_request_error", nullptr,
              "the request body is over the limit of " + std::to_string(http.max_body_bytes));
  EXPECT_TRUE(cluster_->jobs(0).empty());
  // A form within the limit reaches Serve after that, a large image read in many pieces too.
  ExpectError(PostEdit(EditForm()), 400, "invalid_request_error", "image", "images");
  httplib::MultipartFormDataItems large = EditForm();
  large.push_back(File("image", PngLike('d', 900 << 10)));
  ExpectError(PostEdit(large), 400, "invalid_request_error", "image", "images");
}

TEST_F(HttpApiTest, EditBodyLimitFlagIsValidated) {
  FrontendOptions o;
  o.model_dir = "/nonexistent";
  o.http_max_edit_body_bytes = 1000;
  const absl::Status s = ValidateFrontendOptions(o);
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(absl::StrContains(s.message(), "--http-max-edit-body-bytes must be 0")) << s;
  o.http_max_edit_body_bytes = uint64_t{2} << 30;
  EXPECT_TRUE(absl::StrContains(ValidateFrontendOptions(o).message(), "got 2147483648"));
}

TEST_F(HttpApiTest, FullQueueIs429WithRetryAfter) {
  StartFrontend(2, [](FrontendOptions& o) { o.max_queue = 1; });
  // One request runs (1 s), one waits in the only queue slot.
  auto running = std::async(std::launch::async, [&] { return Post(Images(100)); });
  ASSERT_TRUE(cluster_->WaitFor([&] { return !cluster_->jobs(0).empty(); }));
  auto queued = std::async(std::launch::async, [&] { return Post(Images(2)); });
  ASSERT_TRUE(Eventually([&] { return server_->queue().size() == 1; }));

  const Answer full = Post(Images());
  ExpectError(full, 429, "rate_limit_error", nullptr, "admission queue is full");
  EXPECT_EQ(full.json["error"]["code"], "resource_exhausted");
  EXPECT_EQ(full.retry_after, "1");
  EXPECT_EQ(running.get().status, 200);
  EXPECT_EQ(queued.get().status, 200);
  EXPECT_EQ(
      Metric(R"(ditserve_requests_total{code="RESOURCE_EXHAUSTED",method="ImagesGenerations"})"),
      1);
}

TEST_F(HttpApiTest, NImagesThatDoNotFitTheQueueAre429) {
  StartFrontend(2, [](FrontendOptions& o) { o.max_queue = 2; });
  auto running = std::async(std::launch::async, [&] { return Post(Images(100)); });
  ASSERT_TRUE(cluster_->WaitFor([&] { return !cluster_->jobs(0).empty(); }));
  auto queued = std::async(std::launch::async, [&] { return Post(Images(2)); });
  ASSERT_TRUE(Eventually([&] { return server_->queue().size() == 1; }));
  // One slot left, two images asked for: all or none.
  const Answer full = Post(Images(2, 2));
  ExpectError(full, 429, "rate_limit_error", nullptr, "no room for 2 more");
  EXPECT_EQ(server_->queue().size(), 1u);
  EXPECT_EQ(running.get().status, 200);
  EXPECT_EQ(queued.get().status, 200);
}

TEST_F(HttpApiTest, NotReadyIs503WithRetryAfter) {
  // The group cannot form while Init is held: the server stays NOT_SERVING.
  StartFrontend(2, {}, /*hold_init=*/true);
  const Answer a = Post(Images());
  ExpectError(a, 503, "server_error", nullptr, "the model is not ready");
  EXPECT_EQ(a.retry_after, "1");
  const Answer health = Get("/health");
  EXPECT_EQ(health.status, 503);
  EXPECT_EQ(health.json["status"], "NOT_SERVING");
  ExpectError(Get("/v1/models"), 503, "server_error", nullptr, "still loading");
}

TEST_F(HttpApiTest, DrainingRefusesNewRequestsLetsTheRunningOneFinishThenStops) {
  StartFrontend(2);
  auto running = std::async(std::launch::async, [&] { return Post(Images(150)); });
  ASSERT_TRUE(cluster_->WaitFor([&] { return !cluster_->jobs(0).empty(); }));
  std::thread drain([&] { server_->Drain(seconds(30)); });
  ASSERT_TRUE(Eventually([&] { return Get("/health").status == 503; }));
  const Answer refused = Post(Images());
  ExpectError(refused, 503, "server_error", nullptr, "shutting down");
  EXPECT_EQ(refused.retry_after, "1");

  const Answer finished = running.get();
  EXPECT_EQ(finished.status, 200) << finished.body;
  drain.join();
  // The HTTP server stopped with the drain.
  EXPECT_EQ(Get("/health").status, 0);
  const auto jobs = cluster_->jobs(0);
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].outcome, "ok");
}

TEST_F(HttpApiTest, DefaultTimeoutIs504AndTheRanksStop) {
  StartFrontend(2, [](FrontendOptions& o) { o.default_timeout_seconds = 0.4; });
  const auto start = Clock::now();
  const Answer a = Post(Images(200));  // 2 s of steps; no client deadline over HTTP
  ExpectError(a, 504, "timeout_error", nullptr, "deadline exceeded after ");
  EXPECT_EQ(a.json["error"]["code"], "deadline_exceeded");
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 1.9);
  ASSERT_TRUE(cluster_->WaitFor([&] {
    for (int r = 0; r < 2; ++r) {
      const auto jobs = cluster_->jobs(r);
      if (jobs.empty() || jobs[0].outcome == "running") return false;
    }
    return true;
  }));
  for (int r = 0; r < 2; ++r) EXPECT_EQ(cluster_->jobs(r)[0].outcome, "cancelled") << "rank " << r;
}

TEST_F(HttpApiTest, ServesHttpsWithTheApiCertificate) {
  const std::string dir = TempDir() + "-tls";
  std::filesystem::create_directories(dir);
  SpawnOptions openssl({"openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                        "-subj", "/CN=localhost", "-addext",
                        "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", dir + "/key.pem",
                        "-out", dir + "/cert.pem"});
  openssl.stdout_to = Redirect::File("/dev/null");
  openssl.stderr_to = Redirect::File("/dev/null");
  auto child = Subprocess::Spawn(openssl);
  if (!child.ok()) GTEST_SKIP() << "the openssl command is not available: " << child.status();
  ASSERT_TRUE(child->Wait().success());
  StartFrontend(2, [&](FrontendOptions& o) {
    o.security.tls_cert_file = dir + "/cert.pem";
    o.security.tls_key_file = dir + "/key.pem";
  });
  httplib::SSLClient tls("127.0.0.1", server_->http_port());
  tls.set_ca_cert_path((dir + "/cert.pem").c_str());
  tls.enable_server_certificate_verification(true);
  tls.set_read_timeout(30, 0);
  const Answer health = From(tls.Get("/health"));
  EXPECT_EQ(health.status, 200) << health.body;
  const Answer a = From(tls.Post("/v1/images/generations", Images().dump(), "application/json"));
  EXPECT_EQ(a.status, 200) << a.body;
  // Plain HTTP gets no answer from the HTTPS port.
  EXPECT_NE(Get("/health").status, 200);
  (void)ditserve::RemoveTree(dir);
}

}  // namespace
}  // namespace ditserve::server
