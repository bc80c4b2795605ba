"""The splice-in evaluation of the job key saes[i].evaluate (harvest/saeval.c, the write-back seam
of model/tap.h; docs/saes.md "Splice-in evaluation"): for a tiny Llama (init-model llama
Llama-3.2-1B), GPT-2 (gpt2 gpt2) and Qwen3-MoE (qwen3_moe Qwen3-MoE), SAEs written by `harvest
init-sae` on sites in block 0 (the forward spliced from the embeddings), in a later block (from
the saved stream), after the routed experts, and on final_norm_output (after the last block: the
head alone runs again):
- /saes/NAME's ce_clean, ce_spliced, ce_zero (corpus means of the next-token cross-entropy over
  every prompt's predicted tokens: token t predicts token t + 1 of the same prompt) and
  ce_loss_recovered = (ce_zero - ce_spliced) / (ce_zero - ce_clean), and n_ce_tokens, against
  tests/ref/hf's float64 forward of each prompt run with the same substitution (tests/ref/hf/
  common.py SUBST): the site's value replaced by tests/ref/sae_ref.py's float64 reconstruction
  of the reference's own activation, or by zeros; <= 1e-5 relative. Tolerance: harvest
  substitutes its float32 reconstruction of its float32 activation and runs the rest in float32,
  so the CEs carry the float32 rounding of the forward and of the reconstruction (the largest
  relative difference is printed; a few 1e-6 here), inside 1e-5. (A TopK selection that flipped
  between the two on a near tie would show as a larger difference: none does on these seeds.)
- with "select" (which chooses what is stored and encoded) the CE results are those without;
- the spec model (encdec, whose hand-off is two arrays): ce_clean equals numpy's CE over the
  stored logits, and the splice at an encoder and a decoder site changes the loss;
- harvest_data's Output.sae(NAME) has the CE attributes; the run's summary and `harvest inspect`
  print the CE loss recovered of each evaluated SAE;
- np 2 (replicas) and the MoE as 2 expert shards give /saes bit for bit as np 1; SIGKILL then
  --resume gives them bit for bit too, and a complete output whose CE attributes are missing gets
  them back from --resume;
- bad input, exit 1 naming the key and the file: "evaluate" not a bool, "evaluate" on the
  logits (nothing runs after them that the loss reads), on lm_head_output (emitted as a const
  view, not replaceable), with 2 pipeline stages.
Mutation caught: ev_write in harvest/saeval.c returning before the memcpy of the reconstruction
into the live buffer (the reconstruction not written back) makes ce_spliced equal ce_clean and
fails every ce_spliced, ce_loss_recovered and "the splice changes the loss" check (21
failures); ce_sum reading ids[t] for ids[t + 1] (the targets' shift off by one) fails 25."""
import json
import os
import shutil
import signal
import subprocess
import time

import h5py
import numpy as np

from util import (MPI_ENV, args, check, finish, reader, run, wait_started, write_job,
                  write_prompts)
import hf  # tests/ref/hf, on the path util makes
from hf import common as hfc
import sae_ref

harvest, work = args()
hd = reader()
MPIRUN = shutil.which("mpirun")
LENS = [5, 1, 9, 12, 3, 7, 16, 2, 11]
WORST = [0.0]  # the largest relative difference from numpy
FIELDS = ["ce_clean", "ce_spliced", "ce_zero", "ce_loss_recovered"]

# family, preset, SAEs: name -> (init-sae arguments, site)
MODELS = {
    "llama": ("llama", "Llama-3.2-1B", {
        "l0": (["--layout", "saelens", "--arch", "topk", "--k", "4", "--d-sae", "64"],
               "layers.0.layer_output"),
        "l1": (["--layout", "saelens", "--arch", "relu", "--d-sae", "48"], "layers.1.mlp_output"),
        "lf": (["--layout", "sparsify", "--arch", "topk", "--k", "6", "--d-sae", "40"],
               "final_norm_output")}),
    "gpt2": ("gpt2", "gpt2", {
        "ga": (["--layout", "saelens", "--arch", "topk", "--k", "4", "--d-sae", "64"],
               "layers.1.attention_output"),
        "gi": (["--layout", "gemmascope", "--arch", "jumprelu", "--d-sae", "48"],
               "layers.1.layer_input")}),
    "moe": ("qwen3_moe", "Qwen3-MoE", {
        "mr": (["--layout", "saelens", "--arch", "topk", "--k", "4", "--d-sae", "64"],
               "layers.2.routed_output"),
        "mo": (["--layout", "saelens", "--arch", "relu", "--d-sae", "48"],
               "layers.0.layer_output")}),
}


def setup(key):
    fam, preset, saes = MODELS[key]
    d = f"{work}/{key}"
    run(harvest, "init-model", "--family", fam, "--preset", preset, "--seed", "1", f"{d}/model",
        check=0)
    cfg = json.load(open(f"{d}/model/config.json"))
    C = cfg.get("hidden_size", cfg.get("n_embd"))
    write_prompts(f"{d}/prompts.jsonl", LENS, seed=5, vocab=cfg["vocab_size"])
    for name, (a, _) in saes.items():
        run(harvest, "init-sae", *a, "--d-in", str(C), "--seed", "3", f"{d}/sae-{name}", check=0)
    return d, cfg


def job(key, name, par=None, saes=None, extra=None):
    d = f"{work}/{key}"
    entries = saes if saes is not None else [
        {"path": f"sae-{n}", "on": on, "name": n, "evaluate": True}
        for n, (_, on) in MODELS[key][2].items()]
    entries = entries + [{"path": f"sae-{next(iter(MODELS[key][2]))}",
                          "on": MODELS[key][2][next(iter(MODELS[key][2]))][1], "name": "plain"}]
    fields = dict(model="model", data="prompts.jsonl", activations=["layers.0.layer_output"],
                  batch_size=2, saes=entries,
                  output={"path": f"{name}.h5", "checkpoint_seconds": 0}, parallel=par or {})
    fields.update(extra or {})
    return write_job(f"{d}/{name}.json", **fields)


def ce_of(logits, ids):
    """sum over t < T - 1 of -log softmax(logits[t])[ids[t + 1]], and T - 1"""
    z = logits[0]
    mx = z.max(-1, keepdims=True)
    lse = (mx + np.log(np.exp(z - mx).sum(-1, keepdims=True)))[:, 0]
    T = z.shape[0]
    return float(sum(lse[t] - z[t, ids[t + 1]] for t in range(T - 1))), T - 1


def reference(d, cfg, site, sae):
    """float64 (ce_clean, ce_spliced, ce_zero, n) of the corpus with the site replaced"""
    _, w = hf.load_checkpoint(f"{d}/model")
    prompts = [json.loads(l)["input_ids"] for l in open(f"{d}/prompts.jsonl")]
    sums, n = [0.0, 0.0, 0.0], 0

    def splice(name, v):
        if name != site:
            return v
        x = v[0]
        ip, ix, vals, _ = sae_ref.encode(sae, x)
        return sae_ref.decode(sae, x, ip, ix, vals)[None]

    for ids in prompts:
        for mode, sub in enumerate([None, splice, lambda name, v: 0 * v if name == site else v]):
            hfc.SUBST[0] = sub
            try:
                s, k = ce_of(hf.forward(cfg, w, [ids])[0]["logits"], ids)
            finally:
                hfc.SUBST[0] = None
            sums[mode] += s
        n += len(ids) - 1
    return [s / n for s in sums] + [n]


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


def check_numpy(key, d, cfg, path):
    with h5py.File(path, "r") as f:
        for name, (_, on) in MODELS[key][2].items():
            g = f[f"saes/{name}"]
            c, s, z, n = reference(d, cfg, on, sae_ref.load(f"{d}/sae-{name}"))
            got = [float(g.attrs[k]) for k in FIELDS]
            want = [c, s, z, (z - s) / (z - c)]
            for k, a, b in zip(FIELDS, got, want):
                WORST[0] = max(WORST[0], rel(a, b))
                check(rel(a, b) <= 1e-5, f"{key} {name} ({on}): {k} {a!r}, numpy {b!r} "
                      f"(rel {rel(a, b):.2e})")
            check(int(g.attrs["n_ce_tokens"]) == n, f"{key} {name}: n_ce_tokens "
                  f"{g.attrs['n_ce_tokens']}, want {n}")
            check(rel(got[1], got[0]) > 1e-6 and rel(got[2], got[0]) > 1e-6,
                  f"{key} {name}: the splice changes the loss ({got})")
        check("ce_clean" not in f["saes/plain"].attrs, f"{key}: an SAE without evaluate has no CE")


def ce_attrs(path):
    with h5py.File(path, "r") as f:
        return {n: {k: f[f"saes/{n}"].attrs[k] for k in f[f"saes/{n}"].attrs if k.startswith(
            ("ce_", "n_ce"))} for n in f["saes"]}


def same(a, b, label):
    x, y = ce_attrs(a), ce_attrs(b)
    check(x == y and any(x.values()), f"{label}: CE attributes differ: {x} vs {y}")


def mpirun(np_, *a):
    return subprocess.run([MPIRUN, "-np", str(np_), harvest, *a], capture_output=True, text=True,
                          timeout=600, env=dict(os.environ, **MPI_ENV))


# ---- each family against numpy ----
setups = {k: setup(k) for k in MODELS}
for key, (d, cfg) in setups.items():
    p = run(harvest, "run", job(key, "np1"), check=0)
    check_numpy(key, d, cfg, f"{d}/np1.h5")
    for name in MODELS[key][2]:
        check(f"harvest: sae {name}: CE loss recovered" in p.stderr,
              f"{key}: the summary names {name}'s CE loss recovered: {p.stderr[-400:]}")
    with h5py.File(f"{d}/np1.h5", "r") as f:
        r = hd.open_output(f"{d}/np1.h5").sae(next(iter(MODELS[key][2])))
        g = f[f"saes/{next(iter(MODELS[key][2]))}"]
        check(all(r[k] == g.attrs[k] for k in FIELDS + ["n_ce_tokens"]),
              f"{key}: harvest_data's sae() has the CE attributes")
    q = run(harvest, "inspect", f"{d}/np1.h5", check=0)
    check(all(f"sae {n}: CE loss recovered" in q.stdout for n in MODELS[key][2]),
          f"{key}: inspect prints the CE loss recovered: {q.stdout[-600:]}")

print(f"CE against numpy: worst relative difference {WORST[0]:.2e} (bound 1e-5)")

# ---- "select" chooses what is stored and encoded, not what is evaluated ----
d = setups["llama"][0]
run(harvest, "run", job("llama", "sel", extra={"select": {"skip_first": 1, "seed": 0,
                                                          "tokens_per_context": 3}}),
    "--quiet", check=0)
same(f"{d}/np1.h5", f"{d}/sel.h5", "with select")

# ---- the spec model (encdec: two hand-off arrays restored): the clean CE is the stored logits' --
ed = f"{work}/encdec"
run(harvest, "init-model", "--family", "encdec", "--seed", "1", f"{ed}/model", check=0)
write_prompts(f"{ed}/prompts.jsonl", LENS, seed=5, vocab=8192)
run(harvest, "init-sae", "--layout", "saelens", "--arch", "topk", "--k", "8", "--d-sae", "256",
    "--d-in", "384", "--seed", "3", f"{ed}/sae", check=0)
run(harvest, "run", write_job(
    f"{ed}/job.json", activations=["logits"], batch_size=2, output={"path": "out.h5"},
    saes=[{"path": "sae", "on": on, "name": on, "evaluate": True}
          for on in ["encoder_2_output", "decoder_1_ffn_output"]]), "--quiet", check=0)
with h5py.File(f"{ed}/out.h5", "r") as f:
    lens, offs = f["prompts/length"][:], f["prompts/token_offset"][:]
    tot, n = 0.0, 0
    for i, T in enumerate(lens):
        s_, k = ce_of(f["activations/logits"][i][None, :T].astype(np.float64),
                      f["tokens/input_ids"][offs[i]:offs[i] + T])
        tot, n = tot + s_, n + k
    for on in ["encoder_2_output", "decoder_1_ffn_output"]:
        a = f[f"saes/{on}"].attrs
        check(rel(float(a["ce_clean"]), tot / n) <= 1e-12 and int(a["n_ce_tokens"]) == n,
              f"encdec {on}: ce_clean {a['ce_clean']}, numpy over the stored logits {tot / n}")
        check(rel(float(a["ce_spliced"]), float(a["ce_clean"])) > 1e-6 and
              rel(float(a["ce_zero"]), float(a["ce_clean"])) > 1e-6,
              f"encdec {on}: the splice changes the loss")

# ---- replicas, expert shards ----
if MPIRUN:
    for key, np_, par, label in [("llama", 2, {}, "llama np 2"), ("gpt2", 2, {}, "gpt2 np 2"),
                                 ("moe", 2, {"expert_parallel": 2}, "moe 2 expert shards"),
                                 ("moe", 2, {}, "moe np 2")]:
        d = setups[key][0]
        name = f"g{np_}-{len(par)}"
        p = mpirun(np_, "run", job(key, name, par), "--quiet")
        if check(p.returncode == 0, f"{label}: exit {p.returncode}: {p.stderr[-600:]}"):
            same(f"{d}/np1.h5", f"{d}/{name}.h5", label)
else:
    print("no mpirun: the grid cases are not run")

# ---- SIGKILL, --resume ----
d = setups["llama"][0]
out = f"{d}/kill.h5"
LONG = [(7 * i) % 40 + 2 for i in range(120)]
write_prompts(f"{d}/long.jsonl", LONG, seed=6, vocab=setups["llama"][1]["vocab_size"])
run(harvest, "run", job("llama", "whole", extra={"data": "long.jsonl"}), "--quiet", check=0)
for attempt in range(3):
    q = subprocess.Popen([harvest, "run", job("llama", "kill", extra={"data": "long.jsonl"}),
                          "--quiet", "--overwrite"], stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    wait_started(out, q)
    time.sleep(0.3)
    q.send_signal(signal.SIGKILL)
    q.communicate(timeout=120)
    if q.returncode == -signal.SIGKILL:
        break
check(q.returncode == -signal.SIGKILL, f"killed: exit {q.returncode}")
run(harvest, "run", job("llama", "kill", extra={"data": "long.jsonl"}), "--resume", "--quiet",
    check=0)
same(f"{d}/whole.h5", out, "SIGKILL + --resume")
# a complete output whose CE attributes are missing (killed between the two final stores)
with h5py.File(out, "r+") as f:
    for n in f["saes"]:
        for k in [k for k in f[f"saes/{n}"].attrs if k.startswith(("ce_", "n_ce"))]:
            del f[f"saes/{n}"].attrs[k]
run(harvest, "run", job("llama", "kill", extra={"data": "long.jsonl"}), "--resume", "--quiet",
    check=0)
same(f"{d}/whole.h5", out, "CE attributes missing + --resume")

# ---- bad input: exit 1 naming the key and the file ----
site0 = MODELS["llama"][2]["l0"][1]
for label, saes, par, want in [
        ("evaluate not a bool", [{"path": "sae-l0", "on": site0, "name": "x", "evaluate": "yes"}],
         {}, '"saes[0].evaluate": expected true or false'),
        ("evaluate with 2 stages", [{"path": "sae-l0", "on": site0, "name": "x",
                                     "evaluate": True}], {"pipeline_stages": 2},
         '"saes[0].evaluate": the splice-in evaluation runs on one pipeline stage')]:
    jp = job("llama", "bad", par, saes)
    if par and not MPIRUN:
        continue
    p = mpirun(2, "run", jp, "--overwrite") if par else run(harvest, "run", jp, "--overwrite")
    check(p.returncode == 1 and jp in p.stderr and want in p.stderr,
          f"{label}: exit {p.returncode}, {p.stderr[-400:]}")
    check(not os.path.exists(f"{d}/bad.h5"), f"{label}: no output written")
# logits has the vocabulary's width, so an SAE of d_in = vocab on it: the evaluate check speaks
V = setups["llama"][1]["vocab_size"]
run(harvest, "init-sae", "--layout", "saelens", "--arch", "relu", "--d-sae", "8", "--d-in", str(V),
    "--seed", "2", f"{d}/sae-v", check=0)
for site, want in [("logits", "nothing runs after \"logits\""),
                   ("lm_head_output", "\"lm_head_output\" is emitted as a copy")]:
    jp = job("llama", "bad", {}, [{"path": "sae-v", "on": site, "name": "x", "evaluate": True}])
    p = run(harvest, "run", jp, "--overwrite", check=None)
    check(p.returncode == 1 and jp in p.stderr and '"saes[0].evaluate"' in p.stderr and
          want in p.stderr, f"evaluate on {site}: exit {p.returncode}, {p.stderr[-400:]}")

finish()
