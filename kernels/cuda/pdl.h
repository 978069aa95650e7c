// Programmatic dependent launch (Hopper, sm_90): a kernel launched with the
// programmatic-serialization attribute may start while the kernel before it in the stream is
// still finishing, and waits for it inside (PdlWait) instead of at the launch; the gap between two
// dependent kernels (a microsecond or two, of which a decode step at batch 1 has about 450) then
// overlaps the earlier kernel's tail. Captured in CUDA graphs as programmatic edges.
//
// Contract: a kernel launched through LaunchPdl calls PdlWait before it reads or writes any memory
// that an earlier kernel of the stream touches (the kernels here call it first thing), so whatever
// the launch, it sees what a plain launch would. Launches carry the attribute only while this
// thread's ProgrammaticLaunch() is on (the CUDA backend's CudaTuning::pdl, on sm_90 and later,
// around a step's enqueue); off, LaunchPdl is a plain launch.
#pragma once

#include <cuda_runtime.h>

#include <utility>

namespace llmq::kernels::cuda {

void SetProgrammaticLaunch(bool on);  // this thread's launches from now on
bool ProgrammaticLaunch();

#ifdef __CUDACC__
// Waits until the kernels this one depends on have finished and their writes are visible; then
// lets the next kernel of the stream be scheduled (it waits in turn). No-ops before sm_90 and
// for a plain launch.
__device__ __forceinline__ void PdlWait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// kernel<<<grid, block, smem, stream>>>(args...), with the programmatic-serialization attribute
// while ProgrammaticLaunch() is on. The launch's error, else cudaGetLastError() (as a check after
// <<<...>>> reports).
template <class... Params, class... Args>
cudaError_t LaunchPdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                      cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  if (ProgrammaticLaunch()) {
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
  }
  const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
  return e != cudaSuccess ? e : cudaGetLastError();
}
#endif

}  // namespace llmq::kernels::cuda
