// export.c - `harvest export OUT.h5 --shards DIR`: globally shuffled, token-major training shards.
//
// The plan: every exported token gets an index j in its split (train or val, chosen per source
// document by a keyed hash), and lands at position pi = feistel(j) of the split's shuffled order:
// shard pi / st, row pi % st. No table: memory is flat in the corpus size. Each rank writes whole
// shards (shard g to rank g % N), a group of them at a time (as many as --memory holds), gathering
// their rows in one sequential pass over the source; a shard is written to NAME.tmp, fsynced and
// renamed, so a killed export rerun with the same command keeps the finished ones (verified) and
// writes the same bytes for the rest.
#define _POSIX_C_SOURCE 200809L // defines: strtok_r, fsync
#include "harvest/export.h"
#include "harvest/cliargs.h"
#include "harvest/harvest.h"
#include "io/feistel.h"
#include "io/fsutil.h"
#include "io/outlock.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define VAL_KEY 0x76616c6964617465ULL // "validate": the held-out split's hash key

struct xopts {
    const char *src, *dir, *names;
    const char *probe; // --probe DIR: a probe dataset instead of shards (export_probe.c)
    unsigned pools;    // --pool: bit 0 last, bit 1 mean (0: the job's "pool", else both)
    enum xkind dtype;  // XK_I64: as the source stores it
    enum xfmt fmt;     // --format: the shards' file format
    int64_t shard_tokens, shard_size, memory;
    int64_t seed;
    double val;
    bool allow_partial, quiet;
};

struct xplan {
    int64_t n[2]; // tokens of train, val
    int64_t prompts[2];
    int64_t *off; // (n_prompts) index of the prompt's first token in its split; -1: not exported
    uint8_t *val; // (n_prompts) 1: the prompt is held out
    int64_t st;   // tokens a shard (the last of a split may hold fewer)
    int64_t shards[2]; // shards of train, val; shard g >= shards[0] is val shard g - shards[0]
    size_t row_bytes;  // a token's bytes in a shard: every name's row and the four columns
    struct feistel perm[2];
    uint64_t export_id; // FNV-1a of the manifest (unfinished): every shard's attribute export_id
};

static const char *const split_name[2] = {"train", "val"};

static const char usage[] =
    "usage: harvest export OUT.h5 --shards DIR [--names N1,N2] [--dtype float32|float16|bfloat16]\n"
    "                      [--shard-tokens N | --shard-size BYTES] [--seed S] [--val FRACTION]\n"
    "                      [--memory BYTES] [--allow-partial] [--quiet]\n"
    "                      [--format hdf5|npy|safetensors]\n"
    "       harvest export OUT.h5 --probe DIR [--names N1,N2] [--pool last,mean]\n"
    "                      [--allow-partial] [--quiet]\n";

// ----------------------------------------------------------------------------
// options

// the flags only one of --shards and --probe takes (bit k: shards_only[k])
static const char *const shards_only[] = {"--dtype", "--shard-tokens", "--shard-size", "--seed",
                                          "--val",   "--memory",       "--format"};
#define N_SHARDS_ONLY 7
static const char *const both_modes[] = {"--shards", "--probe", "--names", "--pool"};

static int parse_dtype(const char *v, enum xkind *out) {
    enum xkind k = !strcmp(v, "float32")    ? XK_F32
                   : !strcmp(v, "float16")  ? XK_F16
                   : !strcmp(v, "bfloat16") ? XK_BF16
                                            : XK_I64;
    if (k != XK_I64) return *out = k, 0;
    fprintf(stderr, "harvest export: --dtype \"%s\": expected float32, float16 or bfloat16\n", v);
    return -1;
}

// one flag with its value (argv[*i] on, moved past the value); 0, -1 after a message, 1 unknown
static int parse_flag(struct xopts *o, int argc, char **argv, int *i) {
    const char *a = argv[*i], *v;
    if (!strcmp(a, "--allow-partial")) return o->allow_partial = true, 0;
    if (!strcmp(a, "--quiet")) return o->quiet = true, 0;
    bool known = false;
    for (int k = 0; k < N_SHARDS_ONLY + 4; k++)
        known |= !strcmp(a, k < 4 ? both_modes[k] : shards_only[k - 4]);
    if (!known) return 1;
    if (!(v = cli_value("export", argc, argv, i))) return -1;
    if (!strcmp(a, "--shards")) return o->dir = v, 0;
    if (!strcmp(a, "--probe")) return o->probe = v, 0;
    if (!strcmp(a, "--names")) return o->names = v, 0;
    if (!strcmp(a, "--pool")) {
        if ((o->pools = xprobe_pools(v))) return 0;
        fprintf(stderr, "harvest export: --pool \"%s\": expected last, mean or last,mean\n", v);
        return -1;
    }
    if (!strcmp(a, "--dtype")) return parse_dtype(v, &o->dtype);
    if (!strcmp(a, "--format")) {
        if (xfmt_parse(v, &o->fmt) == 0) return 0;
        fprintf(stderr, "harvest export: --format \"%s\": expected hdf5, npy or safetensors\n", v);
        return -1;
    }
    if (!strcmp(a, "--shard-tokens"))
        return cli_int("export", a, v, 1, 1LL << 40, &o->shard_tokens);
    if (!strcmp(a, "--seed")) return cli_int("export", a, v, 0, (1LL << 53) - 1, &o->seed);
    if (!strcmp(a, "--shard-size")) return cli_size("export", a, v, 1, 1LL << 50, &o->shard_size);
    if (!strcmp(a, "--memory")) return cli_size("export", a, v, 1, 1LL << 50, &o->memory);
    return cli_fraction("export", a, v, 0.0, 1.0, &o->val); // --val
}

// a flag of the other mode given (a flag a mode does not take is an error): 0, or -1 after a
// message
static int check_mode(const struct xopts *o, unsigned seen) {
    const char *flag = o->dir && o->pools ? "--pool" : NULL;
    for (int k = 0; o->probe && k < N_SHARDS_ONLY; k++)
        if (!flag && seen >> k & 1) flag = shards_only[k];
    if (flag) {
        fprintf(stderr, "harvest export: %s: an option of %s, not of %s\n%s", flag,
                o->dir ? "--probe" : "--shards", o->dir ? "--shards" : "--probe", usage);
        return -1;
    }
    if ((seen & 6) != 6) return 0; // bits 1, 2: --shard-tokens, --shard-size
    fprintf(stderr, "harvest export: give one of --shard-tokens and --shard-size\n%s", usage);
    return -1;
}

static int parse_opts(struct xopts *o, int argc, char **argv) {
    // dtype XK_I64: each name as the source stores it
    *o = (struct xopts){.dtype = XK_I64, .memory = 2LL << 30, .shard_size = 1LL << 30};
    unsigned seen = 0;
    for (int i = 0; i < argc; i++) {
        for (int k = 0; k < N_SHARDS_ONLY; k++)
            seen |= (unsigned)!strcmp(argv[i], shards_only[k]) << k;
        int rc = parse_flag(o, argc, argv, &i);
        if (rc < 0) return -1;
        if (rc == 0) continue;
        if (argv[i][0] == '-' || o->src) {
            fprintf(stderr, "harvest export: unexpected \"%s\"\n%s", argv[i], usage);
            return -1;
        }
        o->src = argv[i];
    }
    if (!o->src || !o->dir == !o->probe) {
        fprintf(stderr, "harvest export: give one of --shards DIR and --probe DIR\n%s", usage);
        return -1;
    }
    return check_mode(o, seen);
}

// ----------------------------------------------------------------------------
// the plan

static int64_t shard_tokens(const struct xplan *pl, int64_t g, int *split, int64_t *k) {
    *split = g >= pl->shards[0];
    *k = *split ? g - pl->shards[0] : g;
    int64_t left = pl->n[*split] - *k * pl->st;
    return left < pl->st ? left : pl->st;
}

static void shard_file(char *buf, size_t n, int split, int64_t k, enum xfmt f) {
    snprintf(buf, n, "%s-%05lld%s", split_name[split], (long long)k, xfmt_ext(f));
}

static int plan_build(struct xplan *pl, const struct xsrc *s, const struct xopts *o,
                      struct ah_error *err) {
    int64_t N = s->n_prompts;
    pl->off = malloc((size_t)(N ? N : 1) * sizeof *pl->off);
    pl->val = malloc((size_t)(N ? N : 1));
    if (!pl->off || !pl->val) return ah_fail(err, AH_ENOMEM, "out of memory");
    for (int64_t p = 0; p < N; p++) {
        int v = o->val > 0 &&
                unit_hash((uint64_t)o->seed ^ VAL_KEY, (uint64_t)s->source_index[p]) < o->val;
        pl->val[p] = (uint8_t)v;
        pl->off[p] = s->done[p] ? pl->n[v] : -1;
        if (s->done[p]) pl->n[v] += s->rows[p], pl->prompts[v]++;
    }
    pl->row_bytes = 4 * sizeof(int64_t);
    for (int i = 0; i < s->n_names; i++)
        pl->row_bytes += (size_t)s->names[i].elems * xkind_size(s->names[i].dst);
    pl->st = o->shard_tokens ? o->shard_tokens : o->shard_size / (int64_t)pl->row_bytes;
    if (pl->st < 1)
        return ah_fail(err, AH_EINVAL,
                       "--shard-size %lld: smaller than one token row (%zu bytes: the names' rows "
                       "and 32 bytes of ids)",
                       (long long)o->shard_size, pl->row_bytes);
    int64_t most = 0; // tokens of the largest shard written: below pl->st if a split is smaller
    for (int k = 0; k < 2; k++) {
        int64_t t = pl->n[k] < pl->st ? pl->n[k] : pl->st;
        most = t > most ? t : most;
    }
    if ((int64_t)pl->row_bytes * most + (int64_t)xsrc_block_bytes(s) > o->memory)
        return ah_fail(err, AH_EINVAL,
                       "--memory %lld: holds no shard of %lld tokens (%lld bytes) and a read block "
                       "(%zu bytes); lower --shard-tokens or raise --memory",
                       (long long)o->memory, (long long)most,
                       (long long)(most * (int64_t)pl->row_bytes), xsrc_block_bytes(s));
    for (int k = 0; k < 2; k++) {
        pl->shards[k] = (pl->n[k] + pl->st - 1) / pl->st;
        feistel_init(&pl->perm[k], pl->n[k] ? (uint64_t)pl->n[k] : 1,
                     mix64((uint64_t)o->seed) ^ (uint64_t)k);
    }
    return 0;
}

// ----------------------------------------------------------------------------
// manifest.json

static void add_hex(cJSON *o, const char *key, uint64_t v) {
    char hex[32];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)v);
    cJSON_AddStringToObject(o, key, hex);
}

// where the exported rows come from: (prompt, source_index, token_offset, tokens taken) of every
// exported prompt
static uint64_t rows_checksum(const struct xplan *pl, const struct xsrc *s) {
    uint64_t h = FNV64_INIT;
    for (int64_t p = 0; p < s->n_prompts; p++) {
        if (pl->off[p] < 0) continue;
        int64_t w[4] = {p, s->source_index[p], s->token_offset[p], s->rows[p]};
        h = fnv64_words(h, w, sizeof w);
    }
    return h;
}

// the source, by what decides the shards' content: the data, the weights, the job, the rows
static cJSON *manifest_source(const struct xplan *pl, const struct xsrc *s, const struct xopts *o) {
    cJSON *src = cJSON_CreateObject();
    const char *slash = strrchr(o->src, '/');
    cJSON_AddStringToObject(src, "file", slash ? slash + 1 : o->src);
    add_hex(src, "data_checksum", s->data_checksum);
    add_hex(src, "weights_fingerprint", s->weights_sum);
    add_hex(src, "job_checksum", s->job_sum);
    add_hex(src, "rows_checksum", rows_checksum(pl, s));
    cJSON_AddNumberToObject(src, "complete", (double)s->complete);
    cJSON_AddNumberToObject(src, "prompts", (double)s->n_prompts);
    cJSON_AddNumberToObject(src, "tokens", (double)s->n_tokens);
    cJSON_AddNumberToObject(src, "prompts_exported", (double)(pl->prompts[0] + pl->prompts[1]));
    cJSON_AddStringToObject(src, "layout", s->token_layout ? "token" : "prompt");
    cJSON_AddStringToObject(src, "storage_dtype", s->storage);
    return src;
}

static cJSON *manifest(const struct xplan *pl, const struct xsrc *s, const struct xopts *o) {
    cJSON *m = cJSON_CreateObject(), *names = cJSON_CreateArray();
    char file[64];
    cJSON_AddStringToObject(m, "format", "harvest-shards");
    cJSON_AddNumberToObject(m, "format_version", 1);
    if (o->fmt != XF_HDF5) cJSON_AddStringToObject(m, "shard_format", xfmt_name(o->fmt));
    cJSON_AddFalseToObject(m, "finished"); // true once every shard is there (with its checksum)
    cJSON_AddItemToObject(m, "source", manifest_source(pl, s, o));
    cJSON_AddNumberToObject(m, "seed", (double)o->seed);
    cJSON_AddNumberToObject(m, "val_fraction", o->val);
    cJSON_AddStringToObject(m, "dtype", o->dtype == XK_I64 ? s->storage : xkind_name(o->dtype));
    cJSON_AddNumberToObject(m, "shard_tokens", (double)pl->st);
    for (int i = 0; i < s->n_names; i++) {
        const struct xname *x = &s->names[i];
        cJSON *n = cJSON_CreateObject(), *shape = cJSON_CreateArray();
        cJSON_AddStringToObject(n, "name", x->name);
        for (int k = 0; k < x->ndim; k++)
            cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)x->dims[k]));
        cJSON_AddItemToObject(n, "shape", shape);
        cJSON_AddStringToObject(n, "dtype", xkind_name(x->dst));
        cJSON_AddStringToObject(n, "storage",
                                x->dst == XK_BF16 ? "bfloat16-as-uint16" : xkind_name(x->dst));
        cJSON_AddStringToObject(n, "source_dtype", xkind_name(x->src));
        cJSON_AddItemToArray(names, n);
    }
    cJSON_AddItemToObject(m, "names", names);
    cJSON_AddItemToObject(m, "columns", cJSON_CreateStringArray(xshard_cols, 4));
    cJSON *splits = cJSON_AddObjectToObject(m, "splits");
    for (int k = 0; k < 2; k++) {
        cJSON *sp = cJSON_AddObjectToObject(splits, split_name[k]), *list = cJSON_CreateArray();
        cJSON_AddNumberToObject(sp, "tokens", (double)pl->n[k]);
        cJSON_AddNumberToObject(sp, "prompts", (double)pl->prompts[k]);
        for (int64_t j = 0; j < pl->shards[k]; j++) {
            cJSON *e = cJSON_CreateObject();
            int64_t left = pl->n[k] - j * pl->st;
            shard_file(file, sizeof file, k, j, o->fmt);
            cJSON_AddStringToObject(e, "file", file);
            cJSON_AddNumberToObject(e, "tokens", (double)(left < pl->st ? left : pl->st));
            cJSON_AddItemToArray(list, e);
        }
        cJSON_AddItemToObject(sp, "shards", list);
    }
    return m;
}

// a copy of have's splits without the shards' checksums (added when the export finished)
static cJSON *bare_splits(const cJSON *have) {
    cJSON *c = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(have, "splits"), true), *sp, *e;
    cJSON_ArrayForEach(sp, c) {
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(sp, "shards"))
            cJSON_DeleteItemFromObjectCaseSensitive(e, "checksum");
    }
    return c;
}

// The first key of want that have holds otherwise ("source.KEY" inside the source) into buf, or
// NULL when they agree ("finished" and the shards' checksums aside).
static const char *manifest_diff(const cJSON *want, const cJSON *have, char *buf, size_t n) {
    if (!cJSON_IsObject(have)) return "(unreadable JSON)";
    if (cJSON_HasObjectItem(have, "shard_format") != cJSON_HasObjectItem(want, "shard_format"))
        return "shard_format"; // HDF5 shards' manifests have none
    const cJSON *it, *sub;
    cJSON_ArrayForEach(it, want) {
        if (!strcmp(it->string, "finished")) continue;
        const cJSON *h = cJSON_GetObjectItemCaseSensitive(have, it->string);
        cJSON *bare = !strcmp(it->string, "splits") ? bare_splits(have) : NULL;
        bool same = cJSON_Compare(it, bare ? bare : h, true);
        cJSON_Delete(bare);
        if (same) continue;
        snprintf(buf, n, "%s", it->string);
        const cJSON *within = !strcmp(it->string, "source") && cJSON_IsObject(h) ? it : NULL;
        cJSON_ArrayForEach(sub, within) {
            if (!cJSON_Compare(sub, cJSON_GetObjectItemCaseSensitive(h, sub->string), true)) {
                snprintf(buf, n, "source.%s", sub->string);
                break;
            }
        }
        return buf;
    }
    return NULL;
}

// what a differing key says about the folder's export
static const char *diff_hint(const char *key, const cJSON *have) {
    const cJSON *src = cJSON_GetObjectItemCaseSensitive(have, "source");
    if (!strncmp(key, "source.", 7) && !cJSON_GetObjectItemCaseSensitive(src, key + 7))
        return ": the folder's manifest has none (written by an earlier harvest)";
    if (!strcmp(key, "shard_format"))
        return ": its shards are in another --format (an HDF5 export records none)";
    return !strcmp(key, "source.weights_fingerprint")
               ? ": the output was written by other weights since that export"
           : !strcmp(key, "source.job_checksum")
               ? ": the output was written by another job since that export"
           : !strcmp(key, "source.data_checksum") ? ": the output was written from other data"
           : !strcmp(key, "source.rows_checksum")
               ? ": the output's prompts are not those that export took"
               : "";
}

// path written whole from m: through path.tmp, fsynced, renamed (and the folder fsynced)
static int write_json(const char *path, const cJSON *m, struct ah_error *err) {
    char tmp[4210];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    char *text = cJSON_Print(m);
    FILE *f = text ? fopen(tmp, "w") : NULL;
    int ok = f && fputs(text, f) >= 0 && fputc('\n', f) != EOF && fflush(f) == 0 &&
             fsync(fileno(f)) == 0;
    if (f && fclose(f) != 0) ok = 0;
    free(text);
    if (ok && fs_replace(tmp, path) == 0) return 0;
    int e = errno;
    unlink(tmp);
    return ah_fail(err, AH_EIO, "%s: cannot write: %s", path, strerror(e));
}

// Rank 0, holding DIR's lock: checks that the export already in DIR (if any) is this one, or
// writes manifest.json (unfinished: no checksums) before any shard.
static int prepare_dir(const char *dir, const cJSON *want, bool *resumed, struct ah_error *err) {
    char path[4200], key[128];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    *resumed = false;
    if (access(path, F_OK) != 0) return write_json(path, want, err);
    char *text = NULL;
    int rc = ah_read_file(path, &text, err);
    if (rc < 0) return rc;
    cJSON *have = cJSON_Parse(text);
    free(text);
    const char *diff = manifest_diff(want, have, key, sizeof key);
    if (diff)
        rc = ah_fail(err, AH_EEXIST,
                     "%s: the folder holds a different export (\"%s\" differs%s), and its shards "
                     "are not this export's: give another --shards folder, or remove this one and "
                     "export again",
                     path, diff, diff_hint(diff, have));
    cJSON_Delete(have);
    *resumed = rc == 0;
    return rc;
}

// Rank 0, once every shard is there: manifest.json again, finished, with each shard's checksum
// (the reader compares it with the shard's own).
static int finish_manifest(const struct xplan *pl, const struct xsrc *s, const struct xopts *o,
                           const uint64_t *sums, struct ah_error *err) {
    char path[4200];
    snprintf(path, sizeof path, "%s/manifest.json", o->dir);
    cJSON *m = manifest(pl, s, o);
    if (!m) return ah_fail(err, AH_ENOMEM, "out of memory");
    cJSON_ReplaceItemInObjectCaseSensitive(m, "finished", cJSON_CreateTrue());
    const cJSON *splits = cJSON_GetObjectItemCaseSensitive(m, "splits");
    for (int k = 0; k < 2; k++) {
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(splits, split_name[k]);
        cJSON *e;
        int64_t j = 0;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(sp, "shards"))
            add_hex(e, "checksum", sums[(k ? pl->shards[0] : 0) + j++]);
    }
    int rc = write_json(path, m, err);
    cJSON_Delete(m);
    return rc;
}

// Rank 0: makes DIR and takes its lock (DIR/export.lock, as `run` locks its output), so that
// two exports never write one folder at once.
static int lock_dir(const char *dir, struct outlock *l, struct ah_error *err) {
    char base[4200];
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return ah_fail(err, AH_EIO, "%s: cannot create the folder: %s", dir, strerror(errno));
    snprintf(base, sizeof base, "%s/export", dir);
    int rc = outlock_take(l, base, err);
    if (rc != -AH_EEXIST) return rc;
    struct ah_error e2 = {0};
    char *who = NULL;
    if (ah_read_file(l->path, &who, &e2) == 0) who[strcspn(who, "\n")] = 0;
    rc = ah_fail(err, AH_EEXIST,
                 "%s: the folder is in use by another harvest export (host and PID: %s; lock "
                 "file %s); wait for it to end, or give another folder",
                 dir, who && who[0] ? who : "unknown", l->path);
    free(who);
    return rc;
}

// ----------------------------------------------------------------------------
// gathering shards: one pass over the source for a group of shards

static void place_token(struct xshard *b, int64_t row, struct xsrc *s, int64_t p, int64_t pos) {
    for (int i = 0; i < s->n_names; i++) {
        const struct xname *x = &s->names[i];
        size_t rb = (size_t)x->elems * xkind_size(x->dst);
        xkind_convert((char *)b->act[i] + (size_t)row * rb, x->dst, xsrc_token(s, i, p, pos),
                      x->src, x->elems);
    }
    b->cols[0][row] = s->ids[s->token_offset[p] + pos - s->t0];
    b->cols[1][row] = p;
    b->cols[2][row] = s->pos ? s->pos[s->token_offset[p] + pos - s->t0] : pos; // "select": stored
    b->cols[3][row] = s->source_index[p];
}

// Fills the shards of group (n of them; slot_of maps a global shard to its place in bufs, -1 if
// not in the group) in one pass over the source.
static int gather(struct xsrc *s, const struct xplan *pl, const int *slot_of, struct xshard *bufs,
                  bool progress, int pass, int passes, struct ah_error *err) {
    double last = now_seconds();
    for (int64_t p0 = 0, p1; p0 < s->n_prompts; p0 = p1) {
        p1 = xsrc_block_end(s, p0);
        int64_t p = p0;
        while (p < p1 && pl->off[p] < 0)
            p++;
        if (p == p1) continue; // nothing exported in the block
        int rc = xsrc_read(s, p0, p1, err);
        if (rc < 0) return rc;
        for (p = p0; p < p1; p++) {
            if (pl->off[p] < 0) continue;
            int v = pl->val[p];
            const uint8_t *sel = s->sel ? s->sel + s->token_offset[p] - s->t0 : NULL;
            for (int64_t pos = 0, j = pl->off[p]; pos < s->length[p]; pos++) {
                if (sel && !sel[pos]) continue; // "select", prompt layout: chosen tokens only
                int64_t pi = (int64_t)feistel_map(&pl->perm[v], (uint64_t)j++);
                int64_t sh = pi / pl->st, g = v ? pl->shards[0] + sh : sh;
                if (slot_of[g] >= 0) place_token(&bufs[slot_of[g]], pi - sh * pl->st, s, p, pos);
            }
        }
        if (progress && now_seconds() - last > 2) {
            last = now_seconds();
            fprintf(stderr, "export: pass %d/%d: %.0f%% of the source read\n", pass, passes,
                    100.0 * (double)p1 / (double)s->n_prompts);
        }
    }
    return 0;
}

static struct xshard_meta shard_meta(const struct xplan *pl, const struct xopts *o,
                                     const struct xsrc *s, int64_t g) {
    int split;
    int64_t k, n = shard_tokens(pl, g, &split, &k);
    return (struct xshard_meta){.fmt = o->fmt,
                                .split = split_name[split],
                                .shard = k,
                                .n_tokens = n,
                                .first_position = k * pl->st,
                                .seed = o->seed,
                                .data_checksum = s->data_checksum,
                                .export_id = pl->export_id,
                                .val_fraction = o->val};
}

// This rank's shards (g % size == rank): those not already finished, in groups that fit the
// memory budget, each group gathered in one pass and written; sums[g]: shard g's checksum.
static int write_shards(struct xsrc *s, const struct xplan *pl, const struct xopts *o, int rank,
                        int size, int64_t *kept, int64_t *written, uint64_t *sums,
                        struct ah_error *err) {
    int64_t G = pl->shards[0] + pl->shards[1], n_todo = 0;
    int64_t *todo = malloc((size_t)(G ? G : 1) * sizeof *todo);
    int *slot_of = malloc((size_t)(G ? G : 1) * sizeof *slot_of);
    int64_t budget = o->memory - (int64_t)xsrc_block_bytes(s);
    int rc = todo && slot_of ? 0 : ah_fail(err, AH_ENOMEM, "out of memory");
    char file[64];
    for (int64_t g = rank; rc == 0 && g < G; g += size) {
        struct xshard_meta m = shard_meta(pl, o, s, g);
        shard_file(file, sizeof file, g >= pl->shards[0], m.shard, o->fmt);
        if (xshard_verify(o->dir, file, s, &m, &sums[g]))
            ++*kept;
        else
            todo[n_todo++] = g;
    }
    int64_t per_group = budget / ((int64_t)pl->row_bytes * pl->st);
    if (per_group < 1) per_group = 1;
    int passes = (int)((n_todo + per_group - 1) / per_group);
    for (int64_t a = 0, pass = 1; rc == 0 && a < n_todo; a += per_group, pass++) {
        int64_t b = a + per_group < n_todo ? a + per_group : n_todo;
        struct xshard *bufs = calloc((size_t)(b - a), sizeof *bufs);
        for (int64_t g = 0; g < G; g++)
            slot_of[g] = -1;
        if (!bufs) rc = ah_fail(err, AH_ENOMEM, "out of memory");
        for (int64_t j = a; rc == 0 && j < b; j++) {
            slot_of[todo[j]] = (int)(j - a);
            if (xshard_alloc(&bufs[j - a], s, shard_meta(pl, o, s, todo[j]).n_tokens) < 0)
                rc = ah_fail(err, AH_ENOMEM, "out of memory for a shard of %lld tokens",
                             (long long)pl->st);
        }
        if (rc == 0)
            rc = gather(s, pl, slot_of, bufs, !o->quiet && rank == 0, (int)pass, passes, err);
        for (int64_t j = a; rc == 0 && j < b; j++) {
            struct xshard_meta m = shard_meta(pl, o, s, todo[j]);
            shard_file(file, sizeof file, todo[j] >= pl->shards[0], m.shard, o->fmt);
            rc = xshard_write(o->dir, file, &bufs[j - a], s, &m, &sums[todo[j]], err);
            if (rc == 0) ++*written;
            if (rc == 0 && !o->quiet && rank == 0)
                fprintf(stderr, "export: %s written (%lld tokens; %lld of this rank's %lld)\n",
                        file, (long long)m.n_tokens, (long long)(j + 1), (long long)n_todo);
        }
        for (int64_t j = a; bufs && j < b; j++)
            xshard_free(&bufs[j - a], s->n_names);
        free(bufs);
    }
    free(todo);
    free(slot_of);
    return rc;
}

// ----------------------------------------------------------------------------
// the command

// No file the export writes is one of the source's (its master, .tokens, .parts/ files), nor is
// the folder one of them: -AH_EINVAL naming both.
static int check_inputs(const struct xopts *o, struct ah_error *err) {
    static const char *const shards[] = {
        "manifest.json", "manifest.json.tmp", "train-*.h5", "val-*.h5", "*.tmp", "*.lock"};
    static const char *const probe[] = {"probe.h5", "probe.h5.tmp", "*.lock"};
    const char *dir = o->dir ? o->dir : o->probe, *hit;
    char **in = NULL;
    int n = 0, rc = outlock_output_files(o->src, &in, &n);
    const char *const *inputs = (const char *const *)in;
    if (rc < 0) return ah_fail(err, AH_ENOMEM, "out of memory");
    if ((hit = outlock_input_at(dir, false, inputs, n)))
        rc = ah_fail(err, AH_EINVAL,
                     "%s %s: the export folder is %s, one of the source's own files (%s, its "
                     ".tokens and .parts); choose another folder",
                     o->dir ? "--shards" : "--probe", dir, hit, o->src);
    else if (o->dir)
        rc = outlock_check_folder("export", dir, shards, 6, inputs, n, err);
    else
        rc = outlock_check_folder("export", dir, probe, 3, inputs, n, err);
    outlock_files_free(in, n);
    return rc;
}

// the source, refused when incomplete unless --allow-partial
static int open_source(struct xsrc *s, const struct xopts *o, struct ah_error *err) {
    int64_t block = o->memory / 8 < (64 << 20) ? o->memory / 8 : (64 << 20);
    int rc = check_inputs(o, err);
    if (rc == 0) rc = xsrc_open(s, o->src, o->names, o->dtype, block, err);
    if (rc == 0 && s->complete != 1 && !o->allow_partial)
        rc = ah_fail(err, AH_EINVAL,
                     "%s: the output is incomplete (complete = %lld: %lld of %lld prompts done); "
                     "finish it with `harvest run JOB --resume`, or export what is complete with "
                     "--allow-partial",
                     o->src, (long long)s->complete, (long long)s->prompts_done,
                     (long long)s->n_prompts);
    return rc;
}

// --probe DIR: rank 0 writes DIR/probe.h5 (export_probe.c), holding DIR's lock
static int export_probe(const struct xopts *o, struct ah_error *err) {
    struct xsrc s = {0};
    struct outlock lock = {.fd = -1};
    int rc = open_source(&s, o, err);
    if (rc == 0) rc = lock_dir(o->probe, &lock, err);
    unsigned pools = o->pools ? o->pools : rc == 0 ? xprobe_job_pools(&s) : 0;
    if (rc == 0) rc = xprobe_write(&s, o->probe, pools ? pools : 3, o->names != NULL, err);
    if (rc == 0 && !o->quiet)
        fprintf(stderr, "export: %s/probe.h5: %lld prompts, %d names\n", o->probe,
                (long long)xprobe_count(&s), s.n_names);
    xsrc_close(&s);
    outlock_release(&lock);
    return rc;
}

// The plan on every rank (and the export's id: the manifest's checksum); rank 0 locks DIR and
// writes or checks its manifest.
static int export_plan(struct xsrc *s, struct xplan *pl, const struct xopts *o, int rank,
                       struct outlock *lock, bool *resumed, struct ah_error *err) {
    int rc = open_source(s, o, err);
    if (rc == 0) rc = plan_build(pl, s, o, err);
    cJSON *m = rc == 0 ? manifest(pl, s, o) : NULL;
    char *text = m ? cJSON_PrintUnformatted(m) : NULL;
    if (rc == 0 && !text) rc = ah_fail(err, AH_ENOMEM, "out of memory");
    if (rc == 0) pl->export_id = fnv64_words(FNV64_INIT, text, strlen(text));
    if (rc == 0 && rank == 0) rc = lock_dir(o->dir, lock, err);
    if (rc == 0 && rank == 0) rc = prepare_dir(o->dir, m, resumed, err);
    free(text);
    cJSON_Delete(m);
    return rc;
}

// Every shard's checksum to rank 0, which finishes the manifest with them.
static int export_finish(const struct xplan *pl, const struct xsrc *s, const struct xopts *o,
                         int rank, uint64_t *sums, struct ah_error *err) {
    int G = (int)(pl->shards[0] + pl->shards[1]); // each shard is one rank's: the others hold 0
    MPI_Reduce(rank == 0 ? MPI_IN_PLACE : sums, sums, G, MPI_UINT64_T, MPI_BOR, 0, MPI_COMM_WORLD);
    return rank == 0 ? finish_manifest(pl, s, o, sums, err) : 0;
}

// A shard whose HDF5 close failed (disk full) stays open inside HDF5, whose shutdown hook (at
// MPI_Finalize or exit) would trip over it: nothing of it is listed, so leave at once.
static void leave_if_stuck(int code, int size, struct outlock *lock) {
    if (!xshard_stuck()) return;
    outlock_release(lock);
    fflush(NULL);
    if (size > 1) MPI_Abort(MPI_COMM_WORLD, code ? code : 2);
    _exit(code ? code : 2);
}

// Every rank's exit code; a failing rank prints its own message unless rank 0 failed too (then
// rank 0's message, the same on every rank for a bad input, is the one shown).
static int agree(int rc, const struct ah_error *err, int rank, int size) {
    int mine[2] = {rank == 0 ? ah_exit_code(rc) * (rc < 0) : 0, rc < 0 ? ah_exit_code(rc) : 0};
    int all[2] = {mine[0], mine[1]};
    if (MPI_Allreduce(mine, all, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD) != MPI_SUCCESS) all[1] = 2;
    if (rc < 0 && (rank == 0 || all[0] == 0)) {
        if (size > 1 && rank > 0) fprintf(stderr, "[rank %d] ", rank);
        report(rc, err);
    }
    return all[1];
}

int cmd_export(int argc, char **argv) {
    struct xopts o;
    if (parse_opts(&o, argc, argv) < 0) return 1;
    h5src_quiet(); // errors are reported by harvest, naming the file
    // REQUIRED: an MPI program (mpirun -np N harvest export ...), or a singleton
    if (MPI_Init(NULL, NULL) != MPI_SUCCESS) {
        fprintf(stderr, "harvest: MPI_Init failed\n");
        return 2;
    }
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    struct xsrc s = {0};
    struct xplan pl = {0};
    struct ah_error err = {0};
    bool resumed = false;
    struct outlock lock = {.fd = -1};
    double t0 = now_seconds();
    if (o.probe) { // one file: rank 0 alone
        int code = agree(rank == 0 ? export_probe(&o, &err) : 0, &err, rank, size);
        leave_if_stuck(code, size, &lock);
        MPI_Finalize();
        return code;
    }
    int rc = export_plan(&s, &pl, &o, rank, &lock, &resumed, &err);
    int code = agree(rc, &err, rank, size);
    int64_t counts[2] = {0, 0}, total[2] = {0, 0}; // shards kept, written
    uint64_t *sums = code == 0 ? calloc((size_t)(pl.shards[0] + pl.shards[1]) + 1, 8) : NULL;
    if (code == 0) // collective: every rank's allocation
        code = agree(sums ? 0 : ah_fail(&err, AH_ENOMEM, "out of memory"), &err, rank, size);
    if (code == 0) {
        if (resumed && rank == 0 && !o.quiet)
            fprintf(stderr, "export: %s holds this export already: finished shards are kept\n",
                    o.dir);
        rc = write_shards(&s, &pl, &o, rank, size, &counts[0], &counts[1], sums, &err);
        code = agree(rc, &err, rank, size);
        leave_if_stuck(code, size, &lock);
        MPI_Reduce(counts, total, 2, MPI_INT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
    }
    if (code == 0) code = agree(export_finish(&pl, &s, &o, rank, sums, &err), &err, rank, size);
    free(sums);
    if (code == 0 && rank == 0 && !o.quiet)
        fprintf(stderr,
                "export: %s: %lld train shards (%lld tokens), %lld val shards (%lld tokens); %lld "
                "written, %lld kept, %.1f s\n",
                o.dir, (long long)pl.shards[0], (long long)pl.n[0], (long long)pl.shards[1],
                (long long)pl.n[1], (long long)total[1], (long long)total[0], now_seconds() - t0);
    free(pl.off);
    free(pl.val);
    xsrc_close(&s);
    outlock_release(&lock);
    MPI_Finalize();
    return code;
}
