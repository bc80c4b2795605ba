"""DeepSeek-V3 / Kimi-K2 in their published FP8 layout (the releases' quantization_config: fp8,
e4m3, dynamic, weight_block_size [128, 128], no modules_to_not_convert), written by `harvest
init-model` from both presets, against the float64 reference tests/ref/deepseek_v3_ref.py run on
the weights its dequantize_checkpoint makes of the same files (written from transformers'
integrations/finegrained_fp8.py and modeling_deepseek_v3.py, not from the C).

- The files, with blocks [128, 128] (one partial block a matrix at these sizes) and [8, 4]
  (partial blocks at the edges of most matrices, many blocks): exactly the nn.Linear weights
  transformers' replace_with_fp8_linear converts are F8_E4M3 with an F32 weight_scale_inv of
  (ceil(out / bo), ceil(in / bi)): q_a_proj, q_b_proj, kv_a_proj_with_mqa (its 576 = 512 + 64
  rows of the release: a partial block), kv_b_proj, o_proj, the dense MLP, every routed expert
  and the shared experts; not lm_head (always added to modules_to_not_convert), not the router
  mlp.gate.weight (DeepseekV3TopkRouter.weight is an nn.Parameter, not an nn.Linear), not the
  embedding, norms or e_score_correction_bias. As in the DeepSeek-R1 release's tensor listing
  (docs/families.md "FP8 checkpoints"). Every block's largest |byte| is 448 (the quantizer's scale
  is the block's max / 448, so a block grid other than the config's would not give it).
- `harvest run` with every value over prompts of 1 to 17 tokens, batched: every stored value
  within 1e-4 of the reference relative to the tensor's scale (expert indices exactly), and the
  catalogue is the reference's names; identities: layer_mid == layer_input + attention_output,
  layer_output == layer_mid + mlp_output and mlp_output == routed_output + shared_expert_output
  bit for bit. The routing bias stored F32 (as the release stores it) instead of init-model's
  BF16: every value again, and plan's bytes as published == the tensor bytes of those files.
- The mutations the test must catch: one scale (layer 1's q_a_proj, (2, 8) blocks, not square)
  written transposed in the expected shape gives values the comparison rejects; the router
  stored FP8 (with a scale, as a binding that took it for an nn.Linear would read it) is refused,
  exit 1 naming the tensor; and init-model's router is checked BF16 above (with keep_router off
  in the C, init-model writes it FP8 and the file check fails).
- Bad checkpoints exit 1 naming the tensor: an FP8 weight without its scale, a scale of the
  wrong shape.
- 2 pipeline stages and 2 expert shards store the same bits as np 1 (the DeepSeek-V3 preset,
  blocks [8, 4]).
- `plan` of the release configs as published (tests/ref/configs/DeepSeek-R1-0528.json and
  Kimi-K2-Instruct.json) at 8 stages x 8 expert shards and 16 x 8: the bytes the largest rank
  holds, FP8 weights 1 byte + float32 scales, the router, embedding and head 2 bytes (BF16),
  vectors float32 (as harvest holds them), counted here from the config and the stage cuts plan
  prints; plan's "bytes as published" == this test's count of the files without the MTP layer
  (the routing bias, a buffer, not a parameter, counted F32 as published);
  the count with the MTP layer (layer 61, enorm, hnorm, eh_proj BF16, shared_head) is printed.
"""
import json
import os
import sys

import h5py
import numpy as np

import famtest as ft
from famtest import RTOL, edit
from util import args, check, finish, run, write_job, write_prompts
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref"))
import deepseek_v3_ref as ds  # noqa: E402
import fp8  # noqa: E402  tests/ref/fp8.py: read_checkpoint_raw (dtypes as stored), E4M3

LENGTHS = [5, 1, 17, 2, 9, 3]
HERE = os.path.dirname(os.path.abspath(__file__))
RELEASE_QC = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
              "weight_block_size": [128, 128]}
# DeepseekV3's nn.Linear modules (modeling_deepseek_v3.py); mlp.gate is DeepseekV3TopkRouter,
# whose weight is an nn.Parameter
LINEAR = ("q_a_proj", "q_b_proj", "q_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj",
          "gate_proj", "up_proj", "down_proj", "lm_head")
harvest, work = args()


def make(name, preset, block):
    d = f"{work}/{name}"
    cfg = ft.fp8_model(harvest, d, "deepseek_v3", preset, dict(RELEASE_QC, weight_block_size=block), seed=5)
    write_prompts(f"{d}/prompts.jsonl", LENGTHS, seed=11, vocab=cfg["vocab_size"])
    return d


def expect_fp8(t):
    if not t.endswith(".weight"):
        return False
    mod = t[: -len(".weight")]
    return any(mod.endswith(k) for k in LINEAR) and not mod.endswith("lm_head")


def check_files(name, d, block):
    _, raw = fp8.read_checkpoint_raw(f"{d}/model")
    n = 0
    for t, (dt, v) in sorted(raw.items()):
        if t.endswith("_scale_inv"):
            check(t[: -len("_scale_inv")] in raw, f"{name}: {t} without its weight")
            continue
        want = expect_fp8(t)
        if not check((dt == "F8_E4M3") == want, f"{name}: {t} stored {dt}, expected "
                     f"{'F8_E4M3' if want else 'BF16'}"):
            return
        if not want:
            check(t + "_scale_inv" not in raw, f"{name}: a scale for {t}, not FP8")
            continue
        n += 1
        if not ft.fp8_blocks(name, t, v, raw, block, fp8.E4M3):
            return
    for must in ("model.layers.1.mlp.gate.weight", "model.layers.1.self_attn.kv_a_proj_with_mqa.weight",
                 "model.layers.1.mlp.shared_experts.down_proj.weight", "lm_head.weight"):
        check(must in raw, f"{name}: {must} in the files")
    print(f"{name}: {n} FP8 weights in {block[0]}x{block[1]} blocks; the router, lm_head, "
          "embedding, norms and routing bias not FP8", flush=True)


def identities(f, i, T, ref, name):
    A = ft.row(f, i)
    for l in range(ref.L):
        p = f"layers.{l}."
        ft.residuals(A, p, T, name)
        if l >= ref.first_dense:
            m, r, s = (A(p + n)[:T] for n in ("mlp_output", "routed_output", "shared_expert_output"))
            check(np.array_equal(m, r + s), f"{name} {p}mlp_output == routed + shared")


def values(name, d, model="model", out="out.h5"):
    ref = ds.load(f"{d}/{model}")
    names, path = ft.golden_run(harvest, d, model, out=out)
    worst = {}
    with ft.output(path, name, names) as f:
        for i, T, ids in ft.prompts(f):
            want = ref.forward(ids)
            check(sorted(want) == sorted(set(names) - {"attention_mask"}),
                  f"{name}: catalogue == the reference's names: {sorted(set(names) ^ set(want))}")
            ft.compare_all(f, i, T, want, name, worst=worst)
            identities(f, i, T, ref, name)
    top = sorted(worst.items(), key=lambda kv: -kv[1])[:2]
    print(f"{name}: {len(names)} values x {len(LENGTHS)} prompts match the reference on the "
          "dequantized weights; worst " + ", ".join(f"{k} {v:.1e}" for k, v in top), flush=True)
    return ref


def bf16_values(t):
    return (np.frombuffer(t[2], "<u2").astype(np.uint32) << 16).view(np.float32).reshape(t[1])


def refused(name, d, model, words):
    ft.run_refused(harvest, name, f"{d}/{model}.json", words, model=model, output={"path": f"{model}.h5"})


SCALE = "model.layers.1.self_attn.q_a_proj.weight_scale_inv"  # (2, 8) blocks of [8, 4]
ROUTER = "model.layers.1.mlp.gate.weight"


def mutations(d, ref):
    def transposed(k, t):
        if k != SCALE:
            return t
        s = np.frombuffer(t[2], "<f4").reshape(t[1])
        check(s.shape[0] != s.shape[1], f"{SCALE} {s.shape}: square, a transpose would not move it")
        return t[0], t[1], np.ascontiguousarray(s.T).tobytes()
    edit(f"{d}/model", f"{d}/mut", transposed)
    act = "layers.1.attention_output"
    run(harvest, "run", write_job(f"{d}/mut.json", model="mut", output={"path": "mut.h5"},
                                  activations=[act]), "--quiet", check=0)
    worst = 0.0
    with h5py.File(f"{d}/mut.h5", "r") as f:
        for i in range(len(f["prompts/length"])):
            T, o = int(f["prompts/length"][i]), int(f["prompts/token_offset"][i])
            r = ref.forward(list(f["tokens/input_ids"][o:o + T]))[act][0]
            g = f["activations/" + act][i][:T].astype(np.float64)
            worst = max(worst, np.abs(g - r).max() / np.abs(r).max())
    check(worst > 100 * RTOL, f"mutation (a transposed scale) not caught: error {worst:.1e}")
    print(f"mutation caught: a transposed {SCALE} gives {act} {worst:.1e} off", flush=True)

    # the router stored FP8 with its scale (an nn.Linear router, as a wrong binding would read)
    def router_fp8(k, t):
        if k != ROUTER:
            return t
        w = bf16_values(t).astype(np.float64)
        q, s = ds.fp8_quantize(w, (8, 4))
        return [(k, ("F8_E4M3", t[1], q.astype(np.uint8).tobytes())),
                (k + "_scale_inv", ("F32", list(s.shape), s.astype("<f4").tobytes()))]
    edit(f"{d}/model", f"{d}/router_fp8", router_fp8)
    refused("the router stored FP8", d, "router_fp8", [ROUTER])
    # bad checkpoints
    edit(f"{d}/model", f"{d}/bad_shape", lambda k, t: (t[0], t[1][::-1], t[2]) if k == SCALE else t)
    refused("a scale of the wrong shape", d, "bad_shape", [SCALE, "shape [8, 2], expected [2, 8]"])
    edit(f"{d}/model", f"{d}/no_scale", lambda k, t: None if k == SCALE else t)
    refused("an FP8 weight without its scale", d, "no_scale", [SCALE])
    print("the router stored FP8, a scale missing, a scale of the wrong shape: exit 1 naming the "
          "tensor", flush=True)


def bias_f32(d):
    """e_score_correction_bias stored F32, as the releases store it: every value again."""
    def conv(k, t):
        if not k.endswith("e_score_correction_bias") or t[0] != "BF16":
            return t
        return "F32", t[1], bf16_values(t).astype("<f4").tobytes()
    edit(f"{d}/model", f"{d}/bias_f32", conv)
    values("deepseek-v3 [8, 4] (routing bias F32)", d, model="bias_f32", out="bias_f32.h5")
    got, total = ft.plan_bytes(harvest, f"{d}/bias_f32/config.json")[0], ft.file_bytes(f"{d}/bias_f32")
    check(got == total, f"plan's bytes as published {got}, the files (routing bias F32) hold {total}")


def mpi(name, d):
    acts = ["layers.*.layer_output", "layers.*.router_logits", "layers.*.expert_outputs",
            "layers.*.routed_output", "logits"]
    ft.grids(harvest, d, name, ((1, 1, 1), (2, 2, 1), (2, 1, 2)), activations=acts)


# ---- plan: bytes as published, counted here from the config

def mats(cfg, i):
    """Layer i's matrices as (rows, cols, kind): kind "fp8", "bf16" (the router) or "expert"."""
    D, H = cfg["hidden_size"], cfg["num_attention_heads"]
    ql, kvl = cfg.get("q_lora_rank"), cfg["kv_lora_rank"]
    dn, dr, dv = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
    m = [(H * (dn + dr), D, "fp8")] if ql is None else [(ql, D, "fp8"), (H * (dn + dr), ql, "fp8")]
    m += [(kvl + dr, D, "fp8"), (H * (dn + dv), kvl, "fp8"), (D, H * dv, "fp8")]
    mlp = lambda I, kind: [(I, D, kind), (I, D, kind), (D, I, kind)]
    if i < cfg.get("first_k_dense_replace", 0):
        return m + mlp(cfg["intermediate_size"], "fp8")
    Im = cfg["moe_intermediate_size"]
    return m + [(cfg["n_routed_experts"], D, "bf16")] + mlp(Im * cfg.get("n_shared_experts", 1), "fp8") \
        + mlp(Im, "expert")


def layer_bytes(cfg, i, experts, vec_bytes, bias_bytes):
    """Layer i with `experts` routed experts: FP8 1 byte + 4 a scale block, BF16 2 bytes,
    vectors vec_bytes, the routing bias bias_bytes an element."""
    b = cfg["quantization_config"]["weight_block_size"]
    D, ql, kvl = cfg["hidden_size"], cfg.get("q_lora_rank") or 0, cfg["kv_lora_rank"]
    n = vec_bytes * (2 * D + ql + kvl)
    for r, c, kind in mats(cfg, i):
        one = 2 * r * c if kind == "bf16" else r * c + 4 * -(-r // b[0]) * -(-c // b[1])
        n += one * (experts if kind == "expert" else 1)
    if i >= cfg.get("first_k_dense_replace", 0):
        n += bias_bytes * cfg["n_routed_experts"]
    return n


def rank_bytes(cfg, first, last, n_shards):
    """Shard 0's bytes for the blocks [first, last) as harvest holds them (vectors float32)."""
    D, V, L = cfg["hidden_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    E = cfg["n_routed_experts"]
    n = sum(layer_bytes(cfg, i, E // n_shards, 4, 4) for i in range(first, last))
    return n + (2 * V * D if first == 0 else 0) + (2 * V * D + 4 * D if last == L else 0)


def published_bytes(cfg, mtp):
    """The release's tensor bytes (vectors BF16, the routing bias F32); mtp: with the MTP layers
    (a full layer each + enorm, hnorm, shared_head.norm, eh_proj (D, 2D) BF16, and their copies
    of embed_tokens and shared_head.head)."""
    D, V, L = cfg["hidden_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    E = cfg["n_routed_experts"]
    n = sum(layer_bytes(cfg, i, E, 2, 4) for i in range(L)) + 2 * 2 * V * D + 2 * D
    for j in range(cfg.get("num_nextn_predict_layers") or 0 if mtp else 0):
        n += layer_bytes(cfg, L + j, E, 2, 4) + 3 * 2 * D + 2 * D * 2 * D + 2 * 2 * V * D
    return n


def plans():
    for rel in ("DeepSeek-R1-0528", "Kimi-K2-Instruct"):
        cfg_path = os.path.join(HERE, "ref", "configs", rel + ".json")
        cfg = json.load(open(cfg_path))
        check(cfg["quantization_config"] == RELEASE_QC, f"{rel}: quantization_config {cfg['quantization_config']}")
        (got, line), want = ft.plan_bytes(harvest, cfg_path), published_bytes(cfg, False)
        check(got == want and "FP8" in line, f"plan {rel}: bytes as published {got:,}, counted {want:,}")
        print(f"plan {rel}: {got:,} bytes as published without the MTP layer; with it "
              f"{published_bytes(cfg, True):,} (this test's count of the release files)", flush=True)
        for S, E in ((8, 8), (16, 8)):
            p = run(harvest, "plan", cfg_path, "--pipeline-stages", str(S), "--expert-parallel", str(E),
                    check=0)
            cuts = [tuple(int(x) for x in l.split("layers ")[1].split(",")[0].split()[0].split("-"))
                    for l in p.stdout.splitlines() if l.strip().startswith("stage ")]
            check(len(cuts) == S, f"plan {rel} {S} x {E}: {len(cuts)} stages")
            want = max(rank_bytes(cfg, a, b + 1, E) for a, b in cuts)
            check(f"({want:,} bytes" in p.stdout and "FP8" in p.stdout.splitlines()[-1],
                  f"plan {rel} {S} x {E}: the largest rank {want:,} bytes: {p.stdout.splitlines()[-1]}")
            print(f"plan {rel} {S} x {E}: the largest rank {want:,} bytes ({want / 2**30:.2f} GiB), "
                  "FP8 as published", flush=True)


plans()
for preset, tag in (("DeepSeek-V3", "deepseek-v3"), ("Kimi-K2-Instruct", "kimi-k2")):
    for block in ([128, 128], [8, 4]):
        name = f"{tag} [{block[0]}, {block[1]}]"
        d = make(f"{tag}-{block[0]}x{block[1]}", preset, block)
        check_files(name, d, block)
        ref = values(name, d)
        if preset == "DeepSeek-V3" and block == [8, 4]:
            mutations(d, ref)
            bias_f32(d)
            mpi(name, d)
finish()
