// The block manager under random operation sequences: sequences added, admitted, computed in
// chunks, decoded, forked, cancelled, preempted and pinned in random order over many seeds. After
// every operation: CheckInvariants, every block's reference count against a model the test keeps
// (block tables + pins + copy holds), and the KV each sequence reads: the test keeps the token
// written to every slot (what a backend's K/V would be), so a wrong cache hit, a missed copy or a
// write into a shared block shows up as a slot holding another token.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/core/block_manager.h"

namespace llmq {
namespace {

constexpr int kBs = 4;

// How often the interesting outcomes happened, summed over all seeds (the test asserts each did).
struct Counts {
  int admitted = 0, no_space = 0, wait_in_flight = 0, partial_copies = 0, live_copies = 0,
      cached_tokens = 0, cow_copies = 0, decode_preempted = 0;
};

class Model {
 public:
  Model(uint32_t seed, int num_blocks, bool cache, Counts* counts)
      : rng_(seed), bm_(num_blocks, kBs, cache), slots_(num_blocks * kBs, -1), n_(counts) {
    // Three templates: prompts take a random-length start of one (so shared prefixes end
    // anywhere in a block) and a random tail.
    for (int t = 0; t < 3; ++t) {
      std::vector<int32_t> tmpl;
      for (int i = 0; i < 24; ++i) tmpl.push_back(Uni(1, 6));
      templates_.push_back(tmpl);
    }
  }

  int Uni(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

  void Step(std::string* what) {
    switch (Uni(0, 9)) {
      case 0:
        *what = "add";
        Add();
        break;
      case 1:
      case 2:
        *what = "admit";
        Admit();
        break;
      case 3:
        *what = "prefill";
        Prefill();
        break;
      case 4:
      case 5:
        *what = "decode";
        Decode();
        break;
      case 6:
        *what = "fork";
        Fork();
        break;
      case 7:
        *what = Uni(0, 1) ? "cancel" : "preempt";
        Drop(*what == "cancel");
        break;
      case 8:
        *what = "pin";
        Pin();
        break;
      case 9:
        *what = "unpin";
        Unpin();
        break;
    }
  }

  // Releases everything; the pool must be empty then.
  void Drain() {
    EndCopies();
    for (auto& s : seqs_) bm_.Release(s.get());
    seqs_.clear();
    for (int32_t b : pins_) bm_.Unref(b);
    pins_.clear();
  }

  void Check(const std::string& what) {
    const Status st = bm_.CheckInvariants();
    ASSERT_TRUE(st.ok()) << what << ": " << st.message();
    std::vector<int> refs(bm_.num_blocks(), 0);
    for (const auto& s : seqs_)
      for (int32_t b : s->block_table) ++refs[b];
    for (int32_t b : pins_) ++refs[b];
    for (const auto& [src, dst] : pending_) ++refs[src];  // held until CopiesDone
    int in_use = 0;
    for (int b = 0; b < bm_.num_blocks(); ++b) {
      ASSERT_EQ(bm_.ref_count(b), refs[b]) << what << ": block " << b;
      in_use += refs[b] > 0;
    }
    ASSERT_EQ(bm_.num_in_use(), in_use) << what;
    ASSERT_EQ(bm_.num_copy_holds(), static_cast<int>(pending_.size())) << what;
    if (!pending_.empty()) return;  // the copies have not run yet: admitted KV is incomplete
    for (const auto& s : seqs_) {
      ASSERT_LE(s->num_computed, static_cast<int>(s->tokens.size()));
      for (int p = 0; p < s->num_computed; ++p)
        ASSERT_EQ(slots_[s->block_table[p / kBs] * kBs + p % kBs], s->tokens[p])
            << what << ": seq " << s->seq_id << " position " << p;
    }
  }
  BlockManager& bm() { return bm_; }

 private:
  Sequence* Pick(bool (*want)(const Sequence&)) {
    std::vector<Sequence*> c;
    for (auto& s : seqs_)
      if (want(*s)) c.push_back(s.get());
    return c.empty() ? nullptr : c[Uni(0, static_cast<int>(c.size()) - 1)];
  }
  static bool Waiting(const Sequence& s) { return s.status == SeqStatus::kWaiting; }
  static bool Prefilling(const Sequence& s) {
    return s.status == SeqStatus::kRunning && s.pending() > 0;
  }
  static bool Decoding(const Sequence& s) {
    return s.status == SeqStatus::kRunning && s.pending() == 0;
  }
  static bool Running(const Sequence& s) { return s.status == SeqStatus::kRunning; }

  void Add() {
    auto s = std::make_unique<Sequence>();
    s->seq_id = next_id_++;
    const auto& t = templates_[Uni(0, 2)];
    s->tokens.assign(t.begin(), t.begin() + Uni(0, static_cast<int>(t.size())));
    for (int i = Uni(1, 10); i > 0; --i) s->tokens.push_back(Uni(1, 6));
    s->num_prompt = static_cast<int>(s->tokens.size());
    seqs_.push_back(std::move(s));
  }
  // Several admissions in one step share the step's copies, as in the scheduler.
  void Admit() {
    Sequence* s = Pick(Waiting);
    if (!s) return;
    std::vector<std::pair<int, int>> copies;
    const auto r = bm_.Allocate(s, Uni(0, 1), &copies);
    if (r != BlockManager::Admit::kOk) {
      ASSERT_TRUE(copies.empty());
      ++(r == BlockManager::Admit::kNoSpace ? n_->no_space : n_->wait_in_flight);
      return;
    }
    ++n_->admitted;
    n_->partial_copies += static_cast<int>(copies.size());
    // A source that is another running sequence's frontier (its first block not in the cache) is
    // live: not cached, its start computed by that sequence.
    for (const auto& [src, dst] : copies)
      for (const auto& o : seqs_)
        if (o.get() != s && o->status == SeqStatus::kRunning &&
            o->num_registered < static_cast<int>(o->block_table.size()) &&
            o->block_table[o->num_registered] == src) {
          ++n_->live_copies;
          break;
        }
    n_->cached_tokens += s->num_computed;
    s->status = SeqStatus::kRunning;
    pending_.insert(pending_.end(), copies.begin(), copies.end());
  }
  // The backend's CopyBlocks, then CopiesDone (the step's forward pass comes after).
  void EndCopies() {
    for (const auto& [src, dst] : pending_)
      std::copy_n(slots_.begin() + src * kBs, kBs, slots_.begin() + dst * kBs);
    pending_.clear();
    bm_.CopiesDone();
  }
  void Compute(Sequence* s, int n) {
    for (int p = s->num_computed; p < s->num_computed + n; ++p)
      slots_[s->block_table[p / kBs] * kBs + p % kBs] = s->tokens[p];
    s->num_computed += n;
    bm_.MarkComputed(s);
  }
  void Prefill() {
    EndCopies();
    Sequence* s = Pick(Prefilling);
    if (s) Compute(s, Uni(1, s->pending()));
  }
  void Decode() {
    EndCopies();
    Sequence* s = Pick(Decoding);
    if (!s || s->tokens.size() >= 60) return;
    s->tokens.push_back(Uni(1, 6));
    std::vector<std::pair<int, int>> copies;
    if (!bm_.AppendSlot(s, &copies)) {  // no block: the scheduler preempts (here: itself)
      s->tokens.pop_back();
      Preempt(s);
      ++n_->decode_preempted;
      return;
    }
    n_->cow_copies += static_cast<int>(copies.size());
    for (const auto& [src, dst] : copies)
      std::copy_n(slots_.begin() + src * kBs, kBs, slots_.begin() + dst * kBs);
    Compute(s, 1);
  }
  void Fork() {
    EndCopies();
    Sequence* p = Pick(Decoding);
    if (!p) return;
    auto c = std::make_unique<Sequence>();
    c->seq_id = next_id_++;
    c->tokens = p->tokens;
    c->num_prompt = p->num_prompt;
    c->num_computed = p->num_computed;
    c->status = SeqStatus::kRunning;
    bm_.Fork(*p, c.get());
    seqs_.push_back(std::move(c));
  }
  void Preempt(Sequence* s) {
    bm_.Release(s);
    s->num_computed = 0;
    s->status = SeqStatus::kWaiting;
  }
  void Drop(bool cancel) {
    EndCopies();
    Sequence* s = cancel ? Pick([](const Sequence&) { return true; }) : Pick(Running);
    if (!s) return;
    if (!cancel) return Preempt(s);
    bm_.Release(s);
    seqs_.erase(std::find_if(seqs_.begin(), seqs_.end(), [s](auto& p) { return p.get() == s; }));
  }
  void Pin() {
    Sequence* s = Pick(Running);
    if (!s || s->block_table.empty()) return;
    const int32_t b = s->block_table[Uni(0, static_cast<int>(s->block_table.size()) - 1)];
    bm_.Ref(b);
    pins_.push_back(b);
  }
  void Unpin() {
    if (pins_.empty()) return;
    const size_t i = Uni(0, static_cast<int>(pins_.size()) - 1);
    bm_.Unref(pins_[i]);
    pins_.erase(pins_.begin() + i);
  }

  std::mt19937 rng_;
  BlockManager bm_;
  std::vector<int32_t> slots_;  // the token whose K/V each slot holds (-1: never written)
  std::vector<std::vector<int32_t>> templates_;
  std::vector<std::unique_ptr<Sequence>> seqs_;
  std::vector<int32_t> pins_;
  std::vector<std::pair<int, int>> pending_;  // this step's copies, not yet run
  int64_t next_id_ = 0;
  Counts* n_;
};

TEST(BlockManagerRandom, InvariantsRefCountsAndKvHoldUnderRandomOperations) {
  int ops = 0;
  Counts n;
  for (bool cache : {true, false})
    for (uint32_t seed = 1; seed <= 150; ++seed) {
      Model m(seed, 6 + static_cast<int>(seed % 30), cache, &n);
      std::string what;
      for (int i = 0; i < 400; ++i) {
        m.Step(&what);
        m.Check("seed " + std::to_string(seed) + " op " + std::to_string(i) + " " + what);
        if (::testing::Test::HasFatalFailure()) return;
        ++ops;
      }
      m.Drain();
      m.Check("seed " + std::to_string(seed) + " drained");
      if (::testing::Test::HasFatalFailure()) return;
      EXPECT_EQ(m.bm().num_in_use(), 0) << "seed " << seed;
    }
  EXPECT_EQ(ops, 2 * 150 * 400);
  // Every path was taken, many times.
  EXPECT_GT(n.admitted, 1000);
  EXPECT_GT(n.no_space, 100);
  EXPECT_GT(n.wait_in_flight, 10);
  EXPECT_GT(n.partial_copies, 100);
  EXPECT_GT(n.live_copies, 10);
  EXPECT_GT(n.cached_tokens, 1000);
  EXPECT_GT(n.cow_copies, 10);
  EXPECT_GT(n.decode_preempted, 10);
  std::printf(
      "admitted %d, no space %d, wait in flight %d, partial copies %d (from live blocks %d), "
      "cached tokens %d, copy-on-write %d, preempted in decode %d\n",
      n.admitted, n.no_space, n.wait_in_flight, n.partial_copies, n.live_copies, n.cached_tokens,
      n.cow_copies, n.decode_preempted);
}

}  // namespace
}  // namespace llmq
