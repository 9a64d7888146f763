// The cpu backend's kernel paths, one per instruction set, chosen at run time
// by the CPU's features (best first):
//   amx          avx512_vnni plus AMX-INT8: an expert with several tokens
//                has its sums computed by tile multiplies (tdpbsud); taken
//                only where MXMOE_CPU_ISA asks (cpu_isa_chosen_by_default)
//   avx512_vnni  AVX-512 F + BW + VNNI: u8 x s8 dot products (vpdpbusd)
//   avx512       AVX-512 F + BW: the same sums by vpmaddubsw + vpmaddwd
//   avx2         AVX2 + FMA: as avx512 on 256-bit vectors
//   scalar       plain C++: any CPU
// Every path computes the same integer block sums and the same float
// operations in the same order, so all give the same bits (tests/cpu_test.cpp).
// MXMOE_CPU_ISA=<name> forces a path, e.g. a lower one to test it.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "mxmoe/status.h"

namespace mxmoe {

enum class CpuIsa { kAmx, kAvx512Vnni, kAvx512, kAvx2, kScalar };
inline constexpr CpuIsa kAllCpuIsas[] = {CpuIsa::kAmx, CpuIsa::kAvx512Vnni, CpuIsa::kAvx512, CpuIsa::kAvx2, CpuIsa::kScalar};

const char* cpu_isa_name(CpuIsa isa);                  // "amx", "avx512_vnni", "avx512", "avx2", "scalar"
std::optional<CpuIsa> parse_cpu_isa(std::string_view name);
const char* cpu_isa_features(CpuIsa isa);              // "AVX-512 F, BW and VNNI", ...
// Whether this CPU (and the OS, which must save the vector registers) has
// the path's features.
bool cpu_isa_supported(CpuIsa isa);
// Whether the cpu backend takes this path by itself where the CPU supports
// it. Every path but amx: its tile multiplies have not run on a CPU with AMX
// in this project's tests (tests/cpu_test.cpp's AmxPath), so it runs only
// where MXMOE_CPU_ISA=amx asks for it.
bool cpu_isa_chosen_by_default(CpuIsa isa);

// The path the cpu backend runs: MXMOE_CPU_ISA's when set (InvalidArgument
// for an unknown name, Unsupported where this CPU lacks its features), else
// the best this CPU supports of those chosen by default. `why` says which
// and why, in one phrase.
Status choose_cpu_isa(CpuIsa* out, std::string* why);

// This CPU's model name (/proc/cpuinfo), e.g. "AMD EPYC 9454"; "unknown CPU"
// where it cannot be read.
std::string cpu_model_name();
// One line for `mxmoe info`: the model, the threads a forward uses
// (OpenMP's), each path with yes or no, and the one the cpu backend runs.
std::string describe_cpu();

}  // namespace mxmoe
