"""Names users already type (issue 11), mapped to the references' canonical names, per family.

    aliases(cfg) -> {alias: canonical name or None}

TransformerLens hook names (`blocks.{i}.hook_resid_pre`, ...) and Hugging Face module paths as
nnsight / sparsify users write them (`model.layers.{i}`, GPT-2's `transformer.h.{i}`). The canonical
name is the one whose value is what the alias's own library reads there:

- `hook_resid_pre` / `hook_resid_mid` / `hook_resid_post` are the residual stream entering, between
  and leaving the block: `layer_input`, `layer_mid`, `layer_output`. A parallel-residual block
  (GPT-NeoX with use_parallel_residual) has no mid stream; TransformerLens has no hook there either,
  so the alias maps to None (refuse it, naming the family).
- `hook_attn_out` / `hook_mlp_out` are what the block adds to the residual: for Gemma 2 / 3 that is
  *after* the post-attention / post-feed-forward norm (TransformerLens applies ln1_post / ln2_post
  before these hooks), so they map to `attention_post_norm_output` / `mlp_post_norm_output`;
  elsewhere to `attention_output` / `mlp_output`.
- `attn.hook_q` / `attn.hook_k` are TransformerLens's queries and keys *before* rotary
  (`hook_rot_q` / `hook_rot_k` are after): `attention_queries_pre_rope` / `attention_keys_pre_rope`
  for rotary families, `attention_queries` / `attention_keys` for GPT-2. TransformerLens's shape is
  [pos, head, d_head], the references' [head, pos, d_head]: the same values transposed.
- `attn.hook_z` is the per-head output before the output projection (`attention_head_outputs`),
  `attn.hook_pattern` the probabilities, `attn.hook_attn_scores` the scaled, soft-capped, masked
  scores; `mlp.hook_post` the input of the down projection (`mlp_neurons`; TransformerLens's gated
  MLP hooks `act(gate) * up` there); `ln_final.hook_normalized` is `final_norm_output`.
- `hook_embed` is the token embedding, `token_embeddings`; for Gemma 2 TransformerLens folds the
  sqrt(hidden_size) scale into W_E while Hugging Face's Gemma 2 embedding returns it unscaled and
  the model multiplies after: the scaled value is `layers.0.layer_input` (Gemma 3's embedding
  module scales itself, so its `token_embeddings` is already TransformerLens's hook_embed).
- `ln1.hook_normalized` / `ln2.hook_normalized` are the stream normalised *before* the norm's
  weight (TransformerLens's LayerNorm/RMSNorm hook it before `* w + b`, and with its default
  fold_ln the weight is folded away); `mlp.hook_pre` is the MLP's pre-activation (`x @ W_gate` or
  `x @ W_in + b_in`); `attn.hook_result` is each head's output after W_O. The references compute
  none of these: the aliases map to None (refused, naming the nearest value).
- Module paths read the module's own output: `model.layers.{i}` the block (`layer_output`),
  `model.layers.{i}.self_attn` the attention module (`attention_output`, before Gemma's post norm),
  `model.layers.{i}.mlp` the MLP module (`mlp_output`); GPT-2 `transformer.h.{i}`, `.attn`, `.mlp`;
  GPT-NeoX `gpt_neox.layers.{i}`, `.attention`, `.mlp`.
"""
from .config import resolve

ROTARY = ("llama", "mistral", "qwen2", "qwen3", "qwen3_moe", "mixtral", "gemma2", "gemma3_text",
          "gpt_neox")


def aliases(cfg):
    r = resolve(cfg)
    fam = r["family"]
    L = r.get("num_hidden_layers", r.get("n_layer"))
    gemma = fam.startswith("gemma")
    parallel = fam == "gpt_neox" and r.get("use_parallel_residual", True)
    rot = fam in ROTARY
    out = {"ln_final.hook_normalized": "final_norm_output",
           "hook_embed": "layers.0.layer_input" if fam == "gemma2" else "token_embeddings"}
    for i in range(L):
        b, c = f"blocks.{i}.", f"layers.{i}."
        out.update({
            b + "hook_resid_pre": c + "layer_input",
            b + "hook_resid_mid": None if parallel else c + "layer_mid",
            b + "hook_resid_post": c + "layer_output",
            b + "hook_attn_out": c + ("attention_post_norm_output" if gemma else "attention_output"),
            b + "hook_mlp_out": c + ("mlp_post_norm_output" if gemma else "mlp_output"),
            b + "attn.hook_q": c + ("attention_queries_pre_rope" if rot else "attention_queries"),
            b + "attn.hook_k": c + ("attention_keys_pre_rope" if rot else "attention_keys"),
            b + "attn.hook_v": c + "attention_values",
            b + "attn.hook_z": c + "attention_head_outputs",
            b + "attn.hook_pattern": c + "attention_probabilities",
            b + "attn.hook_attn_scores": c + "attention_scores",
            b + "mlp.hook_post": c + "mlp_neurons",
            b + "ln1.hook_normalized": None,
            b + "ln2.hook_normalized": None,
            b + "mlp.hook_pre": None,
            b + "attn.hook_result": None,
        })
        if fam == "gpt2":
            for pre in (f"transformer.h.{i}", f"h.{i}"):
                out.update({pre: c + "layer_output", pre + ".attn": c + "attention_output",
                            pre + ".mlp": c + "mlp_output"})
        elif fam == "gpt_neox":
            pre = f"gpt_neox.layers.{i}"
            out.update({pre: c + "layer_output", pre + ".attention": c + "attention_output",
                        pre + ".mlp": c + "mlp_output"})
        else:
            pre = f"model.layers.{i}"
            out.update({pre: c + "layer_output", pre + ".self_attn": c + "attention_output",
                        pre + ".mlp": c + "mlp_output"})
    return out
