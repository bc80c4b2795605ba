"""Float64 reference of GPTNeoXForCausalLM (modeling_gpt_neox.py), Pythia's family.

- GPTNeoXLayer.forward: attn = attention(input_layernorm(x)); if use_parallel_residual:
  out = x + attn + mlp(post_attention_layernorm(x)); else h = x + attn,
  out = h + mlp(post_attention_layernorm(h)). LayerNorm with bias, eps layer_norm_eps.
- GPTNeoXAttention: query_key_value (Linear with bias) output viewed (T, heads, 3 head_dim) and
  split *per head* into q, k, v (the fused layout interleaves heads: [q_h k_h v_h] for each head h);
  rotary on the first rotary_ndims = int(head_dim * rotary_pct) dims of q and k (rotate_half within
  them, base rotary_emb_base, rope_scaling as the Llama family), the rest passes; scaling
  head_dim**-0.5; dense (Linear with bias).
- GPTNeoXMLP: dense_4h_to_h(act(dense_h_to_4h(x))), act = hidden_act (gelu = erf GELU).
- embed_out: its own, untied (tie_word_embeddings False).
"""
import numpy as np

from .common import act_fn, apply_rope, attention, layernorm, pad_batch, rope_inv_freq, softmax, \
    split_outputs
from .config import resolve


def forward(cfg, w, prompts):
    r = resolve(cfg)
    D, H, eps = r["hidden_size"], r["num_attention_heads"], r["layer_norm_eps"]
    hd = D // H
    rd = int(hd * r["rotary_pct"])
    act = act_fn(r["hidden_act"], "hidden_act")
    bias = bool(r.get("attention_bias", True))
    lin = lambda x, name, b=True: x @ w[name + ".weight"].T + (w[name + ".bias"] if b else 0.0)
    ln = lambda x, name: layernorm(x, w[name + ".weight"], w[name + ".bias"], eps)
    ids, lens = pad_batch(prompts)
    B, T = ids.shape
    inv, A = rope_inv_freq(r["rotary_emb_base"], rd, r.get("rope_scaling"),
                           r["max_position_embeddings"], T)
    out = {}
    h = w["gpt_neox.embed_in.weight"][ids]
    out["token_embeddings"] = h
    for i in range(r["num_hidden_layers"]):
        p = f"gpt_neox.layers.{i}."
        o = lambda name, v: out.__setitem__(f"layers.{i}.{name}", v)
        o("layer_input", h)
        xn = ln(h, p + "input_layernorm")
        o("attention_norm_output", xn)
        qkv = lin(xn, p + "attention.query_key_value", bias).reshape(B, T, H, 3 * hd)
        q, k, v = (t.transpose(0, 2, 1, 3) for t in np.split(qkv, 3, axis=-1))
        o("attention_queries_pre_rope", q)
        o("attention_keys_pre_rope", k)
        q, k = apply_rope(q, inv, A), apply_rope(k, inv, A)
        o("attention_queries", q)
        o("attention_keys", k)
        o("attention_values", v)
        S, P, O = attention(q, k, v, lens, hd ** -0.5)
        o("attention_scores", S)
        o("attention_probabilities", P)
        o("attention_head_outputs", O)
        a = lin(O.reshape(B, T, D), p + "attention.dense", bias)
        o("attention_output", a)
        h1 = h + a
        o("layer_mid", h1)
        hn = ln(h if r["use_parallel_residual"] else h1, p + "post_attention_layernorm")
        o("mlp_norm_output", hn)
        o("mlp_input", hn)
        neu = act(lin(hn, p + "mlp.dense_h_to_4h"))
        o("mlp_activation", neu)
        o("mlp_neurons", neu)
        m = lin(neu, p + "mlp.dense_4h_to_h")
        o("mlp_output", m)
        h = h1 + m
        o("layer_output", h)
    final = ln(h, "gpt_neox.final_layer_norm")
    out["final_norm_output"] = final
    head = w["gpt_neox.embed_in.weight"] if r.get("tie_word_embeddings") else w["embed_out.weight"]
    logits = final @ head.T
    out["lm_head_output"] = logits
    out["logits"] = logits
    res = split_outputs(out, lens)
    for b, n in enumerate(lens):
        res[b]["next_token_probs"] = softmax(logits[b, n - 1])[None]
    return res
