// PrefixPlanner: a compressed radix tree over the prompts, then one depth-first walk.
//
// Tree representation (all flat arrays, no per-token nodes, no copies of tokens):
//  - `nodes_`: node 0 is the root (empty edge). Every other node's incoming edge is the token run
//    prompts[edge_prompt][edge_begin, edge_begin + edge_len), a reference into the caller's spans
//    (they outlive the call). Edges are never empty.
//  - Children are found through ONE open-addressing hash table keyed by (parent node, first
//    token of the child's edge). Siblings have pairwise distinct first tokens (radix-tree
//    invariant), so the key is unique. The table is sized once for the worst case (a prompt
//    creates at most two nodes), so it never rehashes.
//  - Prompts that end exactly at a node form a singly linked list (head/tail in the node,
//    `next_end_` per prompt); prompts are inserted in input order and appended at the tail, so
//    each list is in input order.
// Insertion walks from the root: O(prompt length) token comparisons plus one hash probe per node on
// the path. A mismatch inside an edge splits it (the new middle node takes the edge's head, the old
// node keeps its tail), so apart from the root every node has >= 2 children or >= 1 ending prompt:
// a node's depth is therefore exactly the longest common prefix of the prompts in its subtree.
#include "engine/core/prefix_planner.h"

#include <algorithm>
#include <bit>
#include <limits>

#ifdef __AVX2__
#include <immintrin.h>
#endif

namespace llmq {
namespace {

constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();

struct Node {
  uint32_t edge_prompt = 0;  // the edge's tokens live in prompts[edge_prompt]; also (invariant)
                             // the smallest input index in this node's subtree, see Insert()
  uint32_t edge_begin = 0;
  uint32_t edge_len = 0;
  uint32_t parent = kNone;
  uint32_t count = 0;         // prompts that pass through or end at this node (subtree size)
  uint32_t end_head = kNone;  // prompts ending exactly here, in input order
  uint32_t end_tail = kNone;
};

// Length of the common prefix of a[0, n) and b[0, n). With AVX2 (the engine is built for
// x86-64-v3) it compares 16 tokens per step; the tail and other targets go token by token.
inline size_t CommonPrefix(const int32_t* a, const int32_t* b, size_t n) {
  size_t i = 0;
#ifdef __AVX2__
  for (; i + 16 <= n; i += 16) {
    const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + i));
    const __m256i y0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + i));
    const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + i + 8));
    const __m256i y1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + i + 8));
    const uint32_t eq0 = static_cast<uint32_t>(_mm256_movemask_epi8(_mm256_cmpeq_epi32(x0, y0)));
    const uint32_t eq1 = static_cast<uint32_t>(_mm256_movemask_epi8(_mm256_cmpeq_epi32(x1, y1)));
    if ((eq0 & eq1) != 0xFFFFFFFFu) {
      const uint64_t eq = (uint64_t{eq1} << 32) | eq0;  // 4 mask bits per token
      return i + static_cast<size_t>(std::countr_one(eq)) / 4;
    }
  }
#endif
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

// (parent node, first token) -> child node. Linear probing, no deletion; values may be overwritten
// (an edge split re-points the parent's slot at the new middle node).
class ChildTable {
 public:
  explicit ChildTable(size_t max_entries) {
    const size_t cap = std::bit_ceil(std::max<size_t>(16, 2 * max_entries));  // load <= 1/2
    shift_ = 64 - std::countr_zero(cap);
    keys_.assign(cap, kEmptyKey);
    values_.resize(cap);
  }

  static uint64_t Key(uint32_t node, int32_t token) {
    return (uint64_t{node} << 32) | static_cast<uint32_t>(token);
  }

  // The slot holding `key`, or the empty slot where it would be inserted.
  size_t Find(uint64_t key) const {
    const size_t mask = keys_.size() - 1;
    size_t slot = Hash(key);
    while (keys_[slot] != key && keys_[slot] != kEmptyKey) slot = (slot + 1) & mask;
    return slot;
  }
  bool Occupied(size_t slot) const { return keys_[slot] != kEmptyKey; }
  uint32_t Value(size_t slot) const { return values_[slot]; }
  void Set(size_t slot, uint64_t key, uint32_t value) {
    keys_[slot] = key;
    values_[slot] = value;
  }

 private:
  // Node index kNone is never a parent, so this key never occurs.
  static constexpr uint64_t kEmptyKey = ~uint64_t{0};
  size_t Hash(uint64_t key) const {
    key ^= key >> 31;
    return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_);  // Fibonacci hashing
  }
  int shift_ = 0;
  std::vector<uint64_t> keys_;
  std::vector<uint32_t> values_;
};

class RadixTree {
 public:
  explicit RadixTree(const std::vector<std::span<const int32_t>>& prompts)
      : prompts_(prompts), next_end_(prompts.size(), kNone), children_(2 * prompts.size() + 1) {
    nodes_.reserve(2 * prompts.size() + 1);  // never reallocates: references stay valid
    nodes_.emplace_back();                   // root
  }

  // Inserts prompts_[p]; must be called for p = 0, 1, 2, ... in order.
  void Insert(uint32_t p) {
    const int32_t* t = prompts_[p].data();
    const size_t len = prompts_[p].size();
    uint32_t node = 0;
    size_t pos = 0;  // tokens of p matched so far == depth of `node`
    for (;;) {
      ++nodes_[node].count;
      if (pos == len) {
        AppendEnd(node, p);
        return;
      }
      const uint64_t key = ChildTable::Key(node, t[pos]);
      const size_t slot = children_.Find(key);
      if (!children_.Occupied(slot)) {
        // No child starts with t[pos]: a new leaf holds the rest of p. p is the first (smallest)
        // input index to reach it, so edge_prompt == min index in its subtree.
        const uint32_t leaf = NewNode(p, pos, len - pos, node);
        nodes_[leaf].count = 1;
        AppendEnd(leaf, p);
        children_.Set(slot, key, leaf);
        unique_tokens_ += static_cast<int64_t>(len - pos);
        return;
      }
      uint32_t child = children_.Value(slot);
      const Node& c = nodes_[child];
      const int32_t* e = prompts_[c.edge_prompt].data() + c.edge_begin;
      const size_t n = std::min<size_t>(c.edge_len, len - pos);
      // The first token matches by construction of the key.
      const size_t m = 1 + CommonPrefix(e + 1, t + pos + 1, n - 1);
      if (m < c.edge_len) {
        // Split: `mid` takes the edge's first m tokens and child's place under `node`; child keeps
        // the remaining tokens. mid's subtree is child's plus p (> every index there), so mid
        // inherits child's edge_prompt and the min-index invariant holds. The next iteration finds
        // no child of mid starting with t[pos + m] (it differs from e[m]) or ends p at mid.
        const uint32_t mid = NewNode(c.edge_prompt, c.edge_begin, static_cast<uint32_t>(m), node);
        Node& cm = nodes_[child];
        nodes_[mid].count = cm.count;
        cm.edge_begin += static_cast<uint32_t>(m);
        cm.edge_len -= static_cast<uint32_t>(m);
        cm.parent = mid;
        children_.Set(slot, key, mid);
        const uint64_t child_key = ChildTable::Key(mid, e[m]);
        children_.Set(children_.Find(child_key), child_key, child);
        child = mid;
      }
      node = child;
      pos += m;
    }
  }

  // Emits the depth-first order and the groups (see the header and PlanPrefixes()).
  void Walk(int block_size, Plan& plan) const {
    const uint32_t num_nodes = static_cast<uint32_t>(nodes_.size());
    // Children lists in CSR form, built from the parent links.
    std::vector<uint32_t> first(num_nodes + 1, 0);
    for (uint32_t v = 1; v < num_nodes; ++v) ++first[nodes_[v].parent + 1];
    for (uint32_t v = 0; v < num_nodes; ++v) first[v + 1] += first[v];
    std::vector<uint32_t> kids(num_nodes > 0 ? num_nodes - 1 : 0);
    {
      std::vector<uint32_t> fill(first.begin(), first.end() - 1);
      for (uint32_t v = 1; v < num_nodes; ++v) kids[fill[nodes_[v].parent]++] = v;
    }
    // Child order: larger subtree first, ties by smallest input index in the subtree (edge_prompt,
    // see Node). Sibling subtrees are disjoint, so the key is a strict total order: deterministic.
    const auto before = [this](uint32_t a, uint32_t b) {
      const Node& x = nodes_[a];
      const Node& y = nodes_[b];
      return x.count != y.count ? x.count > y.count : x.edge_prompt < y.edge_prompt;
    };
    for (uint32_t v = 0; v < num_nodes; ++v) {
      if (first[v + 1] - first[v] > 1) {
        std::sort(kids.begin() + first[v], kids.begin() + first[v + 1], before);
      }
    }

    // Iterative pre-order DFS (the tree can be as deep as the number of prompts). A popped node's
    // subtree is emitted contiguously starting at the current order size, and its size is known
    // (count), so a group's range is complete when it is created; groups are created in pre-order,
    // hence parents before children, and a child group's range lies inside its parent's.
    struct Frame {
      uint32_t node;
      int32_t group;  // innermost group enclosing this node, -1 if none
      int64_t depth;  // tokens from the root to the end of this node's edge
    };
    std::vector<Frame> stack;
    stack.push_back({0, -1, 0});
    plan.order.reserve(prompts_.size());
    const int64_t bs = block_size;
    while (!stack.empty()) {
      const Frame f = stack.back();
      stack.pop_back();
      const Node& nd = nodes_[f.node];
      const uint32_t begin = static_cast<uint32_t>(plan.order.size());
      int32_t group = f.group;
      if (nd.count >= 2) {
        // The subtree's prompts share exactly `depth` tokens (see the file comment); only full
        // blocks are shareable. A group must add at least one block over its enclosing group
        // (at the top level that means shared >= one block).
        const int64_t shared = f.depth / bs * bs;
        const int64_t outer = group < 0 ? 0 : plan.groups[group].shared_tokens;
        if (shared > outer) {
          plan.groups.push_back({begin, begin + nd.count, static_cast<int32_t>(shared), group});
          group = static_cast<int32_t>(plan.groups.size() - 1);
        }
      }
      for (uint32_t p = nd.end_head; p != kNone; p = next_end_[p]) plan.order.push_back(p);
      for (uint32_t k = first[f.node + 1]; k > first[f.node]; --k) {  // reversed: first pops first
        const uint32_t c = kids[k - 1];
        stack.push_back({c, group, f.depth + nodes_[c].edge_len});
      }
    }
    plan.unique_tokens = unique_tokens_;
  }

 private:
  uint32_t NewNode(uint32_t prompt, size_t begin, size_t len, uint32_t parent) {
    Node n;
    n.edge_prompt = prompt;
    n.edge_begin = static_cast<uint32_t>(begin);
    n.edge_len = static_cast<uint32_t>(len);
    n.parent = parent;
    nodes_.push_back(n);
    return static_cast<uint32_t>(nodes_.size() - 1);
  }

  void AppendEnd(uint32_t node, uint32_t p) {
    Node& n = nodes_[node];
    if (n.end_tail == kNone) {
      n.end_head = p;
    } else {
      next_end_[n.end_tail] = p;
    }
    n.end_tail = p;
  }

  const std::vector<std::span<const int32_t>>& prompts_;
  std::vector<Node> nodes_;
  std::vector<uint32_t> next_end_;  // next prompt ending at the same node, kNone at the end
  ChildTable children_;
  int64_t unique_tokens_ = 0;  // sum of edge lengths: a leaf adds its edge, a split adds nothing
};

}  // namespace

StatusOr<Plan> PlanPrefixes(const std::vector<std::span<const int32_t>>& prompts, int block_size) {
  // Node indices, order entries and edge offsets are 32-bit; shared_tokens is int32.
  if (prompts.size() >= kNone / 2) return Status::InvalidArgument("PlanPrefixes: too many prompts");
  for (const auto& p : prompts) {
    if (p.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
      return Status::InvalidArgument("PlanPrefixes: prompt longer than 2^31-1 tokens");
    }
  }
  block_size = std::max(block_size, 1);

  Plan plan;
  if (prompts.empty()) return plan;
  RadixTree tree(prompts);
  for (uint32_t p = 0; p < prompts.size(); ++p) tree.Insert(p);
  tree.Walk(block_size, plan);
  return plan;
}

}  // namespace llmq
