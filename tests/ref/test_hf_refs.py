"""Self-tests of the float64 references in tests/ref/hf (python3 + numpy only, a few seconds).

    /usr/bin/python3 tests/ref/test_hf_refs.py [-v]

- exact parameter counts of the release configs in tests/ref/hf-configs (issue 11's figures);
- identities on every family's outputs (residual sums, probabilities summing to 1,
  logits == lm_head(final_norm_output), Gemma 2's soft-cap bounds, MoE weights summing to 1,
  each block's input == the previous block's output, masks exactly where causal / window says);
- checks against independent, simpler computations: a batch equals its prompts run one at a time,
  tied == untied with lm_head copied, GPT-2's prefixed == unprefixed names, attention by explicit
  loops, RoPE identity at position 0, the norms recomputed from their formulas, BF16 shards read
  back equal to the values written.
"""
import json
import math
import os
import sys
import tempfile
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf import count_params, forward, load_checkpoint, resolve  # noqa: E402
from hf.decoder import layer_types  # noqa: E402
from hf.make_tiny import PRESETS, tiny_config, tiny_weights, write_model  # noqa: E402

CONFIGS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hf-configs")
# prompts of 1, 2, window - 1, window, window + 1 and longer than the window (tiny window = 4)
PROMPTS = [[5], [7, 3], [1, 2, 3], [9, 8, 7, 6], [4, 4, 5, 6, 1], list(range(10, 21))]
_cache = {}


def run(fam):
    if fam not in _cache:
        cfg = tiny_config(fam)
        w = {k: v.astype(np.float64) for k, v in tiny_weights(cfg, seed=1).items()}
        _cache[fam] = (cfg, w, forward(cfg, w, PROMPTS))
    return _cache[fam]


def close(a, b, tol=1e-10):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    scale = max(1.0, float(np.max(np.abs(b[np.isfinite(b)]), initial=0.0)))
    fin = np.isfinite(b)
    return a.shape == b.shape and np.array_equal(np.isfinite(a), fin) and \
        np.array_equal(a[~fin], b[~fin]) and float(np.max(np.abs(a[fin] - b[fin]), initial=0.0)) <= tol * scale


class ParamCounts(unittest.TestCase):
    MUST = {"gpt2.json": 124_439_808, "pythia-160m.json": 162_322_944, "Qwen3-0.6B.json": 596_049_920,
            "gemma-2-2b-it.json": 2_614_341_888, "Llama-3.1-8B.json": 8_030_261_248,
            "Mixtral-8x7B-Instruct-v0.1.json": 46_702_792_704,
            # beyond the list: the published totals of these releases
            "Llama-3.2-1B.json": 1_235_814_400, "Mistral-7B-v0.1.json": 7_241_732_096,
            "Qwen2.5-0.5B.json": 494_032_768}

    def test_release_counts(self):
        for fn, want in self.MUST.items():
            with open(os.path.join(CONFIGS, fn)) as f:
                cfg = json.load(f)
            self.assertEqual(count_params(cfg), want, fn)

    def test_tiny_counts_equal_tensors_written(self):
        """The counter against the tensor list the writer produces (buffers excluded)."""
        for fam in PRESETS:
            cfg = tiny_config(fam)
            w = tiny_weights(cfg)
            n = sum(a.size for k, a in w.items() if k.split(".")[-2:] != ["attn", "bias"])
            self.assertEqual(count_params(cfg), n, fam)


class Identities(unittest.TestCase):
    def test_residual_and_chain(self):
        for fam in PRESETS:
            cfg, w, res = run(fam)
            r = resolve(cfg)
            L = r.get("num_hidden_layers", r.get("n_layer"))
            gemma = r["family"].startswith("gemma")
            for out in res:
                for i in range(L):
                    g = lambda n: out[f"layers.{i}.{n}"]
                    a = g("attention_post_norm_output") if gemma else g("attention_output")
                    m = g("mlp_post_norm_output") if gemma else g("mlp_output")
                    self.assertTrue(close(g("layer_input") + a, g("layer_mid")), (fam, i))
                    self.assertTrue(close(g("layer_input") + a + m, g("layer_output")), (fam, i))
                    if i + 1 < L:
                        self.assertTrue(close(out[f"layers.{i + 1}.layer_input"], g("layer_output")))

    def test_probabilities(self):
        for fam in PRESETS:
            _, _, res = run(fam)
            for out in res:
                for k, v in out.items():
                    if k.endswith("attention_probabilities") or k == "next_token_probs":
                        self.assertTrue(np.allclose(v.sum(-1), 1.0, atol=1e-12), (fam, k))
                        self.assertTrue((v >= 0).all())

    def test_logits_are_the_head_of_the_final_norm(self):
        for fam in PRESETS:
            cfg, w, res = run(fam)
            r = resolve(cfg)
            if r["family"] == "gpt2":
                head = w["wte.weight"]
            elif r["family"] == "gpt_neox":
                head = w["embed_out.weight"]
            else:
                head = w["model.embed_tokens.weight"] if r.get("tie_word_embeddings") else w["lm_head.weight"]
            cap = r.get("final_logit_softcapping") if r["family"].startswith("gemma") else None
            for out in res:
                z = out["final_norm_output"] @ head.T
                self.assertTrue(close(out["lm_head_output"], z), fam)
                want = np.tanh(z / cap) * cap if cap else z
                self.assertTrue(close(out["logits"], want), fam)
                p = np.exp(out["logits"][0, -1] - out["logits"][0, -1].max())
                self.assertTrue(close(out["next_token_probs"][0], p / p.sum()), fam)

    def test_gemma2_softcaps_bound(self):
        cfg, _, res = run("gemma2")
        r = resolve(cfg)
        self.assertEqual((r["attn_logit_softcapping"], r["final_logit_softcapping"]), (50.0, 30.0))
        for out in res:
            self.assertTrue((np.abs(out["logits"]) < 30.0).all())
            for i in range(r["num_hidden_layers"]):
                s = out[f"layers.{i}.attention_scores"]
                self.assertTrue((np.abs(s[np.isfinite(s)]) < 50.0).all())

    def test_masks(self):
        """-inf exactly at future keys and, on sliding layers, at keys <= query - window."""
        for fam in PRESETS:
            cfg, _, res = run(fam)
            r = resolve(cfg)
            L = r.get("num_hidden_layers", r.get("n_layer"))
            types = layer_types(r) if fam not in ("gpt2", "gpt_neox") else ["full_attention"] * L
            for out in res:
                for i in range(L):
                    s = out[f"layers.{i}.attention_scores"][0]
                    T = s.shape[-1]
                    qi, ki = np.arange(T)[:, None], np.arange(T)[None, :]
                    ok = ki <= qi
                    if types[i] == "sliding_attention":
                        ok &= ki > qi - r["sliding_window"]
                    self.assertTrue(np.array_equal(np.isfinite(s), np.broadcast_to(ok, s.shape)), (fam, i))

    def test_sliding_layers_present(self):
        """The presets do exercise windows: Mistral every layer, Gemma 2 the even layers, Gemma 3
        the pattern's."""
        self.assertEqual(layer_types(resolve(tiny_config("mistral"))), ["sliding_attention"] * 2)
        self.assertEqual(layer_types(resolve(tiny_config("gemma2"))),
                         ["sliding_attention", "full_attention", "sliding_attention"])
        self.assertEqual(layer_types(resolve(tiny_config("gemma3"))),
                         ["sliding_attention", "full_attention", "sliding_attention"])

    def test_moe(self):
        for fam in ("mixtral", "qwen3_moe"):
            cfg, w, res = run(fam)
            r = resolve(cfg)
            k = r["num_experts_per_tok"]
            for out in res:
                for i in range(r["num_hidden_layers"]):
                    if f"layers.{i}.router_logits" not in out:
                        self.assertEqual((fam, i), ("qwen3_moe", 1))  # mlp_only_layers = [1]
                        continue
                    wt = out[f"layers.{i}.expert_weights"]
                    idx = out[f"layers.{i}.expert_indices"]
                    self.assertTrue(np.allclose(wt.sum(-1), 1.0, atol=1e-12), (fam, i))
                    self.assertEqual(idx.shape[-1], k)
                    srt = np.sort(idx, -1)
                    self.assertTrue((srt[..., 1:] != srt[..., :-1]).all())
                    z = out[f"layers.{i}.router_logits"]
                    p = np.exp(z - z.max(-1, keepdims=True))
                    p /= p.sum(-1, keepdims=True)
                    top = np.take_along_axis(p, idx, -1)
                    self.assertTrue(close(wt, top / top.sum(-1, keepdims=True)))
                    self.assertTrue((np.sort(p, -1)[..., -k] <= top.min(-1) + 1e-15).all())
                    self.assertTrue(close(out[f"layers.{i}.routed_output"], out[f"layers.{i}.mlp_output"]))


class Aliases(unittest.TestCase):
    def test_every_alias_names_a_value(self):
        """Every alias maps to a value the reference returns (or to None where the family has none),
        and TransformerLens's resid_post of block 6 is GPT-2's layers.6.layer_output."""
        from hf.aliases import aliases
        for fam in PRESETS:
            cfg, _, res = run(fam)
            table = aliases(cfg)
            for alias, name in table.items():
                if name is None:  # NeoX's mid stream; TransformerLens values no family computes
                    hook = alias.split(".", 2)[-1]
                    self.assertTrue((fam, hook) == ("gpt_neox", "hook_resid_mid") or hook in
                                    ("ln1.hook_normalized", "ln2.hook_normalized", "mlp.hook_pre",
                                     "attn.hook_result"), (fam, alias))
                    continue
                if "mlp_neurons" in name and f"{name.split('.mlp_')[0]}.router_logits" in res[0]:
                    continue  # MoE layer: no single MLP's neurons
                self.assertIn(name, res[0], (fam, alias))
        g = aliases(tiny_config("gpt2"))
        self.assertEqual(g["blocks.1.hook_resid_post"], "layers.1.layer_output")
        self.assertEqual(g["hook_embed"], "token_embeddings")  # wte alone, before the positions
        self.assertEqual(aliases(tiny_config("gemma2"))["hook_embed"], "layers.0.layer_input")
        self.assertEqual(g["transformer.h.1"], "layers.1.layer_output")
        self.assertEqual(aliases(dict(tiny_config("gpt2"), n_layer=12))["blocks.6.hook_resid_post"],
                         "layers.6.layer_output")

    def test_pre_rope_values(self):
        """hook_q's value: the queries before RoPE, which rotate into attention_queries."""
        from hf.common import apply_rope, rope_inv_freq
        cfg, _, res = run("qwen3")
        r = resolve(cfg)
        out = res[-1]
        inv, _ = rope_inv_freq(r["rope_theta"], r["head_dim"], None, 0, 0)
        self.assertTrue(close(apply_rope(out["layers.1.attention_queries_pre_rope"], inv),
                              out["layers.1.attention_queries"]))


class Independent(unittest.TestCase):
    def test_batch_equals_one_at_a_time(self):
        for fam in PRESETS:
            cfg, w, res = run(fam)
            for b, p in enumerate(PROMPTS):
                one = forward(cfg, w, [p])[0]
                self.assertEqual(set(one), set(res[b]))
                for k in one:
                    self.assertTrue(close(res[b][k], one[k], 1e-12), (fam, b, k))

    def test_tied_equals_untied_with_copied_head(self):
        cfg, w, res = run("llama")
        self.assertTrue(cfg["tie_word_embeddings"])
        c2 = dict(cfg, tie_word_embeddings=False)
        w2 = dict(w, **{"lm_head.weight": w["model.embed_tokens.weight"].copy()})
        for a, b in zip(res, forward(c2, w2, PROMPTS)):
            self.assertTrue(close(a["logits"], b["logits"], 1e-14))

    def test_gpt2_prefixed_names(self):
        cfg, w, res = run("gpt2")
        w2 = {"transformer." + k: v for k, v in w.items()}
        for a, b in zip(res, forward(cfg, w2, PROMPTS)):
            self.assertTrue(close(a["logits"], b["logits"], 0))

    def test_attention_by_loops(self):
        """Head outputs from the stored q, k, v by explicit loops (GQA, window, soft-cap)."""
        for fam in ("llama", "mistral", "gemma2", "gpt_neox"):
            cfg, _, res = run(fam)
            r = resolve(cfg)
            L = r.get("num_hidden_layers")
            types = layer_types(r) if fam != "gpt_neox" else ["full_attention"] * L
            out = res[-1]
            for i in range(L):
                q, k, v = (out[f"layers.{i}.attention_{n}"][0] for n in ("queries", "keys", "values"))
                H, T, hd = q.shape
                rep = H // k.shape[0]
                if fam.startswith("gemma"):
                    scale, cap = r["query_pre_attn_scalar"] ** -0.5, r.get("attn_logit_softcapping")
                else:
                    scale, cap = hd ** -0.5, None
                W = r.get("sliding_window") if types[i] == "sliding_attention" else None
                got = out[f"layers.{i}.attention_head_outputs"][0]
                for h in range(H):
                    for t in range(T):
                        keys = [j for j in range(t + 1) if W is None or j > t - W]
                        s = [scale * float(np.dot(q[h, t], k[h // rep, j])) for j in keys]
                        if cap:
                            s = [cap * math.tanh(x / cap) for x in s]
                        m = max(s)
                        e = [math.exp(x - m) for x in s]
                        want = sum(ei * v[h // rep, j] for ei, j in zip(e, keys)) / sum(e)
                        self.assertTrue(close(got[t, h], want, 1e-12), (fam, i, h, t))

    def test_projections_at_position_zero(self):
        """RoPE is the identity at position 0: queries there are the plain projections (after the
        q norm where the family has one, with Gemma's (1 + w))."""
        for fam in ("llama", "qwen2", "qwen3", "gemma3"):
            cfg, w, res = run(fam)
            r = resolve(cfg)
            out = res[-1]
            x = out["layers.0.attention_norm_output"][0, 0]
            q = x @ w["model.layers.0.self_attn.q_proj.weight"].T
            if fam == "qwen2":
                q = q + w["model.layers.0.self_attn.q_proj.bias"]
            q = q.reshape(r["num_attention_heads"], r["head_dim"])
            if fam in ("qwen3", "gemma3"):
                g = w["model.layers.0.self_attn.q_norm.weight"] + (1.0 if fam == "gemma3" else 0.0)
                q = q / np.sqrt((q * q).mean(-1, keepdims=True) + r["rms_norm_eps"]) * g
            self.assertTrue(close(out["layers.0.attention_queries"][0, :, 0], q), fam)

    def test_neox_fused_qkv_and_partial_rotary(self):
        """query_key_value's output viewed (T, heads, 3 head_dim) per head; rotary on the first
        int(head_dim * rotary_pct) dims by rotate_half with inv_freq base^(-2j/rotary_ndims)."""
        cfg, w, res = run("gpt_neox")
        r = resolve(cfg)
        out = res[-1]
        H, D = r["num_attention_heads"], r["hidden_size"]
        hd = D // H
        rd = int(hd * r["rotary_pct"])
        x = out["layers.0.attention_norm_output"][0]
        qkv = x @ w["gpt_neox.layers.0.attention.query_key_value.weight"].T + \
            w["gpt_neox.layers.0.attention.query_key_value.bias"]
        for t in range(x.shape[0]):
            for h in range(H):
                blk = qkv[t, h * 3 * hd: (h + 1) * 3 * hd]
                q, v = blk[:hd], blk[2 * hd:]
                self.assertTrue(close(out["layers.0.attention_values"][0, h, t], v))
                want = q.copy()
                for j in range(rd // 2):
                    ang = t * r["rotary_emb_base"] ** (-2 * j / rd)
                    a, b = q[j], q[j + rd // 2]
                    want[j] = a * math.cos(ang) - b * math.sin(ang)
                    want[j + rd // 2] = b * math.cos(ang) + a * math.sin(ang)
                self.assertTrue(close(out["layers.0.attention_queries"][0, h, t], want), (t, h))

    def test_gemma3_rope_bases_and_qk_norm(self):
        """Gemma 3: q_norm (1 + w) per head before RoPE; sliding layers rotate with
        rope_local_base_freq unscaled, full layers with rope_theta and the linear factor."""
        cfg, w, res = run("gemma3")
        r = resolve(cfg)
        out = res[-1]
        H, hd, eps = r["num_attention_heads"], r["head_dim"], r["rms_norm_eps"]
        for i, (base, f) in enumerate([(r["rope_local_base_freq"], 1.0),
                                       (r["rope_theta"], r["rope_scaling"]["factor"])]):
            p = f"model.layers.{i}.self_attn."
            x = out[f"layers.{i}.attention_norm_output"][0]
            q = (x @ w[p + "q_proj.weight"].T).reshape(-1, H, hd)
            q = q / np.sqrt((q * q).mean(-1, keepdims=True) + eps) * (1 + w[p + "q_norm.weight"])
            t = x.shape[0] - 1
            for h in range(H):
                want = q[t, h].copy()
                for j in range(hd // 2):
                    ang = t * base ** (-2 * j / hd) / f
                    a, b = q[t, h, j], q[t, h, j + hd // 2]
                    want[j] = a * math.cos(ang) - b * math.sin(ang)
                    want[j + hd // 2] = b * math.cos(ang) + a * math.sin(ang)
                self.assertTrue(close(out[f"layers.{i}.attention_queries"][0, h, t], want), (i, h))

    def test_gpt2_embeddings(self):
        """wte[ids] + wpe[positions] enters block 0; token_embeddings is wte's output."""
        cfg, w, res = run("gpt2")
        out = res[-1]
        ids = PROMPTS[-1]
        want = w["wte.weight"][ids] + w["wpe.weight"][: len(ids)]
        self.assertTrue(close(out["layers.0.layer_input"][0], want, 0))
        self.assertTrue(close(out["token_embeddings"][0], w["wte.weight"][ids], 0))

    def test_gemma_norm_and_embedding_scale(self):
        cfg, w, res = run("gemma2")
        r = resolve(cfg)
        out = res[-1]
        x = out["layers.0.layer_input"][0]
        s = np.float32(math.sqrt(r["hidden_size"]))
        self.assertTrue(close(x, out["token_embeddings"][0] * float(s), 0))
        g = 1.0 + w["model.layers.0.input_layernorm.weight"]
        want = x / np.sqrt((x * x).mean(-1, keepdims=True) + r["rms_norm_eps"]) * g
        self.assertTrue(close(out["layers.0.attention_norm_output"][0], want))

    def test_neox_parallel_residual(self):
        """Parallel: the MLP reads LN2(layer_input); sequential (use_parallel_residual false): it
        reads LN2(layer_mid) and the outputs differ."""
        cfg, w, res = run("gpt_neox")
        out = res[-1]
        x = out["layers.0.layer_input"][0]
        g, b = w["gpt_neox.layers.0.post_attention_layernorm.weight"], w["gpt_neox.layers.0.post_attention_layernorm.bias"]
        ln = lambda y: (y - y.mean(-1, keepdims=True)) / np.sqrt(y.var(-1, keepdims=True) + 1e-5) * g + b
        self.assertTrue(close(out["layers.0.mlp_norm_output"][0], ln(x)))
        seq = forward(dict(cfg, use_parallel_residual=False), w, PROMPTS)[-1]
        self.assertTrue(close(seq["layers.0.mlp_norm_output"][0], ln(seq["layers.0.layer_mid"][0])))
        self.assertFalse(close(seq["logits"], out["logits"]))

    def test_gpt2_conv1d_layout(self):
        """c_attn is x @ W + b with W [in, out]: position 0's value head 0 recomputed by hand."""
        cfg, w, res = run("gpt2")
        out = res[-1]
        x = out["layers.0.attention_norm_output"][0, 0]
        D, H = cfg["n_embd"], cfg["n_head"]
        qkv = x @ w["h.0.attn.c_attn.weight"] + w["h.0.attn.c_attn.bias"]
        self.assertTrue(close(out["layers.0.attention_values"][0, 0, 0], qkv[2 * D: 2 * D + D // H]))

    def test_llama3_rope_frequencies(self):
        """_compute_llama3_parameters recomputed scalar by scalar."""
        from hf.common import rope_inv_freq
        sc = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
              "original_max_position_embeddings": 8192, "rope_type": "llama3"}
        got, _ = rope_inv_freq(500000.0, 128, sc, 131072, 10)
        for j, f in enumerate(got):
            base = 500000.0 ** (-2 * j / 128)
            wl = 2 * math.pi / base
            if wl < 8192 / 4:
                want = base
            elif wl > 8192 / 1:
                want = base / 8
            else:
                s = (8192 / wl - 1) / (4 - 1)
                want = (1 - s) * base / 8 + s * base
            self.assertAlmostEqual(f, want, delta=1e-15 * max(1.0, want))

    def test_projections_by_hand(self):
        """Each block's output projection and MLP from the stored inputs and the on-disk tensors,
        written out per family: nn.Linear is x W^T + b, GPT-2's Conv1D is x W + b ([in, out])."""
        # the activations written again here, from activations.py's formulas
        gelu_tanh = lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
        gelu_erf = np.vectorize(lambda x: 0.5 * x * (1 + math.erf(x / math.sqrt(2))))
        silu = lambda x: x / (1 + np.exp(-x))
        for fam in PRESETS:
            cfg, w, res = run(fam)
            r = resolve(cfg)
            out = res[-1]
            T = out["logits"].shape[1]
            for i in range(r.get("num_hidden_layers", r.get("n_layer"))):
                g = lambda n: out[f"layers.{i}.{n}"][0]
                premix = g("attention_head_outputs").reshape(T, -1)
                xn = g("mlp_norm_output")
                if fam == "gpt2":
                    p = f"h.{i}."
                    a = premix @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
                    neu = gelu_tanh(xn @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"])
                    m = neu @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
                elif fam == "gpt_neox":
                    p = f"gpt_neox.layers.{i}."
                    a = premix @ w[p + "attention.dense.weight"].T + w[p + "attention.dense.bias"]
                    neu = gelu_erf(xn @ w[p + "mlp.dense_h_to_4h.weight"].T + w[p + "mlp.dense_h_to_4h.bias"])
                    m = neu @ w[p + "mlp.dense_4h_to_h.weight"].T + w[p + "mlp.dense_4h_to_h.bias"]
                else:
                    p = f"model.layers.{i}."
                    a = premix @ w[p + "self_attn.o_proj.weight"].T
                    if f"layers.{i}.router_logits" in out:
                        neu = m = None
                    else:
                        act = gelu_tanh if fam.startswith("gemma") else silu
                        neu = act(xn @ w[p + "mlp.gate_proj.weight"].T) * (xn @ w[p + "mlp.up_proj.weight"].T)
                        m = neu @ w[p + "mlp.down_proj.weight"].T
                self.assertTrue(close(g("attention_output"), a), (fam, i))
                if neu is not None:
                    self.assertTrue(close(g("mlp_neurons"), neu), (fam, i))
                    self.assertTrue(close(g("mlp_output"), m), (fam, i))

    def test_expert_slots_by_hand(self):
        """Each routing slot = its weight times the selected expert's SwiGLU on that token."""
        silu = lambda x: x * (1 / (1 + np.exp(-x)))
        for fam, names, blk in (("mixtral", ("w1", "w3", "w2"), "block_sparse_moe."),
                                ("qwen3_moe", ("gate_proj", "up_proj", "down_proj"), "mlp.")):
            cfg, w, res = run(fam)
            out = res[-1]
            x = out["layers.0.mlp_norm_output"][0]
            idx, wt = out["layers.0.expert_indices"][0], out["layers.0.expert_weights"][0]
            slots = out["layers.0.expert_outputs"][0]
            for t in range(x.shape[0]):
                for j in range(idx.shape[1]):
                    p = f"model.layers.0.{blk}experts.{idx[t, j]}."
                    g, u, d = (w[p + n + ".weight"] for n in names)
                    want = wt[t, j] * (d @ (silu(g @ x[t]) * (u @ x[t])))
                    self.assertTrue(close(slots[t, j], want), (fam, t, j))
            self.assertTrue(close(slots.sum(1), out["layers.0.routed_output"][0]))

    def test_qwen_sliding_window_keys(self):
        """Qwen2/Qwen3: window only with use_sliding_window, on layers >= max_window_layers;
        Qwen3-MoE: on every layer; a listed sliding layer without use_sliding_window gets none."""
        c = dict(tiny_config("qwen2"), use_sliding_window=True, sliding_window=3, max_window_layers=1)
        self.assertEqual(layer_types(resolve(c)), ["full_attention", "sliding_attention"])
        w = {k: v.astype(np.float64) for k, v in tiny_weights(c, seed=2).items()}
        s = forward(c, w, [list(range(8))])[0]
        self.assertTrue(np.isinf(s["layers.1.attention_scores"][0, :, 5, 2]).all())
        self.assertTrue(np.isfinite(s["layers.0.attention_scores"][0, :, 5, 2]).all())
        m = dict(tiny_config("qwen3_moe"), use_sliding_window=True, sliding_window=3)
        self.assertEqual(layer_types(resolve(m)), ["sliding_attention"] * 3)
        q = dict(tiny_config("qwen3"), layer_types=["sliding_attention"] * 2, sliding_window=3)
        w = {k: v.astype(np.float64) for k, v in tiny_weights(q, seed=2).items()}
        s = forward(q, w, [list(range(8))])[0]
        self.assertTrue(np.isfinite(s["layers.1.attention_scores"][0, :, 5, 0]).all())

    def test_refusals(self):
        """Keys the references do not implement are errors naming the key."""
        c = dict(tiny_config("llama"), rope_scaling={"rope_type": "yarn", "factor": 2.0})
        w = {k: v.astype(np.float64) for k, v in tiny_weights(c).items()}
        with self.assertRaisesRegex(ValueError, "rope_scaling"):
            forward(c, w, [[1, 2]])
        with self.assertRaisesRegex(ValueError, "hidden_act"):
            forward(dict(c, rope_scaling=None, hidden_act="mish"), w, [[1, 2]])
        with self.assertRaisesRegex(ValueError, "architecture"):
            forward(dict(c, architectures=["BertModel"]), w, [[1, 2]])

    def test_linear_and_dynamic_rope(self):
        """_compute_linear_scaling_rope_parameters: inv_freq / factor. _compute_dynamic_ntk_parameters:
        base * ((factor * L / max_pos) - (factor - 1)) ** (dim / (dim - 2)) once L > max_pos."""
        from hf.common import rope_inv_freq
        d, base = 8, 10000.0
        plain = [base ** (-2 * j / d) for j in range(d // 2)]
        lin, _ = rope_inv_freq(base, d, {"type": "linear", "factor": 4.0}, 16, 5)
        self.assertTrue(close(lin, np.array(plain) / 4, 1e-15))
        short, _ = rope_inv_freq(base, d, {"rope_type": "dynamic", "factor": 2.0}, 16, 16)
        self.assertTrue(close(short, np.array(plain), 1e-15))
        grown = base * ((2.0 * 20 / 16) - 1.0) ** (d / (d - 2))
        long_, _ = rope_inv_freq(base, d, {"rope_type": "dynamic", "factor": 2.0}, 16, 20)
        self.assertTrue(close(long_, np.array([grown ** (-2 * j / d) for j in range(d // 2)]), 1e-14))

    def test_make_tiny_cli_gpt2_prefixed_f16(self):
        """The command line writes GPT-2's `transformer.`-prefixed layout; it reads back to the same
        logits as the unprefixed names with the same (F16-rounded) values."""
        import subprocess
        here = os.path.dirname(os.path.abspath(__file__))
        with tempfile.TemporaryDirectory() as d:
            subprocess.run([sys.executable, os.path.join(here, "hf", "make_tiny.py"), "gpt2", d,
                            "--dtype", "F16", "--shards", "2", "--gpt2-prefix", "transformer."], check=True)
            c, w = load_checkpoint(d)
            self.assertIn("transformer.h.0.attn.c_attn.weight", w)
            self.assertIn("transformer.h.0.attn.bias", w)  # the mask buffer rides along, as in the release
            plain = {k[len("transformer."):]: v for k, v in w.items()}
            a, b = forward(c, w, [[1, 2, 3]])[0], forward(c, plain, [[1, 2, 3]])[0]
            self.assertTrue(close(a["logits"], b["logits"], 0))
            ref = tiny_weights(c, 0, "F16", "transformer.")
            self.assertTrue(all(np.array_equal(w[k], ref[k].astype(np.float64)) for k in ref))

    def test_bf16_shards_round_trip(self):
        cfg = tiny_config("qwen3_moe")
        w = tiny_weights(cfg, seed=3, dtype="BF16")
        with tempfile.TemporaryDirectory() as d:
            write_model(d, cfg, w, "BF16", shards=3)
            c2, w2 = load_checkpoint(d)
            self.assertEqual(c2, cfg)
            self.assertEqual(set(w2), set(w))
            for k in w:
                self.assertTrue(np.array_equal(w2[k], w[k].astype(np.float64)), k)


if __name__ == "__main__":
    # CTest passes HARVEST_BINARY SCRATCH_DIR (tests/util.py's convention); these tests need neither.
    unittest.main(argv=sys.argv[:1] + [a for a in sys.argv[1:] if a.startswith("-")])
