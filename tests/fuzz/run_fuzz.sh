#!/bin/sh
# run_fuzz.sh FUZZER SEEDS WORKDIR SECONDS TOKENIZER - libFuzzer for a bounded time on a fresh copy of
# the seeds; exits non-zero on a crash, a sanitizer report or a leak (the reproducer is kept in
# WORKDIR). The tokenizer named by TOKENIZER is the fixed one the text inputs go through.
set -eu
fuzzer=$1 seeds=$2 work=$3 seconds=$4
export FUZZ_TOKENIZER=$5
rm -rf "$work"
mkdir -p "$work/corpus"
cp "$seeds"/* "$work/corpus/"
cd "$work"
ASAN_OPTIONS=detect_leaks=1 "$fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -max_len=65536 -print_final_stats=1 corpus 2>fuzz.log || { tail -60 fuzz.log; exit 1; }
grep -E "stat::number_of_executed_units|stat::peak_rss_mb" fuzz.log
rm -rf "$work"
