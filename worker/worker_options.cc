#include "worker/worker_options.h"

#include "common/host_port.h"
#include "common/status_macros.h"

namespace ditserve::worker {

void BindWorkerFlags(FlagParser& p, WorkerOptions& o) {
  p.AddString("listen", &o.listen, "HOST:PORT of the internal worker API (port 0: any free port)");
  p.AddString("port-file", &o.port_file, "write the bound port to this file once listening");
  p.AddInt("rank", &o.rank, "rank hint used in logs before the group forms");
  p.AddInt("device-index", &o.device_index, "CUDA device to use (-1: rank modulo device count)");
  p.AddString("store-host", &o.store_host, "address where rank 0 hosts the Gloo store (CPU variant)");
  p.AddString("log-level", &o.log.level, "trace, debug, info, warn, error");
  p.AddString("log-format", &o.log.format, "text or json");
}

absl::Status ValidateWorkerOptions(const WorkerOptions& o) {
  RETURN_IF_ERROR(ParseHostPort(o.listen, "--listen").status());
  if (o.rank < 0) return absl::InvalidArgumentError("--rank must not be negative");
  if (o.device_index < -1) return absl::InvalidArgumentError("--device-index must be -1 or a device");
  return absl::OkStatus();
}

}  // namespace ditserve::worker
