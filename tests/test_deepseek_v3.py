"""DeepSeek-V3 / Kimi-K2 (DeepseekV3ForCausalLM, model/families/deepseek_v3.c, model/mla.c, the
sigmoid group router of model/moe.c) against the float64 reference tests/ref/deepseek_v3_ref.py
(written from transformers' modeling_deepseek_v3.py and modeling_rope_utils.py's YaRN): both
init-model presets (BF16, two shards, cut from the release configs DeepSeek-R1-0528.json (4 groups
of 2 experts, 2 kept, YaRN factor 40) and Kimi-K2-Instruct.json (one group, YaRN beta_fast 1)) and
a variant (F32 in one file, q_lora_rank null: q_proj, rope_interleave false, no rope_scaling, two
dense layers, norm_topk_prob false, 2 shared experts) and the DeepSeek-V3 preset with its YaRN keys in
a flat rope_parameters (newer transformers' layout) and with routing biases below -1 (every
choice score negative: the groups not kept, masked to 0.0 as transformers' masked_fill does,
outrank the kept ones, and harvest chooses experts outside them as the reference does), `harvest run` with every value over
prompts of 1 to 17 tokens batched; every stored value within 1e-4 of the reference relative to the
tensor's scale (-inf exactly where attention is blocked; expert_indices exactly), and the
catalogue is exactly the reference's names. Identities on the stored values: layer_mid ==
layer_input + attention_output and layer_output == layer_mid + mlp_output (bit for bit),
mlp_output == routed_output + shared_expert_output (bit for bit), routed_output == the sum of
expert_outputs, router_scores == sigmoid(router_logits), router_choice_scores - router_scores ==
e_score_correction_bias, the keys' rope part == attention_rope_key in every head, probability rows
summing to 1. The mutations the test must catch: routing that ignores the groups (plain top-k of
the biased scores) and routing weighted by the biased scores (the bias used in the weights) each
give other expert_indices / expert_weights than harvest's on some token of the presets. Then:
2 pipeline stages, 2 expert shards, 2 data-parallel replicas and 2 stages x 2 shards (np 4) store
the same bits as np 1 (tests/test_deepseek_v3_mpi.py). `plan` of the release configs
(tests/ref/configs) gives the parameters transformers instantiates, as tests/ref/param_count.py
counts them (671,026,404,352 for DeepSeek-V3, the model card's 671 B; 1,026,408,209,408 for
Kimi-K2, the card's 1 T), DeepSeek-V3's multi-token-prediction layer, not loaded, with its own
parameters (11,610,067,968) and as stored with its embedding and head copies (13,463,426,048: 684.5 B
in all, the card's 685 B), and the bytes the largest rank holds at 8 stages x 8 expert shards and
16 x 8, the weights BF16 (the release without its quantization_config) counted independently here
from the stage cuts plan prints; bad configs (scoring_func softmax, topk_method greedy,
attention_bias true, n_group not dividing the experts, moe_layer_freq 2, a rope_scaling type not
implemented) exit 1 naming config.json and the key. The alias rows: q_a_proj, kv_a_layernorm, mlp.shared_experts (in
mixture blocks only) and TransformerLens's hook_q resolve to their canonical names."""
import json
import os
import sys

import h5py
import numpy as np

import famtest as ft
from famtest import RTOL, close
from util import args, check, finish, run
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref"))
import deepseek_v3_ref as ds  # noqa: E402
import param_count  # noqa: E402
from hf.safetensors_io import load_checkpoint  # noqa: E402

LENGTHS = [5, 1, 17, 2, 9, 3]
HERE = os.path.dirname(os.path.abspath(__file__))
harvest, work = args()


def variant(src, dst):
    """The DeepSeek-V3 preset's weights as F32 in one file; q_proj instead of the q latent, no
    rope_interleave, no rope_scaling, two dense layers, norm_topk_prob false, 2 shared experts."""
    cfg, w = load_checkpoint(src)
    cfg.update(q_lora_rank=None, rope_interleave=False, first_k_dense_replace=2, norm_topk_prob=False,
               n_shared_experts=2, torch_dtype="float32", routed_scaling_factor=1.5)
    cfg.pop("rope_scaling")
    rng = np.random.default_rng(7)
    H, D = cfg["num_attention_heads"], cfg["hidden_size"]
    dqk = cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]
    Is = cfg["moe_intermediate_size"] * 2
    t = {}
    for k, v in w.items():
        if "q_a_" in k or "q_b_proj" in k or "shared_experts" in k or "layers.1.mlp" in k:
            continue
        t[k] = v.astype(np.float32)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        t[p + "self_attn.q_proj.weight"] = (rng.standard_normal((H * dqk, D)) / np.sqrt(D)).astype(np.float32)
        if i < 2:
            if i == 1:
                I = cfg["intermediate_size"]
                for n, shp in (("gate_proj", (I, D)), ("up_proj", (I, D)), ("down_proj", (D, I))):
                    t[p + f"mlp.{n}.weight"] = (rng.standard_normal(shp) / np.sqrt(shp[1])).astype(np.float32)
            continue
        for n, shp in (("gate_proj", (Is, D)), ("up_proj", (Is, D)), ("down_proj", (D, Is))):
            t[p + f"mlp.shared_experts.{n}.weight"] = (rng.standard_normal(shp) / np.sqrt(shp[1])).astype(np.float32)
    ft.write_f32(dst, cfg, t)


def identities(f, i, T, ref, name):
    A = ft.row(f, i)
    for l in range(ref.L):
        p = f"layers.{l}."
        ft.residuals(A, p, T, name)
        m = A(p + "mlp_output")[:T]
        k = A(p + "attention_keys")[:, :T].astype(np.float64)  # (H, T, dqk)
        kr = A(p + "attention_rope_key")[:T]
        check(all(np.array_equal(k[h, :, ref.d_nope:], kr) for h in range(ref.H)),
              f"{name} {p}every head's rope key part == attention_rope_key")
        ft.rows_sum_to_one(A, p, T, name)
        if l < ref.first_dense:
            continue
        routed, shared = A(p + "routed_output")[:T], A(p + "shared_expert_output")[:T]
        check(np.array_equal(m, routed + shared), f"{name} {p}mlp_output == routed + shared")
        close(A(p + "expert_outputs")[:T].astype(np.float64).sum(1), routed, f"{name} {p}routed == sum of slots")
        z, s = A(p + "router_logits")[:T].astype(np.float64), A(p + "router_scores")[:T]
        close(ds.sigmoid(z), s, f"{name} {p}router_scores == sigmoid(router_logits)", 1e-6)
        bias = ref.w[f"model.{p}mlp.gate.e_score_correction_bias"]
        close(A(p + "router_choice_scores")[:T].astype(np.float64) - s, np.broadcast_to(bias, s.shape),
              f"{name} {p}router_choice_scores - router_scores == e_score_correction_bias", 1e-6)


def mutations(ref, x, l):
    """expert (indices, weights) of the two wrong routings at layer l for the stream x."""
    p = f"model.layers.{l}."
    z = x @ ref.w[p + "mlp.gate.weight"].T
    s = ds.sigmoid(z)
    bias = ref.w[p + "mlp.gate.e_score_correction_bias"]
    flat = np.argsort(-(s + bias), axis=-1, kind="stable")[:, :ref.k]  # no groups
    idx = ds.group_limited_topk(s, bias, ref.n_group, ref.topk_group, ref.k)[0]
    wb = np.take_along_axis(s + bias, idx, -1)  # the bias in the weights
    if ref.norm_topk:
        wb = wb / (wb.sum(-1, keepdims=True) + 1e-20)
    return flat, wb * ref.rsf


def golden(name, model, mutate):
    ref = ds.load(model)
    names, out = ft.golden_run(harvest, f"{work}/run-{name}", model, LENGTHS, ref.cfg["vocab_size"])
    worst, groups, biasw = 0.0, 0, 0
    with ft.output(out, name, names, "deepseek_v3") as f:
        for i, T, ids in ft.prompts(f):
            want = ref.forward(ids)
            check(sorted(want) == sorted(set(names) - {"attention_mask"}),
                  f"{name}: catalogue == the reference's names: {sorted(set(names) ^ set(want))}")
            worst = max(worst, ft.compare_all(f, i, T, want, name, names))
            identities(f, i, T, ref, name)
            for l in range(ref.first_dense, ref.L if mutate else 0):
                x = want[f"layers.{l}.mlp_input"][0]
                flat, wb = mutations(ref, x, l)
                got_i = f[f"activations/layers.{l}.expert_indices"][i][:T]
                got_w = f[f"activations/layers.{l}.expert_weights"][i][:T]
                groups += int(any(set(a) != set(b) for a, b in zip(flat, got_i)))
                biasw += int(np.abs(wb - got_w).max() > 100 * RTOL * np.abs(got_w).max())
    if mutate:
        check(groups > 0, f"{name}: routing without the groups gives harvest's experts on every prompt "
              "(the mutation is not caught)")
        check(biasw > 0, f"{name}: the bias in the weights gives harvest's weights (not caught)")
    print(f"{name}: {len(names)} values x {len(LENGTHS)} prompts match the reference (worst {worst:.1e})"
          + (f"; group-less routing caught on {groups}, the bias in the weights on {biasw} "
             "(layer, prompt) pairs" if mutate else ""), flush=True)


pre = {}
for preset in ("DeepSeek-V3", "Kimi-K2-Instruct"):
    pre[preset] = f"{work}/{preset}"
    run(harvest, "init-model", "--family", "deepseek_v3", "--preset", preset, "--seed", "5",
        pre[preset], check=0)
golden("deepseek-v3", pre["DeepSeek-V3"], True)
golden("kimi-k2", pre["Kimi-K2-Instruct"], False)  # one group: group-less routing is the same
variant(pre["DeepSeek-V3"], f"{work}/variant")
golden("variant", f"{work}/variant", True)
# the newer config layout: YaRN's keys (mscale_all_dim among them) in a flat rope_parameters
rp = f"{work}/rope-parameters"
os.makedirs(rp)
for n in os.listdir(pre["DeepSeek-V3"]):
    if n != "config.json":
        os.symlink(os.path.join(pre["DeepSeek-V3"], n), os.path.join(rp, n))
cfg = json.load(open(f"{pre['DeepSeek-V3']}/config.json"))
sc = cfg.pop("rope_scaling")
cfg["rope_parameters"] = dict(sc, rope_type=sc.pop("type"), rope_theta=cfg.pop("rope_theta"))
json.dump(cfg, open(f"{rp}/config.json", "w"))
golden("rope-parameters", rp, False)
# routing biases below -1: every choice score is negative, so the groups not kept (0.0 after
# masked_fill) outrank the kept ones, as in transformers (DeepSeek's own code fills -inf)
cfg, w = load_checkpoint(pre["DeepSeek-V3"])
rng = np.random.default_rng(3)
t = {k: (v - 1.5 + 0.1 * rng.standard_normal(v.shape) if k.endswith("e_score_correction_bias") else v)
     .astype(np.float32) for k, v in w.items()}
nb = f"{work}/negative-bias"
ft.write_f32(nb, dict(cfg, torch_dtype="float32"), t)
golden("negative-bias", nb, False)
with h5py.File(f"{work}/run-negative-bias/out.h5", "r") as f:
    g = f["activations/layers.1.router_group_scores"][0][:5]
    e = f["activations/layers.1.expert_indices"][0][:5]
    per = 8 // g.shape[-1]
    kept = np.argsort(-g, axis=-1, kind="stable")[:, :2]
    check(all(not set(r // per) <= set(k) for r, k in zip(e, kept)),
          f"negative-bias: experts outside the kept groups chosen (masked_fill 0.0): {e.tolist()}")


def bf16_rank_bytes(cfg, first, last, n_shards):
    """Shard 0's bytes for the blocks [first, last), BF16 matrices, float32 norms (harvest holds
    vectors as float32), embedding on the first stage, final norm + head on the last, and each
    mixture block's routing bias (a buffer, float32)."""
    D, V, L = cfg["hidden_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    ql, kvl = cfg.get("q_lora_rank"), cfg["kv_lora_rank"]
    E, Im = cfg["n_routed_experts"], cfg["moe_intermediate_size"]
    n = 0
    for i in range(first, last):
        vec = 2 * D + (ql or 0) + kvl
        mats = param_count.deepseek_layer(cfg, i) - vec
        if i >= cfg.get("first_k_dense_replace", 3):
            mats -= E * 3 * D * Im - (E // n_shards) * 3 * D * Im
            n += 4 * E  # e_score_correction_bias
        n += 2 * mats + 4 * vec
    return n + (2 * V * D if first == 0 else 0) + (2 * V * D + 4 * D if last == L else 0)


for rel, total in (("DeepSeek-R1-0528", 671026404352), ("Kimi-K2-Instruct", 1026408209408)):
    cfg = json.load(open(os.path.join(HERE, "ref", "configs", rel + ".json")))
    check(param_count.count(cfg)["total"] == total, f"{rel}: param_count.py total {total:,}")
    d = f"{work}/plan-{rel}"
    os.makedirs(d)
    cfg.pop("quantization_config")  # the BF16 layout (FP8 weights: the fp8 work)
    json.dump(cfg, open(f"{d}/config.json", "w"))
    p = run(harvest, "plan", f"{d}/config.json", check=0)
    check(f"parameters: {total:,}" in p.stdout, f"plan {rel}: {total:,} parameters: {p.stdout[:400]}")
    mtp = param_count.count(cfg)
    if cfg.get("num_nextn_predict_layers"):
        check(f"{mtp['mtp_unique']} parameters, {mtp['mtp_stored']} as stored" in p.stdout,
              f"plan {rel}: the MTP layer ({mtp['mtp_unique']:,} / {mtp['mtp_stored']:,}): {p.stdout[:500]}")
    else:
        check("multi-token" not in p.stdout, f"plan {rel}: no MTP layer")
    for S, E in ((8, 8), (16, 8)):
        p = run(harvest, "plan", f"{d}/config.json", "--pipeline-stages", str(S), "--expert-parallel",
                str(E), check=0)
        cuts = [tuple(int(x) for x in l.split("layers ")[1].split(",")[0].split()[0].split("-"))
                for l in p.stdout.splitlines() if l.strip().startswith("stage ")]
        check(len(cuts) == S, f"plan {rel} {S} x {E}: {len(cuts)} stages")
        want = max(bf16_rank_bytes(cfg, a, b + 1, E) for a, b in cuts)
        check(f"({want:,} bytes" in p.stdout, f"plan {rel} {S} x {E}: the largest rank {want:,} bytes: "
              f"{p.stdout.splitlines()[-1]}")
        print(f"plan {rel}: {total:,} parameters; {S} x {E}: {want / 2**30:.2f} GiB the largest rank (BF16)")

# ---- aliases: the HF modules of MLA and the shared experts (mixture blocks only) ----
al = ft.aliases(harvest, pre["DeepSeek-V3"])
check(al.get("model.layers.1.self_attn.q_a_proj") == "layers.1.attention_q_latent" and
      al.get("model.layers.0.self_attn.kv_a_layernorm") == "layers.0.attention_kv_latent_norm" and
      al.get("model.layers.2.mlp.shared_experts") == "layers.2.shared_expert_output" and
      "model.layers.0.mlp.shared_experts" not in al and
      al.get("blocks.1.attn.hook_q") == "layers.1.attention_queries_pre_rope",
      f"--aliases: {[(a, c) for a, c in al.items() if 'self_attn' in a or 'shared' in a][:8]}")

# ---- bad configs: exit 1 naming config.json and the key ----
base = json.load(open(f"{pre['DeepSeek-V3']}/config.json"))
for key, val in (("scoring_func", "softmax"), ("topk_method", "greedy"), ("attention_bias", True),
                 ("n_group", 3), ("moe_layer_freq", 2),
                 ("rope_scaling", {"type": "longrope", "factor": 2.0})):
    ft.bad_config(harvest, f"{key} {val!r} refused", f"{work}/bad-{key}", dict(base, **{key: val}), [key])
finish()
