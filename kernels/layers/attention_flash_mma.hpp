// The register-resident flash attention (FlashAttention-2's arrangement, Dao 2023) that
// attention_flash.hpp's launchers hand bf16/fp16 work to where it applies: the same
// arithmetic as the kernels in attention_flash.cu (fp32 scores and softmax, P and dS rounded to
// F before their products, fp32 log-sum-exp, no atomics), with the tiles kept in mma.sync
// fragments instead of shared memory. Internal to kernels/layers: the model calls
// attention_flash_forward/backward, which choose.
#pragma once

#include <cuda_runtime_api.h>

namespace scalelab::cuda {

// Whether the register-resident kernels take this shape: a head size of 16, 32, 64 or 128 (the
// kernels are compiled for each), C a multiple of 8 and every pointer 16-byte aligned (they
// copy rows in 16-byte pieces).
bool flash_mma_applies(int head_size, int C, const void* a, const void* b, const void* c = nullptr,
                       const void* d = nullptr);

// As attention_flash_forward / attention_flash_backward, for F = bf16 or fp16 and a shape that
// flash_mma_applies to.
template <typename F>
void flash_mma_forward(F* out, float* lse, const F* qkv, int B, int T, int C, int NH, cudaStream_t stream);
template <typename F>
void flash_mma_backward(F* dqkv, const F* dout, const F* qkv, const F* out, const float* lse, int B, int T, int C,
                        int NH, cudaStream_t stream);

}  // namespace scalelab::cuda
