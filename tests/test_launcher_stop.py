"""SIGTERM and SIGINT (Ctrl-C) to mpirun itself, mid-run, under np 2 (data-parallel) and np 4 (2
stages x 2 replicas): what Open MPI 4.1.4's mpirun gives, and that --resume then gives the
uninterrupted run's output bit for bit.

mpirun does not forward SIGTERM or SIGINT (ess_base_forward_signals refuses them): it aborts the
job. It sends every rank SIGCONT, then SIGTERM odls_base_sigkill_timeout seconds later (default 1),
then SIGKILL as long again after that, and exits 1 whatever the ranks return (its own abort sets the
exit status first). A rank's SIGTERM starts harvest's stop: the batches in flight finish, the
segments close and the master is written (rank 0 says "stopped by a signal after N of M
prompts"), if that fits in the window before the SIGKILL; MPI_Finalize then waits on the aborting
runtime until the SIGKILL, so no rank gets to exit 3. Either way the output is consistent: at worst
the batches in flight are redone. A stop that gives exit 3 under mpirun is SIGUSR1 (or SIGUSR2) to
mpirun, which forwards it (test_mpi.py); a script that starts mpirun in a session of its own
(setsid) and turns its own TERM and INT into a USR1 to mpirun gives 3 for those too (tested here, as
the README shows it).

The longer kill window has an output of its own; the other cases run in two chains, each on one
output: np 2 (SIGTERM, then SIGINT) and np 4 (SIGTERM, SIGINT, then the wrapper's TERM and INT).
Each case after a chain's first is a --resume of what the one before left, stopped again a few
rounds in; no stop loses a prompt its output had listed; each output's last --resume gives the
uninterrupted run's output bit for bit (as test_slurm.py's signals to srun do). Each signal comes
once the run has opened new segments (one a round), not after a fixed time."""
import re
import shutil
import signal
import subprocess
import time

import h5py

from util import (BOOKKEEPING, MPI_ENV, Snapshot, args, check, ended, finish, init_model,
                  output_diff, run, segment_files, wait_segments, write_job, write_prompts)

harvest, work = args()
MPIRUN = shutil.which("mpirun")
init_model(harvest, f"{work}/model", seed=7)
# short prompts: a batch takes well under the second mpirun leaves between SIGTERM and SIGKILL;
# many of them, so that each chain outlasts its signals and kill windows on a fast machine too
# (with the right BLAS kernel 96 of them took 1.4 s here)
N_PROMPTS = 480
write_prompts(f"{work}/short.jsonl", [(7 * i) % 20 + 5 for i in range(N_PROMPTS)], seed=9)
ACTS = ["token_embeddings", "encoder_*_output", "decoder_2_q", "logits"]


def job(name, stages=1):
    return write_job(f"{work}/{name}.json", data="short.jsonl", activations=ACTS, batch_size=2,
                     output={"path": f"{name}.h5", "checkpoint_seconds": 0},
                     parallel={"pipeline_stages": stages})


def ranks_of(jp):
    """PIDs of the ranks running job file jp (this test's own, not other tests' harvest runs)."""
    out = subprocess.run(["pgrep", "-f", f"^{harvest} run {jp}"], capture_output=True, text=True)
    return [int(x) for x in out.stdout.split()]


run(harvest, "run", job("ref"), "--quiet", check=0)  # uninterrupted, one rank
ref = Snapshot(f"{work}/ref.h5")

# the wrapper: TERM and INT to the script become USR1 to mpirun (its own session: a Ctrl-C at a
# terminal reaches the script alone) -> every rank stops at a checkpoint -> exit 3
WRAP = """setsid mpirun "$@" & pid=$!
trap 'kill -USR1 $pid' TERM INT
wait $pid; rc=$?
while [ $rc -gt 128 ] && kill -0 $pid 2>/dev/null; do wait $pid; rc=$?; done
exit $rc
"""


def default_signals():
    """TERM and INT as at a terminal in the child: a shell cannot trap a signal ignored when it
    started (POSIX), and a test started from a background job inherits SIGINT ignored"""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def listed(out):
    """(prompts_done, complete) of the output out"""
    with h5py.File(out, "r") as f:
        return int(f.attrs["prompts_done"]), int(f.attrs["complete"])


def stop_case(label, name, np_, stages, sig, env=None, wrap=False):
    """mpirun -np np_ on job name (--resume if its output exists), or the wrapper of it; sig to
    mpirun (or to the wrapper) once the run has opened a segment of each stage for two rounds.
    Returns (exit code, seconds it took to end after the signal, rank 0's stderr, prompts listed
    before) or None (a failed check, or the run ended first)."""
    jp, out = f"{work}/{name}.json", f"{work}/{name}.h5"
    before = segment_files(out)  # the segments of the runs before: not counted
    was = listed(out)[0] if before else 0
    if before and listed(out)[1] == 1:
        print(f"{label}: the case before finished the output; nothing to stop")
        return None
    cmd = ["-np", str(np_), harvest, "run", jp] + (["--resume"] if before else [])
    mp = subprocess.Popen(["bash", "-c", WRAP, "wrap", *cmd] if wrap else [MPIRUN, *cmd],
                          env=dict(MPI_ENV, **(env or {})), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, preexec_fn=default_signals)
    if wait_segments(out, mp, 2 * stages, since=before) is None:
        err = ended(mp, label)
        if mp.returncode == 0 and listed(out)[1] == 1:
            print(f"{label}: finished before the signal (exit 0); nothing to resume")
        else:
            check(False, f"{label}: the run did not start its rounds: exit {mp.returncode}: "
                         f"{(err or '')[-800:]}")
        return None
    mp.send_signal(sig)
    t = time.time()
    err = ended(mp, label, timeout=120)
    took = time.time() - t
    if err is None:
        return None
    for _ in range(50):  # mpirun has killed its ranks when it ends; allow for the reaping
        if not ranks_of(jp):
            break
        time.sleep(0.2)
    check(not ranks_of(jp), f"{label}: ranks alive after mpirun ended: {ranks_of(jp)}")
    done, complete = listed(out)
    check(done >= was, f"{label}: {done} prompts listed after the stop, {was} before")
    if mp.returncode == 0 or complete == 1:  # the signal came after the last batch
        print(f"{label}: finished before the signal (exit {mp.returncode}); nothing to resume")
        return None
    return mp.returncode, took, err, done


def resumes(name, np_):
    """the output's last --resume: to completion, the uninterrupted run's output"""
    p = subprocess.run([MPIRUN, "-np", str(np_), harvest, "run", f"{work}/{name}.json", "--resume",
                        "--quiet"], env=MPI_ENV, capture_output=True, text=True, timeout=600)
    if not check(p.returncode == 0, f"{name}: --resume exit {p.returncode}: {p.stderr[-800:]}"):
        return False
    d = output_diff(ref, f"{work}/{name}.h5", BOOKKEEPING | {"job"})
    return check(d is None, f"{name}: the resumed output differs from the uninterrupted run in {d}")


# ---- np 2 (data-parallel) ----
# a longer kill window: the stop checkpoints before the SIGKILL (rank 0 reports it, and the
# output holds what it reports), and mpirun still exits 1
job("term_window")
r = stop_case("term_window", "term_window", 2, 1, signal.SIGTERM,
              env={"OMPI_MCA_odls_base_sigkill_timeout": "5"})
if r is not None:
    rc, took, err, done = r
    m = re.search(rf"stopped by a signal after (\d+) of {N_PROMPTS} prompts", err)
    check(m is not None and int(m.group(1)) == done,
          f"term_window: the ranks stopped at a checkpoint ({done} prompts listed): {err[-800:]}")
    check(rc in (1, 3), f"term_window: exit {rc}")
    if resumes("term_window", 2):
        print(f"term_window: SIGTERM with odls_base_sigkill_timeout=5 -> checkpoint of {done} "
              f"prompts, exit {rc} after {took:.1f} s -> --resume == uninterrupted", flush=True)


def aborted(label, r, np_, stages, sig):
    """the checks of a SIGTERM or SIGINT to mpirun (its abort)"""
    if r is None:
        return
    rc, took, err, done = r
    # Open MPI 4.1.4: exit 1 (its abort); 3 if an mpirun forwards the signal instead
    check(rc in (1, 3), f"{label}: exit {rc} (1 or 3 expected): {err[-800:]}")
    check(took < 30, f"{label}: mpirun took {took:.1f} s to end after the signal")
    print(f"{label}: {signal.Signals(sig).name} to mpirun -np {np_} ({stages} stage(s)) -> exit {rc} "
          f"after {took:.1f} s, {done} prompts kept", flush=True)


job("dp2")
for label, sig in (("term_dp2", signal.SIGTERM), ("int_dp2", signal.SIGINT)):
    aborted(label, stop_case(label, "dp2", 2, 1, sig), 2, 1, sig)
if resumes("dp2", 2):
    print("np 2: --resume after the two stops == uninterrupted", flush=True)

# ---- np 4 (2 stages x 2 replicas), the wrapper's two cases last ----
job("pp2dp2", 2)
for label, sig in (("term_pp2dp2", signal.SIGTERM), ("int_pp2dp2", signal.SIGINT)):
    aborted(label, stop_case(label, "pp2dp2", 4, 2, sig), 4, 2, sig)
for label, sig in (("wrap_term", signal.SIGTERM), ("wrap_int", signal.SIGINT)):
    r = stop_case(label, "pp2dp2", 4, 2, sig, wrap=True)
    if r is not None:
        check(r[0] == 3, f"{label}: exit {r[0]}, expected 3: {r[2][-800:]}")
        print(f"{label}: {signal.Signals(sig).name} to the wrapper of mpirun -np 4 (2 stages) -> "
              f"exit {r[0]}, {r[3]} prompts kept", flush=True)
if resumes("pp2dp2", 4):
    print("np 4: --resume after the four stops == uninterrupted", flush=True)
finish()
