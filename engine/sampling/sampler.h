// Sampler: turns one sequence's logits into the next token id, and decides when a sequence stops.
// Deterministic: the same logits, params and seed give the same ids on every machine (own RNG,
// no std:: distributions, whose results differ between standard libraries).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/sampling/logprobs.h"

namespace llmq {

struct SamplingParams {
  float temperature = 1.0f;  // 0 = greedy (argmax; ties go to the lowest id)
  int top_k = 0;             // 0 or < 0 = off
  float top_p = 1.0f;        // 1 = off
  float min_p = 0.0f;        // 0 = off; keeps tokens with p >= min_p * p_max
  // Seed of the request's random stream; sample k (of n) draws from an Rng seeded with
  // seed + 0x9E3779B97F4A7C15 * k. Unset: the engine uses DefaultSeed("", request id); the daemon
  // sets DefaultSeed(job id, custom_id) itself, so a rerun of a job samples the same.
  std::optional<uint64_t> seed;
  int max_tokens = 16;
  std::vector<int> stop_token_ids;  // in addition to the model's EOS ids
  std::vector<std::string> stop;    // stop strings; the text is cut before the match
  bool ignore_eos = false;
  // Penalties and biases, applied before temperature in the order engine/sampling/penalties.h
  // states.
  float presence_penalty = 0.0f;    // OpenAI: subtracted once from every generated token's logit
  float frequency_penalty = 0.0f;   // OpenAI: subtracted per occurrence in the completion
  float repetition_penalty = 1.0f;  // vLLM: > 0; 1 = off; over prompt + completion
  std::vector<std::pair<int32_t, float>> logit_bias;  // token id -> added to its logit
  int min_tokens = 0;  // EOS and stop_token_ids are blocked (and stops not checked) before this
  // -1: no log-probabilities; k >= 0: each generated token's log-probability under the raw logits
  // and the k most likely tokens of its position (engine/sampling/logprobs.h).
  int logprobs = -1;
};

// The tokens a sequence holds, as the penalties read them.
struct TokenHistory {
  std::span<const int32_t> prompt;
  std::span<const int32_t> generated;
};

// Small counter-based RNG (splitmix64 stream): reproducible from its seed alone.
class Rng {
 public:
  explicit Rng(uint64_t seed = 0) : state_(seed) {}
  uint64_t NextU64();
  double NextDouble();  // uniform in [0, 1), 53 bits
  // Moves the stream n draws on at once: the next draw is the one n NextU64 calls would have
  // reached (splitmix64's state is a counter), so that a long stream can be cut among threads.
  void Skip(uint64_t n);

 private:
  uint64_t state_;
};

// The seed of a request that did not choose one: portable and stable across builds and machines
// (unlike std::hash). FNV-1a 64 (offset basis 0xcbf29ce484222325, prime 0x100000001b3) over the
// bytes of job_id, one 0 byte, then the bytes of custom_id; then the splitmix64 finalizer
// z = (z ^ z >> 30) * 0xbf58476d1ce4e5b9; z = (z ^ z >> 27) * 0x94d049bb133111eb; z ^ z >> 31.
uint64_t DefaultSeed(std::string_view job_id, std::string_view custom_id);

// Picks the next token from `logits[0, vocab)` under `p`. temperature < 1e-5 (or NaN): greedy
// argmax, ties to the lowest id, no draw (`rng` may be null). Otherwise exactly one
// rng->NextDouble() per call, whatever the logits. Order of filters (as vLLM): temperature
// scaling, top-k, top-p (over the top-k renormalized distribution), min-p, then the draw, walking
// tokens by (probability desc, id asc). NaN logits count as -inf; if none is finite or +inf, the
// result is 0. Arithmetic is in double; sampler.cpp states the exact contract.
// Thread-safe (scratch buffers are thread_local).
// `mask` (here and below): a structured output's token mask, one bit per token in 32-bit words
// (bit id % 32 of word id / 32, kernels::ApplyTokenBitmask's layout); a token whose bit is clear
// is treated as if its logit were -inf, the same result as sampling the row with the mask applied,
// without writing the row (and without reading the logits of a word of 32 refused tokens).
// Null: every token.
int SampleToken(const float* logits, int vocab, const SamplingParams& p, Rng* rng,
                const uint32_t* mask = nullptr);

// True when SampleToken picks the argmax under `p` (temperature < 1e-5 or NaN) and draws nothing.
bool IsGreedy(const SamplingParams& p);

// One logits row's sampling, as a backend may do it on its device (Backend::ForwardSample): the
// filters of SampleTokenWithDraw and the row's draw. The engine draws u from the request's own
// stream before the step, so the ids do not depend on where they are picked.
struct RowSampling {
  float temperature = 0.f;  // < 1e-5 (or NaN): greedy, u unused
  int top_k = 0;            // <= 0: off
  float top_p = 1.f;        // 1: off
  float min_p = 0.f;        // 0: off
  double u = 0.0;           // the row's draw in [0, 1)
};
// `p`'s filters with the draw `u` (greedy rows get temperature 0).
RowSampling ToRowSampling(const SamplingParams& p, double u);
// SampleTokenWithDraw under a RowSampling: the host reference of a device's pick.
int SampleRow(const float* logits, int vocab, const RowSampling& r);
// SampleToken with its draw given: SampleToken(l, v, p, rng) ==
// SampleTokenWithDraw(l, v, p, IsGreedy(p) ? 0 : rng->NextDouble()). The reference of the
// backends that sample on their device (Backend::ForwardSample).
int SampleTokenWithDraw(const float* logits, int vocab, const SamplingParams& p, double u,
                        const uint32_t* mask = nullptr);

// One step of one sequence: applies the penalties and biases of `p` (engine/sampling/penalties.h;
// `eos`: the model's EOS ids) to a copy of the raw row when it has any, then SampleToken. With
// p.logprobs >= 0 and `lp` non-null, *lp gets the chosen token's log-probability and the top
// p.logprobs of the raw row (engine/sampling/logprobs.h). Reads nothing but its arguments: a row's
// result does not depend on the other rows of the batch. Thread-safe.
int SampleNext(const float* logits, int vocab, const SamplingParams& p,
               std::span<const int32_t> eos, const TokenHistory& h, Rng* rng, TokenLogprobs* lp,
               const uint32_t* mask = nullptr);

// Finds the earliest occurrence of any stop string in `text`, considering only matches that end
// after `new_from` (the text released before that was already checked), i.e. start at
// >= new_from - (size - 1). Returns the match's start (the cut point), or npos if none. Byte-wise
// (UTF-8 safe, since a valid stop string only matches at code-point boundaries); empty stop
// strings are ignored.
size_t FindStop(const std::string& text, size_t new_from, const std::vector<std::string>& stops);

// How many trailing bytes of `text` might still be the start of a stop string: the length of the
// longest suffix of `text` that is a proper prefix of some stop string. The caller must hold them
// back from a stream until more text arrives (may split a UTF-8 code point).
size_t StopHoldback(const std::string& text, const std::vector<std::string>& stops);

}  // namespace llmq
