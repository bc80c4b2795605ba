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
and 2 stages equal np 1; an unknown or unfit max_norm_activation is an error naming the key.
Non-finite norms (a model whose values overflow in some contexts) are left out of the median,
dropped and warned of even with --quiet; a sample without a finite norm, and a selection that
keeps no token, are exit 1 naming the keys, with no output made. The pass's record
(OUT.parts/normguard.bin) is reused by --resume (no pass; a damaged record: the pass again, the
same output); the pass shows progress unless --quiet and stops within a batch on SIGTERM (exit 3,
then --resume gives the uninterrupted run's output)."""
import json
import os
import shutil
import signal
import struct
import subprocess
import time

import h5py
import numpy as np

from util import (BOOKKEEPING, MPI_ENV, Snapshot, args, check, finish, init_model, output_diff,
                  run, stop_mid_run, write_job)

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

# ---- SIGTERM mid-run, --resume: the same output, the pass's record reused ----
check(os.path.isfile(f"{g1}.parts/normguard.bin"), "the pass's record is kept with the output")
corpus(f"{work}/long.jsonl", 64, seed=12)  # about 45 batches of 2
jr = job("long_ref", "long.jsonl", sel, batch=2)
p = run(harvest, "run", jr)  # not quiet: the pass shows its progress
check(p.returncode == 0 and "[harvest] norm guard: " in p.stderr and "batches" in p.stderr,
      f"the pass's progress on stderr: exit {p.returncode}, {p.stderr[-600:]}")
long_ref = Snapshot(f"{work}/long_ref.h5")
jl = job("long_stop", "long.jsonl", sel, batch=2)
for damage in (False, True):
    errs = []  # a fresh --quiet run: its pass, then the SIGTERM 4 batches into the run
    rc = stop_mid_run(harvest, jl, f"{work}/long_stop.h5", after=5, errs=errs)
    check(rc == 3, f"SIGTERM: exit {rc}, expected 3")
    check("norm guard" not in errs[0], f"--quiet: no progress ({errs[0]})")
    rec = f"{work}/long_stop.h5.parts/normguard.bin"
    if damage and check(os.path.isfile(rec), "the pass's record, to damage"):
        with open(rec, "r+b") as f:  # one byte of a drop changed: the checksum refuses it
            f.seek(64)
            b = f.read(1)
            f.seek(64)
            f.write(bytes([b[0] ^ 1]))
    p = run(harvest, "run", jl, "--resume")
    reused = "is reused: no pass" in p.stderr and "[harvest] norm guard: " not in p.stderr
    check(p.returncode == 0 and reused != damage,
          f"--resume{' (damaged record)' if damage else ''}: exit {p.returncode}, the pass "
          f"{'not ' if reused else ''}run again: {p.stderr[-600:]}")
    d = output_diff(long_ref, f"{work}/long_stop.h5", BOOKKEEPING | {"job"})
    check(d is None, f"SIGTERM + --resume: differs from np 1 in {d}")
check(long_ref.attrs["n_tokens_dropped_norm"] > 0, "the long corpus drops tokens too")
print("SIGTERM + --resume == np 1: the pass's record reused (a damaged one: the pass again)",
      flush=True)

# ---- SIGTERM during the pass: exit 3 within a batch, then --resume == np 1 ----
for tries in range(3):
    shutil.rmtree(f"{work}/long_stop.h5.parts", ignore_errors=True)
    if os.path.exists(f"{work}/long_stop.h5"):
        os.remove(f"{work}/long_stop.h5")
    p = subprocess.Popen([harvest, "run", jl], stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    for line in p.stderr:  # the pass's first line, then the signal at once (the pass over the
        if "norm guard: a pass" in line:  # long corpus takes about 0.25 s on a fast machine)
            break
    p.send_signal(signal.SIGTERM)
    t_sig = time.time()
    err = p.communicate(timeout=120)[1]
    t_stop = time.time() - t_sig
    if "norm guard: median" not in err:
        break  # stopped in the pass (else it ended first: try again)
check(p.returncode == 3 and "during the norm guard's pass" in err and t_stop < 20 and
      not os.path.exists(f"{work}/long_stop.h5"),
      f"SIGTERM in the pass: exit {p.returncode} after {t_stop:.1f} s: {err[-600:]}")
run(harvest, "run", jl, "--resume", "--quiet", check=0)
d = output_diff(long_ref, f"{work}/long_stop.h5", BOOKKEEPING | {"job"})
check(d is None, f"SIGTERM in the pass + --resume: differs from np 1 in {d}")
print(f"SIGTERM in the pass: exit 3 after {t_stop:.1f} s; --resume == np 1", flush=True)
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

# ---- non-finite norms: left out of the median, dropped, warned of even with --quiet ----
def edit_model(src, dst, edits):
    """a copy of model src with float32 elements {(tensor, flat index): value} changed"""
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    with open(f"{dst}/model.safetensors", "r+b") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        for (t, i), v in edits.items():
            f.seek(8 + n + head[t]["data_offsets"][0] + 4 * i)
            f.write(struct.pack("<f", v))


BAD_ID = 100
edit_model(f"{work}/model", f"{work}/nanmodel",  # overflow in the contexts holding BAD_ID
           {("embed_tokens.weight", BAD_ID * 384): 1000.0,
            ("encoder.layers.0.norm2.weight", 0): 1e19})
edit_model(f"{work}/model", f"{work}/allnan", {("encoder.layers.0.norm2.weight", 0): 1e22})
rng = np.random.default_rng(14)
with open(f"{work}/nan.jsonl", "w") as f:
    for i in range(40):
        ids = rng.integers(3, 8192, int(rng.integers(3, 40))).tolist()
        if i in (0, 9, 23):
            ids[1] = BAD_ID
        f.write(json.dumps({"input_ids": ids}) + "\n")
jref = job("nan_ref", "nan.jsonl", {"skip_token_ids": [SEP]}, model="nanmodel")
p = run(harvest, "run", jref, "--quiet")
nref = jref[:-5] + ".h5"
# the write-time statistics leave the non-finite rows out, and say so even under --quiet
check(p.returncode == 0 and f"{GUARD}: " in p.stderr and "rows hold a NaN or an infinity" in
      p.stderr and "n_rows_nonfinite" in p.stderr,
      f"non-finite rows without the guard: exit {p.returncode}, a warning under --quiet: "
      f"{p.stderr.strip()}")
N = 40
with h5py.File(nref, "r") as f:
    nr = norms(f["activations"][GUARD][:])
    npairs = pairs(f)
bad = ~np.isfinite(nr)
check(0 < bad.sum() < len(nr) // 2 and bad[:N].any() and not bad[:N].all(),
      f"the edited model: {bad.sum()} of {len(nr)} norms non-finite, {bad[:N].sum()} in the sample")
fin = np.sort(nr[:N][~bad[:N]])
nmed = fin[(len(fin) - 1) // 2]
nsel = {"skip_token_ids": [SEP], "max_norm_multiple": 1e6, "max_norm_activation": GUARD,
        "max_norm_sample": N}
jn = job("nan_g", "nan.jsonl", nsel, model="nanmodel")
p = run(harvest, "run", jn, "--quiet")
check(p.returncode == 0 and "warning" in p.stderr and "select.max_norm_multiple" in p.stderr and
      f"{bad.sum()} chosen tokens" in p.stderr and f"{bad[:N].sum()} of them" in p.stderr,
      f"non-finite norms: exit {p.returncode}, a warning under --quiet: {p.stderr.strip()}")
with h5py.File(f"{work}/nan_g.h5", "r") as g:
    check(g.attrs["n_tokens_dropped_norm"] == bad.sum() and
          abs(g.attrs["norm_guard_median"] - nmed) <= 1e-12 * nmed and
          pairs(g) == [q for q, b in zip(npairs, bad) if not b],
          f"non-finite norms: dropped {g.attrs['n_tokens_dropped_norm']} (expected {bad.sum()}), "
          f"median {g.attrs['norm_guard_median']!r} (the finite sample's {nmed!r})")
print(f"non-finite norms: {bad.sum()} dropped and warned of, the median of the finite ones",
      flush=True)
for i, (label, model, s2) in enumerate((
        ("no finite norm in the sample", "allnan", nsel),
        ("a selection keeping no token", "model", {"skip_first": 16}),
        ("the same with the guard", "model", dict(nsel, skip_first=16)))):
    p = run(harvest, "run", job(f"none{i}", "nan.jsonl", s2, model=model), "--quiet")
    key = "select.max_norm_sample" if model == "allnan" else "select.skip_first"
    check(p.returncode == 1 and key in p.stderr and "select.max_norm_multiple" in p.stderr and
          not os.path.exists(f"{work}/none{i}.h5"),
          f"{label}: exit {p.returncode} naming {key}, no output: {p.stderr.strip()}")
print("no median, no token kept: exit 1 naming the keys, no output", flush=True)

# ---- bad values: exit 1 naming the key ----
for label, act in (("an unknown name", "encoder_9_nothing"), ("a key axis", "encoder_0_global_mask")):
    bad = dict(sel, max_norm_activation=act)
    p = run(harvest, "run", job("bad", "docs.jsonl", bad), "--overwrite")
    check(p.returncode == 1 and "select.max_norm_activation" in p.stderr,
          f"{label}: exit {p.returncode}, {p.stderr.strip()}")
    check(not os.path.exists(f"{work}/bad.h5"), f"{label}: no output made")
print("bad max_norm_activation: exit 1 naming the key", flush=True)
finish()
