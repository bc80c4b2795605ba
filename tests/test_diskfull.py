"""A disk that fills up: the output on a small tmpfs the test mounts -> exit 2 with a message that
names the file -> space is freed (the tmpfs grows) -> --resume -> the same output as a run on an
ordinary disk. On one rank and on two pipeline stages. Skipped (77) where mounting is not allowed."""
import os
import shutil
import subprocess
import sys

import h5py
import numpy as np

from util import MPI_ENV, args, check, finish, init_model, run, write_job, write_prompts

harvest, work = args()
disk = f"{work}/disk"
os.makedirs(disk)
if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=12m", "tmpfs", disk]).returncode != 0:
    print("cannot mount a tmpfs here: skipped")
    sys.exit(77)
try:
    init_model(harvest, f"{work}/model", seed=10)
    write_prompts(f"{work}/prompts.jsonl", [(41 * i) % 100 + 20 for i in range(24)], seed=10)
    ACTS = ["*_output", "encoder_0_attn_probs"]  # about 40 MB in all
    MPIRUN = shutil.which("mpirun")
    ENV = MPI_ENV

    def job(name, path, stages=1):
        return write_job(f"{work}/{name}.json", activations=ACTS, batch_size=2,
                         output={"path": path, "checkpoint_seconds": 0},
                         parallel={"pipeline_stages": stages})

    run(harvest, "run", job("ref", "ref.h5"), "--quiet", check=0)
    for label, np_, stages in (("one_rank", 1, 1), ("two_stages", 2, 2)):
        subprocess.run(["mount", "-o", "remount,size=12m", disk], check=True)
        jp = job(label, f"disk/{label}.h5", stages)
        cmd = [harvest, "run", jp] if np_ == 1 else [MPIRUN, "-np", str(np_), harvest, "run", jp]
        p = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=300)
        check(p.returncode == 2, f"{label}: a full disk gives exit {p.returncode}, expected 2: {p.stderr[-600:]}")
        check(f"disk/{label}.h5" in p.stderr and ("disk full" in p.stderr or "No space" in p.stderr),
              f"{label}: the message names the file and the cause: {p.stderr[-600:]}")
        with h5py.File(f"{disk}/{label}.h5", "r") as f:
            check(f.attrs["complete"] == 0, f"{label}: the master says incomplete")
            # on one rank the first batch fits: it was listed before the disk filled
            check(np_ > 1 or f.attrs["prompts_done"] >= 2, f"{label}: the batches before the full disk are kept")
            print(f"{label}: disk full after {f.attrs['prompts_done']} prompts: exit 2", flush=True)
        subprocess.run(["mount", "-o", "remount,size=200m", disk], check=True)  # space freed
        cmd = cmd + ["--resume", "--quiet"]
        p = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=300)
        if check(p.returncode == 0, f"{label}: --resume exit {p.returncode}: {p.stderr[-600:]}"):
            with h5py.File(f"{work}/ref.h5", "r") as a, h5py.File(f"{disk}/{label}.h5", "r") as b:
                check(b.attrs["complete"] == 1, f"{label}: complete after --resume")
                for n in a["activations"]:
                    check(np.array_equal(a["activations/" + n][:], b["activations/" + n][:], equal_nan=True),
                          f"{label}: {n} equals the ordinary run's")
            print(f"{label}: --resume after freeing space gives the same output", flush=True)
        for f in os.listdir(disk):  # the next case starts on an empty disk
            p = os.path.join(disk, f)
            shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)
finally:
    subprocess.run(["umount", "-l", disk])
finish()
