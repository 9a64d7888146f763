"""The compiled library: the torch op registration and the C functions.

``libmxmoe_torch.so`` sits beside this file in an installed package
(``pip install .``); ``MXMOE_LIBRARY`` names another build of it.
"""
import ctypes
import json
import os

import torch

_PATH = os.environ.get("MXMOE_LIBRARY") or os.path.join(os.path.dirname(__file__), "libmxmoe_torch.so")
if not os.path.exists(_PATH):
    raise ImportError(f"mxmoe: the compiled library {_PATH} is missing; install the package with `pip install .`")
torch.ops.load_library(_PATH)  # registers torch.ops.mxmoe.*
_lib = ctypes.CDLL(_PATH)  # the same loaded object: its C functions

_i64, _int, _dbl, _ptr, _str = ctypes.c_int64, ctypes.c_int, ctypes.c_double, ctypes.c_void_p, ctypes.c_char_p
_ERROR = (ctypes.c_char_p, ctypes.c_size_t)
_lib.mxmoe_create_layer.restype = _i64
_lib.mxmoe_create_layer.argtypes = [_ptr] * 8 + [_i64] * 4 + [_dbl, _dbl, _str, _int, _int, _int, _int, _i64, *_ERROR]
_lib.mxmoe_create_layer_from_checkpoint.restype = _i64
_lib.mxmoe_create_layer_from_checkpoint.argtypes = [_str, _i64, _i64, _str, _int, _int, _int, *_ERROR]
_PROGRESS = ctypes.CFUNCTYPE(None, _i64, _i64)
_lib.mxmoe_load_layers.restype = _i64
_lib.mxmoe_load_layers.argtypes = [_str, ctypes.POINTER(_i64), _i64, _i64, _str, _int, _int, _int, _i64, _int, _i64,
                                   _PROGRESS, ctypes.POINTER(_i64), _i64, *_ERROR]
_lib.mxmoe_release_layer.restype = None
_lib.mxmoe_release_layer.argtypes = [_i64]
_lib.mxmoe_layer_workspace_bytes.restype = _i64
_lib.mxmoe_layer_workspace_bytes.argtypes = [_i64, _i64]
_lib.mxmoe_layer_info.restype = _i64
_lib.mxmoe_layer_info.argtypes = [_i64, ctypes.c_char_p, ctypes.c_size_t]
_lib.mxmoe_dispatch_info.restype = _i64
_lib.mxmoe_dispatch_info.argtypes = [_i64] * 4 + [_int, _str, _int, ctypes.c_char_p, ctypes.c_size_t]
_lib.mxmoe_quantize_mxfp4.restype = _i64
_lib.mxmoe_quantize_mxfp4.argtypes = [_ptr, _i64, _i64, _ptr, _ptr, *_ERROR]

# mxmoe::StatusCode as the exception a caller gets.
_EXCEPTIONS = {1: ValueError, 2: RuntimeError, 3: OSError, 4: RuntimeError, 5: MemoryError}


def _call(fn, *args):
    """Calls a C function whose last two parameters take an error message."""
    buf = ctypes.create_string_buffer(4096)
    rc = fn(*args, buf, len(buf))
    if rc < 0:
        raise _EXCEPTIONS.get(-rc, RuntimeError)(buf.value.decode(errors="replace"))
    return rc


def _json(fn, *args):
    """Calls a C function that writes JSON into (out, out_size)."""
    size = 1 << 14
    while True:
        buf = ctypes.create_string_buffer(size)
        rc = fn(*args, buf, size)
        if rc < 0:
            raise ValueError("mxmoe: unknown layer")
        if rc == 0:
            return json.loads(buf.value.decode())
        size = rc


_ACTIVATIONS = {"bf16": 0, "mxfp8": 1}
_SCALE_RULES = {"ceil": 0, "ocp": 1}


def activation_codes(activations, mxfp8_scale_rule):
    """The C functions' numbers for an activation format and an MXFP8 scale rule."""
    if activations not in _ACTIVATIONS:
        raise ValueError(f"mxmoe: activations must be one of {list(_ACTIVATIONS)}, got {activations!r}")
    if mxfp8_scale_rule not in _SCALE_RULES:
        raise ValueError(f"mxmoe: mxfp8_scale_rule must be one of {list(_SCALE_RULES)}, got {mxfp8_scale_rule!r}")
    return _ACTIVATIONS[activations], _SCALE_RULES[mxfp8_scale_rule]


def create_layer(tensors, shape, swiglu, backend, device, activations, host_threads, host_stream_tokens):
    """A layer handle from dense host tensors (see mxmoe_create_layer)."""
    ptrs = [t.data_ptr() if t is not None else None for t in tensors]
    return _call(_lib.mxmoe_create_layer, *ptrs, *shape, *swiglu, backend.encode(), device, *activations,
                 host_threads, host_stream_tokens)


def create_layer_from_checkpoint(path, layer, topk, backend, device, activations):
    return _call(_lib.mxmoe_create_layer_from_checkpoint, os.fsencode(path), layer, topk or 0, backend.encode(),
                 device, *activations)


def load_layers(path, layers, topk, backend, device, activations, max_device_bytes, host_threads, host_stream_tokens,
                progress, count):
    """Handles of the layers loaded (see mxmoe_load_layers); `count` bounds how many."""
    asked = (_i64 * len(layers))(*layers)
    handles = (_i64 * count)()
    callback = _PROGRESS(progress) if progress else ctypes.cast(None, _PROGRESS)
    budget = -1 if max_device_bytes is None else max_device_bytes
    n = _call(_lib.mxmoe_load_layers, os.fsencode(path), asked, len(layers), topk or 0, backend.encode(), device,
              *activations, budget, host_threads, host_stream_tokens, callback, handles, count)
    return list(handles[:n])


def release_layer(handle):
    _lib.mxmoe_release_layer(handle)


def layer_workspace_bytes(handle, max_tokens):
    return _lib.mxmoe_layer_workspace_bytes(handle, max_tokens)


def layer_info(handle):
    return _json(_lib.mxmoe_layer_info, handle)


def dispatch_info(shape, device, backend, activations):
    return _json(_lib.mxmoe_dispatch_info, *shape, device, backend.encode(), activations)


def quantize_mxfp4(x):
    """float32 [rows, cols] (contiguous, host) -> codes uint8 [rows, cols/2], scales uint8 [rows, cols/32]."""
    rows, cols = x.shape
    codes = torch.empty(rows, cols // 2, dtype=torch.uint8)
    scales = torch.empty(rows, cols // 32, dtype=torch.uint8)
    _call(_lib.mxmoe_quantize_mxfp4, x.data_ptr(), rows, cols, codes.data_ptr(), scales.data_ptr())
    return codes, scales
