"""Output integrity (issue 9): what a careless or unlucky user does to an output and its inputs.

- A listed segment deleted or truncated, index.h5 or the whole parts folder deleted: `inspect`
  names what is missing and says "complete: no"; `--resume` computes it again, and the result
  equals an uninterrupted run bit for bit.
- The model's weights changed at the same path: `--resume` is refused (exit 1) naming the file.
- Two runs on one output at once: the second is refused (exit 1) naming the first one's host
  and PID; the first finishes as if alone.
- output.path that is (or whose .tmp/.tokens/.lock/.parts is, or holds) an input: refused with
  exit 1 naming both, with or without --overwrite; every input keeps its bytes.
- The parts folder removed mid-run: exit 2 naming the folder.
- `inspect --text -1`: exit 1 naming the argument."""
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess

import h5py

from util import (args, check, ended, finish, init_model, output_diff, run, wait_started,
                  write_job, write_prompts)

harvest, work = args()
init_model(harvest, f"{work}/model", seed=7)
write_prompts(f"{work}/prompts.jsonl", [(13 * i) % 40 + 3 for i in range(24)], seed=7)
ACTS = ["encoder_*_output", "decoder_1_attn_probs", "logits"]
OUTPUT = {"path": "out.h5", "checkpoint_seconds": 0}
env = dict(os.environ, OPENBLAS_NUM_THREADS="1")


def job(d, **kw):
    os.makedirs(d, exist_ok=True)
    fields = dict(model="../model", data="../prompts.jsonl", activations=ACTS, batch_size=3,
                  output=OUTPUT)
    fields.update(kw)
    return write_job(f"{d}/job.json", **fields)


def digest(path):
    """sha256 of a file, or of every file under a folder"""
    h = hashlib.sha256()
    paths = [path] if os.path.isfile(path) else sorted(
        os.path.join(r, f) for r, _, fs in os.walk(path) for f in fs)
    for p in paths:
        h.update(p.encode())
        with open(p, "rb") as f:
            h.update(f.read())
    return h.hexdigest()


def complete(out):
    with h5py.File(out, "r") as f:
        return int(f.attrs["complete"])


# ---- the reference: one uninterrupted run ----
run(harvest, "run", job(f"{work}/full"), "--quiet", check=0)
FULL = f"{work}/full/out.h5"


def segments(out):
    with h5py.File(out, "r") as f:
        return [s["file"] for s in json.loads(f.attrs["segments"])]


def damaged_then_resumed(name, damage, expect):
    """copies the full run, damages it, checks inspect names it, resumes to the full output"""
    d = f"{work}/{name}"
    shutil.copytree(f"{work}/full", d)
    out = f"{d}/out.h5"
    what = damage(out)
    ins = run(harvest, "inspect", out, check=0).stdout
    check("complete: no" in ins and expect(what) in ins,
          f"{name}: inspect names the damage ({expect(what)}): {ins}")
    r = run(harvest, "run", f"{d}/job.json", "--resume", "--quiet")
    check(r.returncode == 0, f"{name}: --resume exit {r.returncode}: {r.stderr}")
    check(expect(what) in r.stderr, f"{name}: --resume says what it redoes: {r.stderr}")
    check(complete(out) == 1, f"{name}: complete after --resume")
    diff = output_diff(FULL, out)
    check(diff is None, f"{name}: resumed output differs from the uninterrupted one: {diff}")
    ins = run(harvest, "inspect", out, check=0).stdout
    check("complete: yes" in ins and "damaged" not in ins, f"{name}: inspect after: {ins}")
    print(f"{name}: inspect names it, --resume redoes it to an identical output", flush=True)


def delete_segment(out):
    s = segments(out)[1]
    os.remove(f"{out}.parts/{s}")
    return s


def truncate_segment(out):
    s = segments(out)[2]
    p = f"{out}.parts/{s}"
    with open(p, "r+b") as f:
        f.truncate(os.path.getsize(p) // 2)
    return s


def short_segment(out):  # its datasets lost rows (a segment of an older, shorter run)
    s = segments(out)[3]
    with h5py.File(f"{out}.parts/{s}", "r+") as f:
        f["activations/logits"].resize(1, axis=0)
    return s


def delete_index(out):
    os.remove(f"{out}.parts/index.h5")
    return "index.h5"


def delete_parts(out):
    shutil.rmtree(f"{out}.parts")
    return "index.h5"


damaged_then_resumed("segment_deleted", delete_segment, lambda s: f"{s} is missing")
damaged_then_resumed("segment_truncated", truncate_segment, lambda s: s)
damaged_then_resumed("segment_short", short_segment, lambda s: f"{s} its dataset logits has 1 of its 3 rows")
damaged_then_resumed("index_deleted", delete_index, lambda s: "index.h5 is missing")
damaged_then_resumed("parts_deleted", delete_parts, lambda s: "index.h5 is missing")

# ---- the weights changed under a resumable output ----
d = f"{work}/weights"
shutil.copytree(f"{work}/model", f"{work}/model2")
run(harvest, "run", job(d, model="../model2"), "--quiet", check=0)
os.remove(f"{d}/out.h5.parts/{segments(f'{d}/out.h5')[0]}")  # something to resume
before = digest(f"{d}/out.h5")
st = os.path.join(work, "model2", "model.safetensors")
with open(st, "r+b") as f:  # the same size and header, other weights
    f.seek(os.path.getsize(st) - 4)
    f.write(b"\x00\x00\x80\x3f")
r = run(harvest, "run", f"{d}/job.json", "--resume", "--quiet")
check(r.returncode == 1 and "model.safetensors" in r.stderr and "--overwrite" in r.stderr,
      f"changed weights: --resume refused naming the file: exit {r.returncode}: {r.stderr}")
check(digest(f"{d}/out.h5") == before, "changed weights: the output is untouched")
r = run(harvest, "run", f"{d}/job.json", "--overwrite", "--quiet")
check(r.returncode == 0, f"changed weights: --overwrite starts again: {r.stderr}")
print("changed weights: --resume refused naming the file", flush=True)

# ---- two runs on one output at once ----
# the first run is held (SIGSTOP) from its first segment until the second runs have been refused,
# so that it is mid-run whatever the machine's speed; then it goes on (SIGCONT) to its end
d = f"{work}/twice"
write_prompts(f"{work}/many.jsonl", [60] * 40, seed=8)
job(d, data="../many.jsonl", batch_size=2)
p = subprocess.Popen([harvest, "run", f"{d}/job.json", "--quiet"], env=env,
                     stderr=subprocess.PIPE, text=True)
if check(wait_started(f"{d}/out.h5", p) is not None, "twice: the first run started"):
    p.send_signal(signal.SIGSTOP)
    try:
        for flag in ["--resume", "--overwrite"]:
            r = run(harvest, "run", f"{d}/job.json", flag, "--quiet")
            check(r.returncode == 1 and "in use" in r.stderr and str(p.pid) in r.stderr and
                  socket.gethostname() in r.stderr,
                  f"twice: the second run ({flag}) names the first: exit {r.returncode}: {r.stderr}")
    finally:
        p.send_signal(signal.SIGCONT)
err = ended(p, "twice", timeout=600)
check(p.returncode == 0, f"twice: the first run finished: {err}")
check(complete(f"{d}/out.h5") == 1, "twice: the first run's output is complete")
check(not os.path.exists(f"{d}/out.h5.lock"), "twice: the lock file is gone after the run")
print("twice: the second run is refused naming host and PID", flush=True)

# ---- output paths that are inputs ----
d = f"{work}/inputs"
os.makedirs(f"{d}/m.h5.parts", exist_ok=True)
shutil.copytree(f"{work}/model", f"{d}/model")
shutil.copytree(f"{work}/model", f"{d}/m.h5.parts/model")
shutil.copy(f"{work}/prompts.jsonl", f"{d}/prompts.jsonl")
shutil.copy(f"{work}/prompts.jsonl", f"{d}/x.h5.tokens")
cases = [("data file", "prompts.jsonl", {}, "prompts.jsonl"),
         ("weights", "model/model.safetensors", {}, "model.safetensors"),
         ("config", "model/config.json", {}, "config.json"),
         ("job file", "job.json", {}, "job.json"),
         ("spill = data", "x.h5", {"data": "x.h5.tokens"}, "x.h5.tokens"),
         ("parts = model folder", "m.h5", {"model": "m.h5.parts/model"}, "m.h5.parts")]
for label, outp, extra, named in cases:
    kw = dict(model="model", data="prompts.jsonl", output={"path": outp})
    kw.update(extra)
    write_job(f"{d}/job.json", activations=ACTS, **kw)
    before = digest(d)
    for flag in [[], ["--overwrite"], ["--resume"]]:
        r = run(harvest, "run", f"{d}/job.json", "--quiet", *flag)
        check(r.returncode == 1 and "input" in r.stderr and named in r.stderr and
              "--overwrite would" in r.stderr,
              f"output = {label} {flag}: exit {r.returncode}: {r.stderr}")
        check(digest(d) == before, f"output = {label} {flag}: the inputs are unchanged")
    print(f"output = {label}: refused: {r.stderr.strip()}", flush=True)
# the model folder as the output's folder is fine
write_job(f"{d}/job.json", activations=ACTS, model="model", data="prompts.jsonl", batch_size=3,
          output={"path": "model/out.h5", "checkpoint_seconds": 0})
r = run(harvest, "run", f"{d}/job.json", "--quiet")
check(r.returncode == 0, f"output in the model folder: exit {r.returncode}: {r.stderr}")
diff = output_diff(FULL, f"{d}/model/out.h5", ignore={"segments", "runs", "provenance", "job"})
check(diff is None, f"output in the model folder: differs: {diff}")

# ---- the parts folder removed mid-run (the run held meanwhile, as above) ----
d = f"{work}/parts_gone"
job(d, data="../many.jsonl", batch_size=2)
p = subprocess.Popen([harvest, "run", f"{d}/job.json", "--quiet"], env=env,
                     stderr=subprocess.PIPE, text=True)
if wait_started(f"{d}/out.h5", p) is not None:
    p.send_signal(signal.SIGSTOP)
    try:
        shutil.rmtree(f"{d}/out.h5.parts")
    finally:
        p.send_signal(signal.SIGCONT)
err = ended(p, "parts_gone", timeout=600)
check(p.returncode == 2 and "out.h5.parts" in (err or "") and "gone" in (err or ""),
      f"parts folder removed: exit {p.returncode}: {err}")
check(complete(f"{d}/out.h5") == 0, "parts folder removed: the output is not complete")
print(f"parts folder removed: {(err or '').strip()}", flush=True)

# ---- limits checked up front (issue 10): expert shards over 256, an output path over 4096 bytes
d = f"{work}/limits"
os.makedirs(d, exist_ok=True)
run(harvest, "init-model", "--family", "laguna", "--preset", "XS-2.1", "--seed", "1",
    f"{d}/lg", check=0)
write_job(f"{d}/job.json", model="lg", data="../prompts.jsonl", activations=["logits"],
          parallel={"expert_parallel": 300}, output={"path": "out.h5"})
r = run(harvest, "run", f"{d}/job.json", "--quiet")
check(r.returncode == 1 and "parallel.expert_parallel" in r.stderr and "300" in r.stderr,
      f"expert_parallel 300: exit {r.returncode}: {r.stderr}")
long_out = "/".join(["x" * 200] * 21) + "/out.h5"  # 4227 bytes
write_job(f"{d}/job.json", model="../model", data="../prompts.jsonl", activations=ACTS,
          output={"path": long_out})
r = run(harvest, "run", f"{d}/job.json", "--quiet")
check(r.returncode == 1 and "output.path" in r.stderr and "bytes long" in r.stderr,
      f"an output path of {len(long_out)} bytes: exit {r.returncode}: {r.stderr}")
print("limits: expert_parallel 300 and a 4 kB output path refused naming the key", flush=True)

# ---- inspect --text with a bad number ----
for bad in ["-1", "abc", "2x"]:
    r = run(harvest, "inspect", FULL, "--text", bad)
    check(r.returncode == 1 and f"--text {bad}" in r.stderr,
          f"inspect --text {bad}: exit {r.returncode}: {r.stderr}")
r = run(harvest, "inspect", FULL, "--text", "99")
check(r.returncode == 1 and "prompt 99" in r.stderr, f"inspect --text 99: {r.stderr}")
finish()
