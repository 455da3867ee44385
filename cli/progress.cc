#include "cli/progress.h"

#include <unistd.h>

#include <algorithm>
#include <string>

namespace ditserve::cli {

ProgressReporter::Mode ProgressReporter::DetectMode(bool quiet) {
  if (quiet) return Mode::kQuiet;
  return isatty(STDERR_FILENO) ? Mode::kBar : Mode::kLines;
}

void ProgressReporter::OnQueued(const ditserve::v1::Queued& queued) {
  switch (mode_) {
    case Mode::kQuiet: return;
    case Mode::kLines:
      std::fprintf(out_, "queued position=%u\n", queued.position());
      break;
    case Mode::kBar:
      // \033[K clears what a longer previous line left behind.
      std::fprintf(out_, "\rqueued, position %u\033[K", queued.position());
      line_open_ = true;
      break;
  }
  std::fflush(out_);
}

void ProgressReporter::OnProgress(const ditserve::v1::Progress& p) {
  switch (mode_) {
    case Mode::kQuiet: return;
    case Mode::kLines:
      std::fprintf(out_, "step %u/%u step_seconds=%.3f elapsed_seconds=%.3f\n", p.step(),
                   p.total_steps(), p.step_seconds(), p.elapsed_seconds());
      break;
    case Mode::kBar: {
      constexpr int kWidth = 30;
      uint32_t total = std::max<uint32_t>(p.total_steps(), 1);
      uint32_t step = std::min(p.step(), total);
      int filled = static_cast<int>(uint64_t{step} * kWidth / total);
      std::string bar(filled, '#');
      bar.append(kWidth - filled, '.');
      double eta = p.step_seconds() * (total - step);
      std::fprintf(out_, "\rstep %u/%u [%s] %3u%% %.2f s/step ETA %.1f s\033[K", step, total,
                   bar.c_str(), static_cast<unsigned>(uint64_t{step} * 100 / total),
                   p.step_seconds(), eta);
      line_open_ = true;
      break;
    }
  }
  std::fflush(out_);
}

void ProgressReporter::Finish() {
  if (line_open_) {
    std::fputc('\n', out_);
    std::fflush(out_);
    line_open_ = false;
  }
}

}  // namespace ditserve::cli
