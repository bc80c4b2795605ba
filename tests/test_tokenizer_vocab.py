"""A tokenizer that does not fit its model (ids at or above the model's vocabulary size, a
post-processor's BOS outside it) is an error at `harvest run` with text prompts and at
`harvest tokenize MODEL_DIR`, naming both tokenizer.json and config.json (exit 1); one that fits
works as before."""
import copy
import json
import os
import shutil

from util import args, check, finish, init_model, run, write_job

harvest, work = args()
SPEC_TOK = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "tokenizer.json")
open(f"{work}/p.txt", "w").write("Hello there\nsecond prompt\n")

# the spec model (vocabulary 8192) with its tokenizer (3351 ids): fits
model = init_model(harvest, f"{work}/model", seed=3)
shutil.copy(SPEC_TOK, model)
p = run(harvest, "tokenize", model, f"{work}/p.txt", "--quiet")
check(p.returncode == 0 and len(p.stdout.splitlines()) == 2, f"a fitting tokenizer: {p.returncode} {p.stderr}")
job = write_job(f"{work}/ok.json", data={"path": "p.txt", "format": "text"}, activations=["token_embeddings"],
                output={"path": "ok.h5"})
p = run(harvest, "run", job, "--quiet")
check(p.returncode == 0, f"run with a fitting tokenizer: exit {p.returncode}: {p.stderr.strip()}")

# a model of 512 tokens with the 3351-id tokenizer
run(harvest, "init-model", "--family", "laguna", "--preset", "XS-2.1", "--seed", "1", f"{work}/lg", check=0)
shutil.copy(SPEC_TOK, f"{work}/lg")
needles = [f"{work}/lg/tokenizer.json", f"{work}/lg/config.json", "token id 3350", "does not fit the model"]
p = run(harvest, "tokenize", f"{work}/lg", f"{work}/p.txt")
check(p.returncode == 1 and all(n in p.stderr for n in needles),
      f"tokenize MODEL_DIR, a tokenizer too large: exit {p.returncode}: {p.stderr.strip()}")
p = run(harvest, "tokenize", f"{work}/lg/tokenizer.json", f"{work}/p.txt", "--quiet")
check(p.returncode == 0, f"tokenize TOKENIZER_JSON alone: no model to fit: exit {p.returncode}")
job = write_job(f"{work}/big.json", model="lg", data={"path": "p.txt", "format": "text"},
                activations=["input_ids"], output={"path": "big.h5"})
p = run(harvest, "run", job)
check(p.returncode == 1 and all(n in p.stderr for n in needles) and not os.path.exists(f"{work}/big.h5"),
      f"run, a tokenizer too large: exit {p.returncode}: {p.stderr.strip()}")
# ids only: the tokenizer is not used, the run goes on
open(f"{work}/ids.jsonl", "w").write('{"input_ids": [1, 2, 3]}\n')
job = write_job(f"{work}/ids.json", model="lg", data="ids.jsonl", activations=["input_ids"],
                output={"path": "ids.h5"})
p = run(harvest, "run", job, "--quiet")
check(p.returncode == 0, f"run with ids only (the tokenizer unused): exit {p.returncode}: {p.stderr.strip()}")

# the post-processor's BOS outside the model's vocabulary (its id from special_tokens)
tj = json.load(open(SPEC_TOK))
tj["post_processor"]["special_tokens"]["<|bos|>"]["ids"] = [9000]
os.makedirs(f"{work}/bos", exist_ok=True)
for f in os.listdir(model):
    if f != "tokenizer.json":
        shutil.copy(os.path.join(model, f), f"{work}/bos")
json.dump(tj, open(f"{work}/bos/tokenizer.json", "w"))
needles = [f"{work}/bos/tokenizer.json", f"{work}/bos/config.json", "special token id 9000"]
p = run(harvest, "tokenize", f"{work}/bos", f"{work}/p.txt")
check(p.returncode == 1 and all(n in p.stderr for n in needles),
      f"tokenize MODEL_DIR, a BOS outside the vocabulary: exit {p.returncode}: {p.stderr.strip()}")
job = write_job(f"{work}/bos.json", model="bos", data={"path": "p.txt", "format": "text"},
                activations=["token_embeddings"], output={"path": "bos.h5"})
p = run(harvest, "run", job)
check(p.returncode == 1 and all(n in p.stderr for n in needles),
      f"run, a BOS outside the vocabulary: exit {p.returncode}: {p.stderr.strip()}")
finish()
