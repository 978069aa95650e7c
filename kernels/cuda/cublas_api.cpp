#include "kernels/cuda/cublas_api.h"

#include <dlfcn.h>

#include <mutex>

namespace llmq::kernels::cuda {
namespace {

template <class Api>
struct Loaded {
  Api api{};
  bool ok = false;
  std::string why;
};

template <class F>
bool Bind(void* lib, const char* name, F* out, std::string* why) {
  *out = reinterpret_cast<F>(dlsym(lib, name));
  if (!*out) *why = std::string("cuBLAS has no symbol ") + name;
  return *out != nullptr;
}

// The soname of the major version the code was compiled against, then the unversioned name;
// null with *why set when neither loads. The library stays loaded for the life of the process.
void* Open(const std::string& base, std::string* why) {
  const std::string versioned = base + "." + std::to_string(CUBLAS_VER_MAJOR);
  void* lib = dlopen(versioned.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) lib = dlopen(base.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* e = dlerror();
    *why = "cannot load " + versioned + ": " + (e ? e : "not found");
  }
  return lib;
}

Loaded<CublasApi> Load() {
  Loaded<CublasApi> l;
  void* lib = Open("libcublas.so", &l.why);
  if (!lib) return l;
  CublasApi& a = l.api;
  l.ok = Bind(lib, "cublasCreate_v2", &a.create, &l.why) &&
         Bind(lib, "cublasDestroy_v2", &a.destroy, &l.why) &&
         Bind(lib, "cublasSetStream_v2", &a.set_stream, &l.why) &&
         Bind(lib, "cublasSetWorkspace_v2", &a.set_workspace, &l.why) &&
         Bind(lib, "cublasGemmEx", &a.gemm_ex, &l.why) &&
         Bind(lib, "cublasGemmStridedBatchedEx", &a.gemm_strided_batched_ex, &l.why) &&
         Bind(lib, "cublasGetStatusName", &a.status_name, &l.why) &&
         Bind(lib, "cublasGetStatusString", &a.status_string, &l.why);
  return l;
}

Loaded<CublasLtApi> LoadLt() {
  Loaded<CublasLtApi> l;
  void* lib = Open("libcublasLt.so", &l.why);
  if (!lib) return l;
  CublasLtApi& a = l.api;
  l.ok = Bind(lib, "cublasLtCreate", &a.create, &l.why) &&
         Bind(lib, "cublasLtDestroy", &a.destroy, &l.why) &&
         Bind(lib, "cublasLtMatmulDescCreate", &a.desc_create, &l.why) &&
         Bind(lib, "cublasLtMatmulDescDestroy", &a.desc_destroy, &l.why) &&
         Bind(lib, "cublasLtMatmulDescSetAttribute", &a.desc_set, &l.why) &&
         Bind(lib, "cublasLtMatrixLayoutCreate", &a.layout_create, &l.why) &&
         Bind(lib, "cublasLtMatrixLayoutDestroy", &a.layout_destroy, &l.why) &&
         Bind(lib, "cublasLtMatmulPreferenceCreate", &a.pref_create, &l.why) &&
         Bind(lib, "cublasLtMatmulPreferenceDestroy", &a.pref_destroy, &l.why) &&
         Bind(lib, "cublasLtMatmulPreferenceSetAttribute", &a.pref_set, &l.why) &&
         Bind(lib, "cublasLtMatmulAlgoGetHeuristic", &a.heuristic, &l.why) &&
         Bind(lib, "cublasLtMatmul", &a.matmul, &l.why);
  return l;
}

const Loaded<CublasApi>& Once() {
  static const Loaded<CublasApi> loaded = Load();
  return loaded;
}

const Loaded<CublasLtApi>& OnceLt() {
  static const Loaded<CublasLtApi> loaded = LoadLt();
  return loaded;
}

}  // namespace

Status LoadCublas() {
  return Once().ok ? Status::Ok() : Status::Unsupported(Once().why);
}

const CublasApi* Cublas() {
  return Once().ok ? &Once().api : nullptr;
}

Status LoadCublasLt() {
  return OnceLt().ok ? Status::Ok() : Status::Unsupported(OnceLt().why);
}

const CublasLtApi* CublasLt() {
  return OnceLt().ok ? &OnceLt().api : nullptr;
}

}  // namespace llmq::kernels::cuda
