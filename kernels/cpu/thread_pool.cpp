#include "kernels/cpu/thread_pool.h"

#include <immintrin.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdlib>
#include <memory>

#include "kernels/cpu/cpu_count.h"

namespace llmq::kernels {
namespace {

thread_local bool t_in_region = false;  // this thread is running a piece (or is a worker)
std::atomic<bool> g_always_split{false};

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void FutexWait(std::atomic<uint32_t>* word, uint32_t expected) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT_PRIVATE, expected, nullptr,
          nullptr, 0);
}

void FutexWake(std::atomic<uint32_t>* word, int count) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE_PRIVATE, count, nullptr, nullptr,
          0);
}

// Spins up to ThreadPool::kSpinNs for done(); true when it came true.
template <class Done>
bool SpinFor(const Done& done) {
  const int64_t until = NowNs() + ThreadPool::kSpinNs;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
      _mm_pause();
    }
    if (NowNs() > until) return false;
  }
}

}  // namespace

ThreadPool::ThreadPool(int threads) {
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
  barrier_ns_ = workers_.empty() ? 0 : MeasureBarrier();
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  epoch_.fetch_add(1);
  FutexWake(&epoch_, INT_MAX);
  for (std::thread& t : workers_) t.join();
}

double ThreadPool::MeasureBarrier() {
  // Each sample is a region of one piece per thread in which every piece waits until all the
  // threads have arrived (at most 2 ms: a thread may be descheduled), so that each is handed to
  // a different thread and joined: the whole round trip a region costs, with the workers hot.
  std::vector<double> ns(kBarrierSamples);
  for (double& s : ns) {
    std::atomic<int> arrived{0};
    const int64_t t0 = NowNs();
    Run(threads(), [&](int64_t) {
      arrived.fetch_add(1);
      const int64_t until = NowNs() + 2'000'000;
      while (arrived.load() < threads() && NowNs() < until) _mm_pause();
    });
    s = static_cast<double>(NowNs() - t0);
  }
  // The intrinsic cost, not this moment's load (see barrier_ns()).
  return *std::min_element(ns.begin(), ns.end());
}

int64_t ThreadPool::ChunksFor(double serial_ns) const {
  const double most = static_cast<double>(kChunksPerThread) * threads();
  if (!workers_.empty() && g_always_split.load(std::memory_order_relaxed))
    return static_cast<int64_t>(most);
  if (workers_.empty() || serial_ns < 2 * barrier_ns_) return 1;
  return static_cast<int64_t>(std::min(most, serial_ns / std::max(barrier_ns_, 1.0)));
}

void ThreadPool::Drain(uint32_t epoch) {
  uint64_t s = state_.load(std::memory_order_acquire);
  for (;;) {
    const uint32_t left = static_cast<uint32_t>(s);
    if (static_cast<uint32_t>(s >> 32) != epoch || left == 0) return;
    if (!state_.compare_exchange_weak(s, s - 1, std::memory_order_acq_rel,
                                      std::memory_order_acquire))
      continue;
    // The piece is ours and unfinished, so the region (and job_) is live.
    const Job* job = job_.load(std::memory_order_acquire);
    const uint32_t chunks = job->chunks;
    job->call(job->fn, chunks - left);
    if (done_.fetch_add(1) + 1 == chunks && caller_asleep_.load()) FutexWake(&done_, 1);
    s = state_.load(std::memory_order_acquire);
  }
}

void ThreadPool::WorkerLoop() {
  t_in_region = true;
  uint32_t seen = 0;
  for (;;) {
    if (!SpinFor([&] { return epoch_.load(std::memory_order_acquire) != seen; })) {
      while (epoch_.load() == seen) {
        sleepers_.fetch_add(1);
        FutexWait(&epoch_, seen);
        sleepers_.fetch_sub(1);
      }
    }
    if (stop_.load()) return;
    seen = epoch_.load(std::memory_order_acquire);
    Drain(seen);
  }
}

void ThreadPool::RunErased(int64_t chunks, void (*call)(const void*, int64_t), const void* fn) {
  if (chunks <= 0) return;
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
  if (chunks == 1 || workers_.empty() || t_in_region || !lock.owns_lock()) {
    for (int64_t i = 0; i < chunks; ++i) call(fn, i);
    return;
  }
  const Job job{call, fn, static_cast<uint32_t>(chunks)};
  const uint32_t epoch = epoch_.load() + 1;
  job_.store(&job, std::memory_order_release);
  done_.store(0);
  caller_asleep_.store(0);
  state_.store(uint64_t{epoch} << 32 | job.chunks, std::memory_order_release);
  epoch_.store(epoch);
  if (sleepers_.load() > 0) FutexWake(&epoch_, INT_MAX);
  t_in_region = true;
  Drain(epoch);
  t_in_region = false;
  auto all_done = [&] { return done_.load(std::memory_order_acquire) == job.chunks; };
  if (!SpinFor(all_done)) {
    caller_asleep_.store(1);
    for (uint32_t d = done_.load(); d != job.chunks; d = done_.load()) FutexWait(&done_, d);
  }
}

namespace {

std::mutex g_pool_mu;
std::unique_ptr<ThreadPool> g_pool;  // guarded by g_pool_mu (the pointer, not its use)
int g_threads = 0;                   // set by SetCpuThreads; 0 = the default

int DefaultThreads() {
  if (const char* env = std::getenv("OMP_NUM_THREADS")) {
    char* end = nullptr;
    const long n = std::strtol(env, &end, 10);
    if (end != env && *end == '\0' && n > 0 && n <= 4096) return static_cast<int>(n);
  }
  return UsableCpus();
}

}  // namespace

void SetAlwaysSplitForTesting(bool on) {
  g_always_split.store(on);
}

int CpuThreads() {
  std::lock_guard<std::mutex> lock(g_pool_mu);
  return g_threads > 0 ? g_threads : DefaultThreads();
}

ThreadPool& CpuPool() {
  std::lock_guard<std::mutex> lock(g_pool_mu);
  if (!g_pool) g_pool = std::make_unique<ThreadPool>(g_threads > 0 ? g_threads : DefaultThreads());
  return *g_pool;
}

void SetCpuThreads(int threads) {
  std::lock_guard<std::mutex> lock(g_pool_mu);
  g_threads = std::max(1, threads);
  if (g_pool && g_pool->threads() != g_threads) g_pool.reset();
}

}  // namespace llmq::kernels
