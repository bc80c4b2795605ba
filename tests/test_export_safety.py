"""`harvest export --shards` when the source is not plain (issue 19): a prompt-layout output
written with `select` exports exactly its selected tokens, the ones its /stats describe."""
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

from util import MPI_ENV, args, check, finish, init_model, run, write_job, write_prompts

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "io", "python"))
import harvest_data as hd  # noqa: E402

harvest, work = args()
LENGTHS = [5, 17, 1, 30, 64, 9, 12, 40, 3, 22, 64, 2, 50, 7, 33, 11, 48, 4, 26, 60]
write_prompts(f"{work}/prompts.jsonl", LENGTHS, seed=5)
init_model(harvest, f"{work}/model", seed=5)
init_model(harvest, f"{work}/model2", seed=6)
NAMES = ["decoder_0_output", "encoder_1_output"]


def export(src, d, *opts, rc=0):
    p = subprocess.run([harvest, "export", src, "--shards", d, "--quiet", *opts],
                       capture_output=True, text=True, env=MPI_ENV, timeout=600)
    if rc is not None and p.returncode != rc:
        check(False, f"export {d} {' '.join(opts)}: exit {p.returncode}, expected {rc}: "
                     f"{p.stderr[-1500:]}")
    return p


def hashes(d, shards_only=True):
    return {n: hashlib.sha256(open(os.path.join(d, n), "rb").read()).hexdigest()
            for n in sorted(os.listdir(d)) if n.endswith(".h5") or not shards_only}


def harvest_out(model, name="out", **extra):
    job = write_job(f"{work}/{name}.json", model=model, activations=NAMES, batch_size=3,
                    max_seq_len=64, output={"path": f"{name}.h5", "layout": "token"}, **extra)
    run(harvest, "run", job, "--quiet", "--overwrite", check=0)
    return f"{work}/{name}.h5"


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
