"""The Llama-style families (model/decoder*.c) on the published config.json files kept in
tests/ref/hf-configs: `harvest plan` prints the exact parameter counts transformers instantiates
(tests/ref/hf/params.py, and the numbers of issue 11); every init-model preset reads back as its
family; bad checkpoints (a missing tensor, a wrong shape, a key harvest does not implement) fail
with a message naming the file and the key."""
import json
import os
import re

from util import args, check, finish, run, write_job, write_prompts
import hf  # tests/ref/hf, on the path by util
from hf.make_tiny import tiny_config, tiny_weights, write_model

CONF = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref", "hf-configs")
WANT = {  # issue 11's numbers; the others from params.py
    "Qwen3-0.6B.json": 596_049_920, "gemma-2-2b-it.json": 2_614_341_888,
    "Llama-3.1-8B.json": 8_030_261_248, "Mixtral-8x7B-Instruct-v0.1.json": 46_702_792_704,
    "Llama-3.2-1B.json": None, "Mistral-7B-v0.1.json": None, "Qwen2.5-0.5B.json": None,
    # the model cards' totals: Qwen3-30B-A3B "30.5B", gemma-3-1b "1B" (999,885,952)
    "Qwen3-30B-A3B.json": 30_532_122_624, "gemma-3-1b-it.json": 999_885_952,
}

harvest, work = args()


def number(out, key):
    m = re.search(rf"^{key}: ([\d,]+)", out, re.M)
    return int(m.group(1).replace(",", "")) if m else None


for name, want in WANT.items():
    path = os.path.join(CONF, name)
    ref = hf.count_params(json.load(open(path)))
    check(want is None or ref == want, f"{name}: params.py counts {ref:,}, the issue {want}")
    out = run(harvest, "plan", path, check=0).stdout
    check(number(out, "parameters") == ref, f"{name}: plan says {number(out, 'parameters')}, expected {ref:,}")
    print(f"{name}: {ref:,} parameters", flush=True)

# every preset of every family: init-model writes it, plan and activations read it back
FAMILIES = {"llama": ["Llama-3.2-1B", "Llama-3.1-8B"], "mistral": ["Mistral-7B-v0.1"],
            "qwen2": ["Qwen2.5-0.5B"], "qwen3": ["Qwen3-0.6B"], "qwen3_moe": ["Qwen3-MoE"],
            "mixtral": ["Mixtral-8x7B"], "gemma2": ["gemma-2-2b"], "gemma3": ["gemma-3"]}
for fam, presets in FAMILIES.items():
    for p in presets:
        d = f"{work}/init/{fam}-{p}"
        run(harvest, "init-model", "--family", fam, "--preset", p, d, check=0)
        check(os.path.exists(f"{d}/model.safetensors.index.json"), f"{fam} {p}: sharded like a release")
        cfg = json.load(open(f"{d}/config.json"))
        out = run(harvest, "plan", d, check=0).stdout
        check(number(out, "parameters") == hf.count_params(cfg), f"{fam} {p}: plan of the preset: {out}")
        write_prompts(f"{d}/prompts.jsonl", [3, 7], seed=1, vocab=cfg["vocab_size"])
        job = write_job(f"{d}/job.json", model=d, data=f"{d}/prompts.jsonl",
                        activations=["logits", "layers.0.layer_output"], output={"path": f"{d}/out.h5"})
        r = run(harvest, "run", job, "--quiet")
        check(r.returncode == 0, f"{fam} {p}: a run on the preset: {r.stderr}")
print("every preset: init-model, plan and run", flush=True)

# "sliding_window": null is transformers' None (no window), not the absent key's 4096
for label, over, want in (("null", {"sliding_window": None}, "(0 sliding-window"),
                          ("absent", {}, "(32 sliding-window")):
    c = json.load(open(os.path.join(CONF, "Mistral-7B-v0.1.json")))
    c.pop("sliding_window")
    c.update(over)
    json.dump(c, open(f"{work}/mistral_{label}.json", "w"))
    out = run(harvest, "plan", f"{work}/mistral_{label}.json", check=0).stdout
    check(want in out, f"Mistral, sliding_window {label}: {out}")

# BF16 matrices are borrowed from the mapping, other dtypes held as float32 (the start-up line)
for dtype, kind in (("BF16", "BF16 matrices mapped"), ("F16", "float32")):
    d = f"{work}/kind_{dtype}"
    cfg = tiny_config("mistral")
    write_model(f"{d}/model", cfg, tiny_weights(cfg, 2, dtype), dtype, 1)
    write_prompts(f"{d}/prompts.jsonl", [3], seed=1, vocab=cfg["vocab_size"])
    r = run(harvest, "run", write_job(f"{d}/job.json", activations=["logits"]))
    check(r.returncode == 0 and f"({kind}" in r.stderr, f"{dtype} weights held as {kind}: {r.stderr}")


def bad_config(label, edit, words, family="llama"):
    """config.json edited: plan fails naming config.json and the key."""
    cfg = tiny_config(family)
    edit(cfg)
    path = f"{work}/{label}.json"
    json.dump(cfg, open(path, "w"))
    p = run(harvest, "plan", path)
    ok = p.returncode == 1 and all(w in p.stderr for w in [path] + words) and "Traceback" not in p.stderr
    check(ok, f"{label}: exit {p.returncode}, message {p.stderr.strip()!r} should name {words}")


bad_config("rope_yarn", lambda c: c["rope_scaling"].update(rope_type="yarn"),
           ["rope_scaling.rope_type", "yarn"])
bad_config("rope_longrope", lambda c: c.update(rope_scaling={"type": "longrope", "factor": 2.0}),
           ["rope_scaling.rope_type", "longrope"], family="mistral")
bad_config("rope_parameters_yarn", lambda c: [c.pop(k) for k in ("rope_theta", "rope_scaling")] and
           c.update(rope_parameters={"full_attention": {"rope_type": "yarn", "rope_theta": 1e6, "factor": 2.0},
                                     "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}),
           ["rope_parameters.full_attention.rope_type", "yarn"], family="gemma3")
bad_config("llama3_no_low", lambda c: c["rope_scaling"].pop("low_freq_factor"), ["rope_scaling"])
bad_config("hidden_act", lambda c: c.update(hidden_act="gelu_10"), ["\"hidden_act\"", "gelu_10"])
bad_config("gemma_act", lambda c: c.update(hidden_activation="quick_gelu"),
           ["\"hidden_activation\"", "quick_gelu"], family="gemma2")
bad_config("bidirectional", lambda c: c.update(use_bidirectional_attention=True),
           ["use_bidirectional_attention"], family="gemma3")
bad_config("layer_types", lambda c: c.update(layer_types=["sliding_attention"]), ["layer_types"],
           family="gemma2")
bad_config("heads", lambda c: c.update(num_key_value_heads=3), ["num_attention_heads"])
bad_config("top_k", lambda c: c.update(num_experts_per_tok=9), ["num_experts_per_tok"],
           family="mixtral")
bad_config("window_type", lambda c: c.update(sliding_window="4"), ["sliding_window"],
           family="mistral")


def bad_weights(label, family, edit, words, shards):
    cfg = tiny_config(family)
    w = tiny_weights(cfg, 1, "BF16")
    edit(w)
    d = f"{work}/{label}"
    write_model(f"{d}/model", cfg, w, "BF16", shards)
    write_prompts(f"{d}/prompts.jsonl", [3], seed=1, vocab=cfg["vocab_size"])
    p = run(harvest, "run", write_job(f"{d}/job.json"), "--quiet")
    ok = p.returncode == 1 and all(x in p.stderr for x in words) and "Traceback" not in p.stderr
    check(ok, f"{label}: exit {p.returncode}, message {p.stderr.strip()!r} should name {words}")


bad_weights("no_bias", "qwen2", lambda w: w.pop("model.layers.1.self_attn.k_proj.bias"),
            ["model.safetensors.index.json", "model.layers.1.self_attn.k_proj.bias"], 2)
bad_weights("no_q_norm", "qwen3", lambda w: w.pop("model.layers.0.self_attn.q_norm.weight"),
            ["model.safetensors", "model.layers.0.self_attn.q_norm.weight"], 1)
bad_weights("no_post_ffn_norm", "gemma2", lambda w: w.pop("model.layers.2.post_feedforward_layernorm.weight"),
            ["model.layers.2.post_feedforward_layernorm.weight"], 3)
bad_weights("no_expert", "mixtral", lambda w: w.pop("model.layers.1.block_sparse_moe.experts.3.w2.weight"),
            ["model.layers.1.block_sparse_moe.experts.3.w2.weight"], 3)
bad_weights("no_head", "llama_untied", lambda w: w.pop("lm_head.weight"), ["lm_head.weight"], 2)
bad_weights("up_shape", "mistral",
            lambda w: w.update({"model.layers.0.mlp.up_proj.weight": w["model.layers.0.mlp.up_proj.weight"][:, :-1]}),
            ["model.safetensors", "model.layers.0.mlp.up_proj.weight", "[48, 31]", "[48, 32]"], 1)
bad_weights("router_shape", "qwen3_moe",
            lambda w: w.update({"model.layers.0.mlp.gate.weight": w["model.layers.0.mlp.gate.weight"][:3]}),
            ["model.layers.0.mlp.gate.weight", "shape"], 2)
print("bad configs and checkpoints: errors name the file and the key", flush=True)
finish()
