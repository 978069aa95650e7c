#include "engine/core/block_manager.h"

#include <algorithm>

namespace llmq {

BlockManager::BlockManager(int num_blocks, int block_size, bool enable_prefix_cache)
    : num_blocks_(num_blocks),
      block_size_(block_size),
      cache_enabled_(enable_prefix_cache),
      blocks_(num_blocks) {
  free_.reserve(num_blocks);
  for (int b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

uint64_t BlockManager::HashBlock(uint64_t parent_hash, const int32_t* tokens, int n) {
  uint64_t h = HashSeed(parent_hash);
  for (int i = 0; i < n; ++i) h = HashToken(h, tokens[i]);
  return h;
}

// A hit needs the same hash, the same tokens and the same physical parent at the same epoch: a
// parent block reused for other content has a new epoch, so its old children can no longer match
// (they still sit in the map until evicted, but are unreachable from the new content).
int32_t BlockManager::Lookup(uint64_t hash, const int32_t* tokens, int32_t parent) const {
  auto [it, end] = map_.equal_range(hash);
  for (; it != end; ++it) {
    const Block& b = blocks_[it->second];
    if (SameParent(b, parent) && std::equal(b.tokens.begin(), b.tokens.end(), tokens))
      return it->second;
  }
  return -1;
}

// The prefix key of a block's first j tokens is HashBlock over them: the running state of the hash
// after j tokens, so one pass yields the keys of every length. partial_ keeps one block per key,
// the latest indexed; an entry is dropped only by the block it names, so every entry names a cached
// block. A key can collide (another parent, another j): every hit is confirmed like a full-block
// hit (same physical parent at the same epoch, same tokens), so a collision only costs a miss.
void BlockManager::IndexPrefixes(int32_t b) {
  const Block& blk = blocks_[b];
  // The keys first, their slots prefetched, then the inserts: a table of a few million slots
  // misses the cache on each, and the misses overlap.
  keys_.clear();
  ForEachPrefixKey(blk.parent_hash, blk.tokens.data(), block_size_ - 1, [&](uint64_t key) {
    keys_.push_back(key);
    partial_.Prefetch(key);
  });
  for (uint64_t key : keys_) partial_.Assign(key, b);
}

void BlockManager::FlushPending(int32_t parent) {
  std::vector<int32_t>& list = PendingOf(parent);
  for (int32_t c : list) {
    Block& blk = blocks_[c];
    IndexPrefixes(c);
    blk.indexed = Block::Indexed::kYes;
    blk.pending_pos = -1;
  }
  list.clear();
}

void BlockManager::Unindex(int32_t b) {
  Block& blk = blocks_[b];
  if (blk.indexed == Block::Indexed::kYes) {
    UnindexPrefixes(&partial_, b, block_size_ - 1);
  } else if (blk.indexed == Block::Indexed::kPending) {
    std::vector<int32_t>& list = PendingOf(blk.parent);
    const int32_t last = list.back();
    list[blk.pending_pos] = last;
    blocks_[last].pending_pos = blk.pending_pos;
    list.pop_back();
  }
  blk.indexed = Block::Indexed::kNone;
  blk.pending_pos = -1;
}

void BlockManager::UnindexPrefixes(PrefixIndex* index, int32_t b, int n) {
  const Block& blk = blocks_[b];
  ForEachPrefixKey(blk.parent_hash, blk.tokens.data(), n,
                   [&](uint64_t key) { index->EraseIf(key, b); });
}

// Longest first: the entry for a longer prefix may survive when a shorter one was dropped (its
// block evicted), so the lengths are tried from the longest down, not bisected. A live block may
// hold fewer tokens than the key's length only through a collision: its own tokens are compared.
int32_t BlockManager::LookupStart(const PrefixIndex& index, bool live,
                                  const std::vector<uint64_t>& keys, const int32_t* tokens,
                                  int32_t parent, int* len) const {
  for (int j = static_cast<int>(keys.size()); j >= 1; --j) {
    const int32_t* at = index.Find(keys[j - 1]);
    if (!at) continue;
    const Block& c = blocks_[*at];
    if ((live ? c.live : c.cached) && j <= static_cast<int>(c.tokens.size()) &&
        SameParent(c, parent) && std::equal(tokens, tokens + j, c.tokens.begin())) {
      *len = j;
      return *at;
    }
  }
  *len = 0;
  return -1;
}

void BlockManager::IndexFrontier(Sequence* seq, int computed) {
  const int f = seq->num_registered, bs = block_size_;
  if (f >= static_cast<int>(seq->block_table.size())) return;
  const int32_t b = seq->block_table[f];
  Block& blk = blocks_[b];
  if (blk.cached) return;  // a guard: blocks past num_registered are never cached
  if (!blk.live) {
    const int n = static_cast<int>(seq->tokens.size());
    blk.tokens.assign(seq->tokens.begin() + f * bs,
                      seq->tokens.begin() + std::min(n, (f + 1) * bs));
    blk.parent = f ? seq->block_table[f - 1] : -1;
    blk.parent_epoch = f ? blocks_[blk.parent].epoch : 0;
    blk.parent_hash = f ? seq->block_hashes[f - 1] : 0;
    blk.live = true;
    ForEachPrefixKey(blk.parent_hash, blk.tokens.data(),
                     std::min(bs - 1, static_cast<int>(blk.tokens.size())),
                     [&](uint64_t key) { live_.Emplace(key, b); });
  }
  blk.computed = std::clamp(computed, 0, static_cast<int>(blk.tokens.size()));
}

void BlockManager::UnindexLive(int32_t b) {
  Block& blk = blocks_[b];
  if (!blk.live) return;
  UnindexPrefixes(&live_, b, std::min(block_size_ - 1, static_cast<int>(blk.tokens.size())));
  blk.live = false;
  blk.computed = 0;
}

void BlockManager::Uncache(int32_t b) {
  Block& blk = blocks_[b];
  Unindex(b);
  auto [it, end] = map_.equal_range(blk.hash);
  for (; it != end; ++it)
    if (it->second == b) {
      map_.erase(it);
      break;
    }
  blk.cached = false;
}

// Free blocks first; only when none is left is a cached one evicted (least recently used): cached
// blocks are worth keeping. The taken block leaves the map before it gets new content, and its
// epoch moves on so that children registered under its old identity never match again.
int32_t BlockManager::TakeBlock() {
  int32_t b;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else {
    LLMQ_CHECK(!lru_.empty());
    b = lru_.front();
    lru_.pop_front();
    blocks_[b].on_lru = false;
    Uncache(b);
  }
  Block& blk = blocks_[b];
  if (!blk.touched) {
    blk.touched = true;
    ++num_touched_;
  }
  ++blk.epoch;
  // Children cached under its old content are orphans now: unreachable, never to be indexed.
  for (int32_t c : blk.pending) {
    blocks_[c].indexed = Block::Indexed::kNone;
    blocks_[c].pending_pos = -1;
  }
  blk.pending.clear();
  LLMQ_CHECK(!blk.live);
  blk.tokens.clear();
  blk.parent = -1;
  blk.ref = 1;
  return b;
}

void BlockManager::Ref(int32_t b) {
  Block& blk = blocks_[b];
  // A cached block taken back into use leaves the LRU: blocks with ref > 0 are on no list.
  if (blk.on_lru) {
    lru_.erase(blk.lru_it);
    blk.on_lru = false;
  }
  ++blk.ref;
}

void BlockManager::Unref1(int32_t b) {
  Block& blk = blocks_[b];
  LLMQ_CHECK(blk.ref > 0);
  if (--blk.ref > 0) return;
  UnindexLive(b);
  // The last reference went: a block with an identity stays reusable (LRU, most recent at the
  // back); one without (partial, never computed, or cache off) is blank and goes to the free list.
  if (blk.cached) {
    blk.lru_it = lru_.insert(lru_.end(), b);
    blk.on_lru = true;
  } else {
    free_.push_back(b);
  }
}

void BlockManager::Unref(int32_t b) {
  Unref1(b);
}

BlockManager::Admit BlockManager::Allocate(Sequence* seq, int reserve,
                                           std::vector<std::pair<int, int>>* copies) {
  const int bs = block_size_;
  const int n = static_cast<int>(seq->tokens.size());
  const int full = n / bs;
  while (static_cast<int>(seq->block_hashes.size()) < full) {
    const size_t i = seq->block_hashes.size();
    const uint64_t parent = i ? seq->block_hashes[i - 1] : 0;
    seq->block_hashes.push_back(HashBlock(parent, &seq->tokens[i * bs], bs));
  }
  // Leading cache hits; at least one token is left to compute (its logits are needed). A block
  // another sequence is computing right now is waited for rather than computed twice (in_flight_);
  // our own in-flight entries (a preempted sequence re-admitted) do not block us.
  std::vector<int32_t> hits;
  if (cache_enabled_) {
    const int max_hit = std::min(full, (n - 1) / bs);
    int32_t parent = -1;
    for (int i = 0; i < max_hit; ++i) {
      const int32_t b = Lookup(seq->block_hashes[i], &seq->tokens[i * bs], parent);
      if (b < 0) {
        auto f = in_flight_.find(seq->block_hashes[i]);
        if (f != in_flight_.end() && f->second != seq->seq_id) return Admit::kWaitInFlight;
        break;
      }
      hits.push_back(b);
      parent = b;
    }
  }
  // Past the full hits: the longest cached start of the next block, still leaving the last token
  // to compute. Its first `partial` tokens are copied into the sequence's own (new) block. A live
  // block (another sequence's frontier) that starts with more of them serves instead once it holds
  // them; until then they are being computed, and are waited for rather than computed twice.
  const int h = static_cast<int>(hits.size());
  int partial = 0;
  int32_t src = -1;
  if (cache_enabled_ && n - 1 - h * bs > 0) {
    std::vector<uint64_t> keys;
    keys.reserve(bs - 1);
    ForEachPrefixKey(h ? seq->block_hashes[h - 1] : 0, &seq->tokens[h * bs],
                     std::min(bs - 1, n - 1 - h * bs), [&](uint64_t key) { keys.push_back(key); });
    const int32_t parent = h ? hits.back() : -1;
    FlushPending(parent);
    src = LookupStart(partial_, false, keys, &seq->tokens[h * bs], parent, &partial);
    int shared = 0;
    const int32_t live = LookupStart(live_, true, keys, &seq->tokens[h * bs], parent, &shared);
    if (shared > partial) {
      if (blocks_[live].computed < shared) return Admit::kWaitInFlight;
      src = live;
      partial = shared;
    }
  }
  const int need = BlocksFor(n, bs) - h;
  // Hits (and the copy's source) that sit on the LRU count as available but will be held, not
  // taken as new blocks.
  int held_on_lru = src >= 0 && blocks_[src].on_lru;
  for (int32_t b : hits) held_on_lru += blocks_[b].on_lru;
  if (need + reserve > num_available() - held_on_lru) return Admit::kNoSpace;

  LLMQ_CHECK(seq->block_table.empty());
  for (int32_t b : hits) Ref(b);
  // The source is referenced before any TakeBlock, so the eviction below cannot take it.
  if (src >= 0) {
    Ref(src);
    copy_holds_.push_back(src);
  }
  seq->block_table = hits;
  for (int i = 0; i < need; ++i) seq->block_table.push_back(TakeBlock());
  if (src >= 0) copies->push_back({src, seq->block_table[h]});
  seq->num_computed = h * bs + partial;
  seq->num_registered = h;
  if (cache_enabled_) {
    for (int i = seq->num_registered; i < full; ++i)
      if (in_flight_.emplace(seq->block_hashes[i], seq->seq_id).second)
        seq->in_flight.push_back(seq->block_hashes[i]);
    IndexFrontier(seq, 0);  // its copy, if any, has not run yet
  }
  return Admit::kOk;
}

void BlockManager::CopiesDone() {
  for (int32_t b : copy_holds_) Unref1(b);
  copy_holds_.clear();
}

bool BlockManager::AppendSlot(Sequence* seq, std::vector<std::pair<int, int>>* copies) {
  const int pos = static_cast<int>(seq->tokens.size()) - 1;  // the token this step computes
  const int idx = pos / block_size_;
  if (idx >= static_cast<int>(seq->block_table.size())) {
    if (num_available() == 0) return false;
    seq->block_table.push_back(TakeBlock());
    return true;
  }
  const int32_t old = seq->block_table[idx];
  // A partial block with ref > 1 is shared with forks (full blocks are never written again): the
  // writer gets its own copy; the others keep the original.
  if (blocks_[old].ref > 1) {  // shared partial block: copy on write
    if (num_available() == 0) return false;
    const int32_t b = TakeBlock();
    copies->push_back({old, b});
    Unref1(old);
    seq->block_table[idx] = b;
  }
  return true;
}

void BlockManager::MarkComputed(Sequence* seq) {
  if (!cache_enabled_) return;
  const int bs = block_size_;
  const int computed = std::min(seq->num_computed, static_cast<int>(seq->tokens.size()));
  const int full = computed / bs;
  for (int i = seq->num_registered; i < full; ++i) {
    if (static_cast<int>(seq->block_hashes.size()) == i)
      seq->block_hashes.push_back(
          HashBlock(i ? seq->block_hashes[i - 1] : 0, &seq->tokens[i * bs], bs));
    const uint64_t h = seq->block_hashes[i];
    const int32_t b = seq->block_table[i];
    const int32_t parent = i ? seq->block_table[i - 1] : -1;
    UnindexLive(b);  // no longer a frontier: cached now, or a duplicate of a cached block
    Block& blk = blocks_[b];
    // Registered once: if an identical block is already cached (computed concurrently by a
    // sequence that did not wait), this one stays out of the map and is freed with its sequence.
    if (!blk.cached && Lookup(h, &seq->tokens[i * bs], parent) < 0) {
      blk.cached = true;
      blk.hash = h;
      blk.parent = parent;
      blk.parent_epoch = parent >= 0 ? blocks_[parent].epoch : 0;
      blk.parent_hash = i ? seq->block_hashes[i - 1] : 0;
      blk.tokens.assign(seq->tokens.begin() + i * bs, seq->tokens.begin() + (i + 1) * bs);
      map_.emplace(h, b);
      // Indexed when an admission looks under its parent (FlushPending).
      std::vector<int32_t>& pending = PendingOf(parent);
      blk.indexed = Block::Indexed::kPending;
      blk.pending_pos = static_cast<int32_t>(pending.size());
      pending.push_back(b);
    }
    auto f = in_flight_.find(h);
    if (f != in_flight_.end() && f->second == seq->seq_id) in_flight_.erase(f);
  }
  seq->num_registered = std::max(seq->num_registered, full);
  IndexFrontier(seq, computed - seq->num_registered * bs);
}

void BlockManager::Release(Sequence* seq) {
  // Its frontier stops being live even if a fork still holds it: nobody computes it any more.
  if (seq->num_registered < static_cast<int>(seq->block_table.size()))
    UnindexLive(seq->block_table[seq->num_registered]);
  // Last blocks first, so a chain's tail is evicted before its head.
  for (auto it = seq->block_table.rbegin(); it != seq->block_table.rend(); ++it) Unref1(*it);
  seq->block_table.clear();
  seq->num_registered = 0;
  for (uint64_t h : seq->in_flight) {
    auto f = in_flight_.find(h);
    if (f != in_flight_.end() && f->second == seq->seq_id) in_flight_.erase(f);
  }
  seq->in_flight.clear();
}

void BlockManager::Fork(const Sequence& parent, Sequence* child) {
  child->block_table = parent.block_table;
  for (int32_t b : child->block_table) Ref(b);
  child->block_hashes = parent.block_hashes;
  child->num_registered = parent.num_registered;
}

Status BlockManager::CheckInvariants() const {
  auto fail = [](std::string m) { return Status::Internal(std::move(m)); };
  const auto name = [](int32_t b) { return "block " + std::to_string(b); };
  std::vector<uint8_t> seen(num_blocks_, 0);  // 1: on the free list, 2: on the LRU list
  for (int32_t b : free_) {
    if (b < 0 || b >= num_blocks_) return fail("free list holds " + name(b));
    if (seen[b]) return fail(name(b) + " is on the free list twice");
    seen[b] = 1;
  }
  for (int32_t b : lru_) {
    if (b < 0 || b >= num_blocks_) return fail("LRU list holds " + name(b));
    if (seen[b])
      return fail(name(b) + (seen[b] == 1 ? " is free and" : " is") + " on the LRU twice");
    seen[b] = 2;
  }
  size_t cached = 0, live_keys = 0, pending = 0, listed = root_pending_.size();
  for (int32_t b = 0; b < num_blocks_; ++b) {
    const Block& blk = blocks_[b];
    if (blk.ref < 0) return fail(name(b) + " has a negative ref count");
    // In use, or exactly one of the two lists, never both.
    if (blk.ref > 0 && seen[b]) return fail(name(b) + " is in use and on a list");
    if (blk.ref == 0 && !seen[b]) return fail(name(b) + " is unreferenced and on no list");
    if ((seen[b] == 2) != blk.on_lru) return fail(name(b) + ": on_lru disagrees with the LRU");
    // The LRU holds only cached blocks (evictable identities); the free list only blank ones.
    if (seen[b] == 2 && !blk.cached) return fail(name(b) + " is on the LRU but not cached");
    if (seen[b] == 1 && blk.cached) return fail(name(b) + " is free but still cached");
    if (blk.live) {
      if (blk.ref == 0 || blk.cached) return fail(name(b) + " is live but not in use, or cached");
      if (blk.tokens.empty() || blk.computed > static_cast<int>(blk.tokens.size()))
        return fail(name(b) + " is live with no tokens, or holds more than it has");
      live_keys += std::min<size_t>(block_size_ - 1, blk.tokens.size());
    }
    listed += blk.pending.size();
    if (!blk.cached) {
      if (blk.indexed != Block::Indexed::kNone) return fail(name(b) + " is indexed but not cached");
      continue;
    }
    ++cached;
    const bool reachable = blk.parent < 0 || blocks_[blk.parent].epoch == blk.parent_epoch;
    if (blk.indexed == Block::Indexed::kNone && reachable)
      return fail(name(b) + " is cached under a live parent but neither indexed nor pending");
    if (blk.indexed == Block::Indexed::kPending) {
      ++pending;
      const std::vector<int32_t>& list = PendingOf(blk.parent);
      if (!reachable || blk.pending_pos < 0 || blk.pending_pos >= static_cast<int>(list.size()) ||
          list[blk.pending_pos] != b)
        return fail(name(b) + " is pending but not where its parent's list says");
    }
    if (!cache_enabled_) return fail(name(b) + " is cached with the prefix cache off");
    if (static_cast<int>(blk.tokens.size()) != block_size_)
      return fail(name(b) + " is cached but not full");
    bool in_map = false;
    for (auto [it, end] = map_.equal_range(blk.hash); it != end; ++it) in_map |= it->second == b;
    if (!in_map) return fail(name(b) + " is cached but not in the map under its hash");
  }
  // Each cached block is in the map once, and the map holds nothing else.
  if (cached != map_.size())
    return fail("the map holds " + std::to_string(map_.size()) + " entries for " +
                std::to_string(cached) + " cached blocks");
  // Each pending block is listed once (it is where its list says), and the lists hold no other.
  if (listed != pending)
    return fail("the pending lists hold " + std::to_string(listed) + " entries for " +
                std::to_string(pending) + " pending blocks");
  int32_t stray = -1;  // an entry naming a block that is not cached and indexed (resp. live)
  partial_.ForEach([&](uint64_t, int32_t b) {
    if (b >= num_blocks_ || blocks_[b].indexed != Block::Indexed::kYes) stray = b;
  });
  if (stray >= 0) return fail("a prefix entry names " + name(stray) + ", which is not indexed");
  if (partial_.size() > cached * static_cast<size_t>(block_size_ - 1))
    return fail("the prefix index holds more entries than its cached blocks have prefixes");
  live_.ForEach([&](uint64_t, int32_t b) {
    if (b >= num_blocks_ || !blocks_[b].live) stray = b;
  });
  if (stray >= 0) return fail("a live prefix entry names " + name(stray) + ", which is not live");
  if (live_.size() > live_keys)
    return fail("the live index holds more entries than its live blocks have prefixes");
  return Status::Ok();
}

}  // namespace llmq
