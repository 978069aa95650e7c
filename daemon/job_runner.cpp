#include "daemon/job_runner.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <thread>

#include "base/wall_clock.h"

namespace llmq {

double UnixNow() {
  return wall_clock::Now();
}

JobRunner::JobRunner(const BuildContext& ctx, LlmEngine* engine, jobs::Store* store,
                     jobs::ResultCommitter* committer, const RunnerOptions& opt)
    : ctx_(ctx), engine_(engine), store_(store), committer_(committer), opt_(opt) {}

Status JobRunner::Job(int64_t id, const JobInfo** out) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) {
    jobs::JobRecord rec;
    LLMQ_RETURN_IF_ERROR(store_->GetJob(id, &rec));
    if (rec.started_at == 0) LLMQ_RETURN_IF_ERROR(store_->MarkJobStarted(id, UnixNow()));
    it = jobs_.emplace(id, JobInfo{rec.public_id, rec.name, rec.created_at}).first;
  }
  *out = &it->second;
  return Status::Ok();
}

void JobRunner::Refuse(int64_t job, int64_t line, int64_t generation, const std::string& custom_id,
                       const std::string& msg, const std::string& param) {
  const JobInfo* info = &jobs_.at(job);
  jobs::Result r;
  r.job = job;
  r.line = line;
  r.is_error = true;
  r.output = jobs::RefusedLine(custom_id, line, RequestIdFor(info->public_id, line), msg, param);
  committer_->Push(std::move(r), generation);
  ++progress_.finished;
  ++progress_.failed;
}

Status JobRunner::ReleaseLeases() {
  // What finished is committed first: a result committed after its lease went back could be
  // fenced by another worker's claim, and that request would run twice.
  LLMQ_RETURN_IF_ERROR(committer_->Flush());
  // The requests still in the engine keep theirs (a claim after a failed Admit, or a hold's
  // admitted ones: given back, another worker would run them too).
  std::vector<std::pair<int64_t, int64_t>> running;
  for (const auto& [id, f] : fed_)
    if (!dropped_.count(id)) running.emplace_back(f.job, f.line);
  int64_t released = 0;
  LLMQ_RETURN_IF_ERROR(store_->ReleaseLeases(opt_.worker, &released, running));
  leases_held_ = false;
  return Status::Ok();
}

// Tops the engine up to the window from the store: in plan-rank order after the cursor, or (a
// worker) by claiming plan groups under leases.
Status JobRunner::Feed() {
  const bool leased = !opt_.worker.empty();
  if (refeed_) {
    // The dropped requests lie behind the cursor (or are leased to this worker still): start
    // again from the first pending one. The results handed to the committer are committed
    // first, or they would look pending.
    const Status st = leased ? ReleaseLeases() : committer_->Flush();
    if (!st.ok()) {
      std::fprintf(stderr, "llmq: resuming: %s (retried)\n", st.message().c_str());
      return Status::Ok();
    }
    refeed_ = false;
    cursor_ = 0;
    drained_ = false;
  }
  int queued = static_cast<int>(engine_->num_queued() + engine_->num_window());
  if (drained_ || queued >= opt_.window / 2) return Status::Ok();
  std::vector<jobs::PendingRequest> batch;
  if (!leased) {
    LLMQ_RETURN_IF_ERROR(store_->NextPending(cursor_, opt_.window - queued, &batch));
    if (batch.empty()) drained_ = true;
    return Admit(&batch);
  }
  // Whole groups, one claim each, until the window is full or nothing is claimable.
  while (queued < opt_.window) {
    jobs::Claim claim;
    LLMQ_RETURN_IF_ERROR(store_->ClaimNextGroup(opt_.worker, opt_.lease_seconds,
                                                std::min(opt_.claim_max, opt_.window - queued),
                                                opt_.models, &claim));
    if (claim.requests.empty()) {
      drained_ = true;
      break;
    }
    queued += static_cast<int>(claim.requests.size());
    idle_released_ = false;
    LLMQ_RETURN_IF_ERROR(Admit(&claim.requests));
  }
  return Status::Ok();
}

Status JobRunner::Admit(std::vector<jobs::PendingRequest>* pending) {
  std::vector<jobs::PendingRequest>& batch = *pending;
  if (batch.empty()) return Status::Ok();
  // Still in the engine from before a hold (admitted, let run): not fed, nor counted, twice.
  std::vector<std::string> ids(batch.size());
  std::vector<std::pair<int64_t, int64_t>> handed;
  handed.reserve(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    ids[i] = std::to_string(batch[i].job) + ":" + std::to_string(batch[i].line);
    if (auto it = fed_.find(ids[i]); it == fed_.end())
      handed.emplace_back(batch[i].job, batch[i].line);
    else
      it->second.generation = batch[i].lease_generation;  // re-claimed: its result's lease
  }
  // Counted before the engine sees them: a request that keeps taking the process down with it
  // shows in its `attempts` (one write per window, not per request).
  LLMQ_RETURN_IF_ERROR(store_->MarkAttempted(handed));
  const double now = UnixNow();
  for (size_t i = 0; i < batch.size(); ++i) {
    jobs::PendingRequest& p = batch[i];
    const JobInfo* info = nullptr;
    if (!fed_.count(ids[i])) LLMQ_RETURN_IF_ERROR(Job(p.job, &info));
    cursor_ = p.plan_rank;  // only past requests handled: a failed Job() is retried from here
    if (info == nullptr) continue;
    Fed f;
    f.job = p.job;
    f.line = p.line;
    f.generation = p.lease_generation;
    f.req = jobs::ParseBatchLine(p.body, static_cast<int>(p.line), info->name);
    f.queued_before = std::max(0.0, now - info->created_at);
    Request r;
    r.id = std::move(ids[i]);
    std::string err = f.req.error, param = f.req.error_param;
    if (err.empty()) {
      if (Status st = BuildRequest(ctx_, f.req, info->name, info->public_id, &r, &param); !st.ok())
        err = st.message();
    }
    if (!err.empty()) {
      Refuse(p.job, p.line, p.lease_generation, f.req.custom_id, err, param);
      continue;
    }
    r.plan_segment = static_cast<uint64_t>(p.job);  // jobs keep their order (FIFO)
    fed_.emplace(r.id, std::move(f));
    engine_->Add(std::move(r));
  }
  return Status::Ok();
}

void JobRunner::Finish(Fed& f, const RequestOutput& o) {
  const JobInfo& info = jobs_.at(f.job);
  const std::string request_id = RequestIdFor(info.public_id, f.line);
  jobs::Result r;
  r.job = f.job;
  r.line = f.line;
  if (!o.ok()) {
    r.is_error = true;
    r.output = jobs::ErrorLine(f.req.custom_id, f.line, request_id,
                               o.cancelled ? jobs::kCancelledCode : jobs::kEngineErrorCode,
                               info.name + ":" + std::to_string(f.line) + ": " + o.error);
    ++progress_.failed;
  } else {
    r.output = OutputLine(ctx_, f.req, o, request_id, static_cast<int64_t>(UnixNow()));
    jobs::ResultMetrics& m = r.metrics;
    m.prompt_tokens = o.metrics.prompt_tokens;
    m.cached_tokens = o.metrics.cached_prompt_tokens;
    m.computed_tokens = o.metrics.computed_prompt_tokens;
    m.completion_tokens = o.metrics.completion_tokens;
    m.queue_seconds = f.queued_before + o.metrics.queue_seconds;
    m.ttft_seconds = o.metrics.ttft_seconds;
    m.itl_seconds = o.metrics.itl_seconds;
    m.latency_seconds = f.queued_before + o.metrics.total_seconds;
    m.finished_at = UnixNow();
    progress_.prompt_tokens += m.prompt_tokens;
    progress_.cached_tokens += m.cached_tokens;
    progress_.computed_tokens += m.computed_tokens;
  }
  ++progress_.finished;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++finished_by_job_[f.job];
  }
  committer_->Push(std::move(r), f.generation);
}

int64_t JobRunner::FinishedOfJob(int64_t job) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = finished_by_job_.find(job);
  return it == finished_by_job_.end() ? 0 : it->second;
}

void JobRunner::HandleOutputs(const std::vector<RequestOutput>& done) {
  for (const RequestOutput& o : done) {
    auto it = fed_.find(o.id);
    if (it == fed_.end()) continue;  // LLMQ_CHECK-worthy, but never lose the loop over it
    if (dropped_.erase(o.id) == 0) {
      Finish(it->second, o);
      if (opt_.on_output) opt_.on_output(o);
    }
    fed_.erase(it);
  }
}

namespace {
// Adds the wall clock's seconds of its scope to *total (RunnerProgress::busy_seconds).
class BusyTimer {
 public:
  explicit BusyTimer(double* total) : total_(total) {}
  ~BusyTimer() { *total_ += watch_.Seconds(); }
  BusyTimer(const BusyTimer&) = delete;
  BusyTimer& operator=(const BusyTimer&) = delete;

 private:
  double* total_;
  wall_clock::Stopwatch watch_;
};
}  // namespace

std::vector<std::pair<std::string, int64_t>> JobRunner::InFlightTokensByJob() const {
  std::map<std::string, int64_t> by_job;
  engine_->ForEachInFlight([&](const std::string& id, int64_t tokens) {
    const auto f = fed_.find(id);
    if (f == fed_.end() || dropped_.count(id)) return;
    const auto j = jobs_.find(f->second.job);
    if (j != jobs_.end()) by_job[j->second.public_id] += tokens;
  });
  return {by_job.begin(), by_job.end()};
}

void JobRunner::StepOnce(int64_t tokens_before, std::vector<RequestOutput>* done) {
  done->clear();
  const auto start = std::chrono::steady_clock::now();
  // A failed step has already failed its own requests (their results are in *done); the rest go
  // on, so the loop goes on too.
  if (Status st = engine_->Step(done); !st.ok())
    std::fprintf(stderr, "llmq: step failed, its requests are marked failed: %s\n",
                 st.message().c_str());
  wall_clock::Step();  // a step-driven test clock moves on by its step
  progress_.last_step_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  HandleOutputs(*done);
  progress_.tokens_generated = engine_->stats().tokens_generated - tokens_before;
}

Status JobRunner::Run(const std::function<bool()>& stop, const std::function<void()>& on_step) {
  const int64_t tokens_before = engine_->stats().tokens_generated;
  std::vector<RequestOutput> done;
  while (!stop()) {
    const BusyTimer busy(&progress_.busy_seconds);
    LLMQ_RETURN_IF_ERROR(Feed());
    progress_.fed_out = drained_;
    if (!engine_->HasWork()) {
      if (drained_) break;
      continue;
    }
    StepOnce(tokens_before, &done);
    if (on_step) on_step();
  }
  return Status::Ok();
}

void JobRunner::Wake() {
  std::lock_guard<std::mutex> lock(mu_);
  wake_ = true;
  cv_.notify_all();
}

void JobRunner::CancelJob(int64_t job) {
  std::lock_guard<std::mutex> lock(mu_);
  cancels_.push_back(job);
  cv_.notify_all();
}

void JobRunner::Drain() {
  std::lock_guard<std::mutex> lock(mu_);
  drain_ = true;
  cv_.notify_all();
}

void JobRunner::Stop() {
  std::lock_guard<std::mutex> lock(mu_);
  stop_ = true;
  cv_.notify_all();
}

void JobRunner::Hold(bool running_too) {
  std::lock_guard<std::mutex> lock(mu_);
  hold_ = std::max(hold_, running_too ? 2 : 1);  // only Release lifts a hold
  cv_.notify_all();
}

void JobRunner::Release() {
  std::lock_guard<std::mutex> lock(mu_);
  hold_ = 0;
  cv_.notify_all();
}

void JobRunner::ApplyControls() {
  if (wake_) {
    wake_ = false;
    drained_ = false;
  }
  for (int64_t job : cancels_)
    for (const auto& [id, f] : fed_)
      if (f.job == job && !dropped_.count(id)) engine_->Cancel(id);
  cancels_.clear();
  if (hold_ != held_) {
    // Held requests are cancelled as dropped (no result); their cancelled outputs come with the
    // step that follows, before any later ApplyControls, so at Release none is still in fed_.
    for (const auto& [id, f] : fed_)
      if ((hold_ == 2 || !engine_->IsAdmitted(id)) && !dropped_.count(id) && engine_->Cancel(id))
        dropped_.insert(id);
    // Released: the dropped requests lie behind the cursor, and the queue may have looked empty
    // past it (drained_) since everything was fed before the hold; Feed must look again.
    if (hold_ == 0) {
      refeed_ = true;
      drained_ = false;
    } else if (!opt_.worker.empty()) {
      leases_held_ = true;  // given back once the engine is idle (Serve), or at Release (Feed)
    }
    held_ = hold_;
  }
  if (drain_ && !draining_) {
    draining_ = true;
    for (const auto& [id, f] : fed_)
      if (!engine_->IsAdmitted(id) && engine_->Cancel(id)) dropped_.insert(id);
  }
}

Status JobRunner::Serve(const std::function<void()>& on_step) {
  const int64_t tokens_before = engine_->stats().tokens_generated;
  std::vector<RequestOutput> done;
  for (;;) {
    if (opt_.on_tick) opt_.on_tick();  // outside mu_: it may call Wake() & co.
    {
      std::unique_lock<std::mutex> lock(mu_);
      ApplyControls();
      progress_.fed_out = drained_;
      if (stop_) break;
      if (!engine_->HasWork() && (draining_ || drained_ || held_ > 0)) {
        if (draining_) break;
        if (held_ > 0 && leases_held_ && !draining_) {
          // Held and idle: the dropped requests' leases go back, so that other workers may run
          // them meanwhile (outside mu_: the commit may wait on the store).
          lock.unlock();
          if (Status st = ReleaseLeases(); !st.ok()) {
            std::fprintf(stderr, "llmq: giving back the held requests' leases: %s\n",
                         st.message().c_str());
            leases_held_ = false;  // tried again at Release (Feed)
          }
          continue;
        }
        // Idle with nothing in the engine for a lease's time, yet the store may hold leases in
        // this worker's name: a claim its killed last incarnation sent, committed after this one
        // registered (the server finishes what a dead client sent). The heartbeat would renew
        // them for as long as this worker runs, and no one would run them: every lease goes
        // back, once per idle spell (outside mu_: the commit may wait on the store).
        const bool may_hold =
            !opt_.worker.empty() && drained_ && held_ == 0 && !draining_ && !idle_released_;
        const auto now = std::chrono::steady_clock::now();
        if (may_hold && idle_since_ == std::chrono::steady_clock::time_point{}) idle_since_ = now;
        const auto lease = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
            std::chrono::duration<double>(opt_.lease_seconds));
        if (may_hold && now - idle_since_ >= lease) {
          lock.unlock();
          if (Status st = ReleaseLeases(); !st.ok())
            std::fprintf(stderr, "llmq: giving back the leases of an idle worker: %s\n",
                         st.message().c_str());
          idle_released_ = true;  // tried again after its next claim
          continue;
        }
        wall_clock::Idle();  // a step-driven test clock runs with real time while the engine waits
        const auto woken = [&] { return wake_ || ControlPending(); };
        if (may_hold)  // the idle release is due; and still a tick every tick_interval
          cv_.wait_until(lock,
                         opt_.tick_interval.count() > 0
                             ? std::min(idle_since_ + lease, now + opt_.tick_interval)
                             : idle_since_ + lease,
                         woken);
        else if (opt_.tick_interval.count() > 0)
          cv_.wait_for(lock, opt_.tick_interval, woken);
        else
          cv_.wait(lock, woken);
        continue;
      }
    }
    wall_clock::Busy();  // ... and stands still at work, but for its steps (base/wall_clock.h)
    const BusyTimer busy(&progress_.busy_seconds);
    // A store another process holds past the busy timeout (or a full disk, or a PostgreSQL
    // server out of reach) must not end the engine thread, and with it the daemon: Feed is tried
    // again later, backing off (feed_retry_wait_; the cursor only moves past requests it handed
    // over or refused); the engine steps on meanwhile.
    const auto now = std::chrono::steady_clock::now();
    if (!draining_ && held_ == 0 && now >= feed_retry_at_) {
      if (Status st = Feed(); !st.ok()) {
        if (st.code() != Status::Code::kIoError) return st;
        const std::chrono::milliseconds wait = feed_retry_wait_.Next();
        std::fprintf(stderr, "llmq: feeding the engine: %s (retried in %.1f s)\n",
                     st.message().c_str(), wait.count() / 1000.0);
        feed_retry_at_ = now + wait;
        // A worker may hold leases on requests it never handed to its engine: a claim whose
        // Admit failed (MarkAttempted, the job's row), or one committed whose answer was lost
        // with the connection. Its heartbeat would renew them for as long as it runs, and no one
        // would ever run them: its leases go back before it claims again (Feed, refeed_).
        if (!opt_.worker.empty()) refeed_ = true;
      } else {
        feed_retry_wait_.Reset();
      }
      progress_.fed_out = drained_;
    }
    if (!engine_->HasWork()) {
      if (std::chrono::steady_clock::now() < feed_retry_at_) {
        // Nothing to step until Feed's retry: wait for it, or for a control (stop, drain, hold,
        // a cancel), which the top of the loop applies.
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait_until(lock, feed_retry_at_, [&] { return ControlPending(); });
      }
      continue;
    }
    idle_since_ = {};  // at work: an idle spell starts afresh
    StepOnce(tokens_before, &done);
    if (on_step) on_step();
  }
  return Status::Ok();
}

}  // namespace llmq
