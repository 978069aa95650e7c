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
  // node's subtree is one contiguous run. Sorted on each string's first 8 bytes (big-endian, so
  // that integers compare as the bytes do), the strings themselves compared only where those tie;
  // equal strings keep their id order.
  struct Keyed {
    uint64_t head;
    int32_t id;
  };
  std::vector<Keyed> keyed;
  keyed.reserve(token_bytes.size());
  for (size_t id = 0; id < token_bytes.size(); ++id) {
    const std::string& t = token_bytes[id];
    if (t.empty() || t.size() > std::numeric_limits<uint16_t>::max()) continue;
    uint64_t head = 0;
    for (size_t k = 0; k < 8; ++k)
      head = head << 8 | (k < t.size() ? static_cast<uint8_t>(t[k]) : 0u);
    keyed.push_back({head, static_cast<int32_t>(id)});
  }
  std::sort(keyed.begin(), keyed.end(), [&](const Keyed& a, const Keyed& b) {
    if (a.head != b.head) return a.head < b.head;
    const int c =
        token_bytes[static_cast<size_t>(a.id)].compare(token_bytes[static_cast<size_t>(b.id)]);
    return c != 0 ? c < 0 : a.id < b.id;
  });
  ids_.resize(keyed.size());
  for (size_t k = 0; k < keyed.size(); ++k) ids_[k] = keyed[k].id;
  // Each string adds a node per byte past its common prefix with the one before: counted first,
  // so that the node arrays are allocated once.
  std::vector<uint16_t> common(ids_.size(), 0);
  size_t num_nodes = 1;
  for (size_t k = 0; k < ids_.size(); ++k) {
    const std::string& s = token_bytes[static_cast<size_t>(ids_[k])];
    if (k > 0) {
      const std::string& prev = token_bytes[static_cast<size_t>(ids_[k - 1])];
      const size_t most = std::min(prev.size(), s.size());
      size_t c = 0;
      while (c < most && prev[c] == s[c]) ++c;
      common[k] = static_cast<uint16_t>(c);
    }
    num_nodes += s.size() - common[k];
  }
  nodes_.reserve(num_nodes);
  parents_.reserve(num_nodes);
  nodes_.push_back({0, 0, 0, 0, 0});  // the root
  parents_.push_back(0);
  std::vector<uint32_t> path = {0};  // the nodes from the root to the current one
  for (size_t k = 0; k < ids_.size(); ++k) {
    const std::string& s = token_bytes[static_cast<size_t>(ids_[k])];
    // The common prefix with the previous string is already in the tree: close the rest.
    while (path.size() > common[k] + 1U) {
      nodes_[path.back()].end = static_cast<uint32_t>(nodes_.size());
      path.pop_back();
    }
    for (size_t d = common[k]; d < s.size(); ++d) {
      const auto at = static_cast<uint32_t>(k);
      parents_.push_back(path.back());
      nodes_.push_back({0, at, at, static_cast<uint16_t>(d + 1), static_cast<uint8_t>(s[d])});
      path.push_back(static_cast<uint32_t>(nodes_.size() - 1));
    }
    Node& leaf = nodes_[path.back()];
    if (leaf.tok_end == leaf.tok_begin) leaf.tok_begin = leaf.tok_end = static_cast<uint32_t>(k);
    leaf.tok_end = static_cast<uint32_t>(k) + 1;
  }
  while (!path.empty()) {
    nodes_[path.back()].end = static_cast<uint32_t>(nodes_.size());
    path.pop_back();
  }
  for (const Node& n : nodes_) max_depth_ = std::max<int>(max_depth_, n.depth);
  // Each node's bytes: its own and its subtree's (children come after their parent).
  bytes_.resize(nodes_.size());
  for (size_t i = nodes_.size(); i-- > 1;) {
    bytes_[i].Add(nodes_[i].byte);
    if (parents_[i] == 0) continue;  // the root's set is never asked for
    ByteSet& up = bytes_[parents_[i]];
    for (int k = 0; k < 4; ++k) up.w[k] |= bytes_[i].w[k];
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
