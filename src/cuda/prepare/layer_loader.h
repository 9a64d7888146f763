// load_layers onto a GPU (include/mxmoe/load.h): the read / upload / prepare
// pipeline.
#pragma once

#include <memory>
#include <vector>

#include "mxmoe/checkpoint.h"
#include "mxmoe/load.h"

namespace mxmoe::smxx {

Status load_device_layers(const Checkpoint& checkpoint, const std::vector<int64_t>& layers, const LoadOptions& options,
                          std::vector<std::unique_ptr<MoeLayer>>* out, LoadStats* stats);

}  // namespace mxmoe::smxx
