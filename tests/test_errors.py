"""Bad input: each case exits with the contract's code (1 bad input, 2 system failure) and a
message naming the file, field or line and what was expected; nothing is left that claims to be
complete."""
import json
import os
import shutil

import h5py

from util import args, check, finish, init_model, run, write_job, write_prompts

harvest, work = args()
base = init_model(harvest, f"{work}/model", seed=4)
sharded = init_model(harvest, f"{work}/sharded", seed=4, shards=2)
write_prompts(f"{work}/prompts.jsonl", [4, 9, 3], seed=4)


def read_st(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        return json.loads(f.read(n)), f.read()


def write_st(path, header, data):
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little") + h + data)


def model_variant(name, mutate):
    """A copy of the base model whose safetensors file mutate(path) changes."""
    d = f"{work}/{name}"
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    shutil.copy(f"{base}/config.json", d)
    shutil.copy(f"{base}/model.safetensors", d)
    mutate(d)
    return d


def header_edit(fn):
    def m(d):
        h, data = read_st(f"{d}/model.safetensors")
        fn(h)
        write_st(f"{d}/model.safetensors", h, data)
    return m


def config_edit(fn):
    def m(d):
        c = json.load(open(f"{d}/config.json"))
        fn(c)
        json.dump(c, open(f"{d}/config.json", "w"))
    return m


def expect(label, code, needles, job_fields=None, job_text=None, extra=(), out="out.h5"):
    jp = f"{work}/{label}.json"
    if job_text is not None:
        open(jp, "w").write(job_text)
    else:
        fields = {"output": {"path": out}}
        fields.update(job_fields or {})
        write_job(jp, **fields)
    outp = os.path.join(work, out)
    p = run(harvest, "run", jp, *extra)
    ok = check(p.returncode == code, f"{label}: exit {p.returncode}, expected {code}: {p.stderr.strip()}")
    for n in needles:
        ok &= check(n in p.stderr, f"{label}: message lacks {n!r}: {p.stderr.strip()}")
    if os.path.exists(outp) and label != "exists":
        try:
            with h5py.File(outp, "r") as f:
                check(f.attrs.get("complete", 0) != 1, f"{label}: a failed run left complete = 1")
        except OSError:
            pass
        os.remove(outp)
    if ok:
        print(f"ok: {label}: {p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ''}")


# ---- job files ----
expect("malformed", 1, ["malformed.json: line 3", "malformed JSON"],
       job_text='{\n  "model": "model",\n  "data": [1,,\n}')
expect("unknown_key", 1, ["unknown key \"activatons\""],
       job_fields={"activatons": ["*"]})
expect("unknown_nested_key", 1, ["output: unknown key \"compresion\""],
       job_fields={"output": {"path": "out.h5", "compresion": 4}})
expect("wrong_type", 1, ["\"batch_size\": expected an integer"], job_fields={"batch_size": "8"})
expect("bad_dtype", 1, ["\"output.dtype\"", "bfloat16"], job_fields={"output": {"path": "out.h5", "dtype": "f8"}})
expect("no_activations", 1, ["\"activations\""], job_fields={"activations": []})
expect("unknown_name", 1, ["\"encoder_9_q\" matches no activation", "closest: \"encoder_0_q\""],
       job_fields={"activations": ["logits", "encoder_9_q"]})
expect("glob_no_match", 1, ["\"encoder_*_qq\" matches no activation"],
       job_fields={"activations": ["encoder_*_qq"]})
p = run(harvest, "run", f"{work}/nonexistent.json")
check(p.returncode == 1 and "nonexistent.json: cannot open" in p.stderr, "missing job file")
expect("too_long", 1, ["\"max_seq_len\": 1000 is longer", "512"], job_fields={"max_seq_len": 1000})

# ---- model folders ----
expect("no_model", 1, ["nowhere/config.json: cannot open"], job_fields={"model": "nowhere"})
os.makedirs(f"{work}/noweights", exist_ok=True)
shutil.copy(f"{base}/config.json", f"{work}/noweights")
expect("no_weights", 1, ["no model.safetensors nor model.safetensors.index.json"],
       job_fields={"model": "noweights"})
d = model_variant("truncated", lambda d: os.truncate(f"{d}/model.safetensors", 40_000_000))
expect("truncated", 1, ["truncated/model.safetensors", "outside the", "truncated file or lying header"],
       job_fields={"model": "truncated"})
d = model_variant("shortfile", lambda d: os.truncate(f"{d}/model.safetensors", 5))
expect("shortfile", 1, ["too short for a safetensors header"], job_fields={"model": "shortfile"})
d = model_variant("hlen", lambda d: open(f"{d}/model.safetensors", "r+b").write((10**9).to_bytes(8, "little")))
expect("header_length", 1, ["header length 1000000000 past the end"], job_fields={"model": "hlen"})
d = model_variant("lying", header_edit(lambda h: h["decoder.norm.weight"].__setitem__("data_offsets", [0, 10**10])))
expect("lying_offsets", 1, ["\"decoder.norm.weight\"", "outside the"], job_fields={"model": "lying"})
d = model_variant("baddtype", header_edit(lambda h: h["encoder.norm.weight"].update(dtype="I32")))
expect("wrong_dtype", 1, ["\"encoder.norm.weight\": dtype I32, expected F32, F16 or BF16"],
       job_fields={"model": "baddtype"})
def swap_shape(h):
    e = h["encoder.layers.1.ffn.gate_proj.weight"]
    e["shape"] = e["shape"][::-1]  # transposed: same bytes, wrong shape
d = model_variant("badshape", header_edit(swap_shape))
expect("wrong_shape", 1, ["\"encoder.layers.1.ffn.gate_proj.weight\": shape [384, 1024], expected [1024, 384]"],
       job_fields={"model": "badshape"})
def bad_shape(h):
    e = h["decoder.layers.2.ffn.up_proj.weight"]
    e["shape"] = [512, 768]  # same byte count, wrong shape
d = model_variant("badshape2", header_edit(bad_shape))
expect("wrong_shape_same_bytes", 1, ["\"decoder.layers.2.ffn.up_proj.weight\": shape [512, 768], expected [1024, 384]"],
       job_fields={"model": "badshape2"})
d = model_variant("missing", header_edit(lambda h: h.pop("decoder.layers.3.attn.o_proj.weight")))
expect("missing_tensor", 1, ["missing tensor \"decoder.layers.3.attn.o_proj.weight\""],
       job_fields={"model": "missing"})
d = model_variant("badcfg", config_edit(lambda c: c.update(architecture="transformer")))
expect("unknown_family", 1, ["badcfg/config.json: unknown model family"], job_fields={"model": "badcfg"})
d = model_variant("cfgkey", config_edit(lambda c: c.pop("ffn_dim")))
expect("config_missing_key", 1, ["cfgkey/config.json: missing \"ffn_dim\""], job_fields={"model": "cfgkey"})
d = model_variant("cfgtype", config_edit(lambda c: c.update(head_dim="64")))
expect("config_wrong_type", 1, ["\"head_dim\": expected an integer"], job_fields={"model": "cfgtype"})

# a sharded model whose index names a shard that is not there
d = f"{work}/lostshard"
shutil.rmtree(d, ignore_errors=True)
shutil.copytree(sharded, d)
os.remove(f"{d}/model-00002-of-00002.safetensors")
expect("missing_shard", 1, ["model.safetensors.index.json", "model-00002-of-00002.safetensors", "missing"],
       job_fields={"model": "lostshard"})
run(harvest, "run", write_job(f"{work}/shardok.json", model="sharded", output={"path": "sh.h5"}), "--quiet", check=0)

# ---- Laguna checkpoints (sharded BF16 + index, as published) ----
lg = f"{work}/laguna"
if not os.path.exists(f"{lg}/config.json"):
    run(harvest, "init-model", "--family", "laguna", "--preset", "XS-2.1", "--seed", "3", lg, check=0)
write_prompts(f"{work}/lg_prompts.jsonl", [5, 9], seed=3, vocab=512)
ok = run(harvest, "run", write_job(f"{work}/lg_ok.json", model="laguna", data="lg_prompts.jsonl",
                                    output={"path": "lg.h5"}), "--quiet")
check(ok.returncode == 0, f"the unchanged laguna checkpoint runs: {ok.stderr}")


def laguna_variant(name, tensor=None, edit=None, config=None):
    """A copy of the laguna checkpoint: edit(header entry, header) on the shard holding tensor,
    or config(dict) on its config.json."""
    d = f"{work}/{name}"
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(lg, d)
    if tensor:
        index = json.load(open(f"{d}/model.safetensors.index.json"))
        shard = f"{d}/{index['weight_map'][tensor]}"
        h, data = read_st(shard)
        edit(h[tensor], h)
        write_st(shard, h, data)
    if config:
        config_edit(config)(d)
    return name


def lg_expect(label, needles, model):
    expect(label, 1, needles, job_fields={"model": model, "data": "lg_prompts.jsonl"})


lg_expect("laguna_expert_not_in_shard", ["\"model.layers.2.mlp.experts.5.up_proj.weight\" in", "which lacks it"],
          laguna_variant("lg_noexpert", "model.layers.2.mlp.experts.5.up_proj.weight",
                         lambda e, h: h.pop("model.layers.2.mlp.experts.5.up_proj.weight")))
d = laguna_variant("lg_noexpert2", "model.layers.4.mlp.experts.15.down_proj.weight",
                   lambda e, h: h.pop("model.layers.4.mlp.experts.15.down_proj.weight"))
ix = json.load(open(f"{work}/{d}/model.safetensors.index.json"))
ix["weight_map"].pop("model.layers.4.mlp.experts.15.down_proj.weight")
json.dump(ix, open(f"{work}/{d}/model.safetensors.index.json", "w"))
lg_expect("laguna_missing_expert", ["missing tensor \"model.layers.4.mlp.experts.15.down_proj.weight\""], d)
lg_expect("laguna_wrong_shape", ["\"model.layers.1.self_attn.q_proj.weight\": shape [64, 128], expected [128, 64]"],
          laguna_variant("lg_shape", "model.layers.1.self_attn.q_proj.weight",
                         lambda e, h: e.update(shape=e["shape"][::-1])))
lg_expect("laguna_wrong_dtype", ["\"model.layers.3.mlp.gate.weight\": dtype F16, expected BF16"],
          laguna_variant("lg_dtype", "model.layers.3.mlp.gate.weight", lambda e, h: e.update(dtype="F16")))
lg_expect("laguna_rope_type", ["config.json: \"rope_parameters.full_attention.rope_type\": \"longrope\""],
          laguna_variant("lg_rope", config=lambda c: c["rope_parameters"]["full_attention"].update(rope_type="longrope")))
d = laguna_variant("lg_lostshard")
os.remove(f"{work}/{d}/model-00002-of-00003.safetensors")
lg_expect("laguna_missing_shard", ["model-00002-of-00003.safetensors"], d)
expect("laguna_expert_parallel", 1, ["= 1 x 2 does not divide the 1 ranks"],
       job_fields={"model": "laguna", "data": "lg_prompts.jsonl", "parallel": {"expert_parallel": 2}})

# ---- data ----
write_prompts(f"{work}/range.jsonl", [3, 3], seed=1)
with open(f"{work}/range.jsonl", "a") as f:
    f.write('{"input_ids": [1, 2, 8192]}\n')
expect("id_out_of_range", 1, ["range.jsonl: line 3", "input_ids[2]", "8192", "[0, 8192)"],
       job_fields={"data": "range.jsonl"})
open(f"{work}/neg.jsonl", "w").write('{"input_ids": [5, -1]}\n')
expect("negative_id", 1, ["neg.jsonl: line 1", "input_ids[1]"], job_fields={"data": "neg.jsonl"})
open(f"{work}/frac.jsonl", "w").write('{"input_ids": [5]}\n{"input_ids": [1.5]}\n')
expect("fractional_id", 1, ["frac.jsonl: line 2"], job_fields={"data": "frac.jsonl"})
open(f"{work}/notjson.jsonl", "w").write('{"input_ids": [5]}\nnot json\n')
expect("bad_line", 1, ["notjson.jsonl: line 2", "expected a JSON object"], job_fields={"data": "notjson.jsonl"})
open(f"{work}/text.jsonl", "w").write('{"text": "hello"}\n')
expect("text_without_tokenizer", 1, ["text.jsonl: line 1", "tokenizer"], job_fields={"data": "text.jsonl"})
expect("no_data", 1, ["missing.jsonl: cannot open"], job_fields={"data": "missing.jsonl"})
expect("data_field", 1, ["line 1", "\"ids\""], job_fields={"data": {"path": "prompts.jsonl", "field": "ids"}})

# ---- output ----
expect("unwritable", 2, ["no/such/dir/out.h5: cannot create the output file"], out="no/such/dir/out.h5")
check(not os.path.exists(f"{work}/no"), "unwritable: nothing created")
run(harvest, "run", write_job(f"{work}/exists.json", output={"path": "exists.h5"}), "--quiet", check=0)
expect("exists", 1, ["exists.h5: the output exists", "--resume", "--overwrite"], out="exists.h5")
p = run(harvest, "run", f"{work}/exists.json", "--resume", "--overwrite")
check(p.returncode == 1 and "exclude each other" in p.stderr, "--resume with --overwrite")
p = run(harvest, "run", f"{work}/exists.json", "--resume")
check(p.returncode == 0 and "already complete" in p.stderr, f"--resume of a complete output: {p.stderr}")
write_job(f"{work}/exists2.json", activations=["logits"], output={"path": "exists.h5"})
p = run(harvest, "run", f"{work}/exists2.json", "--resume")
check(p.returncode == 1 and "different job" in p.stderr, f"--resume with another job: {p.stderr}")
p = run(harvest, "run", f"{work}/exists2.json", "--overwrite", "--quiet")
check(p.returncode == 0 and p.stderr == "", "--overwrite replaces, --quiet is silent")
with h5py.File(f"{work}/exists.h5", "r") as f:
    check(list(f["activations"]) == ["logits"], "--overwrite wrote the new job's output")
finish()
