// Standard Prometheus process metrics for Linux, read from /proc/self (the same names the official
// client libraries export, so stock dashboards work):
//   process_cpu_seconds_total       counter  user + system CPU time
//   process_resident_memory_bytes   gauge    resident set size
//   process_virtual_memory_bytes    gauge    virtual memory size
//   process_start_time_seconds      gauge    start time since the Unix epoch
//   process_open_fds                gauge    open file descriptors
//   process_max_fds                 gauge    soft RLIMIT_NOFILE
// Workers use ReadProcessStats() to report their resident memory to the frontend.
// Thread-safety: every function is safe to call from any thread.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "metrics/registry.h"

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

// Registers the six process_* families on `registry` plus a collect hook that refreshes them from
// /proc/self at every scrape (a failed read leaves the previous values). Fails if any of the names
// is already registered.
absl::Status RegisterProcessMetrics(Registry& registry);

}  // namespace ditserve::metrics
