"""DeepSeek-V3 (model/families/deepseek_v3.c) under mpirun: the DeepSeek-V3 init-model preset (BF16,
one dense layer then two mixture layers of 8 experts in 4 groups, MLA, the sigmoid group router,
a shared expert), every value ('*'), 7 prompts of 1 to 17 tokens, batches of 2; 2 data-parallel
replicas, 2 pipeline stages, 2 expert shards and 2 stages x 2 expert shards (np 4) each store the
same bits as np 1 (every dataset and attribute but the bookkeeping), and their provenance says
the grid. The shards route every token the same way and add the slots in expert order, the
stages hand the stream on: a difference in any of them (a shard holding the wrong experts, the
routing bias of another layer) changes bits this test compares."""
import json
import subprocess

import h5py

from util import MPI_ENV, args, check, finish, output_diff, BOOKKEEPING, run, write_job, write_prompts

MPIRUN = "mpirun"
harvest, work = args()
model = f"{work}/ds"
run(harvest, "init-model", "--family", "deepseek_v3", "--preset", "DeepSeek-V3", "--seed", "9", model,
    check=0)
write_prompts(f"{work}/p.jsonl", [(7 * i) % 17 + 1 for i in range(7)], seed=5, vocab=96)
for np_, stages, ep in [(1, 1, 1), (2, 1, 1), (2, 2, 1), (2, 1, 2), (4, 2, 2)]:
    name = f"np{np_}_pp{stages}_ep{ep}"
    job = write_job(f"{work}/{name}.json", model="ds", data="p.jsonl", batch_size=2, activations=["*"],
                    output={"path": f"{name}.h5"},
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
        check(prov["expert_parallel"] == ep and prov["pipeline_stages"] == stages,
              f"{name}: provenance {prov['expert_parallel']} x {prov['pipeline_stages']}")
    print(f"deepseek_v3: np {np_}, {stages} stage(s) x {ep} expert shard(s) == np 1", flush=True)
finish()
