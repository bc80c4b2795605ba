#!/bin/sh
# bench_llamacpp_native.sh - harvest against a llama.cpp built for this machine, side by side in
# one run (a benchmark, not a test).
#
#   tests/bench_llamacpp_native.sh HARVEST CHECKPOINT_DIR [WORK=/tmp/llamacpp-native] [T=512]
#                                  [PROMPTS=8] [FAMILY=llama|laguna]
#
# 1. llama.cpp's source is the git bundle that node-llama-cpp@3.21.1 ships in its npm package
#    (llama/gitRelease.bundle): `npm pack`, cloned, built once with cmake -DGGML_NATIVE=ON (the
#    machine's own CPU features: AVX-512, AVX512-BF16, AMX where it has them), llama-bench only.
# 2. The checkpoint becomes F32 and BF16 GGUFs (tests/gguf/llama_to_gguf.py or
#    laguna_to_gguf.py; shapes and work of the real model, values not llama.cpp's layout).
# 3. For 1 and 2 threads: `harvest bench --model` (PROMPTS x T tokens, compute float32 and bf16)
#    and llama-bench's prefill of T tokens (one prompt, batch T) on both GGUFs with flash
#    attention off and on, best of 2 repetitions; prints tokens/s side by side and harvest's
#    ratio to llama.cpp's best.
set -eu
H=$(realpath "$1")
CKPT=$(realpath "$2")
WORK=${3:-/tmp/llamacpp-native}
T=${4:-512}
PROMPTS=${5:-8}
FAMILY=${6:-llama}
HERE=$(cd "$(dirname "$0")" && pwd)
PY=/usr/bin/python3
mkdir -p "$WORK"
LB=$WORK/llama.cpp/build/bin/llama-bench
if [ ! -x "$LB" ]; then
    echo "building llama.cpp (node-llama-cpp@3.21.1's bundled source, GGML_NATIVE) in $WORK"
    (cd "$WORK" && npm pack --silent node-llama-cpp@3.21.1 >/dev/null &&
        tar xzf node-llama-cpp-3.21.1.tgz package/llama/gitRelease.bundle &&
        rm -rf llama.cpp && git clone -q package/llama/gitRelease.bundle llama.cpp)
    cmake -S "$WORK/llama.cpp" -B "$WORK/llama.cpp/build" -DCMAKE_BUILD_TYPE=Release \
        -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF \
        -DLLAMA_BUILD_EXAMPLES=OFF >"$WORK/cmake.log" 2>&1
    cmake --build "$WORK/llama.cpp/build" -j "$(nproc)" --target llama-bench >>"$WORK/cmake.log" 2>&1
fi
for kind in f32 bf16; do
    g=$WORK/model-$kind.gguf
    if [ ! -f "$g" ] || [ "$CKPT/config.json" -nt "$g" ]; then
        echo "converting $CKPT to $g"
        if [ "$FAMILY" = laguna ]; then
            [ "$kind" = bf16 ] || continue # laguna_to_gguf.py writes BF16 only
            $PY "$HERE/gguf/laguna_to_gguf.py" "$CKPT" "$g.tmp"
        else
            $PY "$HERE/gguf/llama_to_gguf.py" "$CKPT" "$g.tmp" "$kind"
        fi
        mv "$g.tmp" "$g"
    fi
done
echo "llama.cpp: $(cd "$WORK/llama.cpp" && git log --oneline -1), built with GGML_NATIVE"
lcpp() { # GGUF THREADS -> the best tokens/s of llama-bench's prefill, flash attention off and on
    [ -f "$1" ] || { echo 0; return; }
    "$LB" -m "$1" -p "$T" -n 0 -b "$T" -ub "$T" -t "$2" -fa 0,1 -r 2 -o json 2>/dev/null |
        $PY -c "import json,sys; print(max(r['avg_ts'] for r in json.load(sys.stdin)))"
}
hv() { # THREADS COMPUTE -> harvest bench's tokens/s
    "$H" bench --model "$CKPT" --T "$T" --prompts "$PROMPTS" --batch 8 --runs 2 --threads "$1" \
        --compute "$2" | sed -n 's/^ *\([0-9.]*\) tokens\/s.*/\1/p' | head -1
}
"$H" bench --model "$CKPT" --T 8 --prompts 1 --batch 1 --runs 1 --threads 1 | grep "BLAS"
for t in 1 2; do
    a=$(hv "$t" float32) b=$(hv "$t" bf16) c=$(lcpp "$WORK/model-f32.gguf" "$t")
    d=$(lcpp "$WORK/model-bf16.gguf" "$t")
    awk -v t="$t" -v a="$a" -v b="$b" -v c="$c" -v d="$d" -v T="$T" -v P="$PROMPTS" 'BEGIN {
        printf "threads %d: harvest f32 %.1f, bf16 %.1f tokens/s (%d x %d) | llama.cpp F32 %.1f, BF16 %.1f (1 x %d, best of fa off/on) | harvest f32 / llama.cpp F32 %.2f, bf16 / llama.cpp BF16 %.2f, bf16 / harvest f32 %.2f\n",
               t, a, b, P, T, c, d, T, (c > 0 ? a / c : 0), (d > 0 ? b / d : 0), (a > 0 ? b / a : 0) }'
done
