// Checkpoint: opens GPT-OSS safetensors (one file or index-listed shards) and
// hands out zero-copy layer views after checking shapes and NaN scales.
#include "mxmoe/checkpoint.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <sys/mman.h>
#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "checkpoint/gpt_oss_layout.h"
#include "checkpoint/safetensors.h"
#include "mxmoe/format.h"

namespace mxmoe {

namespace fs = std::filesystem;

struct Checkpoint::Impl {
  std::string path;
  CheckpointInfo info;
  CheckpointOptions options;
  GptOssNaming naming = GptOssNaming::kHf;
  std::vector<SafetensorsFile> files;
  std::map<std::string, size_t> file_of;  // tensor name -> index into files
};

namespace {

constexpr int64_t kDefaultTopk = 4;        // both GPT-OSS models route to 4 experts
constexpr float kDefaultSwigluLimit = 7.0f;  // both GPT-OSS models clamp at 7
// Progress granularity of the NaN-scale scan: a 120b layer has ~100 MB of scales.
constexpr size_t kScanChunk = size_t(16) << 20;

Status read_text(const fs::path& p, std::string* out) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return Status::IoError(fmt::format("{}: cannot open", p.string()));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Status::IoError(fmt::format("{}: read failed", p.string()));
  *out = ss.str();
  return Status::Ok();
}

// Shard file names listed by model.safetensors.index.json, and which tensor
// lives where. Names must stay inside the folder.
Status read_index(const fs::path& index_path, std::map<std::string, std::string>* weight_map) {
  std::string text;
  MXMOE_RETURN_IF_ERROR(read_text(index_path, &text));
  const auto doc = nlohmann::json::parse(text, nullptr, false);
  const std::string file = index_path.string();
  if (doc.is_discarded()) return Status::IoError(fmt::format("{}: not valid JSON", file));
  if (!doc.is_object()) return Status::IoError(fmt::format("{}: not a JSON object", file));
  const auto wm = doc.find("weight_map");
  if (wm == doc.end() || !wm->is_object())
    return Status::IoError(fmt::format("{}: missing object 'weight_map'", file));
  for (const auto& [name, shard] : wm->items()) {
    if (!shard.is_string())
      return Status::IoError(fmt::format("{}: weight_map entry '{}' is not a string", file, name));
    const std::string s = shard.get<std::string>();
    const fs::path sp(s);
    if (s.empty() || sp.is_absolute() || s.find("..") != std::string::npos)
      return Status::IoError(
          fmt::format("{}: weight_map entry '{}' names '{}', not a file in the folder", file, name, s));
    (*weight_map)[name] = s;
  }
  if (weight_map->empty()) return Status::IoError(fmt::format("{}: empty weight_map", file));
  return Status::Ok();
}

Status open_folder(const fs::path& dir, Checkpoint::Impl* c, std::optional<GptOssConfig>* config) {
  const fs::path config_path = dir / "config.json";
  if (fs::exists(config_path)) {
    std::string text;
    MXMOE_RETURN_IF_ERROR(read_text(config_path, &text));
    GptOssConfig cfg;
    MXMOE_RETURN_IF_ERROR(parse_gpt_oss_config(text, config_path.string(), &cfg));
    *config = cfg;
  }
  const fs::path index_path = dir / "model.safetensors.index.json";
  std::vector<std::string> shard_names;
  std::map<std::string, std::string> weight_map;
  if (fs::exists(index_path)) {
    MXMOE_RETURN_IF_ERROR(read_index(index_path, &weight_map));
    std::set<std::string> unique;
    for (const auto& [name, shard] : weight_map) unique.insert(shard);
    shard_names.assign(unique.begin(), unique.end());
  } else {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dir, ec))
      if (entry.path().extension() == ".safetensors") shard_names.push_back(entry.path().filename());
    if (ec) return Status::IoError(fmt::format("{}: cannot list: {}", dir.string(), ec.message()));
    std::sort(shard_names.begin(), shard_names.end());
    if (shard_names.empty())
      return Status::IoError(fmt::format("{}: no .safetensors files in the folder", dir.string()));
  }

  std::map<std::string, size_t> shard_index;
  for (const auto& s : shard_names) {
    const auto& cb = c->options.progress;
    if (cb) cb("opening " + s, int64_t(c->files.size()), int64_t(shard_names.size()));
    SafetensorsFile f;
    MXMOE_RETURN_IF_ERROR(SafetensorsFile::open((dir / s).string(), &f));
    shard_index[s] = c->files.size();
    c->files.push_back(std::move(f));
  }
  if (!weight_map.empty()) {
    for (const auto& [name, shard] : weight_map) {
      const size_t i = shard_index.at(shard);
      if (!c->files[i].header.find(name))
        return Status::IoError(fmt::format("{}: weight_map puts tensor '{}' in {}, which does not hold it",
                                           index_path.string(), name, c->files[i].path()));
      c->file_of[name] = i;
    }
  } else {
    for (size_t i = 0; i < c->files.size(); ++i)
      for (const auto& t : c->files[i].header.tensors) {
        const auto [it, added] = c->file_of.emplace(t.name, i);
        if (!added)
          return Status::IoError(fmt::format("tensor '{}' is in both {} and {}", t.name,
                                             c->files[it->second].path(), c->files[i].path()));
      }
  }
  return Status::Ok();
}

}  // namespace

Checkpoint::Checkpoint(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Checkpoint::~Checkpoint() = default;

const CheckpointInfo& Checkpoint::info() const { return impl_->info; }

bool Checkpoint::file_range(const void* p, size_t bytes, std::string* path, int64_t* offset) const {
  for (const SafetensorsFile& f : impl_->files)
    if (f.map.contains(p, bytes)) {
      *path = f.path();
      *offset = static_cast<const uint8_t*>(p) - f.map.data();
      return true;
    }
  return false;
}

void Checkpoint::release_pages(const void* p, size_t bytes) const {
  const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = uintptr_t(p) / page * page, end = (uintptr_t(p) + bytes + page - 1) / page * page;
  for (const SafetensorsFile& f : impl_->files)
    if (f.map.contains(p, bytes)) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

Status Checkpoint::open(const std::string& path, std::optional<int64_t> topk_override,
                        std::unique_ptr<Checkpoint>* out) {
  CheckpointOptions o;
  o.topk = topk_override;
  return open(path, o, out);
}

namespace {

// Fills the shape fields config.json left out from layer 0's blocks tensors:
// w13 blocks [E, 2I, H/32, 16] give E and H, w2 blocks [E, H, I/32, 16] give I.
Status infer_shape(const Checkpoint::Impl& c, MoeShape* shape) {
  const auto names = gpt_oss_layer_names(c.naming, 0);
  auto find = [&](const std::string& name, const SafetensorsTensor** t) -> Status {
    const auto it = c.file_of.find(name);
    if (it == c.file_of.end())
      return Status::IoError(fmt::format("{}: tensor '{}' not found (needed to infer the shape)",
                                         c.path, name));
    *t = c.files[it->second].header.find(name);
    // Dimensions of a tensor with a zero-sized axis are not bounded by the file
    // size; require non-empty tensors so the products below cannot overflow.
    const auto& d = (*t)->shape;
    if (d.size() != 4 || d[3] != 16 || d[0] <= 0 || d[1] <= 0 || d[2] <= 0)
      return Status::IoError(fmt::format("{}: tensor '{}' has shape {}, expected non-empty [experts, rows, blocks, 16]",
                                         c.files[it->second].path(), name, shape_string((*t)->shape)));
    return Status::Ok();
  };
  const SafetensorsTensor *w13 = nullptr, *w2 = nullptr;
  MXMOE_RETURN_IF_ERROR(find(names.w13_blocks, &w13));
  MXMOE_RETURN_IF_ERROR(find(names.w2_blocks, &w2));
  if (shape->experts == 0) shape->experts = w13->shape[0];
  if (shape->hidden == 0) shape->hidden = w13->shape[2] * kMxBlock;
  if (shape->intermediate == 0) shape->intermediate = w2->shape[2] * kMxBlock;
  return Status::Ok();
}

}  // namespace

Status Checkpoint::open(const std::string& path, const CheckpointOptions& options,
                        std::unique_ptr<Checkpoint>* out) {
  try {
    auto c = std::make_unique<Impl>();
    c->path = path;
    c->options = options;
    std::optional<GptOssConfig> config;
    std::error_code ec;
    const auto st = fs::status(path, ec);
    if (ec || !fs::exists(st)) return Status::IoError(fmt::format("{}: no such file or folder", path));
    if (fs::is_directory(st)) {
      MXMOE_RETURN_IF_ERROR(open_folder(path, c.get(), &config));
    } else {
      SafetensorsFile f;
      MXMOE_RETURN_IF_ERROR(SafetensorsFile::open(path, &f));
      for (const auto& t : f.header.tensors) c->file_of[t.name] = 0;
      c->files.push_back(std::move(f));
    }

    std::vector<std::string> names;
    for (const auto& [name, file] : c->file_of) names.push_back(name);
    const auto layout = detect_gpt_oss_layout(names);
    if (!layout)
      return Status::IoError(fmt::format(
          "{}: no GPT-OSS MoE tensors (neither 'model.layers.N.mlp.experts.gate_up_proj_blocks' "
          "nor 'block.N.mlp.mlp1_weight.blocks')",
          path));
    c->naming = layout->naming;

    CheckpointInfo& info = c->info;
    info.naming = gpt_oss_naming_name(layout->naming);
    for (const auto& f : c->files) info.files.push_back(f.path());
    info.layers = layout->layers;
    if (config) {
      info.shape.experts = config->experts.value_or(0);
      info.shape.hidden = config->hidden.value_or(0);
      info.shape.intermediate = config->intermediate.value_or(0);
      info.from_config = config->experts && config->hidden && config->intermediate;
      if (config->layers) info.layers = *config->layers;
      if (config->swiglu_limit) info.swiglu.limit = *config->swiglu_limit;
      else info.swiglu.limit = kDefaultSwigluLimit;
    } else {
      info.swiglu.limit = kDefaultSwigluLimit;
    }
    if (!info.from_config) MXMOE_RETURN_IF_ERROR(infer_shape(*c, &info.shape));
    info.shape.topk = options.topk.value_or(
        config && config->topk ? *config->topk : std::min(kDefaultTopk, info.shape.experts));
    if (Status s = validate_shape(info.shape); !s.ok())
      return Status::InvalidArgument(fmt::format("{}: {}", path, s.message()));
    *out = std::unique_ptr<Checkpoint>(new Checkpoint(std::move(c)));
    return Status::Ok();
  } catch (const std::exception& e) {
    // Filesystem and allocation failures must not escape the Status API.
    return Status::IoError(fmt::format("{}: {}", path, e.what()));
  }
}

namespace {

// One tensor of a layer, checked against the dtype and shape the config implies.
struct TensorRef {
  const SafetensorsFile* file = nullptr;
  const SafetensorsTensor* tensor = nullptr;
  const uint8_t* data() const { return file->data(*tensor); }
};

Status find_tensor(const Checkpoint::Impl& c, const std::string& name, const char* dtype,
                   const std::vector<int64_t>& shape, const std::string& shape_source,
                   TensorRef* out) {
  const auto it = c.file_of.find(name);
  if (it == c.file_of.end())
    return Status::IoError(fmt::format("{}: tensor '{}' not found", c.path, name));
  const SafetensorsFile& f = c.files[it->second];
  const SafetensorsTensor* t = f.header.find(name);
  if (t->dtype != dtype)
    return Status::InvalidArgument(fmt::format("{}: tensor '{}' has dtype {}, expected {}",
                                               f.path(), name, t->dtype, dtype));
  if (t->shape != shape)
    return Status::InvalidArgument(fmt::format("{}: tensor '{}' has shape {}, expected {} ({})",
                                               f.path(), name, shape_string(t->shape),
                                               shape_string(shape), shape_source));
  *out = {&f, t};
  return Status::Ok();
}

// The scales tensor must match its blocks tensor: one E8M0 byte per 16-byte block.
Status find_scales(const Checkpoint::Impl& c, const std::string& name, const TensorRef& blocks,
                   TensorRef* out) {
  const auto& bs = blocks.tensor->shape;
  const std::vector<int64_t> expected(bs.begin(), bs.end() - 1);
  const auto it = c.file_of.find(name);
  if (it == c.file_of.end())
    return Status::IoError(fmt::format("{}: tensor '{}' not found", c.path, name));
  const SafetensorsFile& f = c.files[it->second];
  const SafetensorsTensor* t = f.header.find(name);
  if (t->dtype != "U8")
    return Status::InvalidArgument(
        fmt::format("{}: tensor '{}' has dtype {}, expected U8", f.path(), name, t->dtype));
  if (t->shape != expected)
    return Status::InvalidArgument(fmt::format(
        "{}: scales '{}' has shape {}, which disagrees with blocks '{}' {} (expected {})", f.path(),
        name, shape_string(t->shape), blocks.tensor->name, shape_string(bs), shape_string(expected)));
  *out = {&f, t};
  return Status::Ok();
}

// Scans an [E, rows, blocks] scale tensor for 0xFF (E8M0 NaN), reporting progress.
Status check_scales(const Checkpoint::Impl& c, const TensorRef& scales, const std::string& stage,
                    int64_t* done, int64_t total, bool interleaved_gate_up) {
  const auto& s = scales.tensor->shape;
  const int64_t rows = s[1], per_row = s[2];
  const uint8_t* base = scales.data();
  const size_t n = size_t(scales.tensor->end - scales.tensor->begin);
  for (size_t off = 0; off < n; off += kScanChunk) {
    const size_t len = std::min(kScanChunk, n - off);
    // memchr: the scan runs at memory bandwidth, so validation costs little
    // next to reading the pages in.
    if (const void* hit = std::memchr(base + off, kE8M0NaN, len)) {
      const int64_t at = static_cast<const uint8_t*>(hit) - base;
      const int64_t e = at / (rows * per_row), r = (at / per_row) % rows, b = at % per_row;
      std::string row = fmt::format("row {}", r);
      if (interleaved_gate_up) row += fmt::format(" ({} {})", r % 2 ? "up" : "gate", r / 2);
      return Status::InvalidArgument(fmt::format(
          "{}: tensor '{}': scale byte 0xFF (NaN) at expert {}, {}, block {} (elements {}..{})",
          scales.file->path(), scales.tensor->name, e, row, b, b * kMxBlock, b * kMxBlock + kMxBlock - 1));
    }
    *done += int64_t(len);
    if (c.options.progress) c.options.progress(stage, *done, total);
  }
  return Status::Ok();
}

// Rejects a bf16 tensor holding Inf or NaN (exponent bits all ones): a router
// or bias like that turns every output it touches into NaN.
Status check_finite_bf16(const TensorRef& t) {
  const auto* v = reinterpret_cast<const uint16_t*>(t.data());
  const int64_t n = (t.tensor->end - t.tensor->begin) / 2;
  const int64_t inner = t.tensor->shape.back();
  for (int64_t i = 0; i < n; ++i)
    if ((v[i] & 0x7F80u) == 0x7F80u)
      return Status::InvalidArgument(fmt::format(
          "{}: tensor '{}': non-finite value ({}) at [{}, {}]", t.file->path(), t.tensor->name,
          (v[i] & 0x7Fu) ? "NaN" : "Inf", i / inner, i % inner));
  return Status::Ok();
}

}  // namespace

Status Checkpoint::layer(int64_t n, MoeWeightsView* out) const {
  try {
    const Impl& c = *impl_;
    const MoeShape& s = c.info.shape;
    if (n < 0 || n >= c.info.layers)
      return Status::InvalidArgument(fmt::format("{}: layer {} is out of range [0, {})", c.path, n,
                                                 c.info.layers));
    const auto names = gpt_oss_layer_names(c.naming, n);
    const int64_t E = s.experts, H = s.hidden, I = s.intermediate;
    const std::string src = fmt::format("experts={}, hidden={}, intermediate={} from {}", E, H, I,
                                        c.info.from_config ? "config.json" : "layer 0's tensors");
    TensorRef w13b, w13s, b13, w2b, w2s, b2, rw, rb;
    MXMOE_RETURN_IF_ERROR(find_tensor(c, names.w13_blocks, "U8", {E, 2 * I, H / kMxBlock, 16}, src, &w13b));
    MXMOE_RETURN_IF_ERROR(find_scales(c, names.w13_scales, w13b, &w13s));
    MXMOE_RETURN_IF_ERROR(find_tensor(c, names.b13, "BF16", {E, 2 * I}, src, &b13));
    MXMOE_RETURN_IF_ERROR(find_tensor(c, names.w2_blocks, "U8", {E, H, I / kMxBlock, 16}, src, &w2b));
    MXMOE_RETURN_IF_ERROR(find_scales(c, names.w2_scales, w2b, &w2s));
    MXMOE_RETURN_IF_ERROR(find_tensor(c, names.b2, "BF16", {E, H}, src, &b2));
    MXMOE_RETURN_IF_ERROR(find_tensor(c, names.router_weight, "BF16", {E, H}, src, &rw));
    MXMOE_RETURN_IF_ERROR(find_tensor(c, names.router_bias, "BF16", {E}, src, &rb));

    // Only this layer's scale tensors are read: the check touches ~1/16 of the
    // layer's bytes and none of the other layers'.
    const std::string stage = fmt::format("checking scales of layer {}", n);
    const int64_t total = int64_t(w13s.tensor->end - w13s.tensor->begin) +
                          int64_t(w2s.tensor->end - w2s.tensor->begin);
    int64_t done = 0;
    MXMOE_RETURN_IF_ERROR(check_scales(c, w13s, stage, &done, total, true));
    MXMOE_RETURN_IF_ERROR(check_scales(c, w2s, stage, &done, total, false));
    for (const TensorRef* t : {&b13, &b2, &rw, &rb}) MXMOE_RETURN_IF_ERROR(check_finite_bf16(*t));

    MoeWeightsView v;
    v.shape = s;
    v.swiglu = c.info.swiglu;
    // Alignment of the bf16 tensors was checked by the header parser.
    auto bf16 = [](const TensorRef& t) { return reinterpret_cast<const uint16_t*>(t.data()); };
    v.router_weight = bf16(rw);
    v.router_bias = bf16(rb);
    // blocks [E, 2I, H/32, 16] are byte-for-byte codes [E, 2I, H/2] (low nibble = even element).
    v.w13 = MxMatrixView::dense(w13b.data(), w13s.data(), E, 2 * I, H);
    v.b13 = bf16(b13);
    v.b13_expert_stride = 2 * I;
    v.w2 = MxMatrixView::dense(w2b.data(), w2s.data(), E, H, I);
    v.b2 = bf16(b2);
    v.b2_expert_stride = H;
    MXMOE_RETURN_IF_ERROR(validate_weights(v));
    *out = v;
    return Status::Ok();
  } catch (const std::exception& e) {
    return Status::IoError(fmt::format("{}: layer {}: {}", impl_->path, n, e.what()));
  }
}

}  // namespace mxmoe
