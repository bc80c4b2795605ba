"""`harvest activations` and `harvest plan` on the four released Laguna config.json files: the
catalogue equals the values of tests/ref/laguna-nnterp.txt (names, shapes, meanings; dense and mixture
blocks); the exact parameter counts of
tests/ref/laguna-forward.md section 6, the bytes as published (BF16 + an F32 selection bias a MoE layer), a
pipeline x expert split whose stages cover the layers; and configs it must refuse, each naming the
file and key."""
import json
import os
import re

from util import HERE, args, check, finish, init_model, run

harvest, work = args()
CONF = os.path.join(HERE, "ref", "laguna-configs")
WANT = {"Laguna-XS-2.1": 33_442_617_088, "Laguna-XS.2": 33_442_617_088,
        "Laguna-S-2.1": 117_561_977_600, "Laguna-M.1": 225_795_725_568}


def number(text, label):
    m = re.search(label + r": ([\d,]+)", text)
    return int(m.group(1).replace(",", "")) if m else None


for name, params in WANT.items():
    path = os.path.join(CONF, name + ".json")
    c = json.load(open(path))
    out = run(harvest, "plan", path, check=0).stdout
    check(number(out, "parameters") == params, f"{name}: parameters {number(out, 'parameters')}, expected {params:,}")
    n_moe = c["mlp_layer_types"].count("sparse")
    want_bytes = 2 * params + 2 * c["num_experts"] * n_moe  # the F32 bias takes 4 bytes, not 2
    check(number(out, "bytes") == want_bytes, f"{name}: bytes {number(out, 'bytes')}, expected {want_bytes:,}")
    S, E = 4, 8
    out = run(harvest, "plan", path, "--pipeline-stages", str(S), "--expert-parallel", str(E), check=0).stdout
    layers = [tuple(map(int, m)) for m in re.findall(r"stage \d+: layers (\d+)-(\d+)", out)]
    L = c["num_hidden_layers"]
    check(len(layers) == S and layers[0][0] == 0 and layers[-1][1] == L - 1 and
          all(layers[i][1] + 1 == layers[i + 1][0] for i in range(S - 1)),
          f"{name}: {S} contiguous stages over the {L} layers: {layers}")
    m = re.search(r"weights a rank at most: [\d.]+ GiB \(([\d,]+) bytes", out)
    peak = int(m.group(1).replace(",", "")) if m else 0
    check(peak is not None and want_bytes / (S * E) < peak < want_bytes / S,
          f"{name}: a rank holds between 1/{S * E} and 1/{S} of the weights ({peak})")
    print(f"{name}: {params:,} parameters; {S} stages x {E} shards: {peak / 2**30:.2f} GiB a rank at most")

# the spec model plans too
init_model(harvest, f"{work}/encdec", seed=1)
out = run(harvest, "plan", f"{work}/encdec", check=0).stdout
check(number(out, "parameters") == 19_667_712 and number(out, "bytes") == 4 * 19_667_712, f"encdec plan: {out}")

base = json.load(open(os.path.join(CONF, "Laguna-XS-2.1.json")))


def bad(label, edit, needles, extra=()):
    c = json.loads(json.dumps(base))
    edit(c)
    path = f"{work}/{label}.json"
    json.dump(c, open(path, "w"))
    p = run(harvest, "plan", path, *extra)
    ok = check(p.returncode == 1, f"{label}: exit {p.returncode}, expected 1")
    for n in needles:
        ok &= check(n in p.stderr, f"{label}: message lacks {n!r}: {p.stderr.strip()}")
    if ok:
        print(f"ok: {label}: {p.stderr.strip()}")


bad("unknown_rope_type", lambda c: c["rope_parameters"]["full_attention"].update(rope_type="longrope"),
    ["unknown_rope_type.json", "rope_parameters.full_attention.rope_type", "longrope"])
bad("yarn_l0_not_number", lambda c: c["rope_parameters"]["full_attention"].update(original_max_position_embeddings="x"),
    ["original_max_position_embeddings"])
bad("heads_list_length", lambda c: c["num_attention_heads_per_layer"].pop(),
    ["num_attention_heads_per_layer", "40 integers"])
bad("heads_not_multiple", lambda c: c["num_attention_heads_per_layer"].__setitem__(3, 60),
    ["num_attention_heads_per_layer\"[3]", "multiple of num_key_value_heads"])
bad("layer_type", lambda c: c["layer_types"].__setitem__(5, "local_attention"),
    ["\"layer_types\"[5]", "sliding_attention"])
bad("mlp_type", lambda c: c["mlp_layer_types"].__setitem__(2, "moe"), ["\"mlp_layer_types\"[2]"])
bad("gating", lambda c: c.update(gating="per-channel"), ["\"gating\""])
bad("score_func", lambda c: c.update(moe_router_score_func="sqrtsoftplus"), ["moe_router_score_func"])
bad("no_sliding_rope", lambda c: c["rope_parameters"].pop("sliding_attention"),
    ["rope_parameters.sliding_attention"])
bad("shards", lambda c: None, ["expert shards"], extra=("--expert-parallel", "257"))
# plan accepts the shard counts run accepts: any E up to the experts (3 does not divide 256)
out = run(harvest, "plan", os.path.join(CONF, "Laguna-XS-2.1.json"), "--expert-parallel", "3", check=0).stdout
check("3 expert shards" in out, f"plan --expert-parallel 3: {out}")

# ---- harvest activations: the catalogue against the seed ----
seed = {}
lines = open(os.path.join(HERE, "ref", "laguna-nnterp.txt"), encoding="utf-8").read().splitlines()
start = next(i for i, l in enumerate(lines) if l.startswith("model LagunaForCausalLM"))
end = next(i for i, l in enumerate(lines) if l.startswith("Printout"))
for l in lines[start:end]:
    m = re.match(r"^(?:⚠︎)?(\w+) (\w+) \[([^\]]*)\] (.*)$", l)
    if m:
        seed[m.group(1)] = (m.group(3).split(), m.group(4))
check(len(seed) >= 30, f"the seed's value table was read ({len(seed)} values)")
INT64 = {"input_ids", "attention_mask", "expert_indices"}
for name in WANT:
    path = os.path.join(CONF, name + ".json")
    c = json.load(open(path))
    cat = json.loads(run(harvest, "activations", path, "--json", check=0).stdout)
    L = c["num_hidden_layers"]
    dense = [t == "dense" for t in c["mlp_layer_types"]]
    n_dense = sum(dense)
    check(len(cat) == 7 + 14 * L + 3 * n_dense + 7 * (L - n_dense), f"{name}: {len(cat)} values")
    seen = set()
    for e in cat:
        value = e["name"].split(".")[-1]
        seen.add(value)
        if not check(value in seed, f"{name}: {e['name']} is a value of the seed"):
            continue
        axes, meaning = seed[value]
        check(e["semantic_shape"] == axes, f"{name}: {e['name']} shape {e['semantic_shape']} vs {axes}")
        check(e["meaning"] == meaning, f"{name}: {e['name']} meaning")
        check(e["dtype"] == ("int64" if value in INT64 else "float32"), f"{name}: {e['name']} dtype")
        if e["name"].startswith("layers."):
            i = int(e["name"].split(".")[1])
            moe_only = value in ("router_logits", "expert_weights", "expert_indices", "expert_outputs",
                                 "routed_output", "shared_expert_output")
            dense_only = value in ("mlp_activation", "mlp_neurons")
            check(not (moe_only and dense[i]) and not (dense_only and not dense[i]),
                  f"{name}: {e['name']} belongs to a {'dense' if dense[i] else 'mixture'} block")
    check(seen == set(seed) - {"input_size"}, f"{name}: every value of the seed: missing {set(seed) - seen - {'input_size'}}")
    print(f"{name}: harvest activations lists {len(cat)} values, as the seed names them")
finish()
