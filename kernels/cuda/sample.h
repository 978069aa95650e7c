// Next-token picking on the device, so that only the ids cross to the host: greedy argmax and
// seeded temperature / top-k / top-p / min-p sampling. CPU counterpart: SampleTokenWithDraw
// (engine/sampling/sampler.h), whose contract this follows:
//   greedy (temperature < 1e-5 or NaN): argmax, NaN as -inf, ties to the lowest id;
//   otherwise candidates in one order (logit descending, id ascending) with weights
//   w = exp((logit - max) / T); top-k keeps the first k; top-p keeps the shortest prefix whose
//   weight reaches top_p x (the top-k set's weight); min-p keeps w >= min_p; the token is the first
//   whose running weight exceeds u x (the kept weight).
// Differences from the CPU, all at the level of rounding: weights are computed in float and summed
// in 44-bit fixed point (so every sum is exact and independent of the order of the threads: the
// same inputs give the same ids on every run), and a token whose weight is below 2^-44 of the
// most likely one's is never a candidate (the CPU's bound is double's underflow). Where the
// running sum crosses a threshold by more than that rounding, the ids are the CPU's.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace llmq::kernels::cuda {

// One row's sampling parameters (the layout of engine/backends/backend.h's RowSampling).
struct SampleParams {
  float temperature = 0.f;  // < 1e-5 or NaN: greedy
  int top_k = 0;            // <= 0 or >= vocab: off
  float top_p = 1.f;        // >= 1: off
  float min_p = 0.f;        // <= 0: off
  double u = 0.0;           // the row's draw in [0, 1)
};

// ids[r] = the token picked from logits[r, :] under params[r]. vocab < 2^20 (else
// cudaErrorInvalidValue: the fixed-point sums would overflow).
//   logits: [n, vocab] float;  params: [n] device;  ids: [n] device
cudaError_t SampleRows(const float* logits, int n, int vocab, const SampleParams* params,
                       int32_t* ids, cudaStream_t stream);

}  // namespace llmq::kernels::cuda
