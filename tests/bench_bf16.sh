#!/bin/sh
# bench_bf16.sh - `harvest bench --model` with compute "bf16" (harvest's AMX kernel where the CPU
# has AMX, else oneDNN) against "float32" (OpenBLAS),
# side by side in one run. A benchmark, not a test (not in CTest): figures depend on the machine
# and its load (on a shared machine the ratios of rounds run alternately matter more).
#
#   tests/bench_bf16.sh BUILD_DIR CHECKPOINT_DIR [ROUNDS=2] [THREADS="1 2"] [T=512] [PROMPTS=8]
#
# For each thread count, ROUNDS times, alternately: float32 then bf16 (one run a round, PROMPTS
# prompts of T tokens in batches of 8, harvesting the last layer's residual). Prints every round's
# tokens/s, the bf16 rounds' linear-layer GFLOP/s against the bf16 peak that `harvest bench
# --compute bf16` measures in the same run (on AMX: tdpbf16ps on tile registers; elsewhere
# vdpbf16ps on registers where the CPU has AVX512-BF16, else oneDNN's 4096^3 bf16 matmul; with
# that matmul beside the first two), and the
# best of each with their ratio, each mode's peak RSS against (weights + run state), and what
# bf16 packed (matrices, MiB, the mapped pages released, the seconds packing took inside the
# run). Take the figures on a quiet machine (a loaded one moves them by tens of percent). A
# HARVEST_BF16_KERNEL=onednn in the environment runs oneDNN's kernels on an AMX machine too (to
# compare the two). A checkpoint, e.g.:
#   harvest init-model --family llama --config tests/ref/hf-configs/Llama-3.2-1B.json --layers 4 DIR
set -eu
BUILD=$(cd "$1" && pwd)
CKPT=$(cd "$2" && pwd)
ROUNDS=${3:-2}
THREADS=${4:-"1 2"}
T=${5:-512}
PROMPTS=${6:-8}
H=$BUILD/harvest
LOG=$(mktemp -d)
trap 'rm -rf "$LOG"' EXIT

echo "bench_bf16: $CKPT, T = $T, $PROMPTS prompts, rounds $ROUNDS; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
FLAGS=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx512f|avx512_bf16|amx_bf16)$' |
    paste -sd' ')
echo "  CPU flags: ${FLAGS:-none of avx512f, avx512_bf16, amx_bf16}  load: $(cut -d' ' -f1-3 /proc/loadavg)"
for th in $THREADS; do
    bf=0; fp=0
    r=1
    while [ "$r" -le "$ROUNDS" ]; do
        for c in float32 bf16; do
            out=$LOG/$c-$th-$r.txt
            "$H" bench --model "$CKPT" --compute "$c" --threads "$th" --T "$T" --prompts "$PROMPTS" \
                --runs 1 >"$out" 2>&1 || { cat "$out"; exit 2; }
            tps=$(sed -n 's/^ *\([0-9.]*\) tokens\/s.*/\1/p' "$out")
            line="  threads $th round $r $c: $tps tokens/s"
            if [ "$c" = bf16 ]; then
                line="$line; $(sed -n -e 's/^ *compute bf16 (\([^)]*\)): linear layers \([0-9.]*\) GFLOP\/s = \([0-9]*%\) of the AMX peak measured now (\([0-9.]*\) GFLOP\/s, tdpbf16ps on registers, [0-9]* threads; 1 thread \([0-9.]*\)); oneDNN 4096^3 \([0-9.]*\) GFLOP\/s.*/linear layers \2 GFLOP\/s = \3 of the AMX peak \4 GFLOP\/s (tdpbf16ps on registers; 1 thread \5; oneDNN 4096^3 \6) (\1)/p' -e 's/^ *compute bf16 (\([^)]*\)): linear layers \([0-9.]*\) GFLOP\/s = \([0-9]*%\) of the vdpbf16ps peak measured now (\([0-9.]*\) GFLOP\/s on registers, [0-9]* threads; 1 thread \([0-9.]*\)); oneDNN 4096^3 \([0-9.]*\) GFLOP\/s.*/linear layers \2 GFLOP\/s = \3 of the vdpbf16ps peak \4 GFLOP\/s (on registers; 1 thread \5; oneDNN 4096^3 \6) (\1)/p' -e 's/^ *compute bf16 (\([^)]*\)): linear layers \([0-9.]*\) GFLOP\/s = \([0-9]*%\) of the bf16 peak measured now (\([0-9.]*\) GFLOP\/s.*/linear layers \2 GFLOP\/s = \3 of the peak \4 GFLOP\/s (oneDNN 4096^3) (\1)/p' "$out")"
                bf=$(echo "$tps $bf" | awk '{print ($1 > $2) ? $1 : $2}')
            else
                line="$line; $(sed -n 's/^ *FP32 FMA peak measured now: \([0-9.]*\) GFLOP\/s (\([^)]*\)): sgemm at its shapes \([0-9]*%\) of it, the model \([0-9]*%\)/the model \4 of the FP32 FMA peak \1 GFLOP\/s (\2; sgemm at its shapes \3)/p' "$out")"
                fp=$(echo "$tps $fp" | awk '{print ($1 > $2) ? $1 : $2}')
            fi
            echo "$line"
        done
        r=$((r + 1))
    done
    echo "  threads $th best: float32 $fp, bf16 $bf tokens/s: bf16 = $(echo "$bf $fp" | awk '{printf "%.2f", $1 / $2}') x float32"
    grep -h "peak RSS" "$LOG"/bf16-"$th"-*.txt | head -1 | sed 's/^/  bf16 /'
    grep -h "weight matrices packed" "$LOG"/bf16-"$th"-*.txt | head -1 | sed 's/^ *compute bf16: /  bf16 /'
    grep -h "peak RSS" "$LOG"/float32-"$th"-*.txt | head -1 | sed 's/^/  float32 /'
done
