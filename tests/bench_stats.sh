#!/bin/sh
# bench_stats.sh - the cost of write-time statistics (a benchmark, not a test; README
# "Statistics"). The spec model's 8 block outputs (encoder_*_output, decoder_*_output), token
# layout, one rank, one BLAS thread: the same job with "statistics": true and false, run
# alternately ROUNDS times. For each side its best whole-run wall time (start to exit), best rank
# loop time (from the output's provenance: the forward, the writes and the statistics' partials,
# without MPI start-up and the final fold) and best CPU time (user + sys of the process: the
# least disturbed by other work on a shared machine); the cost is each as % of the time without.
#
#   tests/bench_stats.sh [HARVEST] [ROUNDS=3] [PROMPTS=64] [T=256]
set -eu
H=$(realpath "${1:-build/harvest}")
ROUNDS=${2:-3}
PROMPTS=${3:-64}
T=${4:-256}
W=${TMPDIR:-/tmp}/bench_stats.$$
mkdir -p "$W"
trap 'rm -rf "$W"' EXIT
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
"$H" init-model --family encdec --seed 1 "$W/model" >/dev/null 2>&1
/usr/bin/python3 - "$H" "$W" "$ROUNDS" "$PROMPTS" "$T" <<'PY'
import json, random, resource, subprocess, sys, time
import h5py
h, w, rounds, n, t = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
r = random.Random(1)
with open(f"{w}/p.jsonl", "w") as f:
    for _ in range(n):
        f.write(json.dumps({"input_ids": [r.randrange(8192) for _ in range(t)]}) + "\n")
for side, on in (("on", True), ("off", False)):
    json.dump({"model": "model", "data": "p.jsonl", "batch_size": 8, "statistics": on,
               "activations": ["encoder_*_output", "decoder_*_output"],
               "output": {"path": f"{side}.h5", "layout": "token"}}, open(f"{w}/{side}.json", "w"))
print(f"harvest stats bench: spec model, 8 block outputs, {n} prompts x {t} tokens, batch 8, "
      "token layout, 1 thread")
best = {}
for k in range(1, rounds + 1):
    for side in ("off", "on"):
        c0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.time()
        subprocess.run([h, "run", f"{w}/{side}.json", "--overwrite", "--quiet"], check=True)
        c1, t1 = resource.getrusage(resource.RUSAGE_CHILDREN), time.time()
        cpu = (c1.ru_utime + c1.ru_stime) - (c0.ru_utime + c0.ru_stime)
        with h5py.File(f"{w}/{side}.h5", "r") as f:
            loop = json.loads(f.attrs["provenance"])["ranks"][0]["loop_seconds"]
        v = {"run": t1 - t0, "loop": loop, "cpu": cpu}
        print(f"  round {k}, statistics {side:3}: run {v['run']:.2f} s, loop {loop:.2f} s, "
              f"CPU {cpu:.2f} s", flush=True)
        for m, x in v.items():
            best[side, m] = min(best.get((side, m), x), x)
print(f"best of {rounds} a side; the cost of statistics as % of the time without them:")
for m, what in (("run", "whole run (wall)"), ("loop", "rank loop (wall)"),
                ("cpu", "CPU (user + sys)")):
    off, on = best["off", m], best["on", m]
    print(f"  {what:18} {off:7.2f} s without, {on:7.2f} s with: {100 * (on - off) / off:+5.1f} %")
PY
