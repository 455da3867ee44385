// Shows the GenerateStream events on stderr while a generation runs.
//
//   kBar    (stderr is a terminal) one self-redrawing line: "step 3/20 [#####.....] 15% 0.41 s/step ETA 7.0 s"
//   kLines  (stderr is a file/pipe) one stable line per event, for logs and scripts:
//             queued position=0
//             step 3/20 step_seconds=0.410 elapsed_seconds=1.250
//   kQuiet  (--quiet) nothing
//
// Threads: one reporter per call, used from the thread reading the stream.
#pragma once

#include <cstdio>

#include "ditserve/v1/ditserve.pb.h"

namespace ditserve::cli {

class ProgressReporter {
 public:
  enum class Mode { kBar, kLines, kQuiet };
  // kQuiet when `quiet`, else kBar when stderr is a terminal, else kLines.
  static Mode DetectMode(bool quiet);

  explicit ProgressReporter(Mode mode, std::FILE* out = stderr) : mode_(mode), out_(out) {}
  ~ProgressReporter() { Finish(); }
  ProgressReporter(const ProgressReporter&) = delete;
  ProgressReporter& operator=(const ProgressReporter&) = delete;

  void OnQueued(const ditserve::v1::Queued& queued);
  void OnProgress(const ditserve::v1::Progress& progress);
  // Ends the bar's line so later output starts on a fresh line. Idempotent.
  void Finish();

 private:
  Mode mode_;
  std::FILE* out_;
  bool line_open_ = false;  // kBar: a bar is drawn without its newline
};

}  // namespace ditserve::cli
