"""Float64 reference of the Llama-style decoders: LlamaForCausalLM, MistralForCausalLM,
Qwen2ForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM, MixtralForCausalLM, Gemma2ForCausalLM,
Gemma3ForCausalLM (text). One forward reads top to bottom; the family differences are the fields
of `Spec`, each citing the transformers code it follows:

- LlamaDecoderLayer.forward (modeling_llama.py): h = x + o_proj(attn(input_layernorm(x)));
  out = h + mlp(post_attention_layernorm(h)); LlamaMLP: down(act(gate(x)) * up(x)).
- LlamaAttention.forward: q/k/v projections viewed (T, heads, head_dim), RoPE
  (apply_rotary_pos_emb), eager_attention_forward with scaling head_dim**-0.5.
- Qwen2Attention: q/k/v with bias=True, o_proj without; Qwen3Attention / Qwen3MoeAttention and
  Gemma3Attention: q_norm / k_norm (RMSNorm over head_dim) on the (T, heads, head_dim) views
  *before* RoPE.
- MixtralSparseMoeBlock: router softmax (float) over all experts, top-k, always renormalised;
  experts w2(act(w1 x) * w3 x). Qwen3MoeSparseMoeBlock: the same with mlp.gate / mlp.experts.j.
  {gate,up,down}_proj, renormalised only if norm_topk_prob; dense Qwen3MoeMLP in mlp_only_layers
  and where (i + 1) % decoder_sparse_step != 0.
- Gemma2DecoderLayer / Gemma3DecoderLayer: sandwich norms h = x + post_attention_layernorm(attn(
  input_layernorm(x))); out = h + post_feedforward_layernorm(mlp(pre_feedforward_layernorm(h))),
  RMSNorm (1 + w), embeddings times hidden_size**0.5 rounded to the model dtype
  (`torch.tensor(hidden_size**0.5, dtype=hidden_states.dtype)`, Gemma3TextScaledWordEmbedding's
  `embed_scale.to(weight.dtype)`), scaling query_pre_attn_scalar**-0.5, Gemma 2's attention
  soft-cap (before the mask) and final-logit soft-cap, layer_types sliding / full, Gemma 3's local
  RoPE base (rope_local_base_freq, no scaling) on sliding layers.
"""
import numpy as np

from .common import act_fn, apply_rope, attention, flow, pad_batch, rmsnorm, rope_inv_freq, softcap, \
    softmax, split_outputs
from .config import resolve
from .params import is_sparse_layer


def layer_types(r):
    """Per layer "sliding_attention" or "full_attention", as each configuration_*.py builds
    `layer_types` when config.json has none."""
    fam, L = r["family"], r["num_hidden_layers"]
    if r.get("layer_types"):
        return list(r["layer_types"])
    if fam in ("mistral", "mixtral"):
        return ["sliding_attention" if r.get("sliding_window") else "full_attention"] * L
    if fam in ("qwen2", "qwen3"):  # Qwen2Config / Qwen3Config __post_init__
        on = effective_window(r) is not None
        return ["sliding_attention" if on and i >= r["max_window_layers"] else "full_attention"
                for i in range(L)]
    if fam == "qwen3_moe":  # Qwen3MoeModel: one sliding mask for every layer when the window is on
        return ["sliding_attention" if effective_window(r) is not None else "full_attention"] * L
    if fam == "gemma2":
        return ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(L)]
    if fam == "gemma3_text":
        p = r.get("sliding_window_pattern", r.get("_sliding_window_pattern", 6))
        return ["sliding_attention" if (i + 1) % p else "full_attention" for i in range(L)]
    return ["full_attention"] * L


def effective_window(r):
    """The window the model uses: Qwen2/Qwen3/Qwen3-MoE configs keep `sliding_window` only when
    `use_sliding_window` is true (`self.sliding_window = self.sliding_window if
    self.use_sliding_window else None` in their __post_init__)."""
    if r["family"] in ("qwen2", "qwen3", "qwen3_moe") and not r.get("use_sliding_window"):
        return None
    return r.get("sliding_window")


def rope_params(r, layer_type):
    """(rope_theta, scaling dict or None) for a layer: the newer `rope_parameters` key (flat, or per
    layer type as Gemma 3 writes it) if present, else `rope_theta` / `rope_scaling`; Gemma 3's
    sliding layers use `rope_local_base_freq` without scaling (Gemma3TextConfig)."""
    rp = r.get("rope_parameters")
    if isinstance(rp, dict) and layer_type in rp and isinstance(rp[layer_type], dict):
        rp = rp[layer_type]
    if isinstance(rp, dict) and "rope_theta" in rp:
        kind = rp.get("rope_type", "default")
        return rp["rope_theta"], (None if kind == "default" else rp)
    if r["family"] == "gemma3_text" and layer_type == "sliding_attention":
        return r["rope_local_base_freq"], None
    return r["rope_theta"], r.get("rope_scaling")


class Spec:
    """The family differences, resolved once from the config."""

    def __init__(self, r, normalizer_dtype):
        fam = r["family"]
        self.r, self.fam = r, fam
        self.gemma = fam in ("gemma2", "gemma3_text")
        self.qk_norm = fam in ("qwen3", "qwen3_moe", "gemma3_text")
        self.qkv_bias = fam == "qwen2" or bool(r.get("attention_bias"))
        self.o_bias = fam != "qwen2" and bool(r.get("attention_bias"))
        self.mlp_bias = bool(r.get("mlp_bias"))
        key = "hidden_activation" if self.gemma else "hidden_act"
        self.act = act_fn(r.get(key) or r.get("hidden_act"), key)
        self.scale = (r["query_pre_attn_scalar"] if self.gemma else r["head_dim"]) ** -0.5
        self.attn_cap = r.get("attn_logit_softcapping") if self.gemma else None
        self.final_cap = r.get("final_logit_softcapping") if self.gemma else None
        if r.get("use_bidirectional_attention"):
            raise ValueError("config.json key 'use_bidirectional_attention': true is not a causal LM "
                             "(Gemma3TextConfig, EmbeddingGemma); not implemented")
        self.types = layer_types(r)
        dt = {"float32": np.float32, "bfloat16": None, "float64": np.float64}[normalizer_dtype]
        s = r["hidden_size"] ** 0.5
        if normalizer_dtype == "bfloat16":
            from .safetensors_io import bf16_to_f32, f32_to_bf16
            s = float(bf16_to_f32(f32_to_bf16(np.float32(s))))
        else:
            s = float(dt(s))
        self.embed_scale = s if self.gemma else 1.0

    def window(self, i):
        return effective_window(self.r) if self.types[i] == "sliding_attention" else None

    def rope(self, i, T):
        theta, scaling = rope_params(self.r, self.types[i])
        return rope_inv_freq(theta, self.r["head_dim"], scaling, self.r["max_position_embeddings"], T)

    def moe(self, i):
        if self.fam == "mixtral":
            return True
        return self.fam == "qwen3_moe" and is_sparse_layer(self.r, i)


def linear(x, w, name, bias):
    y = x @ w[name + ".weight"].T
    return y + w[name + ".bias"] if bias else y


def forward(cfg, w, prompts, normalizer_dtype="float32"):
    """One dict per prompt, nnterp name -> float64 array with a batch axis of 1 (see NAMES.md).
    normalizer_dtype: the dtype Gemma's sqrt(hidden_size) is rounded to (the model's dtype)."""
    r = resolve(cfg)
    sp = Spec(r, normalizer_dtype)
    D, H, KV, hd, eps = r["hidden_size"], r["num_attention_heads"], r["num_key_value_heads"], \
        r["head_dim"], r["rms_norm_eps"]
    ids, lens = pad_batch(prompts)
    B, T = ids.shape
    out = {}
    emb = w["model.embed_tokens.weight"]
    h = emb[ids]
    # Gemma 2 scales in Gemma2Model.forward (the embedding module's output is unscaled);
    # Gemma 3's embedding module scales itself.
    out["token_embeddings"] = h * sp.embed_scale if sp.fam == "gemma3_text" else h
    h = h * sp.embed_scale
    for i in range(r["num_hidden_layers"]):
        p = f"model.layers.{i}."
        o = lambda name, v: flow(out, f"layers.{i}.{name}", v)  # v, or what SUBST puts in
        h = o("layer_input", h)
        xn = rmsnorm(h, w[p + "input_layernorm.weight"], eps, sp.gemma)
        o("attention_norm_output", xn)
        q = linear(xn, w, p + "self_attn.q_proj", sp.qkv_bias).reshape(B, T, H, hd)
        k = linear(xn, w, p + "self_attn.k_proj", sp.qkv_bias).reshape(B, T, KV, hd)
        v = linear(xn, w, p + "self_attn.v_proj", sp.qkv_bias).reshape(B, T, KV, hd)
        if sp.qk_norm:
            q = rmsnorm(q, w[p + "self_attn.q_norm.weight"], eps, sp.gemma)
            k = rmsnorm(k, w[p + "self_attn.k_norm.weight"], eps, sp.gemma)
        q, k = q.transpose(0, 2, 1, 3), k.transpose(0, 2, 1, 3)  # (B, heads, T, hd)
        o("attention_queries_pre_rope", q)
        o("attention_keys_pre_rope", k)
        inv, A = sp.rope(i, T)
        q, k = apply_rope(q, inv, A), apply_rope(k, inv, A)
        v = v.transpose(0, 2, 1, 3)
        o("attention_queries", q)
        o("attention_keys", k)
        o("attention_values", v)
        S, P, O = attention(q, k, v, lens, sp.scale, sp.window(i), sp.attn_cap)
        o("attention_scores", S)
        o("attention_probabilities", P)
        o("attention_head_outputs", O)
        a = linear(O.reshape(B, T, H * hd), w, p + "self_attn.o_proj", sp.o_bias)
        a = o("attention_output", a)
        if sp.gemma:
            a = rmsnorm(a, w[p + "post_attention_layernorm.weight"], eps, True)
            o("attention_post_norm_output", a)
        h1 = h + a
        o("layer_mid", h1)
        norm = "pre_feedforward_layernorm" if sp.gemma else "post_attention_layernorm"
        hn = rmsnorm(h1, w[p + norm + ".weight"], eps, sp.gemma)
        o("mlp_norm_output", hn)
        o("mlp_input", hn)
        if sp.moe(i):
            m = moe(sp, w, p, hn, o)
        else:
            act = sp.act(linear(hn, w, p + "mlp.gate_proj", sp.mlp_bias))
            o("mlp_activation", act)
            neu = act * linear(hn, w, p + "mlp.up_proj", sp.mlp_bias)
            o("mlp_neurons", neu)
            m = linear(neu, w, p + "mlp.down_proj", sp.mlp_bias)
        m = o("mlp_output", m)
        if sp.gemma:
            m = rmsnorm(m, w[p + "post_feedforward_layernorm.weight"], eps, True)
            o("mlp_post_norm_output", m)
        h = h1 + m
        h = o("layer_output", h)
    final = rmsnorm(h, w["model.norm.weight"], eps, sp.gemma)
    final = flow(out, "final_norm_output", final)
    head = emb if r.get("tie_word_embeddings") else w["lm_head.weight"]
    logits = final @ head.T
    out["lm_head_output"] = logits
    if sp.final_cap:
        logits = softcap(logits, sp.final_cap)
    out["logits"] = logits
    res = split_outputs(out, lens)
    for b, n in enumerate(lens):
        res[b]["next_token_probs"] = softmax(logits[b, n - 1])[None]
    return res


def moe(sp, w, p, X, o):
    """MixtralSparseMoeBlock.forward / Qwen3MoeSparseMoeBlock.forward on (B, T, D)."""
    r = sp.r
    if sp.fam == "mixtral":
        blk, k, E = p + "block_sparse_moe.", r["num_experts_per_tok"], r["num_local_experts"]
        names, renorm = ("w1", "w3", "w2"), True
    else:
        blk, k, E = p + "mlp.", r["num_experts_per_tok"], r["num_experts"]
        names, renorm = ("gate_proj", "up_proj", "down_proj"), bool(r.get("norm_topk_prob"))
    z = X @ w[blk + "gate.weight"].T  # (B, T, E)
    o("router_logits", z)
    pr = softmax(z)
    sel = np.argsort(-pr, axis=-1, kind="stable")[..., :k]  # torch.topk: largest first
    wt = np.take_along_axis(pr, sel, -1)
    if renorm:
        wt = wt / wt.sum(-1, keepdims=True)
    o("expert_indices", sel.astype(np.int64))
    o("expert_weights", wt)
    slots = np.zeros(X.shape[:2] + (k, X.shape[-1]))  # (B, T, k, D): each slot's weighted output
    for e in range(E):
        hit = sel == e  # (B, T, k)
        if not hit.any():
            continue
        pre = f"{blk}experts.{e}."
        g, u, d = (w[pre + n + ".weight"] for n in names)
        ye = (sp.act(X @ g.T) * (X @ u.T)) @ d.T
        slots += hit[..., None] * (wt[..., None] * ye[:, :, None, :])
    o("expert_outputs", slots)
    y = slots.sum(2)
    y = o("routed_output", y)
    return y
