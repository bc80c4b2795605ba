"""Converts a harvest Llama checkpoint (config.json + BF16 safetensors, as `harvest init-model
--family llama` writes them) to a BF16 or F32 GGUF that llama.cpp's "llama" loader takes, for
speed comparisons (tests/bench_llamacpp.sh): the shapes, types and work of the real model.

Usage: llama_to_gguf.py CHECKPOINT_DIR OUT.gguf [bf16|f32]

Not for comparing values: llama.cpp's own converter permutes q_proj/k_proj rows for its rotary
layout and writes Llama 3's rope_freqs; this one copies the matrices as they are and leaves
rope scaling out (neither changes the work done). 1-D tensors are F32, as llama.cpp's converter
writes them; the vocabulary is a stand-in of vocab_size tokens (the benchmark feeds ids)."""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_write import ARRAY, F32, GGML_BF16, GGML_F32, I32, STRING, U32, GGUFWriter  # noqa: E402
from laguna_to_gguf import Checkpoint, byte_tokens  # noqa: E402


def convert(folder, out, kind="bf16"):
    c = json.load(open(os.path.join(folder, "config.json")))
    ck = Checkpoint(folder)
    L, D, H = c["num_hidden_layers"], c["hidden_size"], c["num_attention_heads"]
    Dh = c.get("head_dim") or D // H
    w = GGUFWriter()
    a = "llama"
    w.add("general.architecture", STRING, a)
    w.add("general.name", STRING, os.path.basename(os.path.abspath(folder)))
    w.add("general.file_type", U32, 32 if kind == "bf16" else 0)  # MOSTLY_BF16 / ALL_F32
    w.add(f"{a}.vocab_size", U32, c["vocab_size"])
    w.add(f"{a}.context_length", U32, c["max_position_embeddings"])
    w.add(f"{a}.embedding_length", U32, D)
    w.add(f"{a}.block_count", U32, L)
    w.add(f"{a}.feed_forward_length", U32, c["intermediate_size"])
    w.add(f"{a}.attention.head_count", U32, H)
    w.add(f"{a}.attention.head_count_kv", U32, c.get("num_key_value_heads", H))
    w.add(f"{a}.attention.key_length", U32, Dh)
    w.add(f"{a}.attention.value_length", U32, Dh)
    w.add(f"{a}.attention.layer_norm_rms_epsilon", F32, c["rms_norm_eps"])
    w.add(f"{a}.rope.freq_base", F32, float(c.get("rope_theta", 10000.0)))
    w.add(f"{a}.rope.dimension_count", U32, Dh)
    toks = byte_tokens()
    toks += [f"<|t{i}|>" for i in range(len(toks), c["vocab_size"])]
    w.add("tokenizer.ggml.model", STRING, "gpt2")
    w.add("tokenizer.ggml.pre", STRING, "default")
    w.add("tokenizer.ggml.tokens", ARRAY, (STRING, toks))
    w.add("tokenizer.ggml.token_type", ARRAY, (I32, [1] * len(toks)))
    w.add("tokenizer.ggml.merges", ARRAY, (STRING, []))
    bos = c.get("bos_token_id") or 1
    eos = c.get("eos_token_id") or 2
    w.add("tokenizer.ggml.bos_token_id", U32, bos)
    w.add("tokenizer.ggml.eos_token_id", U32, eos[0] if isinstance(eos, list) else eos)

    def put(gname, hf):
        shape, dtype = ck.t[hf][2], ck.t[hf][1]
        if len(shape) == 1 or dtype == "F32" or kind == "f32":
            w.add_tensor(gname, shape, GGML_F32, lambda: ck.f32(hf))
        else:
            w.add_tensor(gname, shape, GGML_BF16, lambda: ck.raw(hf))

    put("token_embd.weight", "model.embed_tokens.weight")
    for i in range(L):
        p, b = f"model.layers.{i}.", f"blk.{i}."
        for g, h in (("attn_norm", "input_layernorm"), ("ffn_norm", "post_attention_layernorm"),
                     ("attn_q", "self_attn.q_proj"), ("attn_k", "self_attn.k_proj"),
                     ("attn_v", "self_attn.v_proj"), ("attn_output", "self_attn.o_proj"),
                     ("ffn_gate", "mlp.gate_proj"), ("ffn_up", "mlp.up_proj"),
                     ("ffn_down", "mlp.down_proj")):
            put(b + g + ".weight", p + h + ".weight")
    put("output_norm.weight", "model.norm.weight")
    if "lm_head.weight" in ck.t:
        put("output.weight", "lm_head.weight")
    w.write(out)


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4) or (len(sys.argv) == 4 and sys.argv[3] not in ("bf16", "f32")):
        sys.exit("usage: llama_to_gguf.py CHECKPOINT_DIR OUT.gguf [bf16|f32]")
    convert(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) == 4 else "bf16")
