"""Do llama.cpp and harvest compute the same Laguna model from laguna_to_gguf.py's GGUFs? A check
run by hand (it needs a llama.cpp build tree), not a CTest test.

Usage: check_laguna_gguf.py HARVEST LLAMA_CPP_DIR [CHECKPOINT_DIR] [WORK=/tmp/laguna-gguf-check]

LLAMA_CPP_DIR is a llama.cpp source tree built in LLAMA_CPP_DIR/build (libllama.so in build/bin),
as tests/bench_llamacpp_native.sh builds it. Without CHECKPOINT_DIR, a tiny random Laguna
checkpoint is made (`harvest init-model --family laguna --preset XS-2.1`: per-head attention gates,
YaRN with partial rotary on the full layers, a sliding window of 8, a dense lead block, sigmoid
routing with the selection bias, shared experts). Both GGUFs (f32, bf16) are written, lcpp_logits.c
is compiled against the build, and the logits of T = 24 random ids (three sliding windows) from
llama.cpp (float32 KV cache, flash attention off and on, 1 thread, the config's YaRN beta_fast and
beta_slow, which llama.cpp's Laguna loader does not read from a GGUF) are compared with harvest's
`logits` of the same ids: the F32 GGUF with harvest's float32 compute, the BF16 GGUF with harvest's
`"compute": "bf16"` (both round a matmul's input to bf16 and accumulate in float32), and the BF16
GGUF with float32 too, for scale. Prints, for each, the largest |difference| over all T x V logits
relative to the largest |logit| and how many positions' argmax agree; exit 1 when a same-arithmetic
pair differs by more than 1e-5 with flash attention off, or the F32 pair by more than 5e-3 with it
on (llama.cpp's CPU flash attention differs from its plain path by about 1e-3 here; through bf16
roundings and a flipped route that becomes 1e-2 to 0.2 on the BF16 GGUF, printed for scale)."""
import json
import os
import subprocess
import sys

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from laguna_to_gguf import convert  # noqa: E402

T = 24
LIMIT = {0: 1e-5, 1: 5e-3}  # flash attention off, on


def harvest_logits(harvest, ckpt, ids, work, compute):
    with open(os.path.join(work, "ids.jsonl"), "w") as f:
        f.write(json.dumps({"input_ids": ids}) + "\n")
    out = os.path.join(work, f"harvest-{compute}.h5")
    job = {"model": ckpt, "data": os.path.join(work, "ids.jsonl"), "activations": ["logits"],
           "max_seq_len": len(ids), "batch_size": 1, "statistics": False, "compute": compute,
           "output": {"path": out}}
    with open(os.path.join(work, f"job-{compute}.json"), "w") as f:
        json.dump(job, f)
    subprocess.run([harvest, "run", os.path.join(work, f"job-{compute}.json"), "--overwrite",
                    "--quiet"], check=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    with h5py.File(out) as f:
        return np.array(f["activations/logits"][0, :len(ids)], dtype=np.float64)


def build_tool(lcpp, work):
    exe = os.path.join(work, "lcpp_logits")
    lib = os.path.join(lcpp, "build", "bin")
    subprocess.run(["cc", "-O2", "-o", exe, os.path.join(HERE, "lcpp_logits.c"),
                    "-I" + os.path.join(lcpp, "include"),
                    "-I" + os.path.join(lcpp, "ggml", "include"), "-L" + lib, "-lllama",
                    "-Wl,-rpath," + lib], check=True)
    return exe


def main():
    if len(sys.argv) not in (3, 4, 5):
        sys.exit("usage: check_laguna_gguf.py HARVEST LLAMA_CPP_DIR [CHECKPOINT_DIR] [WORK]")
    harvest, lcpp = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    work = os.path.abspath(sys.argv[4] if len(sys.argv) == 5 else "/tmp/laguna-gguf-check")
    os.makedirs(work, exist_ok=True)
    ckpt = os.path.abspath(sys.argv[3]) if len(sys.argv) >= 4 else os.path.join(work, "tiny")
    if not os.path.exists(ckpt):
        subprocess.run([harvest, "init-model", "--family", "laguna", "--preset", "XS-2.1", ckpt],
                       check=True, stdout=subprocess.DEVNULL)
    c = json.load(open(os.path.join(ckpt, "config.json")))
    V, full = c["vocab_size"], c["rope_parameters"]["full_attention"]
    betas = [str(full.get("beta_fast", 32.0)), str(full.get("beta_slow", 1.0))]
    ids = [int(i) for i in np.random.default_rng(21).integers(0, V, T)]
    want = {c: harvest_logits(harvest, ckpt, ids, work, c) for c in ("float32", "bf16")}
    exe = build_tool(lcpp, work)
    ok = True
    for kind, against in (("f32", "float32"), ("bf16", "bf16"), ("bf16", "float32")):
        gguf = os.path.join(work, f"model-{kind}.gguf")
        if against == kind.replace("f32", "float32"):  # each GGUF written once a run
            convert(ckpt, gguf, kind)
        for fa in (0, 1):
            out = os.path.join(work, f"logits-{kind}-fa{fa}.f32")
            subprocess.run([exe, gguf, str(fa), "1"] + betas + [out] + [str(i) for i in ids],
                           check=True, stderr=subprocess.DEVNULL)
            got = np.fromfile(out, dtype=np.float32).reshape(T, V).astype(np.float64)
            ref = want[against]
            rel = np.abs(got - ref).max() / np.abs(ref).max()
            same = int((got.argmax(1) == ref.argmax(1)).sum())
            judged = (kind == "bf16") == (against == "bf16") and not (kind == "bf16" and fa)
            bad = judged and not rel <= LIMIT[fa]
            ok = ok and not bad
            limit = f"limit {LIMIT[fa]:.0e}" if judged else "for scale"
            print(f"{kind.upper()} GGUF vs harvest {against}, flash attention"
                  f" {'on' if fa else 'off'}: max |difference| / max |logit| = {rel:.2e}"
                  f" ({limit}), argmax agrees at {same}/{T} positions{'  FAIL' if bad else ''}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
