"""DeepSeek-V3 (model/families/deepseek_v3.c) under mpirun: the DeepSeek-V3 init-model preset (BF16,
one dense layer then two mixture layers of 8 experts in 4 groups, MLA, the sigmoid group router,
a shared expert), every value ('*'), 7 prompts of 1 to 17 tokens, batches of 2; 2 data-parallel
replicas, 2 pipeline stages, 2 expert shards and 2 stages x 2 expert shards (np 4) each store the
same bits as np 1 (every dataset and attribute but the bookkeeping), and their provenance says
the grid. The shards route every token the same way and add the slots in expert order, the
stages hand the stream on: a difference in any of them (a shard holding the wrong experts, the
routing bias of another layer) changes bits this test compares."""
import famtest as ft
from util import args, finish, run, write_prompts

harvest, work = args()
model = f"{work}/ds"
run(harvest, "init-model", "--family", "deepseek_v3", "--preset", "DeepSeek-V3", "--seed", "9", model,
    check=0)
write_prompts(f"{work}/p.jsonl", [(7 * i) % 17 + 1 for i in range(7)], seed=5, vocab=96)
ft.grids(harvest, work, "deepseek_v3", [(1, 1, 1), (2, 1, 1), (2, 2, 1), (2, 1, 2), (4, 2, 2)],
         provenance=True, model="ds", data="p.jsonl", activations=["*"])
finish()
