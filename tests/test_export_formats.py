"""`harvest export --format npy|safetensors`: for each format, every token once and in one split,
rows equal to the source's (float32, float16, bfloat16 as raw bits) and to the HDF5 export's with
the same options (the same manifest checksums), the source's /stats copied; the files as their
specs say (NPY 1.0, C order, little-endian; safetensors' header, dtypes, offsets without holes);
loaded by numpy (np.load mmap), torch (torch.from_numpy), a safetensors reader written from the
spec (harvest_data.load_safetensors, and the test's own), and harvest_data.Shards; np 1 == np 2;
SIGKILL mid-export then the same command gives the same files (a damaged shard is rewritten);
`--format hdf5` is the default; another format into a folder is refused naming shard_format;
--format parquet exit 1 naming the flag."""
import hashlib
import json
import os
import signal
import struct
import subprocess
import time

import h5py
import numpy as np

from util import MPI_ENV, ExportFixture, args, check, finish, run, reader, synthetic_output

hd = reader()
harvest, work = args()
fx = ExportFixture(harvest, work)
export = fx.export
NAMES = ["decoder_0_output", "encoder_0_q", "encoder_1_output"]
FORMATS = ("npy", "safetensors")
ST = {"F32": "<f4", "F16": "<f2", "BF16": "<u2", "I64": "<i8", "F64": "<f8"}


def harvest_out(name, layout, dtype, acts=NAMES):
    return fx.output(name, acts, layout=layout, dtype=dtype)


def tree_hashes(d):
    """sha256 of every file under d (an npy shard is a folder)"""
    out = {}
    for root, _, files in os.walk(d):
        for n in files:
            p = os.path.join(root, n)
            out[os.path.relpath(p, d)] = hashlib.sha256(open(p, "rb").read()).hexdigest()
    return out


def bf16_round(x):
    u = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(x), np.uint16(0x7FC0), r)


def own_safetensors(path):
    """a second reader from the spec, independent of harvest_data: {name: array}, metadata; and
    the spec's rules checked on the way (header length, JSON, no holes, alignment, strings)"""
    b = open(path, "rb").read()
    (n,) = struct.unpack("<Q", b[:8])
    h = json.loads(b[8:8 + n].decode("utf-8"))
    meta = h.pop("__metadata__")
    check(n % 8 == 0 and all(isinstance(v, str) for v in meta.values()),
          f"{path}: header length a multiple of 8, __metadata__ a string map")
    spans, out = [], {}
    for name, e in h.items():
        a, z = e["data_offsets"]
        dt = np.dtype(ST[e["dtype"]])
        check(a % dt.itemsize == 0, f"{path}: {name} aligned to its element size")
        out[name] = np.frombuffer(b, dt, int(np.prod(e["shape"], dtype=np.int64)),
                                  8 + n + a).reshape(e["shape"])
        spans.append((a, z))
    spans.sort()
    check(spans[0][0] == 0 and all(spans[i][1] == spans[i + 1][0] for i in range(len(spans) - 1))
          and spans[-1][1] == len(b) - 8 - n, f"{path}: the data buffer has no holes")
    return out, meta, {k: e["dtype"] for k, e in h.items()}


def npy_shard(d):
    """{name: np.load mmap} of an npy shard folder, its attributes; the NPY rules checked"""
    side = json.load(open(f"{d}/shard.json"))
    out = {}
    for a in side["arrays"]:
        fn = f"{d}/{a['file']}"
        with open(fn, "rb") as f:
            v = np.lib.format.read_magic(f)
            shape, fortran, dt = np.lib.format.read_array_header_1_0(f)
            check(v == (1, 0) and not fortran and dt.str[0] in "<|" and f.tell() % 64 == 0,
                  f"{fn}: NPY 1.0, C order, little-endian, 64-byte header")
        x = np.load(fn, mmap_mode="r")
        check(isinstance(x, np.memmap) and list(x.shape) == a["shape"] and
              x.dtype.str == a["dtype"], f"{fn}: np.load(mmap_mode='r') as shard.json says")
        out[a["name"]] = x
    return out, side["attributes"]


def load_shard(fmt, path):
    """{name: array}, {attribute: string}, independently of harvest_data.Shards"""
    if fmt == "npy":
        return npy_shard(path)
    t, meta, _ = own_safetensors(path)
    t2, meta2 = hd.load_safetensors(path)
    check(meta2 == meta and t2.keys() == t.keys() and
          all(np.array_equal(t2[k], t[k]) for k in t), f"{path}: load_safetensors agrees")
    return t, meta


def read_fmt(fmt, d):
    """every shard's arrays, by split, concatenated; the manifest"""
    m = json.load(open(f"{d}/manifest.json"))
    out = {}
    for split in ("train", "val"):
        parts = []
        for s in m["splits"][split]["shards"]:
            arrays, attrs = load_shard(fmt, f"{d}/{s['file']}")
            check(attrs["split"] == split and int(attrs["n_tokens"]) == s["tokens"] and
                  int(attrs["checksum"]) == int(s["checksum"], 16),
                  f"{fmt} {s['file']}: split, n_tokens, checksum attributes")
            parts.append((arrays, attrs))
        out[split] = parts
    return m, out


def read_h5(d):
    m = json.load(open(f"{d}/manifest.json"))
    out = {}
    for split in ("train", "val"):
        parts = []
        for s in m["splits"][split]["shards"]:
            with h5py.File(f"{d}/{s['file']}", "r") as f:
                g = {n: f["activations/" + n][:] for n in f["activations"]}
                g.update({"tokens." + n: f["tokens/" + n][:] for n in f["tokens"]})
                for n in f.get("stats", {}):
                    g.update({f"stats.{n}.{k}": f[f"stats/{n}/{k}"][()] for k in f["stats/" + n]})
                parts.append(g)
        out[split] = parts
    return m, out


def source_rows(src):
    with h5py.File(src, "r") as f:
        L, off = f["prompts/length"][:], f["prompts/token_offset"][:]
        rows = {}
        for n in NAMES:
            d = f["activations/" + n]
            axes = [a.decode() if isinstance(a, bytes) else a for a in d.attrs["stored_axes"]]
            x = d[:]
            if axes[0] != "token":
                seq = axes.index("sequence")
                x = np.concatenate([np.moveaxis(x[p], seq - 1, 0)[:L[p]] for p in range(len(L))])
            rows[n] = x
        st = {f"stats.{n}.{k}": f[f"stats/{n}/{k}"][()] for n in f.get("stats", {})
              for k in f["stats/" + n]}
        return rows, f["tokens/input_ids"][:], L, off, st


def check_format(fmt, src, d, h5dir, dtype, label):
    rows, ids, L, off, st = source_rows(src)
    m, ex = read_fmt(fmt, d)
    mh, eh = read_h5(h5dir)
    check(m["shard_format"] == fmt and "shard_format" not in mh, f"{label}: manifest shard_format")
    same = {k: v for k, v in m.items() if k not in ("shard_format", "splits")}
    check(same == {k: v for k, v in mh.items() if k != "splits"} and
          [e["checksum"] for sp in ("train", "val") for e in m["splits"][sp]["shards"]] ==
          [e["checksum"] for sp in ("train", "val") for e in mh["splits"][sp]["shards"]],
          f"{label}: the manifest is the HDF5 export's (shard checksums too) but shard_format")
    pairs = []
    for split in ("train", "val"):
        for (arrays, attrs), h in zip(ex[split], eh[split]):
            check(sorted(arrays) == sorted(h) and
                  all(np.array_equal(arrays[k], h[k], equal_nan=True) for k in h),
                  f"{label} {split}: every array equals the HDF5 shard's")
            check(all(np.array_equal(arrays[k], v, equal_nan=True) for k, v in st.items()),
                  f"{label} {split}: the source's /stats as stats.NAME.KEY")
            p, pos = arrays["tokens.prompt_index"], arrays["tokens.position"]
            t = off[p] + pos
            pairs.append(p * 1000 + pos)
            check(np.array_equal(arrays["tokens.input_ids"], ids[t]), f"{label}: input_ids")
            for n in NAMES:
                want, got = rows[n][t], arrays[n]
                if dtype == "float32":
                    ok = got.dtype == np.float32 and np.array_equal(got, want)
                elif dtype == "float16":
                    ok = got.dtype == np.float16 and np.array_equal(got, want.astype(np.float16))
                else:
                    ok = (got.dtype == np.uint16 and np.array_equal(got, bf16_round(want)) and
                          attrs["storage." + n] == "bfloat16-as-uint16")
                check(ok, f"{label} {split}: {n} rows equal the source's ({dtype})")
    allp = np.sort(np.concatenate(pairs))
    want = np.concatenate([p * 1000 + np.arange(L[p]) for p in range(len(L))])
    check(np.array_equal(allp, np.sort(want)), f"{label}: every token exactly once")
    return ex


def check_torch(fmt, d, dtype):
    import torch
    m = json.load(open(f"{d}/manifest.json"))
    e = m["splits"]["train"]["shards"][0]
    if fmt == "npy":
        x = np.load(f"{d}/{e['file']}/decoder_0_output.npy", mmap_mode="r")
    else:
        x = hd.load_safetensors(f"{d}/{e['file']}")[0]["decoder_0_output"]
    if dtype == "bfloat16":  # torch has no uint16 here: the same bits as int16, viewed as bf16
        t = torch.from_numpy(np.array(x).view(np.int16)).view(torch.bfloat16)
        ok = torch.equal(t.float(), torch.from_numpy(hd.widen_bf16(x)))
    else:
        t = torch.from_numpy(np.array(x))
        ok = t.dtype == getattr(torch, dtype) and np.array_equal(t.numpy(), x)
    check(ok and tuple(t.shape) == x.shape, f"{fmt} {dtype}: torch.from_numpy")


def check_reader(fmt, d, h5dir):
    for split in ("train", "val"):
        a, b = hd.Shards(d, split), hd.Shards(h5dir, split)
        check(a.format == fmt and all(np.array_equal(a.rows(n), b.rows(n)) for n in NAMES) and
              all(np.array_equal(a.rows(c), b.rows(c)) for c in a.manifest["columns"]),
              f"{fmt} {split}: harvest_data.Shards rows equal the HDF5 export's")
    s = hd.Shards(d)
    idx = np.concatenate([i for _, i in s.batches("encoder_0_q", 16, seed=2, with_index=True)])
    check(np.array_equal(np.sort(idx), np.arange(len(s))), f"{fmt}: batches: every token once")


# ---- rows, dtypes, statistics, readers ------------------------------------------------------
tok = harvest_out("tok", "token", "float32")
run(harvest, "stats", tok, check=0)
OPTS = ["--shard-tokens", "64", "--val", "0.25", "--seed", "7"]
for dt in ("float32", "float16", "bfloat16"):
    h5dir = f"{work}/h5-{dt}"
    export(tok, h5dir, "--dtype", dt, *OPTS)
    export(tok, f"{h5dir}-flag", "--dtype", dt, "--format", "hdf5", *OPTS)
    check(tree_hashes(h5dir) == tree_hashes(f"{h5dir}-flag"), f"{dt}: --format hdf5 is the default")
    for fmt in FORMATS:
        d = f"{work}/{fmt}-{dt}"
        export(tok, d, "--dtype", dt, "--format", fmt, *OPTS)
        check_format(fmt, tok, d, h5dir, dt, f"{fmt} token f32 -> {dt}")
        check_torch(fmt, d, dt)
        check_reader(fmt, d, h5dir)
_, _, dts = own_safetensors(f"{work}/safetensors-bfloat16/train-00000.safetensors")
check(dts["decoder_0_output"] == "BF16" and dts["tokens.position"] == "I64" and
      dts["stats.decoder_0_output.mean"] == "F64", "safetensors dtypes BF16, I64, F64")
_, _, dts = own_safetensors(f"{work}/safetensors-float16/train-00000.safetensors")
check(dts["decoder_0_output"] == "F16", "safetensors dtype F16")

# prompt layout stored as bfloat16, no statistics
pr = harvest_out("pr", "prompt", "bfloat16")
export(pr, f"{work}/h5-pr", "--shard-tokens", "100")
for fmt in FORMATS:
    export(pr, f"{work}/{fmt}-pr", "--shard-tokens", "100", "--format", fmt)
    check_format(fmt, pr, f"{work}/{fmt}-pr", f"{work}/h5-pr", "bfloat16", f"{fmt} prompt bf16")

# many names with statistics (12 names, 84 statistics arrays a shard)
MANY = [f"encoder_{i}_{k}" for i in range(4) for k in ("output", "attn_output", "ffn_output")]
many = harvest_out("many", "token", "float32", acts=MANY)
run(harvest, "stats", many, check=0)
for fmt in FORMATS:
    export(many, f"{work}/{fmt}-many", "--format", fmt, "--shard-tokens", "200")
    e = json.load(open(f"{work}/{fmt}-many/manifest.json"))["splits"]["train"]["shards"][0]
    arrays, attrs = load_shard(fmt, f"{work}/{fmt}-many/{e['file']}")
    check(len([k for k in arrays if k.startswith("stats.")]) == 7 * len(MANY) and
          attrs["stats_names"] == ",".join(sorted(MANY)),
          f"{fmt}: the statistics of {len(MANY)} names")

# ---- errors ---------------------------------------------------------------------------------
p = export(tok, f"{work}/err", "--format", "parquet", rc=None)
check(p.returncode == 1 and "--format" in p.stderr and "parquet" in p.stderr,
      f"--format parquet: exit 1 naming the flag: {p.stderr.strip()}")
check(not os.path.exists(f"{work}/err"), "... and no folder made")
for have, want in (("npy", "safetensors"), ("safetensors", "hdf5"), ("h5", "npy")):
    d = f"{work}/{have}-float32"
    before = tree_hashes(d)
    p = export(tok, d, "--dtype", "float32", "--format", want, *OPTS, rc=None)
    check(p.returncode == 1 and '"shard_format"' in p.stderr,
          f"a {have} folder, --format {want}: exit 1 naming shard_format: {p.stderr.strip()}")
    check(tree_hashes(d) == before, "... and its files untouched")


# ---- MPI, kill and resume -------------------------------------------------------------------
def finished_shards(fmt, k):
    if not os.path.isdir(k):
        return []
    ext = ".safetensors" if fmt == "safetensors" else ""
    return [n for n in os.listdir(k) if n.startswith(("train-", "val-")) and n.endswith(ext) and
            not n.endswith(".tmp") and (fmt != "npy" or os.path.isdir(f"{k}/{n}"))]


big = synthetic_output(f"{work}/big.h5", 400_000)
BIG = ["--shard-tokens", "20000", "--val", "0.1", "--seed", "3", "--memory", "2M"]
for fmt in FORMATS:
    F = ["--format", fmt, *BIG]
    export(big, f"{work}/{fmt}-np1", *F)
    export(big, f"{work}/{fmt}-np2", *F, np_=2)
    h1 = tree_hashes(f"{work}/{fmt}-np1")
    check(len(h1) > 20 and h1 == tree_hashes(f"{work}/{fmt}-np2"),
          f"{fmt}: np 1 and np 2 write the same files, byte for byte ({len(h1)} files)")
    s = hd.Shards(f"{work}/{fmt}-np1")
    x, idx = s.rows("x"), s.rows("prompt_index") * 128 + s.rows("position")
    check(np.array_equal(x[:, 0], idx.astype(np.float32)), f"{fmt} big: rows follow")
    k = f"{work}/{fmt}-killed"
    p = subprocess.Popen([harvest, "export", big, "--shards", k, *F], env=dict(MPI_ENV),
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t0 = time.time()
    while p.poll() is None and time.time() - t0 < 120 and not finished_shards(fmt, k):
        time.sleep(0.002)
    p.send_signal(signal.SIGKILL)
    p.wait()
    n_left = len(finished_shards(fmt, k))
    n_all = len(finished_shards(fmt, f"{work}/{fmt}-np1"))
    check(0 < n_left < n_all, f"{fmt}: the kill landed mid-export ({n_left} of {n_all} shards)")
    export(big, k, *F)
    check(tree_hashes(k) == h1, f"{fmt}: killed, then the same command: the same files")
    victim = (f"{k}/train-00002/x.npy" if fmt == "npy" else f"{k}/train-00002.safetensors")
    with open(victim, "r+b") as f:
        f.seek(os.path.getsize(victim) - 100)
        f.write(b"\xff" * 8)
    export(big, k, *F)
    check(tree_hashes(k) == h1, f"{fmt}: a damaged shard is rewritten on the next run")


# ---- a full disk (a small tmpfs, as test_export_diskfull; skipped where mounting is refused) ---
disk = f"{work}/disk"
os.makedirs(disk)
if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1500k", "tmpfs", disk],
                  capture_output=True).returncode != 0:
    print("cannot mount a tmpfs here: the full-disk part skipped")
else:
    try:
        for fmt in FORMATS:  # 4 shards of about 200 KB, with /stats
            F = ["--dtype", "float32", "--format", fmt, "--shard-tokens", "128"]
            ref = f"{work}/{fmt}-ref"
            export(tok, ref, *F)
            d = f"{disk}/{fmt}"
            p = export(tok, d, *F, rc=None)
            check(p.returncode == 2 and f"{d}/train-0000" in p.stderr and "disk full" in p.stderr,
                  f"{fmt}: a full disk: exit 2 naming the shard and the cause, got "
                  f"{p.returncode}: {p.stderr[-600:]}")
            left = os.listdir(d)
            check(not [n for n in left if n.endswith(".tmp")], f"{fmt}: no temporary left: {left}")
            have, want = tree_hashes(d), tree_hashes(ref)
            check(all(have[n] == want[n] for n in have if n != "manifest.json") and
                  json.load(open(f"{d}/manifest.json"))["finished"] is False,
                  f"{fmt}: the shards there are finished ones, the manifest unfinished")
            print(f"{fmt}: disk full with {sorted(left)} there: exit 2", flush=True)
            subprocess.run(["mount", "-o", "remount,size=60m", disk], check=True)
            export(tok, d, *F)
            check(tree_hashes(d) == want, f"{fmt}: after freeing space the same command gives the "
                                          f"ordinary disk's files, byte for byte")
            subprocess.run(["rm", "-rf", d])
            subprocess.run(["mount", "-o", "remount,size=1500k", disk], check=True)
    finally:
        subprocess.run(["umount", "-l", disk])
finish()
