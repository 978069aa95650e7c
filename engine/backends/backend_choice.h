// BackendChoice: which backend LoadModel builds (engine.backend / --backend) and at what precision
// (engine.precision / --precision; the names are base/backend_kind.h's), and how `auto` resolves
// on this machine.
#pragma once

#include <string>

#include "base/backend_kind.h"
#include "base/status.h"

namespace llmq {

// True when this binary was built with the CUDA backend (LLMQ_HAVE_CUDA).
bool BuiltWithCuda();

struct ResolvedBackend {
  BackendKind kind = BackendKind::kCpu;  // kCpu or kCuda
  std::string why;                       // why `auto` chose as it did; "" for an explicit choice
};

// What `want` means here: cpu is cpu; auto is cuda when built with CUDA and CUDA device `device`
// is usable, else cpu; cuda is cuda, or Unsupported naming why not ("built without CUDA ...", "no
// usable CUDA device: <the runtime's reason>").
StatusOr<ResolvedBackend> ResolveBackend(BackendKind want, int device = 0);

}  // namespace llmq
