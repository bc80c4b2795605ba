"""Float64 reference of Phi-3 (Phi3ForCausalLM: microsoft/Phi-3.5-mini-instruct), written from
transformers' own code -- not from the C:

- src/transformers/models/phi3/modeling_phi3.py: Phi3Attention (one fused qkv_proj: rows [0, H hd) are
  q, the next KV hd are k, the last KV hd are v; RoPE on the first rotary_dim = cos.shape[-1] dims,
  rotate_half; scaling head_dim**-0.5; sliding_window when the config has one), Phi3MLP (gate_up_proj;
  gate, up = chunk(2): the first I rows are the gate; up * act(gate)), Phi3RMSNorm, Phi3DecoderLayer.
- src/transformers/modeling_rope_utils.py: _compute_longrope_parameters (factor = max_position_embeddings
  / original_max_position_embeddings when rope_scaling has no factor; attention_factor
  sqrt(1 + ln(factor) / ln(original)) when factor > 1; inv_freq = 1 / (ext * base^(2i/d)) with ext
  = long_factor if seq_len > original_max_position_embeddings else short_factor) and
  dynamic_rope_update / longrope_frequency_update (seq_len = max(position_ids) + 1, so a prompt of
  more than original_max_position_embeddings tokens uses long_factor for every position).
  Phi3Config: "su" (and "yarn") are read as "longrope"; original_max_position_embeddings is a
  top-level key (default 4096); partial_rotary_factor from the rope dict, else the top level.

    outs = Phi3Ref(cfg, w).forward(ids)
    outs = load(model_dir).forward(ids)   # from a checkpoint folder (read_checkpoint, widened)
"""
import math

import numpy as np

from deepseek_v3_ref import causal_allowed, read_checkpoint, rmsnorm, rotate_half, silu, softmax


def longrope_inv_freq(cfg, dim, seq_len):
    """(inv_freq (dim/2,), attention_factor, which factor list) of _compute_longrope_parameters."""
    rs = cfg.get("rope_scaling") or cfg.get("rope_parameters") or {}
    kind = rs.get("rope_type", rs.get("type", "default"))
    base = float(rs.get("rope_theta", cfg.get("rope_theta", 10000.0)))
    shape = np.arange(0, dim, 2, dtype=np.float64) / dim
    if kind == "default" or not rs:
        return 1.0 / base ** shape, 1.0, None
    if kind not in ("longrope", "su", "yarn"):  # Phi3Config reads "su" and "yarn" as longrope
        raise ValueError(f"config.json key 'rope_scaling': rope_type {kind!r} not implemented "
                         "(known: default, longrope, su, yarn)")
    # Phi3Config's original_max_position_embeddings defaults to 4096; the longrope update switches on
    # the top-level attribute, _compute_longrope_parameters reads the dict's (standardized from it)
    L0 = cfg.get("original_max_position_embeddings", 4096)
    if rs.get("original_max_position_embeddings", L0) != L0:
        raise ValueError("config.json key 'rope_scaling.original_max_position_embeddings' differs from "
                         "the top-level key")
    factor = rs.get("factor") or cfg["max_position_embeddings"] / L0
    A = rs.get("attention_factor")
    if A is None:
        A = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(L0))
    which = "long_factor" if seq_len > L0 else "short_factor"
    ext = np.asarray(rs[which], np.float64)
    if ext.shape != (dim // 2,):
        raise ValueError(f"config.json key 'rope_scaling.{which}': {len(ext)} values, want {dim // 2}")
    return 1.0 / (ext * base ** shape), float(A), which


class Phi3Ref:
    def __init__(self, cfg, w):
        self.cfg, self.w = cfg, w
        g = cfg.get
        self.L, self.D = cfg["num_hidden_layers"], cfg["hidden_size"]
        self.H = cfg["num_attention_heads"]
        self.KV = g("num_key_value_heads") or self.H
        self.hd = g("head_dim") or self.D // self.H
        rs = g("rope_scaling") or g("rope_parameters") or {}
        self.rot = int(self.hd * rs.get("partial_rotary_factor", g("partial_rotary_factor", 1.0)))
        self.eps = g("rms_norm_eps", 1e-5)
        self.window = g("sliding_window")
        if g("hidden_act", "silu") != "silu":
            raise ValueError(f"config.json key 'hidden_act': {g('hidden_act')!r} not implemented")

    def forward(self, ids):
        w, eps = self.w, self.eps
        ids = np.asarray(ids, np.int64)
        T = len(ids)
        out = {"input_ids": ids[None]}
        h = w["model.embed_tokens.weight"][ids]
        out["token_embeddings"] = h[None]
        inv, A, _ = longrope_inv_freq(self.cfg, self.rot, T)
        freqs = np.arange(T, dtype=np.float64)[:, None] * inv[None, :]
        emb = np.concatenate([freqs, freqs], -1)
        cos, sin = np.cos(emb) * A, np.sin(emb) * A
        for i in range(self.L):
            p = f"model.layers.{i}."
            o = lambda name, v: out.__setitem__(f"layers.{i}.{name}", v[None])
            o("layer_input", h)
            xn = rmsnorm(h, w[p + "input_layernorm.weight"], eps)
            o("attention_norm_output", xn)
            a = self.attention(xn, p + "self_attn.", o, cos, sin)
            o("attention_output", a)
            h1 = h + a
            o("layer_mid", h1)
            hn = rmsnorm(h1, w[p + "post_attention_layernorm.weight"], eps)
            o("mlp_norm_output", hn)
            o("mlp_input", hn)
            gu = hn @ w[p + "mlp.gate_up_proj.weight"].T
            o("mlp_gate_up", gu)
            I = gu.shape[-1] // 2
            act = silu(gu[:, :I])
            o("mlp_activation", act)
            neu = gu[:, I:] * act
            o("mlp_neurons", neu)
            m = neu @ w[p + "mlp.down_proj.weight"].T
            o("mlp_output", m)
            h = h1 + m
            o("layer_output", h)
        final = rmsnorm(h, w["model.norm.weight"], eps)
        out["final_norm_output"] = final[None]
        head = w["lm_head.weight"] if "lm_head.weight" in w else w["model.embed_tokens.weight"]
        logits = final @ head.T
        out["lm_head_output"] = logits[None]
        out["logits"] = logits[None]
        out["next_token_probs"] = softmax(logits[-1])[None]
        return out

    def attention(self, x, a, o, cos, sin):
        w, T, H, KV, hd, r = self.w, x.shape[0], self.H, self.KV, self.hd, self.rot
        qkv = x @ w[a + "qkv_proj.weight"].T
        o("attention_qkv", qkv)
        nq, nk = H * hd, KV * hd
        q = qkv[:, :nq].reshape(T, H, hd).transpose(1, 0, 2)
        k = qkv[:, nq:nq + nk].reshape(T, KV, hd).transpose(1, 0, 2)
        v = qkv[:, nq + nk:].reshape(T, KV, hd).transpose(1, 0, 2)
        o("attention_queries_pre_rope", q)
        o("attention_keys_pre_rope", k)
        rope = lambda t: np.concatenate([t[..., :r] * cos + rotate_half(t[..., :r]) * sin, t[..., r:]], -1)
        q, k = rope(q), rope(k)
        o("attention_queries", q)
        o("attention_keys", k)
        o("attention_values", v)
        rep = H // KV
        K, V = np.repeat(k, rep, axis=0), np.repeat(v, rep, axis=0)
        S = np.where(causal_allowed(T, self.window)[None], q @ K.transpose(0, 2, 1) * hd ** -0.5, -np.inf)
        o("attention_scores", S)
        P = softmax(S)
        o("attention_probabilities", P)
        O = (P @ V).transpose(1, 0, 2)
        o("attention_head_outputs", O)
        return O.reshape(T, H * hd) @ w[a + "o_proj.weight"].T


def load(model_dir):
    cfg, raw = read_checkpoint(model_dir)
    return Phi3Ref(cfg, {k: np.asarray(v, np.float64) for k, v in raw.items()})
