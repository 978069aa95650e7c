#include "engine/structured/token_trie.h"

#include <algorithm>
#include <bit>
#include <limits>
#include <numeric>

namespace llmq {

void TokenMask::Clear() {
  std::fill(words_.begin(), words_.end(), 0u);
}

void TokenMask::Or(const TokenMask& o) {
  for (size_t k = 0; k < words_.size() && k < o.words_.size(); ++k) words_[k] |= o.words_[k];
}

int TokenMask::Count() const {
  int n = 0;
  for (uint32_t w : words_) n += std::popcount(w);
  return n;
}

TokenTrie::TokenTrie(const std::vector<std::string>& token_bytes)
    : vocab_size_(static_cast<int>(token_bytes.size())) {
  // Token ids in byte order: a node's own tokens come right before the tokens below it, and a
  // node's subtree is one contiguous run.
  std::vector<int32_t> order;
  order.reserve(token_bytes.size());
  for (size_t id = 0; id < token_bytes.size(); ++id) {
    const size_t len = token_bytes[id].size();
    if (len > 0 && len <= std::numeric_limits<uint16_t>::max())
      order.push_back(static_cast<int32_t>(id));
  }
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return token_bytes[static_cast<size_t>(a)] < token_bytes[static_cast<size_t>(b)];
  });
  ids_ = order;
  nodes_.push_back({0, 0, 0, 0, 0});  // the root
  std::vector<uint32_t> path = {0};   // the nodes from the root to the current one
  const std::string* prev = nullptr;
  for (size_t k = 0; k < order.size(); ++k) {
    const std::string& s = token_bytes[static_cast<size_t>(order[k])];
    // The common prefix with the previous string is already in the tree: close the rest.
    size_t common = 0;
    if (prev != nullptr) {
      const size_t most = std::min(prev->size(), s.size());
      while (common < most && (*prev)[common] == s[common]) ++common;
    }
    while (path.size() > common + 1) {
      nodes_[path.back()].end = static_cast<uint32_t>(nodes_.size());
      path.pop_back();
    }
    for (size_t d = common; d < s.size(); ++d) {
      const auto at = static_cast<uint32_t>(k);
      nodes_.push_back({0, at, at, static_cast<uint16_t>(d + 1), static_cast<uint8_t>(s[d])});
      path.push_back(static_cast<uint32_t>(nodes_.size() - 1));
    }
    Node& leaf = nodes_[path.back()];
    if (leaf.tok_end == leaf.tok_begin) leaf.tok_begin = leaf.tok_end = static_cast<uint32_t>(k);
    leaf.tok_end = static_cast<uint32_t>(k) + 1;
    prev = &s;
  }
  while (!path.empty()) {
    nodes_[path.back()].end = static_cast<uint32_t>(nodes_.size());
    path.pop_back();
  }
  for (const Node& n : nodes_) max_depth_ = std::max<int>(max_depth_, n.depth);
  parents_.assign(nodes_.size(), 0);
  for (size_t i = 0; i < nodes_.size(); ++i)
    for (size_t c = i + 1; c < nodes_[i].end; c = nodes_[c].end)
      parents_[c] = static_cast<uint32_t>(i);
  // Each node's bytes: its own and its subtree's (children come after their parent).
  bytes_.resize(nodes_.size());
  for (size_t i = nodes_.size(); i-- > 1;) {
    bytes_[i].Add(nodes_[i].byte);
    for (size_t c = i + 1; c < nodes_[i].end; c = nodes_[c].end)
      for (int k = 0; k < 4; ++k) bytes_[i].w[k] |= bytes_[c].w[k];
  }
}

std::string TokenTrie::Path(uint32_t node) const {
  std::string out(nodes_[node].depth, '\0');
  for (uint32_t at = node; at != 0; at = parents_[at])
    out[nodes_[at].depth - 1U] = static_cast<char>(nodes_[at].byte);
  return out;
}

std::shared_ptr<const TokenTrie> TokenTrie::SingleBytes() {
  static const std::shared_ptr<const TokenTrie> trie = [] {
    std::vector<std::string> v;
    for (int b = 0; b < 256; ++b) v.emplace_back(1, static_cast<char>(b));
    return std::make_shared<const TokenTrie>(v);
  }();
  return trie;
}

void TokenTrie::SetSubtree(uint32_t node, TokenMask* mask) const {
  const uint32_t end = nodes_[node].end;
  const size_t from = nodes_[node].tok_begin;
  const size_t to = end < nodes_.size() ? nodes_[end].tok_begin : ids_.size();
  for (size_t k = from; k < to; ++k) mask->Set(ids_[k]);
}

void TokenTrie::ClearExactly(std::string_view bytes, TokenMask* mask) const {
  uint32_t at = 0;
  for (const char c : bytes) {
    uint32_t child = at + 1;
    while (child < nodes_[at].end && nodes_[child].byte != static_cast<uint8_t>(c))
      child = nodes_[child].end;
    if (child >= nodes_[at].end) return;  // no token has these bytes
    at = child;
  }
  for (uint32_t k = nodes_[at].tok_begin; k < nodes_[at].tok_end; ++k) mask->Reset(ids_[k]);
}

}  // namespace llmq
