// worker/engine_thread.h with worker/progress_queue.h, torch-free, as the worker uses them: many
// RPC handler threads submit jobs concurrently; each job runs on the one engine thread, in
// submission order, and pushes its progress into a queue on its handler's stack, which the handler
// drains and then drops before taking the job's result. Built without LibTorch so that
// scripts/sanitize.sh tsan runs it under ThreadSanitizer (the jobs touch plain, unsynchronised
// state: any missing happens-before edge between the engine thread and a handler is a report
// there).
#include "worker/engine_thread.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "worker/progress_queue.h"

namespace ditserve::worker {
namespace {

// What a job owns on the engine thread (the pipeline, the communicator): plain members, touched
// only by jobs.
struct DeviceState {
  std::vector<std::pair<int, int>> ran;  // (submitter, sequence) in the order the jobs ran
  std::thread::id owner;
  bool ok = true;
};

TEST(EngineThread, ConcurrentSubmittersRunOneAtATimeInTheirOrderOnOneThread) {
  constexpr int kSubmitters = 4, kJobs = 200;
  EngineThread engine;
  DeviceState state;
  std::vector<std::thread> handlers;
  for (int s = 0; s < kSubmitters; ++s) {
    handlers.emplace_back([&, s] {
      std::vector<std::future<int>> done;
      for (int j = 0; j < kJobs; ++j) {
        done.push_back(engine.Submit([&state, &engine, s, j] {
          if (state.owner == std::thread::id()) state.owner = std::this_thread::get_id();
          state.ok =
              state.ok && state.owner == std::this_thread::get_id() && engine.IsEngineThread();
          state.ran.emplace_back(s, j);
          return static_cast<int>(state.ran.size());
        }));
      }
      for (auto& d : done) EXPECT_GT(d.get(), 0);
    });
  }
  for (auto& h : handlers) h.join();
  // Every job has run and its future was read: the state is the caller's to read now.
  const std::vector<std::pair<int, int>> ran = engine.Call([&] { return state.ran; });
  ASSERT_EQ(ran.size(), static_cast<size_t>(kSubmitters * kJobs));
  std::vector<int> next(kSubmitters, 0);
  for (const auto& [s, j] : ran) EXPECT_EQ(j, next[s]++) << "submitter " << s;
  EXPECT_TRUE(state.ok);
  EXPECT_NE(state.owner, std::this_thread::get_id());
}

TEST(EngineThread, TheDestructorRunsTheQueuedJobsThenJoins) {
  std::vector<int> ran;
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::vector<std::future<void>> done;
  {
    EngineThread engine;
    done.push_back(engine.Submit([&] {
      released.wait();
      ran.push_back(0);
    }));
    for (int i = 1; i <= 3; ++i) done.push_back(engine.Submit([&ran, i] { ran.push_back(i); }));
    release.set_value();
  }  // joins after the four jobs
  EXPECT_EQ(ran, (std::vector<int>{0, 1, 2, 3}));
  for (auto& d : done) EXPECT_EQ(d.wait_for(std::chrono::seconds(0)), std::future_status::ready);
}

// The worker's Run handler (worker/worker_service.cc): the queue lives on the handler's stack, the
// job pushes into it and closes it last, the handler drains it. ProgressQueue's contract lets the
// consumer drop the queue as soon as Drain returns; here it does so before taking the future, on
// a fresh heap block each time (an access by Close after that point is a heap-use-after-free under
// ASan and a race with the free under TSan).
TEST(EngineThread, AJobsProgressReachesItsHandlerWhichMayDropTheQueueOnceDrained) {
  constexpr int kHandlers = 3, kCalls = 300;
  // static: g++ 13 refuses the inner lambda's use of an uncaptured local constexpr.
  static constexpr int kSteps = 6;
  EngineThread engine;
  std::vector<std::thread> handlers;
  std::atomic<int> failures{0};
  for (int h = 0; h < kHandlers; ++h) {
    handlers.emplace_back([&, h] {
      for (int c = 0; c < kCalls; ++c) {
        auto progress = std::make_unique<ProgressQueue<std::string>>(kSteps + 1);
        std::future<std::string> done = engine.Submit([q = progress.get(), h, c]() -> std::string {
          for (int i = 0; i < kSteps; ++i) q->Push("step " + std::to_string(i));
          q->Close();  // the producer's last touch of the queue
          return "result " + std::to_string(h) + "/" + std::to_string(c);
        });
        std::vector<std::string> got;
        progress->Drain([&](const std::string& e) {
          got.push_back(e);
          return true;
        });
        progress.reset();  // Drain returned: the producer has closed it and is done with it
        if (got.size() != static_cast<size_t>(kSteps) || got.back() != "step 5") ++failures;
        if (done.get() != "result " + std::to_string(h) + "/" + std::to_string(c)) ++failures;
      }
    });
  }
  for (auto& t : handlers) t.join();
  EXPECT_EQ(failures.load(), 0);
}

}  // namespace
}  // namespace ditserve::worker
