"""A small GGUF v3 writer (numpy only), enough to hand a harvest checkpoint to llama.cpp for
tests/bench_llamacpp.sh. Layout (ggml's docs/gguf.md): magic "GGUF", version 3, tensor and key/value
counts (u64), the key/values, the tensor infos (name, dims innermost first, ggml type, offset), then
the tensor data, each aligned to 32 bytes. Tensors are written one at a time from callables, so a
multi-gigabyte checkpoint is converted in flat memory."""
import struct

import numpy as np

ALIGN = 32
# value types
U32, I32, F32, BOOL, STRING, ARRAY, U64, F64 = 4, 5, 6, 7, 8, 9, 10, 12
# ggml tensor types
GGML_F32, GGML_F16, GGML_BF16 = 0, 1, 30
_BYTES = {GGML_F32: 4, GGML_F16: 2, GGML_BF16: 2}


def _str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _value(vtype, v):
    if vtype == STRING:
        return _str(v)
    if vtype == ARRAY:
        etype, items = v
        out = [struct.pack("<IQ", etype, len(items))]
        if etype == STRING:
            out += [_str(x) for x in items]
        else:
            fmt = {U32: "I", I32: "i", F32: "f", BOOL: "?", U64: "Q", F64: "d"}[etype]
            out.append(struct.pack("<%d%s" % (len(items), fmt), *items))
        return b"".join(out)
    fmt = {U32: "<I", I32: "<i", F32: "<f", BOOL: "<?", U64: "<Q", F64: "<d"}[vtype]
    return struct.pack(fmt, v)


class GGUFWriter:
    def __init__(self):
        self.kv = []       # (key, type, value)
        self.tensors = []  # (name, numpy shape outermost first, ggml type, fetch() -> bytes-like)

    def add(self, key, vtype, value):
        self.kv.append((key, vtype, value))

    def add_tensor(self, name, shape, ggml_type, fetch):
        self.tensors.append((name, tuple(int(d) for d in shape), ggml_type, fetch))

    def write(self, path):
        head = [b"GGUF", struct.pack("<IQQ", 3, len(self.tensors), len(self.kv))]
        for key, vtype, value in self.kv:
            head += [_str(key), struct.pack("<I", vtype), _value(vtype, value)]
        offsets, off = [], 0
        for name, shape, gtype, _ in self.tensors:
            nbytes = int(np.prod(shape)) * _BYTES[gtype]
            dims = shape[::-1]  # ggml's ne[0] is the innermost (row) length
            head += [_str(name), struct.pack("<I", len(dims)),
                     struct.pack("<%dQ" % len(dims), *dims), struct.pack("<IQ", gtype, off)]
            offsets.append((off, nbytes))
            off += (nbytes + ALIGN - 1) // ALIGN * ALIGN
        blob = b"".join(head)
        with open(path, "wb") as f:
            f.write(blob)
            f.write(b"\0" * (-len(blob) % ALIGN))
            for (name, shape, gtype, fetch), (o, nbytes) in zip(self.tensors, offsets):
                data = memoryview(np.ascontiguousarray(fetch())).cast("B")
                if len(data) != nbytes:
                    raise ValueError(f"{name}: {len(data)} bytes, expected {nbytes}")
                f.write(data)
                f.write(b"\0" * (-nbytes % ALIGN))
