"""A single-node Slurm cluster on loopback for the tests (slurmctld, slurmd, munge from Debian), one
that can run beside another Slurm on the machine (a second instance of the test, or any other
cluster): its own cluster name, its own daemon ports (chosen free by the system: bound to port 0),
its own state, spool, TmpFS, pid and log paths in a short folder under /tmp, and job ids from a
random first one (FirstJobId), so no two clusters share a path, a port or a job id (Slurm's PMIx
plugin names its per-step folders by job and step id). munged is shared by every cluster on the
machine: it is started once, under a lock, if none answers.

The folder is short because slurmd puts PMIx's Unix socket in its spool folder, and a socket path may
hold only 107 bytes (a build folder with a long path would break every srun)."""
import fcntl
import os
import random
import shutil
import socket
import subprocess
import tempfile
import time


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


def munge_works():
    try:
        return subprocess.run("munge -n | unmunge", shell=True, capture_output=True,
                              timeout=10).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def start_munge():
    """Whether munged answers, starting it if none does (under a lock: two tests starting at once
    must not both start one; a second `munged --force` would take over the first one's socket)."""
    with open("/tmp/ahslurm-munge.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if munge_works():
            return True
        # a munge socket may be left over from a daemon that is gone (a fresh container keeps /run)
        subprocess.run(["install", "-d", "-o", "munge", "-g", "munge", "-m", "0755", "/run/munge"])
        subprocess.run(["runuser", "-u", "munge", "--", "/usr/sbin/munged", "--force"], timeout=30)
        for _ in range(50):
            if munge_works():
                return True
            time.sleep(0.2)
        return False


class Cluster:
    """cl = Cluster(); why = cl.start() (None: up and idle; else why not); cl.sh("srun", ...);
    cl.stop() (always, also after a failed start)."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="ahslurm-", dir="/tmp")
        self.name = "ah" + os.path.basename(self.dir)[len("ahslurm-"):].lower().replace("_", "")
        self.ctld_port, self.slurmd_port = free_ports(2)
        self.first_job = random.randrange(1000, 60_000_000)
        for d in ("state", "spool", "tmp"):
            os.makedirs(f"{self.dir}/{d}", exist_ok=True)
        self.conf = f"{self.dir}/slurm.conf"
        self.env = dict(os.environ, SLURM_CONF=self.conf, OPENBLAS_NUM_THREADS="1",
                        OMPI_MCA_btl_vader_backing_directory="/tmp",
                        OMPI_MCA_btl_vader_single_copy_mechanism="none")
        for k in [k for k in self.env if k.startswith(("SLURM_", "SBATCH_", "SRUN_"))]:
            if k != "SLURM_CONF":  # not another cluster's job (a test run inside an allocation)
                del self.env[k]
        self.write_conf()

    def write_conf(self):
        host = socket.gethostname().split(".")[0]
        node = subprocess.run(["slurmd", "-C"], capture_output=True, text=True).stdout.splitlines()[0]
        node = " ".join(w for w in node.split() if not w.startswith("UpTime")) + " NodeAddr=127.0.0.1"
        d = self.dir
        open(self.conf, "w").write(f"""ClusterName={self.name}
SlurmctldHost={host}(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
CryptoType=crypto/munge
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
TmpFS={d}/tmp
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd.log
SlurmctldPort={self.ctld_port}
SlurmdPort={self.slurmd_port}
FirstJobId={self.first_job}
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

    def sh(self, *cmd, timeout=60, **kw):
        return subprocess.run(list(cmd), env=self.env, capture_output=True, text=True,
                              timeout=timeout, **kw)

    def start(self, limit=60):
        """None once the node is idle; else why the cluster did not come up."""
        if not start_munge():
            return "munged does not answer (munge -n | unmunge fails)"
        try:
            if self.sh("slurmctld", "-f", self.conf).returncode != 0 or \
                    self.sh("slurmd", "-f", self.conf).returncode != 0:
                return f"slurmctld or slurmd of cluster {self.name} did not start"
        except subprocess.TimeoutExpired:
            return f"slurmctld or slurmd of cluster {self.name} did not daemonize within 60 s"
        t = time.time()
        while time.time() - t < limit:
            try:
                if "idle" in self.sh("sinfo", "-h", "-N", "-o", "%T", timeout=15).stdout:
                    return None
            except subprocess.TimeoutExpired:
                pass
            time.sleep(0.2)
        return f"the Slurm daemons of cluster {self.name} did not come up within {limit} s"

    def pids(self):
        out = []
        for pid_file in ("slurmd.pid", "slurmctld.pid"):
            try:
                out.append(int(open(f"{self.dir}/{pid_file}").read()))
            except (OSError, ValueError):
                pass
        return out

    def logs(self):
        return "".join(f"--- {self.name}: {n} (end)\n" + open(f"{self.dir}/{n}").read()[-1500:]
                       for n in ("slurmctld.log", "slurmd.log") if os.path.exists(f"{self.dir}/{n}"))

    def stop(self, remove=True):
        """Ends this cluster's daemons (by the PIDs in its own pid files), slurmd first, and
        removes its folder."""
        pids = self.pids()
        for pid in pids:
            try:
                os.kill(pid, 15)
            except OSError:
                pass
        t = time.time()
        while any(os.path.exists(f"/proc/{p}") for p in pids) and time.time() - t < 15:
            time.sleep(0.2)
        if remove:
            shutil.rmtree(self.dir, ignore_errors=True)
