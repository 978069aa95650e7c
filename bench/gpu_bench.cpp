// GPU benchmark table (issue 10): the CUDA backend on random bf16 weights of Llama-3-8B's shape
// (32 layers, hidden 4096, 32 heads over 8 KV heads, intermediate 14336, vocab 128256), made on
// the device. The card's two ceilings are measured first (a device-to-device copy; a large bf16
// cuBLAS product) and every row is given as a share of them.
//
//   gpu_bench [--layers N] [--quick] [--fp8]
//   (--quick: a smaller shape and counts, to check the wiring; --fp8: the projections' weights in
//   FP8 E4M3 with per-channel scales, engine.precision fp8, where the device has FP8)
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "engine/backends/cuda_backend.h"
#include "engine/core/prefix_groups.h"
#include "engine/tools/model_maker.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/cublas_api.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/ops.h"

namespace llmq {
namespace {

using Clock = std::chrono::steady_clock;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

#define CHECK_CUDA(call)                                                      \
  do {                                                                        \
    const cudaError_t e_ = (call);                                            \
    if (e_ != cudaSuccess) {                                                  \
      std::fprintf(stderr, "%s failed: %s\n", #call, cudaGetErrorString(e_)); \
      std::exit(1);                                                           \
    }                                                                         \
  } while (0)
#define CHECK_OK(st)                                                       \
  do {                                                                     \
    const Status s_ = (st);                                                \
    if (!s_.ok()) {                                                        \
      std::fprintf(stderr, "%s failed: %s\n", #st, s_.ToString().c_str()); \
      std::exit(1);                                                        \
    }                                                                      \
  } while (0)

// The median of 10 timed runs of `fn` (after 3 warm-ups), in seconds, by device events.
template <class Fn>
double TimeOnDevice(Fn fn) {
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::vector<double> t;
  for (int i = 0; i < 13; ++i) {
    cudaEventRecord(e0);
    fn();
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms;
    cudaEventElapsedTime(&ms, e0, e1);
    if (i >= 3) t.push_back(ms * 1e-3);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return Median(t);
}

// Bytes read + written per second by cudaMemcpy device to device of `bytes`.
double MeasureBandwidth(size_t bytes) {
  void *a, *b;
  CHECK_CUDA(cudaMalloc(&a, bytes));
  CHECK_CUDA(cudaMalloc(&b, bytes));
  CHECK_CUDA(cudaMemset(a, 1, bytes));
  const double t =
      TimeOnDevice([&] { CHECK_CUDA(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice)); });
  cudaFree(a);
  cudaFree(b);
  return 2.0 * bytes / t;
}

// FLOP/s of an n³ bf16 product (fp32 accumulate) on random data.
double MeasureBf16Peak(int n) {
  using kernels::cuda::bf16;
  bf16 *a, *b, *c;
  const size_t elems = size_t(n) * n;
  CHECK_CUDA(cudaMalloc(&a, elems * 2));
  CHECK_CUDA(cudaMalloc(&b, elems * 2));
  CHECK_CUDA(cudaMalloc(&c, elems * 2));
  CHECK_CUDA(kernels::cuda::FillUniform<bf16>(a, elems, 1.f, 1, nullptr));
  CHECK_CUDA(kernels::cuda::FillUniform<bf16>(b, elems, 1.f, 2, nullptr));
  cublasHandle_t h;
  kernels::cuda::Cublas()->create(&h);
  const float alpha = 1, beta = 0;
  const double t = TimeOnDevice([&] {
    kernels::cuda::Cublas()->gemm_ex(h, CUBLAS_OP_T, CUBLAS_OP_N, n, n, n, &alpha, a, CUDA_R_16BF,
                                     n, b, CUDA_R_16BF, n, &beta, c, CUDA_R_16BF, n,
                                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  });
  kernels::cuda::Cublas()->destroy(h);
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  return 2.0 * n * n * double(n) / t;
}

template <class... A>
std::string Fmt(const char* f, A... v) {
  char buf[96];
  std::snprintf(buf, sizeof buf, f, v...);
  return buf;
}

// The projections' products at the shapes of a decode and a prefill step: cuBLAS (bf16 in, float
// out) and, for one row, the few-rows kernel with 2, 4 and 8 chunks in flight a lane (the
// default, kGemvInFlight, is the first gemv column's); TFLOP/s and the weight bytes' GB/s.
void GemmTable(double bw, double peak) {
  using kernels::cuda::bf16;
  struct Shape {
    int t, k, n;
    const char* what;
  };
  const Shape shapes[] = {
      {1, 4096, 6144, "qkv"},        {1, 4096, 28672, "gate_up"},    {1, 14336, 4096, "down"},
      {1, 4096, 4096, "o"},          {1, 4096, 128256, "lm head"},   {256, 4096, 6144, "qkv"},
      {256, 4096, 28672, "gate_up"}, {256, 14336, 4096, "down"},     {256, 4096, 4096, "o"},
      {8192, 4096, 6144, "qkv"},     {8192, 4096, 28672, "gate_up"}, {8192, 14336, 4096, "down"},
      {8192, 4096, 4096, "o"}};
  cublasHandle_t h;
  kernels::cuda::Cublas()->create(&h);
  std::printf("\n%-8s %6s %6s %7s %12s %10s %12s %10s %22s\n", "gemm", "T", "K", "N", "cublas us",
              "TFLOP/s", "gemv us", "GB/s", "GB/s: 2 / 4 / 8 chunks");
  for (const Shape& s : shapes) {
    bf16 *x, *w;
    float* y;
    CHECK_CUDA(cudaMalloc(&x, size_t(s.t) * s.k * 2));
    CHECK_CUDA(cudaMalloc(&w, size_t(s.n) * s.k * 2));
    CHECK_CUDA(cudaMalloc(&y, size_t(s.t) * s.n * 4));
    CHECK_CUDA(kernels::cuda::FillUniform<bf16>(x, size_t(s.t) * s.k, 1.f, 5, nullptr));
    CHECK_CUDA(kernels::cuda::FillUniform<bf16>(w, size_t(s.n) * s.k, 0.02f, 6, nullptr));
    const double tc =
        TimeOnDevice([&] { kernels::cuda::Gemm<bf16>(h, x, s.t, s.k, w, s.n, y, false); });
    const double flops = 2.0 * s.t * s.k * s.n, wbytes = 2.0 * s.k * s.n;
    double tv = 0;
    std::string by_flight;
    if (kernels::cuda::GemvFits<bf16>(s.t, s.k)) {
      tv = TimeOnDevice([&] { kernels::cuda::Gemv<bf16>(x, s.t, s.k, w, s.n, y, false, nullptr); });
      for (int in_flight : {2, 4, 8}) {
        const double ti = TimeOnDevice(
            [&] { kernels::cuda::Gemv<bf16>(x, s.t, s.k, w, s.n, y, false, nullptr, in_flight); });
        by_flight += Fmt("%s%.1f%%", by_flight.empty() ? "" : " / ", 100 * wbytes / ti / bw);
      }
    }
    std::printf("%-8s %6d %6d %7d %12.1f %9.1f%% %12.1f %9.1f%% %22s\n", s.what, s.t, s.k, s.n,
                tc * 1e6, 100 * flops / tc / peak, tv * 1e6, tv > 0 ? 100 * wbytes / tv / bw : 0.0,
                by_flight.c_str());
    cudaFree(x);
    cudaFree(w);
    cudaFree(y);
  }
  std::printf("(TFLOP/s as %% of the measured bf16 peak; GB/s as %% of the measured bandwidth)\n");
  kernels::cuda::Cublas()->destroy(h);
}

// Sequences over a block pool: seq s's table is `tables[s]`; `len[s]` tokens are in the cache.
struct Batch {
  int bs = 16;
  std::vector<std::vector<int32_t>> tables;
  std::vector<int> len;

  // A step feeding each listed sequence `n` tokens (random ids) from len[s]; logits of last rows.
  StepBatch Step(const std::vector<int>& seqs, int n, int vocab, uint64_t salt) const {
    StepBatch b;
    b.Clear();
    size_t maxb = 0;
    for (int s : seqs) maxb = std::max(maxb, tables[s].size());
    b.max_blocks = static_cast<int>(maxb);
    for (int s : seqs) {
      for (int i = 0; i < n; ++i) {
        const int p = len[s] + i;
        b.token_ids.push_back(static_cast<int32_t>((p * 2654435761u + s * 97 + salt) % vocab));
        b.positions.push_back(p);
        b.slot_mapping.push_back(tables[s][p / bs] * bs + p % bs);
      }
      b.logits_rows.push_back(b.num_tokens() - 1);
      b.query_start.push_back(b.num_tokens());
      b.context_lens.push_back(len[s] + n);
      for (size_t k = 0; k < maxb; ++k)
        b.block_tables.push_back(k < tables[s].size() ? tables[s][k] : -1);
    }
    b.decode_only = n == 1;
    return b;
  }
};

struct Row {
  std::string what, figure, share, target;
};

// Token masks of `rows` rows that allow one token in 64 (nearly every logit is written: the
// kernel's worst case), as a StepMasks computed in advance: a masked step then times what the
// backend adds to it (the words' copy to the device and the kernel), not the grammar.
//   words: [rows, (vocab + 31) / 32]
class SparseMasks final : public StepMasks {
 public:
  SparseMasks(int rows, int vocab) : wpr_((vocab + 31) / 32), words_(size_t(rows) * wpr_, 0u) {
    for (int r = 0; r < rows; ++r)
      for (int t = r % 64; t < vocab; t += 64) words_[size_t(r) * wpr_ + t / 32] |= 1u << (t % 32);
  }
  const uint32_t* Compute() override { return words_.data(); }
  bool computed() const override { return true; }
  int words_per_row() const override { return wpr_; }
  const std::vector<uint32_t>& words() const { return words_; }

 private:
  int wpr_;
  std::vector<uint32_t> words_;
};

// The token-mask kernel alone on [rows, vocab] logits: device time and write bandwidth.
Row MaskKernelRow(int rows, int vocab, double bw) {
  const SparseMasks m(rows, vocab);
  float* logits;
  uint32_t* words;
  const size_t n = size_t(rows) * vocab;
  CHECK_CUDA(cudaMalloc(&logits, n * 4));
  CHECK_CUDA(cudaMalloc(&words, m.words().size() * 4));
  CHECK_CUDA(cudaMemcpy(words, m.words().data(), m.words().size() * 4, cudaMemcpyHostToDevice));
  CHECK_CUDA(kernels::cuda::FillConstant<float>(logits, int64_t(n), 1.f, nullptr));
  const double t = TimeOnDevice([&] {
    CHECK_CUDA(
        kernels::cuda::ApplyTokenBitmask(logits, rows, vocab, words, m.words_per_row(), nullptr));
  });
  cudaFree(logits);
  cudaFree(words);
  const double bytes = n * 4.0 * 63 / 64 + m.words().size() * 4.0;
  return {"token mask kernel, " + std::to_string(rows) + " x " + std::to_string(vocab),
          Fmt("%.1f us", t * 1e6), Fmt("%.1f%% of bandwidth", 100 * bytes / bw / t),
          "a small fraction of a step"};
}

// Timed steps: the median wall time of `reps` calls of ForwardArgmax on `b` (each call uploads
// the metadata, runs every layer and brings back L ids, as a serving step does).
// Then 3 more steps with the phases profiled, printed under `title`.
double TimeStep(CudaBackend& be, const StepBatch& b, int reps, const std::string& title,
                CudaTuning tune = {}, std::map<std::string, double>* phase_ms = nullptr) {
  be.SetTuning(tune);
  std::vector<int32_t> ids(b.logits_rows.size());
  CHECK_OK(be.ForwardArgmax(b, ids.data()));  // warm-up
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    CHECK_OK(be.ForwardArgmax(b, ids.data()));
    t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  tune.profile = true;
  be.SetTuning(tune);
  for (int i = 0; i < 3; ++i) CHECK_OK(be.ForwardArgmax(b, ids.data()));
  std::printf("%s: %.3f ms per step (median of %d); device time per phase:\n%s", title.c_str(),
              Median(t) * 1e3, reps, be.TakeProfile(3, phase_ms).c_str());
  be.SetTuning(CudaTuning{});
  return Median(t);
}

CudaTuning Online() {
  CudaTuning t;
  t.attention_variant = kernels::cuda::kVariantOnline;
  return t;
}

int Main(int argc, char** argv) {
  bool quick = false, fp8 = false;
  int layers = 32;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--quick")) quick = true;
    if (!std::strcmp(argv[i], "--fp8")) fp8 = true;
    if (!std::strcmp(argv[i], "--layers") && i + 1 < argc) layers = std::atoi(argv[++i]);
  }
  if (const Status device = CheckCudaDevice(); !device.ok()) {
    std::printf("gpu_bench: no usable CUDA device (%s); nothing to measure\n",
                device.message().c_str());
    return 0;
  }
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  const double bw = MeasureBandwidth(size_t(quick ? 1 : 4) << 30);
  const double peak = MeasureBf16Peak(quick ? 4096 : 8192);
  std::printf("device: %s, %d SMs; measured copy bandwidth %.2f TB/s, bf16 GEMM %.0f TFLOP/s\n",
              prop.name, prop.multiProcessorCount, bw / 1e12, peak / 1e12);

  GemmTable(bw, peak);

  ModelConfig cfg;
  DType dtype;
  CHECK_OK(ShapeConfig("llama3-8b", &cfg, &dtype));
  if (quick)
    cfg.num_layers = 4;
  else
    cfg.num_layers = layers;
  std::unique_ptr<CudaBackend> be;
  CudaBackendOptions opt;
  if (fp8) {
    if (const Status st = CheckFp8Device(); !st.ok()) {
      std::printf("gpu_bench --fp8: %s; nothing to measure\n", st.message().c_str());
      return 0;
    }
    opt.precision = CudaBackendOptions::Precision::kFp8;
  }
  CHECK_OK(CreateCudaBackendRandom(cfg, opt, 42, &be));
  const int bs = 16, prompts = quick ? 32 : 256, plen = 1024, per_step = 8;
  const int blocks_per_seq = (plen + 64) / bs + 1;
  const int pool = prompts * blocks_per_seq + 2048 / bs + 256 * (256 / bs + 1) + 8;
  CHECK_OK(be->AllocateKv(pool, bs));
  const double kv_token = double(cfg.KvBytesPerToken(2));
  const double embed_bytes = double(cfg.vocab_size) * cfg.hidden_size * 2;
  const double weights_read = double(be->weight_bytes()) - embed_bytes;  // one embedding row
  std::printf(
      "model: Llama-3-8B shape, %d layers, %s weights %.2f GB, KV pool %d blocks (%.1f GB)\n",
      cfg.num_layers, fp8 ? "fp8 (projections) + bf16" : "bf16", be->weight_bytes() / 1e9, pool,
      pool * bs * kv_token / 1e9);
  std::vector<Row> rows;

  // Prefill: `prompts` prompts of 1,024 tokens, 8 prompts (8,192 tokens) per step.
  Batch B;
  B.bs = bs;
  for (int s = 0; s < prompts; ++s) {
    std::vector<int32_t> t;
    for (int k = 0; k < blocks_per_seq; ++k) t.push_back(s * blocks_per_seq + k);
    B.tables.push_back(t);
    B.len.push_back(0);
  }
  {
    std::vector<int32_t> ids(per_step);
    CHECK_OK(be->ForwardArgmax(B.Step({0}, 64, cfg.vocab_size, 0), ids.data()));  // warm-up
    const auto t0 = Clock::now();
    for (int s = 0; s < prompts; s += per_step) {
      std::vector<int> seqs;
      for (int k = s; k < std::min(prompts, s + per_step); ++k) seqs.push_back(k);
      CHECK_OK(be->ForwardArgmax(B.Step(seqs, plen, cfg.vocab_size, 1), ids.data()));
    }
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    const double tokens = double(prompts) * plen;
    const double linear = 2.0 * (weights_read / 2 - double(cfg.vocab_size) * cfg.hidden_size);
    const double attn = 4.0 * cfg.num_layers * cfg.num_heads * cfg.head_dim * (plen + 1) / 2.0;
    const double flops =
        tokens * (linear + attn) + 2.0 * prompts * cfg.vocab_size * cfg.hidden_size;
    rows.push_back({"prefill " + std::to_string(prompts) + " x 1,024 tokens",
                    Fmt("%.0f tok/s", tokens / dt),
                    Fmt("%.1f%% of bf16 peak", 100 * flops / dt / peak), ">= 60%"});
    std::vector<int> first;
    for (int k = 0; k < per_step; ++k) first.push_back(k);
    const StepBatch step = B.Step(first, plen, cfg.vocab_size, 1);
    CudaTuning per_row;
    per_row.prefill_gemm_min_rows = std::numeric_limits<int>::max();
    TimeStep(*be, step, 2, "prefill step of 8 x 1,024, per-row attention", per_row);
    CudaTuning products;
    products.prefill_fused = false;
    TimeStep(*be, step, 2, "prefill step of 8 x 1,024, matrix-product attention", products);
    TimeStep(*be, step, 2, "prefill step of 8 x 1,024");
    for (int s = 0; s < prompts; ++s) B.len[s] = 1000;  // decode rows rewrite positions 1000..
  }
  // Decode at batch 1 and at batch 256 (or all prompts), context 1,000.
  for (int batch : {1, prompts}) {
    std::vector<int> seqs;
    for (int s = 0; s < batch; ++s) seqs.push_back(s);
    const StepBatch step = B.Step(seqs, 1, cfg.vocab_size, 2);
    const std::string title = "decode batch " + std::to_string(batch);
    TimeStep(*be, step, quick ? 5 : 20, title + ", online-softmax attention", Online());
    CudaTuning regs;
    regs.attention_variant = kernels::cuda::kVariantPartition;
    TimeStep(*be, step, quick ? 5 : 20, title + ", partition kernel, loads in registers", regs);
    CudaTuning wide;
    wide.attention_variant = kernels::cuda::kVariantPartitionWide;
    TimeStep(*be, step, quick ? 5 : 20, title + ", partition kernel, 2 keys per group", wide);
    CudaTuning async;
    async.attention_variant = kernels::cuda::kVariantPartitionAsync;
    TimeStep(*be, step, quick ? 5 : 20, title + ", partition kernel, cp.async 2 stages", async);
    async.attention_variant = kernels::cuda::kVariantPartitionAsyncDeep;
    TimeStep(*be, step, quick ? 5 : 20, title + ", partition kernel, cp.async 3 stages", async);
    async.attention_variant = kernels::cuda::kVariantPartitionAsyncHalf;
    TimeStep(*be, step, quick ? 5 : 20, title + ", partition kernel, cp.async, 2 heads a block",
             async);
    async.attention_variant = kernels::cuda::kVariantPartitionMma;
    TimeStep(*be, step, quick ? 5 : 20, title + ", partition kernel, cp.async, tensor cores",
             async);
    async.attention_variant = kernels::cuda::kVariantPartitionMmaStream;
    TimeStep(*be, step, quick ? 5 : 20, title + ", tensor cores, K and V one stream", async);
    async.attention_variant = kernels::cuda::kVariantPartitionMmaDeep;
    TimeStep(*be, step, quick ? 5 : 20, title + ", tensor cores, 4 stages (3 tiles in flight)",
             async);
    CudaTuning tuned;
    tuned.gemm_tuned = true;  // the buckets' products are timed at this row's warm-up step
    TimeStep(*be, step, quick ? 5 : 20, title + ", products through cuBLASLt's fastest", tuned);
    CudaTuning fine;
    fine.min_split_keys = 32;
    TimeStep(*be, step, quick ? 5 : 20, title + ", splits down to 32 keys", fine);
    CudaTuning pdl;
    pdl.pdl = true;
    TimeStep(*be, step, quick ? 5 : 20, title + ", programmatic dependent launch", pdl);
    CudaTuning eager;
    eager.graphs = false;
    TimeStep(*be, step, quick ? 5 : 20, title + ", eager (no CUDA graph)", eager);
    const double t = TimeStep(*be, step, quick ? 5 : 20, title + ", CUDA graph");
    if (batch == 1) {
      const double bytes = weights_read + 1001 * kv_token;
      rows.push_back({"decode batch 1, context 1,000", Fmt("%.1f tok/s", 1 / t),
                      Fmt("%.1f%% of bandwidth roofline", 100 * bytes / bw / t), ">= 80%"});
    } else {
      const double bytes = weights_read + batch * 1001 * kv_token;
      rows.push_back({"decode batch " + std::to_string(batch) + ", context 1,000",
                      Fmt("%.0f tok/s", batch / t),
                      Fmt("%.1f%% of bandwidth roofline", 100 * bytes / bw / t),
                      ">= 18,000 tok/s"});
    }
  }
  // Structured outputs' token masks: the kernel alone, and a decode step of the largest batch
  // with every row masked (the words' copy and the kernel after the graph's replay).
  rows.push_back(MaskKernelRow(prompts, cfg.vocab_size, bw));
  {
    std::vector<int> seqs;
    for (int s = 0; s < prompts; ++s) seqs.push_back(s);
    StepBatch step = B.Step(seqs, 1, cfg.vocab_size, 2);
    const double plain = TimeStep(*be, step, quick ? 5 : 20, "decode, no masks");
    SparseMasks masks(prompts, cfg.vocab_size);
    step.masks = &masks;
    const double masked = TimeStep(*be, step, quick ? 5 : 20, "decode, every row masked");
    rows.push_back({"decode batch " + std::to_string(prompts) + " with token masks",
                    Fmt("%+.3f ms/step", (masked - plain) * 1e3),
                    Fmt("%.2f%% of the step", 100 * (masked - plain) / plain), "< 1%"});
  }
  // Shared prefix: 256 sequences behind one 2,048-token prefix (computed once), decoding.
  {
    const int first = prompts * blocks_per_seq, nseq = quick ? 32 : 256, prefix = 2048;
    Batch P;
    P.bs = bs;
    std::vector<int32_t> shared;
    for (int k = 0; k < prefix / bs; ++k) shared.push_back(first + k);
    for (int s = 0; s < nseq; ++s) {
      std::vector<int32_t> t = shared;
      for (int k = 0; k < 256 / bs + 1; ++k)
        t.push_back(first + prefix / bs + s * (256 / bs + 1) + k);
      P.tables.push_back(t);
      P.len.push_back(0);
    }
    std::vector<int32_t> ids(nseq);
    CHECK_OK(be->ForwardArgmax(P.Step({0}, prefix, cfg.vocab_size, 3), ids.data()));
    for (int s = 0; s < nseq; ++s) P.len[s] = prefix;
    std::vector<int> seqs;
    for (int s = 0; s < nseq; ++s) seqs.push_back(s);
    StepBatch step = P.Step(seqs, 1, cfg.vocab_size, 4);
    step.decode_only = true;
    DetectPrefixGroups(bs, &step);  // the engine's groups: one of nseq over 128 blocks
    std::printf("shared prefix: %zu prefix group(s), the first of %d sequences over %d blocks\n",
                step.prefix_groups.size(),
                step.prefix_groups.empty() ? 0 : step.prefix_groups[0].num_seqs,
                step.prefix_groups.empty() ? 0 : step.prefix_groups[0].num_blocks);
    CudaTuning paged;  // eager too, as cascade steps are: the comparison is the attention's
    paged.cascade = false;
    paged.graphs = false;
    std::map<std::string, double> off_ms, on_ms;
    const double t_off =
        TimeStep(*be, step, quick ? 5 : 20, "shared prefix, paged attention", paged, &off_ms);
    CudaTuning products;  // the shared halves through the matrix products
    products.prefill_fused = false;
    TimeStep(*be, step, quick ? 5 : 20, "shared prefix, cascade on the matrix products", products);
    const double t_on =
        TimeStep(*be, step, quick ? 5 : 20, "shared prefix, cascade attention", {}, &on_ms);
    const double a_off = off_ms["attention"], a_on = on_ms["attention"];
    rows.push_back({"shared prefix: " + std::to_string(nseq) + " seqs behind 2,048 tokens",
                    Fmt("%.2f ms/step", t_on * 1e3),
                    Fmt("cascade vs paged: attention %.2fx, step %.2fx",
                        a_on > 0 ? a_off / a_on : 0.0, t_off / t_on),
                    ">= 3x attention, 1.5x e2e"});
  }

  std::printf("\n%-44s %-16s %-34s %s\n", "row", "measured", "share of the card's limit", "target");
  for (const Row& r : rows)
    std::printf("%-44s %-16s %-34s %s\n", r.what.c_str(), r.figure.c_str(), r.share.c_str(),
                r.target.c_str());
  return 0;
}

}  // namespace
}  // namespace llmq

int main(int argc, char** argv) {
  return llmq::Main(argc, argv);
}
