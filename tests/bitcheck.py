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
and as 2 pipeline stages; the families of issue 22 (OLMo 2, Phi-3, OLMoE, DeepSeek-V3 and Kimi-K2,
gpt-oss-20b and -120b, whose presets are MXFP4 as published) at np 1 and as 2 pipeline stages, the
mixtures also as 2 expert shards; DeepSeek-V3 written FP8 block-scaled ([8, 4] blocks) at np 1 and
as 2 expert shards; "compute": "bf16" on OLMoE, Phi-3 and DeepSeek-V3 at np 1.

A case of those newer families or of compute bf16 that an older build refuses (init-model or run
exit 1: a family or job key it lacks) is skipped, its reason printed and kept in BASEDIR/skipped.json;
compare reports such a case as skipped, and fails one the new build refuses but BASEDIR holds."""
import json, os, shutil, subprocess, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import util

LENS = [1, 2, 5, 17, 40, 64, 0, 70, 33, 9]
# root attributes a newer build writes that an older one did not (compute: "float32"|"bf16")
NEW_ROOT_ATTRS = {"compute_dtype"}
CASES = []  # (name, family, preset, np, parallel, output extra, activations[, job extra])
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

# the families of issue 22 (gpt-oss's presets hold their experts MXFP4, as published): np 1 and 2
# pipeline stages, the mixtures also 2 expert shards; DeepSeek-V3 FP8 block-scaled; compute bf16.
# An older build may lack any of these: NEW names the families whose refusal is a skip
NEW = {"olmo2", "phi3", "olmoe", "deepseek_v3", "gpt_oss"}
for fam, pre, moe in [("olmo2", "OLMo-2-1124-7B", 0), ("phi3", "Phi-3.5-mini-instruct", 0),
                      ("olmoe", "OLMoE-1B-7B-0924", 1), ("deepseek_v3", "DeepSeek-V3", 1),
                      ("deepseek_v3", "Kimi-K2-Instruct", 1), ("gpt_oss", "gpt-oss-20b", 1),
                      ("gpt_oss", "gpt-oss-120b", 1)]:
    CASES += [(f"{pre}-np1", fam, pre, 1, {}, {}, ["*"]),
              (f"{pre}-s2", fam, pre, 2, {"pipeline_stages": 2}, {}, ["*"])]
    CASES += [(f"{pre}-ep2", fam, pre, 2, {"expert_parallel": 2}, {}, ["*"])] if moe else []
FP8 = "DeepSeek-V3-fp8"  # the preset's config with the releases' quantization_config, [8, 4] blocks
CASES += [(f"{FP8}-np1", "deepseek_v3", FP8, 1, {}, {}, ["*"]),
          (f"{FP8}-ep2", "deepseek_v3", FP8, 2, {"expert_parallel": 2}, {}, ["*"])]
CASES += [(f"{pre}-bf16-np1", fam, pre, 1, {}, {}, ["*"], {"compute": "bf16"})
          for fam, pre in [("olmoe", "OLMoE-1B-7B-0924"), ("phi3", "Phi-3.5-mini-instruct"),
                           ("deepseek_v3", "DeepSeek-V3")]]


def init(harvest, *a):
    """harvest init-model a; None, or why it failed"""
    p = util.run(harvest, "init-model", *a)
    return None if p.returncode == 0 else f"init-model exit {p.returncode}: {p.stderr.strip()[-300:]}"


def model(harvest, root, fam, pre):
    """(the checkpoint folder, None), or (None, why init-model failed)"""
    d = os.path.join(root, "models", pre)
    if os.path.exists(os.path.join(d, "config.json")):
        return d, None
    if fam == "encdec":
        extra = ["--dtype", "bf16", "--shards", "3"] if pre == "spec-bf16" else []
        err = init(harvest, "--family", "encdec", "--seed", "3", *extra, d)
    elif pre == FP8:
        base, err = model(harvest, root, fam, "DeepSeek-V3")
        if err:
            return None, err
        cfg = json.load(open(os.path.join(base, "config.json")))
        cfg["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3",
                                      "quant_method": "fp8", "weight_block_size": [8, 4]}
        os.makedirs(d + ".config", exist_ok=True)
        json.dump(cfg, open(os.path.join(d + ".config", "config.json"), "w"))
        err = init(harvest, "--family", fam, "--config", os.path.join(d + ".config", "config.json"),
                   "--layers", str(cfg["num_hidden_layers"]), "--seed", "5", d)
    else:
        err = init(harvest, "--family", fam, "--preset", pre, "--seed", "5", d)
    if err:
        shutil.rmtree(d, ignore_errors=True)
    return (None, err) if err else (d, None)


def make(harvest, root):
    """{case: its output}, {case: why it was skipped} (also written to root/skipped.json)"""
    os.makedirs(root, exist_ok=True)
    # ids below the smallest preset vocabulary (the decoder presets': 96)
    data = util.write_prompts(os.path.join(root, "prompts.jsonl"), LENS, 11, vocab=96)
    outs, skipped = {}, {}
    for name, fam, pre, np_, par, oext, acts, *jext in CASES:
        jext = jext[0] if jext else {}
        may_skip = fam in NEW or "compute" in jext  # an older build may refuse these
        d, err = model(harvest, root, fam, pre)
        if err and not may_skip:
            sys.exit(f"{name}: {err}")
        if err:
            skipped[name] = err
            print(name, "skipped:", err, flush=True)
            continue
        out = os.path.join(root, name + ".h5")
        job = {"model": d, "data": data, "activations": acts, "max_seq_len": 64, "batch_size": 3,
               "output": dict({"path": out, "checkpoint_seconds": 0}, **oext), "parallel": par}
        job.update(jext)
        jp = os.path.join(root, name + ".json")
        json.dump(job, open(jp, "w"))
        cmd = [harvest, "run", jp, "--overwrite", "--quiet"]
        if np_ > 1:
            cmd = ["mpirun", "-np", str(np_), "--oversubscribe"] + cmd
        p = subprocess.run(cmd, capture_output=True, text=True, env=util.MPI_ENV, timeout=900)
        if p.returncode == 1 and may_skip:  # bad input: the build refuses the family or job key
            skipped[name] = f"run exit 1: {p.stderr.strip()[-300:]}"
            print(name, "skipped:", skipped[name], flush=True)
            continue
        if p.returncode:
            sys.exit(f"{name}: exit {p.returncode}\n{p.stderr[-3000:]}")
        outs[name] = out
        print(name, "ok", flush=True)
    json.dump(skipped, open(os.path.join(root, "skipped.json"), "w"), indent=1)
    return outs, skipped


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


def compare(outs, skipped, base):
    """Each case's output against base's; the number that differ or that only base holds"""
    import h5py
    old_skipped = {}
    if os.path.exists(os.path.join(base, "skipped.json")):
        old_skipped = json.load(open(os.path.join(base, "skipped.json")))
    bad = n_skipped = 0
    for name, *_ in CASES:
        ref = os.path.join(base, name + ".h5")
        if name in skipped or name not in outs:
            ok = not os.path.exists(ref)  # the new build refused what the old one ran: a failure
            print(f"{name}: {'skipped' if ok else 'FAILS'} (the new build: {skipped.get(name)})")
            n_skipped += ok
            bad += not ok
            continue
        out = outs[name]
        if not os.path.exists(ref):
            why = old_skipped.get(name, "not in BASEDIR")
            print(f"{name}: skipped (the old build: {why})")
            n_skipped += 1
            continue
        # the job attribute names the output path: compare with the paths made equal
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
    print(f"{len(CASES) - bad - n_skipped} passed, {bad} failed, {n_skipped} skipped")
    return bad


if __name__ == "__main__":
    if len(sys.argv) < 4 or sys.argv[1] not in ("make", "compare") or \
            (sys.argv[1] == "compare" and len(sys.argv) < 5):
        sys.exit(__doc__)
    cmd, harvest, root = sys.argv[1], os.path.abspath(sys.argv[2]), os.path.abspath(sys.argv[3])
    outs, skipped = make(harvest, root)
    if cmd == "make":
        print(f"{len(outs)} cases made, {len(skipped)} skipped"
              + "".join(f"\n  {n}: {why}" for n, why in skipped.items()))
    else:
        sys.exit(1 if compare(outs, skipped, os.path.abspath(sys.argv[4])) else 0)
