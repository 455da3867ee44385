#include "metrics/process_metrics.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace ditserve::metrics {
namespace {

// Whole-file read with plain syscalls (procfs files report size 0, so read until EOF).
absl::StatusOr<std::string> ReadFile(const char* path) {
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("cannot open ", path));
  std::string out;
  char buf[4096];
  while (true) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return out;
}

absl::StatusOr<double> CountOpenFds() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return absl::UnavailableError("cannot open /proc/self/fd");
  const std::string own_fd = std::to_string(dirfd(dir));
  double count = 0;
  while (dirent* entry = readdir(dir)) {
    const absl::string_view name = entry->d_name;
    if (name == "." || name == ".." || name == own_fd) continue;
    ++count;
  }
  closedir(dir);
  return count;
}

}  // namespace

absl::Status ParseProcPidStat(absl::string_view text, double ticks_per_second, double page_size,
                              double boot_time_seconds, ProcessStats& out) {
  // The command name (field 2) is in parentheses and may itself contain spaces or ')'.
  const size_t close = text.rfind(')');
  if (close == absl::string_view::npos) {
    return absl::InvalidArgumentError("/proc/self/stat: no ')' after the command name");
  }
  std::vector<absl::string_view> f =
      absl::StrSplit(text.substr(close + 1), ' ', absl::SkipWhitespace());
  // f[0] is field 3 (state): field N is f[N - 3].
  constexpr size_t kUtime = 14 - 3, kStime = 15 - 3, kStart = 22 - 3, kVsize = 23 - 3,
                   kRss = 24 - 3;
  if (f.size() <= kRss) return absl::InvalidArgumentError("/proc/self/stat: too few fields");
  double utime, stime, start, vsize, rss;
  if (!absl::SimpleAtod(f[kUtime], &utime) || !absl::SimpleAtod(f[kStime], &stime) ||
      !absl::SimpleAtod(f[kStart], &start) || !absl::SimpleAtod(f[kVsize], &vsize) ||
      !absl::SimpleAtod(f[kRss], &rss)) {
    return absl::InvalidArgumentError("/proc/self/stat: non-numeric field");
  }
  out.cpu_seconds = (utime + stime) / ticks_per_second;
  out.start_time_seconds = boot_time_seconds + start / ticks_per_second;
  out.virtual_memory_bytes = vsize;
  out.resident_memory_bytes = rss * page_size;
  return absl::OkStatus();
}

absl::StatusOr<double> ParseBootTime(absl::string_view proc_stat) {
  for (absl::string_view line : absl::StrSplit(proc_stat, '\n')) {
    if (absl::ConsumePrefix(&line, "btime ")) {
      double value;
      if (absl::SimpleAtod(absl::StripAsciiWhitespace(line), &value)) return value;
      return absl::InvalidArgumentError("/proc/stat: invalid btime");
    }
  }
  return absl::InvalidArgumentError("/proc/stat: no btime line");
}

absl::StatusOr<double> ParseMaxOpenFiles(absl::string_view limits) {
  for (absl::string_view line : absl::StrSplit(limits, '\n')) {
    if (!absl::ConsumePrefix(&line, "Max open files")) continue;
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipWhitespace());
    if (f.empty()) break;
    if (f[0] == "unlimited") return INFINITY;
    double value;
    if (absl::SimpleAtod(f[0], &value)) return value;
    break;
  }
  return absl::InvalidArgumentError("/proc/self/limits: no valid \"Max open files\" line");
}

absl::StatusOr<ProcessStats> ReadProcessStats() {
  ProcessStats stats;
  absl::StatusOr<std::string> pid_stat = ReadFile("/proc/self/stat");
  if (!pid_stat.ok()) return pid_stat.status();
  // Boot time never changes and /proc/stat is large on many-core hosts: read it once.
  static const absl::StatusOr<double> boot = []() -> absl::StatusOr<double> {
    absl::StatusOr<std::string> proc_stat = ReadFile("/proc/stat");
    if (!proc_stat.ok()) return proc_stat.status();
    return ParseBootTime(*proc_stat);
  }();
  if (!boot.ok()) return boot.status();
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  absl::Status s = ParseProcPidStat(*pid_stat, ticks, page, *boot, stats);
  if (!s.ok()) return s;
  absl::StatusOr<std::string> limits = ReadFile("/proc/self/limits");
  if (!limits.ok()) return limits.status();
  absl::StatusOr<double> max_fds = ParseMaxOpenFiles(*limits);
  if (!max_fds.ok()) return max_fds.status();
  stats.max_fds = *max_fds;
  absl::StatusOr<double> open_fds = CountOpenFds();
  if (!open_fds.ok()) return open_fds.status();
  stats.open_fds = *open_fds;
  return stats;
}

ProcessMetrics::ProcessMetrics() {
  absl::StatusOr<ProcessStats> stats = ReadProcessStats();
  if (stats.ok()) last_ = *stats;
}

std::vector<prometheus::MetricFamily> ProcessMetrics::Collect() const {
  ProcessStats s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    absl::StatusOr<ProcessStats> stats = ReadProcessStats();
    if (stats.ok()) last_ = *stats;
    s = last_;
  }
  auto family = [](const char* name, const char* help, prometheus::MetricType type,
                   double value) {
    prometheus::MetricFamily f;
    f.name = name;
    f.help = help;
    f.type = type;
    prometheus::ClientMetric& m = f.metric.emplace_back();
    if (type == prometheus::MetricType::Counter) {
      m.counter.value = value;
    } else {
      m.gauge.value = value;
    }
    return f;
  };
  constexpr prometheus::MetricType kGauge = prometheus::MetricType::Gauge;
  return {
      family("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.",
             prometheus::MetricType::Counter, s.cpu_seconds),
      family("process_resident_memory_bytes", "Resident memory size in bytes.", kGauge,
             s.resident_memory_bytes),
      family("process_virtual_memory_bytes", "Virtual memory size in bytes.", kGauge,
             s.virtual_memory_bytes),
      family("process_start_time_seconds",
             "Start time of the process since unix epoch in seconds.", kGauge,
             s.start_time_seconds),
      family("process_open_fds", "Number of open file descriptors.", kGauge, s.open_fds),
      family("process_max_fds", "Maximum number of open file descriptors.", kGauge, s.max_fds),
  };
}

}  // namespace ditserve::metrics
