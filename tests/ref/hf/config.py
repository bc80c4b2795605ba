"""config.json -> the resolved hyper-parameters of one family, with transformers' defaults for
absent keys. Defaults follow each family's configuration_<family>.py `__init__` signature (the values
a config.json that omits the key gets when transformers loads it)."""

FAMILIES = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
    "Qwen3MoeForCausalLM": "qwen3_moe",
    "MixtralForCausalLM": "mixtral",
    "Gemma2ForCausalLM": "gemma2",
    "Gemma3ForCausalLM": "gemma3_text",
    "GPT2LMHeadModel": "gpt2",
    "GPTNeoXForCausalLM": "gpt_neox",
}

# configuration_<family>.py __init__ defaults (the keys that change the computation or the count).
DEFAULTS = {
    "llama": dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                  num_attention_heads=32, num_key_value_heads=None, hidden_act="silu",
                  max_position_embeddings=2048, rms_norm_eps=1e-6, tie_word_embeddings=False,
                  rope_theta=10000.0, rope_scaling=None, attention_bias=False, mlp_bias=False,
                  head_dim=None),
    "mistral": dict(vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                    num_attention_heads=32, num_key_value_heads=8, hidden_act="silu",
                    max_position_embeddings=4096 * 32, rms_norm_eps=1e-6, tie_word_embeddings=False,
                    rope_theta=10000.0, rope_scaling=None, sliding_window=4096, head_dim=None),
    "qwen2": dict(vocab_size=151936, hidden_size=4096, intermediate_size=22016, num_hidden_layers=32,
                  num_attention_heads=32, num_key_value_heads=32, hidden_act="silu",
                  max_position_embeddings=32768, rms_norm_eps=1e-6, tie_word_embeddings=False,
                  rope_theta=10000.0, rope_scaling=None, use_sliding_window=False, sliding_window=4096,
                  max_window_layers=28),
    "qwen3": dict(vocab_size=151936, hidden_size=4096, intermediate_size=22016, num_hidden_layers=32,
                  num_attention_heads=32, num_key_value_heads=32, head_dim=128, hidden_act="silu",
                  max_position_embeddings=32768, rms_norm_eps=1e-6, tie_word_embeddings=False,
                  rope_theta=10000.0, rope_scaling=None, attention_bias=False, use_sliding_window=False,
                  sliding_window=4096, max_window_layers=28),
    "qwen3_moe": dict(vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_hidden_layers=24,
                      num_attention_heads=32, num_key_value_heads=4, head_dim=128, hidden_act="silu",
                      max_position_embeddings=32768, rms_norm_eps=1e-6, tie_word_embeddings=False,
                      rope_theta=10000.0, rope_scaling=None, attention_bias=False,
                      use_sliding_window=False, sliding_window=4096, max_window_layers=28,
                      decoder_sparse_step=1, moe_intermediate_size=768, num_experts_per_tok=8,
                      num_experts=128, norm_topk_prob=False, mlp_only_layers=None),
    "mixtral": dict(vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                    num_attention_heads=32, num_key_value_heads=8, head_dim=None, hidden_act="silu",
                    max_position_embeddings=4096 * 32, rms_norm_eps=1e-5, tie_word_embeddings=False,
                    rope_theta=1e6, rope_scaling=None, sliding_window=None, num_experts_per_tok=2,
                    num_local_experts=8),
    "gemma2": dict(vocab_size=256000, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
                   num_attention_heads=8, num_key_value_heads=4, head_dim=256,
                   hidden_activation="gelu_pytorch_tanh", max_position_embeddings=8192,
                   rms_norm_eps=1e-6, tie_word_embeddings=True, rope_theta=10000.0,
                   attention_bias=False, query_pre_attn_scalar=256, sliding_window=4096,
                   final_logit_softcapping=30.0, attn_logit_softcapping=50.0, layer_types=None),
    "gemma3_text": dict(vocab_size=262208, hidden_size=2304, intermediate_size=9216,
                        num_hidden_layers=26, num_attention_heads=8, num_key_value_heads=4,
                        head_dim=256, hidden_activation="gelu_pytorch_tanh",
                        max_position_embeddings=131072, rms_norm_eps=1e-6, tie_word_embeddings=True,
                        rope_theta=1_000_000.0, attention_bias=False, query_pre_attn_scalar=256,
                        sliding_window=4096, layer_types=None, final_logit_softcapping=None,
                        attn_logit_softcapping=None, rope_scaling=None, rope_local_base_freq=10_000.0,
                        sliding_window_pattern=6),
    "gpt2": dict(vocab_size=50257, n_positions=1024, n_embd=768, n_layer=12, n_head=12, n_inner=None,
                 activation_function="gelu_new", layer_norm_epsilon=1e-5, scale_attn_weights=True,
                 scale_attn_by_inverse_layer_idx=False, reorder_and_upcast_attn=False,
                 tie_word_embeddings=True),
    "gpt_neox": dict(vocab_size=50432, hidden_size=6144, num_hidden_layers=44, num_attention_heads=64,
                     intermediate_size=24576, hidden_act="gelu", rotary_pct=0.25,
                     rotary_emb_base=10000, max_position_embeddings=2048, layer_norm_eps=1e-5,
                     use_parallel_residual=True, rope_scaling=None, attention_bias=True,
                     tie_word_embeddings=False),
}


def family_of(cfg):
    """The family key of a config.json: `architectures[0]`, else `model_type` (issue 10's rule)."""
    arch = (cfg.get("architectures") or [None])[0]
    if arch in FAMILIES:
        return FAMILIES[arch]
    if arch is None and cfg.get("model_type") in DEFAULTS:
        return cfg["model_type"]
    raise ValueError(f"unknown architecture {arch!r}; known: {sorted(FAMILIES)}")


def resolve(cfg):
    """A flat dict: transformers' default for every absent key, then the file's values."""
    fam = family_of(cfg)
    r = dict(DEFAULTS[fam])
    r.update({k: v for k, v in cfg.items()})
    r["family"] = fam
    if fam in ("gpt2", "gpt_neox"):
        return r
    if r.get("num_key_value_heads") is None:  # LlamaConfig: None -> num_attention_heads
        r["num_key_value_heads"] = r["num_attention_heads"]
    if r.get("head_dim") is None:  # getattr(config, "head_dim", hidden // heads)
        r["head_dim"] = r["hidden_size"] // r["num_attention_heads"]
    return r
