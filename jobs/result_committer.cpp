#include "jobs/result_committer.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "base/backoff.h"

namespace llmq::jobs {

ResultCommitter::ResultCommitter(Store* store, Options options)
    : store_(store),
      opt_(std::move(options)),
      time_(opt_.time != nullptr ? opt_.time : TimeSource::Steady()),
      thread_([this] { Run(); }) {
  LLMQ_CHECK(store_ != nullptr && opt_.max_batch > 0 && opt_.max_queue > 0);
}

ResultCommitter::~ResultCommitter() {
  Close().IgnoreError();  // a destructor cannot report: owners needing the error call Close()
}

void ResultCommitter::Push(Result r, int64_t lease_generation) {
  std::unique_lock<std::mutex> lock(mu_);
  LLMQ_CHECK(!closing_);
  not_full_cv_.wait(lock, [&] { return queue_.size() < opt_.max_queue; });
  if (queue_.empty()) oldest_ = time_->Now();
  queue_.push_back(LeasedResult{std::move(r), lease_generation});
  ++pushed_;
  // The thread waits for a first result, then for a full group or the interval: wake it for both.
  if (queue_.size() == 1 || queue_.size() >= opt_.max_batch) work_cv_.notify_one();
}

Status ResultCommitter::Flush() {
  std::unique_lock<std::mutex> lock(mu_);
  const int64_t target = pushed_;
  flush_target_ = std::max(flush_target_, target);
  work_cv_.notify_one();
  done_cv_.wait(lock, [&] { return done_ >= target; });
  return error_;
}

Status ResultCommitter::Close(TimeSource::time_point retry_until) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return error_;
    closing_ = true;
    close_retry_until_ = retry_until;
  }
  work_cv_.notify_one();
  thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = true;
  return error_;
}

void ResultCommitter::SetInterval(std::chrono::milliseconds interval) {
  std::lock_guard<std::mutex> lock(mu_);
  opt_.interval = interval;
  work_cv_.notify_all();
}

int64_t ResultCommitter::committed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return committed_;
}

int64_t ResultCommitter::fenced() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fenced_;
}

int64_t ResultCommitter::failed_attempts() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failed_attempts_;
}

template <class Done>
void ResultCommitter::WaitUntil(std::unique_lock<std::mutex>* lock, TimeSource::time_point deadline,
                                const Done& done) {
  while (!done() && time_->Now() < deadline) time_->WaitUntil(&work_cv_, lock, deadline);
}

void ResultCommitter::Run() {
  std::vector<LeasedResult> group;
  std::vector<Result> plain;  // CommitResults' argument (no worker)
  // The wait before the next retry of a failed group (the header: exponential backoff).
  Backoff retry_wait(opt_.retry_interval, opt_.retry_max_interval);
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [&] { return closing_ || !queue_.empty(); });
    if (queue_.empty()) return;  // closing, and everything is through
    // Results left over from a larger queue keep the old `oldest_`: their deadline has passed,
    // so they go at once.
    WaitUntil(&lock, oldest_ + opt_.interval,
              [&] { return closing_ || flush_target_ > done_ || queue_.size() >= opt_.max_batch; });
    const size_t n = std::min(queue_.size(), opt_.max_batch);
    group.assign(std::make_move_iterator(queue_.begin()),
                 std::make_move_iterator(queue_.begin() + static_cast<std::ptrdiff_t>(n)));
    queue_.erase(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(n));
    not_full_cv_.notify_all();
    // The commit (and its fsync) runs unlocked: Push never waits for it.
    lock.unlock();
    int64_t added = 0, fenced = 0;
    Status s;
    if (opt_.worker.empty()) {
      plain.clear();
      for (const LeasedResult& r : group) plain.push_back(r.result);
      s = store_->CommitResults(plain, &added);
    } else {
      s = store_->CommitLeasedResults(opt_.worker, group, &added, &fenced);
    }
    lock.lock();
    if (!s.ok()) ++failed_attempts_;
    if (opt_.after_attempt) opt_.after_attempt(s, committed_ + added);
    const auto retrying = [&] { return !closing_ || time_->Now() < close_retry_until_; };
    if (!s.ok() && s.code() == Status::Code::kIoError && opt_.retry_interval.count() > 0 &&
        retrying()) {
      // Transient (a lock held by another process, a full disk): keep the group, in order, in
      // front of what came since, and try again after the interval (or at Close).
      queue_.insert(queue_.begin(), std::make_move_iterator(group.begin()),
                    std::make_move_iterator(group.end()));
      group.clear();
      // Closing without time to retry ends the wait (the group is tried once more); with time
      // left, the backoff runs on (a wait begun while closing ends by that time).
      auto until = time_->Now() + retry_wait.Next();
      if (closing_) until = std::min(until, std::max(close_retry_until_, time_->Now()));
      WaitUntil(&lock, until, [&] { return !retrying(); });
      continue;
    }
    if (s.ok()) retry_wait.Reset();
    group.clear();
    if (!s.ok() && error_.ok()) error_ = s;
    committed_ += added;
    fenced_ += fenced;
    done_ += static_cast<int64_t>(n);
    done_cv_.notify_all();
  }
}

}  // namespace llmq::jobs
