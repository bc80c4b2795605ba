"""Float64 reference of GPT2LMHeadModel (modeling_gpt2.py).

- GPT2Model.forward: inputs_embeds = wte(ids); hidden = inputs_embeds + wpe(position_ids).
- GPT2Block.forward: h = x + attn(ln_1(x)); out = h + mlp(ln_2(h)); LayerNorm with bias,
  eps layer_norm_epsilon.
- GPT2Attention: c_attn is a Conv1D (pytorch_utils.Conv1D: x @ weight + bias, weight stored
  [in, out]) giving q, k, v = split(D, dim=2); heads (T, n_head, D / n_head); eager_attention_forward
  divides by sqrt(head_dim) if scale_attn_weights and by (layer_idx + 1) if
  scale_attn_by_inverse_layer_idx; causal mask; c_proj Conv1D.
- GPT2MLP: c_proj(act(c_fc(x))), act = activation_function (gelu_new).
- lm_head tied to wte.
Tensor names: the checkpoint's own, unprefixed (`h.0.attn.c_attn.weight`, as openai-community/gpt2
ships them) or `transformer.`-prefixed (as GPT2LMHeadModel.save_pretrained writes them).
"""
import numpy as np

from .common import act_fn, attention, flow, layernorm, pad_batch, softmax, split_outputs
from .config import resolve


def prefix_of(w):
    if "wte.weight" in w:
        return ""
    if "transformer.wte.weight" in w:
        return "transformer."
    raise KeyError("GPT-2 checkpoint has neither 'wte.weight' nor 'transformer.wte.weight'")


def forward(cfg, w, prompts):
    r = resolve(cfg)
    D, H, eps = r["n_embd"], r["n_head"], r["layer_norm_epsilon"]
    hd = D // H
    act = act_fn(r["activation_function"], "activation_function")
    P = prefix_of(w)
    conv = lambda x, name: x @ w[P + name + ".weight"] + w[P + name + ".bias"]  # Conv1D [in, out]
    ln = lambda x, name: layernorm(x, w[P + name + ".weight"], w[P + name + ".bias"], eps)
    ids, lens = pad_batch(prompts)
    B, T = ids.shape
    out = {}
    e = w[P + "wte.weight"][ids]
    out["token_embeddings"] = e
    h = e + w[P + "wpe.weight"][np.arange(T)][None]
    for i in range(r["n_layer"]):
        p = f"h.{i}."
        o = lambda name, v: flow(out, f"layers.{i}.{name}", v)  # v, or what SUBST puts in
        h = o("layer_input", h)
        xn = ln(h, p + "ln_1")
        o("attention_norm_output", xn)
        qkv = conv(xn, p + "attn.c_attn")
        q, k, v = (t.reshape(B, T, H, hd).transpose(0, 2, 1, 3) for t in np.split(qkv, 3, axis=-1))
        o("attention_queries", q)
        o("attention_keys", k)
        o("attention_values", v)
        scale = (hd ** -0.5 if r["scale_attn_weights"] else 1.0)
        if r["scale_attn_by_inverse_layer_idx"]:
            scale /= i + 1
        S, Pr, O = attention(q, k, v, lens, scale)
        o("attention_scores", S)
        o("attention_probabilities", Pr)
        o("attention_head_outputs", O)
        a = conv(O.reshape(B, T, D), p + "attn.c_proj")
        a = o("attention_output", a)
        h1 = h + a
        o("layer_mid", h1)
        hn = ln(h1, p + "ln_2")
        o("mlp_norm_output", hn)
        o("mlp_input", hn)
        neu = act(conv(hn, p + "mlp.c_fc"))
        o("mlp_activation", neu)
        o("mlp_neurons", neu)
        m = conv(neu, p + "mlp.c_proj")
        m = o("mlp_output", m)
        h = h1 + m
        h = o("layer_output", h)
    final = ln(h, "ln_f")
    final = flow(out, "final_norm_output", final)
    logits = final @ w[P + "wte.weight"].T
    out["lm_head_output"] = logits
    out["logits"] = logits
    res = split_outputs(out, lens)
    for b, n in enumerate(lens):
        res[b]["next_token_probs"] = softmax(logits[b, n - 1])[None]
    return res
