"""The float64 references of tests/ref/hf (decoder.py; gpt2.py and neox.py: _patched_lnblock;
OLMo 2's tests/ref/olmo2_ref.py: olmo2_forward) run the way transformers computes a model
loaded in torch.bfloat16: every tensor an op makes is rounded to bf16 (round to nearest even).

Read from transformers' modeling_llama.py (and its copies for Mistral, Qwen2/3, Gemma 2/3,
Mixtral, Qwen3-MoE):
- nn.Linear in bf16: the product accumulated in float32, the result rounded to bf16; a bias add
  rounded again. Residual adds (`hidden_states = residual + hidden_states`), the gate * up
  product, the expert weighting, Gemma's `hidden_states * normalizer`: one rounding each.
- LlamaRMSNorm: `hidden_states.to(torch.float32)`, the variance and rsqrt in float32, then
  `self.weight * hidden_states.to(input_dtype)`; Gemma's: in float32, `output.type_as(x)`. Here:
  the float64 norm, rounded once (one rounding fewer than Llama's: the emulation is, if anything,
  more accurate than transformers).
- Activations (ACT2FN on a bf16 tensor): computed inside the kernel in float32, rounded once.
- eager_attention_forward: `torch.matmul(query, key_states.transpose(2, 3)) * scaling` (two
  roundings), Gemma 2's soft-cap (`/ cap`, tanh, `* cap`: one each), the mask added,
  `softmax(..., dtype=torch.float32).to(query.dtype)` (once), `torch.matmul(attn_weights,
  value_states)` (once).
- LlamaRotaryEmbedding: cos and sin in float32, `.to(x.dtype)`; apply_rotary_pos_emb
  `(q * cos) + (rotate_half(q) * sin)`: three roundings.
- The routers: `F.softmax(router_logits, dim=1, dtype=torch.float)`, top-k and the
  renormalisation in float32, `.to(hidden_states.dtype)`.
Float32 steps are done in float64 here (more accurate than float32: again the emulation's favour).

The rounding after every elementwise op and matmul is done by an ndarray subclass (Bf16) whose
ufuncs compute in float64 and round the result; the float32 regions above are patched into
hf.decoder / hf.common for the duration of one forward() call."""
import contextlib

import numpy as np

import hf
import hf.common as common
import hf.decoder as decoder


def round_bf16(x):
    """float64 -> the nearest bf16 (ties to even), returned as float64."""
    x = np.asarray(x, np.float64)
    f = np.atleast_1d(x).astype(np.float32)
    u = f.view(np.uint32).astype(np.uint64)
    s = np.uint64(16)
    u = ((u + np.uint64(0x7FFF) + ((u >> s) & np.uint64(1))) >> s) << s
    out = u.astype(np.uint32).view(np.float32).astype(np.float64)
    return np.where(np.isnan(f), np.nan, out).reshape(x.shape)


def plain(x):
    return x.view(np.ndarray) if isinstance(x, np.ndarray) else x


class Bf16(np.ndarray):
    """An array whose every ufunc result (float) is rounded to bf16."""

    def __array_ufunc__(self, ufunc, method, *inputs, **kw):
        args = [plain(i) for i in inputs]
        if "out" in kw:
            kw["out"] = tuple(plain(o) for o in kw["out"])
        r = getattr(ufunc, method)(*args, **kw)
        return wrap(r)


def wrap(r):
    if isinstance(r, tuple):
        return tuple(wrap(x) for x in r)
    if isinstance(r, np.ndarray) and r.dtype.kind == "f":
        return round_bf16(r).view(Bf16)
    if isinstance(r, float):
        return round_bf16(r).view(Bf16)
    return r


def b16(x):
    """A float array as Bf16, rounded."""
    return round_bf16(plain(np.asarray(x, np.float64))).view(Bf16)


def _rmsnorm(x, w, eps, plus_one=False):
    return b16(common.rmsnorm(plain(np.asarray(x)), plain(w), eps, plus_one))


def _softmax(x, axis=-1):
    return b16(common.softmax(plain(np.asarray(x)), axis))


def _act_fn(name, key):
    f = common.act_fn(name, key)
    return lambda x: b16(f(plain(np.asarray(x))))


def _apply_rope(x, inv, A=1.0):
    T = x.shape[-2]
    r = 2 * len(inv)
    ang = np.arange(T, dtype=np.float64)[:, None] * plain(inv)[None, :]
    c, s = b16(np.cos(ang) * A), b16(np.sin(ang) * A)  # .to(x.dtype)
    a, b = x[..., : r // 2], x[..., r // 2: r]
    return np.concatenate([a * c - b * s, b * c + a * s, x[..., r:]], axis=-1).view(Bf16)


def _attention(q, k, v, lens, scale, window=None, cap=None):
    B, H, T, _ = q.shape
    rep = H // k.shape[1]
    K, V = np.repeat(k, rep, axis=1).view(Bf16), np.repeat(v, rep, axis=1).view(Bf16)
    S = (q.view(Bf16) @ K.transpose(0, 1, 3, 2)) * scale
    if cap:
        S = np.tanh(S / cap) * cap
    qi, ki = np.arange(T)[:, None], np.arange(T)[None, :]
    allowed = (ki <= qi)[None] & (ki[None] < lens[:, None, None])
    if window:
        allowed &= (ki > qi - window)[None]
    S = np.where(allowed[:, None], plain(S), -np.inf)
    P = _softmax(S)
    return S, P, (P @ V).transpose(0, 2, 1, 3)


def _router_softmax(x, axis=-1):  # in float (the routers; next_token_probs)
    return common.softmax(plain(np.asarray(x)), axis)


class _Spec(decoder.Spec):
    """Gemma's normalizer `torch.tensor(hidden_size**0.5, dtype=hidden_states.dtype)`: bf16"""

    def __init__(self, r, normalizer_dtype):
        super().__init__(r, "float64")
        if self.gemma:
            self.embed_scale = float(round_bf16(r["hidden_size"] ** 0.5))


@contextlib.contextmanager
def _patched():
    names = ("rmsnorm", "softmax", "act_fn", "apply_rope", "attention", "Spec")
    saved = {n: getattr(decoder, n) for n in names}
    decoder.rmsnorm, decoder.softmax, decoder.act_fn = _rmsnorm, _router_softmax, _act_fn
    decoder.Spec = _Spec
    decoder.apply_rope, decoder.attention = _apply_rope, _attention
    try:
        yield
    finally:
        for n, f in saved.items():
            setattr(decoder, n, f)


def _layernorm(x, w, b, eps):  # nn.LayerNorm on bf16: in float inside the kernel, rounded once
    return b16(common.layernorm(plain(np.asarray(x)), plain(w), plain(b), eps))


@contextlib.contextmanager
def _patched_lnblock():
    """GPT-2 (modeling_gpt2.py) and GPT-NeoX (modeling_gpt_neox.py) in bf16: their references
    import the shared pieces by name, so they are patched in hf.gpt2 / hf.neox. Conv1D's
    `torch.addmm(bias, x, weight)` (GPT-2) and nn.Linear with a bias (NeoX) are, as for the
    decoder above, the product rounded and the bias add rounded again (torch's addmm rounds
    once: the emulation one rounding less accurate there, in harvest's favour); nn.LayerNorm in
    float32 inside the kernel, rounded once; GPT-2's gelu_new and NeoX's gelu rounded once (GPT-2's
    NewGELUActivation is five bf16 ops in transformers: the emulation more accurate there);
    eager attention as _attention (GPT-2's `softmax(attn_weights)` in bf16 is computed in float
    inside the kernel and rounded once, as NeoX's `softmax(..., dtype=float32).to(dtype)`);
    NeoX's RoPE as _apply_rope; next_token_probs in float."""
    import hf.gpt2 as gpt2
    import hf.neox as neox
    patch = {gpt2: dict(layernorm=_layernorm, act_fn=_act_fn, attention=_attention,
                        softmax=_router_softmax),
             neox: dict(layernorm=_layernorm, act_fn=_act_fn, attention=_attention,
                        softmax=_router_softmax, apply_rope=_apply_rope)}
    saved = {m: {n: getattr(m, n) for n in d} for m, d in patch.items()}
    for m, d in patch.items():
        for n, f in d.items():
            setattr(m, n, f)
    try:
        yield
    finally:
        for m, d in saved.items():
            for n, f in d.items():
                setattr(m, n, f)


def forward(cfg, w, prompts):
    """hf.forward as transformers computes it in bf16 (the weights must be bf16 already); the
    values float64 arrays holding bf16 numbers (integers as they are)."""
    wb = {n: b16(a) for n, a in w.items()}
    lnblock = hf.family_of(cfg) in ("gpt2", "gpt_neox")
    with _patched_lnblock() if lnblock else _patched():
        res = hf.forward(cfg, wb, prompts)
    return [{n: plain(np.asarray(a)) for n, a in r.items()} for r in res]


def laguna_forward(ref, ids):
    """tests/ref/laguna_ref.py's LagunaRef.forward the same way (ref: a LagunaRef): linear layers,
    adds and products rounded; the norms, silu and softplus rounded once; RoPE as above; the
    attention softmax and the router's sigmoid and renormalisation in float (the softmax's output
    not rounded before P @ V, and the experts' weighted sum in float: both in the emulation's
    favour)."""
    import laguna_ref as lr
    names = ("rmsnorm", "silu", "softplus", "sigmoid", "rope")
    saved = {n: getattr(lr, n) for n in names}
    once = lambda f: lambda *a: b16(f(*[plain(np.asarray(x)) if isinstance(x, np.ndarray) else x for x in a]))
    w = ref.w
    try:
        lr.rmsnorm, lr.silu, lr.softplus = once(saved["rmsnorm"]), once(saved["silu"]), once(saved["softplus"])
        lr.sigmoid = lambda x: saved["sigmoid"](plain(np.asarray(x)))
        lr.rope = _apply_rope
        # the router's score bias is float32 (as transformers keeps such a buffer): not rounded
        ref.w = {n: a if "e_score_correction_bias" in n else b16(a) for n, a in w.items()}
        out = ref.forward(ids)
    finally:
        ref.w = w
        for n, f in saved.items():
            setattr(lr, n, f)
    return {n: plain(np.asarray(a)) for n, a in out.items()}


def _olmo2_attention(r, w, p, x, out, T):
    """olmo2_ref.attention as modeling_olmo2.py runs it in bf16: q/k/v/o nn.Linear (the product
    rounded, a bias add again), Olmo2RMSNorm over the projection (float32 inside, rounded once),
    apply_rotary_pos_emb against float32 cos/sin (Olmo2RotaryEmbedding returns them float32: the
    rotation in float32, `.to(q_type)` once), eager attention: `matmul(q, k^T) * scaling` (two
    roundings), softmax in float32 `.to(query.dtype)` (once), `matmul(P, v)` (once)."""
    import olmo2_ref as o2
    H, KV, hd = r["num_attention_heads"], r["num_key_value_heads"], r["head_dim"]
    ab, eps = r["attention_bias"], r["rms_norm_eps"]
    q = o2.rmsnorm(o2.linear(x, w, p + "self_attn.q_proj", ab), w[p + "self_attn.q_norm.weight"], eps)
    k = o2.rmsnorm(o2.linear(x, w, p + "self_attn.k_proj", ab), w[p + "self_attn.k_norm.weight"], eps)
    v = o2.linear(x, w, p + "self_attn.v_proj", ab)
    q, k, v = (a.reshape(T, -1, hd).transpose(1, 0, 2) for a in (q, k, v))  # (heads, T, hd)
    out["attention_queries_pre_rope"], out["attention_keys_pre_rope"] = q, k
    q, k = o2.rope(q, r["rope_theta"]), o2.rope(k, r["rope_theta"])
    out["attention_queries"], out["attention_keys"], out["attention_values"] = q, k, v
    kr, vr = np.repeat(k, H // KV, 0).view(Bf16), np.repeat(v, H // KV, 0).view(Bf16)  # repeat_kv
    s = (q.view(Bf16) @ kr.transpose(0, 2, 1)) * hd ** -0.5
    s = np.where(np.tril(np.ones((T, T), bool)), plain(s), -np.inf)
    pr = _softmax(s)
    out["attention_scores"], out["attention_probabilities"] = s, pr
    o = (pr @ vr).transpose(1, 0, 2)  # (T, H, hd)
    out["attention_head_outputs"] = o
    return o2.linear(o.reshape(T, H * hd).view(Bf16), w, p + "self_attn.o_proj", ab)


def olmo2_forward(cfg, w, ids):
    """tests/ref/olmo2_ref.py's forward as transformers computes OLMo 2 in bf16 (modeling_olmo2.py):
    the weights bf16; Olmo2RMSNorm `(weight * x_normed_f32).to(input_dtype)`: rounded once; silu
    (ACT2FN on bf16) once; gate * up, the residual adds and every nn.Linear rounded; attention as
    _olmo2_attention; the head's logits rounded, next_token_probs in float."""
    import olmo2_ref as o2
    names = ("rmsnorm", "silu", "rope", "attention")
    saved = {n: getattr(o2, n) for n in names}
    once = lambda f: lambda *a: b16(f(*[plain(np.asarray(x)) if isinstance(x, np.ndarray) else x for x in a]))
    r = o2.resolve(cfg)
    wb = {n: b16(a) for n, a in w.items()}
    try:
        o2.rmsnorm, o2.silu, o2.rope = once(saved["rmsnorm"]), once(saved["silu"]), once(saved["rope"])
        o2.attention = _olmo2_attention
        x = wb["model.embed_tokens.weight"][np.asarray(ids)]
        vals = {"token_embeddings": x}
        for i in range(r["num_hidden_layers"]):
            v, x = o2.block(r, wb, i, x, "post")
            vals.update(v)
        xn = o2.rmsnorm(x, wb["model.norm.weight"], r["rms_norm_eps"])
        head = wb["model.embed_tokens.weight" if r["tie_word_embeddings"] else "lm_head.weight"]
        logits = xn @ head.T
    finally:
        for n, f in saved.items():
            setattr(o2, n, f)
    vals.update(final_norm_output=xn, lm_head_output=logits, logits=logits,
                next_token_probs=common.softmax(plain(logits[-1]), -1))
    return {k: plain(np.asarray(v))[None] for k, v in vals.items()}
