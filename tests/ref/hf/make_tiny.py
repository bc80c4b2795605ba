"""Tiny random checkpoints in the exact on-disk layout of each family, numpy only.

    python3 make_tiny.py FAMILY OUTDIR [--dtype F32|F16|BF16] [--shards N] [--seed S]
                         [--gpt2-prefix transformer.]
    from hf.make_tiny import tiny_config, tiny_weights, write_model

Each tiny config.json keeps every key of a real release config (tests/ref/hf-configs, named in
`_tiny_from`) with the dimensions shrunk; the weights have the release's tensor names and shapes
(including GPT-2's unprefixed names and its `h.{i}.attn.bias` mask buffers, which
openai-community/gpt2's safetensors carry and a loader must skip). Written as one model.safetensors
or as N shards plus model.safetensors.index.json, F32, F16 or BF16."""
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIGS = os.path.join(os.path.dirname(HERE), "hf-configs")

LLAMA_DIMS = dict(vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)

PRESETS = {
    # family: (release config, overrides)
    "llama": ("Llama-3.2-1B.json", dict(LLAMA_DIMS, head_dim=8, rope_scaling={
        "factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
        "original_max_position_embeddings": 16, "rope_type": "llama3"})),
    "llama_untied": ("Llama-3.1-8B.json", dict(LLAMA_DIMS, head_dim=8, rope_scaling={
        "factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
        "original_max_position_embeddings": 16, "rope_type": "llama3"})),
    "mistral": ("Mistral-7B-v0.1.json", dict(LLAMA_DIMS, sliding_window=4)),
    "qwen2": ("Qwen2.5-0.5B.json", dict(LLAMA_DIMS, max_window_layers=1, pad_token_id=None)),
    "qwen3": ("Qwen3-0.6B.json", dict(LLAMA_DIMS, head_dim=16, max_window_layers=2)),
    "mixtral": ("Mixtral-8x7B-Instruct-v0.1.json", dict(LLAMA_DIMS, num_local_experts=4,
                                                        num_experts_per_tok=2)),
    "qwen3_moe": ("Qwen3-0.6B.json", dict(
        LLAMA_DIMS, num_hidden_layers=3, head_dim=16, max_window_layers=3,
        architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe", num_experts=4,
        num_experts_per_tok=2, moe_intermediate_size=24, norm_topk_prob=True,
        decoder_sparse_step=1, mlp_only_layers=[1], router_aux_loss_coef=0.001,
        output_router_logits=False)),
    "gemma2": ("gemma-2-2b-it.json", dict(
        LLAMA_DIMS, num_hidden_layers=3, head_dim=16, query_pre_attn_scalar=24, sliding_window=4,
        _name_or_path="tiny")),
    "gemma3": ("gemma-2-2b-it.json", dict(
        LLAMA_DIMS, num_hidden_layers=3, head_dim=16, query_pre_attn_scalar=16, sliding_window=4,
        architectures=["Gemma3ForCausalLM"], model_type="gemma3_text", _name_or_path="tiny",
        attn_logit_softcapping=None, final_logit_softcapping=None, rope_theta=1000000.0,
        rope_local_base_freq=10000.0, sliding_window_pattern=2,
        rope_scaling={"factor": 8.0, "rope_type": "linear"})),
    "gpt2": ("gpt2.json", dict(vocab_size=96, n_embd=32, n_head=4, n_layer=2, n_positions=64,
                               n_ctx=64)),
    "gpt_neox": ("pythia-160m.json", dict(vocab_size=96, hidden_size=32, intermediate_size=128,
                                          num_attention_heads=4, num_hidden_layers=2,
                                          max_position_embeddings=64, rotary_pct=0.5)),
}


def release_config(family, layers):
    """The release config itself with only the layer count cut (for benchmarks at real sizes, e.g.
    Llama-3.2-1B's dimensions with 2 layers)."""
    src, over = PRESETS[family]
    with open(os.path.join(CONFIGS, src)) as f:
        cfg = json.load(f)
    if over.get("architectures", cfg["architectures"]) != cfg["architectures"]:
        raise ValueError(f"{family}: no release config in tests/ref/hf-configs (see SOURCES.md)")
    cfg["n_layer" if "n_layer" in cfg else "num_hidden_layers"] = layers
    cfg["_tiny_from"] = src + f" (release dimensions, {layers} layers)"
    return cfg


def tiny_config(family):
    src, over = PRESETS[family]
    with open(os.path.join(CONFIGS, src)) as f:
        cfg = json.load(f)
    family_keys = over.get("architectures", cfg["architectures"]) != cfg["architectures"]
    cfg.update(over)
    cfg["_tiny_from"] = src + (f" + {cfg['architectures'][0]}'s keys (no release config of this family "
                               "in tests/ref/hf-configs)" if family_keys else "")
    return cfg


def _decoder_tensors(r, fam):
    """(name, shape, kind) for the Llama-style families; kind: 'w' weight, 'n' norm, 'b' bias."""
    D, H, KV, hd, I, V = r["hidden_size"], r["num_attention_heads"], r["num_key_value_heads"], \
        r["head_dim"], r["intermediate_size"], r["vocab_size"]
    from .params import is_sparse_layer
    gemma = fam in ("gemma2", "gemma3_text")
    t = [("model.embed_tokens.weight", (V, D), "w"), ("model.norm.weight", (D,), "n")]
    qkv_b = fam == "qwen2" or bool(r.get("attention_bias"))
    for i in range(r["num_hidden_layers"]):
        p = f"model.layers.{i}."
        for n, shape in (("q_proj", (H * hd, D)), ("k_proj", (KV * hd, D)), ("v_proj", (KV * hd, D))):
            t.append((p + "self_attn." + n + ".weight", shape, "w"))
            if qkv_b:
                t.append((p + "self_attn." + n + ".bias", shape[:1], "b"))
        t.append((p + "self_attn.o_proj.weight", (D, H * hd), "w"))
        if fam in ("qwen3", "qwen3_moe", "gemma3_text"):
            t += [(p + "self_attn.q_norm.weight", (hd,), "n"), (p + "self_attn.k_norm.weight", (hd,), "n")]
        norms = ["input_layernorm", "post_attention_layernorm"]
        if gemma:
            norms += ["pre_feedforward_layernorm", "post_feedforward_layernorm"]
        t += [(p + n + ".weight", (D,), "n") for n in norms]
        if fam == "mixtral":
            E = r["num_local_experts"]
            t.append((p + "block_sparse_moe.gate.weight", (E, D), "w"))
            for e in range(E):
                q = f"{p}block_sparse_moe.experts.{e}."
                t += [(q + "w1.weight", (I, D), "w"), (q + "w3.weight", (I, D), "w"),
                      (q + "w2.weight", (D, I), "w")]
        elif fam == "qwen3_moe" and is_sparse_layer(r, i):
            E, Im = r["num_experts"], r["moe_intermediate_size"]
            t.append((p + "mlp.gate.weight", (E, D), "w"))
            for e in range(E):
                q = f"{p}mlp.experts.{e}."
                t += [(q + "gate_proj.weight", (Im, D), "w"), (q + "up_proj.weight", (Im, D), "w"),
                      (q + "down_proj.weight", (D, Im), "w")]
        else:
            t += [(p + "mlp.gate_proj.weight", (I, D), "w"), (p + "mlp.up_proj.weight", (I, D), "w"),
                  (p + "mlp.down_proj.weight", (D, I), "w")]
    if not r.get("tie_word_embeddings"):
        t.append(("lm_head.weight", (V, D), "w"))
    return t


def _gpt2_tensors(r, prefix):
    D, L, V, P = r["n_embd"], r["n_layer"], r["vocab_size"], r["n_positions"]
    I = r.get("n_inner") or 4 * D
    t = [("wte.weight", (V, D), "w"), ("wpe.weight", (P, D), "w"), ("ln_f.weight", (D,), "n"),
         ("ln_f.bias", (D,), "b")]
    for i in range(L):
        p = f"h.{i}."
        t += [(p + "ln_1.weight", (D,), "n"), (p + "ln_1.bias", (D,), "b"),
              (p + "attn.c_attn.weight", (D, 3 * D), "w"), (p + "attn.c_attn.bias", (3 * D,), "b"),
              (p + "attn.c_proj.weight", (D, D), "w"), (p + "attn.c_proj.bias", (D,), "b"),
              (p + "ln_2.weight", (D,), "n"), (p + "ln_2.bias", (D,), "b"),
              (p + "mlp.c_fc.weight", (D, I), "w"), (p + "mlp.c_fc.bias", (I,), "b"),
              (p + "mlp.c_proj.weight", (I, D), "w"), (p + "mlp.c_proj.bias", (D,), "b"),
              (p + "attn.bias", (1, 1, P, P), "mask")]
    return [(prefix + n, s, k) for n, s, k in t]


def _neox_tensors(r):
    D, L, V, I = r["hidden_size"], r["num_hidden_layers"], r["vocab_size"], r["intermediate_size"]
    t = [("gpt_neox.embed_in.weight", (V, D), "w"), ("gpt_neox.final_layer_norm.weight", (D,), "n"),
         ("gpt_neox.final_layer_norm.bias", (D,), "b"), ("embed_out.weight", (V, D), "w")]
    for i in range(L):
        p = f"gpt_neox.layers.{i}."
        t += [(p + "input_layernorm.weight", (D,), "n"), (p + "input_layernorm.bias", (D,), "b"),
              (p + "post_attention_layernorm.weight", (D,), "n"),
              (p + "post_attention_layernorm.bias", (D,), "b"),
              (p + "attention.query_key_value.weight", (3 * D, D), "w"),
              (p + "attention.query_key_value.bias", (3 * D,), "b"),
              (p + "attention.dense.weight", (D, D), "w"), (p + "attention.dense.bias", (D,), "b"),
              (p + "mlp.dense_h_to_4h.weight", (I, D), "w"), (p + "mlp.dense_h_to_4h.bias", (I,), "b"),
              (p + "mlp.dense_4h_to_h.weight", (D, I), "w"), (p + "mlp.dense_4h_to_h.bias", (D,), "b")]
    return t


def tiny_weights(cfg, seed=0, dtype="F32", gpt2_prefix=""):
    """name -> float32 array (already rounded to BF16 / F16 when that is the dtype, so a reader
    widening the file gets exactly these values)."""
    from .config import resolve
    from .safetensors_io import bf16_to_f32, f32_to_bf16
    r = resolve(cfg)
    fam = r["family"]
    if fam == "gpt2":
        spec = _gpt2_tensors(r, gpt2_prefix)
    elif fam == "gpt_neox":
        spec = _neox_tensors(r)
    else:
        spec = _decoder_tensors(r, fam)
    rng = np.random.default_rng(seed)
    gemma = fam in ("gemma2", "gemma3_text")
    out = {}
    for name, shape, kind in spec:
        if kind == "mask":
            a = np.tril(np.ones(shape[-2:], np.float32)).reshape(shape)
        else:
            a = rng.standard_normal(shape, dtype=np.float32)
            if kind == "n":
                a = a * np.float32(0.1) + np.float32(0.0 if gemma else 1.0)
            elif kind == "b":
                a *= np.float32(0.1)
            else:
                big = "embed" in name or "wte" in name
                a *= np.float32((3.0 if big else 1.0) / np.sqrt(shape[-1]))
        if dtype == "BF16" and kind != "mask":
            a = bf16_to_f32(f32_to_bf16(a))
        elif dtype == "F16":
            a = a.astype(np.float16).astype(np.float32)
        out[name] = a
    return out


def write_model(outdir, cfg, tensors, dtype="F32", shards=1):
    """config.json plus model.safetensors, or `shards` files model-0000k-of-0000N.safetensors and
    model.safetensors.index.json ({"metadata": {"total_size"}, "weight_map"})."""
    from .safetensors_io import write_safetensors
    os.makedirs(outdir, exist_ok=True)
    with open(os.path.join(outdir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    names = sorted(tensors)
    if shards <= 1:
        write_safetensors(os.path.join(outdir, "model.safetensors"), tensors, dtype)
        return
    wmap, total = {}, 0
    for k in range(shards):
        part = names[k::shards]
        fn = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        write_safetensors(os.path.join(outdir, fn), {n: tensors[n] for n in part}, dtype)
        for n in part:
            wmap[n] = fn
            total += tensors[n].size * (4 if dtype == "F32" else 2)
    with open(os.path.join(outdir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": wmap}, f, indent=2)


def main(argv):
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("family", choices=sorted(PRESETS))
    ap.add_argument("outdir")
    ap.add_argument("--dtype", default="F32", choices=["F32", "F16", "BF16"])
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gpt2-prefix", default="", help="'transformer.' for the prefixed GPT-2 layout")
    ap.add_argument("--release-layers", type=int, default=0,
                    help="N > 0: the release config's own dimensions, cut to N layers (large!)")
    a = ap.parse_args(argv)
    cfg = release_config(a.family, a.release_layers) if a.release_layers else tiny_config(a.family)
    write_model(a.outdir, cfg, tiny_weights(cfg, a.seed, a.dtype, a.gpt2_prefix), a.dtype, a.shards)


if __name__ == "__main__":
    # run as a script: import this file as hf.make_tiny so the package's relative imports resolve
    sys.path.insert(0, os.path.dirname(HERE))
    from hf.make_tiny import main as package_main
    package_main(sys.argv[1:])
