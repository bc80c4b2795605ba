"""Converts a harvest Laguna checkpoint (config.json + BF16 safetensors, as `harvest init-model`
writes them) to a BF16 or F32 GGUF that llama.cpp's Laguna loader takes, for tests/bench_llamacpp.sh
and tests/bench_llamacpp_native.sh.

Usage: laguna_to_gguf.py CHECKPOINT_DIR OUT.gguf [bf16|f32]

Names and keys follow llama.cpp's conversion/laguna.py and src/models/laguna.cpp (arch "laguna"):
per-expert HF tensors are stacked into blk.N.ffn_{gate,up,down}_exps, 1-D tensors are stored as
F32 (as llama.cpp's converter does), matrices stay BF16 (bf16, the default) or are widened to F32
(f32: exact, as the checkpoint's BF16 values are). The vocabulary is a stand-in (GPT-2 byte
tokens, then placeholders up to vocab_size, no merges): the benchmark feeds token ids, so only its
size matters."""
import json
import math
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_write import (ARRAY, BOOL, F32, GGML_BF16, GGML_F32, I32, STRING, U32,  # noqa: E402
                        GGUFWriter)


class Checkpoint:
    """name -> (file, dtype, shape, byte offset) over the folder's safetensors files"""

    def __init__(self, folder):
        self.t = {}
        for leaf in sorted(os.listdir(folder)):
            if not leaf.endswith(".safetensors"):
                continue
            path = os.path.join(folder, leaf)
            with open(path, "rb") as f:
                n = struct.unpack("<Q", f.read(8))[0]
                head = json.loads(f.read(n))
            for name, v in head.items():
                if name != "__metadata__":
                    self.t[name] = (path, v["dtype"], v["shape"], 8 + n + v["data_offsets"][0])

    def raw(self, name):
        path, dtype, shape, off = self.t[name]
        dt = {"BF16": np.uint16, "F32": np.float32}[dtype]
        return np.memmap(path, dtype=dt, mode="r", offset=off, shape=tuple(shape))

    def f32(self, name):
        a = self.raw(name)
        return (a.astype(np.uint32) << 16).view(np.float32) if a.dtype == np.uint16 else np.array(a)


def byte_tokens():
    """GPT-2's byte-level alphabet: the 256 printable stand-ins for the bytes"""
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for c in cs]


def convert(folder, out, kind="bf16"):
    c = json.load(open(os.path.join(folder, "config.json")))
    ck = Checkpoint(folder)
    L, D, Dh = c["num_hidden_layers"], c["hidden_size"], c["head_dim"]
    heads = c.get("num_attention_heads_per_layer") or [c["num_attention_heads"]] * L
    mlp = c["mlp_layer_types"]
    dense_lead = next((i for i, t in enumerate(mlp) if t != "dense"), L)
    rp = c["rope_parameters"]
    full, swa = rp["full_attention"], rp.get("sliding_attention")
    w = GGUFWriter()
    a = "laguna"
    w.add("general.architecture", STRING, a)
    w.add("general.name", STRING, os.path.basename(os.path.abspath(folder)))
    w.add("general.file_type", U32, 32 if kind == "bf16" else 0)  # MOSTLY_BF16 / ALL_F32
    w.add(f"{a}.vocab_size", U32, c["vocab_size"])
    w.add(f"{a}.context_length", U32, c["max_position_embeddings"])
    w.add(f"{a}.embedding_length", U32, D)
    w.add(f"{a}.block_count", U32, L)
    w.add(f"{a}.feed_forward_length", U32, c["intermediate_size"])
    w.add(f"{a}.attention.head_count", ARRAY, (I32, heads))
    w.add(f"{a}.attention.head_count_kv", U32, c["num_key_value_heads"])
    w.add(f"{a}.attention.key_length", U32, Dh)
    w.add(f"{a}.attention.value_length", U32, Dh)
    w.add(f"{a}.attention.layer_norm_rms_epsilon", F32, c["rms_norm_eps"])
    w.add(f"{a}.expert_count", U32, c["num_experts"])
    w.add(f"{a}.expert_used_count", U32, c["num_experts_per_tok"])
    w.add(f"{a}.expert_feed_forward_length", U32, c["moe_intermediate_size"])
    w.add(f"{a}.expert_shared_feed_forward_length", U32, c["shared_expert_intermediate_size"])
    w.add(f"{a}.expert_weights_norm", BOOL, True)
    w.add(f"{a}.expert_weights_scale", F32, float(c["moe_routed_scaling_factor"]))
    w.add(f"{a}.expert_gating_func", U32, 2)  # sigmoid
    w.add(f"{a}.leading_dense_block_count", U32, dense_lead)
    w.add(f"{a}.rope.freq_base", F32, float(full["rope_theta"]))
    w.add(f"{a}.rope.dimension_count", U32, int(Dh * float(full.get("partial_rotary_factor", 1.0))))
    if full.get("rope_type") == "yarn":
        w.add(f"{a}.rope.scaling.type", STRING, "yarn")
        w.add(f"{a}.rope.scaling.factor", F32, float(full["factor"]))
        w.add(f"{a}.rope.scaling.original_context_length", U32,
              int(full["original_max_position_embeddings"]))
        w.add(f"{a}.rope.scaling.yarn_beta_fast", F32, float(full.get("beta_fast", 32)))
        w.add(f"{a}.rope.scaling.yarn_beta_slow", F32, float(full.get("beta_slow", 1)))
        # llama.cpp's rope already scales cos and sin by YaRN's default 0.1 ln(factor) + 1 and then
        # by rope.scaling.attn_factor: store transformers' attention_factor relative to that
        # default (1 for Laguna's releases), or it is applied twice.
        if "attention_factor" in full:
            rel = float(full["attention_factor"]) / (0.1 * math.log(float(full["factor"])) + 1)
            w.add(f"{a}.rope.scaling.attn_factor", F32, rel)
    if (c.get("sliding_window") or 0) > 0 and swa:
        w.add(f"{a}.attention.sliding_window", U32, c["sliding_window"])
        w.add(f"{a}.rope.freq_base_swa", F32, float(swa["rope_theta"]))
        w.add(f"{a}.rope.dimension_count_swa", U32,
              int(Dh * float(swa.get("partial_rotary_factor", 1.0))))
    toks = byte_tokens()
    toks += [f"<|t{i}|>" for i in range(len(toks), c["vocab_size"])]
    w.add("tokenizer.ggml.model", STRING, "gpt2")
    w.add("tokenizer.ggml.pre", STRING, "default")
    w.add("tokenizer.ggml.tokens", ARRAY, (STRING, toks))
    w.add("tokenizer.ggml.token_type", ARRAY, (I32, [1] * len(toks)))
    w.add("tokenizer.ggml.merges", ARRAY, (STRING, []))
    w.add("tokenizer.ggml.bos_token_id", U32, c.get("bos_token_id", 2))
    eos = c.get("eos_token_id", 2)
    w.add("tokenizer.ggml.eos_token_id", U32, eos[0] if isinstance(eos, list) else eos)

    def put(gname, hf):
        path, dtype, shape, off = ck.t[hf]
        if len(shape) == 1 or dtype == "F32" or kind == "f32":
            w.add_tensor(gname, shape, GGML_F32, lambda: ck.f32(hf))
        else:
            w.add_tensor(gname, shape, GGML_BF16, lambda: ck.raw(hf))

    def stack(gname, names):
        shape = [len(names)] + ck.t[names[0]][2]
        if kind == "f32":
            w.add_tensor(gname, shape, GGML_F32, lambda: np.stack([ck.f32(n) for n in names]))
        else:
            w.add_tensor(gname, shape, GGML_BF16, lambda: np.stack([ck.raw(n) for n in names]))

    put("token_embd.weight", "model.embed_tokens.weight")
    for i in range(L):
        p, b = f"model.layers.{i}.", f"blk.{i}."
        for g, h in (("attn_norm", "input_layernorm"), ("ffn_norm", "post_attention_layernorm"),
                     ("attn_q", "self_attn.q_proj"), ("attn_k", "self_attn.k_proj"),
                     ("attn_v", "self_attn.v_proj"), ("attn_output", "self_attn.o_proj"),
                     ("attn_q_norm", "self_attn.q_norm"), ("attn_k_norm", "self_attn.k_norm"),
                     ("attn_gate", "self_attn.g_proj")):
            put(b + g + ".weight", p + h + ".weight")
        if i < dense_lead:
            for g in ("gate", "up", "down"):
                put(b + f"ffn_{g}.weight", p + f"mlp.{g}_proj.weight")
            continue
        put(b + "ffn_gate_inp.weight", p + "mlp.gate.weight")
        put(b + "exp_probs_b.bias", p + "mlp.experts.e_score_correction_bias")
        for g in ("gate", "up", "down"):
            stack(b + f"ffn_{g}_exps.weight",
                  [p + f"mlp.experts.{e}.{g}_proj.weight" for e in range(c["num_experts"])])
            put(b + f"ffn_{g}_shexp.weight", p + f"mlp.shared_expert.{g}_proj.weight")
    put("output_norm.weight", "model.norm.weight")
    put("output.weight", "lm_head.weight")
    w.write(out)


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4) or (len(sys.argv) == 4 and sys.argv[3] not in ("bf16", "f32")):
        sys.exit("usage: laguna_to_gguf.py CHECKPOINT_DIR OUT.gguf [bf16|f32]")
    convert(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) == 4 else "bf16")
