// CallContext: what the shared generation path (ImageGenerationService::Serve) needs to know about
// the call that carries a request, whatever its transport: the client's deadline and whether the
// client has gone away. The gRPC service adapts grpc::ServerContext to it; the HTTP API
// (server/http_api.h) passes one without a deadline (--default-timeout applies).
//
// Threads: Serve reads it from the handler thread that owns the call, every 50 ms while it waits;
// implementations must be cheap and must not block.
#pragma once

#include <chrono>

namespace ditserve::server {

class CallContext {
 public:
  virtual ~CallContext() = default;
  // The client's deadline on the system clock (gRPC's own clock); time_point::max() when the
  // client sent none (Deadline::ForClient then applies --default-timeout alone).
  virtual std::chrono::system_clock::time_point deadline() const = 0;
  // True once the client cancelled the call or went away: the request is cancelled.
  virtual bool IsCancelled() const = 0;
};

// A call without a client deadline that the transport cannot see go away (cpp-httplib 0.11 does
// not report a client that disconnects while a handler runs).
class NoDeadlineCallContext final : public CallContext {
 public:
  std::chrono::system_clock::time_point deadline() const override {
    return std::chrono::system_clock::time_point::max();
  }
  bool IsCancelled() const override { return false; }
};

}  // namespace ditserve::server
