"""A real single-node Slurm cluster on loopback (slurmctld, slurmd, munge from Debian;
tests/slurm_cluster.py): `srun --mpi=pmix` runs harvest as data-parallel replicas and as two
pipeline stages, each giving the singleton output bit for bit; slurm/harvest.sbatch runs a job to
completion; a USR1 to the batch script stops the harvest (exit 3), the script requeues it, and the
restart resumes to the same output. Skipped (77) where the Slurm daemons cannot start (the reason
is printed).

The cluster runs beside any other Slurm on the machine (its own name, ports, folders and job ids):
the test starts a second cluster of its own at the same time and runs a harvest on each at once.

Signals to srun itself, in an allocation (salloc --no-shell), one after the other on one output, as
Slurm 22.05 handles them: SIGTERM -> srun has every task SIGKILLed at once ("forcing job
termination"), exit 137; one SIGINT -> srun prints the tasks' state and goes on; two within a second
-> SIGINT to the tasks and at once the step's abort (SIGKILL), exit 137; SIGUSR1 -> forwarded to
every task, exit 3; `scancel --signal=TERM JOB` -> SIGTERM to every task, exit 3. After each,
`--resume` continues, and the last one gives the singleton output bit for bit.

A failing srun or sbatch is reported as a failed check with its stderr and the daemons' logs, never
as a traceback."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

import h5py

import util
from slurm_cluster import Cluster
from util import (BOOKKEEPING, HERE, args, check, finish, has_segment, init_model, output_diff, run,
                  write_job, write_prompts)

harvest, work = args()
if not shutil.which("slurmctld") or not shutil.which("munged"):
    print("slurm-wlm is not installed: skipped")
    sys.exit(77)

# two clusters at once: this test's own, and a second one beside it
clusters = [Cluster(), Cluster()]
why = [None, None]
starts = [threading.Thread(target=lambda i=i: why.__setitem__(i, clusters[i].start())) for i in (0, 1)]
for t in starts:
    t.start()
for t in starts:
    t.join()
cl, cl2 = clusters
env = cl.env


def sh(*cmd, timeout=60, **kw):
    return cl.sh(*cmd, timeout=timeout, **kw)


def daemon_logs():
    return cl.logs() + cl2.logs()


def stop_daemons():
    for c in clusters:
        c.stop()


def skip(why):
    print(f"{why}: skipped\n{daemon_logs()}")
    stop_daemons()
    sys.exit(77)


def srun(*cmd, timeout=300, cluster=None):
    """srun's CompletedProcess, or None (a failed check with srun's own words) if it failed."""
    label = "srun " + " ".join(cmd[:4])
    try:
        p = (cluster or cl).sh("srun", *cmd, timeout=timeout)
    except subprocess.TimeoutExpired:
        check(False, f"{label}: no answer within {timeout} s\n{daemon_logs()}")
        return None
    if not check(p.returncode == 0, f"{label}: srun failed, exit {p.returncode}:\n{p.stderr[-1500:]}"):
        return None
    return p


def same_output(ref, out, label):
    """Whether out exists and equals ref (a failed check otherwise)."""
    if not check(os.path.exists(out), f"{label}: no output {out}"):
        return False
    d = output_diff(ref, out, BOOKKEEPING | {"job"})
    return check(d is None, f"{label}: differs from the singleton run in {d}")


if why[0]:
    skip(why[0])
check(why[1] is None, f"a second cluster beside the first: {why[1]}")
print(f"clusters {cl.name} (ports {cl.ctld_port}, {cl.slurmd_port}) and {cl2.name} (ports "
      f"{cl2.ctld_port}, {cl2.slurmd_port}) up at once", flush=True)


class Watchdog(Exception):
    pass


def segments(out):
    parts = out + ".parts"
    return sum(n.startswith("seg-") for n in os.listdir(parts)) if os.path.isdir(parts) else 0


def srun_signals(jp, out, ref):
    """The signals to srun itself, in an allocation, one after the other on the output out of job
    jp; then --resume to completion, equal to ref."""
    p = sh("salloc", "-n", "2", "--no-shell")
    m = re.search(r"Granted job allocation (\d+)", p.stderr)
    if not check(m is not None, f"salloc --no-shell: {p.stderr[-600:]}"):
        return
    alloc = m.group(1)
    cmd = ["srun", f"--jobid={alloc}", "--mpi=pmix", "-n", "2", harvest, "run", jp, "--quiet"]
    # (label, signals in order with the pause before each, exit codes Slurm 22.05 gives)
    for label, sigs, want in (("SIGTERM", [(0, signal.SIGTERM)], {137}),
                              ("SIGINT, then two within 1 s",
                               [(0, signal.SIGINT), (2.5, signal.SIGINT), (0.2, signal.SIGINT)], {137}),
                              ("SIGUSR1", [(0, signal.SIGUSR1)], {3}),
                              ("scancel --signal=TERM", [(0, "scancel")], {3})):
        before = segments(out)
        sp = subprocess.Popen(cmd + ["--resume"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
        t = time.time()
        while segments(out) <= before and sp.poll() is None and time.time() - t < 120:
            time.sleep(0.05)  # into its batches
        time.sleep(0.5)
        for i, (pause, sig) in enumerate(sigs):
            time.sleep(pause)
            if i == 1 and sp.poll() is not None:  # ended after one SIGINT: only by finishing
                check(sp.returncode == 0, f"srun {label}: one SIGINT ended srun (exit {sp.returncode})")
                break
            if sig == "scancel":
                sh("scancel", "--signal=TERM", alloc)
            else:
                sp.send_signal(sig)
        try:
            err = sp.communicate(timeout=120)[1]
        except subprocess.TimeoutExpired:
            sp.kill()
            err = sp.communicate()[1]
            check(False, f"srun {label}: srun did not end within 120 s")
            continue
        with h5py.File(out, "r") as f:
            done = int(f.attrs["prompts_done"])
        if sp.returncode == 0:
            print(f"srun {label}: finished before the signal")
            break
        check(sp.returncode in want, f"srun {label}: exit {sp.returncode}, expected {sorted(want)}: "
              f"{err[-800:]}")
        print(f"srun {label}: exit {sp.returncode}, {done} prompts kept", flush=True)
    p = sh(*cmd, "--resume", timeout=600)
    if check(p.returncode == 0, f"srun --resume after the signals: exit {p.returncode}: {p.stderr[-800:]}") \
            and same_output(ref, out, "srun signals"):
        print("srun signals: --resume after each -> the singleton output", flush=True)
    sh("scancel", alloc)


def watchdog(*_):
    raise Watchdog("test_slurm: still running after 1700 s")


signal.signal(signal.SIGALRM, watchdog)
signal.alarm(1700)  # ctest's TIMEOUT is 1800
try:
    init_model(harvest, f"{work}/model", seed=11)
    write_prompts(f"{work}/prompts.jsonl", [(37 * i) % 120 + 10 for i in range(40)], seed=11)
    acts = ["token_embeddings", "*_output", "decoder_1_attn_probs", "logits"]

    def job(name, stages=1, ckpt=60, data="prompts.jsonl"):
        return write_job(f"{work}/{name}.json", data=data, activations=acts, batch_size=2,
                         output={"path": f"{name}.h5", "checkpoint_seconds": ckpt},
                         parallel={"pipeline_stages": stages})

    run(harvest, "run", job("single"), "--quiet", check=0)
    # the second cluster runs a harvest of its own meanwhile (its srun, PMIx and job ids apart)
    other = {}
    beside = threading.Thread(target=lambda: other.update(p=srun(
        "--mpi=pmix", "-n", "2", harvest, "run", job("srun_beside"), "--quiet", cluster=cl2)))
    beside.start()
    for name, stages in (("srun_dp2", 1), ("srun_pp2", 2)):
        p = srun("--mpi=pmix", "-n", "2", harvest, "run", job(name, stages), "--quiet")
        if p and same_output(f"{work}/single.h5", f"{work}/{name}.h5", name):
            with h5py.File(f"{work}/{name}.h5", "r") as f:
                ranks = json.loads(f.attrs["provenance"])["ranks"]
                check(all("slurm_job_id" in r for r in ranks), f"{name}: Slurm job ids in the provenance")
            print(f"{name}: srun --mpi=pmix -n 2, {stages} stage(s) == singleton", flush=True)
    beside.join()
    if other.get("p") and same_output(f"{work}/single.h5", f"{work}/srun_beside.h5", "srun_beside"):
        with h5py.File(f"{work}/srun_beside.h5", "r") as f:
            ids = {r.get("slurm_job_id") for r in json.loads(f.attrs["provenance"])["ranks"]}
        check(ids and all(int(i) >= cl2.first_job for i in ids),
              f"srun_beside: ran as a job of the second cluster (first job id {cl2.first_job}): {ids}")
        print(f"srun_beside: the same harvest on the second cluster {cl2.name} at the same time == "
              "singleton", flush=True)
    cl2.stop()

    # the batch launcher: to completion
    sbatch = os.path.join(os.path.dirname(HERE), "slurm", "harvest.sbatch")
    henv = dict(env, HARVEST=harvest)

    def submit(jp, log, opts=("-n", "2"), extra_env=None):
        args = [jp] if jp else []  # no job argument: JOB from the environment
        p = subprocess.run(["sbatch", "--parsable", *opts, "-o", log, sbatch, *args],
                           env=dict(henv, **(extra_env or {})), capture_output=True, text=True,
                           timeout=60)
        if not check(p.returncode == 0, f"sbatch failed, exit {p.returncode}: {p.stderr[-800:]}"):
            raise Watchdog("sbatch failed")
        return p.stdout.strip().split(";")[0]

    def read(path):
        return open(path).read() if os.path.exists(path) else ""

    def state(jid):
        return sh("squeue", "-h", "-j", jid, "-o", "%T").stdout.strip()

    def wait_gone(jid, limit=240):
        t = time.time()
        while state(jid) and time.time() - t < limit:
            time.sleep(0.5)
        return not state(jid)

    jid = submit(job("batch"), f"{work}/batch.log")
    check(wait_gone(jid), "sbatch: the job ended")
    log = read(f"{work}/batch.log")
    check("harvest: exit 0" in log, f"sbatch: the harvest finished: {log[-600:]}")
    same_output(f"{work}/single.h5", f"{work}/batch.h5", "sbatch")
    print("sbatch slurm/harvest.sbatch: completed, same output", flush=True)

    # threads from --cpus-per-task, the job from $JOB: the sbatch file unchanged, 2 threads a rank
    jid = submit(None, f"{work}/cpus.log", ("-n", "1", "--cpus-per-task", "2"),
                 {"JOB": job("cpus")})
    check(wait_gone(jid), "sbatch --cpus-per-task 2: the job ended")
    log = read(f"{work}/cpus.log")
    check("harvest: exit 0" in log and "harvest: rank 0: 2 threads" in log,
          f"sbatch --cpus-per-task 2 (JOB from the environment): 2 threads a rank: {log[-800:]}")
    print("sbatch --cpus-per-task 2: 2 threads a rank, the job from $JOB", flush=True)

    # preemption: USR1 to the batch script -> exit 3 -> requeue -> --resume -> same output
    write_prompts(f"{work}/long.jsonl", [(53 * i) % 200 + 100 for i in range(96)], seed=12)
    run(harvest, "run", job("long_single", data="long.jsonl"), "--quiet", check=0)
    jid = submit(job("preempt", ckpt=0, data="long.jsonl"), f"{work}/preempt.log")
    t = time.time()
    while not has_segment(f"{work}/preempt.h5") and time.time() - t < 120:
        time.sleep(0.1)  # the harvest is past MPI_Init and into its batches
    time.sleep(1.0)
    sh("scancel", "-b", "-s", "USR1", jid)
    t = time.time()
    while "exit 3" not in read(f"{work}/preempt.log") and time.time() - t < 60:
        time.sleep(0.5)
    time.sleep(2)
    sh("scontrol", "release", jid)
    sh("scontrol", "update", f"JobId={jid}", "StartTime=now")
    check(wait_gone(jid), "preempt: the requeued job ended")
    log = read(f"{work}/preempt.log")
    stopped = "harvest: exit 3 (restart 0)" in log
    check(stopped and "harvest: exit 0 (restart 1)" in log,
          f"preempt: stopped (exit 3), requeued, finished on restart 1: {log[-800:]}")
    same_output(f"{work}/long_single.h5", f"{work}/preempt.h5", "preempt")
    print("preempt: USR1 -> exit 3 -> requeue -> --resume -> same output", flush=True)
    # long enough that a quiet machine does not finish it between the signals (each case resumes)
    write_prompts(f"{work}/mid.jsonl", [(41 * i) % 80 + 30 for i in range(160)], seed=13)
    run(harvest, "run", job("mid_single", data="mid.jsonl"), "--quiet", check=0)
    srun_signals(job("sig", ckpt=0, data="mid.jsonl"), f"{work}/sig.h5", f"{work}/mid_single.h5")
except Watchdog as e:
    check(False, f"{e}\n{daemon_logs()}")
finally:
    if util.failures:
        print(f"Slurm daemon logs:\n{daemon_logs()}")
    stop_daemons()
finish()
