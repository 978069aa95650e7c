#include "engine/core/prefix_groups.h"

#include <algorithm>
#include <unordered_map>

namespace llmq {

void DetectPrefixGroups(int block_size, StepBatch* b) {
  b->prefix_groups.clear();
  const int S = b->num_seqs();
  if (S < 2 || b->max_blocks == 0) return;
  // shareable[s]: leading blocks of seq s wholly before its first query row (its computed
  // context, in whole blocks).
  std::vector<int32_t> shareable(S);
  for (int s = 0; s < S; ++s) {
    const int32_t computed = b->context_lens[s] - (b->query_start[s + 1] - b->query_start[s]);
    shareable[s] = std::min(computed / block_size, b->max_blocks);
  }
  // common[s]: leading blocks seqs s and s + 1 share, [S - 1]. A run's shared prefix is the least
  // `common` inside it (block tables sharing a prefix with two neighbours share it with both).
  std::vector<int32_t> common(S - 1);
  for (int s = 0; s + 1 < S; ++s) {
    const int32_t* x = &b->block_tables[static_cast<size_t>(s) * b->max_blocks];
    const int32_t* y = x + b->max_blocks;
    const int32_t n = std::min(shareable[s], shareable[s + 1]);
    int32_t k = 0;
    while (k < n && x[k] == y[k]) ++k;
    common[s] = k;
  }
  // plateau[p]: the first index of the run of equal values of `common` that holds index p.
  std::vector<int32_t> plateau(S - 1);
  for (int p = 0; p + 1 < S; ++p)
    plateau[p] = p > 0 && common[p - 1] == common[p] ? plateau[p - 1] : p;
  // best[j]: the most block reads saved among the first j seqs; start[j]: where the last run of
  // that partition starts (j - 1: seq j - 1 alone). The run [i, j) saves (j - 1 - i) x its
  // shared blocks, the least of common[i .. j - 2], plus best[i].
  std::vector<int64_t> best(S + 1, 0);
  std::vector<int32_t> start(S + 1, 0);
  for (int j = 1; j <= S; ++j) {
    best[j] = best[j - 1];
    start[j] = j - 1;
    auto consider = [&](int i, int32_t shared) {
      const int64_t gain = best[i] + int64_t{j - 1 - i} * shared;
      if (gain >= best[j]) {  // ties to the longer run
        best[j] = gain;
        start[j] = i;
      }
    };
    // The runs [i, j), longer as i falls, a plateau of `common` at a time: within one, every i
    // has the same shared blocks.
    int32_t shared = b->max_blocks;
    for (int top = j - 2; top >= 0;) {
      const int p0 = plateau[top];
      shared = std::min(shared, common[top]);
      if (shared == 0) break;
      if (shared == common[top]) {
        // This plateau sets the shared blocks. Then i beats i + 1 (or ties, which go to i): the
        // first i seqs save at least best[i + 1] - common[i - 1] (seq i taken out of its run of
        // best[i + 1] loses at most that run's shared blocks, which are at most common[i - 1]),
        // and the run [i, j) saves `shared` = common[i - 1] more than [i + 1, j). Only the two
        // lowest i of the plateau remain (the lowest's common[i - 1] lies outside it).
        if (p0 + 1 <= top) consider(p0 + 1, shared);
        consider(p0, shared);
      } else {
        for (int i = top; i >= p0; --i) consider(i, shared);
      }
      top = p0 - 1;
    }
  }
  for (int j = S; j > 0; j = start[j]) {
    const int i = start[j];
    if (j - i < 2) continue;
    const int32_t shared = *std::min_element(common.begin() + i, common.begin() + j - 1);
    b->prefix_groups.push_back({i, j - i, shared});
  }
  std::reverse(b->prefix_groups.begin(), b->prefix_groups.end());
}

void OrderBySharedFirstBlock(const std::vector<int32_t>& first_block,
                             const std::vector<int32_t>& num_tokens, std::vector<int32_t>* order) {
  const int n = static_cast<int>(first_block.size());
  order->resize(n);
  for (int i = 0; i < n; ++i) (*order)[i] = i;
  int decodes = 0;
  while (decodes < n && num_tokens[decodes] == 1) ++decodes;
  // rank[i]: the first decode entry with entry i's first block; sorting by it (stably) keeps the
  // order of first appearance and puts each block's entries together.
  std::vector<int32_t> rank(decodes);
  std::unordered_map<int32_t, int32_t> first_with;
  bool moves = false;
  for (int i = 0; i < decodes; ++i) {
    if (first_block[i] < 0) {
      rank[i] = i;
      continue;
    }
    const auto [it, fresh] = first_with.emplace(first_block[i], i);
    rank[i] = it->second;
    // An entry joining a block seen before, right after another block's entry, must move.
    moves = moves || (!fresh && first_block[i - 1] != first_block[i]);
  }
  if (!moves) return;
  std::stable_sort(order->begin(), order->begin() + decodes,
                   [&rank](int32_t a, int32_t b) { return rank[a] < rank[b]; });
}

}  // namespace llmq
