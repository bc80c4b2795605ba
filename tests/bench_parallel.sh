#!/usr/bin/env bash
# bench_parallel.sh - side by side in one run, on the same job (the spec model, 128 prompts of 256
# tokens, batch 2 = 64 micro-batches, the block outputs):
#   np 1 with 2 BLAS threads | np 2 data-parallel, 1 thread each | np 2 as two stages, 1 thread each
# and, with gzip 1 (filtered datasets: the replicas' rows go in collective writes), np 1 with 2
# threads | np 2 data-parallel.
# Prints tokens/s (tokens over the longest rank's loop time, from the output's provenance) and the
# pipeline's idle fraction, 1 - busy/loop summed over the stages. Not a test: figures.
#   usage: tests/bench_parallel.sh [HARVEST] [WORKDIR]
set -euo pipefail
HARVEST=$(realpath "${1:-build/harvest}")
if [ -n "${2:-}" ]; then
    WORK=$2
else
    WORK=$(mktemp -d /tmp/harvest-bench-parallel-XXXXXX)
    trap 'rm -rf "$WORK"' EXIT # its outputs are gigabytes
fi
PY=/usr/bin/python3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_vader_backing_directory=/tmp
mkdir -p "$WORK"
[ -f "$WORK/model/config.json" ] || "$HARVEST" init-model --family encdec --seed 0 "$WORK/model" 2>/dev/null
$PY - "$WORK" <<'PY'
import json, random, sys
w = sys.argv[1]
r = random.Random(0)
with open(f"{w}/prompts.jsonl", "w") as f:
    for _ in range(128):
        f.write(json.dumps({"input_ids": [r.randrange(8192) for _ in range(256)]}) + "\n")
for name, stages, gz in (("np1", 1, 0), ("dp2", 1, 0), ("pp2", 2, 0), ("np1_gz", 1, 1), ("dp2_gz", 1, 1)):
    json.dump({"model": "model", "data": "prompts.jsonl", "activations": ["*_output"],
               "max_seq_len": 256, "batch_size": 2, "output": {"path": f"{name}.h5", "compression": gz},
               "parallel": {"pipeline_stages": stages}}, open(f"{w}/{name}.json", "w"))
PY
sync
run() { # name np threads [mpirun flags]
    local name=$1 np=$2 threads=$3
    shift 3
    OPENBLAS_NUM_THREADS=$threads mpirun -np "$np" "$@" "$HARVEST" run "$WORK/$name.json" --overwrite --quiet
}
run np1 1 2 --bind-to none
run dp2 2 1
run pp2 2 1
run np1_gz 1 2 --bind-to none
run dp2_gz 2 1
$PY - "$WORK" <<'PY'
import json, sys
import h5py
w = sys.argv[1]
print("harvest parallel bench: spec model, 128 prompts x 256 tokens, batch 2 (64 micro-batches)")
base = None
for name, what in (("np1", "np 1, 2 BLAS threads"), ("dp2", "np 2 data-parallel, 1 thread each"),
                   ("pp2", "np 2 as two stages, 1 thread each"), ("np1_gz", "gzip 1: np 1, 2 BLAS threads"),
                   ("dp2_gz", "gzip 1: np 2 data-parallel")):
    if name == "np1_gz":
        base = None
    with h5py.File(f"{w}/{name}.h5", "r") as f:
        ranks = json.loads(f.attrs["provenance"])["ranks"]
        tokens = int(f["prompts/length"][:].sum())
    loop = max(r["loop_seconds"] for r in ranks)
    rate = tokens / loop
    base = base or rate
    line = f"  {what:38s} {rate:8.0f} tokens/s  ({rate / base:.2f}x np 1)"
    if name == "pp2":
        busy = sum(r["busy_seconds"] for r in ranks)
        total = sum(r["loop_seconds"] for r in ranks)
        per = ", ".join(f"stage {r['stage']} {1 - r['busy_seconds'] / r['loop_seconds']:.1%}" for r in ranks)
        line += f"\n  pipeline idle: {1 - busy / total:.1%} ({per})"
    print(line)
PY
