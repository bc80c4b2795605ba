"""OLMo 2 (Olmo2ForCausalLM, model/families/olmo2.c) against the float64 reference
tests/ref/olmo2_ref.py (written from transformers' modeling_olmo2.py): the init-model preset
(BF16, two shards, two key/value heads for four query heads) and a variant (F32 in one file,
attention_bias with q/k/v/o biases, tied embeddings, num_key_value_heads null), `harvest run` with
every value over prompts of 1 to 17 tokens batched; every stored value within 1e-4 of the reference
relative to the tensor's scale (-inf exactly where attention is blocked), and the catalogue is
exactly the reference's names (no attention_norm_output / mlp_norm_output: OLMo 2 has no pre
norm). Identities on the stored values: layer_mid == layer_input + attention_post_norm_output and
layer_output == layer_mid + mlp_post_norm_output (bit for bit), mlp_input == layer_mid, the post
norms recomputed from the stored module outputs, q_norm over the whole projection (recomputed from
layer_input; a per-head norm would not match), probability rows summing to 1, logits ==
lm_head(final_norm_output). The mutation the test must catch: the reference with the same norms
moved before attention and MLP differs from harvest's values. Two pipeline stages (np 2) store
the same bits as one rank. Then the aliases (hook_attn_out is
the post-norm output; ln1.hook_normalized is refused naming the reason) and a sliding_window in
config.json refused naming the key; `plan`'s parameter count at OLMo 2 7B's sizes as the modules
count it (7,298,617,344), and the same count from the release config.json itself
(tests/ref/configs/OLMo-2-1124-7B.json, verbatim; the card's 7B, "OLMo 2 7B")."""
import json
import os
import sys

import numpy as np

import famtest as ft
from famtest import close
from util import args, check, finish, run
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref"))
import olmo2_ref  # noqa: E402
from hf.safetensors_io import load_checkpoint  # noqa: E402

LENGTHS = [5, 1, 17, 2, 9, 3]
harvest, work = args()


def variant(src, dst):
    """The preset's weights as F32 in one file with attention biases, tied, kv heads null."""
    cfg, w = load_checkpoint(src)
    cfg.update(attention_bias=True, tie_word_embeddings=True, num_key_value_heads=None,
               torch_dtype="float32")
    H, hd, D = cfg["num_attention_heads"], cfg["hidden_size"] // cfg["num_attention_heads"], cfg["hidden_size"]
    rng = np.random.default_rng(7)
    t = {k: v.astype(np.float32) for k, v in w.items() if k != "lm_head.weight"}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}.self_attn."
        for n in ("k_proj", "v_proj"):  # kv heads null -> as many as query heads
            t[p + n + ".weight"] = rng.standard_normal((H * hd, D)).astype(np.float32) * np.float32(0.2)
        t[p + "k_norm.weight"] = (1 + 0.1 * rng.standard_normal(H * hd)).astype(np.float32)
        for n, size in (("q_proj", H * hd), ("k_proj", H * hd), ("v_proj", H * hd), ("o_proj", D)):
            t[p + n + ".bias"] = rng.standard_normal(size).astype(np.float32) * np.float32(0.1)
    ft.write_f32(dst, cfg, t)


def identities(f, i, T, r, w, name):
    A = ft.row(f, i)
    eps = r["rms_norm_eps"]
    for l in range(r["num_hidden_layers"]):
        p = f"layers.{l}."
        x, mid, out = ft.residuals(A, p, T, name, "attention_post_norm_output", "mlp_post_norm_output")
        a, m = A(p + "attention_post_norm_output")[:T], A(p + "mlp_post_norm_output")[:T]
        check(np.array_equal(A(p + "mlp_input")[:T], mid), f"{name} {p}mlp_input == layer_mid (no pre norm)")
        mw = f"model.{p}"
        close(olmo2_ref.rmsnorm(A(p + "attention_output")[:T].astype(np.float64),
                                w[mw + "post_attention_layernorm.weight"], eps), a,
              f"{name} {p}attention_post_norm_output == post_attention_layernorm(attention_output)")
        close(olmo2_ref.rmsnorm(A(p + "mlp_output")[:T].astype(np.float64),
                                w[mw + "post_feedforward_layernorm.weight"], eps), m,
              f"{name} {p}mlp_post_norm_output == post_feedforward_layernorm(mlp_output)")
        # q_norm over the whole projection, then the head split
        qp = x.astype(np.float64) @ w[mw + "self_attn.q_proj.weight"].T
        if r["attention_bias"]:
            qp = qp + w[mw + "self_attn.q_proj.bias"]
        got = A(p + "attention_queries_pre_rope")[:, :T].astype(np.float64)  # (H, T, hd)
        ft.q_norm_whole(name, p, qp, w[mw + "self_attn.q_norm.weight"], eps, r["num_attention_heads"],
                        r["head_dim"], got, olmo2_ref.rmsnorm)
        ft.rows_sum_to_one(A, p, T, name)
    ft.lm_head(A, T, w["model.embed_tokens.weight" if r["tie_word_embeddings"] else "lm_head.weight"], name)


def golden(name, model):
    cfg, w = load_checkpoint(model)
    r = olmo2_ref.resolve(cfg)
    names, out = ft.golden_run(harvest, f"{work}/run-{name}", model, LENGTHS, cfg["vocab_size"])
    worst, caught = 0.0, 0
    with ft.output(out, name, names, "olmo2") as f:
        for i, T, ids in ft.prompts(f):
            want = olmo2_ref.forward(cfg, w, ids)
            check(sorted(want) == sorted(set(names) - {"input_ids", "attention_mask"}),
                  f"{name}: catalogue == the reference's names: {sorted(set(names) ^ set(want))}")
            check(np.array_equal(f["activations/input_ids"][i][:T], ids), f"{name}: input_ids")
            worst = max(worst, ft.compare_all(f, i, T, want, name, names))
            identities(f, i, T, r, w, name)
            # the mutation: the norms before attention and MLP instead of after
            pre = olmo2_ref.forward(cfg, w, ids, order="pre")
            n = f"layers.{r['num_hidden_layers'] - 1}.layer_output"
            caught += ft.differs(f["activations/" + n][i][:T], pre[n][0])
    check(caught == len(LENGTHS), f"{name}: the pre-norm mutation differs from harvest on "
          f"{caught} of {len(LENGTHS)} prompts")
    print(f"{name}: {len(names)} values x {len(LENGTHS)} prompts match the reference (worst {worst:.1e}); "
          f"the pre-norm mutation is caught on every prompt", flush=True)


preset = f"{work}/preset"
run(harvest, "init-model", "--family", "olmo2", "--preset", "OLMo-2-1124-7B", "--seed", "5", preset, check=0)
golden("preset", preset)
variant(preset, f"{work}/variant")
golden("variant", f"{work}/variant")

# ---- two pipeline stages (np 2) store the same bits as one rank ----
ft.two_stages(harvest, f"{work}/run-preset", preset)

# ---- the names: listed, aliases, refusals ----
listing = run(harvest, "activations", preset, check=0).stdout
check("layers.0.attention_post_norm_output" in listing and "attention_norm_output" not in listing
      and "mlp_norm_output" not in listing, "activations: the post norms' outputs, no pre-norm outputs")
al = ft.aliases(harvest, preset)
check(al.get("blocks.1.hook_attn_out") == "layers.1.attention_post_norm_output" and
      al.get("blocks.0.hook_mlp_out") == "layers.0.mlp_post_norm_output" and
      al.get("blocks.0.attn.hook_q") == "layers.0.attention_queries_pre_rope",
      f"--aliases: {[(a, c) for a, c in al.items() if 'hook_attn_out' in a or 'hook_q' in a]}")
ft.run_refused(harvest, "ln1.hook_normalized refused naming it", f"{work}/ln1.json",
               ["blocks.0.ln1.hook_normalized", "no norm before"], model=preset,
               data=f"{work}/run-preset/prompts.jsonl", activations=["blocks.0.ln1.hook_normalized"],
               output={"path": f"{work}/ln1.h5"})
# `plan`: the parameters Olmo2ForCausalLM instantiates, counted from its modules (OLMo 2 7B's sizes)
big = dict(json.load(open(f"{preset}/config.json")), vocab_size=100352, hidden_size=4096,
           intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32)
os.makedirs(f"{work}/big")
json.dump(big, open(f"{work}/big/config.json", "w"))
V, D, I, L, HD = 100352, 4096, 11008, 32, 4096
n = V * D + L * (4 * D * HD + 2 * HD + 2 * D + 3 * D * I) + D + V * D  # q/k/v/o, q/k norm, post norms, MLP
p = run(harvest, "plan", f"{work}/big/config.json", check=0)
check(f"parameters: {n:,}" in p.stdout, f"plan: {n:,} parameters expected: {p.stdout[:300]}")
release = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref", "configs", "OLMo-2-1124-7B.json")
p = run(harvest, "plan", release, check=0)
check(p.returncode == 0 and n == 7298617344 and f"parameters: {n:,}" in p.stdout,
      f"plan of the release config (tests/ref/configs): {n:,} parameters expected: {p.stdout[:300]}")
cfg = json.load(open(f"{preset}/config.json"))
ft.bad_config(harvest, "a sliding_window", f"{work}/bad", dict(cfg, sliding_window=4), ["sliding_window"])
finish()
