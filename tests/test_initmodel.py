"""`harvest init-model`: a release's config.json cut to N layers at its own dimensions (every
per-layer list cut, the published tensor names, shapes and dtypes, weights N(0, 1/fan_in) in BF16),
written one shard at a time (peak memory well under the checkpoint's size), and --shards bounded
(more than 1000, or more shards than tensors, is an error naming --shards and writes no weights)."""
import json
import os
import re
import resource
import struct

from util import HERE, args, check, finish, run

harvest, work = args()
CONF = os.path.join(HERE, "ref", "laguna-configs", "Laguna-XS-2.1.json")


def st_header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n))


def tensors(folder):
    """name -> (dtype, shape, file, offsets) over every safetensors file of the folder"""
    out = {}
    for leaf in sorted(os.listdir(folder)):
        if leaf.endswith(".safetensors"):
            for k, v in st_header(os.path.join(folder, leaf)).items():
                if k != "__metadata__":
                    out[k] = (v["dtype"], v["shape"], leaf, v["data_offsets"])
    return out


def bf16_values(folder, name, info, count):
    import numpy as np
    dtype, shape, leaf, (a, b) = info[name]
    path = os.path.join(folder, leaf)
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        f.seek(8 + n + a)
        raw = np.frombuffer(f.read(min(b - a, 2 * count)), dtype="<u2")
    return (raw.astype(np.uint32) << 16).view(np.float32)


# ---- the real XS-2.1 config at smaller widths (the test stays small), cut to 2 of its 40 layers
c = json.load(open(CONF))
c.update(hidden_size=1024, intermediate_size=2048, moe_intermediate_size=256,
         shared_expert_intermediate_size=256, num_experts=64, head_dim=32, vocab_size=8192)
small = os.path.join(work, "xs21-small.json")
json.dump(c, open(small, "w"))
out = os.path.join(work, "cut")
before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
run(harvest, "init-model", "--family", "laguna", "--config", small, "--layers", "2", "--shards", "8",
    out, check=0)
peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
got = json.load(open(os.path.join(out, "config.json")))
check(got["num_hidden_layers"] == 2, f"num_hidden_layers {got['num_hidden_layers']}, expected 2")
for key in ("layer_types", "mlp_layer_types", "num_attention_heads_per_layer", "gating_types"):
    check(got[key] == c[key][:2], f"{key} cut to 2: {got[key]}")
check(got["mlp_only_layers"] == [0], f"mlp_only_layers {got['mlp_only_layers']}")
for key, v in c.items():  # everything else as the release has it
    if key not in ("num_hidden_layers", "layer_types", "mlp_layer_types",
                   "num_attention_heads_per_layer", "gating_types", "mlp_only_layers"):
        check(got[key] == v, f"config.json {key}: {got[key]!r}, expected {v!r}")

# the published layout, written out here independently of model/families/laguna.c
D, Dh, KV, E = 1024, 32, 8, 64
want = {"model.embed_tokens.weight": ("BF16", [8192, D]), "model.norm.weight": ("BF16", [D]),
        "lm_head.weight": ("BF16", [8192, D])}
for i in range(2):
    H = c["num_attention_heads_per_layer"][i]
    p = f"model.layers.{i}."
    want.update({p + "input_layernorm.weight": ("BF16", [D]),
                 p + "post_attention_layernorm.weight": ("BF16", [D]),
                 p + "self_attn.q_proj.weight": ("BF16", [H * Dh, D]),
                 p + "self_attn.k_proj.weight": ("BF16", [KV * Dh, D]),
                 p + "self_attn.v_proj.weight": ("BF16", [KV * Dh, D]),
                 p + "self_attn.o_proj.weight": ("BF16", [D, H * Dh]),
                 p + "self_attn.q_norm.weight": ("BF16", [Dh]),
                 p + "self_attn.k_norm.weight": ("BF16", [Dh]),
                 p + "self_attn.g_proj.weight": ("BF16", [H, D])})
    if i == 0:
        for w, shape in (("gate_proj", [2048, D]), ("up_proj", [2048, D]), ("down_proj", [D, 2048])):
            want[p + f"mlp.{w}.weight"] = ("BF16", shape)
    else:
        want[p + "mlp.gate.weight"] = ("BF16", [E, D])
        want[p + "mlp.experts.e_score_correction_bias"] = ("F32", [E])
        for e in ["shared_expert"] + [f"experts.{j}" for j in range(E)]:
            for w, shape in (("gate_proj", [256, D]), ("up_proj", [256, D]), ("down_proj", [D, 256])):
                want[p + f"mlp.{e}.{w}.weight"] = ("BF16", shape)
info = tensors(out)
check(set(info) == set(want), f"tensor names: missing {sorted(set(want) - set(info))[:5]}, "
      f"extra {sorted(set(info) - set(want))[:5]}")
for name, (dt, shape) in want.items():
    if name in info:
        check(info[name][:2] == (dt, shape), f"{name}: {info[name][:2]}, expected {(dt, shape)}")
index = json.load(open(os.path.join(out, "model.safetensors.index.json")))["weight_map"]
check(index == {k: v[2] for k, v in info.items()}, "the index names each tensor's file")
check(len({v[2] for v in info.values()}) == 8, "8 shards")
for name, fan_in in (("model.layers.0.self_attn.o_proj.weight", c["num_attention_heads_per_layer"][0] * Dh),
                     ("model.layers.1.mlp.experts.5.down_proj.weight", 256)):
    v = bf16_values(out, name, info, 200000)
    sd = float(v.std())
    check(abs(float(v.mean())) < 0.01 * fan_in ** -0.5 * 10 and abs(sd * fan_in ** 0.5 - 1) < 0.02,
          f"{name}: N(0, 1/{fan_in}) weights, sd {sd:.4g}")
total = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
# one shard at a time: the process holds far less than the checkpoint it writes
check(peak_kib * 1024 < 0.6 * total, f"peak RSS {peak_kib // 1024} MiB while writing {total >> 20} MiB")
print(f"cut config: {len(info)} tensors, {total >> 20} MiB in 8 shards, peak RSS {peak_kib >> 10} MiB")
# harvest reads it: one prompt through both layers
json.dump({"input_ids": [1, 2, 3, 4, 5]}, open(os.path.join(work, "p.jsonl"), "w"))
json.dump({"model": "cut", "data": "p.jsonl", "activations": ["layers.1.layer_output"],
           "output": {"path": "o.h5"}}, open(os.path.join(work, "job.json"), "w"))
run(harvest, "run", os.path.join(work, "job.json"), "--quiet", check=0)
# and `bench --model` runs it (figures only: the names and the lines are checked, not the speed)
p = run(harvest, "bench", "--model", out, "--T", "16", "--batch", "2", "--prompts", "2", "--runs", "1",
        "--threads", "1", "--dir", work, check=0)
check("harvesting layers.1.layer_output" in p.stdout and " tokens/s" in p.stdout and
      "of the best sgemm rate" in p.stdout and "peak RSS" in p.stdout, f"bench --model: {p.stdout}")
# with --compute bf16: the packing, and the rate without it (at least the run's own rate)
p = run(harvest, "bench", "--model", out, "--T", "16", "--batch", "2", "--prompts", "2", "--runs", "2",
        "--threads", "1", "--dir", work, "--compute", "bf16", check=0)
tps = re.search(r"^  ([0-9.]+) tokens/s \(best of 2", p.stdout, re.M)
nopack = re.search(r"^  compute bf16: ([0-9.]+) tokens/s without the one-off packing \(", p.stdout, re.M)
check("weight matrices packed" in p.stdout and tps and nopack and
      float(nopack.group(1)) >= float(tps.group(1)), f"bench --model --compute bf16: {p.stdout}")

# ---- bad arguments: an error naming the option, nothing half-made
for extra, words in ((["--layers", "41"], ["--layers 41", "40 layers"]),
                     (["--layers", "0"], ["--layers 0"])):
    bad = os.path.join(work, "bad-layers")
    p = run(harvest, "init-model", "--family", "laguna", "--config", CONF, *extra, bad, check=1)
    check(all(w in p.stderr for w in words), f"{extra}: {p.stderr.strip()}")
    check(not os.path.exists(os.path.join(bad, "config.json")), f"{extra}: nothing written")
p = run(harvest, "init-model", "--family", "laguna", "--config", os.path.join(work, "nope.json"),
        "--layers", "2", os.path.join(work, "x"), check=1)
check("nope.json" in p.stderr, f"missing config: {p.stderr.strip()}")

for family in (["encdec"], ["laguna", "--preset", "XS-2.1"]):
    for shards, words in (("1000000", ["--shards 1000000", "1 to 1000"]),
                          ("1001", ["--shards 1001"]), ("-2", ["--shards -2"]),
                          ("999", ["--shards 999", "tensors"])):
        bad = os.path.join(work, "bad-shards")
        p = run(harvest, "init-model", "--family", *family, "--shards", shards, bad, check=1)
        check(all(w in p.stderr for w in words), f"{family} --shards {shards}: {p.stderr.strip()}")
        left = os.listdir(bad) if os.path.isdir(bad) else []
        check(left == [], f"{family} --shards {shards}: left {left}")
# the tiny presets still take a shard count up to their tensor count
run(harvest, "init-model", "--family", "encdec", "--shards", "5", os.path.join(work, "ok5"), check=0)
check(len([f for f in os.listdir(os.path.join(work, "ok5")) if f.endswith(".safetensors")]) == 5,
      "encdec --shards 5: five files")
finish()
