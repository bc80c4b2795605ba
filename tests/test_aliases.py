"""Aliases in a job's "activations" (issue 11 "Names"; model/aliases.c): TransformerLens hook names
and Hugging Face module paths are stored under the name the job asked for, with an attribute
canonical_name, holding bit for bit the value of the canonical name (a Laguna preset, one rank and
two pipeline stages, both layouts). The table resolves every alias of the reference
tests/ref/hf/aliases.py as the reference does, for each of its ten families (through
tests/alias_dump.c), and refuses the names that are no alias; `harvest activations MODEL --aliases`
lists exactly the reference's aliases (for a Llama-like rotary family) whose canonical name the
model has. An alias whose canonical name the model lacks, an unknown name, and one value asked for
under two names are errors naming them."""
import json
import os
import subprocess

import h5py
import numpy as np

from util import MPI_ENV, args, check, finish, run, write_prompts
from hf.aliases import aliases as ref_aliases
from hf.config import FAMILIES

harvest, work = args()
model = f"{work}/laguna"
run(harvest, "init-model", "--family", "laguna", "--preset", "XS-2.1", "--seed", "5", model, check=0)
data = write_prompts(f"{work}/prompts.jsonl", [1, 5, 17, 9, 3], seed=7, vocab=256)
cat = [d["name"] for d in json.loads(run(harvest, "activations", model, "--json", check=0).stdout)]
n_layers = 1 + max(int(n.split(".")[1]) for n in cat if n.startswith("layers."))

# ---- the listing: the reference's aliases whose canonical name the model has ----
ref = ref_aliases({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": n_layers})
want = {a: c for a, c in ref.items() if c in cat}
got = json.loads(run(harvest, "activations", model, "--aliases", "--json", check=0).stdout)
listed = {g["alias"]: g["canonical_name"] for g in got}
check(listed == want and len(got) == len(want),
      f"--aliases: {len(got)} listed, the reference has {len(want)} for the model's names; "
      f"extra {sorted(set(listed) - set(want))[:5]}, missing {sorted(set(want) - set(listed))[:5]}, "
      f"other canonical names {[(a, listed[a], want[a]) for a in listed if a in want and listed[a] != want[a]][:3]}")
check("blocks.1.hook_resid_post" in want and "model.layers.1.mlp" in want, "the listing is not empty")
text = run(harvest, "activations", model, "layers.1.layer_output", "--aliases", check=0).stdout.split()
check(text == ["blocks.1.hook_resid_post", "layers.1.layer_output", "model.layers.1",
               "layers.1.layer_output"], f"--aliases with a glob, as text: {text}")


# ---- the table against the reference for every family, through tests/alias_dump.c ----
DUMP = os.path.join(os.path.dirname(harvest), "tests", "alias_dump")
NOT_ALIASES = ["layers.0.layer_output", "blocks.x.hook_resid_pre", "blocks..hook_resid_pre",
               "blocks.0.hook_resid_pre.", "model.layers.0.self_attn.q_proj", "blocks.0.hook_rot_q"]


def dump(family, mode, names):
    p = subprocess.run([DUMP, family, mode], input="".join(n + "\n" for n in names),
                       capture_output=True, text=True, timeout=60)
    check(p.returncode == 0, f"alias_dump {family} {mode}: exit {p.returncode}: {p.stderr}")
    return {f[0]: f[1:] for f in (line.split("\t") for line in p.stdout.splitlines())}


for arch, family in FAMILIES.items():
    ref_f = ref_aliases({"architectures": [arch], "num_hidden_layers": 3})
    got_f = dump(family, "resolve", list(ref_f) + NOT_ALIASES)
    for name in list(ref_f) + NOT_ALIASES:
        c = ref_f.get(name, "-")
        g = got_f.get(name, ["?"])[0]
        check(g == c or (c is None and g.startswith("!")),
              f"{family}: {name} resolves to {g!r}, the reference to {c!r}")
    canon = sorted({c for c in ref_f.values() if c}) + ["layers.0.attention_premix", "logits"]
    of = dump(family, "of", canon)
    for c in canon:
        want_of = sorted(a for a, v in ref_f.items() if v == c)
        check(sorted(of.get(c, [])) == want_of, f"{family}: aliases of {c}: {of.get(c)}, "
              f"the reference {want_of}")


def job(label, acts, **out):
    path = f"{work}/{label}.json"
    json.dump({"model": model, "data": data, "activations": acts, "max_seq_len": 24, "batch_size": 2,
               "output": dict({"path": f"{work}/{label}.h5", "checkpoint_seconds": 0}, **out),
               "parallel": {"pipeline_stages": 2 if label.endswith("np2") else 1}}, open(path, "w"))
    return path


def harvest_run(label, acts, np_=1, **out):
    cmd = [harvest, "run", job(label, acts, **out), "--quiet"]
    if np_ > 1:
        cmd = ["mpirun", "-np", str(np_), "--oversubscribe"] + cmd
    p = subprocess.run(cmd, capture_output=True, text=True, env=MPI_ENV, timeout=600)
    check(p.returncode == 0, f"{label}: exit {p.returncode}: {p.stderr[-1500:]}")
    return f"{work}/{label}.h5"


# ---- a run by aliases equals the run by canonical names ----
PAIRS = {"blocks.1.hook_resid_post": "layers.1.layer_output",
         "model.layers.0.mlp": "layers.0.mlp_output",
         "blocks.0.attn.hook_pattern": "layers.0.attention_probabilities",
         "ln_final.hook_normalized": "final_norm_output"}
PAIRS = {a: c for a, c in PAIRS.items() if c in cat}
check(len(PAIRS) >= 3, f"the preset has the canonical names: {PAIRS}")
for layout in ("prompt", "token"):
    pairs = {a: c for a, c in PAIRS.items() if layout == "prompt" or "probabilities" not in c}
    base = harvest_run(f"canon_{layout}", list(pairs.values()), layout=layout)
    for label, np_ in ((f"alias_{layout}", 1), (f"alias_{layout}_np2", 2)):
        out = harvest_run(label, list(pairs), np_=np_, layout=layout)
        if not os.path.exists(out) or not os.path.exists(base):
            continue
        with h5py.File(out, "r") as fa, h5py.File(base, "r") as fb:
            if not check(sorted(fa["activations"]) == sorted(pairs),
                         f"{label}: datasets named as the job asked: {sorted(fa['activations'])}"):
                continue
            for a, c in pairs.items():
                x, y = fa["activations"][a], fb["activations"][c]
                check(x.attrs.get("canonical_name") == c, f"{label}: {a}: canonical_name "
                      f"{x.attrs.get('canonical_name')!r}, expected {c!r}")
                check("canonical_name" not in y.attrs, f"canon_{layout}: {c} has no canonical_name")
                same = x.dtype == y.dtype and x.shape == y.shape and \
                    np.array_equal(x[:], y[:], equal_nan=True)
                check(same, f"{label}: {a} differs from {c} of the canonical run")
                for k in ("semantic_shape", "stored_axes", "dtype", "meaning"):
                    check(np.array_equal(x.attrs[k], y.attrs[k]), f"{label}: {a}: attribute {k}")
        p = run(harvest, "inspect", out, check=0)
        check("complete: yes" in p.stdout and "damaged" not in p.stdout,
              f"{label}: inspect: {p.stdout[:600]}")

# ---- errors: each names the job file, the entry and the names ----
for label, acts, needles in [
        ("lacks", ["blocks.1.attn.hook_q"],
         ['"activations[0]"', '"blocks.1.attn.hook_q"', '"layers.1.attention_queries_pre_rope"',
          "laguna model lacks", "--aliases"]),
        ("lacks_layer", ["layers.0.layer_input", f"blocks.{n_layers}.hook_resid_post"],
         ['"activations[1]"', f'"layers.{n_layers}.layer_output"', "lacks"]),
        ("unknown", ["blocks.1.hook_resid_postt"],
         ['"blocks.1.hook_resid_postt" matches no activation', "closest"]),
        ("gpt2_path", ["transformer.h.1"], ['"transformer.h.1" matches no activation']),
        ("two_aliases", ["blocks.1.hook_resid_post", "model.layers.1"],
         ['"blocks.1.hook_resid_post" and "model.layers.1" are both "layers.1.layer_output"']),
        ("tl_normalized", ["blocks.1.ln2.hook_normalized"],
         ['"blocks.1.ln2.hook_normalized"', "before the norm's weight", "layers.1.mlp_norm_output"]),
        ("tl_result", ["blocks.0.attn.hook_result"],
         ["after W_O", "layers.0.attention_head_outputs", "layers.0.attention_output"]),
        ("tl_hook_pre", ["blocks.1.mlp.hook_pre"], ["pre-activation", "layers.1.mlp_activation"]),
        ("alias_and_glob", ["layers.1.*", "blocks.1.hook_resid_post"],
         ['"blocks.1.hook_resid_post" is an alias of "layers.1.layer_output", which a name or glob']),
]:
    jp = job(f"err_{label}", acts)
    p = run(harvest, "run", jp, "--quiet")
    check(p.returncode == 1 and jp in p.stderr and all(n in p.stderr for n in needles),
          f"{label}: exit {p.returncode}: {p.stderr.strip()}")
    check(not os.path.exists(f"{work}/err_{label}.h5"), f"{label}: no output written")
finish()
