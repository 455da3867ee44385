#include "server/http_api.h"

#include "server/streamed_call.h"

#include <httplib.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/host_port.h"
#include "metrics/httplib_listener.h"
#include "server/call_context.h"
#include "server/openai_images.h"
#include "server/playground.h"

namespace ditserve::server {
namespace {

constexpr char kJson[] = "application/json";
// What 429 and 503 answers tell the client to wait before retrying, in seconds.
constexpr char kRetryAfterSeconds[] = "1";
// A chunked body over the limit is read and dropped up to this many times the limit (so the client
// gets its 413); beyond, the connection is cut.
constexpr size_t kDrainFactor = 8;
// The most parts an edit form may have (images and text fields together).
constexpr size_t kMaxFormParts = 64;
// What each form part's delimiter and headers count toward the edit body limit, besides its name,
// file name and content type (the multipart parser keeps only those).
constexpr size_t kFormPartOverhead = 128;

// The most bytes of a request's `user` the log line shows.
constexpr size_t kMaxLoggedUserBytes = 256;

// Whether a Host header is safe to build a URL from: HOST or HOST:PORT of letters, digits, '.',
// '-', '_', or a bracketed IPv6 address.
bool IsHostHeader(const std::string& host) {
  if (host.empty() || host.size() > 255) return false;
  for (char c : host) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_' &&
        c != ':' && c != '[' && c != ']') {
      return false;
    }
  }
  return true;
}

int64_t UnixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void SendJson(httplib::Response& res, int status, const std::string& body) {
  res.status = status;
  res.set_content(body, kJson);
}

void SendError(httplib::Response& res, const absl::Status& status) {
  const openai::HttpError e = openai::HttpErrorFor(status);
  if (openai::WantsRetryAfter(status)) res.set_header("Retry-After", kRetryAfterSeconds);
  if (e.http_status == 401) res.set_header("WWW-Authenticate", "Bearer");
  SendJson(res, e.http_status, openai::ErrorJson(status));
}

// Runs a handler with every exception turned into a 500: none leaves cpp-httplib's threads.
template <typename F>
void Guarded(httplib::Response& res, F&& handler) {
  try {
    handler();
  } catch (const std::exception& e) {
    spdlog::error("HTTP API: handler failed: {}", e.what());
    SendError(res, absl::InternalError(absl::StrCat("internal error: ", e.what())));
  } catch (...) {
    spdlog::error("HTTP API: handler failed with an unknown exception");
    SendError(res, absl::InternalError("internal error"));
  }
}

// The body of an error status cpp-httplib produced itself (no route, unreadable request).
std::string TransportErrorMessage(const httplib::Request& req, int status) {
  switch (status) {
    case 404:
      return absl::StrCat("no route for ", req.method, " ", req.path,
                          " (POST /v1/images/generations, POST /v1/images/edits, GET "
                          "/v1/images/files/{id}, GET /v1/models, GET /health)");
    case 413:
      return "the request body is too large";
    case 414:
      return "the request URI is too long";
    case 400:
      return "malformed HTTP request";
    default:
      return absl::StrCat("HTTP status ", status);
  }
}

// The Content-Length a request declares; nullopt when chunked or absent.
std::optional<uint64_t> DeclaredLength(const httplib::Request& req) {
  if (absl::StrContains(absl::AsciiStrToLower(req.get_header_value("Transfer-Encoding")),
                        "chunked")) {
    return std::nullopt;
  }
  uint64_t n = 0;
  if (!req.has_header("Content-Length") ||
      !absl::SimpleAtoi(req.get_header_value("Content-Length"), &n)) {
    return std::nullopt;
  }
  return n;
}

// How far a body over its route's limit is read on (and dropped) so that the client, which sends
// its whole body before it reads, gets the 413 rather than a reset connection: its declared
// length (cpp-httplib refuses one over the server's largest limit itself), else kDrainFactor
// times the limit.
size_t DrainBound(size_t max_bytes, std::optional<uint64_t> declared) {
  return std::max<uint64_t>(kDrainFactor * max_bytes, declared.value_or(0));
}

// A request body as the generation handler reads it.
struct Body {
  std::string data;
  bool read = false;       // the reader reached its end
  bool too_large = false;  // over `max_bytes` (data then empty)
};

// Reads a body through cpp-httplib's reader, with the limit applied as the bytes arrive (chunked
// bodies have no Content-Length that cpp-httplib could refuse them by; the server's length limit
// is the largest route's). `keep` false: read and drop it.
Body ReadBody(const httplib::ContentReader& reader, size_t max_bytes,
              std::optional<uint64_t> declared, bool keep = true) {
  Body body;
  size_t received = 0;
  const size_t drain = DrainBound(max_bytes, declared);
  body.read = reader([&](const char* data, size_t n) {
    received += n;
    if (received > max_bytes) {
      // Over the limit: keep nothing, but read on (up to a bound).
      body.too_large = true;
      body.data.clear();
      return received <= drain;
    }
    if (keep) body.data.append(data, n);
    return true;
  });
  return body;
}

// An edit form as the edit handler reads it: its parts streamed by cpp-httplib's multipart parser.
struct Form {
  std::vector<openai::FormPart> parts;
  bool read = false;            // the reader reached its end, the form was well formed
  bool too_large = false;       // over `max_bytes` (parts then empty)
  bool too_many_parts = false;  // more than kMaxFormParts (parts then empty)
};

// Reads a multipart/form-data body part by part, with the limit applied as the bytes arrive (the
// parts' contents, names and a per-part overhead: close to the bytes on the wire).
Form ReadForm(const httplib::ContentReader& reader, size_t max_bytes,
              std::optional<uint64_t> declared) {
  Form form;
  size_t received = 0;
  const size_t drain = DrainBound(max_bytes, declared);
  const auto count = [&](size_t n) {
    received += n;
    if (received > max_bytes && !form.too_large) {
      form.too_large = true;
      form.parts = {};
    }
    return received <= drain;
  };
  const auto keeping = [&] { return !form.too_large && !form.too_many_parts; };
  form.read = reader(
      [&](const httplib::MultipartFormData& header) {
        if (!count(header.name.size() + header.filename.size() + header.content_type.size() +
                   kFormPartOverhead)) {
          return false;
        }
        if (keeping() && form.parts.size() == kMaxFormParts) {
          form.too_many_parts = true;
          form.parts = {};
        }
        if (keeping()) {
          form.parts.push_back({header.name, header.filename, header.content_type, ""});
        }
        return true;
      },
      [&](const char* data, size_t n) {
        if (!count(n)) return false;
        if (keeping() && !form.parts.empty()) form.parts.back().content.append(data, n);
        return true;
      });
  return form;
}

// Errors cpp-httplib answers itself (no route, an unreadable request) get the same JSON, and an
// exception that escapes a handler a 500.
void SetErrorHandlers(httplib::Server& svr) {
  svr.set_error_handler(
      httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        openai::HttpError e;
        e.http_status = res.status;
        e.type = res.status == 404  ? "not_found_error"
                 : res.status < 500 ? "invalid_request_error"
                                    : "server_error";
        e.code = res.status == 404   ? "not_found"
                 : res.status == 413 ? "request_too_large"
                                     : absl::StrCat("http_", res.status);
        res.set_content(openai::ErrorJson(TransportErrorMessage(req, res.status), e, ""), kJson);
        return httplib::Server::HandlerResponse::Handled;
      }));
  svr.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
        SendError(res, absl::InternalError("internal error"));
      });
}

}  // namespace

HttpApiOptions MakeHttpApiOptions(const FrontendOptions& options) {
  HttpApiOptions o;
  o.listen = options.http_listen;
  o.threads = static_cast<int>(std::min<uint64_t>(options.max_queue + options.max_batch + 4, 256));
  o.max_body_bytes = (64u << 10) + 24 * options.limits.max_prompt_bytes;
  o.max_edit_body_bytes = options.http_max_edit_body_bytes != 0 ? options.http_max_edit_body_bytes
                                                                : (64u << 20) + o.max_body_bytes;
  o.max_images =
      static_cast<uint32_t>(std::min<uint64_t>(openai::kMaxImagesPerRequest, options.max_queue));
  o.limits = options.limits;
  o.quality_steps = options.quality_presets;
  o.image_store.max_bytes = options.http_image_store_bytes;
  o.image_store.ttl =
      std::chrono::milliseconds(static_cast<int64_t>(options.http_image_store_ttl_seconds * 1000));
  o.public_url = options.http_public_url;
  while (!o.public_url.empty() && o.public_url.back() == '/') o.public_url.pop_back();
  return o;
}

absl::StatusOr<std::unique_ptr<HttpApi>> HttpApi::Start(
    const HttpApiOptions& options, ImageGenerationService* service,
    std::shared_ptr<const ApiSecurity> security) {
  if (service == nullptr || security == nullptr) {
    return absl::InvalidArgumentError("HTTP API: no service or security settings");
  }
  auto address = ParseHostPort(options.listen, "--http-listen");
  if (!address.ok()) return address.status();
  std::unique_ptr<HttpApi> self(new HttpApi());
  self->options_ = options;
  self->service_ = service;
  self->security_ = std::move(security);
  self->host_ = address->host;
  self->created_ = UnixNow();
  self->image_store_ = std::make_unique<ImageStore>(options.image_store);
  if (self->security_->tls()) {
    auto ssl = std::make_unique<httplib::SSLServer>(self->security_->cert_file().c_str(),
                                                    self->security_->key_file().c_str());
    if (!ssl->is_valid()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--http-listen: cannot serve HTTPS with certificate '", self->security_->cert_file(),
          "' and key '", self->security_->key_file(), "'"));
    }
    self->server_ = std::move(ssl);
    self->tls_ = true;
  } else {
    self->server_ = std::make_unique<httplib::Server>();
  }
  httplib::Server& svr = *self->server_;
  metrics::ConfigureHttplibServer(svr, options.threads);
  // Bodies with a Content-Length over the larger limit are refused before they are read (413); the
  // handlers refuse those over their route's limit the same way, and count chunked ones as they
  // arrive.
  svr.set_payload_max_length(std::max(options.max_body_bytes, options.max_edit_body_bytes));
  self->Route();

  absl::StatusOr<int> port =
      metrics::BindAndListen(svr, address->host, address->port, &self->listener_, "--http-listen");
  if (!port.ok()) return port.status();
  self->port_ = *port;
  spdlog::info(
      "HTTP API on {}://{}:{} (POST /v1/images/generations, POST /v1/images/edits, GET "
      "/v1/models, GET /health)",
      self->tls_ ? "https" : "http", self->host_, self->port_);
  if (self->image_store_->enabled()) {
    spdlog::info(
        "HTTP API: response_format \"url\" on: images kept up to {} bytes for {} s at GET "
        "/v1/images/files/{{id}}",
        options.image_store.max_bytes,
        std::chrono::duration<double>(options.image_store.ttl).count());
  }
  return self;
}

void HttpApi::Route() {
  httplib::Server& svr = *server_;
  svr.Post("/v1/images/generations", [this](const httplib::Request& req, httplib::Response& res,
                                            const httplib::ContentReader& reader) {
    Guarded(res, [&] { HandleGenerations(req, res, reader); });
  });
  svr.Post("/v1/images/edits", [this](const httplib::Request& req, httplib::Response& res,
                                      const httplib::ContentReader& reader) {
    Guarded(res, [&] { HandleEdits(req, res, reader); });
  });
  svr.Get(R"(/v1/images/files/([A-Za-z0-9._-]{1,128}))",
          [this](const httplib::Request& req, httplib::Response& res) {
            Guarded(res, [&] { HandleImageFile(req, res); });
          });
  svr.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
    Guarded(res, [&] { HandleModels(req, res); });
  });
  svr.Get(R"(/v1/models/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
    Guarded(res, [&] { HandleModel(req, res); });
  });
  svr.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    Guarded(res, [&] {
      const bool serving = service_->serving();
      SendJson(res, serving ? 200 : 503,
               serving ? R"({"status":"SERVING"})" : R"({"status":"NOT_SERVING"})");
    });
  });
  // GET / and its assets: the playground page (server/playground.h; public, no token).
  playground::Register(svr);
  SetErrorHandlers(svr);
}

void HttpApi::HandleGenerations(const httplib::Request& req, httplib::Response& res,
                                const httplib::ContentReader& reader) {
  const Clock::time_point arrived = Clock::now();
  if (absl::Status s = security_->Check(req.get_header_value("Authorization")); !s.ok()) {
    return SendError(res, s);
  }
  const size_t limit = options_.max_body_bytes;
  const Body body = ReadBody(reader, limit, DeclaredLength(req));
  if (!body.read || body.too_large)
    return RefuseBody(ApiMethod::kImagesGenerations, res, body.too_large, limit, arrived);
  auto info = service_->ModelInfo();  // not loaded yet: any model name passes, Serve says 503
  ServeImages(ApiMethod::kImagesGenerations,
              openai::ParseImagesRequest(body.data, info.ok() ? info->name() : "",
                                         options_.max_images, options_.limits),
              req, res, arrived);
}

void HttpApi::HandleEdits(const httplib::Request& req, httplib::Response& res,
                          const httplib::ContentReader& reader) {
  const Clock::time_point arrived = Clock::now();
  if (absl::Status s = security_->Check(req.get_header_value("Authorization")); !s.ok()) {
    return SendError(res, s);
  }
  const size_t limit = options_.max_edit_body_bytes;
  if (!req.is_multipart_form_data()) {
    const Body body = ReadBody(reader, limit, DeclaredLength(req), /*keep=*/false);
    if (!body.read || body.too_large)
      return RefuseBody(ApiMethod::kImagesEdits, res, body.too_large, limit, arrived);
    const std::string type = req.get_header_value("Content-Type");
    return ServeImages(
        ApiMethod::kImagesEdits,
        absl::InvalidArgumentError(absl::StrCat(
            "POST /v1/images/edits takes a multipart/form-data body (the `image` files and the "
            "text fields), got Content-Type '",
            type.substr(0, 64), "'")),
        req, res, arrived);
  }
  Form form = ReadForm(reader, limit, DeclaredLength(req));
  if (!form.read || form.too_large)
    return RefuseBody(ApiMethod::kImagesEdits, res, form.too_large, limit, arrived);
  if (form.too_many_parts) {
    return ServeImages(ApiMethod::kImagesEdits,
                       absl::InvalidArgumentError(
                           absl::StrCat("the form has more than ", kMaxFormParts, " parts")),
                       req, res, arrived);
  }
  auto info = service_->ModelInfo();  // not loaded yet: any model name passes, Serve says 503
  ServeImages(ApiMethod::kImagesEdits,
              openai::ParseImageEditRequest(std::move(form.parts), info.ok() ? info->name() : "",
                                            options_.max_images, options_.limits),
              req, res, arrived);
}

void HttpApi::ServeImages(ApiMethod method, absl::StatusOr<openai::ImagesRequest> parsed,
                          const httplib::Request& req, httplib::Response& res,
                          Clock::time_point arrived) {
  if (parsed.ok() && parsed->url && !image_store_->enabled()) {
    parsed = absl::InvalidArgumentError(
        "response_format \"url\" is not available: this server keeps no images (its image store "
        "is off: --http-image-store-bytes); ask for \"b64_json\"");
  }
  if (!parsed.ok()) {
    service_->RecordRefused(method, parsed.status(), arrived);
    return SendError(res, parsed.status());
  }
  auto info = service_->ModelInfo();  // not loaded: no default steps (Serve then says 503)
  openai::ApplyQuality(options_.quality_steps,
                       info.ok() ? info->defaults().num_inference_steps() : 0, options_.limits,
                       &*parsed);
  if (!parsed->user.empty()) {
    parsed->request.set_request_id(service_->NewRequestId('u'));
    std::string user = parsed->user.substr(0, kMaxLoggedUserBytes);
    spdlog::info("req={} user=\"{}\"{}", parsed->request.request_id(), absl::CHexEscape(user),
                 user.size() < parsed->user.size() ? " (cut)" : "");
  }
  if (parsed->stream) return StreamImages(method, *parsed, res);
  const NoDeadlineCallContext ctx;
  auto responses = service_->Serve(ctx, method, openai::ExpandImages(*parsed), nullptr);
  if (!responses.ok()) return SendError(res, responses.status());
  openai::ImagesResponseInfo answer;
  answer.output_format = parsed->output_format;
  answer.quality = parsed->quality;
  if (parsed->url) {
    std::vector<std::string> images;
    for (const v1::GenerateResponse& r : *responses) images.push_back(r.image());
    auto ids = image_store_->Put(images, parsed->output_format,
                                 openai::ContentTypeOf(parsed->output_format));
    if (!ids.ok()) return SendError(res, ids.status());
    for (const std::string& id : *ids) answer.urls.push_back(ImageUrl(req, id));
  }
  SendJson(res, 200, openai::ImagesResponseJson(*responses, UnixNow(), answer));
}

void HttpApi::StreamImages(ApiMethod method, const openai::ImagesRequest& parsed,
                           httplib::Response& res) {
  auto call = std::make_shared<StreamedCall>(
      [this, method, requests = openai::ExpandImages(parsed)](const StreamedCall::Emit& emit) {
        const NoDeadlineCallContext ctx;
        return service_->Serve(ctx, method, requests, emit);
      });
  // Refused before its stream begins (validation, queue full, not ready): an ordinary error answer.
  if (!call->WaitStarted()) {
    if (!call->result().ok()) return SendError(res, call->result().status());
  }
  openai::ImagesResponseInfo info;
  info.output_format = parsed.output_format;
  info.quality = parsed.quality;
  const std::string kind = method == ApiMethod::kImagesEdits ? "image_edit" : "image_generation";
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [call, info, kind](size_t, httplib::DataSink& sink) {
        auto write = [&](const std::string& frame) {
          if (sink.write(frame.data(), frame.size())) return true;
          call->ClientGone();
          return false;
        };
        while (std::optional<v1::GenerateEvent> ev = call->Next()) {
          if (!ev->has_progress() || ev->progress().preview().empty()) continue;
          if (!write(openai::PartialImageEvent(kind, ev->progress(), info, UnixNow()))) {
            return false;
          }
        }
        const StreamedCall::Responses& r = call->result();
        write(r.ok() ? openai::CompletedEvent(kind, r->front(), info, UnixNow())
                     : openai::ErrorEvent(r.status()));
        sink.done();
        return true;
      },
      [call](bool) { call->ClientGone(); });
}

std::string HttpApi::ImageUrl(const httplib::Request& req, const std::string& id) const {
  const std::string path = absl::StrCat("/v1/images/files/", id);
  if (!options_.public_url.empty()) return options_.public_url + path;
  std::string host = req.get_header_value("Host");
  if (!IsHostHeader(host)) {
    host = port_ == 0 ? host_
                      : absl::StrCat(absl::StrContains(host_, ':') ? "[" + host_ + "]" : host_, ":",
                                     port_);
  }
  return absl::StrCat(tls_ ? "https" : "http", "://", host, path);
}

void HttpApi::HandleImageFile(const httplib::Request& req, httplib::Response& res) {
  if (absl::Status s = security_->Check(req.get_header_value("Authorization")); !s.ok()) {
    return SendError(res, s);
  }
  if (!image_store_->enabled()) {
    return SendError(res, absl::NotFoundError("this server keeps no images (its image store is "
                                              "off: --http-image-store-bytes)"));
  }
  const std::string id = req.matches[1];
  std::optional<ImageStore::Image> image = image_store_->Get(id);
  if (!image) {
    return SendError(
        res,
        absl::NotFoundError(absl::StrCat(
            "image file \"", id, "\" does not exist or has expired (images are kept ",
            std::chrono::duration_cast<std::chrono::seconds>(image_store_->options().ttl).count(),
            " s, while the store has room)")));
  }
  const auto left =
      std::chrono::duration_cast<std::chrono::seconds>(image->expires - ImageStore::Clock::now());
  res.set_header("Cache-Control",
                 absl::StrCat("private, max-age=", std::max<int64_t>(0, left.count())));
  res.status = 200;
  res.set_content(std::move(image->bytes), image->content_type);
}

void HttpApi::RefuseBody(ApiMethod method, httplib::Response& res, bool too_large, size_t limit,
                         Clock::time_point arrived) {
  // The rest of the body is unread: the connection cannot carry another request.
  res.set_header("Connection", "close");
  if (too_large || res.status == 413) {
    const absl::Status s = absl::InvalidArgumentError(
        absl::StrCat("the request body is over the limit of ", limit, " bytes"));
    service_->RecordRefused(method, s, arrived);
    openai::HttpError e = openai::HttpErrorFor(s);
    e.http_status = 413;
    e.code = "request_too_large";
    return SendJson(res, 413, openai::ErrorJson(s.message(), e, ""));
  }
  SendError(res, absl::InvalidArgumentError("the request body could not be read"));
}

void HttpApi::HandleModels(const httplib::Request& req, httplib::Response& res) {
  if (absl::Status s = security_->Check(req.get_header_value("Authorization")); !s.ok()) {
    return SendError(res, s);
  }
  auto info = service_->ModelInfo();
  if (!info.ok()) return SendError(res, info.status());
  SendJson(res, 200, openai::ModelsListJson(*info, created_));
}

void HttpApi::HandleModel(const httplib::Request& req, httplib::Response& res) {
  if (absl::Status s = security_->Check(req.get_header_value("Authorization")); !s.ok()) {
    return SendError(res, s);
  }
  auto info = service_->ModelInfo();
  if (!info.ok()) return SendError(res, info.status());
  const std::string id = req.matches[1];
  if (id != info->name()) {
    return SendError(res, absl::NotFoundError(absl::StrCat(
                              "model \"", id, "\" is not served here: this server serves \"",
                              info->name(), "\"")));
  }
  SendJson(res, 200, openai::ModelJson(*info, created_));
}

void HttpApi::Stop() {
  if (server_) server_->stop();
  if (listener_.joinable()) listener_.join();
}

HttpApi::~HttpApi() {
  Stop();
}

}  // namespace ditserve::server
