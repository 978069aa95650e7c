// BlockManager: the pool of fixed-size KV blocks, reference counts, and the automatic prefix cache.
//
// A full block's identity is (its parent block's identity, its token ids). The cache maps a hash
// of that to physical blocks; a hit is confirmed by comparing the block's tokens and its parent's
// physical id and epoch (the epoch changes whenever a block is reused for other content), so by
// induction along the chain a hash collision can never hand back wrong KV.
//
// Block states:
//   in use      ref > 0. Full, computed blocks of a sequence are also in the cache map.
//   cached      ref == 0, in the cache map and on the LRU list: reusable on a hit, evicted
//               least-recently-used first, and only when a free block is needed.
//   free        ref == 0, no identity: on the free list.
// Blocks being computed (a prompt's full blocks before their step ran) are "in flight": a second
// sequence that needs one waits instead of computing it again.
// Invariants (CheckInvariants): every block is in exactly one of {in use, cached (LRU), free}; the
// free list and the LRU list hold no block twice; the cache map holds only computed full blocks
// (in use or on the LRU), each once, under its own hash. Not thread-safe: owned by the engine's
// step loop.
#pragma once

#include <cstdint>
#include <list>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/sequence.h"

namespace llmq {

class BlockManager {
 public:
  BlockManager(int num_blocks, int block_size, bool enable_prefix_cache = true);
  int block_size() const { return block_size_; }
  int num_blocks() const { return num_blocks_; }
  // Blocks that an allocation can take: free plus cached (evictable).
  int num_available() const { return static_cast<int>(free_.size() + lru_.size()); }
  int num_in_use() const { return num_blocks_ - num_available(); }
  static int BlocksFor(int tokens, int block_size) {
    return (tokens + block_size - 1) / block_size;
  }

  enum class Admit { kOk, kNoSpace, kWaitInFlight };
  // Gives a waiting `seq` the blocks for all its current tokens: leading full blocks from the cache
  // where they hit (seq->num_computed is set past them, never to the whole sequence), new blocks
  // for the rest while keeping `reserve` blocks available. kWaitInFlight: a block it needs is being
  // computed by another sequence right now (try again next step). No change unless kOk.
  Admit Allocate(Sequence* seq, int reserve = 0);
  // Makes room for seq's next token (one more block at a block boundary) and gives seq its own copy
  // of a shared partial last block (copy-on-write; the copies to make are appended to `copies`).
  // False when no block is available (the caller preempts).
  bool AppendSlot(Sequence* seq, std::vector<std::pair<int, int>>* copies);
  // After a step: registers seq's newly completed full blocks in the cache.
  void MarkComputed(Sequence* seq);
  // Returns seq's blocks (cached ones stay reusable) and forgets what it had in flight.
  void Release(Sequence* seq);
  // `child` shares all of `parent`'s blocks (n > 1 samples of one prompt).
  void Fork(const Sequence& parent, Sequence* child);
  // Extra references held by the engine to keep a group's prefix resident (pinning).
  void Ref(int32_t block);
  void Unref(int32_t block);
  int ref_count(int32_t block) const { return blocks_[block].ref; }
  // Checks the invariants above (O(num_blocks)); on a violation says which in `why`.
  bool CheckInvariants(std::string* why) const;
  size_t num_cached() const { return map_.size(); }
  bool prefix_cache_enabled() const { return cache_enabled_; }

 private:
  struct Block {
    int32_t ref = 0;
    uint64_t epoch = 0;   // bumped whenever the block takes new content
    bool cached = false;  // in map_ (computed, full, identity below valid)
    uint64_t hash = 0;
    int32_t parent = -1;  // physical parent block, -1 for the first block of a sequence
    uint64_t parent_epoch = 0;
    std::vector<int32_t> tokens;  // the block's token ids (for hit confirmation)
    std::list<int32_t>::iterator lru_it;
    bool on_lru = false;
  };
  static uint64_t HashBlock(uint64_t parent_hash, const int32_t* tokens, int n);
  // Finds a cached block for full block `i` of `tokens` whose parent is `parent`; -1 if none.
  int32_t Lookup(uint64_t hash, const int32_t* tokens, int32_t parent) const;
  int32_t TakeBlock();  // a free block, evicting the least recently used cached one if needed
  void Uncache(int32_t b);
  void Unref1(int32_t b);

  int num_blocks_, block_size_;
  bool cache_enabled_;
  std::vector<Block> blocks_;
  std::vector<int32_t> free_;
  std::list<int32_t> lru_;  // front = least recently used
  std::unordered_multimap<uint64_t, int32_t> map_;
  std::unordered_map<uint64_t, int64_t> in_flight_;  // block hash -> seq id computing it
};

}  // namespace llmq
