// The vector kernel of one PagedAttention task (attention_task.h), written once over a 16-float
// vector type and compiled twice: attention.cpp with AVX2 (a vector is two ymm), and
// attention_avx512.cpp with AVX-512 (one zmm). The includer includes kernels/cpu/exp.h, defines
// the traits class V and then includes this file inside an anonymous namespace: everything here
// has internal linkage and uses no standard-library code (see attention_task.h). Both TUs are built
// with -ffp-contract=off, so the only fused multiply-adds are the V::Fma written here: the
// arithmetic is attention.h's, lane for lane the same as AttendScalar's.
//
// V provides: Vec (16 floats); Zero, Load, Store (unaligned), LoadBf16 (16 bf16 widened to fp32,
// exact), Bcast, Fma(a, b, c) = a*b + c
// rounded once, Mul, Add, Sub, Max(a, b) = a > b ? a : b, Min(a, b) = a < b ? a : b, per lane;
// Pow2(n) = 2^n for integral n in [-126, 127]; kRegs (vector registers of the ISA) and kWidth
// (registers per Vec), which size the register tiles below.
//
// A task's work, for its P = rows x group (query row, query head) pairs:
//   1. scores: register tiles of M pairs x B 16-key chunks (one K row vector per chunk per head
//      dimension, broadcast query elements): first the `common` blocks for all pairs, then each
//      sequence's (run of rows sharing a table) further keys up to its longest row (scores past a
//      row's ctx are computed and never read);
//   2. per pair: max, e[j] = exp(s[j] - m) in place, the 16 lane sums;
//   3. values: register tiles of M pairs x 16*DV head dims over the keys every pair of the tile
//      has (the common blocks, then a sequence's keys up to its tile's shortest row), then each
//      pair's remaining keys alone; then out *= 1 / sum.

// attention.h's exp (kernels/cpu/exp.h, r*r rounded first): inputs clamped to [-87, 88], NaN
// becomes -87. The scalar form serves the keys past the last full 16 and AttendScalar; Scalar has
// internal linkage, like everything here.
struct Scalar : ScalarOps<Scalar> {
  static float Fma(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
};
inline float ExpScalar(float x) {
  x = x > kExpLo ? x : kExpLo;
  x = x < kExpHi ? x : kExpHi;
  return ExpInRange<Scalar, ExpLastStep::kSquareR>(x);
}

template <class V>
inline typename V::Vec ExpVec(typename V::Vec x) {
  x = V::Max(x, V::Bcast(kExpLo));
  x = V::Min(x, V::Bcast(kExpHi));
  return ExpInRange<V, ExpLastStep::kSquareR>(x);
}

constexpr int MinInt(int a, int b) {
  return a < b ? a : b;
}

// The ISA's traits with the cache's element type: Kv, the K and V caches of a task (KCache,
// VCache) and LoadKv, 16 of them as fp32. AttendVector is instantiated once per element type.
template <class Isa>
struct F32Cache : Isa {
  using Kv = float;
  static const Kv* KCache(const AttendTask& t) { return t.k; }
  static const Kv* VCache(const AttendTask& t) { return t.v; }
  static typename Isa::Vec LoadKv(const Kv* p) { return Isa::Load(p); }
};
template <class Isa>
struct Bf16Cache : Isa {
  using Kv = uint16_t;
  static const Kv* KCache(const AttendTask& t) { return t.k16; }
  static const Kv* VCache(const AttendTask& t) { return t.v16; }
  static typename Isa::Vec LoadKv(const Kv* p) { return Isa::LoadBf16(p); }
};

// The pairs of a tile: their query vectors, score rows and outputs.
inline const float* PairQ(const AttendTask& t, int k) {
  const int row = t.rows[k / t.group], hq = t.head * t.group + k % t.group;
  return t.q + row * t.q_stride + static_cast<int64_t>(hq) * t.head_dim;
}
inline float* PairOut(const AttendTask& t, int k) {
  const int row = t.rows[k / t.group], hq = t.head * t.group + k % t.group;
  return t.out + (static_cast<int64_t>(row) * t.num_heads + hq) * t.head_dim;
}
inline float* PairScores(const AttendTask& t, int k) {
  return t.scores + k * t.stride;
}
inline int PairCtx(const AttendTask& t, int k) {
  return t.ctx[k / t.group];
}

// ---- 1. scores -------------------------------------------------------------------------------

// Chunks of 16 keys per score tile for M pairs: the M x B accumulators, B K vectors and one
// broadcast fit the registers; for one pair, its B accumulators, the broadcast and the one K vector
// in use (ScoreTile loads each just before its FMA), so that a decode row has enough chains.
template <class V, int M>
constexpr int QkChunks() {
  return M == 1 ? MinInt(8, (V::kRegs - 1 - V::kWidth) / V::kWidth)
                : MinInt(8, (V::kRegs - 1) / ((M + 1) * V::kWidth));
}

// s[p][16c .. 16c+16) for the M pairs starting at pair k0 and the B chunks starting at chunk c0 of
// `table` (chunk c: keys 16c.., in block 16c / block_size).
template <class V, int M, int B>
void ScoreTile(const AttendTask& t, int k0, const int32_t* table, int c0) {
  using Vec = typename V::Vec;
  const int d = t.head_dim, bs = t.block_size;
  const typename V::Kv* kt[B];
  for (int c = 0; c < B; ++c) {
    const int key = (c0 + c) * 16;
    kt[c] = V::KCache(t) + static_cast<int64_t>(table[key / bs]) * bs * d + key % bs;
  }
  const float* q[M];
  for (int p = 0; p < M; ++p) q[p] = PairQ(t, k0 + p);
  Vec acc[M][B];
#pragma GCC unroll 16
  for (int p = 0; p < M; ++p)
#pragma GCC unroll 8
    for (int c = 0; c < B; ++c) acc[p][c] = V::Zero();
  for (int i = 0; i < d; ++i) {
    if constexpr (M == 1) {
      const Vec qi = V::Bcast(q[0][i]);
#pragma GCC unroll 8
      for (int c = 0; c < B; ++c)
        acc[0][c] = V::Fma(qi, V::LoadKv(kt[c] + static_cast<int64_t>(i) * bs), acc[0][c]);
      continue;
    }
    Vec kv[B];
#pragma GCC unroll 8
    for (int c = 0; c < B; ++c) kv[c] = V::LoadKv(kt[c] + static_cast<int64_t>(i) * bs);
#pragma GCC unroll 16
    for (int p = 0; p < M; ++p) {
      const Vec qi = V::Bcast(q[p][i]);
#pragma GCC unroll 8
      for (int c = 0; c < B; ++c) acc[p][c] = V::Fma(qi, kv[c], acc[p][c]);
    }
  }
  const Vec scale = V::Bcast(t.scale);
#pragma GCC unroll 16
  for (int p = 0; p < M; ++p) {
    float* s = PairScores(t, k0 + p) + c0 * 16;
#pragma GCC unroll 8
    for (int c = 0; c < B; ++c) V::Store(s + 16 * c, V::Mul(acc[p][c], scale));
  }
}

// Chunks [c0, c1): tiles of B chunks, the rest in tiles of B/2, B/4, ... chunks.
template <class V, int M, int B = QkChunks<V, M>()>
void ScorePairs(const AttendTask& t, int k0, const int32_t* table, int c0, int c1) {
  int c = c0;
  for (; c + B <= c1; c += B) ScoreTile<V, M, B>(t, k0, table, c);
  if constexpr (B > 1) ScorePairs<V, M, B / 2>(t, k0, table, c, c1);
}

// M (1..V::kQkMaxM) chosen at run time.
template <class V, int M = V::kQkMaxM>
void ScorePairsN(int m, const AttendTask& t, int k0, const int32_t* table, int c0, int c1) {
  if constexpr (M >= 1) {
    if (m == M) return ScorePairs<V, M>(t, k0, table, c0, c1);
    ScorePairsN<V, M - 1>(m, t, k0, table, c0, c1);
  }
}

// Chunks [c0, c1) of `table` for pairs [k0, k1).
template <class V>
void Scores(const AttendTask& t, int k0, int k1, const int32_t* table, int c0, int c1) {
  if (c0 >= c1) return;
  for (int k = k0; k < k1; k += V::kQkMaxM)
    ScorePairsN<V>(MinInt(V::kQkMaxM, k1 - k), t, k, table, c0, c1);
}

// ---- 2. softmax ------------------------------------------------------------------------------

// s[0, ctx) becomes e[j]; returns the sum, by attention.h's lane order.
template <class V>
float SoftmaxRow(float* s, int ctx) {
  using Vec = typename V::Vec;
  const int full = ctx / 16 * 16;
  float lanes[16];
  Vec mv = V::Bcast(-__builtin_inff());
  for (int j = 0; j < full; j += 16) mv = V::Max(V::Load(s + j), mv);
  V::Store(lanes, mv);
  float m = -__builtin_inff();
  for (int l = 0; l < 16; ++l) m = lanes[l] > m ? lanes[l] : m;
  for (int j = full; j < ctx; ++j) m = s[j] > m ? s[j] : m;
  const Vec mb = V::Bcast(m);
  Vec sum = V::Zero();
  for (int j = 0; j < full; j += 16) {
    const Vec e = ExpVec<V>(V::Sub(V::Load(s + j), mb));
    V::Store(s + j, e);
    sum = V::Add(sum, e);
  }
  V::Store(lanes, sum);
  for (int j = full; j < ctx; ++j) {
    s[j] = ExpScalar(s[j] - m);
    lanes[j - full] += s[j];
  }
  for (int w = 8; w >= 1; w /= 2)
    for (int l = 0; l < w; ++l) lanes[l] += lanes[l + w];
  return lanes[0];
}

// ---- 3. values -------------------------------------------------------------------------------

// Pairs per value tile of DV vectors of head dims: M x DV accumulators, DV V vectors and one
// broadcast fit the registers.
template <class V, int DV>
constexpr int PvPairs() {
  return MinInt(V::kPvMaxM, (V::kRegs - 1 - DV * V::kWidth) / (DV * V::kWidth));
}

// out[p][dim0, dim0 + 16*DV) += e[p][j] * V[j][dim0 ..] for keys j in [j0, j1) of `table`, in
// order of j, for the M pairs starting at k0.
template <class V, int M, int DV>
void ValueTile(const AttendTask& t, int k0, const int32_t* table, int j0, int j1, int dim0) {
  using Vec = typename V::Vec;
  const int d = t.head_dim, bs = t.block_size;
  float* o[M];
  const float* e[M];
  for (int p = 0; p < M; ++p) {
    o[p] = PairOut(t, k0 + p) + dim0;
    e[p] = PairScores(t, k0 + p);
  }
  Vec acc[M][DV];
#pragma GCC unroll 16
  for (int p = 0; p < M; ++p)
#pragma GCC unroll 4
    for (int c = 0; c < DV; ++c) acc[p][c] = V::Load(o[p] + 16 * c);
  for (int j = j0; j < j1;) {
    const int block = j / bs, end = MinInt(j1, (block + 1) * bs);
    const typename V::Kv* vb = V::VCache(t) + static_cast<int64_t>(table[block]) * bs * d +
                               static_cast<int64_t>(j - block * bs) * d + dim0;
    for (; j < end; ++j, vb += d) {
      if constexpr (M == 1) {  // its V vectors loaded as used: DV accumulators, DV > kPvDV
        const Vec ej = V::Bcast(e[0][j]);
#pragma GCC unroll 4
        for (int c = 0; c < DV; ++c) acc[0][c] = V::Fma(ej, V::LoadKv(vb + 16 * c), acc[0][c]);
        continue;
      }
      Vec vv[DV];
#pragma GCC unroll 4
      for (int c = 0; c < DV; ++c) vv[c] = V::LoadKv(vb + 16 * c);
#pragma GCC unroll 16
      for (int p = 0; p < M; ++p) {
        const Vec ej = V::Bcast(e[p][j]);
#pragma GCC unroll 4
        for (int c = 0; c < DV; ++c) acc[p][c] = V::Fma(ej, vv[c], acc[p][c]);
      }
    }
  }
#pragma GCC unroll 16
  for (int p = 0; p < M; ++p)
#pragma GCC unroll 4
    for (int c = 0; c < DV; ++c) V::Store(o[p] + 16 * c, acc[p][c]);
}

template <class V, int DV, int M = PvPairs<V, DV>()>
void ValueTileN(int m, const AttendTask& t, int k0, const int32_t* table, int j0, int j1,
                int dim0) {
  if constexpr (M >= 1) {
    if (m == M) return ValueTile<V, M, DV>(t, k0, table, j0, j1, dim0);
    ValueTileN<V, DV, M - 1>(m, t, k0, table, j0, j1, dim0);
  }
}

// Keys [j0, j1) of `table` for pairs [k0, k1), every head dim: 16*kPvDV dims at a time, the
// rest 16 at a time.
template <class V>
void Values(const AttendTask& t, int k0, int k1, const int32_t* table, int j0, int j1) {
  if (j0 >= j1) return;
  // One pair (a decode row's own keys, a prefill row's last few): 64 head dims per pass, so that
  // its chains (4 x kWidth of them) cover the FMA latency.
  if (k1 - k0 == 1 && t.head_dim % 64 == 0) {
    for (int dim = 0; dim < t.head_dim; dim += 64) ValueTile<V, 1, 4>(t, k0, table, j0, j1, dim);
    return;
  }
  constexpr int DV = V::kPvDV, M = PvPairs<V, DV>(), M1 = PvPairs<V, 1>();
  int dim = 0;
  for (; dim + 16 * DV <= t.head_dim; dim += 16 * DV)
    for (int k = k0; k < k1; k += M) ValueTileN<V, DV>(MinInt(M, k1 - k), t, k, table, j0, j1, dim);
  for (; dim < t.head_dim; dim += 16)
    for (int k = k0; k < k1; k += M1)
      ValueTileN<V, 1>(MinInt(M1, k1 - k), t, k, table, j0, j1, dim);
}

// ---- the task --------------------------------------------------------------------------------

// The end of the run of rows from r0 on that share r0's table (one sequence's rows).
inline int RunEnd(const AttendTask& t, int r0) {
  int r1 = r0 + 1;
  while (r1 < t.num_rows && t.tables[r1] == t.tables[r0]) ++r1;
  return r1;
}

template <class V>
void AttendVector(const AttendTask& t) {
  const int G = t.group, P = t.num_rows * G;
  const int common_keys = t.common * t.block_size;  // <= every row's ctx
  // 1. Scores: the common blocks for all pairs, then each run of rows sharing a table, up to its
  // longest row.
  Scores<V>(t, 0, P, t.tables[0], 0, common_keys / 16);
  for (int r0 = 0, r1; r0 < t.num_rows; r0 = r1) {
    r1 = RunEnd(t, r0);
    int longest = 0;
    for (int r = r0; r < r1; ++r) longest = longest > t.ctx[r] ? longest : t.ctx[r];
    Scores<V>(t, r0 * G, r1 * G, t.tables[r0], common_keys / 16, (longest + 15) / 16);
  }
  // 2. Softmax of each pair; its output starts from +0.
  for (int k = 0; k < P; ++k) {
    t.sums[k] = SoftmaxRow<V>(PairScores(t, k), PairCtx(t, k));
    float* o = PairOut(t, k);
    for (int i = 0; i < t.head_dim; i += 16) V::Store(o + i, V::Zero());
  }
  // 3. Values: the common keys for all pairs, then per run, tiles of pairs over the keys all of
  // them have (up to the tile's shortest ctx), then each pair's own rest. Each output's chain
  // still runs over its keys in order: common, tile, rest.
  Values<V>(t, 0, P, t.tables[0], 0, common_keys);
  constexpr int M = PvPairs<V, V::kPvDV>();
  for (int r0 = 0, r1; r0 < t.num_rows; r0 = r1) {
    r1 = RunEnd(t, r0);
    for (int k = r0 * G; k < r1 * G; k += M) {
      const int k1 = MinInt(k + M, r1 * G);
      int shortest = PairCtx(t, k);
      for (int kk = k + 1; kk < k1; ++kk) shortest = MinInt(shortest, PairCtx(t, kk));
      Values<V>(t, k, k1, t.tables[r0], common_keys, shortest);
      for (int kk = k; kk < k1; ++kk)
        Values<V>(t, kk, kk + 1, t.tables[r0], shortest, PairCtx(t, kk));
    }
  }
  for (int k = 0; k < P; ++k) {
    const typename V::Vec inv = V::Bcast(1.0f / t.sums[k]);
    float* o = PairOut(t, k);
    for (int i = 0; i < t.head_dim; i += 16) V::Store(o + i, V::Mul(V::Load(o + i), inv));
  }
}

// The task on `Isa`, whichever type its cache holds.
template <class Isa>
void AttendOn(const AttendTask& t) {
  if (t.k16 != nullptr) {
    AttendVector<Bf16Cache<Isa>>(t);
  } else {
    AttendVector<F32Cache<Isa>>(t);
  }
}
