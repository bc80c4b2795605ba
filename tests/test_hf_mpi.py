"""The Llama-style families (model/decoder*.c) under mpirun: pipeline stages and, for the mixture
families (Mixtral, Qwen3-MoE), expert shards exchanging their slots' outputs through the same
`struct laguna_shard` Laguna uses; every output bit for bit the np 1 output (tests/ref/hf/make_tiny.py
checkpoints, sharded BF16)."""
import json
import shutil
import subprocess

import h5py

from util import BOOKKEEPING, MPI_ENV, args, check, finish, output_diff, write_job, write_prompts
from hf.make_tiny import tiny_config, tiny_weights, write_model

harvest, work = args()
MPIRUN = shutil.which("mpirun")
ACTS = ["layers.*.layer_output", "layers.*.expert_*", "layers.*.routed_output",
        "layers.1.attention_probabilities", "layers.*.mlp_neurons", "logits", "next_token_probs"]


def mpirun(np_, job):
    return subprocess.run([MPIRUN, "-np", str(np_), harvest, "run", job, "--quiet"], env=MPI_ENV,
                          capture_output=True, text=True, timeout=600)


CASES = {  # family: (np, pipeline stages, expert shards) after the np 1 reference
    "mixtral": [(2, 1, 2), (2, 2, 1), (4, 2, 2)],
    "qwen3_moe": [(4, 1, 4), (3, 1, 3), (3, 3, 1)],
    "gemma2": [(3, 3, 1)],
}
for fam, cases in CASES.items():
    cfg = tiny_config(fam)
    write_model(f"{work}/{fam}", cfg, tiny_weights(cfg, 5, "BF16"), "BF16", 3)
    write_prompts(f"{work}/{fam}.jsonl", [(7 * i) % 17 + 1 for i in range(7)], seed=5,
                  vocab=cfg["vocab_size"])
    for np_, stages, ep in [(1, 1, 1)] + cases:
        name = f"{fam}_np{np_}_pp{stages}_ep{ep}"
        acts = [a for a in ACTS if not (fam == "mixtral" and "mlp_neurons" in a) and
                not (fam == "gemma2" and ("expert" in a or "routed" in a))]
        job = write_job(f"{work}/{name}.json", model=fam, data=f"{fam}.jsonl", batch_size=2,
                        activations=acts, output={"path": f"{name}.h5"},
                        parallel={"pipeline_stages": stages, "expert_parallel": ep})
        p = mpirun(np_, job)
        if not check(p.returncode == 0, f"{name}: exit {p.returncode}: {p.stderr[-800:]}") or np_ == 1:
            continue
        d = output_diff(f"{work}/{fam}_np1_pp1_ep1.h5", f"{work}/{name}.h5", BOOKKEEPING | {"job"})
        if not check(d is None, f"{name}: differs from np 1 in {d}"):
            continue
        with h5py.File(f"{work}/{name}.h5", "r") as f:
            prov = json.loads(f.attrs["provenance"])
            check(prov["expert_parallel"] == ep and prov["pipeline_stages"] == stages,
                  f"{name}: provenance {prov['expert_parallel']} x {prov['pipeline_stages']}")
        print(f"{fam}: np {np_}, {stages} stage(s) x {ep} expert shard(s) == np 1", flush=True)
finish()
