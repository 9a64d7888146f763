// The backend choice: availability of each backend and the auto table.
#include <vector>

#include <fmt/format.h>

#include "mxmoe/dispatch.h"

namespace mxmoe {
namespace {

// What each backend is in the source tree (built: it has an implementation);
// backend_info() adds what this binary left out.
struct Facts {
  BackendKind kind;
  bool built;
  ActivationFormat activation;
  const char* runs_on;
};
const Facts kInfo[] = {
    {BackendKind::kCpu, true, ActivationFormat::kBf16, "any x86-64 CPU"},
    // The reference computes either format (check() lets it through).
    {BackendKind::kReference, true, ActivationFormat::kBf16, "any CPU"},
    {BackendKind::kPortable, true, ActivationFormat::kBf16, "SM80+"},
    {BackendKind::kSm90, true, ActivationFormat::kBf16, "SM90 (code for 90a)"},
    // The block-scaled tensor cores take MXFP8 activations x MXFP4 weights.
    {BackendKind::kSm100, true, ActivationFormat::kMxfp8, "SM100/SM103 (code for 100a/103a)"},
    {BackendKind::kSm120, true, ActivationFormat::kMxfp8, "SM120/SM121 (code for 120a/121a)"},
};

// Devices a GPU backend supports (independent of the code compiled in).
bool supports_device(BackendKind kind, int sm) {
  switch (kind) {
    case BackendKind::kCpu:
    case BackendKind::kReference: return true;
    case BackendKind::kPortable: return sm >= 80;  // mma.sync with bf16 needs SM80
    case BackendKind::kSm90: return sm == 90;
    case BackendKind::kSm100: return sm == 100 || sm == 103;
    case BackendKind::kSm120: return sm == 120 || sm == 121;
  }
  return false;
}

const char* device_requirement(BackendKind kind) {
  switch (kind) {
    case BackendKind::kPortable: return "an SM80+ GPU";
    case BackendKind::kSm90: return "an SM90 GPU";
    case BackendKind::kSm100: return "an SM100 or SM103 GPU";
    case BackendKind::kSm120: return "an SM120 or SM121 GPU";
    case BackendKind::kCpu:
    case BackendKind::kReference: break;
  }
  return "nothing";
}

// The compiled arch whose code `kind` would run on SM `sm`, or "" if none.
// The tensor-core backends use instructions only arch-specific ('a') or family
// ('f') targets carry; portable's mma.sync is in plain SASS too.
std::string code_for(BackendKind kind, const std::vector<std::string>& archs, int sm) {
  for (const std::string& a : archs) {
    if (!arch_code_runs_on(a, sm)) continue;
    std::string_view target(a);
    if (target.ends_with("-real")) target.remove_suffix(5);
    const bool specific = target.ends_with('a') || target.ends_with('f');
    if (kind == BackendKind::kPortable || specific) return a;
  }
  return "";
}

std::string device_words(const DispatchInput& in) {
  std::string s = fmt::format("device {} is SM{}", in.device_index, *in.device_sm);
  if (!in.device_name.empty()) s += fmt::format(" ({})", in.device_name);
  return s;
}

std::string archs_words(const std::vector<std::string>& archs) {
  if (archs.empty()) return "this binary has no CUDA code";
  return fmt::format("this binary carries code for {}", fmt::join(archs, ", "));
}

// Availability with both sides: `why` when it cannot run, `how` when it can.
bool check(BackendKind kind, const DispatchInput& in, std::string* why, std::string* how) {
  const char* name = backend_name(kind);
  std::string not_built;
  if (!backend_built(kind, in, &not_built)) {
    *why = fmt::format("{} is left out of this build ({})", name, not_built);
    return false;
  }
  if (kind == BackendKind::kReference) {
    *how = "the fp64 reference runs anywhere, on either activation format";
    return true;
  }
  if (kind == BackendKind::kCpu) {
    if (in.activations != ActivationFormat::kBf16) {
      *why = fmt::format("cpu consumes bf16 activations, not {} (the reference computes them)",
                         activation_format_name(in.activations));
      return false;
    }
    if (!in.cpu_kernels_ok) {
      *why = "cpu: " + in.cpu_kernels;
      return false;
    }
    *how = "the CPU kernels run on this CPU" + (in.cpu_kernels.empty() ? "" : ": " + in.cpu_kernels);
    return true;
  }
  if (!in.device_sm) {
    *why = fmt::format("{} needs a GPU; {}", name,
                       in.no_device_reason.empty() ? "no CUDA device" : in.no_device_reason);
    return false;
  }
  const int sm = *in.device_sm;
  if (!supports_device(kind, sm)) {
    *why = fmt::format("{} needs {}; {}", name, device_requirement(kind), device_words(in));
    return false;
  }
  if (backend_info(kind).activation != in.activations) {
    *why = fmt::format("{} consumes {} activations, not {}{}", name,
                       activation_format_name(backend_info(kind).activation), activation_format_name(in.activations),
                       backend_info(kind).activation == ActivationFormat::kMxfp8 ? " (ask for mxfp8 activations)" : "");
    return false;
  }
  const std::string code = code_for(kind, in.compiled_archs, sm);
  if (code.empty()) {
    *why = fmt::format("{} has no code that runs on SM{}: {}", name, sm, archs_words(in.compiled_archs));
    return false;
  }
  *how = fmt::format("{} runs on SM{} (code for {} is compiled in)", name, sm, code);
  return true;
}

// Preference order for a device; cpu and reference always last (reference
// runs anywhere, on either activation format), so every (SM, archs,
// activations) lands on exactly one backend.
std::vector<BackendKind> preference(const std::optional<int>& sm) {
  constexpr BackendKind kCpu = BackendKind::kCpu, kReference = BackendKind::kReference;
  if (sm && *sm == 90) return {BackendKind::kSm90, BackendKind::kPortable, kCpu, kReference};
  if (sm && (*sm == 100 || *sm == 103)) return {BackendKind::kSm100, BackendKind::kPortable, kCpu, kReference};
  if (sm && (*sm == 120 || *sm == 121)) return {BackendKind::kSm120, BackendKind::kPortable, kCpu, kReference};
  return {BackendKind::kPortable, kCpu, kReference};
}

}  // namespace

const BackendInfo& backend_info(BackendKind kind) {
  static const std::vector<BackendInfo> table = [] {
    const std::vector<LeftOutBackend> left_out = compiled_backends_left_out();
    std::vector<BackendInfo> t;
    for (const Facts& f : kInfo) {
      t.push_back({f.kind, f.built, f.activation, f.runs_on, f.built ? "" : "not implemented"});
      for (const LeftOutBackend& l : left_out)
        if (l.kind == f.kind) {
          t.back().built = false;
          t.back().why_not_built = l.reason;
        }
    }
    return t;
  }();
  for (const BackendInfo& i : table)
    if (i.kind == kind) return i;
  return table[0];
}

bool backend_built(BackendKind kind, const DispatchInput& in, std::string* why) {
  for (const LeftOutBackend& l : in.left_out)
    if (l.kind == kind) {
      if (why) *why = l.reason;
      return false;
    }
  return true;
}

bool backend_available(BackendKind kind, const DispatchInput& in, std::string* why) {
  std::string w, h;
  const bool ok = check(kind, in, &w, &h);
  if (why) *why = ok ? h : w;
  return ok;
}

std::string valid_backend_names() {
  std::string s = "auto";
  for (BackendKind k : kAllBackends) s += fmt::format(", {}", backend_name(k));
  return s;
}

Status choose_backend(const DispatchInput& in, DispatchResult* out) {
  if (in.weight_format != WeightFormat::kMxfp4)
    return Status::Unsupported("only MXFP4 expert weights are supported");
  MXMOE_RETURN_IF_ERROR(validate_shape(in.shape));
  const std::string source = in.override_source.empty() ? "the caller" : in.override_source;
  std::string why, how;
  if (!in.override_name.empty() && in.override_name != "auto") {
    const std::optional<BackendKind> forced = parse_backend_name(in.override_name);
    if (!forced)
      return Status::InvalidArgument(fmt::format("unknown backend '{}' (from {}); valid: {}",
                                                 in.override_name, source, valid_backend_names()));
    if (!check(*forced, in, &why, &how))
      return Status::Unsupported(fmt::format("{} (requested by {})", why, source));
    *out = {*forced, fmt::format("{}: requested by {}; {}", backend_name(*forced), source, how)};
    return Status::Ok();
  }
  std::string skipped;
  for (BackendKind k : preference(in.device_sm)) {
    if (check(k, in, &why, &how)) {
      *out = {k, fmt::format("{}: {}{}", backend_name(k), skipped, how)};
      return Status::Ok();
    }
    skipped += why + "; ";
  }
  return Status::Unsupported("no backend can run");  // unreachable: reference always can
}

}  // namespace mxmoe
