#include "server/playground.h"

#include <httplib.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace ditserve::server::playground {
namespace {

std::string ContentTypeOf(absl::string_view name) {
  if (absl::EndsWith(name, ".html")) return "text/html; charset=utf-8";
  if (absl::EndsWith(name, ".js")) return "text/javascript; charset=utf-8";
  if (absl::EndsWith(name, ".css")) return "text/css; charset=utf-8";
  if (absl::EndsWith(name, ".svg")) return "image/svg+xml";
  if (absl::EndsWith(name, ".png")) return "image/png";
  return "application/octet-stream";
}

}  // namespace

std::vector<Asset> Assets() {
  std::vector<Asset> assets;
  for (size_t i = 0; i < kFileCount; ++i) {
    const EmbeddedFile& f = kFiles[i];
    const absl::string_view name(f.name);
    Asset a{name == "index.html" ? std::string("/") : absl::StrCat("/playground/", name),
            ContentTypeOf(name), absl::string_view(reinterpret_cast<const char*>(f.data), f.size)};
    if (name == "index.html") {
      assets.insert(assets.begin(), std::move(a));
    } else {
      assets.push_back(std::move(a));
    }
  }
  return assets;
}

void Register(httplib::Server& server) {
  for (const Asset& asset : Assets()) {
    // cpp-httplib's route is a regular expression matched whole: the dots are literal.
    server.Get(absl::StrReplaceAll(asset.path, {{".", "\\."}}),
               [asset](const httplib::Request&, httplib::Response& res) {
                 res.status = 200;
                 res.set_header("Content-Security-Policy", kContentSecurityPolicy);
                 res.set_header("X-Content-Type-Options", "nosniff");
                 res.set_header("Referrer-Policy", "no-referrer");
                 res.set_header("Cache-Control", "no-cache");
                 res.set_content(asset.body.data(), asset.body.size(), asset.content_type);
               });
  }
}

}  // namespace ditserve::server::playground
