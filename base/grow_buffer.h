// GrowBuffer: a host buffer of trivially copyable T that only grows, to exactly the size asked
// for, without initializing what it adds. Grown with realloc, which for a large block moves its
// pages (mremap) instead of copying them: the pages an earlier, smaller step touched stay mapped,
// so a buffer grown step by step to N elements faults N elements' pages once in all, where a
// vector re-allocated and zero-filled at every growth faults and clears them again each time
// (the engine's logits: [rows, vocab], rows growing while a batch is admitted). The contents
// are kept up to the old size (realloc's rule) but callers rewrite what they use.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <new>
#include <type_traits>

namespace llmq {

template <class T>
class GrowBuffer {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  GrowBuffer() = default;
  GrowBuffer(const GrowBuffer&) = delete;
  GrowBuffer& operator=(const GrowBuffer&) = delete;
  ~GrowBuffer() { std::free(p_); }

  // Room for at least n elements (exactly n when it grows); throws std::bad_alloc on failure.
  void Reserve(size_t n) {
    if (n <= capacity_) return;
    void* q = std::realloc(p_, n * sizeof(T));
    if (q == nullptr) throw std::bad_alloc();  // caught in LlmEngine::Run, as new's
    p_ = static_cast<T*>(q);
    capacity_ = n;
  }
  T* data() { return p_; }
  const T* data() const { return p_; }
  size_t capacity() const { return capacity_; }

 private:
  T* p_ = nullptr;
  size_t capacity_ = 0;
};

}  // namespace llmq
