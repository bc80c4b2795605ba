"""The last block stops at the last value asked of it (model/catalogue.h cat_block_reach): a job
that harvests only the deepest block's layer_mid (or layer_input) skips that block's MLP (or all of
it), since nothing reads the stream after it, on the one-stage run and on a pipeline's last stage.

For the decoder (Llama, Qwen3-MoE), Laguna and the LayerNorm block (GPT-2, GPT-NeoX's parallel
block):
- the values are bitwise those of a job that also asks for the block's layer_output (which runs
  the block whole);
- the work is skipped: under compute bf16 every matrix is packed at its first product, and the
  run's count of packed matrices (its stderr) drops by the block's MLP matrices for layer_mid, and
  by the whole block's for layer_input; a job that wants the logits too runs the block whole;
- two pipeline stages, and two expert shards (which run the forward in lockstep, so they keep
  running the whole block), give the one-rank output bitwise, and end (within 120 s).
"""
import json
import re
import subprocess

import numpy as np

from util import MPI_ENV, args, check, finish, run, write_job, write_prompts

harvest, work = args()
LENS = [17, 5, 30, 1, 12]

# (name, family, preset, matrices of the last block's MLP, of its attention (None: not checked),
#  a parallel option that splits the model)
MODELS = [("llama", "llama", "Llama-3.2-1B", 3, 4, {"pipeline_stages": 2}),
          ("qwen3_moe", "qwen3_moe", "Qwen3-MoE", None, 4, {"expert_parallel": 2}),
          ("laguna", "laguna", "XS-2.1", None, None, {"expert_parallel": 2}),
          ("gpt2", "gpt2", "gpt2", 2, None, {"pipeline_stages": 2}),
          ("neox", "gpt_neox", "pythia-160m", 2, None, {"pipeline_stages": 2})]


def harvest_job(d, label, acts, compute="float32", par=None, np_=1):
    """Runs a job over d's prompts; (output path, the stderr's packed-matrix count or None)."""
    out = f"{d}/{label}.h5"
    job = write_job(f"{d}/{label}.json", model=d, data=f"{d}/prompts.jsonl", activations=acts,
                    max_seq_len=32, batch_size=3, compute=compute, parallel=par or {},
                    output={"path": out})
    cmd = [harvest, "run", job, "--overwrite"]
    if np_ > 1:
        cmd = ["mpirun", "-np", str(np_), "--oversubscribe"] + cmd
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                           env=dict(MPI_ENV, OMP_NUM_THREADS="1"))
    except subprocess.TimeoutExpired:
        check(False, f"{label}: no end within 120 s")
        return None, None
    if not check(r.returncode == 0, f"{label}: exit {r.returncode}: {r.stderr[-2000:]}"):
        return None, None
    m = re.findall(r"compute bf16: (\d+) matrices packed", r.stderr)
    return out, (sum(int(x) for x in m) if m else None)


def values(path):
    import h5py
    got = {}
    with h5py.File(path, "r") as f:
        def keep(name, obj):
            if isinstance(obj, h5py.Dataset):
                got[name] = obj[()]
        f["activations"].visititems(keep)
    return got


def same(a, b, what):
    """Every dataset of a is in b, bitwise (NaN padding at the same places)."""
    va, vb = values(a), values(b)
    for n, x in va.items():
        if not check(n in vb, f"{what}: {n} missing"):
            continue
        y = vb[n]
        eq = x.shape == y.shape and np.array_equal(x.view(np.uint8), y.view(np.uint8))
        check(eq, f"{what}: {n} differs")
    return len(va)


for name, fam, preset, n_mlp, n_attn, par in MODELS:
    d = f"{work}/{name}"
    dtype = ["--dtype", "bf16"] if fam in ("gpt2", "gpt_neox") else []  # the rest: as published
    run(harvest, "init-model", "--family", fam, "--preset", preset, "--seed", "5", *dtype, d,
        check=0)
    write_prompts(f"{d}/prompts.jsonl", LENS, seed=11, vocab=96)
    cfg = json.load(open(f"{d}/config.json"))
    last = cfg.get("num_hidden_layers", cfg.get("n_layer")) - 1
    v = lambda k: f"layers.{last}.{k}"  # noqa: E731
    jobs = {"whole": [v("layer_input"), v("attention_output"), v("layer_mid"), v("layer_output")],
            "mid": [v("attention_output"), v("layer_mid")],
            "input": [v("layer_input")],
            "head": [v("layer_mid"), "logits"],
            "head_whole": [v("layer_mid"), v("layer_output"), "logits"]}
    outs, packed = {}, {}
    for label, acts in jobs.items():
        outs[label], _ = harvest_job(d, label, acts)
        _, packed[label] = harvest_job(d, label + "_bf16", acts, compute="bf16")
    if None in outs.values() or None in packed.values():
        continue
    n = same(outs["mid"], outs["whole"], f"{name}: layer_mid alone vs with layer_output")
    n += same(outs["input"], outs["whole"], f"{name}: layer_input alone vs the whole block")
    n += same(outs["head"], outs["head_whole"], f"{name}: layer_mid and logits")
    check(packed["mid"] < packed["whole"],
          f"{name}: layer_mid alone packs {packed['mid']} matrices, the whole block "
          f"{packed['whole']}: the MLP was not skipped")
    check(packed["input"] < packed["mid"],
          f"{name}: layer_input alone packs {packed['input']}, layer_mid {packed['mid']}: the "
          "attention was not skipped")
    if n_mlp is not None:
        check(packed["whole"] - packed["mid"] == n_mlp,
              f"{name}: the MLP's {n_mlp} matrices skipped, not {packed['whole'] - packed['mid']}")
    if n_attn is not None:
        check(packed["mid"] - packed["input"] == n_attn,
              f"{name}: the attention's {n_attn} matrices skipped, not "
              f"{packed['mid'] - packed['input']}")
    check(packed["head"] == packed["head_whole"],
          f"{name}: with the logits wanted the block runs whole ({packed['head']} matrices "
          f"packed, {packed['head_whole']} with layer_output)")
    # two ranks: the last stage stops the block; expert shards run it whole, in lockstep (shard
    # 0 alone takes the values: a shard stopping where it wants nothing would leave shard 0
    # waiting in the experts' exchange)
    for label in ("mid", "whole"):
        o2, _ = harvest_job(d, label + "_np2", jobs[label], par=par, np_=2)
        if o2:
            same(o2, outs[label], f"{name} {label}: 2 ranks {par} vs 1")
            same(outs[label], o2, f"{name} {label}: 1 rank vs 2 ranks {par}")
    print(f"{name}: {n} values bitwise; matrices packed: layer_input {packed['input']}, "
          f"layer_mid {packed['mid']}, whole block {packed['whole']}, with logits "
          f"{packed['head']}; 2 ranks {par} bitwise", flush=True)

finish()
