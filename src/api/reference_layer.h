// The reference MoeLayer: the fp64 reference forward on host pointers.
#pragma once

#include <memory>
#include <string>

#include "mxmoe/layer.h"

namespace mxmoe {

// Copies the weights (the layer owns them) and serves forwards on the host.
Status create_reference_layer(std::string reason, const MoeWeightsView& weights, const ActivationOptions& activations,
                              std::unique_ptr<MoeLayer>* out);

}  // namespace mxmoe
