"""Float64 numpy reference of an SAE's encoding and decoding, read from its published layout.

Written from the code of the libraries that define the layouts, not from harvest's C:
- SAELens: sae_lens/loading/pretrained_sae_loaders.py (handle_config_defaulting: an absent
  "architecture" is "standard", "apply_b_dec_to_input" defaults to true; handle_pre_6_0_config:
  a boolean normalize_activations, activation_fn_kwargs.k; gemma_2_sae_huggingface_loader: the
  npz keys, "w_" renamed "W_", float32, apply_b_dec_to_input false, architecture jumprelu);
  sae_lens/saes/sae.py (SAE.process_sae_in: x normalised by run_time_activation_norm_fn_in, then
  minus b_dec * apply_b_dec_to_input; _setup_activation_normalization: constant_norm_rescale
  x * sqrt(d_in) / |x|, layer_norm (x - mean) / (std + 1e-5) with torch's unbiased std, every
  other value the identity at inference); standard_sae.py (StandardSAE.encode:
  relu(sae_in @ W_enc + b_enc)); jumprelu_sae.py (JumpReLUSAE.encode:
  relu(pre) * (pre > threshold)); topk_sae.py (TopK.forward: torch.topk(pre, k), then relu of the
  values; TopKSAE.decode: feature_acts @ W_dec + b_dec, then run_time_activation_norm_fn_out);
  batchtopk_sae.py (BatchTopKTrainingSAE.process_state_dict_for_saving_inference: saved as a
  JumpReLU SAE whose threshold is topk_threshold everywhere).
- sparsify: sparsify/sparse_coder.py (SparseCoder.encode: x - b_dec unless transcode, then
  fused_encoder; decode: top_acts @ W_dec[top_indices] + b_dec; load_from_disk: cfg.json's d_in,
  the rest SparseCoderConfig with its defaults), sparsify/fused_encoder.py (FusedEncoder.forward:
  relu(F.linear(x, encoder.weight, encoder.bias)), then torch.topk(k)), sparsify/config.py
  (num_latents or d_in * expansion_factor; k default 32).
torch.topk leaves the order of equal values unspecified; harvest breaks ties by the smaller
latent index, and so does this reference (a stable sort on the negated key).
"""
import json
import os
import struct

import numpy as np


def read_safetensors(path):
    """{name: float64 array} of a .safetensors file (F32, BF16, F16)."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    base = 8 + n
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        raw = blob[base + b:base + e]
        if t["dtype"] == "F32":
            a = np.frombuffer(raw, "<f4").astype(np.float64)
        elif t["dtype"] == "F16":
            a = np.frombuffer(raw, "<f2").astype(np.float64)
        elif t["dtype"] == "BF16":
            a = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32).astype(np.float64)
        else:
            raise ValueError(f"{path}: {name}: dtype {t['dtype']}")
        out[name] = a.reshape(t["shape"])
    return out


def load(folder):
    """The SAE in folder as a dict: arch (relu/jumprelu/topk), W_enc (d_in, d_sae), b_enc, W_dec
    (d_sae, d_in), b_dec, threshold, k, b_dec_in, norm, relu_first - all float64."""
    if os.path.exists(os.path.join(folder, "sae_weights.safetensors")):
        cfg = json.load(open(os.path.join(folder, "cfg.json")))
        w = read_safetensors(os.path.join(folder, "sae_weights.safetensors"))
        arch = {"standard": "relu", "jumprelu": "jumprelu", "topk": "topk"}[
            cfg.get("architecture", "standard")]
        k = cfg.get("k", cfg.get("activation_fn_kwargs", {}).get("k")) if arch == "topk" else None
        norm = cfg.get("normalize_activations", "none")
        if norm is None or isinstance(norm, bool) or norm == "expected_average_only_in":
            norm = "none"
        return dict(arch=arch, W_enc=w["W_enc"], b_enc=w["b_enc"], W_dec=w["W_dec"],
                    b_dec=w["b_dec"], threshold=w.get("threshold"), k=k,
                    b_dec_in=cfg.get("apply_b_dec_to_input", True), norm=norm, relu_first=False)
    if os.path.exists(os.path.join(folder, "sae.safetensors")):
        cfg = json.load(open(os.path.join(folder, "cfg.json")))
        w = read_safetensors(os.path.join(folder, "sae.safetensors"))
        return dict(arch="topk", W_enc=w["encoder.weight"].T, b_enc=w["encoder.bias"],
                    W_dec=w["W_dec"], b_dec=w["b_dec"], threshold=None, k=cfg.get("k", 32),
                    b_dec_in=True, norm="none", relu_first=True)
    with np.load(os.path.join(folder, "params.npz")) as data:
        w = {("W_" + key[2:] if key.startswith("w_") else key): data[key].astype(np.float32).astype(np.float64)
             for key in data}
    return dict(arch="jumprelu", W_enc=w["W_enc"], b_enc=w["b_enc"], W_dec=w["W_dec"],
                b_dec=w["b_dec"], threshold=w["threshold"], k=None, b_dec_in=False, norm="none",
                relu_first=False)


def normalise(sae, x):
    """(u, mean, scale): the SAE's input and what decode undoes (y * scale + mean)."""
    x = x.astype(np.float64)
    d = x.shape[1]
    mean = np.zeros((x.shape[0], 1))
    scale = np.ones((x.shape[0], 1))
    if sae["norm"] == "constant_norm_rescale":
        coeff = np.sqrt(d) / np.linalg.norm(x, axis=1, keepdims=True)
        u, scale = x * coeff, 1.0 / coeff
    elif sae["norm"] == "layer_norm":
        mean = x.mean(axis=1, keepdims=True)
        std = (x - mean).std(axis=1, ddof=1, keepdims=True)
        u, scale = (x - mean) / (std + 1e-5), std
    else:
        u = x
    if sae["b_dec_in"]:
        u = u - sae["b_dec"]
    return u, mean, scale


def encode(sae, x):
    """CSR (indptr, indices, values) of x (N, d_in): entries in increasing latent index."""
    u, _, _ = normalise(sae, x)
    pre = u @ sae["W_enc"] + sae["b_enc"]
    indptr, indices, values = [0], [], []
    for row in pre:
        if sae["arch"] == "topk":
            key = np.maximum(row, 0.0) if sae["relu_first"] else row
            order = np.argsort(-key, kind="stable")  # ties: the smaller index first
            sel = np.sort(order[:sae["k"]])
            val = np.maximum(row[sel], 0.0)
        else:
            fire = row > 0.0
            if sae["arch"] == "jumprelu":
                fire &= row > sae["threshold"]
            sel = np.nonzero(fire)[0]
            val = row[sel]
        indices.extend(sel.tolist())
        values.extend(val.tolist())
        indptr.append(len(indices))
    return (np.array(indptr, np.int64), np.array(indices, np.int64), np.array(values), pre)


def decode(sae, x, indptr, indices, values):
    """The reconstruction (N, d_in) of a CSR code of x."""
    _, mean, scale = normalise(sae, x)
    n = len(indptr) - 1
    z = np.zeros((n, sae["W_dec"].shape[0]))
    for r in range(n):
        z[r, indices[indptr[r]:indptr[r + 1]]] = values[indptr[r]:indptr[r + 1]]
    return (z @ sae["W_dec"] + sae["b_dec"]) * scale + mean
