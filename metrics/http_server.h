// MetricsHttpServer: serves GET /metrics (text format 0.0.4, Content-Type
// "text/plain; version=0.0.4; charset=utf-8") and GET /healthz ("ok", 200: the process is alive)
// with cpp-httplib on a background thread. Every other path answers 404.
//
// The body is prometheus-cpp's text exposition of the sources (exposition.h). This listener rather
// than prometheus-cpp-pull's Exposer: Debian's Exposer (civetweb) is built without TLS, which
// --metrics-tls needs, and this one shares its binding rules and error reporting (absl::Status, no
// exceptions) with the HTTP API (httplib_listener.h).
//
// Ownership: the Collectables passed in are NOT owned; they must outlive the server (Stop or
// destroy the server first). The before-scrape hook is owned.
// Threads: Start binds synchronously (so a taken port is an error from Start, not a log line later)
// and then serves on its own listener thread plus a small worker pool; /metrics may therefore call
// the sources' Collect from two scrapes at once (prometheus-cpp's Registry and our collectables
// support that). The hook never runs concurrently with itself.
// Lifetime: Stop() is idempotent, blocks until the listener thread has exited and in-flight
// responses are done (connections are not kept alive, so an idle scraper never delays it), and is
// called by the destructor.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <prometheus/collectable.h>

#include "absl/status/statusor.h"

namespace httplib {
class Server;
}

namespace ditserve::metrics {

struct MetricsHttpServerOptions {
  // "0.0.0.0" to serve every interface (inside a container); an IPv6 literal without brackets.
  // From a --metrics-listen flag: ParseHostPort (common/host_port.h).
  std::string host = "127.0.0.1";
  int port = 9464;                 // 0 = pick a free port; port() reports the one chosen
  int worker_threads = 2;          // scrapes are rare; keep the pool small
  // Both set: HTTPS with this PEM certificate chain and key (Start fails naming them if unusable).
  std::string tls_cert_file;
  std::string tls_key_file;
};

// Runs at the start of each /metrics request, before any source is collected: a place to refresh
// figures pulled from elsewhere (e.g. the frontend asking its workers for their status). It must not
// block for long (it delays the scrape).
using BeforeScrapeHook = std::function<void()>;

class MetricsHttpServer {
 public:
  // Families are written in the order of `sources`, which must not share a family name.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      const MetricsHttpServerOptions& options, std::vector<const prometheus::Collectable*> sources,
      BeforeScrapeHook before_scrape = nullptr);

  ~MetricsHttpServer();
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  const std::string& host() const { return host_; }
  int port() const { return port_; }

  void Stop();

 private:
  // The exposition body /metrics returns now (runs the hook first).
  std::string Render();
  MetricsHttpServer(std::vector<const prometheus::Collectable*> sources,
                    BeforeScrapeHook before_scrape);

  std::vector<const prometheus::Collectable*> sources_;
  BeforeScrapeHook before_scrape_;
  std::mutex before_scrape_mu_;  // serialises the hook's runs
  std::unique_ptr<httplib::Server> server_;
  std::thread listener_;
  std::string host_;
  int port_ = 0;
};

}  // namespace ditserve::metrics
