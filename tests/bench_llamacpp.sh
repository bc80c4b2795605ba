#!/bin/sh
# bench_llamacpp.sh - harvest against llama.cpp's prefill on the same Laguna checkpoint, side by side.
# A benchmark, not a test (not in CTest): figures depend on the machine and its load.
#
#   tests/bench_llamacpp.sh BUILD_DIR CHECKPOINT_DIR [ROUNDS=3] [T=512] [PROMPTS=8]
#
# 1. converts CHECKPOINT_DIR to BF16 GGUF with tests/gguf/laguna_to_gguf.py (numpy only) into
#    BUILD_DIR/llamacpp/model.gguf (reused when newer than the checkpoint's config.json);
# 2. installs node-llama-cpp@3.21.1 (its prebuilt CPU binary of llama.cpp) into BUILD_DIR/llamacpp
#    with npm, once;
# 3. for 1 and 2 threads, ROUNDS times, alternately: `harvest bench --model` (PROMPTS prompts of T
#    tokens in batches of 8, harvesting the last layer's residual; one run a round) and llama.cpp
#    evaluating the same token ids (the same generator, tests/bench_llamacpp.mjs) one prompt at a
#    time in a fresh sequence (a batch of T: the whole prompt in one decode, logits of the last
#    token only). Prints the best of the rounds for each and their ratio.
# Threads: harvest --threads N sets OpenBLAS's and the kernels' threads; llama.cpp gets N threads.
set -eu
BUILD=$(cd "$1" && pwd)
CKPT=$(cd "$2" && pwd)
ROUNDS=${3:-3}
T=${4:-512}
PROMPTS=${5:-8}
HERE=$(cd "$(dirname "$0")" && pwd)
PY=/usr/bin/python3
DIR=$BUILD/llamacpp
mkdir -p "$DIR"

if [ ! -f "$DIR/model.gguf" ] || [ "$CKPT/config.json" -nt "$DIR/model.gguf" ]; then
    echo "converting $CKPT to $DIR/model.gguf"
    $PY "$HERE/gguf/laguna_to_gguf.py" "$CKPT" "$DIR/model.gguf.tmp"
    mv "$DIR/model.gguf.tmp" "$DIR/model.gguf"
fi
if [ ! -d "$DIR/node_modules/node-llama-cpp" ]; then
    echo "installing node-llama-cpp@3.21.1 into $DIR"
    (cd "$DIR" && npm install --no-audit --no-fund node-llama-cpp@3.21.1 >npm.log 2>&1) ||
        { echo "npm install failed: see $DIR/npm.log"; exit 2; }
fi
cp "$HERE/bench_llamacpp.mjs" "$DIR/bench_llamacpp.mjs"
VOCAB=$($PY -c "import json,sys; print(json.load(open(sys.argv[1]))['vocab_size'])" "$CKPT/config.json")

for THREADS in 1 2; do
    best_h=0; best_l=0; pct=0
    r=1
    while [ "$r" -le "$ROUNDS" ]; do
        out=$("$BUILD/harvest" bench --model "$CKPT" --T "$T" --batch 8 --prompts "$PROMPTS" \
              --threads "$THREADS" --runs 1)
        h=$(echo "$out" | sed -n 's/^ *\([0-9.]*\) tokens\/s.*/\1/p')
        p=$(echo "$out" | sed -n 's/.*= \([0-9]*\)% of the best sgemm.*/\1/p')
        l=$(cd "$DIR" && node bench_llamacpp.mjs model.gguf "$THREADS" "$T" "$PROMPTS" "$VOCAB")
        echo "threads $THREADS round $r: harvest $h tokens/s ($p% of sgemm), llama.cpp $l tokens/s"
        if $PY -c "import sys; sys.exit(0 if float(sys.argv[1]) > float(sys.argv[2]) else 1)" "$h" "$best_h"; then
            best_h=$h; pct=$p
        fi
        if $PY -c "import sys; sys.exit(0 if float(sys.argv[1]) > float(sys.argv[2]) else 1)" "$l" "$best_l"; then
            best_l=$l
        fi
        r=$((r + 1))
    done
    ratio=$($PY -c "import sys; print('%.2f' % (float(sys.argv[1]) / float(sys.argv[2])))" "$best_h" "$best_l")
    echo "threads $THREADS, best of $ROUNDS: harvest $best_h tokens/s ($pct% of sgemm), llama.cpp $best_l tokens/s: ${ratio}x"
done
