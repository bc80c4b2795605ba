"""An output moved, copied or renamed (issue 19, items 5 and 6), and one whose listed files are
damaged: harvest's tools read exactly the files the master's virtual datasets read, or refuse.

- The pair (OUT.h5 and OUT.h5.parts/) moved or copied into another folder under the same name
  reads as the original, with the original present or gone: inspect "complete: yes", export
  (shards, probe) and stats exit 0 with no NaN, open_output equal to the original.
- A copy or move under another name (B.h5 and B.h5.parts/), with the original present or gone:
  inspect, export, stats exit 1 and open_output raises, each naming the name it was written as
  and what to do; never NaN rows (h5py alone reads the original's files, or NaN without them).
- A listed segment missing, truncated, or replaced by another run's segment: inspect names it
  ("complete: no"); export (shards and probe) and stats exit 1 naming it, open_output raises;
  export --allow-partial exits 0 with only the intact segments' prompts and no NaN.
- HDF5_VDS_PREFIX pointing at another output's parts folder (HDF5 looks there first): refused.
"""
import glob
import os
import shutil
import sys

import h5py
import numpy as np

from util import args, check, finish, init_model, run, write_job, write_prompts

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "io", "python"))
import harvest_data as hd  # noqa: E402

harvest, work = args()
init_model(harvest, f"{work}/model", seed=7)
write_prompts(f"{work}/prompts.jsonl", [5, 7, 3, 9, 4, 6, 8, 2], seed=3)
write_prompts(f"{work}/other.jsonl", [11, 12, 10, 13, 9, 12, 11, 10], seed=4)
ACTS = ["decoder_1_output", "encoder_0_output", "logits"]


def run_in(d, *a):
    old = os.getcwd()
    os.chdir(d)
    try:
        return run(harvest, *a)
    finally:
        os.chdir(old)


for d, kw in (("a", {}), ("other", {"data": "../other.jsonl"}),
              ("fewer", {"acts": ["logits"]})):
    os.makedirs(f"{work}/{d}", exist_ok=True)
    write_job(f"{work}/{d}/job.json", model="../model", data=kw.get("data", "../prompts.jsonl"),
              activations=kw.get("acts", ACTS), batch_size=2,
              output={"path": "out.h5", "checkpoint_seconds": 0})
    run_in(f"{work}/{d}", "run", "job.json", "--quiet")
ORIG = f"{work}/a/out.h5"


def values(path):
    with h5py.File(path, "r") as f:
        out = {}
        f.visititems(lambda n, o: out.__setitem__(n, o[()]) if isinstance(o, h5py.Dataset)
                     else None)
        return out


REF = values(ORIG)


def same(a, b):
    return np.array_equal(a, b, equal_nan=a.dtype.kind == "f")


def has_nan(folder):
    for fn in glob.glob(f"{folder}/**/*.h5", recursive=True):
        with h5py.File(fn, "r") as f:
            bad = []
            f.visititems(lambda n, o: bad.append(n) if isinstance(o, h5py.Dataset) and
                         o.dtype.kind == "f" and np.isnan(o[()]).any() else None)
            if bad:
                return f"{fn}: {bad}"
    return None


def copy_pair(src, dst):
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    shutil.copy(src, dst)
    shutil.copytree(src + ".parts", dst + ".parts")


def move_pair(src, dst):
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    os.rename(src, dst)
    os.rename(src + ".parts", dst + ".parts")


def reads_well(path, what):
    """inspect, export (shards, probe), stats and open_output on a good output"""
    p = run(harvest, "inspect", path)
    check(p.returncode == 0 and "complete: yes" in p.stdout, f"{what}: inspect complete: yes "
          f"(exit {p.returncode}: {p.stdout[-300:]} {p.stderr[-300:]})")
    sh = f"{path}.shards"
    p = run(harvest, "export", path, "--shards", sh, "--quiet")
    check(p.returncode == 0 and not has_nan(sh), f"{what}: export --shards exit 0, no NaN "
          f"(exit {p.returncode}: {p.stderr[-300:]})")
    pr = f"{path}.probe"
    p = run(harvest, "export", path, "--probe", pr, "--quiet")
    check(p.returncode == 0 and not has_nan(pr), f"{what}: export --probe exit 0, no NaN "
          f"(exit {p.returncode}: {p.stderr[-300:]})")
    shutil.rmtree(sh, ignore_errors=True)
    shutil.rmtree(pr, ignore_errors=True)
    try:
        o = hd.open_output(path)
        eq = all(np.array_equal(o.rows(n, 0, REF["activations/" + n].shape[0]),
                                REF["activations/" + n], equal_nan=True) for n in o.names)
        o.close()
    except Exception as e:  # noqa: BLE001
        eq = f"raised {e}"
    check(eq is True, f"{what}: open_output equals the original ({eq})")
    v = values(path)
    check(all(same(v[k], REF[k]) for k in REF if not k.startswith("stats/")),
          f"{what}: h5py reads the original's values")
    p = run(harvest, "stats", path, "--quiet")
    check(p.returncode == 0, f"{what}: stats exit 0 ({p.stderr[-300:]})")


def refused(path, what, words, partial_ok=False):
    """inspect/export/stats exit 1 and open_output raises, each naming words; never NaN"""
    p = run(harvest, "inspect", path)
    if partial_ok:  # a damaged output: inspect names the file and says complete: no
        check(p.returncode == 0 and "complete: no" in p.stdout and
              all(w in p.stdout for w in words), f"{what}: inspect names {words}, complete: no "
              f"(exit {p.returncode}: {p.stdout[-400:]} {p.stderr[-300:]})")
    else:
        check(p.returncode == 1 and all(w in p.stderr for w in words) and
              "complete: yes" not in p.stdout, f"{what}: inspect exit 1 naming {words} "
              f"(exit {p.returncode}: {p.stdout[-300:]} {p.stderr[-400:]})")
    for mode in ("--shards", "--probe"):
        d = f"{path}.x"
        p = run(harvest, "export", path, mode, d, "--quiet")
        check(p.returncode == 1 and all(w in p.stderr for w in words) and not
              (os.path.isdir(d) and has_nan(d)), f"{what}: export {mode} exit 1 naming {words} "
              f"(exit {p.returncode}: {p.stderr[-400:]})")
        shutil.rmtree(d, ignore_errors=True)
    p = run(harvest, "stats", path, "--quiet")
    check(p.returncode == 1 and all(w in p.stderr for w in words),
          f"{what}: stats exit 1 naming {words} (exit {p.returncode}: {p.stderr[-400:]})")
    try:
        hd.open_output(path).close()
        msg = None
    except ValueError as e:
        msg = str(e)
    check(msg is not None and all(w in msg for w in words),
          f"{what}: open_output raises naming {words} ({msg})")


def h5py_reads(path):
    """what h5py alone reads of the master's activations: "original" or "NaN" (or "other")"""
    v = values(path)
    if all(same(v[k], REF[k]) for k in REF if k.startswith("activations/")):
        return "original"
    return "NaN" if all(np.isnan(v[k]).all() for k in REF if k.startswith("activations/") and
                        v[k].dtype.kind == "f") else "other"


# ---- the pair under its own name in another folder ----
copy_pair(ORIG, f"{work}/c/out.h5")
reads_well(f"{work}/c/out.h5", "copied into another folder, the original present")
move_pair(f"{work}/a/out.h5", f"{work}/away/out.h5")  # the original gone
reads_well(f"{work}/c/out.h5", "copied into another folder, the original gone")
move_pair(f"{work}/c/out.h5", f"{work}/m/out.h5")
reads_well(f"{work}/m/out.h5", "moved into another folder")
move_pair(f"{work}/away/out.h5", ORIG)  # back

# ---- under another name: refused, naming the name it was written as ----
RENAMED = ["written as out.h5", "renamed or copied", "rename it back to out.h5"]
copy_pair(ORIG, f"{work}/a/b.h5")
refused(f"{work}/a/b.h5", "a renamed copy, the original present", RENAMED)
check(h5py_reads(f"{work}/a/b.h5") == "original",
      "h5py alone: a renamed copy reads the original's files")
move_pair(ORIG, f"{work}/away/out.h5")
refused(f"{work}/a/b.h5", "a renamed copy, the original gone", RENAMED)
check(h5py_reads(f"{work}/a/b.h5") == "NaN",
      "h5py alone: a renamed copy without the original reads NaN")
move_pair(f"{work}/a/b.h5", f"{work}/n/b.h5")
refused(f"{work}/n/b.h5", "renamed and moved into another folder", RENAMED)
move_pair(f"{work}/away/out.h5", ORIG)
move_pair(ORIG, f"{work}/a/c.h5")
refused(f"{work}/a/c.h5", "renamed (moved) in place", RENAMED)
move_pair(f"{work}/a/c.h5", ORIG)
reads_well(ORIG, "renamed back")

# ---- HDF5_VDS_PREFIX: HDF5 looks there first ----
ENV = {"HDF5_VDS_PREFIX": f"{work}/other"}  # holds another output's out.h5.parts/
p = run(harvest, "inspect", ORIG, env=ENV)
check(p.returncode == 1 and "HDF5_VDS_PREFIX" in p.stderr and "other/out.h5.parts" in p.stderr,
      f"HDF5_VDS_PREFIX at another output: inspect exit 1 naming it ({p.stderr[-300:]})")
p = run(harvest, "export", ORIG, "--shards", f"{work}/pre", "--quiet", env=ENV)
# (export reads /prompts before its check: here the other output's tables fail it first)
check(p.returncode == 1 and not glob.glob(f"{work}/pre/*.h5"),
      f"HDF5_VDS_PREFIX at another output: export exit 1, no shards ({p.stderr[-300:]})")
os.environ.update(ENV)
try:
    hd.open_output(ORIG).close()
    msg = None
except ValueError as e:
    msg = str(e)
del os.environ["HDF5_VDS_PREFIX"]
check(msg and "HDF5_VDS_PREFIX" in msg, f"HDF5_VDS_PREFIX: open_output raises ({msg})")
p = run(harvest, "inspect", ORIG, env={"HDF5_VDS_PREFIX": "${ORIGIN}"})
check(p.returncode == 0 and "complete: yes" in p.stdout,
      f"HDF5_VDS_PREFIX=${{ORIGIN}} (the master's own folder): complete: yes ({p.stderr[-300:]})")

# ---- a listed segment missing, truncated or replaced ----
SEG = "seg-000-00000-00001.h5"


def damaged(label, spoil, words):
    path = f"{work}/{label}/out.h5"
    copy_pair(ORIG, path)
    spoil(f"{path}.parts/{SEG}")
    refused(path, label, [f"out.h5.parts/{SEG}"] + words, partial_ok=True)
    d = f"{path}.partial"
    p = run(harvest, "export", path, "--shards", d, "--allow-partial", "--quiet")
    n = 0
    for fn in glob.glob(f"{d}/*.h5"):
        with h5py.File(fn, "r") as f:
            n += f["activations/logits"].shape[0] if "activations/logits" in f else \
                f["logits"].shape[0]
    # batch 1 (prompts 2 and 3: 3 + 9 tokens) is left out
    check(p.returncode == 0 and not has_nan(d) and n == sum([5, 7, 3, 9, 4, 6, 8, 2]) - 12,
          f"{label}: export --allow-partial exit 0, only the intact prompts' {n} tokens, no NaN "
          f"(exit {p.returncode}: {p.stderr[-300:]})")
    p = run(harvest, "export", path, "--probe", d + "p", "--allow-partial", "--quiet")
    check(p.returncode == 0 and not has_nan(d + "p"),
          f"{label}: export --probe --allow-partial exit 0, no NaN ({p.stderr[-300:]})")


def truncate(fn):
    with open(fn, "r+b") as f:
        f.truncate(os.path.getsize(fn) // 2)


damaged("missing", os.remove, ["is missing"])
damaged("truncated", truncate, [])
damaged("other-data", lambda fn: shutil.copy(f"{work}/other/out.h5.parts/{SEG}", fn), [])
damaged("fewer-datasets", lambda fn: shutil.copy(f"{work}/fewer/out.h5.parts/{SEG}", fn),
        ["datasets"])
finish()
