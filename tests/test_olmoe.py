"""OLMoE (OlmoeForCausalLM, model/families/olmoe.c) against the float64 reference tests/ref/olmoe_ref.py
(written from transformers' modeling_olmoe.py): the init-model preset (BF16, two shards, OLMoE-1B-7B's
routing shape: 64 experts, top 8, not renormalised; two key/value heads for four query heads) and a
variant (F32 in one file, attention_bias with q/k/v/o biases, clip_qkv 0.5 that clamps q, k and v,
tied embeddings, num_key_value_heads null, rms_norm_eps 0.25 read from the config), `harvest run`
with every value over prompts of 1 to 17 tokens batched; every stored value within 1e-4 of the
reference relative to the tensor's scale (-inf exactly where attention is blocked; expert_indices
exactly), and the catalogue is exactly the
reference's names but the reference's own intermediates (attention_queries_pre_norm,
attention_keys_pre_norm, router_probabilities, which harvest does not store).

Identities on the stored values: layer_mid == layer_input + attention_output and layer_output ==
layer_mid + mlp_output (bit for bit), mlp_input == mlp_norm_output, mlp_output == routed_output ==
the sum of expert_outputs' slots; expert_weights are softmax(router_logits) at expert_indices (from
the stored logits), the 8 largest, in descending order, and their rows sum to less than 1 (not
renormalised); q_norm over the whole projection (recomputed from attention_norm_output; a per-head
norm would not match); with clip_qkv, |queries_pre_rope|, |keys_pre_rope| and |values| reach 0.5
and never pass it; probability rows sum to 1; logits == lm_head(final_norm_output).

The mutations the test must catch: the reference with the top-k weights renormalised
(norm_topk_prob true, as Mixtral and Qwen3-MoE do) differs from harvest's expert_weights and last
layer_output on every prompt; the variant's reference without the clamp (clip_qkv null) differs on
every prompt longer than one token. Then the aliases (the module paths mlp.gate,
input_layernorm, post_attention_layernorm), bad config.json values refused naming the key
(clip_qkv <= 0, sliding_window, a head_dim that is not hidden_size / heads, a hidden_size the
heads do not divide, yarn rope_scaling, top-k past the experts), num_local_experts read as
num_experts (configuration_olmoe.py's attribute_map), the preset's keys the release config.json's
(tests/ref/configs/OLMoE-1B-7B-0924.json, verbatim), and `plan` of that file: 6,919,161,856
parameters (the card's 6.9 B; tests/ref/param_count.py counts the same), 1,282,017,280 active a
token (the card's 1.3 B), and the bytes a rank holds at 1 x 2 expert shards and 2 stages x 2
shards as the modules' bf16 sizes give them (norm vectors held float32).
The np 2 and np 4 grids (stages, expert shards, replicas) are tests/test_olmoe_mpi.py."""
import json
import os
import re
import shutil
import sys

import h5py
import numpy as np

import famtest as ft
from famtest import close, differs
from util import args, check, finish, run, write_job
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref"))
import olmoe_ref  # noqa: E402
import param_count  # noqa: E402
from hf.safetensors_io import load_checkpoint  # noqa: E402

LENGTHS = [5, 1, 17, 2, 9, 3]
REF_ONLY = {f"layers.{i}.{n}" for i in range(2)
            for n in ("attention_queries_pre_norm", "attention_keys_pre_norm", "router_probabilities")}
CLIP = 0.5
RMS_EPS = 0.25  # the variant's rms_norm_eps: large enough to change every norm past the tolerance
harvest, work = args()


def variant(src, dst):
    """The preset's weights as F32 in one file with attention biases, clip_qkv, tied, kv heads null,
    rms_norm_eps RMS_EPS."""
    cfg, w = load_checkpoint(src)
    cfg.update(attention_bias=True, clip_qkv=CLIP, tie_word_embeddings=True, num_key_value_heads=None,
               torch_dtype="float32", rms_norm_eps=RMS_EPS)
    H, D = cfg["num_attention_heads"], cfg["hidden_size"]
    rng = np.random.default_rng(7)
    t = {k: v.astype(np.float32) for k, v in w.items() if k != "lm_head.weight"}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}.self_attn."
        for n in ("k_proj", "v_proj"):  # kv heads null -> as many as query heads
            t[p + n + ".weight"] = rng.standard_normal((D, D)).astype(np.float32) * np.float32(0.2)
        t[p + "k_norm.weight"] = (1 + 0.1 * rng.standard_normal(D)).astype(np.float32)
        for n in ("q_proj", "k_proj", "v_proj", "o_proj"):
            t[p + n + ".bias"] = rng.standard_normal(D).astype(np.float32) * np.float32(0.1)
    ft.write_f32(dst, cfg, t)


def softmax(z):
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def expert_identities(A, p, T, k, name):
    z = A(p + "router_logits")[:T].astype(np.float64)
    idx, wt = A(p + "expert_indices")[:T], A(p + "expert_weights")[:T].astype(np.float64)
    P = softmax(z)
    close(np.take_along_axis(P, idx, -1), wt, f"{name} {p}expert_weights == softmax(router_logits)[indices]")
    top = np.sort(P, -1)[:, ::-1][:, :k]
    close(top, wt, f"{name} {p}expert_indices are the {k} largest, in descending order")
    check((wt.sum(-1) < 1 - 1e-3).all(), f"{name} {p}expert_weights rows sum to less than 1 (not "
          f"renormalised): {wt.sum(-1).max():.4f}")
    eo, routed = A(p + "expert_outputs")[:T].astype(np.float64), A(p + "routed_output")[:T]
    close(eo.sum(1), routed, f"{name} {p}routed_output == the sum of expert_outputs' slots")
    check(np.array_equal(A(p + "mlp_output")[:T], routed), f"{name} {p}mlp_output == routed_output")


def clip_identities(A, p, T, clip, name):
    for n in ("attention_queries_pre_rope", "attention_keys_pre_rope", "attention_values"):
        v = np.abs(A(p + n)[:, :T])
        if clip is None:
            check((v > CLIP).any(), f"{name} {p}{n}: some values past {CLIP} (nothing clamps them)")
        else:
            check(v.max() == np.float32(clip) and (v == np.float32(clip)).sum() > 1,
                  f"{name} {p}{n}: clamped at {clip} (max {v.max()}, {(v == np.float32(clip)).sum()} at it)")


def identities(f, i, T, r, w, name):
    A = ft.row(f, i)
    for l in range(r.L):
        p = f"layers.{l}."
        ft.residuals(A, p, T, name)
        check(np.array_equal(A(p + "mlp_input")[:T], A(p + "mlp_norm_output")[:T]),
              f"{name} {p}mlp_input == mlp_norm_output")
        expert_identities(A, p, T, r.k, name)
        if T > 1:
            clip_identities(A, p, T, r.clip, name)
        # q_norm over the whole projection (H hd at once), then the clamp, then the head split
        mw = f"model.{p}self_attn."
        qp = A(p + "attention_norm_output")[:T].astype(np.float64) @ w[mw + "q_proj.weight"].T
        if r.bias:
            qp = qp + w[mw + "q_proj.bias"]
        got = A(p + "attention_queries_pre_rope")[:, :T].astype(np.float64)  # (H, T, hd)
        ft.q_norm_whole(name, p, qp, w[mw + "q_norm.weight"], r.eps, r.H, r.hd, got, olmoe_ref.rmsnorm, r.clip)
        ft.rows_sum_to_one(A, p, T, name)
    ft.lm_head(A, T, w["lm_head.weight"] if "lm_head.weight" in w else w["model.embed_tokens.weight"], name)


def golden(name, model):
    ref = olmoe_ref.load(model)
    cfg, w = ref.cfg, ref.w
    renorm = olmoe_ref.OlmoeRef(dict(cfg, norm_topk_prob=True), w)  # the mutation
    noclip = olmoe_ref.OlmoeRef(dict(cfg, clip_qkv=None), w) if ref.clip is not None else None
    names, out = ft.golden_run(harvest, f"{work}/run-{name}", model, LENGTHS, cfg["vocab_size"])
    worst, caught, caught_clip, longer = 0.0, 0, 0, 0
    last = f"layers.{ref.L - 1}.layer_output"
    with ft.output(out, name, names, "olmoe") as f:
        for i, T, ids in ft.prompts(f):
            want = ref.forward(ids)
            check(REF_ONLY <= set(want), f"{name}: the reference's own intermediates {REF_ONLY - set(want)}")
            mine = set(want) - REF_ONLY - {"input_ids"}
            check(mine == set(names) - {"input_ids", "attention_mask"},
                  f"{name}: catalogue == the reference's names: {sorted(mine ^ (set(names) - {'input_ids', 'attention_mask'}))}")
            check(np.array_equal(f["activations/input_ids"][i][:T], ids), f"{name}: input_ids")
            worst = max(worst, ft.compare_all(f, i, T, {n: want[n] for n in mine}, name, names))
            identities(f, i, T, ref, w, name)
            # the mutation: the top-k weights renormalised
            mut = renorm.forward(ids)
            ew = f"layers.{ref.L - 1}.expert_weights"
            caught += differs(f["activations/" + ew][i][:T], mut[ew][0]) and \
                differs(f["activations/" + last][i][:T].astype(np.float64), mut[last][0])
            if noclip is not None and T > 1:
                longer += 1
                caught_clip += differs(f["activations/" + last][i][:T].astype(np.float64),
                                       noclip.forward(ids)[last][0])
    check(caught == len(LENGTHS), f"{name}: the renormalised top-k mutation differs from harvest on "
          f"{caught} of {len(LENGTHS)} prompts")
    check(caught_clip == longer, f"{name}: the reference without clip_qkv differs on {caught_clip} of "
          f"{longer} prompts")
    print(f"{name}: {len(names)} values x {len(LENGTHS)} prompts match the reference (worst {worst:.1e}); "
          f"the renormalised top-k mutation is caught on every prompt"
          + (f", the unclamped reference on {longer}" if noclip is not None else ""), flush=True)


preset = f"{work}/preset"
run(harvest, "init-model", "--family", "olmoe", "--preset", "OLMoE-1B-7B-0924", "--seed", "5", preset, check=0)
check(os.path.exists(f"{preset}/model.safetensors.index.json"), "the preset is sharded like a release")
golden("preset", preset)
variant(preset, f"{work}/variant")
golden("variant", f"{work}/variant")

# ---- the names: listed, aliases ----
listing = run(harvest, "activations", preset, check=0).stdout
check("layers.0.router_logits" in listing and "layers.0.expert_weights" in listing and
      "mlp_neurons" not in listing and "post_norm" not in listing,
      "activations: the mixture's values, no dense MLP's and no post norms'")
al = ft.aliases(harvest, preset)
for a, c in (("model.layers.1.mlp.gate", "layers.1.router_logits"),
             ("model.layers.0.input_layernorm", "layers.0.attention_norm_output"),
             ("model.layers.0.post_attention_layernorm", "layers.0.mlp_norm_output"),
             ("blocks.1.hook_resid_post", "layers.1.layer_output"),
             ("blocks.0.attn.hook_q", "layers.0.attention_queries_pre_rope")):
    check(al.get(a) == c, f"--aliases: {a} -> {al.get(a)}, expected {c}")
job = write_job(f"{work}/alias.json", model=preset, data=f"{work}/run-preset/prompts.jsonl", batch_size=3,
                activations=["model.layers.1.mlp.gate"], output={"path": f"{work}/alias.h5"})
run(harvest, "run", job, "--quiet", check=0)
with h5py.File(f"{work}/alias.h5", "r") as f, h5py.File(f"{work}/run-preset/out.h5", "r") as g:
    same = all(np.array_equal(f["activations/model.layers.1.mlp.gate"][i][:T],
                              g["activations/layers.1.router_logits"][i][:T])
               for i, T in enumerate(g["prompts/length"][:]))
    check(same, "the alias model.layers.1.mlp.gate stores layers.1.router_logits' values")

# ---- bad config.json values: exit 1 naming config.json and the key ----
base = json.load(open(f"{preset}/config.json"))
for i, (over, key) in enumerate([({"clip_qkv": 0}, "clip_qkv"), ({"clip_qkv": -1.5}, "clip_qkv"),
                                 ({"clip_qkv": "8"}, "clip_qkv"), ({"sliding_window": 4}, "sliding_window"),
                                 ({"head_dim": 16}, "head_dim"), ({"hidden_size": 34}, "hidden_size"),
                                 ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "rope_scaling"),
                                 ({"num_experts_per_tok": 65}, "num_experts_per_tok")]):
    ft.bad_config(harvest, f"{over} refused", f"{work}/bad{i}", dict(base, **over), [key], cmd="plan")
loc = f"{work}/local"
os.makedirs(loc)
json.dump({k: v for k, v in dict(base, num_local_experts=16).items() if k != "num_experts"},
          open(f"{loc}/config.json", "w"))
p = run(harvest, "plan", f"{loc}/config.json", check=0)
check("16 experts, top 8" in p.stdout, f"num_local_experts is num_experts: {p.stdout[:300]}")

# ---- plan of the release config.json (tests/ref/configs, verbatim) ----
release = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref", "configs", "OLMoE-1B-7B-0924.json")
big = json.load(open(release))
check(all(big[k] == v for k, v in param_count.ARCH["OLMoE-1B-7B-0924"].items()),
      "the release file has param_count.ARCH's architecture values")
check({k: v for k, v in base.items() if k != "_tiny_from"}.keys() == big.keys(),
      f"the preset has the release's keys: {set(base) ^ set(big)}")
os.makedirs(f"{work}/big")
shutil.copy(release, f"{work}/big/config.json")
want = param_count.count(big)["total"]
lo, hw = param_count.CARDS["OLMoE-1B-7B-0924"]
check(want == 6919161856 and abs(want - lo) <= hw, f"param_count: {want:,} (card {lo:,.0f} +- {hw:,.0f})")
V, D, L, I, E, k = 50304, 2048, 16, 1024, 64, 8
attn = 4 * D * D + 2 * D  # q/k/v/o, q_norm (D), k_norm (KV hd = D)
layer_shared = attn + 2 * D + E * D  # + the two norms, the router
active = 2 * V * D + D + L * (layer_shared + k * 3 * D * I)
p = run(harvest, "plan", f"{work}/big/config.json", check=0)
check(f"parameters: {want:,}" in p.stdout, f"plan: {want:,} parameters expected: {p.stdout[:400]}")
check(f"{active:,} parameters active a token (top 8 of 64 experts)" in p.stdout and active == 1282017280,
      f"plan: {active:,} active (the card's 1.3 B): {p.stdout[:400]}")
check(f"bytes: {2 * want:,}" in p.stdout, f"plan: {2 * want:,} bytes as published (bf16): {p.stdout[:400]}")
# a rank at 1 x 2 expert shards: everything but half the experts, bf16 matrices (norm vectors float32)
p = run(harvest, "plan", f"{work}/big/config.json", "--expert-parallel", "2", check=0)
exp = L * E * 3 * D * I
vec = L * (2 * D + 2 * D) + D  # the norm vectors, held float32
held = 2 * (want - vec - exp // 2) + 4 * vec
check(f"({held:,} bytes" in p.stdout, f"plan 1 x 2: a rank holds {held:,} bytes: {p.stdout[-600:]}")
# 2 stages x 2 expert shards: each stage's blocks (as plan cuts them), half their experts, the
# embedding on the first, the head and final norm on the last
p = run(harvest, "plan", f"{work}/big/config.json", "--pipeline-stages", "2", "--expert-parallel", "2",
        check=0)
cuts = re.findall(r"stage (\d): layers (\d+)-(\d+)", p.stdout)
block = 2 * (4 * D * D + E * D) + 4 * 4 * D + 2 * E * 3 * D * I // 2  # a shard's share of one block
stages = [(int(a), int(b)) for _, a, b in cuts]
held22 = max((b - a + 1) * block + (2 * V * D if a == 0 else 0) + (2 * V * D + 4 * D if b == L - 1 else 0)
             for a, b in stages) if stages else -1
check([a for a, _ in stages] == [0, stages[-1][0]] and stages[-1][1] == L - 1 if stages else False,
      f"plan 2 x 2: two stages covering the 16 layers: {stages}")
check(f"({held22:,} bytes" in p.stdout, f"plan 2 x 2: a rank holds {held22:,} bytes: {p.stdout[-600:]}")
print(f"plan: OLMoE-1B-7B-0924 {want:,} parameters, {active:,} active a token, a rank holds {held:,} "
      f"bytes at 1 x 2 expert shards, {held22:,} at 2 stages x 2 shards", flush=True)
finish()
