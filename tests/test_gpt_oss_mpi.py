"""gpt-oss (model/families/gpt_oss.c) under mpirun: the init-model preset gpt-oss-120b (4 layers,
8 MXFP4 experts, top 4) over 7 prompts of 1 to 17 tokens, every value, at np 1; then two pipeline
stages (np 2), two expert shards exchanging their slots' outputs (np 2), two data-parallel replicas
(np 2) and 2 stages x 2 expert shards (np 4) each store the same bits as np 1. (Values against the
reference: tests/test_gpt_oss.py.)"""
import famtest as ft
from util import args, check, finish, run, write_prompts

harvest, work = args()
model = f"{work}/gpt-oss-120b"
p = run(harvest, "init-model", "--family", "gpt_oss", "--preset", "gpt-oss-120b", "--seed", "3", model)
check(p.returncode == 0, f"init-model: {p.stderr[-400:]}")
write_prompts(f"{work}/prompts.jsonl", [(7 * i) % 17 + 1 for i in range(7)], seed=5, vocab=96)
ft.grids(harvest, work, "gpt_oss", [(1, 1, 1), (2, 2, 1), (2, 1, 2), (2, 1, 1), (4, 2, 2)],
         model=model, data="prompts.jsonl")
finish()
