#!/usr/bin/python3
"""Bit-for-bit check of `harvest export` against another build's exports: for refactors of the
export side, which must keep every export output bit for bit (a one-off tool, not a CTest test).

  tests/exportcheck.py make OLD_HARVEST BASEDIR          every case with the old build
  tests/exportcheck.py compare NEW_HARVEST OUTDIR BASEDIR  the same cases with the new build, each
                                                       file compared with BASEDIR's
The sources (harvest runs made by `make`'s build; `compare` copies BASEDIR's, so both builds export
the same files: a source's provenance names its model's path, and the manifest fingerprints it):
a prompt layout (float32, data.fields, `harvest stats` added), a token layout (bfloat16), a prompt
layout under `select` (float16, write-time statistics); and a job with "pool": ["last", "mean"]
(run by each build: its master gets /pooled at the end of the run). The exports of each: HDF5 shards
(float32 and --dtype float16/bfloat16, --val, --names), npy and safetensors shards, HDF5 at np 2,
the same command again (every shard verified and kept: which ones, by inode, is compared too), a
removed and a truncated shard then the
command again (those rewritten), --probe (both pools; one pool with --names).
Compares every file of every export folder: HDF5 files (shards, probe.h5, the pooled master) by
every dataset (values, dtype, shape; NaN == NaN), every attribute of every object and the object
tree; .npy and .safetensors files byte for byte; JSON files (manifest.json, shard.json) key by key
but the bookkeeping keys (BOOKKEEPING_KEYS: times, host, PID); the file lists themselves. Also
reports whether each HDF5 file is equal byte for byte (informative: a refactor should keep it)."""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import util  # noqa: E402

LENS = [5, 17, 1, 30, 64, 9, 12, 40, 3, 22, 64, 2, 50, 7, 33, 11, 48, 4, 26, 60, 0, 13]
NAMES = ["decoder_0_output", "encoder_0_q", "encoder_1_output"]
BOOKKEEPING_KEYS = {"time", "started", "finished_at", "host", "pid", "hostname", "seconds",
                    "elapsed", "date"}
FIELDS = {"label": "int", "tag": {"type": "string", "default": "none"}}


def sources(harvest, root, base):
    """{name: output path}: the harvest outputs the exports read (base: copied from there)"""
    util.init_model(harvest, f"{root}/model", seed=5)
    import random
    rng = random.Random(7)
    with open(f"{root}/data.jsonl", "w") as f:
        for i, n in enumerate(LENS):
            d = {"input_ids": [rng.randrange(8192) for _ in range(n)], "label": i - 4}
            if i % 3:
                d["tag"] = rng.choice(["a", "bé", ""])
            f.write(json.dumps(d) + "\n")
    data = {"path": "data.jsonl", "fields": FIELDS}
    jobs = {
        "pr": dict(output={"path": "pr.h5", "layout": "prompt", "dtype": "float32"}),
        "tok": dict(output={"path": "tok.h5", "layout": "token", "dtype": "bfloat16"}),
        "sel": dict(output={"path": "sel.h5", "layout": "prompt", "dtype": "float16"},
                    statistics=True, select={"skip_first": 1, "tokens_per_context": 5, "seed": 3}),
        "pool": dict(output={"path": "pool.h5", "layout": "token"}, pool=["last", "mean"]),
    }
    outs = {}
    for name in ("pr", "tok", "sel") if base else ():
        for end in (".h5", ".h5.parts"):
            shutil.rmtree(f"{root}/{name}{end}", ignore_errors=True)
            (shutil.copytree if end == ".h5.parts" else shutil.copy2)(
                f"{base}/{name}{end}", f"{root}/{name}{end}")
        outs[name] = f"{root}/{name}.h5"
        del jobs[name]
    for name, extra in jobs.items():
        j = util.write_job(f"{root}/{name}.json", activations=NAMES, batch_size=3,
                           max_seq_len=64, data=data, **extra)
        util.run(harvest, "run", j, "--quiet", "--overwrite", check=0)
        outs[name] = f"{root}/{name}.h5"
    if not base:
        util.run(harvest, "stats", outs["pr"], check=0)
    return outs


def export(harvest, src, *opts, np_=1, rc=0):
    cmd = [harvest, "export", src, "--quiet", *opts]
    if np_ > 1:
        cmd = ["mpirun", "-np", str(np_), "--oversubscribe"] + cmd
    p = subprocess.run(cmd, capture_output=True, text=True, env=util.MPI_ENV, timeout=900)
    if p.returncode != rc:
        sys.exit(f"{' '.join(cmd)}: exit {p.returncode}, expected {rc}\n{p.stderr[-3000:]}")


def inodes(d):
    """{shard: inode} of export folder d (an npy shard: its folder's)"""
    return {n: os.stat(os.path.join(d, n)).st_ino for n in os.listdir(d)
            if n.startswith(("train-", "val-")) and not n.endswith(".tmp")}


def first_shard(d):
    return sorted(n for n in os.listdir(d) if n.startswith("train-"))[0]


def make(harvest, root, base=None):
    """{case: export folder (or file)}"""
    os.makedirs(root, exist_ok=True)
    srcs = sources(harvest, root, base)
    cases = {}

    def shards(name, src, *opts, np_=1):
        d = f"{root}/x-{name}"
        shutil.rmtree(d, ignore_errors=True)
        export(harvest, src, "--shards", d, *opts, np_=np_)
        cases[name] = d
        return d

    small = ["--shard-tokens", "100"]
    for s in ("pr", "tok", "sel"):
        shards(f"{s}-h5", srcs[s], *small, "--val", "0.2")
        shards(f"{s}-npy", srcs[s], *small, "--val", "0.2", "--format", "npy")
        shards(f"{s}-st", srcs[s], *small, "--val", "0.2", "--format", "safetensors")
    shards("pr-f16", srcs["pr"], "--dtype", "float16", "--shard-tokens", "64", "--seed", "9")
    shards("tok-bf16-names", srcs["tok"], "--dtype", "bfloat16", "--names",
           "encoder_1_output,decoder_0_output", "--shard-size", "40000")
    shards("pr-np2", srcs["pr"], *small, "--val", "0.3", np_=2)
    shards("pr-st-np2", srcs["pr"], *small, "--format", "safetensors", np_=2)
    # again: every shard verified and kept; removed and damaged shards rewritten
    for name, fmt in (("pr-h5", "hdf5"), ("pr-npy", "npy"), ("pr-st", "safetensors")):
        d = cases[name]
        ino = inodes(d)
        export(harvest, srcs["pr"], "--shards", d, *small, "--val", "0.2", "--format", fmt)
        after = inodes(d)  # a shard verified is kept (the same inode), one written again is not
        kept = {"kept": sorted(n for n in ino if after.get(n) == ino[n]), "of": sorted(ino)}
        json.dump(kept, open(f"{root}/kept-{name}.json", "w"))
        cases[f"kept-{name}"] = f"{root}/kept-{name}.json"
        shard = os.path.join(d, first_shard(d))
        if os.path.isdir(shard):
            victim = os.path.join(shard, sorted(os.listdir(shard))[0])
        else:
            victim = shard
        with open(victim, "r+b") as f:
            f.truncate(os.path.getsize(victim) // 2)
        export(harvest, srcs["pr"], "--shards", d, *small, "--val", "0.2", "--format", fmt)
        shutil.rmtree(shard) if os.path.isdir(shard) else os.remove(shard)
        export(harvest, srcs["pr"], "--shards", d, *small, "--val", "0.2", "--format", fmt)
    for s in ("pr", "tok", "sel"):
        d = f"{root}/p-{s}"
        shutil.rmtree(d, ignore_errors=True)
        export(harvest, srcs[s], "--probe", d)
        cases[f"probe-{s}"] = d
    d = f"{root}/p-pr-mean"
    shutil.rmtree(d, ignore_errors=True)
    export(harvest, srcs["pr"], "--probe", d, "--pool", "mean", "--names", "encoder_0_q")
    cases["probe-pr-mean"] = d
    cases["pool-master"] = srcs["pool"]
    return cases


def h5_diff(a, b):
    """None if HDF5 files a and b hold the same objects, datasets and attributes; else what"""
    import h5py
    import numpy as np

    def same(x, y):
        x, y = np.asarray(x), np.asarray(y)
        if x.dtype != y.dtype or x.shape != y.shape:
            return False
        return np.array_equal(x, y, equal_nan=x.dtype.kind == "f")

    with h5py.File(a, "r") as fa, h5py.File(b, "r") as fb:
        na, nb = [], []
        fa.visit(na.append)
        fb.visit(nb.append)
        if na != nb:
            return f"objects {sorted(set(na) ^ set(nb))[:5]}"
        for n in [""] + na:
            oa, ob = (fa, fb) if n == "" else (fa[n], fb[n])
            if list(oa.attrs) != list(ob.attrs):
                return f"/{n}: attribute names {list(oa.attrs)} != {list(ob.attrs)}"
            for k in oa.attrs:
                ign = n == "" and k in util.BOOKKEEPING | {"job"}
                if not ign and not same(oa.attrs[k], ob.attrs[k]):
                    return f"/{n}: attribute {k}"
                if not ign and oa.attrs.get_id(k).dtype != ob.attrs.get_id(k).dtype:
                    return f"/{n}: attribute {k}: type"
            if isinstance(oa, h5py.Dataset):
                if oa.dtype != ob.dtype or oa.id.get_type() != ob.id.get_type() or \
                        not same(oa[()], ob[()]):
                    return f"/{n}: values or type"
                if oa.id.get_create_plist().get_layout() != ob.id.get_create_plist().get_layout():
                    return f"/{n}: layout"
    return None


def json_diff(a, b, at=""):
    if isinstance(a, dict) and isinstance(b, dict):
        ka, kb = set(a) - BOOKKEEPING_KEYS, set(b) - BOOKKEEPING_KEYS
        if ka != kb:
            return f"{at}: keys {sorted(ka ^ kb)}"
        for k in sorted(ka):
            d = json_diff(a[k], b[k], f"{at}.{k}")
            if d:
                return d
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{at}: length"
        for i, (x, y) in enumerate(zip(a, b)):
            d = json_diff(x, y, f"{at}[{i}]")
            if d:
                return d
        return None
    return None if a == b and type(a) is type(b) else f"{at}: {a!r} != {b!r}"


def file_diff(new, ref):
    """(None or what differs, whether the bytes are equal)"""
    raw = open(new, "rb").read() == open(ref, "rb").read()
    if new.endswith(".h5"):
        return h5_diff(new, ref), raw
    if new.endswith(".json"):
        return json_diff(json.load(open(new)), json.load(open(ref))), raw
    return (None if raw else "bytes"), raw


def tree(d):
    if os.path.isfile(d):
        return [""]
    return sorted(os.path.relpath(os.path.join(r, n), d) for r, _, fs in os.walk(d) for n in fs)


def compare(cases, base):
    bad = 0
    for name, new in cases.items():
        ref = os.path.join(base, os.path.basename(new))
        tn, tr = tree(new), tree(ref)
        if tn != tr:
            print(f"{name}: DIFFERS: files {sorted(set(tn) ^ set(tr))[:6]}")
            bad += 1
            continue
        what, raw_all = None, True
        for rel in tn:
            d, raw = file_diff(os.path.join(new, rel) if rel else new,
                               os.path.join(ref, rel) if rel else ref)
            raw_all &= raw or rel.endswith(".json") or not rel  # JSON: times differ
            if d and not what:
                what = f"{rel or os.path.basename(new)}: {d}"
        print(f"{name}: {'identical' if what is None else 'DIFFERS: ' + what} "
              f"({len(tn)} files{', HDF5/npy/safetensors bytes equal' if raw_all else ''})",
              flush=True)
        bad += what is not None
    print(f"{len(cases) - bad} passed, {bad} failed")
    return bad


if __name__ == "__main__":
    if len(sys.argv) < 4 or sys.argv[1] not in ("make", "compare") or \
            (sys.argv[1] == "compare" and len(sys.argv) < 5):
        sys.exit(__doc__)
    cmd, harvest, root = sys.argv[1], os.path.abspath(sys.argv[2]), os.path.abspath(sys.argv[3])
    base = os.path.abspath(sys.argv[4]) if cmd == "compare" else None
    cases = make(harvest, root, base)
    if cmd == "make":
        print(f"{len(cases)} cases made")
        sys.exit(0)
    sys.exit(1 if compare(cases, base) else 0)
