"""The careless user's pass over every job key and every command's flags (issue 19, "your own
adversarial pass"): each case is a value a user or a script gets wrong - out of range, NaN or
infinity, empty, huge, the wrong type, a flag the command does not take - and must end with exit 1
and a message naming the key or flag (and the file where there is one), never a signal death, a
hang (every run has a time limit), an output file left behind, or an input changed. The cases that
need a running harvest (a kill at any point, two runs at once, a full disk, another run's files)
are in test_integrity, test_resume, test_diskfull, test_export_safety, test_export_diskfull and
test_badinput; this file is the breadth. Prints one line a case: exit code and the message's first
line, so the run is the inventory."""
import copy
import hashlib
import json
import os

from util import args, check, finish, init_model, run, write_prompts

harvest, work = args()
DATA_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data")
model = init_model(harvest, f"{work}/model", seed=2)
data = write_prompts(f"{work}/prompts.jsonl", [5, 9, 3], seed=2)
BASE = {"model": "model", "data": "prompts.jsonl", "activations": ["decoder_3_output"],
        "output": {"path": "out.h5"}}
INPUTS = [f"{model}/config.json", f"{model}/model.safetensors", data]


def digest():
    return {p: hashlib.sha256(open(p, "rb").read()).hexdigest() for p in INPUTS}


before = digest()
n_cases = 0


def expect_refused(label, argv, needles, cwd_files=()):
    """harvest argv exits 1 naming every needle; nothing in cwd_files appears"""
    global n_cases
    n_cases += 1
    p = run(harvest, *argv, timeout=120)
    first = (p.stderr.strip().splitlines() or [""])[0][:150]
    print(f"  {label:42s} exit {p.returncode}: {first}")
    ok = p.returncode == 1 and all(n in p.stderr for n in needles)
    check(ok, f"{label}: exit {p.returncode}, expected 1 naming {needles}: {p.stderr.strip()[:600]}")
    for f in cwd_files:
        check(not os.path.exists(f), f"{label}: {f} left behind")
        if os.path.exists(f):  # the next case must not meet it
            run(harvest, "run", f"{work}/good.json", "--quiet")
            for leaf in os.listdir(work):
                if leaf.startswith("out.h5"):
                    os.system(f"rm -rf '{work}/{leaf}'")


def job_case(label, path, value, needles=None):
    """the base job with the dotted key path set to value (or removed, value is DELETE)"""
    job = copy.deepcopy(BASE)
    node, keys = job, path.split(".")
    if keys[0] == "data" and len(keys) > 1:
        job["data"] = {"path": job["data"]}
    for k in keys[:-1]:
        node = node.setdefault(k, {})
    if value is DELETE:
        node.pop(keys[-1], None)
    else:
        node[keys[-1]] = value
    jp = f"{work}/job-{label}.json"
    with open(jp, "w") as f:
        f.write(json.dumps(job).replace('"__INF__"', "1e999").replace('"__NINF__"', "-1e999"))
    key = keys[-1] if needles is None else None
    expect_refused(f"job {label}", ["run", jp, "--quiet"],
                   needles if needles is not None else [jp, key], [f"{work}/out.h5"])


DELETE = object()
INF, NINF = "__INF__", "__NINF__"  # written as the JSON numbers 1e999 / -1e999 (cJSON: +-inf)

print("job keys:")
for key, values in [
        ("max_seq_len", [0, -1, 2.5, "64", INF, 10 ** 12, [], None]),
        ("batch_size", [0, -1, 2.5, "8", INF, 10 ** 12, True]),
        ("output.dtype", ["float64", 3, "", None]),
        ("output.layout", ["rows", 0, ""]),
        ("output.compression", [-1, 10, 2.5, "9", INF]),
        ("output.checkpoint_seconds", [-1, "60", INF, NINF]),
        ("output.path", ["", 3, None]),
        ("parallel.pipeline_stages", [0, -1, 2.5, "2", 10 ** 9, INF]),
        ("parallel.expert_parallel", [0, -1, 2.5, "1", 2]),
        ("activations", [[], "decoder_3_output", [3], ["no_such_value"], ["decoder_9*"]]),
        ("statistics", ["yes", 1, None]),
        ("select.skip_first", [-1, 2.5, "1", INF]),
        ("select.tokens_per_context", [0, -1, 2.5, "4"]),
        ("select.seed", [-1, 2 ** 60, 2.5, "0"]),
        ("select.skip_token_ids", [5, ["x"], [-1], [10 ** 12], [2.5]]),
        ("select.max_norm_multiple", [0.5, 1, -1, "10", INF]),
        ("pool", ["max", 3, [], ["last", 3]]),
        ("data.fields", [3, {"label": "complex"}, {"": "int"}]),
]:
    for i, v in enumerate(values):
        job_case(f"{key}={json.dumps(v) if v not in (INF, NINF) else v.strip('_')}#{i}", key, v,
                 None if key != "activations" else [f"{work}/job-"])
job_case("model missing", "model", DELETE, ['"model"'])
job_case("model not a folder", "model", "prompts.jsonl", ["prompts.jsonl"])
job_case("model folder missing", "model", "nowhere", ["nowhere"])
job_case("data missing", "data", DELETE, ['"data"'])
job_case("data file missing", "data", "nowhere.jsonl", ["nowhere.jsonl"])
job_case("data a folder", "data", "model", ["model"])
job_case("data format unknown", "data", {"path": "prompts.jsonl", "format": "parquet"},
         ["format"])
job_case("unknown top-level key", "epochs", 3, ["epochs"])
job_case("unknown output key", "output.shuffle", True, ["shuffle"])

print("data lines:")
for label, line in [("id negative", '{"input_ids": [1, -3]}'), ("id >= vocab", '{"input_ids": [8192]}'),
                    ("id huge", '{"input_ids": [1e30]}'), ("id fraction", '{"input_ids": [2.5]}'),
                    ("id a string", '{"input_ids": ["7"]}'), ("ids not a list", '{"input_ids": 7}'),
                    ("not JSON", "{input_ids: [1]}"), ("two objects", '{"input_ids": [1]} {"a": 1}'),
                    ("text without tokenizer", '{"text": "hello"}')]:
    d = f"{work}/bad-{len(label)}-{label.replace(' ', '_').replace('>', 'gt')}.jsonl"
    with open(d, "w") as f:
        f.write('{"input_ids": [1, 2]}\n' + line + "\n")
    job = dict(BASE, data=os.path.basename(d))
    jp = f"{work}/job-data-{os.path.basename(d)}.json"
    json.dump(job, open(jp, "w"))
    expect_refused(f"data {label}", ["run", jp, "--quiet"], [os.path.basename(d), "line 2"],
                   [f"{work}/out.h5"])

print("command flags:")
good = f"{work}/good.json"
json.dump(dict(BASE, output={"path": "good.h5"}), open(good, "w"))
run(harvest, "run", good, "--quiet", check=0)
out = f"{work}/good.h5"
for label, argv, needles in [
        ("run without a job", ["run"], ["usage"]),
        ("run a job that is missing", ["run", f"{work}/nowhere.json"], ["nowhere.json"]),
        ("run --bogus", ["run", good, "--bogus"], ["--bogus"]),
        ("run --resume --overwrite", ["run", good, "--resume", "--overwrite"], ["--resume"]),
        ("inspect a missing file", ["inspect", f"{work}/nowhere.h5"], ["nowhere.h5"]),
        ("inspect a non-HDF5 file", ["inspect", data], [data]),
        ("inspect --text -1", ["inspect", out, "--text", "-1"], ["--text"]),
        ("inspect --text past the end", ["inspect", out, "--text", "99"], ["prompt 99"]),
        ("inspect --text x", ["inspect", out, "--text", "x"], ["--text"]),
        ("inspect --bogus", ["inspect", out, "--bogus"], ["--bogus"]),
        ("activations of a missing folder", ["activations", f"{work}/nowhere"], ["nowhere"]),
        ("activations --bogus", ["activations", model, "--bogus"], ["--bogus"]),
        ("plan --pipeline-stages 0", ["plan", model, "--pipeline-stages", "0"], ["--pipeline-stages"]),
        ("plan --pipeline-stages x", ["plan", model, "--pipeline-stages", "x"], ["--pipeline-stages"]),
        ("plan --expert-parallel -1", ["plan", model, "--expert-parallel", "-1"], ["--expert-parallel"]),
        ("plan --seq-len 0", ["plan", model, "--seq-len", "0"], ["--seq-len"]),
        ("plan --seq-len 1e99", ["plan", model, "--seq-len", "1e99"], ["--seq-len"]),
        ("init-model --family bogus", ["init-model", "--family", "bogus", f"{work}/m2"], ["bogus"]),
        ("init-model --shards 0", ["init-model", "--family", "encdec", "--shards", "0", f"{work}/m2"],
         ["--shards"]),
        ("init-model --shards 1001", ["init-model", "--family", "encdec", "--shards", "1001",
                                      f"{work}/m2"], ["--shards"]),
        ("init-model --seed -1", ["init-model", "--family", "encdec", "--seed", "-1", f"{work}/m2"],
         ["--seed"]),
        ("init-model --dtype f64", ["init-model", "--family", "encdec", "--dtype", "f64",
                                    f"{work}/m2"], ["--dtype"]),
        ("init-model --preset bogus", ["init-model", "--family", "llama", "--preset", "bogus",
                                       f"{work}/m2"], ["bogus"]),
        ("tokenize a missing tokenizer", ["tokenize", f"{work}/nowhere", data], ["nowhere"]),
        ("tokenize a missing input", ["tokenize", DATA_DIR, f"{work}/nowhere.txt"], ["nowhere"]),
        ("stats of a missing file", ["stats", f"{work}/nowhere.h5"], ["nowhere.h5"]),
        ("stats --names matching nothing", ["stats", out, "--names", "zzz*"], ["zzz*"]),
        ("export without a target", ["export", out], ["--shards"]),
        ("export --val 1.5", ["export", out, "--shards", f"{work}/sh", "--val", "1.5"], ["--val"]),
        ("export --val nan", ["export", out, "--shards", f"{work}/sh", "--val", "nan"], ["--val"]),
        ("export --val -0.1", ["export", out, "--shards", f"{work}/sh", "--val", "-0.1"], ["--val"]),
        ("export --seed -1", ["export", out, "--shards", f"{work}/sh", "--seed", "-1"], ["--seed"]),
        ("export --shard-tokens 0", ["export", out, "--shards", f"{work}/sh", "--shard-tokens", "0"],
         ["--shard-tokens"]),
        ("export --dtype float64", ["export", out, "--shards", f"{work}/sh", "--dtype", "float64"],
         ["--dtype"]),
        ("export --names missing", ["export", out, "--shards", f"{work}/sh", "--names", "zzz"],
         ["zzz"]),
        ("export --pool max", ["export", out, "--probe", f"{work}/pr", "--pool", "max"], ["--pool"]),
        ("bench --T 0", ["bench", "--T", "0"], ["--T"]),
        ("bench --batch -1", ["bench", "--batch", "-1"], ["--batch"]),
        ("unknown command", ["harvestify"], ["harvestify"]),
]:
    expect_refused(label, argv, needles)

check(digest() == before, "no input changed")
print(f"{n_cases} cases")
finish()
