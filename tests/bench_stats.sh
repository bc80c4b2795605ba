#!/bin/sh
# bench_stats.sh - the cost of write-time statistics (a benchmark, not a test; README
# "Statistics"). The spec model's 8 block outputs (encoder_*_output, decoder_*_output), token
# layout, one rank, one BLAS thread: the same job with "statistics": true and false, run
# alternately ROUNDS times; each side's best whole-run time (the process, start to exit) and best
# loop time (the rank loop, from the output's provenance: the forward, the writes and the
# statistics' partials, without MPI start-up and the final fold). Prints each and the cost as %
# of the time without statistics.
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
/usr/bin/python3 - "$W" "$PROMPTS" "$T" <<'EOF'
import json, random, sys
w, n, t = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
r = random.Random(1)
with open(f"{w}/p.jsonl", "w") as f:
    for _ in range(n):
        f.write(json.dumps({"input_ids": [r.randrange(8192) for _ in range(t)]}) + "\n")
for side, on in (("on", True), ("off", False)):
    json.dump({"model": "model", "data": "p.jsonl", "batch_size": 8, "statistics": on,
               "activations": ["encoder_*_output", "decoder_*_output"],
               "output": {"path": f"{side}.h5", "layout": "token"}}, open(f"{w}/{side}.json", "w"))
EOF
loop_of() { # the rank loop's seconds from an output's provenance
    /usr/bin/python3 -c "import h5py, json, sys
print(json.loads(h5py.File(sys.argv[1], 'r').attrs['provenance'])['ranks'][0]['loop_seconds'])" "$1"
}
echo "harvest stats bench: spec model, 8 block outputs, $PROMPTS prompts x $T tokens, batch 8, token layout, 1 thread"
best() { /usr/bin/python3 -c "import sys; print(min(map(float, sys.argv[1:])))" "$@"; }
ON_RUN="" OFF_RUN="" ON_LOOP="" OFF_LOOP=""
for r in $(seq "$ROUNDS"); do
    for side in off on; do
        t0=$(date +%s.%N)
        "$H" run "$W/$side.json" --overwrite --quiet
        t1=$(date +%s.%N)
        run=$(/usr/bin/python3 -c "print($t1 - $t0)")
        loop=$(loop_of "$W/$side.h5")
        printf '  round %d, statistics %-3s: run %.2f s, loop %.2f s\n' "$r" "$side" "$run" "$loop"
        if [ "$side" = on ]; then ON_RUN="$ON_RUN $run" ON_LOOP="$ON_LOOP $loop"
        else OFF_RUN="$OFF_RUN $run" OFF_LOOP="$OFF_LOOP $loop"; fi
    done
done
/usr/bin/python3 - $(best $OFF_RUN) $(best $ON_RUN) $(best $OFF_LOOP) $(best $ON_LOOP) <<'EOF'
import sys
off_r, on_r, off_l, on_l = map(float, sys.argv[1:])
print(f"best of each: run {off_r:.2f} s without, {on_r:.2f} s with statistics: "
      f"{100 * (on_r - off_r) / off_r:+.1f} %")
print(f"              loop {off_l:.2f} s without, {on_l:.2f} s with statistics: "
      f"{100 * (on_l - off_l) / off_l:+.1f} %")
EOF
