// MetricsHttpServer: serves GET /metrics (text format 0.0.4, Content-Type
// "text/plain; version=0.0.4; charset=utf-8") and GET /healthz ("ok", 200: the process is alive)
// with cpp-httplib on a background thread. Every other path answers 404.
//
// Ownership: the Collectables passed in are NOT owned; they must outlive the server (Stop or
// destroy the server first). The collect callback is owned.
// Threads: Start binds synchronously (so a taken port is an error from Start, not a log line later)
// and then serves on its own listener thread plus a small worker pool; /metrics may therefore call
// the sources' Collect from two scrapes at once (Registry supports that).
// Lifetime: Stop() is idempotent, blocks until the listener thread has exited and in-flight
// responses are done (connections are not kept alive, so an idle scraper never delays it), and is
// called by the destructor.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "metrics/snapshot.h"

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

// Extra families computed at scrape time, for sources that are not a Registry.
using CollectCallback = std::function<std::vector<MetricFamilySnapshot>()>;

class MetricsHttpServer {
 public:
  // Families are written in the order of `sources`, then the callback's. A family name already
  // written by an earlier source is skipped (see text_serializer.h).
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      const MetricsHttpServerOptions& options, std::vector<Collectable*> sources,
      CollectCallback callback = nullptr);

  ~MetricsHttpServer();
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  const std::string& host() const { return host_; }
  int port() const { return port_; }

  void Stop();

 private:
  // The exposition body /metrics returns now.
  std::string Render() const;
  MetricsHttpServer(std::vector<Collectable*> sources, CollectCallback callback);

  std::vector<Collectable*> sources_;
  CollectCallback callback_;
  std::unique_ptr<httplib::Server> server_;
  std::thread listener_;
  std::string host_;
  int port_ = 0;
};

}  // namespace ditserve::metrics
