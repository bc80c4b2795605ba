"""Values that must come out exact or be refused (issue 19, items 8, 9 and 12).

8. `pool` and `harvest export --probe` in the token layout under `select`: a prompt that stored
   no row (shorter than skip_first) gets NaN for `last` as for `mean` (not uninitialised memory);
   `last` is the prompt's last *stored* token (here not position length - 1).
9. Write-time statistics of an aliased dataset are stored under the dataset's name (the alias,
   attribute canonical_name): harvest_data.stats(OUT, alias) finds them, the shards get them, and
   `harvest stats` replaces them (one group, the same bits) instead of adding a second.
12. data.fields: a field named like a table of /prompts (prompt_index, ...), an int of magnitude
   2^53 or more, a string that is not valid UTF-8 (in a line or as a job's default) are refused at
   `run`, exit 1 naming the file, the line (or the job key) and the field; ints just below 2^53 and
   valid non-ASCII strings round-trip exactly."""
import json
import os
import shutil
import sys

import h5py
import numpy as np

from util import args, check, finish, init_model, run, write_job

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "io", "python"))
import harvest_data as hd  # noqa: E402

harvest, work = args()
init_model(harvest, f"{work}/model", seed=11)
NAME = "decoder_0_output"

# ---- 8: pooling under select, token layout ---------------------------------------------------
SKIP = 4321  # a token id select skips: it ends prompt 3, so prompt 3's last stored token is earlier
ids = [list(range(100, 106)), [7, 8], [9], list(range(200, 207)) + [SKIP], [11, 12, 13],
       list(range(300, 310))]
with open(f"{work}/pool.jsonl", "w") as f:
    f.writelines(json.dumps({"input_ids": x, "label": i}) + "\n" for i, x in enumerate(ids))
write_job(f"{work}/pool.json", model="model", activations=[NAME], batch_size=4, max_seq_len=32,
          data={"path": "pool.jsonl", "fields": {"label": "int"}}, pool=["last", "mean"],
          select={"skip_first": 3, "skip_token_ids": [SKIP]},
          output={"path": "pool.h5", "layout": "token", "dtype": "float32"})
run(harvest, "run", f"{work}/pool.json", "--quiet", check=0)
run(harvest, "export", f"{work}/pool.h5", "--probe", f"{work}/probe", "--quiet", check=0)
with h5py.File(f"{work}/pool.h5", "r") as f, h5py.File(f"{work}/probe/probe.h5", "r") as g:
    L, off = f["prompts/length"][:], f["prompts/token_offset"][:]
    n_tok = len(f["tokens/input_ids"])
    end = np.append(off[1:], n_tok)
    pos, x = f["tokens/position"][:], f["activations/" + NAME][:].astype(np.float64)
    check(list(end - off) == [3, 0, 0, 4, 0, 7], f"stored rows a prompt: {list(end - off)}")
    check(pos[end[3] - 1] == 6 and L[3] == 8, "prompt 3's last stored token is position 6 of 8")
    for label, h in (("the job's pool", f), ("--probe", g)):
        last, mean = h[f"pooled/{NAME}/last"][:], h[f"pooled/{NAME}/mean"][:]
        for p in range(len(L)):
            rows = x[off[p]:end[p]]
            if len(rows) == 0:
                check(np.isnan(last[p]).all() and np.isnan(mean[p]).all(),
                      f"{label}: prompt {p} stored no row: last and mean are NaN")
                continue
            want_mean = (np.cumsum(rows, 0)[-1] / len(rows)).astype(np.float32)
            check(np.array_equal(last[p], rows[-1].astype(np.float32)) and
                  np.array_equal(mean[p], want_mean),
                  f"{label}: prompt {p}: last is the last stored token, mean over the stored ones")
    check(np.array_equal(f[f"pooled/{NAME}/last"][:], g[f"pooled/{NAME}/last"][:],
                         equal_nan=True), "the job's pool and --probe: the same last rows")

# ---- 9: write-time statistics of an aliased name ---------------------------------------------
run(harvest, "init-model", "--family", "gpt2", "--seed", "3", f"{work}/g2", check=0)
with open(f"{work}/g2.jsonl", "w") as f:
    f.writelines(json.dumps({"input_ids": [(7 * i + 3 * k) % 96 for k in range(n)]}) + "\n"
                 for i, n in enumerate([5, 9, 3, 12, 7]))
ALIAS, CANON, PLAIN = "blocks.1.hook_resid_post", "layers.1.layer_output", "layers.0.layer_output"
write_job(f"{work}/al.json", model="g2", data="g2.jsonl", activations=[ALIAS, PLAIN],
          batch_size=2, max_seq_len=16, output={"path": "al.h5", "layout": "token",
                                                  "dtype": "float32"})
run(harvest, "run", f"{work}/al.json", "--quiet", check=0)
out = f"{work}/al.h5"
with h5py.File(out, "r") as f:
    check(sorted(f["stats"]) == sorted([ALIAS, PLAIN]),
          f"/stats is named as /activations: {sorted(f['stats'])}")
    check(ALIAS in f["stats"] and f["stats/" + ALIAS].attrs.get("canonical_name") == CANON and
          "canonical_name" not in f["stats/" + PLAIN].attrs,
          "the alias's statistics carry canonical_name, as its dataset does")
try:
    wt = hd.stats(out, ALIAS)
    check(wt["count"].max() > 0, "harvest_data.stats(OUT, alias)")
except KeyError as e:
    wt = None
    check(False, f"harvest_data.stats(OUT, alias): {e}")
run(harvest, "export", out, "--shards", f"{work}/sh", "--shard-tokens", "16", "--quiet", check=0)
sh = hd.stats(f"{work}/sh") or {}
check(sorted(sh) == sorted([ALIAS, PLAIN]) and wt is not None and
      np.array_equal(sh[ALIAS]["mean"], wt["mean"]),
      f"the shards hold the alias's statistics: {sorted(sh)}")
run(harvest, "stats", out, "--quiet", check=0)
with h5py.File(out, "r") as f:
    check(sorted(f["stats"]) == sorted([ALIAS, PLAIN]),
          f"harvest stats replaces them, no second copy: {sorted(f['stats'])}")
    check(f["stats/" + ALIAS].attrs.get("canonical_name") == CANON,
          "harvest stats keeps canonical_name")
    again = {k: f[f"stats/{ALIAS}/{k}"][()] for k in f["stats/" + ALIAS]}
check(wt is not None and all(np.array_equal(again[k], wt[k]) for k in again),
      "harvest stats gives the write-time bits (float32 storage)")


# ---- 12: data.fields refused at run ----------------------------------------------------------
def refused(label, want, data_bytes, fields, job_bytes=None):
    with open(f"{work}/bad.jsonl", "wb") as f:
        f.write(data_bytes)
    for leftover in (f"{work}/bad.h5", f"{work}/bad.h5.parts"):
        shutil.rmtree(leftover, ignore_errors=True) if os.path.isdir(leftover) else (
            os.path.exists(leftover) and os.remove(leftover))
    j = write_job(f"{work}/bad.json", model="model", activations=[NAME], max_seq_len=32,
                  data={"path": "bad.jsonl", "fields": fields}, output={"path": "bad.h5"})
    if job_bytes is not None:
        open(j, "wb").write(job_bytes)
    p = run(harvest, "run", j, "--quiet")
    check(p.returncode == 1 and all(w in p.stderr for w in want) and
          not os.path.exists(f"{work}/bad.h5"),
          f"{label}: exit 1 naming {want}: {p.stderr.strip()[-300:]}")


def lines(*objs):
    return b"".join(json.dumps(o).encode() + b"\n" for o in objs)


ok = {"input_ids": [1, 2, 3], "n": 1, "s": "a"}
for name in ("prompt_index", "source_index", "length", "token_offset"):
    refused(f"a field named {name}", ["bad.json", f'"{name}"', "/prompts"],
            lines(dict(ok, **{name: 1})), {name: "int"})
refused("an int of 2^53 + 1", ["bad.jsonl: line 2", '"n"', "2^53"],
        b'{"input_ids": [1], "n": 1}\n{"input_ids": [2], "n": 9007199254740993}\n', {"n": "int"})
refused("an int of -2^53", ["bad.jsonl: line 1", '"n"', "2^53"],
        b'{"input_ids": [1], "n": -9007199254740992}\n', {"n": "int"})
refused("a string of invalid UTF-8", ["bad.jsonl: line 2", '"s"', "UTF-8"],
        b'{"input_ids": [1], "s": "ok"}\n{"input_ids": [2], "s": "caf\xe9"}\n', {"s": "string"})
refused("a string holding a UTF-8 surrogate", ["bad.jsonl: line 1", '"s"', "UTF-8"],
        b'{"input_ids": [1], "s": "x\xed\xa0\x80"}\n', {"s": "string"})
refused("an int default of 2^53", ["bad.json", '"data.fields.n.default"', "2^53"],
        lines(ok), {"n": {"type": "int", "default": 2 ** 53}})
job = json.dumps({"model": "model", "activations": [NAME], "output": {"path": "bad.h5"},
                  "data": {"path": "bad.jsonl", "fields": {"s": {"type": "string",
                                                                 "default": "QQ"}}}}).encode()
refused("a string default of invalid UTF-8", ["bad.json", '"data.fields.s.default"', "UTF-8"],
        lines(ok), {}, job_bytes=job.replace(b"QQ", b"\xff\xfe"))
refused("a field name of invalid UTF-8", ["bad.json", '"data.fields"', "UTF-8"], lines(ok), {},
        job_bytes=job.replace(b'"s":', b'"s\xff":'))

# what stays accepted: integers just below 2^53, any valid UTF-8 (2, 3 and 4 bytes)
big = 2 ** 53 - 1
vals = [(big, "é"), (-big, "€ ok"), (0, "😀"), (12345678901234, "")]
with open(f"{work}/good.jsonl", "w") as f:
    f.writelines(json.dumps({"input_ids": [1, 2], "n": n, "s": s}) + "\n" for n, s in vals)
write_job(f"{work}/good.json", model="model", activations=[NAME], max_seq_len=32,
          data={"path": "good.jsonl", "fields": {"n": "int", "s": "string"}},
          output={"path": "good.h5"})
run(harvest, "run", f"{work}/good.json", "--quiet", check=0)
with h5py.File(f"{work}/good.h5", "r") as f:
    check(list(f["prompts/n"][:]) == [v[0] for v in vals] and
          list(f["prompts/s"].asstr()[:]) == [v[1] for v in vals],
          "ints of magnitude 2^53 - 1 and non-ASCII strings round-trip exactly")
finish()
