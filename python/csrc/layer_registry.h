// Layers the Python package created, by handle: the torch ops name a layer by
// an int (an op's schema holds no C++ object), and the module that owns a
// handle releases it. Handles are never reused.
#pragma once

#include <cstdint>
#include <memory>

#include "mxmoe/layer.h"

namespace mxmoe::python {

int64_t register_layer(std::unique_ptr<MoeLayer> layer);
// The layer, kept alive for the caller's use even if released meanwhile;
// null for an unknown or released handle.
std::shared_ptr<const MoeLayer> find_layer(int64_t handle);
void release_layer(int64_t handle);

}  // namespace mxmoe::python
