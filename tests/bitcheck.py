#!/usr/bin/python3
"""Bit-for-bit check of a harvest build against another build's outputs: for refactors, which
must keep every output bit for bit (a one-off tool, not a CTest test).

  tests/bitcheck.py make OLD_HARVEST BASEDIR          every case with the old build, into BASEDIR
  tests/bitcheck.py compare NEW_HARVEST OUTDIR BASEDIR  the same cases with the new build, each
                                                      compared with BASEDIR's
Compares every dataset and root/dataset attribute but the bookkeeping ones (segments, runs,
provenance), NaN == NaN. Cases: spec model (f32 single file; bf16 3 shards) prompt layout '*' and
token layout, all four Laguna presets '*', each at np 1 and np 4 (2 stages x 2 replicas), plus
expert shards; the Qwen3-MoE and Mixtral presets at np 1 and as 2 expert shards; every other
registry family's presets (Llama x2, Mistral, Qwen2, Qwen3, Gemma 2, Gemma 3, GPT-2, Pythia) at np 1
and as 2 pipeline stages."""
import json, os, shutil, subprocess, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import util

LENS = [1, 2, 5, 17, 40, 64, 0, 70, 33, 9]
# root attributes a newer build writes that an older one did not (compute: "float32"|"bf16")
NEW_ROOT_ATTRS = {"compute_dtype"}
CASES = []  # (name, family, preset, np, parallel, output extra, activations)
for pre, fam in [("spec", "encdec"), ("spec-bf16", "encdec")]:
    CASES += [(f"{pre}-np1", fam, pre, 1, {}, {}, ["*"]),
              (f"{pre}-np4", fam, pre, 4, {"pipeline_stages": 2}, {}, ["*"]),
              (f"{pre}-tok-np1", fam, pre, 1, {}, {"layout": "token"}, ["*_output", "logits"])]
for pre in ["XS-2.1", "XS.2", "S-2.1", "M.1"]:
    CASES += [(f"lg-{pre}-np1", "laguna", pre, 1, {}, {}, ["*"]),
              (f"lg-{pre}-np4", "laguna", pre, 4, {"pipeline_stages": 2}, {}, ["*"])]
CASES += [("lg-M.1-ep2x2", "laguna", "M.1", 4, {"expert_parallel": 2}, {}, ["*"]),
          ("lg-XS-2.1-ep2s2", "laguna", "XS-2.1", 4, {"expert_parallel": 2, "pipeline_stages": 2},
           {"layout": "token"}, ["layers.*.layer_output", "layers.*.mlp_output", "logits"])]
for fam, pre in [("qwen3_moe", "Qwen3-MoE"), ("mixtral", "Mixtral-8x7B")]:  # the decoder's experts
    CASES += [(f"{fam}-np1", fam, pre, 1, {}, {}, ["*"]),
              (f"{fam}-ep2", fam, pre, 2, {"expert_parallel": 2}, {}, ["*"])]
# every other registry family's presets: np 1 and 2 pipeline stages
for fam, pre in [("llama", "Llama-3.2-1B"), ("llama", "Llama-3.1-8B"), ("mistral", "Mistral-7B-v0.1"),
                 ("qwen2", "Qwen2.5-0.5B"), ("qwen3", "Qwen3-0.6B"), ("gemma2", "gemma-2-2b"),
                 ("gemma3", "gemma-3"), ("gpt2", "gpt2"), ("gpt_neox", "pythia-160m")]:
    CASES += [(f"{pre}-np1", fam, pre, 1, {}, {}, ["*"]),
              (f"{pre}-s2", fam, pre, 2, {"pipeline_stages": 2}, {}, ["*"])]


def model(harvest, root, fam, pre):
    d = os.path.join(root, "models", pre)
    if not os.path.exists(os.path.join(d, "config.json")):
        if fam == "encdec":
            extra = ["--dtype", "bf16", "--shards", "3"] if pre == "spec-bf16" else []
            util.run(harvest, "init-model", "--family", "encdec", "--seed", "3", *extra, d, check=0)
        else:
            util.run(harvest, "init-model", "--family", fam, "--preset", pre, "--seed", "5",
                     d, check=0)
    return d


def make(harvest, root):
    os.makedirs(root, exist_ok=True)
    # ids below the smallest preset vocabulary (the decoder presets': 96)
    data = util.write_prompts(os.path.join(root, "prompts.jsonl"), LENS, 11, vocab=96)
    outs = {}
    for name, fam, pre, np_, par, oext, acts in CASES:
        d = model(harvest, root, fam, pre)
        out = os.path.join(root, name + ".h5")
        job = {"model": d, "data": data, "activations": acts, "max_seq_len": 64, "batch_size": 3,
               "output": dict({"path": out, "checkpoint_seconds": 0}, **oext), "parallel": par}
        jp = os.path.join(root, name + ".json")
        json.dump(job, open(jp, "w"))
        cmd = [harvest, "run", jp, "--overwrite", "--quiet"]
        if np_ > 1:
            cmd = ["mpirun", "-np", str(np_), "--oversubscribe"] + cmd
        p = subprocess.run(cmd, capture_output=True, text=True, env=util.MPI_ENV, timeout=900)
        if p.returncode:
            sys.exit(f"{name}: exit {p.returncode}\n{p.stderr[-3000:]}")
        outs[name] = out
        print(name, "ok", flush=True)
    return outs


def attrs_diff(a, b):
    import h5py, numpy as np
    with h5py.File(a, "r") as fa, h5py.File(b, "r") as fb:
        names = []
        fa.visit(names.append)
        for n in names:
            x, y = fa[n].attrs, fb[n].attrs
            if set(x) != set(y):
                return f"{n}: attribute names"
            for k in x:
                if not np.array_equal(x[k], y[k]):
                    return f"{n}: attribute {k}"
    return None


if __name__ == "__main__":
    if len(sys.argv) < 4 or sys.argv[1] not in ("make", "compare") or \
            (sys.argv[1] == "compare" and len(sys.argv) < 5):
        sys.exit(__doc__)
    cmd, harvest, root = sys.argv[1], os.path.abspath(sys.argv[2]), os.path.abspath(sys.argv[3])
    outs = make(harvest, root)
    if cmd == "compare":
        bad = 0
        for name, out in outs.items():
            ref = os.path.join(os.path.abspath(sys.argv[4]), name + ".h5")
            # the job attribute names the output path: compare with the paths made equal
            import h5py
            with h5py.File(out, "r") as fo, h5py.File(ref, "r") as fr:
                added = "stats" in fo and "stats" not in fr  # write-time /stats, new in issue 12
            a, b = (ref, out) if added else (out, ref)  # then every dataset of the reference
            # root attributes the new build adds by design (listed in NEW_ROOT_ATTRS) must be
            # absent from the reference; the rest is compared as it is
            with h5py.File(out, "r") as fo, h5py.File(ref, "r") as fr:
                new = {k for k in NEW_ROOT_ATTRS if k in fo.attrs and k not in fr.attrs}
            d = util.output_diff(a, b, ignore=util.BOOKKEEPING | {"job"} | new) or \
                attrs_diff(a, b)
            print(f"{name}: {'identical' if d is None else 'DIFFERS: ' + d}"
                  f"{' (and /stats added)' if added else ''}")
            bad += d is not None
        print(f"{len(outs) - bad} passed, {bad} failed")
        sys.exit(1 if bad else 0)
