// Which kernel path this CPU runs (include/mxmoe/cpu.h).
#include <omp.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include <fmt/format.h>

#include "mxmoe/cpu.h"

namespace mxmoe {

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAmx: return "amx";
    case CpuIsa::kAvx512Vnni: return "avx512_vnni";
    case CpuIsa::kAvx512: return "avx512";
    case CpuIsa::kAvx2: return "avx2";
    case CpuIsa::kScalar: return "scalar";
  }
  return "?";
}

std::optional<CpuIsa> parse_cpu_isa(std::string_view name) {
  for (CpuIsa isa : kAllCpuIsas)
    if (name == cpu_isa_name(isa)) return isa;
  return std::nullopt;
}

const char* cpu_isa_features(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAmx: return "AVX-512 F, BW and VNNI, and AMX-INT8 (tiles enabled by the OS)";
    case CpuIsa::kAvx512Vnni: return "AVX-512 F, BW and VNNI";
    case CpuIsa::kAvx512: return "AVX-512 F and BW";
    case CpuIsa::kAvx2: return "AVX2 and FMA";
    case CpuIsa::kScalar: return "nothing beyond x86-64";
  }
  return "?";
}

namespace {

// Linux (5.16 on) lets a process use AMX's 8 KiB of tile state only after it
// asks (arch_prctl ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA), once for all
// its threads; a tile instruction without that leave is SIGILL.
bool amx_tiles_permitted() {
  static const bool permitted = [] {
    constexpr int kArchReqXcompPerm = 0x1023, kXfeatureXtileData = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtileData) == 0;
  }();
  return permitted;
}

}  // namespace

bool cpu_isa_supported(CpuIsa isa) {
  // libgcc's cpuid reading also checks (XGETBV) that the OS saves the AVX
  // and AVX-512 register state.
  __builtin_cpu_init();
  switch (isa) {
    case CpuIsa::kAmx:
      return cpu_isa_supported(CpuIsa::kAvx512Vnni) && __builtin_cpu_supports("amx-tile") &&
             __builtin_cpu_supports("amx-int8") && amx_tiles_permitted();
    case CpuIsa::kAvx512Vnni:
      return cpu_isa_supported(CpuIsa::kAvx512) && __builtin_cpu_supports("avx512vnni");
    case CpuIsa::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             cpu_isa_supported(CpuIsa::kAvx2);
    case CpuIsa::kAvx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case CpuIsa::kScalar: return true;
  }
  return false;
}

bool cpu_isa_chosen_by_default(CpuIsa isa) { return isa != CpuIsa::kAmx; }

Status choose_cpu_isa(CpuIsa* out, std::string* why) {
  const char* env = std::getenv("MXMOE_CPU_ISA");
  if (env && *env) {
    const std::optional<CpuIsa> forced = parse_cpu_isa(env);
    if (!forced)
      return Status::InvalidArgument(fmt::format(
          "MXMOE_CPU_ISA={} names no cpu kernel path (amx, avx512_vnni, avx512, avx2, scalar)", env));
    if (!cpu_isa_supported(*forced))
      return Status::Unsupported(fmt::format("MXMOE_CPU_ISA={}: this CPU lacks {}", env, cpu_isa_features(*forced)));
    *out = *forced;
    if (why) *why = fmt::format("{} kernels (forced by MXMOE_CPU_ISA)", env);
    return Status::Ok();
  }
  for (CpuIsa isa : kAllCpuIsas)
    if (cpu_isa_chosen_by_default(isa) && cpu_isa_supported(isa)) {
      *out = isa;
      if (why)
        *why = isa == CpuIsa::kScalar ? "scalar kernels (this CPU has no AVX2 + FMA)"
                                      : fmt::format("{} kernels (this CPU has {})", cpu_isa_name(isa), cpu_isa_features(isa));
      return Status::Ok();
    }
  return Status::Unsupported("no cpu kernel path");  // unreachable: scalar runs anywhere
}

std::string cpu_model_name() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
      const size_t at = line.find_first_not_of(" \t", line.find(':') + 1);
      if (at != std::string::npos) return line.substr(at);
    }
  return "unknown CPU";
}

std::string describe_cpu() {
  std::string paths;
  for (CpuIsa isa : kAllCpuIsas)
    paths += fmt::format("{}{} {}{}", paths.empty() ? "" : ", ", cpu_isa_name(isa), cpu_isa_supported(isa) ? "yes" : "no",
                         cpu_isa_chosen_by_default(isa) ? "" : " (only where MXMOE_CPU_ISA asks)");
  CpuIsa isa;
  std::string why;
  const Status st = choose_cpu_isa(&isa, &why);
  return fmt::format("cpu: {}, {} threads; kernel paths: {}; the cpu backend runs {} (MXMOE_CPU_ISA forces a path)",
                     cpu_model_name(), omp_get_max_threads(), paths, st.ok() ? why : st.message());
}

}  // namespace mxmoe
