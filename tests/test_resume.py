"""Stop and resume on one rank: SIGTERM, SIGINT or SIGUSR1 at several points of a run -> exit 3
with `complete` = 0 -> `harvest run --resume` -> the same bytes as an uninterrupted run. A SIGKILL
at any moment is resumed from the last checkpoint (here: after every batch) to the same bytes. Each
signal lands at a point of the run counted in its batches (the segments it has opened, one a batch),
not in seconds, so the points are the same on a fast or a loaded machine."""
import os
import signal
import subprocess

import h5py

from util import (Snapshot, args, check, ended, finish, init_model, output_diff, run, wait_segments,
                  write_job, write_prompts)

harvest, work = args()
init_model(harvest, f"{work}/model", seed=5)
lengths = [(37 * i) % 60 + 8 for i in range(48)]  # 24 batches of 2
write_prompts(f"{work}/prompts.jsonl", lengths, seed=5)
ACTS = ["*_output", "encoder_1_attn_probs", "decoder_2_q", "logits"]
env = dict(os.environ, OPENBLAS_NUM_THREADS="1")


OUTPUT = {"path": "out.h5", "compression": 1, "checkpoint_seconds": 0}
os.makedirs(f"{work}/full", exist_ok=True)
write_job(f"{work}/full/job.json", model="../model", data="../prompts.jsonl", activations=ACTS,
          batch_size=2, output=OUTPUT)
run(harvest, "run", f"{work}/full/job.json", "--quiet", check=0)
full = Snapshot(f"{work}/full/out.h5")  # read once, compared with every resumed output
BATCHES = 24

cases = [(signal.SIGTERM, 0.25), (signal.SIGINT, 0.5), (signal.SIGUSR1, 0.75),
         (signal.SIGKILL, 0.3), (signal.SIGKILL, 0.7)]
for sig, frac in cases:
    name = f"{sig.name.lower()}_{int(frac * 100)}"
    d = f"{work}/{name}"
    os.makedirs(d, exist_ok=True)
    write_job(f"{d}/job.json", model="../model", data="../prompts.jsonl", activations=ACTS,
              batch_size=2, output=OUTPUT)
    p = subprocess.Popen([harvest, "run", f"{d}/job.json", "--quiet"], env=env,
                         stderr=subprocess.PIPE, text=True)
    at = int(frac * BATCHES)  # the signal once batch `at` has begun
    wait_segments(f"{d}/out.h5", p, at + 1)
    p.send_signal(sig)
    err = ended(p, name)
    if err is None:
        continue
    if p.returncode == 0:
        print(f"{name}: finished before the signal; nothing to resume")
    elif sig == signal.SIGKILL:
        check(p.returncode == -signal.SIGKILL, f"{name}: killed")
        with h5py.File(f"{d}/out.h5", "r") as f:  # the master is always a closed file
            done = f.attrs["prompts_done"]
            check(f.attrs["complete"] == 0 and 0 < done < 48,
                  f"{name}: the killed run kept {done} prompts")
    else:
        check(p.returncode == 3, f"{name}: exit {p.returncode}, expected 3: {err}")
        check("--resume" in err, f"{name}: the message says how to continue: {err}")
        with h5py.File(f"{d}/out.h5", "r") as f:
            done = f.attrs["prompts_done"]
            check(f.attrs["complete"] == 0 and 0 < done < 48, f"{name}: complete = 0 after {done} prompts")
        ins = run(harvest, "inspect", f"{d}/out.h5", check=0).stdout
        check("complete: no" in ins, f"{name}: inspect says incomplete")
    r = run(harvest, "run", f"{d}/job.json", "--resume", "--quiet")
    check(r.returncode == 0, f"{name}: --resume exit {r.returncode}: {r.stderr}")
    diff = output_diff(full, f"{d}/out.h5")
    check(diff is None, f"{name}: resumed output differs from the uninterrupted one: {diff}")
    print(f"{name}: signal in batch {at} of {BATCHES}, resumed to an identical output", flush=True)
finish()
