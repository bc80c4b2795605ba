"""`--resume` on another grid: rows are placed by batch, never by rank (harvest/rounds.h), so a run
stopped on one grid resumes on another to the uninterrupted run's output, as long as the segments'
layout (one dataset range a pipeline stage) stays:
- np 1 stopped, resumed on np 2 data-parallel replicas (spec model): the np 1 output;
- Laguna (M.1 preset): expert_parallel 1 stopped, resumed with expert_parallel 2 on np 2: the np 1
  output, its job attribute the first run's;
- parallel.pipeline_stages changed: exit 1 naming the key, the output untouched; resumed with the
  old value it completes to the np 1 output;
- another key (batch_size, select.seed): exit 1 naming it."""
import json
import shutil
import subprocess

import h5py

from util import (BOOKKEEPING, MPI_ENV, args, check, finish, init_model, output_diff, run,
                  stop_mid_run, write_job, write_prompts)

harvest, work = args()
MPIRUN = shutil.which("mpirun")


def mpirun(np_, *a):
    return subprocess.run([MPIRUN, "-np", str(np_), harvest, *a], env=MPI_ENV,
                          capture_output=True, text=True, timeout=600)


def job(name, out, stages=1, ep=1, model="model", acts=("*_output",), batch=2, sel=None):
    extra = {"select": sel} if sel else {}
    return write_job(f"{work}/{name}.json", model=model, data=f"{model}.jsonl",
                     activations=list(acts), max_seq_len=32, batch_size=batch,
                     output={"path": f"{out}.h5", "checkpoint_seconds": 0},
                     parallel={"pipeline_stages": stages, "expert_parallel": ep}, **extra)


def job_attr(path):
    with h5py.File(path, "r") as f:
        return f.attrs["job"]


def same(ref, out, label):
    d = output_diff(ref, out, BOOKKEEPING | {"job"})
    check(d is None, f"{label}: differs from the uninterrupted run in {d}")
    return d is None


init_model(harvest, f"{work}/model", seed=5)
write_prompts(f"{work}/model.jsonl", [(29 * i) % 40 + 4 for i in range(60)], seed=3)
SEL = {"skip_first": 1, "seed": 0, "tokens_per_context": 8}
run(harvest, "run", job("ref", "ref", sel=SEL), "--quiet", check=0)
ref = f"{work}/ref.h5"

# ---- another pipeline_stages: refused naming the key; the old value completes it ----
out = f"{work}/pp.h5"
# each stop: SIGTERM once the run has opened its fourth segment (3 of its 30 batches done)
rc = stop_mid_run(harvest, job("pp", "pp", sel=SEL), out, after=4)
check(rc == 3, f"stopped: exit {rc}")
if MPIRUN:
    p = mpirun(2, "run", job("pp", "pp", stages=2, sel=SEL), "--resume", "--quiet")
    check(p.returncode == 1 and "parallel.pipeline_stages" in p.stderr,
          f"--resume with 2 stages: exit {p.returncode}, {p.stderr.strip()[-400:]}")
for label, kw in (("batch_size", dict(batch=3, sel=SEL)),
                  ("select.seed", dict(sel=dict(SEL, seed=1)))):
    p = run(harvest, "run", job("pp", "pp", **kw), "--resume", "--quiet")
    check(p.returncode == 1 and f'"{label}"' in p.stderr,
          f"--resume with another {label}: exit {p.returncode}, {p.stderr.strip()}")
p = run(harvest, "run", job("pp", "pp", sel=SEL), "--resume", "--quiet")
check(p.returncode == 0, f"--resume with the old stages: exit {p.returncode}, {p.stderr}")
if same(ref, out, "pipeline_stages refused, then resumed as before"):
    print("another pipeline_stages, batch_size or select.seed: exit 1 naming the key; the same "
          "job then resumes to the np 1 output", flush=True)

if MPIRUN:
    # ---- np 1 stopped, resumed on 2 data-parallel replicas ----
    out = f"{work}/dp.h5"
    jp = job("dp", "dp", sel=SEL)
    check(stop_mid_run(harvest, jp, out, after=4) == 3, "stopped")
    p = mpirun(2, "run", jp, "--resume", "--quiet")
    check(p.returncode == 0, f"--resume on np 2: exit {p.returncode}, {p.stderr[-600:]}")
    if same(ref, out, "np 1 stopped, np 2 replicas resumed"):
        print("np 1 stopped, resumed on 2 replicas == np 1", flush=True)

    # ---- Laguna: expert_parallel 1 stopped, resumed with 2 shards ----
    run(harvest, "init-model", "--family", "laguna", "--preset", "M.1", "--seed", "7",
        f"{work}/laguna", check=0)
    # 60 batches of one prompt: the stop comes 3 batches in
    write_prompts(f"{work}/laguna.jsonl", [(13 * i) % 28 + 4 for i in range(60)], seed=4,
                  vocab=512)
    LG = dict(model="laguna", acts=("layers.*.layer_output",), batch=1)
    run(harvest, "run", job("lg_ref", "lg_ref", **LG), "--quiet", check=0)
    out = f"{work}/lg.h5"
    check(stop_mid_run(harvest, job("lg", "lg", **LG), out, after=4) == 3, "laguna stopped")
    first = job_attr(out)
    p = mpirun(2, "run", job("lg", "lg", ep=2, **LG), "--resume")
    check(p.returncode == 0 and "parallel.expert_parallel" in p.stderr,
          f"--resume with 2 expert shards: exit {p.returncode}, {p.stderr[-600:]}")
    check(job_attr(out) == first and json.loads(first)["parallel"]["expert_parallel"] == 1,
          "the output's job attribute stays the first run's")
    if same(f"{work}/lg_ref.h5", out, "laguna: expert_parallel 1 stopped, 2 resumed"):
        print("laguna: expert_parallel 1 stopped, resumed with 2 shards on np 2 == np 1",
              flush=True)
else:
    print("no mpirun: the np 2 cases are skipped")
finish()
