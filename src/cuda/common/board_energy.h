// The board's energy counter: NVML's total energy consumption, millijoules
// since the driver loaded. Under a sustained load the H200 runs at its 700 W
// cap, which sets the SM clock (docs/PERF.md), so there the time of a forward
// follows its energy, and the energy is what to measure. libnvidia-ml comes
// with the driver and is opened at run time: the build needs no NVML header,
// and a machine without the library reports the counter as unavailable.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "mxmoe/status.h"

namespace mxmoe::smxx {

class BoardEnergyCounter {
 public:
  ~BoardEnergyCounter();
  BoardEnergyCounter(const BoardEnergyCounter&) = delete;
  BoardEnergyCounter& operator=(const BoardEnergyCounter&) = delete;

  // The counter of CUDA device `device`, or null with the reason in *why.
  static std::unique_ptr<BoardEnergyCounter> open(int device, std::string* why);

  // Millijoules since the driver loaded. The counter moves in steps, so a
  // difference is exact only between two of its update edges.
  Status read_mj(uint64_t* mj) const;

  // The power limit the board enforces (W): under a load that would draw
  // more, the clocks come down.
  Status read_power_limit_w(double* watts) const;

 private:
  struct Api;
  explicit BoardEnergyCounter(std::unique_ptr<Api> api);
  std::unique_ptr<Api> api_;
};

}  // namespace mxmoe::smxx
