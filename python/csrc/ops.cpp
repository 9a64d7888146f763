// The op schema and its CPU kernel. The op adapts tensors to MoeLayer::forward
// and does no arithmetic of its own.
#include "ops.h"

#include <stdexcept>
#include <string>
#include <type_traits>

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/headeronly/core/ScalarType.h>
#include <torch/headeronly/util/Exception.h>

#include "layer_registry.h"

namespace mxmoe::python {
namespace {

using torch::headeronly::ScalarType;

std::string dtype_name(ScalarType t) { return torch::headeronly::toString(t); }

// The message's pieces joined: strings as they are, integers in decimal.
// (Not through an ostream: under a CUDA torch, formatting an integer with the
// ostream in STD_TORCH_CHECK's message crashed the process, 2026-12-01.)
inline std::string piece(const std::string& s) { return s; }
inline std::string piece(const char* s) { return s; }
template <typename Int, typename = std::enable_if_t<std::is_integral_v<Int>>>
std::string piece(Int v) { return std::to_string(v); }
template <typename... Parts>
std::string cat(const Parts&... parts) { return (std::string() + ... + piece(parts)); }

// A caller's mistake: ValueError in Python (std::invalid_argument).
template <typename... Parts>
void check(bool ok, const Parts&... parts) {
  if (!ok) throw std::invalid_argument(cat(parts...));
}

// -1 for a CPU tensor, else its CUDA device index.
int device_of(const Tensor& t) { return t.is_cpu() ? -1 : int(t.get_device_index()); }

std::string where(int device) { return device < 0 ? "cpu" : "cuda:" + std::to_string(device); }

void check_routing_tensor(const char* name, const Tensor& t, ScalarType dtype, int64_t T, int64_t k, int device) {
  check(t.scalar_type() == dtype, "mxmoe.forward: ", name, " must be ", dtype_name(dtype), ", got ",
                  dtype_name(t.scalar_type()));
  check(t.dim() == 2 && t.size(0) == T && t.size(1) == k, "mxmoe.forward: ", name, " must be [", T, ", ",
                  k, "]");
  check(t.is_contiguous(), "mxmoe.forward: ", name, " must be contiguous");
  check(device_of(t) == device, "mxmoe.forward: ", name, " is on ", where(device_of(t)), ", x on ",
                  where(device));
}

}  // namespace

void forward(const Tensor& x, const std::optional<Tensor>& topk_ids, const std::optional<Tensor>& topk_weights,
             int64_t layer, Tensor& out, const std::optional<Tensor>& workspace, CUstream_st* stream,
             WorkspaceSource source) {
  const auto l = find_layer(layer);
  check(l != nullptr, "mxmoe.forward: layer ", layer, " does not exist (released, or never created)");
  const MoeShape& s = l->shape();
  const int device = device_of(x);
  check(device == l->device(), "mxmoe.forward: x is on ", where(device), ", the layer on ",
                  where(l->device()));
  check(x.scalar_type() == ScalarType::BFloat16, "mxmoe.forward: x must be bfloat16, got ",
                  dtype_name(x.scalar_type()));
  const int64_t dims = x.dim();
  check(dims >= 1 && x.size(dims - 1) == s.hidden, "mxmoe.forward: x must be [..., ", s.hidden, "]");
  check(x.stride(dims - 1) == 1, "mxmoe.forward: x's rows must be contiguous (stride 1 along H)");
  // The leading axes are the tokens: those longer than 1 must flatten to one
  // row stride (a view, as x.reshape(-1, H) would give without a copy).
  int64_t T = 1, x_row_stride = s.hidden;
  for (int64_t d = dims - 2, inner = -1; d >= 0; --d) {
    T *= x.size(d);
    if (x.size(d) <= 1) continue;
    if (inner < 0) x_row_stride = x.stride(d);
    else
      check(x.stride(d) == x.stride(inner) * x.size(inner),
            "mxmoe.forward: x's leading axes must flatten to one row stride (x.reshape(-1, H) would copy)");
    inner = d;
  }
  check(out.scalar_type() == ScalarType::BFloat16 || out.scalar_type() == ScalarType::Float,
                  "mxmoe.forward: out must be bfloat16 or float32, got ", dtype_name(out.scalar_type()));
  bool out_shape = out.dim() == dims;
  for (int64_t d = 0; out_shape && d < dims; ++d) out_shape = out.size(d) == x.size(d);
  check(out_shape, "mxmoe.forward: out must have x's shape (", T, " tokens of ", s.hidden, ")");
  check(out.is_contiguous(), "mxmoe.forward: out must be contiguous");
  check(device_of(out) == device, "mxmoe.forward: out is on ", where(device_of(out)), ", x on ",
                  where(device));
  check(topk_ids.has_value() == topk_weights.has_value(),
                  "mxmoe.forward: pass topk_ids and topk_weights together, or neither");
  if (topk_ids) {
    check_routing_tensor("topk_ids", *topk_ids, ScalarType::Int, T, s.topk, device);
    check_routing_tensor("topk_weights", *topk_weights, ScalarType::Float, T, s.topk, device);
  }
  if (T == 0) return;
  Tensor ws;  // its size is the layer's check
  void* ws_ptr = nullptr;
  size_t ws_size = 0;
  if (workspace) {
    ws = *workspace;
    check(ws.scalar_type() == ScalarType::Byte && ws.is_contiguous(),
                    "mxmoe.forward: workspace must be a contiguous uint8 tensor");
    check(device_of(ws) == device, "mxmoe.forward: workspace is on ", where(device_of(ws)), ", x on ",
                    where(device));
    ws_ptr = ws.mutable_data_ptr();
    ws_size = size_t(ws.numel());
  } else {
    ws_size = l->forward_workspace_bytes(T);
    if (source) ws_ptr = source(x, stream, ws_size);
    if (!ws_ptr) {
      const int64_t size[1] = {int64_t(ws_size)};
      ws = torch::stable::empty(torch::headeronly::IntHeaderOnlyArrayRef(size, 1), ScalarType::Byte, std::nullopt,
                                x.device());
      ws_ptr = ws.mutable_data_ptr();
    }
  }
  LayerForwardArgs a;
  a.x = static_cast<const uint16_t*>(x.const_data_ptr());
  a.x_row_stride = x_row_stride;
  a.tokens = T;
  if (topk_ids) {
    a.topk_ids = static_cast<const int32_t*>(topk_ids->const_data_ptr());
    a.topk_weights = static_cast<const float*>(topk_weights->const_data_ptr());
  }
  a.y = out.mutable_data_ptr();
  a.y_dtype = out.scalar_type() == ScalarType::Float ? OutputDtype::kFp32 : OutputDtype::kBf16;
  if (device < 0 && topk_ids)  // host memory: the ids can be read here, and a bad one named as such
    for (int64_t i = 0; i < T * s.topk; ++i)
      if (a.topk_ids[i] < 0 || a.topk_ids[i] >= s.experts)
        throw std::out_of_range(cat("mxmoe.forward: topk_ids[", i / s.topk, ", ", i % s.topk, "] = ", a.topk_ids[i],
                                    " is not an expert id in [0, ", s.experts, ")"));
  const Status st = l->forward(a, ws_ptr, ws_size, stream);
  // std::invalid_argument reaches Python as ValueError, runtime_error as RuntimeError.
  if (st.code() == StatusCode::kInvalidArgument) throw std::invalid_argument("mxmoe.forward: " + st.message());
  if (!st.ok()) throw std::runtime_error("mxmoe.forward: " + st.message());
}

namespace {

void forward_cpu(const Tensor& x, const std::optional<Tensor>& topk_ids, const std::optional<Tensor>& topk_weights,
                 int64_t layer, Tensor& out, const std::optional<Tensor>& workspace) {
  forward(x, topk_ids, topk_weights, layer, out, workspace, nullptr, nullptr);
}

}  // namespace
}  // namespace mxmoe::python

STABLE_TORCH_LIBRARY(mxmoe, m) {
  m.def(
      "forward(Tensor x, Tensor? topk_ids, Tensor? topk_weights, int layer, Tensor(a!) out, "
      "Tensor(b!)? workspace=None) -> ()");
}

STABLE_TORCH_LIBRARY_IMPL(mxmoe, CPU, m) { m.impl("forward", TORCH_BOX(&mxmoe::python::forward_cpu)); }
