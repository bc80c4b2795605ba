"""`harvest export` and io/python/harvest_data.py: every token lands exactly once across the
shards and in exactly one of train/val (no document in both), each row equal to its source row in
float32, float16 and bfloat16 (raw bits widened); the same shards on np 1 and np 2; a SIGKILL
mid-export then the same command gives the same shards (a damaged shard is rewritten); peak memory
flat in the corpus size (0.5 M vs 4 M tokens); the named errors; the reader yields every token
exactly once an epoch, over ranks too, and open_output equals h5py on both layouts.
Run by test_pip_install.py against the installed package (HARVEST_DATA_INSTALLED=1), it makes the
checks that call the reader (harvest_data) and the runs they read, not those of the harvest binary
alone (the named errors, --allow-partial, np 2, the kill, memory): this test's own run makes those,
with the same binary and the same runs."""
import hashlib
import json
import os
import resource
import signal
import subprocess
import sys
import time

import h5py
import numpy as np

from util import (EXPORT_LENGTHS as LENGTHS, MPI_ENV, ExportFixture, args, check, finish, reader,
                  synthetic_output)

hd = reader()  # io/python, or the installed package (test_pip_install.py)
READER_ONLY = os.environ.get("HARVEST_DATA_INSTALLED") == "1"  # see the docstring

harvest, work = args()
fx = ExportFixture(harvest, work)
export = fx.export
NAMES = ["decoder_0_output", "encoder_0_q", "encoder_1_output"]


def harvest_out(name, layout, dtype, acts=NAMES, **extra):
    return fx.output(name, acts, layout=layout, dtype=dtype, **extra)


def bf16_round(x):
    """float32 -> bfloat16 bits, round to nearest even (NaN kept quiet)"""
    u = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(x), np.uint16(0x7FC0), r)


def source_tokens(src):
    """{name: [n_tokens, ...] float32 rows}, ids, and the prompt tables of a harvest output"""
    with h5py.File(src, "r") as f:
        L, off = f["prompts/length"][:], f["prompts/token_offset"][:]
        rows = {}
        for n in f["activations"]:
            d = f["activations/" + n]
            axes = [a.decode() if isinstance(a, bytes) else a for a in d.attrs["stored_axes"]]
            if any("key" in a for a in axes):
                continue
            x = d[:]
            if axes[0] != "token":
                seq = axes.index("sequence")
                x = np.concatenate([np.moveaxis(x[p], seq - 1, 0)[:L[p]] for p in range(len(L))])
            rows[n] = x
        return rows, f["tokens/input_ids"][:], L, off, f["prompts/source_index"][:]


def read_export(d):
    """every shard's datasets, by split"""
    m = json.load(open(f"{d}/manifest.json"))
    out = {}
    for split in ("train", "val"):
        parts = []
        for s in m["splits"][split]["shards"]:
            with h5py.File(f"{d}/{s['file']}", "r") as f:
                check(f.attrs["split"] == split, f"{s['file']}: split attribute")
                check(int(f.attrs["n_tokens"]) == s["tokens"], f"{s['file']}: n_tokens")
                g = {k: f["tokens/" + k][:] for k in f["tokens"]}
                for k in f["activations"]:
                    ds = f["activations/" + k]
                    check(ds.chunks is None and ds.compression is None and
                          ds.id.get_offset() is not None, f"{s['file']}: {k} is contiguous")
                    g["act/" + k] = ds[:]
                    g["storage/" + k] = ds.attrs["storage"]
                parts.append(g)
        out[split] = {k: np.concatenate([p[k] for p in parts]) if parts and
                      not k.startswith("storage/") else (parts[0][k] if parts else None)
                      for k in (parts[0] if parts else {})}
    return m, out


def check_export(src, d, dtype, label):
    """every token exactly once, in one split, no document in both, rows equal to the source"""
    rows, ids, L, off, srcidx = source_tokens(src)
    m, ex = read_export(d)
    pairs = []
    docs = {}
    for split, g in ex.items():
        if not g:
            continue
        p, pos = g["prompt_index"], g["position"]
        pairs.append(p * 1000 + pos)
        docs[split] = set(g["source_index"].tolist())
        t = off[p] + pos
        check(np.array_equal(g["input_ids"], ids[t]), f"{label} {split}: input_ids")
        check(np.array_equal(g["source_index"], srcidx[p]), f"{label} {split}: source_index")
        for n in rows:
            want, got = rows[n][t], g["act/" + n]
            st = g["storage/" + n]
            if dtype == "float32":
                ok = got.dtype == np.float32 and np.array_equal(got, want)
            elif dtype == "float16":
                ok = got.dtype == np.float16 and np.array_equal(got, want.astype(np.float16))
            else:
                ok = (st == "bfloat16-as-uint16" and got.dtype == np.uint16 and
                      np.array_equal(got, bf16_round(want)) and
                      np.array_equal(hd.widen_bf16(got), hd.widen_bf16(bf16_round(want))))
            check(ok, f"{label} {split}: {n} rows equal the source's ({dtype})")
    allp = np.concatenate(pairs)
    want = np.concatenate([p * 1000 + np.arange(L[p]) for p in range(len(L))])
    check(len(allp) == len(want) and np.array_equal(np.sort(allp), np.sort(want)),
          f"{label}: every token exactly once across the shards ({len(allp)} of {len(want)})")
    check(not (docs.get("train", set()) & docs.get("val", set())),
          f"{label}: no document in both train and val")
    check(m["splits"]["train"]["tokens"] + m["splits"]["val"]["tokens"] == len(want),
          f"{label}: manifest token counts")
    return ex


def file_hashes(d):
    return {n: hashlib.sha256(open(f"{d}/{n}", "rb").read()).hexdigest()
            for n in sorted(os.listdir(d))}


# ---- rows, dtypes, split -------------------------------------------------------------------
tok = harvest_out("tok", "token", "float32")
for dt in ("float32", "float16", "bfloat16"):
    ex = check_export(tok, f"{work}/sh-{dt}", dt, f"token f32 -> {dt}") if export(
        tok, f"{work}/sh-{dt}", "--dtype", dt, "--shard-tokens", "64", "--val", "0.25",
        "--seed", "7").returncode == 0 else None
m = json.load(open(f"{work}/sh-float32/manifest.json"))
check(m["splits"]["val"]["tokens"] > 0 and m["splits"]["train"]["tokens"] > 0,
      "--val 0.25 holds out some documents")
check(m["source"]["data_checksum"] == "%016x" % (int(h5py.File(tok, "r").attrs["data_checksum"])
                                                  & (2**64 - 1)),
      "manifest: the source's data_checksum")
check(m["dtype"] == "float32" and [n["name"] for n in m["names"]] == NAMES,
      "manifest: dtype and names")
first = read_export(f"{work}/sh-float32")[1]["train"]["prompt_index"]
check(not np.array_equal(first, np.sort(first)), "the rows are shuffled")

# prompt layout stored as bfloat16, exported as stored: raw bits equal the source's bits
pr = harvest_out("pr", "prompt", "bfloat16", acts=NAMES + ["encoder_0_attn_probs"])
export(pr, f"{work}/sh-pr", "--names", ",".join(NAMES), "--shard-tokens", "100")
m, ex = read_export(f"{work}/sh-pr")
check(m["dtype"] == "bfloat16", "default dtype: the source's storage")
rows, ids, L, off, _ = source_tokens(pr)
t = off[ex["train"]["prompt_index"]] + ex["train"]["position"]
for n in NAMES:
    check(np.array_equal(hd.widen_bf16(ex["train"]["act/" + n]), rows[n][t]),
          f"prompt layout bf16: {n}: widened raw bits equal h5py's read of the source")
check(len(t) == L.sum(), "prompt layout: every token once (no val)")
p = export(pr, f"{work}/sh-pr-all", "--shard-tokens", "100", rc=None)
check(p.returncode == 0 and "encoder_0_attn_probs" not in open(
    f"{work}/sh-pr-all/manifest.json").read(), "default names skip datasets with a key axis")

# ---- errors ---------------------------------------------------------------------------------
def error(label, want, *a, src=tok):
    p = export(src, f"{work}/sh-err", *a, rc=None)
    check(p.returncode == 1 and all(w in p.stderr for w in want),
          f"{label}: exit 1 naming {want}, got {p.returncode}: {p.stderr.strip()[-300:]}")


def errors():
    """the named errors of export"""
    error("unknown name", ["--names", "encoder_9_output", "decoder_0_output"], "--names",
          "encoder_9_output")
    error("name with a key axis", ["encoder_0_attn_probs", "key axis"], "--names",
          "encoder_0_attn_probs", src=pr)
    error("shard size below one row", ["--shard-size", "smaller than one token row"],
          "--shard-size", "100")
    error("zero shard tokens", ["--shard-tokens"], "--shard-tokens", "0")
    error("memory below one shard", ["--memory"], "--memory", "1K")
    error("not an output", ["not a harvest output"], src=f"{work}/model/model.safetensors")
    before = file_hashes(f"{work}/sh-float32")
    p = export(tok, f"{work}/sh-float32", "--shard-tokens", "64", "--val", "0.25", "--seed", "8",
               rc=None)
    check(p.returncode == 1 and "different export" in p.stderr and '"seed"' in p.stderr,
          f"an existing folder with another manifest: exit 1 naming the key: {p.stderr.strip()}")
    check(file_hashes(f"{work}/sh-float32") == before, "... and its files untouched")


def allow_partial(seg):
    """an incomplete copy of seg (the last checkpoint's rows dropped from the master's
    listing): refused, and exported with --allow-partial"""
    inc = f"{work}/inc.h5"
    with open(seg, "rb") as a, open(inc, "wb") as b:
        b.write(a.read())
    os.symlink(f"{seg}.parts", f"{inc}.parts")
    with h5py.File(inc, "r+") as f:
        segs = json.loads(f.attrs["segments"])
        dropped = segs.pop()
        f.attrs["segments"] = json.dumps(segs)
        f.attrs["complete"] = 0
    gone = set(p for r in dropped["runs"] for p in range(int(r[0]), int(r[1])))
    check(len(segs) >= 1 and gone, "the incomplete copy lacks some prompts")
    error("incomplete output", ["incomplete", "--allow-partial"], src=inc)
    if export(inc, f"{work}/sh-inc", "--allow-partial", "--shard-tokens", "50").returncode == 0:
        m, ex = read_export(f"{work}/sh-inc")
        got = set(ex["train"]["prompt_index"].tolist())
        want = set(range(len(LENGTHS))) - gone
        check(got == want, f"--allow-partial exports exactly the complete prompts ({len(got)})")
        check(len(ex["train"]["position"]) == sum(LENGTHS[q] for q in want),
              "--allow-partial: each of their tokens once")


seg = harvest_out("seg", "token", "float32", checkpoint_seconds=0)
if not READER_ONLY:
    errors()
    allow_partial(seg)

# ---- a bigger synthetic output: MPI, kill and resume, memory --------------------------------
def synthetic(path, n_tokens):
    return synthetic_output(path, n_tokens, checksum=12345)


big = synthetic(f"{work}/big.h5", 500_000)
OPTS = ["--shard-tokens", "40000", "--val", "0.1", "--seed", "3", "--memory", "3M"]
export(big, f"{work}/np1", *OPTS)


def np2_kill(big):
    """np 2 == np 1; SIGKILL mid-export then the same command; a damaged shard rewritten"""
    export(big, f"{work}/np2", *OPTS, np_=2)
    h1 = file_hashes(f"{work}/np1")
    check(len(h1) > 10 and h1 == file_hashes(f"{work}/np2"),
          f"np 1 and np 2 write the same shards, byte for byte ({len(h1)} files)")
    m, ex = read_export(f"{work}/np1")
    for split, g in ex.items():
        t = g["prompt_index"] * 128 + g["position"]
        check(np.array_equal(g["act/x"][:, 0], t.astype(np.float32)), f"big {split}: rows follow")
    allt = np.concatenate([ex[s]["prompt_index"] * 128 + ex[s]["position"] for s in ex])
    check(np.array_equal(np.sort(allt), np.arange(500_000)), "big: every token exactly once")

    # SIGKILL once some shards are finished, then the same command
    k = f"{work}/killed"
    env = dict(MPI_ENV)
    p = subprocess.Popen([harvest, "export", big, "--shards", k, *OPTS], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t0 = time.time()
    while p.poll() is None and time.time() - t0 < 120:
        if os.path.isdir(k) and any(n.endswith(".h5") for n in os.listdir(k)):
            break
        time.sleep(0.005)
    p.send_signal(signal.SIGKILL)
    p.wait()
    left = [n for n in os.listdir(k) if n.endswith(".h5")] if os.path.isdir(k) else []
    check(0 < len(left) < len(h1) - 1, f"the kill landed mid-export ({len(left)} shards finished)")
    export(big, k, *OPTS)
    check(file_hashes(k) == h1, "killed, then the same command: the same shards")
    # a damaged finished shard is found and rewritten
    victim = f"{k}/train-00002.h5"
    with open(victim, "r+b") as f:
        f.seek(os.path.getsize(victim) - 100)
        f.write(b"\xff" * 8)
    export(big, k, *OPTS)
    check(file_hashes(k) == h1, "a damaged shard is rewritten on the next run")


# ---- memory flat in the corpus size ---------------------------------------------------------
def peak_rss_kb(*a):
    code = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, "
            "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    out = subprocess.run([sys.executable, "-c", code, *a], capture_output=True, text=True,
                         env=MPI_ENV, timeout=900)
    check(out.returncode == 0, f"export for memory: {out.stderr[-500:]}")
    return int(out.stdout.strip() or 0)


def memory_flat(big):
    """peak RSS of exports of 0.5 M and 4 M tokens within 6 MB"""
    small, huge = big, synthetic(f"{work}/huge.h5", 4_000_000)
    MEM = ["--shard-tokens", "65536", "--memory", "16M", "--quiet"]
    r_small = peak_rss_kb(harvest, "export", small, "--shards", f"{work}/m-small", *MEM)
    r_huge = peak_rss_kb(harvest, "export", huge, "--shards", f"{work}/m-huge", *MEM)
    print(f"peak RSS: 0.5 M tokens {r_small / 1024:.1f} MB, 4 M tokens {r_huge / 1024:.1f} MB")
    check(abs(r_huge - r_small) < 6 * 1024,
          f"peak RSS flat: {r_small / 1024:.1f} MB vs {r_huge / 1024:.1f} MB (8x the tokens)")
    os.remove(huge)
    subprocess.run(["rm", "-rf", f"{work}/m-huge", f"{work}/m-small"])


if not READER_ONLY:
    np2_kill(big)
    memory_flat(big)

# ---- the reader -----------------------------------------------------------------------------
for d, name in ((f"{work}/np1", "x"), (f"{work}/sh-bfloat16", "encoder_1_output")):
    for split in ("train", "val"):
        s = hd.Shards(d, split)
        want = s.rows(name)  # whole shards in order, widened
        idx = []
        for x, i in s.batches(name, 4096 if name == "x" else 16, seed=1, with_index=True):
            check(np.array_equal(x, want[i]), f"reader {d} {split}: batch rows equal shard rows")
            check(x.dtype == np.float32, "reader: bfloat16 widened to float32")
            idx.append(i)
        idx = np.concatenate(idx) if idx else np.zeros(0, np.int64)
        check(np.array_equal(np.sort(idx), np.arange(s.n_tokens)),
              f"reader {d} {split}: every token exactly once an epoch ({len(idx)})")
        halves = [np.concatenate([i for _, i in s.batches(name, 1000, seed=2, rank=r, world=2,
                                                         with_index=True)] or [np.zeros(0, int)])
                  for r in (0, 1)]
        check(np.array_equal(np.sort(np.concatenate(halves)), np.arange(s.n_tokens)),
              f"reader {d} {split}: ranks 0 and 1 of 2 split the tokens exactly")
s = hd.Shards(f"{work}/np1")
e0 = np.concatenate([i for _, i in s.batches("x", 4096, seed=1, with_index=True)])
e1 = np.concatenate([i for _, i in s.batches("x", 4096, seed=1, epoch=1, with_index=True)])
check(not np.array_equal(e0, e1), "reader: another epoch, another order")
check(hd.stats(f"{work}/np1") is None, "stats: None when there are none")
# batch arrays are reused only once nothing refers to them: batches kept (or views of them) keep
# their values while later ones are read
for d, name in ((f"{work}/np1", "x"), (f"{work}/sh-bfloat16", "encoder_1_output")):
    s = hd.Shards(d)
    for kw in ({}, {"shuffle_rows": True}):
        kept = list(s.batches(name, 1024, seed=4, **kw))
        views = [x[:3] for x in s.batches(name, 1024, seed=4, **kw)]
        fresh = [x.copy() for x in s.batches(name, 1024, seed=4, **kw)]
        check(len(kept) == len(fresh) and all(np.array_equal(a, b) for a, b in zip(kept, fresh))
              and all(np.array_equal(a, b[:3]) for a, b in zip(views, fresh)),
              f"reader {d} {kw}: kept batches and views keep their values")

try:
    import torch
except ImportError:
    torch = None
    print("torch not installed (Debian: python3-torch): the torch paths are not checked")
if torch is not None:
    s = hd.Shards(f"{work}/sh-bfloat16")
    want = s.rows("encoder_1_output")
    for (x, i), y in zip(s.batches("encoder_1_output", 16, seed=3, torch=True, with_index=True),
                         s.batches("encoder_1_output", 16, seed=3, torch=True, widen=False)):
        check(isinstance(x, torch.Tensor) and x.dtype == torch.float32 and
              np.array_equal(x.numpy(), want[i]), "torch: float32 batches equal the shard rows")
        check(y.dtype == torch.bfloat16 and torch.equal(y.float(), x),
              "torch, widen=False: torch.bfloat16 over the raw bits")
    big_s = hd.Shards(f"{work}/np1")
    dl = torch.utils.data.DataLoader(big_s.torch_dataset("x", 4096, seed=1, with_index=True),
                                     batch_size=None, num_workers=2)
    idx = np.concatenate([np.asarray(i) for _, i in dl])
    check(np.array_equal(np.sort(idx), np.arange(big_s.n_tokens)),
          "torch DataLoader, 2 workers: every token exactly once an epoch")

# open_output: per prompt and token rows equal h5py's reads, both layouts, bfloat16 raw
for src in (tok, pr, seg):
    o = hd.open_output(src)
    rows = source_tokens(src)[0]
    with h5py.File(src, "r") as f:
        for n in NAMES:
            check(np.array_equal(o.tokens(n, 0, o.n_tokens), rows[n]),
                  f"open_output {os.path.basename(src)}: {n} token rows")
            for q in (0, 4, len(LENGTHS) - 1):
                a, b = int(o.token_offset[q]), int(o.token_offset[q] + o.length[q])
                got = o.prompt(n, q)
                if f["activations/" + n].attrs["stored_axes"][0] != "token":
                    got = np.moveaxis(got, list(f["activations/" + n].attrs["stored_axes"])
                                      .index("sequence") - 1, 0)
                check(np.array_equal(got, rows[n][a:b]),
                      f"open_output {os.path.basename(src)}: {n} prompt {q}")
    o.close()

finish()
