// What this binary compiled in, and why a backend is left out of a build.
#include <algorithm>

#include "mxmoe/device.h"
#include "mxmoe/dispatch.h"

namespace mxmoe {
namespace {

bool targets(const std::vector<std::string>& archs, const std::string& arch) {
  // src/CMakeLists.txt compiles an arch-specific folder for "XYa" or "XYa-real".
  return std::find(archs.begin(), archs.end(), arch) != archs.end() ||
         std::find(archs.begin(), archs.end(), arch + "-real") != archs.end();
}

}  // namespace

BuildContents this_build() {
  BuildContents b;
#ifdef MXMOE_NVCC_FOUND  // set on this file by src/CMakeLists.txt
  b.nvcc = true;
#endif
#ifdef MXMOE_WITH_CUDA
  b.cuda = true;
  b.nvcc = true;
#endif
#ifdef MXMOE_WITH_BLOCKSCALED  // compiled exactly when CUTLASS's headers are used
  b.cutlass = true;
#endif
  b.archs = compiled_cuda_archs();
  return b;
}

std::vector<LeftOutBackend> backends_left_out(const BuildContents& b) {
  std::vector<LeftOutBackend> out;
  const std::string no_cuda = b.nvcc ? "built with MXMOE_CUDA=OFF" : "built without nvcc";
  for (BackendKind k : kAllBackends) {
    std::string why;
    const auto target = [&](const char* arch) {
      if (targets(b.archs, arch)) return;
      why += (why.empty() ? "" : " and ") + std::string("sm_") + arch + " not among the compiled targets";
    };
    switch (k) {
      case BackendKind::kCpu:
      case BackendKind::kReference: break;
      case BackendKind::kPortable:
        if (!b.cuda) why = no_cuda;
        break;
      case BackendKind::kSm90:
        if (!b.cuda) why = no_cuda;
        else target("90a");
        break;
      case BackendKind::kSm100:
      case BackendKind::kSm120:
        if (!b.cuda) {
          why = no_cuda;
          break;
        }
        if (!b.cutlass) why = "built without CUTLASS";
        target(k == BackendKind::kSm100 ? "100a" : "120a");
        break;
    }
    if (!why.empty()) out.push_back({k, why});
  }
  return out;
}

std::vector<LeftOutBackend> compiled_backends_left_out() { return backends_left_out(this_build()); }

}  // namespace mxmoe
