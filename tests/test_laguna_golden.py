"""Laguna against the independent float64 reference (tests/ref/laguna_ref.py, written from
tests/ref/laguna-forward.md) on every preset of `harvest init-model --family laguna` (XS-2.1, XS.2, S-2.1,
M.1: sharded BF16 checkpoints in the published layout): every value the catalogue lists, for
prompts of lengths 1, 2, the sliding window - 1, the window, the window + 1 and several windows,
batched together, and again one a batch without the tap-only values. expert_indices exactly, -inf exactly where attention is blocked, floats relative
to each tensor's scale. Then the nnterp identities of the seed on the stored values: the residual
sums, the softplus gate, the routing identities and lm_head(norm(last layer_output)) == logits."""
import json

import h5py
import numpy as np

from util import args, check, compare_row, finish, run, write_job, write_prompts
from laguna_ref import LagunaRef, rmsnorm, sigmoid, softplus  # tests/ref, on the path by util

RTOL = 5e-5  # max |got - ref| / max |ref| over a tensor's finite entries
W = 8  # the presets' sliding window
LENGTHS = [W + 1, 1, 3 * W + 1, W - 1, 2, W, 2 * W + 3]
SEQ = {"seq", "query", "key"}

harvest, work = args()


def compare(name, got, want, axes, T):
    """got: the stored row (padded to the longest prompt); want: the reference row."""
    c = tuple(slice(0, T) if a in SEQ else slice(None) for a in axes[1:])
    err = compare_row(name, got, c, want, RTOL)
    if name.endswith("attention_probabilities") and got[c].shape == want.shape:
        check((got[c][want == 0] == 0).all(), f"{name}: blocked probabilities are exactly 0")
    return err


def close(a, b, what, tol=1e-5):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    err = np.abs(a - b).max() / max(np.abs(b).max(), 1e-30)
    return check(err <= tol, f"{what}: relative error {err:.1e}")


def check_identities(f, ref, p, T, preset):
    A = lambda n: f["activations/" + n][p]
    w, L, scale = ref.w, ref.L, ref.scale
    n_ident = 0
    for i in range(L):
        pre = f"layers.{i}."
        x, a, mid, m, out = (A(pre + k)[:T] for k in
                             ("layer_input", "attention_output", "layer_mid", "mlp_output", "layer_output"))
        # in float32 the block adds in the stream's order: these two are exact
        check(np.array_equal(mid, x + a), f"{preset} prompt {p}: {pre}layer_mid == layer_input + attention_output")
        check(np.array_equal(out, mid + m), f"{preset} prompt {p}: {pre}layer_output == layer_mid + mlp_output")
        close(x.astype(np.float64) + a + m, out, f"{preset} {pre}input + attention_output + mlp_output == layer_output")
        if i + 1 < L:
            check(np.array_equal(A(f"layers.{i + 1}.layer_input")[:T], out), f"{pre}layer_output feeds the next block")
        # the gate: premix = head_outputs * softplus(g_proj(attention_norm_output)), a head or a channel
        xn = A(pre + "attention_norm_output")[:T].astype(np.float64)
        Wg = w[f"model.layers.{i}.self_attn.g_proj.weight"]
        O, prem = A(pre + "attention_head_outputs")[:T], A(pre + "attention_premix")[:T]
        H = O.shape[1]
        g = softplus(xn @ Wg.T)
        g = g[:, :, None] if Wg.shape[0] == H else g.reshape(T, H, -1)
        close(O * g, prem, f"{preset} {pre}attention_premix == head_outputs * softplus(g_proj(x))")
        P = A(pre + "attention_probabilities")[:, :T, :T].astype(np.float64)
        close(P.sum(-1), np.ones(P.shape[:2]), f"{preset} {pre}probability rows sum to 1")
        check(np.array_equal(A(pre + "mlp_input")[:T], A(pre + "mlp_norm_output")[:T]), f"{pre}mlp_input == mlp_norm_output")
        if pre + "router_logits" not in f["activations"]:
            continue
        z, idx, ew = A(pre + "router_logits")[:T], A(pre + "expert_indices")[:T], A(pre + "expert_weights")[:T]
        eo, ro, sh = A(pre + "expert_outputs")[:T], A(pre + "routed_output")[:T], A(pre + "shared_expert_output")[:T]
        s = sigmoid(z.astype(np.float64))
        gs = np.take_along_axis(s, idx, -1)
        close(ew, gs / gs.sum(-1, keepdims=True), f"{preset} {pre}expert_weights == g / sum(g), g = sigmoid(logits)[idx]")
        biased = s + w[f"model.layers.{i}.mlp.experts.e_score_correction_bias"]
        chosen = np.take_along_axis(biased, idx, -1)
        check((np.diff(chosen, axis=-1) <= 0).all(), f"{pre}slots in descending biased score")
        rest = biased.copy()
        np.put_along_axis(rest, idx, -np.inf, -1)
        check((rest.max(-1) <= chosen.min(-1) + 1e-6).all(), f"{pre}the top k are the k largest biased scores")
        close(eo.astype(np.float64).sum(1) * scale, ro, f"{preset} {pre}expert_outputs.sum(2) * scale == routed_output")
        close(ro.astype(np.float64) + sh, m, f"{preset} {pre}routed_output + shared_expert_output == mlp_output")
        n_ident += 1
    last = A(f"layers.{L - 1}.layer_output")[:T].astype(np.float64)
    logits = rmsnorm(last, w["model.norm.weight"], ref.eps) @ w["lm_head.weight"].T
    close(logits, A("logits")[:T], f"{preset}: lm_head(norm(last layer_output)) == logits")
    check(np.array_equal(A("logits")[:T], A("lm_head_output")[:T]), "logits == lm_head_output (no cap, no scale)")
    check(np.array_equal(A("layers.0.layer_input")[:T], A("token_embeddings")[:T]), "layers.0.layer_input == token_embeddings")
    return n_ident


for n, preset in enumerate(("XS-2.1", "XS.2", "S-2.1", "M.1")):
    d = f"{work}/{preset}"
    run(harvest, "init-model", "--family", "laguna", "--preset", preset, "--seed", str(20 + n),
        f"{d}/model", check=0)
    write_prompts(f"{d}/prompts.jsonl", LENGTHS, seed=n, vocab=512)
    job = write_job(f"{d}/job.json", batch_size=3)
    p = run(harvest, "run", job, check=0)
    check("weights" in p.stderr, f"{preset}: start-up states the weight bytes: {p.stderr[-300:]}")
    names = [l.split()[0] for l in run(harvest, "activations", f"{d}/model", check=0).stdout.splitlines()]
    ref = LagunaRef(f"{d}/model")
    worst, n_ident = {}, 0
    with h5py.File(f"{d}/out.h5", "r") as f:
        check(f.attrs["model_family"] == "laguna", "model_family = laguna")
        check(json.loads(f.attrs["model_config"])["architectures"] == ["LagunaForCausalLM"], "model_config")
        check(sorted(f["activations"]) == sorted(names), f"{preset}: one dataset a catalogue name ({len(names)})")
        for i in range(len(f["prompts/length"])):
            T, o = int(f["prompts/length"][i]), int(f["prompts/token_offset"][i])
            want = ref.forward(f["tokens/input_ids"][o:o + T])
            check(sorted(want) == sorted(names), f"{preset}: the reference makes every name")
            for name in names:
                dset = f["activations/" + name]
                axes = list(dset.attrs["semantic_shape"])
                worst[name] = max(worst.get(name, 0.0), compare(name, dset[i], want[name][0], axes, T))
            n_ident += check_identities(f, ref, i, T, preset)
    # the same run without the scores and expert outputs, one prompt a batch: the paths that skip
    # tap-only work (a (T, T) score buffer a head, no -inf written) give the reference's numbers too
    subset = ["layers.*.layer_output", "layers.*.expert_indices", "logits"]
    job1 = write_job(f"{d}/job1.json", batch_size=1, activations=subset, output={"path": "out1.h5"})
    run(harvest, "run", job1, "--quiet", check=0)
    with h5py.File(f"{d}/out1.h5", "r") as f:
        for i in range(len(f["prompts/length"])):
            T, o = int(f["prompts/length"][i]), int(f["prompts/token_offset"][i])
            want = ref.forward(f["tokens/input_ids"][o:o + T])
            for name in f["activations"]:
                dset = f["activations/" + name]
                compare(name + " (subset run)", dset[i], want[name][0], list(dset.attrs["semantic_shape"]), T)
    top = sorted(worst.items(), key=lambda kv: -kv[1])[:3]
    print(f"{preset}: {len(names)} values x {len(LENGTHS)} prompts (T = {LENGTHS}) match the reference; "
          f"largest relative errors: " + ", ".join(f"{k} {v:.1e}" for k, v in top) +
          f"; identities on {n_ident} mixture blocks x prompts", flush=True)

# the gate's granularity comes from g_proj's rows, whatever "gating" says (tests/ref/laguna-forward.md A3):
# M.1 (per-channel weights) with "gating": true, and XS-2.1 (per-head) with "per-element", give
# the outputs of their own configs bit for bit
import shutil
for preset, gating in (("M.1", True), ("XS-2.1", "per-element")):
    d = f"{work}/{preset}"
    shutil.copytree(f"{d}/model", f"{d}/model_gating", dirs_exist_ok=True)
    cfg = json.load(open(f"{d}/model_gating/config.json"))
    cfg["gating"] = gating
    json.dump(cfg, open(f"{d}/model_gating/config.json", "w"))
    job2 = write_job(f"{d}/job2.json", model="model_gating", batch_size=1,
                     activations=["layers.*.layer_output", "layers.*.expert_indices", "logits"],
                     output={"path": "out2.h5"})
    p = run(harvest, "run", job2, "--quiet")
    if check(p.returncode == 0, f"{preset} with gating {gating!r}: exit {p.returncode}: {p.stderr}"):
        from util import output_diff, BOOKKEEPING
        dd = output_diff(f"{d}/out1.h5", f"{d}/out2.h5", BOOKKEEPING | {"job", "model_config"})
        check(dd is None, f"{preset} with gating {gating!r}: differs in {dd}")
        print(f"{preset} with \"gating\": {json.dumps(gating)}: the gate follows g_proj, same output", flush=True)
finish()
