"""FP8 block-scaled checkpoints (quantization_config.quant_method "fp8", transformers' fine-grained
FP8 layout: float8_e4m3fn weights with a float32 weight_scale_inv per block) written by
`harvest init-model` from a tiny Qwen3 and Qwen3-MoE config with a quantization_config added,
against the float64 reference tests/ref/hf run on the weights tests/ref/fp8.py dequantizes from
the same files (written from transformers' integrations/finegrained_fp8.py, not from the C).

- The files: every nn.Linear F8_E4M3 with its F32 weight_scale_inv of (ceil(out / bo),
  ceil(in / bi)) blocks (blocks [20, 12]: partial blocks at the edges of every matrix), but those
  modules_to_not_convert names (one layer's down_proj by name, every v_proj by a "layers.*."
  pattern) and lm_head (BF16); embeddings and norms BF16; every block's
  largest |byte| is 448 (the quantizer's scale is the block's max / 448, so a block grid other
  than the config's would not give it).
- `harvest run` with every value over prompts of 1 to 17 tokens, batched: every stored value
  within 1e-4 of the reference relative to the tensor's scale (expert indices exactly); the
  catalogue is the reference's names; identities: layer_mid == layer_input + attention_output and
  layer_output == layer_mid + mlp_output bit for bit, logits == lm_head(final_norm_output).
- `plan`: bytes as published == the tensor bytes in the files (1 byte a weight, 4 a scale).
- Scales stored BF16 (as the Qwen3 dense FP8 releases store them) or F16: every value again.
- The mutation the test must catch: the same checkpoint with one scale tensor written transposed
  in the expected shape (the transposed layout read row-major) gives values the comparison
  rejects; a scale transposed in shape is an error naming it.
- Bad checkpoints exit 1 naming the tensor: an FP8 weight without its scale, a scale of the
  wrong shape, a weight stored BF16 that the config makes FP8; bad configs exit 1 naming the key:
  quant_method "awq", fmt "e5m2", activation_scheme "static", weight_block_size [128];
  `compute: "bf16"` on an FP8 checkpoint is refused (exit 1) rather than computed otherwise.
- Llama (quantization_config with quant_method alone: [128, 128] blocks, only lm_head kept):
  the files and every value as above.
- Qwen3-MoE (the router kept BF16 by modules_to_not_convert, as the Qwen3-MoE FP8 releases do;
  the experts FP8): the same value checks, 2 OpenMP threads bit for bit equal to 1, and 2
  pipeline stages and 2 expert shards bit for bit equal to np 1.
"""
import json
import os
import shutil
import sys

import h5py
import numpy as np

import famtest as ft
from famtest import RTOL, edit
from util import BOOKKEEPING, args, check, finish, output_diff, run, write_job, write_prompts
import hf  # tests/ref/hf, on the path by util
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref"))
import fp8  # noqa: E402  tests/ref/fp8.py

LENGTHS = [5, 1, 17, 2, 9, 3]
BLOCK = [20, 12]
harvest, work = args()


def make(name, family, preset, qc, extra=None):
    """init-model's preset config with quantization_config qc, written FP8 by init-model."""
    d = f"{work}/{name}"
    cfg = ft.fp8_model(harvest, d, family, preset, qc, extra)
    write_prompts(f"{d}/prompts.jsonl", LENGTHS, seed=3, vocab=cfg["vocab_size"])
    return d


def check_files(name, d, skip, block=BLOCK):
    cfg, raw = fp8.read_checkpoint_raw(f"{d}/model")
    n_fp8 = 0
    for t, (dt, v) in raw.items():
        if t.endswith("_scale_inv"):
            continue
        want = fp8.is_linear(t) and fp8.converts(t, skip + ["lm_head"])
        check((dt == "F8_E4M3") == want, f"{name}: {t} stored {dt}")
        if dt != "F8_E4M3":
            continue
        n_fp8 += 1
        if not ft.fp8_blocks(name, t, v, raw, block, fp8.E4M3):
            return
    check(n_fp8 > 0, f"{name}: FP8 weights written")
    return cfg


def identities(f, p, T, r, w, name):
    A = ft.row(f, p)
    for i in range(r["num_hidden_layers"]):
        ft.residuals(A, f"layers.{i}.", T, name)
    head = w["model.embed_tokens.weight"] if r.get("tie_word_embeddings") else w["lm_head.weight"]
    ft.lm_head(A, T, head, name, stored="logits")


def values(name, d, out="out.h5", model="model"):
    """harvest run's every value vs the reference on the dequantized weights; the worst error."""
    names, path = ft.golden_run(harvest, d, model, out=out)
    cfg, w = fp8.load_checkpoint(f"{d}/{model}")
    ref_cfg = {k: v for k, v in cfg.items() if k != "quantization_config"}
    worst = {}
    with ft.output(path, name, names) as f:
        for i, T, ids in ft.prompts(f):
            want = hf.forward(ref_cfg, w, [ids])[0]
            check(sorted(want) == sorted(set(names) - {"input_ids", "attention_mask"}),
                  f"{name}: catalogue == the reference's names")
            ft.compare_all(f, i, T, want, name, worst=worst)
            identities(f, i, T, hf.resolve(ref_cfg), w, name)
    top = sorted(worst.items(), key=lambda kv: -kv[1])[:2]
    print(f"{name}: {len(names)} values x {len(LENGTHS)} prompts match the reference on the "
          "dequantized weights; worst " + ", ".join(f"{k} {v:.1e}" for k, v in top), flush=True)
    return cfg, w


def plan_bytes(name, d):
    got, line = ft.plan_bytes(harvest, f"{d}/model/config.json")
    want = ft.file_bytes(f"{d}/model")
    check(got == want and "FP8" in line, f"{name}: plan's bytes as published {got}, the files hold {want}")


def refused(name, d, model, words, compute=None):
    ft.run_refused(harvest, name, f"{d}/bad.json", words, model=model, output={"path": f"{model}.h5"},
                   **({"compute": compute} if compute else {}))


SCALE = "model.layers.0.self_attn.q_proj.weight_scale_inv"  # (4, 3) blocks: not square


def scale_dtypes(d):
    """Scales stored BF16 (Qwen3 dense FP8 releases) or F16 (Qwen3-4B-Instruct-2507-FP8), as
    other readers found them: read too (widened), every value vs the reference on those files."""
    for dt, code in (("BF16", "<u2"), ("F16", "<f2")):
        def conv(k, t):
            if not k.endswith("_scale_inv"):
                return t
            s = np.frombuffer(t[2], "<f4")
            b = (s.view(np.uint32) + 0x7FFF + ((s.view(np.uint32) >> 16) & 1)) >> 16 if dt == "BF16" else s
            return dt, t[1], b.astype(code).tobytes()
        edit(f"{d}/model", f"{d}/scales_{dt}", conv)
        values(f"qwen3 (scales {dt})", d, out=f"scales_{dt}.h5", model=f"scales_{dt}")


def mutations(d):
    """A transposed scale, bad checkpoints, bad configs."""
    # the scale transposed, read in the expected shape: loads, and the values are caught
    def transposed(k, t):
        if k != SCALE:
            return t
        s = np.frombuffer(t[2], "<f4").reshape(t[1])
        return t[0], t[1], np.ascontiguousarray(s.T).tobytes()
    edit(f"{d}/model", f"{d}/mut", transposed)
    run(harvest, "run", write_job(f"{d}/mut.json", model="mut", output={"path": "mut.h5"},
                                  activations=["layers.0.attention_output"]), "--quiet", check=0)
    cfg, w = fp8.load_checkpoint(f"{d}/model")
    ref_cfg = {k: v for k, v in cfg.items() if k != "quantization_config"}
    worst = 0.0
    with h5py.File(f"{d}/mut.h5", "r") as f:
        for i in range(len(f["prompts/length"])):
            T, o = int(f["prompts/length"][i]), int(f["prompts/token_offset"][i])
            want = hf.forward(ref_cfg, w, [list(f["tokens/input_ids"][o:o + T])])[0]
            g = f["activations/layers.0.attention_output"][i][:T].astype(np.float64)
            r = want["layers.0.attention_output"][0]
            worst = max(worst, np.abs(g - r).max() / np.abs(r).max())
    check(worst > 100 * RTOL, f"mutation (a transposed scale) not caught: error {worst:.1e}")
    print(f"mutation caught: a transposed {SCALE} gives attention_output {worst:.1e} off", flush=True)
    # a scale transposed in shape; no scale; a weight stored BF16 where the config says FP8
    edit(f"{d}/model", f"{d}/bad_shape", lambda k, t: (t[0], t[1][::-1], t[2]) if k == SCALE else t)
    refused("a scale of the wrong shape", d, "bad_shape", [SCALE, "shape [3, 4], expected [4, 3]"])
    edit(f"{d}/model", f"{d}/no_scale", lambda k, t: None if k == SCALE else t)
    refused("an FP8 weight without its scale", d, "no_scale", [SCALE])
    wname = "model.layers.1.mlp.up_proj.weight"
    def to_bf16(k, t):
        if k != wname:
            return t
        v = fp8.E4M3[np.frombuffer(t[2], np.uint8)].astype(np.float32)
        return "BF16", t[1], (v.view(np.uint32) >> 16).astype("<u2").tobytes()
    edit(f"{d}/model", f"{d}/bf16_weight", to_bf16)
    refused("a weight stored BF16 that the config makes FP8", d, "bf16_weight", [wname, "dtype BF16"])
    refused("compute bf16 on FP8 weights", d, "model", ["\"compute\"", "FP8"], compute="bf16")
    # bad configs
    for key, value, words in (("quant_method", "awq", ["quantization_config.quant_method", "awq"]),
                              ("fmt", "e5m2", ["quantization_config.fmt"]),
                              ("activation_scheme", "static", ["quantization_config.activation_scheme"]),
                              ("weight_block_size", [128], ["quantization_config.weight_block_size"])):
        shutil.copytree(f"{d}/model", f"{d}/cfg_{key}")
        with open(f"{d}/cfg_{key}/config.json") as f:
            cfg = json.load(f)
        cfg["quantization_config"][key] = value
        with open(f"{d}/cfg_{key}/config.json", "w") as f:
            json.dump(cfg, f)
        refused(f"quantization_config.{key} {value!r}", d, f"cfg_{key}", ["config.json"] + words)
    print("bad FP8 checkpoints and configs: exit 1 naming the tensor or key", flush=True)


def threads(name, d):
    """OMP_NUM_THREADS 2 (the panels' rows and the experts over two threads) == 1, bit for bit."""
    for n in (1, 2):
        job = write_job(f"{d}/t{n}.json", batch_size=3, output={"path": f"t{n}.h5"})
        run(harvest, "run", job, "--quiet", check=0, env={"OMP_NUM_THREADS": str(n)})
    diff = output_diff(f"{d}/t1.h5", f"{d}/t2.h5", BOOKKEEPING | {"job"})
    if check(diff is None, f"{name}: 2 threads differ from 1 in {diff}"):
        print(f"{name}: 2 OpenMP threads == 1 bit for bit", flush=True)


def mpi(name, d):
    acts = ["layers.*.layer_output", "layers.*.router_logits", "layers.*.expert_outputs",
            "layers.*.routed_output", "logits"]
    ft.grids(harvest, d, name, ((1, 1, 1), (2, 2, 1), (2, 1, 2)), activations=acts)


QC = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
      "weight_block_size": BLOCK,
      "modules_to_not_convert": ["model.layers.1.mlp.down_proj", "layers.*.self_attn.v_proj"]}
d = make("qwen3", "qwen3", "Qwen3-0.6B", QC, {"tie_word_embeddings": False})
check_files("qwen3", d, QC["modules_to_not_convert"])
values("qwen3", d)
plan_bytes("qwen3", d)
scale_dtypes(d)
mutations(d)

# Llama with the release's defaults: weight_block_size absent ([128, 128]: one partial block a
# matrix at these sizes), no modules_to_not_convert (lm_head alone stays BF16), tied embeddings
d = make("llama", "llama", "Llama-3.2-1B", {"quant_method": "fp8"})
check_files("llama", d, [], [128, 128])
values("llama", d)
plan_bytes("llama", d)

# Qwen3-MoE: the routers kept BF16 (as Qwen3-30B-A3B-FP8 lists each layer's mlp.gate)
run(harvest, "init-model", "--family", "qwen3_moe", "--preset", "Qwen3-MoE", f"{work}/moe_probe", check=0)
with open(f"{work}/moe_probe/config.json") as f:
    L = json.load(f)["num_hidden_layers"]
QM = dict(QC, modules_to_not_convert=[f"model.layers.{i}.mlp.gate" for i in range(L)])
d = make("qwen3_moe", "qwen3_moe", "Qwen3-MoE", QM)
check_files("qwen3_moe", d, QM["modules_to_not_convert"])
values("qwen3_moe", d)
plan_bytes("qwen3_moe", d)
threads("qwen3_moe", d)
mpi("qwen3_moe", d)
finish()
