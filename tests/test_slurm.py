"""A real single-node Slurm cluster on loopback (slurmctld, slurmd, munge from Debian): `srun
--mpi=pmix` runs harvest as data-parallel replicas and as two pipeline stages, each giving the
singleton output bit for bit; slurm/harvest.sbatch runs a job to completion; a USR1 to the batch
script stops the harvest (exit 3), the script requeues it, and the restart resumes to the same
output. Skipped (77) where the Slurm daemons cannot start (the reason is printed).

The daemons listen on two ports the system gives free at the start (bound to port 0), so a second
cluster on the machine does not collide on fixed ones; a slurmctld or slurmd already running (not
this test's: another cluster, or one left by a killed run) fails the test at once, naming it, since
srun could otherwise reach the wrong daemon or the node's resources be taken.

The cluster's state (slurm.conf, spool, logs) lives in a short folder made under /tmp, not in the
scratch folder: slurmd puts PMIx's Unix socket in its spool folder, and a socket path may hold only
107 bytes, so a build folder with a long path would break every srun. A failing srun or sbatch is
reported as a failed check with its stderr and the daemons' logs, never as a traceback."""
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import h5py

import util
from util import (BOOKKEEPING, HERE, args, check, finish, has_segment, init_model, output_diff, run,
                  write_job, write_prompts)

harvest, work = args()
if not shutil.which("slurmctld") or not shutil.which("munged"):
    print("slurm-wlm is not installed: skipped")
    sys.exit(77)


def foreign_daemons():
    """(pid, command line) of every slurmctld or slurmd running on this machine."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            comm = open(f"/proc/{pid}/comm").read().strip()
            if comm in ("slurmctld", "slurmd"):
                cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode()
                out.append((int(pid), cmd.strip() or comm))
        except OSError:  # ended meanwhile
            pass
    return out


def free_ports(n):
    """n distinct TCP ports free on this machine now (each bound to port 0, held until all are
    chosen, then released for the daemons)."""
    socks = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(n)]
    try:
        for so in socks:
            so.bind(("", 0))
        return [so.getsockname()[1] for so in socks]
    finally:
        for so in socks:
            so.close()


others = foreign_daemons()
if others:
    sys.exit("FAIL: Slurm daemons are already running on this machine (another cluster, or left "
             "by a killed test run): " + "; ".join(f"pid {p}: {c}" for p, c in others) +
             ". This test starts its own slurmctld and slurmd: stop those first (kill PID).")
ctld_port, slurmd_port = free_ports(2)
host = socket.gethostname().split(".")[0]
conf = tempfile.mkdtemp(prefix="ahslurm-", dir="/tmp")  # short: PMIx's socket path <= 107 bytes
os.makedirs(f"{conf}/state", exist_ok=True)
os.makedirs(f"{conf}/spool", exist_ok=True)
node = subprocess.run(["slurmd", "-C"], capture_output=True, text=True).stdout.splitlines()[0]
node = " ".join(w for w in node.split() if not w.startswith("UpTime")) + " NodeAddr=127.0.0.1"
open(f"{conf}/slurm.conf", "w").write(f"""ClusterName=harvest
SlurmctldHost={host}(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
CryptoType=crypto/munge
StateSaveLocation={conf}/state
SlurmdSpoolDir={conf}/spool
SlurmctldPidFile={conf}/slurmctld.pid
SlurmdPidFile={conf}/slurmd.pid
SlurmctldLogFile={conf}/slurmctld.log
SlurmdLogFile={conf}/slurmd.log
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=pmix
ReturnToService=2
MailProg=/bin/true
KillWait=10
{node}
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP
""")
env = dict(os.environ, SLURM_CONF=f"{conf}/slurm.conf", OPENBLAS_NUM_THREADS="1",
           OMPI_MCA_btl_vader_backing_directory="/tmp", OMPI_MCA_btl_vader_single_copy_mechanism="none")


def sh(*cmd, timeout=60, **kw):
    return subprocess.run(list(cmd), env=env, capture_output=True, text=True, timeout=timeout, **kw)


def stop_daemons():
    for pid_file in ("slurmd.pid", "slurmctld.pid"):
        try:
            os.kill(int(open(f"{conf}/{pid_file}").read()), 15)
        except (OSError, ValueError):
            pass
    time.sleep(1)


def daemon_logs():
    return "".join(f"--- {n} (end)\n" + open(f"{conf}/{n}").read()[-1500:]
                   for n in ("slurmctld.log", "slurmd.log") if os.path.exists(f"{conf}/{n}"))


def skip(why):
    print(f"{why}: skipped\n{daemon_logs()}")
    stop_daemons()
    shutil.rmtree(conf, ignore_errors=True)
    sys.exit(77)


def srun(*cmd, timeout=300):
    """srun's CompletedProcess, or None (a failed check with srun's own words) if it failed."""
    label = "srun " + " ".join(cmd[:4])
    try:
        p = sh("srun", *cmd, timeout=timeout)
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


def munge_works():
    try:
        return subprocess.run("munge -n | unmunge", shell=True, capture_output=True,
                              timeout=10).returncode == 0
    except subprocess.TimeoutExpired:
        return False


# a munge socket may be left over from a daemon that is gone (a fresh container keeps /run)
if not munge_works():
    subprocess.run(["install", "-d", "-o", "munge", "-g", "munge", "-m", "0755", "/run/munge"])
    subprocess.run(["runuser", "-u", "munge", "--", "/usr/sbin/munged", "--force"], timeout=30)
    for _ in range(50):
        if munge_works():
            break
        time.sleep(0.2)
    else:
        skip("munged does not answer (munge -n | unmunge fails)")
try:
    started = sh("slurmctld", "-f", f"{conf}/slurm.conf").returncode == 0 and \
        sh("slurmd", "-f", f"{conf}/slurm.conf").returncode == 0
except subprocess.TimeoutExpired:
    started = False
t = time.time()
while started and time.time() - t < 60:
    try:
        if "idle" in sh("sinfo", "-h", "-N", "-o", "%T", timeout=15).stdout:
            break
    except subprocess.TimeoutExpired:
        pass
    time.sleep(0.2)
else:
    skip("the Slurm daemons did not come up within 60 s")


class Watchdog(Exception):
    pass


def watchdog(*_):
    raise Watchdog("test_slurm: still running after 600 s")


signal.signal(signal.SIGALRM, watchdog)
signal.alarm(600)
try:
    init_model(harvest, f"{work}/model", seed=11)
    write_prompts(f"{work}/prompts.jsonl", [(37 * i) % 120 + 10 for i in range(40)], seed=11)
    acts = ["token_embeddings", "*_output", "decoder_1_attn_probs", "logits"]

    def job(name, stages=1, ckpt=60, data="prompts.jsonl"):
        return write_job(f"{work}/{name}.json", data=data, activations=acts, batch_size=2,
                         output={"path": f"{name}.h5", "checkpoint_seconds": ckpt},
                         parallel={"pipeline_stages": stages})

    run(harvest, "run", job("single"), "--quiet", check=0)
    for name, stages in (("srun_dp2", 1), ("srun_pp2", 2)):
        p = srun("--mpi=pmix", "-n", "2", harvest, "run", job(name, stages), "--quiet")
        if p and same_output(f"{work}/single.h5", f"{work}/{name}.h5", name):
            with h5py.File(f"{work}/{name}.h5", "r") as f:
                import json
                ranks = json.loads(f.attrs["provenance"])["ranks"]
                check(all("slurm_job_id" in r for r in ranks), f"{name}: Slurm job ids in the provenance")
            print(f"{name}: srun --mpi=pmix -n 2, {stages} stage(s) == singleton", flush=True)

    # the batch launcher: to completion
    sbatch = os.path.join(os.path.dirname(HERE), "slurm", "harvest.sbatch")
    henv = dict(env, HARVEST=harvest)

    def submit(jp, log):
        p = subprocess.run(["sbatch", "--parsable", "-n", "2", "-o", log, sbatch, jp], env=henv,
                           capture_output=True, text=True, timeout=60)
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
except Watchdog as e:
    check(False, f"{e}\n{daemon_logs()}")
finally:
    stop_daemons()
    if util.failures:
        print(f"Slurm daemon logs:\n{daemon_logs()}")
    shutil.rmtree(conf, ignore_errors=True)
finish()
