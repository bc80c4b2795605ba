"""Self-tests of the float64 references of issue 22's families (tests/ref/deepseek_v3_ref.py,
gpt_oss_ref.py, olmoe_ref.py, phi3_ref.py, param_count.py); numpy only, torch as a second opinion
where transformers' code leans on a torch op (a few seconds, no harvest binary needed).

    /usr/bin/python3 tests/test_frontier_refs.py [harvest] [workdir]   # both arguments ignored

- FP8 (finegrained_fp8): random float8_e4m3fn bytes and block scales dequantize equal to a
  per-element formula built from the bit fields (math.ldexp), partial edge tiles included; a transposed
  scale grid gives other values (caught), a scale of the wrong shape, an FP8 weight without its scale
  and a scale without its weight are errors naming the tensor; quantize -> dequantize within half an
  e4m3 step; the e4m3 table's landmarks (448, 2^-6, 2^-9, NaN codes).
- The safetensors reader keeps F8_E4M3 and U8 tensors as their bytes and widens BF16 exactly.
- MXFP4 (mxfp4.convert_moe_packed_tensors): a hand-decoded block (0x2F -> -6, +1; 0x71 -> 0.5, 6;
  scale byte 128 -> x 2), the transpose to (E, in, out); a decoder with the nibbles swapped fails it;
  values on the FP4 grid round-trip exactly; mismatched scales are refused; the function's own torch
  ops replayed in torch on random bytes give the same values.
- Group-limited routing (DeepseekV3TopkRouter.get_topk_indices) equal to a brute-force enumeration of
  every choice of topk_group groups, and (same expert sets) to transformers' torch ops replayed in
  torch; plain top-k without the group limit differs on some token (the mutation is caught); the
  0.0 masked fill (not -inf) reproduced where biased scores are negative.
- MLA: the scores equal the absorbed form (q_nope W_UK) . c_kv + q_rot . k_rot, from the latent and
  kv_b_proj alone; RoPE's de-interleave equals torch's view/transpose/reshape; YaRN inv_freq and
  attention factor equal laguna_ref's independent implementation, and DeepSeek's softmax scale
  carries mscale(factor, mscale_all_dim)^2.
- Sinks: kept probabilities + the sink's share sum to 1 per row; the attention equals an explicit loop
  over heads, queries and keys; zeroed sinks change it (caught).
- Forward passes of tiny random checkpoints of all four families (DeepSeek-V3 from FP8 bytes, gpt-oss
  from MXFP4 blocks; both also from a checkpoint folder written in the published dtypes, F8_E4M3 /
  U8, giving the in-memory values, and a folder missing one weight_scale_inv refused naming it):
  residual identities, probability rows, routing identities, logits = head(norm).
  OLMoE's q/k norms over the whole projection (a per-head norm differs), softmax top-k weights not
  renormalised; Phi-3's fused qkv/gate_up split, longrope switching to long_factor past
  original_max_position_embeddings with attention factor sqrt(1 + ln s / ln L0).
- Parameter counts: Kimi-K2-Instruct (tests/ref/configs) plus its FP8 scales, routing-bias buffers and
  inv_freq tensors equal the release checkpoint's tensor total (1,026,470,731,056), its bytes as
  published 958.49 GiB; gpt-oss-20b (tests/ref/configs) equals a bf16 re-save's total (20,914,757,184),
  the MXFP4 release's tensor total (11,956,805,184) and 12.82 GiB; DeepSeek-R1-0528's file carries
  DeepSeek-V3's architecture values; every release within its model card's rounding; block_bytes
  summing to the published size, and rank_bytes for cuts into stages x expert shards covering each
  stage's experts once and the rest once a shard, shards within one expert a block of each other.
"""
import itertools
import json
import math
import os
import sys
import unittest

import numpy as np

REF = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref")
sys.path.insert(0, REF)
import deepseek_v3_ref as ds  # noqa: E402
import gpt_oss_ref as go  # noqa: E402
import olmoe_ref as om  # noqa: E402
import param_count as pc  # noqa: E402
import phi3_ref as p3  # noqa: E402

try:
    import torch
except ImportError:  # the second opinion is optional; /usr/bin/python3 on Debian 12 has it
    torch = None


def load_kimi():
    with open(os.path.join(REF, "configs", "Kimi-K2-Instruct.json")) as f:
        return json.load(f)


def e4m3_formula(b):
    s, e, m = b >> 7, (b >> 3) & 15, b & 7
    v = math.ldexp(m, -9) if e == 0 else math.ldexp(8 + m, e - 10)
    return -v if s else v


class FP8(unittest.TestCase):
    def test_table_landmarks(self):
        self.assertEqual(ds.E4M3[0x7E], 448.0)
        self.assertEqual(ds.E4M3[0x08], 2.0 ** -6)
        self.assertEqual(ds.E4M3[0x01], 2.0 ** -9)
        self.assertEqual(ds.E4M3[0xB8], -1.0)
        self.assertTrue(np.isnan(ds.E4M3[0x7F]) and np.isnan(ds.E4M3[0xFF]))
        self.assertEqual(int(np.isnan(ds.E4M3).sum()), 2)

    def test_dequant_equals_per_element_formula(self):
        rng = np.random.default_rng(3)
        for R, C, blk in [(24, 40, (8, 16)), (21, 13, (8, 8)), (5, 7, (128, 128))]:
            q = rng.integers(0, 256, (R, C)).astype(np.uint8)
            q[(q & 0x7F) == 0x7F] = 0x10  # no NaN codes
            s = rng.uniform(0.01, 3.0, (-(-R // blk[0]), -(-C // blk[1]))).astype(np.float32)
            got = ds.fp8_dequantize(q, s, blk)
            for r in range(R):
                for c in range(C):
                    want = e4m3_formula(int(q[r, c])) * float(s[r // blk[0], c // blk[1]])
                    self.assertEqual(got[r, c], want, (R, C, r, c))

    def test_transposed_scale_is_caught(self):
        rng = np.random.default_rng(4)
        q = rng.integers(0, 0x7E, (24, 24)).astype(np.uint8)
        s = rng.uniform(0.1, 2.0, (3, 3)).astype(np.float32)
        self.assertFalse(np.allclose(ds.fp8_dequantize(q, s, (8, 8)), ds.fp8_dequantize(q, s.T, (8, 8))))
        with self.assertRaisesRegex(ValueError, r"layers\.0\.q_a_proj\.weight_scale_inv: shape \[2, 3\]"):
            ds.fp8_dequantize(q[:, :16], s[:2], (8, 8), "layers.0.q_a_proj.weight")  # (16 x 24)^T grid

    def test_checkpoint_errors_name_the_tensor(self):
        cfg = {"quantization_config": {"quant_method": "fp8", "weight_block_size": [8, 8]}}
        q = np.zeros((8, 8), np.uint8)
        with self.assertRaisesRegex(ValueError, r"a\.weight: an FP8 weight without a\.weight_scale_inv"):
            ds.dequantize_checkpoint(cfg, {"a.weight": q})
        with self.assertRaisesRegex(ValueError, r"b\.weight_scale_inv: a scale without its weight"):
            ds.dequantize_checkpoint(cfg, {"b.weight_scale_inv": np.ones((1, 1), np.float32)})
        with self.assertRaisesRegex(ValueError, r"quant_method.*'awq'"):
            ds.dequantize_checkpoint({"quantization_config": {"quant_method": "awq"}}, {})

    def test_quantize_round_trip(self):
        rng = np.random.default_rng(5)
        w = rng.standard_normal((20, 36)) * np.exp(rng.uniform(-6, 2, (20, 1)))
        q, s = ds.fp8_quantize(w, (8, 16))
        self.assertEqual(s.shape, (3, 3))
        d = ds.fp8_dequantize(q, s, (8, 16))
        step = np.repeat(np.repeat(s.astype(np.float64), 8, 0), 16, 1)[:20, :36] * 2.0 ** -10
        self.assertTrue(np.all(np.abs(d - w) <= np.maximum(np.abs(w) * 2.0 ** -4, step) * (1 + 1e-12)))
        # the round-trip error is not zero: the test above is about rounding, not about identity
        self.assertGreater(np.abs(d - w).max(), 0)


def write_safetensors(path, tensors, dtype_of):
    """A minimal safetensors writer: name -> array, dtype_of(name, array) -> the header's dtype."""
    header, blob = {}, b""
    for name, a in tensors.items():
        a = np.ascontiguousarray(a)
        header[name] = {"dtype": dtype_of(name, a), "shape": list(a.shape),
                        "data_offsets": [len(blob), len(blob) + a.nbytes]}
        blob += a.tobytes()
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little") + h + blob)


def write_checkpoint(d, cfg, raw, dtype_of):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)
    write_safetensors(os.path.join(d, "model.safetensors"), raw, dtype_of)


class Reader(unittest.TestCase):
    def test_published_dtypes(self):
        """read_safetensors_raw keeps F8_E4M3 and U8 as their bytes, widens BF16 exactly."""
        import tempfile
        t = {"w": ("F8_E4M3", np.array([[0x7E, 0x81], [0x38, 0x00]], np.uint8)),
             "b": ("U8", np.arange(6, dtype=np.uint8).reshape(1, 2, 3)),
             "n": ("BF16", np.array([0x3F80, 0xC040], np.uint16)),
             "s": ("F32", np.array([[0.5]], np.float32))}
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "model.safetensors")
            write_safetensors(path, {n: a for n, (_, a) in t.items()}, lambda n, a: t[n][0])
            got = ds.read_safetensors_raw(path)
        self.assertEqual(got["w"].dtype, np.uint8)
        np.testing.assert_array_equal(ds.E4M3[got["w"]], [[448.0, -2.0 ** -9], [1.0, 0.0]])
        np.testing.assert_array_equal(got["b"], t["b"][1])
        np.testing.assert_array_equal(got["n"], [1.0, -3.0])
        np.testing.assert_array_equal(got["s"], [[0.5]])


class MXFP4(unittest.TestCase):
    def example(self):
        blocks = np.zeros((1, 1, 1, 16), np.uint8)
        blocks[0, 0, 0, 0], blocks[0, 0, 0, 1] = 0x2F, 0x71
        return blocks, np.full((1, 1, 1), 128, np.uint8)

    def test_hand_decoded_block(self):
        out = go.mxfp4_dequantize(*self.example())
        self.assertEqual(out.shape, (1, 32, 1))
        want = np.zeros(32)
        want[:4] = [-12.0, 2.0, 1.0, 12.0]  # (-6, +1, 0.5, 6) x 2^(128 - 127)
        np.testing.assert_array_equal(out[0, :, 0], want)

    def test_swapped_nibbles_are_caught(self):
        blocks, scales = self.example()
        lut = np.array(go.FP4_VALUES)
        swapped = np.stack([lut[blocks >> 4], lut[blocks & 15]], -1).reshape(1, 1, 32) * 2.0
        self.assertFalse(np.array_equal(go.mxfp4_dequantize(blocks, scales)[0, :, 0], swapped[0, 0]))

    def test_layout_and_round_trip(self):
        rng = np.random.default_rng(6)
        E, D, I2 = 3, 64, 10
        e = rng.integers(-3, 3, (E, I2, D // 32))
        codes = rng.integers(0, 16, (E, I2, D))
        vals = np.array(go.FP4_VALUES)[codes] * np.ldexp(1.0, np.repeat(e, 32, -1))
        wt = np.swapaxes(vals, 1, 2)  # (E, D, 2I) as GptOssExperts holds gate_up_proj
        blocks, scales = go.mxfp4_quantize(wt)
        self.assertEqual((blocks.shape, scales.shape), ((E, I2, D // 32, 16), (E, I2, D // 32)))
        np.testing.assert_array_equal(go.mxfp4_dequantize(blocks, scales), wt)
        with self.assertRaisesRegex(ValueError, "x_scales: shape"):
            go.mxfp4_dequantize(blocks, scales[:, :, :1], "x")
        with self.assertRaisesRegex(ValueError, "without"):
            go.dequantize_checkpoint({}, {"m.experts.down_proj_blocks": blocks})


class MXFP4Torch(unittest.TestCase):
    @unittest.skipIf(torch is None, "torch not importable")
    def test_convert_moe_packed_tensors_replayed_in_torch(self):
        """mxfp4.convert_moe_packed_tensors' own torch ops (lut indexing, ldexp, reshape, transpose)
        on random blocks and scale bytes, in float32: equal to the reference."""
        rng = np.random.default_rng(13)
        blocks = rng.integers(0, 256, (3, 6, 4, 16)).astype(np.uint8)
        scales = rng.integers(110, 140, (3, 6, 4)).astype(np.uint8)
        b, sc = torch.tensor(blocks), torch.tensor(scales).to(torch.int32) - 127
        lut = torch.tensor(go.FP4_VALUES, dtype=torch.float32)
        *prefix, G, B = b.shape
        rows = b.reshape(-1, B)
        out = torch.empty(rows.shape[0], B * 2, dtype=torch.float32)
        out[:, 0::2] = lut[(rows & 0x0F).to(torch.long)]
        out[:, 1::2] = lut[(rows >> 4).to(torch.long)]
        out = torch.ldexp(out, sc.reshape(-1, 1))
        out = out.reshape(*prefix, G, B * 2).view(*prefix, G * B * 2).transpose(1, 2).contiguous()
        np.testing.assert_array_equal(go.mxfp4_dequantize(blocks, scales), out.numpy().astype(np.float64))


def brute_route(s, bias, G, TG, k):
    """Every choice of TG groups; the best total of group scores (sum of each group's top 2 biased
    scores) wins; outside it the biased scores count 0.0; the k largest."""
    E = s.size
    b = s + bias
    gs = [np.sort(b[g * E // G:(g + 1) * E // G])[-2:].sum() for g in range(G)]
    best = max(itertools.combinations(range(G), TG), key=lambda c: sum(gs[g] for g in c))
    cand = np.array([b[e] if e * G // E in best else 0.0 for e in range(E)])
    return sorted(sorted(range(E), key=lambda e: -cand[e])[:k])


class Routing(unittest.TestCase):
    def test_group_limited_equals_brute_force(self):
        rng = np.random.default_rng(7)
        T, E, G, TG, k = 200, 16, 4, 2, 4
        s = 1 / (1 + np.exp(-rng.standard_normal((T, E))))
        bias = rng.normal(0, 0.3, E)
        idx, gs, gmask = ds.group_limited_topk(s, bias, G, TG, k)
        self.assertTrue(all(sorted(idx[t]) == brute_route(s[t], bias, G, TG, k) for t in range(T)))
        self.assertTrue(np.all(gmask.sum(-1) == TG))
        plain = np.argsort(-(s + bias), axis=-1)[:, :k]
        self.assertTrue(any(set(plain[t]) != set(idx[t]) for t in range(T)))  # the group limit matters
        chosen = np.take_along_axis(s + bias, idx, -1)
        self.assertTrue(np.all(np.diff(chosen, axis=-1) <= 0))  # slots in descending biased score

    def test_masked_fill_zero_not_minus_inf(self):
        s = np.full((1, 8), 0.1)
        bias = np.array([-2.0, -2.0, -1.95, -1.9, 0.5, 0.4, -0.6, -0.7])  # groups of 2, 2 kept
        idx, _, gmask = ds.group_limited_topk(s, bias, 4, 2, 3)
        self.assertEqual(gmask[0].tolist(), [False, False, True, True])
        # experts 4 and 5 first; then a 0.0-filled expert of a dropped group (lowest index, 0) beats
        # expert 6 of a kept group (biased -0.5): transformers' masked_fill(~mask, 0.0). With -inf
        # (DeepSeek's own inference/model.py) the third slot would be expert 6.
        self.assertEqual(idx[0].tolist(), [4, 5, 0])

    @unittest.skipIf(torch is None, "torch not importable")
    def test_torch_second_opinion(self):
        rng = np.random.default_rng(8)
        T, E, G, TG, k = 64, 32, 8, 3, 6
        s = 1 / (1 + np.exp(-rng.standard_normal((T, E))))
        bias = rng.normal(0, 0.2, E)
        sc = torch.tensor(s) + torch.tensor(bias).unsqueeze(0)  # get_topk_indices, line by line
        gsc = sc.view(-1, G, E // G).topk(2, dim=-1)[0].sum(dim=-1)
        gidx = torch.topk(gsc, k=TG, dim=-1, sorted=False)[1]
        gm = torch.zeros_like(gsc).scatter_(1, gidx, 1)
        smask = gm.unsqueeze(-1).expand(-1, G, E // G).reshape(-1, E)
        tidx = torch.topk(sc.masked_fill(~smask.bool(), 0.0), k=k, dim=-1, sorted=False)[1].numpy()
        idx = ds.group_limited_topk(s, bias, G, TG, k)[0]
        self.assertTrue(all(set(tidx[t]) == set(idx[t]) for t in range(T)))
        z = rng.standard_normal((T, E))
        np.testing.assert_array_equal(torch.topk(torch.tensor(z), k).indices.numpy(),
                                      np.argsort(-z, axis=-1, kind="stable")[:, :k])


def tiny_deepseek():
    return {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "vocab_size": 50,
            "hidden_size": 32, "intermediate_size": 24, "moe_intermediate_size": 8, "num_hidden_layers": 3,
            "num_attention_heads": 4, "num_key_value_heads": 4, "q_lora_rank": 16, "kv_lora_rank": 8,
            "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 8, "first_k_dense_replace": 1,
            "n_routed_experts": 8, "num_experts_per_tok": 3, "n_group": 4, "topk_group": 2,
            "n_shared_experts": 1, "norm_topk_prob": True, "routed_scaling_factor": 2.5,
            "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "max_position_embeddings": 64,
            "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16,
                             "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0},
            "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [8, 8]},
            "tie_word_embeddings": False, "attention_bias": False}


def deepseek_tensors(cfg, rng):
    D, H, V = cfg["hidden_size"], cfg["num_attention_heads"], cfg["vocab_size"]
    ql, kvl, dn, dr, dv = (cfg[k] for k in ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
                                            "qk_rope_head_dim", "v_head_dim"))
    r = lambda *s: rng.standard_normal(s) * 0.3
    n = lambda d: 1 + rng.standard_normal(d) * 0.1
    w = {"model.embed_tokens.weight": r(V, D), "lm_head.weight": r(V, D), "model.norm.weight": n(D)}
    mlp = lambda pre, I: w.update({pre + "gate_proj.weight": r(I, D), pre + "up_proj.weight": r(I, D),
                                   pre + "down_proj.weight": r(D, I)})
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        a = p + "self_attn."
        w.update({p + "input_layernorm.weight": n(D), p + "post_attention_layernorm.weight": n(D),
                  a + "q_a_proj.weight": r(ql, D), a + "q_a_layernorm.weight": n(ql),
                  a + "q_b_proj.weight": r(H * (dn + dr), ql), a + "kv_a_proj_with_mqa.weight": r(kvl + dr, D),
                  a + "kv_a_layernorm.weight": n(kvl), a + "kv_b_proj.weight": r(H * (dn + dv), kvl),
                  a + "o_proj.weight": r(D, H * dv)})
        if i < cfg["first_k_dense_replace"]:
            mlp(p + "mlp.", cfg["intermediate_size"])
            continue
        E = cfg["n_routed_experts"]
        w[p + "mlp.gate.weight"] = r(E, D)
        w[p + "mlp.gate.e_score_correction_bias"] = rng.normal(0, 0.1, E)
        for e in range(E):
            mlp(f"{p}mlp.experts.{e}.", cfg["moe_intermediate_size"])
        mlp(p + "mlp.shared_experts.", cfg["moe_intermediate_size"] * cfg["n_shared_experts"])
    return w


def publish_fp8(cfg, w):
    """The release layout: every nn.Linear weight but lm_head as FP8 bytes + weight_scale_inv."""
    blk = tuple(cfg["quantization_config"]["weight_block_size"])
    raw = {}
    for name, v in w.items():
        if name.endswith(".weight") and v.ndim == 2 and name not in ("lm_head.weight", "model.embed_tokens.weight") \
                and not name.endswith("mlp.gate.weight"):
            raw[name], raw[name + "_scale_inv"] = ds.fp8_quantize(v, blk)
        else:
            raw[name] = v.astype(np.float32)
    return raw


def check_residual(tc, out, L, tol=1e-12):
    for i in range(L):
        g = lambda n: out[f"layers.{i}.{n}"]
        np.testing.assert_allclose(g("layer_input") + g("attention_output"), g("layer_mid"), atol=tol)
        np.testing.assert_allclose(g("layer_mid") + g("mlp_output"), g("layer_output"), atol=tol)
        if i + 1 < L:
            np.testing.assert_array_equal(g("layer_output"), out[f"layers.{i + 1}.layer_input"])


class DeepSeek(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cfg = tiny_deepseek()
        raw = publish_fp8(cls.cfg, deepseek_tensors(cls.cfg, np.random.default_rng(9)))
        cls.w = ds.dequantize_checkpoint(cls.cfg, raw)
        cls.ref = ds.DeepseekV3Ref(cls.cfg, cls.w)
        cls.ids = [3, 17, 4, 44, 9, 1, 30, 2, 8, 11]
        cls.out = cls.ref.forward(cls.ids)

    def test_identities(self):
        out, L = self.out, self.cfg["num_hidden_layers"]
        check_residual(self, out, L)
        self.assertIn("layers.0.mlp_neurons", out)
        for i in range(1, L):
            g = lambda n: out[f"layers.{i}.{n}"][0]
            np.testing.assert_allclose(g("routed_output") + g("shared_expert_output"), g("mlp_output"), atol=1e-12)
            np.testing.assert_allclose(g("expert_outputs").sum(1), g("routed_output"), atol=1e-12)
            np.testing.assert_allclose(g("expert_weights").sum(-1), 2.5, atol=1e-12)  # normed x factor
            np.testing.assert_allclose(g("router_scores"), 1 / (1 + np.exp(-g("router_logits"))), atol=1e-15)
            P = g("attention_probabilities")
            np.testing.assert_allclose(P.sum(-1), 1, atol=1e-12)
            future = np.triu(np.ones(P.shape[1:], bool), 1)
            self.assertTrue(np.all(P[:, future] == 0))
        fin = out["final_norm_output"][0]
        np.testing.assert_allclose(fin @ self.w["lm_head.weight"].T, out["logits"][0], atol=1e-12)

    def test_mla_absorbed_equals_naive(self):
        c, H, dn, dv, T = self.cfg, 4, 8, 8, len(self.ids)
        for i in range(c["num_hidden_layers"]):
            g = lambda n: self.out[f"layers.{i}.{n}"][0]
            Wkv = self.w[f"model.layers.{i}.self_attn.kv_b_proj.weight"].reshape(H, dn + dv, c["kv_lora_rank"])
            Wuk = Wkv[:, :dn]  # (H, dn, kv_lora)
            q, k, lat = g("attention_queries"), g("attention_keys"), g("attention_kv_latent_norm")
            q_abs = np.einsum("htd,hdc->htc", q[..., :dn], Wuk)  # absorbed: queries into the latent
            S = np.einsum("htc,sc->hts", q_abs, lat) + q[..., dn:] @ k[0, :, dn:].T
            S *= self.ref.scaling
            allowed = np.tril(np.ones((T, T), bool))
            np.testing.assert_allclose(g("attention_scores")[:, allowed], S[:, allowed], rtol=1e-11, atol=1e-11)
            np.testing.assert_allclose(g("attention_values"), np.einsum("hdc,sc->hsd", Wkv[:, dn:], lat), atol=1e-12)

    def test_rope_pairs_rotate_as_complex_numbers(self):
        """rope_interleave: dims (2i, 2i + 1) of the rotary part are one complex number turned by
        position * inv_freq[i] (DeepSeek's own apply_rotary_emb, view_as_complex), times the YaRN
        attention factor; transformers stores the result as [real parts, imaginary parts]."""
        T, dn = len(self.ids), 8
        ang = np.arange(T)[:, None] * self.ref.inv[None, :]
        turn = np.exp(1j * ang) * self.ref.A
        for name in ("queries", "keys"):
            pre = self.out[f"layers.1.attention_{name}_pre_rope"][0][..., dn:]
            got = self.out[f"layers.1.attention_{name}"][0][..., dn:]
            z = (pre[..., 0::2] + 1j * pre[..., 1::2]) * turn
            np.testing.assert_allclose(got, np.concatenate([z.real, z.imag], -1), atol=1e-12)

    def test_softmax_scale_and_yarn(self):
        m = 0.1 * math.log(4.0) + 1.0
        self.assertAlmostEqual(self.ref.scaling, 12 ** -0.5 * m * m, places=15)
        import laguna_ref as lg
        for rp, dim in [(dict(self.cfg["rope_scaling"], rope_theta=10000.0, rope_type="yarn"), 4),
                        (dict(load_kimi()["rope_scaling"],
                              rope_theta=50000.0, rope_type="yarn"), 64),
                        ({"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0, "beta_fast": 32.0,
                          "beta_slow": 1.0, "original_max_position_embeddings": 4096, "truncate": False}, 64)]:
            a = ds.yarn_inv_freq(rp, dim, 131072)
            b = lg.inv_freq(dict(rp, partial_rotary_factor=1.0), dim, rp.get("truncate", True))
            np.testing.assert_allclose(a[0], b[0], rtol=1e-15)
            self.assertAlmostEqual(a[1], b[1], places=15)

    @unittest.skipIf(torch is None, "torch not importable")
    def test_deinterleave_is_transformers_view(self):
        x = np.arange(2 * 3 * 5 * 8, dtype=np.float64).reshape(2, 3, 5, 8)
        t = torch.tensor(x)
        b, h, s, d = t.shape
        want = t.view(b, h, s, d // 2, 2).transpose(4, 3).reshape(b, h, s, d).numpy()
        np.testing.assert_array_equal(ds.deinterleave(x), want)

    def test_from_checkpoint_folder(self):
        """The published layout on disk (F8_E4M3 weights, F32 scales) gives the same values."""
        import tempfile
        raw = publish_fp8(self.cfg, deepseek_tensors(self.cfg, np.random.default_rng(9)))
        fp8 = lambda n, a: "F8_E4M3" if a.dtype == np.uint8 else "F32"
        with tempfile.TemporaryDirectory() as d:
            write_checkpoint(d, self.cfg, raw, fp8)
            out = ds.load(d).forward(self.ids)
            raw.pop("model.layers.1.mlp.experts.3.up_proj.weight_scale_inv")
            write_checkpoint(d, self.cfg, raw, fp8)
            with self.assertRaisesRegex(ValueError, r"model\.layers\.1\.mlp\.experts\.3\.up_proj\.weight: an FP8"):
                ds.load(d)
        self.assertEqual(out.keys(), self.out.keys())
        for k in out:
            np.testing.assert_array_equal(out[k], self.out[k], k)

    def test_bad_config(self):
        with self.assertRaisesRegex(ValueError, "rope_type 'dynamic'"):
            ds.DeepseekV3Ref(dict(self.cfg, rope_scaling={"type": "dynamic", "factor": 2.0}), self.w)


def tiny_gpt_oss():
    return {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "vocab_size": 40, "hidden_size": 32,
            "intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "head_dim": 8, "num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": 3,
            "layer_types": ["sliding_attention", "full_attention"], "rms_norm_eps": 1e-5, "swiglu_limit": 7.0,
            "attention_bias": True, "max_position_embeddings": 64, "rope_theta": 150000.0,
            "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "beta_fast": 32.0, "beta_slow": 1.0,
                             "original_max_position_embeddings": 16, "truncate": False},
            "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": [
                "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}}


def gpt_oss_raw(cfg, rng):
    D, H, KV, hd, E, I, V = (cfg[k] for k in ("hidden_size", "num_attention_heads", "num_key_value_heads",
                                              "head_dim", "num_local_experts", "intermediate_size", "vocab_size"))
    r = lambda *s: rng.standard_normal(s) * 0.3
    raw = {"model.embed_tokens.weight": r(V, D), "lm_head.weight": r(V, D), "model.norm.weight": 1 + r(D) / 3}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        a, m = p + "self_attn.", p + "mlp."
        raw.update({p + "input_layernorm.weight": 1 + r(D) / 3, p + "post_attention_layernorm.weight": 1 + r(D) / 3,
                    a + "q_proj.weight": r(H * hd, D), a + "q_proj.bias": r(H * hd),
                    a + "k_proj.weight": r(KV * hd, D), a + "k_proj.bias": r(KV * hd),
                    a + "v_proj.weight": r(KV * hd, D), a + "v_proj.bias": r(KV * hd),
                    a + "o_proj.weight": r(D, H * hd), a + "o_proj.bias": r(D), a + "sinks": r(H) * 3,
                    m + "router.weight": r(E, D), m + "router.bias": r(E),
                    m + "experts.gate_up_proj_bias": r(E, 2 * I), m + "experts.down_proj_bias": r(E, D)})
        gu = go.mxfp4_quantize(r(E, D, 2 * I) * 4)  # * 4: gates past the clamp limit
        raw[m + "experts.gate_up_proj_blocks"], raw[m + "experts.gate_up_proj_scales"] = gu
        raw[m + "experts.down_proj_blocks"], raw[m + "experts.down_proj_scales"] = go.mxfp4_quantize(r(E, I, D))
    return raw


class GptOss(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cfg = tiny_gpt_oss()
        cls.w = go.dequantize_checkpoint(cls.cfg, gpt_oss_raw(cls.cfg, np.random.default_rng(10)))
        cls.ref = go.GptOssRef(cls.cfg, cls.w)
        cls.ids = [5, 1, 33, 7, 7, 20, 39, 0]
        cls.out = cls.ref.forward(cls.ids)

    def test_shapes_and_identities(self):
        self.assertEqual(self.w["model.layers.0.mlp.experts.gate_up_proj"].shape, (4, 32, 64))
        self.assertEqual(self.w["model.layers.0.mlp.experts.down_proj"].shape, (4, 32, 32))
        check_residual(self, self.out, 2)
        for i in range(2):
            g = lambda n: self.out[f"layers.{i}.{n}"][0]
            kept, sink = g("attention_probabilities"), g("attention_sink_probabilities")
            np.testing.assert_allclose(kept.sum(-1) + sink, 1, atol=1e-12)
            self.assertTrue(np.all(g("attention_sink_probabilities") > 0))
            z, idx, wt = g("router_logits"), g("expert_indices"), g("expert_weights")
            top = np.take_along_axis(z, idx, -1)
            self.assertTrue(np.all(np.diff(top, axis=-1) <= 0))  # torch.topk order: descending
            unchosen = np.ones(z.shape, bool)
            np.put_along_axis(unchosen, idx, False, -1)
            self.assertTrue(np.all(top.min(-1)[:, None] >= np.where(unchosen, z, -np.inf)))  # the k largest
            np.testing.assert_allclose(wt, np.exp(top) / np.exp(top).sum(-1, keepdims=True), atol=1e-12)
            np.testing.assert_allclose(g("expert_outputs").sum(1), g("mlp_output"), atol=1e-12)
            self.assertGreater(np.abs(g("expert_gate")).max(), 7.0)  # the clamp is exercised
        P0 = self.out["layers.0.attention_probabilities"][0]
        self.assertTrue(np.all(P0[:, 5, :3] == 0) and np.all(P0[:, 5, 3:6] > 0))  # window 3 on layer 0

    def test_sinks_against_explicit_loop(self):
        T, H, hd = len(self.ids), 4, 8
        for i in range(2):
            g = lambda n: self.out[f"layers.{i}.{n}"][0]
            q, k, v, sinks = g("attention_queries"), g("attention_keys"), g("attention_values"), g("attention_sinks")
            win = 3 if i == 0 else None
            O = np.zeros((T, H, hd))
            for h in range(H):
                for t in range(T):
                    keys = [s for s in range(T) if s <= t and (win is None or s > t - win)]
                    logit = [float(q[h, t] @ k[h // 2, s]) / math.sqrt(hd) for s in keys]
                    den = sum(math.exp(x) for x in logit) + math.exp(sinks[h])
                    O[t, h] = sum(math.exp(x) / den * v[h // 2, s] for x, s in zip(logit, keys))
            np.testing.assert_allclose(g("attention_head_outputs"), O, atol=1e-12)
        w0 = dict(self.w, **{"model.layers.1.self_attn.sinks": np.zeros(4)})
        nosink = go.GptOssRef(self.cfg, w0).forward(self.ids)
        self.assertFalse(np.allclose(nosink["logits"], self.out["logits"]))

    def test_from_checkpoint_folder(self):
        import tempfile
        raw = {k: v if v.dtype == np.uint8 else v.astype(np.float32)
               for k, v in gpt_oss_raw(self.cfg, np.random.default_rng(10)).items()}
        with tempfile.TemporaryDirectory() as d:
            write_checkpoint(d, self.cfg, raw, lambda n, a: "U8" if a.dtype == np.uint8 else "F32")
            out = go.load(d).forward(self.ids)
        np.testing.assert_allclose(out["logits"], self.out["logits"], rtol=1e-6, atol=1e-6)  # weights as F32
        np.testing.assert_array_equal(out["layers.1.expert_indices"], self.out["layers.1.expert_indices"])

    def test_swiglu_against_formula(self):
        x = self.out["layers.1.mlp_input"][0][2]
        e = int(self.out["layers.1.expert_indices"][0][2][0])
        W = self.w["model.layers.1.mlp.experts.gate_up_proj"][e]
        b = self.w["model.layers.1.mlp.experts.gate_up_proj_bias"][e]
        gu = x @ W + b
        neu = []
        for j in range(32):
            gt, up = min(gu[2 * j], 7.0), max(-7.0, min(gu[2 * j + 1], 7.0))
            neu.append((up + 1) * gt / (1 + math.exp(-1.702 * gt)))
        np.testing.assert_allclose(self.out["layers.1.expert_neurons"][0][2][0], neu, atol=1e-12)


class Olmoe(unittest.TestCase):
    def setUp(self):
        rng = np.random.default_rng(11)
        self.cfg = {"architectures": ["OlmoeForCausalLM"], "vocab_size": 30, "hidden_size": 16, "intermediate_size": 8,
                    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "num_experts": 6,
                    "num_experts_per_tok": 2, "norm_topk_prob": False, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
                    "clip_qkv": None, "tie_word_embeddings": False}
        D, I, E = 16, 8, 6
        r = lambda *s: rng.standard_normal(s) * 0.4
        w = {"model.embed_tokens.weight": r(30, D), "lm_head.weight": r(30, D), "model.norm.weight": 1 + r(D)}
        for i in range(2):
            p = f"model.layers.{i}."
            w.update({p + "input_layernorm.weight": 1 + r(D), p + "post_attention_layernorm.weight": 1 + r(D),
                      p + "self_attn.q_proj.weight": r(D, D), p + "self_attn.k_proj.weight": r(8, D),
                      p + "self_attn.v_proj.weight": r(8, D), p + "self_attn.o_proj.weight": r(D, D),
                      p + "self_attn.q_norm.weight": 1 + r(D), p + "self_attn.k_norm.weight": 1 + r(8),
                      p + "mlp.gate.weight": r(E, D)})
            for e in range(E):
                x = f"{p}mlp.experts.{e}."
                w.update({x + "gate_proj.weight": r(I, D), x + "up_proj.weight": r(I, D),
                          x + "down_proj.weight": r(D, I)})
        self.w = w
        self.out = om.OlmoeRef(self.cfg, w).forward([1, 5, 9, 2, 29])

    def test_whole_projection_norm_and_routing(self):
        check_residual(self, self.out, 2)
        g = lambda n: self.out[f"layers.0.{n}"][0]
        qp, q = g("attention_queries_pre_norm"), g("attention_queries_pre_rope")
        qw = self.w["model.layers.0.self_attn.q_norm.weight"]
        whole = qp / np.sqrt((qp ** 2).mean(-1, keepdims=True) + 1e-5) * qw
        np.testing.assert_allclose(q.transpose(1, 0, 2).reshape(5, 16), whole, atol=1e-12)
        per_head = qp.reshape(5, 4, 4) / np.sqrt((qp.reshape(5, 4, 4) ** 2).mean(-1, keepdims=True) + 1e-5)
        self.assertFalse(np.allclose(per_head.reshape(5, 16) * qw, whole))
        P, wt, idx = g("router_probabilities"), g("expert_weights"), g("expert_indices")
        np.testing.assert_allclose(P.sum(-1), 1, atol=1e-12)
        np.testing.assert_array_equal(wt, np.take_along_axis(P, idx, -1))  # not renormalised
        self.assertTrue(np.all(wt.sum(-1) < 1))

    def test_clip_qkv(self):
        out = om.OlmoeRef(dict(self.cfg, clip_qkv=0.5), self.w).forward([1, 5, 9, 2, 29])
        self.assertLessEqual(np.abs(out["layers.0.attention_values"]).max(), 0.5)
        self.assertFalse(np.allclose(out["logits"], self.out["logits"]))


class Phi3(unittest.TestCase):
    def setUp(self):
        rng = np.random.default_rng(12)
        D, H, KV, hd, I = 16, 4, 2, 4, 12
        self.cfg = {"architectures": ["Phi3ForCausalLM"], "vocab_size": 25, "hidden_size": D, "intermediate_size": I,
                    "num_hidden_layers": 2, "num_attention_heads": H, "num_key_value_heads": KV, "rms_norm_eps": 1e-5,
                    "rope_theta": 10000.0, "max_position_embeddings": 32, "original_max_position_embeddings": 8,
                    "rope_scaling": {"type": "longrope", "short_factor": [1.0, 1.5], "long_factor": [3.0, 7.0]},
                    "sliding_window": None, "tie_word_embeddings": False}
        r = lambda *s: rng.standard_normal(s) * 0.4
        w = {"model.embed_tokens.weight": r(25, D), "lm_head.weight": r(25, D), "model.norm.weight": 1 + r(D)}
        for i in range(2):
            p = f"model.layers.{i}."
            w.update({p + "input_layernorm.weight": 1 + r(D), p + "post_attention_layernorm.weight": 1 + r(D),
                      p + "self_attn.qkv_proj.weight": r((H + 2 * KV) * hd, D),
                      p + "self_attn.o_proj.weight": r(D, H * hd),
                      p + "mlp.gate_up_proj.weight": r(2 * I, D), p + "mlp.down_proj.weight": r(D, I)})
        self.w = w

    def test_longrope_switch(self):
        inv_s, A, which_s = p3.longrope_inv_freq(self.cfg, 4, 8)
        inv_l, _, which_l = p3.longrope_inv_freq(self.cfg, 4, 9)
        self.assertEqual((which_s, which_l), ("short_factor", "long_factor"))
        np.testing.assert_allclose(inv_s, 1 / (np.array([1.0, 1.5]) * 10000.0 ** np.array([0, 0.5])), rtol=1e-15)
        np.testing.assert_allclose(inv_l, 1 / (np.array([3.0, 7.0]) * 10000.0 ** np.array([0, 0.5])), rtol=1e-15)
        self.assertAlmostEqual(A, math.sqrt(1 + math.log(4) / math.log(8)), places=15)
        ref = p3.Phi3Ref(self.cfg, self.w)
        short, long_ = ref.forward(list(range(8))), ref.forward(list(range(9)))
        # the first 8 positions differ once the prompt passes 8 tokens: long_factor applies to every position
        q_long = long_["layers.0.attention_queries"][:, :, :8]
        self.assertFalse(np.allclose(short["layers.0.attention_queries"], q_long))
        q0 = short["layers.0.attention_queries"][0][:, 0]  # position 0: cos = A, sin = 0
        np.testing.assert_allclose(q0, short["layers.0.attention_queries_pre_rope"][0][:, 0] * A, atol=1e-12)

    def test_fused_split(self):
        out = p3.Phi3Ref(self.cfg, self.w).forward([3, 1, 4, 1, 5])
        check_residual(self, out, 2)
        g = lambda n: out[f"layers.1.{n}"][0]
        W = self.w["model.layers.1.self_attn.qkv_proj.weight"]
        v = g("attention_values").transpose(1, 0, 2).reshape(5, 8)  # the last KV * hd rows of qkv_proj
        np.testing.assert_allclose(v, g("attention_norm_output") @ W[24:].T, atol=1e-12)
        gu = g("mlp_gate_up")
        np.testing.assert_allclose(g("mlp_neurons"), gu[:, 12:] * gu[:, :12] / (1 + np.exp(-gu[:, :12])), atol=1e-12)
        np.testing.assert_allclose(g("attention_probabilities").sum(-1), 1, atol=1e-12)


class ParamCounts(unittest.TestCase):
    def test_kimi_k2_checkpoint_total(self):
        cfg = load_kimi()
        c = pc.count(cfg)
        # the release's tensors: parameters + weight_scale_inv + e_score_correction_bias + 61 inv_freq [56]
        self.assertEqual(c["total"] + c["fp8_scales"] + c["buffers"] + 61 * 56, 1_026_470_731_056)
        self.assertEqual(c["mtp_unique"], 0)

    def test_kimi_k2_bytes_as_published(self):
        b = pc.count(load_kimi())["stored_bytes"] + 61 * 56 * 2  # + the bf16 inv_freq tensors
        self.assertEqual(round(b / 2 ** 30, 2), 958.49)  # the report's tensor total, 958.49 GB

    def test_gpt_oss_20b_release_totals(self):
        with open(os.path.join(REF, "configs", "gpt-oss-20b.json")) as f:
            c = pc.count(json.load(f))
        self.assertEqual(c["total"], 20_914_757_184)  # a bf16 re-save's tensor total
        self.assertEqual(c["stored_elements"], 11_956_805_184)  # the MXFP4 release's tensor total
        self.assertEqual(round(c["stored_bytes"] / 2 ** 30, 2), 12.82)  # its 12.82 GB of tensors

    def test_cards(self):
        got = {n: pc.count(cfg) for n, (cfg, _) in pc.release_configs().items()}
        ds3 = got["DeepSeek-V3"]
        got = {n: c["total"] for n, c in got.items()}
        got["DeepSeek-V3+MTP"] = ds3["total"] + ds3["mtp_stored"] + ds3["fp8_scales"] + ds3["mtp_fp8_scales"] + \
            ds3["buffers"] + 256
        for name, (want, half) in pc.CARDS.items():
            self.assertLessEqual(abs(got[name] - want), half, (name, got[name]))
        self.assertAlmostEqual(ds3["mtp_unique"] / 1e9, 11.6, delta=0.05)

    def test_gpt_oss_120b_checkpoint_size(self):
        with open(os.path.join(REF, "configs", "gpt-oss-120b.json")) as f:
            c = pc.count(json.load(f))
        self.assertEqual(c["total"], 116_829_156_672)
        # "Checkpoints are ~60.8 GiB (120b) and ~12.8 GiB (20b)" (a GPT-OSS overview quoting the card)
        self.assertEqual(round(c["stored_bytes"] / 2 ** 30, 1), 60.8)

    def test_deepseek_r1_0528_has_v3_architecture(self):
        """The verbatim DeepSeek-R1-0528 file stands for DeepSeek-V3's: every key the counter and the
        reference read equals DeepSeek-V3's values as quoted elsewhere (param_count.ARCH)."""
        with open(os.path.join(REF, "configs", "DeepSeek-R1-0528.json")) as f:
            r1 = json.load(f)
        self.assertEqual({k: r1[k] for k in pc.ARCH["DeepSeek-V3"]}, pc.ARCH["DeepSeek-V3"])
        self.assertEqual(pc.count(r1)["total"], pc.count(pc.ARCH["DeepSeek-V3"])["total"])
        ref = ds.DeepseekV3Ref(r1, {})
        self.assertAlmostEqual(ref.scaling, 192 ** -0.5 * (0.1 * math.log(40) + 1) ** 2, places=15)
        self.assertEqual((ref.A, ref.first_dense, ref.n_group, ref.topk_group), (1.0, 3, 8, 4))

    def test_release_configs_read_by_the_references(self):
        k = ds.DeepseekV3Ref(load_kimi(), {})
        self.assertAlmostEqual(k.scaling, 192 ** -0.5 * (0.1 * math.log(32) + 1) ** 2, places=15)
        self.assertEqual((k.A, k.inv.shape, k.first_dense, k.n_group, k.rsf), (1.0, (32,), 1, 1, 2.827))
        with open(os.path.join(REF, "configs", "gpt-oss-20b.json")) as f:
            g = go.GptOssRef(json.load(f), {})
        self.assertAlmostEqual(g.A, 0.1 * math.log(32) + 1, places=15)
        self.assertEqual((g.k, g.E, g.window, g.types[:2], g.inv.shape), (4, 32, 128, ["sliding_attention",
                                                                                        "full_attention"], (32,)))

    def test_block_bytes_sum_to_the_published_total(self):
        """param_count.block_bytes, the per-block split a plan of S stages x E expert shards adds up,
        summed with the embedding and head, is the whole published size."""
        for name in ("Kimi-K2-Instruct", "DeepSeek-R1-0528", "gpt-oss-20b", "gpt-oss-120b"):
            with open(os.path.join(REF, "configs", name + ".json")) as f:
                cfg = json.load(f)
            blocks = [pc.block_bytes(cfg, i) for i in range(cfg["num_hidden_layers"])]
            e = pc.edge_bytes(cfg)
            total = sum(b["shared"] + b["experts"] for b in blocks) + e["embed"] + e["head"]
            self.assertEqual(total, pc.count(cfg)["stored_bytes"], name)
            self.assertGreater(min(b["experts"] for b in blocks[-3:]), max(b["shared"] for b in blocks[-3:]))

    def test_rank_bytes_cover_the_checkpoint(self):
        """Any cut into stages and any number of expert shards: each stage's shards together hold its
        experts once and everything else once a shard, the stages together the whole published size,
        and shards of one stage differ by at most one expert a mixture block."""
        cfg = load_kimi()
        L, e = cfg["num_hidden_layers"], pc.edge_bytes(cfg)
        one_expert = pc.block_bytes(cfg, L - 1)["experts"] // 384
        for cuts, E in (([0, 8, 16, 24, 32, 40, 48, 54, L], 8), ([0, 1, 20, L], 5), ([0, L], 1)):
            whole = 0
            for a, b in zip(cuts, cuts[1:]):
                shards = [pc.rank_bytes(cfg, a, b, s, E) for s in range(E)]
                blocks = [pc.block_bytes(cfg, i) for i in range(a, b)]
                every = sum(x["shared"] for x in blocks) + (e["embed"] if a == 0 else 0) + (e["head"] if b == L else 0)
                self.assertEqual(sum(shards), E * every + sum(x["experts"] for x in blocks))
                self.assertLessEqual(max(shards) - min(shards), (b - a) * one_expert)
                whole += every + sum(x["experts"] for x in blocks)
            self.assertEqual(whole, pc.count(cfg)["stored_bytes"])

    def test_family_errors(self):
        with self.assertRaisesRegex(ValueError, "'LlamaForCausalLM'"):
            pc.count({"architectures": ["LlamaForCausalLM"]})


if __name__ == "__main__":
    argv = [a for a in sys.argv[1:] if a.startswith("-")]
    unittest.main(argv=[sys.argv[0]] + argv)
