"""Float64 reference of DeepSeek-V3 (DeepseekV3ForCausalLM; also moonshotai/Kimi-K2-Instruct), written
from transformers' own code -- not from the C:

- src/transformers/models/deepseek_v3/modeling_deepseek_v3.py: DeepseekV3RMSNorm, DeepseekV3MLP,
  DeepseekV3TopkRouter (forward, get_topk_indices), DeepseekV3MoE, DeepseekV3Attention,
  apply_rotary_pos_emb_interleave, yarn_get_mscale, DeepseekV3DecoderLayer, DeepseekV3Model
  (`_keys_to_ignore_on_load_unexpected = [r"model\\.layers\\.61.*"]`: the MTP layer is not loaded).
- configuration_deepseek_v3.py: head_dim = qk_rope_head_dim, qk_head_dim = nope + rope,
  rope_interleave (default True).
- src/transformers/modeling_rope_utils.py: _compute_yarn_parameters (get_mscale, find_correction_dim,
  find_correction_range, linear_ramp_factor, truncate).
- src/transformers/integrations/finegrained_fp8.py: FP8Linear (weight float8_e4m3fn (out, in),
  weight_scale_inv float32 (ceil(out/bo), ceil(in/bi))), Fp8Dequantize.convert
  (W = q * scale_inv[r // bo, c // bi]), Fp8Quantize.convert (scale = FP8_MAX / max|tile|).

    w = dequantize_checkpoint(cfg, raw)   # published tensors (FP8 as uint8 bytes) -> float64
    outs = DeepseekV3Ref(cfg, w).forward(ids)   # name -> array with a batch axis of 1
    outs = load(model_dir).forward(ids)         # the same from a checkpoint folder

Names follow tests/ref/hf/NAMES.md; the ones MLA adds are listed in docs/frontier.md.
"""
import json
import math
import os

import numpy as np

# ---------------------------------------------------------------------------------------------
# building blocks (float64)


def rmsnorm(x, w, eps):
    """DeepseekV3RMSNorm.forward: x * rsqrt(mean(x^2) + eps) * weight."""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def silu(x):
    return x / (1.0 + np.exp(-x))


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def softmax(x, axis=-1):
    m = np.max(x, axis=axis, keepdims=True)
    e = np.exp(x - m)
    return e / e.sum(axis=axis, keepdims=True)


def causal_allowed(T, window=None):
    """masking_utils: causal, and on sliding layers kv_idx > q_idx - window (sliding_window_overlay)."""
    qi, ki = np.arange(T)[:, None], np.arange(T)[None, :]
    allowed = ki <= qi
    if window:
        allowed &= ki > qi - window
    return allowed


# ---------------------------------------------------------------------------------------------
# RoPE: YaRN (modeling_rope_utils._compute_yarn_parameters)


def get_mscale(scale, mscale=1.0):
    """_compute_yarn_parameters.get_mscale and modeling_deepseek_v3.yarn_get_mscale."""
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def yarn_inv_freq(rp, dim, max_pos):
    """(inv_freq (dim/2,), attention_factor) for rope parameters `rp` (rope_theta, factor,
    original_max_position_embeddings, beta_fast/beta_slow (`or 32` / `or 1`), mscale,
    mscale_all_dim, attention_factor, truncate (default True))."""
    base = float(rp["rope_theta"])
    L0 = rp.get("original_max_position_embeddings") or max_pos
    factor = rp.get("factor")
    if factor is None:
        factor = max_pos / L0
    A = rp.get("attention_factor")
    if A is None:
        ms, msa = rp.get("mscale"), rp.get("mscale_all_dim")
        A = get_mscale(factor, ms) / get_mscale(factor, msa) if ms and msa else get_mscale(factor)
    bf, bs = rp.get("beta_fast") or 32, rp.get("beta_slow") or 1

    def corr(n):  # find_correction_dim
        return dim * math.log(L0 / (n * 2 * math.pi)) / (2 * math.log(base))

    low, high = corr(bf), corr(bs)
    if rp.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # linear_ramp_factor: prevent singularity
    ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0, 1)
    extra = 1 - ramp  # inv_freq_extrapolation_factor
    pos = base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    inv = (1 / (factor * pos)) * (1 - extra) + (1 / pos) * extra
    return inv, float(A)


def default_inv_freq(theta, dim):
    return 1.0 / (float(theta) ** (np.arange(0, dim, 2, dtype=np.float64) / dim)), 1.0


def rope_cos_sin(inv, A, T):
    """The rotary embedding's forward: emb = cat(freqs, freqs); cos/sin times attention_scaling."""
    freqs = np.arange(T, dtype=np.float64)[:, None] * inv[None, :]
    emb = np.concatenate([freqs, freqs], axis=-1)
    return np.cos(emb) * A, np.sin(emb) * A


def rotate_half(x):
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], axis=-1)


def deinterleave(x):
    """apply_rotary_pos_emb_interleave's view(d//2, 2).transpose(4, 3).reshape(d): even dims first,
    then odd dims."""
    d = x.shape[-1]
    return x.reshape(*x.shape[:-1], d // 2, 2).swapaxes(-1, -2).reshape(*x.shape[:-1], d)


def apply_rope(x, cos, sin, interleave):
    """x (..., T, d): apply_rotary_pos_emb (NeoX halves) or, when rope_interleave,
    apply_rotary_pos_emb_interleave (de-interleave the pairs, then the same)."""
    if interleave:
        x = deinterleave(x)
    return x * cos + rotate_half(x) * sin


# ---------------------------------------------------------------------------------------------
# FP8 (float8_e4m3fn) block scaling: integrations/finegrained_fp8.py

FP8_MAX = 448.0  # torch.finfo(torch.float8_e4m3fn).max


def e4m3_table():
    """All 256 float8_e4m3fn values by byte: sign, 4 exponent bits (bias 7), 3 mantissa bits;
    exponent 0 is subnormal (m/8 * 2^-6); S.1111.111 is NaN (the format has no infinities)."""
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


def fp8_encode(x):
    """float64 -> float8_e4m3fn bytes, round to nearest, ties to even (torch's cast); |x| > 448
    saturates only because Fp8Quantize clamps first (done by the caller)."""
    x = np.asarray(x, np.float64)
    pos = E4M3[:127]  # bytes 0..126: +0 .. 448, increasing
    a = np.minimum(np.abs(x), FP8_MAX)
    i = np.clip(np.searchsorted(pos, a), 1, 126)
    lo, hi = pos[i - 1], pos[i]
    pick_hi = (a - lo > hi - a) | ((a - lo == hi - a) & (i % 2 == 0))
    b = np.where(pick_hi, i, i - 1).astype(np.uint8)
    return np.where(np.signbit(x) & (b != 0), b | 0x80, b).astype(np.uint8)


def fp8_quantize(w, block):
    """Fp8Quantize.convert: per (bo, bi) tile scale = FP8_MAX / max|tile| (1 for an all-zero tile),
    q = fp8(clamp(w * scale)), weight_scale_inv = 1 / scale. Partial edge tiles are allowed here
    (FP8Linear's scale shape is ceil-divided); Fp8Quantize itself demands exact tiling."""
    bo, bi = block
    R, C = w.shape
    s_inv = np.ones((-(-R // bo), -(-C // bi)))
    q = np.zeros((R, C), np.uint8)
    for r in range(s_inv.shape[0]):
        for c in range(s_inv.shape[1]):
            tile = w[r * bo:(r + 1) * bo, c * bi:(c + 1) * bi]
            m = np.abs(tile).max()
            scale = FP8_MAX / m if m > 0 else 1.0
            q[r * bo:(r + 1) * bo, c * bi:(c + 1) * bi] = fp8_encode(np.clip(tile * scale, -FP8_MAX, FP8_MAX))
            s_inv[r, c] = 1.0 / scale
    return q, s_inv.astype(np.float32)


def fp8_dequantize(q, scale_inv, block, name="weight"):
    """Fp8Dequantize.convert / FP8Linear: W[r, c] = e4m3(q[r, c]) * weight_scale_inv[r // bo, c // bi].
    q: uint8 bytes (out, in); scale_inv (ceil(out/bo), ceil(in/bi)). A scale of another shape is a
    ValueError naming the tensor."""
    bo, bi = block
    R, C = q.shape
    want = (-(-R // bo), -(-C // bi))
    if tuple(scale_inv.shape) != want:
        raise ValueError(f"{name}_scale_inv: shape {list(scale_inv.shape)}, want {list(want)} for a "
                         f"{[R, C]} weight in {bo}x{bi} blocks")
    s = np.repeat(np.repeat(np.asarray(scale_inv, np.float64), bo, 0), bi, 1)[:R, :C]
    return E4M3[q] * s


def dequantize_checkpoint(cfg, raw):
    """The published tensors -> float64 weights under transformers' parameter names. Every
    `X.weight` stored as FP8 (uint8 bytes here) needs `X.weight_scale_inv`; a scale without its
    weight, or the reverse, is a ValueError naming the tensor. Without quantization_config the
    tensors pass through (widened)."""
    q = cfg.get("quantization_config") or {}
    if q and q.get("quant_method") != "fp8":
        raise ValueError(f"config.json key 'quantization_config.quant_method': {q.get('quant_method')!r} "
                         "is not implemented (known: fp8)")
    block = tuple(q.get("weight_block_size") or (128, 128))
    out = {}
    for name, v in raw.items():
        if name.endswith(".weight_scale_inv"):
            if name[: -len("_scale_inv")] not in raw:
                raise ValueError(f"{name}: a scale without its weight")
            continue
        sname = name + "_scale_inv"
        if v.dtype == np.uint8:
            if sname not in raw:
                raise ValueError(f"{name}: an FP8 weight without {sname}")
            out[name] = fp8_dequantize(v, raw[sname], block, name)
        else:
            if sname in raw:
                raise ValueError(f"{sname}: a scale for a weight that is not FP8")
            out[name] = np.asarray(v, np.float64)
    return out


# ---------------------------------------------------------------------------------------------
# safetensors with the published dtypes

_DT = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16, "F64": np.float64, "I64": np.int64,
       "I32": np.int32, "U8": np.uint8, "F8_E4M3": np.uint8}


def read_safetensors_raw(path):
    """name -> array: F8_E4M3 and U8 as their uint8 bytes, BF16 widened exactly, others as stored."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        a = np.frombuffer(data[b:end], dtype=_DT[e["dtype"]]).reshape(e["shape"])
        if e["dtype"] == "BF16":
            a = (a.astype(np.uint32) << 16).view(np.float32)
        out[name] = a
    return out


def read_checkpoint(model_dir):
    """config.json + model.safetensors (or the shards of model.safetensors.index.json)."""
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    idx = os.path.join(model_dir, "model.safetensors.index.json")
    raw = {}
    if os.path.exists(idx):
        with open(idx) as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
        for s in shards:
            raw.update(read_safetensors_raw(os.path.join(model_dir, s)))
    else:
        raw = read_safetensors_raw(os.path.join(model_dir, "model.safetensors"))
    return cfg, raw


# ---------------------------------------------------------------------------------------------
# routing: DeepseekV3TopkRouter


def group_limited_topk(scores, bias, n_group, topk_group, k):
    """DeepseekV3TopkRouter.get_topk_indices on scores (T, E): biased = scores + bias; group score =
    sum of the group's top 2 biased scores; keep the topk_group best groups; biased scores of the
    other groups are set to 0.0 (masked_fill(~score_mask, 0.0) -- not -inf); top k of the result.
    Slot order: descending biased score, lower expert index first on ties (torch.topk(sorted=False)
    leaves it unspecified; the set is the same). Returns (indices (T, k), group_scores (T, G),
    group_mask (T, G) bool)."""
    T, E = scores.shape
    biased = scores + bias[None, :]
    g = biased.reshape(T, n_group, E // n_group)
    top2 = -np.sort(-g, axis=-1)[..., :2]
    gs = top2.sum(-1)
    gsel = np.argsort(-gs, axis=-1, kind="stable")[:, :topk_group]
    gmask = np.zeros((T, n_group), bool)
    np.put_along_axis(gmask, gsel, True, axis=-1)
    choice = np.where(np.repeat(gmask, E // n_group, axis=-1), biased, 0.0)
    idx = np.argsort(-choice, axis=-1, kind="stable")[:, :k]
    return idx, gs, gmask


class DeepseekV3Ref:
    """cfg: the config.json dict; w: float64 weights under transformers' names (after
    dequantize_checkpoint)."""

    def __init__(self, cfg, w):
        self.cfg, self.w = cfg, w
        g = cfg.get
        self.L = g("num_hidden_layers", 61)
        self.D = g("hidden_size", 7168)
        self.H = g("num_attention_heads", 128)
        self.q_lora = g("q_lora_rank", 1536)
        self.kv_lora = g("kv_lora_rank", 512)
        self.d_nope = g("qk_nope_head_dim", 128)
        self.d_rope = g("qk_rope_head_dim", 64)
        self.d_v = g("v_head_dim", 128)
        self.d_qk = self.d_nope + self.d_rope
        self.eps = g("rms_norm_eps", 1e-6)
        self.first_dense = g("first_k_dense_replace", 3)
        self.E = g("n_routed_experts", 256)
        self.k = g("num_experts_per_tok", 8)
        self.n_group, self.topk_group = g("n_group", 8), g("topk_group", 4)
        self.norm_topk = g("norm_topk_prob", True)
        self.rsf = g("routed_scaling_factor", 2.5)
        self.interleave = g("rope_interleave", True)
        if g("attention_bias", False):
            raise ValueError("config.json key 'attention_bias': true is not implemented")
        if g("hidden_act", "silu") != "silu":
            raise ValueError(f"config.json key 'hidden_act': {g('hidden_act')!r} not implemented")
        if g("scoring_func", "sigmoid") != "sigmoid" or g("topk_method", "noaux_tc") != "noaux_tc":
            raise ValueError("config.json keys 'scoring_func'/'topk_method': only sigmoid/noaux_tc "
                             "(DeepseekV3TopkRouter) are implemented")
        rs = g("rope_scaling") or g("rope_parameters")
        kind = (rs or {}).get("rope_type", (rs or {}).get("type", "default"))
        self.scaling = self.d_qk ** -0.5  # DeepseekV3Attention.__init__
        if kind == "yarn":
            rp = dict(rs, rope_theta=rs.get("rope_theta", g("rope_theta", 10000.0)))
            self.inv, self.A = yarn_inv_freq(rp, self.d_rope, g("max_position_embeddings", 4096))
            msa = rs.get("mscale_all_dim", 0)
            if msa:
                m = get_mscale(rs["factor"], msa)
                self.scaling *= m * m
        elif kind == "default":
            self.inv, self.A = default_inv_freq(g("rope_theta", 10000.0), self.d_rope)
        else:
            raise ValueError(f"config.json key 'rope_scaling': rope_type {kind!r} not implemented "
                             "(known: default, yarn)")

    def forward(self, ids):
        w, eps = self.w, self.eps
        ids = np.asarray(ids, np.int64)
        T = len(ids)
        out = {"input_ids": ids[None]}
        h = w["model.embed_tokens.weight"][ids]
        out["token_embeddings"] = h[None]
        cos, sin = rope_cos_sin(self.inv, self.A, T)
        for i in range(self.L):
            p = f"model.layers.{i}."
            o = lambda name, v: out.__setitem__(f"layers.{i}.{name}", v[None])
            o("layer_input", h)
            xn = rmsnorm(h, w[p + "input_layernorm.weight"], eps)
            o("attention_norm_output", xn)
            a = self.attention(xn, p, o, cos, sin)
            o("attention_output", a)
            h1 = h + a
            o("layer_mid", h1)
            hn = rmsnorm(h1, w[p + "post_attention_layernorm.weight"], eps)
            o("mlp_norm_output", hn)
            o("mlp_input", hn)
            if i < self.first_dense:
                m = self.dense_mlp(hn, p + "mlp.", o)
            else:
                m = self.moe(hn, p, o)
            o("mlp_output", m)
            h = h1 + m
            o("layer_output", h)
        final = rmsnorm(h, w["model.norm.weight"], eps)
        out["final_norm_output"] = final[None]
        logits = final @ w["lm_head.weight"].T
        out["lm_head_output"] = logits[None]
        out["logits"] = logits[None]
        out["next_token_probs"] = softmax(logits[-1])[None]
        return out

    def attention(self, x, p, o, cos, sin):
        """DeepseekV3Attention.forward (eager) for one prompt; returns o_proj's output (T, D)."""
        w, H, T = self.w, self.H, x.shape[0]
        a = p + "self_attn."
        if self.q_lora is None:
            q = x @ w[a + "q_proj.weight"].T
        else:
            cq = x @ w[a + "q_a_proj.weight"].T
            o("attention_q_latent", cq)
            cq = rmsnorm(cq, w[a + "q_a_layernorm.weight"], self.eps)
            o("attention_q_latent_norm", cq)
            q = cq @ w[a + "q_b_proj.weight"].T
        q = q.reshape(T, H, self.d_qk).transpose(1, 0, 2)  # (H, T, d_qk)
        q_pass, q_rot = q[..., : self.d_nope], q[..., self.d_nope:]
        ckv = x @ w[a + "kv_a_proj_with_mqa.weight"].T  # (T, kv_lora + d_rope)
        c, k_rot = ckv[:, : self.kv_lora], ckv[:, self.kv_lora:]
        o("attention_kv_latent", c)
        c = rmsnorm(c, w[a + "kv_a_layernorm.weight"], self.eps)
        o("attention_kv_latent_norm", c)
        kv = (c @ w[a + "kv_b_proj.weight"].T).reshape(T, H, self.d_nope + self.d_v).transpose(1, 0, 2)
        k_pass, v = kv[..., : self.d_nope], kv[..., self.d_nope:]
        k_rot = k_rot[None]  # (1, T, d_rope): one rotary key shared by every head
        o("attention_queries_pre_rope", q)
        o("attention_keys_pre_rope", np.concatenate([k_pass, np.broadcast_to(k_rot, (H, T, self.d_rope))], -1))
        q_rot = apply_rope(q_rot, cos, sin, self.interleave)
        k_rot = apply_rope(k_rot, cos, sin, self.interleave)
        o("attention_rope_key", k_rot[0])  # the one rotary key of every head, after RoPE
        q = np.concatenate([q_pass, q_rot], -1)
        k = np.concatenate([k_pass, np.broadcast_to(k_rot, (H, T, self.d_rope))], -1)
        o("attention_queries", q)
        o("attention_keys", k)
        o("attention_values", v)
        S = np.where(causal_allowed(T)[None], q @ k.transpose(0, 2, 1) * self.scaling, -np.inf)
        o("attention_scores", S)
        P = softmax(S)
        o("attention_probabilities", P)
        O = (P @ v).transpose(1, 0, 2)  # (T, H, d_v)
        o("attention_head_outputs", O)
        return O.reshape(T, H * self.d_v) @ w[a + "o_proj.weight"].T

    def mlp(self, x, pre):
        """DeepseekV3MLP: down(silu(gate(x)) * up(x)); returns (activation, neurons, output)."""
        w = self.w
        act = silu(x @ w[pre + "gate_proj.weight"].T)
        neu = act * (x @ w[pre + "up_proj.weight"].T)
        return act, neu, neu @ w[pre + "down_proj.weight"].T

    def dense_mlp(self, x, pre, o):
        act, neu, y = self.mlp(x, pre)
        o("mlp_activation", act)
        o("mlp_neurons", neu)
        return y

    def route(self, x, p):
        """DeepseekV3TopkRouter.forward: logits = x W^T (float32 in transformers), scores = sigmoid,
        indices by group_limited_topk, weights = scores[indices], renormalised (+1e-20) when
        norm_topk_prob, then times routed_scaling_factor."""
        w = self.w
        z = x @ w[p + "mlp.gate.weight"].T
        s = sigmoid(z)
        idx, gs, gmask = group_limited_topk(s, w[p + "mlp.gate.e_score_correction_bias"],
                                            self.n_group, self.topk_group, self.k)
        wt = np.take_along_axis(s, idx, -1)
        if self.norm_topk:
            wt = wt / (wt.sum(-1, keepdims=True) + 1e-20)
        return z, s, gs, gmask, idx, wt * self.rsf

    def moe(self, x, p, o):
        """DeepseekV3MoE.forward: routed experts (weights already scaled) + shared experts."""
        T = x.shape[0]
        z, s, gs, gmask, idx, wt = self.route(x, p)
        o("router_logits", z)
        o("router_scores", s)
        o("router_choice_scores", s + self.w[p + "mlp.gate.e_score_correction_bias"][None, :])
        o("router_group_scores", gs)
        o("expert_indices", idx.astype(np.int64))
        o("expert_weights", wt)
        y = np.zeros((T, self.k, self.D))
        for t in range(T):
            for j in range(self.k):
                y[t, j] = self.mlp(x[t:t + 1], f"{p}mlp.experts.{idx[t, j]}.")[2][0] * wt[t, j]
        o("expert_outputs", y)
        routed = y.sum(1)
        o("routed_output", routed)
        shared = self.mlp(x, p + "mlp.shared_experts.")[2]
        o("shared_expert_output", shared)
        return routed + shared


def load(model_dir):
    """DeepseekV3Ref of a checkpoint folder as published (config.json + safetensors, FP8 or not)."""
    cfg, raw = read_checkpoint(model_dir)
    return DeepseekV3Ref(cfg, dequantize_checkpoint(cfg, raw))
