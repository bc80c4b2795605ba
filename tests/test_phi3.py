"""Phi-3 (Phi3ForCausalLM, model/families/phi3.c) against the float64 reference tests/ref/phi3_ref.py
(written from transformers' modeling_phi3.py and modeling_rope_utils.py's longrope): the
init-model preset (Phi-3.5-mini-instruct's keys shrunk: BF16, two shards, fused qkv_proj with two
key/value heads for four query heads, fused gate_up_proj, longrope with original_max_position_
embeddings 16 and max 512, so attention factor 1.5) and a variant (F32 in one file, tied
embeddings, partial_rotary_factor 0.75 so 6 of 8 dims rotate with 3 factors a list, an explicit
attention_factor, rope_theta 500000, sliding_window 5), `harvest run` with every value over
prompts of 1 to 30 tokens batched, both sides of the switch (16 tokens: short_factor; 17 and 30:
long_factor for every position). Every stored value within 1e-4 of the reference relative to the
tensor's scale (-inf exactly where blocked); the catalogue is the reference's names but its two
fused-projection outputs (attention_qkv, mlp_gate_up: harvest stores their parts, the q/k/v and
mlp_activation / mlp_neurons).
Identities on the stored values: the residual adds bit for bit, mlp_input == mlp_norm_output,
the q / k / v row blocks of qkv_proj recomputed from attention_norm_output (q rows first, then k,
then v), the queries at position 0 are the pre-RoPE ones times the attention factor on the
rotary dims and unchanged past them, probability rows summing to 1, logits == lm_head(final).
Mutations the test must catch: the reference with qkv_proj's k and v row blocks swapped, and the
reference using long_factor for prompts of at most 16 tokens, each differ from harvest's values.
Two pipeline stages (np 2) store the same bits as one rank; the same rope written as transformers 5's
rope_parameters (rope_theta and original_max_position_embeddings inside) or with type "su" stores
the same bits. "compute": "bf16" (oneDNN on the row
blocks of the fused matrices) stays within 5e-2 of the reference, and its two pipeline stages store
the same bits as one rank. Then the aliases (qkv_proj refused
naming the three values), bad configs exit 1 naming config.json and the key (a rope type Phi-3
does not have, a short_factor of the wrong length, a missing long_factor, a rope dict's
original_max_position_embeddings that differs from the top-level one), and `plan`'s parameter
count at Phi-3.5-mini's sizes (3,821,079,552: the card's 3.8B), also from
tests/ref/configs/Phi-3.5-mini-instruct.json at 4 pipeline stages."""
import json
import os
import shutil
import sys

import h5py
import numpy as np

import famtest as ft
from famtest import RTOL, close
from util import args, check, finish, run, write_job
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref"))
import phi3_ref  # noqa: E402
from hf.safetensors_io import load_checkpoint  # noqa: E402

LENGTHS = [5, 1, 17, 16, 30, 2, 9]
FUSED = {"attention_qkv", "mlp_gate_up"}  # the reference's fused outputs: harvest stores their parts
harvest, work = args()


def variant(src, dst):
    """The preset's weights as F32 in one file, tied, partial rotary 0.75, attention_factor, window 5."""
    cfg, w = load_checkpoint(src)
    cfg.update(tie_word_embeddings=True, torch_dtype="float32", partial_rotary_factor=0.75, sliding_window=5,
               rope_theta=500000.0, rope_scaling={"type": "longrope", "short_factor": [1.0, 1.3, 2.5],
                                                  "long_factor": [2.0, 9.0, 40.0], "attention_factor": 1.25})
    ft.write_f32(dst, cfg, {k: v.astype(np.float32) for k, v in w.items() if k != "lm_head.weight"})


def identities(f, i, T, ref, w, name):
    A = ft.row(f, i)
    H, KV, hd, r = ref.H, ref.KV, ref.hd, ref.rot
    att = phi3_ref.longrope_inv_freq(ref.cfg, r, T)[1]
    for l in range(ref.L):
        p, mw = f"layers.{l}.", f"model.layers.{l}."
        ft.residuals(A, p, T, name)
        check(np.array_equal(A(p + "mlp_input")[:T], A(p + "mlp_norm_output")[:T]), f"{name} {p}mlp_input")
        # the row blocks of qkv_proj: q, then k, then v
        qkv = A(p + "attention_norm_output")[:T].astype(np.float64) @ w[mw + "self_attn.qkv_proj.weight"].T
        nq, nk = H * hd, KV * hd
        heads = lambda a, n: a.reshape(T, n, hd).transpose(1, 0, 2)
        close(heads(qkv[:, :nq], H), A(p + "attention_queries_pre_rope")[:, :T], f"{name} {p}q rows of qkv_proj")
        close(heads(qkv[:, nq:nq + nk], KV), A(p + "attention_keys_pre_rope")[:, :T], f"{name} {p}k rows")
        close(heads(qkv[:, nq + nk:], KV), A(p + "attention_values")[:, :T], f"{name} {p}v rows")
        q0, qp0 = A(p + "attention_queries")[:, 0], A(p + "attention_queries_pre_rope")[:, 0]
        close(q0[:, :r], qp0[:, :r] * att, f"{name} {p}position 0: queries = pre-RoPE x attention factor {att:.4f}")
        check(np.array_equal(A(p + "attention_queries")[:, :T, r:], A(p + "attention_queries_pre_rope")[:, :T, r:]),
              f"{name} {p}dims past the {r} rotary ones are not rotated")
        ft.rows_sum_to_one(A, p, T, name)
    ft.lm_head(A, T, w["model.embed_tokens.weight" if ref.cfg.get("tie_word_embeddings") else "lm_head.weight"], name)


def mutants(cfg, w):
    """(k and v row blocks of qkv_proj swapped, long_factor for every prompt length) references."""
    ref = phi3_ref.Phi3Ref(cfg, w)
    nq, nk = ref.H * ref.hd, ref.KV * ref.hd
    sw = dict(w)
    for l in range(ref.L):
        W = w[f"model.layers.{l}.self_attn.qkv_proj.weight"]
        sw[f"model.layers.{l}.self_attn.qkv_proj.weight"] = np.concatenate([W[:nq], W[nq + nk:], W[nq:nq + nk]])
    lc = json.loads(json.dumps(cfg))
    lc["rope_scaling"]["short_factor"] = lc["rope_scaling"]["long_factor"]
    return phi3_ref.Phi3Ref(cfg, sw), phi3_ref.Phi3Ref(lc, w)


def golden(name, model):
    cfg, w = load_checkpoint(model)
    ref = phi3_ref.Phi3Ref(cfg, w)
    swapped, longf = mutants(cfg, w)
    L0 = cfg["original_max_position_embeddings"]
    names, out = ft.golden_run(harvest, f"{work}/run-{name}", model, LENGTHS, cfg["vocab_size"])
    worst, caught_swap, caught_long, n_short = 0.0, 0, 0, 0
    last = f"layers.{ref.L - 1}.layer_output"
    with ft.output(out, name, names, "phi3") as f:
        for i, T, ids in ft.prompts(f):
            want = ref.forward(ids)
            mine = {n for n in want if n.split(".")[-1] not in FUSED} | {"attention_mask"}
            check(mine == set(names), f"{name}: catalogue == the reference's names: {sorted(mine ^ set(names))}")
            worst = max(worst, ft.compare_all(f, i, T, want, f"{name} (T={T})", names))
            identities(f, i, T, ref, w, name)
            got = f["activations/" + last][i][:T].astype(np.float64)
            differs = lambda m: np.abs(got - m.forward(ids)[last][0]).max() > 100 * RTOL * np.abs(got).max()
            caught_swap += differs(swapped)
            if T <= L0:
                n_short += 1
                caught_long += differs(longf) or T == 1  # position 0 alone: no angle for a factor to scale
    check(caught_swap == len(LENGTHS), f"{name}: k/v rows swapped differs on {caught_swap} of {len(LENGTHS)} prompts")
    check(caught_long == n_short, f"{name}: long_factor for short prompts differs on {caught_long} of {n_short}")
    print(f"{name}: {len(names)} values x {len(LENGTHS)} prompts match the reference (worst {worst:.1e}); "
          f"both mutations caught", flush=True)


preset = f"{work}/preset"
run(harvest, "init-model", "--family", "phi3", "--preset", "Phi-3.5-mini-instruct", "--seed", "5", preset, check=0)
golden("preset", preset)
variant(preset, f"{work}/variant")
golden("variant", f"{work}/variant")

# ---- two pipeline stages (np 2) store the same bits as one rank ----
ft.two_stages(harvest, f"{work}/run-preset", preset)

# ---- the same rope in other spellings gives the same bits: transformers 5's rope_parameters (theta
# and the original length inside), and "su", Phi3Config's old name of longrope ----
def respelled(label, change):
    dst = f"{work}/spell-{label}"
    shutil.copytree(preset, dst)
    cfg = json.load(open(f"{dst}/config.json"))
    change(cfg)
    json.dump(cfg, open(f"{dst}/config.json", "w"))
    job = write_job(f"{dst}/job.json", model=dst, data=f"{work}/run-preset/prompts.jsonl", batch_size=3,
                    output={"path": f"{dst}/out.h5"})
    run(harvest, "run", job, "--quiet", check=0)
    with h5py.File(f"{work}/run-preset/out.h5", "r") as a, h5py.File(f"{dst}/out.h5", "r") as b:
        same = sorted(a["activations"]) == sorted(b["activations"]) and all(
            np.array_equal(a["activations/" + n][:], b["activations/" + n][:], equal_nan=True) for n in a["activations"])
    check(same, f"{label}: the same values bit for bit as the preset's rope_scaling")


def v5(c):
    rs = c.pop("rope_scaling")
    c["rope_parameters"] = {"rope_type": "longrope", "rope_theta": c.pop("rope_theta"), "partial_rotary_factor": 1.0,
                            "original_max_position_embeddings": c["original_max_position_embeddings"],
                            "short_factor": rs["short_factor"], "long_factor": rs["long_factor"]}


respelled("rope_parameters", v5)
respelled("su", lambda c: c["rope_scaling"].update(type="su"))

# ---- compute bf16 (oneDNN on the row-block views of the fused matrices): near the reference, and two
# pipeline stages bit for bit one rank ----
cfg, w = load_checkpoint(preset)
ref = phi3_ref.Phi3Ref(cfg, w)
out16 = {}
for label, np_, par in (("np1", 1, {}), ("s2", 2, {"pipeline_stages": 2})):
    job = write_job(f"{work}/run-preset/bf16-{label}.json", model=preset, batch_size=3, compute="bf16",
                    activations=["layers.*.layer_output", "layers.*.attention_keys", "logits"],
                    output={"path": f"out-bf16-{label}.h5"}, parallel=par)
    ft.mpirun(harvest, job, np_, f"bf16 {label}")
    out16[label] = f"{work}/run-preset/out-bf16-{label}.h5"
if all(os.path.exists(o) for o in out16.values()):
    ft.same_bits(out16["np1"], out16["s2"], "bf16: 2 pipeline stages")
    with h5py.File(out16["np1"], "r") as f:
        check(f.attrs["compute_dtype"] == "bf16", f"compute_dtype {f.attrs['compute_dtype']}")
        worst = 0.0
        for i in range(len(f["prompts/length"])):
            T, o = int(f["prompts/length"][i]), int(f["prompts/token_offset"][i])
            want = ref.forward(list(f["tokens/input_ids"][o:o + T]))
            for n in ("layers.1.layer_output", "layers.1.attention_keys", "logits"):
                got = f["activations/" + n][i]
                c = (slice(None), slice(0, T)) if n.endswith("keys") else (slice(0, T),)
                g, r = got[c].astype(np.float64), want[n][0]
                worst = max(worst, np.abs(g - r).max() / np.abs(r).max())
        check(worst < 5e-2, f"bf16: values within 5e-2 of the float64 reference (worst {worst:.1e})")
        print(f"compute bf16: within {worst:.1e} of the reference; 2 stages bit for bit one rank", flush=True)

# ---- aliases ----
al = ft.aliases(harvest, preset)
check(al.get("blocks.0.attn.hook_q") == "layers.0.attention_queries_pre_rope" and
      al.get("blocks.1.hook_resid_post") == "layers.1.layer_output", "--aliases: the shared rows hold")
ft.run_refused(harvest, "qkv_proj refused naming the three values", f"{work}/qkv.json",
               ["qkv_proj", "attention_keys_pre_rope"], model=preset, data=f"{work}/run-preset/prompts.jsonl",
               activations=["model.layers.0.self_attn.qkv_proj"], output={"path": f"{work}/qkv.h5"})


# ---- bad configs: exit 1 naming config.json and the key ----
def bad(label, change, key):
    cfg = json.load(open(f"{preset}/config.json"))
    change(cfg)
    ft.bad_config(harvest, label, f"{work}/bad-{label}", cfg, [key])


bad("dynamic", lambda c: c["rope_scaling"].update(type="dynamic", factor=2.0), "rope_scaling.rope_type")
bad("short3", lambda c: c["rope_scaling"].update(short_factor=[1.0, 1.0, 1.0]), "rope_scaling.short_factor")
bad("nolong", lambda c: c["rope_scaling"].pop("long_factor"), "rope_scaling.long_factor")
bad("neg", lambda c: c["rope_scaling"]["long_factor"].__setitem__(2, -1.0), "rope_scaling.long_factor\"[2]")
bad("orig", lambda c: c["rope_scaling"].update(original_max_position_embeddings=32),
    "rope_scaling.original_max_position_embeddings")
bad("prf", lambda c: c.update(partial_rotary_factor=0.1), "partial_rotary_factor")

# ---- `plan`: the parameters Phi3ForCausalLM instantiates at Phi-3.5-mini's sizes ----
big = dict(json.load(open(f"{preset}/config.json")), vocab_size=32064, hidden_size=3072, intermediate_size=8192,
           num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32, max_position_embeddings=131072,
           original_max_position_embeddings=4096)
big["rope_scaling"] = dict(big["rope_scaling"], short_factor=[1.0] * 48, long_factor=[2.0] * 48)
os.makedirs(f"{work}/big")
json.dump(big, open(f"{work}/big/config.json", "w"))
V, D, I, L = 32064, 3072, 8192, 32
n = 2 * V * D + D + L * (2 * D + D * 3 * D + D * D + D * 2 * I + I * D)  # qkv, o, gate_up, down, 2 norms
check(n == 3_821_079_552, f"the modules' count {n:,}")
p = run(harvest, "plan", f"{work}/big/config.json", check=0)
check(f"parameters: {n:,}" in p.stdout, f"plan: {n:,} parameters expected: {p.stdout[:300]}")
release = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref", "configs", "Phi-3.5-mini-instruct.json")
p = run(harvest, "plan", release, "--pipeline-stages", "4", check=0)
check(f"parameters: {n:,}" in p.stdout and "32 layers" in p.stdout,
      f"plan of the release config (tests/ref/configs): {p.stdout[:300]}")
finish()
