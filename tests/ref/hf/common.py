"""Building blocks shared by the family references, each as the cited transformers function
computes it (in float64 here; transformers runs them in the model dtype or float32)."""
import math

import numpy as np

_erf = np.frompyfunc(math.erf, 1, 1)


def rmsnorm(x, w, eps, plus_one=False):
    """LlamaRMSNorm.forward: x * rsqrt(mean(x^2) + eps) * w. Gemma2RMSNorm / Gemma3RMSNorm:
    the same normalisation times (1 + w) (`output * (1.0 + self.weight.float())`)."""
    y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return y * (1.0 + w) if plus_one else y * w


def layernorm(x, w, b, eps):
    """torch.nn.LayerNorm: biased variance over the last axis."""
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def gelu_tanh(x):
    """activations.py NewGELUActivation (gelu_new) and GELUTanh / PytorchGELUTanh
    (gelu_pytorch_tanh): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def gelu_erf(x):
    """activations.py GELUActivation (`gelu`): x * 0.5 (1 + erf(x / sqrt 2))."""
    return x * 0.5 * (1.0 + _erf(x / math.sqrt(2.0)).astype(np.float64))


def silu(x):
    return x / (1.0 + np.exp(-x))


ACT = {"silu": silu, "swish": silu, "gelu": gelu_erf, "gelu_new": gelu_tanh,
       "gelu_pytorch_tanh": gelu_tanh, "gelu_fast": gelu_tanh, "relu": lambda x: np.maximum(x, 0)}


def act_fn(name, key):
    if name not in ACT:
        raise ValueError(f"config.json key {key!r}: activation {name!r} not implemented; known: {sorted(ACT)}")
    return ACT[name]


def softmax(x, axis=-1):
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(x - m)
    s = e.sum(axis=axis, keepdims=True)
    return np.divide(e, s, out=np.zeros_like(e), where=s > 0)  # a fully masked (padding) row -> 0


def softcap(x, cap):
    """Gemma 2: `x = x / cap; x = tanh(x); x = x * cap`."""
    return np.tanh(x / cap) * cap


def rope_inv_freq(theta, dim, scaling, max_pos, seq_len):
    """modeling_rope_utils.py: (inv_freq, attention_factor) for `dim` rotated dims.
    _compute_default_rope_parameters, _compute_linear_scaling_rope_parameters (inv_freq / factor),
    _compute_dynamic_ntk_parameters (base grows once seq_len > max_position_embeddings; seq_len is
    max(position_ids) + 1 over the whole batch, see dynamic_rope_update) and
    _compute_llama3_parameters. Unknown types are refused."""
    base = float(theta)
    kind = "default"
    if scaling:
        kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "dynamic" and seq_len > max_pos:
        f = scaling["factor"]
        base = base * ((f * seq_len / max_pos) - (f - 1)) ** (dim / (dim - 2))
    inv = 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.float64) / dim))
    if kind in ("default", "dynamic"):
        return inv, 1.0
    if kind == "linear":
        return inv / scaling["factor"], 1.0
    if kind == "llama3":
        f, lo, hi = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
        old = scaling["original_max_position_embeddings"]
        lo_wl, hi_wl = old / lo, old / hi
        wl = 2 * math.pi / inv
        inv_l = np.where(wl > lo_wl, inv / f, inv)
        smooth = (old / wl - lo) / (hi - lo)
        smoothed = (1 - smooth) * inv_l / f + smooth * inv_l
        medium = ~(wl < hi_wl) & ~(wl > lo_wl)
        return np.where(medium, smoothed, inv_l), 1.0
    raise ValueError(f"config.json key 'rope_scaling': rope_type {kind!r} not implemented "
                     "(known: default, linear, dynamic, llama3)")


def apply_rope(x, inv, A=1.0):
    """apply_rotary_pos_emb with rotate_half on the first r = 2 len(inv) dims of x (..., T, hd),
    positions 0..T-1; dims past r pass unchanged (GPT-NeoX partial rotary)."""
    T = x.shape[-2]
    r = 2 * len(inv)
    ang = np.arange(T, dtype=np.float64)[:, None] * inv[None, :]
    c, s = np.cos(ang) * A, np.sin(ang) * A
    a, b = x[..., : r // 2], x[..., r // 2: r]
    return np.concatenate([a * c - b * s, b * c + a * s, x[..., r:]], axis=-1)


def pad_batch(prompts):
    """Right-padded ids (B, T) and lengths; padding id 0 (its positions are masked as keys and
    sliced off the outputs)."""
    lens = np.array([len(p) for p in prompts], np.int64)
    if (lens < 1).any():
        raise ValueError("every prompt needs at least one token")
    ids = np.zeros((len(prompts), lens.max()), np.int64)
    for b, p in enumerate(prompts):
        ids[b, : len(p)] = p
    return ids, lens


def attention(q, k, v, lens, scale, window=None, cap=None):
    """eager_attention_forward of the Llama family on a right-padded batch.
    q (B, H, T, hd), k, v (B, KV, T, hd); query head j reads key/value head j // (H / KV)
    (repeat_kv). Scores = q k^T * scale, then soft-capped (Gemma 2), then masked (-inf) where the
    key is in the future, outside a sliding window (key > query - window, as masking_utils'
    sliding_window_overlay) or padding. Returns scores, probabilities, head outputs (B, T, H, hd)."""
    B, H, T, _ = q.shape
    rep = H // k.shape[1]
    K, V = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
    S = q @ K.transpose(0, 1, 3, 2) * scale
    if cap:
        S = softcap(S, cap)
    qi, ki = np.arange(T)[:, None], np.arange(T)[None, :]
    allowed = (ki <= qi)[None] & (ki[None] < lens[:, None, None])
    if window:
        allowed &= (ki > qi - window)[None]
    S = np.where(allowed[:, None], S, -np.inf)
    P = softmax(S)
    return S, P, (P @ V).transpose(0, 2, 1, 3)


def split_outputs(outs, lens):
    """Batched arrays (B, ...) -> one dict per prompt, each value with a batch axis of 1 and its
    token axes cut to the prompt's length (token axes: those of size T after the batch axis)."""
    T = int(lens.max())
    res = []
    for b, n in enumerate(lens):
        d = {}
        for name, a in outs.items():
            a = a[b]
            if name.endswith("attention_scores") or name.endswith("attention_probabilities"):
                a = a[:, :n, :n]
            elif any(name.endswith(n) for n in ("_queries", "_keys", "_values", "_pre_rope")):
                a = a[:, :n]
            elif name == "next_token_probs":
                pass
            elif a.ndim >= 1 and a.shape[0] == T:
                a = a[:n]
            d[name] = a[None]
        res.append(d)
    return res


# The substitution hook of the splice-in evaluation (tests/test_sae_eval.py): SUBST[0] is None or
# f(name, value) -> value, the value the forward goes on with in place of `name` (an SAE's
# reconstruction, zeros). flow(out, name, v) records v as out[name] and returns what flows on.
SUBST = [None]


def flow(out, name, v):
    out[name] = v
    return v if SUBST[0] is None else SUBST[0](name, v)
