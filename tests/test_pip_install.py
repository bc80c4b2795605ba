"""`pip install ./io/python` in a fresh virtual environment with the system's site packages (numpy,
h5py and torch from Debian; no network: --no-index --no-build-isolation) gives `import
harvest_data` from the environment, its version is the project's (the file VERSION), the
installed module is io/python/harvest_data.py byte for byte, and the reader tests (test_export.py,
test_probe.py) pass against the installed package: run by the environment's python with
HARVEST_DATA_INSTALLED=1, which makes tests/util.py's reader() import the installed module and
refuse the source tree's, and makes those tests check what calls the reader (the checks of the
harvest binary alone are their own runs', with the same binary: see their docstrings)."""
import os
import subprocess
import sys

from util import HERE, args, check, finish

harvest, work = args()
ROOT = os.path.dirname(HERE)
venv = os.path.join(work, "venv")
subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", venv], check=True)
py = os.path.join(venv, "bin", "python")
src = os.path.join(work, "src")  # pip builds in the tree it is given: a copy, not the checkout
subprocess.run(["cp", "-r", os.path.join(ROOT, "io", "python"), src], check=True)
p = subprocess.run([py, "-m", "pip", "install", "--no-index", "--no-build-isolation",
                    "--no-cache-dir", src], capture_output=True, text=True)
check(p.returncode == 0, f"pip install: {p.stdout}{p.stderr}")
version = open(os.path.join(ROOT, "VERSION")).read().strip()
q = subprocess.run([py, "-c", "import importlib.metadata as m, harvest_data as h; "
                    "print(h.__file__); print(h.__version__); print(m.version('harvest-data'))"],
                   capture_output=True, text=True, cwd=work)
check(q.returncode == 0, f"import harvest_data: {q.stderr}")
where, v_mod, v_dist = q.stdout.split()
check(where.startswith(venv), f"harvest_data comes from the environment: {where}")
check(v_mod == version and v_dist == version,
      f"the installed version is the project's {version}: module {v_mod}, distribution {v_dist}")
same = open(where, "rb").read() == open(os.path.join(ROOT, "io", "python", "harvest_data.py"),
                                        "rb").read()
check(same, f"the installed {where} is io/python/harvest_data.py byte for byte")
print(f"ok: pip install ./io/python: harvest-data {version} in {venv}")

env = dict(os.environ, HARVEST_DATA_INSTALLED="1")
for t in ["test_export.py", "test_probe.py"]:
    r = subprocess.run([py, os.path.join(HERE, t), harvest, os.path.join(work, t[:-3])],
                       capture_output=True, text=True, env=env, timeout=1200)
    check(r.returncode == 0 and "reader: installed" in r.stdout,
          f"{t} against the installed package: exit {r.returncode}\n{r.stdout[-3000:]}"
          f"{r.stderr[-3000:]}")
    print(f"ok: {t} passes against the installed harvest_data")
finish()
