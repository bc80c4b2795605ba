"""SAEs in their published layouts (issue 23, first layer; io/sae.c, model/sae.c, harvest init-sae):
every layout x architecture that `harvest init-sae` writes (SAELens standard, jumprelu, topk and
batchtopk - saved as jumprelu, as SAELens saves it for inference -; sparsify topk; Gemma Scope
jumprelu), in float32 and bfloat16 (and float16, and float32 not aligned in the file), is read and encoded by the C code (through tests/sae_encode.c)
and compared with the float64 numpy reference tests/ref/sae_ref.py, written from SAELens's and
sparsify's code: the same CSR counts and latent indices, values within 1e-5 relative (1e-6
absolute), the reconstruction within 1e-5 (and the reference's TopK selection equal to torch.topk's where
the k-th value is no tie). Then SAELens's options by editing cfg.json
(apply_b_dec_to_input false, normalize_activations constant_norm_rescale / layer_norm /
expected_average_only_in / a boolean, k in activation_fn_kwargs as before SAELens 6), exact TopK
ties (zero encoder columns: equal pre-activations) broken by the smaller index in both layouts,
sparsify ranking relu(pre) so that its ties at zero go to the smallest indices, and params.npz
as numpy itself writes it (savez: stored with Zip64 local headers; savez_compressed: deflated;
float64 arrays and lower-case w_ names, as SAELens renames them).
Bad inputs are exit 1 naming the file and the key or tensor: a missing tensor, a wrong shape,
d_in / d_sae disagreeing with the tensors, an unknown architecture and each option not
implemented (named with its value), k <= 0 or > d_sae, a NaN in a weight, a damaged npz (CRC),
no SAE or two in one folder, activations of the wrong width; seeded truncations and byte flips
of every file are exit 0 or 1, never a crash. init-sae refuses a non-empty
OUT_DIR without --overwrite, and with it replaces the files (a hard link in OUT_DIR is replaced,
its other name keeps its bytes) and removes the other layouts' files.
Mutation caught: sparsify read without relu_first (selecting among pre, as SAELens does) fails
the ties-at-zero check; an off-by-one in the TopK heap fails every TopK comparison."""
import json
import os
import shutil
import struct
import subprocess
import sys

import numpy as np
import torch

from util import args, check, finish, run
import sae_ref

harvest, work = args()
ENC = os.path.join(os.path.dirname(harvest), "tests", "sae_encode")
D_IN, D_SAE, K, N = 24, 96, 8, 40


def encode(folder, x, want_rc=0):
    """(stdout line, indptr, indices, values, recon) of the C encoding of x, or the process"""
    xp = os.path.join(work, "x.npy")
    np.save(xp, np.ascontiguousarray(x, dtype=np.float32))
    out = os.path.join(work, "enc")
    p = subprocess.run([ENC, folder, xp, out], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    check(p.returncode == want_rc, f"sae_encode {folder}: exit {p.returncode}, expected {want_rc}: "
          f"{p.stderr}")
    if want_rc:
        return p
    return (p.stdout.strip(), np.load(out + ".indptr.npy"), np.load(out + ".indices.npy"),
            np.load(out + ".values.npy"), np.load(out + ".recon.npy"))


def compare(folder, x, what):
    line, ip, idx, val, rec = encode(folder, x)
    sae = sae_ref.load(folder)
    rip, ridx, rval, pre = sae_ref.encode(sae, x)
    check(np.array_equal(ip, rip), f"{what}: counts {np.diff(ip)[:8]} vs the reference's "
          f"{np.diff(rip)[:8]} ({line})")
    check(np.array_equal(idx, ridx), f"{what}: latent indices differ from the reference's")
    err = np.abs(val - rval)
    check(np.all(err <= 1e-6 + 1e-5 * np.abs(rval)), f"{what}: values off by {err.max():.3g}")
    rrec = sae_ref.decode(sae, x, rip, ridx, rval)
    err = np.abs(rec - rrec)
    check(np.all(err <= 1e-5 + 1e-5 * np.abs(rrec)), f"{what}: reconstruction off by {err.max():.3g}")
    if sae["arch"] == "topk":
        check(np.all(np.diff(ip) == sae["k"]), f"{what}: TopK stores exactly k a row")
        # the reference's selection against torch.topk itself, on rows without a tie at the k-th
        key = torch.from_numpy(np.maximum(pre, 0.0) if sae["relu_first"] else pre)
        top = torch.topk(key, sae["k"] + 1 if sae["k"] < pre.shape[1] else sae["k"], dim=-1)
        for r in range(N):
            v = top.values[r].numpy()
            if len(v) > sae["k"] and v[sae["k"] - 1] == v[sae["k"]]:
                continue
            check(set(top.indices[r, :sae["k"]].tolist()) == set(ridx[rip[r]:rip[r + 1]].tolist()),
                  f"{what}: row {r}: the reference's top k differ from torch.topk's")
    print(f"ok {what}: {line}; {len(idx)} latents, {len(idx) / N:.1f} a row")
    return sae


def init(folder, layout, arch, *extra):
    run(harvest, "init-sae", "--layout", layout, "--arch", arch, "--d-in", str(D_IN), "--d-sae",
        str(D_SAE), *extra, folder, check=0)
    return folder


rng = np.random.RandomState(3)
X = (rng.randn(N, D_IN) * 1.5 + 0.2).astype(np.float32)

# ---- every layout x architecture init-sae writes, float32 and bfloat16 ----
COMBOS = [("saelens", "relu"), ("saelens", "jumprelu"), ("saelens", "topk"),
          ("saelens", "batchtopk"), ("sparsify", "topk"), ("gemmascope", "jumprelu")]
for layout, arch in COMBOS:
    for dtype in (["f32"] if layout == "gemmascope" else ["f32", "bf16"]):
        extra = ["--k", str(K)] if arch == "topk" else []
        f = init(f"{work}/{layout}-{arch}-{dtype}", layout, arch, *extra, "--dtype", dtype,
                 "--seed", "11")
        sae = compare(f, X, f"{layout} {arch} {dtype}")
        if arch == "batchtopk":
            check(np.all(sae["threshold"] == sae["threshold"][0]), "batchtopk: one threshold")
            check(json.load(open(f"{f}/cfg.json"))["architecture"] == "jumprelu",
                  "batchtopk is saved as jumprelu")


# ---- SAELens options, by editing cfg.json ----
def edit_cfg(folder, **kv):
    p = f"{folder}/cfg.json"
    cfg = json.load(open(p))
    for key, v in kv.items():
        if v is None:
            cfg.pop(key, None)
        else:
            cfg[key] = v
    json.dump(cfg, open(p, "w"))


def copy(src, name):
    dst = f"{work}/{name}"
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    return dst


base = {a: f"{work}/saelens-{a}-f32" for a in ("relu", "jumprelu", "topk")}
for arch in ("relu", "jumprelu", "topk"):
    for norm in ("constant_norm_rescale", "layer_norm", "expected_average_only_in", True, None):
        f = copy(base[arch], f"opt-{arch}-{norm}")
        edit_cfg(f, normalize_activations=norm, apply_b_dec_to_input=False if norm is True else None)
        compare(f, X, f"saelens {arch} normalize_activations={norm}")
f = copy(base["topk"], "opt-topk-old-k")
edit_cfg(f, k=None, activation_fn_kwargs={"k": 5}, activation_fn="topk")
check(compare(f, X, "saelens topk, activation_fn_kwargs.k")["k"] == 5, "k from activation_fn_kwargs")
f = copy(f"{work}/sparsify-topk-f32", "opt-sparsify-defaults")
edit_cfg(f, k=None, activation=None, num_latents=None, expansion_factor=D_SAE // D_IN)
check(compare(f, X, "sparsify, SparseCoderConfig's defaults (k 32)")["k"] == 32, "sparsify k 32")
f = copy(base["relu"], "opt-no-arch")
edit_cfg(f, architecture=None, apply_b_dec_to_input=False)
compare(f, X, "saelens, no architecture key (standard)")


# ---- ties: zero encoder columns with equal biases give equal pre-activations ----
def write_safetensors(path, tensors, dtype="F32", misalign=False):
    """F32 or F16 tensors; misalign: the data starts 2 bytes off a multiple of 4 (copied, not
    mapped, by the loader)"""
    header, blobs, off = {}, [], 0
    for name, a in tensors.items():
        a = np.ascontiguousarray(a, dtype=np.float32 if dtype == "F32" else np.float16)
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        blobs.append(a.tobytes())
        off += a.nbytes
    h = json.dumps(header).encode()
    h += b" " * ((-len(h) % 8) + (2 if misalign else 0))
    with open(path, "wb") as fp:
        fp.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


w = sae_ref.read_safetensors(f"{work}/saelens-topk-f32/sae_weights.safetensors")
W_enc = w["W_enc"].copy()
W_enc[:, 10:40] = 0.0
b_enc = w["b_enc"].copy()
b_enc[10:40] = 50.0  # thirty equal latents above every other: the first k of them win
f = copy(f"{work}/saelens-topk-f32", "ties-saelens")
write_safetensors(f"{f}/sae_weights.safetensors", dict(w, W_enc=W_enc, b_enc=b_enc))
_, ip, idx, _, _ = encode(f, X)
check(np.all(idx.reshape(N, K) == np.arange(10, 10 + K)), f"SAELens TopK ties: {idx[:K]}")
compare(f, X, "saelens topk, 30-way ties")
# sparsify: every pre-activation negative but two, k = 6: ties at zero go to indices 0..3
w = sae_ref.read_safetensors(f"{work}/sparsify-topk-f32/sae.safetensors")
enc_w = w["encoder.weight"].copy()
enc_w[:] = 0.0
bias = np.full(D_SAE, -1.0)
bias[[50, 70]] = 2.0
bias[[0, 1, 2, 3]] = -3.0  # the most negative: ranked last by pre, first among the zeros
f = copy(f"{work}/sparsify-topk-f32", "ties-sparsify")
write_safetensors(f"{f}/sae.safetensors", dict(w, **{"encoder.weight": enc_w, "encoder.bias": bias}))
edit_cfg(f, k=6)
_, ip, idx, val, _ = encode(f, X)
check(np.all(idx.reshape(N, 6) == [0, 1, 2, 3, 50, 70]), f"sparsify ties at zero: {idx[:6]}")
check(np.all(val.reshape(N, 6)[:, :4] == 0) and np.all(val.reshape(N, 6)[:, 4:] == 2.0),
      "sparsify: the zeros stored, exactly k a row")
compare(f, X, "sparsify topk, ties at zero")


# float16 tensors, and float32 data not 4-byte aligned in the file (converted, not mapped)
for dtype, mis in (("F16", False), ("F32", True), ("F16", True)):
    for src, leaf in ((f"{work}/saelens-jumprelu-f32", "sae_weights.safetensors"),
                      (f"{work}/sparsify-topk-f32", "sae.safetensors")):
        f = copy(src, f"st-{dtype}-{mis}-{leaf}")
        write_safetensors(f"{f}/{leaf}", sae_ref.read_safetensors(f"{f}/{leaf}"), dtype, mis)
        compare(f, X, f"{leaf} {dtype}{' misaligned' if mis else ''}")

# ---- params.npz as numpy writes it ----
with np.load(f"{work}/gemmascope-jumprelu-f32/params.npz") as d:
    arrays = {k: d[k] for k in d}
for how in ("savez", "savez_compressed", "float64-lowercase"):
    f = f"{work}/npz-{how}"
    os.makedirs(f, exist_ok=True)
    if how == "float64-lowercase":
        np.savez(f"{f}/params.npz", **{("w_" + k[2:] if k.startswith("W_") else k): v.astype(np.float64)
                                      for k, v in arrays.items()})
    else:
        getattr(np, how)(f"{f}/params.npz", **arrays)
    compare(f, X, f"gemmascope params.npz by numpy.{how}")


# ---- bad inputs: exit 1 naming the file and the key or tensor ----
def refused(folder, words, x=X, what=""):
    p = encode(folder, x, want_rc=1)
    for w_ in words:
        check(w_ in p.stderr, f"{what or folder}: message {p.stderr.strip()!r} lacks {w_!r}")
    print(f"ok refused {what}: {p.stderr.strip()}")


def st_edit(src, name, fn, leaf="sae_weights.safetensors"):
    f = copy(src, name)
    t = sae_ref.read_safetensors(f"{f}/{leaf}")
    fn(t)
    write_safetensors(f"{f}/{leaf}", t)
    return f


sl, sp = f"{work}/saelens-jumprelu-f32", f"{work}/sparsify-topk-f32"
refused(st_edit(sl, "bad-missing", lambda t: t.pop("b_enc")), ["sae_weights.safetensors", '"b_enc"',
                                                              "missing"], what="missing tensor")
refused(st_edit(sl, "bad-nothr", lambda t: t.pop("threshold")), ['"threshold"', "missing"],
        what="jumprelu without threshold")
refused(st_edit(sl, "bad-shape", lambda t: t.update(W_enc=t["W_enc"].T)),
        ['"W_enc"', f"[{D_SAE}, {D_IN}]", "[d_in, d_sae]"], what="transposed W_enc")
refused(st_edit(sp, "bad-sp-missing", lambda t: t.pop("encoder.bias"), "sae.safetensors"),
        ["sae.safetensors", '"encoder.bias"'], what="sparsify missing tensor")


def nan_in(t):
    t["W_dec"][3, 5] = np.nan


refused(st_edit(sl, "bad-nan", nan_in), ['"W_dec"', "NaN", "sae_weights.safetensors"], what="NaN")
for key, v, words in [("d_in", D_IN + 1, ['"W_enc"', "[d_in, d_sae]", f"[{D_IN + 1}, {D_SAE}]"]),
                      ("d_sae", D_SAE - 1, ['"W_enc"', f"[{D_IN}, {D_SAE - 1}]"]),
                      ("architecture", "gated", ["cfg.json", '"architecture"', '"gated"']),
                      ("architecture", "batchtopk", ['"architecture"', '"batchtopk"']),
                      ("normalize_activations", "whiten", ['"normalize_activations"', '"whiten"']),
                      ("finetuning_scaling_factor", True, ['"finetuning_scaling_factor"', "true"]),
                      ("reshape_activations", "hook_z", ['"reshape_activations"', '"hook_z"']),
                      ("apply_b_dec_to_input", "yes", ['"apply_b_dec_to_input"']),
                      ("activation_fn", "gelu", ['"activation_fn"', '"gelu"'])]:
    f = copy(sl, f"bad-{key}-{v}")
    edit_cfg(f, **{key: v})
    refused(f, words, what=f"{key}={v}")
for k in (0, -3, D_SAE + 1, 2.5):
    f = copy(f"{work}/saelens-topk-f32", f"bad-k-{k}")
    edit_cfg(f, k=k)
    refused(f, ["cfg.json", '"k"'], what=f"saelens k={k}")
    f = copy(sp, f"bad-sp-k-{k}")
    edit_cfg(f, k=k)
    refused(f, ["cfg.json", '"k"'], what=f"sparsify k={k}")
f = copy(f"{work}/saelens-topk-f32", "bad-rescale")
edit_cfg(f, rescale_acts_by_decoder_norm=True)
refused(f, ['"rescale_acts_by_decoder_norm"', "true"], what="rescale_acts_by_decoder_norm")
for key, v in [("activation", "groupmax"), ("skip_connection", True), ("transcode", True),
               ("num_latents", D_SAE * 2), ("d_in", D_IN - 1)]:
    f = copy(sp, f"bad-sp-{key}")
    edit_cfg(f, **{key: v})
    refused(f, ["sae.safetensors" if key in ("num_latents", "d_in") else "cfg.json",
                '"encoder.weight"' if key in ("num_latents", "d_in") else f'"{key}"'],
            what=f"sparsify {key}={v}")
f = init(f"{work}/bad-sp-small", "sparsify", "topk", "--k", "4")
edit_cfg(f, k=None, num_latents=16)
t = sae_ref.read_safetensors(f"{f}/sae.safetensors")
write_safetensors(f"{f}/sae.safetensors", {n: (a[:16] if n != "b_dec" else a) for n, a in t.items()})
refused(f, ["cfg.json", '"k"', "32"], what="sparsify's default k 32 > d_sae 16")
f = copy(sl, "bad-cfg-missing-d_in")
edit_cfg(f, d_in=None)
refused(f, ["cfg.json", '"d_in"'], what="no d_in")
# Gemma Scope: a missing array, a damaged byte (CRC), a truncated file
f = f"{work}/bad-npz-missing"
os.makedirs(f, exist_ok=True)
np.savez(f"{f}/params.npz", **{k: v for k, v in arrays.items() if k != "threshold"})
refused(f, ["params.npz", '"threshold"', "missing"], what="npz without threshold")
f = copy(f"{work}/npz-savez", "bad-npz-crc")
blob = bytearray(open(f"{f}/params.npz", "rb").read())
blob[len(blob) // 2] ^= 0x40
open(f"{f}/params.npz", "wb").write(bytes(blob))
refused(f, ["params.npz", "CRC"], what="npz damaged")
f = copy(f"{work}/npz-savez", "bad-npz-short")
open(f"{f}/params.npz", "wb").write(bytes(blob[:len(blob) // 3]))
refused(f, ["params.npz"], what="npz truncated")
# the folder: none, two layouts, activations of the wrong width
os.makedirs(f"{work}/bad-empty", exist_ok=True)
refused(f"{work}/bad-empty", ["bad-empty", "no SAE"], what="empty folder")
f = copy(sl, "bad-two")
shutil.copy(f"{work}/gemmascope-jumprelu-f32/params.npz", f)
refused(f, ["sae_weights.safetensors", "params.npz"], what="two SAEs in one folder")
refused(sl, ["x.npy", f"(N, {D_IN})"], x=X[:, :D_IN - 1], what="activations of the wrong width")

# damaged files never crash: seeded truncations and byte flips of each file are exit 0 or 1,
# and a refusal names the folder
rnd = np.random.RandomState(5)
for src, leaf in [(f"{work}/npz-savez", "params.npz"), (f"{work}/npz-savez_compressed", "params.npz"),
                  (sl, "sae_weights.safetensors"), (sl, "cfg.json"), (sp, "sae.safetensors")]:
    blob = open(f"{src}/{leaf}", "rb").read()
    for t in range(40):
        b = bytearray(blob[:rnd.randint(len(blob))] if t % 3 == 0 else blob)
        for _ in range(0 if t % 3 == 0 else rnd.randint(1, 4)):
            b[rnd.randint(len(b))] = rnd.randint(256)
        f = copy(src, "damaged")
        open(f"{f}/{leaf}", "wb").write(bytes(b))
        xp = os.path.join(work, "x.npy")
        np.save(xp, X)
        p = subprocess.run([ENC, f, xp, f"{work}/enc"], capture_output=True, timeout=120)
        check(p.returncode in (0, 1) and (p.returncode == 0 or f.encode() in p.stderr),
              f"damaged {leaf} #{t}: exit {p.returncode}: {p.stderr[-300:]!r}")
print("ok damaged files: exit 0 or 1, never a crash")

# ---- init-sae: OUT_DIR, --overwrite, links, flag combinations ----
f = f"{work}/saelens-relu-f32"
p = run(harvest, "init-sae", "--layout", "saelens", "--arch", "relu", "--d-in", "4", "--d-sae",
        "8", f, check=1)
check("not empty" in p.stderr and "--overwrite" in p.stderr, f"non-empty OUT_DIR: {p.stderr}")
outside = f"{work}/outside.safetensors"
os.link(f"{f}/sae_weights.safetensors", outside)
before = open(outside, "rb").read()
shutil.copy(f"{work}/gemmascope-jumprelu-f32/params.npz", f)
run(harvest, "init-sae", "--layout", "saelens", "--arch", "relu", "--d-in", "4", "--d-sae", "8",
    "--seed", "2", "--overwrite", f, check=0)
check(open(outside, "rb").read() == before, "--overwrite wrote through a hard link")
check(not os.path.exists(f"{f}/params.npz"), "--overwrite left another layout's file")
check(sae_ref.load(f)["W_enc"].shape == (4, 8), "--overwrite wrote the new SAE")
open(f"{work}/a-file", "w").write("x")
for bad in (["--layout", "sparsify", "--arch", "relu"], ["--layout", "gemmascope", "--arch", "topk"],
            ["--layout", "saelens", "--arch", "topk"], ["--layout", "saelens", "--arch", "relu", "--k", "2"],
            ["--layout", "saelens", "--arch", "topk", "--k", "9"],
            ["--layout", "gemmascope", "--arch", "jumprelu", "--dtype", "bf16"],
            ["--layout", "saelens", "--arch", "gated"], ["--layout", "dictlearn", "--arch", "relu"],
            ["--layout", "saelens", "--arch", "relu", "--d-in", "0"]):
    p = run(harvest, "init-sae", "--d-in", "4", "--d-sae", "8", *bad, f"{work}/never", check=1)
    check(not os.path.exists(f"{work}/never"), f"init-sae {bad}: wrote despite the error")
    print(f"ok init-sae {' '.join(bad)}: {p.stderr.strip().splitlines()[0]}")
p = run(harvest, "init-sae", "--layout", "saelens", "--arch", "relu", "--d-in", "4", "--d-sae", "8",
        f"{work}/a-file", check=1)
check("not a folder" in p.stderr, f"OUT_DIR a file: {p.stderr}")
finish()
