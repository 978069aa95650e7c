// ThreadPool: the CPU kernels' own fixed team of threads (replacing OpenMP's, whose waiters spin
// for milliseconds and so, on a machine whose cores are shared, stall every step behind threads
// the kernel has descheduled).
//
// A parallel region is `chunks` independent pieces of work, fn(0) .. fn(chunks-1). The caller and
// the workers claim pieces one at a time from a shared counter (dynamic scheduling), so a thread
// that is descheduled, or wakes late, holds up only the piece it has claimed: the others are taken
// by whoever runs. Which thread runs a piece never changes what it computes (every kernel writes
// each output from its own inputs in a fixed order), so results are bit-identical whatever the
// thread count and however the pieces fall.
//
// Waiting: a thread with nothing to do spins for a short while (kSpinNs: the gaps between the ops
// of one forward step are shorter), then sleeps on a futex; the caller waiting for the last piece
// does the same. Nobody spins on a core that a descheduled thread needs for long.
//
// Locking and invariants:
//   * one region at a time per pool: Run takes `mu_` with try_lock; a second caller (another
//     thread, while a region runs) and any call from inside a region (nested) run all their
//     pieces on the calling thread instead, with the same results;
//   * `state_` packs (epoch << 32 | pieces left to claim); a piece is claimed by one CAS that
//     also checks the epoch, so a late worker can never claim a piece of a region that has ended
//     (epochs wrap after 2^32 regions; a worker would have to sleep through all of them);
//   * the region (`job_`, on the caller's stack) is read only by a thread holding a claimed,
//     unfinished piece of it, and the caller returns only when `done_` counts every piece.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace llmq::kernels {

class ThreadPool {
 public:
  // `threads` >= 1: the caller plus threads - 1 workers (started here, joined by the destructor).
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return static_cast<int>(workers_.size()) + 1; }
  // What one region costs beyond its work (ns), measured at construction: the fastest of
  // kBarrierSamples regions of one piece per thread, each piece handed to its own thread (it
  // waits for the others) and joined. Work cheaper than this is not worth a region. The fastest,
  // not the median: a pool started while other processes hold the cores would otherwise measure
  // their time slices (up to the 2-ms cap) and run every op on one thread for the rest of its
  // life, long after the load has gone; under load the waiters' futex sleeps do as well as one
  // thread (bench/RESULTS.md, issue 12).
  double barrier_ns() const { return barrier_ns_; }
  // Workers that have stopped spinning and sleep on the futex (or are about to) until the next
  // region. For tests, which wait for it rather than sleep past the spin.
  int sleeping_workers() const { return static_cast<int>(sleepers_.load()); }

  // Runs fn(i) for every i in [0, chunks), on the team, and returns when all have run. fn must
  // not throw. Runs on the calling thread alone when chunks <= 1, the pool has no workers, the
  // caller is inside a region, or another region is running.
  template <class Fn>
  void Run(int64_t chunks, const Fn& fn) {
    RunErased(
        chunks, [](const void* f, int64_t i) { (*static_cast<const Fn*>(f))(i); }, &fn);
  }

  // How many pieces a region of `serial_ns` of work should be cut into so that the barrier pays:
  // 1 (run it on the caller) when serial_ns is under twice barrier_ns(), else up to
  // kChunksPerThread per thread, each worth at least one barrier.
  int64_t ChunksFor(double serial_ns) const;

  static constexpr int64_t kSpinNs = 50'000;
  static constexpr int kChunksPerThread = 4;
  static constexpr int kBarrierSamples = 64;

 private:
  struct Job {
    void (*call)(const void* fn, int64_t i);
    const void* fn;
    uint32_t chunks;
  };
  void RunErased(int64_t chunks, void (*call)(const void*, int64_t), const void* fn);
  void WorkerLoop();
  // Claims and runs pieces of region `epoch` until none is left; false when it has ended.
  void Drain(uint32_t epoch);
  double MeasureBarrier();

  std::vector<std::thread> workers_;
  std::mutex mu_;                         // held by the caller of the running region
  std::atomic<uint64_t> state_{0};        // epoch << 32 | pieces left to claim
  std::atomic<uint32_t> epoch_{0};        // futex word workers sleep on: the current region
  std::atomic<const Job*> job_{nullptr};  // the running region (valid while a piece is unclaimed)
  std::atomic<uint32_t> done_{0};         // pieces of the running region finished (futex word)
  std::atomic<uint32_t> sleepers_{0};     // workers asleep (or about to be) on epoch_
  std::atomic<uint32_t> caller_asleep_{0};
  std::atomic<bool> stop_{false};
  double barrier_ns_ = 0;
};

// The process's pool, made on first use with CpuThreads() threads.
ThreadPool& CpuPool();
// The threads the CPU kernels use: set by SetCpuThreads, else $OMP_NUM_THREADS when it is a
// positive integer (so `OMP_NUM_THREADS=1` keeps a process single-threaded as before), else
// UsableCpus() (kernels/cpu/cpu_count.h).
int CpuThreads();
// Replaces the process's pool by one of `threads` (>= 1) threads. Not safe while a region runs.
void SetCpuThreads(int threads);

// Tests: when on, every region the kernels open is cut into the most pieces (ChunksFor ignores the
// cost), so that small shapes exercise the threaded paths too.
void SetAlwaysSplitForTesting(bool on);

// The serial costs the kernels give ParallelFor are mostly bytes streamed at the rate one core
// reads on the project's machine (bench/RESULTS.md, gemm_bench: 41 GB/s), in ns per byte.
constexpr double kNsPerStreamedByte = 1.0 / 41;

// Runs fn(begin, end) over [0, n) cut into contiguous ranges, on the process's pool when the
// work (n items of `item_ns` each, serially) pays for the barrier, else on the caller.
template <class Fn>
void ParallelFor(int64_t n, double item_ns, const Fn& fn) {
  if (n <= 0) return;
  ThreadPool& pool = CpuPool();
  const int64_t chunks = std::min<int64_t>(n, pool.ChunksFor(static_cast<double>(n) * item_ns));
  if (chunks <= 1) {
    fn(int64_t{0}, n);
    return;
  }
  pool.Run(chunks, [&](int64_t c) { fn(n * c / chunks, n * (c + 1) / chunks); });
}

}  // namespace llmq::kernels
