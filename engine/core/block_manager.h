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
//
// Reuse is token-granular, like SGLang's radix cache and unlike vLLM's block-granular cache: past
// its last full-block hit, a sequence may share the first k < block_size tokens of a cached block
// (same parent, same first k tokens: the point where two prompts diverge rarely falls on a block
// boundary). The block cannot be shared (the sequence writes its own tokens k.. into it), so the
// sequence gets a fresh block and a copy of the cached one (Allocate appends it to `copies`; the
// engine runs the copies before the step's forward pass), and starts computing at token k. Cached
// blocks are indexed under their first 1..block_size-1 tokens (partial_, the latest indexed wins
// a prefix), lazily: a block registered in the cache waits on its parent's pending list (a list
// per physical parent, one for first blocks) and is indexed only when an admission looks under
// that parent (FlushPending). Most cached blocks (a document's, a completion's) are never looked
// under, so they never pay their block_size-1 index entries: at 1,024 running sequences those
// were most of the step's host time. A parent that takes new content (its epoch moves on) orphans
// its pending children: no lookup can reach them any more (SameParent), so they are never indexed.
// The cached source is held (a reference) until CopiesDone, so admitting another sequence in the
// same step cannot evict it before its copy ran.
// The same holds for a block not yet cached: each running sequence's frontier (its first block not
// in the cache, block num_registered: the one it computes next, or a partly filled last block) is
// "live", indexed under its first tokens (live_, the first indexed wins a prefix) with the count of
// them whose K/V it holds as of the last step. A sequence admitted while another computes the start
// of the block it diverges in waits for those tokens (kWaitInFlight), then copies them like a
// cached start: a prefix shared by requests admitted together is computed once even when its end
// falls inside a block. The wait ends: a block is live only while a running sequence holds it (it
// stops being live when that sequence is released). A block whose copy is pending holds nothing
// yet (0), so copies never chain within a step.
// Invariants (CheckInvariants): every block is in exactly one of {in use, cached (LRU), free}; the
// free list and the LRU list hold no block twice; the cache map holds only computed full blocks
// (in use or on the LRU), each once, under its own hash; every partial_ entry names a cached,
// indexed block; a cached block is indexed, pending (on the pending list of its parent, at the
// parent's current epoch, once) or orphaned (its parent's epoch moved on), and only cached blocks
// are pending; every live_ entry names a live block, and a live block is in use and not cached.
// Not thread-safe: owned by the engine's step loop.
#pragma once

#include <cstdint>
#include <list>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/flat_index.h"
#include "base/status.h"
#include "engine/core/sequence.h"

namespace llmq {

class BlockManager {
 public:
  BlockManager(int num_blocks, int block_size, bool enable_prefix_cache = true);
  int block_size() const { return block_size_; }
  int num_blocks() const { return num_blocks_; }
  // Blocks that an allocation can take: free plus cached (evictable).
  int num_available() const { return static_cast<int>(free_.size() + lru_.size()); }
  int num_in_use() const { return num_blocks_ - num_available(); }
  int num_free() const { return static_cast<int>(free_.size()); }  // available, not cached
  // Distinct blocks that have ever held content: the pool's memory the backend has touched (a
  // freed block goes back on top of the free list, most recently freed first, and is taken again
  // before a block never used: the touched set grows only when the live and cached blocks do).
  int num_touched() const { return num_touched_; }
  static int BlocksFor(int tokens, int block_size) {
    return (tokens + block_size - 1) / block_size;
  }

  enum class Admit { kOk, kNoSpace, kWaitInFlight };
  // Gives a waiting `seq` the blocks for all its current tokens: leading full blocks from the cache
  // where they hit, then the longest cached or live prefix of the next block (copied: (src, dst)
  // appended to `copies`, src held until CopiesDone), new blocks for the rest while keeping
  // `reserve` blocks available. seq->num_computed is set past what was reused, never to the whole
  // sequence. kWaitInFlight: a full block it needs, or tokens of the next block past what the cache
  // gives, are being computed by another sequence right now (try again next step). No change unless
  // kOk (but for the index's upkeep: the pending children it looks under get indexed).
  Admit Allocate(Sequence* seq, int reserve, std::vector<std::pair<int, int>>* copies);
  // The copies Allocate asked for have run (or the step was abandoned): drops the holds on their
  // sources. Call once per step, after the backend's CopyBlocks.
  void CopiesDone();
  int num_copy_holds() const { return static_cast<int>(copy_holds_.size()); }
  // Makes room for seq's next token (one more block at a block boundary) and gives seq its own copy
  // of a shared partial last block (copy-on-write; the copies to make are appended to `copies`).
  // False when no block is available (the caller preempts).
  bool AppendSlot(Sequence* seq, std::vector<std::pair<int, int>>* copies);
  // After a step: registers seq's newly completed full blocks in the cache and indexes its new
  // frontier (live) with the tokens it holds.
  void MarkComputed(Sequence* seq);
  // Returns seq's blocks (cached ones stay reusable) and forgets what it had in flight and live.
  void Release(Sequence* seq);
  // `child` shares all of `parent`'s blocks (n > 1 samples of one prompt).
  void Fork(const Sequence& parent, Sequence* child);
  // Extra references held by the engine to keep a group's prefix resident (pinning).
  void Ref(int32_t block);
  void Unref(int32_t block);
  int ref_count(int32_t block) const { return blocks_[block].ref; }
  // Entries in the token-granular index of cached blocks (partial_): block_size-1 per indexed
  // block.
  size_t num_prefix_entries() const { return partial_.size(); }
  // Checks the invariants above (O(num_blocks)); on a violation Internal saying which.
  Status CheckInvariants() const;
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
    uint64_t parent_hash = 0;     // the parent's identity hash (0: none): seeds the prefix keys
    std::vector<int32_t> tokens;  // the block's token ids (for hit confirmation)
    std::list<int32_t>::iterator lru_it;
    bool on_lru = false;
    bool touched = false;  // has held content (num_touched)
    // A sequence's frontier, in live_ (tokens, parent and parent_hash valid: those it had when
    // indexed); `computed` of its leading tokens hold their K/V as of the last step.
    bool live = false;
    int32_t computed = 0;
    // Where a cached block stands in partial_ (kNone: not cached, or orphaned).
    enum class Indexed : uint8_t { kNone, kPending, kYes } indexed = Indexed::kNone;
    int32_t pending_pos = -1;      // kPending: its place in its parent's pending list
    std::vector<int32_t> pending;  // cached children registered under this content, not indexed
  };
  using PrefixIndex = FlatIndex;
  // FNV-1a style mix over 32-bit ids, chained from the parent's hash; no finalizer, so the state
  // after j tokens is the hash of the first j (the prefix keys of partial_).
  static uint64_t HashSeed(uint64_t parent_hash) { return parent_hash ^ 0x9E3779B97F4A7C15ull; }
  static uint64_t HashToken(uint64_t h, int32_t token) {
    h ^= static_cast<uint32_t>(token);
    h *= 0x100000001B3ull;
    return h ^ (h >> 29);
  }
  static uint64_t HashBlock(uint64_t parent_hash, const int32_t* tokens, int n);
  // Calls f(key) with the prefix key of each of tokens[0..j), j = 1..n, under parent_hash.
  template <class F>
  static void ForEachPrefixKey(uint64_t parent_hash, const int32_t* tokens, int n, F&& f) {
    uint64_t h = HashSeed(parent_hash);
    for (int j = 1; j <= n; ++j) f(h = HashToken(h, tokens[j - 1]));
  }
  // Finds a cached block for full block `i` of `tokens` whose parent is `parent`; -1 if none.
  int32_t Lookup(uint64_t hash, const int32_t* tokens, int32_t parent) const;
  // The block in `index` (partial_: cached blocks; live_: live ones) under `parent` sharing the
  // most leading tokens with `tokens` (keys: their prefix keys, one per length, fewer than the
  // block size); -1 if none shares any. *len: how many it shares.
  int32_t LookupStart(const PrefixIndex& index, bool live, const std::vector<uint64_t>& keys,
                      const int32_t* tokens, int32_t parent, int* len) const;
  // Indexes cached block b under its first 1..block_size-1 tokens (partial_).
  void IndexPrefixes(int32_t b);
  // The pending list of a parent block's children (-1: of first blocks).
  std::vector<int32_t>& PendingOf(int32_t parent) {
    return parent >= 0 ? blocks_[parent].pending : root_pending_;
  }
  const std::vector<int32_t>& PendingOf(int32_t parent) const {
    return parent >= 0 ? blocks_[parent].pending : root_pending_;
  }
  // Indexes the pending children of `parent` (-1: first blocks) and empties its list. Which of two
  // blocks with the same start wins its keys does not matter: both hold those tokens' K/V.
  void FlushPending(int32_t parent);
  // Takes cached block b out of partial_, or off its parent's pending list (the list's last entry
  // takes its place).
  void Unindex(int32_t b);
  // Drops the entries of `index` that name b under b's first 1..n tokens.
  void UnindexPrefixes(PrefixIndex* index, int32_t b, int n);
  // Makes seq's frontier block live (indexed with seq's tokens in it, unless it is already) and
  // says it holds `computed` of them; nothing when seq has no frontier block (all cached).
  void IndexFrontier(Sequence* seq, int computed);
  // b is no longer a frontier: drops its live_ entries (nothing if it is not live).
  void UnindexLive(int32_t b);
  bool SameParent(const Block& b, int32_t parent) const {
    return b.parent == parent && (parent < 0 || b.parent_epoch == blocks_[parent].epoch);
  }
  int32_t TakeBlock();  // a free block, evicting the least recently used cached one if needed
  void Uncache(int32_t b);
  void Unref1(int32_t b);

  int num_blocks_, block_size_;
  bool cache_enabled_;
  std::vector<Block> blocks_;
  std::vector<int32_t> free_;  // a stack: the most recently freed on top (back)
  int num_touched_ = 0;
  std::list<int32_t> lru_;  // front = least recently used
  std::unordered_multimap<uint64_t, int32_t> map_;
  std::unordered_map<uint64_t, int64_t> in_flight_;  // block hash -> seq id computing it
  // Hash of (parent identity, first j tokens), 0 < j < block_size -> a cached block starting so.
  PrefixIndex partial_;
  std::vector<int32_t> root_pending_;  // cached first blocks not yet in partial_
  // The same keys -> a live block starting so (the first indexed; dropped by the block it names).
  PrefixIndex live_;
  std::vector<int32_t> copy_holds_;  // sources of this step's copies, one reference each
  std::vector<uint64_t> keys_;       // IndexPrefixes' scratch
};

}  // namespace llmq
