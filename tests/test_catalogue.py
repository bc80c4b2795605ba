"""`harvest activations --json` lists exactly the 214 names of seeds/spec.json, with their dtypes,
semantic shapes and meanings, in the spec's order; globs filter it."""
import json

from util import SPEC, args, check, finish, init_model, run

harvest, work = args()
model = init_model(harvest, f"{work}/model", seed=1)
got = json.loads(run(harvest, "activations", model, "--json", check=0).stdout)
spec = SPEC["outputs"]
check(len(got) == 214 == len(spec), f"214 names, got {len(got)}")
check([g["name"] for g in got] == list(spec), "names and order equal spec.json's")
for g in got:
    s = spec.get(g["name"])
    if not check(s is not None, f"{g['name']} is in spec.json"):
        continue
    check(set(g) == {"name", "dtype", "semantic_shape", "meaning"}, f"{g['name']}: keys")
    check(g["dtype"] == s["dtype"], f"{g['name']}: dtype {g['dtype']} vs {s['dtype']}")
    check(g["semantic_shape"] == s["semantic_shape"], f"{g['name']}: semantic_shape")
    check(g["meaning"] == s["meaning"], f"{g['name']}: meaning")

sub = json.loads(run(harvest, "activations", model, "decoder_*_attn_probs", "--json", check=0).stdout)
check([g["name"] for g in sub] == [f"decoder_{i}_attn_probs" for i in range(4)], "glob filter")
text = run(harvest, "activations", model, check=0).stdout.splitlines()
check(len(text) == 214 and text[0].startswith("token_embeddings"), "text listing")
check(run(harvest, "activations", model, "nope_*").returncode == 1, "a glob matching nothing: exit 1")
finish()
