// A GPU's measured ceilings kept between runs, one small JSON file a board:
// $XDG_CACHE_HOME/mxmoe (else ~/.cache/mxmoe)/ceilings-<UUID>.json. An entry
// holds for the same board name, UUID, PCI bus id and driver: a new driver
// can move both rates (its clocks, cuBLAS's kernel choice).
#pragma once

#include <string>

#include "device_ceilings.h"
#include "mxmoe/status.h"

namespace mxmoe::cli {

struct DeviceIdentity {
  std::string name, uuid, pci_bus_id, driver;
  bool operator==(const DeviceIdentity&) const = default;
};

// Raised whenever what the ceilings mean or how they are measured changes,
// so that entries measured the old way are measured again.
inline constexpr int kCeilingsCacheFormat = 1;

// The folder, from XDG_CACHE_HOME or else HOME; "" where neither is set.
std::string ceilings_cache_dir();

// `dir`/ceilings-<UUID>.json, the UUID kept to letters, digits and '-'.
std::string ceilings_cache_file(const std::string& dir, const DeviceIdentity& id);

// True, with *out's cache_file and cached_on set, where `dir` holds an entry
// in this format for exactly this identity; false for a missing, unreadable,
// malformed or other board's file.
bool load_cached_ceilings(const std::string& dir, const DeviceIdentity& id, DeviceCeilings* out);

// Writes the entry with today's date (UTC), creating `dir`: through a
// temporary file renamed over the entry, so that a bench starting at the same
// time reads the old file or the new one, never half of one.
Status store_ceilings(const std::string& dir, const DeviceIdentity& id, const DeviceCeilings& c);

}  // namespace mxmoe::cli
