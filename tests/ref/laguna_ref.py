"""Independent float64 reference of Laguna (LagunaForCausalLM), written from
tests/ref/laguna-forward.md sections 2-5 and the nnterp layouts of section 7 -- not from the C
code. Weights are the checkpoint's (BF16-rounded) values widened to float64.

    ref = LagunaRef(model_dir)     # config.json + sharded safetensors with their index
    outs = ref.forward(ids)        # dict nnterp name -> array with a batch axis of 1
"""
import math

import numpy as np

from encdec_ref import read_model


def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def silu(x):
    return x / (1.0 + np.exp(-x))


def softplus(x):  # torch defaults: beta 1, threshold 20
    return np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, 20))))


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


# LagunaConfig's rope_parameters when config.json has none (configuration_laguna.py)
DEFAULT_ROPE = {"full_attention": {"rope_type": "default", "rope_theta": 500000.0, "partial_rotary_factor": 0.5},
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 1.0}}


def rope_params(cfg, layer_type):
    """rope_parameters[layer_type] as transformers completes it (modeling_rope_utils.py,
    standardize_rope_params): the top level's rope_theta and partial_rotary_factor fill keys the
    dict lacks; YaRN's original_max_position_embeddings falls back to the top of rope_parameters,
    then max_position_embeddings. Returns (the dict, truncate), truncate read at the top of
    rope_parameters as _compute_yarn_parameters reads it."""
    top = cfg.get("rope_parameters")
    if top is None:
        return dict(DEFAULT_ROPE[layer_type]), True
    rp = dict(top[layer_type])
    for k in ("rope_theta", "partial_rotary_factor"):
        if k in cfg:
            rp.setdefault(k, cfg[k])
    if rp.get("rope_type", "default") == "yarn":
        rp.setdefault("original_max_position_embeddings",
                      top.get("original_max_position_embeddings", cfg.get("max_position_embeddings", 131072)))
    return rp, top.get("truncate", True)


def get_mscale(scale, mscale=1.0):
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def inv_freq(rp, head_dim, truncate=True):
    """Section 3.2 (default) and 3.3 (YaRN, _compute_yarn_parameters) in float64: (inv_freq, A)."""
    theta = rp["rope_theta"]
    d = int(head_dim * rp.get("partial_rotary_factor", 1.0))
    pos = theta ** (np.arange(0, d, 2) / d)
    if rp.get("rope_type", "default") == "default":
        return 1.0 / pos, 1.0
    s, L0 = rp["factor"], rp["original_max_position_embeddings"]
    bf, bs = rp.get("beta_fast") or 32, rp.get("beta_slow") or 1
    A = rp.get("attention_factor")
    if A is None:
        ms, msa = rp.get("mscale"), rp.get("mscale_all_dim")
        A = get_mscale(s, ms) / get_mscale(s, msa) if ms and msa else get_mscale(s)
    corr = lambda n: d * math.log(L0 / (n * 2 * math.pi)) / (2 * math.log(theta))
    low, high = corr(bf), corr(bs)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, d - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(d // 2) - low) / (high - low), 0, 1)
    e = 1 - ramp
    return (1 / (s * pos)) * (1 - e) + (1 / pos) * e, A


def rope(x, inv, A):
    """x: (heads, T, hd). NeoX halves within the first r = 2 len(inv) dims, times A; the rest
    passes unchanged (section 3.4)."""
    T = x.shape[1]
    r = 2 * len(inv)
    ang = np.arange(T)[:, None] * inv[None, :]
    c, s = np.cos(ang) * A, np.sin(ang) * A
    a, b = x[..., : r // 2], x[..., r // 2: r]
    return np.concatenate([a * c - b * s, b * c + a * s, x[..., r:]], axis=-1)


class LagunaRef:
    def __init__(self, model_dir):
        cfg, self.w = read_model(model_dir)
        self.cfg = cfg
        g = lambda k, d: cfg.get(k, d)
        self.L = g("num_hidden_layers", 40)
        self.D = g("hidden_size", 2048)
        self.hd = g("head_dim", 128)
        self.KV = g("num_key_value_heads", 8)
        self.heads = g("num_attention_heads_per_layer", [g("num_attention_heads", 48)] * self.L)
        self.types = g("layer_types", ["full_attention"] * self.L)
        self.mlp_types = g("mlp_layer_types", ["dense"] + ["sparse"] * (self.L - 1))
        self.W = g("sliding_window", 512)
        self.eps = g("rms_norm_eps", 1e-6)
        self.k = g("num_experts_per_tok", 8)
        self.E = g("num_experts", 256)
        self.scale = g("moe_routed_scaling_factor", 1.0)
        self.cap = g("moe_router_logit_softcapping", 0.0) or 0.0
        self.rope = {}
        for t in set(self.types):
            rp, truncate = rope_params(cfg, t)
            self.rope[t] = inv_freq(rp, self.hd, truncate)

    def forward(self, ids):
        w, D, hd, KV, eps = self.w, self.D, self.hd, self.KV, self.eps
        ids = np.asarray(ids, np.int64)
        T = len(ids)
        out = {"input_ids": ids[None], "attention_mask": np.ones((1, T), np.int64)}
        h = w["model.embed_tokens.weight"][ids]
        out["token_embeddings"] = h[None]
        qi, ki = np.arange(T)[:, None], np.arange(T)[None, :]
        for i in range(self.L):
            p = f"model.layers.{i}."
            o = lambda name, v: out.__setitem__(f"layers.{i}.{name}", v[None])
            H = self.heads[i]
            o("layer_input", h)
            xn = rmsnorm(h, w[p + "input_layernorm.weight"], eps)
            o("attention_norm_output", xn)
            q = (xn @ w[p + "self_attn.q_proj.weight"].T).reshape(T, H, hd)
            k = (xn @ w[p + "self_attn.k_proj.weight"].T).reshape(T, KV, hd)
            v = (xn @ w[p + "self_attn.v_proj.weight"].T).reshape(T, KV, hd)
            q = rmsnorm(q, w[p + "self_attn.q_norm.weight"], eps).transpose(1, 0, 2)  # (H, T, hd)
            k = rmsnorm(k, w[p + "self_attn.k_norm.weight"], eps).transpose(1, 0, 2)  # (KV, T, hd)
            v = v.transpose(1, 0, 2)
            inv, A = self.rope[self.types[i]]
            q, k = rope(q, inv, A), rope(k, inv, A)
            o("attention_queries", q)
            o("attention_keys", k)
            o("attention_values", v)
            rep = H // KV
            K, V = np.repeat(k, rep, axis=0), np.repeat(v, rep, axis=0)  # head j reads KV j // rep
            allowed = ki <= qi
            if self.types[i] == "sliding_attention":
                allowed &= ki > qi - self.W
            S = np.where(allowed[None], q @ K.transpose(0, 2, 1) / math.sqrt(hd), -np.inf)
            o("attention_scores", S)
            P = np.exp(S - S.max(-1, keepdims=True))
            P /= P.sum(-1, keepdims=True)
            o("attention_probabilities", P)
            O = (P @ V).transpose(1, 0, 2)  # (T, H, hd)
            o("attention_head_outputs", O)
            Wg = w[p + "self_attn.g_proj.weight"]
            gate = softplus(xn @ Wg.T)  # (T, H) a head, or (T, H hd) a channel
            O = O * (gate[:, :, None] if Wg.shape[0] == H else gate.reshape(T, H, hd))
            o("attention_premix", O)
            a = O.reshape(T, H * hd) @ w[p + "self_attn.o_proj.weight"].T
            o("attention_output", a)
            h1 = h + a
            o("layer_mid", h1)
            hn = rmsnorm(h1, w[p + "post_attention_layernorm.weight"], eps)
            o("mlp_norm_output", hn)
            o("mlp_input", hn)
            if self.mlp_types[i] == "dense":
                act = silu(hn @ w[p + "mlp.gate_proj.weight"].T)
                o("mlp_activation", act)
                neu = act * (hn @ w[p + "mlp.up_proj.weight"].T)
                o("mlp_neurons", neu)
                m = neu @ w[p + "mlp.down_proj.weight"].T
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
        last = np.exp(logits[-1] - logits[-1].max())
        out["next_token_probs"] = (last / last.sum())[None]
        return out

    def moe(self, X, p, o):
        w, T, k = self.w, X.shape[0], self.k
        mlp = lambda pre: (silu(X @ w[pre + "gate_proj.weight"].T) * (X @ w[pre + "up_proj.weight"].T)) @ w[pre + "down_proj.weight"].T
        shared = mlp(p + "mlp.shared_expert.")
        o("shared_expert_output", shared)
        z = X @ w[p + "mlp.gate.weight"].T
        o("router_logits", z)
        if self.cap > 0:
            z = np.tanh(z / self.cap) * self.cap
        s = sigmoid(z)
        biased = s + w[p + "mlp.experts.e_score_correction_bias"]
        sel = np.argsort(-biased, axis=-1, kind="stable")[:, :k]  # largest first, lower index on ties
        wt = np.take_along_axis(s, sel, -1)
        wt = wt / wt.sum(-1, keepdims=True)
        o("expert_indices", sel.astype(np.int64))
        o("expert_weights", wt)
        y = np.zeros((T, k, self.D))
        for t in range(T):
            for j in range(k):
                pre = f"{p}mlp.experts.{sel[t, j]}."
                xt = X[t:t + 1]
                yt = (silu(xt @ w[pre + "gate_proj.weight"].T) * (xt @ w[pre + "up_proj.weight"].T)) @ w[pre + "down_proj.weight"].T
                y[t, j] = yt[0] * wt[t, j]
        o("expert_outputs", y)
        routed = y.sum(1) * self.scale
        o("routed_output", routed)
        return routed + shared
