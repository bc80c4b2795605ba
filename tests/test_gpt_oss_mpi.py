"""gpt-oss (model/families/gpt_oss.c) under mpirun: the init-model preset gpt-oss-120b (4 layers,
8 MXFP4 experts, top 4) over 7 prompts of 1 to 17 tokens, every value, at np 1; then two pipeline
stages (np 2), two expert shards exchanging their slots' outputs (np 2), two data-parallel replicas
(np 2) and 2 stages x 2 expert shards (np 4) each store the same bits as np 1. (Values against the
reference: tests/test_gpt_oss.py.)"""
import shutil
import subprocess

from util import BOOKKEEPING, MPI_ENV, args, check, finish, output_diff, run, write_job, write_prompts

harvest, work = args()
MPIRUN = shutil.which("mpirun")
model = f"{work}/gpt-oss-120b"
p = run(harvest, "init-model", "--family", "gpt_oss", "--preset", "gpt-oss-120b", "--seed", "3", model)
check(p.returncode == 0, f"init-model: {p.stderr[-400:]}")
write_prompts(f"{work}/prompts.jsonl", [(7 * i) % 17 + 1 for i in range(7)], seed=5, vocab=96)
CASES = [(1, {}), (2, {"pipeline_stages": 2}), (2, {"expert_parallel": 2}), (2, {}),
         (4, {"pipeline_stages": 2, "expert_parallel": 2})]
for np_, par in CASES:
    name = f"np{np_}_pp{par.get('pipeline_stages', 1)}_ep{par.get('expert_parallel', 1)}"
    job = write_job(f"{work}/{name}.json", model=model, data="prompts.jsonl", batch_size=2,
                    output={"path": f"{name}.h5"}, parallel=par)
    p = subprocess.run([MPIRUN, "-np", str(np_), "--oversubscribe", harvest, "run", job, "--quiet"],
                       env=MPI_ENV, capture_output=True, text=True, timeout=600)
    if not check(p.returncode == 0, f"{name}: exit {p.returncode}: {p.stderr[-800:]}") or np_ == 1:
        continue
    d = output_diff(f"{work}/np1_pp1_ep1.h5", f"{work}/{name}.h5", BOOKKEEPING | {"job"})
    if check(d is None, f"{name}: differs from np 1 in {d}"):
        print(f"gpt_oss {name} == np 1 bit for bit", flush=True)
finish()
