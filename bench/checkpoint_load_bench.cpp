// Shows that loading one layer of a large checkpoint touches only that layer.
//
// Writes a synthetic multi-layer GPT-OSS checkpoint (gpt-oss-20b MoE shapes,
// ~424 MB per layer; default ~2 GB) to a temp folder, drops it from the page
// cache, then opens it and loads one layer, printing the process's file-backed
// resident memory (RssFile) and the time after each step:
//   open            -> only the headers are read
//   layer(n)        -> only layer n's scales are read (the NaN check)
//   touch layer n   -> every page of layer n's tensors, still none of the others
//   usage: checkpoint_load_bench [--gb 2] [--layer 2] [--dir /tmp/mxmoe_bench_ckpt] [--keep]
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "mxmoe/checkpoint.h"

namespace fs = std::filesystem;

namespace {

int64_t rss_file_bytes() {
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("RssFile:", 0) == 0) return std::atoll(line.c_str() + 8) * 1024;
  return -1;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

struct Tensor {
  std::string name, dtype;
  std::vector<int64_t> shape;
  int64_t bytes = 0;
  bool scales = false;
};

std::vector<Tensor> layer_tensors(const mxmoe::MoeShape& s, int64_t l) {
  const int64_t E = s.experts, H = s.hidden, I = s.intermediate;
  const std::string p = fmt::format("model.layers.{}.mlp.", l);
  return {{p + "router.weight", "BF16", {E, H}, E * H * 2},
          {p + "router.bias", "BF16", {E}, E * 2},
          {p + "experts.gate_up_proj_blocks", "U8", {E, 2 * I, H / 32, 16}, E * 2 * I * H / 2},
          {p + "experts.gate_up_proj_scales", "U8", {E, 2 * I, H / 32}, E * 2 * I * H / 32, true},
          {p + "experts.gate_up_proj_bias", "BF16", {E, 2 * I}, E * 2 * I * 2},
          {p + "experts.down_proj_blocks", "U8", {E, H, I / 32, 16}, E * H * I / 2},
          {p + "experts.down_proj_scales", "U8", {E, H, I / 32}, E * H * I / 32, true},
          {p + "experts.down_proj_bias", "BF16", {E, H}, E * H * 2}};
}

// Streams the file out of 1 MB pattern buffers (random codes; scales in
// 2^-8..2^-5, never the NaN byte; small finite bf16) so writing 2 GB stays fast.
void write_checkpoint(const fs::path& dir, const mxmoe::MoeShape& s, int64_t layers) {
  fs::create_directories(dir);
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  std::vector<Tensor> all;
  int64_t off = 0;
  for (int64_t l = 0; l < layers; ++l)
    for (auto& t : layer_tensors(s, l)) {
      header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {off, off + t.bytes}}};
      off += t.bytes;
      all.push_back(t);
    }
  std::string h = header.dump();
  while ((8 + h.size()) % 4096) h.push_back(' ');  // page-aligned data section
  std::vector<char> pattern(1 << 20), scales(1 << 20), bf16(1 << 20);
  std::mt19937_64 rng(7);
  for (auto& c : pattern) c = char(rng());
  for (auto& c : scales) c = char(119 + rng() % 4);
  // Small finite bf16 values (|v| < 1: exponent byte 0x3C..0x3E, any sign).
  for (size_t i = 0; i < bf16.size(); i += 2) {
    bf16[i] = char(rng());
    bf16[i + 1] = char((rng() % 3 + 0x3C) | (rng() % 2 ? 0x80 : 0));
  }
  FILE* f = std::fopen((dir / "model.safetensors").c_str(), "wb");
  if (!f) {
    std::perror("fopen");
    std::exit(1);
  }
  const uint64_t n = h.size();
  std::fwrite(&n, 8, 1, f);  // little-endian host
  std::fwrite(h.data(), 1, h.size(), f);
  for (const auto& t : all) {
    const auto& src = t.scales ? scales : t.dtype == std::string("BF16") ? bf16 : pattern;
    for (int64_t left = t.bytes; left > 0;) {
      const size_t k = size_t(std::min<int64_t>(left, int64_t(src.size())));
      std::fwrite(src.data(), 1, k, f);
      left -= int64_t(k);
    }
  }
  std::fclose(f);
  nlohmann::json cfg = {{"hidden_size", s.hidden}, {"intermediate_size", s.intermediate},
                        {"num_local_experts", s.experts}, {"num_experts_per_tok", s.topk},
                        {"swiglu_limit", 7.0}, {"num_hidden_layers", layers}};
  std::ofstream(dir / "config.json") << cfg.dump(2);
}

// Asks the kernel to drop the file's pages so the timings include disk reads.
void drop_from_page_cache(const fs::path& file) {
  const int fd = ::open(file.c_str(), O_RDONLY);
  if (fd < 0) return;
  fdatasync(fd);
  posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

}  // namespace

int main(int argc, char** argv) {
  double gb = 2.0;
  int64_t layer = 2;
  fs::path dir = fs::temp_directory_path() / "mxmoe_bench_ckpt";
  bool keep = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--gb" && i + 1 < argc) gb = std::atof(argv[++i]);
    else if (a == "--layer" && i + 1 < argc) layer = std::atoll(argv[++i]);
    else if (a == "--dir" && i + 1 < argc) dir = argv[++i];
    else if (a == "--keep") keep = true;
    else {
      std::fprintf(stderr, "usage: %s [--gb 2] [--layer 2] [--dir PATH] [--keep]\n", argv[0]);
      return 2;
    }
  }
  const mxmoe::MoeShape shape = mxmoe::kGptOss20b;
  int64_t layer_bytes = 0, scale_bytes = 0;
  for (const auto& t : layer_tensors(shape, 0)) {
    layer_bytes += t.bytes;
    if (t.scales) scale_bytes += t.bytes;
  }
  const int64_t layers = std::max<int64_t>(1, int64_t(gb * 1e9 / double(layer_bytes) + 0.5));
  layer = std::min(layer, layers - 1);

  auto t0 = std::chrono::steady_clock::now();
  write_checkpoint(dir, shape, layers);
  const fs::path file = dir / "model.safetensors";
  fmt::print("wrote {} layers, {:.2f} GB ({:.1f} MB per layer) to {} in {:.1f} s\n", layers,
             double(fs::file_size(file)) / 1e9, double(layer_bytes) / 1e6, file.string(),
             seconds_since(t0));
  drop_from_page_cache(file);

  const int64_t rss0 = rss_file_bytes();
  auto report = [&](const char* step, double secs) {
    fmt::print("  {:<26} {:8.3f} s   RssFile +{:8.1f} MB\n", step, secs,
               double(rss_file_bytes() - rss0) / 1e6);
  };
  t0 = std::chrono::steady_clock::now();
  std::unique_ptr<mxmoe::Checkpoint> ckpt;
  if (auto s = mxmoe::Checkpoint::open(dir.string(), std::nullopt, &ckpt); !s.ok()) {
    fmt::print(stderr, "error: {}\n", s.message());
    return 1;
  }
  report("open", seconds_since(t0));

  t0 = std::chrono::steady_clock::now();
  mxmoe::MoeWeightsView v;
  if (auto s = ckpt->layer(layer, &v); !s.ok()) {
    fmt::print(stderr, "error: {}\n", s.message());
    return 1;
  }
  report(fmt::format("layer({}) incl. NaN check", layer).c_str(), seconds_since(t0));

  t0 = std::chrono::steady_clock::now();
  uint64_t sum = 0;
  auto touch = [&](const void* p, int64_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    for (int64_t i = 0; i < n; i += 4096) sum += b[i];
    sum += b[n - 1];
  };
  const int64_t E = shape.experts, H = shape.hidden, I = shape.intermediate;
  touch(v.w13.codes, E * 2 * I * H / 2);
  touch(v.w2.codes, E * H * I / 2);
  touch(v.b13, E * 2 * I * 2);
  touch(v.b2, E * H * 2);
  touch(v.router_weight, E * H * 2);
  report(fmt::format("touch all of layer {}", layer).c_str(), seconds_since(t0));

  fmt::print("file {:.1f} MB, layer {:.1f} MB, its scales {:.1f} MB (checksum {})\n",
             double(fs::file_size(file)) / 1e6, double(layer_bytes) / 1e6, double(scale_bytes) / 1e6,
             sum % 1000);
  ckpt.reset();
  if (!keep) fs::remove_all(dir);
  return 0;
}
