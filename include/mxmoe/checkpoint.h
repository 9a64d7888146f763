// GPT-OSS checkpoints (safetensors) as MoE layer views, without copying.
//
// A checkpoint is either
//   - a folder: config.json (HF or original OpenAI form, optional) and one or
//     more *.safetensors files, listed by model.safetensors.index.json
//     (weight_map) when that file is present; or
//   - a single .safetensors file: the shape then comes from the tensors, top-k
//     defaults to 4 and swiglu_limit to 7.
// Both naming schemes (HF "model.layers.N.mlp.experts.*" and OpenAI
// "block.N.mlp.mlp1_weight.*") are detected from the tensor names.
//
// Files are memory-mapped; the views layer() returns point into the mappings,
// which the Checkpoint owns, so they stay valid while the Checkpoint lives.
// Only the bytes a caller (or layer()'s scale check) touches are read from disk.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mxmoe/moe.h"
#include "mxmoe/status.h"

namespace mxmoe {

struct CheckpointInfo {
  MoeShape shape;           // experts, hidden, intermediate, topk
  SwigluParams swiglu;      // limit from config.json; alpha stays 1.702
  int64_t layers = 0;       // MoE layers the files hold (num_hidden_layers if configured)
  std::string naming;       // "hf" or "openai"
  std::vector<std::string> files;  // the safetensors files, in the order opened
  bool from_config = false;        // shape came from config.json (else from the tensors)
};

// Called during long steps: `stage` says what is happening, done/total count bytes.
using CheckpointProgress =
    std::function<void(const std::string& stage, int64_t done, int64_t total)>;

struct CheckpointOptions {
  std::optional<int64_t> topk;  // overrides the config's (or the default 4)
  CheckpointProgress progress;  // may be empty
};

class Checkpoint {
 public:
  ~Checkpoint();
  Checkpoint(const Checkpoint&) = delete;
  Checkpoint& operator=(const Checkpoint&) = delete;

  // Maps and validates the file headers (not the weights). Errors name the
  // file or tensor and the problem.
  static Status open(const std::string& path, const CheckpointOptions& options,
                     std::unique_ptr<Checkpoint>* out);
  static Status open(const std::string& path, std::optional<int64_t> topk_override,
                     std::unique_ptr<Checkpoint>* out);

  const CheckpointInfo& info() const;

  // Views of layer n's MoE block. Checks every tensor's dtype and shape against
  // info().shape, and that no E8M0 scale of the layer is 0xFF (NaN), naming
  // expert, row and block; only this layer's scale bytes are read for that.
  Status layer(int64_t n, MoeWeightsView* out) const;

  // Where `bytes` bytes at `p` (inside a view layer() gave) lie on disk: the
  // file's path and byte offset. False when they are not in this checkpoint.
  bool file_range(const void* p, size_t bytes, std::string* path, int64_t* offset) const;
  // Drops this process's mapping of the pages under [p, p + bytes) (they stay
  // in the page cache): a loader that reads the bytes with its own reads keeps
  // its resident memory to what it holds.
  void release_pages(const void* p, size_t bytes) const;

  struct Impl;  // opaque: the mappings and the tensor index

 private:
  explicit Checkpoint(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace mxmoe
