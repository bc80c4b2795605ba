"""OLMoE (model/families/olmoe.c) under mpirun: the init-model preset (BF16, two shards, 64 experts top 8)
run at np 1, then at np 2 as two pipeline stages, as two expert shards (each rank holds 32 of every
block's experts and the slots' outputs are exchanged, as for Mixtral and Qwen3-MoE) and as two
data-parallel replicas, and at np 4 as 2 stages x 2 expert shards; every output bit for bit the np 1
output (every value: the router's logits, expert indices, weights and per-slot outputs included),
and the provenance records the grid. The values themselves are checked against the float64
reference by tests/test_olmoe.py."""
import json
import shutil
import subprocess

import h5py

from util import BOOKKEEPING, MPI_ENV, args, check, finish, output_diff, run, write_job, write_prompts

harvest, work = args()
MPIRUN = shutil.which("mpirun")
model = f"{work}/olmoe"
run(harvest, "init-model", "--family", "olmoe", "--preset", "OLMoE-1B-7B-0924", "--seed", "3", model, check=0)
vocab = json.load(open(f"{model}/config.json"))["vocab_size"]
write_prompts(f"{work}/prompts.jsonl", [(7 * i) % 17 + 1 for i in range(7)], seed=5, vocab=vocab)
for np_, stages, ep in [(1, 1, 1), (2, 2, 1), (2, 1, 2), (2, 1, 1), (4, 2, 2)]:
    name = f"np{np_}_pp{stages}_ep{ep}"
    job = write_job(f"{work}/{name}.json", model=model, data="prompts.jsonl", batch_size=2,
                    activations=["*"], output={"path": f"{name}.h5"},
                    parallel={"pipeline_stages": stages, "expert_parallel": ep})
    p = subprocess.run([MPIRUN, "-np", str(np_), harvest, "run", job, "--quiet"], env=MPI_ENV,
                       capture_output=True, text=True, timeout=600)
    if not check(p.returncode == 0, f"{name}: exit {p.returncode}: {p.stderr[-800:]}") or np_ == 1:
        continue
    d = output_diff(f"{work}/np1_pp1_ep1.h5", f"{work}/{name}.h5", BOOKKEEPING | {"job"})
    if not check(d is None, f"{name}: differs from np 1 in {d}"):
        continue
    with h5py.File(f"{work}/{name}.h5", "r") as f:
        prov = json.loads(f.attrs["provenance"])
        n = len(f["activations"])
        check(prov["expert_parallel"] == ep and prov["pipeline_stages"] == stages,
              f"{name}: provenance {prov['expert_parallel']} x {prov['pipeline_stages']}")
    print(f"olmoe: np {np_}, {stages} stage(s) x {ep} expert shard(s): {n} values == np 1 bit for bit",
          flush=True)
finish()
