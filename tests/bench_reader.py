"""Reader throughput from the page cache, side by side in one run. Not a test (prints figures).

    /usr/bin/python3 tests/bench_reader.py HARVEST [SCRATCH] [MB]

For d = 384 (the spec model's residual) and d = 2048 (a Laguna-sized one), stored as float32,
float16 and bfloat16: a token-layout harvest output of about MB megabytes (default 256) of float32
rows is written in harvest's own on-disk form (a master whose dataset is a virtual dataset over a
segment file, chunks of about 1 MiB, harvest's 16-bit float types), exported with `harvest export`
(as stored), and read three ways, every file read once before timing:
  - naive: h5py per-row reads of the original output, `ds[i]` at random i
  - batch: h5py fancy-index reads of the original output, `ds[sorted 4096 random rows]`
  - reader: io/python/harvest_data.py, `Shards(DIR).batches(name, 4096)`, one epoch, shuffled
    (bfloat16 widened to float32, float16 kept)
  - read ceiling: the shard's bytes read in order into one reused buffer (the page cache's copy
    rate on this machine at that moment: no reader of these bytes does better)
  - npy, safetensors: the same output exported with --format npy and --format safetensors, read
    by the same `Shards(DIR).batches(name, 4096)` (reader), and by each format's own loader, every
    shard copied whole into memory: `np.array(np.load(F, mmap_mode="r"))` (np.load), and
    harvest_data.load_safetensors's np.memmap (st memmap); bfloat16 stays raw uint16 there
Figures: tokens/s (best of 3)."""
import os
import shutil
import subprocess
import sys
import tempfile
import time

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "io", "python"))
import harvest_data as hd  # noqa: E402

harvest = os.path.abspath(sys.argv[1])
work = sys.argv[2] if len(sys.argv) > 2 else tempfile.mkdtemp(prefix="bench_reader.")
mb = float(sys.argv[3]) if len(sys.argv) > 3 else 256.0
os.makedirs(work, exist_ok=True)
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")


def half_type(bf):
    t = h5py.h5t.IEEE_F32LE.copy()
    t.set_fields(15, 7, 8, 0, 7) if bf else t.set_fields(15, 10, 5, 0, 10)
    t.set_precision(16)
    t.set_size(2)
    t.set_ebias(127 if bf else 15)
    return t


def write_output(path, n, d, dtype):
    """a token-layout harvest output: master (VDS) + one segment, as harvest writes them"""
    T = 128
    L = np.full(n // T, T, np.int64)
    rng = np.random.default_rng(0)
    seg_dir = path + ".parts"
    os.makedirs(seg_dir, exist_ok=True)
    seg = os.path.join(seg_dir, "seg-000-00000-00000.h5")
    es = 4 if dtype == "float32" else 2
    rows_chunk = max(1, (1 << 20) // (d * es))
    with h5py.File(seg, "w") as f:
        if dtype == "float32":
            x = f.create_dataset("activations/x", (n, d), np.float32, chunks=(rows_chunk, d))
        else:
            tid = half_type(dtype == "bfloat16")
            sid = h5py.h5s.create_simple((n, d))
            dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
            dcpl.set_chunk((rows_chunk, d))
            f.create_group("activations")
            x = h5py.Dataset(h5py.h5d.create(f["activations"].id, b"x", tid, sid, dcpl=dcpl))
        for a in range(0, n, 65536):
            b = min(n, a + 65536)
            v = rng.standard_normal((b - a, d), np.float32)
            if dtype == "float32":
                x[a:b] = v
            else:  # round in numpy, write the raw bits in the file type
                if dtype == "float16":
                    raw = v.astype(np.float16).view(np.uint16)
                else:
                    u = v.view(np.uint32).astype(np.uint64)
                    raw = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
                ms = h5py.h5s.create_simple(raw.shape)
                fs = x.id.get_space()
                fs.select_hyperslab((a, 0), raw.shape)
                x.id.write(ms, fs, raw, mtype=x.id.get_type())
    with h5py.File(path, "w") as f:
        f.attrs.update(harvest_format=1, complete=1, data_checksum=n * 31 + d,
                       storage_dtype=dtype, max_seq_len=T)
        f["prompts/length"] = L
        f["prompts/token_offset"] = np.arange(len(L), dtype=np.int64) * T
        f["prompts/source_index"] = np.arange(len(L), dtype=np.int64)
        f["tokens/input_ids"] = np.zeros(n, np.int64)
        with h5py.File(seg, "r") as s:
            sd = s["activations/x"]
            lay = h5py.VirtualLayout(shape=(n, d), dtype=sd.dtype)
            lay[:] = h5py.VirtualSource(os.path.relpath(seg, os.path.dirname(path)),
                                        "activations/x", shape=(n, d))
        vd = f.create_virtual_dataset("activations/x", lay)
        vd.attrs["stored_axes"] = ["token", "feature"]
    if dtype != "float32":  # the master's dataset in the stored type, as harvest makes it
        with h5py.File(path, "r+") as f:
            dcpl = f["activations/x"].id.get_create_plist()
            del f["activations/x"]
            sid = h5py.h5s.create_simple((n, d))
            h5py.h5d.create(f["activations"].id, b"x", half_type(dtype == "bfloat16"), sid,
                            dcpl=dcpl)
            f["activations/x"].attrs["stored_axes"] = ["token", "feature"]


def warm(path):
    for root, _, files in os.walk(path) if os.path.isdir(path) else [("", [], [path])]:
        for fn in files:
            with open(os.path.join(root, fn), "rb") as f:
                while f.read(1 << 24):
                    pass


def best(fn, k=3):
    return max(fn() for _ in range(k))


def naive(path, n, rows=300):
    def go():
        with h5py.File(path, "r") as f:
            d = f["activations/x"]
            idx = np.random.default_rng(1).integers(0, n, rows)
            t = time.perf_counter()
            for i in idx:
                d[int(i)]
            return rows / (time.perf_counter() - t)
    return best(go)


def fancy(path, n, batches=1):
    def go():
        with h5py.File(path, "r") as f:
            d = f["activations/x"]
            rng = np.random.default_rng(2)
            t = time.perf_counter()
            for _ in range(batches):
                d[np.sort(rng.choice(n, min(n, 4096), replace=False))]
            return batches * min(n, 4096) / (time.perf_counter() - t)
    return best(go, 2)


def ceiling(dirname):
    """plain sequential preadv of the shard's bytes into one reused buffer: the copy rate of
    the page cache here, the most any reader of these bytes gets"""
    def go():
        s = hd.Shards(dirname)
        c = s._column("x")
        buf = np.empty((4096,) + c.row, c.dtype)
        t, got = time.perf_counter(), 0
        for i, n in enumerate(s.tokens):
            for a in range(0, n, 4096):
                s.read("x", i, a, min(4096, n - a), out=buf)
                got += min(4096, n - a)
        s.close()
        return got / (time.perf_counter() - t)
    return best(go)


def loader(dirname, fmt):
    """every shard of the train split loaded whole with the format's own loader (a copy)"""
    m = hd.Shards(dirname)

    def go():
        t, got = time.perf_counter(), 0
        for fn in m.files:
            if fmt == "npy":
                x = np.array(np.load(os.path.join(fn, "x.npy"), mmap_mode="r"))
            else:
                x = np.array(hd.load_safetensors(fn)[0]["x"])
            got += len(x)
        return got / (time.perf_counter() - t)
    return best(go)


def reader(dirname):
    s = hd.Shards(dirname)  # one Shards for all epochs, as a trainer keeps it

    def go(epoch=[0]):
        epoch[0] += 1
        t, got = time.perf_counter(), 0
        for x in s.batches("x", 4096, seed=0, epoch=epoch[0]):
            got += len(x)
        return got / (time.perf_counter() - t)
    r = best(go)
    s.close()
    return r


print(f"{'d':>5} {'dtype':>9} {'tokens':>8} {'export tok/s':>13} {'h5py per-row':>13} "
      f"{'h5py batch':>11} {'reader':>11} {'read ceiling':>13} {'reader/per-row':>15} "
      f"{'npy reader':>11} {'np.load':>11} {'st reader':>11} {'st memmap':>11}")
for d in (384, 2048):
    n = int(mb * 2**20 / (4 * d)) // 128 * 128
    for dtype in ("float32", "float16", "bfloat16"):
        out = os.path.join(work, f"out-{d}-{dtype}.h5")
        sh = os.path.join(work, f"sh-{d}-{dtype}")
        write_output(out, n, d, dtype)
        shutil.rmtree(sh, ignore_errors=True)
        t = time.perf_counter()
        subprocess.run([harvest, "export", out, "--shards", sh, "--quiet", "--seed", "1"],
                       check=True, env=ENV)
        ex = n / (time.perf_counter() - t)
        warm(out)
        warm(out + ".parts")
        warm(sh)
        a, b, c, e = naive(out, n), fancy(out, n), reader(sh), ceiling(sh)
        other = []
        for fmt in ("npy", "safetensors"):
            fd = f"{sh}-{fmt}"
            shutil.rmtree(fd, ignore_errors=True)
            subprocess.run([harvest, "export", out, "--shards", fd, "--quiet", "--seed", "1",
                            "--format", fmt], check=True, env=ENV)
            warm(fd)
            other += [reader(fd), loader(fd, fmt)]
            shutil.rmtree(fd)
        print(f"{d:>5} {dtype:>9} {n:>8} {ex:>13,.0f} {a:>13,.0f} {b:>11,.0f} {c:>11,.0f} "
              f"{e:>13,.0f} {c / a:>14,.0f}x" + "".join(f" {v:>11,.0f}" for v in other),
              flush=True)
        os.remove(out)
        shutil.rmtree(out + ".parts")
        shutil.rmtree(sh)
if len(sys.argv) <= 2:
    shutil.rmtree(work)
