#include "kernels/cuda/pdl.h"

namespace llmq::kernels::cuda {
namespace {
thread_local bool programmatic_launch = false;
}  // namespace

void SetProgrammaticLaunch(bool on) {
  programmatic_launch = on;
}

bool ProgrammaticLaunch() {
  return programmatic_launch;
}

}  // namespace llmq::kernels::cuda
