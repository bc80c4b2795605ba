"""Parameter count of a config.json as transformers instantiates the *ForCausalLM module
(`sum(p.numel() for p in model.parameters())`, tied embeddings counted once, buffers such as
GPT-2's `attn.bias` mask or rotary `inv_freq` not counted). Module shapes from the families'
modeling_<family>.py __init__s."""
from .config import resolve


def _decoder_layer(r, i):
    """One Llama-style decoder layer (LlamaDecoderLayer and its cousins)."""
    fam, D, H, KV, hd = r["family"], r["hidden_size"], r["num_attention_heads"], \
        r["num_key_value_heads"], r["head_dim"]
    qkv_bias = fam == "qwen2" or bool(r.get("attention_bias", False))  # Qwen2: q/k/v bias=True
    o_bias = fam != "qwen2" and bool(r.get("attention_bias", False))   # Qwen2: o_proj bias=False
    n = D * H * hd + 2 * D * KV * hd + H * hd * D
    n += (H * hd + 2 * KV * hd) * qkv_bias + D * o_bias
    if fam in ("qwen3", "qwen3_moe", "gemma3_text"):
        n += 2 * hd  # q_norm, k_norm over head_dim
    n += (4 if fam.startswith("gemma") else 2) * D  # Gemma: pre/post attention and feed-forward norms
    I = r["intermediate_size"]
    if fam == "mixtral":
        E = r["num_local_experts"]
        return n + D * E + E * 3 * D * I  # block_sparse_moe.gate + experts w1, w2, w3
    if fam == "qwen3_moe" and is_sparse_layer(r, i):
        E, Im = r["num_experts"], r["moe_intermediate_size"]
        return n + D * E + E * 3 * D * Im
    n += 3 * D * I
    if r.get("mlp_bias", False):
        n += 2 * I + D
    return n


def is_sparse_layer(r, i):
    """Qwen3MoeDecoderLayer: sparse iff not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0."""
    only = r.get("mlp_only_layers") or []
    return i not in only and r["num_experts"] > 0 and (i + 1) % r["decoder_sparse_step"] == 0


def count_params(cfg):
    r = resolve(cfg)
    fam = r["family"]
    if fam == "gpt2":
        D, L, V, P = r["n_embd"], r["n_layer"], r["vocab_size"], r["n_positions"]
        I = r["n_inner"] or 4 * D
        layer = 2 * D + (D * 3 * D + 3 * D) + (D * D + D) + 2 * D + (D * I + I) + (I * D + D)
        head = 0 if r.get("tie_word_embeddings", True) else V * D
        return V * D + P * D + L * layer + 2 * D + head
    if fam == "gpt_neox":
        D, L, V, I = r["hidden_size"], r["num_hidden_layers"], r["vocab_size"], r["intermediate_size"]
        b = 1 if r.get("attention_bias", True) else 0
        layer = 4 * D + (D * 3 * D + 3 * D * b) + (D * D + D * b) + (D * I + I) + (I * D + D)
        head = 0 if r.get("tie_word_embeddings", False) else V * D
        return V * D + L * layer + 2 * D + head
    D, V, L = r["hidden_size"], r["vocab_size"], r["num_hidden_layers"]
    n = V * D + sum(_decoder_layer(r, i) for i in range(L)) + D
    return n + (0 if r.get("tie_word_embeddings") else V * D)
