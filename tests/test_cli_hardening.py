"""Command-line hardening (issue 19, items 1 and 17).

1. No command that writes takes one of its inputs as an output (device + inode, so links count):
   `export --shards DIR` / `--probe DIR` where a file the export writes is the source's master, a
   file of its .parts/ or the folder itself; `init-model --config DIR/config.json DIR`; `tokenize
   -o` onto an input, a glob's match or the tokenizer; `stats` on a master that is also one of
   its own parts. Each exits 1 naming both paths, and no input changes.
17. Every numeric flag of every subcommand takes its whole value, finite and in range (NaN, inf,
   empty, trailing junk, hex, negative, huge: exit 1 naming the flag); a flag a command (or an
   init-model family, or an export mode) does not take is an error; `export --memory` is checked
   against the shards actually written; `Shards(DIR, "val")` of an export without --val is a
   ValueError saying so."""
import hashlib
import json
import os
import shutil
import subprocess
import sys

from util import MPI_ENV, args, check, finish, init_model, run, write_prompts

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "io", "python"))
import harvest_data as hd  # noqa: E402

harvest, work = args()
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKENIZER = os.path.join(ROOT, "data", "tokenizer.json")
model = init_model(harvest, f"{work}/model", seed=3)
write_prompts(f"{work}/prompts.jsonl", [5, 9, 3, 12, 7], seed=3)


def h(*a, cwd=None, timeout=None):
    """harvest *a; a bench or a refusal answers in seconds (a bench that runs: exit -9, killed)"""
    timeout = timeout or (30 if a[0] == "bench" else 300)
    try:
        return subprocess.run([harvest, *a], capture_output=True, text=True, timeout=timeout,
                              env=MPI_ENV, cwd=cwd)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(a, -9, "", f"(killed after {timeout} s)")


def digest(top):
    """sha256 of every file under top (a file or a folder), by path"""
    paths = [top] if os.path.isfile(top) else [os.path.join(d, f) for d, _, fs in os.walk(top)
                                               for f in fs]
    return {p: hashlib.sha256(open(p, "rb").read()).hexdigest() for p in sorted(paths)}


def make_output(path):
    """a finished output at path (the job beside it)"""
    jp = path + ".job.json"
    with open(jp, "w") as f:
        json.dump({"model": model, "data": f"{work}/prompts.jsonl",
                   "activations": ["encoder_0_output"], "output": {"path": path}}, f)
    p = h("run", jp, "--quiet")
    check(p.returncode == 0, f"run {jp}: {p.stderr.strip()[-300:]}")
    os.remove(jp)
    return path


def refused(label, p, needles, before, after):
    ok = check(p.returncode == 1, f"{label}: exit {p.returncode}, expected 1: {p.stderr.strip()[-400:]}")
    for n in needles:
        ok &= check(n in p.stderr, f"{label}: message lacks {n!r}: {p.stderr.strip()[-400:]}")
    ok &= check(before == after, f"{label}: an input changed")
    if ok:
        print(f"ok: {label}: {p.stderr.strip().splitlines()[-1][:200]}")


# ---- 1. export writing over its own source ------------------------------------------------
D = f"{work}/D"
os.makedirs(D)
make_output(f"{D}/train-00000.h5")
before = digest(D)
p = h("export", "train-00000.h5", "--shards", ".", "--quiet", cwd=D)
refused("export --shards . holding the master as train-00000.h5", p,
        ["train-00000.h5", "one of its inputs"], before, digest(D))

P = f"{work}/P"
os.makedirs(P)
make_output(f"{P}/probe.h5")
before = digest(P)
p = h("export", "probe.h5", "--probe", ".", "--quiet", cwd=P)
refused("export --probe . holding the master as probe.h5", p, ["probe.h5", "one of its inputs"],
        before, digest(P))

# a segment file hard-linked as a shard name; the folder being the master or its .parts
src = make_output(f"{work}/src.h5")
seg = sorted(f for f in os.listdir(src + ".parts") if f.startswith("seg-"))[0]
X = f"{work}/X"
os.makedirs(X)
os.link(os.path.join(src + ".parts", seg), f"{X}/val-00000.h5")
before = digest(src + ".parts")
p = h("export", src, "--shards", X, "--quiet")
refused("export --shards DIR with a segment hard-linked as val-00000.h5", p,
        [f"{X}/val-00000.h5", seg], before, digest(src + ".parts"))
os.makedirs(f"{work}/Y")
os.symlink(src, f"{work}/Y/manifest.json")
p = h("export", src, "--shards", f"{work}/Y", "--quiet")
refused("export --shards DIR with manifest.json a symlink to the master", p,
        ["manifest.json", src], before, digest(src + ".parts"))
for flag, d in (("--shards", src), ("--probe", src + ".parts")):
    b = digest(src) | digest(src + ".parts")
    p = h("export", src, flag, d, "--quiet")
    refused(f"export {flag} {os.path.basename(d)} (the folder is the source's)", p, [flag, d], b,
            digest(src) | digest(src + ".parts"))
# an export beside its source (no name in common) is fine
p = h("export", src, "--shards", work, "--quiet")
check(p.returncode == 0 and os.path.exists(f"{work}/train-00000.h5"),
      f"export --shards into the source's own folder: {p.stderr.strip()[-300:]}")

# ---- 1. init-model writing over its --config ------------------------------------------------
Q = f"{work}/q"
run(harvest, "init-model", "--family", "qwen2", "--preset", "Qwen2.5-0.5B", Q, check=0)
before = digest(Q)
p = h("init-model", "--family", "qwen2", "--config", f"{Q}/config.json", "--layers", "1", Q)
refused("init-model --config DIR/config.json DIR", p, [f"{Q}/config.json", "one of its inputs"],
        before, digest(Q))
shutil.copy(f"{Q}/config.json", f"{work}/qc.json")
os.link(f"{work}/qc.json", f"{work}/q2-index")
os.makedirs(f"{work}/q2")
os.rename(f"{work}/q2-index", f"{work}/q2/model.safetensors.index.json")
before = digest(f"{work}/qc.json")
p = h("init-model", "--family", "qwen2", "--config", f"{work}/qc.json", "--layers", "1", f"{work}/q2")
refused("init-model into a folder where a file it writes is a hard link of --config", p,
        ["model.safetensors.index.json", "qc.json"], before, digest(f"{work}/qc.json"))

# ---- 1. tokenize -o onto what it reads ------------------------------------------------------
T = f"{work}/tk"
os.makedirs(T)
shutil.copy(TOKENIZER, f"{T}/tokenizer.json")
for n in ("a.txt", "b.txt"):
    with open(f"{T}/{n}", "w") as f:
        f.write("hello world\nsecond line\n")
before = digest(T)
for label, a, needles in (("-o onto an input", ["tokenizer.json", "a.txt", "-o", "a.txt"], ["a.txt"]),
                          ("-o onto the tokenizer", [".", "a.txt", "-o", "tokenizer.json"],
                           ["tokenizer.json", "the tokenizer"]),
                          ("-o onto a hard link of an input", ["tokenizer.json", "b.txt", "-o", "a.txt"],
                           None),
                          ("-o matched by an input glob", ["tokenizer.json", "*.txt", "-o", "c.txt"],
                           ["c.txt", "*.txt"])):
    if needles is None:  # a.txt a hard link of b.txt
        os.remove(f"{T}/a.txt")
        os.link(f"{T}/b.txt", f"{T}/a.txt")
        needles = ["a.txt", "b.txt"]
    p = h("tokenize", *a, cwd=T)
    refused(f"tokenize {label}", p, needles + ["-o"], before, digest(T))
check(not os.path.exists(f"{T}/c.txt"), "tokenize: the refused -o file made for the check is removed")
p = h("tokenize", "tokenizer.json", "a.txt", "-o", "out.jsonl", cwd=T)
check(p.returncode == 0 and os.path.getsize(f"{T}/out.jsonl") > 0, f"tokenize -o elsewhere: {p.stderr}")

# ---- 1. stats: the master must not be one of the files it reads -----------------------------
st = make_output(f"{work}/st.h5")
os.link(st, f"{st}.parts/seg-999-00000-00000.h5")
before = digest(st)
p = h("stats", st, "--quiet")
refused("stats on a master that is also a file of its .parts/", p,
        [st, "seg-999-00000-00000.h5"], before, digest(st))

# ---- 17. numeric flags: the whole value, finite, in range -----------------------------------
BAD = ["nan", "inf", "-inf", "", "12abc", "0x10", " 5", "-1", "1e999", "99999999999999999999999"]
QS = f"{work}/q-src"  # for init-model --layers
NUMERIC = [
    (["export", src, "--shards", f"{work}/n"], ["--shard-tokens", "--seed", "--shard-size",
                                                 "--memory", "--val"]),
    (["init-model", "--family", "encdec", f"{work}/n"], ["--seed", "--shards"]),
    (["init-model", "--family", "qwen2", "--config", f"{Q}/config.json", f"{work}/n"], ["--layers"]),
    (["plan", model], ["--pipeline-stages", "--expert-parallel", "--seq-len"]),
    (["bench", "--dir", f"{work}/n"], ["--prompts", "--io-prompts", "--T", "--batch", "--threads"]),
    (["bench", "--model", model, "--dir", f"{work}/n"], ["--runs"]),
    (["stats", src, "--print"], ["--top"]),
    (["inspect", src], ["--text"]),
]
os.makedirs(f"{work}/n")
for base, flags in NUMERIC:
    for flag in flags:
        values = BAD if base[0] != "bench" else ["nan", "", "12abc", "-1", "0", "99999999999"]
        bad = []
        for v in values:
            if flag == "--threads" and v == "0":
                continue  # 0: OpenBLAS's own default
            p = h(*base, flag, v)
            if p.returncode != 1 or flag not in p.stderr:
                bad.append(f"{v!r}: exit {p.returncode}: {p.stderr.strip()[-200:]}")
        if check(not bad, f"{base[0]} {flag}: {bad}"):
            print(f"ok: {base[0]} {flag}: {len(values)} bad values refused naming it")
        p = h(*base, flag)  # no value at all
        check(p.returncode == 1 and flag in p.stderr,
              f"{base[0]} {flag} without a value: exit {p.returncode}: {p.stderr.strip()[-200:]}")
check(not os.listdir(f"{work}/n"), f"nothing written by the refused commands: {os.listdir(f'{work}/n')}")

# bench --runs 0 (printed NaN tokens/s), export --memory nan (printed a garbage number)
p = h("bench", "--model", model, "--runs", "0", "--dir", f"{work}/n")
check(p.returncode == 1 and "--runs" in p.stderr and "nan" not in p.stdout.lower(),
      f"bench --runs 0: exit {p.returncode}: {p.stdout[-200:]} {p.stderr[-200:]}")
# bench --value: a name the model does not have, an empty one, a glob (one value, not a pattern)
for v in ("layers.99.layer_mid", "", "layers.*"):
    p = h("bench", "--model", model, "--value", v, "--T", "8", "--prompts", "1", "--dir",
          f"{work}/n")
    check(p.returncode == 1 and "--value" in p.stderr and "tokens/s" not in p.stdout,
          f"bench --value {v!r}: exit {p.returncode}: {p.stdout[-200:]} {p.stderr[-200:]}")
for flag in ("--memory", "--shard-size"):
    p = h("export", src, "--shards", f"{work}/n", flag, "nan")
    check(p.returncode == 1 and f"{flag} nan" in p.stderr and "-9223372036854775808" not in p.stderr,
          f"export {flag} nan: exit {p.returncode}: {p.stderr.strip()[-200:]}")

# ---- 17. --memory against the shards actually written ---------------------------------------
p = h("export", src, "--shards", f"{work}/m64", "--memory", "64M", "--quiet")
check(p.returncode == 0, f"export --memory 64M of a small output: exit {p.returncode}: {p.stderr.strip()[-300:]}")
p = h("export", src, "--shards", f"{work}/m1k", "--memory", "1K", "--quiet")
check(p.returncode == 1 and "--memory" in p.stderr, f"export --memory 1K: still refused: {p.stderr.strip()}")

# ---- 17. Shards(DIR, "val") of an export without --val --------------------------------------
p = h("export", src, "--shards", f"{work}/plain", "--quiet")
check(p.returncode == 0, f"export without --val: {p.stderr.strip()[-300:]}")


def shards_error(split, want, needles):
    try:
        hd.Shards(f"{work}/plain", split=split)
        check(False, f"Shards({split!r}): no error")
    except want as e:
        if check(all(n in str(e) for n in needles), f"Shards({split!r}): the message: {e}"):
            print(f"ok: Shards({split!r}): {type(e).__name__}: {e}")
    except Exception as e:  # noqa: BLE001
        check(False, f"Shards({split!r}): {type(e).__name__}: {e}, expected {want.__name__}")


shards_error("val", ValueError, ["val", "--val"])
shards_error("test", KeyError, ["test"])
check(len(hd.Shards(f"{work}/plain")) == 36, "Shards(train) still reads")

# ---- 17. a flag a command does not take -----------------------------------------------------
UNTAKEN = [
    (["run", f"{work}/no.json", "--bogus"], None),
    (["activations", model, "--bogus"], None),
    (["inspect", src, "--bogus"], None),
    (["init-model", "--family", "encdec", "--bogus", "x", f"{work}/n"], "--bogus"),
    (["init-model", "--family", "gpt2", "--config", f"{Q}/config.json", "--layers", "2", f"{work}/n"],
     "--config"),
    (["init-model", "--family", "gpt2", "--layers", "2", f"{work}/n"], "--layers"),
    (["init-model", "--family", "encdec", "--config", f"{Q}/config.json", f"{work}/n"], "--config"),
    (["init-model", "--family", "qwen2", "--preset", "Qwen2.5-0.5B", "--dtype", "f16", f"{work}/n"],
     "--dtype"),
    (["tokenize", TOKENIZER, f"{T}/a.txt", "--bogus"], None),
    (["tokenize", TOKENIZER, f"{T}/a.txt", "--skip-special"], "--skip-special"),
    (["tokenize", TOKENIZER, f"{T}/a.txt", "--decode", "--field", "x"], "--field"),
    (["plan", model, "--bogus", "1"], "--bogus"),
    (["bench", "--bogus", "1"], "--bogus"),
    (["bench", "--runs", "2"], "--runs"),
    (["bench", "--value", "layer_mid"], "--value"),
    (["bench", "--model", model, "--io-prompts", "2"], "--io-prompts"),
    (["stats", src, "--bogus"], None),
    (["stats", src, "--top", "3"], "--top"),
    (["stats", src, "--print", "--names", "x"], "--names"),
    (["export", src, "--shards", f"{work}/n", "--bogus", "1"], "--bogus"),
    (["export", src, "--shards", f"{work}/n", "--pool", "last"], "--pool"),
    (["export", src, "--probe", f"{work}/n", "--seed", "3"], "--seed"),
    (["export", src, "--probe", f"{work}/n", "--memory", "1G"], "--memory"),
    (["export", src, "--shards", f"{work}/n", "--shard-tokens", "5", "--shard-size", "1M"],
     "--shard-size"),
]
for a, flag in UNTAKEN:
    p = h(*a)
    if check(p.returncode == 1 and (flag is None or flag in p.stderr),
             f"{' '.join(a[:1] + a[2:])}: exit {p.returncode}, expected 1 naming {flag}: "
             f"{p.stderr.strip()[-300:]}"):
        print(f"ok: {a[0]} refuses {flag or a[-1]}")
check(not os.listdir(f"{work}/n"), f"nothing written by the refused commands: {os.listdir(f'{work}/n')}")

finish()
