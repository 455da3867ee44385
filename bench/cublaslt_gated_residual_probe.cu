// Feasibility and speed probe for the gated residual inside the output projection's GEMM
// (issue 32): out = residual + gate ⊙ (x · Wᵀ + b), gate and b per output feature, as one cuBLASLt
// matmul (alpha = the gate as a device vector, beta = 1 with C = the residual, bias epilogue with
// gate ⊙ b), against what the step does today: the GEMM with its bias epilogue, then a separate
// gated-residual pass (addcmul's traffic: read residual and y, write out).
//
// Standalone (no LibTorch, no CMake), on the GPU host:
//   nvcc -O2 -std=c++17 -arch=sm_90 bench/cublaslt_gated_residual_probe.cu -lcublasLt -o probe &&
//   ./probe
// Prints, for FLUX.1-dev's and FLUX.2-dev's output-projection shapes (bf16): whether cuBLASLt finds
// an algorithm for the fused form, the median time of each variant (CUDA events, 20 runs after 5),
// and the fused output's largest difference from the two-pass one (in units of the output's scale).
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#define CHECK_CUDA(x)                                                                      \
  do {                                                                                     \
    cudaError_t e_ = (x);                                                                  \
    if (e_ != cudaSuccess) {                                                               \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)
#define CHECK_LT(x)                                                              \
  do {                                                                           \
    cublasStatus_t s_ = (x);                                                     \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                           \
      std::printf("cuBLASLt status %d at %s:%d\n", int(s_), __FILE__, __LINE__); \
      return false;                                                              \
    }                                                                            \
  } while (0)

namespace {

__global__ void GatedResidualKernel(const __nv_bfloat16* r, const __nv_bfloat16* y,
                                    const __nv_bfloat16* gate, __nv_bfloat16* out, long rows,
                                    long cols) {
  long i = (blockIdx.x * long(blockDim.x) + threadIdx.x) * 8;
  const long n = rows * cols;
  if (i >= n) return;
  const uint4 rv = *reinterpret_cast<const uint4*>(r + i);
  const uint4 yv = *reinterpret_cast<const uint4*>(y + i);
  const uint4 gv = *reinterpret_cast<const uint4*>(gate + (i % cols));
  uint4 ov;
  const __nv_bfloat16* rp = reinterpret_cast<const __nv_bfloat16*>(&rv);
  const __nv_bfloat16* yp = reinterpret_cast<const __nv_bfloat16*>(&yv);
  const __nv_bfloat16* gp = reinterpret_cast<const __nv_bfloat16*>(&gv);
  __nv_bfloat16* op = reinterpret_cast<__nv_bfloat16*>(&ov);
  for (int j = 0; j < 8; ++j) {
    op[j] = __float2bfloat16(__bfloat162float(rp[j]) +
                             __bfloat162float(gp[j]) * __bfloat162float(yp[j]));
  }
  *reinterpret_cast<uint4*>(out + i) = ov;
}

__global__ void ScaleBias(const __nv_bfloat16* gate, const __nv_bfloat16* b, float* gate_f32,
                          __nv_bfloat16* gb, long n) {
  long i = blockIdx.x * long(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float g = __bfloat162float(gate[i]);
  gate_f32[i] = g;
  gb[i] = __float2bfloat16(g * __bfloat162float(b[i]));
}

struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulHeuristicResult_t algo{};
};

// D (col-major out x rows) = op(W stored row-major [out, in] = col-major [in, out], T) · x
// (col-major [in, rows], N): the row-major [rows, out] result, as torch.nn.functional.linear runs
// it.
bool MakePlan(cublasLtHandle_t lt, long rows, long in, long out, bool fused, const void* bias,
              size_t workspace, Plan* p) {
  CHECK_LT(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  CHECK_LT(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  CHECK_LT(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  if (fused) {
    cublasLtPointerMode_t pm = CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_HOST;
    CHECK_LT(
        cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_POINTER_MODE, &pm, sizeof(pm)));
  }
  if (bias != nullptr) {  // FLUX.2's projections have no bias
    cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_BIAS;
    CHECK_LT(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof(ep)));
    CHECK_LT(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                            sizeof(bias)));
  }
  CHECK_LT(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_16BF, in, out, in));
  CHECK_LT(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_16BF, in, rows, in));
  CHECK_LT(cublasLtMatrixLayoutCreate(&p->c, CUDA_R_16BF, out, rows, out));
  cublasLtMatmulPreference_t pref;
  CHECK_LT(cublasLtMatmulPreferenceCreate(&pref));
  CHECK_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                &workspace, sizeof(workspace)));
  int found = 0;
  cublasStatus_t s =
      cublasLtMatmulAlgoGetHeuristic(lt, p->op, p->a, p->b, p->c, p->c, pref, 1, &p->algo, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (s != CUBLAS_STATUS_SUCCESS || found == 0) {
    std::printf("  %s: no algorithm (status %d, found %d)\n", fused ? "fused" : "plain", int(s),
                found);
    return false;
  }
  return true;
}

float Median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <typename F>
float TimeIt(F f, cudaStream_t st) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  for (int i = 0; i < 5; ++i) f();
  std::vector<float> ms;
  for (int i = 0; i < 20; ++i) {
    cudaEventRecord(a, st);
    f();
    cudaEventRecord(b, st);
    cudaEventSynchronize(b);
    float t = 0;
    cudaEventElapsedTime(&t, a, b);
    ms.push_back(t);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return Median(ms);
}

void Fill(std::vector<__nv_bfloat16>& v, float scale, std::mt19937& rng) {
  std::normal_distribution<float> d(0.f, scale);
  for (auto& x : v) x = __float2bfloat16(d(rng));
}

void Probe(cublasLtHandle_t lt, const char* name, long rows, long in, long out, bool with_bias) {
  std::printf("%s: rows %ld, in %ld, out %ld, %s\n", name, rows, in, out,
              with_bias ? "bias" : "no bias");
  std::mt19937 rng(7);
  std::vector<__nv_bfloat16> hx(rows * in), hw(out * in), hb(out), hg(out), hr(rows * out);
  Fill(hx, 1.f, rng);
  Fill(hw, 1.f / std::sqrt(float(in)), rng);
  Fill(hb, with_bias ? 0.1f : 0.f, rng);
  Fill(hg, 0.5f, rng);
  Fill(hr, 1.f, rng);
  __nv_bfloat16 *x, *w, *b, *g, *r, *y, *o1, *o2, *gb;
  float* gf;
  const size_t e = sizeof(__nv_bfloat16);
  CHECK_CUDA(cudaMalloc(&x, hx.size() * e));
  CHECK_CUDA(cudaMalloc(&w, hw.size() * e));
  CHECK_CUDA(cudaMalloc(&b, out * e));
  CHECK_CUDA(cudaMalloc(&g, out * e));
  CHECK_CUDA(cudaMalloc(&gb, out * e));
  CHECK_CUDA(cudaMalloc(&gf, out * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&r, hr.size() * e));
  CHECK_CUDA(cudaMalloc(&y, hr.size() * e));
  CHECK_CUDA(cudaMalloc(&o1, hr.size() * e));
  CHECK_CUDA(cudaMalloc(&o2, hr.size() * e));
  CHECK_CUDA(cudaMemcpy(x, hx.data(), hx.size() * e, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(w, hw.data(), hw.size() * e, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(b, hb.data(), out * e, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(g, hg.data(), out * e, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(r, hr.data(), hr.size() * e, cudaMemcpyHostToDevice));
  const size_t ws_bytes = 32u << 20;
  void* ws;
  CHECK_CUDA(cudaMalloc(&ws, ws_bytes));
  cudaStream_t st;
  CHECK_CUDA(cudaStreamCreate(&st));
  ScaleBias<<<(out + 255) / 256, 256, 0, st>>>(g, b, gf, gb, out);

  Plan plain, fused;
  const bool ok_plain =
      MakePlan(lt, rows, in, out, false, with_bias ? b : nullptr, ws_bytes, &plain);
  const bool ok_fused =
      MakePlan(lt, rows, in, out, true, with_bias ? gb : nullptr, ws_bytes, &fused);
  const float one = 1.f, zero = 0.f;
  float t_plain = -1, t_pass = -1, t_fused = -1, t_fused_inplace = -1;
  if (ok_plain) {
    auto gemm = [&] {
      cublasLtMatmul(lt, plain.op, &one, w, plain.a, x, plain.b, &zero, y, plain.c, y, plain.c,
                     &plain.algo.algo, ws, ws_bytes, st);
    };
    const long n = rows * out;
    auto pass = [&] {
      GatedResidualKernel<<<(n / 8 + 255) / 256, 256, 0, st>>>(r, y, g, o1, rows, out);
    };
    t_plain = TimeIt(gemm, st);
    t_pass = TimeIt(pass, st);
  }
  if (ok_fused) {
    auto gemm = [&] {
      cublasStatus_t s = cublasLtMatmul(lt, fused.op, gf, w, fused.a, x, fused.b, &one, r, fused.c,
                                        o2, fused.c, &fused.algo.algo, ws, ws_bytes, st);
      if (s != CUBLAS_STATUS_SUCCESS) std::printf("  fused matmul status %d\n", int(s));
    };
    t_fused = TimeIt(gemm, st);
    // In place (C = D), as the second GEMM of a joined projection would run: time only.
    CHECK_CUDA(cudaMemcpyAsync(y, r, hr.size() * e, cudaMemcpyDeviceToDevice, st));
    auto inplace = [&] {
      cublasLtMatmul(lt, fused.op, gf, w, fused.a, x, fused.b, &one, y, fused.c, y, fused.c,
                     &fused.algo.algo, ws, ws_bytes, st);
    };
    t_fused_inplace = TimeIt(inplace, st);
  }
  CHECK_CUDA(cudaStreamSynchronize(st));
  if (ok_plain && ok_fused) {
    std::vector<__nv_bfloat16> h1(hr.size()), h2(hr.size());
    CHECK_CUDA(cudaMemcpy(h1.data(), o1, h1.size() * e, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(h2.data(), o2, h2.size() * e, cudaMemcpyDeviceToHost));
    double max_diff = 0, max_abs = 0;
    for (size_t i = 0; i < h1.size(); ++i) {
      const double a = __bfloat162float(h1[i]), c = __bfloat162float(h2[i]);
      max_diff = std::max(max_diff, std::fabs(a - c));
      max_abs = std::max(max_abs, std::fabs(a));
    }
    std::printf("  fused vs two-pass: max |diff| %.4g (max |out| %.4g, relative %.3g)\n", max_diff,
                max_abs, max_diff / max_abs);
  }
  std::printf(
      "  plain GEMM+bias %.3f ms, gated-residual pass %.3f ms, sum %.3f ms | fused %.3f ms"
      " (in place %.3f ms) | saving %.3f ms a call\n",
      t_plain, t_pass, t_plain + t_pass, t_fused, t_fused_inplace,
      (ok_plain && ok_fused) ? t_plain + t_pass - t_fused : 0.0);
  cudaFree(x);
  cudaFree(w);
  cudaFree(b);
  cudaFree(g);
  cudaFree(gb);
  cudaFree(gf);
  cudaFree(r);
  cudaFree(y);
  cudaFree(o1);
  cudaFree(o2);
  cudaFree(ws);
  cudaStreamDestroy(st);
}

}  // namespace

int main() {
  cublasLtHandle_t lt;
  if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) return 1;
  std::printf("cuBLASLt version %zu\n", cublasLtGetVersion());
  // FLUX.1-dev: double block image stream to_out / ff down, text stream to_add_out, single block
  // proj_out; FLUX.2-dev: to_out, ff down (6144 hidden, 18432 SwiGLU), single block to_out.
  Probe(lt, "flux1 double to_out (img)", 4096, 3072, 3072, true);
  Probe(lt, "flux1 double ff down (img)", 4096, 12288, 3072, true);
  Probe(lt, "flux1 double to_add_out (txt)", 512, 3072, 3072, true);
  Probe(lt, "flux1 single proj_out", 4608, 15360, 3072, true);
  Probe(lt, "flux2 double to_out (img)", 4096, 6144, 6144, false);
  Probe(lt, "flux2 double ff down (img)", 4096, 18432, 6144, false);
  Probe(lt, "flux2 single to_out", 4608, 24576, 6144, false);
  cublasLtDestroy(lt);
  return 0;
}
