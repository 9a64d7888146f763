// mxmoe info: what this binary carries, what it sees, what `auto` picks.
#include <cstdio>

#include <fmt/format.h>

#include "backend_choice.h"
#include "commands.h"
#include "mxmoe/device.h"

namespace mxmoe::cli {
namespace {

int run() {
  const auto archs = compiled_cuda_archs();
  fmt::print("mxmoe {}\n", MXMOE_VERSION);
  fmt::print("build: CUDA archs compiled in: {}\n", archs.empty() ? "none (CPU-only build)" : fmt::format("{}", fmt::join(archs, ", ")));
  std::string why;
  const auto devices = list_devices(&why);
  if (devices.empty()) fmt::print("devices: none ({})\n", why);
  for (const auto& d : devices)
    fmt::print("device {}: {}, SM{}, {} SMs, {:.1f} GiB, L2 {:.0f} MiB\n", d.index, d.name, d.sm,
               d.multiprocessors, double(d.memory_bytes) / (1 << 30), double(d.l2_bytes) / (1 << 20));
  BackendKind kind;
  std::string reason;
  if (Status s = resolve_backend("auto", kGptOss20b, &kind, &reason); !s.ok()) {
    std::fprintf(stderr, "mxmoe info: %s\n", s.message().c_str());
    return 2;
  }
  fmt::print("auto: {} ({})\n", backend_name(kind), reason);
  return 0;
}

}  // namespace

Runner add_info(CLI::App& parent) {
  parent.add_subcommand("info", "Build, devices, backends and the one `auto` picks");
  return [] { return run(); };
}

}  // namespace mxmoe::cli
