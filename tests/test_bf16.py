"""compute: "bf16" (model/dnnl.c through model/ops.h op_matmul_bf16).

(a) fidelity: for the init-model presets of the Llama-style families, GPT-2 and GPT-NeoX (Pythia;
    their presets written with --dtype bf16) and OLMo 2, every float value harvest
    stores in bf16 is no further from the float64 reference (tests/ref/hf) than the same value
    computed the way transformers computes in bf16 (tests/ref/bf16_emul.py) is: the error of a
    value is max |x - ref| / max |ref| over the prompt's finite entries (the tensor's scale), and
    harvest's must not exceed the emulation's, value by value (RMS relative error over all
    prompts; the max error is printed). With experts, a prompt where harvest or the emulation
    chose another expert than float64 for some token is left out of the value errors (a discrete
    change, not a rounding error: a coin toss between the two), and harvest must change no more
    (token, layer) choices than the emulation does.
(b) bitwise across grids at a fixed thread count: 1 rank vs 2 pipeline stages vs 2 replicas vs
    2 expert shards (Qwen3-MoE, Laguna XS-2.1; GPT-2 without experts), at OMP_NUM_THREADS=1 and 2;
    and 2 threads bitwise 1 thread (model/dnnl.c's tiles make a result independent of the thread
    count): every dataset's bytes (sha256) and the root attributes, each output read once. The
    weights are pre-packed (model/dnnl.h) on every path.
(c) compute "float32" (the default) unchanged: the key given explicitly gives the output of the
    job without it, bit for bit, with compute_dtype "float32"; bf16 differs from it.
(d) bad input: "compute": "fp8", "compute": 3, bf16 on a float32 checkpoint, and --resume with
    another compute: exit 1 naming the key.
(e) the weights pre-packed once (hidden 2048): run's packing line counts every block matrix, none
    plain, and their mapped pages released."""
import hashlib
import json
import os
import re
import subprocess

import h5py
import numpy as np

from util import MPI_ENV, args, check, finish, init_model, output_diff, run, write_job, write_prompts
import hf  # tests/ref/hf, on the path by util
import bf16_emul
from laguna_ref import LagunaRef
import olmo2_ref

harvest, work = args()
LENGTHS = [5, 1, 13, 4, 2, 9, 3, 7, 1, 6, 2, 11, 4, 8, 3, 10]
FAMILIES = [("llama", "Llama-3.2-1B"), ("mistral", "Mistral-7B-v0.1"), ("qwen2", "Qwen2.5-0.5B"),
            ("qwen3", "Qwen3-0.6B"), ("qwen3_moe", "Qwen3-MoE"), ("mixtral", "Mixtral-8x7B"),
            ("gemma2", "gemma-2-2b"), ("gemma3", "gemma-3"), ("laguna", "XS-2.1"), ("laguna", "M.1"),
            ("gpt2", "gpt2"), ("gpt_neox", "pythia-160m"), ("olmo2", "OLMo-2-1124-7B")]
F32_PRESETS = {"gpt2", "gpt_neox"}  # presets written float32 unless --dtype bf16
SEQ = {"seq", "query", "key"}
IGNORE = {"segments", "runs", "provenance", "job"}


def fidelity(fam, preset, seed):
    """(a): per value, over all prompts, harvest's error and the emulation's (see errors())"""
    d = f"{work}/{fam}-{preset}"
    dtype = ["--dtype", "bf16"] if fam in F32_PRESETS else []
    run(harvest, "init-model", "--family", fam, "--preset", preset, "--seed", str(seed), *dtype, f"{d}/model",
        check=0)
    if fam == "laguna":
        ref = LagunaRef(f"{d}/model")
        vocab, fwd, emu = ref.cfg["vocab_size"], ref.forward, lambda ids: bf16_emul.laguna_forward(ref, ids)
    elif fam == "olmo2":  # tests/ref/olmo2_ref.py (its own reference, not tests/ref/hf's)
        cfg, w = hf.load_checkpoint(f"{d}/model")
        vocab = cfg["vocab_size"]
        fwd, emu = lambda ids: olmo2_ref.forward(cfg, w, ids), lambda ids: bf16_emul.olmo2_forward(cfg, w, ids)
    else:
        cfg, w = hf.load_checkpoint(f"{d}/model")
        vocab = cfg["vocab_size"]
        fwd = lambda ids: hf.forward(cfg, w, [ids])[0]
        emu = lambda ids: bf16_emul.forward(cfg, w, [ids])[0]
    write_prompts(f"{d}/prompts.jsonl", LENGTHS, seed=seed, vocab=vocab)
    run(harvest, "run", write_job(f"{d}/job.json", compute="bf16", batch_size=3), "--quiet", check=0)
    n_flips = np.zeros(3, np.int64)  # harvest's, the emulation's, prompts left out
    acc = {}  # value -> [sum (h - r)^2, sum (e - r)^2, sum r^2, max |h - r|, max |e - r|, max |r|]
    with h5py.File(f"{d}/out.h5", "r") as f:
        check(f.attrs["compute_dtype"] == "bf16", f"{fam}: compute_dtype attribute")
        stored = {}  # name -> (every prompt's rows, semantic_shape): each dataset read once
        for i in range(len(f["prompts/length"])):
            T, o = int(f["prompts/length"][i]), int(f["prompts/token_offset"][i])
            ids = list(f["tokens/input_ids"][o:o + T])
            want_all, em_all = fwd(ids), emu(ids)
            fh, fe = flips(f, stored, i, T, want_all, em_all)
            n_flips += [fh, fe, int(fh > 0 or fe > 0)]
            if fh or fe:  # a changed expert choice: an error of that token, not a rounding error
                continue
            for n, want in want_all.items():
                if n not in f["activations"] or want.dtype.kind != "f" or n == "next_token_probs":
                    continue
                rows, axes = read_once(f, stored, n)
                c = tuple(slice(0, T) if a in SEQ else slice(None) for a in axes[1:])
                got, want, em = rows[i][c].astype(np.float64), want[0], em_all[n][0]
                fin = np.isfinite(want)
                check(np.array_equal(np.isneginf(got), ~fin), f"{fam} {n}: -inf where blocked")
                dh, de, r = got[fin] - want[fin], em[fin] - want[fin], want[fin]
                a = acc.setdefault(n, np.zeros(6))
                a += [(dh * dh).sum(), (de * de).sum(), (r * r).sum(), 0, 0, 0]
                a[3:] = np.maximum(a[3:], [np.abs(dh).max(initial=0), np.abs(de).max(initial=0),
                                           np.abs(r).max(initial=0)])
    if n_flips[0] or n_flips[1]:
        check(n_flips[0] <= n_flips[1], f"{fam} {preset}: harvest bf16 changed {n_flips[0]} expert choices "
                                        f"of the float64 reference's, the emulation fewer: {n_flips[1]}")
        check(n_flips[2] < len(LENGTHS), f"{fam} {preset}: an expert choice changed in every prompt")
        print(f"{fam} {preset}: (token, layer) expert choices changed from float64's: harvest bf16 "
              f"{n_flips[0]}, emulation {n_flips[1]}; {n_flips[2]} of {len(LENGTHS)} prompts with one "
              "left out of the value errors", flush=True)
    return d, acc


def read_once(f, stored, n):
    """(dataset n's rows of every prompt, its semantic_shape), read from f the first time only"""
    if n not in stored:
        dset = f["activations/" + n]
        stored[n] = dset[()], list(dset.attrs["semantic_shape"])
    return stored[n]


def flips(f, stored, i, T, want_all, em_all):
    """(harvest's, the emulation's) count of (token, layer) expert choices that differ from the
    float64 reference's in prompt i, in order (expert_weights and expert_outputs are a slot each,
    largest weight first: two experts swapped are a change too)"""
    fh = fe = 0
    for n, want in want_all.items():
        if n.endswith("expert_indices"):
            fh += int((read_once(f, stored, n)[0][i][:T] != want[0]).any(-1).sum())
            fe += int((em_all[n][0] != want[0]).any(-1).sum())
    return fh, fe


def errors(fam, acc):
    """Each value's RMS relative error sqrt(sum (x - ref)^2 / sum ref^2) over every prompt's
    entries: harvest's must not exceed the emulation's (exact where the emulation is exact). The
    max error relative to the tensor's scale (max |x - ref| / max |ref|) is printed beside it."""
    rat, worst = [], np.zeros(4)
    for n, a in sorted(acc.items()):
        rh, re_ = np.sqrt(a[0] / max(a[2], 1e-300)), np.sqrt(a[1] / max(a[2], 1e-300))
        mh, me = a[3] / max(a[5], 1e-300), a[4] / max(a[5], 1e-300)
        check(rh <= re_, f"{fam} {n}: harvest bf16 RMS relative error {rh:.2e} > the transformers-bf16 "
                         f"emulation's {re_:.2e} (max: {mh:.2e} vs {me:.2e})")
        worst = np.maximum(worst, [rh, re_, mh, me])
        if re_ > 0:
            rat.append((rh / re_, mh / me if me > 0 else 0.0))
    rat = np.array(rat)
    print(f"{fam}: {len(acc)} values; RMS relative error worst: harvest {worst[0]:.2e}, emulation "
          f"{worst[1]:.2e}, ratio median {np.median(rat[:, 0]):.2f} max {rat[:, 0].max():.2f}; max "
          f"error / scale worst: harvest {worst[2]:.2e}, emulation {worst[3]:.2e}, ratio median "
          f"{np.median(rat[:, 1]):.2f} max {rat[:, 1].max():.2f}", flush=True)


def mpi_run(job, np_, threads):
    cmd = [harvest, "run", job, "--quiet"]
    if np_ > 1:
        cmd = ["mpirun", "-np", str(np_), "--oversubscribe", "-x", "OMP_NUM_THREADS"] + cmd
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                          env=dict(MPI_ENV, OMP_NUM_THREADS=str(threads)))


def digest(path):
    """(root attributes but IGNORE, {dataset: (dtype, shape, sha256 of its bytes)}) of an output:
    two outputs with equal digests hold the same datasets bit for bit (each file read once)"""
    out = {}
    with h5py.File(path, "r") as f:
        attrs = {k: f.attrs[k] for k in f.attrs if k not in IGNORE}

        def visit(n, obj):
            if isinstance(obj, h5py.Dataset):
                x = np.ascontiguousarray(obj[()])  # [()]: scalar datasets too (/stats)
                out[n] = (x.dtype.str, x.shape, hashlib.sha256(x.tobytes()).hexdigest())
        f.visititems(visit)
    return attrs, out


def digest_diff(a, b):
    """None if the digests a and b are equal, else what differs first"""
    if set(a[0]) != set(b[0]):
        return "root attribute names"
    for k in sorted(a[0]):
        if not np.array_equal(a[0][k], b[0][k]):
            return f"root attribute {k}"
    return next((n for n in sorted(set(a[1]) | set(b[1])) if a[1].get(n) != b[1].get(n)), None)


def grids(d, name, experts=True):
    """(b) on a checkpoint with experts (model/moe.c's for Qwen3-MoE, model/families/laguna.c's own); a
    batch of ~600 tokens so that the matmuls have many tiles and the experts run one a thread
    (their matmuls called inside a parallel region)."""
    write_prompts(f"{d}/grid.jsonl", [60] * 9 + [64, 7, 30, 1], seed=9, vocab=96)
    outs = {}
    cases = [("np1", 1, {}), ("stages", 2, {"pipeline_stages": 2}), ("replicas", 2, {})]
    cases += [("experts", 2, {"expert_parallel": 2})] if experts else []
    for threads in (1, 2):
        for label, np_, par in cases:
            out = f"{d}/g-{label}-t{threads}.h5"
            job = write_job(f"{d}/g-{label}-t{threads}.json", data="grid.jsonl", compute="bf16",
                            max_seq_len=64, batch_size=10, parallel=par, output={"path": out})
            r = mpi_run(job, np_, threads)
            if check(r.returncode == 0, f"{name} grid {label} t{threads}: exit {r.returncode}: {r.stderr[-2000:]}"):
                outs[label, threads] = digest(out)
    for threads in (1, 2):
        for label, _, _ in cases[1:]:
            if ("np1", threads) in outs and (label, threads) in outs:
                diff = digest_diff(outs["np1", threads], outs[label, threads])
                check(diff is None, f"{name} bf16 {label} at {threads} threads differs from 1 rank at {diff}")
    if ("np1", 1) in outs and ("np1", 2) in outs:
        diff = digest_diff(outs["np1", 1], outs["np1", 2])
        check(diff is None, f"{name} bf16 at 2 threads differs from 1 thread at {diff}")
    print(f"{name} bf16: 2 stages, 2 replicas{', 2 expert shards' if experts else ''} bitwise 1 rank at 1 and 2 "
          "threads; 2 threads bitwise 1", flush=True)


def packed_once(d):
    """(e) the pre-packed weights (model/dnnl.h): run's line on what its stage packed: every matrix of
    the blocks once (2 layers x 7), none left plain, and the mapped pages of each released (all but
    the partial pages at a matrix's ends)"""
    job = write_job(f"{d}/p.json", data="grid.jsonl", compute="bf16", max_seq_len=64, batch_size=10,
                    activations=["layers.1.layer_output"], output={"path": f"{d}/p.h5"})
    r = run(harvest, "run", job, "--overwrite", check=0)
    m = re.search(r"compute bf16: (\d+) matrices packed, ([\d.]+) MB \(mapped pages released: ([\d.]+) MB\), "
                  r"(\d+) left plain", r.stderr)
    if check(m is not None, f"run's packing line: {r.stderr[-1500:]}"):
        n, mb, rel, plain = int(m[1]), float(m[2]), float(m[3]), int(m[4])
        check(n == 14 and plain == 0, f"{n} matrices packed, {plain} plain: expected 14 and 0")
        check(rel >= 0.99 * mb, f"{rel} MB of the mapping released of {mb} MB packed")
        print(f"pre-packed: {n} matrices, {mb} MB, {rel} MB of mapped pages released", flush=True)


def float32_unchanged(d):
    """(c) on the Llama checkpoint"""
    a = write_job(f"{d}/f-absent.json", output={"path": "f-absent.h5"})
    b = write_job(f"{d}/f-given.json", compute="float32", output={"path": "f-given.h5"})
    c = write_job(f"{d}/f-bf16.json", compute="bf16", output={"path": "f-bf16.h5"})
    for j in (a, b, c):
        run(harvest, "run", j, "--quiet", check=0)
    diff = output_diff(f"{d}/f-absent.h5", f"{d}/f-given.h5", ignore=IGNORE)
    check(diff is None, f"compute float32 given differs from the default at {diff}")
    with h5py.File(f"{d}/f-absent.h5", "r") as f:
        check(f.attrs["compute_dtype"] == "float32", "default compute_dtype float32")
    check(output_diff(f"{d}/f-absent.h5", f"{d}/f-bf16.h5", ignore=IGNORE) is not None,
          "bf16 differs from float32")
    print("compute float32: the default's output bit for bit", flush=True)


def bad_input(d):
    """(d)"""
    for v, what in (("fp8", '"fp8"'), (3, "expected a non-empty string")):
        r = run(harvest, "run", write_job(f"{d}/bad.json", compute=v, output={"path": "bad.h5"}), "--quiet")
        check(r.returncode == 1 and '"compute"' in r.stderr and what in r.stderr,
              f"compute {v!r}: exit {r.returncode}, {r.stderr.strip()}")
    e = f"{work}/encdec"
    init_model(harvest, f"{e}/model", seed=2)
    write_prompts(f"{e}/prompts.jsonl", [3, 4], seed=1)
    r = run(harvest, "run", write_job(f"{e}/job.json", compute="bf16"), "--quiet")
    check(r.returncode == 1 and '"compute"' in r.stderr and "float32" in r.stderr,
          f"bf16 on a float32 checkpoint: exit {r.returncode}, {r.stderr.strip()}")
    # --resume with another compute, both ways
    for first, second in (("float32", "bf16"), ("bf16", "float32")):
        run(harvest, "run", write_job(f"{d}/r.json", compute=first, output={"path": "r.h5"}),
            "--quiet", "--overwrite", check=0)
        r = run(harvest, "run", write_job(f"{d}/r.json", compute=second, output={"path": "r.h5"}),
                "--quiet", "--resume")
        check(r.returncode == 1 and '"compute"' in r.stderr and first in r.stderr,
              f"--resume {first} -> {second}: exit {r.returncode}, {r.stderr.strip()}")
    print("bad input: fp8, 3, a float32 checkpoint, --resume with another compute: exit 1 naming the key",
          flush=True)


only = os.environ.get("BF16_ONLY")  # one family while debugging
dirs = {}
for n, (fam, preset) in enumerate(FAMILIES):
    if not only or only == fam:
        dirs[fam], acc = fidelity(fam, preset, seed=60 + n)
        errors(f"{fam} {preset}", acc)
if "qwen3_moe" in dirs:
    grids(dirs["qwen3_moe"], "qwen3_moe")
if "laguna" in dirs:
    grids(dirs["laguna"], "laguna M.1")
if "gpt2" in dirs:  # GPT-2's Conv1D matrices, packed from their [in, out] layout
    grids(dirs["gpt2"], "gpt2", experts=False)
if not only or only == "wide":
    # K and N of real models (hidden 2048, MLP 4096): oneDNN's K blocking in play (at K=2048 a
    # 128-row call rounds differently from a 64-row one), which the tiny presets' K <= 64 is not
    # (the weights by harvest's init-model from the config: numpy's make_tiny takes 10x longer)
    from hf.make_tiny import tiny_config
    cfg = tiny_config("llama")
    cfg.update(hidden_size=2048, intermediate_size=4096, num_attention_heads=16,
               num_key_value_heads=4, head_dim=128, num_hidden_layers=2)
    os.makedirs(f"{work}/wide", exist_ok=True)
    with open(f"{work}/wide/config.json", "w") as fp:
        json.dump(cfg, fp)
    run(harvest, "init-model", "--family", "llama", "--config", f"{work}/wide/config.json",
        "--layers", "2", "--seed", "7", "--shards", "1", f"{work}/wide/model", check=0)
    grids(f"{work}/wide", "llama, hidden 2048", experts=False)
    packed_once(f"{work}/wide")
if "llama" in dirs:
    float32_unchanged(dirs["llama"])
    bad_input(dirs["llama"])
finish()
