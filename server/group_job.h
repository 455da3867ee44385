// GroupJob: one job's Run calls on every rank of a formed worker group, and how the job ends.
//
// Start() hands each rank its call (WorkerRank::Post: the rank's own long-lived thread reads the
// rank's Run stream, passes rank 0's step events to RunControl::on_progress and records how the
// stream ended). Wait() reacts, on the caller's thread, to (in this order) the end of every call,
// a failed rank, Shutdown(), a cancel request (Cancel to every rank, then the stop deadline) and
// the stop deadline. Nothing polls: the ranks' threads, FailThrough(), Shutdown() and whoever turns
// should_cancel() true notify the wakeup; the only timers are `cancel_at` and the stop deadline.
//
// Failure rules: a call that ends with a code the group survives (common/group_survival.h) is
// expected, CANCELLED only after the frontend asked every rank to stop or ended the calls itself;
// anything else is a failed rank, and the other calls are abandoned at once (a hung rank is never
// waited for). Outcome() maps that to the job's status and says whether the group must be
// re-formed.
//
// Threads: Start(), Wait() and Outcome() from the one thread that runs the job (the dispatcher's,
// through WorkerGroup::Run), in that order; FailThrough() and Shutdown() from any thread. The
// ranks, `request` and `control` must outlive Wait(), which returns only once every rank's thread
// is done with them. Own the job through a shared_ptr: the ranks' calls hold it (so a rank's thread
// may be the one that destroys it; it owns no rank for that reason).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "ditserve/worker/v1/worker.grpc.pb.h"
#include "server/deadline.h"
#include "server/wakeup.h"
#include "server/worker_rank.h"

namespace ditserve::server {

// How the dispatcher drives one job through WorkerGroup::Run(). Every member may be empty.
struct RunControl {
  // Rank 0's step events, on rank 0's thread (WorkerRank), which reads its stream.
  std::function<void(const worker::v1::StepProgress&)> on_progress;
  // Evaluated (under `wakeup`'s lock: no blocking, no Notify) when `wakeup` is notified and at
  // `cancel_at`; once true the job is cancelled on every rank. Whoever makes it true must call
  // wakeup->Notify().
  std::function<bool()> should_cancel;
  Wakeup* wakeup = nullptr;  // null: the job uses its own, and only `cancel_at` can cancel
  // The job is cancelled at this time even if nobody notifies (e.g. every request's deadline).
  Clock::time_point cancel_at = Clock::time_point::max();
};

class GroupJob : public std::enable_shared_from_this<GroupJob> {
 public:
  // `stop_timeout`: how long the ranks may take to stop after a cancel before the group counts
  // as stuck (the collective timeout + a margin).
  GroupJob(const std::vector<std::shared_ptr<WorkerRank>>& ranks,
           const worker::v1::RunRequest& request, const RunControl& control,
           std::chrono::milliseconds stop_timeout);

  void Start();
  void Wait();
  // The job's status: the result; UNAVAILABLE when a rank failed, the calls were abandoned or
  // the server shuts down; CANCELLED when every rank stopped at a step boundary; the ranks' own
  // code when they refused the job and the group survives it. `*broken` says why the group must
  // be re-formed (empty: it is intact).
  absl::StatusOr<worker::v1::RunResult> Outcome(std::string* broken);

  // Rank `index` is hung (`why`): the job fails through it, as if its call had failed.
  void FailThrough(int index, const std::string& why);
  // The server shuts down: the calls are abandoned and the job ends UNAVAILABLE.
  void Shutdown();

 private:
  struct RankCall {
    grpc::ClientContext ctx;
    grpc::Status status;
    worker::v1::RunResult result;
    bool has_result = false;
  };

  // Rank `i`'s call, on its thread: the stream read to its end, then recorded.
  void ReadRank(size_t i);
  // Ends every call still running (client-side cancel: it completes at once, whatever the rank
  // does; a call not started yet ends as it starts).
  void AbandonCalls();
  void SendCancel();
  bool CancelWanted() const;

  std::vector<WorkerRank*> ranks_;
  const worker::v1::RunRequest& request_;
  const RunControl& control_;
  const std::chrono::milliseconds stop_timeout_;
  Wakeup own_wakeup_;
  Wakeup* const wakeup_;  // control.wakeup or own_wakeup_
  std::vector<std::unique_ptr<RankCall>> calls_;
  std::mutex mu_;  // guards RankCall::status/result/has_result and the members below
  std::condition_variable released_cv_;
  size_t finished_ = 0;  // calls that ended
  size_t released_ = 0;  // ranks' threads done with request_ / control_ / wakeup_
  int first_failure_ = -1;  // the first rank that ended with an error the frontend did not cause
  std::string failure_reason_;  // when set: why first_failure_ failed (a missed heartbeat)
  std::string abandon_reason_;  // Wait()'s: why it abandoned the calls (empty: it did not)
  std::atomic<bool> cancel_sent_{false};  // Cancel went to every rank
  std::atomic<bool> abandoned_{false};    // the frontend ended the calls itself
  std::atomic<bool> shutting_down_{false};
};

}  // namespace ditserve::server
