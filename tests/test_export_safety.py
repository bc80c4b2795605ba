"""`harvest export --shards` and the reader when the folder or the source is not what it was
(issue 19): a source written again by another model is refused (never old shards beside new
ones), and with the manifest removed every shard is written again; two exports into one folder:
the second exits 1 naming the first's host and PID; the reader refuses a shard swapped in from
another export of the same output (seed, size, checksum) and an unfinished export; a prompt-layout
output written with `select` exports exactly its selected tokens."""
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import h5py
import numpy as np

from util import (MPI_ENV, ExportFixture, args, check, finish, run, synthetic_output,
                  write_job)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "io", "python"))
import harvest_data as hd  # noqa: E402

harvest, work = args()
fx = ExportFixture(harvest, work, models=(("model", 5), ("model2", 6)))
export = fx.export
NAMES = ["decoder_0_output", "encoder_1_output"]


def hashes(d, shards_only=True):
    return {n: hashlib.sha256(open(os.path.join(d, n), "rb").read()).hexdigest()
            for n in sorted(os.listdir(d)) if n.endswith(".h5") or not shards_only}


def harvest_out(model, name="out", **extra):
    return fx.output(name, NAMES, "--overwrite", job_extra=dict(model=model, **extra),
                     layout="token")


# ---- item 2: the source written again by another model ---------------------------------------
out = harvest_out("model")
d = f"{work}/sh"
export(out, d, "--shard-tokens", "100")
first = hashes(d)
check(len(first) >= 4, f"the export has {len(first)} shards")
os.remove(f"{d}/train-00001.h5")
harvest_out("model2")  # the same OUT.h5, --overwrite, another model
p = export(out, d, "--shard-tokens", "100", rc=None)
check(p.returncode == 1 and d in p.stderr and "weights_fingerprint" in p.stderr and
      "remove" in p.stderr,
      f"another model's output into the old folder: exit 1 naming the folder and the weights: "
      f"exit {p.returncode}: {p.stderr.strip()}")
check(not os.path.exists(f"{d}/train-00001.h5") and
      all(hashes(d)[n] == first[n] for n in hashes(d)),
      "nothing of the folder was touched (no new shard beside old ones)")
# the manifest removed: every shard is written again (none of the old model's is kept)
os.remove(f"{d}/manifest.json")
export(out, d, "--shard-tokens", "100")
export(out, f"{work}/fresh", "--shard-tokens", "100")
check(hashes(d, False) == hashes(f"{work}/fresh", False),
      "manifest removed: the folder is the new source's export, every shard rewritten")
print("item 2: a source written by another model is refused, or redone whole", flush=True)


# ---- a synthetic output, large enough for an export to take a while ---------------------------
big = synthetic_output(f"{work}/big.h5", 200_000, columns=False, chunks=False)

# ---- item 3: two exports into one folder at once ---------------------------------------------
d3 = f"{work}/two"
OPTS3 = ["--shard-tokens", "500"]  # 400 shards, each fsynced: a few seconds
a = subprocess.Popen([harvest, "export", big, "--shards", d3, "--quiet", "--seed", "0", *OPTS3],
                     env=MPI_ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
t0 = time.time()
while a.poll() is None and time.time() - t0 < 120 and not os.path.exists(f"{d3}/manifest.json"):
    time.sleep(0.002)
a.send_signal(signal.SIGSTOP)
stopped = a.poll() is None
check(stopped, "the first export was stopped mid-way")
try:
    for seed in ("1", "0"):  # another export, and the same one again
        p = export(big, d3, "--seed", seed, *OPTS3, rc=None)
        check(p.returncode == 1 and "in use" in p.stderr and str(a.pid) in p.stderr and
              socket.gethostname() in p.stderr,
              f"--seed {seed} while another export writes the folder: exit 1 naming its host "
              f"and PID {a.pid}: exit {p.returncode}: {p.stderr.strip()}")
    try:
        hd.Shards(d3).rows("x")
        check(False, "the reader reads an unfinished export")
    except ValueError as e:
        check("not finished" in str(e), f"the reader refuses an unfinished export: {e}")
finally:
    a.send_signal(signal.SIGCONT)
check(a.wait(timeout=300) == 0, f"the first export finishes: {a.stderr.read()[-800:]}")
export(big, f"{work}/two_ref", "--seed", "0", *OPTS3)
check(hashes(d3) == hashes(f"{work}/two_ref"), "the first export's shards are its own")
m = json.load(open(f"{d3}/manifest.json"))
check(m["seed"] == 0 and m.get("finished") is True, "its manifest: seed 0, finished")
print("item 3: a second export into a busy folder exits 1 naming the first", flush=True)

# ---- item 4: a shard swapped in from another export of the same output -----------------------
OPTS4 = ["--shard-tokens", "20000", "--val", "0.1"]
export(big, f"{work}/a", "--seed", "0", *OPTS4)
hd_rows = hd.Shards(f"{work}/a").rows("x")
check(len(hd_rows) == hd.Shards(f"{work}/a").n_tokens, "the reader reads a finished export")
for label, other, opts in (("another seed", "b", ["--seed", "1", *OPTS4]),
                           ("another shard size", "c", ["--seed", "0", "--shard-tokens", "15000",
                                                        "--val", "0.1"]),
                           ("another --val", "v", ["--seed", "0", "--shard-tokens", "20000",
                                                   "--val", "0.2"])):
    export(big, f"{work}/{other}", *opts)
    bad = f"{work}/a_{other}"
    shutil.copytree(f"{work}/a", bad)
    shutil.copy(f"{work}/{other}/train-00001.h5", f"{bad}/train-00001.h5")
    try:
        hd.Shards(bad).rows("x")
        check(False, f"{label}: the reader returns rows of a swapped-in shard")
    except ValueError as e:
        check("train-00001.h5" in str(e), f"{label}: ValueError naming the file: {e}")
    # the same command again finds the foreign shard and writes this export's
    export(big, bad, "--seed", "0", *OPTS4)
    check(hashes(bad, False) == hashes(f"{work}/a", False),
          f"{label}: the export run again rewrites the foreign shard")
m = json.load(open(f"{work}/a/manifest.json"))
m["finished"] = False
json.dump(m, open(f"{work}/a_b/manifest.json", "w"))
try:
    hd.Shards(f"{work}/a_b").rows("x")
    check(False, "the reader reads a manifest marked unfinished")
except ValueError as e:
    check("not finished" in str(e), f"unfinished: {e}")
os.remove(f"{work}/a_v/train-00002.h5")
try:
    hd.Shards(f"{work}/a_v").rows("x")
    check(False, "the reader reads an export with a shard missing")
except ValueError as e:
    check("train-00002.h5" in str(e) and "missing" in str(e), f"a shard missing: {e}")
print("item 4: the reader refuses shards that are not the manifest's", flush=True)

# ---- item 7: a prompt-layout output written with select --------------------------------------
job = write_job(f"{work}/sel.json", activations=NAMES, batch_size=3, max_seq_len=64,
                statistics=True, select={"skip_first": 1, "tokens_per_context": 5, "seed": 3},
                output={"path": "sel.h5", "layout": "prompt"})
run(harvest, "run", job, "--quiet", check=0)
sel = f"{work}/sel.h5"
export(sel, f"{work}/sel_sh", "--val", "0.25", "--shard-tokens", "64")
with h5py.File(sel, "r") as f:
    L, off, mask = f["prompts/length"][:], f["prompts/token_offset"][:], f["tokens/selected"][:]
    want = sorted((p, t - off[p]) for p in range(len(L)) for t in range(off[p], off[p] + L[p])
                  if mask[t])
    rows = {}
    for n in NAMES:
        axes = [x.decode() if isinstance(x, bytes) else x
                for x in f["activations/" + n].attrs["stored_axes"]]
        seq = axes.index("sequence") - 1
        rows[n] = f["activations/" + n][:]
        rows[n] = [np.moveaxis(rows[n][p], seq, 0) for p in range(len(L))]
    n_stats = int(f["stats/decoder_0_output/count"][:].max())
got, total = [], 0
for split in ("train", "val"):
    s = hd.Shards(f"{work}/sel_sh", split)
    pi, pos = s.rows("prompt_index"), s.rows("position")
    got += list(zip(pi.tolist(), pos.tolist()))
    total += len(s)
    for n in NAMES:
        x = s.rows(n)
        check(all(np.array_equal(x[k], rows[n][pi[k]][pos[k]]) for k in range(len(pi))),
              f"select, prompt layout: {split} {n}: rows equal the source's")
check(sorted(got) == want and len(got) == len(set(got)),
      f"select, prompt layout: exactly the selected tokens, once each ({len(got)} of {len(want)}; "
      f"{int(L.sum())} in the prompts)")
check(total == n_stats, f"the shards hold the {n_stats} tokens their /stats describe ({total})")
print("item 7: a prompt-layout output under select exports its selected tokens", flush=True)
finish()
