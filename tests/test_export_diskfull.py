"""`harvest export` on a disk that fills up (a small tmpfs the test mounts, as test_diskfull):
exit 2 with a message naming the shard and the cause, no crash, no temporary left, the manifest
still unfinished (the reader refuses the folder); once space is freed the same command gives the
shards of an export on an ordinary disk, byte for byte. With /stats copied into the shards and
without, on one rank and two; `--probe` too. Skipped (77) where mounting is not allowed."""
import hashlib
import os
import shutil
import subprocess
import sys

from util import MPI_ENV, args, check, finish, init_model, run, write_job, write_prompts

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "io", "python"))
import harvest_data as hd  # noqa: E402

harvest, work = args()
disk = f"{work}/disk"
os.makedirs(disk)
if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", disk]).returncode != 0:
    print("cannot mount a tmpfs here: skipped")
    sys.exit(77)


def files(d):
    return {n: hashlib.sha256(open(os.path.join(d, n), "rb").read()).hexdigest()
            for n in sorted(os.listdir(d))}


def export(src, d, *opts, np_=1):
    cmd = [harvest, "export", src, *opts, "--quiet"]
    if np_ > 1:
        cmd = [shutil.which("mpirun"), "-np", str(np_)] + cmd
    return subprocess.run(cmd, capture_output=True, text=True, env=MPI_ENV, timeout=300)


try:
    init_model(harvest, f"{work}/model", seed=5)
    write_prompts(f"{work}/prompts.jsonl", [5, 17, 1, 30, 64, 9, 12, 40, 3, 22, 64, 2, 50, 7,
                                            33, 11, 48, 4, 26, 60] * 3, seed=5)
    srcs = {}
    for layout in ("token", "prompt"):  # the token layout has /stats, the prompt layout not
        job = write_job(f"{work}/{layout}.json", activations=["decoder_0_output",
                                                              "encoder_1_output"],
                        batch_size=3, max_seq_len=64, output={"path": f"{layout}.h5",
                                                              "layout": layout})
        run(harvest, "run", job, "--quiet", check=0)
        srcs[layout] = f"{work}/{layout}.h5"
    OPTS = ["--shard-tokens", "400"]  # 4 shards of about 1.2 MB
    for label, layout, np_ in (("stats", "token", 1), ("no_stats", "prompt", 1),
                               ("stats_np2", "token", 2)):
        ref = f"{work}/ref_{layout}"
        if not os.path.exists(ref):
            p = export(srcs[layout], ref, "--shards", ref, *OPTS)
            check(p.returncode == 0, f"{label}: the reference export: {p.stderr[-500:]}")
        subprocess.run(["mount", "-o", "remount,size=2m", disk], check=True)
        d = f"{disk}/{label}"
        p = export(srcs[layout], d, "--shards", d, *OPTS, np_=np_)
        check(p.returncode == 2, f"{label}: a full disk gives exit {p.returncode}, expected 2: "
                                 f"{p.stderr[-600:]}")
        check(f"{d}/train-0000" in p.stderr and ("disk full" in p.stderr or
                                                 "No space" in p.stderr),
              f"{label}: the message names the shard and the cause: {p.stderr[-600:]}")
        left = os.listdir(d)
        check(not [n for n in left if n.endswith(".tmp")], f"{label}: no temporary left: {left}")
        have, want = files(d), files(ref)
        check(all(have[n] == want[n] for n in have if n.endswith(".h5")) and
              len([n for n in have if n.endswith(".h5")]) < 4,
              f"{label}: the shards there are finished ones ({sorted(have)})")
        try:
            hd.Shards(d).rows("decoder_0_output")
            check(False, f"{label}: the reader takes the unfinished folder")
        except ValueError as e:
            check("not finished" in str(e), f"{label}: the reader refuses it: {e}")
        print(f"{label}: disk full with {sorted(have)} there: exit 2", flush=True)
        subprocess.run(["mount", "-o", "remount,size=60m", disk], check=True)  # space freed
        p = export(srcs[layout], d, "--shards", d, *OPTS, np_=np_)
        check(p.returncode == 0, f"{label}: the rerun: exit {p.returncode}: {p.stderr[-600:]}")
        check(files(d) == files(ref), f"{label}: after freeing space the same command gives the "
                                      f"ordinary disk's shards and manifest, byte for byte")
        print(f"{label}: the rerun after freeing space gives the same shards", flush=True)
        shutil.rmtree(d)  # the next case starts on an empty disk
    # --probe: one file, rank 0
    subprocess.run(["mount", "-o", "remount,size=64k", disk], check=True)
    fill = f"{disk}/fill"
    with open(fill, "wb") as f:  # the probe file does not fit in what is left
        try:
            f.write(b"\0" * (60 << 10))
        except OSError:
            pass
    p = export(srcs["token"], f"{disk}/probe", "--probe", f"{disk}/probe")
    check(p.returncode == 2 and "probe.h5" in p.stderr,
          f"--probe on a full disk: exit {p.returncode}, expected 2: {p.stderr[-600:]}")
    left = os.listdir(f"{disk}/probe") if os.path.isdir(f"{disk}/probe") else []
    check(not [n for n in left if n.startswith("probe.h5")], f"--probe: nothing left: {left}")
    os.remove(fill)
    subprocess.run(["mount", "-o", "remount,size=60m", disk], check=True)
    p = export(srcs["token"], f"{disk}/probe", "--probe", f"{disk}/probe")
    check(p.returncode == 0 and os.path.exists(f"{disk}/probe/probe.h5"),
          f"--probe after freeing space: {p.stderr[-600:]}")
    print("--probe: a full disk gives exit 2, then the rerun writes it", flush=True)
finally:
    subprocess.run(["umount", "-l", disk])
finish()
