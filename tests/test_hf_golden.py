"""The Llama-style families (model/decoder*.c) against the float64 references of tests/ref/hf
(written from transformers' modeling code): for each family a tests/ref/hf/make_tiny.py checkpoint
(the real on-disk layout: every key of a release config, the release's tensor names, sharded BF16
safetensors + index; Qwen3 also F16 in one file), `harvest run` with every value over prompts of
1, 2, window - 1, window, window + 1 and several windows batched together; every stored value
within 1e-4 of the reference relative to the tensor's scale (-inf exactly where attention is
blocked, expert indices exactly). Then identities on the stored values: the residual sums (with
Gemma's post norms), probability rows summing to 1, logits == lm_head(final_norm_output) (+ Gemma
2's soft-cap), the routing of the mixture blocks."""
import os

import h5py
import numpy as np

from util import args, check, compare_row, finish, run, write_job, write_prompts
import hf  # tests/ref/hf, on the path by util
from hf.common import softcap, softmax
from hf.make_tiny import tiny_config, tiny_weights, write_model

RTOL = 1e-4
W = 4  # the tiny presets' sliding window (Mistral, Gemma); the others have none
LENGTHS = [W + 1, 1, 3 * W + 3, W - 1, 2, W]
SEQ = {"seq", "query", "key"}
FAMILIES = [  # make_tiny family, dtype, shards, the model_family harvest reports
    ("llama", "BF16", 3, "llama"), ("llama_untied", "BF16", 2, "llama"),
    ("mistral", "BF16", 3, "mistral"), ("qwen2", "BF16", 2, "qwen2"), ("qwen3", "F16", 1, "qwen3"),
    ("gemma2", "BF16", 3, "gemma2"), ("gemma3", "BF16", 2, "gemma3"),
    ("qwen3_moe", "BF16", 3, "qwen3_moe"), ("mixtral", "BF16", 3, "mixtral"),
    ("llama_dynamic", "BF16", 2, "llama"), ("llama_linear_bias", "F32", 1, "llama"),
    ("qwen2_window", "BF16", 2, "qwen2"), ("mistral_null", "BF16", 1, "mistral"),
    ("gemma2_null", "BF16", 1, "gemma2"), ("gemma3_rope_parameters", "BF16", 2, "gemma3"),
]

harvest, work = args()


def close(a, b, what, tol=1e-5):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    err = np.abs(a - b).max() / max(np.abs(b).max(), 1e-30)
    return check(err <= tol, f"{what}: relative error {err:.1e}")


def rms(x, w, eps, plus_one):
    y = x / np.sqrt(np.mean(x * x, -1, keepdims=True) + eps)
    return y * (1.0 + w) if plus_one else y * w


def identities(f, p, T, cfg, w, fam):
    A = lambda n: f["activations/" + n][p]
    r = hf.resolve(cfg)
    gemma = fam.startswith("gemma")
    L = r["num_hidden_layers"]
    for i in range(L):
        pre = f"layers.{i}."
        x, mid, out = (A(pre + k)[:T] for k in ("layer_input", "layer_mid", "layer_output"))
        a = A(pre + ("attention_post_norm_output" if gemma else "attention_output"))[:T]
        m = A(pre + ("mlp_post_norm_output" if gemma else "mlp_output"))[:T]
        check(np.array_equal(mid, x + a), f"{fam} {pre}layer_mid == layer_input + attention added")
        check(np.array_equal(out, mid + m), f"{fam} {pre}layer_output == layer_mid + mlp added")
        if i + 1 < L:
            check(np.array_equal(A(f"layers.{i + 1}.layer_input")[:T], out), f"{fam} {pre}feeds the next block")
        P = A(pre + "attention_probabilities")[:, :T, :T].astype(np.float64)
        close(P.sum(-1), np.ones(P.shape[:2]), f"{fam} {pre}probability rows sum to 1")
        if gemma:  # the post norms, from the stored module outputs
            close(rms(A(pre + "attention_output")[:T].astype(np.float64),
                      w[f"model.{pre}post_attention_layernorm.weight"], r["rms_norm_eps"], True), a,
                  f"{fam} {pre}attention_post_norm_output == post_attention_layernorm(attention_output)")
        if pre + "router_logits" not in f["activations"]:
            continue
        z, idx, ew = (A(pre + k)[:T] for k in ("router_logits", "expert_indices", "expert_weights"))
        pr = softmax(z.astype(np.float64))
        top = np.take_along_axis(pr, idx, -1)
        check((np.diff(top, axis=-1) <= 1e-7).all(), f"{fam} {pre}experts largest first")
        rest = pr.copy()
        np.put_along_axis(rest, idx, -np.inf, -1)
        check((rest.max(-1) <= top.min(-1) + 1e-7).all(), f"{fam} {pre}the k largest probabilities")
        renorm = fam == "mixtral" or r.get("norm_topk_prob")
        close(ew, top / top.sum(-1, keepdims=True) if renorm else top, f"{fam} {pre}expert_weights")
        close(A(pre + "expert_outputs")[:T].astype(np.float64).sum(1), A(pre + "routed_output")[:T],
              f"{fam} {pre}expert_outputs summed == routed_output")
        check(np.array_equal(A(pre + "routed_output")[:T], A(pre + "mlp_output")[:T]), f"{fam} {pre}routed_output == mlp_output")
    head = w["model.embed_tokens.weight"] if r.get("tie_word_embeddings") else w["lm_head.weight"]
    lm = A("final_norm_output")[:T].astype(np.float64) @ head.T
    close(lm, A("lm_head_output")[:T], f"{fam}: lm_head(final_norm_output) == lm_head_output")
    cap = r.get("final_logit_softcapping") if gemma else None
    close(softcap(lm, cap) if cap else lm, A("logits")[:T], f"{fam}: logits == cap(lm_head(final_norm_output))")
    close(A("next_token_probs").astype(np.float64).sum(), 1.0, f"{fam}: next_token_probs sums to 1")


VARIANTS = {  # a family's tiny config with other keys: name -> (make_tiny family, overrides)
    # dynamic NTK: prompts past max_position_embeddings grow the base (a prompt's own length)
    "llama_dynamic": ("llama", dict(max_position_embeddings=8,
                                    rope_scaling={"rope_type": "dynamic", "factor": 4.0})),
    "llama_linear_bias": ("llama_untied", dict(rope_scaling={"type": "linear", "factor": 2.0},
                                               attention_bias=True, mlp_bias=True)),
    "qwen2_window": ("qwen2", dict(use_sliding_window=True, sliding_window=W)),  # layer 1 sliding
    # null is transformers' None, not the absent key's default: no window, no soft-caps
    "mistral_null": ("mistral", dict(sliding_window=None, num_key_value_heads=None, head_dim=None)),
    "gemma2_null": ("gemma2", dict(attn_logit_softcapping=None, final_logit_softcapping=None)),
    # transformers' newer rope_parameters, one dict a layer type (... = the key removed)
    "gemma3_rope_parameters": ("gemma3", dict(
        rope_theta=..., rope_scaling=..., rope_local_base_freq=...,
        rope_parameters={"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}})),
}


def add_biases(cfg, t, seed):
    """o_proj and MLP biases (attention_bias / mlp_bias), which make_tiny.py does not write."""
    r, rng = hf.resolve(cfg), np.random.default_rng(seed)
    for i in range(r["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes = {"self_attn.o_proj": r["hidden_size"]} if r.get("attention_bias") else {}
        if r.get("mlp_bias"):
            shapes.update({"mlp.gate_proj": r["intermediate_size"], "mlp.up_proj": r["intermediate_size"],
                           "mlp.down_proj": r["hidden_size"]})
        for n, size in shapes.items():
            t[p + n + ".bias"] = rng.standard_normal(size).astype(np.float32) * np.float32(0.1)


def golden(name, dtype, shards, family, seed):
    d = f"{work}/{name}"
    base, over = VARIANTS.get(name, (name, {}))
    cfg = tiny_config(base)
    cfg.update(over)
    for k in [k for k, v in over.items() if v is ...]:
        cfg.pop(k)
    tensors = tiny_weights(cfg, seed, dtype)
    add_biases(cfg, tensors, seed)
    write_model(f"{d}/model", cfg, tensors, dtype, shards)
    write_prompts(f"{d}/prompts.jsonl", LENGTHS, seed=seed, vocab=cfg["vocab_size"])
    run(harvest, "run", write_job(f"{d}/job.json", batch_size=3), "--quiet", check=0)
    names = [l.split()[0] for l in run(harvest, "activations", f"{d}/model", check=0).stdout.splitlines()]
    _, w = hf.load_checkpoint(f"{d}/model")
    worst = {}
    with h5py.File(f"{d}/out.h5", "r") as f:
        check(f.attrs["model_family"] == family, f"{name}: model_family {f.attrs['model_family']}")
        check(sorted(f["activations"]) == sorted(names), f"{name}: one dataset a catalogue name")
        for i in range(len(f["prompts/length"])):
            T, o = int(f["prompts/length"][i]), int(f["prompts/token_offset"][i])
            ids = f["tokens/input_ids"][o:o + T]
            want = hf.forward(cfg, w, [list(ids)])[0]
            check(sorted(want) == sorted(set(names) - {"input_ids", "attention_mask"}),
                  f"{name}: catalogue == the reference's names: {sorted(set(names) ^ set(want))}")
            check(np.array_equal(f["activations/input_ids"][i][:T], ids), f"{name}: input_ids")
            for n in want:
                if n not in names:
                    continue
                dset = f["activations/" + n]
                axes = list(dset.attrs["semantic_shape"])
                c = tuple(slice(0, T) if a in SEQ else slice(None) for a in axes[1:])
                worst[n] = max(worst.get(n, 0.0), compare_row(f"{name} {n}", dset[i], c, want[n][0], RTOL))
            identities(f, i, T, cfg, w, name)
    # one prompt a batch, no tap-only values: the paths that skip them (a (T, T) score buffer a
    # head, no expert outputs kept) give the reference's numbers too
    job1 = write_job(f"{d}/job1.json", batch_size=1, activations=["layers.*.layer_output", "logits"],
                     output={"path": "out1.h5"})
    run(harvest, "run", job1, "--quiet", check=0)
    with h5py.File(f"{d}/out1.h5", "r") as f:
        for i in range(len(f["prompts/length"])):
            T, o = int(f["prompts/length"][i]), int(f["prompts/token_offset"][i])
            want = hf.forward(cfg, w, [list(f["tokens/input_ids"][o:o + T])])[0]
            for n in f["activations"]:
                c = (slice(0, T), slice(None))
                compare_row(f"{name} {n} (batch 1, subset)", f["activations/" + n][i], c, want[n][0], RTOL)
    top = sorted(worst.items(), key=lambda kv: -kv[1])[:2]
    print(f"{name} ({dtype}, {shards} file{'s' if shards > 1 else ''}): {len(names)} values x "
          f"{len(LENGTHS)} prompts match; worst " + ", ".join(f"{k} {v:.1e}" for k, v in top), flush=True)


only = os.environ.get("HF_GOLDEN_ONLY")  # one family while debugging
for n, (name, dtype, shards, family) in enumerate(FAMILIES):
    if not only or only == name:
        golden(name, dtype, shards, family, seed=40 + n)
finish()
