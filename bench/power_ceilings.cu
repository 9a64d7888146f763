// The ceilings of this GPU with its board's power: the idle draw, an HBM read
// stream, a bf16 GEMM (cuBLAS) and an FP8 (e4m3) GEMM (cuBLASLt, with and
// without its fast accumulation), each with its rate and the board's mean
// power over a window of back-to-back launches (board_power.h), and from them
// what one byte read and one bf16 or FP8 FLOP cost in energy above the idle
// draw, and the FLOP rate each GEMM could hold at the power limit.
// Where a forward both streams many bytes and does many FLOPs, the board's
// power limit, not the two rates, sets its time: `mxmoe bench` prints that
// time (capped_us) with the energies this program measured on the H200
// (tools/mxmoe/device_ceilings.h, docs/PERF.md).
//   usage: power_ceilings [--window-s 1] [--warmup-s 1]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include <cmath>
#include <vector>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "cuda/common/board_energy.h"
#include "cuda/common/board_power.h"
#include "cuda/common/smxx_ceiling_kernels.cuh"

namespace {

using Clock = std::chrono::steady_clock;
using mxmoe::Status;
using mxmoe::smxx::BoardEnergyCounter;
using mxmoe::smxx::fill_normal;
using mxmoe::smxx::fill_random_words;
using mxmoe::smxx::read_stream;

// Larger than the L2 (50 MB) many times over, so every byte read comes from HBM.
constexpr size_t kStreamBytes = size_t(4) << 30;
constexpr int kGemmN = 8192;  // the size the bf16 GEMM ceiling is quoted at (FP8 the same)
constexpr size_t kLtWorkspaceBytes = size_t(32) << 20;  // cuBLASLt's Hopper kernels ask for up to 32 MB

bool check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return true;
  std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(err));
  return false;
}

// D = A^T B in FP8 through cuBLASLt, column-major, all three n x n: on Hopper
// its FP8 kernels take A transposed and B not ("TN"), e4m3 A and B, fp32
// scales (alpha, beta; no per-tensor scale pointers: 1.0), bf16 C and D, and
// 16-byte-aligned dimensions. With fast_accum the tensor core accumulates each
// K chunk without promoting to fp32 in between (faster, less accurate).
class Fp8Gemm {
 public:
  ~Fp8Gemm() {
    if (pref_) cublasLtMatmulPreferenceDestroy(pref_);
    for (cublasLtMatrixLayout_t l : {la_, lb_, ld_})
      if (l) cublasLtMatrixLayoutDestroy(l);
    if (op_) cublasLtMatmulDescDestroy(op_);
  }

  // Returns "" on success, else what failed.
  std::string init(cublasLtHandle_t lt, int n, bool fast_accum, void* workspace, size_t workspace_bytes) {
    lt_ = lt;
    workspace_ = workspace;
    workspace_bytes_ = workspace_bytes;
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    const int8_t fast = fast_accum ? 1 : 0;
    if (cublasLtMatmulDescCreate(&op_, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast) !=
            CUBLAS_STATUS_SUCCESS)
      return "cuBLASLt matmul descriptor";
    // A is stored k x m (op T makes it m x k), B k x n, D m x n.
    if (cublasLtMatrixLayoutCreate(&la_, CUDA_R_8F_E4M3, n, n, n) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatrixLayoutCreate(&lb_, CUDA_R_8F_E4M3, n, n, n) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatrixLayoutCreate(&ld_, CUDA_R_16BF, n, n, n) != CUBLAS_STATUS_SUCCESS)
      return "cuBLASLt matrix layouts";
    if (cublasLtMatmulPreferenceCreate(&pref_) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulPreferenceSetAttribute(pref_, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes_,
                                             sizeof workspace_bytes_) != CUBLAS_STATUS_SUCCESS)
      return "cuBLASLt preference";
    int found = 0;
    const cublasStatus_t h =
        cublasLtMatmulAlgoGetHeuristic(lt_, op_, la_, lb_, ld_, ld_, pref_, 1, &heuristic_, &found);
    if (h != CUBLAS_STATUS_SUCCESS || found == 0)
      return std::string("no cuBLASLt FP8 algorithm for e4m3 x e4m3 -> bf16 TN (") + cublasGetStatusString(h) + ")";
    return "";
  }

  cublasStatus_t launch(const __nv_fp8_e4m3* a, const __nv_fp8_e4m3* b, __nv_bfloat16* d, cudaStream_t stream) const {
    const float one = 1.f, zero = 0.f;
    return cublasLtMatmul(lt_, op_, &one, a, la_, b, lb_, &zero, d, ld_, d, ld_, &heuristic_.algo, workspace_,
                          workspace_bytes_, stream);
  }

 private:
  cublasLtHandle_t lt_ = nullptr;
  cublasLtMatmulDesc_t op_ = nullptr;
  cublasLtMatrixLayout_t la_ = nullptr, lb_ = nullptr, ld_ = nullptr;
  cublasLtMatmulPreference_t pref_ = nullptr;
  cublasLtMatmulHeuristicResult_t heuristic_{};
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
};

// A few elements of a GEMM's output against a float64 dot product of the
// device's own inputs: `a_row(i)` and `b_col(j)` give an operand's k values.
// Tolerance 1% of |ref| plus 1% of the root of the sum of squared products:
// far under what a wrong layout, a transposed operand or unwritten output gives.
bool spot_check(const char* what, int n, const std::function<bool(int, std::vector<double>*)>& a_row,
                const std::function<bool(int, std::vector<double>*)>& b_col, const __nv_bfloat16* d) {
  std::vector<double> a, b;
  for (int s = 0; s < 16; ++s) {
    const int i = int((uint32_t(s) * 2654435761u) % uint32_t(n)), j = int((uint32_t(s) * 40503u + 7u) % uint32_t(n));
    __nv_bfloat16 got;
    if (!a_row(i, &a) || !b_col(j, &b) ||
        !check(cudaMemcpy(&got, d + size_t(j) * n + i, sizeof got, cudaMemcpyDeviceToHost), "spot check copy"))
      return false;
    double ref = 0, sq = 0;
    for (int k = 0; k < n; ++k) {
      ref += a[k] * b[k];
      sq += a[k] * b[k] * a[k] * b[k];
    }
    const double err = std::fabs(double(__bfloat162float(got)) - ref);
    if (!(err <= 1e-2 * (std::fabs(ref) + std::sqrt(sq)))) {
      std::fprintf(stderr, "%s: D[%d, %d] = %g, reference %g (root of the squared products %g)\n", what, i, j,
                   double(__bfloat162float(got)), ref, std::sqrt(sq));
      return false;
    }
  }
  return true;
}

// n consecutive device elements from p, as doubles (stride elements apart).
template <typename T>
bool fetch(const T* p, size_t stride, int n, std::vector<double>* out) {
  std::vector<T> h(n);
  if (!check(cudaMemcpy2D(h.data(), sizeof(T), p, stride * sizeof(T), sizeof(T), n, cudaMemcpyDeviceToHost),
             "spot check copy"))
    return false;
  out->resize(n);
  for (int k = 0; k < n; ++k) (*out)[k] = double(float(h[k]));
  return true;
}

struct Ceiling {
  double watts = 0, per_second = 0;  // bytes or FLOPs per second
};

// `launch` enqueued back to back for warmup_s (the clock settles under the
// power limit), then over the power window; `work` is one launch's bytes or FLOPs.
bool measure(const BoardEnergyCounter& counter, cudaStream_t stream, double warmup_s, double window_s, double work,
             const std::function<void()>& launch, Ceiling* out) {
  const Clock::time_point start = Clock::now();
  while (std::chrono::duration<double>(Clock::now() - start).count() < warmup_s) {
    for (int i = 0; i < 8; ++i) launch();
    if (!check(cudaStreamSynchronize(stream), "warm-up")) return false;
  }
  mxmoe::smxx::PowerWindow w;
  std::string note;
  const Status s = mxmoe::smxx::measure_board_power(
      counter,
      [&](int64_t) {
        launch();
        return mxmoe::Status::Ok();
      },
      stream, window_s, &w, &note);
  if (!s.ok() || w.watts <= 0) {
    std::fprintf(stderr, "power window: %s %s\n", s.message().c_str(), note.c_str());
    return false;
  }
  out->watts = w.watts;
  out->per_second = work / (w.us_per_launch * 1e-6);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  double window_s = 1.0, warmup_s = 1.0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--window-s") == 0) window_s = std::atof(argv[i + 1]);
    else if (std::strcmp(argv[i], "--warmup-s") == 0) warmup_s = std::atof(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: power_ceilings [--window-s 1] [--warmup-s 1]\n");
      return 2;
    }
  }
  int device = 0;
  cudaDeviceProp prop{};
  if (!check(cudaGetDevice(&device), "device") || !check(cudaGetDeviceProperties(&prop, device), "properties"))
    return 1;
  std::string why;
  const std::unique_ptr<BoardEnergyCounter> counter = BoardEnergyCounter::open(device, &why);
  if (!counter) {
    std::fprintf(stderr, "no energy counter: %s\n", why.c_str());
    return 1;
  }
  double limit_w = 0;
  if (!counter->read_power_limit_w(&limit_w).ok()) limit_w = 0;

  cudaStream_t stream = nullptr;
  uint32_t *words = nullptr, *sink = nullptr;
  __nv_bfloat16 *a = nullptr, *b = nullptr, *c = nullptr;
  __nv_fp8_e4m3 *a8 = nullptr, *b8 = nullptr;
  void* lt_workspace = nullptr;
  const size_t mat = size_t(kGemmN) * kGemmN;
  if (!check(cudaStreamCreate(&stream), "stream") || !check(cudaMalloc(&words, kStreamBytes), "malloc") ||
      !check(cudaMalloc(&sink, 4), "malloc") || !check(cudaMalloc(&a, mat * 2), "malloc") ||
      !check(cudaMalloc(&b, mat * 2), "malloc") || !check(cudaMalloc(&c, mat * 2), "malloc") ||
      !check(cudaMalloc(&a8, mat), "malloc") || !check(cudaMalloc(&b8, mat), "malloc") ||
      !check(cudaMalloc(&lt_workspace, kLtWorkspaceBytes), "malloc"))
    return 1;
  fill_random_words<<<1024, 512, 0, stream>>>(words, kStreamBytes / 4, 7u);
  fill_normal<<<1024, 512, 0, stream>>>(a, mat, 1u);
  fill_normal<<<1024, 512, 0, stream>>>(b, mat, 2u);
  fill_normal<<<1024, 512, 0, stream>>>(a8, mat, 3u);
  fill_normal<<<1024, 512, 0, stream>>>(b8, mat, 4u);
  cublasHandle_t blas = nullptr;
  if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS || cublasSetStream(blas, stream) != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "cuBLAS handle\n");
    return 1;
  }
  cublasLtHandle_t lt = nullptr;
  if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "cuBLASLt handle\n");
    return 1;
  }
  Fp8Gemm fp8, fp8_fast;
  for (auto [g, fast] : {std::pair{&fp8, false}, std::pair{&fp8_fast, true}}) {
    const std::string err = g->init(lt, kGemmN, fast, lt_workspace, kLtWorkspaceBytes);
    if (!err.empty()) {
      std::fprintf(stderr, "FP8 GEMM%s: %s\n", fast ? " (fast accumulation)" : "", err.c_str());
      return 1;
    }
  }
  if (!check(cudaStreamSynchronize(stream), "fill")) return 1;

  const float one = 1.f, zero = 0.f;
  cublasStatus_t gemm_status = CUBLAS_STATUS_SUCCESS;
  const auto bf16_gemm = [&] {
    const cublasStatus_t s = cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, kGemmN, kGemmN, kGemmN, &one, a, CUDA_R_16BF,
                                          kGemmN, b, CUDA_R_16BF, kGemmN, &zero, c, CUDA_R_16BF, kGemmN,
                                          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS) gemm_status = s;
  };
  const auto fp8_gemm = [&](const Fp8Gemm& g) {
    return [&, op = &g] {
      const cublasStatus_t s = op->launch(a8, b8, c, stream);
      if (s != CUBLAS_STATUS_SUCCESS) gemm_status = s;
    };
  };
  // Each GEMM once, its output poisoned first (0xFFFF is a bf16 NaN) and spot-checked: the
  // column-major operands as each call reads them, bf16 A[i, k] at i + k n, e4m3 A^T's column i
  // at k + i n, B's column j at k + j n.
  const auto row_bf16 = [&](int i, std::vector<double>* v) { return fetch(a + i, kGemmN, kGemmN, v); };
  const auto col_bf16 = [&](int j, std::vector<double>* v) { return fetch(b + size_t(j) * kGemmN, 1, kGemmN, v); };
  const auto row_fp8 = [&](int i, std::vector<double>* v) { return fetch(a8 + size_t(i) * kGemmN, 1, kGemmN, v); };
  const auto col_fp8 = [&](int j, std::vector<double>* v) { return fetch(b8 + size_t(j) * kGemmN, 1, kGemmN, v); };
  const std::function<void()> gemms[3] = {bf16_gemm, fp8_gemm(fp8), fp8_gemm(fp8_fast)};
  const char* names[3] = {"bf16 GEMM", "FP8 GEMM", "FP8 GEMM (fast accumulation)"};
  for (int g = 0; g < 3; ++g) {
    if (!check(cudaMemsetAsync(c, 0xFF, mat * 2, stream), "poison")) return 1;
    gemms[g]();
    if (gemm_status != CUBLAS_STATUS_SUCCESS) {
      std::fprintf(stderr, "%s: %s\n", names[g], cublasGetStatusString(gemm_status));
      return 1;
    }
    if (!check(cudaStreamSynchronize(stream), names[g]) ||
        !spot_check(names[g], kGemmN, g == 0 ? std::function(row_bf16) : std::function(row_fp8),
                    g == 0 ? std::function(col_bf16) : std::function(col_fp8), c))
      return 1;
  }

  // The idle draw once the spot checks' GEMMs have drained (the board's power settles within ~0.1 s).
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  double idle = 0;
  if (const Status s = mxmoe::smxx::measure_idle_power(*counter, window_s, &idle); !s.ok()) {
    std::fprintf(stderr, "idle power: %s\n", s.message().c_str());
    return 1;
  }
  const unsigned blocks = unsigned(prop.multiProcessorCount) * mxmoe::smxx::kReadStreamBlocksPerSm;
  const double flops = 2.0 * kGemmN * kGemmN * kGemmN;
  Ceiling read, gemm[3];
  if (!measure(*counter, stream, warmup_s, window_s, double(kStreamBytes),
               [&] {
                 read_stream<<<blocks, mxmoe::smxx::kReadStreamThreads, 0, stream>>>(
                     reinterpret_cast<const uint4*>(words), kStreamBytes / 16, sink);
               },
               &read))
    return 1;
  for (int g = 0; g < 3; ++g)
    if (!measure(*counter, stream, warmup_s, window_s, flops, gemms[g], &gemm[g]) ||
        gemm_status != CUBLAS_STATUS_SUCCESS) {
      std::fprintf(stderr, "%s: %s\n", names[g], cublasGetStatusString(gemm_status));
      return 1;
    }
  if (!check(cudaGetLastError(), "launches")) return 1;

  const double pj_byte = (read.watts - idle) / read.per_second * 1e12;
  double pj_flop[3], capped_tflop_s[3];
  for (int g = 0; g < 3; ++g) {
    pj_flop[g] = (gemm[g].watts - idle) / gemm[g].per_second * 1e12;
    // The FLOP rate the power limit allows above idle, at this energy a FLOP.
    capped_tflop_s[g] = limit_w > idle ? (limit_w - idle) / pj_flop[g] : 0;
  }
  std::printf("device: %s, power limit %.0f W\n", prop.name, limit_w);
  std::printf("idle:                   %6.1f W\n", idle);
  std::printf("HBM read stream:        %6.1f W  %.3f TB/s  -> %.1f pJ a byte above idle\n", read.watts,
              read.per_second / 1e12, pj_byte);
  const char* labels[3] = {"bf16 GEMM %d^3:       ", "FP8 GEMM %d^3:        ", "FP8 fast-accum %d^3:  "};
  for (int g = 0; g < 3; ++g) {
    std::printf(labels[g], kGemmN);
    std::printf("%6.1f W  %.1f TFLOP/s  -> %.3f pJ a FLOP above idle, %.0f TFLOP/s at the %.0f W limit\n",
                gemm[g].watts, gemm[g].per_second / 1e12, pj_flop[g], capped_tflop_s[g], limit_w);
  }
  std::printf("FP8 / bf16 energy a FLOP: %.2f (fast accumulation %.2f)\n", pj_flop[1] / pj_flop[0],
              pj_flop[2] / pj_flop[0]);
  std::printf("{\"device\": \"%s\", \"idle_w\": %.1f, \"limit_w\": %.0f, \"read_w\": %.1f, \"read_tb_s\": %.4f, "
              "\"pj_per_byte\": %.2f, \"gemm_w\": %.1f, \"gemm_tflop_s\": %.1f, \"pj_per_flop\": %.4f, "
              "\"fp8_gemm_w\": %.1f, \"fp8_gemm_tflop_s\": %.1f, \"fp8_pj_per_flop\": %.4f, "
              "\"fp8_fast_gemm_w\": %.1f, \"fp8_fast_gemm_tflop_s\": %.1f, \"fp8_fast_pj_per_flop\": %.4f}\n",
              prop.name, idle, limit_w, read.watts, read.per_second / 1e12, pj_byte, gemm[0].watts,
              gemm[0].per_second / 1e12, pj_flop[0], gemm[1].watts, gemm[1].per_second / 1e12, pj_flop[1],
              gemm[2].watts, gemm[2].per_second / 1e12, pj_flop[2]);
  cublasLtDestroy(lt);
  cublasDestroy(blas);
  return 0;
}
