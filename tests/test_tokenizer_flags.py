"""Added tokens' flags (single_word, lstrip, rstrip, normalized) and the tokenizer.json keys that
change ids: `harvest tokenize` gives the ids of Hugging Face's tokenizers (Rust) or refuses the
file naming the key (exit 1), never other ids.

The JS reference of test_tokenizer.py (transformers.js) ignores single_word and normalized, so
the reference here is Hugging Face's tokenizers itself (Rust; the npm package "tokenizers" 0.23.2,
its Node binding): its ids for every case are recorded in tokenizer_flags_ref.json beside this
file. `python3 test_tokenizer_flags.py --record NODE_MODULES` rewrites that file from a
node_modules folder holding the package (`npm install tokenizers@0.23.2`).

The tokenizers are variants of the spec model's (data/tokenizer.json: byte-level BPE, NFC) and of
a SentencePiece-style one (Metaspace), with added tokens of each flag, a Lowercase normalizer,
and normalized tokens that overlap raw ones. Then the refusals: BPE dropout, truncation,
padding, an added token whose id is not the one tokenizers gives it, an unk_token missing from
the vocabulary."""
import copy
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SPEC = json.load(open(os.path.join(os.path.dirname(HERE), "data", "tokenizer.json")))
REF = os.path.join(HERE, "tokenizer_flags_ref.json")
N = len(SPEC["model"]["vocab"])  # the next id after the vocabulary


def tok(content, id, **flags):
    d = {"id": id, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": False}
    d.update(flags)
    return d


def variant(added, normalizer="keep", pre="keep"):
    j = copy.deepcopy(SPEC)
    j["added_tokens"] += [tok(c, N + i, **f) for i, (c, f) in enumerate(added)]
    if normalizer != "keep":
        j["normalizer"] = normalizer
    if pre != "keep":
        j["pre_tokenizer"] = pre
    return j


LOWER = {"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Lowercase"}]}
TOKENIZERS = {
    "single_word": variant([("<mask>", {"single_word": True}), ("ony", {"single_word": True}),
                            ("_x", {"single_word": True}), ("9a", {"single_word": True})]),
    "strip": variant([("<l>", {"lstrip": True}), ("<r>", {"rstrip": True}),
                      ("<lr>", {"lstrip": True, "rstrip": True}),
                      ("<sw>", {"lstrip": True, "rstrip": True, "single_word": True})]),
    "normalized": variant([("Hello", {"normalized": True}), ("my", {"normalized": True, "lstrip": True,
                                                                    "rstrip": True}),
                           ("ony", {"normalized": True, "single_word": True}),
                           ("[CLS]", {"special": True}), ("İx", {"normalized": True}),
                           ("bc", {}), ("abcd", {"normalized": True}), ("é!", {"normalized": True})],
                          normalizer=LOWER),
    "normalized_nfc": variant([("e\u0301t\u00e9", {"normalized": True}), ("<raw>", {}),
                               ("w\u0301", {"normalized": False})]),
    "metaspace": variant([("<m>", {"normalized": True}), ("<s2>", {"special": True, "rstrip": True}),
                          ("▁y", {"normalized": True})],
                         normalizer=None,
                         pre={"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first",
                              "split": True}),
    "prepend": variant([("<p>", {"normalized": True}), ("qz", {"normalized": True, "single_word": True})],
                       normalizer={"type": "Sequence", "normalizers": [
                           {"type": "Prepend", "prepend": "▁"},
                           {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
                       pre=None),
    "strip_normalizer": variant([], normalizer={"type": "Strip", "strip_left": True, "strip_right": True},
                                pre={"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                                     "use_regex": False}),
    "dropout_zero": variant([("<z>", {})]),
}
# White_Space (Rust's) is what Strip strips: U+0085 too, U+FEFF not (JavaScript's trim: the other
# way round); only where no regex sees those characters (the regexes keep JavaScript's \s)
TEXTS_OF = {"strip_normalizer": ["  \u0085 strip me \ufeff  ", "\u0085\u2000 ", "\ufeffx\ufeff", ""]}
TOKENIZERS["dropout_zero"]["model"]["dropout"] = 0.0
TOKENIZERS["roberta"] = variant([])  # cls and sep: the ids given beside the tokens
TOKENIZERS["roberta"]["post_processor"] = {"type": "RobertaProcessing", "sep": ["<|endoftext|>", 7],
                                           "cls": ["<|bos|>", 5], "trim_offsets": True,
                                           "add_prefix_space": False}

TEXTS = [
    "<mask> My name <mask> A<mask> <mask>ony <mask>",
    "<mask>, <mask>- \u25cc\u0330<mask> x<mask>_ _<mask> \u00b2<mask>\u00b2 \u2160<mask> 9<mask>",
    "phony ony tony, ony! _ony ony_ 3ony \u2460ony x_x _x _xy 9a 99a a9a \u200dony",
    "a <l> b<l>c  <l>\t<l>\u00a0<l>\u0085<l>\ufeff<l>\u2000<l>",
    "a <r> b<r>c<r>  \t d<r>\u0085e<r>\ufefff<r>\u3000g",
    "x  <lr>  y <lr><lr> <lr>\n\n<lr> z<sw> <sw> w <sw>w",
    "Hello HELLO hello hElLo Hello! xHello My my  MY  name is Anthony, tony ony ONY",
    "[CLS] [cls] İx İX ix i\u0307x abcd ABCD xbcd abc bc É! e\u0301! é!",
    "cafe\u0301te\u0301 caf\u00e9t\u00e9 \u00e9t\u00e9 e\u0301t\u00e9 <raw> w\u0301 \u1e83",
    "<m> a<m>b <m> <s2>   c <s2>d \u2581y y  y <m>",
    "<p>x <p> qz qz! qzqz xqz qz_ <p>",
    "<z> z <z>",
    "",
]


def record(node_modules):
    js = ("const {Tokenizer} = require('tokenizers'); const fs = require('fs');"
          "const [p, t] = process.argv.slice(1); const tok = Tokenizer.fromFile(p);"
          "(async () => { const out = []; for (const s of JSON.parse(fs.readFileSync(t, 'utf8')))"
          " out.push((await tok.encode(s, null, {addSpecialTokens: true})).getIds());"
          " console.log(JSON.stringify(out)); })();")
    ref = {}
    for name, tj in TOKENIZERS.items():
        json.dump(tj, open("/tmp/tokenizer_flags.json", "w"))
        json.dump(TEXTS_OF.get(name, TEXTS), open("/tmp/tokenizer_flags_texts.json", "w"))
        p = subprocess.run(["node", "-e", js, "/tmp/tokenizer_flags.json", "/tmp/tokenizer_flags_texts.json"],
                           capture_output=True, text=True, env=dict(os.environ, NODE_PATH=node_modules))
        if p.returncode:
            sys.exit(f"{name}: {p.stderr}")
        ref[name] = json.loads(p.stdout)
    with open(REF, "w") as f:
        f.write("{\n" + ",\n".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in ref.items()) + "\n}\n")
    print(f"wrote {REF}")


if len(sys.argv) == 3 and sys.argv[1] == "--record":
    record(sys.argv[2])
    sys.exit(0)

from util import args, check, finish, run  # noqa: E402

harvest, work = args()
ref = json.load(open(REF))


def write_texts(path, texts):
    with open(path, "w") as f:
        for t in texts:
            f.write(json.dumps({"text": t}) + "\n")
    return path


lines = write_texts(f"{work}/texts.jsonl", TEXTS)
for name, tj in TOKENIZERS.items():
    path = f"{work}/{name}.json"
    json.dump(tj, open(path, "w"))
    texts = TEXTS_OF.get(name, TEXTS)
    p = run(harvest, "tokenize", path, write_texts(f"{work}/{name}.jsonl", texts), "--quiet")
    if not check(p.returncode == 0, f"{name}: exit {p.returncode}: {p.stderr.strip()}"):
        continue
    got = [json.loads(l)["input_ids"] for l in p.stdout.splitlines()]
    bad = [i for i in range(len(texts)) if i >= len(got) or got[i] != ref[name][i]]
    for i in bad[:4]:
        print(f"  {name}: {texts[i]!r}\n    harvest {got[i] if i < len(got) else None}\n    tokenizers {ref[name][i]}")
    check(not bad and len(got) == len(texts),
          f"{name}: {len(texts) - len(bad)} of {len(texts)} texts give Hugging Face's tokenizers' ids")


# ---- refused: each names tokenizer.json's key or token ----
def refused(label, tj, needles):
    path = f"{work}/bad_{label}.json"
    json.dump(tj, open(path, "w"))
    p = run(harvest, "tokenize", path, lines)
    check(p.returncode == 1 and all(n in p.stderr for n in needles) and path in p.stderr,
          f"refused {label}: exit {p.returncode}: {p.stderr.strip()}")


for d in (0.1, 1.0, "0.5"):
    j = copy.deepcopy(SPEC)
    j["model"]["dropout"] = d
    refused(f"dropout_{d}", j, ['"model.dropout"', "null or 0"])
j = copy.deepcopy(SPEC)
j["truncation"] = {"direction": "Right", "max_length": 3, "strategy": "LongestFirst", "stride": 0}
refused("truncation", j, ['"truncation"', "set it to null"])
j = copy.deepcopy(SPEC)
j["padding"] = {"strategy": {"Fixed": 64}, "direction": "Right", "pad_id": 1, "pad_type_id": 0,
                "pad_token": "<|endoftext|>", "pad_to_multiple_of": None}
refused("padding", j, ['"padding"', "set it to null"])
refused("added_id", variant([("<a>", {}), ("<b>", {})]) | {"added_tokens": SPEC["added_tokens"] + [
    tok("<a>", N), tok("<b>", N + 5)]}, ['"added_tokens"', '"<b>" has id 3356', f"give it id {N + 1}"])
j = copy.deepcopy(SPEC)
j["added_tokens"].append(tok("Ġthe", N))  # in the vocabulary with another id
refused("added_in_vocab", j, ['"Ġthe" has id', f"give it id {SPEC['model']['vocab']['Ġthe']}",
                              "its id in the vocabulary"])
j = copy.deepcopy(SPEC)
j["added_tokens"] += [tok("<d>", N), tok("<d>", N, special=True)]
refused("added_twice", j, ['"<d>" appears twice'])
j = variant([("xq", {"normalized": True})],
            normalizer={"type": "Replace", "pattern": {"String": "xq"}, "content": ""})
refused("added_empty", j, ['"xq" (normalized: true) is empty once normalized'])

j = copy.deepcopy(SPEC)
j["post_processor"]["special_tokens"] = {}
refused("template_missing", j, ['TemplateProcessing: special token "<|bos|>" is not in its "special_tokens"'])

# unk_token not in the vocabulary: tokenizers fails when a character needs it, and so does harvest
sp = {"version": "1.0", "added_tokens": [], "normalizer": None, "pre_tokenizer": None,
      "post_processor": None, "decoder": None,
      "model": {"type": "BPE", "unk_token": "<nope>", "fuse_unk": False, "byte_fallback": False,
                "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": [["a", "b"]]}}
json.dump(sp, open(f"{work}/unk.json", "w"))
open(f"{work}/ab.txt", "w").write("abab\n")
open(f"{work}/abc.txt", "w").write("abc\n")
p = run(harvest, "tokenize", f"{work}/unk.json", f"{work}/ab.txt", check=0)
check(json.loads(p.stdout)["input_ids"] == [2, 2], f"unk_token missing, no unknown character: {p.stdout}")
p = run(harvest, "tokenize", f"{work}/unk.json", f"{work}/abc.txt")
check(p.returncode == 1 and '"model.unk_token": "<nope>" is not in the vocabulary' in p.stderr,
      f"unk_token missing, an unknown character: exit {p.returncode}: {p.stderr.strip()}")
finish()
