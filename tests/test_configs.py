"""Laguna config.json semantics, read as Hugging Face transformers reads them
(configuration_laguna.py, modeling_rope_utils.py): configs harvest must refuse get exit 1 and a
message naming config.json and the key; configs transformers completes with defaults or fallbacks
(YaRN without attention_factor but with mscale, `truncate: false`, `beta_fast: 0`, no
original_max_position_embeddings, top-level rope_theta / partial_rotary_factor, no rope_parameters)
run and agree with the float64 reference tests/ref/laguna_ref.py, which implements the same
reading; a top-k over 64 (65 of 80 experts) and a head_dim over 2048 (2050: 1025 RoPE
frequencies, over the old table of 1024) run and agree too. Limits: num_hidden_layers over
AH_MAX_LAYERS (4096) is refused by name, and `harvest plan` on that many layers is fast."""
import json
import os
import shutil
import struct
import time

import h5py
import numpy as np

from util import HERE, args, check, compare_row, finish, run, write_job, write_prompts
from laguna_ref import LagunaRef

harvest, work = args()
base = json.load(open(os.path.join(HERE, "ref", "laguna-configs", "Laguna-XS-2.1.json")))


def bad(label, edit, key, extra_needles=()):
    c = json.loads(json.dumps(base))
    edit(c)
    path = f"{work}/{label}.json"
    with open(path, "w") as f:
        json.dump(c, f)
    p = run(harvest, "plan", path)
    ok = check(p.returncode == 1, f"{label}: exit {p.returncode}, expected 1: {p.stderr.strip()}")
    for n in (f"{label}.json", f'"{key}"', *extra_needles):
        ok &= check(n in p.stderr, f"{label}: message lacks {n!r}: {p.stderr.strip()}")
    ok &= check("Traceback" not in p.stderr and "Assertion" not in p.stderr, f"{label}: no crash")
    if ok:
        print(f"ok: {label}: {p.stderr.strip()}")


FULL = "rope_parameters.full_attention"
fa = lambda c: c["rope_parameters"]["full_attention"]
sa = lambda c: c["rope_parameters"]["sliding_attention"]
# head_dim 16 (the init-model presets'): int(16 x 0.1) = 1 rotated dimension, which has no pair
bad("partial_odd", lambda c: (fa(c).update(partial_rotary_factor=0.1), c.update(head_dim=16)),
    FULL + ".partial_rotary_factor")
bad("partial_top_odd", lambda c: (fa(c).pop("partial_rotary_factor"), c.update(partial_rotary_factor=0.01)),
    "partial_rotary_factor")
bad("partial_zero", lambda c: sa(c).update(partial_rotary_factor=0), "rope_parameters.sliding_attention.partial_rotary_factor")
bad("max_pos_zero", lambda c: c.update(max_position_embeddings=0), "max_position_embeddings")
bad("max_pos_negative", lambda c: c.update(max_position_embeddings=-5), "max_position_embeddings")
bad("hidden_act", lambda c: c.update(hidden_act="gelu"), "hidden_act")
bad("attention_bias", lambda c: c.update(attention_bias=True), "attention_bias")
bad("rope_theta_zero", lambda c: fa(c).update(rope_theta=0), FULL + ".rope_theta")
bad("rope_theta_top_zero", lambda c: (sa(c).pop("rope_theta"), c.update(rope_theta=0)), "rope_theta")
bad("rope_theta_missing", lambda c: sa(c).pop("rope_theta"), "rope_parameters.sliding_attention",
    ["rope_theta"])
bad("rms_norm_eps_negative", lambda c: c.update(rms_norm_eps=-1e-6), "rms_norm_eps")
bad("yarn_factor_zero", lambda c: fa(c).update(factor=0), FULL + ".factor")
bad("yarn_factor_missing", lambda c: fa(c).pop("factor"), FULL, ["factor"])
bad("yarn_attention_factor_zero", lambda c: fa(c).update(attention_factor=0.0), FULL + ".attention_factor")
bad("yarn_beta_negative", lambda c: fa(c).update(beta_fast=-3), FULL, ["beta_fast"])
bad("yarn_l0_zero", lambda c: fa(c).update(original_max_position_embeddings=0),
    FULL + ".original_max_position_embeddings")
bad("yarn_mscale_string", lambda c: fa(c).update(mscale="big"), FULL + ".mscale")
bad("truncate_in_type", lambda c: fa(c).update(truncate=False), FULL + ".truncate")
bad("truncate_not_bool", lambda c: c["rope_parameters"].update(truncate=0), "rope_parameters.truncate")
bad("heads_fractional", lambda c: (c.pop("num_attention_heads_per_layer"), c.update(num_attention_heads=2.5)),
    "num_attention_heads")
bad("heads_per_layer_fractional", lambda c: c["num_attention_heads_per_layer"].__setitem__(2, 8.5),
    "num_attention_heads_per_layer", ["[2]"])
bad("kv_heads_fractional", lambda c: c.update(num_key_value_heads=2.5), "num_key_value_heads")
bad("top_k_over_experts", lambda c: c.update(num_experts_per_tok=300), "num_experts_per_tok")
bad("scaling_not_number", lambda c: c.update(moe_routed_scaling_factor="x"), "moe_routed_scaling_factor")
bad("softcap_negative", lambda c: c.update(moe_router_logit_softcapping=-1.0), "moe_router_logit_softcapping")
bad("layers_too_many", lambda c: [c.pop(k) for k in ("layer_types", "mlp_layer_types", "num_attention_heads_per_layer",
                                                      "gating_types", "mlp_only_layers")] and
    c.update(num_hidden_layers=1_000_000), "num_hidden_layers")
# the family comes from "architectures", else "model_type", else "architecture": an unknown one
# is an error listing the known names; no fallthrough to another family
for label, cfg in (("falcon", {"architectures": ["FalconForCausalLM"], "model_type": "falcon"}),
                   ("no_family", {"hidden_size": 64})):
    with open(f"{work}/{label}.json", "w") as f:
        json.dump(cfg, f)
    p = run(harvest, "plan", f"{work}/{label}.json")
    check(p.returncode == 1 and all(n in p.stderr for n in (f"{label}.json: unknown model family", '"LagunaForCausalLM"',
                                                            '"causal-encoder-decoder"')),
          f"{label}: {p.returncode} {p.stderr.strip()}")
c = dict(base, architectures=["SomethingElse", "LagunaForCausalLM"])
c.pop("model_type")
with open(f"{work}/second.json", "w") as f:
    json.dump(c, f)
check(run(harvest, "plan", f"{work}/second.json").returncode == 0, "a known family listed second is found")
# expert shards: at most the experts and 256 (the MoE exchange's counts), in plan as in run
with open(f"{work}/experts300.json", "w") as f:
    json.dump(dict(base, num_experts=300), f)
p = run(harvest, "plan", f"{work}/experts300.json", "--expert-parallel", "257")
check(p.returncode == 1 and "257 expert shards" in p.stderr and "256" in p.stderr, f"257 shards: {p.stderr.strip()}")
check(run(harvest, "plan", f"{work}/experts300.json", "--expert-parallel", "256").returncode == 0, "256 shards plan")
# a float JSON cannot spell as a number that is not finite: 1e999 parses as infinity
path = f"{work}/theta_inf.json"
with open(path, "w") as f:
    f.write(json.dumps(base).replace('"rope_theta": 500000.0', '"rope_theta": 1e999'))
p = run(harvest, "plan", path)
check(p.returncode == 1 and "rope_theta" in p.stderr, f"rope_theta 1e999: {p.returncode} {p.stderr.strip()}")

# the largest allowed layer count plans fast (the cut search stops early; no tensor list)
c = {k: v for k, v in base.items() if k not in ("layer_types", "mlp_layer_types", "num_attention_heads_per_layer",
                                                 "gating_types", "mlp_only_layers")}
c["num_hidden_layers"] = 4096
c["rope_parameters"] = {"full_attention": fa(base)}
with open(f"{work}/deep.json", "w") as f:
    json.dump(c, f)
t0 = time.time()
p = run(harvest, "plan", f"{work}/deep.json", "--pipeline-stages", "64")
dt = time.time() - t0
check(p.returncode == 0 and dt < 10, f"plan of 4096 layers in 64 stages: exit {p.returncode}, {dt:.1f} s")
print(f"ok: plan of 4096 layers (the most allowed), 64 stages: {dt:.2f} s")


# ---- configs transformers completes: harvest runs them as the reference does ----
def safetensors_read(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    head.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], raw[8 + n + v["data_offsets"][0]: 8 + n + v["data_offsets"][1]])
            for k, v in head.items()}


def safetensors_write(path, tensors):
    head, off, blobs = {}, 0, []
    for k, (dt, shape, data) in tensors.items():
        head[k] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(data)]}
        off += len(data)
        blobs.append(data)
    h = json.dumps(head).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def model_variant(name, edit, tensors=None):
    d = f"{work}/{name}"
    shutil.copytree(f"{work}/xs/model", f"{d}/model")
    cfg = json.load(open(f"{d}/model/config.json"))
    edit(cfg)
    json.dump(cfg, open(f"{d}/model/config.json", "w"))
    if tensors is not None:
        for f in os.listdir(f"{d}/model"):
            if f.endswith(".safetensors") or f.endswith(".index.json"):
                os.remove(f"{d}/model/{f}")
        safetensors_write(f"{d}/model/model.safetensors", tensors)
    return d


LENGTHS = [1, 9, 17]
NAMES = ["layers.*.layer_output", "layers.*.expert_indices", "logits"]


def run_and_compare(d, label):
    write_prompts(f"{d}/prompts.jsonl", LENGTHS, seed=3, vocab=512)
    p = run(harvest, "run", write_job(f"{d}/job.json", batch_size=2, activations=NAMES), "--quiet")
    if not check(p.returncode == 0, f"{label}: exit {p.returncode}: {p.stderr.strip()}"):
        return None
    ref = LagunaRef(f"{d}/model")
    worst = 0.0
    with h5py.File(f"{d}/out.h5", "r") as f:
        logits = f["activations/logits"][:]
        for i in range(len(LENGTHS)):
            T, o = int(f["prompts/length"][i]), int(f["prompts/token_offset"][i])
            want = ref.forward(f["tokens/input_ids"][o:o + T])
            for name in f["activations"]:
                dset = f["activations/" + name]
                axes = list(dset.attrs["semantic_shape"])
                c = tuple(slice(0, T) if a == "seq" else slice(None) for a in axes[1:])
                worst = max(worst, compare_row(f"{label} {name}", dset[i], c, want[name][0], 5e-5))
    print(f"ok: {label}: every value matches the reference (largest relative error {worst:.1e})")
    return logits


os.makedirs(f"{work}/xs")
run(harvest, "init-model", "--family", "laguna", "--preset", "XS-2.1", "--seed", "5", f"{work}/xs/model", check=0)
base_logits = run_and_compare(f"{work}/xs", "XS-2.1 as written")


def semantics(name, edit):
    got = run_and_compare(model_variant(name, edit), name)
    if got is not None and base_logits is not None:  # the case changes the numbers: not vacuous
        check(not np.array_equal(got, base_logits), f"{name}: the logits differ from the preset's")


def yarn_mscale(c):
    fa(c).pop("attention_factor")
    fa(c).update(mscale=0.9, mscale_all_dim=0.5)


semantics("yarn_mscale", yarn_mscale)
semantics("yarn_truncate_false", lambda c: c["rope_parameters"].update(truncate=False))
semantics("yarn_beta_fast_zero", lambda c: fa(c).update(beta_fast=0))
semantics("yarn_l0_from_max_pos",
          lambda c: (fa(c).pop("original_max_position_embeddings"), c.update(max_position_embeddings=2048)))
semantics("partial_and_theta_top_level",
          lambda c: (fa(c).pop("partial_rotary_factor"), sa(c).pop("rope_theta"),
                     c.update(partial_rotary_factor=0.25, rope_theta=20000.0)))
semantics("no_rope_parameters", lambda c: c.pop("rope_parameters"))

# ---- num_experts_per_tok 65 of 80 experts (over the 64 slots the router once had) ----
src = {}
for f in sorted(os.listdir(f"{work}/xs/model")):
    if f.endswith(".safetensors"):
        src.update(safetensors_read(f"{work}/xs/model/{f}"))
rng = np.random.default_rng(7)
E0, E = 16, 80
tensors = {}
for k, v in src.items():
    parts = k.split(".")
    if k.startswith("model.layers.") and int(parts[2]) >= 2:
        continue  # two layers: the dense one and a mixture one
    if k.endswith("mlp.gate.weight"):  # the router: 64 new rows
        dt, (rows, cols), data = v
        new = (rng.standard_normal((E - E0, cols)).astype(np.float32) * 0.3).view(np.uint32) >> 16
        v = (dt, [E, cols], data + new.astype(np.uint16).tobytes())
    if k.endswith("e_score_correction_bias"):
        dt, shape, data = v
        v = (dt, [E], data + (rng.standard_normal(E - E0).astype(np.float32) * 0.01).tobytes())
    tensors[k] = v
    if ".mlp.experts." in k and parts[5].isdigit() and int(parts[5]) == 0:
        for e in range(E0, E):  # new experts: copies of expert e % 16
            name = k.replace("experts.0.", f"experts.{e}.")
            tensors[name] = src[k.replace("experts.0.", f"experts.{e % E0}.")]
for k in [k for k in tensors if ".mlp.experts." in k and k.split(".")[5].isdigit()]:
    tensors[k] = tensors.pop(k)  # keep every expert, in order


def wide(c):
    c.update(num_hidden_layers=2, num_experts=E, num_experts_per_tok=65)
    for k in ("layer_types", "mlp_layer_types", "num_attention_heads_per_layer"):
        c[k] = c[k][:2]


d = model_variant("top_k_65", wide, tensors)
got = run_and_compare(d, "num_experts_per_tok 65 of 80")
with h5py.File(f"{d}/out.h5", "r") as f:
    idx = f["activations/layers.1.expert_indices"][0, :1]
    check(idx.shape[-1] == 65 and len(set(idx[0].tolist())) == 65, f"65 distinct experts a token: {idx.shape}")

# ---- head_dim 2050 (over the 2048 the RoPE table once allowed): a one-layer dense checkpoint ----
def bf16(a):
    return (np.ascontiguousarray(a, np.float32).view(np.uint32) >> 16).astype(np.uint16).tobytes()


D, Dh, V, I = 8, 2050, 64, 16
shapes = {"model.embed_tokens.weight": (V, D), "model.norm.weight": (D,), "lm_head.weight": (V, D),
          "model.layers.0.input_layernorm.weight": (D,), "model.layers.0.post_attention_layernorm.weight": (D,),
          "model.layers.0.self_attn.q_proj.weight": (Dh, D), "model.layers.0.self_attn.k_proj.weight": (Dh, D),
          "model.layers.0.self_attn.v_proj.weight": (Dh, D), "model.layers.0.self_attn.o_proj.weight": (D, Dh),
          "model.layers.0.self_attn.q_norm.weight": (Dh,), "model.layers.0.self_attn.k_norm.weight": (Dh,),
          "model.layers.0.self_attn.g_proj.weight": (1, D), "model.layers.0.mlp.gate_proj.weight": (I, D),
          "model.layers.0.mlp.up_proj.weight": (I, D), "model.layers.0.mlp.down_proj.weight": (D, I)}
rng = np.random.default_rng(11)
wide = {k: ("BF16", list(s), bf16(1.0 + 0.1 * rng.standard_normal(s) if k.endswith("norm.weight")
                                  else 0.3 * rng.standard_normal(s))) for k, s in shapes.items()}
d = f"{work}/wide_head"
os.makedirs(f"{d}/model")
json.dump({"architectures": ["LagunaForCausalLM"], "model_type": "laguna", "hidden_size": D, "head_dim": Dh,
           "vocab_size": V, "num_hidden_layers": 1, "num_attention_heads": 1, "num_key_value_heads": 1,
           "intermediate_size": I, "num_experts": 1, "num_experts_per_tok": 1, "layer_types": ["full_attention"],
           "mlp_layer_types": ["dense"], "max_position_embeddings": 64,
           "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 10000.0}}},
          open(f"{d}/model/config.json", "w"))
safetensors_write(f"{d}/model/model.safetensors", wide)
write_prompts(f"{d}/prompts.jsonl", [1, 5, 12], seed=4, vocab=V)
p = run(harvest, "run", write_job(f"{d}/job.json", batch_size=2, activations=["layers.0.layer_output", "logits"]),
        "--quiet")
if check(p.returncode == 0, f"head_dim 2050: exit {p.returncode}: {p.stderr.strip()}"):
    ref = LagunaRef(f"{d}/model")
    with h5py.File(f"{d}/out.h5", "r") as f:
        for i in range(3):
            T, o = int(f["prompts/length"][i]), int(f["prompts/token_offset"][i])
            want = ref.forward(f["tokens/input_ids"][o:o + T])
            for name in ("layers.0.layer_output", "logits"):
                compare_row(f"head_dim 2050 {name}", f["activations/" + name][i], (slice(0, T), slice(None)),
                            want[name][0], 5e-5)
    print("ok: head_dim 2050 (1025 RoPE frequencies) runs and matches the reference")
finish()
