"""OLMo 2 (Olmo2ForCausalLM) in numpy float64, written from transformers'
src/transformers/models/olmo2/modeling_olmo2.py and configuration_olmo2.py (read at
huggingface/transformers 000c33f / 008e574), not from harvest's C:

  Olmo2RMSNorm(x) = weight * (x / sqrt(mean(x^2) + eps))            (computed in float32 there)
  Olmo2Attention:  q = q_norm(q_proj(x)), k = k_norm(k_proj(x)), v = v_proj(x): the norms over
                   the whole projection (num_heads * head_dim, num_kv_heads * head_dim wide),
                   then the head split, RoPE (rotate_half, default inv_freq), softmax(q k^T *
                   head_dim^-0.5 + causal mask), repeat_kv, o_proj
  Olmo2MLP:        down_proj(silu(gate_proj(x)) * up_proj(x)), no biases
  Olmo2DecoderLayer: h = x + post_attention_layernorm(attn(x));
                     out = h + post_feedforward_layernorm(mlp(h))      (no norm before either)
  Olmo2Model:      embed_tokens, the layers, norm; Olmo2ForCausalLM: lm_head (tied if
                   tie_word_embeddings)

forward(cfg, w, ids) returns the value of every name of harvest's Llama-style catalogue that OLMo
2 has (docs/families.md), each with a batch axis of 1, in harvest's layouts: (1, T, D) streams,
(1, H, T, hd) queries / keys / values, (1, H, T, T) scores (-inf where masked) and probabilities,
(1, T, H, hd) head outputs, (1, V) next_token_probs. order="pre" is the mutation the test must
catch: the same norms moved before attention and MLP (Llama's order)."""
import numpy as np

# configuration_olmo2.py's defaults (the keys that change the computation)
DEFAULTS = dict(vocab_size=50304, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                num_attention_heads=32, num_key_value_heads=None, hidden_act="silu",
                max_position_embeddings=2048, tie_word_embeddings=False, rope_theta=10000.0,
                rope_scaling=None, attention_bias=False, rms_norm_eps=1e-5)


def resolve(cfg):
    r = dict(DEFAULTS)
    r.update(cfg)
    if r["num_key_value_heads"] is None:  # Olmo2Config.__post_init__
        r["num_key_value_heads"] = r["num_attention_heads"]
    # Olmo2Attention: getattr(config, "head_dim", hidden_size // num_attention_heads)
    r["head_dim"] = r.get("head_dim") or r["hidden_size"] // r["num_attention_heads"]
    assert r["hidden_act"] == "silu" and r.get("rope_scaling") is None, "the reference: default RoPE, silu"
    return r


def rmsnorm(x, w, eps):
    return w * (x / np.sqrt(np.mean(x * x, -1, keepdims=True) + eps))


def silu(x):
    return x / (1.0 + np.exp(-x))


def rope(x, theta):
    """x (heads, T, hd): q * cos + rotate_half(q) * sin, inv_freq = 1 / theta^(2j / hd)."""
    hd, T = x.shape[-1], x.shape[-2]
    inv = 1.0 / theta ** (np.arange(0, hd, 2, dtype=np.float64) / hd)
    freqs = np.arange(T, dtype=np.float64)[:, None] * inv[None, :]
    emb = np.concatenate([freqs, freqs], -1)
    x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
    return x * np.cos(emb) + np.concatenate([-x2, x1], -1) * np.sin(emb)


def linear(x, w, name, bias):
    y = x @ w[name + ".weight"].T
    return y + w[name + ".bias"] if bias else y


def attention(r, w, p, x, out, T):
    H, KV, hd = r["num_attention_heads"], r["num_key_value_heads"], r["head_dim"]
    ab, eps = r["attention_bias"], r["rms_norm_eps"]
    q = rmsnorm(linear(x, w, p + "self_attn.q_proj", ab), w[p + "self_attn.q_norm.weight"], eps)
    k = rmsnorm(linear(x, w, p + "self_attn.k_proj", ab), w[p + "self_attn.k_norm.weight"], eps)
    v = linear(x, w, p + "self_attn.v_proj", ab)
    q, k, v = (a.reshape(T, -1, hd).transpose(1, 0, 2) for a in (q, k, v))  # (heads, T, hd)
    out["attention_queries_pre_rope"], out["attention_keys_pre_rope"] = q, k
    q, k = rope(q, r["rope_theta"]), rope(k, r["rope_theta"])
    out["attention_queries"], out["attention_keys"], out["attention_values"] = q, k, v
    kr, vr = np.repeat(k, H // KV, 0), np.repeat(v, H // KV, 0)  # repeat_kv
    s = q @ kr.transpose(0, 2, 1) * hd ** -0.5
    s = np.where(np.tril(np.ones((T, T), bool)), s, -np.inf)
    pr = np.exp(s - s.max(-1, keepdims=True))
    pr /= pr.sum(-1, keepdims=True)
    out["attention_scores"], out["attention_probabilities"] = s, pr
    o = (pr @ vr).transpose(1, 0, 2)  # (T, H, hd)
    out["attention_head_outputs"] = o
    return linear(o.reshape(T, H * hd), w, p + "self_attn.o_proj", ab)


def mlp(w, p, x, out):
    g = silu(x @ w[p + "mlp.gate_proj.weight"].T)
    out["mlp_activation"] = g
    n = g * (x @ w[p + "mlp.up_proj.weight"].T)
    out["mlp_neurons"] = n
    return n @ w[p + "mlp.down_proj.weight"].T


def block(r, w, i, x, order):
    """One Olmo2DecoderLayer: its values by catalogue name (no batch axis) and its output."""
    p, eps, T, out = f"model.layers.{i}.", r["rms_norm_eps"], x.shape[0], {}
    pan, pfn = w[p + "post_attention_layernorm.weight"], w[p + "post_feedforward_layernorm.weight"]
    out["layer_input"] = x
    a = attention(r, w, p, rmsnorm(x, pan, eps) if order == "pre" else x, out, T)
    out["attention_output"] = a
    if order != "pre":
        a = rmsnorm(a, pan, eps)
        out["attention_post_norm_output"] = a
    h = x + a
    out["layer_mid"] = out["mlp_input"] = h
    m = mlp(w, p, rmsnorm(h, pfn, eps) if order == "pre" else h, out)
    out["mlp_output"] = m
    if order != "pre":
        m = rmsnorm(m, pfn, eps)
        out["mlp_post_norm_output"] = m
    y = h + m
    out["layer_output"] = y
    return {f"layers.{i}.{k}": v for k, v in out.items()}, y


def forward(cfg, w, ids, order="post"):
    """The values of one prompt ids (a list of token ids), each with a batch axis of 1."""
    r = resolve(cfg)
    w = {k: np.asarray(v, np.float64) for k, v in w.items()}
    x = w["model.embed_tokens.weight"][np.asarray(ids)]
    vals = {"token_embeddings": x}
    for i in range(r["num_hidden_layers"]):
        v, x = block(r, w, i, x, order)
        vals.update(v)
    xn = rmsnorm(x, w["model.norm.weight"], r["rms_norm_eps"])
    head = w["model.embed_tokens.weight" if r["tie_word_embeddings"] else "lm_head.weight"]
    logits = xn @ head.T
    z = np.exp(logits[-1] - logits[-1].max())
    vals.update(final_norm_output=xn, lm_head_output=logits, logits=logits,
                next_token_probs=z / z.sum())
    return {k: v[None] for k, v in vals.items()}
