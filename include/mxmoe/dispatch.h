// Choosing a backend: one pure function of (device SM, CUDA code compiled in,
// weight format, shape, override) -> (backend, reason) or an error.
//
// Auto table (first backend of the device's list that can run; the reason
// says why each earlier one was passed over):
//   SM90            -> sm90, portable, cpu
//   SM100, SM103    -> sm100, portable, cpu   (sm100, sm120: MXFP8 activations
//   SM120, SM121    -> sm120, portable, cpu    only, so with bf16 they pass)
//   other SM >= 80  -> portable, cpu          (SM80/86/87/89, SM110, ...)
//   SM < 80 or none -> cpu
// and every list ends with reference (the fp64 oracle), which computes MXFP8
// activations on the CPU, where cpu (bf16) cannot.
// A backend can run when this build compiled it in (BuildContents below), the
// device is one it supports, and the binary carries code that runs on the device:
//   - "XYa" (arch-specific, e.g. 90a) runs only on SM XY: wgmma, tcgen05 and the
//     FP4 tensor-core instructions are not forward compatible;
//   - "XY" / "XY-real" (SASS) runs on SM X.y with y >= Y, same major only;
//   - "XYf" (family) runs on the same major with minor >= Y;
//   - embedded PTX is not relied on: JIT-compiling the kernels at first launch
//     takes minutes and hides a missing target.
// sm90 needs 90a code, sm100 needs 100a/103a (or 100f), sm120 needs 120a/121a
// (or 120f); portable (mma.sync, SM80+) takes any code that runs on the device.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mxmoe/backend.h"
#include "mxmoe/moe.h"
#include "mxmoe/status.h"

namespace mxmoe {

// Expert-weight formats. All backends read MXFP4 today.
enum class WeightFormat { kMxfp4 };

// A backend a build left out, and why, in one phrase: "built without nvcc",
// "built with MXMOE_CUDA=OFF", "built without CUTLASS", "sm_120a not among the
// compiled targets" (two joined by " and ").
struct LeftOutBackend {
  BackendKind kind;
  std::string reason;
  bool operator==(const LeftOutBackend&) const = default;
};

// What a build compiled, as its configure step decided (src/CMakeLists.txt).
struct BuildContents {
  bool nvcc = false;               // nvcc was found
  bool cuda = false;               // the CUDA code is compiled (nvcc, and MXMOE_CUDA on)
  bool cutlass = false;            // with CUTLASS's headers (found, and MXMOE_CUTLASS on)
  std::vector<std::string> archs;  // CMAKE_CUDA_ARCHITECTURES, as compiled_cuda_archs() spells them
};
// This binary's.
BuildContents this_build();

// The backends a build with `contents` leaves out, in kAllBackends order, each
// with why. The rules of src/CMakeLists.txt: the CUDA backends need the CUDA
// code; sm90 needs the 90a target; sm100 and sm120 need CUTLASS's headers and
// the 100a / 120a target (their GEMMs exist only as arch-specific code).
std::vector<LeftOutBackend> backends_left_out(const BuildContents& contents);
// This binary's: backends_left_out(this_build()).
std::vector<LeftOutBackend> compiled_backends_left_out();

struct DispatchInput {
  std::optional<int> device_sm;       // none: no usable GPU
  int device_index = 0;               // for messages
  std::string device_name;            // for messages, e.g. "NVIDIA A100-SXM4-80GB"
  std::string no_device_reason;       // why there is no GPU, when known
  std::vector<std::string> compiled_archs;  // as compiled_cuda_archs() spells them
  // Backends this binary left out, each with why: compiled_backends_left_out().
  // Dispatch never picks one of them.
  std::vector<LeftOutBackend> left_out;
  WeightFormat weight_format = WeightFormat::kMxfp4;
  // What the GEMMs must consume: a backend of another format cannot run
  // (the reference backend computes either).
  ActivationFormat activations = ActivationFormat::kBf16;
  // The cpu backend's kernel path in words (choose_cpu_isa, mxmoe/cpu.h),
  // or why none can run (an MXMOE_CPU_ISA this CPU lacks or no path knows).
  std::string cpu_kernels;
  bool cpu_kernels_ok = true;
  MoeShape shape;
  std::string override_name = "auto";  // "auto" (or empty) or a backend name
  std::string override_source;         // where it came from, e.g. "--backend", "MXMOE_BACKEND"
};

struct DispatchResult {
  BackendKind backend = BackendKind::kCpu;
  std::string reason;  // "<backend>: <why>", one line
};

// What a backend is in this binary, independent of any device.
struct BackendInfo {
  BackendKind kind;
  bool built;                   // this binary holds it (compiled_backends_left_out() does not name it)
  ActivationFormat activation;  // what its GEMMs consume
  const char* runs_on;          // human-readable device list, e.g. "SM80+"
  std::string why_not_built;    // where !built: why, e.g. "built without CUTLASS"
};
const BackendInfo& backend_info(BackendKind kind);

// Whether `in` has `kind` compiled in; if not, `why` (when given) gets the reason.
bool backend_built(BackendKind kind, const DispatchInput& in, std::string* why = nullptr);

// Whether `arch` (e.g. "80", "90a", "100f", "86-real") has code that runs on SM `sm`.
bool arch_code_runs_on(std::string_view arch, int sm);

// Whether `kind` can run for `in`; if not, `why` says so in one phrase
// (e.g. "sm90 needs an SM90 GPU; device 0 is SM80 (NVIDIA A100)").
bool backend_available(BackendKind kind, const DispatchInput& in, std::string* why);

// The choice. Errors: unknown override name (InvalidArgument, listing the valid
// names), a forced backend that cannot run here (Unsupported, saying why), an
// invalid shape or weight format.
Status choose_backend(const DispatchInput& in, DispatchResult* out);

// Valid override names, "auto" first, comma-separated.
std::string valid_backend_names();

// The table `mxmoe info` prints: every backend, available or why not, the pick.
std::string describe_backends(const DispatchInput& in);
// Padded shapes, w13 layout and bytes each backend's preparation would hold,
// against the original, for `shape`.
std::string describe_preparation(const MoeShape& shape);

// Fills a DispatchInput for this process: device 0 from list_devices(),
// compiled_cuda_archs(), compiled_backends_left_out(), and the override: `override_or_auto` when it is not
// "auto"/empty (source "--backend / API"), else MXMOE_BACKEND when set
// (source "MXMOE_BACKEND"), else auto.
DispatchInput dispatch_input_for_this_process(std::string_view override_or_auto,
                                              const MoeShape& shape);
// The same for CUDA device `device` (-1: the CPU, where only the CPU backends
// can run; a device that does not exist is reported as no device).
DispatchInput dispatch_input_for_device(std::string_view override_or_auto, const MoeShape& shape, int device);
Status choose_backend_for_this_process(std::string_view override_or_auto, const MoeShape& shape,
                                       DispatchResult* out);

}  // namespace mxmoe
