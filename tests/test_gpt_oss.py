"""gpt-oss (GptOssForCausalLM, model/families/gpt_oss.c) against the float64 reference
tests/ref/gpt_oss_ref.py (written from transformers' modeling_gpt_oss.py, configuration_gpt_oss.py
and integrations/mxfp4.py), on the init-model presets gpt-oss-20b (2 layers: sliding then full, 4
experts, top 2) and gpt-oss-120b (4 layers, 8 experts, top 4), written with the experts in MXFP4 as
published (U8 blocks (E, R, G, 16) + scales (E, R, G)) and the rest BF16; the reference dequantizes
the same files. `harvest run` with every value over prompts of 1 to 17 tokens batched (the window
of 4 keys slides), and the 20b weights with swiglu_limit 0.3 / swiglu_alpha 1.3 so that the
clamps cut (gates above, ups beyond the limit both ways), and with two other YaRN settings
(truncate with mscale / mscale_all_dim; a given attention_factor); every stored value within 1e-4 of the reference relative to the tensor's scale
(-inf exactly where attention is blocked), and the catalogue is exactly the reference's names
(with the per-slot expert_gate / expert_up before the clamps and expert_neurons). Identities:
layer_mid == layer_input + attention_output and layer_output == layer_mid + mlp_output bit for bit,
mlp_output == routed_output, attention_sinks == the checkpoint's sinks, each attention row's
probabilities plus its sink share sum to 1, the expert weights sum to 1 and are softmax(top-k
router_logits), expert_indices are the top-k of the logits, expert_neurons == the clamped SwiGLU
of expert_gate and expert_up. Mutations the test must catch (each
differs from harvest's last layer_output on every prompt): the reference with the sinks ignored,
and the reference decoding the MXFP4 nibbles swapped. Bad input, exit 1 naming the file and the
key or tensor: quantization_config absent or another quant_method, a scales tensor of the wrong
shape, blocks without their scales, scales not U8; YaRN keys out of range (truncate not a bool,
a negative beta_fast, no factor) and another rope_type. Aliases: the generic ones, the experts' module
path (model.layers.{i}.mlp.experts == routed_output) and the router's refused naming what harvest
keeps. `harvest plan` of the release configs: the parameters
(20,914,757,184 and 116,829,156,672: the model card's 20.9 B and 116.8 B) and the bytes as
published (MXFP4 experts) equal tests/ref/param_count.py's, and the bytes a rank of 2 expert shards
holds are param_count.rank_bytes' plus its vectors widened to float32. (np > 1:
tests/test_gpt_oss_mpi.py.)"""
import json
import os
import shutil
import sys

import h5py
import numpy as np

import famtest as ft
from famtest import RTOL, close, refused
from util import args, check, finish, run, write_job
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref"))
import gpt_oss_ref  # noqa: E402
import param_count  # noqa: E402
from deepseek_v3_ref import read_checkpoint  # noqa: E402

LENGTHS = [5, 1, 17, 2, 9, 3]
harvest, work = args()


def swapped_nibbles(raw):
    """The checkpoint's MXFP4 blocks with each byte's two codes swapped (the mutation)."""
    return {k: ((v >> 4) | ((v & 0x0F) << 4)).astype(np.uint8) if k.endswith("_blocks") else v
            for k, v in raw.items()}


def identities(f, i, T, cfg, raw, name):
    A = ft.row(f, i)
    L, k = cfg["num_hidden_layers"], cfg["num_experts_per_tok"]
    for l in range(L):
        p = f"layers.{l}."
        ft.residuals(A, p, T, name)
        check(np.array_equal(A(p + "mlp_output")[:T], A(p + "routed_output")[:T]), f"{name} {p}mlp == routed")
        check(np.array_equal(A(p + "attention_sinks"), raw[f"model.{p}self_attn.sinks"]),
              f"{name} {p}attention_sinks == the checkpoint's sinks")
        ft.rows_sum_to_one(A, p, T, name, A(p + "attention_sink_probabilities")[:, :T])  # + the sink share
        z = A(p + "router_logits")[:T].astype(np.float64)
        idx, wt = A(p + "expert_indices")[:T], A(p + "expert_weights")[:T].astype(np.float64)
        top = np.argsort(-z, axis=-1, kind="stable")[:, :k]
        check(np.array_equal(idx, top), f"{name} {p}expert_indices == top-k of router_logits")
        g, u = (A(p + n)[:T].astype(np.float64) for n in ("expert_gate", "expert_up"))
        lim, al = cfg.get("swiglu_limit", 7.0), cfg.get("swiglu_alpha", 1.702)
        gc, uc = np.minimum(g, lim), np.clip(u, -lim, lim)
        close((uc + 1) * gc / (1 + np.exp(-al * gc)), A(p + "expert_neurons")[:T],
              f"{name} {p}expert_neurons == clamped SwiGLU(expert_gate, expert_up)")
        zk = np.take_along_axis(z, top, -1)
        close(wt, np.exp(zk - zk.max(-1, keepdims=True)) / np.exp(zk - zk.max(-1, keepdims=True)).sum(-1, keepdims=True),
              f"{name} {p}expert_weights == softmax over the top-k logits")


def golden(name, model):
    d = f"{work}/run-{name}"
    cfg, raw = read_checkpoint(model)
    ref = gpt_oss_ref.GptOssRef(cfg, gpt_oss_ref.dequantize_checkpoint(cfg, raw))
    no_sink = gpt_oss_ref.GptOssRef(cfg, dict(ref.w))
    for l in range(cfg["num_hidden_layers"]):
        no_sink.w[f"model.layers.{l}.self_attn.sinks"] = np.full(cfg["num_attention_heads"], -np.inf)
    swapped = gpt_oss_ref.GptOssRef(cfg, gpt_oss_ref.dequantize_checkpoint(cfg, swapped_nibbles(raw)))
    names, out = ft.golden_run(harvest, d, model, LENGTHS, cfg["vocab_size"])
    worst, caught = 0.0, {"sinks ignored": 0, "MXFP4 nibbles swapped": 0}
    last = f"layers.{cfg['num_hidden_layers'] - 1}.layer_output"
    with ft.output(out, name, names, "gpt_oss") as f:
        for i, T, ids in ft.prompts(f):
            want = ref.forward(ids)
            mine = set(want)
            check(sorted(mine) == sorted(set(names) - {"attention_mask"}),
                  f"{name}: catalogue == the reference's names: {sorted(set(names) ^ mine)}")
            worst = max(worst, ft.compare_all(f, i, T, want, name))
            identities(f, i, T, cfg, raw, name)
            got = f["activations/" + last][i][:T].astype(np.float64)
            for label, m in (("sinks ignored", no_sink), ("MXFP4 nibbles swapped", swapped)):
                r = m.forward(ids)[last][0]
                caught[label] += np.abs(got - r).max() > 100 * RTOL * np.abs(r).max()
    for label, n in caught.items():
        check(n == len(LENGTHS), f"{name}: the mutation '{label}' differs from harvest on {n} of {len(LENGTHS)} prompts")
    print(f"{name}: {len(names)} values x {len(LENGTHS)} prompts match the reference (worst {worst:.1e}); "
          f"the mutations (sinks ignored, nibbles swapped) are caught on every prompt", flush=True)


def bad_checkpoint(label, src, edit_cfg=None, edit_t=None):
    """src as one file, config and tensors edited: `harvest run` must exit 1."""
    dst = f"{work}/bad-{label}"
    os.makedirs(dst, exist_ok=True)
    cfg, raw = read_checkpoint(src)
    t = {}
    for n, a in raw.items():
        t[n] = ("U8", a) if a.dtype == np.uint8 else ("F32", a.astype(np.float32))
    if edit_cfg:
        edit_cfg(cfg)
    if edit_t:
        edit_t(t)
    json.dump(cfg, open(f"{dst}/config.json", "w"))
    ft.write_raw(f"{dst}/model.safetensors", [(n, (dt, a.shape, np.ascontiguousarray(a).tobytes()))
                                              for n, (dt, a) in t.items()])
    job = write_job(f"{dst}/job.json", model=dst, data=f"{work}/run-20b/prompts.jsonl", output={"path": f"{dst}/o.h5"})
    return run(harvest, "run", job, "--quiet")


m20, m120 = f"{work}/gpt-oss-20b", f"{work}/gpt-oss-120b"
for preset, path in (("gpt-oss-20b", m20), ("gpt-oss-120b", m120)):
    p = run(harvest, "init-model", "--family", "gpt_oss", "--preset", preset, "--seed", "5", path)
    check(p.returncode == 0, f"init-model {preset}: {p.stderr[-400:]}")
cfg, raw = read_checkpoint(m20)
E, I, D = cfg["num_local_experts"], cfg["intermediate_size"], cfg["hidden_size"]
b = raw["model.layers.0.mlp.experts.gate_up_proj_blocks"]
check(b.dtype == np.uint8 and b.shape == (E, 2 * I, D // 32, 16) and
      raw["model.layers.0.mlp.experts.down_proj_scales"].shape == (E, D, I // 32),
      "init-model writes the experts as published: U8 blocks (E, R, G, 16) and scales (E, R, G)")
golden("20b", m20)
golden("120b", m120)
# the clamps at work: the 20b preset's weights with swiglu_limit 0.3 and swiglu_alpha 1.3
lim = f"{work}/gpt-oss-20b-limit"
shutil.copytree(m20, lim)
c = json.load(open(f"{lim}/config.json"))
json.dump(dict(c, swiglu_limit=0.3, swiglu_alpha=1.3), open(f"{lim}/config.json", "w"))
golden("20b-limit", lim)
# YaRN's other branches (the shared dec_yarn_inv_freq / dec_yarn_factor): truncate, beta_fast 8,
# a short original context, the attention factor from mscale / mscale_all_dim; then given
for label, rs in (("yarn-mscale", {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16,
                                   "beta_fast": 8, "mscale": 1.0, "mscale_all_dim": 0.5}),
                  ("yarn-afactor", {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 8,
                                    "attention_factor": 1.3, "truncate": False})):
    dst = f"{work}/gpt-oss-20b-{label}"
    shutil.copytree(m20, dst)
    json.dump(dict(c, rope_scaling=rs), open(f"{dst}/config.json", "w"))
    golden(label, dst)
with h5py.File(f"{work}/run-20b-limit/out.h5", "r") as f:
    g, u = f["activations/layers.0.expert_gate"][:], f["activations/layers.0.expert_up"][:]
    check(np.nanmax(g) > 0.3 and np.nanmin(u) < -0.3 and np.nanmax(u) > 0.3,
          "20b-limit: gates above and ups beyond the limit on both sides (the clamps matter)")

# ---- aliases: the generic ones, and gpt-oss's module paths ----
al = ft.aliases(harvest, m20)
check(al.get("model.layers.1.mlp.experts") == "layers.1.routed_output" and
      al.get("blocks.0.hook_attn_out") == "layers.0.attention_output" and
      al.get("blocks.1.attn.hook_pattern") == "layers.1.attention_probabilities",
      f"--aliases: {sorted((a, c) for a, c in al.items() if '.1.' in a)}")
ft.run_refused(harvest, "the router's module path refused naming what harvest has", f"{work}/router.json",
               ["model.layers.0.mlp.router", "router_logits"], model=m20, data=f"{work}/run-20b/prompts.jsonl",
               activations=["model.layers.0.mlp.router"], output={"path": f"{work}/router.h5"})
job = write_job(f"{work}/experts.json", model=m20, data=f"{work}/run-20b/prompts.jsonl",
                activations=["model.layers.1.mlp.experts"], output={"path": f"{work}/experts.h5"},
                batch_size=3)  # the batches of run-20b: the same bits
p = run(harvest, "run", job, "--quiet")
if check(p.returncode == 0, f"a run by the experts' module path: exit {p.returncode}: {p.stderr[-300:]}"):
    with h5py.File(f"{work}/experts.h5", "r") as f, h5py.File(f"{work}/run-20b/out.h5", "r") as g:
        check(np.array_equal(f["activations/model.layers.1.mlp.experts"][:], g["activations/layers.1.routed_output"][:],
                             equal_nan=True), "model.layers.1.mlp.experts (the dataset under the alias) == layers.1.routed_output")

# ---- bad input ----
BL, SC = "model.layers.1.mlp.experts.down_proj_blocks", "model.layers.1.mlp.experts.down_proj_scales"
refused("no quantization_config", bad_checkpoint("noquant", m20, lambda c: c.pop("quantization_config")),
        ["config.json", "quantization_config"])
refused("quant_method fp8", bad_checkpoint("fp8", m20, lambda c: c["quantization_config"].update(quant_method="fp8")),
        ["config.json", "quantization_config.quant_method", "fp8"])
refused("scales of the wrong shape", bad_checkpoint("scaleshape", m20, edit_t=lambda t: t.update(
    {SC: ("U8", t[SC][1][:, :, :1].copy())})), ["model.safetensors", SC, "shape"])
refused("blocks without scales", bad_checkpoint("noscales", m20, edit_t=lambda t: t.pop(SC)),
        ["model.safetensors", SC, "missing"])
refused("scales stored F32", bad_checkpoint("scalef32", m20, edit_t=lambda t: t.update(
    {SC: ("F32", t[SC][1].astype(np.float32))})), [SC, "dtype F32, expected U8"])

for label, edit, needles in (
        ("truncate not a bool", lambda r: r.update(truncate="no"), ["rope_scaling.truncate"]),
        ("beta_fast negative", lambda r: r.update(beta_fast=-1), ["rope_scaling.beta_fast"]),
        ("rope_type longrope", lambda r: r.update(rope_type="longrope"), ["rope_scaling.rope_type", "longrope"]),
        ("yarn without factor", lambda r: r.pop("factor"), ["rope_scaling.factor"])):
    c = json.load(open(f"{m20}/config.json"))
    edit(c["rope_scaling"])
    path = f"{work}/rope-{label.replace(' ', '_')}.json"
    json.dump(c, open(path, "w"))
    refused(label, run(harvest, "plan", path), [os.path.basename(path)] + needles)

# ---- plan of the releases: the parameters, the bytes as published, the bytes a rank holds ----
here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref", "configs")


def vectors(c, shard, n_shards):
    """Vector elements a rank holds (float32 in harvest, BF16 on disk): norms, biases, sinks, the
    router bias, its experts' biases, the final norm."""
    D, H, KV, E, I = (c[k] for k in ("hidden_size", "num_attention_heads", "num_key_value_heads",
                                     "num_local_experts", "intermediate_size"))
    hd, mine = c["head_dim"], (shard + 1) * E // n_shards - shard * E // n_shards
    return c["num_hidden_layers"] * (2 * D + H * hd + 2 * KV * hd + D + H + E + mine * (2 * I + D)) + D


for rel, want in (("gpt-oss-20b", 20_914_757_184), ("gpt-oss-120b", 116_829_156_672)):
    rc = json.load(open(os.path.join(here, rel + ".json")))
    n = param_count.count(rc)
    p = run(harvest, "plan", os.path.join(here, rel + ".json"), "--expert-parallel", "2")
    ok = check(p.returncode == 0, f"plan {rel}: exit {p.returncode}: {p.stderr[-300:]}")
    ok &= check(f"parameters: {want:,}" in p.stdout and n["total"] == want,
                f"plan {rel}: {want:,} parameters (param_count {n['total']:,}): {p.stdout[:200]}")
    ok &= check(f"bytes: {n['stored_bytes']:,} " in p.stdout,
                f"plan {rel}: {n['stored_bytes']:,} bytes as published (MXFP4 experts): {p.stdout[:300]}")
    held = int(p.stdout.split("weights a rank at most: ")[1].split("(")[1].split(" ")[0].replace(",", ""))
    L = rc["num_hidden_layers"]
    pub = param_count.rank_bytes(rc, 0, L, 0, 2)
    ok &= check(held == pub + 2 * vectors(rc, 0, 2),
                f"plan {rel} x 2 expert shards: {held:,} bytes a rank, published {pub:,} + vectors widened")
    if ok:
        print(f"plan {rel}: {want:,} parameters, {n['stored_bytes']:,} bytes as published, {held:,} a rank "
              f"of 2 expert shards", flush=True)

finish()
