"""The BLAS kernel check (harvest/blascheck.c): `run` and `bench` name the BLAS and its core in
their start-up line; when OpenBLAS fell back to a generic core on a CPU with AVX2 or AVX-512 and
OPENBLAS_CORETYPE is not set, harvest re-executes itself with the right core (checked by an sgemm
against a naive product); a user's OPENBLAS_CORETYPE is never overridden (the start-up line says
when the CPU runs wider kernels than it); a core that fails the check is dropped for OpenBLAS's
own choice with a warning (also under --quiet). Every case is checked by what the process really
ran: outputs bitwise equal to a run on the named core.

The machine decides one branch: where OpenBLAS's own choice is a fallback (Debian's 0.3.21 picks
Prescott on a 5th-generation Xeon), the plain run must switch; elsewhere it must keep OpenBLAS's
choice. HARVEST_BLAS_ASSUME_CORE=Prescott (a test hook: take OpenBLAS's choice to be Prescott)
exercises the switch and its failure path on any CPU with AVX2.

"Nothing set" is nothing set: OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE (some machines' environments
set them, for older OpenBLAS builds than Debian's on CPUs newer than they are) are removed from
the environment of these harvest processes alone, both together; a run with OPENBLAS_CORETYPE in
the environment is the "user's core" case, checked below with each core by name."""
import ctypes.util
import os
import re
import shutil
import subprocess

from util import (args, check, cpu_flags, finish, init_model, output_diff, run, write_job,
                  write_prompts)

harvest, work = args()
init_model(harvest, f"{work}/model", seed=5)
write_prompts(f"{work}/prompts.jsonl", [40, 3, 17, 64, 9], seed=5)
UNSET = ["OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"] + [k for k in os.environ
                                                     if k.startswith("HARVEST_BLAS_")]
BASE = {k: v for k, v in os.environ.items() if k not in UNSET}
LEVEL = {"Prescott": 1, "Core2": 1, "Penryn": 1, "Nehalem": 1, "Atom": 1, "Sandybridge": 2,
         "Haswell": 3, "Zen": 3, "SkylakeX": 4, "Cooperlake": 4, "SapphireRapids": 4}


def own_core():
    """OpenBLAS's own choice on this CPU: the library harvest links, asked with no variable set"""
    lib = re.search(r"(\S*libopenblas\S*) \(", subprocess.run(
        ["ldd", harvest], capture_output=True, text=True).stdout).group(1)
    code = ("import ctypes; l = ctypes.CDLL(%r); l.openblas_get_corename.restype = ctypes.c_char_p;"
            " print(l.openblas_get_corename().decode())" % lib)
    return subprocess.run(["/usr/bin/python3", "-c", code], env=BASE, capture_output=True,
                          text=True, check=True).stdout.strip()


def best_core():
    flags = cpu_flags()
    amd = "AuthenticAMD" in open("/proc/cpuinfo").read()
    if {"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"} <= flags:
        return "SkylakeX"
    if {"avx2", "fma"} <= flags:
        return "Zen" if amd else "Haswell"
    return None


def harvest_run(name, quiet=False, **env):
    job = write_job(f"{work}/{name}.json", activations=["decoder_3_output", "logits"],
                    batch_size=2, output={"path": f"{name}.h5"})
    e = dict.fromkeys(UNSET)  # None: removed (util.run)
    e.update(env)
    p = run(harvest, "run", job, *(["--quiet"] if quiet else []), env=e, check=0)
    m = re.search(r"^harvest: BLAS (OpenBLAS \S+), core (\S+) \((.*)\)$", p.stderr, re.M)
    check(quiet or m, f"{name}: the start-up line names the BLAS and its core:\n{p.stderr}")
    return p, m


def same(a, b, what):
    d = output_diff(f"{work}/{a}.h5", f"{work}/{b}.h5", {"segments", "runs", "provenance", "job"})
    check(d is None, f"{what}: {a} and {b} differ at {d}")


own, best = own_core(), best_core()
print(f"OpenBLAS's own choice here: {own}; the best core for this CPU: {best}")
fallback = best is not None and LEVEL.get(own, 9) < LEVEL[best]

# a user's core is never overridden: the reference outputs of each core (OpenBLAS's own choice
# too, which the plain run is compared with where it is not a fallback: Cooperlake on an AMD EPYC
# of family 25 model 17, where the best core by flags is SkylakeX)
# (the line says when the CPU has wider kernels than the core set)
for core in dict.fromkeys(["Prescott", best or own, own]):
    p, m = harvest_run(f"user-{core}", OPENBLAS_CORETYPE=core)
    wider = "" if best is None or LEVEL[core] >= LEVEL[best] else \
        "; the CPU has %s: unset it for faster kernels" % (
            "AVX-512" if best == "SkylakeX" else "AVX2 and FMA")
    check(m.group(2) == core and m.group(3) == f"OPENBLAS_CORETYPE={core}{wider}",
          f"OPENBLAS_CORETYPE={core} kept: {m.group(0)}")
    check("warning" not in p.stderr, f"no warning with OPENBLAS_CORETYPE={core}")

# nothing set: the right core, on this machine's branch
p, m = harvest_run("plain")
if fallback:
    check(m.group(2) == best and m.group(3) ==
          f"harvest's choice for this CPU; OpenBLAS chose {own}",
          f"OpenBLAS fell back to {own}: harvest runs {best}: {m.group(0)}")
    same("plain", f"user-{best}", f"the plain run computes with {best}")
else:
    check(m.group(2) == own and m.group(3) == "OpenBLAS's choice", f"kept {own}: {m.group(0)}")
    same("plain", f"user-{own}", f"the plain run computes with {own}")
print(f"ok: no variable set: {m.group(0)}")

if best:
    # the switch on any CPU with AVX2 (the hook takes OpenBLAS's choice to be Prescott)
    p, m = harvest_run("assumed", HARVEST_BLAS_ASSUME_CORE="Prescott")
    check(m.group(2) == best and "OpenBLAS chose Prescott" in m.group(3), m.group(0))
    same("assumed", f"user-{best}", f"the switch from Prescott computes with {best}")
    # the failure path: the chosen core fails its sgemm check -> OpenBLAS's choice, a warning
    for quiet in (False, True):
        p, m = harvest_run(f"fault{int(quiet)}", quiet, HARVEST_BLAS_ASSUME_CORE="Prescott",
                           HARVEST_BLAS_SELFCHECK_FAULT="1")
        check(f"warning: OpenBLAS core {best} (asked for {best}) failed harvest's sgemm check"
              in p.stderr, f"the failed check warns (quiet={quiet}): {p.stderr}")
        check(quiet or (m.group(2) == "Prescott" and
                        m.group(3) == f"OpenBLAS's choice; {best} failed harvest's check"),
              f"the failed core is dropped: {m and m.group(0)}")
        same(f"fault{int(quiet)}", "user-Prescott", "after the failed check it computes on Prescott")
    print(f"ok: {best} chosen over an assumed Prescott; its failed check falls back with a warning")

# --quiet: no start-up line
p, m = harvest_run("quiet", True)
check("harvest: BLAS" not in p.stderr, f"--quiet prints no BLAS line: {p.stderr}")

# under mpirun every rank re-executes itself before MPI_Init: np 2 equals np 1 bitwise
mpirun = shutil.which("mpirun")
e = dict(BASE, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
         OMPI_MCA_rmaps_base_oversubscribe="1", OMPI_MCA_btl_vader_backing_directory="/tmp",
         OMPI_MCA_btl_vader_single_copy_mechanism="none", OPENBLAS_NUM_THREADS="1")
job = write_job(f"{work}/np2.json", activations=["decoder_3_output", "logits"], batch_size=2,
                output={"path": "np2.h5"})
p = subprocess.run([mpirun, "-np", "2", harvest, "run", job], env=e, capture_output=True,
                   text=True, timeout=300)
check(p.returncode == 0, f"mpirun -np 2: {p.stderr}")
check(re.search(r"^harvest: BLAS .*core " + re.escape(m and m.group(2) or (best if fallback else own)),
                p.stderr, re.M), f"np 2 names the core: {p.stderr}")
same("np2", "plain", "np 2 (both ranks re-executed) equals np 1")

# bench names it too
b = subprocess.run([harvest, "bench", "--prompts", "2", "--io-prompts", "2", "--T", "16",
                    "--batch", "1"], env=BASE, capture_output=True,
                   text=True, timeout=300)
check(b.returncode == 0 and re.search(r"^  BLAS OpenBLAS \S+, core \S+ \(", b.stdout, re.M),
      f"bench prints the BLAS line: {b.stdout}{b.stderr}")
print("ok: --quiet, mpirun -np 2, bench")
finish()
