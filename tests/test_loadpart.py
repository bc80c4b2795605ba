"""A rank reads only the weights it computes with (harvest/load.c: model_load binds every tensor
from the headers, model_check reads the values of a rank's part: its stage's blocks, the embedding
on the stage of block 0, the final norm and head on the last stage, a tied embedding on both, and
of the routed experts only its shard's).

- tests/loadpart.c (model_load + model_check as a rank of `harvest run` calls them) on the
  families' presets (Llama, OLMoE, DeepSeek-V3 FP8 block-scaled, gpt-oss MXFP4, GPT-2 tied,
  Pythia, Laguna, the spec model) for several parts: every page wholly inside a tensor outside the
  part (found here from the tensor's name, independently of the C) is made unreadable
  (PROT_NONE) before the check, so a read of one kills the helper; and the tensors the check
  leaves waiting are exactly those outside the part. A control: one tensor inside the part made
  unreadable kills the helper (SIGSEGV), so the pages really are what the check reads.
- `harvest run` on OLMoE with a NaN planted in block 1: np 1 refuses it naming the tensor, and so
  does rank 1 of 2 pipeline stages; a job that computes only block 0 runs (on any grid: nothing
  computes with block 1). A NaN in expert 40 of 64 (expert shard 1 of 2): np 1 refuses it, and so
  does rank 1 of 2 expert shards.
"""
import json
import os
import re
import signal
import subprocess

import famtest as ft
from util import MPI_ENV, args, check, finish, run, write_prompts

harvest, work = args()
HELPER = os.path.join(os.path.dirname(harvest), "tests", "loadpart")


def preset(family, name, extra=None):
    """init-model's preset; with extra, its config with those keys (wider MLPs: tensors of whole
    pages) written by `init-model --config`"""
    d = f"{work}/{name}"
    run(harvest, "init-model", "--family", family, "--preset", name, "--seed", "5", d, check=0)
    if not extra:
        return d
    cfg = json.load(open(f"{d}/config.json"))
    cfg.update(extra)
    os.makedirs(f"{d}.cfg", exist_ok=True)
    json.dump(cfg, open(f"{d}.cfg/config.json", "w"))
    run(harvest, "init-model", "--family", family, "--config", f"{d}.cfg/config.json", "--layers",
        str(cfg["num_hidden_layers"]), "--seed", "5", f"{d}.wide", check=0)
    return f"{d}.wide"


FP8 = {"quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                               "weight_block_size": [8, 4]}}
WIDE = {"intermediate_size": 512, "moe_intermediate_size": 512}


# ---- the part a tensor belongs to, from its name --------------------------------------------------

def where(name, n_enc):
    """(block or "embed" / "head" / "every", expert or None)"""
    m = re.match(r"(encoder|decoder)\.layers\.(\d+)\.", name)  # the spec model: encoder, decoder
    if m:
        return int(m[2]) + (n_enc if m[1] == "decoder" else 0), None
    if n_enc:
        return "every", None  # the spec model's embedding and norms: any stage may read them
    m = re.search(r"(?:^|\.)(?:layers|h)\.(\d+)\.", name)
    if m:
        e = re.search(r"\.experts\.(\d+)\.", name)
        return int(m[1]), int(e[1]) if e else None
    if re.search(r"embed_tokens|wte|wpe|embed_in", name):
        return "embed", None
    return "head", None


def in_part(name, part, n_experts, tied, n_enc):
    b0, b1, embed, head, shard, n_shards = part
    blk, e = where(name, n_enc)
    if blk == "every":
        return True
    if blk == "embed":
        ok = embed or (tied and head and "wpe" not in name)
    elif blk == "head":
        ok = head
    else:
        ok = b0 <= blk < b1
    if ok and e is not None and n_shards > 1:
        ok = n_experts * shard // n_shards <= e < n_experts * (shard + 1) // n_shards
    return ok


def helper(d, part, protect):
    a = [HELPER, d] + [str(int(x)) for x in part]
    return subprocess.run(a, input="".join(n + "\n" for n in protect), capture_output=True,
                          text=True, timeout=300)


def parts_of(d):
    cfg = json.load(open(f"{d}/config.json"))
    n_enc = cfg.get("num_encoder_layers", 0)
    L = cfg.get("num_hidden_layers") or cfg.get("n_layer") or n_enc + cfg.get("num_decoder_layers", 0)
    E = cfg.get("num_experts") or cfg.get("num_local_experts") or cfg.get("n_routed_experts") or 0
    cuts = [(0, 1, True, False), (1, L, False, True), (L // 2, L, False, True), (0, L, True, True),
            (0, 0, True, False)]
    shards = [(0, 1)] + ([(0, 2), (1, 2)] if E else [])
    return n_enc, E, [c + s for c in cuts for s in shards]


def loads_its_part(label, d):
    p = helper(d, (0, 0, False, False, 0, 1), [])
    if not check(p.returncode == 0, f"{label}: loadpart exit {p.returncode}: {p.stderr[-400:]}"):
        return
    bound = [l.split(" ", 1)[1] for l in p.stdout.splitlines() if l.startswith("bound ")]
    tied = not any(re.search(r"lm_head|embed_out", n) for n in bound)
    n_enc, E, parts = parts_of(d)
    ok, pages = True, 0
    for part in parts:
        out = {n for n in bound if not in_part(n, part, E, tied, n_enc)}
        p = helper(d, part, sorted(out))
        if not check(p.returncode == 0, f"{label} {part}: exit {p.returncode} (a SIGSEGV: a tensor "
                     f"outside the part was read): {p.stderr[-400:]}"):
            ok = False
            continue
        waiting = {l.split(" ", 1)[1] for l in p.stdout.splitlines() if l.startswith("waiting ")}
        pages += int(next(l for l in p.stdout.splitlines() if l.startswith("pages ")).split()[1])
        ok &= check(waiting == out, f"{label} {part}: left waiting {sorted(waiting - out)[:4]} more "
                    f"and {sorted(out - waiting)[:4]} fewer than the tensors outside the part")
    ok &= check(pages > 0, f"{label}: no page wholly inside a tensor outside a part")
    if ok:
        print(f"ok: {label}: {len(bound)} tensors, {len(parts)} parts: each checks exactly its own, "
              f"never reading a page of another ({pages} pages made unreadable)", flush=True)


models = {"llama": preset("llama", "Llama-3.2-1B", WIDE),
          "olmoe": preset("olmoe", "OLMoE-1B-7B-0924", {"intermediate_size": 256}),
          "deepseek-v3 fp8": preset("deepseek_v3", "DeepSeek-V3", dict(FP8, **WIDE)),
          "gpt-oss": preset("gpt_oss", "gpt-oss-20b"),
          "gpt2": preset("gpt2", "gpt2"), "pythia": preset("gpt_neox", "pythia-160m"),
          "laguna": preset("laguna", "XS-2.1")}
run(harvest, "init-model", "--family", "encdec", "--seed", "3", f"{work}/spec", check=0)
models["spec"] = f"{work}/spec"
for label, d in models.items():
    loads_its_part(label, d)

# the control: a tensor inside the part made unreadable is read, and kills the helper
d = models["llama"]
h = {n: t for f in os.listdir(d) if f.endswith(".safetensors") for n, t in ft.header(f"{d}/{f}")[0].items()}
big = max((n for n in h if ".layers.1." in n), key=lambda n: h[n]["data_offsets"][1] - h[n]["data_offsets"][0])
p = helper(d, (1, 2, False, False, 0, 1), [big])
if check(p.returncode == -signal.SIGSEGV, f"control: {big} of the part made unreadable: exit "
         f"{p.returncode}, expected SIGSEGV"):
    print(f"ok: control: {big}, of the part, made unreadable: the check reads it (SIGSEGV)", flush=True)


# ---- harvest run: the rank that computes with a NaN refuses it -------------------------------------

def plant(src, dst, target, index):
    """src with element `index` of BF16 tensor `target` set to NaN"""
    def f(name, t):
        dt, shape, blob = t
        if name != target:
            return t
        assert dt == "BF16", dt
        b = bytearray(blob)
        b[2 * index:2 * index + 2] = b"\xc0\x7f"
        return dt, shape, bytes(b)
    ft.edit(src, dst, f)
    return dst


def mpirun(np_, job):
    return subprocess.run(["mpirun", "-np", str(np_), "--oversubscribe", harvest, "run", job, "--quiet",
                           "--overwrite"], capture_output=True, text=True, env=MPI_ENV, timeout=600)


olmoe = models["olmoe"]
vocab = json.load(open(f"{olmoe}/config.json"))["vocab_size"]
write_prompts(f"{work}/prompts.jsonl", [5, 3, 8], seed=2, vocab=vocab)
for label, target, grid, block0 in [
        ("a NaN in block 1", "model.layers.1.post_attention_layernorm.weight", {"pipeline_stages": 2}, True),
        ("a NaN in expert 40 of 64", "model.layers.0.mlp.experts.40.up_proj.weight", {"expert_parallel": 2},
         False)]:
    bad = plant(olmoe, f"{work}/bad{len(grid)}{target.split('.')[2]}{target[-20:-7]}", target, 3)
    needles = [target, "element 3 (flat index) is NaN"]
    for np_, par in [(1, {}), (2, grid)]:
        jp = ft.write_job(f"{work}/{label[6:12].strip()}{np_}.json", model=bad, data="prompts.jsonl",
                          activations=["*"], output={"path": f"out{np_}.h5"}, parallel=par)
        p = mpirun(np_, jp)
        n = needles + (["[rank 1]"] if np_ == 2 else [])
        ok = check(p.returncode == 1, f"{label}, np {np_} {par}: exit {p.returncode}: {p.stderr[-400:]}")
        ok &= check(all(x in p.stderr for x in n), f"{label}, np {np_} {par}: lacks {n}: {p.stderr[-400:]}")
        if ok:
            line = next(l for l in p.stderr.splitlines() if target in l)
            print(f"ok: {label}, np {np_} {par}: {line}", flush=True)
    if block0:  # computes block 0 alone: block 1 is not read, on any grid (2 stages: too many)
        for np_, par in [(1, {}), (2, {}), (2, {"expert_parallel": 2})]:
            jp = ft.write_job(f"{work}/b0_{np_}_{len(par)}.json", model=bad, data="prompts.jsonl",
                              activations=["layers.0.layer_output"], output={"path": f"b0_{np_}.h5"},
                              parallel=par)
            p = mpirun(np_, jp)
            if check(p.returncode == 0, f"{label}, block 0 only, np {np_} {par}: exit {p.returncode}: "
                     f"{p.stderr[-400:]}"):
                print(f"ok: {label}, a job of block 0 alone, np {np_} {par}: runs", flush=True)
finish()
