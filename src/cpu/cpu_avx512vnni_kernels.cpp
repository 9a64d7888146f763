// The avx512_vnni path (cpu_avx512vnni_ops.h). Compiled with -mavx512f
// -mavx512bw -mavx512vl -mavx512vnni -mfma (src/CMakeLists.txt).
#include "cpu/cpu_avx512vnni_ops.h"
#include "cpu/cpu_kernels_impl.h"

namespace mxmoe::cpu {
namespace {

constexpr Kernels kKernels = Impl<Avx512VnniOps>::table(CpuIsa::kAvx512Vnni);

}  // namespace

const Kernels& avx512_vnni_kernels() { return kKernels; }

}  // namespace mxmoe::cpu
