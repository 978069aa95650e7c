#include "tests/reference_forward.h"

#include <algorithm>
#include <cmath>

namespace llmq::testing {
namespace {

using Vec = std::vector<double>;

struct Mat {  // [rows, cols] row-major, HF [out, in]
  int rows = 0, cols = 0;
  Vec v;
};

Mat Load(const Weights& w, const std::string& name) {
  const TensorView& t = w.Get(name);
  Mat m;
  m.rows = static_cast<int>(t.shape[0]);
  m.cols = t.shape.size() > 1 ? static_cast<int>(t.shape[1]) : 1;
  const std::vector<float> f = w.ToF32(name);
  m.v.assign(f.begin(), f.end());
  return m;
}

Vec MatVec(const Mat& m, const Vec& x) {  // y = W x
  Vec y(m.rows, 0.0);
  for (int r = 0; r < m.rows; ++r) {
    double s = 0;
    for (int c = 0; c < m.cols; ++c) s += m.v[static_cast<size_t>(r) * m.cols + c] * x[c];
    y[r] = s;
  }
  return y;
}

Vec RmsNorm(const Vec& x, const Mat& w, double eps) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double inv = 1.0 / std::sqrt(ss / x.size() + eps);
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = w.v[i] * x[i] * inv;
  return y;
}

// RmsNorm of one head's d values in place.
void NormHead(double* x, int d, const Mat& w, double eps) {
  const Vec y = RmsNorm(Vec(x, x + d), w, eps);
  std::copy(y.begin(), y.end(), x);
}

// rotate_half: out = x * cos + rotate_half(x) * sin, rotate_half(x) = (-x2, x1).
void Rope(double* x, int d, int pos, const std::vector<double>& inv_freq) {
  const int half = d / 2;
  for (int i = 0; i < half; ++i) {
    const double a = x[i], b = x[i + half];
    const double c = std::cos(pos * inv_freq[i]), s = std::sin(pos * inv_freq[i]);
    x[i] = a * c - b * s;
    x[i + half] = b * c + a * s;
  }
}

}  // namespace

std::vector<std::vector<double>> ReferenceLogits(const ModelConfig& cfg, const Weights& w,
                                                 const std::vector<int>& tokens) {
  const int H = cfg.hidden_size, D = cfg.head_dim, nh = cfg.num_heads, nkv = cfg.num_kv_heads;
  const std::vector<double> inv_freq = cfg.RopeInvFreq();
  const Mat embed = Load(w, "model.embed_tokens.weight");
  const Mat head =
      Load(w, cfg.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight");
  const Mat final_norm = Load(w, "model.norm.weight");
  struct Layer {
    Mat in_norm, post_norm, q, k, v, o, gate, up, down;
    Mat q_bias, k_bias, v_bias;  // [heads*D], [kv_heads*D], [kv_heads*D] (Qwen2); else empty
    Mat q_norm, k_norm;          // [D] each (Qwen3); else empty
  };
  std::vector<Layer> layers(cfg.num_layers);
  for (int l = 0; l < cfg.num_layers; ++l) {
    auto g = [&](const char* s) { return Load(w, LayerTensorName(l, s)); };
    layers[l] = {g("input_layernorm.weight"),
                 g("post_attention_layernorm.weight"),
                 g("self_attn.q_proj.weight"),
                 g("self_attn.k_proj.weight"),
                 g("self_attn.v_proj.weight"),
                 g("self_attn.o_proj.weight"),
                 g("mlp.gate_proj.weight"),
                 g("mlp.up_proj.weight"),
                 g("mlp.down_proj.weight"),
                 {},
                 {},
                 {},
                 {},
                 {}};
    if (cfg.qkv_bias) {
      layers[l].q_bias = g("self_attn.q_proj.bias");
      layers[l].k_bias = g("self_attn.k_proj.bias");
      layers[l].v_bias = g("self_attn.v_proj.bias");
    }
    if (cfg.qk_norm) {
      layers[l].q_norm = g("self_attn.q_norm.weight");
      layers[l].k_norm = g("self_attn.k_norm.weight");
    }
  }
  // Contiguous cache: keys[l][pos] = [nkv * D].
  std::vector<std::vector<Vec>> keys(cfg.num_layers), values(cfg.num_layers);
  std::vector<std::vector<double>> all_logits;
  for (size_t pos = 0; pos < tokens.size(); ++pos) {
    Vec x(embed.v.begin() + static_cast<size_t>(tokens[pos]) * H,
          embed.v.begin() + static_cast<size_t>(tokens[pos] + 1) * H);
    for (int l = 0; l < cfg.num_layers; ++l) {
      const Layer& L = layers[l];
      const Vec xn = RmsNorm(x, L.in_norm, cfg.rms_norm_eps);
      Vec q = MatVec(L.q, xn), k = MatVec(L.k, xn), v = MatVec(L.v, xn);
      if (cfg.qkv_bias) {  // nn.Linear(bias=True): W x + b
        for (size_t i = 0; i < q.size(); ++i) q[i] += L.q_bias.v[i];
        for (size_t i = 0; i < k.size(); ++i) k[i] += L.k_bias.v[i];
        for (size_t i = 0; i < v.size(); ++i) v[i] += L.v_bias.v[i];
      }
      if (cfg.qk_norm) {  // Qwen3: RMSNorm over each head's D values, before RoPE
        for (int h = 0; h < nh; ++h) NormHead(&q[h * D], D, L.q_norm, cfg.rms_norm_eps);
        for (int h = 0; h < nkv; ++h) NormHead(&k[h * D], D, L.k_norm, cfg.rms_norm_eps);
      }
      for (int h = 0; h < nh; ++h) Rope(&q[h * D], D, static_cast<int>(pos), inv_freq);
      for (int h = 0; h < nkv; ++h) Rope(&k[h * D], D, static_cast<int>(pos), inv_freq);
      keys[l].push_back(k);
      values[l].push_back(v);
      Vec attn(static_cast<size_t>(nh) * D, 0.0);
      for (int h = 0; h < nh; ++h) {
        const int kvh = h / (nh / nkv);
        Vec scores(pos + 1);
        double m = -INFINITY;
        for (size_t j = 0; j <= pos; ++j) {
          double s = 0;
          for (int i = 0; i < D; ++i) s += q[h * D + i] * keys[l][j][kvh * D + i];
          scores[j] = s / std::sqrt(static_cast<double>(D));
          m = std::max(m, scores[j]);
        }
        double sum = 0;
        for (double& s : scores) sum += (s = std::exp(s - m));
        for (size_t j = 0; j <= pos; ++j)
          for (int i = 0; i < D; ++i)
            attn[h * D + i] += scores[j] / sum * values[l][j][kvh * D + i];
      }
      const Vec o = MatVec(L.o, attn);
      for (int i = 0; i < H; ++i) x[i] += o[i];
      const Vec xn2 = RmsNorm(x, L.post_norm, cfg.rms_norm_eps);
      const Vec g = MatVec(L.gate, xn2), u = MatVec(L.up, xn2);
      Vec act(g.size());
      for (size_t i = 0; i < g.size(); ++i) act[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
      const Vec d = MatVec(L.down, act);
      for (int i = 0; i < H; ++i) x[i] += d[i];
    }
    all_logits.push_back(MatVec(head, RmsNorm(x, final_norm, cfg.rms_norm_eps)));
  }
  return all_logits;
}

std::vector<float> ForwardOneSequence(Backend& be, const std::vector<int>& tokens, int begin,
                                      int end, const std::vector<int32_t>& table, int block_size,
                                      int vocab) {
  StepBatch b;
  b.Clear();
  for (int p = begin; p < end; ++p) {
    b.token_ids.push_back(tokens[p]);
    b.positions.push_back(p);
    b.slot_mapping.push_back(table[p / block_size] * block_size + p % block_size);
    b.logits_rows.push_back(p - begin);
  }
  b.query_start.push_back(end - begin);
  b.context_lens.push_back(end);
  b.block_tables = table;
  b.max_blocks = static_cast<int32_t>(table.size());
  std::vector<float> logits(static_cast<size_t>(end - begin) * vocab);
  const Status st = be.Forward(b, logits.data());
  LLMQ_CHECK(st.ok());
  return logits;
}

double RelativeError(const float* a, const std::vector<double>& b) {
  double max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    max_diff = std::max(max_diff, std::abs(a[i] - b[i]));
    max_ref = std::max(max_ref, std::abs(b[i]));
  }
  return max_diff / std::max(max_ref, 1e-30);
}

}  // namespace llmq::testing
