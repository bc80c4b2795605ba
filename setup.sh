#!/usr/bin/env bash
# setup.sh - one command for a fresh Debian 12 machine.
#
#   ./setup.sh        install what is missing, build, write the default random-weight spec model,
#                     harvest the bundled corpus, and say where the output is
#   ./setup.sh test   install what is missing, build, run the whole test suite (CTest), then the
#                     unit tests again under AddressSanitizer + UBSan
#
# Runs as root, or as a user with sudo. Debian packages only.
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$PWD
JOBS=$(nproc 2>/dev/null || echo 2)

PACKAGES=(build-essential cmake pkg-config libopenmpi-dev openmpi-bin libhdf5-openmpi-dev
          hdf5-tools libopenblas-dev libcjson-dev libpcre2-dev libutf8proc-dev zlib1g-dev
          python3-numpy python3-h5py libdnnl-dev)
# the Slurm tests start a real single-node cluster (slurmctld, slurmd, munge); the fuzz test
# needs clang's libFuzzer; the tokenizer test compares with a JavaScript reference (node + npm);
# format-check runs clang-format; the export test feeds the reader's torch batches to torch; the
# report test renders `harvest report`'s page in headless Chromium
if [ "${1:-}" = test ]; then
    PACKAGES+=(slurm-wlm clang libclang-rt-dev clang-format python3-torch python3-venv python3-pip
               chromium)
    command -v npm >/dev/null 2>&1 || PACKAGES+=(nodejs npm)
fi

install_missing() {
    local missing=()
    for p in "${PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    echo "setup: installing ${missing[*]}"
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo=sudo
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

build() { # build DIR [cmake args...]
    local dir=$1
    shift
    cmake -S "$ROOT" -B "$dir" -DCMAKE_BUILD_TYPE=Release -DAH_WERROR=ON "$@" >/dev/null
    cmake --build "$dir" -j "$JOBS"
}

# Open MPI as root in a container (see README "MPI")
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_backing_directory=/tmp

install_missing
build "$ROOT/build"

case "${1:-quickstart}" in
quickstart)
    mkdir -p out
    [ -f out/model/config.json ] || build/harvest init-model --family encdec --seed 0 out/model
    cp data/tokenizer.json out/model/ # the spec model's tokenizer: the corpus is text
    build/harvest run data/quickstart.json --overwrite
    build/harvest inspect out/quickstart.h5 | head -8
    cat <<'MSG'

The output is out/quickstart.h5. Open it with h5py:

    /usr/bin/python3 -c "import h5py; f = h5py.File('out/quickstart.h5'); \
print(f['activations/decoder_3_output'].shape, f['prompts/length'][:5])"

Prompt p's tensor is the leading corner [p, :length[p], ...]; the rest is NaN padding.
MSG
    ;;
test)
    ctest --test-dir build --output-on-failure -j 1
    echo "setup: unit tests under AddressSanitizer + UndefinedBehaviorSanitizer"
    build "$ROOT/build-asan" -DCMAKE_BUILD_TYPE=Debug -DAH_SANITIZE=address,undefined
    ASAN_OPTIONS=detect_leaks=1 ctest --test-dir build-asan --output-on-failure -L unit
    ;;
*)
    echo "usage: ./setup.sh [quickstart | test]" >&2
    exit 1
    ;;
esac
