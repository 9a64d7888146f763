#pragma once

#include <string>

#include "mxmoe/backend.h"

namespace mxmoe::cli {

// Resolves `requested` ("auto" or a backend name; MXMOE_BACKEND applies when it
// is "auto") to a backend, with the reason for the choice.
Status resolve_backend(const std::string& requested, const MoeShape& shape, BackendKind* kind,
                       std::string* reason);

}  // namespace mxmoe::cli
