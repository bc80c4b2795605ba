#!/bin/sh
# bench_saes.sh - the cost of encoding with an SAE at harvest time (a benchmark, not a test;
# docs/saes.md, docs/benchmarks.md). Llama-3.2-1B's dimensions cut to LAYERS layers (d = 2048,
# random weights) and a random TopK SAE of d_sae = 16 d (harvest init-sae, SAELens layout) on the
# last block's output. One rank, one BLAS thread, the same prompts, side by side in one run:
#   fwd   the forward alone, storing the site (job without "saes")
#   sae   the same job with the SAE in "saes" (latents, statistics, exemplars, metrics)
#   eval  the same with "evaluate": true in its saes entry, when this build has the key (the
#         splice-in evaluation); skipped otherwise
# run alternately ROUNDS times. For each side its best whole-run wall time, best rank loop time
# (the output's provenance: without MPI start-up and the final fold) and best CPU time (user +
# sys: the least disturbed by other work); the cost is each as % of fwd's. Then the bytes a token
# stored: the SAE's CSR latents (/saes_latents of the segments) against the dense activation.
# Take the figures on a quiet machine.
#
#   tests/bench_saes.sh [HARVEST] [ROUNDS=3] [PROMPTS=16] [T=256] [EXPANSION=16] [K=64] [LAYERS=2]
#
# LAYERS 16 is the whole Llama-3.2-1B: the SAE's cost is fixed a token, the forward's grows with
# the layers, so the cost as a share of the forward falls as the model deepens.
set -eu
H=$(realpath "${1:-build/harvest}")
ROUNDS=${2:-3}
PROMPTS=${3:-16}
T=${4:-256}
EXP=${5:-16}
K=${6:-64}
LAYERS=${7:-2}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
W=${TMPDIR:-/tmp}/bench_saes.$$
mkdir -p "$W"
trap 'rm -rf "$W"' EXIT
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
"$H" init-model --family llama --config "$ROOT/tests/ref/hf-configs/Llama-3.2-1B.json" \
    --layers "$LAYERS" "$W/model" >/dev/null 2>&1
D=$(/usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['hidden_size'])" \
    "$W/model/config.json")
"$H" init-sae --layout saelens --arch topk --k "$K" --d-in "$D" --d-sae $((EXP * D)) "$W/sae" \
    >/dev/null 2>&1
/usr/bin/python3 - "$H" "$W" "$ROUNDS" "$PROMPTS" "$T" "$K" <<'PY'
import json, os, random, resource, subprocess, sys, time
import h5py
h, w, rounds, n, t, k = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:])
cfg = json.load(open(f"{w}/model/config.json"))
site = f"layers.{cfg['num_hidden_layers'] - 1}.layer_output"
r = random.Random(1)
with open(f"{w}/p.jsonl", "w") as f:
    for _ in range(n):
        f.write(json.dumps({"input_ids": [r.randrange(cfg["vocab_size"]) for _ in range(t)]}) + "\n")
sae = {"path": "sae", "on": site, "name": "s"}
sides = {"fwd": None, "sae": [sae], "eval": [dict(sae, evaluate=True)]}
for side, saes in sides.items():
    job = {"model": "model", "data": "p.jsonl", "batch_size": 8, "activations": [site],
           "output": {"path": f"{side}.h5", "layout": "token"}}
    if saes:
        job["saes"] = saes
    json.dump(job, open(f"{w}/{side}.json", "w"))
p = subprocess.run([h, "run", f"{w}/eval.json", "--overwrite", "--quiet"], capture_output=True,
                   text=True)
if p.returncode != 0:
    print(f"(no eval side: this build refuses \"evaluate\": {p.stderr.strip()[-160:]})")
    del sides["eval"]
d_sae = json.load(open(f"{w}/sae/cfg.json"))["d_sae"]
print(f"harvest SAE bench: Llama-3.2-1B dims, {cfg['num_hidden_layers']} layers (d {cfg['hidden_size']}), TopK SAE d_sae "
      f"{d_sae} k {k} on {site}; {n} prompts x {t} tokens, batch 8, token layout, 1 thread")
best = {}
for rd in range(1, rounds + 1):
    for side in sides:
        c0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.time()
        subprocess.run([h, "run", f"{w}/{side}.json", "--overwrite", "--quiet"], check=True)
        c1, t1 = resource.getrusage(resource.RUSAGE_CHILDREN), time.time()
        cpu = (c1.ru_utime + c1.ru_stime) - (c0.ru_utime + c0.ru_stime)
        with h5py.File(f"{w}/{side}.h5", "r") as f:
            loop = json.loads(f.attrs["provenance"])["ranks"][0]["loop_seconds"]
        v = {"run": t1 - t0, "loop": loop, "cpu": cpu}
        print(f"  round {rd}, {side:4}: run {v['run']:.2f} s, loop {loop:.2f} s, CPU {cpu:.2f} s",
              flush=True)
        for m, x in v.items():
            best[side, m] = min(best.get((side, m), x), x)
print(f"best of {rounds} a side; the cost as % of the forward alone (fwd):")
for m, what in (("run", "whole run (wall)"), ("loop", "rank loop (wall)"),
                ("cpu", "CPU (user + sys)")):
    row = f"  {what:18} fwd {best['fwd', m]:7.2f} s"
    for side in list(sides)[1:]:
        x = best[side, m]
        row += f", {side} {x:7.2f} s ({100 * (x - best['fwd', m]) / best['fwd', m]:+5.1f} %)"
    print(row)
# bytes a token: the segments' /saes_latents/s against the stored activation
lat = dense = 0
with h5py.File(f"{w}/sae.h5", "r") as f:
    tokens = f["tokens/input_ids"].shape[0]
    files = [rec["file"] for rec in json.loads(f.attrs["segments"])]
for fn in files:
    with h5py.File(os.path.join(f"{w}/sae.h5.parts", fn), "r") as s:
        def add(name, o):
            global lat, dense
            if isinstance(o, h5py.Dataset):
                if name.startswith("saes_latents/"):
                    lat += o.id.get_storage_size()
                elif site in name:
                    dense += o.id.get_storage_size()
        s.visititems(add)
print(f"bytes a token stored: CSR latents {lat / tokens:.1f} (8 k + 16 = {8 * k + 16}), dense "
      f"activation {dense / tokens:.1f} ({dense / max(lat, 1):.1f}x the latents)")
PY
