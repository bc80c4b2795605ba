"""The test-only identity family (model/families/identity.c): two blocks that add nothing, so every value
is known in closed form from the (V, D) embedding E: token_embeddings and both layer_outputs are
E[ids] exactly, logits = E[ids] E^T (float32 sgemm against float64). Chosen from config.json's
"architectures" like any family."""
import json
import os
import struct

import h5py
import numpy as np

from util import args, check, finish, run, write_job, write_prompts

harvest, work = args()
D, V = 8, 32
E = np.random.default_rng(3).standard_normal((V, D)).astype(np.float32)
os.makedirs(f"{work}/model")
json.dump({"architectures": ["IdentityForTest"], "hidden_size": D, "vocab_size": V},
          open(f"{work}/model/config.json", "w"))
head = json.dumps({"embed_tokens.weight": {"dtype": "F32", "shape": [V, D], "data_offsets": [0, E.nbytes]}})
head += " " * (-len(head) % 8)
with open(f"{work}/model/model.safetensors", "wb") as f:
    f.write(struct.pack("<Q", len(head)) + head.encode() + E.tobytes())

names = [l.split()[0] for l in run(harvest, "activations", f"{work}/model", check=0).stdout.splitlines()]
check(names == ["input_ids", "token_embeddings", "layers.0.layer_output", "layers.1.layer_output", "logits"],
      f"the catalogue: {names}")
lengths = [1, 4, 9]
write_prompts(f"{work}/prompts.jsonl", lengths, seed=1, vocab=V)
run(harvest, "run", write_job(f"{work}/job.json", batch_size=2), "--quiet", check=0)
with h5py.File(f"{work}/out.h5", "r") as f:
    check(f.attrs["model_family"] == "identity", f"model_family {f.attrs['model_family']}")
    for i, T in enumerate(lengths):
        o = int(f["prompts/token_offset"][i])
        ids = f["tokens/input_ids"][o:o + T]
        A = lambda n: f["activations/" + n][i][:T]
        for n in ("token_embeddings", "layers.0.layer_output", "layers.1.layer_output"):
            check(np.array_equal(A(n), E[ids]), f"prompt {i}: {n} == E[ids]")
        want = E[ids].astype(np.float64) @ E.T.astype(np.float64)
        err = np.abs(A("logits") - want).max() / np.abs(want).max()
        check(err < 1e-6, f"prompt {i}: logits == E[ids] E^T (relative error {err:.1e})")
        check(np.array_equal(A("input_ids"), ids), f"prompt {i}: input_ids")
out = run(harvest, "plan", f"{work}/model", "--pipeline-stages", "2", check=0).stdout
check("family identity, 2 blocks" in out and f"parameters: {V * D}" in out and "stage 1: layers 1-1" in out,
      f"plan: {out}")
print(f"identity family: {len(names)} values of {len(lengths)} prompts in closed form")
finish()
