"""harvest_data: fast reading of harvest's training shards and outputs (numpy; torch optional).

    from harvest_data import Shards, open_output, stats, Probe
    for x in Shards("shards").batches("decoder_3_output", 4096, seed=0, torch=True):
        ...                                   # x: a torch tensor [4096, 384], shuffled
    X, y = Probe("probe").arrays("decoder_3_output", "label")   # `harvest export --probe`

Shards (written by `harvest export OUT.h5 --shards DIR`) hold contiguous datasets, so a run of rows
is one read at the dataset's file offset: no HDF5 call per batch, and bfloat16 (stored as its raw
uint16 bits) is widened in numpy, `(u16.astype(uint32) << 16).view(float32)`, at memory speed.
Needs numpy and h5py (Debian's python3-numpy, python3-h5py); torch only for torch=True.
"""
import json
import os
import sys

import numpy as np

__version__ = "0.18.0"  # harvest's version (the file VERSION at the top of the repository)

__all__ = ["Shards", "open_output", "check_output", "stats", "widen_bf16", "Probe",
           "load_safetensors"]


def widen_bf16(u16):
    """Raw bfloat16 bits (uint16) to float32, exactly."""
    return (np.asarray(u16, np.uint16).astype(np.uint32) << 16).view(np.float32)


def _pread(fd, mv, pos, name):
    """fills the memoryview mv from file offset pos"""
    got = 0
    while got < len(mv):
        n = os.preadv(fd, [mv[got:]], pos + got)
        if n <= 0:
            raise IOError(f"{name}: short read at byte {pos + got}")
        got += n


def _as_torch(a):
    import torch
    return torch.from_numpy(np.ascontiguousarray(a))


_ST_DTYPES = {"F32": "<f4", "F16": "<f2", "BF16": "<u2", "I64": "<i8", "F64": "<f8",
              "I32": "<i4", "U8": "u1"}


def _st_header(path):
    """A .safetensors file's header (dict) and the file offset of its data section."""
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise ValueError(f"{path}: not a safetensors file (shorter than 8 bytes)")
        n = int.from_bytes(head, "little")
        if n > os.fstat(f.fileno()).st_size - 8:
            raise ValueError(f"{path}: header length {n} runs past the end of the file")
        return json.loads(f.read(n)), 8 + n


def load_safetensors(path):
    """({name: numpy memmap}, metadata) of a .safetensors file, read from the format's spec
    (8-byte little-endian header length, the JSON header, the data); BF16 as raw uint16 bits."""
    h, base = _st_header(path)
    meta, out = h.pop("__metadata__", {}), {}
    for name, e in h.items():
        a, b = e["data_offsets"]
        dt = np.dtype(_ST_DTYPES[e["dtype"]])
        shape = tuple(e["shape"])
        if b - a != int(np.prod(shape, dtype=np.int64)) * dt.itemsize:
            raise ValueError(f"{path}: {name}: data_offsets {a, b} do not hold shape {shape}")
        out[name] = np.memmap(path, dt, "r", base + a, shape) if b > a else np.empty(shape, dt)
    return out, meta


def _npy_place(path):
    """(data offset, dtype, shape) of a .npy file (C order)"""
    with open(path, "rb") as f:
        v = np.lib.format.read_magic(f)
        shape, fortran, dt = (np.lib.format.read_array_header_1_0(f) if v == (1, 0)
                              else np.lib.format.read_array_header_2_0(f))
        if fortran:
            raise ValueError(f"{path}: Fortran order")
        return f.tell(), dt, shape


class _Column:
    """Where one dataset lives in each shard file: byte offset, element dtype, row shape."""

    def __init__(self, files, path, fmt="hdf5"):
        self.offsets, self.bf16, self.files = [], False, list(files)
        if fmt != "hdf5":
            return self._init_other(files, path, fmt)
        import h5py
        for fn in files:
            with h5py.File(fn, "r") as f:
                d = f[path]
                off = d.id.get_offset()
                if off is None and d.shape[0] > 0:
                    raise ValueError(f"{fn}: {path} is not contiguous")
                self.offsets.append(off or 0)
                self.dtype, self.row = d.dtype, d.shape[1:]
                storage = d.attrs.get("storage", "")
                storage = storage.decode() if isinstance(storage, bytes) else storage
                self.bf16 = storage == "bfloat16-as-uint16"
        self._sizes()

    def _sizes(self):
        self.row_elems = int(np.prod(self.row, dtype=np.int64))
        self.row_bytes = self.row_elems * self.dtype.itemsize

    def _init_other(self, files, path, fmt):
        """npy: the file SHARD/NAME.npy past its header; safetensors: the tensor's data_offsets
        (NAME, or tokens.COLUMN) inside the data section"""
        name = path.split("/", 1)[1] if path.startswith("activations/") else path.replace("/", ".")
        for k, fn in enumerate(files):
            if fmt == "npy":
                self.files[k] = os.path.join(fn, name + ".npy")
                off, self.dtype, shape = _npy_place(self.files[k])
                meta = _shard_attrs(fn, fmt)
            else:
                h, base = _st_header(fn)
                e, meta = h[name], h.get("__metadata__", {})
                off, self.dtype = base + e["data_offsets"][0], np.dtype(_ST_DTYPES[e["dtype"]])
                shape = tuple(e["shape"])
            self.offsets.append(off)
            self.row = tuple(shape[1:])
            self.bf16 = meta.get("storage." + name) == "bfloat16-as-uint16"
        self._sizes()


def _shard_attrs(fn, fmt):
    """an npy or safetensors shard's attributes (strings)"""
    if fmt == "npy":
        with open(os.path.join(fn, "shard.json")) as f:
            return json.load(f)["attributes"]
    return _st_header(fn)[0].get("__metadata__", {})


def _shard_rows(fn, fmt):
    """{array name: rows} of an npy or safetensors shard"""
    if fmt == "npy":
        with open(os.path.join(fn, "shard.json")) as f:
            return {a["name"]: (a["shape"] or [None])[0] for a in json.load(f)["arrays"]}
    return {n: (e["shape"] or [None])[0] for n, e in _st_header(fn)[0].items()
            if n != "__metadata__"}


class _Pool:
    """Batch arrays handed out and reused once nothing refers to them any more (the caller
    dropped the batch and every view and tensor of it): fresh large arrays cost page faults
    (glibc maps allocations of 32 MiB and more anew each time), reused ones do not."""

    def __init__(self, cap=4):
        self.arrays, self.cap = [], cap

    def get(self, shape, dtype):
        for k in range(len(self.arrays)):
            a = self.arrays[k]
            if a.shape == shape and a.dtype == dtype:
                del a
                if sys.getrefcount(self.arrays[k]) == 2:  # the list's and the argument's
                    return self.arrays[k]
        a = np.empty(shape, dtype)
        if len(self.arrays) < self.cap:
            self.arrays.append(a)
        return a


class Shards:
    """The shards of one split ("train" or "val") of an export folder, in any of the export's
    formats (the manifest's "shard_format": none for HDF5, "npy", "safetensors"; the same reads,
    one pread per run of rows at the array's file offset). h5py only for HDF5 shards."""

    def __init__(self, path, split="train"):
        self.path = path
        with open(os.path.join(path, "manifest.json")) as f:
            self.manifest = json.load(f)
        splits = self.manifest["splits"]
        if split not in splits:
            raise KeyError(f"{path}: no split {split!r} (an export has {sorted(splits)})")
        sp = splits[split]
        if not sp["shards"]:  # nothing to read: say why here, not at the first read
            why = " (exported without --val)" if split == "val" and not self.manifest.get(
                "val_fraction") else ""
            raise ValueError(f"{path}: the export has no {split} split: no {split} shards{why}")
        self.format = self.manifest.get("shard_format", "hdf5")  # hdf5, npy or safetensors
        self.split = split
        self.files = [os.path.join(path, s["file"]) for s in sp["shards"]]
        self.tokens = [int(s["tokens"]) for s in sp["shards"]]
        self.n_tokens = int(sp["tokens"])
        self.shard_tokens = int(self.manifest["shard_tokens"])
        self.names = [n["name"] for n in self.manifest["names"]]
        self._cols = {}
        self._fds = {}
        self._pid = None

    def __len__(self):
        return self.n_tokens

    def _check(self):
        """Every shard of the split against the manifest, once, before a row is read: its split,
        index, n_tokens, seed and checksum (the manifest records each shard's when the export
        finishes), and its datasets' lengths. ValueError naming the file."""
        if getattr(self, "_checked", False):
            return
        import h5py
        m, mf = self.manifest, os.path.join(self.path, "manifest.json")
        if m.get("finished") is False:
            raise ValueError(f"{mf}: the export is not finished (\"finished\": false): run the "
                             f"same `harvest export` command again to finish it")
        entries = m["splits"][self.split]["shards"]
        for k, (fn, e) in enumerate(zip(self.files, entries)):
            want = {"split": self.split, "shard": k, "n_tokens": int(e["tokens"]),
                    "seed": int(m["seed"])}
            if "checksum" in e:
                want["checksum"] = int(e["checksum"], 16)
            elif "finished" in m:
                raise ValueError(f"{mf}: no checksum for {e['file']}: the manifest is damaged; "
                                 f"export again into a fresh folder")
            if not os.path.exists(fn):
                raise ValueError(f"{fn}: missing (listed in {mf}): run the same `harvest export` "
                                 f"command again to write it")
            if self.format != "hdf5":
                self._check_other(fn, want, mf)
                continue
            with h5py.File(fn, "r") as f:
                for key, v in want.items():
                    got = f.attrs.get(key)
                    got = got.decode() if isinstance(got, bytes) else got
                    self._check_attr(fn, key, got, v, mf)
                for g in ("activations", "tokens"):
                    for n, d in (f[g].items() if g in f else ()):
                        if d.shape[:1] != (want["n_tokens"],):
                            raise ValueError(f"{fn}: /{g}/{n} has {d.shape[:1]} rows where "
                                             f"n_tokens is {want['n_tokens']}")
        self._checked = True

    @staticmethod
    def _check_attr(fn, key, got, v, mf):
        try:
            same = got is not None and (got if key == "split" else int(got)) == v
        except ValueError:
            same = False
        if not same:
            raise ValueError(
                f"{fn}: {key} is {got!r} where {mf} says {v!r}: not this export's "
                f"shard (a file of another export?); export again into a fresh "
                f"folder, or run the same `harvest export` command again")

    def _check_other(self, fn, want, mf):
        attrs = _shard_attrs(fn, self.format)
        for key, v in want.items():
            self._check_attr(fn, key, attrs.get(key), v, mf)
        for n, rows in _shard_rows(fn, self.format).items():
            if not n.startswith("stats.") and rows != want["n_tokens"]:
                raise ValueError(f"{fn}: {n} has {rows} rows where n_tokens is "
                                 f"{want['n_tokens']}")

    def _column(self, name):
        self._check()
        if name not in self._cols:
            path = "activations/" + name if name in self.names else "tokens/" + name
            if name not in self.names and name not in self.manifest["columns"]:
                raise KeyError(f"{self.path}: no name {name!r} (it has {self.names} and "
                               f"{self.manifest['columns']})")
            self._cols[name] = _Column(self.files, path, self.format)
        return self._cols[name]

    def _fd(self, fn):
        if self._pid != os.getpid():  # a forked DataLoader worker opens its own files
            self._fds, self._pid = {}, os.getpid()
        if fn not in self._fds:
            self._fds[fn] = os.open(fn, os.O_RDONLY)
        return self._fds[fn]

    def read(self, name, shard, start, count, out=None):
        """Rows [start, start + count) of shard `shard` as stored (bfloat16: raw uint16)."""
        c = self._column(name)
        if out is None:
            out = np.empty((count,) + c.row, c.dtype)
        mv = memoryview(out.reshape(-1).view(np.uint8))[:count * c.row_bytes]
        _pread(self._fd(c.files[shard]), mv, c.offsets[shard] + start * c.row_bytes,
               c.files[shard])
        return out

    def rows(self, name, shard=None, widen=True):
        """A whole shard (or all, concatenated in shard order) of one name, widened."""
        shards = range(len(self.files)) if shard is None else [shard]
        c = self._column(name)
        x = np.concatenate([self.read(name, i, 0, self.tokens[i]) for i in shards]) \
            if shards else np.empty((0,) + c.row, c.dtype)
        return widen_bf16(x) if widen and c.bf16 else x

    def batches(self, name, batch_tokens, seed=0, rank=0, world=1, torch=False, epoch=0,
                mix=8, shuffle_rows=False, drop_last=False, with_index=False, widen=True):
        """Yields shuffled batches [batch_tokens, ...] of `name`: every token of the split exactly
        once per epoch over all ranks (a rank's last batch may be short unless drop_last).

        The export already placed the tokens in a keyed random order, so any run of rows of a
        shard is a uniform random sample of the corpus. A batch is `mix` pieces of
        batch_tokens / mix contiguous rows, the pieces of all shards taken in an order drawn from
        (seed, epoch): each epoch mixes rows of other shards and other places into each batch.
        Rank r of world takes every world-th piece (DataLoader workers split a rank's pieces, each
        opening its own files). Each piece is read straight into the batch (one copy from the page
        cache); bfloat16 is widened to float32 in one numpy pass (widen=False: raw uint16).
        shuffle_rows also permutes the rows inside each batch (one more copy). with_index: yields
        (batch, index), each row's place in the split (shard * shard_tokens + row). With torch
        and widen=False, bfloat16 comes as a torch.bfloat16 tensor over the raw bits (no copy).
        """
        c = self._column(name)
        piece = max(1, int(batch_tokens) // max(1, int(mix)))
        pieces = [(i, a, min(piece, n - a)) for i, n in enumerate(self.tokens)
                  for a in range(0, n, piece)]
        order = np.random.default_rng([seed, epoch]).permutation(len(pieces))
        part, parts = rank, world
        if torch:
            try:
                import torch.utils.data as tud
                w = tud.get_worker_info()
                if w is not None:
                    part, parts = rank * w.num_workers + w.id, world * w.num_workers
            except ImportError:
                pass
        rng = np.random.default_rng([seed, epoch, part])
        if getattr(self, "_pool_pid", None) != os.getpid():  # kept across epochs
            self._pool, self._pool_pid = _Pool(), os.getpid()
        pool = self._pool
        widen_bf16_ = widen and c.bf16
        raw = pool.get((batch_tokens,) + c.row, c.dtype)
        idx = np.empty(batch_tokens, np.int64)
        fill = 0

        def out(rows):
            nonlocal raw
            src, i = raw[:rows], idx[:rows].copy()
            if shuffle_rows:
                perm = rng.permutation(rows)
                i = i[perm]
                if not widen_bf16_:
                    x = pool.get(raw.shape, raw.dtype)[:rows]
                    np.take(src, perm, axis=0, out=x)
                else:
                    src = src[perm]
            elif not widen_bf16_:
                x = src  # handed out as read: the next batch is read into another array
                raw = pool.get(raw.shape, raw.dtype)
            if widen_bf16_:
                w = pool.get(raw.shape, np.uint32)[:rows]
                np.left_shift(src, 16, out=w, dtype=np.uint32)
                x = w.view(np.float32)
            if torch and c.bf16 and not widen:  # torch.bfloat16 over the same bits, no copy
                x = _as_torch(x.view(np.int16)).view(__import__("torch").bfloat16)
            elif torch:
                x = _as_torch(x)
            return (x, i) if with_index else x

        fds, rb = {}, c.row_bytes
        mv = memoryview(raw.reshape(-1).view(np.uint8))
        for k in order[part::parts]:
            i, a, n = pieces[k]
            fd = fds.get(i)
            if fd is None:
                fd = fds[i] = self._fd(c.files[i])
            while n > 0:
                take = min(n, batch_tokens - fill)
                _pread(fd, mv[fill * rb:(fill + take) * rb], c.offsets[i] + a * rb,
                       c.files[i])
                if with_index:
                    idx[fill:fill + take] = np.arange(a, a + take) + i * self.shard_tokens
                fill += take
                a += take
                n -= take
                if fill == batch_tokens:
                    yield out(fill)
                    fill = 0
                    mv = memoryview(raw.reshape(-1).view(np.uint8))
        if fill and not drop_last:
            yield out(fill)

    def torch_dataset(self, name, batch_tokens, seed=0, rank=0, world=1, **kw):
        """A torch IterableDataset of batches(..., torch=True) for a DataLoader with
        batch_size=None; workers split the rank's runs and open their own files. Its set_epoch(e)
        draws another order."""
        import torch.utils.data as tud
        shards = self

        class _Batches(tud.IterableDataset):
            epoch = 0

            def set_epoch(self, e):
                self.epoch = e

            def __iter__(self):
                return shards.batches(name, batch_tokens, seed, rank, world, torch=True,
                                      epoch=self.epoch, **kw)

        return _Batches()

    def close(self):
        for fd in self._fds.values():
            os.close(fd)
        self._fds = {}


# ---------------------------------------------------------------------------------------------
# harvest outputs


class Output:
    """A harvest output (OUT.h5 + OUT.h5.parts/) read through its segment files directly, in
    their stored type (bfloat16 as raw bits, widened in numpy): no virtual-dataset penalty."""

    def __init__(self, path):
        import h5py
        self.path = path
        self.f = h5py.File(path, "r")
        try:
            check_output(self.f, path)
        except Exception:
            self.f.close()
            raise
        self.attrs = dict(self.f.attrs)
        self.length = self.f["prompts/length"][:]
        self.token_offset = self.f["prompts/token_offset"][:]
        self.source_index = self.f["prompts/source_index"][:]
        self.n_prompts = len(self.length)
        self.n_tokens = self.f["tokens/input_ids"].shape[0]
        self.names = sorted(self.f["activations"].keys())
        self.fields = sorted(k for k in self.f["prompts"]
                             if "field_type" in self.f["prompts/" + k].attrs)  # data.fields
        self._maps = {}
        self._files = {}

    def field(self, name):
        """a data.fields column, one value a prompt: int64, float64, bool or str"""
        return _field(self.f["prompts/" + name])

    def _map(self, name):
        """[(v0, v1, file, dataset, s0)]: virtual rows [v0, v1) are rows s0.. of file/dataset."""
        if name not in self._maps:
            d = self.f["activations/" + name]
            runs = []
            if d.is_virtual:
                base = os.path.dirname(os.path.abspath(self.path))
                for m in d.virtual_sources():
                    (v0, *_), (v1, *_) = m.vspace.get_select_bounds()
                    (s0, *_), _ = m.src_space.get_select_bounds()
                    runs.append((v0, v1 + 1, os.path.join(base, m.file_name), m.dset_name, s0))
            else:
                runs.append((0, d.shape[0], None, "activations/" + name, 0))
            runs.sort()
            ft = d.id.get_type()
            bf16 = d.dtype == np.float32 and ft.get_size() == 2 and ft.get_fields()[4] == 7
            f16 = d.dtype == np.float16 or (ft.get_size() == 2 and not bf16)
            self._maps[name] = (runs, d.shape[1:], bf16, f16, d)
        return self._maps[name]

    def _dset(self, file, dset):
        import h5py
        if file is None:
            return self.f[dset]
        if file not in self._files:
            self._files[file] = h5py.File(file, "r")
        return self._files[file][dset]

    def rows(self, name, r0, r1, raw=False):
        """Stored rows [r0, r1) of a dataset (prompts or tokens, by its layout); floats as
        float32 (raw=True: bfloat16 as uint16 bits). Rows no segment holds are NaN / 0."""
        import h5py
        runs, shape, bf16, f16, d = self._map(name)
        dt = np.uint16 if bf16 else np.float16 if f16 else d.dtype
        dt = np.dtype(dt)
        fill = 0x7fc0 if bf16 else np.nan if dt.kind == "f" else 0  # 0x7fc0: a bfloat16 NaN
        out = np.full((r1 - r0,) + shape, fill, dt)
        for v0, v1, file, dset, s0 in runs:
            a, b = max(r0, v0), min(r1, v1)
            if a >= b:
                continue
            sd = self._dset(file, dset)
            fs = sd.id.get_space()
            start = (s0 + a - v0,) + (0,) * len(shape)
            fs.select_hyperslab(start, (b - a,) + shape)
            dest = out[a - r0:b - r0]
            ms = h5py.h5s.create_simple(dest.shape)
            sd.id.read(ms, fs, dest, mtype=sd.id.get_type() if bf16 else None)
        if bf16 and not raw:
            return widen_bf16(out)
        return out.astype(np.float32) if f16 and not raw else out

    def prompt(self, name, p, raw=False):
        """Prompt p's rows of a dataset: its T = length[p] tokens (token layout), or the leading
        corner [:T] of its stored row along the sequence axis (prompt layout)."""
        T = int(self.length[p])
        axes = [a.decode() if isinstance(a, bytes) else a
                for a in self.f["activations/" + name].attrs["stored_axes"]]
        if axes[0] == "token":
            o = int(self.token_offset[p])
            return self.rows(name, o, o + T, raw)
        x = self.rows(name, p, p + 1, raw)[0]
        seq = next(k for k, a in enumerate(axes[1:]) if a in ("sequence", "seq", "query"))
        return np.take(x, np.arange(T), axis=seq)

    def tokens(self, name, t0, t1, raw=False):
        """Token rows [t0, t1) (token layout), or gathered from prompt rows (prompt layout)."""
        axes = [a.decode() if isinstance(a, bytes) else a
                for a in self.f["activations/" + name].attrs["stored_axes"]]
        if axes[0] == "token":
            return self.rows(name, t0, t1, raw)
        p0 = int(np.searchsorted(self.token_offset, t0, side="right") - 1)
        parts, t = [], t0
        for p in range(p0, self.n_prompts):
            if t >= t1:
                break
            x = self.prompt(name, p, raw)
            seq = next(k for k, a in enumerate(axes[1:]) if a in ("sequence", "seq", "query"))
            x = np.moveaxis(x, seq, 0)
            a = t - int(self.token_offset[p])
            b = min(int(self.length[p]), t1 - int(self.token_offset[p]))
            parts.append(x[a:b])
            t += b - a
        return np.concatenate(parts)

    def norm_profile(self, name=None):
        """The per-position norm profile of a profiled value (job key "norm_profile",
        docs/output.md "Norm profile"): a dict of numpy arrays count, sum, sum_sq, max (T,),
        hist (130,), outlier_prompt, outlier_position, outlier_token, outlier_norm (K',), and
        value (the catalogue name), hist_edges (129,), n_nan. name None: the stored names."""
        return norm_profile(self.f, name)

    def sae(self, name=None):
        """The results of SAE `name` (job key "saes", docs/output.md "SAE latents"): a dict of
        numpy arrays count, sum, sum_sq, max, exemplar_count (d_sae,), l0_hist (d_sae + 1,),
        exemplar_value, exemplar_position (d_sae, top_n; NaN and -1 padded), and the attributes
        (on, path, layout, architecture, d_in, d_sae, k, top_n, n_tokens, sse, total_variance,
        fvu, l0_mean, dense_threshold, n_dead, n_dense). name None: the stored SAE names."""
        return sae(self.f, name)

    def sae_latents(self, name):
        """The sparse latents of SAE `name` at every encoded token, in corpus order, as numpy
        arrays (scipy-free CSR): position (n,) the corpus token index, indptr (n + 1,) int64,
        indices int32, values float32 (a token's entries in increasing latent index; TopK: k).
        Read from the listed segments (a batch in two, after a resume: its first listing)."""
        return sae_latents(self.f, name)

    def sae_exemplars(self, name, latent, window=None, before=None, after=None, tokenizer=None):
        """The exemplars of one latent of SAE `name`, largest first: a list of dicts
        - value, position (corpus token index), prompt, t (position in the prompt);
        - context: int64 (before + 1 + after,) the token ids from t - before to t + after, the
          exemplar at context[before], -1 outside the prompt; before / after default to the job's
          "context" (attributes context_before / context_after, [8, 4] when absent);
        - ids, start: the ids of the prompt within the window (clipped to it; ids[t - start] is
          the exemplar); window=W is before = after = W;
        - text, token: the text of ids and of the exemplar's token, decoded with the output's
          tokenizer (the job's model folder's tokenizer.json, as `harvest report` finds it, or
          the tokenizer.json at `tokenizer`), None without one or with a decoder other than
          ByteLevel.
        The ids are read from /tokens/input_ids, so they need every corpus token there (the
        prompt layout, or the token layout without "select"); otherwise context, ids and text
        are None."""
        r = sae(self.f, name)
        if window is not None:
            before = after = window
        before = int(r.get("context_before", 8)) if before is None else int(before)
        after = int(r.get("context_after", 4)) if after is None else int(after)
        corpus = np.concatenate([[0], np.cumsum(self.length)]).astype(np.int64)
        ids = self.f["tokens/input_ids"] if "tokens/input_ids" in self.f else None
        whole = ids is not None and ids.shape[0] == int(corpus[-1])
        dec = _Decoder.find(self, tokenizer) if whole else None
        out = []
        for i in range(int(r["exemplar_count"][latent])):
            q = int(r["exemplar_position"][latent, i])
            p = int(np.searchsorted(corpus, q, side="right") - 1)
            t = q - int(corpus[p])
            e = {"value": float(r["exemplar_value"][latent, i]), "position": q, "prompt": p, "t": t,
                 "ids": None, "start": None, "context": None, "text": None, "token": None}
            if whole:
                a, b = max(0, t - before), min(int(self.length[p]), t + after + 1)
                e["ids"], e["start"] = ids[corpus[p] + a:corpus[p] + b].astype(np.int64), a
                ctx = np.full(before + 1 + after, -1, np.int64)
                ctx[a - (t - before):b - (t - before)] = e["ids"]
                e["context"] = ctx
                if dec is not None:
                    e["text"], e["token"] = dec.decode(e["ids"]), dec.decode(ids[q:q + 1])
            out.append(e)
        return out

    def close(self):
        for f in self._files.values():
            f.close()
        self.f.close()


def _source_damage(src, m, vds):
    """what is wrong with mapping m's source dataset in the open file src, or None"""
    from h5py import h5s
    if m.dset_name not in src:
        return f"lacks the dataset {m.dset_name}"
    sd = src[m.dset_name]
    st, vt = sd.id.get_type(), vds.id.get_type()
    if (sd.ndim != vds.ndim or sd.shape[1:] != vds.shape[1:] or st.get_class() != vt.get_class()
            or st.get_size() != vt.get_size()):
        return f"its dataset {m.dset_name} has another shape or type than the master's"
    sp, vs = m.src_space, m.vspace
    if vs.get_select_npoints() > 0:
        (v0, *_), (v1, *_) = vs.get_select_bounds()  # a source "all": rows from 0 on
        end = v1 - v0 if sp.get_select_type() == h5s.SEL_ALL else sp.get_select_bounds()[1][0]
        if end >= sd.shape[0]:
            return (f"its dataset {m.dset_name} has {sd.shape[0]} of the {end + 1} rows the "
                    "master reads")
    return None


def _prefix_redirect(path, fn, own):
    """a file HDF5_VDS_PREFIX makes HDF5 read for mapped name fn instead of own, or None"""
    env, origin = os.environ.get("HDF5_VDS_PREFIX", ""), os.path.dirname(path) or "."
    for p in filter(None, env.split(":")):
        c = os.path.join(p.replace("${ORIGIN}", origin, 1), fn)
        if os.path.exists(c):  # HDF5 opens the first one found
            return None if os.path.exists(own) and os.path.samefile(c, own) else c
    return None


def check_output(f, path):
    """Checks exactly the files the virtual datasets of the open master f (at path) read, as
    harvest's tools do (io/h5out.h, h5out_check): each must be in the master's own parts folder,
    named BASE.parts/FILE for its own file name BASE (a master renamed or copied under another
    name reads another output's folder, or NaN), index.h5 or a listed segment, and hold the rows,
    row shape and type the master maps from it. Raises ValueError saying what is wrong."""
    import h5py
    base = os.path.basename(path)
    listed = {s["file"] for s in json.loads(f.attrs.get("segments", "[]"))}  # none: plain
    files, bad = {}, {}

    def visit(name, d):
        if not isinstance(d, h5py.Dataset) or not d.is_virtual:
            return
        for m in d.virtual_sources():
            folder, leaf = os.path.split(m.file_name)
            own = os.path.join(path + ".parts", leaf)
            read = os.path.join(os.path.dirname(path), m.file_name)  # what HDF5 opens
            if folder != base + ".parts" and not (
                    os.path.exists(read) and os.path.exists(own) and os.path.samefile(read, own)):
                orig = folder[:-6] if folder.endswith(".parts") and "/" not in folder else None
                if orig is None:
                    raise ValueError(f"{path}: its virtual datasets read {m.file_name}, not a "
                                     f"file of its own parts folder {path}.parts/")
                raise ValueError(
                    f"{path}: written as {orig}, it has been renamed or copied under another "
                    f"name: its virtual datasets read {orig}.parts/ beside it (another output's "
                    f"rows, or NaN), not its own {base}.parts/. An output moves or copies only "
                    f"as its two parts under the same name: rename it back to {orig} and "
                    f"{base}.parts/ to {orig}.parts/ (in another folder, to keep a copy beside "
                    "the original)")
            if leaf != "index.h5" and leaf not in listed:
                raise ValueError(f"{path}: its virtual datasets read {m.file_name}, which its "
                                 "segments attribute does not list (a damaged master)")
            hit = _prefix_redirect(path, m.file_name, own)
            if hit:
                raise ValueError(f"{path}: HDF5_VDS_PREFIX makes HDF5 read {hit} (not {own}) "
                                 "through its virtual datasets: unset HDF5_VDS_PREFIX")
            if leaf in bad:
                continue
            if leaf not in files:
                try:
                    files[leaf] = h5py.File(own, "r")
                except OSError:
                    bad[leaf] = ("is missing" if not os.path.exists(own)
                                 else "cannot be read as HDF5 (truncated or damaged)")
                    continue
            why = _source_damage(files[leaf], m, d)
            if why:
                bad[leaf] = why

    try:
        f.visititems(visit)
    finally:
        for x in files.values():
            x.close()
    if bad:
        raise ValueError(f"{path}: the output is damaged: " + "; ".join(
            f"{path}.parts/{k} {v}" for k, v in sorted(bad.items())) +
            " (`harvest run JOB --resume` computes their rows again)")


def open_output(path):
    """An Output over a harvest output file (see Output)."""
    return Output(path)


def stats(path, name=None):
    """The per-feature statistics of an output or an export: {NAME: {count, mean, var, min, max,
    norm_mean, norm_var, sae_scale}} from /stats/NAME (issue 12), or one name's dict. None when
    the file has none (outputs written before statistics existed; `harvest stats` adds them)."""
    import h5py
    if os.path.isdir(path):  # an export: every shard holds the output's /stats of its names
        splits = json.load(open(os.path.join(path, "manifest.json")))["splits"]
        files = [s["file"] for k in ("train", "val") for s in splits[k]["shards"]]
        if not files:
            return None
        path = os.path.join(path, files[0])
    with h5py.File(path, "r") as f:
        if "stats" not in f:
            return None
        out = {}
        for n, g in f["stats"].items():
            out[n] = {k: g[k][()] for k in g}
            out[n].update({k: g.attrs[k] for k in g.attrs})
        if name is None:
            return out
        if name not in out:
            raise KeyError(f"{path}: no statistics for {name!r} (it has {sorted(out)})")
        return out[name]


def norm_profile(f, name=None):
    """The norm profile of stored name `name` from an open h5py File or a path (see
    Output.norm_profile); name None: the sorted list of profiled names ([] when none)."""
    import h5py
    if not isinstance(f, h5py.File):
        with h5py.File(f, "r") as g:
            return norm_profile(g, name)
    names = sorted(f["norm_profile"].keys()) if "norm_profile" in f else []
    if name is None:
        return names
    if name not in names:
        raise KeyError(f"{f.filename}: no norm profile of {name!r} (it has {names})")
    g = f["norm_profile/" + name]
    out = {k: g[k][()] for k in g}
    v = g.attrs["value"]
    out["value"] = v.decode() if isinstance(v, bytes) else str(v)
    out["hist_edges"] = np.asarray(g.attrs["hist_edges"], np.float64)
    out["n_nan"] = int(g.attrs["n_nan"])
    return out


class _Decoder:
    """Token ids to text with a tokenizer.json whose decoder is ByteLevel (GPT-2, Llama 3, Qwen),
    as Hugging Face tokenizers' decode does it (io/tok_decode.c is harvest's C one): each token's
    string (an added token's content) mapped back to bytes through GPT-2's bytes_to_unicode
    table (a string with a character outside it: its own UTF-8), all joined and read as UTF-8,
    invalid bytes as U+FFFD."""

    def __init__(self, path):
        with open(path, encoding="utf-8") as f:
            t = json.load(f)
        d = t.get("decoder") or {}
        if d.get("type") != "ByteLevel":
            raise ValueError(f"{path}: decoder {d.get('type')!r}: only ByteLevel is decoded here")
        self.vocab = {int(i): s for s, i in t["model"]["vocab"].items()}
        self.added = {int(a["id"]): a["content"] for a in t.get("added_tokens", [])}
        bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
        cs, n = bs[:], 0
        for b in range(256):
            if b not in bs:
                bs.append(b), cs.append(256 + n)
                n += 1
        self.byte = {chr(c): b for b, c in zip(bs, cs)}

    @staticmethod
    def find(out, given=None):
        """The decoder of output `out` (its job's model folder, from the working directory, else
        from the output's folder), of `given`, or None."""
        path = given
        if path is None:
            job = out.attrs.get("job", "{}")
            model = json.loads(job.decode() if isinstance(job, bytes) else job).get("model")
            if not isinstance(model, str):
                return None
            path = os.path.join(model, "tokenizer.json")
            if not os.path.exists(path) and not os.path.isabs(model):
                path = os.path.join(os.path.dirname(out.path) or ".", model, "tokenizer.json")
        try:
            return _Decoder(path)
        except (OSError, ValueError, KeyError):
            return None

    def decode(self, ids):
        run = bytearray()
        for i in (int(x) for x in ids):
            tok = self.added.get(i, self.vocab.get(i, ""))
            b = [self.byte.get(c) for c in tok]
            run.extend(tok.encode() if None in b else b)  # unmapped: the token's own bytes
        return run.decode("utf-8", "replace")


def sae(f, name=None):
    """The results of SAE `name` from an open h5py File or a path (see Output.sae); name None:
    the sorted list of SAE names ([] when none)."""
    import h5py
    if not isinstance(f, h5py.File):
        with h5py.File(f, "r") as g:
            return sae(g, name)
    names = sorted(f["saes"].keys()) if "saes" in f else []
    if name is None:
        return names
    if name not in names:
        raise KeyError(f"{f.filename}: no SAE {name!r} (it has {names})")
    g = f["saes/" + name]
    out = {k: g[k][()] for k in g}
    for k, v in g.attrs.items():
        out[k] = v.decode() if isinstance(v, bytes) else (str(v) if isinstance(v, str) else v.item())
    return out


def sae_latents(f, name):
    """The CSR latents of SAE `name` of the output open in h5py File f (see Output.sae_latents)."""
    import h5py
    if name not in sae(f):
        raise KeyError(f"{f.filename}: no SAE {name!r}")
    length = f["prompts/length"][:]
    corpus = np.concatenate([[0], np.cumsum(length)]).astype(np.int64)
    parts = f.filename + ".parts"
    got = {}  # batch: (position, n_entries, indices, values)
    for rec in json.loads(f.attrs.get("segments", "[]")):
        with h5py.File(os.path.join(parts, rec["file"]), "r") as s:
            if f"saes_latents/{name}" not in s:
                continue
            g = s[f"saes_latents/{name}"]
            pos, ne = g["position"][:], g["n_entries"][:]
            idx, val = g["indices"][:], g["values"][:]
            ez = np.concatenate([[0], np.cumsum(ne)]).astype(np.int64)
            t = 0
            for b, nt in zip(g["batch"][:], g["batch_tokens"][:]):
                b, nt = int(b), int(nt)
                if nt and b not in got:
                    p = int(np.searchsorted(corpus, pos[t], side="right") - 1)
                    if any(r[0] <= p < r[1] for r in rec["runs"]):
                        got[b] = (pos[t:t + nt], ne[t:t + nt], idx[ez[t]:ez[t + nt]],
                                  val[ez[t]:ez[t + nt]])
                t += nt
    keys = sorted(got)
    cat = lambda i, dt: (np.concatenate([got[b][i] for b in keys]) if keys else np.zeros(0, dt))
    ne = cat(1, np.int64)
    return {"position": cat(0, np.int64),
            "indptr": np.concatenate([[0], np.cumsum(ne)]).astype(np.int64),
            "indices": cat(2, np.int32), "values": cat(3, np.float32)}


def _field(ds):
    """A /prompts/FIELD dataset as numpy: int64, float64, bool, or str objects (UTF-8 text)."""
    t = ds.attrs.get("field_type", "")
    t = t.decode() if isinstance(t, bytes) else t
    return ds.asstr()[:] if t == "string" else ds[:]


class Probe:
    """One row a prompt for probes: `harvest export OUT.h5 --probe DIR` (DIR/probe.h5), or an
    output whose job had "pool" (its /pooled). Pooled values are float32 [n_prompts, ...]:
    /pooled/NAME/last (the prompt's last token) and /pooled/NAME/mean (the mean over its tokens);
    fields (data.fields) come typed: int64, float64, bool, str.

        X, y = Probe("probe").arrays("decoder_3_output", "label", pool="mean")
        sklearn.linear_model.LogisticRegression().fit(X, y)
    """

    def __init__(self, path):
        import h5py
        if os.path.isdir(path):
            path = os.path.join(path, "probe.h5")
        self.path = path
        with h5py.File(path, "r") as f:
            if "pooled" not in f:
                raise ValueError(f"{path}: no /pooled (write one with `harvest export OUT.h5 "
                                 f"--probe DIR`, or give the job \"pool\")")
            self.names = sorted(f["pooled"])
            self.pools = sorted(f["pooled/" + self.names[0]]) if self.names else []
            self.fields = sorted(k for k in f["prompts"] if "field_type" in f["prompts/" + k].attrs)
            self.n_prompts = int(f["prompts/length"].shape[0])

    def X(self, name, pool="mean", flat=True):
        """float32 [n_prompts, d] (flat=False: the row's own shape, e.g. [n, head, head_dim])"""
        import h5py
        with h5py.File(self.path, "r") as f:
            key = f"pooled/{name}/{pool}"
            if key not in f:
                raise KeyError(f"{self.path}: no /{key} (names {self.names}, pools {self.pools})")
            x = f[key][:]
        return x.reshape(len(x), -1) if flat else x

    def y(self, field):
        """the field's values a prompt (a table: prompt_index, source_index, length, too)"""
        import h5py
        with h5py.File(self.path, "r") as f:
            if "prompts/" + field not in f:
                raise KeyError(f"{self.path}: no /prompts/{field} (fields {self.fields})")
            return _field(f["prompts/" + field])

    def arrays(self, name, field, pool="mean"):
        """(X, y) for scikit-learn"""
        return self.X(name, pool), self.y(field)

    def torch_dataset(self, name, field, pool="mean"):
        """a TensorDataset of (x, y); string fields are not tensors: map them to ints first"""
        import torch
        return torch.utils.data.TensorDataset(torch.from_numpy(self.X(name, pool)),
                                              torch.from_numpy(np.asarray(self.y(field))))
