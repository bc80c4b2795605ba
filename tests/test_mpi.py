"""Many ranks, one output, under a real mpirun (--oversubscribe): np 2 data-parallel, np 2 as two
pipeline stages, np 4 as 2 stages x 2 replicas and np 3 as three stages each give the np 1 output
bit for bit (the batches are the same); uneven splits (ranks with nothing to do) work; a world size
the grid cannot use is refused before any work; SIGUSR1 to mpirun or SIGTERM to one rank -> exit 3 ->
--resume -> identical; SIGKILL of one rank -> the job ends within seconds -> --resume -> identical.
Each signal lands at a point of the run counted in its rounds (the segments it has opened), not in
seconds, so the points are the same on a fast or a loaded machine."""
import os
import shutil
import signal
import subprocess
import time

import h5py

from util import (BOOKKEEPING, MPI_ENV, Snapshot, args, check, ended, finish, init_model,
                  output_diff, run, wait_segments, write_job, write_prompts)

harvest, work = args()
init_model(harvest, f"{work}/model", seed=7)
# 14 prompts (7 batches: uneven over 2, 3 and 2 x 2 replicas), 0 to 80 tokens (past the local
# window of 64)
write_prompts(f"{work}/prompts.jsonl", [(29 * i) % 80 + 1 for i in range(12)] + [0, 3], seed=7)
ACTS = ["token_embeddings", "*_output", "encoder_1_attn_probs", "decoder_2_q", "decoder_3_attention_mask",
        "logits"]
MPIRUN = shutil.which("mpirun")
ENV = MPI_ENV


def job(name, stages=1, data="prompts.jsonl", **out):
    o = {"path": f"{name}.h5", "checkpoint_seconds": 0,
         "compression": 4 if name.startswith(("pp2dp2", "few_dp4", "dp3")) else 0}
    o.update(out)
    return write_job(f"{work}/{name}.json", data=data, activations=ACTS, batch_size=2, output=o,
                     parallel={"pipeline_stages": stages})


def mpirun(np_, *a, timeout=600):
    return subprocess.run([MPIRUN, "-np", str(np_), harvest, *a], env=ENV, capture_output=True,
                          text=True, timeout=timeout)


def diff(a, b):  # the job text differs between runs (their output paths)
    return output_diff(a, b, BOOKKEEPING | {"job"})


p = mpirun(1, "run", job("np1"), "--quiet")
check(p.returncode == 0, f"np 1: {p.stderr}")
ref = Snapshot(f"{work}/np1.h5")  # read once, compared with every grid's output
run(harvest, "run", job("singleton"), "--quiet", check=0)  # no mpirun at all
check(diff(ref, f"{work}/singleton.h5") is None, "a singleton run == mpirun -np 1")
for name, np_, stages in (("dp2", 2, 1), ("pp2", 2, 2), ("pp2dp2", 4, 2), ("pp3", 3, 3), ("dp3", 3, 1)):
    t = time.time()
    p = mpirun(np_, "run", job(name, stages), "--quiet")
    ok = check(p.returncode == 0, f"{name} (np {np_}, {stages} stages): exit {p.returncode}: {p.stderr[-1500:]}")
    if ok:
        d = diff(ref, f"{work}/{name}.h5")
        check(d is None, f"{name}: differs from np 1 in {d}")
        with h5py.File(f"{work}/{name}.h5", "r") as f:
            import json
            prov = json.loads(f.attrs["provenance"])
            check(f.attrs["complete"] == 1 and prov["world_size"] == np_ and
                  prov["pipeline_stages"] == stages and len(prov["ranks"]) == np_,
                  f"{name}: complete, provenance names every rank")
        print(f"{name}: np {np_}, {stages} stage(s) == np 1 ({time.time() - t:.1f} s)", flush=True)

# a stage's replicas share its segments: one checkpoint interval, 2 stages x 2 replicas -> two
# segment files, each with rows of both replicas, compressed (collective writes)
p = mpirun(4, "run", job("pp2dp2_one", 2, checkpoint_seconds=3600), "--quiet")
if check(p.returncode == 0, f"pp2dp2_one: exit {p.returncode}: {p.stderr[-800:]}"):
    d = diff(ref, f"{work}/pp2dp2_one.h5")
    check(d is None, f"pp2dp2_one: differs from np 1 in {d}")
    segs = sorted(os.listdir(f"{work}/pp2dp2_one.h5.parts"))
    check(segs == ["index.h5", "seg-000-00000-00000.h5", "seg-000-00001-00000.h5"],
          f"pp2dp2_one: one segment per stage: {segs}")
    with h5py.File(f"{work}/pp2dp2_one.h5", "r") as f, \
            h5py.File(f"{work}/pp2dp2_one.h5.parts/seg-000-00000-00000.h5", "r") as s0:
        n = f["activations/token_embeddings"].shape[0]
        check(s0["activations/token_embeddings"].shape[0] == n and
              s0["activations/token_embeddings"].compression == "gzip",
              f"pp2dp2_one: stage 0's segment holds all {n} prompts of both replicas, compressed")
    print("pp2dp2_one: 2 stages x 2 replicas write 2 shared, compressed segments == np 1", flush=True)

# the token layout through collective (compressed) and independent writes
TOK = ["token_embeddings", "encoder_*_output", "decoder_1_q", "logits"]
for name, np_, stages, gz in (("tok1", 1, 1, 0), ("tok_dp2_gz", 2, 1, 3), ("tok_pp2dp2", 4, 2, 0),
                              ("tok_dp3_gz", 3, 1, 1)):
    write_job(f"{work}/{name}.json", activations=TOK, batch_size=3, parallel={"pipeline_stages": stages},
              output={"path": f"{name}.h5", "layout": "token", "compression": gz, "checkpoint_seconds": 0})
    p = mpirun(np_, "run", f"{work}/{name}.json", "--quiet")
    if not check(p.returncode == 0, f"{name}: exit {p.returncode}: {p.stderr[-800:]}"):
        continue
    if name == "tok1":
        tok1 = Snapshot(f"{work}/tok1.h5")
    else:
        d = diff(tok1, f"{work}/{name}.h5")
        check(d is None, f"{name}: differs from np 1 in {d}")
        print(f"{name}: token layout, np {np_}, {stages} stage(s), gzip {gz} == np 1", flush=True)

# Laguna (the M.1 preset: dense and mixture blocks): stages hand over the residual stream alone
run(harvest, "init-model", "--family", "laguna", "--preset", "M.1", "--seed", "7", f"{work}/laguna", check=0)
write_prompts(f"{work}/lg.jsonl", [(13 * i) % 30 + 1 for i in range(9)], seed=7, vocab=512)
# expert shards: the ranks of a stage split the routed experts and exchange their slots' outputs
for name, np_, stages, ep in (("lg1", 1, 1, 1), ("lg_pp2dp2", 4, 2, 1), ("lg_pp3", 3, 3, 1),
                              ("lg_ep2", 2, 1, 2), ("lg_ep4", 4, 1, 4), ("lg_pp2ep2", 4, 2, 2),
                              ("lg_ep3", 3, 1, 3), ("lg_ep2dp2", 4, 1, 2)):
    write_job(f"{work}/{name}.json", model="laguna", data="lg.jsonl", batch_size=2,
              activations=["layers.*.layer_output", "layers.*.expert_*", "layers.*.routed_output",
                           "layers.2.attention_probabilities", "logits"],
              output={"path": f"{name}.h5"}, parallel={"pipeline_stages": stages, "expert_parallel": ep})
    p = mpirun(np_, "run", f"{work}/{name}.json", "--quiet")
    if not check(p.returncode == 0, f"{name}: exit {p.returncode}: {p.stderr[-800:]}"):
        continue
    if name == "lg1":
        lg1 = Snapshot(f"{work}/lg1.h5")
    else:
        d = diff(lg1, f"{work}/{name}.h5")
        check(d is None, f"{name}: differs from np 1 in {d}")
        with h5py.File(f"{work}/{name}.h5", "r") as f:
            import json
            prov = json.loads(f.attrs["provenance"])
            check(prov["expert_parallel"] == ep and (ep == 1 or all("expert_shard" in r for r in prov["ranks"])),
                  f"{name}: the provenance names each rank's expert shard")
        print(f"laguna {name}: np {np_}, {stages} stage(s) x {ep} expert shard(s) == np 1", flush=True)
p = mpirun(2, "run", write_job(f"{work}/lg_ep_bad.json", model="laguna", data="lg.jsonl", output={"path": "eb.h5"},
                                parallel={"pipeline_stages": 1, "expert_parallel": 32}))
check(p.returncode == 1 and "32 shards for 16 experts" in p.stderr, f"more shards than experts: {p.stderr[-300:]}")
p = mpirun(3, "run", write_job(f"{work}/lg_ep_grid.json", model="laguna", data="lg.jsonl", output={"path": "eg.h5"},
                                parallel={"pipeline_stages": 1, "expert_parallel": 2}))
check(p.returncode == 1 and "does not divide the 3 ranks" in p.stderr, f"a grid that does not divide: {p.stderr[-300:]}")
# a stop with shards: SIGUSR1 to mpirun -> every rank exit 3 -> --resume -> the np 1 output; the
# signal once the second round has begun (40 batches a rank, so 38 still to come)
write_prompts(f"{work}/lg_long.jsonl", [(17 * i) % 60 + 20 for i in range(80)], seed=8, vocab=512)
for name, np_, ep in (("lg_long1", 1, 1), ("lg_long_ep2", 2, 2)):
    write_job(f"{work}/{name}.json", model="laguna", data="lg_long.jsonl", batch_size=2,
              activations=["layers.*.layer_output", "logits"],
              output={"path": f"{name}.h5", "checkpoint_seconds": 0}, parallel={"expert_parallel": ep})
p = mpirun(1, "run", f"{work}/lg_long1.json", "--quiet")
mp = subprocess.Popen([MPIRUN, "-np", "2", harvest, "run", f"{work}/lg_long_ep2.json", "--quiet"], env=ENV,
                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
wait_segments(f"{work}/lg_long_ep2.h5", mp, 2)
mp.send_signal(signal.SIGUSR1)
err = ended(mp, "lg_long_ep2")
if err is not None:
    check(mp.returncode == 3, f"lg_long_ep2: exit {mp.returncode}, expected 3 (stopped): {err[-500:]}")
    p = mpirun(2, "run", f"{work}/lg_long_ep2.json", "--resume", "--quiet")
    if check(p.returncode == 0, f"lg_long_ep2 --resume: {p.stderr[-500:]}"):
        d = diff(f"{work}/lg_long1.h5", f"{work}/lg_long_ep2.h5")
        check(d is None, f"lg_long_ep2: the resumed output differs from np 1 in {d}")
        print(f"laguna expert shards: stop (exit {mp.returncode}) and --resume == np 1", flush=True)

# uneven: fewer batches than replicas, and more stages than some ranks have batches
write_prompts(f"{work}/few.jsonl", [5, 9, 2], seed=8)
p = mpirun(1, "run", job("few1", data="few.jsonl"), "--quiet")
for name, np_, stages in (("few_dp4", 4, 1), ("few_pp2dp2", 4, 2)):
    p = mpirun(np_, "run", job(name, stages, data="few.jsonl"), "--quiet")
    if check(p.returncode == 0, f"{name}: exit {p.returncode}: {p.stderr[-800:]}"):
        d = diff(f"{work}/few1.h5", f"{work}/{name}.h5")
        check(d is None, f"{name}: differs from np 1 in {d}")
        print(f"{name}: ranks with nothing to do, same output", flush=True)

p = mpirun(3, "run", job("bad_grid", 2))
check(p.returncode == 1 and "does not divide the 3 ranks" in p.stderr and not os.path.exists(f"{work}/bad_grid.h5"),
      f"a world size the grid cannot use: {p.returncode} {p.stderr[-500:]}")
write_job(f"{work}/bad_stages.json", activations=["encoder_0_q"], output={"path": "bs.h5"},
          parallel={"pipeline_stages": 2})
p = mpirun(2, "run", f"{work}/bad_stages.json")
check(p.returncode == 1 and "2 stages for the 1 blocks" in p.stderr, f"more stages than blocks: {p.stderr[-300:]}")

# ---- interruption: 48 prompts of 20 to 79 tokens, 2 stages x 2 replicas: 12 rounds a stage ----
write_prompts(f"{work}/long.jsonl", [(53 * i) % 60 + 20 for i in range(48)], seed=9)
ROUNDS = 12
p = mpirun(1, "run", job("long1", data="long.jsonl"), "--quiet")
check(p.returncode == 0, f"long np 1: {p.stderr[-500:]}")
long1 = Snapshot(f"{work}/long1.h5")


def rank_pids(jp):
    """The ranks running job file jp: this test's own (other tests may run harvest meanwhile)."""
    out = subprocess.run(["pgrep", "-f", f"^{harvest} run {jp}"], capture_output=True, text=True).stdout
    return [int(x) for x in out.split()]


def wait_no_ranks(label, jp):
    for _ in range(100):
        if not rank_pids(jp):
            return True
        time.sleep(0.2)
    check(False, f"{label}: ranks still alive 20 s after the job ended: {rank_pids(jp)}")
    return False


# mpirun forwards SIGUSR1 (and SIGUSR2) to every rank; SIGTERM reaches ranks directly under srun.
# Each signal comes once stage 0 has begun round int(frac x ROUNDS) (its segments, one a round)
for label, target, sig, frac in (("usr1_mpirun", "mpirun", signal.SIGUSR1, 0.4),
                                 ("term_one_rank", "rank", signal.SIGTERM, 0.35),
                                 ("kill_rank_early", "rank", signal.SIGKILL, 0.3),
                                 ("kill_rank_mid", "rank", signal.SIGKILL, 0.45),
                                 ("kill_rank_late", "rank", signal.SIGKILL, 0.6),
                                 ("kill_rank_gz", "rank", signal.SIGKILL, 0.5)):  # collective writes
    jp = job(label, 2, data="long.jsonl", **({"compression": 4} if label.endswith("_gz") else {}))
    mp = subprocess.Popen([MPIRUN, "-np", "4", harvest, "run", jp, "--quiet"], env=ENV,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    at = int(frac * ROUNDS)
    wait_segments(f"{work}/{label}.h5", mp, at + 1, prefix="seg-000-00000-")
    pids = rank_pids(jp)
    if target == "mpirun":
        mp.send_signal(sig)
    elif pids:
        os.kill(pids[len(pids) // 2], sig)
    t = time.time()
    err = ended(mp, label, timeout=180)  # the batches in flight finish first
    if err is None:
        continue
    took = time.time() - t
    wait_no_ranks(label, jp)
    if mp.returncode == 0:
        print(f"{label}: finished before the signal; nothing to resume")
    elif sig == signal.SIGKILL:
        check(took < 20, f"{label}: the job took {took:.1f} s to end after the kill")
    else:
        check(mp.returncode == 3, f"{label}: exit {mp.returncode}, expected 3: {err[-800:]}")
    with h5py.File(f"{work}/{label}.h5", "r") as f:
        done = f.attrs["prompts_done"]
        check(mp.returncode == 0 or f.attrs["complete"] == 0, f"{label}: incomplete after the stop")
    try:
        p = mpirun(4, "run", jp, "--resume", "--quiet", timeout=180)
    except subprocess.TimeoutExpired:
        check(False, f"{label}: --resume hung; processes: {subprocess.run(['pgrep', '-af', 'harvest'], capture_output=True, text=True).stdout}")
        subprocess.run(["pkill", "-9", "-f", f"^{harvest} run {jp}"])
        continue
    if check(p.returncode == 0, f"{label}: --resume exit {p.returncode}: {p.stderr[-800:]}"):
        d = diff(long1, f"{work}/{label}.h5")
        check(d is None, f"{label}: the resumed output differs from np 1 in {d}")
        print(f"{label}: signal in round {at} of {ROUNDS}; exit {mp.returncode} after {took:.1f} s "
              f"with {done} prompts kept; resumed to the same output", flush=True)
finish()
