"""The scaffolding the family tests share (test_olmo2, test_olmoe, test_phi3, test_deepseek_v3,
test_deepseek_v3_fp8, test_gpt_oss, test_fp8_checkpoint and their _mpi twins): make and run a
checkpoint, read the output back prompt by prompt, compare every stored value with a float64
reference at the golden tolerance, the identities' small helpers, the same bits on other rank
grids, refusals of bad configs and checkpoints, and safetensors files written or edited byte for
byte. What each test checks stays in the test (its docstring, identities and mutations)."""
import json
import os
import struct
import subprocess
from contextlib import contextmanager

import h5py
import numpy as np

from util import BOOKKEEPING, MPI_ENV, check, compare_row, output_diff, run, write_job, \
    write_prompts

RTOL = 1e-4  # the golden tolerance: relative to the tensor's scale
SEQ = {"seq", "query", "key"}  # the axes a prompt's T tokens fill


# ---- a run of every value and its output, prompt by prompt -------------------------------------

def catalogue(harvest, model):
    """The names `harvest activations MODEL` lists."""
    return [l.split()[0] for l in run(harvest, "activations", model, check=0).stdout.splitlines()]


def aliases(harvest, model):
    """{alias: canonical name} of `harvest activations MODEL --aliases --json`."""
    out = run(harvest, "activations", model, "--aliases", "--json", check=0).stdout
    return {g["alias"]: g["canonical_name"] for g in json.loads(out)}


def golden_run(harvest, d, model, lengths=None, vocab=None, seed=11, out="out.h5", **job):
    """`harvest run` of every value of model (batches of 3) into d/out; with lengths, the prompts
    d/prompts.jsonl first (write_prompts(lengths, seed, vocab)). Exits on a failed run. Returns
    (the catalogue's names, the output's path)."""
    os.makedirs(d, exist_ok=True)
    if lengths is not None:
        write_prompts(f"{d}/prompts.jsonl", lengths, seed=seed, vocab=vocab)
    jp = write_job(f"{d}/{out}.json", model=model, **dict({"batch_size": 3, "output": {"path": out}}, **job))
    run(harvest, "run", jp, "--quiet", check=0)
    return catalogue(harvest, model if os.path.isabs(model) else f"{d}/{model}"), f"{d}/{out}"


@contextmanager
def output(path, name, names, family=None):
    """The output at path, open, once its model_family (if given) and one dataset a catalogue
    name (names) are checked."""
    with h5py.File(path, "r") as f:
        if family:
            check(f.attrs["model_family"] == family, f"{name}: model_family {f.attrs['model_family']}")
        check(sorted(f["activations"]) == sorted(names), f"{name}: one dataset a catalogue name")
        yield f


def prompts(f):
    """(row i, length T, the token ids) of each prompt of the open output f."""
    for i in range(len(f["prompts/length"])):
        T, o = int(f["prompts/length"][i]), int(f["prompts/token_offset"][i])
        yield i, T, list(f["tokens/input_ids"][o:o + T])


def row(f, i):
    """A(name): row i of activations/name."""
    return lambda n: f["activations/" + n][i]


def compare_all(f, i, T, want, label, names=None, rtol=RTOL, worst=None):
    """Each reference value want[n][0] (only those in names, if given) against row i of the
    stored n (compare_row: the prompt's corner, padding, -inf, integers exactly). Returns the
    worst relative error; with worst (a dict), also keeps each name's worst in it."""
    w = 0.0
    for n in sorted(want):
        if names is not None and n not in names:
            continue
        dset = f["activations/" + n]
        c = tuple(slice(0, T) if a in SEQ else slice(None) for a in list(dset.attrs["semantic_shape"])[1:])
        e = compare_row(f"{label} {n}", dset[i], c, want[n][0], rtol)
        w = max(w, e)
        if worst is not None:
            worst[n] = max(worst.get(n, 0.0), e)
    return w


def differs(got, ref, factor=100):
    """Whether got is further from ref than factor x RTOL of ref's scale (a mutation caught)."""
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    return np.abs(got - ref).max() > factor * RTOL * np.abs(ref).max()


# ---- identities on the stored values ------------------------------------------------------------

def close(a, b, what, tol=1e-5):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    err = np.abs(a - b).max() / max(np.abs(b).max(), 1e-30)
    return check(err <= tol, f"{what}: relative error {err:.1e}")


def residuals(A, p, T, name, attn="attention_output", mlp="mlp_output"):
    """layer_mid == layer_input + attn and layer_output == layer_mid + mlp, bit for bit, at the
    block prefix p; returns (layer_input, layer_mid, layer_output)."""
    x, mid, out = (A(p + k)[:T] for k in ("layer_input", "layer_mid", "layer_output"))
    check(np.array_equal(mid, x + A(p + attn)[:T]), f"{name} {p}layer_mid == layer_input + {attn}")
    check(np.array_equal(out, mid + A(p + mlp)[:T]), f"{name} {p}layer_output == layer_mid + {mlp}")
    return x, mid, out


def rows_sum_to_one(A, p, T, name, extra=None):
    """Block p's attention probability rows (plus extra, e.g. the sink's share) sum to 1."""
    P = A(p + "attention_probabilities")[:, :T, :T].astype(np.float64)
    s = P.sum(-1) + (0 if extra is None else extra)
    close(s, np.ones(P.shape[:2]), f"{name} {p}probability rows{' + extra' if extra is not None else ''} sum to 1")


def lm_head(A, T, head, name, stored="lm_head_output"):
    """stored == final_norm_output @ head.T; with stored lm_head_output, logits equal it bit for bit."""
    close(A("final_norm_output")[:T].astype(np.float64) @ head.T, A(stored)[:T],
          f"{name}: {stored} == lm_head(final_norm_output)")
    if stored == "lm_head_output":
        check(np.array_equal(A("lm_head_output")[:T], A("logits")[:T]), f"{name}: logits == lm_head_output")


def q_norm_whole(name, p, qp, weight, eps, H, hd, got, rmsnorm, clip=None):
    """q_norm over the whole projection qp (T, H hd), then the head split: got (H, T, hd); and a
    per-head norm (the mutation) does not give got (but at T == 1)."""
    T = qp.shape[0]
    qn = rmsnorm(qp, weight, eps)
    ph = qp.reshape(T, H, hd)
    ph = ph / np.sqrt(np.mean(ph ** 2, -1, keepdims=True) + eps) * weight.reshape(H, hd)
    if clip is not None:
        qn, ph = np.clip(qn, -clip, clip), np.clip(ph, -clip, clip)
    close(qn.reshape(T, H, hd).transpose(1, 0, 2), got, f"{name} {p}q_norm over the projection")
    check(np.abs(ph.transpose(1, 0, 2) - got).max() > 1e3 * RTOL * np.abs(got).max() or T == 1,
          f"{name} {p}a per-head q norm does not give the stored queries")


# ---- the same bits on other grids ---------------------------------------------------------------

def mpirun(harvest, job, np_, label):
    """`harvest run job` on np_ ranks; whether it exited 0 (a failed check if not)."""
    p = subprocess.run(["mpirun", "-np", str(np_), "--oversubscribe", harvest, "run", job, "--quiet"],
                       capture_output=True, text=True, env=MPI_ENV, timeout=600)
    return check(p.returncode == 0, f"{label}: exit {p.returncode}: {p.stderr[-800:]}")


def same_bits(a, b, label):
    """Outputs a and b hold the same bits (every dataset and attribute but the bookkeeping)."""
    d = output_diff(a, b, ignore=BOOKKEEPING | {"job"})
    return check(d is None, f"{label}: differs from np 1 in {d}")


def two_stages(harvest, d, model):
    """model as 2 pipeline stages (np 2, batches of 3) into d/out2.h5: the same bits as
    golden_run's one rank in d/out.h5."""
    jp = write_job(f"{d}/job2.json", model=model, batch_size=3, output={"path": "out2.h5"},
                   parallel={"pipeline_stages": 2})
    if mpirun(harvest, jp, 2, "2 stages"):
        same_bits(f"{d}/out.h5", f"{d}/out2.h5", "2 pipeline stages")


def grids(harvest, d, label, cases, provenance=False, **job):
    """Runs job (write_job's keys; batches of 2 unless given) on each (np, stages, expert shards)
    of cases into d/npN_ppS_epE.h5, the first np 1, and checks every other output bit for bit the
    first's (and with provenance, that its provenance names the grid)."""
    first = None
    for np_, stages, ep in cases:
        name = f"np{np_}_pp{stages}_ep{ep}"
        jp = write_job(f"{d}/{name}.json", output={"path": f"{name}.h5"},
                       parallel={"pipeline_stages": stages, "expert_parallel": ep},
                       **dict({"batch_size": 2}, **job))
        if not mpirun(harvest, jp, np_, f"{label} {name}"):
            if first is None:
                return  # no np 1 output to compare with
            continue
        if first is None:
            first = f"{d}/{name}.h5"
            continue
        if not same_bits(first, f"{d}/{name}.h5", f"{label} {name}"):
            continue
        with h5py.File(f"{d}/{name}.h5", "r") as f:
            n = len(f["activations"])
            if provenance:
                prov = json.loads(f.attrs["provenance"])
                check(prov["expert_parallel"] == ep and prov["pipeline_stages"] == stages,
                      f"{label} {name}: provenance {prov['expert_parallel']} x {prov['pipeline_stages']}")
        print(f"{label}: np {np_}, {stages} stage(s) x {ep} expert shard(s): {n} values == np 1 "
              "bit for bit", flush=True)


# ---- refusals -----------------------------------------------------------------------------------

def refused(label, p, needles):
    """The finished run p exited 1 naming each of needles, without a crash."""
    ok = check(p.returncode == 1, f"{label}: exit {p.returncode}, expected 1: {p.stderr[-400:]}")
    for n in needles:
        ok &= check(n in p.stderr, f"{label}: message lacks {n!r}: {p.stderr[-400:]}")
    ok &= check("Assertion" not in p.stderr and "Segmentation" not in p.stderr, f"{label}: no crash")
    if ok:
        print(f"ok: {label}: {p.stderr.strip().splitlines()[-1]}", flush=True)
    return ok


def bad_config(harvest, label, dst, cfg, needles, cmd="activations"):
    """cfg written to dst/config.json; `harvest activations DST` (cmd "plan": `harvest plan
    DST/config.json`) must exit 1 naming config.json and each of needles."""
    os.makedirs(dst, exist_ok=True)
    json.dump(cfg, open(f"{dst}/config.json", "w"))
    target = f"{dst}/config.json" if cmd == "plan" else dst
    return refused(label, run(harvest, cmd, target), ["config.json"] + list(needles))


def run_refused(harvest, label, job_path, needles, **job):
    """`harvest run` of job (write_job's keys) written to job_path must exit 1 naming each of
    needles."""
    return refused(label, run(harvest, "run", write_job(job_path, **job), "--quiet"), needles)


# ---- checkpoints --------------------------------------------------------------------------------

def write_f32(dst, cfg, tensors):
    """A checkpoint dst of config cfg and tensors (float32 arrays) in one F32 file."""
    from hf.safetensors_io import write_safetensors
    os.makedirs(dst, exist_ok=True)
    write_safetensors(os.path.join(dst, "model.safetensors"), tensors, "F32")
    json.dump(cfg, open(os.path.join(dst, "config.json"), "w"))


def write_raw(path, tensors):
    """A safetensors file of [(name, (dtype, shape, bytes))] in the order given."""
    header, off, blobs = {}, 0, []
    for k, (dt, shape, blob) in tensors:
        header[k] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + len(blob)]}
        off += len(blob)
        blobs.append(blob)
    hb = json.dumps(header).encode()
    hb += b" " * (-len(hb) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb + b"".join(blobs))
    return header


def header(path):
    """A safetensors file's header (name -> dtype, shape, data_offsets) and its data bytes."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
        return {k: t for k, t in h.items() if k != "__metadata__"}, f.read()


def edit(src, dst, fn):
    """A copy of checkpoint src in dst with fn(name, (dtype, shape, bytes)) -> same, None (gone)
    or a list of (name, (dtype, shape, bytes)) (replaced by those); the index follows."""
    import shutil
    shutil.copytree(src, dst)
    for leaf in os.listdir(dst):
        if not leaf.endswith(".safetensors"):
            continue
        p = os.path.join(dst, leaf)
        h, data = header(p)
        ts = []
        for k, t in h.items():
            b, e = t["data_offsets"]
            r = fn(k, (t["dtype"], t["shape"], data[b:e]))
            ts += r if isinstance(r, list) else [] if r is None else [(k, r)]
        kept = write_raw(p, ts)
        idx = os.path.join(dst, "model.safetensors.index.json")
        if os.path.exists(idx):
            with open(idx) as f:
                j = json.load(f)
            wm = {k: v for k, v in j["weight_map"].items() if v != leaf or k in kept}
            wm.update({k: leaf for k in kept})
            j["weight_map"] = wm
            with open(idx, "w") as f:
                json.dump(j, f)


def file_bytes(model_dir):
    """The tensor bytes of a checkpoint's safetensors files."""
    return sum(t["data_offsets"][1] - t["data_offsets"][0]
               for leaf in os.listdir(model_dir) if leaf.endswith(".safetensors")
               for t in header(os.path.join(model_dir, leaf))[0].values())


def plan_bytes(harvest, config):
    """The "bytes:" figure of `harvest plan CONFIG` (bytes as published) and its line."""
    out = run(harvest, "plan", config, check=0).stdout
    line = next(l for l in out.splitlines() if l.startswith("bytes:"))
    return int(line.split()[1].replace(",", "")), line


def fp8_model(harvest, d, family, preset, qc, extra=None, seed=None):
    """init-model's preset (d/preset) with config keys extra and quantization_config qc
    (d/config.json), written FP8 by `init-model --config` into d/model; returns the config."""
    s = ["--seed", str(seed)] if seed is not None else []
    run(harvest, "init-model", "--family", family, "--preset", preset, *s, f"{d}/preset", check=0)
    with open(f"{d}/preset/config.json") as f:
        cfg = json.load(f)
    cfg.update(extra or {})
    cfg["quantization_config"] = qc
    with open(f"{d}/config.json", "w") as f:
        json.dump(cfg, f, indent=1)
    run(harvest, "init-model", "--family", family, "--config", f"{d}/config.json", "--layers",
        str(cfg["num_hidden_layers"]), f"{d}/model", check=0)
    return cfg


def fp8_blocks(name, t, v, raw, block, e4m3):
    """FP8 weight t (bytes v) has its F32 weight_scale_inv of ceil(out / bo) x ceil(in / bi)
    blocks, and each block's largest |q| is 448 (the quantizer's scale: the block's max / 448).
    raw: name -> (dtype, array) as stored; e4m3: byte -> value."""
    sdt, s = raw[t + "_scale_inv"]
    R, C = v.shape
    check(sdt == "F32" and s.shape == (-(-R // block[0]), -(-C // block[1])),
          f"{name}: {t}_scale_inv {sdt} {s.shape}")
    a = np.abs(e4m3[v])
    for i in range(s.shape[0]):
        for j in range(s.shape[1]):
            m = a[i * block[0]:(i + 1) * block[0], j * block[1]:(j + 1) * block[1]].max()
            if not check(m == 448.0, f"{name}: {t} block ({i}, {j}) max |q| {m}, expected 448"):
                return False
    return True
