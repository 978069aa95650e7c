// cuBLAS, loaded when first needed (dlopen) rather than linked: libcublas and libcublasLt are
// hundreds of megabytes that the dynamic loader would map and relocate at every start of every
// llmq command (0.5 s for `llmq --help`), GPU or not. Only a process that builds a CUDA backend (or
// a GPU test or benchmark) pays for them. Thread-safe: the first call loads, later calls return the
// same table.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>

#include <string>

#include "base/status.h"

namespace llmq::kernels::cuda {

// The C entry points (cublas_api.h also declares C++ overloads of the two products, so their types
// are spelled out).
using CublasGemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int,
                                        int, int, const void*, const void*, cudaDataType, int,
                                        const void*, cudaDataType, int, const void*, void*,
                                        cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
using CublasGemmStridedBatchedEx = cublasStatus_t (*)(
    cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*, const void*,
    cudaDataType, int, long long, const void*, cudaDataType, int, long long, const void*, void*,
    cudaDataType, int, long long, int, cublasComputeType_t, cublasGemmAlgo_t);

struct CublasApi {
  decltype(&cublasCreate_v2) create;
  decltype(&cublasDestroy_v2) destroy;
  decltype(&cublasSetStream_v2) set_stream;
  decltype(&cublasSetWorkspace_v2) set_workspace;
  CublasGemmEx gemm_ex;
  CublasGemmStridedBatchedEx gemm_strided_batched_ex;
  decltype(&cublasGetStatusName) status_name;
  decltype(&cublasGetStatusString) status_string;
};

// OK when the library is loaded with every entry point; otherwise Unsupported with the reason (the
// library or a symbol missing).
Status LoadCublas();
// The table, or null when LoadCublas fails.
const CublasApi* Cublas();

// cuBLASLt's entry points for the FP8 products (kernels/cuda/gemm_fp8.h), loaded the same way
// from libcublasLt.
struct CublasLtApi {
  decltype(&cublasLtCreate) create;
  decltype(&cublasLtDestroy) destroy;
  decltype(&cublasLtMatmulDescCreate) desc_create;
  decltype(&cublasLtMatmulDescDestroy) desc_destroy;
  decltype(&cublasLtMatmulDescSetAttribute) desc_set;
  decltype(&cublasLtMatrixLayoutCreate) layout_create;
  decltype(&cublasLtMatrixLayoutDestroy) layout_destroy;
  decltype(&cublasLtMatmulPreferenceCreate) pref_create;
  decltype(&cublasLtMatmulPreferenceDestroy) pref_destroy;
  decltype(&cublasLtMatmulPreferenceSetAttribute) pref_set;
  decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic;
  decltype(&cublasLtMatmul) matmul;
};

// As LoadCublas and Cublas, for libcublasLt.
Status LoadCublasLt();
const CublasLtApi* CublasLt();

}  // namespace llmq::kernels::cuda
