#!/bin/sh
# bench_blas.sh - the BLAS kernel check's effect, side by side in one run (a benchmark, not a test).
#
#   tests/bench_blas.sh HARVEST CHECKPOINT_DIR [ROUNDS=2] [T=512] [PROMPTS=8]
#
# For 1 and 2 threads, ROUNDS times, alternately: `harvest bench --model` with nothing set (what a
# user gets: harvest's own choice of core), with OPENBLAS_CORETYPE set by hand to the core harvest
# chose (the right core), and with OPENBLAS_CORETYPE set to OpenBLAS's own choice (what harvest
# ran before the check). Prints each one's best tokens/s and the ratios.
set -eu
H=$1
CKPT=$2
ROUNDS=${3:-2}
T=${4:-512}
PROMPTS=${5:-8}
unset OPENBLAS_CORETYPE
line=$("$H" bench --model "$CKPT" --T 8 --prompts 1 --batch 1 --runs 1 --threads 1 | grep "^  BLAS ")
chosen=$(echo "$line" | sed -n 's/.*core \([A-Za-z0-9_]*\) .*/\1/p')
own=$(echo "$line" | sed -n 's/.*OpenBLAS chose \([A-Za-z0-9_]*\).*/\1/p')
[ -n "$own" ] || own=$chosen
echo "$line"
echo "cores: harvest's choice $chosen, OpenBLAS's own $own; $PROMPTS x $T tokens, best of $ROUNDS"
tps() { # env assignments -> tokens/s of one bench run
    env "$@" "$H" bench --model "$CKPT" --T "$T" --prompts "$PROMPTS" --batch 8 --runs 1 \
        --threads "$THREADS" | sed -n 's/^ *\([0-9.]*\) tokens\/s.*/\1/p' | head -1
}
best() { awk -v a="$1" -v b="$2" 'BEGIN { print (a > b ? a : b) }'; }
for THREADS in 1 2; do
    a=0 b=0 c=0 r=0
    while [ "$r" -lt "$ROUNDS" ]; do
        a=$(best "$a" "$(tps HARVEST_BENCH=plain)")
        b=$(best "$b" "$(tps OPENBLAS_CORETYPE="$chosen")")
        c=$(best "$c" "$(tps OPENBLAS_CORETYPE="$own")")
        r=$((r + 1))
    done
    awk -v t="$THREADS" -v a="$a" -v b="$b" -v c="$c" -v ch="$chosen" -v ow="$own" 'BEGIN {
        printf "threads %d: nothing set %.1f tokens/s | OPENBLAS_CORETYPE=%s %.1f | OPENBLAS_CORETYPE=%s %.1f | nothing set / %s = %.2f, / %s = %.2f\n",
               t, a, ch, b, ow, c, ch, a / b, ow, a / c }'
done
