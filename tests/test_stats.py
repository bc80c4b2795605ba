"""`harvest stats OUT.h5`: per-feature statistics recomputed from a finished output.

Checks: the stored /stats equal a float64 numpy computation over the stored float32 token rows to
1e-12 relative, and bit for bit the documented fold (a Welford partial per batch of batch_size
prompts, rows in prompt then position order, merged with Chan's formulas in batch order, as
io/stats.c does); the prompt layout (head-split values transposed to token rows) gives the same
bits as the token layout; float16 storage is taken as stored; the master is replaced whole and
keeps every other dataset and attribute; a second run gives the same bits and --names keeps the
other statistics; an incomplete output, a name matching nothing, an activation without token rows
a lost segment and a file that is no output are refused, naming them, with the file unchanged;
a NaN row is left out whole, counted and warned of; a --resume of
the complete output keeps them; --print."""
import hashlib
import math
import os
import re
import shutil

import h5py
import numpy as np

from util import args, check, finish, init_model, output_diff, run, write_job, write_prompts

harvest, work = args()
init_model(harvest, f"{work}/model", seed=5)
write_prompts(f"{work}/prompts.jsonl", [5, 1, 17, 0, 9, 2, 12, 30, 4], seed=5)
ACTS = ["token_embeddings", "encoder_*_output", "encoder_1_q", "decoder_0_ffn_activation"]
B = 3  # batch_size: batches of 3, 3 and 2 prompts


def harvest_out(name, acts=ACTS, batch=B, **out):
    o = {"path": f"{name}.h5"}
    o.update(out)
    # written without write-time statistics (test_select_run checks those): `harvest stats` adds them
    job = write_job(f"{work}/{name}.json", activations=acts, batch_size=batch, output=o,
                    statistics=False)
    run(harvest, "run", job, "--quiet", check=0)
    return f"{work}/{name}.h5"


def sha(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def token_rows(f, name):
    """the stored rows of an activation as (n_tokens, features) float32, in token order"""
    d = f["activations/" + name]
    axes = list(d.attrs["stored_axes"])
    if axes[0] == "token":
        x = d[:]
        return x.reshape(len(x), -1)
    seq = [i for i, a in enumerate(axes) if a in ("sequence", "seq", "query")][0]
    rows = []
    for p, T in enumerate(f["prompts/length"][:]):
        r = np.moveaxis(d[p], seq - 1, 0)[:T]  # (T, ...) with the other axes in order
        rows.append(r.reshape(T, -1))
    return np.concatenate(rows)


def welford(x):
    """io/stats.c's stats_add_rows, operation for operation, on float32 rows x (n, F)"""
    F = x.shape[1]
    s = dict(n=0, mean=np.zeros(F), m2=np.zeros(F), min=np.full(F, np.inf),
             max=np.full(F, -np.inf), nm=0.0, nm2=0.0)
    for row in x.astype(np.float64):
        ss = np.cumsum(row * row)[-1]  # a sequential sum, as the C loop
        if not math.isfinite(ss):
            continue
        s["n"] += 1
        inv = 1.0 / s["n"]
        d = row - s["mean"]
        s["mean"] = s["mean"] + d * inv
        s["m2"] = s["m2"] + d * (row - s["mean"])
        s["min"], s["max"] = np.minimum(s["min"], row), np.maximum(s["max"], row)
        norm = math.sqrt(ss)
        dn = norm - s["nm"]
        s["nm"] = s["nm"] + dn * inv
        s["nm2"] = s["nm2"] + dn * (norm - s["nm"])
    return s


def chan(a, b):
    """io/stats.c's stats_merge"""
    if b["n"] == 0:
        return a
    if a["n"] == 0:
        return dict(b)
    na, nb = float(a["n"]), float(b["n"])
    n = na + nb
    wb, wab = nb / n, na * nb / n
    d = b["mean"] - a["mean"]
    dn = b["nm"] - a["nm"]
    return dict(n=a["n"] + b["n"], mean=a["mean"] + d * wb, m2=a["m2"] + (b["m2"] + d * d * wab),
                min=np.minimum(a["min"], b["min"]), max=np.maximum(a["max"], b["max"]),
                nm=a["nm"] + dn * wb, nm2=a["nm2"] + (b["nm2"] + dn * dn * wab))


def fold(f, x, batch):
    """partials per batch of `batch` prompts, merged in batch order"""
    off, L = f["prompts/token_offset"][:], f["prompts/length"][:]
    tot = welford(x[:0])
    for p0 in range(0, len(L), batch):
        p1 = min(p0 + batch, len(L))
        tot = chan(tot, welford(x[off[p0]:off[p1 - 1] + L[p1 - 1]]))
    return tot


def check_stats(path, label, exact=True, batch=B):
    with h5py.File(path, "r") as f:
        names = sorted(f["stats"])
        for name in names:
            g, x = f["stats/" + name], token_rows(f, name)
            fshape = f["activations/" + name].shape[1:]
            if f["activations/" + name].attrs["stored_axes"][0] == "prompt":
                axes = list(f["activations/" + name].attrs["stored_axes"])
                fshape = tuple(n for n, a in zip(f["activations/" + name].shape, axes)
                               if a not in ("prompt", "sequence", "seq", "query"))
            x64 = x.astype(np.float64)
            norms = np.sqrt((x64 * x64).sum(1))
            want = dict(mean=x64.mean(0), var=x64.var(0), min=x64.min(0), max=x64.max(0))
            check(g["mean"].shape == fshape, f"{label} {name}: stats shape {g['mean'].shape} "
                  f"is the features' shape {fshape}")
            check((g["count"][:] == len(x)).all(), f"{label} {name}: count {len(x)}")
            sd = np.sqrt(want["var"])
            for k in ("mean", "var", "min", "max"):
                got = g[k][:].reshape(-1)
                scale = np.maximum(np.abs(want[k]), sd) if k != "var" else want["var"]
                err = np.abs(got - want[k])
                check((err <= 1e-12 * scale).all(),
                      f"{label} {name}: {k} within 1e-12 relative (worst "
                      f"{(err / np.maximum(scale, 1e-300)).max():.2e})")
            for k, w in (("norm_mean", norms.mean()), ("norm_var", norms.var())):
                check(abs(g[k][()] - w) <= 1e-12 * w, f"{label} {name}: {k} {g[k][()]} vs {w}")
            d = x.shape[1]
            check(g.attrs["sae_scale"] == math.sqrt(d) / g["norm_mean"][()],
                  f"{label} {name}: sae_scale = sqrt(d) / norm_mean")
            check(g.attrs["n_rows_nonfinite"] == 0, f"{label} {name}: no non-finite rows")
            if exact:
                s = fold(f, x, batch)
                same = (np.array_equal(g["mean"][:].reshape(-1), s["mean"])
                        and np.array_equal(g["var"][:].reshape(-1), s["m2"] / s["n"])
                        and g["norm_mean"][()] == s["nm"] and g["norm_var"][()] == s["nm2"] / s["n"])
                check(same, f"{label} {name}: bit for bit the fold of batch partials")
    return names


# ---- token layout, float32 ----
tok = harvest_out("tok", layout="token")
before = f"{work}/tok-before.h5"
shutil.copy(tok, before)  # beside the master: the same virtual sources
p = run(harvest, "stats", tok, check=0)
check("stats: encoder_0_output:" in p.stderr, "a line per activation")
names = check_stats(tok, "token")
with h5py.File(tok, "r") as f:
    want = sorted(n for n in f["activations"])
check(names == want, f"every activation has statistics: {names}")
check(output_diff(before, tok) is None, "the master keeps every dataset and attribute")
check(not os.path.exists(tok + ".tmp"), "no temporary left beside the master")
first = {n: h5py.File(tok, "r")["stats/" + n + "/mean"][:] for n in names}

# a second run: the same bits; --names replaces only its own
run(harvest, "stats", tok, "--quiet", "--names", "encoder_0_*,token_embeddings", check=0)
with h5py.File(tok, "r") as f:
    check(sorted(f["stats"]) == names, "--names keeps the other statistics")
    check(all(np.array_equal(f["stats/" + n + "/mean"][:], first[n]) for n in names),
          "recomputed statistics are the same bits")

# a --resume of the complete output leaves the master, statistics included, as it is
h = sha(tok)
run(harvest, "run", f"{work}/tok.json", "--resume", "--quiet", check=0)
check(sha(tok) == h, "--resume of a complete output keeps the master with its statistics")

# ---- prompt layout (head-split values transposed): the same bits as the token layout ----
pr = harvest_out("pr", acts=ACTS + ["decoder_2_attn_probs"])
run(harvest, "stats", pr, "--quiet", check=0)
check_stats(pr, "prompt")
with h5py.File(pr, "r") as a, h5py.File(tok, "r") as b:
    check(sorted(a["stats"]) == names, "prompt layout: attention probabilities (a key axis) left out")
    for n in names:
        for k in ("count", "mean", "var", "min", "max", "norm_mean", "norm_var"):
            check(np.array_equal(a["stats/" + n + "/" + k][()], b["stats/" + n + "/" + k][()]),
                  f"prompt layout {n}/{k}: the token layout's bits")

# another batch size: other partials, the same values to 1e-12
b5 = harvest_out("b5", acts=["encoder_3_output"], batch=5, layout="token")
run(harvest, "stats", b5, "--quiet", check=0)
check_stats(b5, "batch 5", batch=5)

# float16 storage: the statistics of the stored (rounded) values
f16 = harvest_out("f16", acts=["encoder_2_output", "encoder_1_q"], layout="token", dtype="float16")
run(harvest, "stats", f16, "--quiet", check=0)
check_stats(f16, "float16")

# ---- refusals: exit 1, naming the file or the name, the file unchanged ----
inc = f"{work}/inc.h5"
shutil.copy(before, inc)
with h5py.File(inc, "r+") as f:
    f.attrs["complete"] = 0
h = sha(inc)
p = run(harvest, "stats", inc, check=1)
check("inc.h5" in p.stderr and "incomplete" in p.stderr and "--resume" in p.stderr,
      f"an incomplete output is refused, naming it: {p.stderr.strip()}")
check(sha(inc) == h, "the incomplete output is unchanged")
h = sha(pr)
p = run(harvest, "stats", pr, "--names", "encoder_0_output,nothing_*", check=1)
check('"nothing_*" matches no activation' in p.stderr, f"an unknown name: {p.stderr.strip()}")
p = run(harvest, "stats", pr, "--names", "decoder_2_attn_probs", check=1)
check("decoder_2_attn_probs" in p.stderr and "no token rows" in p.stderr,
      f"an activation without token rows: {p.stderr.strip()}")
check(sha(pr) == h, "refused runs leave the output unchanged")
p = run(harvest, "stats", f"{work}/prompts.jsonl", check=1)
check("prompts.jsonl" in p.stderr, f"not an output: {p.stderr.strip()}")
run(harvest, "stats", check=1)

# a lost segment (its rows would read as NaN through the master): refused, naming it
dmg = harvest_out("dmg", acts=["encoder_3_output"], layout="token")
segs = sorted(n for n in os.listdir(dmg + ".parts") if n.startswith("seg-"))
os.rename(f"{dmg}.parts/{segs[0]}", f"{work}/lost.h5")
h = sha(dmg)
p = run(harvest, "stats", dmg, check=1)
check("damaged" in p.stderr and segs[0] in p.stderr, f"a lost segment is named: {p.stderr.strip()}")
check(sha(dmg) == h, "the damaged output is unchanged")
# a NaN in a stored row (as a model's NaN would be): that row left out whole, counted, warned of
os.rename(f"{work}/lost.h5", f"{dmg}.parts/{segs[0]}")
with h5py.File(dmg, "r") as f:
    v = f["activations/encoder_3_output"].virtual_sources()[0]
    x = token_rows(f, "encoder_3_output")
with h5py.File(os.path.join(work, v.file_name), "r+") as seg:
    seg[v.dset_name][4, 7] = np.nan
p = run(harvest, "stats", dmg, "--quiet", check=0)
check("warning" in p.stderr and "encoder_3_output" in p.stderr and "1 rows" in p.stderr,
      f"NaN rows are warned of even with --quiet: {p.stderr.strip()}")
with h5py.File(dmg, "r") as f:
    g = f["stats/encoder_3_output"]
    keep = np.delete(x, 4, axis=0).astype(np.float64)
    check(g.attrs["n_rows_nonfinite"] == 1 and (g["count"][:] == len(keep)).all(),
          "the NaN row is counted in n_rows_nonfinite, not in count")
    err = np.abs(g["mean"][:] - keep.mean(0)).max() / np.abs(keep).max()
    check(err <= 1e-12 and np.isfinite(g["var"][:]).all(),
          f"the other rows' statistics, unpoisoned ({err:.1e})")

# ---- --print ----
p = run(harvest, "stats", tok, "--print", "--top", "3", check=0)
lines = p.stdout.splitlines()
order = [ln.split()[0] for ln in lines if ln.startswith("  ") and not ln.startswith("      ")]
natural = sorted(names, key=lambda n: [int(t) if t.isdigit() else t
                                        for t in re.split(r"(\d+)", n)])
check(order[1:] == natural and natural.index("encoder_1_q") < natural.index("encoder_2_output"),
      f"--print: a line per activation, in natural order: {order}")
check(p.stdout.count("largest means:") == len(names), "--print: the largest means of each")
with h5py.File(tok, "r") as f:
    m = f["stats/encoder_1_q/mean"][:]
    h_, d_ = np.unravel_index(np.argmax(m), m.shape)
check(f"[{h_},{d_}]" in p.stdout, f"--print: encoder_1_q's largest mean at [{h_},{d_}]")
p = run(harvest, "stats", before, "--print", check=1)
check("harvest stats" in p.stderr, "--print without statistics says how to make them")
p = run(harvest, "stats", tok, "--print", "nothing", check=1)
finish()
