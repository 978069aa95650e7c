// StepProfile: where an engine's time goes, summed over its steps, for `llmq run --profile` and
// bench/run_bench. The engine times its phases (planning and scheduling, the forward pass,
// sampling); a backend that is given the profile (Backend::set_profile) splits its forward pass
// further (the CPU backend: GEMMs of steps with prefill tokens, GEMMs of decode-only steps,
// attention; the CUDA backend: each step's span on the device). A few clock reads per step and per
// layer (two CUDA events per step): cheap, but off unless asked for.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace llmq {

struct StepProfile {
  int64_t steps = 0;
  double schedule_s = 0;      // planning the window, admitting, scheduling (LlmEngine::Step)
  double forward_s = 0;       // block copies, building the batch and Backend::Forward
  double sample_s = 0;        // sampling, stop checks, finishing requests
  double prefill_gemm_s = 0;  // in the forward: GEMMs of steps that carry prefill tokens
  double decode_gemm_s = 0;   // GEMMs of decode-only steps
  double attention_s = 0;     // writing K/V and paged attention
  double masks_s = 0;         // in the forward: structured outputs' token masks (GrammarMasks)
  // A GPU backend's: each step's span on the device, from its first work there to its result's
  // copy back (the CUDA backend's events). The engine's time (schedule + forward + sample) less
  // this is the time the device sat idle between steps, waiting for the host.
  double device_s = 0;

  // (name, seconds) rows: the phases above (masks only in a step that had some), and the
  // forward's rest ("other forward ops") when the backend split it.
  std::vector<std::pair<std::string, double>> Rows() const {
    std::vector<std::pair<std::string, double>> r = {
        {"schedule", schedule_s},       {"forward", forward_s},
        {"sample", sample_s},           {"prefill_gemm", prefill_gemm_s},
        {"decode_gemm", decode_gemm_s}, {"attention", attention_s}};
    if (masks_s > 0) r.push_back({"masks", masks_s});
    if (device_s > 0) r.push_back({"device", device_s});
    if (prefill_gemm_s + decode_gemm_s + attention_s > 0)
      r.push_back(
          {"other_forward", forward_s - prefill_gemm_s - decode_gemm_s - attention_s - masks_s});
    return r;
  }
};

// Adds the seconds from its construction to its destruction to *into (nothing when null).
class ScopedTimer {
 public:
  explicit ScopedTimer(double* into)
      : into_(into),
        t0_(into ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{}) {}
  ~ScopedTimer() {
    if (into_)
      *into_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;

 private:
  double* into_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace llmq
