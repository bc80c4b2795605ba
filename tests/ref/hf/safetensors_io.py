"""safetensors read/write with numpy only. Format: 8-byte little-endian header length N, N bytes of
JSON {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}, then the raw
little-endian data; offsets are relative to the end of the header."""
import json
import os
import struct

import numpy as np

_NP = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I64": np.int64, "I32": np.int32}


def bf16_to_f32(u16):
    return (u16.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(x):
    """Round-to-nearest-even float32 -> bfloat16 bits (what torch's .to(torch.bfloat16) does)."""
    u = np.asarray(x, np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def read_safetensors(path):
    """name -> float64 array (integers stay integer)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        raw = data[b:e]
        if t["dtype"] == "BF16":
            a = bf16_to_f32(np.frombuffer(raw, "<u2")).astype(np.float64)
        else:
            a = np.frombuffer(raw, np.dtype(_NP[t["dtype"]]).newbyteorder("<"))
            a = a.astype(np.float64) if a.dtype.kind == "f" else a.astype(np.int64)
        out[name] = a.reshape(t["shape"])
    return out


def _encode(a, dtype):
    if dtype == "BF16":
        return f32_to_bf16(a).astype("<u2").tobytes()
    return np.asarray(a).astype(np.dtype(_NP[dtype]).newbyteorder("<")).tobytes()


def write_safetensors(path, tensors, dtype="F32"):
    """tensors: name -> array, written in `dtype` (F32, F16 or BF16), header padded to 8 bytes, data
    streamed tensor by tensor (memory: one tensor's encoding at a time)."""
    width = {"F32": 4, "F16": 2, "BF16": 2, "F64": 8}[dtype]
    header, off = {}, 0
    for name in sorted(tensors):
        shape = list(np.shape(tensors[name]))
        n = int(np.prod(shape, dtype=np.int64)) * width
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + n]}
        off += n
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for name in sorted(tensors):
            f.write(_encode(tensors[name], dtype))


def load_checkpoint(model_dir):
    """(config dict, name -> float64 weights) from config.json and model.safetensors or the shards
    that model.safetensors.index.json's weight_map lists."""
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    idx = os.path.join(model_dir, "model.safetensors.index.json")
    w = {}
    if os.path.exists(idx):
        with open(idx) as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
        for shard in shards:
            w.update(read_safetensors(os.path.join(model_dir, shard)))
    else:
        w = read_safetensors(os.path.join(model_dir, "model.safetensors"))
    return cfg, w
