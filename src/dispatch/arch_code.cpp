// Which compiled CUDA code runs on which device (rules in include/mxmoe/dispatch.h).
#include <charconv>
#include <string_view>

#include "mxmoe/dispatch.h"

namespace mxmoe {

bool arch_code_runs_on(std::string_view arch, int sm) {
  if (arch.ends_with("-virtual")) return false;  // PTX only: not relied on
  if (arch.ends_with("-real")) arch.remove_suffix(5);
  int n = 0;
  const auto [end, ec] = std::from_chars(arch.data(), arch.data() + arch.size(), n);
  if (ec != std::errc() || n < 10) return false;
  const std::string_view suffix(end, size_t(arch.data() + arch.size() - end));
  const bool same_major = sm / 10 == n / 10, newer_minor = sm % 10 >= n % 10;
  if (suffix == "a") return sm == n;                     // arch-specific: this SM only
  if (suffix == "f" || suffix.empty()) return same_major && newer_minor;  // family / SASS
  return false;
}

}  // namespace mxmoe
