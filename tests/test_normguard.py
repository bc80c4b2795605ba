"""`harvest run` with the norm guard (`select.max_norm_multiple`, README "Statistics").

On the spec model over a packed corpus (each context starts with a BOS, whose attention output's
norm is about twice the others'): a run without the guard gives every chosen token's norm of the
guarded activation (its stored float32 rows); the median is the lower median of the first N of
them; m is put between two norms well apart (so numpy's and C's last bits cannot flip a token);
the guarded run then stores exactly the tokens with norm <= m x median, their rows bit for bit
those of the run without the guard, records n_tokens_dropped_norm and norm_guard_median, and its
/stats are those of the stored rows (dropped tokens excluded); the prompt layout marks the same
tokens in /tokens/selected; np 2 replicas, 2 stages, batch size 5 and a SIGTERM + --resume give
the same output; on the Laguna M.1 preset (mixture blocks) the same drops, and 2 expert shards
and 2 stages equal np 1; an unknown or unfit max_norm_activation is an error naming the key."""
import json
import os
import shutil
import subprocess

import h5py
import numpy as np

from util import (BOOKKEEPING, MPI_ENV, args, check, finish, init_model, output_diff, run,
                  stop_mid_run, write_job)

harvest, work = args()
MPIRUN = shutil.which("mpirun")
BOS, SEP = 1, 2
GUARD = "encoder_2_attn_output"
ACTS = ["encoder_1_output", GUARD, "decoder_0_output"]


def corpus(path, n_docs, seed, vocab=8192):
    rng = np.random.default_rng(seed)
    with open(path, "w") as f:
        for _ in range(n_docs):
            ids = rng.integers(3, vocab, int(rng.integers(3, 40))).tolist()
            f.write(json.dumps({"input_ids": ids}) + "\n")


def job(name, data, sel, layout="token", batch=3, stages=1, model="model", acts=ACTS, ep=1):
    return write_job(f"{work}/{name}.json", model=model,
                     data={"path": data, "pack": {"separator": SEP, "bos": BOS}}, activations=acts,
                     max_seq_len=16, batch_size=batch,
                     output={"path": f"{name}.h5", "layout": layout, "checkpoint_seconds": 0},
                     parallel={"pipeline_stages": stages, "expert_parallel": ep}, select=sel)


def harvest_job(np_, jp, label):
    cmd = [harvest, "run", jp, "--quiet"]
    if np_:
        p = subprocess.run([MPIRUN, "-np", str(np_), *cmd], capture_output=True, text=True,
                           timeout=600, env=MPI_ENV)
    else:
        p = run(*cmd)
    check(p.returncode == 0, f"{label}: exit {p.returncode}: {p.stderr[-800:]}")
    return jp[:-5] + ".h5"


def pairs(f):
    return list(zip(f["tokens/prompt_index"][:].tolist(), f["tokens/position"][:].tolist()))


def norms(x):
    x = x.astype(np.float64).reshape(len(x), -1)
    return np.sqrt((x * x).sum(1))


def guard_for(ref, guard=GUARD):
    """(select with a guard, kept mask over ref's rows, median) from the unguarded output ref"""
    with h5py.File(ref, "r") as f:
        nr = norms(f["activations"][guard][:])
    lower = lambda n: np.sort(nr[:n])[(n - 1) // 2]  # the lower median of the first n tokens
    # N (max_norm_sample): one whose median differs from those of N - 1 and N + 1 tokens, so
    # that a sample one token short or long is seen
    N = next(n for n in range(30, 200) if lower(n - 1) != lower(n) != lower(n + 1))
    med = lower(N)
    r = np.sort(nr)
    gaps = [(r[i + 1] - r[i], i) for i in range(len(r) - 1) if r[i] > 1.4 * med]
    gap, i = max(gaps[:20])  # the widest gap among the 20 norms above 1.4 x median
    check(gap > 1e-6 * r[i], f"a gap between norms above 1.4 x median ({gap})")
    m = (r[i] + r[i + 1]) / 2 / med
    sel = {"skip_token_ids": [SEP], "max_norm_multiple": m, "max_norm_activation": guard,
           "max_norm_sample": N}
    return sel, nr <= m * med, med


# ---- the run without the guard, and the guarded one ----
init_model(harvest, f"{work}/model", seed=5)
corpus(f"{work}/docs.jsonl", 40, seed=11)
ref = harvest_job(0, job("ref", "docs.jsonl", {"skip_token_ids": [SEP]}), "without the guard")
sel, kept, med = guard_for(ref)
g1 = harvest_job(0, job("g1", "docs.jsonl", sel), "guarded np 1")
with h5py.File(ref, "r") as r, h5py.File(g1, "r") as g:
    n_drop = int((~kept).sum())
    check(0 < n_drop < len(kept) // 2, f"some tokens dropped ({n_drop} of {len(kept)})")
    ids = r["tokens/input_ids"][:]
    print(f"m = {sel['max_norm_multiple']:.4f}: {n_drop} of {len(kept)} dropped, "
          f"{int((ids[~kept] == BOS).sum())} of them BOS", flush=True)
    check((ids[~kept] == BOS).sum() == (ids == BOS).sum() > 0, "every BOS is dropped")
    check(pairs(g) == [p for p, k in zip(pairs(r), kept) if k],
          "stored (prompt, position) pairs: exactly those with norm <= m x median")
    for n in ACTS:
        check(np.array_equal(g["activations"][n][:], r["activations"][n][:][kept]),
              f"{n}: the stored rows are the unguarded run's kept rows, bit for bit")
    a = g.attrs
    check(a["n_tokens_dropped_norm"] == n_drop and a["n_tokens_selected"] == kept.sum() and
          a["n_tokens_skipped_id"] == r.attrs["n_tokens_skipped_id"],
          f"counts: dropped {a['n_tokens_dropped_norm']}, selected {a['n_tokens_selected']}")
    check(abs(a["norm_guard_median"] - med) <= 1e-12 * med,
          f"norm_guard_median {a['norm_guard_median']!r} == numpy's {med!r}")
    check("n_tokens_dropped_norm" not in r.attrs, "no guard: no guard attributes")
    toff = g["prompts/token_offset"][:]
    per = np.bincount(g["tokens/prompt_index"][:], minlength=len(toff))
    check(np.array_equal(toff, np.concatenate([[0], np.cumsum(per)[:-1]])), "token_offset")
    for n in ACTS:  # statistics over the stored rows only
        x = g["activations"][n][:].astype(np.float64).reshape(int(kept.sum()), -1)
        s = g["stats"][n]
        check(np.all(s["count"][()] == kept.sum()), f"{n}: /stats count excludes dropped tokens")
        err = np.abs(s["mean"][()].reshape(-1) - x.mean(0)).max() / np.abs(x.mean(0)).max()
        nm = abs(s["norm_mean"][()] - norms(x).mean()) / norms(x).mean()
        check(err <= 1e-12 and nm <= 1e-12, f"{n}: /stats mean, norm_mean ({err:.1e}, {nm:.1e})")
print("guarded run: exactly the tokens above m x median dropped; counts, median, /stats",
      flush=True)

pro = harvest_job(0, job("g_prompt", "docs.jsonl", sel, layout="prompt"), "prompt layout")
with h5py.File(pro, "r") as p, h5py.File(g1, "r") as g:
    ln, off, s = p["prompts/length"][:], p["prompts/token_offset"][:], p["tokens/selected"][:]
    want = [(q, t) for q in range(len(ln)) for t in range(ln[q]) if s[off[q] + t]]
    check(want == pairs(g), "prompt layout: /tokens/selected marks the guarded run's tokens")
    check(p.attrs["n_tokens_dropped_norm"] == n_drop, "prompt layout: the dropped count")


def same(label, out):
    d = output_diff(g1, out, BOOKKEEPING | {"job"})
    check(d is None, f"{label}: differs from np 1 in {d}")
    print(f"{label} == np 1", flush=True)


if MPIRUN:
    same("np 2 replicas", harvest_job(2, job("g_dp2", "docs.jsonl", sel), "np 2"))
    same("2 stages", harvest_job(2, job("g_pp2", "docs.jsonl", sel, stages=2), "2 stages"))
with h5py.File(harvest_job(0, job("g_b5", "docs.jsonl", sel, batch=5), "batch 5"), "r") as b, \
        h5py.File(g1, "r") as g:
    check(pairs(b) == pairs(g), "batch 5: the same tokens dropped")

# ---- SIGTERM mid-run, --resume: the same output ----
corpus(f"{work}/long.jsonl", 160, seed=12)
long_ref = harvest_job(0, job("long_ref", "long.jsonl", sel, batch=2), "long np 1")
jl = job("long_stop", "long.jsonl", sel, batch=2)
rc = stop_mid_run(harvest, jl, f"{work}/long_stop.h5")
check(rc == 3, f"SIGTERM: exit {rc}, expected 3")
run(harvest, "run", jl, "--resume", "--quiet", check=0)
d = output_diff(long_ref, f"{work}/long_stop.h5", BOOKKEEPING | {"job"})
check(d is None, f"SIGTERM + --resume: differs from np 1 in {d}")
with h5py.File(long_ref, "r") as f:
    check(f.attrs["n_tokens_dropped_norm"] > 0, "the long corpus drops tokens too")
print("SIGTERM + --resume == np 1", flush=True)
with h5py.File(f"{work}/long_stop.h5", "a") as f:  # as if the pass had found another median
    f.attrs["norm_guard_median"] = f.attrs["norm_guard_median"] * 1.5
p = run(harvest, "run", jl, "--resume", "--quiet")
check(p.returncode == 1 and "select.max_norm_multiple" in p.stderr and "--overwrite" in p.stderr,
      f"--resume with another median: exit {p.returncode}, {p.stderr.strip()}")

# ---- Laguna (M.1 preset: dense and mixture blocks): 2 expert shards and 2 stages == np 1 ----
run(harvest, "init-model", "--family", "laguna", "--preset", "M.1", "--seed", "7",
    f"{work}/laguna", check=0)
corpus(f"{work}/lg.jsonl", 14, 13, vocab=512)
LG = ["layers.*.layer_output"]
lg = dict(model="laguna", acts=LG, batch=2)
lsel, lkept, _ = guard_for(harvest_job(0, job("lg_ref", "lg.jsonl", {"skip_token_ids": [SEP]},
                                              **lg), "laguna without the guard"),
                           "layers.3.layer_output")
lg1 = harvest_job(0, job("lg1", "lg.jsonl", lsel, **lg), "laguna guarded np 1")
with h5py.File(lg1, "r") as f, h5py.File(f"{work}/lg_ref.h5", "r") as r:
    check(pairs(f) == [p for p, k in zip(pairs(r), lkept) if k] and
          f.attrs["n_tokens_dropped_norm"] == (~lkept).sum() > 0,
          "laguna: exactly the tokens above m x median dropped")
if MPIRUN:
    for name, np_, stages, ep in (("lg_ep2", 2, 1, 2), ("lg_pp2", 2, 2, 1)):
        out = harvest_job(np_, job(name, "lg.jsonl", lsel, stages=stages, ep=ep, **lg), name)
        d = output_diff(lg1, out, BOOKKEEPING | {"job"})
        check(d is None, f"laguna {name}: differs from np 1 in {d}")
        print(f"laguna {name}: {stages} stage(s) x {ep} shard(s) == np 1", flush=True)

# ---- bad values: exit 1 naming the key ----
for label, act in (("an unknown name", "encoder_9_nothing"), ("a key axis", "encoder_0_global_mask")):
    bad = dict(sel, max_norm_activation=act)
    p = run(harvest, "run", job("bad", "docs.jsonl", bad), "--overwrite")
    check(p.returncode == 1 and "select.max_norm_activation" in p.stderr,
          f"{label}: exit {p.returncode}, {p.stderr.strip()}")
    check(not os.path.exists(f"{work}/bad.h5"), f"{label}: no output made")
print("bad max_norm_activation: exit 1 naming the key", flush=True)
finish()
