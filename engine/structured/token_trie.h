// TokenTrie: the model's vocabulary as byte strings in one prefix tree, laid out flat in
// depth-first order, so that computing the set of tokens a byte-level recognizer accepts (a
// structured-output mask, issue 24) skips every token under a refused prefix in one step:
// LLGuidance's TokTrie.
//
// A walk pushes each node's byte into the recognizer: if it is refused the node's whole subtree is
// skipped (no token starting with those bytes can continue the document); if accepted, the tokens
// whose bytes end at that node are allowed and the walk goes down. So a walk costs one Push per
// node reached, not one per byte of every token: the shared prefixes of a 128k vocabulary are
// looked at once, and a recognizer that refuses most bytes early (inside a JSON number, most
// tokens fail on their first byte) visits few nodes.
//
// Tokens with no bytes (control tokens: BOS, EOS, chat markers) are never reached by a walk; the
// matcher allows EOS itself where a document is complete. Several tokens may share the same bytes
// (a byte-fallback piece "<0x41>" and the piece "A"): each is allowed.
//
// Immutable once built; Walk is const and safe from several threads with their own recognizers.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/text/tokenizer.h"

namespace llmq {

// One bit per token id (32-bit words, bit id % 32 of word id / 32): the layout a device kernel
// applies to a row of logits.
class TokenMask {
 public:
  explicit TokenMask(int vocab_size = 0)
      : size_(vocab_size), words_((static_cast<size_t>(vocab_size) + 31) / 32, 0) {}
  int size() const { return size_; }
  void Set(int id) { words_[static_cast<size_t>(id) >> 5] |= 1u << (id & 31); }
  void Reset(int id) { words_[static_cast<size_t>(id) >> 5] &= ~(1u << (id & 31)); }
  bool Test(int id) const { return (words_[static_cast<size_t>(id) >> 5] >> (id & 31)) & 1u; }
  void Clear();
  int Count() const;                                     // tokens allowed
  void Or(const TokenMask& o);                           // adds o's tokens (the same size)
  void SetWord(size_t i, uint32_t w) { words_[i] = w; }  // tokens 32i..32i+31
  const std::vector<uint32_t>& words() const { return words_; }

 private:
  int size_;
  std::vector<uint32_t> words_;
};

// The one token that `n` mask words allow (bit t % 32 of word t / 32), or -1 when none or several.
inline int32_t OnlyToken(const uint32_t* words, size_t n) {
  int allowed = 0;
  int32_t last = -1;
  for (size_t j = 0; j < n && allowed < 2; ++j)
    if (words[j] != 0) {
      allowed += std::popcount(words[j]);
      last = static_cast<int32_t>(j * 32) + std::countr_zero(words[j]);
    }
  return allowed == 1 ? last : -1;
}

class TokenTrie {
 public:
  // `token_bytes[id]`: the bytes token `id` stands for; empty: never in a mask through the trie.
  explicit TokenTrie(const std::vector<std::string>& token_bytes);
  // A vocabulary of the 256 single bytes, token id = byte (tests, fuzz targets: masks as byte
  // sets).
  static std::shared_ptr<const TokenTrie> SingleBytes();
  // The tokenizer's vocabulary (Tokenizer::TokenBytes), control tokens left out.
  static TokenTrie FromTokenizer(const Tokenizer& tok);

  int vocab_size() const { return vocab_size_; }
  size_t num_nodes() const { return nodes_.size(); }
  int max_token_bytes() const { return max_depth_; }  // the longest token
  // The bytes from the root to `node` (its own last).
  std::string Path(uint32_t node) const;

  // Sets in *mask (of vocab_size() bits; not cleared first) every token whose bytes the recognizer
  // accepts whole from its current state. `R` has:
  //   bool Push(uint8_t byte);  // consume one byte; false (and no change) when it is refused
  //   void Pop(int n);          // undo the last n accepted pushes (n >= 0)
  // The recognizer is left in the state it started in.
  template <class R>
  void Walk(R& r, TokenMask* mask) const {
    WalkSubtree(r, 0, mask);
  }
  // The same below `node` (0: the root), for a recognizer standing at node's parent: node's own
  // byte is pushed first (unless node is the root). R may instead take
  // `bool Push(uint8_t byte, uint32_t node)`: the node the byte leads to, for a recognizer that
  // notes where it stopped (a matcher's cache: engine/structured/matcher.h).
  template <class R>
  void WalkSubtree(R& r, uint32_t node, TokenMask* mask) const;
  // R may also have `bool TakesAll(const ByteSet& bytes)`: whether every string over `bytes`
  // leaves it where it is (bytes its state loops on). The walk then allows a node's whole subtree
  // at once when all the bytes in it (the node's own included) are such: inside a JSON string,
  // most of a vocabulary in one step per subtree, no Push per node.
  struct ByteSet {
    uint64_t w[4] = {0, 0, 0, 0};
    void Add(uint8_t b) { w[b >> 6] |= uint64_t{1} << (b & 63); }
    bool Has(uint8_t b) const { return (w[b >> 6] >> (b & 63)) & 1u; }
    bool SubsetOf(const ByteSet& o) const {
      return !(w[0] & ~o.w[0]) && !(w[1] & ~o.w[1]) && !(w[2] & ~o.w[2]) && !(w[3] & ~o.w[3]);
    }
  };
  // Sets every token whose bytes start with node's (the subtree's tokens: contiguous in ids_).
  void SetSubtree(uint32_t node, TokenMask* mask) const;
  // Runs an automaton over every token at once: visits each node below the root, parents first,
  // as `int visit(uint32_t node, uint8_t byte, int parent_state)`, which returns the node's state
  // (negative: its subtree is not visited); the root's state is `start`.
  template <class Visit>
  void ForEachNode(int start, Visit visit) const;
  // The tokens whose bytes are exactly node's path.
  std::span<const int32_t> TokensAt(uint32_t node) const {
    return {ids_.data() + nodes_[node].tok_begin, nodes_[node].tok_end - nodes_[node].tok_begin};
  }
  // Clears the tokens whose bytes are exactly `bytes` (none, one, or several sharing them).
  void ClearExactly(std::string_view bytes, TokenMask* mask) const;

 private:
  struct Node {
    uint32_t end;        // index just past this node's subtree
    uint32_t tok_begin;  // tokens ending here: ids_[tok_begin, tok_end)
    uint32_t tok_end;
    uint16_t depth;  // bytes from the root (the root: 0)
    uint8_t byte;    // the byte that leads here from the parent
  };
  std::vector<Node> nodes_;        // depth-first order; nodes_[0] is the root (the empty string)
  std::vector<int32_t> ids_;       // token ids in byte order
  std::vector<ByteSet> bytes_;     // by node: its byte and every byte below it
  std::vector<uint32_t> parents_;  // by node (the root: 0)
  int vocab_size_ = 0;
  int max_depth_ = 0;
};

template <class Visit>
void TokenTrie::ForEachNode(int start, Visit visit) const {
  std::vector<int> state(static_cast<size_t>(max_depth_) + 1);  // by depth, along the path
  state[0] = start;
  for (size_t i = 1; i < nodes_.size();) {
    const Node& n = nodes_[i];
    const int s = visit(static_cast<uint32_t>(i), n.byte, state[n.depth - 1u]);
    if (s < 0) {
      i = n.end;
      continue;
    }
    state[n.depth] = s;
    ++i;
  }
}

template <class R>
void TokenTrie::WalkSubtree(R& r, uint32_t node, TokenMask* mask) const {
  const int base = node == 0 ? 0 : nodes_[node].depth - 1;  // the recognizer's depth
  int depth = base;  // bytes from the root the recognizer stands at
  size_t i = node == 0 ? 1 : node;
  const size_t end = nodes_[node].end;
  while (i < end) {
    const Node& n = nodes_[i];
    // Back up to this node's parent.
    if (const int up = depth - (n.depth - 1); up > 0) {
      r.Pop(up);
      depth = n.depth - 1;
    }
    if constexpr (requires { r.TakesAll(ByteSet{}); }) {
      if (r.TakesAll(bytes_[i])) {
        SetSubtree(static_cast<uint32_t>(i), mask);
        i = n.end;
        continue;
      }
    }
    bool pushed;
    if constexpr (requires { r.Push(uint8_t{}, uint32_t{}); })
      pushed = r.Push(n.byte, static_cast<uint32_t>(i));
    else
      pushed = r.Push(n.byte);
    if (!pushed) {
      i = n.end;  // nothing under these bytes
      continue;
    }
    depth = n.depth;
    for (uint32_t k = n.tok_begin; k < n.tok_end; ++k) mask->Set(ids_[k]);
    ++i;
  }
  if (depth > base) r.Pop(depth - base);
}

}  // namespace llmq
