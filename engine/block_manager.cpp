#include "engine/block_manager.h"

namespace llmq {

BlockManager::BlockManager(int num_blocks, int block_size)
    : num_blocks_(num_blocks), block_size_(block_size) {
  free_.reserve(num_blocks);
  for (int b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

bool BlockManager::Reserve(Sequence* seq, int tokens) {
  const int need = BlocksFor(tokens, block_size_) - static_cast<int>(seq->block_table.size());
  if (need <= 0) return true;
  if (need > num_free()) return false;
  for (int i = 0; i < need; ++i) {
    seq->block_table.push_back(free_.back());
    free_.pop_back();
  }
  return true;
}

void BlockManager::Release(Sequence* seq) {
  for (auto it = seq->block_table.rbegin(); it != seq->block_table.rend(); ++it)
    free_.push_back(*it);
  seq->block_table.clear();
}

}  // namespace llmq
