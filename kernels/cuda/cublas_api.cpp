#include "kernels/cuda/cublas_api.h"

#include <dlfcn.h>

#include <mutex>

namespace llmq::kernels::cuda {
namespace {

struct Loaded {
  CublasApi api{};
  bool ok = false;
  std::string why;
};

template <class F>
bool Bind(void* lib, const char* name, F* out, std::string* why) {
  *out = reinterpret_cast<F>(dlsym(lib, name));
  if (!*out) *why = std::string("cuBLAS has no symbol ") + name;
  return *out != nullptr;
}

Loaded Load() {
  Loaded l;
  // The soname of the major version the code was compiled against, then the unversioned name.
  const std::string versioned = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
  void* lib = dlopen(versioned.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) lib = dlopen("libcublas.so", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* e = dlerror();
    l.why = "cannot load " + versioned + ": " + (e ? e : "not found");
    return l;
  }
  CublasApi& a = l.api;
  l.ok = Bind(lib, "cublasCreate_v2", &a.create, &l.why) &&
         Bind(lib, "cublasDestroy_v2", &a.destroy, &l.why) &&
         Bind(lib, "cublasSetStream_v2", &a.set_stream, &l.why) &&
         Bind(lib, "cublasSetWorkspace_v2", &a.set_workspace, &l.why) &&
         Bind(lib, "cublasGemmEx", &a.gemm_ex, &l.why) &&
         Bind(lib, "cublasGemmStridedBatchedEx", &a.gemm_strided_batched_ex, &l.why) &&
         Bind(lib, "cublasGetStatusName", &a.status_name, &l.why) &&
         Bind(lib, "cublasGetStatusString", &a.status_string, &l.why);
  return l;  // the library stays loaded for the life of the process
}

const Loaded& Once() {
  static const Loaded loaded = Load();
  return loaded;
}

}  // namespace

Status LoadCublas() {
  return Once().ok ? Status::Ok() : Status::Unsupported(Once().why);
}

const CublasApi* Cublas() {
  return Once().ok ? &Once().api : nullptr;
}

}  // namespace llmq::kernels::cuda
