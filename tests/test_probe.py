"""Probe datasets (issue 13, part 3): data.fields round-trip with their types (int, float, bool,
string, defaults; empty prompts skipped; packed contexts take their document's fields; np 2 and a
rewritten index give the same); the job's "pool" and `harvest export --probe DIR` give pooled
last/mean equal to numpy on the stored values, in both layouts and every storage dtype; the reader
(harvest_data.Probe) loads them; the output's statistics travel into the shards; errors name the
file, the line and the field.
Run by test_pip_install.py against the installed package (HARVEST_DATA_INSTALLED=1), it makes the
checks that call the reader (harvest_data) and the runs they read, not those of the harvest binary
alone (np 2, the rewritten index, packing, the other pool layouts, select, --allow-partial, the
errors): this test's own run makes those, with the same binary and the same runs."""
import json
import os
import random
import shutil
import subprocess
import sys

import h5py
import numpy as np

from util import MPI_ENV, args, check, finish, init_model, reader, run, write_job

hd = reader()  # io/python, or the installed package (test_pip_install.py)
READER_ONLY = os.environ.get("HARVEST_DATA_INSTALLED") == "1"  # see the docstring

harvest, work = args()
init_model(harvest, f"{work}/model", seed=11)
NAMES = ["decoder_0_output", "encoder_0_q"]  # a plain row and a head-split one
FIELDS = {"label": "int", "score": {"type": "float", "default": -0.25}, "ok": "bool",
          "tag": {"type": "string", "default": "none"}}

# the corpus: typed fields, a missing key with a default, an empty prompt, unicode, extra keys
rng = random.Random(3)
lines = []
for i in range(23):
    n = 0 if i == 6 else rng.randrange(1, 40)
    d = {"input_ids": [rng.randrange(8192) for _ in range(n)], "label": rng.randrange(-5, 5),
         "score": rng.uniform(-1e3, 1e3), "ok": rng.random() < 0.5,
         "tag": rng.choice(["", "a", "négatif", "😀 long text " * 3]), "other": [1, 2]}
    if i % 5 == 2:
        del d["score"]
    if i % 7 == 3:
        d["tag"] = None  # null takes the default too
    lines.append(d)
with open(f"{work}/data.jsonl", "w") as f:
    f.writelines(json.dumps(d) + "\n" for d in lines)


def job(name, layout="prompt", dtype="float32", data=None, **extra):
    o = {"path": f"{name}.h5", "layout": layout, "dtype": dtype}
    return write_job(f"{work}/{name}.json", activations=NAMES, batch_size=4, max_seq_len=32,
                     data=data or {"path": "data.jsonl", "fields": FIELDS}, output=o, **extra)


def harvest_run(name, *a, np_=1, **kw):
    j = job(name, **kw)
    if np_ == 1:
        return run(harvest, "run", j, "--quiet", *a, check=0)
    return subprocess.run(["mpirun", "-np", str(np_), harvest, "run", j, "--quiet", *a],
                          capture_output=True, text=True, env=MPI_ENV, timeout=600)


def want_field(key, src):
    """the field's values for the prompts whose lines are src, as the job file types them"""
    spec = FIELDS[key] if isinstance(FIELDS[key], dict) else {"type": FIELDS[key]}
    v = [lines[s].get(key) for s in src]
    v = [spec["default"] if x is None else x for x in v]
    return np.array(v, {"int": np.int64, "float": np.float64, "bool": bool, "string": object}
                    [spec["type"]])


def check_fields(f, label):
    """/prompts/NAME holds each kept prompt's field, typed as the job says"""
    src = f["prompts/source_index"][:]
    for key, dt in (("label", np.int64), ("score", np.float64), ("ok", np.bool_)):
        got = f["prompts/" + key][:]
        check(got.dtype == dt and np.array_equal(got, want_field(key, src)),
              f"{label}: /prompts/{key} round-trips as {np.dtype(dt)}")
    tag = f["prompts/tag"]
    check(tag.dtype.kind == "S" and list(tag.asstr()[:]) == list(want_field("tag", src)),
          f"{label}: /prompts/tag round-trips as UTF-8 text")
    check(all(f["prompts/" + k].attrs["field_type"] == (v if isinstance(v, str) else v["type"])
              for k, v in FIELDS.items()), f"{label}: field_type attributes")


# ---- fields ----------------------------------------------------------------------------------
harvest_run("pr")
with h5py.File(f"{work}/pr.h5", "r") as f:
    check(6 not in f["prompts/source_index"][:] and len(f["prompts/length"]) == 22,
          "the empty prompt is skipped (and its fields with it)")
    check_fields(f, "prompt layout")


def fields_np2_resume_pack():
    """np 2, a rewritten index.h5 and packing keep the fields"""
    # np 2 (rank 0 reads the data and writes the index) gives the same tables
    p = harvest_run("pr2", np_=2)
    check(p.returncode == 0, f"np 2: {p.stderr[-500:]}")
    with h5py.File(f"{work}/pr.h5", "r") as a, h5py.File(f"{work}/pr2.h5", "r") as b:
        check(all(np.array_equal(a["prompts/" + k][:], b["prompts/" + k][:])
                  for k in a["prompts"]), "np 2: the same /prompts, fields included")
    # a lost index.h5 is written again on --resume, with the fields
    os.remove(f"{work}/pr.h5.parts/index.h5")
    harvest_run("pr", "--resume")
    with h5py.File(f"{work}/pr.h5", "r") as f:
        check_fields(f, "index.h5 rewritten by --resume")
    # packing: a context takes the fields of the document its first token comes from
    harvest_run("pk", data={"path": "data.jsonl", "fields": FIELDS, "pack": {"separator": 1}})
    with h5py.File(f"{work}/pk.h5", "r") as f:
        src = f["prompts/source_index"][:]
        check(len(src) > 10 and np.array_equal(f["prompts/label"][:], want_field("label", src)),
              "pack: each context has its first document's fields")


if not READER_ONLY:
    fields_np2_resume_pack()

# ---- pool and --probe: equal to numpy on the stored values -----------------------------------
def stored_tokens(f, name, p):
    """prompt p's stored rows of name, as float32 [T, ...], whatever the layout"""
    d = f["activations/" + name]
    axes = [a.decode() if isinstance(a, bytes) else a for a in d.attrs["stored_axes"]]
    L, off = f["prompts/length"][p], f["prompts/token_offset"][p]
    if axes[0] == "token":
        return d[off:off + L].astype(np.float32)
    return np.moveaxis(d[p], axes.index("sequence") - 1, 0)[:L].astype(np.float32)


def check_pooled(f, g, prompts, label, pools=("last", "mean")):
    """g's /pooled (an output's or a probe file's) against f's stored values"""
    pooled = {f"{n}/{w}": g[f"pooled/{n}/{w}"][:] for n in g["pooled"] for w in g["pooled/" + n]}
    for n in NAMES:
        for q, p in enumerate(prompts):
            x = stored_tokens(f, n, p).astype(np.float64)
            if "last" in pools:
                ok = np.array_equal(pooled[f"{n}/last"][q], x[-1].astype(np.float32))
                if not check(ok, f"{label}: {n} last, prompt {p}"):
                    return
            if "mean" in pools:
                got = pooled[f"{n}/mean"][q]
                # harvest sums in position order in float64: numpy's cumsum is that order
                seq = (np.cumsum(x, axis=0)[-1] / len(x)).astype(np.float32)
                ok = np.array_equal(got, seq) and np.allclose(got, x.mean(0), rtol=1e-6, atol=1e-6)
                if not check(ok, f"{label}: {n} mean, prompt {p}"):
                    return
        check(set(g["pooled/" + n]) == set(pools), f"{label}: {n}: pools {sorted(g['pooled/' + n])}")
    print(f"{label}: pooled values checked")


POOLS = [("prompt", "float32"), ("token", "bfloat16"), ("token", "float16")]
for layout, dtype in POOLS[1:2] if READER_ONLY else POOLS:  # the reader reads token bfloat16's
    name = f"pool-{layout}-{dtype}"
    harvest_run(name, layout=layout, dtype=dtype, pool=["last", "mean"])
    with h5py.File(f"{work}/{name}.h5", "r") as f:
        pooled = {k: f["pooled/" + k][:] for n in NAMES for k in (f"{n}/last", f"{n}/mean")}
        d = f["activations/" + NAMES[1]]
        axes = [a.decode() if isinstance(a, bytes) else a for a in d.attrs["stored_axes"]]
        row = tuple(n for n, a in zip(d.shape, axes) if a not in ("prompt", "token", "sequence"))
        check(pooled[f"{NAMES[1]}/mean"].shape == (len(f["prompts/length"]),) + row and
              len(row) == 2, f"{name}: head-split pooled shape {row}")
        check_pooled(f, f, range(len(f["prompts/length"])), f"job pool, {layout} {dtype}")
    # the probe export of the same output gives the same rows and the fields
    d = f"{work}/probe-{name}"
    run(harvest, "export", f"{work}/{name}.h5", "--probe", d, "--quiet", check=0)
    with h5py.File(f"{d}/probe.h5", "r") as g, h5py.File(f"{work}/{name}.h5", "r") as f:
        check(all(np.array_equal(g["pooled/" + k][:], v) for k, v in pooled.items()),
              f"--probe of {name}: the same pooled rows as the job's pool")
        check_fields(g, f"--probe of {name}")
        check(np.array_equal(g["prompts/prompt_index"][:], np.arange(len(f["prompts/length"])))
              and np.array_equal(g["prompts/source_index"][:], f["prompts/source_index"][:]),
              f"--probe of {name}: prompt_index, source_index")


def resume_adds_pooled():
    """killed after completing the output but before pooling: --resume adds /pooled"""
    name = "pool-token-float16"
    with h5py.File(f"{work}/{name}.h5", "r") as f:
        before = {n: f[f"pooled/{n}/mean"][:] for n in NAMES}
    with h5py.File(f"{work}/{name}.h5", "r+") as f:
        del f["pooled"]
    run(harvest, "run", f"{work}/{name}.json", "--quiet", "--resume", check=0)
    with h5py.File(f"{work}/{name}.h5", "r") as f:
        check("pooled" in f and
              all(np.array_equal(f[f"pooled/{n}/mean"][:], before[n]) for n in NAMES),
              "--resume of a complete output without /pooled adds it")


if not READER_ONLY:
    resume_adds_pooled()

# an output without "pool": --probe computes them; --pool last alone; the reader
run(harvest, "export", f"{work}/pr.h5", "--probe", f"{work}/probe", "--quiet", check=0)
run(harvest, "export", f"{work}/pr.h5", "--probe", f"{work}/probe-last", "--pool", "last",
    "--names", NAMES[0], "--quiet", check=0)
with h5py.File(f"{work}/pr.h5", "r") as f:
    with h5py.File(f"{work}/probe/probe.h5", "r") as g:
        check_pooled(f, g, range(len(f["prompts/length"])), "--probe, prompt layout float32")
        check("pooled" not in f, "an output without the job key pool has no /pooled")
    with h5py.File(f"{work}/probe-last/probe.h5", "r") as g:
        check(list(g["pooled"]) == [NAMES[0]] and list(g[f"pooled/{NAMES[0]}"]) == ["last"] and
              g.attrs["pool"] == "last", "--pool last --names: only that name's last")
pr = hd.Probe(f"{work}/probe")
X, y = pr.arrays(NAMES[0], "label")
with h5py.File(f"{work}/probe/probe.h5", "r") as g:
    check(X.dtype == np.float32 and X.shape == (22, 384) and
          np.array_equal(X, g[f"pooled/{NAMES[0]}/mean"][:]) and y.dtype == np.int64 and
          np.array_equal(y, g["prompts/label"][:]), "Probe.arrays: X and y")
Xq = pr.X(NAMES[1], "last")
check(Xq.ndim == 2 and Xq.shape[0] == 22, "Probe.X flattens a head-split row")
check(list(pr.y("tag")) == list(want_field("tag", h5py.File(f"{work}/pr.h5", "r")
                                            ["prompts/source_index"][:])), "Probe.y: str values")
check(pr.fields == sorted(FIELDS) and pr.pools == ["last", "mean"], "Probe: fields and pools")
o = hd.open_output(f"{work}/pr.h5")
check(o.fields == sorted(FIELDS) and np.array_equal(o.field("label"), y) and
      list(o.field("tag")) == list(pr.y("tag")), "open_output: .fields and .field(name)")
o.close()
check(hd.Probe(f"{work}/pool-token-bfloat16.h5").names == sorted(NAMES),
      "Probe opens an output with /pooled")
try:
    import torch
    ds = pr.torch_dataset(NAMES[0], "label")
    check(len(ds) == 22 and torch.equal(ds[3][0], torch.from_numpy(X[3])), "Probe.torch_dataset")
except ImportError:
    print("torch not installed: Probe.torch_dataset not checked")

def selected_mean():
    """the prompt layout under `select` marks the chosen tokens in /tokens/selected: mean over
    them (NaN for a prompt with none), last is still the prompt's last token"""
    sel_out = f"{work}/sel.h5"
    shutil.copy(f"{work}/pr.h5", sel_out)
    os.symlink(f"{work}/pr.h5.parts", f"{sel_out}.parts")
    with h5py.File(sel_out, "r+") as f:
        L, off = f["prompts/length"][:], f["prompts/token_offset"][:]
        mask = np.random.default_rng(1).random(int(L.sum())) < 0.6
        mask[off[2]:off[2] + L[2]] = False
        f["tokens/selected"] = mask.astype(np.uint8)
    run(harvest, "export", sel_out, "--probe", f"{work}/probe-sel", "--quiet", check=0)
    with h5py.File(f"{work}/probe-sel/probe.h5", "r") as g, h5py.File(sel_out, "r") as f:
        ok = True
        for n in NAMES:
            for p in range(len(L)):
                x = stored_tokens(f, n, p).astype(np.float64)
                m = mask[off[p]:off[p] + L[p]]
                want = (np.cumsum(x[m], axis=0)[-1] / m.sum()).astype(np.float32) if m.any() else \
                    np.full(x.shape[1:], np.nan, np.float32)
                ok &= np.array_equal(g[f"pooled/{n}/mean"][p], want, equal_nan=True)
                ok &= np.array_equal(g[f"pooled/{n}/last"][p], x[-1].astype(np.float32))
        check(ok and np.isnan(g[f"pooled/{NAMES[0]}/mean"][2]).all(),
              "/tokens/selected: mean over the selected tokens, last unchanged, none -> NaN")


def probe_allow_partial():
    """--allow-partial: the complete prompts only, with their fields"""
    inc = f"{work}/inc.h5"
    j = json.load(open(job("seg")))
    j["output"]["checkpoint_seconds"] = 0
    json.dump(j, open(f"{work}/seg.json", "w"))
    run(harvest, "run", f"{work}/seg.json", "--quiet", check=0)
    shutil.copy(f"{work}/seg.h5", inc)
    os.symlink(f"{work}/seg.h5.parts", f"{inc}.parts")
    with h5py.File(inc, "r+") as f:
        segs = json.loads(f.attrs["segments"])
        dropped = segs.pop(0)  # the first batch: the kept prompts are not 0, 1, ...
        f.attrs["segments"] = json.dumps(segs)
        f.attrs["complete"] = 0
    gone = set(p for r in dropped["runs"] for p in range(int(r[0]), int(r[1])))
    p = run(harvest, "export", inc, "--probe", f"{work}/probe-inc", "--quiet")
    check(p.returncode == 1 and "incomplete" in p.stderr and "--allow-partial" in p.stderr and
          not os.path.exists(f"{work}/probe-inc/probe.h5"),
          f"--probe of an incomplete output: exit 1 naming --allow-partial: {p.stderr.strip()}")
    run(harvest, "export", inc, "--probe", f"{work}/probe-inc", "--allow-partial", "--quiet",
        check=0)
    with h5py.File(f"{work}/probe-inc/probe.h5", "r") as g, h5py.File(f"{work}/seg.h5", "r") as f:
        keep = np.array(sorted(set(range(22)) - gone))
        check(len(gone) > 0 and np.array_equal(g["prompts/prompt_index"][:], keep),
              f"--allow-partial: exactly the complete prompts ({len(keep)} of 22)")
        check(np.array_equal(g["prompts/label"][:], f["prompts/label"][:][keep]) and
              np.array_equal(g["prompts/tag"][:], f["prompts/tag"][:][keep]),
              "--allow-partial: their fields")
        check_pooled(f, g, keep, "--allow-partial")


if not READER_ONLY:
    selected_mean()
    probe_allow_partial()

# ---- statistics travel into the shards -------------------------------------------------------
run(harvest, "stats", f"{work}/pool-token-bfloat16.h5", "--quiet", check=0)
run(harvest, "export", f"{work}/pool-token-bfloat16.h5", "--shards", f"{work}/sh", "--val", "0.3",
    "--shard-tokens", "100", "--quiet", check=0)
want, got = hd.stats(f"{work}/pool-token-bfloat16.h5"), hd.stats(f"{work}/sh")
check(got is not None and set(got) == set(NAMES) and
      all(np.array_equal(got[n][k], want[n][k]) for n in NAMES for k in want[n]),
      "hd.stats(DIR): the output's statistics, from the shards")
man = json.load(open(f"{work}/sh/manifest.json"))
for s in [s for k in ("train", "val") for s in man["splits"][k]["shards"]]:
    with h5py.File(f"{work}/sh/{s['file']}", "r") as g:
        check(all(np.array_equal(g[f"stats/{n}/mean"][:], want[n]["mean"]) for n in NAMES),
              f"{s['file']}: /stats/NAME copied")
if not READER_ONLY:  # np 2 writes the same shards
    p = subprocess.run(["mpirun", "-np", "2", harvest, "export", f"{work}/pool-token-bfloat16.h5",
                        "--shards", f"{work}/sh-np2", "--val", "0.3", "--shard-tokens", "100",
                        "--quiet"], capture_output=True, text=True, env=MPI_ENV, timeout=600)
    same = p.returncode == 0 and \
        sorted(os.listdir(f"{work}/sh")) == sorted(os.listdir(f"{work}/sh-np2"))
    for n in os.listdir(f"{work}/sh") if same else []:
        same &= open(f"{work}/sh/{n}", "rb").read() == open(f"{work}/sh-np2/{n}", "rb").read()
    check(same, f"shards with statistics: np 2 writes the same bytes as np 1 {p.stderr[-300:]}")
check("pooled" in h5py.File(f"{work}/pool-token-bfloat16.h5", "r"),
      "harvest stats keeps /pooled")
# shards written before `harvest stats` are rewritten with them (same command again)
run(harvest, "export", f"{work}/pr.h5", "--shards", f"{work}/sh2", "--shard-tokens", "100",
    "--quiet", check=0)
check(hd.stats(f"{work}/sh2") is None, "no statistics in the output: none in the shards")
run(harvest, "stats", f"{work}/pr.h5", "--quiet", check=0)
run(harvest, "export", f"{work}/pr.h5", "--shards", f"{work}/sh2", "--shard-tokens", "100",
    "--quiet", check=0)
check(hd.stats(f"{work}/sh2") is not None, "statistics added since: the shards get them")


# ---- errors: each names the file, the line and the field -------------------------------------
def refused(label, want, data_lines, fields=FIELDS, **kw):
    with open(f"{work}/bad.jsonl", "w") as f:
        f.writelines(json.dumps(d) + "\n" for d in data_lines)
    j = job("bad", data={"path": "bad.jsonl", "fields": fields}, **kw)
    for leftover in (f"{work}/bad.h5", f"{work}/bad.h5.parts"):  # each case on its own
        shutil.rmtree(leftover, ignore_errors=True) if os.path.isdir(leftover) else (
            os.path.exists(leftover) and os.remove(leftover))
    p = run(harvest, "run", j, "--quiet")
    complete = False
    if os.path.exists(f"{work}/bad.h5"):
        with h5py.File(f"{work}/bad.h5", "r") as f:
            complete = int(f.attrs.get("complete", 0)) == 1
    check(p.returncode == 1 and all(w in p.stderr for w in want) and not complete,
          f"{label}: exit 1 naming {want}: {p.stderr.strip()[-300:]}")


def errors():
    """each names the file, the line and the field"""
    ok = {"input_ids": [1, 2], "label": 1, "ok": True}
    refused("a field missing on line 3", ["bad.jsonl: line 3", 'field "label" is missing'],
            [ok, ok, {"input_ids": [3], "ok": False}, ok])
    refused("an int field holding 2.5", ["bad.jsonl: line 2", '"label"', "a fraction"],
            [ok, dict(ok, label=2.5)])
    refused("a bool field holding 1", ["bad.jsonl: line 1", '"ok"', "true or false"],
            [dict(ok, ok=1)])
    refused("a string field holding a list", ["bad.jsonl: line 2", '"tag"', "a string", "an array"],
            [ok, dict(ok, tag=["x"])])
    refused("a float field holding a string", ["bad.jsonl: line 1", '"score"', "a number"],
            [dict(ok, score="1.5")])
    p = run(harvest, "export", f"{work}/pr.h5", "--probe", f"{work}/probe-err", "--names",
            "encoder_9_output", "--quiet")
    check(p.returncode == 1 and "encoder_9_output" in p.stderr and "--names" in p.stderr,
          f"--probe, unknown name: exit 1 naming it: {p.stderr.strip()[-200:]}")
    p = run(harvest, "export", f"{work}/pr.h5", "--probe", f"{work}/probe-err", "--pool", "max")
    check(p.returncode == 1 and "--pool" in p.stderr, f"--pool max: exit 1: {p.stderr.strip()}")
    p = run(harvest, "export", f"{work}/pr.h5", "--probe", f"{work}/p", "--shards", f"{work}/s")
    check(p.returncode == 1 and "--shards" in p.stderr and "--probe" in p.stderr,
          "--probe and --shards together: exit 1 naming both")


if not READER_ONLY:
    errors()
finish()
