// One task of PagedAttention (kernels/cpu/attention.h) as its ISA-specific kernels see it. Plain
// data with no inline code: the AVX-512 translation unit includes it (an inline function compiled
// there could become the program's only copy).
#pragma once

#include <cstdint>

namespace llmq::kernels::internal {

// The rows of a task, one kv head. Pair k (< num_rows * group) is query row rows[k / group] with
// query head head * group + k % group.
struct AttendTask {
  // The task's kv head of the layer's cache (attention.h PagedKv): its num_blocks tiles, block b's
  // at b * block_size * head_dim.
  const float* k;       // K [num_blocks, head_dim, block_size] (fp32)
  const float* v;       // V [num_blocks, block_size, head_dim] (fp32)
  const uint16_t* k16;  // the same in bf16 (k, v null), or null
  const uint16_t* v16;
  int block_size;  // tokens per block
  int head_dim;    // D
  int head;        // the kv head of this task
  int group;       // query heads per kv head
  const float* q;  // [T, q_stride], query head h at +h*D
  int64_t q_stride;
  float* out;  // [T, num_heads*D]
  int num_heads;
  float scale;
  int num_rows;
  const int32_t* rows;  // [num_rows] query rows of the step, ascending
  const int32_t* const*
      tables;          // [num_rows] each row's block table (rows of one sequence share it)
  const int32_t* ctx;  // [num_rows] keys each row attends to (its position + 1)
  // Blocks [0, common) of every row's table are the same physical blocks (tables[0]'s), and every
  // row's ctx >= common * block_size: the keys all rows of the task meet together.
  int common;
  float* scores;   // scratch [num_rows*group, stride]: a pair's scores, then its e[j]
  int64_t stride;  // >= every row's ctx rounded up to a multiple of 16 and of block_size
  float* sums;     // scratch [num_rows*group]
};

// The task's outputs, by the arithmetic of attention.h. The vector kernels need block_size and
// head_dim multiples of 16 (attention_tile.h); the scalar one takes any shape.
void AttendAvx512(const AttendTask& t);  // attention_avx512.cpp, AVX-512F CPUs only
void AttendAvx2(const AttendTask& t);    // attention.cpp
void AttendScalar(const AttendTask& t);  // attention.cpp

}  // namespace llmq::kernels::internal
