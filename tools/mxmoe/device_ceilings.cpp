#include "device_ceilings.h"

#include <fmt/format.h>

namespace mxmoe::cli {

std::string known_source(const KnownCeilings& known, const std::string& why) {
  std::string s = fmt::format("known entry: {}", known.name);
  if (!why.empty()) s += " (" + why + ")";
  return s;
}

DeviceCeilings known_ceilings(const KnownCeilings& known, const std::string& device, const std::string& why) {
  DeviceCeilings c;
  c.device = device;
  c.copy_bytes_per_s = known.copy_bytes_per_s;
  c.bf16_flops_per_s = known.bf16_flops_per_s;
  c.power_limit_w = known.power_limit_w;
  c.idle_w = known.idle_w;
  c.joules_per_byte_read = known.joules_per_byte_read;
  c.joules_per_bf16_flop = known.joules_per_bf16_flop;
  const std::string source = known_source(known, why);
  c.copy_source = c.gemm_source = c.power_limit_source = c.idle_source = c.energy_source = source;
  return c;
}

std::string describe(const DeviceCeilings& c) {
  const std::string energy = c.joules_per_byte_read > 0 && c.joules_per_bf16_flop > 0
                                 ? fmt::format("energy {:.1f} pJ/byte, {:.3f} pJ/FLOP", c.joules_per_byte_read * 1e12,
                                               c.joules_per_bf16_flop * 1e12)
                                 : std::string("no energies, no capped_us");
  std::string line = fmt::format(
      "ceilings of {}: copy {:.2f} TB/s [{}], bf16 GEMM {:.0f} TFLOP/s [{}], power limit {:.0f} W [{}] / idle "
      "{:.1f} W [{}], {} [{}]",
      c.device, c.copy_bytes_per_s * 1e-12, c.copy_source, c.bf16_flops_per_s * 1e-12, c.gemm_source, c.power_limit_w,
      c.power_limit_source, c.idle_w, c.idle_source, energy, c.energy_source);
  if (!c.cache_file.empty())
    line += fmt::format("; measured {}, kept in {} (--remeasure-ceilings measures again)", c.cached_on, c.cache_file);
  return line;
}

void to_json(nlohmann::json& j, const DeviceCeilings& c) {
  j = {{"device", c.device},
       {"copy_bytes_per_s", c.copy_bytes_per_s},
       {"bf16_flops_per_s", c.bf16_flops_per_s},
       {"power_limit_w", c.power_limit_w},
       {"idle_w", c.idle_w},
       {"joules_per_byte_read", c.joules_per_byte_read},
       {"joules_per_bf16_flop", c.joules_per_bf16_flop},
       {"sources",
        {{"copy", c.copy_source},
         {"bf16_gemm", c.gemm_source},
         {"power_limit", c.power_limit_source},
         {"idle", c.idle_source},
         {"energy", c.energy_source}}}};
  if (!c.cache_file.empty()) j["cache"] = {{"file", c.cache_file}, {"measured_on", c.cached_on}};
}

void from_json(const nlohmann::json& j, DeviceCeilings& c) {
  c = DeviceCeilings{};
  j.at("device").get_to(c.device);
  j.at("copy_bytes_per_s").get_to(c.copy_bytes_per_s);
  j.at("bf16_flops_per_s").get_to(c.bf16_flops_per_s);
  j.at("power_limit_w").get_to(c.power_limit_w);
  j.at("idle_w").get_to(c.idle_w);
  j.at("joules_per_byte_read").get_to(c.joules_per_byte_read);
  j.at("joules_per_bf16_flop").get_to(c.joules_per_bf16_flop);
  const nlohmann::json& s = j.at("sources");
  s.at("copy").get_to(c.copy_source);
  s.at("bf16_gemm").get_to(c.gemm_source);
  s.at("power_limit").get_to(c.power_limit_source);
  s.at("idle").get_to(c.idle_source);
  s.at("energy").get_to(c.energy_source);
}

}  // namespace mxmoe::cli
