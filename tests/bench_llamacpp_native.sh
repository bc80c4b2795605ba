#!/bin/sh
# bench_llamacpp_native.sh - harvest against a llama.cpp built for this machine, side by side in
# one run (a benchmark, not a test).
#
#   tests/bench_llamacpp_native.sh HARVEST CHECKPOINT_DIR [WORK=/tmp/llamacpp-native] [T=512]
#                                  [PROMPTS=8] [FAMILY=llama|laguna] [KEEP_GGUF=1|0]
#
# 0. A CHECKPOINT_DIR that does not exist yet is made first with `harvest init-model --layers 4`
#    from the release's dimensions: Llama-3.2-1B (tests/ref/hf-configs) for llama, Laguna-XS-2.1
#    (tests/ref/laguna-configs) for laguna, so one command does everything.
# 1. llama.cpp's source is the git bundle that node-llama-cpp@3.21.1 ships in its npm package
#    (llama/gitRelease.bundle): `npm pack`, cloned, built twice, llama-bench only, both with
#    cmake -DGGML_NATIVE=ON (the machine's own CPU features: AVX-512, AVX512-BF16, AMX where it
#    has them): WORK/llama.cpp/build its CPU backend alone, WORK/llama.cpp/build-blas with
#    -DGGML_BLAS=ON -DGGML_BLAS_VENDOR=OpenBLAS too (Debian's OpenBLAS, the library harvest's
#    float32 uses: llama.cpp then hands its large float32 products to sgemm, which on an AVX-512
#    CPU is faster than its own kernels; mixtures' expert products stay on its CPU backend).
# 2. The checkpoint becomes F32 and BF16 GGUFs, WORK/NAME-f32.gguf and WORK/NAME-bf16.gguf for a
#    checkpoint folder NAME (tests/gguf/llama_to_gguf.py or laguna_to_gguf.py; shapes and work of
#    the real model), remade when older than the checkpoint's config.json. KEEP_GGUF=0 deletes
#    each after its llama-bench runs, so one is on disk at a time (Laguna-XS-2.1 at 4 layers: F32
#    10.8 GB, BF16 5.4 GB; the Llama-3.2-1B cut: 2.0 and 1.0 GB).
# 3. llama-bench's prefill of T tokens (one prompt, batch T) on each GGUF at 1 and 2 threads with
#    either build and flash attention off and on, best of 2 repetitions: llama.cpp's figure is the
#    best of the four, and the line says which build and flash attention it was; then for 1 and
#    2 threads `harvest bench --model --value layers.{L-1}.layer_mid` (PROMPTS x T tokens,
#    compute float32 and bf16, best of 2 runs), the same work: llama.cpp's prefill runs its last
#    block's MLP for the last token alone (the one output it keeps), and harvest stops its last
#    block at the value asked for. Prints tokens/s side by side and harvest's ratio to
#    llama.cpp's best; harvest's bf16 also without the one-off packing of its weights (inside
#    each run: a corpus run packs once, and llama-bench's figure leaves the model's load out).
# The CPU, the load average before and after and the llama.cpp commit are printed with the figures;
# llama-bench's messages go to WORK/llama-bench.log. Both harvest and llama-bench run in the
# caller's environment: to compare OpenBLAS's own core choice, unset OPENBLAS_CORETYPE for the
# whole command.
set -eu
H=$(realpath "$1")
CKPT=$(realpath "$2")
WORK=${3:-/tmp/llamacpp-native}
T=${4:-512}
PROMPTS=${5:-8}
FAMILY=${6:-llama}
KEEP=${7:-1}
HERE=$(cd "$(dirname "$0")" && pwd)
PY=/usr/bin/python3
case $FAMILY in
    llama) CONFIG=$HERE/ref/hf-configs/Llama-3.2-1B.json ;;
    laguna) CONFIG=$HERE/ref/laguna-configs/Laguna-XS-2.1.json ;;
    *) echo "FAMILY must be llama or laguna, not $FAMILY" >&2; exit 1 ;;
esac
mkdir -p "$WORK"
WORK=$(realpath "$WORK")
if [ ! -e "$CKPT" ]; then
    echo "making $CKPT: harvest init-model --family $FAMILY --config $CONFIG --layers 4"
    "$H" init-model --family "$FAMILY" --config "$CONFIG" --layers 4 "$CKPT"
fi
NAME=$(basename "$CKPT")
SRC=$WORK/llama.cpp
if [ ! -d "$SRC" ]; then
    echo "fetching llama.cpp (node-llama-cpp@3.21.1's bundled source) into $SRC"
    (cd "$WORK" && npm pack --silent node-llama-cpp@3.21.1 >/dev/null &&
        tar xzf node-llama-cpp-3.21.1.tgz package/llama/gitRelease.bundle &&
        git clone -q package/llama/gitRelease.bundle llama.cpp)
fi
build() { # DIR CMAKE_FLAGS... -> DIR/bin/llama-bench, built once with GGML_NATIVE
    d=$1
    shift
    [ -x "$SRC/$d/bin/llama-bench" ] && return 0
    echo "building llama.cpp in $SRC/$d: GGML_NATIVE $*"
    cmake -S "$SRC" -B "$SRC/$d" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_EXAMPLES=OFF "$@" \
        >"$WORK/cmake-$d.log" 2>&1
    cmake --build "$SRC/$d" -j "$(nproc)" --target llama-bench >>"$WORK/cmake-$d.log" 2>&1
}
build build
build build-blas -DGGML_BLAS=ON -DGGML_BLAS_VENDOR=OpenBLAS
gguf() { # KIND -> WORK/NAME-KIND.gguf, converted when missing or older than the checkpoint
    g=$WORK/$NAME-$1.gguf
    if [ ! -f "$g" ] || [ "$CKPT/config.json" -nt "$g" ]; then
        echo "converting $CKPT to $g" >&2
        $PY "$HERE/gguf/${FAMILY}_to_gguf.py" "$CKPT" "$g.tmp" "$1"
        mv "$g.tmp" "$g"
    fi
}
echo "llama.cpp: $(cd "$SRC" && git log --oneline -1), built with GGML_NATIVE (build) and with" \
    "GGML_NATIVE and GGML_BLAS=OpenBLAS (build-blas)"
FLAGS=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' |
    grep -E '^(avx2|avx512f|avx512_bf16|amx_bf16)$' | paste -sd' ')
echo "CPU: $(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1), $(nproc) cores, ${FLAGS}" \
    "(family $(sed -n 's/^cpu family[^:]*: //p' /proc/cpuinfo | head -1)," \
    "model $(sed -n 's/^model[^:]*: //p' /proc/cpuinfo | grep -v '[^0-9]' | head -1));" \
    "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
lcpp() { # GGUF THREADS -> "TOKENS/S FA BUILD": llama-bench's best prefill over both builds,
    # flash attention off and on
    best=
    for d in build build-blas; do
        r=$("$SRC/$d/bin/llama-bench" -m "$1" -p "$T" -n 0 -b "$T" -ub "$T" -t "$2" -fa 0,1 -r 2 \
            -o json 2>>"$WORK/llama-bench.log" |
            $PY -c "import json,sys; r = max(json.load(sys.stdin), key=lambda r: r['avg_ts'])
print('%.1f %s $d' % (r['avg_ts'], {0: 'off', 1: 'on'}.get(int(r['flash_attn']), 'auto')))") ||
            { echo "llama-bench ($d) failed on $1 (see $WORK/llama-bench.log)" >&2; exit 2; }
        best=$(printf '%s\n%s\n' "$best" "$r" | sort -g -r | head -1)
    done
    echo "$best"
}
LAST=layers.$($PY -c "import json,sys; print(json.load(open(sys.argv[1]))['num_hidden_layers'] - 1)" \
    "$CKPT/config.json").layer_mid # llama.cpp's work (see 3.)
hv() { # THREADS COMPUTE -> harvest bench's tokens/s, and (bf16) without the one-off packing
    out=$("$H" bench --model "$CKPT" --T "$T" --prompts "$PROMPTS" --batch 8 --runs 2 \
        --threads "$1" --compute "$2" --value "$LAST")
    a=$(echo "$out" | sed -n 's/^ *\([0-9.]*\) tokens\/s.*/\1/p' | head -1)
    b=$(echo "$out" | sed -n 's/^ *compute bf16: \([0-9.]*\) tokens\/s without the one-off packing.*/\1/p')
    echo "$a ${b:-$a}"
}
"$H" bench --model "$CKPT" --T 8 --prompts 1 --batch 1 --runs 1 --threads 1 | grep "^ *BLAS"
echo "harvest harvests $LAST"
R=$WORK/$NAME-llamacpp.txt # "KIND THREADS TOKENS/S FA" lines of this run
: >"$R"
for kind in f32 bf16; do
    gguf "$kind"
    for t in 1 2; do
        r=$(lcpp "$WORK/$NAME-$kind.gguf" "$t")
        echo "$kind $t $r" >>"$R"
    done
    [ "$KEEP" = 1 ] || rm -f "$WORK/$NAME-$kind.gguf"
done
for t in 1 2; do
    a=$(hv "$t" float32)
    a=${a% *}
    b=$(hv "$t" bf16)
    bn=${b#* }
    b=${b% *}
    c=$(sed -n "s/^f32 $t //p" "$R")
    d=$(sed -n "s/^bf16 $t //p" "$R")
    awk -v t="$t" -v a="$a" -v b="$b" -v c="$c" -v d="$d" -v T="$T" -v P="$PROMPTS" \
        -v bn="$bn" 'BEGIN {
        split(c, C, " "); split(d, D, " ")
        printf "threads %d: harvest f32 %.1f, bf16 %.1f tokens/s (%.1f without the one-off packing) (%d x %d) | llama.cpp F32 %.1f (%s, fa %s), BF16 %.1f (%s, fa %s) (1 x %d, best of builds and fa off/on) | harvest f32 / llama.cpp F32 %.2f, bf16 / llama.cpp BF16 %.2f (%.2f without the packing), bf16 / harvest f32 %.2f\n",
               t, a, b, bn, P, T, C[1], C[3], C[2], D[1], D[3], D[2], T, (C[1] > 0 ? a / C[1] : 0), (D[1] > 0 ? b / D[1] : 0), (D[1] > 0 ? bn / D[1] : 0), (a > 0 ? b / a : 0) }'
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
