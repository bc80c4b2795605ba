"""Every number key of every family's config.json is range-checked (issue 19, item 10).

For each family's init-model preset (and the test-only identity family), each number key (and the
keys the preset has as null that take a number: Gemma 3's soft-caps, GPT-2's n_inner, Qwen's
and Mixtral's sliding_window) is set in turn to 0, -1, 2.5 (integer keys), the string "NaN"
(JSON has no NaN: a string is the wrong type), and 1e999 (cJSON parses it as infinity); each
value the key's range refuses must give `harvest plan` exit 1 and a message naming config.json
and the key, never a plan (and so never a run computing NaN). Values the range allows (0 for a
dropout, -1 for router_aux_loss_coef, ...) are not tried. `NaN` and `Infinity` written bare are
not JSON: cJSON refuses the file (exit 1, naming it). The presets as written still plan, and
still run (`harvest run`, finite logits); the spec model with rope_theta 0 or rms_norm_eps -1,
which ran to all-NaN output with exit 0, is refused by `harvest run` too.

A key harvest never reads and transformers never computes with (token ids, generation
settings, Laguna's vLLM-only decoder_sparse_step) is IGNORED and not tried.

quantization_config: the families that read none (the spec model, Laguna, GPT-2, GPT-NeoX, the
identity family) refuse quant_method "awq" and "fp8", a quantization_config that is not an object
(a list, a string) and one without quant_method, exit 1 naming config.json and
quantization_config (.quant_method); null still plans. Llama, which reads "fp8", plans with it and
refuses "awq" the same way."""
import json
import os

import h5py
import numpy as np

from util import args, check, finish, run, write_job, write_prompts

harvest, work = args()

# the ranges: which of the tried values each allows
POS = "pos"  # a number > 0 (eps, theta, soft-caps, rope factors)
INT1 = "int1"  # an integer >= 1 (sizes, counts, lengths)
INT0 = "int0"  # an integer >= 0
UNIT = "unit"  # 0 to 1 (dropouts; NeoX's rotary_pct: 0 rotates nothing, as transformers does)
NONNEG = "nonneg"  # >= 0 (initializer_range: torch's normal_ std; YaRN's beta_*: 0 means default)
FINITE = "finite"  # any finite number
FRAC = "frac"  # > 0 and <= 1 (partial_rotary_factor)
IGNORED = "ignored"
ALLOWED = {POS: (), INT1: (), INT0: (0,), UNIT: (0,), NONNEG: (0,), FINITE: (0, -1), FRAC: ()}
INTS = (INT1, INT0)

COMMON = {"vocab_size": INT1, "hidden_size": INT1, "intermediate_size": INT1,
          "num_hidden_layers": INT1, "num_attention_heads": INT1, "num_key_value_heads": INT1,
          "head_dim": INT1, "max_position_embeddings": INT1, "rms_norm_eps": POS,
          "rope_theta": POS, "attention_dropout": UNIT, "initializer_range": NONNEG,
          "bos_token_id": IGNORED, "eos_token_id": IGNORED, "pad_token_id": IGNORED,
          "pretraining_tp": INT1, "router_aux_loss_coef": FINITE}
RULES = {
    "encdec": {"num_encoder_layers": INT1, "num_decoder_layers": INT1, "local_window": INT1,
               "ffn_dim": INT1},
    "llama": {"rope_scaling.factor": POS, "rope_scaling.high_freq_factor": POS,
              "rope_scaling.low_freq_factor": POS,
              "rope_scaling.original_max_position_embeddings": INT1},
    "mistral": {"sliding_window": INT1},
    # use_sliding_window false: transformers sets sliding_window to None, whatever it was
    "qwen2": {"max_window_layers": INT0, "sliding_window": INT0},
    "qwen3": {"max_window_layers": INT0, "sliding_window": INT0},
    "qwen3_moe": {"max_window_layers": INT0, "sliding_window": INT0, "num_experts": INT0,
                  "num_experts_per_tok": INT1, "moe_intermediate_size": INT1,
                  "decoder_sparse_step": INT1},
    "mixtral": {"num_experts_per_tok": INT1, "num_local_experts": INT1, "sliding_window": INT1,
                "router_jitter_noise": NONNEG},
    "gemma2": {"attn_logit_softcapping": POS, "final_logit_softcapping": POS,
               "query_pre_attn_scalar": POS, "sliding_window": INT1},
    "gemma3": {"attn_logit_softcapping": POS, "final_logit_softcapping": POS,
               "query_pre_attn_scalar": POS, "sliding_window": INT1, "rope_local_base_freq": POS,
               "sliding_window_pattern": INT1, "rope_scaling.factor": POS},
    "gpt2": {"n_embd": INT1, "n_head": INT1, "n_layer": INT1, "n_positions": INT1, "n_ctx": INT1,
             "n_inner": INT1, "layer_norm_epsilon": POS, "attn_pdrop": UNIT, "embd_pdrop": UNIT,
             "resid_pdrop": UNIT, "summary_first_dropout": UNIT,
             "task_specific_params.text-generation.max_length": IGNORED},
    "gpt_neox": {"layer_norm_eps": POS, "rotary_emb_base": POS, "rotary_pct": UNIT,
                 "hidden_dropout": UNIT, "classifier_dropout": UNIT},
    "laguna": {"moe_intermediate_size": INT1, "shared_expert_intermediate_size": INT1,
               "num_experts": INT1, "num_experts_per_tok": INT1, "sliding_window": INT1,
               "moe_routed_scaling_factor": FINITE, "moe_router_logit_softcapping": NONNEG,
               "decoder_sparse_step": IGNORED},
    "identity": {},
}
FA, SA = "rope_parameters.full_attention.", "rope_parameters.sliding_attention."
RULES["laguna"].update({FA + "rope_theta": POS, FA + "partial_rotary_factor": FRAC,
                        FA + "factor": POS, FA + "attention_factor": POS, FA + "beta_fast": NONNEG,
                        FA + "beta_slow": NONNEG, FA + "original_max_position_embeddings": INT1,
                        SA + "rope_theta": POS, SA + "partial_rotary_factor": FRAC})
# keys the preset has as null (or lacks) that take a number when given one
EXTRA = {"gemma3": ["attn_logit_softcapping", "final_logit_softcapping"], "gpt2": ["n_inner"],
         "qwen2": ["sliding_window"], "qwen3": ["sliding_window"], "qwen3_moe": ["sliding_window"],
         "mixtral": ["sliding_window", "router_jitter_noise"],
         "gpt_neox": ["hidden_dropout", "classifier_dropout"]}

PRESETS = [("encdec", "spec"), ("laguna", "XS-2.1"), ("llama", "Llama-3.2-1B"),
           ("mistral", "Mistral-7B-v0.1"), ("qwen2", "Qwen2.5-0.5B"), ("qwen3", "Qwen3-0.6B"),
           ("qwen3_moe", "Qwen3-MoE"), ("mixtral", "Mixtral-8x7B"), ("gemma2", "gemma-2-2b"),
           ("gemma3", "gemma-3"), ("gpt2", "gpt2"), ("gpt_neox", "pythia-160m")]
HUGE = "1e999"  # written bare: json.dumps cannot write infinity as a number


def number_keys(c, prefix=""):
    for k, v in c.items():
        if isinstance(v, dict):
            yield from number_keys(v, prefix + k + ".")
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            yield prefix + k


def set_path(c, path, value):
    *outer, leaf = path.split(".")
    for k in outer:
        c = c[k]
    c[leaf] = value


def rule_of(fam, key):
    r = RULES[fam].get(key, COMMON.get(key))
    check(r is not None, f"{fam}: number key {key!r} has no rule in this test: add one")
    return r


def write_config(path, c, key, value):
    c = json.loads(json.dumps(c))
    if value == HUGE:
        set_path(c, key, 12345.678)
        text = json.dumps(c).replace("12345.678", HUGE)
    else:
        set_path(c, key, value)
        text = json.dumps(c)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def refused(label, path, key, words=()):
    p = run(harvest, "plan", path)
    ok = check(p.returncode == 1, f"{label}: exit {p.returncode}, expected 1: {p.stderr.strip()}")
    needles = [path] + key.split(".") + list(words)
    ok &= check(all(n in p.stderr for n in needles),
                f"{label}: the message lacks one of {needles}: {p.stderr.strip()}")
    return ok


# keys no preset has, in a config that reads them: (family, the change, the key, its range)
GEMMA3_ROPE = {"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
               "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}
MORE = [
    ("gpt_neox", {"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, "rope_scaling.factor", POS),
    ("gpt_neox", {"rope_scaling": {"rope_type": "default", "rope_theta": 1e4}}, "rope_scaling.rope_theta",
     POS),
    ("gpt_neox", {"rope_parameters": {"rope_type": "default", "partial_rotary_factor": 0.5}},
     "rope_parameters.partial_rotary_factor", UNIT),
    ("mistral", {"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, "rope_scaling.factor", POS),
    ("qwen2", {"rope_scaling": {"type": "dynamic", "factor": 2.0}}, "rope_scaling.factor", POS),
    ("qwen3", {"rope_parameters": {"rope_type": "default", "rope_theta": 1e6}}, "rope_parameters.rope_theta",
     POS),
    ("gemma3", {"rope_parameters": GEMMA3_ROPE}, "rope_parameters.sliding_attention.rope_theta", POS),
    ("gemma3", {"rope_parameters": GEMMA3_ROPE}, "rope_parameters.full_attention.factor", POS),
    ("laguna", {"moe_router_logit_softcapping": 0.0}, "moe_router_logit_softcapping", NONNEG),
]


def cases(fam, c):
    keys = list(number_keys(c)) + [k for k in EXTRA.get(fam, []) if k not in c or c[k] is None]
    for key in keys:
        yield c, key, rule_of(fam, key)
    for f, change, key, r in MORE:
        if f == fam:
            yield dict(json.loads(json.dumps(c)), **change), key, r


def check_family(fam, c):
    n = bad = 0
    for c2, key, r in cases(fam, c):
        if r in (None, IGNORED):
            continue
        for v in [0, -1, "NaN", HUGE] + ([2.5] if r in INTS else []):
            if v in ALLOWED[r] and not isinstance(v, str):
                continue
            label = f"{fam} {key}={v}"
            path = f"{work}/cases/{fam}/{key}/{v}/config.json"
            write_config(path, c2, key, v)
            n += 1
            bad += not refused(label, path, key)
    check(n > 0, f"{fam}: no case")
    print(f"{'ok' if not bad else 'FAIL'}: {fam}: {n - bad} of {n} out-of-range values refused, naming "
          "config.json and the key")


def runs(fam, d, vocab):
    """The preset as written: plans, and runs to finite logits."""
    check(run(harvest, "plan", f"{d}/model/config.json").returncode == 0, f"{fam}: the preset plans")
    write_prompts(f"{d}/prompts.jsonl", [3, 7], seed=1, vocab=min(vocab, 96))
    p = run(harvest, "run", write_job(f"{d}/job.json", activations=["logits"]), "--quiet")
    if not check(p.returncode == 0, f"{fam}: the preset runs: exit {p.returncode}: {p.stderr.strip()}"):
        return
    with h5py.File(f"{d}/out.h5", "r") as f:
        logits = f["activations/logits"][:]
    check(np.isfinite(logits[:, :3]).all(), f"{fam}: finite logits")
    print(f"ok: {fam}: the preset as written runs (logits {logits.shape}, finite)")


for fam, preset in PRESETS:
    d = f"{work}/{fam}"
    run(harvest, "init-model", "--family", fam, "--preset", preset, "--seed", "3", f"{d}/model",
        check=0)
    c = json.load(open(f"{d}/model/config.json"))
    check_family(fam, c)
    runs(fam, d, c.get("vocab_size", 96))

identity = {"architectures": ["IdentityForTest"], "hidden_size": 8, "vocab_size": 16}
os.makedirs(f"{work}/identity")
with open(f"{work}/identity/config.json", "w") as f:
    json.dump(identity, f)
check(run(harvest, "plan", f"{work}/identity/config.json").returncode == 0, "identity plans")
check_family("identity", identity)

# quantization_config: (the value, the key the message names, a word it must hold too)
QUANT = [({"quant_method": "awq", "bits": 4}, "quantization_config.quant_method", "awq"),
         ({"quant_method": "fp8", "fmt": "e4m3"}, "quantization_config.quant_method", "fp8"),
         ([1, 2], "quantization_config", "object"), ("fp8", "quantization_config", "object"),
         ({"bits": 4}, "quantization_config.quant_method", "missing")]


def quant_refused(fam, c):
    n = bad = 0
    for i, (q, key, word) in enumerate(QUANT):
        path = f"{work}/quant/{fam}/{i}/config.json"
        write_config(path, dict(c, quantization_config=q), "quantization_config", q)
        n += 1
        bad += not refused(f"{fam} quantization_config {json.dumps(q)}", path, key, [word])
    path = f"{work}/quant/{fam}/null/config.json"
    write_config(path, dict(c, quantization_config=None), "quantization_config", None)
    p = run(harvest, "plan", path)
    check(p.returncode == 0, f"{fam} quantization_config null: exit {p.returncode}: {p.stderr.strip()}")
    print(f"{'ok' if not bad else 'FAIL'}: {fam}: {n - bad} of {n} quantization_config it does not "
          "read refused, naming config.json and the key; null plans")


for fam in ("encdec", "laguna", "gpt2", "gpt_neox"):
    quant_refused(fam, json.load(open(f"{work}/{fam}/model/config.json")))
quant_refused("identity", identity)
llama = json.load(open(f"{work}/llama/model/config.json"))
path = f"{work}/quant/llama-fp8/config.json"
write_config(path, dict(llama, quantization_config={"quant_method": "fp8"}), "vocab_size", 96)
p = run(harvest, "plan", path)
if check(p.returncode == 0, f"llama fp8: exit {p.returncode}: {p.stderr.strip()}"):
    print("ok: llama, which reads fp8, plans with it")
path = f"{work}/quant/llama-awq/config.json"
write_config(path, dict(llama, quantization_config={"quant_method": "awq"}), "vocab_size", 96)
if refused("llama awq", path, "quantization_config.quant_method", ["awq"]):
    print("ok: llama awq: refused")

# Qwen3-MoE's mlp_only_layers: a list of layer indices
moe = json.load(open(f"{work}/qwen3_moe/model/config.json"))
for label, v in (("fraction", [0.5]), ("string", ["0"]), ("number", 0), ("infinite", [HUGE])):
    path = f"{work}/only_{label}/config.json"
    write_config(path, dict(moe, mlp_only_layers=[12345.678] if v == [HUGE] else v), "vocab_size", 96)
    if v == [HUGE]:
        text = open(path).read().replace("12345.678", HUGE)
        open(path, "w").write(text)
    if refused(f"qwen3_moe mlp_only_layers {label}", path, "mlp_only_layers"):
        print(f"ok: qwen3_moe mlp_only_layers {v}: refused")
path = f"{work}/only_ok/config.json"
write_config(path, dict(moe, mlp_only_layers=[0, 7]), "vocab_size", 96)  # 7: no such layer, none
check(run(harvest, "plan", path).returncode == 0, "qwen3_moe mlp_only_layers [0, 7] plans")

# bare NaN / Infinity are not JSON: cJSON refuses the file, naming it
spec = json.load(open(f"{work}/encdec/model/config.json"))
for word in ("NaN", "Infinity", "-Infinity"):
    path = f"{work}/bare_{word}/config.json"
    write_config(path, spec, "rope_theta", HUGE)
    text = open(path).read().replace(HUGE, word)
    open(path, "w").write(text)
    p = run(harvest, "plan", path)
    if check(p.returncode == 1 and path in p.stderr, f"bare {word}: exit {p.returncode}: {p.stderr.strip()}"):
        print(f"ok: bare {word} is not JSON: the file is refused, naming it: {p.stderr.strip()}")

# the report's cases, through `harvest run`: the spec model ran them to all-NaN output, exit 0
for key, v in (("rope_theta", 0), ("rms_norm_eps", -1)):
    d = f"{work}/spec_{key}"
    os.makedirs(d)
    for fn in os.listdir(f"{work}/encdec/model"):  # the weights shared, config.json edited
        if fn != "config.json":
            os.symlink(f"{work}/encdec/model/{fn}", f"{d}/{fn}")
    write_config(f"{d}/config.json", spec, key, v)
    write_prompts(f"{d}/prompts.jsonl", [3, 7], seed=1, vocab=96)
    job = write_job(f"{d}/job.json", model=d, data=f"{d}/prompts.jsonl", activations=["logits"],
                    output={"path": f"{d}/out.h5"})
    p = run(harvest, "run", job, "--quiet")
    if check(p.returncode == 1 and f"{d}/config.json" in p.stderr and key in p.stderr,
             f"run, spec {key} {v}: exit {p.returncode}: {p.stderr.strip()}") and \
            check(not os.path.exists(f"{d}/out.h5"), f"run, spec {key} {v}: no output file"):
        print(f"ok: harvest run refuses the spec model's {key} {v}: {p.stderr.strip()}")
finish()
