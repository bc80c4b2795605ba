"""OLMoE (model/families/olmoe.c) under mpirun: the init-model preset (BF16, two shards, 64 experts top 8)
run at np 1, then at np 2 as two pipeline stages, as two expert shards (each rank holds 32 of every
block's experts and the slots' outputs are exchanged, as for Mixtral and Qwen3-MoE) and as two
data-parallel replicas, and at np 4 as 2 stages x 2 expert shards; every output bit for bit the np 1
output (every value: the router's logits, expert indices, weights and per-slot outputs included),
and the provenance records the grid. The values themselves are checked against the float64
reference by tests/test_olmoe.py."""
import json

import famtest as ft
from util import args, finish, run, write_prompts

harvest, work = args()
model = f"{work}/olmoe"
run(harvest, "init-model", "--family", "olmoe", "--preset", "OLMoE-1B-7B-0924", "--seed", "3", model, check=0)
vocab = json.load(open(f"{model}/config.json"))["vocab_size"]
write_prompts(f"{work}/prompts.jsonl", [(7 * i) % 17 + 1 for i in range(7)], seed=5, vocab=vocab)
ft.grids(harvest, work, "olmoe", [(1, 1, 1), (2, 2, 1), (2, 1, 2), (2, 1, 1), (4, 2, 2)], provenance=True,
         model=model, data="prompts.jsonl", activations=["*"])
finish()
