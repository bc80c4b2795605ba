"""SAEs at harvest time (job key "saes", harvest/saes.c, io/h5sae.c, docs/output.md "SAE
latents"), spec model, 40 prompts of 0..43 tokens (one empty), batches of 2, four SAEs written by
`harvest init-sae` (SAELens topk and relu on encoder_0_output, Gemma Scope jumprelu and sparsify
topk on encoder_1_ffn_output), the sites stored in "activations" too:
- the latents: each prompt's stored activation (kept tokens) is encoded by tests/sae_encode.c
  (model/sae.c; the same rows in one GEMM as the run's view, on the
  OpenBLAS core the run names; one sae_encode process for all the prompts of an SAE), which agrees with
  tests/ref/sae_ref.py's float64 encoding (<= 1e-4 relative to the largest value); the run's
  CSR latents (harvest_data sae_latents, from the segments) are those bit for bit (positions,
  indptr, indices, float32 values);
- every /saes/NAME result against numpy float64 over those latents: count, l0_hist, max,
  exemplar_count, n_tokens, n_dead, n_dense (firing on more than 10 % of the tokens) exact; the
  exemplars exactly the top-N (value, corpus token index), ties to the smaller index; sum, sum_sq,
  sse, total_variance, fvu, l0_mean <= 1e-9 relative; FVU within 1e-4 of the float64 reference's
  own reconstruction;
- with "select": only the kept tokens are encoded;
- a mixture model (tiny Qwen3-MoE): an SAE after the routed experts and one on a TransformerLens
  alias, against numpy at np 1; 2 expert shards and 2 stages x 2 shards bit for bit;
- 1 and 2 threads, np 1 = np 2 (replicas) = 2 pipeline stages = 2 x 2, bit for bit (results and
  latents);
  SIGTERM then --resume, SIGKILL then --resume: bit for bit; a complete output without /saes gets it from --resume;
- harvest_data Output.sae(), sae_latents() and sae_exemplars() (the token ids around each
  exemplar); `harvest inspect`'s line a SAE;
- a big SAE: SAELens topk, d_sae = 16 x 384, k 16, top_n 64, every batch in one segment
  (checkpoint_seconds 3600): against numpy as above; its peak RSS (getrusage of the run, in a
  child of its own) at most the run's without SAEs + 2 W (the float32 weights) + 3 x 16 D N (the
  exemplar tables: the batch in hand, the final total, a batch read back) + 3 x 4 S D (pre,
  indices, values) + 3 x 8 (6 D + 2 C + 4) a batch (held, gathered, split) + 3 x 16 a stored
  entry (its exemplars, as bound) + 2 x (8 k + 16) a token (the CSR latents) + 32 MiB; encoded in
  chunks (AH_SAE_ROWS=5: 48 rows, the multiple a chunk's rows are) and at np 2, the same bytes
  (results and latents); on a CPU with AVX2 the one-GEMM and chunked runs again on OpenBLAS's
  Haswell core, whose rows' bits depend on their place in the call modulo 12 (chunks of 5 rows
  fail it);
- exemplar context and text: a corpus of text tokenized with data/tokenizer.json (in a copy of
  the model folder), "context": [2, 1] on one SAE and the default on another: the attributes
  context_before / context_after; each exemplar's context the stored ids from t - 2 to t + 1 of
  its prompt (-1 outside it), the exemplar's id at context[2]; its text (decoded in Python with
  the tokenizer the job's model folder holds) a piece of the prompt's own text ("<|bos|>" and
  the jsonl text) holding the token's text; before=0, after=0: the token alone; a window
  holding the whole prompt: its text the same as `harvest inspect --text` decodes in C and as
  the corpus's;
- bad input, exit 1 naming the key and the file, no output written: a d_in that is not the site's
  width, a missing folder, a missing tensor, an unknown architecture, a site the model lacks, a
  site of another shape, a glob naming two values, top_n 0, a "context" of one number or a
  negative one, two SAEs with one name; a site whose
  pipeline stage stores nothing.
Mutation caught: saepart_merge in harvest/saepart.c adding only the last batch's counts
(total[cnt + j] = part[cnt + j]) fails the count, n_dead and n_dense checks (24 failures).
Mutation caught: the partial layout before (every held batch with its full (D, N) exemplar table,
the a97dda2 build) peaks at 525 MiB on the big SAE case against 176 MiB now, over the bound.
Mutation caught: sae_exemplars in harvest_data.py placing the ids one slot late in `context`
(ctx[a - (t - before) + 1:...]) fails the context check."""
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import time

import h5py
import numpy as np

from util import (MPI_ENV, args, check, cpu_flags, finish, init_model, reader, run,
                  stop_mid_run, wait_started, write_job, write_prompts)
import sae_ref  # tests/ref, on the path util makes

harvest, work = args()
hd = reader()
MPIRUN = shutil.which("mpirun")
ENC = os.path.join(os.path.dirname(harvest), "tests", "sae_encode")
D = 384
T = 44
SITES = ["encoder_0_output", "encoder_1_ffn_output"]
CORE = [""]  # the OpenBLAS core harvest runs (its start-up line)
AGREE = [0.0]  # the largest relative difference of the C latents from the float64 reference
SEL = {"skip_first": 1, "seed": 0, "tokens_per_context": 8}
# name: (init-sae arguments, site, top_n or None for the default 32)
SAES = {"tk": (["--layout", "saelens", "--arch", "topk", "--k", "8", "--d-sae", "256"], SITES[0],
               None),
        "rl": (["--layout", "saelens", "--arch", "relu", "--d-sae", "128"], SITES[0], 5),
        "jr": (["--layout", "gemmascope", "--arch", "jumprelu", "--d-sae", "192"], SITES[1], 8),
        "sp": (["--layout", "sparsify", "--arch", "topk", "--k", "6", "--d-sae", "160"], SITES[1],
               4)}


# a mixture model (tiny Qwen3-MoE, hidden 32): an SAE after the routed experts, one on an alias
MOE = {"me": (["--layout", "saelens", "--arch", "topk", "--k", "4", "--d-sae", "64"],
              "layers.0.mlp_output", 6),
       "ma": (["--layout", "saelens", "--arch", "relu", "--d-sae", "48"],
              "blocks.1.hook_resid_post", None)}
MOE_ACTS = ["layers.0.mlp_output", "layers.1.layer_output"]
STORED = {"blocks.1.hook_resid_post": "layers.1.layer_output"}  # an alias: the value it names
SPECS = dict(SAES, **MOE)


def sae_entries(over=None):
    out = []
    for name, (_, site, top_n) in SAES.items():
        e = {"path": f"sae-{name}", "on": site, "name": name}
        if top_n:
            e["top_n"] = top_n
        out.append(e)
    return over if over is not None else out


def job(name, stages=1, sel=None, saes=None, acts=SITES):
    extra = {"select": sel} if sel else {}
    return write_job(f"{work}/{name}.json", model="model", data="prompts.jsonl",
                     activations=list(acts), max_seq_len=T, batch_size=2, saes=sae_entries(saes),
                     output={"path": f"{name}.h5", "checkpoint_seconds": 0},
                     parallel={"pipeline_stages": stages}, **extra)


def mpirun(np_, *a):
    return subprocess.run([MPIRUN, "-np", str(np_), harvest, *a], env=MPI_ENV,
                          capture_output=True, text=True, timeout=900)


def groups(path):
    """{name: {dataset or @attribute: value}} of /saes"""
    out = {}
    with h5py.File(path, "r") as f:
        for n, g in f.get("saes", {}).items():
            d = {k: g[k][()] for k in g}
            d.update({"@" + k: g.attrs[k] for k in g.attrs})
            out[n] = d
    return out


def same_saes(a, b, label, want=SAES):
    oa, ob = hd.open_output(a), hd.open_output(b)
    for n in want:
        la, lb = oa.sae_latents(n), ob.sae_latents(n)
        check(all(la[k].dtype == lb[k].dtype and np.array_equal(la[k], lb[k]) for k in la),
              f"{label}: {n}: the same latents (sae_latents)")
    oa.close(), ob.close()
    ga, gb = groups(a), groups(b)
    ok = check(sorted(ga) == sorted(gb) == sorted(want),
               f"{label}: SAEs {sorted(ga)} vs {sorted(gb)}")
    for n in ga if ok else []:
        for k in ga[n]:
            x, y = np.asarray(ga[n][k]), np.asarray(gb[n].get(k))
            same = x.dtype == y.dtype and x.shape == y.shape and \
                np.array_equal(x, y, equal_nan=x.dtype.kind == "f")
            if not check(same, f"{label}: /saes/{n} {k} differs"):
                return False
    return ok


def c_encode(folder, xs):
    """[(indptr, indices, values, recon)] of the C encoding of each x (N, d_in) of xs, one GEMM
    each, in one sae_encode process"""
    pairs = []
    for i, x in enumerate(xs):
        xp, out = os.path.join(work, f"x{i}.npy"), os.path.join(work, f"enc{i}")
        np.save(xp, np.ascontiguousarray(x, dtype=np.float32))
        pairs += [xp, out]
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    if CORE[0]:  # harvest re-executes itself with its chosen core (harvest/blascheck.h)
        env["OPENBLAS_CORETYPE"] = CORE[0]
    subprocess.run([ENC, folder, *pairs], check=True, capture_output=True, timeout=600, env=env)
    return [tuple(np.load(f"{out}.{k}.npy") for k in ("indptr", "indices", "values", "recon"))
            for out in pairs[1::2]]


def rel(a, b):
    s = max(float(np.abs(b).max()), 1e-300)
    return float(np.abs(np.asarray(a, np.float64) - b).max()) / s


def reference(path, name, selected):
    """numpy float64 results of SAE name over the C latents of the stored site, and the float64
    reference's FVU"""
    folder = f"{work}/sae-{name}"
    _, site, top_n = SPECS[name]
    site = STORED.get(site, site)
    top_n = top_n or 32
    sae = sae_ref.load(folder)
    d_sae = sae["W_dec"].shape[0]
    o = hd.open_output(path)
    with h5py.File(path, "r") as f:
        sel = f["tokens/selected"][:] if selected else None
    off = o.token_offset
    ex = [[] for _ in range(d_sae)]  # (-value, position)
    r = {"count": np.zeros(d_sae, np.int64), "sum": np.zeros(d_sae), "sum_sq": np.zeros(d_sae),
         "max": np.zeros(d_sae), "l0_hist": np.zeros(d_sae + 1, np.int64)}
    xs, ys, yr = [], [], []
    csr = {"position": [], "n": [], "indices": [], "values": []}
    rows = []  # (x, pos) of each prompt with kept tokens
    for p in range(o.n_prompts):
        x = o.prompt(site, p)
        pos = int(off[p]) + np.arange(x.shape[0])
        if sel is not None:
            keep = sel[off[p]:off[p] + x.shape[0]].astype(bool)
            x, pos = x[keep], pos[keep]
        if x.shape[0]:
            rows.append((x, pos))
    for (x, pos), (ip, idx, val, rec) in zip(rows, c_encode(folder, [x for x, _ in rows])):
        csr["position"].append(pos)
        csr["n"].append(np.diff(ip))
        csr["indices"].append(idx)
        csr["values"].append(val)
        rip, ridx, rval, _ = sae_ref.encode(sae, x)
        z = np.zeros((x.shape[0], d_sae))
        rz = np.zeros((x.shape[0], d_sae))
        for t in range(x.shape[0]):
            z[t, idx[ip[t]:ip[t + 1]]] = val[ip[t]:ip[t + 1]]
            rz[t, ridx[rip[t]:rip[t + 1]]] = rval[rip[t]:rip[t + 1]]
        AGREE[0] = max(AGREE[0], rel(z, rz))
        yr.append(sae_ref.decode(sae, x, rip, ridx, rval))
        fire = z > 0
        r["count"] += fire.sum(axis=0)
        r["sum"] += z.sum(axis=0)
        r["sum_sq"] += (z * z).sum(axis=0)
        r["max"] = np.maximum(r["max"], z.max(axis=0))
        r["l0_hist"] += np.bincount(fire.sum(axis=1), minlength=d_sae + 1)
        for t, j in zip(*np.nonzero(fire)):
            ex[j].append((-z[t, j], int(pos[t])))
        xs.append(x.astype(np.float64))
        ys.append(rec.astype(np.float64))
    o.close()
    x, y, yr = np.concatenate(xs), np.concatenate(ys), np.concatenate(yr)
    n = x.shape[0]
    r["n_tokens"] = n
    r["sse"] = ((x - y) ** 2).sum()
    r["total_variance"] = ((x - x.mean(axis=0)) ** 2).sum()
    r["fvu"] = r["sse"] / r["total_variance"]
    r["fvu64"] = ((x - yr) ** 2).sum() / r["total_variance"]
    r["l0_mean"] = (np.arange(d_sae + 1) * r["l0_hist"]).sum() / n
    r["n_dead"] = int((r["count"] == 0).sum())
    r["n_dense"] = int((r["count"] > 0.1 * n).sum())
    r["exemplar_count"] = np.array([min(len(e), top_n) for e in ex], np.int64)
    r["exemplar_value"] = np.full((d_sae, top_n), np.nan)
    r["exemplar_position"] = np.full((d_sae, top_n), -1, np.int64)
    for j, e in enumerate(ex):
        e.sort()
        for i, (v, q) in enumerate(e[:top_n]):
            r["exemplar_value"][j, i], r["exemplar_position"][j, i] = -v, q
    r["d_sae"], r["top_n"] = d_sae, top_n
    r["csr"] = {k: np.concatenate(v) for k, v in csr.items()}
    r["csr"]["indptr"] = np.concatenate([[0], np.cumsum(r["csr"].pop("n"))])
    return r


def check_against_numpy(path, selected, label, want=SAES, d_in=D):
    o = hd.open_output(path)
    names = o.sae()
    check(names == sorted(want), f"{label}: sae() lists {names}")
    for name in want:
        got = o.sae(name)
        ref = reference(path, name, selected)
        site = STORED.get(SPECS[name][1], SPECS[name][1])
        check(got["on"] == site and got["d_in"] == d_in and got["d_sae"] == ref["d_sae"] and
              got["top_n"] == ref["top_n"], f"{label}: {name}: attributes {got['on']} "
              f"{got['d_in']} {got['d_sae']} {got['top_n']}")
        for k in ("count", "l0_hist", "max", "exemplar_count", "exemplar_position", "n_tokens",
                  "n_dead", "n_dense"):
            check(np.array_equal(got[k], ref[k]), f"{label}: {name}: {k} exact")
        check(np.array_equal(got["exemplar_value"], ref["exemplar_value"], equal_nan=True),
              f"{label}: {name}: exemplar_value exact")
        for k in ("sum", "sum_sq", "sse", "total_variance", "fvu", "l0_mean"):
            e = rel(got[k], np.asarray(ref[k]))
            check(e <= 1e-9, f"{label}: {name}: {k} relative error {e:.2e}")
        e = abs(got["fvu"] - ref["fvu64"]) / ref["fvu64"]
        check(e <= 1e-4, f"{label}: {name}: fvu {got['fvu']:.6f} vs the float64 reference's "
              f"{ref['fvu64']:.6f} ({e:.1e})")
        lat = o.sae_latents(name)
        for k in ("position", "indptr", "indices", "values"):
            a, b = lat[k], ref["csr"][k]
            check(a.shape == b.shape and np.array_equal(a, b) and
                  (k != "values" or a.dtype == np.float32),
                  f"{label}: {name}: sae_latents {k} bit for bit the C encoding's")
        check(got["count"].sum() > 0 and
              got["exemplar_count"].max() == min(ref["top_n"], got["count"].max()),
              f"{label}: {name}: latents fire, the most active latent's exemplar list fills")
    check(AGREE[0] <= 1e-4, f"{label}: C latents vs float64 reference: {AGREE[0]:.1e} relative")
    o.close()


init_model(harvest, f"{work}/model", seed=5)
write_prompts(f"{work}/prompts.jsonl", [0] + [(29 * i) % 40 + 4 for i in range(39)], seed=3)
for name, (a, _, _) in SAES.items():
    run(harvest, "init-sae", *a, "--d-in", str(D), "--seed", "7", f"{work}/sae-{name}", check=0)

# ---- one rank, against numpy; with select ----
p = run(harvest, "run", job("ref"), check=0)
ref = f"{work}/ref.h5"
m = re.search(r"^harvest: BLAS OpenBLAS \S+, core (\S+) ", p.stderr, re.M)
check(m, f"the start-up line names the BLAS core: {p.stderr[-400:]}")
CORE[0] = m.group(1) if m else ""  # sae_encode runs the same sgemm kernel as the run
check_against_numpy(ref, False, "np 1")
p = run(harvest, "inspect", ref, check=0)
for name in SAES:
    g = hd.open_output(ref).sae(name)
    want = (f"sae {name} ({g['architecture']}, {g['layout']}) on {g['on']}: {g['n_tokens']} tokens, "
            f"FVU {g['fvu']:.4f}, L0 {g['l0_mean']:.2f}, dead {g['n_dead']} / {g['d_sae']}, "
            f"dense {g['n_dense']}")
    check(want in p.stdout, f"inspect prints {want!r}: {p.stdout[-600:]}")
with h5py.File(ref, "r") as f:
    all_ids = f["tokens/input_ids"][:]
o = hd.open_output(ref)
j = int(np.argmax(o.sae("tk")["count"]))
ex = o.sae_exemplars("tk", j, window=3)
check(len(ex) == 32 and all(e["ids"][e["t"] - e["start"]] == all_ids[e["position"]] and
                            e["position"] == o.token_offset[e["prompt"]] + e["t"] and
                            len(e["ids"]) <= 7 for e in ex),
      f"sae_exemplars: the token at each exemplar's position, within its prompt")
check([e["value"] for e in ex] == list(o.sae("tk")["exemplar_value"][j]), "sae_exemplars: values")
o.close()
run(harvest, "run", job("sel", sel=SEL), "--quiet", check=0)
check_against_numpy(f"{work}/sel.h5", True, "select")

# ---- threads: one and two OpenMP threads give the same bytes ----
for t in ("1", "2"):
    run(harvest, "run", job(f"thr{t}"), "--quiet", env={"OMP_NUM_THREADS": t}, check=0)
same_saes(f"{work}/thr1.h5", f"{work}/thr2.h5", "1 vs 2 threads")

# ---- grids ----
if MPIRUN:
    for label, np_, stages in [("np 2", 2, 1), ("2 stages", 2, 2), ("2 x 2", 4, 2)]:
        name = f"grid{np_}s{stages}"
        p = mpirun(np_, "run", job(name, stages=stages), "--quiet")
        if check(p.returncode == 0, f"{label}: exit {p.returncode}: {p.stderr[-600:]}"):
            same_saes(ref, f"{work}/{name}.h5", label)
else:
    print("no mpirun: the grid cases are not run")

# ---- a mixture model: np 1 against numpy, 2 expert shards and 2 stages x 2 shards the same ----
init = ["init-model", "--family", "qwen3_moe", "--preset", "Qwen3-MoE", "--seed", "1"]
run(harvest, *init, f"{work}/moe", check=0)
vocab = json.load(open(f"{work}/moe/config.json"))["vocab_size"]
write_prompts(f"{work}/moe-prompts.jsonl", [(13 * i) % 30 + 1 for i in range(12)], seed=4,
              vocab=vocab)
for name, (a, _, _) in MOE.items():
    run(harvest, "init-sae", *a, "--d-in", "32", "--seed", "3", f"{work}/sae-{name}", check=0)
moe_saes = [dict({"path": f"sae-{n}", "on": on, "name": n}, **({"top_n": k} if k else {}))
            for n, (_, on, k) in MOE.items()]


def moe_job(name, **par):
    return write_job(f"{work}/{name}.json", model="moe", data="moe-prompts.jsonl",
                     activations=MOE_ACTS, batch_size=2, saes=moe_saes,
                     output={"path": f"{name}.h5", "checkpoint_seconds": 0}, parallel=par)


run(harvest, "run", moe_job("moe1"), "--quiet", check=0)
check_against_numpy(f"{work}/moe1.h5", False, "moe np 1", want=MOE, d_in=32)
if MPIRUN:
    for label, np_, par in [("moe 2 shards", 2, {"expert_parallel": 2}),
                            ("moe 2 stages x 2 shards", 4,
                             {"expert_parallel": 2, "pipeline_stages": 2})]:
        name = f"moe{np_}"
        p = mpirun(np_, "run", moe_job(name, **par), "--quiet")
        if check(p.returncode == 0, f"{label}: exit {p.returncode}: {p.stderr[-600:]}"):
            same_saes(f"{work}/moe1.h5", f"{work}/{name}.h5", label, want=MOE)

# ---- stopped, resumed ----
out = f"{work}/stop.h5"
rc = stop_mid_run(harvest, job("stop"), out)
check(rc == 3, f"stopped: exit {rc}")
run(harvest, "run", job("stop"), "--resume", "--quiet", check=0)
same_saes(ref, out, "SIGTERM + --resume")
with h5py.File(out, "r+") as f:
    del f["saes"]
p = run(harvest, "run", job("stop"), "--resume", check=0)
same_saes(ref, out, "/saes missing + --resume")

out = f"{work}/kill.h5"
for attempt in range(3):
    q = subprocess.Popen([harvest, "run", job("kill"), "--quiet", "--overwrite"],
                         stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    wait_started(out, q)
    time.sleep(0.5)
    q.send_signal(signal.SIGKILL)
    q.communicate(timeout=120)
    if q.returncode == -signal.SIGKILL:
        break
check(q.returncode == -signal.SIGKILL, f"killed: exit {q.returncode}")
run(harvest, "run", job("kill"), "--resume", "--quiet", check=0)
same_saes(ref, out, "SIGKILL + --resume")


# ---- bad input: exit 1 naming the key and the file, nothing written ----
def write_st(path, tensors):
    """tensors {name: float32 array} as a .safetensors file"""
    hdr, blobs, at = {}, [], 0
    for k, v in tensors.items():
        b = np.ascontiguousarray(v, np.float32).tobytes()
        hdr[k] = {"dtype": "F32", "shape": list(v.shape), "data_offsets": [at, at + len(b)]}
        blobs.append(b)
        at += len(b)
    h = json.dumps(hdr).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


shutil.copytree(f"{work}/sae-rl", f"{work}/sae-notensor")
w = sae_ref.read_safetensors(f"{work}/sae-rl/sae_weights.safetensors")
del w["b_enc"]
write_st(f"{work}/sae-notensor/sae_weights.safetensors", w)
shutil.copytree(f"{work}/sae-rl", f"{work}/sae-gated")
cfg = json.load(open(f"{work}/sae-gated/cfg.json"))
cfg["architecture"] = "gated"
json.dump(cfg, open(f"{work}/sae-gated/cfg.json", "w"))
# ---- a big SAE (d_sae = 16 d, top_n 64), every batch in one segment: memory bounded ----
BIG = {"bg": (["--layout", "saelens", "--arch", "topk", "--k", "16", "--d-sae", str(16 * D)],
               SITES[0], 64)}
SPECS.update(BIG)
run(harvest, "init-sae", *BIG["bg"][0], "--d-in", str(D), "--seed", "9", f"{work}/sae-bg", check=0)
RSS = ("import resource, subprocess, sys; p = subprocess.run(sys.argv[1:]); "
       "print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")


def big_run(name, saes, env=None, np_=1):
    jp = write_job(f"{work}/{name}.json", model="model", data="prompts.jsonl",
                   activations=[SITES[0]], max_seq_len=T, batch_size=2, saes=saes,
                   output={"path": f"{name}.h5", "checkpoint_seconds": 3600})
    cmd = [MPIRUN, "-np", str(np_), harvest] if np_ > 1 else [harvest]
    p = subprocess.run(["/usr/bin/python3", "-c", RSS, *cmd, "run", jp, "--quiet"],
                       env=dict(MPI_ENV, **(env or {})), capture_output=True, text=True,
                       timeout=900)
    rc, kib = (int(v) for v in p.stdout.split()[-2:])
    check(rc == 0, f"{name}: exit {rc}: {p.stderr[-600:]}")
    return 1024 * kib


bg = [{"path": "sae-bg", "on": SITES[0], "name": "bg", "top_n": 64}]
base = big_run("big0", [])
peak = big_run("big", bg)
check_against_numpy(f"{work}/big.h5", False, "big SAE", want=BIG)
with h5py.File(f"{work}/big.h5", "r") as f:
    n_seg = len(json.loads(f.attrs["segments"]))
    n_tok = int(f["saes/bg"].attrs["n_tokens"])
n_batch = -(-sum(1 for _ in open(f"{work}/prompts.jsonl")) // 2)
Dz, N, K = 16 * D, 64, 16
W = 4 * (2 * D * Dz + Dz + D)  # the SAE's float32 weights
bound = (base + 2 * W + 3 * 16 * Dz * N + 3 * 4 * T * Dz + 3 * n_batch * 8 * (6 * Dz + 2 * D + 4) +
         3 * 16 * n_tok * K + 2 * (8 * K + 16) * n_tok + (32 << 20))
check(n_seg == 1, f"big SAE: every batch in one segment ({n_seg})")
check(peak <= bound, f"big SAE: peak RSS {peak / 2**20:.1f} MiB <= {bound / 2**20:.1f} MiB (the run "
      f"without SAEs {base / 2**20:.1f} MiB + 2 W + 3 x 16 D N + 3 x 4 S D + 3 x 8 (6 D + 2 C + 4) "
      f"a batch + 3 x 16 a stored entry's exemplar + 2 x (8 k + 16) a token + 32 MiB)")
big_run("bigc", bg, env={"AH_SAE_ROWS": "5"})  # rounded to 48 rows: a view of 88 is two chunks
same_saes(f"{work}/big.h5", f"{work}/bigc.h5", "big SAE encoded in chunks of 48 rows", want=BIG)
if {"avx2", "fma"} <= cpu_flags():
    hw = {"OPENBLAS_CORETYPE": "Haswell"}  # a user's core: harvest keeps it
    big_run("bigh", bg, env=hw)
    big_run("bighc", bg, env=dict(hw, AH_SAE_ROWS="5"))
    same_saes(f"{work}/bigh.h5", f"{work}/bighc.h5", "big SAE on Haswell's kernels, in chunks",
              want=BIG)
if MPIRUN:
    big_run("big2", bg, np_=2)
    same_saes(f"{work}/big.h5", f"{work}/big2.h5", "big SAE, np 2, one segment", want=BIG)

# ---- exemplar context and text: a corpus of text, the tokenizer in the model folder ----
os.makedirs(f"{work}/tmodel", exist_ok=True)
for fn in os.listdir(f"{work}/model"):
    if not os.path.exists(f"{work}/tmodel/{fn}"):
        os.symlink(os.path.abspath(f"{work}/model/{fn}"), f"{work}/tmodel/{fn}")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
shutil.copy(os.path.join(ROOT, "data", "tokenizer.json"), f"{work}/tmodel/tokenizer.json")
words = "the cat sat on a mat while rain fell over hills and rivers near old towns".split()
texts = [" ".join(words[(3 * i + k) % len(words)] for k in range(4 + i % 9)) for i in range(14)]
with open(f"{work}/text.jsonl", "w") as f:
    f.writelines(json.dumps({"text": t}) + "\n" for t in texts)
tsae = [{"path": "sae-rl", "on": SITES[0], "name": "rl", "top_n": 6, "context": [2, 1]},
        {"path": "sae-tk", "on": SITES[0], "name": "tk"}]
run(harvest, "run", write_job(f"{work}/text.json", model="tmodel", data="text.jsonl",
                              activations=[SITES[0]], batch_size=3, saes=tsae,
                              output={"path": "text.h5", "checkpoint_seconds": 0}), "--quiet",
    check=0)
o = hd.open_output(f"{work}/text.h5")
with h5py.File(f"{work}/text.h5", "r") as f:
    tids = f["tokens/input_ids"][:]
g = o.sae("rl")
check((g["context_before"], g["context_after"]) == (2, 1), "context attributes: the job's [2, 1]")
check((o.sae("tk")["context_before"], o.sae("tk")["context_after"]) == (8, 4),
      "context attributes: [8, 4] by default")
n_ok = n_all = 0
for j in np.flatnonzero(g["exemplar_count"])[:20]:
    for e in o.sae_exemplars("rl", int(j)):
        n_all += 1
        q, p, t = e["position"], e["prompt"], e["t"]
        o0, T = int(o.token_offset[p]), int(o.length[p])
        want = np.array([tids[o0 + u] if 0 <= u < T else -1 for u in range(t - 2, t + 2)])
        src = "<|bos|>" + texts[p]  # the template adds <|bos|>
        n_ok += (np.array_equal(e["context"], want) and e["context"][2] == tids[q] and
                 e["text"] is not None and e["text"] in src and e["token"] in e["text"])
check(n_all > 0 and n_ok == n_all, f"sae_exemplars: context ids (-1 outside the prompt) and text "
      f"(a piece of the prompt's text holding the exemplar's token): {n_ok} of {n_all}")
ex = o.sae_exemplars("rl", int(np.argmax(g["count"])), before=0, after=0)
check(all(e["text"] == e["token"] and len(e["context"]) == 1 for e in ex),
      "sae_exemplars before=0, after=0: the token alone")
for e in o.sae_exemplars("rl", int(np.argmax(g["count"])), before=T, after=T)[:4]:
    p = run(harvest, "inspect", f"{work}/text.h5", "--text", str(e["prompt"]), check=0)
    m = re.search(rf"^prompt {e['prompt']} \(\d+ tokens\): (.*)$", p.stdout, re.M)
    c_text = m.group(1) if m else None
    check(e["text"] == c_text == "<|bos|>" + texts[e["prompt"]],
          f"a whole prompt's text: the reader's {e['text']!r}, harvest inspect --text's (C) "
          f"{c_text!r}, the corpus's")
o.close()

run(harvest, "init-sae", "--layout", "saelens", "--arch", "relu", "--d-in", "128", "--d-sae", "64",
    f"{work}/sae-narrow", check=0)


def one(path, on, **kw):
    return [dict({"path": path, "on": on, "name": "x"}, **kw)]


BAD = [("width", one("sae-narrow", SITES[0]), ['"saes[0]"', "d_in 128", "384"]),
       ("folder", one("sae-none", SITES[0]), ['"saes[0].path"', "sae-none"]),
       ("tensor", one("sae-notensor", SITES[0]), ['"saes[0].path"', "b_enc"]),
       ("arch", one("sae-gated", SITES[0]), ['"saes[0].path"', "gated"]),
       ("site", one("sae-rl", "encoder_9_output"), ['"saes[0].on', "encoder_9_output"]),
       ("shape", one("sae-rl", "encoder_0_q"), ['"saes[0].on"', "encoder_0_q"]),
       ("glob", one("sae-rl", "encoder_*_output"), ['"saes[0].on"', "an SAE reads one"]),
       ("top_n", one("sae-rl", SITES[0], top_n=0), ['"saes[0].top_n"']),
       ("context", one("sae-rl", SITES[0], context=[8]), ['"saes[0].context"', "[BEFORE, AFTER]"]),
       ("context2", one("sae-rl", SITES[0], context=[1, -1]), ['"saes[0].context"']),
       ("dup", one("sae-rl", SITES[0]) * 2, ['"saes[1].name"', '"x"'])]
for name, saes, want in BAD:
    p = run(harvest, "run", job("bad-" + name, saes=saes), "--quiet")
    msg = p.stderr.strip()
    check(p.returncode == 1 and all(w in msg for w in want) and "bad-" + name + ".json" in msg,
          f"bad {name}: exit {p.returncode}, {msg[-300:]}")
    check(not os.path.exists(f"{work}/bad-{name}.h5"), f"bad {name}: no output written")
if MPIRUN:  # stage 0 of two stores nothing: its SAE has no segments to go to
    p = mpirun(2, "run", job("bad-stage", stages=2, saes=one("sae-rl", SITES[0]),
                             acts=["encoder_3_output"]), "--quiet")
    check(p.returncode == 1 and '"encoder_0_output" is computed by pipeline stage 0' in p.stderr,
          f"a stage storing nothing: exit {p.returncode}, {p.stderr.strip()[-300:]}")

finish()
