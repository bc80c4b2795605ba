"""FP8 block-scaled checkpoints as transformers' fine-grained FP8 integration reads them, in float64
and numpy only (written from src/transformers/integrations/finegrained_fp8.py and
quantizers/quantizer_finegrained_fp8.py, read with the search tools; never from the C):

- quantization_config {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
  "weight_block_size": [bo, bi], "modules_to_not_convert": [...]}: replace_with_fp8_linear turns
  every nn.Linear into FP8Linear except those whose parameter name contains a pattern of
  modules_to_not_convert (matched against the name with each run of digits "*", and in older
  transformers against the name itself; both are honoured here) or "lm_head" (always added).
  Embeddings (nn.Embedding) and norms are never FP8.
- an FP8Linear's weight is float8_e4m3fn (out, in) with weight_scale_inv float32
  (ceil(out / bo), ceil(in / bi)) (DeepSeek-V3 stores it F32; the Qwen3 dense FP8 releases BF16,
  HabanaAI/vllm-fork#2141; Qwen3-4B-Instruct-2507-FP8 F16, InternLM/lmdeploy#4276: all read,
  widened), and the weight is
  Fp8Dequantize.convert's W[r, c] = float(q[r, c]) * weight_scale_inv[r // bo, c // bi]: what
  transformers computes on a machine without an FP8 GPU (the quantizer then dequantizes).
  On a GPU FP8Linear also quantizes the activations per 128 inputs (activation_scheme "dynamic",
  act_quant); harvest and this reference do not: the product is with the dequantized weight.

load_checkpoint(dir) -> (config, name -> float64 weights dequantized); a weight that should be
FP8 stored otherwise, an FP8 weight without its scale, a scale of the wrong shape, and a scale
for a weight that is not FP8 are ValueErrors naming the tensor. tests/test_fp8_checkpoint.py
checks harvest against tests/ref/hf run on these weights.
"""
import json
import math
import os
import re
import struct

import numpy as np

FP8_MAX = 448.0  # torch.finfo(torch.float8_e4m3fn).max


def e4m3_table():
    """The 256 float8_e4m3fn values by byte: sign, 4 exponent bits (bias 7), 3 mantissa bits;
    exponent 0 subnormal (m / 8 * 2^-6); S.1111.111 NaN (no infinities)."""
    t = np.empty(256, np.float64)
    for b in range(256):
        s, e, m = b >> 7, (b >> 3) & 0xF, b & 7
        if e == 15 and m == 7:
            v = math.nan
        elif e == 0:
            v = math.ldexp(m / 8.0, -6)
        else:
            v = math.ldexp(1.0 + m / 8.0, e - 7)
        t[b] = -v if s else v
    return t


E4M3 = e4m3_table()

LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "mlp.gate",
          "lm_head", "w1", "w2", "w3", "block_sparse_moe.gate")


def fp8_config(cfg):
    """(block, patterns) of config.json's quantization_config, or None without one."""
    q = cfg.get("quantization_config")
    if not q:
        return None
    if q.get("quant_method") != "fp8":
        raise ValueError(f"config.json key 'quantization_config.quant_method': {q.get('quant_method')!r} "
                         "is not implemented (known: fp8)")
    if (q.get("fmt") or "e4m3") != "e4m3":
        raise ValueError(f"config.json key 'quantization_config.fmt': {q['fmt']!r} is not implemented")
    if (q.get("activation_scheme") or "dynamic") != "dynamic":
        raise ValueError("config.json key 'quantization_config.activation_scheme': "
                         f"{q['activation_scheme']!r} is not implemented")
    block = q.get("weight_block_size") or [128, 128]
    if len(block) != 2 or not all(isinstance(b, int) and b > 0 for b in block):
        raise ValueError(f"config.json key 'quantization_config.weight_block_size': {block!r}")
    return tuple(block), list(q.get("modules_to_not_convert") or []) + ["lm_head"]


def converts(name, patterns):
    """Whether the nn.Linear weight `name` is FP8 (replace_with_fp8_linear's test)."""
    star = re.sub(r"\d+", "*", name)
    return not any(p in name or p in star for p in patterns)


def is_linear(name):
    if not name.endswith(".weight") or "embed" in name or "norm" in name:
        return False
    mod = name[: -len(".weight")]
    return any(mod.endswith(k) for k in LINEAR)


def dequantize(q, scale_inv, block, name="weight"):
    """Fp8Dequantize: W[r, c] = e4m3(q[r, c]) * scale_inv[r // bo, c // bi] (float64 here)."""
    bo, bi = block
    R, C = q.shape
    want = (-(-R // bo), -(-C // bi))
    if tuple(scale_inv.shape) != want:
        raise ValueError(f"{name}_scale_inv: shape {list(scale_inv.shape)}, want {list(want)}")
    s = np.repeat(np.repeat(np.asarray(scale_inv, np.float64), bo, 0), bi, 1)[:R, :C]
    return E4M3[q] * s


def read_raw(path):
    """name -> (dtype, array): F8_E4M3 as uint8 bytes, floats widened to float64."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        raw, dt = data[b:e], t["dtype"]
        if dt == "F8_E4M3":
            a = np.frombuffer(raw, np.uint8).copy()
        elif dt == "BF16":
            a = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32).astype(np.float64)
        else:
            a = np.frombuffer(raw, {"F32": "<f4", "F16": "<f2"}[dt]).astype(np.float64)
        out[name] = (dt, a.reshape(t["shape"]))
    return out


def read_checkpoint_raw(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    idx = os.path.join(model_dir, "model.safetensors.index.json")
    files = ["model.safetensors"]
    if os.path.exists(idx):
        with open(idx) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    raw = {}
    for leaf in files:
        raw.update(read_raw(os.path.join(model_dir, leaf)))
    return cfg, raw


def dequantize_checkpoint(cfg, raw):
    """The published tensors (read_raw) -> float64 weights, FP8 ones dequantized."""
    fc = fp8_config(cfg)
    out = {}
    for name, (dt, v) in raw.items():
        if name.endswith(".weight_scale_inv"):
            w = name[: -len("_scale_inv")]
            if w not in raw or raw[w][0] != "F8_E4M3":
                raise ValueError(f"{name}: a scale for a weight that is not FP8")
            continue
        fp8 = fc is not None and is_linear(name) and converts(name, fc[1])
        if fp8 != (dt == "F8_E4M3"):
            raise ValueError(f"{name}: stored {dt}, but quantization_config makes it "
                             f"{'FP8' if fp8 else 'not FP8'}")
        if fp8:
            s = name + "_scale_inv"
            if s not in raw:
                raise ValueError(f"{name}: an FP8 weight without {s}")
            out[name] = dequantize(v, raw[s][1], fc[0], name)
        else:
            out[name] = v
    return out


def load_checkpoint(model_dir):
    cfg, raw = read_checkpoint_raw(model_dir)
    return cfg, dequantize_checkpoint(cfg, raw)
