"""Helpers shared by the Python tests: run the harvest binary, make models, data and jobs.

Every test takes the harvest binary as argv[1] and a scratch folder as argv[2]; it prints what it
checks and exits non-zero on the first failure (CTest reads the exit code)."""
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "ref"))

SPEC = json.load(open(os.path.join(HERE, "ref", "spec.json")))


_work = None


def reader():
    """The harvest_data module the reader tests use: the source tree's (io/python), or with
    HARVEST_DATA_INSTALLED=1 the installed package (test_pip_install.py), never the tree's then."""
    if os.environ.get("HARVEST_DATA_INSTALLED") == "1":
        import harvest_data
        tree = os.path.realpath(os.path.join(HERE, "..", "io", "python"))
        if os.path.realpath(os.path.dirname(harvest_data.__file__)) == tree:
            sys.exit(f"FAIL: harvest_data imported from the source tree {tree}, not installed")
        print(f"reader: installed {harvest_data.__file__}")
        return harvest_data
    sys.path.insert(0, os.path.join(HERE, "..", "io", "python"))
    import harvest_data
    return harvest_data


def args():
    """(harvest binary, a fresh scratch folder); finish() removes the folder when all passed."""
    global _work
    if len(sys.argv) < 3:
        sys.exit(f"usage: {sys.argv[0]} HARVEST_BINARY SCRATCH_DIR")
    harvest, work = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    _work = work
    return harvest, work


def cpu_flags():
    """The CPU's flags as /proc/cpuinfo lists them (its first processor)"""
    return set(open("/proc/cpuinfo").read().split("flags")[1].split("\n")[0].split())


def run(harvest, *a, check=None, timeout=600, env=None):
    """Runs harvest; returns CompletedProcess. check=N asserts the exit code. env: variables set
    over this process's environment (a value None removes that variable)."""
    e = dict(os.environ)
    e.setdefault("OPENBLAS_NUM_THREADS", "1")
    for k, v in (env or {}).items():
        if v is None:
            e.pop(k, None)
        else:
            e[k] = v
    p = subprocess.run([harvest, *a], capture_output=True, text=True, timeout=timeout, env=e)
    if check is not None and p.returncode != check:
        sys.exit(f"FAIL: harvest {' '.join(a)}: exit {p.returncode}, expected {check}\n"
                 f"stdout: {p.stdout[-2000:]}\nstderr: {p.stderr[-2000:]}")
    return p


def init_model(harvest, path, seed, dtype="f32", shards=1):
    if not os.path.exists(os.path.join(path, "config.json")):
        run(harvest, "init-model", "--family", "encdec", "--seed", str(seed), "--dtype", dtype,
            "--shards", str(shards), path, check=0)
    return path


def write_prompts(path, lengths, seed, vocab=8192):
    """One {"input_ids": [..]} line per length (0 = an empty prompt)."""
    rng = random.Random(seed)
    with open(path, "w") as f:
        for n in lengths:
            f.write(json.dumps({"input_ids": [rng.randrange(vocab) for _ in range(n)]}) + "\n")
    return path


def write_job(path, **fields):
    job = {"model": "model", "data": "prompts.jsonl", "activations": ["*"],
           "output": {"path": "out.h5"}}
    job.update(fields)
    with open(path, "w") as f:
        json.dump(job, f)
    return path


def npm_packages(npm_dir, required):
    """The environment for node with the npm packages of tests/js/package.json, installed into
    npm_dir (kept between runs: the packages are large) unless each of required (paths under
    node_modules, e.g. "@lenml/tokenizers") is there. setup.sh test installs npm, so a missing npm
    or a failed install is a failure of the test (exit 1), not a skip."""
    nm = os.path.join(npm_dir, "node_modules")
    if not all(os.path.isdir(os.path.join(nm, r)) for r in required):
        if not shutil.which("npm"):
            sys.exit("FAIL: npm is not installed (setup.sh test installs it): cannot install "
                     f"{', '.join(required)}")
        os.makedirs(npm_dir, exist_ok=True)
        shutil.copy(os.path.join(HERE, "js", "package.json"), npm_dir)
        p = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--silent"], cwd=npm_dir,
                           capture_output=True, text=True, timeout=900)
        if p.returncode != 0:
            sys.exit(f"FAIL: npm install in {npm_dir} failed (exit {p.returncode})\n"
                     f"{p.stderr[-2000:]}")
        missing = [r for r in required if not os.path.isdir(os.path.join(nm, r))]
        if missing:
            sys.exit(f"FAIL: npm install in {npm_dir} did not install {', '.join(missing)}")
    return dict(os.environ, NODE_PATH=nm)


# Open MPI as root in a container, more ranks than cores
MPI_ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", OPENBLAS_NUM_THREADS="1",
               OMPI_MCA_btl_vader_backing_directory="/tmp",
               OMPI_MCA_btl_vader_single_copy_mechanism="none")

# where the rows are stored and who wrote them: may differ between equal outputs
BOOKKEEPING = {"segments", "runs", "provenance"}


class Snapshot:
    """An output's root attributes and datasets, read once: a reference that output_diff compares
    with many outputs (output_diff(Snapshot(ref), b) reads only b)."""

    def __init__(self, path):
        import h5py
        with h5py.File(path, "r") as f:
            self.attrs = {k: f.attrs[k] for k in f.attrs}
            self.data = {}
            f.visititems(lambda n, o: self.data.__setitem__(n, o[()])  # [()]: scalars too
                         if isinstance(o, h5py.Dataset) else None)


def output_diff(a, b, ignore=BOOKKEEPING):
    """None if outputs a and b hold the same datasets (bit for bit, NaN = NaN) and root attributes
    (but those in ignore); else what differs first. a is a path or a Snapshot of one."""
    import h5py
    with h5py.File(b, "r") as fb:
        if isinstance(a, Snapshot):
            return _diff(a.attrs, iter(a.data.items()), fb, ignore)
        with h5py.File(a, "r") as fa:
            names = []
            fa.visit(names.append)
            items = ((n, fa[n][()]) for n in names if isinstance(fa[n], h5py.Dataset))
            return _diff(dict(fa.attrs), items, fb, ignore)


def _diff(attrs, items, fb, ignore):
    """output_diff's comparison: attributes attrs and (name, array) items against the file fb"""
    import h5py
    import numpy as np
    if set(attrs) - ignore != set(fb.attrs) - ignore:
        return "root attribute names"
    for k in set(attrs) - ignore:
        if not np.array_equal(attrs[k], fb.attrs[k]):
            return f"root attribute {k}"
    for n, x in items:
        if not isinstance(fb.get(n), h5py.Dataset):
            return n
        y = fb[n][()]
        if x.dtype != y.dtype or x.shape != y.shape or \
                not np.array_equal(x, y, equal_nan=x.dtype.kind == "f"):
            return n
    return None


def segment_files(out, prefix="seg-"):
    """{(name, inode, mtime)} of the segment files whose name starts with prefix in the parts
    folder of out (seg-RUN-STAGE'S FIRST RANK-INDEX.h5: with checkpoint_seconds 0 a stage opens
    one a round)"""
    parts = out + ".parts"
    keys = set()
    for n in os.listdir(parts) if os.path.isdir(parts) else []:
        try:
            st = os.stat(os.path.join(parts, n)) if n.startswith(prefix) else None
        except FileNotFoundError:  # removed meanwhile
            st = None
        if st:
            keys.add((n, st.st_ino, st.st_mtime_ns))
    return keys


def segments_opened(out, prefix="seg-", since=()):
    """How many segment files starting with prefix the parts folder of out holds that are not in
    since (a segment_files() of it taken before: a file made, or rewritten, since then counts)"""
    return len(segment_files(out, prefix) - set(since))


def wait_segments(out, p, n, prefix="seg-", since=(), limit=300):
    """Seconds until the parts folder of out holds n segment files starting with prefix that are
    not in since (the run p has begun that many rounds there); None if p ended or limit seconds
    passed first. Signals meant to land at a point of a run are timed by its progress, whatever
    the machine's speed."""
    t0 = time.time()
    while p.poll() is None and time.time() - t0 < limit:
        try:
            if segments_opened(out, prefix, since) >= n:
                return time.time() - t0
        except FileNotFoundError:  # the folder made or renamed meanwhile
            pass
        time.sleep(0.01)
    return None


def has_segment(out):
    """Whether a run writing out has opened a segment in out's parts folder."""
    parts = out + ".parts"
    return os.path.isdir(parts) and any(n.startswith("seg-") for n in os.listdir(parts))


def wait_started(out, p, limit=120):
    """Seconds until the run p has opened a segment in out's parts folder, that is, until it is
    past MPI_Init (seconds for a singleton) and planning and into its batches; None if p ended or
    limit seconds passed first. Signals meant to land mid-run are timed from this point."""
    t0 = time.time()
    while p.poll() is None and time.time() - t0 < limit:
        if has_segment(out):
            return time.time() - t0
        time.sleep(0.02)
    return None


def stop_mid_run(harvest, job, out, settle=0.5, tries=3, timeout=120, after=None, errs=None):
    """Runs `harvest run job --overwrite` on one rank (one BLAS thread) and sends it SIGTERM settle
    seconds after its first segment opens (wait_started), or, with after=N, once it has opened N
    segments (wait_segments: N - 1 batches or rounds in, whatever the machine's speed; the old
    output is removed first, so that its segments are not counted); tries again if the run ended
    first. Appends the last try's stderr to the list errs if given. Returns the last exit code
    (3: stopped at a batch boundary)."""
    for _ in range(tries):
        if after:
            shutil.rmtree(out + ".parts", ignore_errors=True)
            if os.path.exists(out):
                os.remove(out)
        p = subprocess.Popen([harvest, "run", job, "--quiet", "--overwrite"],
                             stderr=subprocess.PIPE, text=True,
                             env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
        if after:
            wait_segments(out, p, after)
        else:
            wait_started(out, p)
            time.sleep(settle)
        p.send_signal(signal.SIGTERM)
        err = p.communicate(timeout=timeout)[1]
        if p.returncode == 3:
            break
    if errs is not None:
        errs.append(err)
    return p.returncode


def ended(p, label, timeout=60):
    """The stderr of process p once it has ended, or None (a failed check) if it had not ended
    within timeout seconds: then it is killed."""
    try:
        return p.communicate(timeout=timeout)[1]
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        check(False, f"{label}: did not end within {timeout} s (a hang)")
        return None


failures = 0


def compare_row(name, got, c, want, rtol):
    """A stored row against its reference: got[c] (c: the prompt's corner, slices) holds want
    (int64 exactly; floats within rtol of the tensor's scale, -inf exactly where want has it), the
    rest is padding (0 for integers, NaN for floats). Returns the relative error."""
    import numpy as np
    g = got[c]
    if not check(g.shape == want.shape, f"{name}: corner shape {g.shape} vs {want.shape}"):
        return 0.0
    pad = np.ones(got.shape, bool)
    pad[c] = False
    if got.dtype == np.int64:
        check(np.array_equal(g, want), f"{name}: int64 values exact")
        check(not got[pad].any(), f"{name}: integer padding is 0")
        return 0.0
    check(np.isnan(got[pad]).all(), f"{name}: float padding is NaN")
    inf = np.isneginf(want)
    check(np.array_equal(np.isneginf(g), inf), f"{name}: -inf exactly where blocked")
    fin = ~inf
    scale = np.abs(want[fin]).max() if fin.any() else 1.0
    err = np.abs(g[fin] - want[fin]).max() / max(scale, 1e-30)
    check(err <= rtol, f"{name}: relative error {err:.2e} > {rtol}")
    return err


def same_ids(name, got, want, files):
    """Checks that harvest's token ids got equal the reference's want, one list per case file of
    files (the tokenizer tests), printing the first difference of up to five cases. Returns the
    indices of the cases that differ."""
    check(len(got) == len(want) == len(files), f"{name}: {len(got)} results, {len(want)} expected")
    bad = [i for i, (g, w) in enumerate(zip(got, want)) if g != w]
    for i in bad[:5]:
        g, w = got[i], want[i]
        k = next((j for j in range(min(len(g), len(w))) if g[j] != w[j]), min(len(g), len(w)))
        print(f"  {name} case {i} ({open(files[i], 'rb').read()[:80]!r}): first difference at {k}: "
              f"harvest {g[max(0, k - 2):k + 4]}, reference {w[max(0, k - 2):k + 4]}")
    if check(not bad, f"{name}: {len(bad)} of {len(files)} cases differ from the JS reference"):
        print(f"{name}: {len(files)} cases, {sum(map(len, want))} ids, identical to the JS reference",
              flush=True)
    return bad


def check(cond, what):
    global failures
    if not cond:
        failures += 1
        print(f"FAIL: {what}", flush=True)
    return cond


def finish():
    if failures:
        print(f"{failures} checks failed (files kept in {_work})")
        sys.exit(1)
    print("all checks passed")
    if _work:  # outputs run to gigabytes: keep them only for a failure
        shutil.rmtree(_work, ignore_errors=True)


# ---- the export tests' fixture (test_export, test_export_formats, test_export_safety) ----------
EXPORT_LENGTHS = [5, 17, 1, 30, 64, 9, 12, 40, 3, 22, 64, 2, 50, 7, 33, 11, 48, 4, 26, 60]


class ExportFixture:
    """The export tests' corpus (work/prompts.jsonl: EXPORT_LENGTHS, seed 5) and models
    (work/MODEL for each (MODEL, seed) of models); outputs of it (output) and `harvest export
    --shards` runs (export)."""

    def __init__(self, harvest, work, models=(("model", 5),)):
        self.harvest, self.work = harvest, work
        for m, seed in models:
            init_model(harvest, f"{work}/{m}", seed=seed)
        write_prompts(f"{work}/prompts.jsonl", EXPORT_LENGTHS, seed=5)

    def output(self, name, acts, *run_args, job_extra=None, **output):
        """work/NAME.h5: `harvest run` of acts (batch 3, max_seq_len 64) with output keys
        output, job keys job_extra and `harvest run` flags run_args"""
        o = dict({"path": f"{name}.h5"}, **output)
        job = write_job(f"{self.work}/{name}.json", activations=acts, batch_size=3,
                        max_seq_len=64, output=o, **(job_extra or {}))
        run(self.harvest, "run", job, "--quiet", *run_args, check=0)
        return f"{self.work}/{name}.h5"

    def export(self, src, d, *opts, rc=0, np_=1):
        """`harvest export SRC --shards D --quiet OPTS` on np_ ranks, its exit code checked
        against rc (None: not checked); the CompletedProcess"""
        cmd = [self.harvest, "export", src, "--shards", d, "--quiet", *opts]
        if np_ > 1:
            cmd = ["mpirun", "-np", str(np_)] + cmd
        p = subprocess.run(cmd, capture_output=True, text=True, env=MPI_ENV, timeout=600)
        if rc is not None and p.returncode != rc:
            check(False, f"export {d} {' '.join(opts)}: exit {p.returncode}, expected {rc}: "
                         f"{p.stderr[-1500:]}")
        return p


def synthetic_output(path, n_tokens, d=8, T=128, checksum=777, columns=True, chunks=True):
    """A token-layout harvest output written directly (one plain dataset "x" of d features, no
    segments): prompts of T tokens (the last fewer), x[t] = t + feature / 16, input ids from
    numpy's default_rng(0); data_checksum checksum + n_tokens; with /tokens/prompt_index and
    position when columns, chunks of 65536 rows when chunks."""
    import h5py
    import numpy as np
    n_p = (n_tokens + T - 1) // T
    L = np.full(n_p, T, np.int64)
    L[-1] = n_tokens - T * (n_p - 1)
    with h5py.File(path, "w") as f:
        f.attrs.update(harvest_format=1, complete=1, data_checksum=checksum + n_tokens,
                       storage_dtype="float32", max_seq_len=T)
        f["prompts/length"] = L
        f["prompts/token_offset"] = np.concatenate([[0], np.cumsum(L)[:-1]])
        f["prompts/source_index"] = np.arange(n_p, dtype=np.int64)
        f["tokens/input_ids"] = np.random.default_rng(0).integers(0, 1000, n_tokens)
        if columns:
            f["tokens/prompt_index"] = np.repeat(np.arange(n_p), L)
            f["tokens/position"] = np.concatenate([np.arange(x) for x in L])
        x = f.create_dataset("activations/x", (n_tokens, d), np.float32,
                             chunks=(65536, d) if chunks else None)
        for a in range(0, n_tokens, 1 << 20):  # a piece at a time: memory flat in n_tokens
            b = min(n_tokens, a + (1 << 20))
            x[a:b] = np.arange(a, b, dtype=np.float32)[:, None] + np.arange(d) / 16
        x.attrs["stored_axes"] = ["token", "feature"]
    return path
