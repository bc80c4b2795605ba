"""Output variants: the token layout equals the prompt layout's valid rows; float16 and bfloat16
storage equal float32 rounded to nearest even; gzip levels change nothing but the bytes; the token
layout refuses activations with a key axis; chunks follow prompts and token runs; `inspect`."""
import os

import h5py
import numpy as np

from util import args, check, finish, init_model, run, write_job, write_prompts

harvest, work = args()
init_model(harvest, f"{work}/model", seed=3)
write_prompts(f"{work}/prompts.jsonl", [5, 1, 70, 0, 33, 2], seed=3)
BASE = ["token_embeddings", "encoder_1_*", "decoder_0_q", "decoder_3_ffn_activation", "logits",
        "decoder_2_attn_probs"]


def job(name, acts=BASE, **out):
    o = {"path": f"{name}.h5"}
    o.update(out)
    return write_job(f"{work}/{name}.json", activations=acts, batch_size=2, output=o)


run(harvest, "run", job("ref"), "--quiet", check=0)
ref = h5py.File(f"{work}/ref.h5", "r")
A = ref["activations"]
L = ref["prompts/length"][:]
off = ref["prompts/token_offset"][:]
S = int(ref.attrs["max_seq_len"])
check(S == 70, f"default max_seq_len is the longest prompt (70), got {S}")


def segment_of(master, name):
    """the segment file (and dataset) behind a virtual dataset of a master file"""
    v = h5py.File(master, "r")["activations/" + name].virtual_sources()[0]
    check(v.file_name.startswith(os.path.basename(master) + ".parts/seg-"),
          f"{name}: a virtual dataset over a segment beside the master ({v.file_name})")
    return h5py.File(os.path.join(os.path.dirname(master), v.file_name), "r")[v.dset_name]


check(segment_of(f"{work}/ref.h5", "encoder_1_q").chunks[1:] == A["encoder_1_q"].shape[1:],
      "prompt layout: a chunk holds whole prompts")

# ---- token layout ----
token_names = [n for n in A if "mask" not in n and "attn_" not in n and "combined" not in n]
token_names.append("encoder_1_attn_output")
token_names = sorted(set(token_names))
run(harvest, "run", job("tok", acts=token_names, layout="token"), "--quiet", check=0)
with h5py.File(f"{work}/tok.h5", "r") as t:
    check(sorted(t["activations"]) == token_names, "token layout: the requested names")
    for name in token_names:
        d = t["activations/" + name]
        sem = list(d.attrs["semantic_shape"])
        seq = sem.index("sequence")
        want_axes = ["token"] + [a for a in sem if a not in ("batch", "sequence")]
        check(list(d.attrs["stored_axes"]) == want_axes, f"{name}: token stored_axes {want_axes}")
        check(d.shape[0] == L.sum(), f"{name}: n_tokens rows")
        full = d[:]
        for p in range(len(L)):
            pr = A[name][p]  # prompt layout row, without the batch axis
            rows = np.moveaxis(pr, seq - 1, 0)[:L[p]]
            check(np.array_equal(full[off[p]:off[p] + L[p]], rows),
                  f"{name}: token rows of prompt {p} == prompt layout's valid rows")
    s = segment_of(f"{work}/tok.h5", "logits")
    check(s.chunks[1:] == (8192,) and s.chunks[0] > 1, "token layout: chunks are runs of tokens")

bad = run(harvest, "run", job("tokbad", acts=["encoder_0_attn_probs", "encoder_0_q",
                                              "decoder_1_local_mask"], layout="token"))
check(bad.returncode == 1 and "encoder_0_attn_probs" in bad.stderr and
      "decoder_1_local_mask" in bad.stderr and "encoder_0_q," not in bad.stderr,
      f"token layout refuses key-axis activations by name: {bad.stderr.strip()}")

# ---- float16 / bfloat16 ----


def bf16_round(x):
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    out = r.astype(np.uint32).view(np.float32)
    return np.where(np.isnan(x), np.float32(np.nan), out)


for dt in ("float16", "bfloat16"):
    run(harvest, "run", job(dt, dtype=dt), "--quiet", check=0)
    with h5py.File(f"{work}/{dt}.h5", "r") as h:
        check(h.attrs["storage_dtype"] == dt, f"{dt}: storage_dtype attribute")
        for name in A:
            d = h["activations/" + name]
            if A[name].dtype == np.int64:
                check(d.dtype == np.int64 and np.array_equal(d[:], A[name][:]), f"{dt}: {name} int64 kept")
                continue
            check(d.dtype.itemsize == 2 or dt == "bfloat16", f"{dt}: {name} stored in 2 bytes")
            check(d.attrs["dtype"] == "float32", f"{dt}: {name} dtype attribute is the activation's own")
            want = A[name][:]
            want = want.astype(np.float16) if dt == "float16" else bf16_round(want)
            got = d[:]
            check(np.array_equal(np.isnan(got), np.isnan(want)), f"{dt}: {name} NaN padding kept")
            m = ~np.isnan(want)
            check(np.array_equal(got[m].astype(np.float32), want[m].astype(np.float32)),
                  f"{dt}: {name} equals float32 rounded to nearest even")
        if dt == "bfloat16":
            tid = h["activations/logits"].id.get_type()  # the master's virtual dataset
            check(tid.get_size() == 2 and tid.get_fields()[2] == 8, "bfloat16: 2 bytes, 8 exponent bits")

# ---- gzip ----
for level in (1, 9):
    run(harvest, "run", job(f"gz{level}", compression=level), "--quiet", check=0)
    with h5py.File(f"{work}/gz{level}.h5", "r") as g:
        for name in A:
            d = g["activations/" + name]
            s = segment_of(f"{work}/gz{level}.h5", name)
            check(s.compression == "gzip" and s.compression_opts == level, f"gzip {level}: {name} filter")
            check(np.array_equal(d[:], A[name][:], equal_nan=A[name].dtype != np.int64),
                  f"gzip {level}: {name} values unchanged")

# ---- inspect ----
ins = run(harvest, "inspect", f"{work}/ref.h5", check=0).stdout
check("complete: yes" in ins and "prompts: 5 (1 empty skipped" in ins and "decoder_0_q" in ins,
      f"inspect summary:\n{ins}")
ins = run(harvest, "inspect", f"{work}/bfloat16.h5", check=0).stdout
check("stored bfloat16" in ins, "inspect shows the storage dtype")
check(run(harvest, "inspect", f"{work}/prompts.jsonl").returncode == 1, "inspect of a non-HDF5 file: exit 1")

# ---- an F16 checkpoint, and data given as an object with its own field ----
import json

from encdec_ref import EncDecRef

init_model(harvest, f"{work}/model16", seed=3, dtype="f16")
with open(f"{work}/ids.jsonl", "w") as f:
    for line in open(f"{work}/prompts.jsonl"):
        f.write(json.dumps({"ids": json.loads(line)["input_ids"], "meta": 1}) + "\n")
write_job(f"{work}/f16.json", model="model16", data={"path": "ids.jsonl", "field": "ids"},
          activations=["logits", "encoder_2_attn_probs"], output={"path": "f16.h5"})
run(harvest, "run", f"{work}/f16.json", "--quiet", check=0)
r16 = EncDecRef(f"{work}/model16")
with h5py.File(f"{work}/f16.h5", "r") as h:
    check(np.array_equal(h["tokens/input_ids"][:], ref["tokens/input_ids"][:]), "data.field: same ids")
    for p in range(len(L)):
        want = r16.forward(h["tokens/input_ids"][off[p]:off[p] + L[p]])
        for name in ("logits", "encoder_2_attn_probs"):
            w = want[name][0]
            g = h["activations/" + name][p][tuple(slice(0, n) for n in w.shape)]
            err = np.abs(g - w).max() / np.abs(w).max()
            check(err < 5e-5, f"F16 checkpoint: {name} of prompt {p} within 5e-5 of the reference ({err:.1e})")

# ---- the output moves as a whole: master + parts folder, opened from elsewhere ----
import shutil

moved = f"{work}/moved"
os.makedirs(moved, exist_ok=True)
shutil.copy(f"{work}/ref.h5", moved)
shutil.copytree(f"{work}/ref.h5.parts", f"{moved}/ref.h5.parts")
cwd = os.getcwd()
os.chdir("/")
with h5py.File(f"{moved}/ref.h5", "r") as m:
    for name in A:
        check(np.array_equal(m["activations/" + name][:], A[name][:], equal_nan=A[name].dtype.kind == "f"),
              f"moved copy: {name} reads the same")
    check(np.array_equal(m["tokens/input_ids"][:], ref["tokens/input_ids"][:]), "moved copy: /tokens")
os.chdir(cwd)
finish()
