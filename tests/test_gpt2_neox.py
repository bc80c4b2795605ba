"""GPT-2 (GPT2LMHeadModel) and GPT-NeoX (GPTNeoXForCausalLM, Pythia) against the float64
references written from transformers' modeling code (tests/ref/hf/gpt2.py, neox.py), on tiny
checkpoints in the published layouts (tests/ref/hf/make_tiny.py): GPT-2 with unprefixed names
(`h.0.attn.c_attn.weight`, F32), `transformer.`-prefixed (F16) and sharded BF16, each carrying the
`attn.bias` mask buffers a loader skips; NeoX parallel (F32), sequential (BF16 shards) and tied with
no attention bias and linear rope_scaling (F16); and the init-model presets. Prompts of lengths 1,
2 and longer are batched together; every stored value is within 1e-4 of the reference relative to
the tensor's scale, then the identities hold on the stored values (residual sums, also NeoX's
parallel form; probabilities sum to 1; logits == head(final_norm_output)). Then `harvest plan` on
the release configs (tests/ref/hf-configs) and bad checkpoints: errors name the file and the key."""
import json
import os
import shutil
import subprocess

import h5py
import numpy as np

import util
from util import BOOKKEEPING, MPI_ENV, args, check, compare_row, finish, output_diff, run, write_job, \
    write_prompts
from hf.common import layernorm, softmax
from hf.make_tiny import tiny_config, tiny_weights, write_model
from hf.models import forward as reference
from hf.safetensors_io import load_checkpoint, read_safetensors, write_safetensors

RTOL = 1e-4
LENGTHS = [5, 1, 2, 13, 8, 3]
SEQ = {"seq", "query", "key"}
V = 96  # the tiny configs' vocabulary

harvest, work = args()

# name: (family, dtype, shards, GPT-2 name prefix, config overrides)
CASES = {
    "gpt2": ("gpt2", "F32", 1, "", {}),
    "gpt2_prefixed_f16": ("gpt2", "F16", 1, "transformer.",
                          {"n_layer": 3, "scale_attn_by_inverse_layer_idx": True}),
    "gpt2_shards_bf16": ("gpt2", "BF16", 3, "transformer.", {"activation_function": "gelu"}),
    "neox": ("gpt_neox", "F32", 1, "", {}),
    "neox_sequential_bf16": ("gpt_neox", "BF16", 3, "", {"use_parallel_residual": False}),
    "neox_tied_f16": ("gpt_neox", "F16", 1, "", {
        "tie_word_embeddings": True, "attention_bias": False, "rotary_pct": 0.25,
        "rope_scaling": {"type": "linear", "factor": 2.0}}),
}


def make_case(name):
    fam, dtype, shards, prefix, over = CASES[name]
    cfg = tiny_config(fam)
    cfg.update(over)
    d = f"{work}/{name}/model"
    write_model(d, cfg, tiny_weights(cfg, seed=len(name), dtype=dtype, gpt2_prefix=prefix), dtype,
                shards)
    return d


def compare(name, got, want, axes, T):
    c = tuple(slice(0, T) if a in SEQ else slice(None) for a in axes[1:])
    return compare_row(name, got, c, want, RTOL)


def close(a, b, what, tol=1e-5):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    err = np.abs(a - b).max() / max(np.abs(b).max(), 1e-30)
    return check(err <= tol, f"{what}: relative error {err:.1e}")


def identities(f, cfg, w, p, T, label):
    A = lambda n: f["activations/" + n][p]
    gpt2 = "n_layer" in cfg
    L = cfg["n_layer"] if gpt2 else cfg["num_hidden_layers"]
    parallel = not gpt2 and cfg.get("use_parallel_residual", True)
    for i in range(L):
        pre = f"layers.{i}."
        x, a, mid, m, out = (A(pre + k)[:T] for k in
                             ("layer_input", "attention_output", "layer_mid", "mlp_output", "layer_output"))
        check(np.array_equal(mid, x + a), f"{label} prompt {p}: {pre}layer_mid == layer_input + attention_output")
        check(np.array_equal(out, mid + m), f"{label} prompt {p}: {pre}layer_output == layer_mid + mlp_output")
        close(x.astype(np.float64) + a + m, out, f"{label} {pre}layer_input + attention_output + mlp_output")
        if i + 1 < L:
            check(np.array_equal(A(f"layers.{i + 1}.layer_input")[:T], out), f"{label} {pre}output feeds the next block")
        # which stream the MLP's norm reads: the block's input in a parallel block
        ln2 = f"h.{i}.ln_2" if gpt2 else f"gpt_neox.layers.{i}.post_attention_layernorm"
        P = "transformer." if "transformer.wte.weight" in w else ""
        src = x if parallel else mid
        close(layernorm(src.astype(np.float64), w[P + ln2 + ".weight"], w[P + ln2 + ".bias"], 1e-5),
              A(pre + "mlp_norm_output")[:T], f"{label} {pre}mlp_norm_output == LN2({'layer_input' if parallel else 'layer_mid'})")
        prob = A(pre + "attention_probabilities")[:, :T, :T].astype(np.float64)
        close(prob.sum(-1), np.ones(prob.shape[:2]), f"{label} {pre}probability rows sum to 1")
        check(np.array_equal(A(pre + "mlp_activation")[:T], A(pre + "mlp_neurons")[:T]),
              f"{label} {pre}mlp_activation == mlp_neurons")
        check(np.array_equal(A(pre + "mlp_input")[:T], A(pre + "mlp_norm_output")[:T]), f"{label} {pre}mlp_input == mlp_norm_output")
    P = "transformer." if "transformer.wte.weight" in w else ""
    head = w[P + "wte.weight"] if gpt2 else (w["gpt_neox.embed_in.weight"] if cfg.get("tie_word_embeddings")
                                             else w["embed_out.weight"])
    logits = A("logits")[:T]
    close(A("final_norm_output")[:T].astype(np.float64) @ head.T, logits, f"{label}: logits == head(final_norm_output)")
    check(np.array_equal(logits, A("lm_head_output")[:T]), f"{label}: logits == lm_head_output")
    nt = A("next_token_probs")
    close(nt.sum(), 1.0, f"{label}: next_token_probs sums to 1")
    close(softmax(logits[T - 1].astype(np.float64)), nt, f"{label}: next_token_probs == softmax(logits[T - 1])")
    if gpt2:
        close(A("token_embeddings")[:T].astype(np.float64) + w[P + "wpe.weight"][:T], A("layers.0.layer_input")[:T],
              f"{label}: layers.0.layer_input == wte + wpe")
    else:
        check(np.array_equal(A("token_embeddings")[:T], A("layers.0.layer_input")[:T]), f"{label}: layer_input == embed_in")


def check_run(label, d):
    """harvest run of every value over LENGTHS batched together, against the reference."""
    write_prompts(f"{d}/prompts.jsonl", LENGTHS, seed=len(label), vocab=V)
    run(harvest, "run", write_job(f"{d}/job.json", batch_size=len(LENGTHS)), "--quiet", check=0)
    cfg, w = load_checkpoint(f"{d}/model")
    names = [l.split()[0] for l in run(harvest, "activations", f"{d}/model", check=0).stdout.splitlines()]
    worst, failed = {}, util.failures
    with h5py.File(f"{d}/out.h5", "r") as f:
        fam = "gpt2" if "n_layer" in cfg else "gpt_neox"
        check(f.attrs["model_family"] == fam, f"{label}: model_family {f.attrs['model_family']}")
        check(sorted(f["activations"]) == sorted(names), f"{label}: one dataset a catalogue name")
        lens, offs = f["prompts/length"][:], f["prompts/token_offset"][:]
        prompts = [f["tokens/input_ids"][o:o + T] for T, o in zip(lens, offs)]
        want = reference(cfg, w, prompts)
        check(sorted(set(want[0]) | {"input_ids", "attention_mask"}) == sorted(names),
              f"{label}: the catalogue is the reference's names: {sorted(set(names) ^ set(want[0]))}")
        for i, T in enumerate(lens):
            for name in names:
                dset = f["activations/" + name]
                if name in ("input_ids", "attention_mask"):
                    check(np.array_equal(dset[i][:T], prompts[i] if name == "input_ids" else np.ones(T)),
                          f"{label}: {name}")
                    continue
                axes = list(dset.attrs["semantic_shape"])
                worst[name] = max(worst.get(name, 0.0), compare(f"{label} {name}", dset[i], want[i][name][0], axes, T))
            identities(f, cfg, w, i, T, label)
    top = sorted(worst.items(), key=lambda kv: -kv[1])[:2]
    verdict = "match the reference" if util.failures == failed else "FAIL (above)"
    print(f"{label}: {len(names)} values x {len(LENGTHS)} prompts {verdict} (largest relative errors: "
          + ", ".join(f"{k} {v:.1e}" for k, v in top) + "), and the identities", flush=True)
    return names


for name in CASES:
    make_case(name)
    check_run(name, f"{work}/{name}")

# the init-model presets: GPT-2 with 8 layers (blocks.6 exists), Pythia-160m's keys
for fam, preset, dt in (("gpt2", "gpt2", "f32"), ("gpt_neox", "pythia-160m", "bf16")):
    d = f"{work}/preset_{fam}"
    run(harvest, "init-model", "--family", fam, "--preset", preset, "--dtype", dt, "--shards", "2",
        "--seed", "5", f"{d}/model", check=0)
    names = check_run(f"preset {preset}", d)
    if fam == "gpt2":
        check("layers.6.layer_output" in names, "the GPT-2 preset has a block 6")

# issue 11: a TransformerLens hook name in the job's activations (model/aliases.c) on the GPT-2
# preset: the dataset is named as asked, says its canonical name, and equals layers.6.layer_output
d = f"{work}/preset_gpt2"
run(harvest, "run", write_job(f"{d}/job_alias.json", batch_size=len(LENGTHS),
                              activations=["blocks.6.hook_resid_post"], output={"path": "alias.h5"}),
    "--quiet", check=0)
with h5py.File(f"{d}/alias.h5", "r") as fa, h5py.File(f"{d}/out.h5", "r") as fb:
    check(list(fa["activations"]) == ["blocks.6.hook_resid_post"], f"alias: {list(fa['activations'])}")
    x = fa["activations/blocks.6.hook_resid_post"]
    check(x.attrs.get("canonical_name") == "layers.6.layer_output", "alias: canonical_name")
    check(np.array_equal(x[:], fb["activations/layers.6.layer_output"][:], equal_nan=True),
          "alias: blocks.6.hook_resid_post == layers.6.layer_output, bit for bit")
print("GPT-2 preset: blocks.6.hook_resid_post == layers.6.layer_output", flush=True)

# one prompt a batch without the scores (the attention path that keeps one head's scores at a
# time) and the token layout: the reference's values again
for name in ("gpt2_prefixed_f16", "neox_sequential_bf16"):
    d = f"{work}/{name}"
    cfg, w = load_checkpoint(f"{d}/model")
    acts = ["layers.*.layer_output", "layers.*.attention_head_outputs", "logits"]
    run(harvest, "run", write_job(f"{d}/job_b1.json", batch_size=1, activations=acts,
                                  output={"path": "b1.h5"}), "--quiet", check=0)
    run(harvest, "run", write_job(f"{d}/job_tok.json", batch_size=4, activations=acts,
                                  output={"path": "tok.h5", "layout": "token"}), "--quiet", check=0)
    with h5py.File(f"{d}/b1.h5", "r") as f, h5py.File(f"{d}/tok.h5", "r") as ft:
        lens, offs = f["prompts/length"][:], f["prompts/token_offset"][:]
        want = reference(cfg, w, [f["tokens/input_ids"][o:o + T] for T, o in zip(lens, offs)])
        for i, (T, o) in enumerate(zip(lens, offs)):
            for n in f["activations"]:
                axes = list(f["activations/" + n].attrs["semantic_shape"])
                compare(f"{name} {n} (a prompt a batch)", f["activations/" + n][i], want[i][n][0], axes, T)
                tok = ft["activations/" + n][o:o + T]
                close(tok, want[i][n][0], f"{name} {n} (token layout)", RTOL)
print("a prompt a batch without scores, and the token layout: the reference's values", flush=True)

# pipeline stages: mpirun -np S as S stages (GPT-2's positions are added by the first stage
# only; the stream is all a stage hands on) gives the np 1 output bit for bit
MPIRUN = shutil.which("mpirun")
for d, S in ((f"{work}/preset_gpt2", 3), (f"{work}/neox", 2)):
    if not MPIRUN:
        print("no mpirun: pipeline check skipped")
        break
    job = write_job(f"{d}/job_pp.json", batch_size=4, output={"path": "pp.h5"},
                    parallel={"pipeline_stages": S})
    p = subprocess.run([MPIRUN, "-np", str(S), harvest, "run", job, "--quiet"], env=MPI_ENV,
                       capture_output=True, text=True, timeout=300)
    run(harvest, "run", write_job(f"{d}/job_np1.json", batch_size=4, output={"path": "np1.h5"}),
        "--quiet", check=0)
    if check(p.returncode == 0, f"{d}: np {S} pipeline: {p.stderr[-500:]}"):
        check(output_diff(f"{d}/np1.h5", f"{d}/pp.h5", BOOKKEEPING | {"job"}) is None,
              f"{d}: {S} pipeline stages == np 1, bit for bit")
print("pipeline stages (GPT-2: 3, NeoX: 2) give the np 1 output bit for bit", flush=True)

# harvest plan on the published configs
for cfgname, params in (("gpt2.json", "124,439,808"), ("pythia-160m.json", "162,322,944")):
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref", "hf-configs", cfgname)
    out = run(harvest, "plan", path, check=0).stdout
    check(f"parameters: {params}" in out, f"plan {cfgname}: {params} parameters: {out}")
print("plan: gpt2 124,439,808 and pythia-160m 162,322,944 parameters", flush=True)


# ---- bad checkpoints: exit 1, the message names the file and the key or tensor
def bad(label, base, edit_cfg=None, edit_w=None, want=()):
    d = f"{work}/bad_{label}"
    shutil.copytree(f"{work}/{base}/model", f"{d}/model")
    if edit_cfg:
        cfg = json.load(open(f"{d}/model/config.json"))
        edit_cfg(cfg)
        json.dump(cfg, open(f"{d}/model/config.json", "w"))
    if edit_w:
        t = read_safetensors(f"{d}/model/model.safetensors")
        edit_w(t)
        write_safetensors(f"{d}/model/model.safetensors", {k: v.astype(np.float32) for k, v in t.items()}, "F32")
    write_prompts(f"{d}/prompts.jsonl", [3], seed=1, vocab=V)
    p = run(harvest, "run", write_job(f"{d}/job.json"), "--quiet")
    check(p.returncode == 1, f"bad {label}: exit {p.returncode}, expected 1")
    for s in want:
        check(s in p.stderr, f"bad {label}: the message names {s!r}: {p.stderr.strip()}")
    check("AH_ASSERT" not in p.stderr, f"bad {label}: no crash")


def set_key(k, v):
    return lambda c: c.__setitem__(k, v)


g, n = "gpt2", "neox"
bad("gpt2_missing", g, edit_w=lambda t: t.pop("h.1.mlp.c_fc.bias"), want=("model.safetensors", "h.1.mlp.c_fc.bias"))
bad("gpt2_conv1d_transposed", g, edit_w=lambda t: t.__setitem__("h.0.attn.c_attn.weight", t["h.0.attn.c_attn.weight"].T.copy()),
    want=("model.safetensors", "h.0.attn.c_attn.weight", "shape [96, 32], expected [32, 96]"))
bad("gpt2_no_wte", g, edit_w=lambda t: t.pop("wte.weight"), want=("transformer.wte.weight", "wte.weight"))
bad("gpt2_act", g, edit_cfg=set_key("activation_function", "quick_gelu"), want=("config.json", "activation_function", "quick_gelu"))
bad("gpt2_untied", g, edit_cfg=set_key("tie_word_embeddings", False), want=("config.json", "tie_word_embeddings"))
bad("gpt2_cross", g, edit_cfg=set_key("add_cross_attention", True), want=("config.json", "add_cross_attention"))
bad("gpt2_heads", g, edit_cfg=set_key("n_head", 5), want=("config.json", "n_head"))
bad("neox_missing", n, edit_w=lambda t: t.pop("embed_out.weight"), want=("model.safetensors", "embed_out.weight"))
bad("neox_shape", n, edit_w=lambda t: t.__setitem__("gpt_neox.layers.1.attention.query_key_value.weight",
                                                     t["gpt_neox.layers.1.attention.query_key_value.weight"].T.copy()),
    want=("model.safetensors", "gpt_neox.layers.1.attention.query_key_value.weight", "shape"))
bad("neox_rope", n, edit_cfg=set_key("rope_scaling", {"type": "dynamic", "factor": 2.0}),
    want=("config.json", "rope_scaling", "dynamic"))
bad("neox_act", n, edit_cfg=set_key("hidden_act", "gelu_10"), want=("config.json", "hidden_act", "gelu_10"))
bad("neox_pct", n, edit_cfg=set_key("rotary_pct", 0.375), want=("config.json", "rotary_pct"))
bad("neox_parallel_type", n, edit_cfg=set_key("use_parallel_residual", "yes"), want=("config.json", "use_parallel_residual"))
print("bad checkpoints: errors name the file and the key", flush=True)
finish()
