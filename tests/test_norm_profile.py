"""The per-position norm profile (job key "norm_profile", harvest/normprofile.c, docs/output.md
"Norm profile"), spec model, 60 prompts of 0..43 tokens (one empty), batches of 2:
- against numpy float64 over the stored activation (the same values in "activations"): count and
  hist exact, max and the outliers (prompt, position, token id, norm; ties to the smaller
  (prompt, position)) exact or <= 1e-12 relative, sum and sum_sq <= 1e-12 relative; hist_edges
  2^(k/4), k = -32..96; n_nan 0; max NaN where count is 0; a value profiled but not stored
  (encoder_0_norm2) counts what the stored ones count, and so does one deeper than every stored
  value (decoder_0_output: the job runs the blocks up to it);
- with "select" (prompt layout, /tokens/selected): only the chosen tokens;
- the token layout gives the prompt layout's profile, bit for bit;
- np 1 = np 2 (replicas) = 2 pipeline stages = 2 x 2, bit for bit (values of both stages);
- SIGTERM then --resume, and SIGKILL then --resume: the uninterrupted run's profile, bit for bit;
  a complete output without /norm_profile (killed before it was added) gets it from --resume;
- harvest_data norm_profile() and the `harvest inspect` line;
- bad input, exit 1 naming the key and value: an unknown name, a (batch, head, sequence, dim)
  value, an int64 mask, attention probabilities (a key axis), not an array, a value of a pipeline
  stage that stores nothing.
Mutation caught: part_merge adding only the last batch's counts (total[t] = part[t]) fails the
count, sum and grid checks."""
import json
import os
import shutil
import signal
import subprocess

import h5py
import numpy as np

from util import (MPI_ENV, args, check, finish, init_model, reader, run, stop_mid_run,
                  wait_segments, write_job, write_prompts)

harvest, work = args()
hd = reader()
MPIRUN = shutil.which("mpirun")
STORED = ["encoder_0_output", "encoder_1_ffn_output"]
PROFILED = ["encoder_0_output", "encoder_0_norm2", "encoder_1_ffn_output"]
K, T = 32, 40
SEL = {"skip_first": 1, "seed": 0, "tokens_per_context": 8}


def job(name, stages=1, layout="prompt", sel=None, prof=PROFILED, acts=STORED):
    extra = {"select": sel} if sel else {}
    if prof is not None:
        extra["norm_profile"] = prof
    return write_job(f"{work}/{name}.json", model="model", data="prompts.jsonl",
                     activations=list(acts), max_seq_len=T, batch_size=2,
                     output={"path": f"{name}.h5", "checkpoint_seconds": 0, "layout": layout},
                     parallel={"pipeline_stages": stages}, **extra)


def mpirun(np_, *a):
    return subprocess.run([MPIRUN, "-np", str(np_), harvest, *a], env=MPI_ENV,
                          capture_output=True, text=True, timeout=600)


def profile_groups(path):
    """{stored name: {dataset or @attribute: array}} of /norm_profile"""
    out = {}
    with h5py.File(path, "r") as f:
        for n, g in f.get("norm_profile", {}).items():
            d = {k: g[k][()] for k in g}
            d.update({"@" + k: g.attrs[k] for k in g.attrs})
            out[n] = d
    return out


def same_profile(a, b, label):
    pa, pb = profile_groups(a), profile_groups(b)
    ok = check(sorted(pa) == sorted(pb), f"{label}: profiled names {sorted(pa)} vs {sorted(pb)}")
    for n in pa if ok else []:
        for k in pa[n]:
            x, y = np.asarray(pa[n][k]), np.asarray(pb[n].get(k))
            same = x.dtype == y.dtype and x.shape == y.shape and \
                np.array_equal(x, y, equal_nan=x.dtype.kind == "f")
            if not check(same, f"{label}: /norm_profile/{n} {k} differs"):
                return False
    return ok


def reference(path, name, selected):
    """numpy float64 profile of the stored activation name of the output at path"""
    o = hd.open_output(path)
    with h5py.File(path, "r") as f:
        ids = f["tokens/input_ids"][:]
        sel = f["tokens/selected"][:] if selected else None
    off = o.token_offset
    norms = []  # (norm, prompt, position, token)
    for p in range(o.n_prompts):
        x = o.prompt(name, p).astype(np.float64)
        n = np.sqrt((x * x).sum(axis=1))
        for t in range(len(n)):
            if sel is None or sel[off[p] + t]:
                norms.append((n[t], p, t, int(ids[off[p] + t])))
    o.close()
    nv = np.array([r[0] for r in norms])
    pos = np.array([r[2] for r in norms])
    ref = {"count": np.bincount(pos, minlength=T).astype(np.int64),
           "sum": np.bincount(pos, nv, minlength=T), "sum_sq": np.bincount(pos, nv * nv, minlength=T)}
    mx = np.full(T, np.nan)
    for t in range(T):
        if (pos == t).any():
            mx[t] = nv[pos == t].max()
    ref["max"] = mx
    top = sorted(norms, key=lambda r: (-r[0], r[1], r[2]))[:K]
    ref["outlier_norm"] = np.array([r[0] for r in top])
    ref["outlier_prompt"] = np.array([r[1] for r in top])
    ref["outlier_position"] = np.array([r[2] for r in top])
    ref["outlier_token"] = np.array([r[3] for r in top])
    return ref, nv


def check_against_numpy(path, selected, label):
    prof = hd.open_output(path)
    names = prof.norm_profile()
    check(names == sorted(PROFILED), f"{label}: norm_profile() lists {names}")
    counts = {}
    for name in PROFILED:
        got = prof.norm_profile(name)
        counts[name] = got["count"]
        check(got["value"] == name, f"{label}: {name}: value attribute {got['value']}")
        edges = got["hist_edges"]
        want_edges = 2.0 ** (np.arange(-32, 97) / 4)
        check(edges.shape == (129,) and np.allclose(edges, want_edges, rtol=1e-15, atol=0),
              f"{label}: {name}: hist_edges")
        check(got["n_nan"] == 0, f"{label}: {name}: n_nan {got['n_nan']}")
        if name not in STORED:
            continue
        ref, nv = reference(path, name, selected)
        check(nv.size > K, f"{label}: {name}: {nv.size} tokens (more than K)")
        check(np.array_equal(got["count"], ref["count"]), f"{label}: {name}: count")
        for k in ("sum", "sum_sq"):
            e = np.abs(got[k] - ref[k]).max() / np.abs(ref[k]).max()
            check(e <= 1e-12, f"{label}: {name}: {k} relative error {e:.2e}")
        fin = ~np.isnan(ref["max"])
        check(np.array_equal(np.isnan(got["max"]), ~fin), f"{label}: {name}: max NaN where empty")
        check(np.allclose(got["max"][fin], ref["max"][fin], rtol=1e-12, atol=0),
              f"{label}: {name}: max")
        hist = np.bincount(np.searchsorted(edges, nv, side="right"), minlength=130)
        check(np.array_equal(got["hist"], hist), f"{label}: {name}: hist")
        check(got["hist"].sum() == nv.size, f"{label}: {name}: hist total")
        for k in ("outlier_prompt", "outlier_position", "outlier_token"):
            check(np.array_equal(got[k], ref[k]), f"{label}: {name}: {k}")
        check(np.allclose(got["outlier_norm"], ref["outlier_norm"], rtol=1e-12, atol=0),
              f"{label}: {name}: outlier_norm")
        check(np.all(np.diff(got["outlier_norm"]) <= 0), f"{label}: {name}: outliers sorted")
    prof.close()
    check(np.array_equal(counts["encoder_0_norm2"], counts["encoder_0_output"]),
          f"{label}: the unstored value counts what the stored ones count")


init_model(harvest, f"{work}/model", seed=5)
write_prompts(f"{work}/prompts.jsonl", [0] + [(29 * i) % 40 + 4 for i in range(59)], seed=3)

# ---- one rank, against numpy; with select; the token layout ----
run(harvest, "run", job("ref"), "--quiet", check=0)
ref = f"{work}/ref.h5"
check_against_numpy(ref, False, "np 1")
p = run(harvest, "inspect", ref, check=0)
check(f"norm profile: {', '.join(sorted(PROFILED))}" in p.stdout,
      f"inspect lists the profiled values: {p.stdout[-300:]}")
run(harvest, "run", job("sel", sel=SEL), "--quiet", check=0)
check_against_numpy(f"{work}/sel.h5", True, "select")
run(harvest, "run", job("tok", layout="token"), "--quiet", check=0)
same_profile(ref, f"{work}/tok.h5", "token layout")

# a value deeper than every stored one: the job runs the blocks up to it
run(harvest, "run", job("deep", prof=["decoder_0_output"]), "--quiet", check=0)
with h5py.File(ref, "r") as f:
    want_count = f["norm_profile/encoder_0_output/count"][:]
with h5py.File(f"{work}/deep.h5", "r") as f:
    g = f["norm_profile/decoder_0_output"]
    check(np.array_equal(g["count"][:], want_count) and g["hist"][:].sum() == want_count.sum()
          and np.isfinite(g["sum"][:]).all() and g["sum"][:].sum() > 0,
          "a deeper unstored value: the stored values' counts, finite sums")

# ---- grids ----
if MPIRUN:
    for label, np_, stages in [("np 2", 2, 1), ("2 stages", 2, 2), ("2 x 2", 4, 2)]:
        name = f"grid{np_}s{stages}"
        p = mpirun(np_, "run", job(name, stages=stages), "--quiet")
        if check(p.returncode == 0, f"{label}: exit {p.returncode}: {p.stderr[-600:]}"):
            same_profile(ref, f"{work}/{name}.h5", label)
else:
    print("no mpirun: the grid cases are not run")

# ---- stopped and killed, resumed ----
out = f"{work}/stop.h5"
rc = stop_mid_run(harvest, job("stop"), out, after=4)  # 3 of its 30 batches done
check(rc == 3, f"stopped: exit {rc}")
run(harvest, "run", job("stop"), "--resume", "--quiet", check=0)
same_profile(ref, out, "SIGTERM + --resume")
# killed after the complete master, before its /norm_profile: a --resume adds it
with h5py.File(out, "r+") as f:
    del f["norm_profile"]
p = run(harvest, "run", job("stop"), "--resume", check=0)
check("already complete" in p.stderr, f"complete output: {p.stderr[-300:]}")
same_profile(ref, out, "/norm_profile missing + --resume")

out = f"{work}/kill.h5"
for attempt in range(3):
    shutil.rmtree(out + ".parts", ignore_errors=True)  # segments of a try before are not counted
    if os.path.exists(out):
        os.remove(out)
    q = subprocess.Popen([harvest, "run", job("kill"), "--quiet", "--overwrite"],
                         stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    wait_segments(out, q, 5)  # 4 of its 30 batches done
    q.send_signal(signal.SIGKILL)
    q.communicate(timeout=120)
    if q.returncode == -signal.SIGKILL:
        break
check(q.returncode == -signal.SIGKILL, f"killed: exit {q.returncode}")
run(harvest, "run", job("kill"), "--resume", "--quiet", check=0)
same_profile(ref, out, "SIGKILL + --resume")

# ---- bad input: exit 1 naming the key and the value, nothing written ----
BAD = [("unknown", ["encoder_0_outptu"], '"norm_profile[0]": "encoder_0_outptu"'),
       ("heads", ["encoder_0_q"], '"norm_profile": "encoder_0_q"'),
       ("int64", ["encoder_0_global_mask"], '"norm_profile": "encoder_0_global_mask"'),
       ("key", ["encoder_0_attn_probs"], '"norm_profile": "encoder_0_attn_probs"'),
       ("string", "encoder_0_output", '"norm_profile": expected an array')]
for name, prof, want in BAD:
    p = run(harvest, "run", job("bad-" + name, prof=prof), "--quiet")
    check(p.returncode == 1 and want in p.stderr,
          f"bad {name}: exit {p.returncode}, {p.stderr.strip()[-300:]}")
    check(not os.path.exists(f"{work}/bad-{name}.h5"), f"bad {name}: no output written")
if MPIRUN:  # stage 0 of two stores nothing: its value has no segments to go to
    p = mpirun(2, "run", job("bad-stage", stages=2, prof=["encoder_0_output"],
                             acts=["encoder_1_ffn_output"]), "--quiet")
    check(p.returncode == 1 and '"encoder_0_output" is computed by pipeline stage 0' in p.stderr,
          f"a stage storing nothing: exit {p.returncode}, {p.stderr.strip()[-300:]}")
    check(not os.path.exists(f"{work}/bad-stage.h5"), "a stage storing nothing: no output")

finish()
