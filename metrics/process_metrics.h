// Standard Prometheus process metrics for Linux, read from /proc/self (the same names the official
// client libraries export, so stock dashboards work):
//   process_cpu_seconds_total       counter  user + system CPU time
//   process_resident_memory_bytes   gauge    resident set size
//   process_virtual_memory_bytes    gauge    virtual memory size
//   process_start_time_seconds      gauge    start time since the Unix epoch
//   process_open_fds                gauge    open file descriptors
//   process_max_fds                 gauge    soft RLIMIT_NOFILE
// prometheus-cpp has no process collector (its Registry holds only metrics updated by the program),
// so ProcessMetrics is ours: a prometheus::Collectable that reads /proc/self at every collection.
// Workers use ReadProcessStats() to report their resident memory to the frontend.
// Thread-safety: every function and method is safe to call from any thread.
#pragma once

#include <mutex>
#include <vector>

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ditserve::metrics {

struct ProcessStats {
  double cpu_seconds = 0;
  double resident_memory_bytes = 0;
  double virtual_memory_bytes = 0;
  double start_time_seconds = 0;
  double open_fds = 0;
  double max_fds = 0;
};

// Reads all of ProcessStats for the calling process.
absl::StatusOr<ProcessStats> ReadProcessStats();

// Parsers for the /proc files (exposed for unit tests).
// /proc/<pid>/stat: fills cpu_seconds, resident/virtual memory and start_time_seconds.
absl::Status ParseProcPidStat(absl::string_view text, double ticks_per_second, double page_size,
                              double boot_time_seconds, ProcessStats& out);
// /proc/stat: the "btime" line (boot time, seconds since the epoch).
absl::StatusOr<double> ParseBootTime(absl::string_view proc_stat);
// /proc/<pid>/limits: the soft "Max open files" limit ("unlimited" gives +Inf).
absl::StatusOr<double> ParseMaxOpenFiles(absl::string_view limits);

// The six process_* families above, read from /proc/self at each Collect. A failed read exports the
// figures of the last successful one (the construction reads once, so there is one from the start
// when /proc is readable; all zeros otherwise). process_cpu_seconds_total is the kernel's
// cumulative figure, exported as a counter whose value is that total.
class ProcessMetrics final : public prometheus::Collectable {
 public:
  ProcessMetrics();
  ProcessMetrics(const ProcessMetrics&) = delete;
  ProcessMetrics& operator=(const ProcessMetrics&) = delete;

  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  mutable std::mutex mu_;
  mutable ProcessStats last_;  // guarded by mu_
};

}  // namespace ditserve::metrics
