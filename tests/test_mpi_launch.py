"""harvest under a real `mpirun`: one rank gives the same bytes as a singleton run; a world size
this build cannot split yet is refused with a clear message on every rank (no hang)."""
import os
import shutil
import subprocess

import h5py
import numpy as np

from util import args, check, finish, init_model, run, write_job, write_prompts

harvest, work = args()
init_model(harvest, f"{work}/model", seed=6)
write_prompts(f"{work}/prompts.jsonl", [7, 30, 1], seed=6)
mpirun = shutil.which("mpirun")
env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1", OPENBLAS_NUM_THREADS="1",
           OMPI_MCA_btl_vader_backing_directory="/tmp")
acts = ["encoder_0_*", "logits"]
run(harvest, "run", write_job(f"{work}/single.json", activations=acts, output={"path": "single.h5"}),
    "--quiet", check=0)
p = subprocess.run([mpirun, "-np", "1", harvest, "run",
                    write_job(f"{work}/np1.json", activations=acts, output={"path": "np1.h5"}), "--quiet"],
                   env=env, capture_output=True, text=True, timeout=300)
check(p.returncode == 0, f"mpirun -np 1: exit {p.returncode}: {p.stderr}")
with h5py.File(f"{work}/single.h5", "r") as a, h5py.File(f"{work}/np1.h5", "r") as b:
    for n in a["activations"]:
        check(np.array_equal(a["activations/" + n][:], b["activations/" + n][:], equal_nan=True),
              f"mpirun -np 1 == singleton: {n}")
p = subprocess.run([mpirun, "-np", "2", harvest, "run", f"{work}/np1.json", "--overwrite"],
                   env=env, capture_output=True, text=True, timeout=120)
check(p.returncode == 1 and "one rank" in p.stderr, f"np 2 refused clearly: {p.returncode} {p.stderr}")
finish()
