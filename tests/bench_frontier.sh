#!/bin/sh
# bench_frontier.sh - `harvest bench --model` on every frontier family of issue 22 at the releases'
# dimensions, one after another in one run, printed side by side. A benchmark, not a test (not in
# CTest): figures depend on the machine and its load.
#
#   tests/bench_frontier.sh BUILD_DIR CHECKPOINTS_DIR [THREADS=1] [ROWS="olmoe phi3 gpt_oss deepseek_v3 olmo2"]
#
# Each row is a release's config.json (tests/ref/configs) cut to its first layers, random weights
# in the release's layout (BF16; gpt-oss's experts MXFP4, DeepSeek-V3's matrices FP8
# block-scaled), made under CHECKPOINTS_DIR by `harvest init-model` when
# absent or incomplete (into NAME.part, renamed when complete) and kept there:
#
#   row          release config                  layers  folder              on disk
#   olmoe        OLMoE-1B-7B-0924.json           1       olmoe-1l            ~1.2 GB
#   phi3         Phi-3.5-mini-instruct.json      1       phi3.5-mini-1l      ~0.6 GB
#   gpt_oss      gpt-oss-20b.json                1       gpt-oss-20b-1l      ~2.7 GB
#   deepseek_v3  DeepSeek-R1-0528.json           4       deepseek-v3-4l      ~17 GB
#   olmo2        OLMo-2-1124-7B.json             1       olmo2-7b-1l         ~2.0 GB
#
# OLMo 2's release config says torch_dtype float32; init-model writes BF16 (as for every
# Llama-style family) and keeps that key, so bench's weights figure for it is the float32 size,
# twice the BF16 bytes the checkpoint holds (docs/benchmarks.md).
#
# DeepSeek-V3's cut: the R1-0528 file stands for V3's architecture (the same class and
# dimensions); first_k_dense_replace is 3, so 4 layers are its 3 dense blocks and one mixture block
# (256 experts, top 8), FP8 as published: 16.97 GB on disk (a row is not made when the folder's
# file system has less than its size + 1 GB free), about 12 CPU-minutes to make on a quiet machine. Its row runs only when MemAvailable is at least MIN_GIB (default 20)
# GiB, else it is skipped with the figure printed.
#
# Every row runs `harvest bench --model DIR --T 512 --batch 8 --prompts 8 --threads THREADS
# --runs 1` (docs/benchmarks.md, "The frontier families at the releases' dimensions"): the last
# layer's output harvested, so no LM head is computed. The table gives tokens/s,
# the GFLOP a token, the model's GFLOP/s as % of the best sgemm rate bench measures at the model's
# shapes in the same run, and peak RSS against (weights as published + run state). The load
# average before and after each row is printed: take the figures on a quiet machine.
set -eu
BUILD=$(cd "$1" && pwd)
mkdir -p "$2"
CK=$(cd "$2" && pwd)
THREADS=${3:-1}
ROWS=${4:-"olmoe phi3 gpt_oss deepseek_v3 olmo2"}
MIN_GIB=${MIN_GIB:-20}
H=$BUILD/harvest
HERE=$(cd "$(dirname "$0")" && pwd)
CFG=$HERE/ref/configs
LOG=$(mktemp -d)
trap 'rm -rf "$LOG"' EXIT

# row -> "family config layers folder release GB-on-disk (rounded up)"
row_spec() {
    case $1 in
        olmoe) echo "olmoe OLMoE-1B-7B-0924.json 1 olmoe-1l OLMoE-1B-7B-0924 2" ;;
        phi3) echo "phi3 Phi-3.5-mini-instruct.json 1 phi3.5-mini-1l Phi-3.5-mini-instruct 1" ;;
        gpt_oss) echo "gpt_oss gpt-oss-20b.json 1 gpt-oss-20b-1l gpt-oss-20b 3" ;;
        deepseek_v3) echo "deepseek_v3 DeepSeek-R1-0528.json 4 deepseek-v3-4l DeepSeek-V3(R1-0528) 18" ;;
        olmo2) echo "olmo2 OLMo-2-1124-7B.json 1 olmo2-7b-1l OLMo-2-1124-7B 3" ;;
        *) echo "bench_frontier: unknown row \"$1\" (olmoe phi3 gpt_oss deepseek_v3 olmo2)" >&2; exit 1 ;;
    esac
}

avail_gib() {
    awk '/^MemAvailable:/ {printf "%.1f", $2 / 1048576}' /proc/meminfo
}

# complete: init-model writes the shards' index last (a folder made by hand without .part and
# interrupted has none, and is made again)
make_row() { # family config layers folder GB; 1 when there is no room for it
    [ -f "$CK/$4/model.safetensors.index.json" ] && return 0
    rm -rf "$CK/$4.part" "$CK/$4"
    free_gb=$(df -Pk "$CK" | awk 'NR == 2 {printf "%d", $4 / 1e6}')
    if [ "$free_gb" -le "$5" ]; then
        echo "  $CK/$4: not made, $free_gb GB free on its file system, $5 GB + 1 needed"
        return 1
    fi
    echo "  making $CK/$4: init-model --family $1 --config $2 --layers $3"
    "$H" init-model --family "$1" --config "$CFG/$2" --layers "$3" "$CK/$4.part" >"$LOG/make.txt" 2>&1 ||
        { cat "$LOG/make.txt"; exit 2; }
    mv "$CK/$4.part" "$CK/$4"
}

for r in $ROWS; do row_spec "$r" >/dev/null; done # an unknown row: exit 1 before anything runs
echo "bench_frontier: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) cores, threads $THREADS"
echo "  harvest $H, checkpoints $CK; $(date -u '+%Y-%m-%d %H:%M UTC'), load $(cut -d' ' -f1-3 /proc/loadavg), MemAvailable $(avail_gib) GiB"
TABLE=$LOG/table.txt
: >"$TABLE"
for r in $ROWS; do
    set -- $(row_spec "$r")
    fam=$1 cfg=$2 layers=$3 dir=$4 rel=$5 gb=$6
    if ! make_row "$fam" "$cfg" "$layers" "$dir" "$gb"; then
        printf '%s\t%s\tskipped: no disk space to make it\n' "$rel" "$layers" >>"$TABLE"
        continue
    fi
    if [ "$fam" = deepseek_v3 ] && awk -v a="$(avail_gib)" -v m="$MIN_GIB" 'BEGIN {exit !(a < m)}'; then
        echo "  $rel: skipped, MemAvailable $(avail_gib) GiB < MIN_GIB $MIN_GIB"
        printf '%s\t%s\tskipped: MemAvailable %s GiB < %s\n' "$rel" "$layers" "$(avail_gib)" "$MIN_GIB" >>"$TABLE"
        continue
    fi
    l0=$(cut -d' ' -f1 /proc/loadavg)
    out=$LOG/$r.txt
    "$H" bench --model "$CK/$dir" --T 512 --batch 8 --prompts 8 --threads "$THREADS" --runs 1 \
        --dir "$LOG" >"$out" 2>&1 || { cat "$out"; exit 2; }
    l1=$(cut -d' ' -f1 /proc/loadavg)
    sed 's/^/  | /' "$out"
    tps=$(sed -n 's/^ *\([0-9.]*\) tokens\/s.*/\1/p' "$out")
    gft=$(sed -n 's/^ *GFLOP a token: \([0-9.]*\) executed.*/\1/p' "$out")
    pct=$(sed -n 's/^ *model \([0-9.]*\) GFLOP\/s executed = \([0-9]*%\) of the best sgemm rate at its shapes (\([0-9.]*\) GFLOP\/s)/\2 (\1 of \3)/p' "$out")
    rss=$(sed -n 's/^ *peak RSS \([0-9]*\) MiB = \([0-9.]*\) x (weights \([0-9]*\) MiB .* + run state \([0-9]*\) MiB .*/\1 MiB = \2 x (\3 + \4 MiB)/p' "$out")
    printf '%s\t%s\t%s\t%s\t%s\t%s\tload %s-%s\n' "$rel" "$layers" "$tps" "$gft" "$pct" "$rss" "$l0" "$l1" >>"$TABLE"
done
echo
echo "release, layers, tokens/s, GFLOP a token, % of the sgemm rate (GFLOP/s of GFLOP/s), peak RSS = x (weights as published + run state), load average before-after:"
awk -F'\t' '{printf "  %-22s %2s  ", $1, $2; for (i = 3; i <= NF; i++) printf "%s%s", $i, (i < NF ? " | " : "\n")}' "$TABLE"
