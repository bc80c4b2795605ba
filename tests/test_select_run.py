"""`harvest run` with the job keys `select` and `statistics` (README "Statistics").

On the spec model and the Laguna M.1 preset, each over a packed corpus (`data.pack`, its BOS and
separator among `select.skip_token_ids`): no stored token has a skipped id; /tokens lists exactly
the stored tokens and the prompt layout marks the same (prompt, position) pairs in
/tokens/selected; tokens_per_context keeps min(k, eligible) tokens a context, the same pairs on
np 1, 2 replicas (also with gzip), 2 stages, 2 stages x 2 replicas, expert shards, another batch
size and after a SIGTERM + --resume; the selection's counts are root attributes; the write-time /stats equal
float64 numpy over the stored float32 rows to 1e-12 relative, are bit for bit the same on every
grid and after the resume, equal `harvest stats` on the finished output bit for bit, and equal
the prompt layout's; an output killed after its master was complete but before /stats gets
them on --resume; bad values are errors naming the key."""
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
SKIP = [BOS, SEP]
K = 5  # tokens_per_context


def corpus(path, n_docs, vocab, seed):
    """documents of 3..40 ids, with the BOS and separator ids appearing inside some of them"""
    rng = np.random.default_rng(seed)
    with open(path, "w") as f:
        for _ in range(n_docs):
            ids = rng.integers(3, vocab, int(rng.integers(3, 40))).tolist()
            if rng.random() < 0.3:
                ids[int(rng.integers(len(ids)))] = BOS
            f.write(json.dumps({"input_ids": ids}) + "\n")


def job(name, model, data, acts, layout="token", batch=3, stages=1, ep=1, gz=0, **extra):
    fields = dict(model=model, data={"path": data, "pack": {"separator": SEP, "bos": BOS}},
                  activations=acts, max_seq_len=16, batch_size=batch,
                  output={"path": f"{name}.h5", "layout": layout, "checkpoint_seconds": 0,
                          "compression": gz},
                  parallel={"pipeline_stages": stages, "expert_parallel": ep},
                  select={"skip_token_ids": SKIP, "tokens_per_context": K, "seed": 3})
    fields.update(extra)
    return write_job(f"{work}/{name}.json", **fields)


def diff(a, b):
    """output_diff (every dataset, /stats too), the job's text aside (its path and grid differ)"""
    return output_diff(a, b, BOOKKEEPING | {"job"})


def mpirun(np_, *a, timeout=600):
    if np_ == 0:
        return run(harvest, *a, timeout=timeout)
    return subprocess.run([MPIRUN, "-np", str(np_), harvest, *a], capture_output=True, text=True,
                          timeout=timeout, env=MPI_ENV)


def harvest_job(np_, jp, label):
    p = mpirun(np_, "run", jp, "--quiet")
    check(p.returncode == 0, f"{label}: exit {p.returncode}: {p.stderr[-800:]}")
    return jp[:-5] + ".h5"


def pairs(path):
    with h5py.File(path, "r") as f:
        return list(zip(f["tokens/prompt_index"][:].tolist(), f["tokens/position"][:].tolist()))


def stats_of(path):
    with h5py.File(path, "r") as f:
        if "stats" not in f:
            return {}
        return {(n, k): f["stats"][n][k][()] for n in f["stats"] for k in f["stats"][n]}


def same_stats(a, b):
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


M64 = (1 << 64) - 1


def mix64(x):  # jobs/select.c: splitmix64's output function on x + the golden gamma
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def chosen(ids, key, seed=3):
    """the positions tokens_per_context keeps of one context: the K smallest keys of
    (seed, key, position) among the eligible ones (ties: the lower position)"""
    eligible = [t for t, i in enumerate(ids) if i not in SKIP]
    k = lambda t: (mix64(mix64(mix64(seed) ^ (key & M64)) ^ t), t)
    return sorted(sorted(eligible, key=k)[:K])


def check_selection(label, tok, pro):
    """the token layout's stored tokens against the prompt layout's corpus and mask"""
    with h5py.File(tok, "r") as t, h5py.File(pro, "r") as p:
        ids = t["tokens/input_ids"][:]
        check(not np.isin(ids, SKIP).any(), f"{label}: a stored token has a skipped id")
        length, off = p["prompts/length"][:], p["prompts/token_offset"][:]
        all_ids, sel = p["tokens/input_ids"][:], p["tokens/selected"][:].astype(bool)
        want = [(q, s) for q in range(len(length)) for s in range(length[q]) if sel[off[q] + s]]
        check(pairs(tok) == want, f"{label}: token layout pairs == prompt layout's selected mask")
        # under pack the key is the context's prompt index (its documents' source index repeats)
        keyed = [(q, t) for q in range(len(length))
                 for t in chosen(all_ids[off[q]:off[q] + length[q]].tolist(), q)]
        check(want == keyed, f"{label}: the pairs are the K smallest keys (seed, prompt, position)")
        check(np.array_equal(ids, all_ids[sel]), f"{label}: stored ids are the corpus's")
        eligible = [int((~np.isin(all_ids[off[q]:off[q] + length[q]], SKIP)).sum())
                    for q in range(len(length))]
        per = np.bincount(t["tokens/prompt_index"][:], minlength=len(length))
        check(np.array_equal(per, np.minimum(eligible, K)), f"{label}: min(k, eligible) a context")
        toff = t["prompts/token_offset"][:]
        check(np.array_equal(toff, np.concatenate([[0], np.cumsum(per)[:-1]])),
              f"{label}: token_offset counts the stored rows")
        a = t.attrs
        check(a["n_tokens_selected"] == len(ids) and a["n_tokens_skipped_id"] ==
              int(np.isin(all_ids, SKIP).sum()) and a["n_tokens_not_chosen"] ==
              sum(eligible) - len(ids) and a["n_tokens_skipped_first"] == 0,
              f"{label}: the selection's counts in the root attributes")
        for n in t["activations"]:  # every stored row is written (no NaN row)
            check(not np.isnan(t["activations"][n][:]).any(), f"{label}: {n} has unwritten rows")


def check_numpy(label, tok):
    """write-time /stats against float64 numpy over the stored float32 rows"""
    with h5py.File(tok, "r") as f:
        names = [n for n in f["activations"] if f["activations"][n].dtype == np.float32]
        check(set(f["stats"]) == set(names), f"{label}: /stats for every float activation")
        worst = 0.0
        for n in names:
            x = f["activations"][n][:].astype(np.float64)
            x = x.reshape(len(x), -1)
            g = f["stats"][n]
            norms = np.sqrt((x * x).sum(1))
            ref = {"mean": x.mean(0), "var": x.var(0), "min": x.min(0), "max": x.max(0),
                   "norm_mean": norms.mean(), "norm_var": norms.var()}
            check(np.all(g["count"][()] == len(x)), f"{label}: {n} count")
            for k, want in ref.items():
                got = np.asarray(g[k][()]).reshape(np.shape(want))
                scale = max(np.abs(want).max(), 1e-30)
                err = np.abs(got - want).max() / scale
                worst = max(worst, err)
                check(err <= 1e-12, f"{label}: {n} {k}: relative error {err:.2e}")
            sae = g.attrs["sae_scale"]
            check(abs(sae - np.sqrt(x.shape[1]) / norms.mean()) <= 1e-12 * sae, f"{label}: {n} sae_scale")
        print(f"{label}: /stats == float64 numpy over the stored rows (worst {worst:.1e})", flush=True)


def check_recompute(label, tok):
    """`harvest stats` on a copy of the finished output gives the write-time bits (a copy under
    the same name in another folder: an output copies only as its two parts under its name)"""
    os.makedirs(os.path.join(os.path.dirname(tok), f"re_{label}"), exist_ok=True)
    cp = os.path.join(os.path.dirname(tok), f"re_{label}", os.path.basename(tok))
    shutil.copy(tok, cp)
    shutil.copytree(tok + ".parts", cp + ".parts")
    run(harvest, "stats", cp, "--quiet", check=0)
    check(same_stats(stats_of(tok), stats_of(cp)), f"{label}: harvest stats == write-time /stats")


# ---- the spec model ----
init_model(harvest, f"{work}/model", seed=5)
corpus(f"{work}/docs.jsonl", 40, 8192, seed=11)
SPEC = ["encoder_*_output", "encoder_1_q", "decoder_0_output"]
ref = harvest_job(0, job("spec1", "model", "docs.jsonl", SPEC), "spec np 1")
pro = harvest_job(0, job("spec_prompt", "model", "docs.jsonl", SPEC, layout="prompt",
                         statistics=True), "spec prompt layout")
check_selection("spec", ref, pro)
check_numpy("spec", ref)
check_recompute("spec", ref)
check(same_stats(stats_of(ref), stats_of(pro)), "spec: prompt layout /stats == token layout's")
with h5py.File(pro, "r") as f:
    check(f["tokens/selected"].dtype == np.uint8, "/tokens/selected is uint8")

# grids: every dataset, /stats included, bitwise the np 1 output
if MPIRUN:
    for name, np_, stages, gz in (("spec_dp2", 2, 1, 0), ("spec_pp2", 2, 2, 0),
                                  ("spec_pp2dp2", 4, 2, 0), ("spec_dp2_gzip", 2, 1, 1)):
        out = harvest_job(np_, job(name, "model", "docs.jsonl", SPEC, stages=stages, gz=gz), name)
        d = diff(ref, out)
        check(d is None, f"{name}: differs from np 1 in {d}")
        print(f"{name}: np {np_}, {stages} stage(s), gzip {gz} == np 1 (selection and /stats)",
              flush=True)
out = harvest_job(0, job("spec_b5", "model", "docs.jsonl", SPEC, batch=5), "batch 5")
check(pairs(out) == pairs(ref), "batch 5: the same (prompt, position) pairs")
check_numpy("spec batch 5", out)

# SIGTERM mid-run, --resume: the same output (stats from the partials of both runs' segments)
corpus(f"{work}/long.jsonl", 64, 8192, seed=12)  # about 45 batches of 2
jl1 = job("long1", "model", "long.jsonl", SPEC, batch=2)
long_ref = harvest_job(0, jl1, "long np 1")
jl = job("long_stop", "model", "long.jsonl", SPEC, batch=2)
rc = stop_mid_run(harvest, jl, f"{work}/long_stop.h5", after=5)  # 4 batches in
check(rc == 3, f"SIGTERM: exit {rc}, expected 3")
with h5py.File(f"{work}/long_stop.h5", "r") as f:
    check("stats" not in f and f.attrs["complete"] == 0, "a stopped output has no /stats yet")
run(harvest, "run", jl, "--resume", "--quiet", check=0)
d = diff(long_ref, f"{work}/long_stop.h5")
check(d is None, f"SIGTERM + --resume: differs from np 1 in {d}")
print("SIGTERM + --resume == np 1 (selection and /stats)", flush=True)

# complete master without /stats (a kill between the two): --resume adds them
with h5py.File(f"{work}/long_stop.h5", "a") as f:
    del f["stats"]
p = run(harvest, "run", jl, "--resume", "--quiet", check=0)
check(same_stats(stats_of(long_ref), stats_of(f"{work}/long_stop.h5")),
      "--resume of a complete output without /stats writes them")

# ---- Laguna (M.1 preset: dense and mixture blocks), expert shards ----
run(harvest, "init-model", "--family", "laguna", "--preset", "M.1", "--seed", "7",
    f"{work}/laguna", check=0)
corpus(f"{work}/lg.jsonl", 14, 512, seed=13)
LG = ["layers.*.layer_output", "layers.3.routed_output"]
lref = harvest_job(0, job("lg1", "laguna", "lg.jsonl", LG, batch=2), "laguna np 1")
lpro = harvest_job(0, job("lg_prompt", "laguna", "lg.jsonl", LG, layout="prompt", batch=2),
                   "laguna prompt layout")
check_selection("laguna", lref, lpro)
check_numpy("laguna", lref)
check_recompute("laguna", lref)
with h5py.File(lpro, "r") as f:
    check("stats" not in f, "the prompt layout takes no statistics unless asked")
if MPIRUN:
    for name, np_, stages, ep in (("lg_ep2", 2, 1, 2), ("lg_pp2ep2", 4, 2, 2), ("lg_dp2", 2, 1, 1)):
        out = harvest_job(np_, job(name, "laguna", "lg.jsonl", LG, batch=2, stages=stages, ep=ep),
                          name)
        d = diff(lref, out)
        check(d is None, f"{name}: differs from np 1 in {d}")
        print(f"laguna {name}: np {np_}, {stages} stage(s) x {ep} shard(s) == np 1", flush=True)

# ---- bad values: exit 1 naming the key ----
for label, sel, key in (
        ("tokens_per_context 0", {"tokens_per_context": 0}, "select.tokens_per_context"),
        ("an unknown id", {"skip_token_ids": [99999]}, "select.skip_token_ids"),
        ("max_norm_multiple 1", {"max_norm_multiple": 1, "max_norm_activation": "encoder_0_output"},
         "select.max_norm_multiple"),
        ("special without a tokenizer", {"skip_token_ids": "special"}, "select.skip_token_ids")):
    p = run(harvest, "run", job("bad", "model", "docs.jsonl", SPEC, select=sel), "--overwrite")
    check(p.returncode == 1 and key in p.stderr, f"{label}: exit {p.returncode}, {p.stderr.strip()}")
    check(not os.path.exists(f"{work}/bad.h5"), f"{label}: no output made")
p = run(harvest, "run", job("bad", "model", "docs.jsonl", SPEC, statistics=1), "--overwrite")
check(p.returncode == 1 and "statistics" in p.stderr, f"statistics 1: {p.stderr.strip()}")
print("bad select/statistics values: exit 1 naming the key", flush=True)

# inspect --stats prints them
p = run(harvest, "inspect", ref, "--stats", check=0)
check("encoder_3_output" in p.stdout and "sae_scale" in p.stdout and "largest means" in p.stdout,
      f"inspect --stats: {p.stdout[-400:]}")
p = run(harvest, "inspect", ref, "--stats", "encoder_1_q", check=0)
table = p.stdout.split("statistics of")[-1]  # after the summary of the datasets
check("encoder_1_q" in table and "encoder_3_output" not in table, f"inspect --stats NAME: {table}")
p = run(harvest, "inspect", lpro, "--stats")
check(p.returncode == 1 and "no statistics" in p.stderr, f"inspect --stats without: {p.stderr}")
# harvest export of a token-layout output written with "select": every stored token exactly once,
# with its real position (/tokens/position) and its stored row
shutil.rmtree(f"{work}/sel_shards", ignore_errors=True)
p = run(harvest, "export", ref, "--shards", f"{work}/sel_shards", "--quiet", check=0)
if check(p.returncode == 0, f"export of a selected output: exit {p.returncode}: {p.stderr[-400:]}"):
    m = json.load(open(f"{work}/sel_shards/manifest.json"))
    with h5py.File(ref, "r") as f:
        src = {(int(a), int(b)): t for t, (a, b) in enumerate(zip(f["tokens/prompt_index"][:],
                                                                  f["tokens/position"][:]))}
        ids = f["tokens/input_ids"][:]
        acts = {n: f["activations/" + n][:] for n in f["activations"]
                if f["activations/" + n].attrs["stored_axes"][0] in (b"token", "token")}
    got = []
    for split in ("train", "val"):
        for sh in m["splits"][split]["shards"]:
            with h5py.File(f"{work}/sel_shards/{sh['file']}", "r") as g:
                pi, pos = g["tokens/prompt_index"][:], g["tokens/position"][:]
                ts = [src.get((int(a), int(b)), -1) for a, b in zip(pi, pos)]
                got += ts
                ok = -1 not in ts and np.array_equal(g["tokens/input_ids"][:], ids[ts])
                for n in g["activations"]:
                    ok = ok and np.array_equal(g["activations/" + n][:], acts[n][ts])
                check(ok, f"export of a selected output: {sh['file']}: rows, ids and positions")
    check(sorted(got) == list(range(len(ids))),
          f"export of a selected output: every stored token once ({len(got)} of {len(ids)})")
    print("harvest export of a selected token-layout output: every stored token once, its position",
          flush=True)
finish()
