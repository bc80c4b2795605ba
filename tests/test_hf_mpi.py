"""The Llama-style families (model/decoder*.c) under mpirun: data-parallel replicas, pipeline stages and, for the mixture
families (Mixtral, Qwen3-MoE), expert shards exchanging their slots' outputs through the same
`struct laguna_shard` Laguna uses; every output bit for bit the np 1 output (tests/ref/hf/make_tiny.py
checkpoints, sharded BF16); and a Llama run stopped by SIGTERM then --resume'd equals the
uninterrupted one."""
import json
import shutil
import subprocess

import h5py

from util import BOOKKEEPING, MPI_ENV, args, check, finish, output_diff, run, stop_mid_run, \
    write_job, write_prompts
from hf.make_tiny import tiny_config, tiny_weights, write_model

harvest, work = args()
MPIRUN = shutil.which("mpirun")
ACTS = ["layers.*.layer_output", "layers.*.expert_*", "layers.*.routed_output",
        "layers.1.attention_probabilities", "layers.*.mlp_neurons", "logits", "next_token_probs"]


def mpirun(np_, job):
    return subprocess.run([MPIRUN, "-np", str(np_), harvest, "run", job, "--quiet"], env=MPI_ENV,
                          capture_output=True, text=True, timeout=600)


CASES = {  # family: (np, pipeline stages, expert shards) after the np 1 reference
    "llama": [(2, 1, 1), (4, 2, 1)],  # 2 data-parallel replicas; 2 stages x 2 replicas
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
                not (fam in ("gemma2", "llama") and ("expert" in a or "routed" in a))]
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
# SIGTERM mid-run then --resume (a Llama preset, many prompts, a checkpoint a batch): the output of
# the uninterrupted run, bit for bit
cfg = tiny_config("llama")
write_model(f"{work}/llama_r", cfg, tiny_weights(cfg, 7, "BF16"), "BF16", 2)
write_prompts(f"{work}/long.jsonl", [(13 * i) % 40 + 1 for i in range(400)], seed=9,
              vocab=cfg["vocab_size"])
jobs = {n: write_job(f"{work}/{n}.json", model="llama_r", data="long.jsonl", batch_size=2,
                     activations=["layers.*.layer_output", "logits"],
                     output={"path": f"{n}.h5", "checkpoint_seconds": 0 if n == "resume_stop" else 60})
        for n in ("resume_ref", "resume_stop")}
run(harvest, "run", jobs["resume_ref"], "--quiet", check=0)
rc = stop_mid_run(harvest, jobs["resume_stop"], f"{work}/resume_stop.h5", settle=0.3,
                  timeout=300)
if check(rc == 3, f"llama SIGTERM: exit {rc}, expected 3 (the run ended first?)"):
    with h5py.File(f"{work}/resume_stop.h5", "r") as f:
        check(f.attrs["complete"] == 0, "llama: a stopped output is not complete")
    run(harvest, "run", jobs["resume_stop"], "--resume", "--quiet", check=0)
    d = output_diff(f"{work}/resume_ref.h5", f"{work}/resume_stop.h5", BOOKKEEPING | {"job"})
    check(d is None, f"llama SIGTERM + --resume: differs from the uninterrupted run in {d}")
    print("llama: SIGTERM + --resume == the uninterrupted run", flush=True)
finish()
