"""Float64 reference of OLMoE (OlmoeForCausalLM: allenai/OLMoE-1B-7B-0924), written from transformers'
own code -- not from the C:

- src/transformers/models/olmoe/modeling_olmoe.py: OlmoeRMSNorm (eps default 1e-5), OlmoeAttention
  (q_norm = RMSNorm(hidden_size) over the whole q projection, k_norm = RMSNorm(KV * head_dim) over the
  whole k projection, *before* the view into heads; clip_qkv clamps q, k (after their norms) and v;
  RoPE (rotate_half); scores / sqrt(head_dim)), OlmoeSparseMoeBlock (softmax over all experts in
  float, torch.topk, renormalised only if norm_topk_prob -- false in the release), OlmoeMLP,
  OlmoeDecoderLayer (pre-norm residual), OlmoeModel; head_dim = hidden_size // num_attention_heads.

    outs = OlmoeRef(cfg, w).forward(ids)
    outs = load(model_dir).forward(ids)   # from a checkpoint folder (read_checkpoint, widened)
"""
import numpy as np

from deepseek_v3_ref import (causal_allowed, default_inv_freq, read_checkpoint, rmsnorm, rope_cos_sin, rotate_half,
                             silu, softmax)


class OlmoeRef:
    def __init__(self, cfg, w):
        self.cfg, self.w = cfg, w
        g = cfg.get
        self.L, self.D = cfg["num_hidden_layers"], cfg["hidden_size"]
        self.H = cfg["num_attention_heads"]
        self.KV = g("num_key_value_heads") or self.H
        self.hd = self.D // self.H
        self.eps = g("rms_norm_eps", 1e-5)
        self.E, self.k = g("num_experts", 64), g("num_experts_per_tok", 8)
        self.norm_topk = g("norm_topk_prob", False)
        self.clip = g("clip_qkv")
        self.bias = g("attention_bias", False)
        if g("rope_scaling"):
            raise ValueError("config.json key 'rope_scaling': only null is implemented for OLMoE")
        self.inv, self.A = default_inv_freq(g("rope_theta", 10000.0), self.hd)

    def lin(self, x, name):
        y = x @ self.w[name + ".weight"].T
        return y + self.w[name + ".bias"] if self.bias else y

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
            a = self.attention(xn, p + "self_attn.", o, cos, sin)
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
        head = w["lm_head.weight"] if "lm_head.weight" in w else w["model.embed_tokens.weight"]
        logits = final @ head.T
        out["lm_head_output"] = logits[None]
        out["logits"] = logits[None]
        out["next_token_probs"] = softmax(logits[-1])[None]
        return out

    def attention(self, x, a, o, cos, sin):
        w, T, H, KV, hd = self.w, x.shape[0], self.H, self.KV, self.hd
        qp, kp = self.lin(x, a + "q_proj"), self.lin(x, a + "k_proj")
        v = self.lin(x, a + "v_proj")
        o("attention_queries_pre_norm", qp)
        o("attention_keys_pre_norm", kp)
        q = rmsnorm(qp, w[a + "q_norm.weight"], self.eps)  # over all H * hd features at once
        k = rmsnorm(kp, w[a + "k_norm.weight"], self.eps)
        if self.clip is not None:
            q, k, v = (np.clip(t, -self.clip, self.clip) for t in (q, k, v))
        q = q.reshape(T, H, hd).transpose(1, 0, 2)
        k = k.reshape(T, KV, hd).transpose(1, 0, 2)
        v = v.reshape(T, KV, hd).transpose(1, 0, 2)
        o("attention_queries_pre_rope", q)
        o("attention_keys_pre_rope", k)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        o("attention_queries", q)
        o("attention_keys", k)
        o("attention_values", v)
        rep = H // KV
        K, V = np.repeat(k, rep, axis=0), np.repeat(v, rep, axis=0)
        S = np.where(causal_allowed(T)[None], q @ K.transpose(0, 2, 1) / np.sqrt(hd), -np.inf)
        o("attention_scores", S)
        P = softmax(S)
        o("attention_probabilities", P)
        O = (P @ V).transpose(1, 0, 2)
        o("attention_head_outputs", O)
        return self.lin(O.reshape(T, H * hd), a + "o_proj")

    def moe(self, x, pre, o):
        w, T, k = self.w, x.shape[0], self.k
        z = x @ w[pre + "gate.weight"].T
        o("router_logits", z)
        P = softmax(z)
        o("router_probabilities", P)
        idx = np.argsort(-P, axis=-1, kind="stable")[:, :k]  # torch.topk: descending
        wt = np.take_along_axis(P, idx, -1)
        if self.norm_topk:
            wt = wt / wt.sum(-1, keepdims=True)
        o("expert_indices", idx.astype(np.int64))
        o("expert_weights", wt)
        y = np.zeros((T, k, self.D))
        for t in range(T):
            for j in range(k):
                e = f"{pre}experts.{idx[t, j]}."
                xt = x[t]
                neu = silu(xt @ w[e + "gate_proj.weight"].T) * (xt @ w[e + "up_proj.weight"].T)
                y[t, j] = (neu @ w[e + "down_proj.weight"].T) * wt[t, j]
        o("expert_outputs", y)
        routed = y.sum(1)
        o("routed_output", routed)
        return routed


def load(model_dir):
    cfg, raw = read_checkpoint(model_dir)
    return OlmoeRef(cfg, {k: np.asarray(v, np.float64) for k, v in raw.items()})
