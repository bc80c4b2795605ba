"""Float64 reference of gpt-oss (GptOssForCausalLM: openai/gpt-oss-20b, openai/gpt-oss-120b), written
from transformers' own code -- not from the C:

- src/transformers/models/gpt_oss/configuration_gpt_oss.py: the defaults (swiglu_alpha 1.702 and
  swiglu_limit 7.0 as keys; rope_parameters yarn factor 32, beta 32 / 1, truncate false,
  original_max_position_embeddings 4096 when the config has none; fixed this session, it read
  alpha as a constant and fell back to default RoPE).
- src/transformers/models/gpt_oss/modeling_gpt_oss.py: GptOssRMSNorm, GptOssExperts.forward
  (gate_up = x @ gate_up_proj + bias; gate = [..., ::2], up = [..., 1::2]; gate.clamp(max=limit),
  up.clamp(-limit, limit); glu = gate * sigmoid(gate * alpha); (up + 1) * glu @ down_proj + bias),
  GptOssTopKRouter.forward (logits = x W^T + b; topk; softmax over the k values),
  GptOssRotaryEmbedding / _apply_rotary_emb (first half / second half), eager_attention_forward
  (sinks: a learned logit per head concatenated to the scores, softmax, sink column dropped),
  GptOssAttention (sliding_window on "sliding_attention" layers, scaling head_dim**-0.5),
  GptOssDecoderLayer, GptOssModel.
- src/transformers/modeling_rope_utils.py: _compute_yarn_parameters (via deepseek_v3_ref.yarn_inv_freq).
- src/transformers/integrations/mxfp4.py: FP4_VALUES, convert_moe_packed_tensors (the low nibble
  is the even element, the high nibble the odd one; scale exponent = byte - 127; torch.ldexp;
  reshape (..., G * 32) then transpose(1, 2)), Mxfp4GptOssExperts (blocks (E, 2I, D/32, 16),
  scales (E, 2I, D/32); down blocks (E, D, I/32, 16)).

    w = dequantize_checkpoint(cfg, raw)      # *_blocks/*_scales -> gate_up_proj / down_proj
    outs = GptOssRef(cfg, w).forward(ids)
    outs = load(model_dir).forward(ids)      # the same from a checkpoint folder
"""

import numpy as np

from deepseek_v3_ref import (causal_allowed, default_inv_freq, read_checkpoint, rmsnorm, rope_cos_sin, rotate_half,
                             softmax, yarn_inv_freq)

# integrations/mxfp4.py FP4_VALUES: index = the 4-bit code (bit 3 = sign, then 2 exponent bits, 1 mantissa bit)
FP4_VALUES = [+0.0, +0.5, +1.0, +1.5, +2.0, +3.0, +4.0, +6.0,
              -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def mxfp4_dequantize(blocks, scales, name="experts"):
    """convert_moe_packed_tensors: blocks (E, R, G, 16) uint8, scales (E, R, G) uint8 ->
    (E, G * 32, R) float64: out[..., 2j] = FP4[byte & 0xF], out[..., 2j + 1] = FP4[byte >> 4], times
    2 ** (scale - 127), then the last two axes swapped (transpose(1, 2))."""
    blocks, scales = np.asarray(blocks), np.asarray(scales)
    if blocks.shape[:-1] != scales.shape or blocks.shape[-1] != 16:
        raise ValueError(f"{name}_scales: shape {list(scales.shape)} does not match {name}_blocks "
                         f"{list(blocks.shape)} (want blocks (..., G, 16), scales (..., G))")
    lut = np.array(FP4_VALUES)
    lo, hi = lut[blocks & 0x0F], lut[blocks >> 4]
    vals = np.stack([lo, hi], axis=-1).reshape(*blocks.shape[:-1], 32)
    vals = np.ldexp(vals, (scales.astype(np.int64) - 127)[..., None])
    *prefix, G, _ = vals.shape
    out = vals.reshape(*prefix, G * 32)
    return np.swapaxes(out, 1, 2)


def fp4_encode(x):
    """Nearest FP4 code of x (used to build test checkpoints; ties to the lower code)."""
    lut = np.array(FP4_VALUES)
    return np.argmin(np.abs(np.asarray(x)[..., None] - lut), axis=-1).astype(np.uint8)


def mxfp4_quantize(wt):
    """Inverse layout of mxfp4_dequantize for building published-layout test tensors: wt (E, C, R)
    as transformers holds it (gate_up_proj (E, D, 2I)) -> blocks (E, R, C/32, 16), scales (E, R, C/32),
    one power-of-two scale per 32 values (2^e with max|x| / 2^e <= 6)."""
    w = np.swapaxes(np.asarray(wt, np.float64), 1, 2)  # (E, R, C)
    E, R, C = w.shape
    g = w.reshape(E, R, C // 32, 32)
    m = np.abs(g).max(-1)
    e = np.where(m > 0, np.ceil(np.log2(np.where(m > 0, m, 1) / 6.0)), 0).astype(np.int64)
    codes = fp4_encode(g / np.ldexp(1.0, e)[..., None])
    blocks = (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)
    return blocks, (e + 127).astype(np.uint8)


def dequantize_checkpoint(cfg, raw):
    """Published tensors -> float64 weights under GptOssExperts' names (Mxfp4Quantize with
    dequantize=True). `X_blocks` needs `X_scales` and the reverse (ValueError naming the tensor)."""
    q = cfg.get("quantization_config") or {}
    if q and q.get("quant_method") != "mxfp4":
        raise ValueError(f"config.json key 'quantization_config.quant_method': {q.get('quant_method')!r} "
                         "is not implemented (known: mxfp4)")
    out = {}
    for name, v in raw.items():
        if name.endswith("_scales"):
            if name[: -len("_scales")] + "_blocks" not in raw:
                raise ValueError(f"{name}: scales without {name[:-len('_scales')]}_blocks")
            continue
        if name.endswith("_blocks"):
            base = name[: -len("_blocks")]
            if base + "_scales" not in raw:
                raise ValueError(f"{name}: MXFP4 blocks without {base}_scales")
            out[base] = mxfp4_dequantize(v, raw[base + "_scales"], base)
        else:
            out[name] = np.asarray(v, np.float64)
    return out


# GptOssConfig.__post_init__: rope_parameters when the config gives neither it nor rope_scaling
DEFAULT_ROPE = {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
                "original_max_position_embeddings": 4096}


def layer_types(cfg):
    """GptOssConfig: layer_types, default alternating sliding / full starting with sliding."""
    L = cfg["num_hidden_layers"]
    return list(cfg.get("layer_types") or
                ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(L)])


def sink_attention(q, k, v, sinks, scaling, window):
    """eager_attention_forward with sinks: logits = q k^T * scaling + mask; the head's sink logit is
    appended as one more column; subtract the row max; softmax; drop the sink column. Returns
    (scores (H, T, T), probabilities kept (H, T, T), sink share (H, T), head outputs (T, H, d))."""
    H, T, _ = q.shape
    rep = H // k.shape[0]
    K, V = np.repeat(k, rep, axis=0), np.repeat(v, rep, axis=0)  # repeat_kv: head j reads KV j // rep
    S = np.where(causal_allowed(T, window)[None], q @ K.transpose(0, 2, 1) * scaling, -np.inf)
    comb = np.concatenate([S, np.broadcast_to(sinks[:, None, None], (H, T, 1))], axis=-1)
    comb = comb - comb.max(-1, keepdims=True)
    P = np.exp(comb)
    P /= P.sum(-1, keepdims=True)
    return S, P[..., :-1], P[..., -1], (P[..., :-1] @ V).transpose(1, 0, 2)


class GptOssRef:
    def __init__(self, cfg, w):
        self.cfg, self.w = cfg, w
        g = cfg.get
        self.L, self.D = cfg["num_hidden_layers"], cfg["hidden_size"]
        self.H, self.KV = cfg["num_attention_heads"], cfg["num_key_value_heads"]
        self.hd = g("head_dim") or self.D // self.H
        self.eps = g("rms_norm_eps", 1e-5)
        self.k = g("num_experts_per_tok", g("experts_per_token", 4))
        self.E = g("num_local_experts", 128)  # GptOssConfig default
        # configuration_gpt_oss.py: swiglu_alpha (1.702) and swiglu_limit (7.0) are config keys
        self.alpha, self.limit = g("swiglu_alpha", 1.702), g("swiglu_limit", 7.0)
        self.window = g("sliding_window", 128)
        self.types = layer_types(cfg)
        self.bias = g("attention_bias", True)
        rs = g("rope_scaling") or g("rope_parameters") or DEFAULT_ROPE
        kind = (rs or {}).get("rope_type", (rs or {}).get("type", "default"))
        theta = (rs or {}).get("rope_theta", g("rope_theta", 150000.0))
        if kind == "yarn":
            self.inv, self.A = yarn_inv_freq(dict(rs, rope_theta=theta), self.hd,
                                             g("max_position_embeddings", 131072))
        elif kind == "default":
            self.inv, self.A = default_inv_freq(theta, self.hd)
        else:
            raise ValueError(f"config.json key 'rope_scaling': rope_type {kind!r} not implemented "
                             "(known: default, yarn)")

    def lin(self, x, name):
        y = x @ self.w[name + ".weight"].T
        return y + self.w[name + ".bias"] if self.bias else y

    def forward(self, ids):
        w, eps, T = self.w, self.eps, len(ids)
        ids = np.asarray(ids, np.int64)
        out = {"input_ids": ids[None]}
        h = w["model.embed_tokens.weight"][ids]
        out["token_embeddings"] = h[None]
        cos, sin = rope_cos_sin(self.inv, self.A, T)
        for i in range(self.L):
            p = f"model.layers.{i}."
            o = lambda name, v: out.__setitem__(f"layers.{i}.{name}", np.asarray(v)[None])
            o("layer_input", h)
            xn = rmsnorm(h, w[p + "input_layernorm.weight"], eps)
            o("attention_norm_output", xn)
            a = self.attention(xn, p + "self_attn.", o, cos, sin, self.types[i])
            o("attention_output", a)
            h1 = h + a
            o("layer_mid", h1)
            hn = rmsnorm(h1, w[p + "post_attention_layernorm.weight"], eps)
            o("mlp_norm_output", hn)
            o("mlp_input", hn)
            m = self.moe(hn, p + "mlp.", o)
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

    def attention(self, x, a, o, cos, sin, kind):
        T, H, KV, hd = x.shape[0], self.H, self.KV, self.hd
        q = self.lin(x, a + "q_proj").reshape(T, H, hd).transpose(1, 0, 2)
        k = self.lin(x, a + "k_proj").reshape(T, KV, hd).transpose(1, 0, 2)
        v = self.lin(x, a + "v_proj").reshape(T, KV, hd).transpose(1, 0, 2)
        o("attention_queries_pre_rope", q)
        o("attention_keys_pre_rope", k)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin  # _apply_rotary_emb
        o("attention_queries", q)
        o("attention_keys", k)
        o("attention_values", v)
        window = self.window if kind == "sliding_attention" else None
        sinks = self.w[a + "sinks"]
        S, P, Ps, O = sink_attention(q, k, v, sinks, hd ** -0.5, window)
        o("attention_sinks", sinks)
        o("attention_scores", S)
        o("attention_probabilities", P)
        o("attention_sink_probabilities", Ps)
        o("attention_head_outputs", O)
        return self.lin(O.reshape(T, H * hd), a + "o_proj")

    def experts(self, x, e, pre):
        """GptOssExperts for expert e on rows x: (gate before clamp, up before clamp, neurons, out)."""
        w = self.w
        gu = x @ w[pre + "experts.gate_up_proj"][e] + w[pre + "experts.gate_up_proj_bias"][e]
        gate, up = gu[..., ::2], gu[..., 1::2]
        gc = np.minimum(gate, self.limit)
        uc = np.clip(up, -self.limit, self.limit)
        glu = gc / (1.0 + np.exp(-gc * self.alpha))
        neu = (uc + 1) * glu
        return gate, up, neu, neu @ w[pre + "experts.down_proj"][e] + w[pre + "experts.down_proj_bias"][e]

    def moe(self, x, pre, o):
        """GptOssMLP: router then experts; GptOssExperts' inference path weights every expert's
        output by router_scores (zero off the top k), the same sum as the k slots here."""
        w, T, k = self.w, x.shape[0], self.k
        z = x @ w[pre + "router.weight"].T + w[pre + "router.bias"]
        o("router_logits", z)
        idx = np.argsort(-z, axis=-1, kind="stable")[:, :k]  # torch.topk: descending
        wt = softmax(np.take_along_axis(z, idx, -1))
        o("expert_indices", idx.astype(np.int64))
        o("expert_weights", wt)
        I = w[pre + "experts.down_proj"].shape[1]
        gate, up, neu = np.zeros((T, k, I)), np.zeros((T, k, I)), np.zeros((T, k, I))
        y = np.zeros((T, k, self.D))
        for t in range(T):
            for j in range(k):
                gate[t, j], up[t, j], neu[t, j], yt = self.experts(x[t], idx[t, j], pre)
                y[t, j] = yt * wt[t, j]
        o("expert_gate", gate)
        o("expert_up", up)
        o("expert_neurons", neu)
        o("expert_outputs", y)
        routed = y.sum(1)
        o("routed_output", routed)
        return routed


def load(model_dir):
    """GptOssRef of a checkpoint folder as published (MXFP4 experts or dequantized ones)."""
    cfg, raw = read_checkpoint(model_dir)
    return GptOssRef(cfg, dequantize_checkpoint(cfg, raw))
