"""Two threads against one, on whole models: a batch of about 600 tokens, so that every GEMM splits
its rows over the threads (model/ops.c, parts of >= OP_SPLIT_ROWS), experts and attention heads
run one a thread (model/moe.c, model/attention.c) and the elementwise loops split. For the spec
model, Laguna (experts, sliding window), Qwen3-MoE (softmax router), GPT-2 (Conv1D [in, out]) and
Gemma 2 (soft-caps, sandwich norms): every value harvested at OMP_NUM_THREADS=2 within 1e-4 of the
one-thread value (relative to the tensor's scale; integers exact), and at two threads the output
of 2 MPI ranks (pipeline stages, or expert shards) bitwise the one-rank output."""
import os
import subprocess

import numpy as np

from util import (MPI_ENV, args, check, finish, init_model, output_diff, run, write_job,
                  write_prompts)

harvest, work = args()
# prompts within the decoder presets' 64 positions; batch_size 10: batches of 604 and 38 tokens
LENS = [60] * 9 + [64, 7, 30, 1]

MODELS = [("spec", "encdec", None, {"pipeline_stages": 2}),
          ("laguna", "laguna", "XS-2.1", {"expert_parallel": 2}),
          ("qwen3_moe", "qwen3_moe", "Qwen3-MoE", {"expert_parallel": 2}),
          ("gpt2", "gpt2", "gpt2", {"pipeline_stages": 2}),
          ("gemma2", "gemma2", "gemma-2-2b", {"pipeline_stages": 2})]


def close(a, b, name):
    import h5py
    worst = 0.0
    with h5py.File(a, "r") as fa, h5py.File(b, "r") as fb:
        names = []
        fa["activations"].visit(names.append)
        for n in names:
            x = fa["activations"][n]
            if not isinstance(x, h5py.Dataset):
                continue
            x, y = x[()], fb["activations"][n][()]
            if x.dtype.kind != "f":
                check(np.array_equal(x, y), f"{name} {n}: integers equal at 1 and 2 threads")
                continue
            fin = np.isfinite(x)
            check(np.array_equal(fin, np.isfinite(y)) and
                  np.array_equal(np.isneginf(x), np.isneginf(y)),
                  f"{name} {n}: NaN padding and -inf at the same places")
            if not fin.any():
                continue
            err = np.abs(x[fin] - y[fin]).max() / max(np.abs(x[fin]).max(), 1e-30)
            check(err <= 1e-4, f"{name} {n}: 2 threads differ from 1 by {err:.2e} of the scale")
            worst = max(worst, err)
    return worst


for name, fam, preset, par in MODELS:
    d = f"{work}/{name}"
    if fam == "encdec":
        init_model(harvest, d, seed=3)
    else:
        run(harvest, "init-model", "--family", fam, "--preset", preset, "--seed", "4", d, check=0)
    write_prompts(f"{d}/prompts.jsonl", LENS, seed=9, vocab=96)
    outs = {}
    for label, threads, np_, p in (("t1", 1, 1, {}), ("t2", 2, 1, {}), ("t2np2", 2, 2, par)):
        out = f"{d}/{label}.h5"
        job = write_job(f"{d}/{label}.json", model=d, data=f"{d}/prompts.jsonl",
                        activations=["*"], max_seq_len=64, batch_size=10, parallel=p,
                        output={"path": out})
        cmd = [harvest, "run", job, "--quiet"]
        if np_ > 1:
            cmd = ["mpirun", "-np", str(np_), "--oversubscribe", "-x", "OMP_NUM_THREADS"] + cmd
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                           env=dict(MPI_ENV, OMP_NUM_THREADS=str(threads)))
        if check(r.returncode == 0, f"{name} {label}: exit {r.returncode}: {r.stderr[-2000:]}"):
            outs[label] = out
    if len(outs) < 3:
        continue
    worst = close(outs["t1"], outs["t2"], name)
    d2 = output_diff(outs["t2"], outs["t2np2"], ignore={"segments", "runs", "provenance", "job"})
    check(d2 is None, f"{name}: 2 threads, 2 ranks {par} differ from 1 rank at {d2}")
    print(f"{name}: 2 threads within {worst:.1e} of 1; 2 ranks ({par}) bitwise 1 rank", flush=True)

finish()
