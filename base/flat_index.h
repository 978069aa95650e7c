// FlatIndex: a hash map from 64-bit keys (already hashes: the prefix cache's keys) to non-negative
// 32-bit values (block ids), in one array with linear probing. One probe sequence of adjacent
// slots per lookup and no allocation per entry: the prefix index takes about a thousand inserts a
// step at 1,024 running sequences, where std::unordered_map's node per entry and pointer chase
// per lookup made it a third of the engine's host time (bench/scheduler_bench, the real job).
//
// Invariants: the capacity is a power of two (or 0); at most 3/4 of the slots are full; an entry
// lies at or after its home slot (Home(key)) with no empty slot between (linear probing), which
// Erase keeps by shifting later entries back (no tombstones).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace llmq {

class FlatIndex {
 public:
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  // The value under `key`; nullptr if there is none. Valid until the next insert or erase.
  const int32_t* Find(uint64_t key) const {
    if (size_ == 0) return nullptr;
    for (size_t i = Home(key);; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.value < 0) return nullptr;
      if (s.key == key) return &s.value;
    }
  }
  // Inserts (key, value) unless `key` is present; true when inserted. value >= 0.
  bool Emplace(uint64_t key, int32_t value) { return Put(key, value, false); }
  // Inserts (key, value), replacing the value under `key` if there is one. value >= 0.
  void Assign(uint64_t key, int32_t value) { Put(key, value, true); }
  // Removes `key` if its value is `value`; true when removed.
  bool EraseIf(uint64_t key, int32_t value) {
    if (size_ == 0) return false;
    size_t i = Home(key);
    for (;; i = (i + 1) & mask_) {
      if (slots_[i].value < 0) return false;
      if (slots_[i].key == key) break;
    }
    if (slots_[i].value != value) return false;
    // Backward shift: each later entry of the run that may sit at the hole (its home is not in
    // (hole, j]) moves there, leaving the hole at its old slot.
    for (size_t j = (i + 1) & mask_;; j = (j + 1) & mask_) {
      if (slots_[j].value < 0) break;
      const size_t home = Home(slots_[j].key);
      const bool between = i <= j ? (i < home && home <= j) : (i < home || home <= j);
      if (!between) {
        slots_[i] = slots_[j];
        i = j;
      }
    }
    slots_[i].value = -1;
    --size_;
    return true;
  }
  // Starts bringing `key`'s home slot into the cache (before a run of inserts or lookups whose keys
  // are known: their misses then overlap instead of following one another).
  void Prefetch(uint64_t key) const {
    if (!slots_.empty()) __builtin_prefetch(&slots_[Home(key)]);
  }
  // Calls f(key, value) for every entry, in no particular order.
  template <class F>
  void ForEach(F&& f) const {
    for (const Slot& s : slots_)
      if (s.value >= 0) f(s.key, s.value);
  }

 private:
  struct Slot {
    uint64_t key = 0;
    int32_t value = -1;  // -1: empty
  };

  // Fibonacci hashing: the top bits of key x 2^64 / phi, so that keys differing only in their low
  // bits still spread.
  size_t Home(uint64_t key) const { return (key * 0x9E3779B97F4A7C15ull) >> shift_; }

  bool Put(uint64_t key, int32_t value, bool replace) {
    if ((size_ + 1) * 4 > slots_.size() * 3) Grow();
    for (size_t i = Home(key);; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.value < 0) {
        s.key = key;
        s.value = value;
        ++size_;
        return true;
      }
      if (s.key == key) {
        if (replace) s.value = value;
        return false;
      }
    }
  }

  void Grow() {
    std::vector<Slot> old = std::move(slots_);
    const size_t cap = old.empty() ? 64 : old.size() * 2;
    slots_.assign(cap, Slot{});
    mask_ = cap - 1;
    shift_ = 64;
    for (size_t c = cap; c > 1; c >>= 1) --shift_;
    size_ = 0;
    for (const Slot& s : old)
      if (s.value >= 0) Put(s.key, s.value, false);
  }

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  int shift_ = 64;
  size_t size_ = 0;
};

}  // namespace llmq
