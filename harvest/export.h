// export.h - `harvest export`'s parts: the source (a finished harvest output read through
// io/h5src.h), and shard files (io/shardfmt.h's formats). export.c plans the shuffle and drives
// the ranks.
#ifndef AH_EXPORT_H
#define AH_EXPORT_H

#include "io/h5src.h"
#include "model/ah.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define X_MAX_DIMS 8

enum xkind { XK_F32, XK_F16, XK_BF16, XK_I64 }; // element storage

const char *xkind_name(enum xkind k); // "float32", "float16", "bfloat16", "int64"
size_t xkind_size(enum xkind k);
// Converts n elements from src (storage sk) to dst (storage dk). Floats go through float32
// (round to nearest even when narrowing); int64 is copied. sk and dk are both float or both int64.
void xkind_convert(void *dst, enum xkind dk, const void *src, enum xkind sk, int64_t n);

// One exported activation.
struct xname {
    char name[256];
    struct h5dset *ds;        // source dataset (the master's); owned
    enum xkind src, dst;      // storage in the source and in the shards
    int ndim;                 // axes of a token row
    int64_t dims[X_MAX_DIMS]; // shape of a token row
    int64_t elems;            // elements of a token row
    int64_t outer, inner;     // prompt layout: elements of a prompt row before / after the
                              // sequence axis (a token row is outer runs of inner elements)
    int64_t src_rows;         // prompt layout: sequence length S of the stored rows
    size_t src_bytes;         // bytes of one stored row (a prompt's or a token's)
};

// A finished harvest output, opened read-only.
struct xsrc {
    const char *path;      // borrowed
    struct h5src *f;       // the master; owned
    struct h5dset *ids_ds; // its /tokens/input_ids; owned
    struct h5dset *pos_ds; // /tokens/position of a token layout written with "select", else
                           // NULL; owned
    struct h5dset *sel_ds; // /tokens/selected of a prompt layout written with "select", else
                           // NULL; owned
    bool token_layout;
    int64_t n_prompts, n_tokens;
    int64_t *source_index; // (n_prompts) owned
    int64_t *length;       // (n_prompts) owned
    int64_t *token_offset; // (n_prompts) owned
    int64_t *rows;         // (n_prompts) tokens the export takes of each prompt: its length, or
                           // under sel_ds its selected ones; owned
    uint8_t *done;         // (n_prompts) 1 if every dataset of the output holds the prompt
    int64_t complete, prompts_done;
    uint64_t data_checksum; // the source's identification (root attribute data_checksum)
    uint64_t weights_sum;   // FNV-1a of the provenance's model_fingerprint text (0: none)
    uint64_t job_sum;       // FNV-1a of the root attribute job (0: none)
    char storage[32];       // root attribute storage_dtype
    struct xname *names;    // (n_names) owned
    int n_names;
    // the block being read (xsrc_read): prompts [p0, p1), their tokens [t0, t1)
    int64_t p0, p1, t0, t1;
    void **blk;          // (n_names) raw stored rows of the block; owned
    int64_t *ids;        // (t1 - t0) input ids of the block; owned
    int64_t *pos;        // (t1 - t0) their positions in the prompt (pos_ds), else NULL; owned
    uint8_t *sel;        // (t1 - t0) their /tokens/selected (sel_ds), else NULL; owned
    int64_t blk_prompts; // capacity, prompt layout: prompts; token layout: tokens (in rows)
    void *row;           // one gathered token row (prompt layout); owned
};

// Opens path, reads its prompt table and picks the names (names_csv: comma-separated, NULL for
// every token-layout-able dataset). Errors name the file and the name: not a harvest output, an
// unknown name (listing the names it has), a name with no token rows (a key axis, or none or two
// sequence axes). block_bytes bounds the raw block xsrc_read holds.
// dst: the shards' float storage (XK_I64: each name's own).
int xsrc_open(struct xsrc *s, const char *path, const char *names_csv, enum xkind dst,
              int64_t block_bytes, struct ah_error *err);
void xsrc_close(struct xsrc *s); // safe on a zeroed struct
// The end of the block starting at prompt p0 (at least one prompt).
int64_t xsrc_block_end(const struct xsrc *s, int64_t p0);
// Reads the raw rows of prompts [p0, p1) (p1 from xsrc_block_end) and their input ids.
int xsrc_read(struct xsrc *s, int64_t p0, int64_t p1, struct ah_error *err);
// Token pos of prompt p (inside the block) of name i, as stored (raw source elements).
const void *xsrc_token(struct xsrc *s, int i, int64_t p, int64_t pos);
// Bytes the block buffers hold.
size_t xsrc_block_bytes(const struct xsrc *s);

// ---- shard files ----
// The shards' file format (--format): HDF5 (this file's writer), or one of io/shardfmt.h's.
enum xfmt { XF_HDF5, XF_NPY, XF_SAFETENSORS };
const char *xfmt_name(enum xfmt f); // "hdf5", "npy", "safetensors"
const char *xfmt_ext(enum xfmt f);  // a shard's name's end: ".h5", "" (a folder), ".safetensors"
int xfmt_parse(const char *name, enum xfmt *f); // 0, or -1: not a format's name

struct xshard_meta {
    enum xfmt fmt;
    const char *split; // "train" or "val"
    int64_t shard, n_tokens, first_position, seed;
    uint64_t data_checksum;
    uint64_t export_id; // the manifest's checksum: which export the shard belongs to
    double val_fraction;
};

// One shard's rows in memory: per name n_tokens dst rows, and four int64 columns.
struct xshard {
    int64_t n_tokens;
    void **act;       // (n_names) (n_tokens, row) in the dst kind; owned
    int64_t *cols[4]; // input_ids, prompt_index, position, source_index; owned
};
extern const char *const xshard_cols[4];

int xshard_alloc(struct xshard *b, const struct xsrc *s, int64_t n_tokens);
void xshard_free(struct xshard *b, int n_names);
// Writes b to dir/file through dir/file.tmp (fsynced, then renamed) in format m->fmt, through
// io/shardfmt.h: the arrays NAME and tokens.{input_ids, prompt_index, position, source_index},
// the attributes (README "Training shards"), and the checksum of their bytes (*sum); the
// source's /stats/NAME of the exported names, when it has them (HDF5, io/h5shard.c: contiguous
// datasets, the statistics copied whole, the file's space reserved first so a full disk fails
// before HDF5 writes; the others: README "Shard formats"). On failure the temporary is removed.
int xshard_write(const char *dir, const char *file, const struct xshard *b, const struct xsrc *s,
                 const struct xshard_meta *m, uint64_t *sum, struct ah_error *err);
// 1 if dir/file is a finished shard matching m (split, shard, size, seed, source, export_id) and
// s's names (shapes and checksum; its checksum in *sum), 0 if absent or not (then it is
// rewritten). Reads the shard through a mapping.
int xshard_verify(const char *dir, const char *file, const struct xsrc *s,
                  const struct xshard_meta *m, uint64_t *sum);
// true once an HDF5 file of the export failed to close (disk full): HDF5 still holds it, and
// its shutdown would crash on it; the command then leaves without MPI_Finalize.
bool xshard_stuck(void);
void xshard_set_stuck(void);

// ---- probe datasets (export_probe.c) ----
// Writes dir/probe.h5 (through probe.h5.tmp, fsynced, renamed): for every prompt s->done holds,
// its pooled values of each float name (pools: bit 0 last, bit 1 mean) and its data.fields
// (README "Probe datasets"). int64 names are dropped, or refused when named (named: --names).
int xprobe_write(struct xsrc *s, const char *dir, unsigned pools, bool named, struct ah_error *err);
// The job key "pool" in `harvest run`: once the output at path is complete, adds
// /pooled/NAME/{last, mean} of every float name with token rows to its master (a copy written to
// PATH.tmp, fsynced, renamed over it, as `harvest stats` does). Nothing if the output is
// incomplete or already has /pooled.
int xprobe_pool_output(const char *path, unsigned pools, struct ah_error *err);
// The pools a list names ("last", "mean", "last,mean"): bits 0 and 1, or 0 if it names another.
unsigned xprobe_pools(const char *csv);
// The pools of the output's job ("pool" in its job attribute), or 0 when it names none.
unsigned xprobe_job_pools(const struct xsrc *s);
// Prompts the probe file holds (those s->done holds).
int64_t xprobe_count(const struct xsrc *s);

#endif
