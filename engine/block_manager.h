// BlockManager: the pool of fixed-size KV blocks and each sequence's block table.
// Invariant: a block is either on the free list or in exactly one sequence's table.
// Not thread-safe: owned by the engine's step loop.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/sequence.h"

namespace llmq {

class BlockManager {
 public:
  BlockManager(int num_blocks, int block_size);
  int block_size() const { return block_size_; }
  int num_blocks() const { return num_blocks_; }
  int num_free() const { return static_cast<int>(free_.size()); }
  static int BlocksFor(int tokens, int block_size) { return (tokens + block_size - 1) / block_size; }
  // Grows `seq`'s table to hold `tokens` tokens; false (and no change) when the pool is short.
  bool Reserve(Sequence* seq, int tokens);
  // Returns all of `seq`'s blocks to the pool.
  void Release(Sequence* seq);

 private:
  int num_blocks_, block_size_;
  std::vector<int32_t> free_;  // LIFO: recently freed blocks are reused first
};

}  // namespace llmq
