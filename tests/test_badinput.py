"""Bad input found by an adversarial pass (issue 9): each case exits 1 (2 for a system failure)
with a message naming the file and the key, line or tensor, or gives the correct result; no input
file is modified (hashed before and after); nothing claims complete = 1 after a failure; nothing
hangs (every run has a time limit)."""
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import threading

import h5py

from util import args, check, finish, init_model, run, write_prompts

harvest, work = args()
base = init_model(harvest, f"{work}/model", seed=4)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKENIZER = os.path.join(ROOT, "data", "tokenizer.json")


def digest(paths):
    """sha256 of every regular file under paths (files or folders)."""
    out = {}
    for p in paths:
        walk = [(p, [], [os.path.basename(p)])] if os.path.isfile(p) else os.walk(p)
        for d, _, files in walk:
            for f in files:
                q = p if os.path.isfile(p) else os.path.join(d, f)
                if os.path.isfile(q) and not os.path.islink(q):
                    out[q] = hashlib.sha256(open(q, "rb").read()).hexdigest()
    return out


def job(label, data, model=None, out=None, **extra):
    path = f"{work}/{label}.json"
    j = {"model": model or base, "data": data, "activations": ["logits"],
         "output": {"path": out or f"{work}/{label}.h5"}}
    j.update(extra)
    with open(path, "w") as f:
        json.dump(j, f)
    return path, j["output"]["path"]


def expect_run(label, code, needles, data, inputs=(), model=None, timeout=120):
    """harvest run on data: exit code, message, inputs untouched, no complete output."""
    jp, out = job(label, data, model=model)
    before = digest([jp, *inputs])
    try:
        p = run(harvest, "run", jp, "--overwrite", timeout=timeout)
    except subprocess.TimeoutExpired:
        check(False, f"{label}: no answer within {timeout} s (a hang)")
        return None
    ok = check(p.returncode == code, f"{label}: exit {p.returncode}, expected {code}: {p.stderr.strip()[-600:]}")
    for n in needles:
        ok &= check(n in p.stderr, f"{label}: message lacks {n!r}: {p.stderr.strip()[-600:]}")
    ok &= check(digest([jp, *inputs]) == before, f"{label}: an input file changed")
    if code != 0 and os.path.exists(out):
        try:
            with h5py.File(out, "r") as f:
                ok &= check(f.attrs.get("complete", 0) != 1, f"{label}: a failed run left complete = 1")
        except OSError:
            pass
    if ok:
        last = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ""
        print(f"ok: {label}: {last[:200]}")
    return out


def n_prompts(out):
    if not check(out and os.path.exists(out), f"{out}: the output exists"):
        return -1
    with h5py.File(out, "r") as f:
        check(f.attrs["complete"] == 1, f"{out}: complete")
        return len(f["prompts/length"])


def write_lines(path, lines, mode="w"):
    with open(path, mode) as f:
        f.write(lines)
    return path


# ---- a gzip stream truncated mid-file: an error naming the file, not 131 of 200 prompts ----
lines = "".join(json.dumps({"input_ids": [(7 * i + k) % 8000 for k in range(40)]}) + "\n"
                for i in range(200))
full = gzip.compress(lines.encode())
cut = f"{work}/cut.jsonl.gz"
open(cut, "wb").write(full[:len(full) * 2 // 3])
expect_run("gzip_truncated", 1, [cut, "truncated"], cut, [cut])
p = run(harvest, "tokenize", TOKENIZER, cut, "--field", "input_ids")
check(p.returncode == 1 and cut in p.stderr and "truncated" in p.stderr,
      f"tokenize on a truncated gzip: exit {p.returncode}: {p.stderr.strip()}")
whole = f"{work}/whole.jsonl.gz"
open(whole, "wb").write(full)
out = expect_run("gzip_whole", 0, [], whole, [whole])
check(n_prompts(out) == 200, "the whole gzip stream: 200 prompts")

# ---- a NUL byte in a line: an error naming the line, never two lines glued into one ----
nul = write_lines(f"{work}/nul.jsonl", '{"input_ids": [1, 2]}\n{"input_ids": [3,\x00 4]}\n{"input_ids": [5]}\n')
expect_run("nul_jsonl", 1, [nul, "line 2", "NUL"], nul, [nul])
nul_txt = write_lines(f"{work}/nul.txt", "first line\nsec\x00ond\nthird\n")
tokdir = f"{work}/model_tok"
shutil.copytree(base, tokdir)
shutil.copy(TOKENIZER, tokdir)
expect_run("nul_text", 1, [nul_txt, "line 2", "NUL"], {"path": nul_txt, "format": "text"},
           [nul_txt], model=tokdir)
esc = write_lines(f"{work}/esc.jsonl", '{"text": "a"}\n{"text": "b\\u0000c"}\n')
expect_run("nul_escape", 1, [esc, "line 2", "\\u0000"], esc, [esc], model=tokdir)
p = run(harvest, "tokenize", TOKENIZER, nul_txt)
check(p.returncode == 1 and "line 2" in p.stderr and "NUL" in p.stderr,
      f"tokenize: a NUL byte: exit {p.returncode}: {p.stderr.strip()}")

# ---- *?[ in a path: a file that exists is itself; a glob only when no such file exists ----
gdir = f"{work}/globs"
os.makedirs(gdir)
write_prompts(f"{gdir}/d1.jsonl", [3, 4, 5], seed=1)
write_prompts(f"{gdir}/d[1].jsonl", [3, 4, 5, 6, 7], seed=2)
out = expect_run("glob_literal", 0, [], f"{gdir}/d[1].jsonl", [gdir])
check(n_prompts(out) == 5, "d[1].jsonl is read as itself (5 prompts), not as d1.jsonl")
out = expect_run("glob_pattern", 0, [], f"{gdir}/d?.jsonl", [gdir])
check(n_prompts(out) == 3, "d?.jsonl, no such file: the glob, matching d1.jsonl (3 prompts)")
expect_run("glob_nothing", 1, [f"{gdir}/e*.jsonl", "matches no file"], f"{gdir}/e*.jsonl", [gdir])

# ---- JSON Lines: text after the object, a key twice ----
extra = write_lines(f"{work}/extra.jsonl", '{"input_ids": [1, 2]}\n{"input_ids": [3]} {"input_ids": [4]}\n')
expect_run("extra_after_object", 1, [extra, "line 2", "after the JSON value"], extra, [extra])
extra2 = write_lines(f"{work}/extra2.jsonl", '{"input_ids": [1, 2]}\n{"input_ids": [3]}]\n')
expect_run("extra_bracket", 1, [extra2, "line 2"], extra2, [extra2])
dup = write_lines(f"{work}/dup.jsonl", '{"input_ids": [1, 2]}\n{"input_ids": [3], "input_ids": [4, 5]}\n')
expect_run("duplicate_key_data", 1, [dup, "line 2", '"input_ids" appears twice'], dup, [dup])
dupt = write_lines(f"{work}/dupt.jsonl", '{"text": "a"}\n{"text": "b", "meta": {"x": 1, "x": 2}}\n')
p = run(harvest, "tokenize", TOKENIZER, dupt)
check(p.returncode == 1 and "line 2" in p.stderr and '"x" appears twice' in p.stderr,
      f"tokenize: a key twice: exit {p.returncode}: {p.stderr.strip()}")
ok_lines = write_lines(f"{work}/ok.jsonl", '{"input_ids": [1, 2]}  \r\n{"input_ids": [3], "meta": {"a": [1, {"b": 2}]}}\n')
out = expect_run("json_whitespace_ok", 0, [], ok_lines, [ok_lines])
check(n_prompts(out) == 2, "trailing white space and nested objects are fine")

# ---- the job file: a key twice, at any depth ----
for label, text, key in [
        ("job_dup_top", '{"model": "m", "model": "n", "data": "d", "activations": ["*"], "output": {"path": "o.h5"}}', '"model"'),
        ("job_dup_output", '{"model": "m", "data": "d", "activations": ["*"], "output": {"path": "o.h5", "path": "p.h5"}}', '"output.path"')]:
    jp = f"{work}/{label}.json"
    open(jp, "w").write(text)
    p = run(harvest, "run", jp)
    check(p.returncode == 1 and jp in p.stderr and key in p.stderr and "twice" in p.stderr,
          f"{label}: exit {p.returncode}: {p.stderr.strip()}")

# ---- FIFOs: a model file that is one is refused at once; a data FIFO is read as a stream ----
fifo_model = f"{work}/fifo_model"
os.makedirs(fifo_model)
shutil.copy(f"{base}/config.json", fifo_model)
os.mkfifo(f"{fifo_model}/model.safetensors")
expect_run("fifo_safetensors", 1, [f"{fifo_model}/model.safetensors", "not a regular file"],
           write_prompts(f"{work}/small.jsonl", [3, 4], seed=3), [f"{fifo_model}/config.json"],
           model=fifo_model, timeout=60)
fifo_cfg = f"{work}/fifo_cfg"
os.makedirs(fifo_cfg)
shutil.copy(f"{base}/model.safetensors", fifo_cfg)
os.mkfifo(f"{fifo_cfg}/config.json")
expect_run("fifo_config", 1, [f"{fifo_cfg}/config.json", "not a regular file"], f"{work}/small.jsonl",
           [f"{fifo_cfg}/model.safetensors"], model=fifo_cfg, timeout=60)
p = subprocess.run([harvest, "plan", fifo_cfg], capture_output=True, text=True, timeout=60)
check(p.returncode == 1 and "not a regular file" in p.stderr, f"plan on a FIFO config.json: {p.stderr.strip()}")
fifo_tok = f"{work}/fifo_tok"
os.makedirs(fifo_tok)
os.mkfifo(f"{fifo_tok}/tokenizer.json")
p = subprocess.run([harvest, "tokenize", fifo_tok, f"{work}/small.jsonl"], capture_output=True,
                   text=True, timeout=60)
check(p.returncode == 1 and f"{fifo_tok}/tokenizer.json" in p.stderr and "not a regular file" in p.stderr,
      f"tokenize with a FIFO tokenizer.json: exit {p.returncode}: {p.stderr.strip()}")
fifo_job = f"{work}/fifo_job.json"  # read whole with ah_read_file: refused before it can block
os.mkfifo(fifo_job)
try:
    p = subprocess.run([harvest, "run", fifo_job], capture_output=True, text=True, timeout=30)
    check(p.returncode == 1 and f"{fifo_job}: not a regular file (a FIFO)" in p.stderr,
          f"run with a FIFO job file: exit {p.returncode}: {p.stderr.strip()}")
except subprocess.TimeoutExpired:
    check(False, "run with a FIFO job file: blocked for 30 s (it must be refused, not opened)")

fifo_data = f"{work}/stream.jsonl"
os.mkfifo(fifo_data)
payload = "".join(json.dumps({"input_ids": [i + 1, i + 2, i + 3]}) + "\n" for i in range(9))


def feed():
    with open(fifo_data, "w") as f:
        f.write(payload)


threading.Thread(target=feed, daemon=True).start()
out = expect_run("fifo_data_stream", 0, [], fifo_data, timeout=120)
if out and os.path.exists(out):
    check(n_prompts(out) == 9, "a FIFO data path is read as a stream: 9 prompts")
expect_run("data_is_folder", 1, [gdir, "a folder"], gdir, [gdir])

# ---- harvest tokenize: one output line per input record, empty ones included ----
texts = [f"record number {i}" for i in range(25)]
texts[11] = ""
rec = write_lines(f"{work}/records.jsonl", "".join(json.dumps({"text": t}) + "\n" for t in texts))
for special in (True, False):
    flags = [] if special else ["--no-special"]
    p = run(harvest, "tokenize", TOKENIZER, rec, *flags, check=0)
    got = [json.loads(x)["input_ids"] for x in p.stdout.splitlines()]
    check(len(got) == 25, f"tokenize: {len(got)} lines for 25 records")
    one = run(harvest, "tokenize", TOKENIZER, write_lines(f"{work}/one.txt", "x\n"), *flags, check=0)
    x_ids = json.loads(one.stdout)["input_ids"]
    bos = x_ids[:-1]  # the spec tokenizer's post-processor prepends a BOS; "x" is one token
    if len(got) == 25:
        check(got[11] == bos, f"tokenize: the empty record gives {got[11]}, expected {bos}")
        alone = run(harvest, "tokenize", TOKENIZER, write_lines(f"{work}/r12.jsonl", json.dumps({"text": texts[12]}) + "\n"),
                    *flags, check=0)
        check(got[12] == json.loads(alone.stdout)["input_ids"], "tokenize: line 13 is record 13's ids")
p = run(harvest, "tokenize", TOKENIZER, write_lines(f"{work}/blank.txt", "a\n\nb\n"), "--no-special", check=0)
check(len(p.stdout.splitlines()) == 3 and json.loads(p.stdout.splitlines()[1])["input_ids"] == [],
      f"tokenize: a blank line of plain text is an empty record: {p.stdout!r}")
ids = write_lines(f"{work}/ids.jsonl", '{"input_ids": [99]}\n\n{"input_ids": []}\n')
p = run(harvest, "tokenize", TOKENIZER, ids, "--decode", check=0)
check(len(p.stdout.splitlines()) == 3, f"tokenize --decode: one line a record: {p.stdout!r}")

# ---- checkpoints: fractional shapes and config integers, overlapping data, a tensor twice, NaN/Inf ----
def read_st(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        return f.read(n).decode(), f.read()


def write_st(path, header_text, data):
    h = header_text.encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little") + h + data)


def model_variant(name, header=None, data=None, config=None):
    """A copy of the base model; header(text) / data(bytes, header dict) / config(dict) edit it."""
    d = f"{work}/{name}"
    shutil.copytree(base, d)
    text, raw = read_st(f"{d}/model.safetensors")
    if header:
        text = header(text)
    if data:
        raw = data(bytearray(raw), json.loads(text))
    write_st(f"{d}/model.safetensors", text, bytes(raw))
    if config:
        c = json.load(open(f"{d}/config.json"))
        config(c)
        json.dump(c, open(f"{d}/config.json", "w"))
    return d


hdr = json.loads(read_st(f"{base}/model.safetensors")[0])
names = [k for k in hdr if k != "__metadata__"]
by_off = sorted(names, key=lambda k: hdr[k]["data_offsets"][0])
t0, t1 = by_off[3], by_off[4]
small = write_prompts(f"{work}/small.jsonl", [3, 4], seed=3)


def set_entry(name, **kw):
    def f(text):
        h = json.loads(text)
        h[name].update(kw)
        return json.dumps(h)
    return f


st = "model.safetensors"
sh = hdr[t0]["shape"]
d = model_variant("frac_shape", header=set_entry(t0, shape=[sh[0] / 2 + 0.5] + sh[1:]))
expect_run("fractional_shape", 1, [f"{d}/{st}", f'tensor "{t0}": shape entry 0: expected an integer'], small,
           [d], model=d)
o0, o1 = hdr[t0]["data_offsets"]
d = model_variant("overlap", header=set_entry(t1, data_offsets=[o1 - 4, o1 - 4 + hdr[t1]["data_offsets"][1] - hdr[t1]["data_offsets"][0]]))
expect_run("overlapping_offsets", 1, [f"{d}/{st}", f'tensors "{t0}" and "{t1}" overlap'], small, [d], model=d)
d = model_variant("twice", header=lambda text: text.replace(f'"{t1}":', f'"{t0}":', 1))
expect_run("tensor_twice", 1, [f"{d}/{st}", f'tensor "{t0}" appears twice'], small, [d], model=d)
key = next(k for k, v in json.load(open(f"{base}/config.json")).items() if isinstance(v, int) and not isinstance(v, bool) and v > 1)
d = model_variant("frac_cfg", config=lambda c: c.update({key: c[key] + 0.5}))
expect_run("fractional_config_int", 1, [f"{d}/config.json", f'"{key}": expected an integer'], small, [d], model=d)


def poke(name, index, value):
    def f(raw, h):
        o = h[name]["data_offsets"][0]
        raw[o + 4 * index:o + 4 * index + 4] = value
        return raw
    return f


bias = next(n for n in names if n.endswith("norm.weight"))
for label, val, word in (("nan_weight", b"\x00\x00\xc0\x7f", "NaN"), ("inf_weight", b"\x00\x00\x80\xff", "-Inf")):
    d = model_variant(label, data=poke(bias, 7, val))
    expect_run(label, 1, [f"{d}/{st}", f'tensor "{bias}": element 7 (flat index) is {word}'], small, [d], model=d)

# ---- an allocation that fails names its size: a 120 MB line under a 400 MB address-space limit ----
import resource
huge = f"{work}/huge.txt"
with open(huge, "wb") as f:
    f.write(b"a" * (120 << 20) + b"\n")


def limit_memory():
    resource.setrlimit(resource.RLIMIT_AS, (400 << 20, 400 << 20))


p = subprocess.run([harvest, "tokenize", TOKENIZER, huge], preexec_fn=limit_memory, capture_output=True,
                   text=True, timeout=120, env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
if "AddressSanitizer" in p.stderr:  # ASan reserves terabytes of shadow: no address-space limit
    print("allocation_fails: not run under AddressSanitizer")
elif check(p.returncode == 2 and f"{huge}: line 1" in p.stderr and "bytes" in p.stderr,
           f"an allocation that fails: exit {p.returncode}, expected 2 naming the line and a size: "
           f"{p.stderr.strip()[-300:]}"):
    print(f"ok: allocation_fails: {p.stderr.strip()[:200]}")
os.remove(huge)

# ---- the spill file of token ids (OUT.h5.tokens) on a full disk: exit 2 naming that file ----
disk = f"{work}/disk"
os.makedirs(disk)
if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=96k", "tmpfs", disk]).returncode != 0:
    print("cannot mount a tmpfs here: the full-disk spill case is skipped")
else:
    try:
        many = write_prompts(f"{work}/many.jsonl", [500] * 60, seed=5)  # 30,000 ids: 240 KB of spill
        jp, out = job("spill_full", many, out=f"{disk}/out.h5")
        p = run(harvest, "run", jp, timeout=120)
        check(p.returncode == 2 and f"{disk}/out.h5.tokens" in p.stderr and "No space" in p.stderr,
              f"spill on a full disk: exit {p.returncode}, expected 2 naming out.h5.tokens: {p.stderr.strip()[-400:]}")
        if p.returncode == 2:
            print(f"ok: spill_full: {p.stderr.strip().splitlines()[-1][:200]}")
    finally:
        subprocess.run(["umount", "-l", disk])

# ---- paths over 4096 bytes (PATH_MAX): an error naming the path, never a path cut short ----
deep = work + "/" + "/".join(["d" * 200] * 21)  # 4200+ bytes
expect_run("model_path_too_long", 1, [deep[:150], "longer than the system allows"], f"{work}/small.jsonl",
           model=deep)
expect_run("data_path_too_long", 1, [deep[:150], "longer than the system allows"], deep + "/p.jsonl")
p = run(harvest, "tokenize", deep, f"{work}/small.jsonl")
check(p.returncode == 1 and deep[:150] in p.stderr, f"tokenize: a tokenizer path over 4096 bytes: {p.stderr.strip()[:300]}")

# ---- tokenizer.json: merges outside the vocabulary, ids fractional or given twice, a token twice;
# a regex on which PCRE2 gives up (its match limit) is an error naming the regex, not "no match" ----
spec_tok = json.load(open(TOKENIZER))
vocab = spec_tok["model"]["vocab"]
first, second = sorted(vocab, key=vocab.get)[5:7]


def tok_variant(label, edit=None, text=None):
    path = f"{work}/tok_{label}.json"
    if text is None:
        t = json.loads(json.dumps(spec_tok))
        edit(t)
        text = json.dumps(t)
    open(path, "w").write(text)
    return path


def expect_tok(label, path, needles, data=None):
    data = data or write_lines(f"{work}/tok_in.txt", "hello world\n")
    before = digest([path, data])
    p = run(harvest, "tokenize", path, data, timeout=120)
    ok = check(p.returncode == 1, f"{label}: exit {p.returncode}, expected 1: {p.stderr.strip()[-600:]}")
    for n in [path] + needles:
        ok &= check(n in p.stderr, f"{label}: message lacks {n!r}: {p.stderr.strip()[-600:]}")
    ok &= check(digest([path, data]) == before, f"{label}: an input file changed")
    if ok:
        print(f"ok: {label}: {p.stderr.strip().splitlines()[-1][:220]}")


expect_tok("merge_unknown_token", tok_variant("m1", lambda t: t["model"]["merges"].insert(3, ["nosuchtoken", "e"])),
           ['"model.merges"[3]: token "nosuchtoken" is not in the vocabulary'])
expect_tok("merge_unknown_string", tok_variant("m2", lambda t: t["model"]["merges"].append("e zzzq")),
           [f'"model.merges"[{len(spec_tok["model"]["merges"])}]: token "zzzq" is not in the vocabulary'])
singles = sorted(k for k in vocab if len(k) == 1)
pa, pb = next((a, b) for a in singles for b in singles if a + b not in vocab)
expect_tok("merge_result_unknown", tok_variant("m3", lambda t: t["model"]["merges"].insert(0, [pa, pb])),
           [f'"model.merges"[0]: the merged token "{pa + pb}" is not in the vocabulary'])
expect_tok("vocab_fractional_id", tok_variant("v1", lambda t: t["model"]["vocab"].update({first: 5.5})),
           [f'"model.vocab": "{first}": expected an integer id'])
expect_tok("vocab_duplicate_id", tok_variant("v2", lambda t: t["model"]["vocab"].update({second: vocab[first]})),
           ['"model.vocab":', f'both have id {vocab[first]}'])
raw = json.dumps(spec_tok).replace('"vocab": {', '"vocab": {"qqq": 1, "qqq": 2, ', 1)
expect_tok("vocab_token_twice", tok_variant("v3", text=raw), ['"model.vocab": "qqq" appears twice'])

# (a|aa)+ before a character that never comes: exponential backtracking, PCRE2's match limit
bt = tok_variant("backtrack", lambda t: t.update(pre_tokenizer={
    "type": "Split", "pattern": {"Regex": "(?:a|aa)+\\$"}, "behavior": "Isolated", "invert": False}))
long_a = write_lines(f"{work}/aaaa.txt", "a" * 60 + "!$\n")  # "$": past the required-character shortcut
expect_tok("regex_match_limit", bt, ["pre_tokenizer Split regex (?:a|aa)+\\$", "PCRE2 gave up",
                                     f"{long_a}: line 1"], data=long_a)
p = run(harvest, "tokenize", bt, write_lines(f"{work}/short_a.txt", "aaa$ aa\n"), check=0)
check(len(p.stdout.splitlines()) == 1, "the same regex on text it can match: fine")
bt_dir = f"{work}/model_bt"
shutil.copytree(base, bt_dir)
shutil.copy(bt, f"{bt_dir}/tokenizer.json")
expect_run("regex_match_limit_run", 1, ["PCRE2 gave up", f"{long_a}: line 1"], {"path": long_a, "format": "text"},
           [long_a, bt_dir], model=bt_dir)

finish()
