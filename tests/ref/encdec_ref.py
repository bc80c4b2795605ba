"""Independent float64 reference of the spec model (causal encoder-decoder), written from
tests/ref/spec.json and the semantics pinned in issue 2 -- not from the C code.

    ref = EncDecRef(model_dir)          # reads config.json + safetensors (single or sharded)
    outs = ref.forward(ids)             # dict name -> float64/int64 array, batch axis of 1
"""
import json
import os

import numpy as np

_DT = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16, "I64": np.int64}


def read_safetensors(path):
    """name -> float64 array; BF16 widened by shifting into the high half of a float32."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        base = 8 + n
        out = {}
        for name, e in header.items():
            if name == "__metadata__":
                continue
            b, end = e["data_offsets"]
            f.seek(base + b)
            raw = np.frombuffer(f.read(end - b), dtype=_DT[e["dtype"]])
            if e["dtype"] == "BF16":
                raw = (raw.astype(np.uint32) << 16).view(np.float32)
            out[name] = raw.astype(np.float64).reshape(e["shape"])
        return out


def read_model(model_dir):
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    idx = os.path.join(model_dir, "model.safetensors.index.json")
    w = {}
    if os.path.exists(idx):
        for shard in sorted(set(json.load(open(idx))["weight_map"].values())):
            w.update(read_safetensors(os.path.join(model_dir, shard)))
    else:
        w = read_safetensors(os.path.join(model_dir, "model.safetensors"))
    return cfg, w


def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x, theta):
    """rotate-half RoPE on (H, T, D), positions 0..T-1, inv_freq_j = theta^(-2j/D)."""
    _, T, D = x.shape
    half = D // 2
    inv = theta ** (-2.0 * np.arange(half) / D)
    ang = np.arange(T)[:, None] * inv[None, :]
    c, s = np.cos(ang), np.sin(ang)
    a, b = x[..., :half], x[..., half:]
    return np.concatenate([a * c - b * s, b * c + a * s], axis=-1)


def silu(x):
    return x / (1.0 + np.exp(-x))


class EncDecRef:
    def __init__(self, model_dir):
        self.cfg, self.w = read_model(model_dir)
        c = self.cfg
        self.H, self.D, self.W = c["num_attention_heads"], c["head_dim"], c["local_window"]
        self.eps, self.theta = c["rms_norm_eps"], c["rope_theta"]

    def heads(self, x):  # (T, H*D) -> (H, T, D)
        T = x.shape[0]
        return x.reshape(T, self.H, self.D).transpose(1, 0, 2)

    def block(self, out, prefix, p, x, gsrc):
        w, H, D, W = self.w, self.H, self.D, self.W
        T = x.shape[0]
        L = lambda leaf: w[f"{p}.{leaf}.weight"]
        out[prefix + "input"] = x
        n1 = rmsnorm(x, L("norm1"), self.eps)
        out[prefix + "norm1"] = n1
        if gsrc is None:  # encoder: global K/V come from the block's own norm1
            gsrc = n1
        q = self.heads(n1 @ L("attn.q_proj").T)
        kg = self.heads(gsrc @ L("attn.global_k_proj").T)
        vg = self.heads(gsrc @ L("attn.global_v_proj").T)
        kl = self.heads(n1 @ L("attn.local_k_proj").T)
        vl = self.heads(n1 @ L("attn.local_v_proj").T)
        out[prefix + "q_pre_rope"], out[prefix + "global_k_pre_rope"] = q, kg
        out[prefix + "local_k_pre_rope"] = kl
        q, kg, kl = rope(q, self.theta), rope(kg, self.theta), rope(kl, self.theta)
        out[prefix + "q"], out[prefix + "global_k"], out[prefix + "global_v"] = q, kg, vg
        out[prefix + "local_k"], out[prefix + "local_v"] = kl, vl
        ck = np.concatenate([kg, kl], axis=1)
        cv = np.concatenate([vg, vl], axis=1)
        out[prefix + "combined_k"], out[prefix + "combined_v"] = ck, cv
        i = np.arange(T)[:, None]
        j = np.arange(T)[None, :]
        gm = (j <= i).astype(np.int64)
        lm = ((i - j >= 0) & (i - j < W)).astype(np.int64)
        am = np.concatenate([gm, lm], axis=1)
        out[prefix + "global_mask"] = gm[None]  # broadcast-head axis
        out[prefix + "local_mask"] = lm[None]
        out[prefix + "attention_mask"] = am[None]
        scores = q @ ck.transpose(0, 2, 1) / np.sqrt(D)
        out[prefix + "attn_scores"] = scores
        masked = np.where(am[None] == 1, scores, -np.inf)
        out[prefix + "attn_masked_scores"] = masked
        m = masked.max(axis=-1, keepdims=True)
        e = np.exp(masked - m)
        probs = e / e.sum(axis=-1, keepdims=True)
        out[prefix + "attn_probs"] = probs
        y = (probs @ cv).transpose(1, 0, 2).reshape(T, H * D)
        ao = y @ L("attn.o_proj").T
        out[prefix + "attn_output"] = ao
        x = x + ao
        out[prefix + "after_attn_residual"] = x
        n2 = rmsnorm(x, L("norm2"), self.eps)
        out[prefix + "norm2"] = n2
        g = n2 @ L("ffn.gate_proj").T
        u = n2 @ L("ffn.up_proj").T
        a = silu(g) * u
        out[prefix + "ffn_gate"], out[prefix + "ffn_up"], out[prefix + "ffn_activation"] = g, u, a
        f = a @ L("ffn.down_proj").T
        out[prefix + "ffn_output"] = f
        x = x + f
        out[prefix + "output"] = x
        return x

    def forward(self, ids):
        c, w = self.cfg, self.w
        E = w["embed_tokens.weight"]
        emb = E[np.asarray(ids)]
        out = {"token_embeddings": emb}
        x = emb
        for l in range(c["num_encoder_layers"]):
            x = self.block(out, f"encoder_{l}_", f"encoder.layers.{l}", x, None)
        out["encoder_pre_final_norm"] = x
        enc = rmsnorm(x, w["encoder.norm.weight"], self.eps)
        out["encoder_output"] = enc
        x = emb
        for l in range(c["num_decoder_layers"]):
            x = self.block(out, f"decoder_{l}_", f"decoder.layers.{l}", x, enc)
        out["decoder_output"] = x
        fh = rmsnorm(x, w["decoder.norm.weight"], self.eps)
        out["final_hidden"] = fh
        out["logits"] = fh @ E.T
        return {k: v[None] for k, v in out.items()}  # the batch axis (batch=1)
