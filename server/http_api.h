// HttpApi: the OpenAI-style images API over HTTP(S) (--http-listen), served by cpp-httplib on its
// own threads. Routes (the JSON mapping is server/openai_images.h):
//   POST /v1/images/generations  OpenAI's Images request -> {"created", "data": [{"b64_json"}]}
//   POST /v1/images/edits        OpenAI's images edit request (multipart/form-data: the `image`
//                                files and text fields, openai::ParseImageEditRequest) -> the same
//   GET  /v1/images/files/{id}   an image of a response_format "url" call, while the image store
//                                keeps it (server/image_store.h; 404 otherwise), with its type
//   GET  /v1/models              OpenAI's model list: the one served model (ModelInfo's name)
//   GET  /v1/models/{id}         that model, or 404
//   GET  /health                 200 {"status": "SERVING"} when SERVING, 503 otherwise (no token)
// anything else answers 404 with OpenAI's error object.
//
// Besides the mapping of openai_images.h, the transport does what needs the server: `quality` to
// steps with the served model's default (openai::ApplyQuality, --quality-steps), response_format
// "url" (refused with 400 before generation when the image store is off; else the images are
// stored and the answer carries absolute URLs: --http-public-url, or the listener's scheme and the
// request's Host header, or the listen address when the request has none), and `user` (logged
// with the call's request id, which it then sets).
//
// It is only a transport: generation goes through ImageGenerationService::Serve, the path the gRPC
// API takes (validation, admission queue, dispatcher, Deadline, metrics, draining). An HTTP call
// has no client deadline, so --default-timeout applies; cpp-httplib 0.11 cannot tell a handler that
// its client disconnected, so such a request runs on until it ends or times out. TLS and the
// bearer token come from the same ApiSecurity as the gRPC API: with a certificate it serves HTTPS
// only; with a token every route but /health needs `Authorization: Bearer <token>` (401
// otherwise). Generation bodies over max_body_bytes and edit bodies over max_edit_body_bytes are
// refused with 413, whether sent with a Content-Length (refused before reading on) or chunked
// (counted as they arrive; an edit form's parts are streamed, not buffered twice). Every error is
// OpenAI's {"error": {...}} with openai::HttpErrorFor's status. Handlers catch every exception:
// none leaves this module. Each route has its metric label (ImagesGenerations, ImagesEdits).
//
// Threads: a pool of `threads` handler threads (a generation call holds one until it ends, so the
// pool is sized to let the admission queue fill and refuse with 429 rather than leave connections
// waiting); one connection per request (no keep-alive), so Stop() is never held up by idle
// clients. Start/Stop from the owner's thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "server/api_security.h"
#include "server/image_generation_service.h"
#include "server/image_store.h"
#include "server/openai_images.h"

namespace httplib {
class ContentReader;
struct Request;
struct Response;
class Server;
}  // namespace httplib

namespace ditserve::server {

struct HttpApiOptions {
  std::string listen;  // HOST:PORT (port 0: any free port, port() reports it)
  int threads = 8;
  size_t max_body_bytes = 1 << 20;        // POST /v1/images/generations
  size_t max_edit_body_bytes = 64 << 20;  // POST /v1/images/edits (several images)
  uint32_t max_images = 10;               // the largest `n`
  RequestLimits limits;                   // for the parser's messages (steps)
  QualitySteps quality_steps;             // OpenAI's quality levels as steps
  ImageStoreOptions image_store;          // response_format "url" (max_bytes 0: off)
  std::string public_url;                 // the image URLs' start; empty: from the request
};

// The options FrontendOptions imply: threads = --max-queue + --max-batch + 4 (capped at 256),
// max_body_bytes = 64 KiB + 24 x --max-prompt-bytes (every byte of the four text fields escaped
// as \uXXXX), max_edit_body_bytes = --http-max-edit-body-bytes (0: 64 MiB + max_body_bytes),
// max_images = min(10, --max-queue), quality_steps = --quality-steps, image_store =
// --http-image-store-bytes / --http-image-store-ttl, public_url = --http-public-url (no trailing
// /).
HttpApiOptions MakeHttpApiOptions(const FrontendOptions& options);

class HttpApi {
 public:
  // Binds synchronously (a taken port is an error here) and starts serving. `service` must outlive
  // the HttpApi (Stop first); `security` must not be null.
  static absl::StatusOr<std::unique_ptr<HttpApi>> Start(
      const HttpApiOptions& options, ImageGenerationService* service,
      std::shared_ptr<const ApiSecurity> security);
  ~HttpApi();
  HttpApi(const HttpApi&) = delete;
  HttpApi& operator=(const HttpApi&) = delete;

  int port() const { return port_; }
  const std::string& host() const { return host_; }
  bool tls() const { return tls_; }

  // Stops accepting, waits for the handlers in progress to answer, and joins the threads.
  // Idempotent; called by the destructor. FrontendServer::Drain calls it once the requests in
  // flight have ended, so their answers still go out.
  void Stop();

 private:
  HttpApi() = default;
  // Installs the routes below and the error handlers on server_.
  void Route();
  // The routes' handlers (run under the exception guard).
  void HandleGenerations(const httplib::Request& req, httplib::Response& res,
                         const httplib::ContentReader& reader);
  void HandleEdits(const httplib::Request& req, httplib::Response& res,
                   const httplib::ContentReader& reader);
  // Parsed requests to Serve, and its answer (or its error) to `res`.
  void ServeImages(ApiMethod method, absl::StatusOr<openai::ImagesRequest> parsed,
                   const httplib::Request& req, httplib::Response& res, Clock::time_point arrived);
  // stream: true: the call's previews as OpenAI's partial_image events, then its completed event
  // (or an error event), as server-sent events written while the call runs (a refusal before the
  // call is admitted is an ordinary error answer).
  void StreamImages(ApiMethod method, const openai::ImagesRequest& parsed, httplib::Response& res);
  // GET /v1/images/files/{id}.
  void HandleImageFile(const httplib::Request& req, httplib::Response& res);
  // Where the stored image `id` is fetched: public_url or the request's scheme and Host.
  std::string ImageUrl(const httplib::Request& req, const std::string& id) const;
  // A body that was not read whole: 413 naming `limit` when it is over it (counted as refused),
  // else 400.
  void RefuseBody(ApiMethod method, httplib::Response& res, bool too_large, size_t limit,
                  Clock::time_point arrived);
  void HandleModels(const httplib::Request& req, httplib::Response& res);
  void HandleModel(const httplib::Request& req, httplib::Response& res);

  HttpApiOptions options_;
  ImageGenerationService* service_ = nullptr;
  std::shared_ptr<const ApiSecurity> security_;
  std::unique_ptr<ImageStore> image_store_;
  std::unique_ptr<httplib::Server> server_;
  std::thread listener_;
  std::string host_;
  int port_ = 0;
  bool tls_ = false;
  int64_t created_ = 0;  // Unix time of Start: the model's "created"
};

}  // namespace ditserve::server
