// /proc parsing for the process_* metrics, on crafted text and on the live process.
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <string>

#include "gtest/gtest.h"
#include "metrics/exposition.h"
#include "metrics/process_metrics.h"
#include "tests/support/exposition_parser.h"

namespace ditserve::metrics {
namespace {

TEST(MetricsProcess, ParsesProcPidStatWithAwkwardCommandName) {
  // Fields from 3 on: state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
  // utime(14) stime(15) cutime cstime priority nice threads itrealvalue starttime(22) vsize(23)
  // rss(24) ...
  const std::string text =
      "4242 (we ird) (name) R 1 2 3 0 -1 4194304 99 0 0 0 250 150 0 0 20 0 1 0 5000 3133440 389 "
      "18446744073709551615 0 0\n";
  ProcessStats s;
  ASSERT_TRUE(ParseProcPidStat(text, 100, 4096, 1.7e9, s).ok());
  EXPECT_DOUBLE_EQ(s.cpu_seconds, 4.0);
  EXPECT_DOUBLE_EQ(s.start_time_seconds, 1.7e9 + 50);
  EXPECT_DOUBLE_EQ(s.virtual_memory_bytes, 3133440);
  EXPECT_DOUBLE_EQ(s.resident_memory_bytes, 389.0 * 4096);
  EXPECT_FALSE(ParseProcPidStat("4242 (x) R 1 2", 100, 4096, 0, s).ok());
  EXPECT_FALSE(ParseProcPidStat("no parenthesis", 100, 4096, 0, s).ok());
}

TEST(MetricsProcess, ParsesBootTimeAndLimits) {
  auto boot = ParseBootTime("cpu  1 2 3\nintr 5\nbtime 1796210487\nprocesses 9\n");
  ASSERT_TRUE(boot.ok());
  EXPECT_EQ(*boot, 1796210487.0);
  EXPECT_FALSE(ParseBootTime("cpu 1\n").ok());
  const std::string limits =
      "Limit                     Soft Limit           Hard Limit           Units     \n"
      "Max open files            1024                 524288               files     \n";
  auto max = ParseMaxOpenFiles(limits);
  ASSERT_TRUE(max.ok());
  EXPECT_EQ(*max, 1024);
  auto unlimited = ParseMaxOpenFiles("Max open files            unlimited  unlimited  files\n");
  ASSERT_TRUE(unlimited.ok());
  EXPECT_TRUE(std::isinf(*unlimited));
  EXPECT_FALSE(ParseMaxOpenFiles("Max processes 5 5\n").ok());
}

TEST(MetricsProcess, LiveFiguresAreSane) {
  auto before = ReadProcessStats();
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_GT(before->resident_memory_bytes, 1 << 20);
  EXPECT_GE(before->virtual_memory_bytes, before->resident_memory_bytes);
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  EXPECT_LE(before->start_time_seconds, now + 1);
  EXPECT_GT(before->start_time_seconds, now - 3600);
  rlimit rl{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &rl), 0);
  if (rl.rlim_cur != RLIM_INFINITY) {
    EXPECT_EQ(before->max_fds, static_cast<double>(rl.rlim_cur));
  }

  const int fd = open("/proc/self/stat", O_RDONLY);
  ASSERT_GE(fd, 0);
  // Burn a little CPU so the tick-granular counter must move.
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(60);
  volatile double sink = 0;
  while (std::chrono::steady_clock::now() < until) sink = sink + std::sqrt(sink + 1.0);
  auto after = ReadProcessStats();
  close(fd);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->open_fds, before->open_fds + 1);
  EXPECT_GT(after->cpu_seconds, before->cpu_seconds);
}

TEST(MetricsProcess, CollectableExportsTheStandardFamiliesReadAtEachCollect) {
  ProcessMetrics process;
  auto parsed = ParseTextExposition(RenderTextExposition({&process}));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->types.size(), 6u);
  EXPECT_EQ(parsed->types.at("process_cpu_seconds_total"), "counter");
  ASSERT_NE(parsed->Find("process_cpu_seconds_total", {}), nullptr);
  for (const char* g : {"process_resident_memory_bytes", "process_virtual_memory_bytes",
                        "process_start_time_seconds", "process_open_fds", "process_max_fds"}) {
    EXPECT_EQ(parsed->types.at(g), "gauge") << g;
    EXPECT_FALSE(parsed->help.at(g).empty()) << g;
    const ParsedSample* s = parsed->Find(g, {});
    ASSERT_NE(s, nullptr) << g;
    EXPECT_GT(s->value, 0) << g;
  }
  const double fds1 = parsed->Find("process_open_fds", {})->value;
  const int fd = open("/proc/self/stat", O_RDONLY);
  auto again = ParseTextExposition(RenderTextExposition({&process}));
  close(fd);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->Find("process_open_fds", {})->value, fds1 + 1) << "read again at collect";
}

}  // namespace
}  // namespace ditserve::metrics
