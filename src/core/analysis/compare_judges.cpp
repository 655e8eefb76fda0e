#include "compare_judges.h"

#include <algorithm>
#include <utility>

namespace precprobe::analysis_detail {

unsigned GroupJudges::resolve(unsigned requested) noexcept {
  if (requested > 0) return requested;
  return std::clamp(std::thread::hardware_concurrency(), 1u, 4u);
}

GroupJudges::GroupJudges(unsigned threads, const CompareOptions& opt,
                         const ProgramConstants& const_a, const ProgramConstants& const_b)
    : opt_(opt), const_a_(const_a), const_b_(const_b) {
  const unsigned n = resolve(threads);
  try {
    for (unsigned k = 1; k < n; ++k) workers_.emplace_back([this] { work(); });
  } catch (const std::system_error&) {
    // No more threads (a limit of the process): the ones started, and this one, judge.
  }
}

GroupJudges::~GroupJudges() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    waiting_.clear();
  }
  queued_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void GroupJudges::submit(const GroupJob& job) {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    waiting_.push_back(job);
  }
  queued_.notify_one();
}

std::vector<JudgedGroup> GroupJudges::take(bool wait) {
  std::unique_lock<std::mutex> lock(mutex_);
  // The threads take a group each; more waiting than that, and this thread would be ahead.
  while (!waiting_.empty() && (wait || waiting_.size() > workers_.size())) judge_one(lock);
  if (wait) finished_.wait(lock, [this] { return waiting_.empty() && running_ == 0; });
  return std::exchange(done_, {});
}

JudgedGroup GroupJudges::judge(const GroupJob& job) const {
  JudgedGroup d;
  d.key = job.key;
  try {
    d.result = compare_group(job.key, *job.a, *job.b, opt_, job.loss_scale, job.order_a, const_a_,
                             const_b_, &d.use, job.first_step);
  } catch (...) {
    d.error = std::current_exception();
  }
  return d;
}

void GroupJudges::judge_one(std::unique_lock<std::mutex>& lock) {
  const GroupJob job = waiting_.front();
  waiting_.pop_front();
  ++running_;
  lock.unlock();
  JudgedGroup d = judge(job);
  lock.lock();
  done_.push_back(std::move(d));
  --running_;
  finished_.notify_all();
}

void GroupJudges::work() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    queued_.wait(lock, [this] { return stop_ || !waiting_.empty(); });
    if (stop_) return;
    judge_one(lock);
  }
}

}  // namespace precprobe::analysis_detail
