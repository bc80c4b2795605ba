// run.c - `harvest run JOB.json [--resume | --overwrite] [--quiet]` on one rank.
//
// Order of work: everything the user can get wrong (job, model, names, data) is checked before the
// output is touched; then batches go through the forward pass, taps write rows, and progress is
// recorded after every batch so that a stop (SIGTERM/SIGUSR1/SIGINT -> exit 3) or a failure can be
// resumed with --resume. `complete` is set only when every prompt is in.
#define _POSIX_C_SOURCE 200809L // defines: sigaction
#include "harvest/harvest.h"

#include "io/dataset.h"

#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t stop_requested;

static void on_signal(int sig) {
    (void)sig;
    stop_requested = 1;
}

static void install_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
}

// The token layout takes activations with one sequence axis (sequence/seq/query) and no key axis.
static int check_token_layout(const struct job *j, const struct model *m, const uint8_t *want,
                              struct ah_error *err) {
    char bad[512] = "";
    int nbad = 0;
    for (int i = 0; i < m->n_cat; i++) {
        if (!want[i]) continue;
        const struct tap_desc *d = &m->cat[i];
        bool ok = tap_n_seq_axes(d) == 1;
        for (int k = 0; k < d->ndim; k++)
            ok = ok && strcmp(d->axes[k], "key") && tap_axis_kind(d->axes[k]) != TAP_AXIS_SEQ2;
        if (ok) continue;
        if (nbad++ < 4)
            snprintf(bad + strlen(bad), sizeof bad - strlen(bad), "%s%s", nbad > 1 ? ", " : "",
                     d->name);
    }
    if (!nbad) return 0;
    return ah_fail(err, AH_EINVAL,
                   "%s: \"output.layout\": \"token\" takes activations with one "
                   "sequence axis and no key axis; %d requested do not: %s%s (use \"prompt\")",
                   j->path, nbad, bad, nbad > 4 ? ", ..." : "");
}

// Stored shape of each wanted activation.
static int build_dsets(const struct model *m, const uint8_t *want, enum job_layout layout,
                       int64_t S, int64_t n_prompts, int64_t n_tokens, struct h5out_dset *d,
                       int *dset_of_id) {
    int n = 0;
    for (int i = 0; i < m->n_cat; i++) {
        dset_of_id[i] = -1;
        if (!want[i]) continue;
        const struct tap_desc *t = &m->cat[i];
        struct h5out_dset *o = &d[n];
        memset(o, 0, sizeof *o);
        o->desc = t;
        strcpy(o->axes[0], layout == JOB_LAYOUT_PROMPT ? "prompt" : "token");
        o->dims[0] = layout == JOB_LAYOUT_PROMPT ? n_prompts : n_tokens;
        o->ndim = 1;
        for (int k = 0; k < t->ndim; k++) {
            enum tap_axis_kind kind = tap_axis_kind(t->axes[k]);
            if (kind == TAP_AXIS_BATCH) continue;
            if (layout == JOB_LAYOUT_TOKEN && kind == TAP_AXIS_SEQ) continue;
            int64_t len = kind == TAP_AXIS_SEQ    ? S
                          : kind == TAP_AXIS_SEQ2 ? 2 * S
                                                  : model_axis_size(m, t->axes[k]);
            AH_ASSERT(len >= 1);
            strcpy(o->axes[o->ndim], t->axes[k]);
            o->dims[o->ndim++] = len;
        }
        dset_of_id[i] = n++;
    }
    return n;
}

// FNV-1a over what the output is built from: source lines, lengths and token ids
static uint64_t prompts_checksum(const struct ds_prompts *ds) {
    uint64_t h = 1469598103934665603ull;
    const int64_t *arrays[3] = {ds->source, ds->len, ds->ids};
    int64_t counts[3] = {ds->n, ds->n, ds->n_tokens};
    for (int a = 0; a < 3; a++)
        for (int64_t i = 0; i < counts[a]; i++) {
            uint64_t v = (uint64_t)arrays[a][i];
            for (int b = 0; b < 8; b++)
                h = (h ^ ((v >> (8 * b)) & 0xff)) * 1099511628211ull;
        }
    return h;
}

int harvest_run(const struct run_opts *o, struct run_stats *stats, struct ah_error *err) {
    double t_start = now_seconds();
    struct job j = {0};
    struct model m = {0};
    struct ds_prompts ds = {0};
    struct encdec_state st = {0};
    struct collector col = {0};
    struct h5out *out = NULL;
    uint8_t *want = NULL;
    int *dset_of_id = NULL, *lens = NULL;
    int64_t *tok_pidx = NULL, *tok_pos = NULL, *boff = NULL, *brow = NULL;
    struct h5out_dset *dsets = NULL;
    int rc;

    // ---- everything the user can get wrong, before touching the output ----
    if ((rc = job_load(&j, o->job_path, err)) < 0) goto done;
    if ((rc = model_load(&m, j.model, true, err)) < 0) goto done;
    if (!(want = calloc((size_t)m.n_cat, 1)) ||
        !(dset_of_id = calloc((size_t)m.n_cat, sizeof(int)))) {
        rc = -AH_ENOMEM;
        goto done;
    }
    if ((rc = job_select(&j, m.cat, m.n_cat, want, err)) < 0) goto done;
    if (j.layout == JOB_LAYOUT_TOKEN && (rc = check_token_layout(&j, &m, want, err)) < 0) goto done;
    if (j.max_seq_len > m.max_pos) {
        rc = ah_fail(err, AH_EINVAL,
                     "%s: \"max_seq_len\": %d is longer than the model's "
                     "max_position_embeddings %d",
                     j.path, j.max_seq_len, m.max_pos);
        goto done;
    }
    if (j.pipeline_stages != 1 || j.expert_parallel != 1) {
        rc = ah_fail(err, AH_EINVAL,
                     "%s: \"parallel\": this build runs on one rank only "
                     "(pipeline_stages and expert_parallel must be 1)",
                     j.path);
        goto done;
    }
    int64_t cap = j.max_seq_len ? j.max_seq_len : m.max_pos;
    if ((rc = ds_load(&ds, j.data_path, j.data_field, cap, m.vocab, err)) < 0) goto done;
    int64_t S = j.max_seq_len ? j.max_seq_len : (ds.longest > 0 ? ds.longest : 1);

    int n_want = 0, deepest = -1;
    for (int i = 0; i < m.n_cat; i++)
        if (want[i]) {
            n_want++;
            deepest = m.cat[i].block > deepest ? m.cat[i].block : deepest;
        }
    int blk_end = deepest + 1 < m.n_blocks ? deepest + 1 : m.n_blocks;
    if (!(dsets = calloc((size_t)n_want, sizeof *dsets))) {
        rc = -AH_ENOMEM;
        goto done;
    }
    build_dsets(&m, want, j.layout, S, ds.n, ds.n_tokens, dsets, dset_of_id);

    // ---- the output ----
    enum h5out_store store = j.out_dtype == JOB_F16    ? H5OUT_F16
                             : j.out_dtype == JOB_BF16 ? H5OUT_BF16
                                                       : H5OUT_F32;
    int64_t done_prompts = 0;
    bool exists = access(j.out_path, F_OK) == 0;
    if (exists && !o->resume && !o->overwrite) {
        rc = ah_fail(err, AH_EEXIST,
                     "%s: the output exists; run with --resume to continue it or "
                     "--overwrite to replace it",
                     j.out_path);
        goto done;
    }
    // --overwrite, or a fresh start: nothing of an old output may stay
    if (!(exists && o->resume) && (rc = h5out_remove(j.out_path, err)) < 0) goto done;
    {
        tok_pidx = malloc((size_t)(ds.n_tokens + 1) * sizeof *tok_pidx);
        tok_pos = malloc((size_t)(ds.n_tokens + 1) * sizeof *tok_pos);
        if (!tok_pidx || !tok_pos) {
            rc = -AH_ENOMEM;
            goto done;
        }
        for (int64_t p = 0; p < ds.n; p++)
            for (int64_t t = 0; t < ds.len[p]; t++) {
                tok_pidx[ds.off[p] + t] = p;
                tok_pos[ds.off[p] + t] = t;
            }
        struct h5out_params hp = {
            .path = j.out_path,
            .store = store,
            .compression = j.compression,
            .model_family = m.family,
            .model_config = m.md.config_text,
            .job = j.text,
            .n_prompts = ds.n,
            .source_index = ds.source,
            .length = ds.len,
            .token_offset = ds.off,
            .n_tokens = ds.n_tokens,
            .input_ids = ds.ids,
            .prompt_index = tok_pidx,
            .position = tok_pos,
            .max_seq_len = S,
            .n_skipped_empty = ds.n_empty,
            .n_truncated = ds.n_truncated,
            .data_checksum = prompts_checksum(&ds),
        };
        bool complete = false;
        rc = h5out_open(&out, &hp, dsets, n_want, exists && o->resume, &done_prompts, &complete,
                        err);
        if (rc < 0) goto done;
        if (complete) {
            if (!o->quiet) fprintf(stderr, "harvest: %s is already complete\n", j.out_path);
            goto done;
        }
    }

    // ---- forward, batch after batch ----
    int B = j.batch_size;
    int64_t max_tokens = 1;
    for (int64_t p = 0; p < ds.n; p += B) {
        int64_t e = p + B < ds.n ? p + B : ds.n;
        int64_t t = ds.off[e - 1] + ds.len[e - 1] - ds.off[p];
        max_tokens = t > max_tokens ? t : max_tokens;
    }
    lens = malloc((size_t)B * sizeof *lens);
    boff = malloc((size_t)B * sizeof *boff);
    brow = malloc((size_t)B * sizeof *brow);
    if (!lens || !boff || !brow) {
        rc = -AH_ENOMEM;
        goto done;
    }
    if ((rc = encdec_state_init(&st, &m.ed.cfg, (int)S, max_tokens)) < 0) goto done;
    col = (struct collector){.out = out,
                             .dsets = dsets,
                             .dset_of_id = dset_of_id,
                             .layout = j.layout,
                             .S = S,
                             .token_row = brow};
    struct tap tp = {want, collect_take, &col};
    install_signals();
    struct progress pr;
    int64_t done_tokens = done_prompts < ds.n ? ds.off[done_prompts] : ds.n_tokens;
    progress_init(&pr, o->quiet, ds.n, ds.n_tokens, done_prompts, done_tokens);
    double last_checkpoint = now_seconds();
    for (int64_t p = done_prompts; p < ds.n; p += B) {
        int n = (int)(ds.n - p < B ? ds.n - p : B);
        for (int b = 0; b < n; b++) {
            lens[b] = (int)ds.len[p + b];
            boff[b] = ds.off[p + b] - ds.off[p];
            brow[b] = ds.off[p + b];
        }
        struct mbatch bt = {n, ds.off[p + n - 1] + ds.len[p + n - 1] - ds.off[p],
                            ds.ids + ds.off[p], lens, boff};
        col.first_prompt = p;
        if ((rc = h5out_begin_batch(out, p + n, ds.off[p + n - 1] + ds.len[p + n - 1], err)) < 0)
            goto done;
        encdec_forward(&m.ed, &st, &bt, &tp, 0, blk_end);
        if ((rc = col.rc) < 0) {
            *err = col.err;
            goto done;
        }
        done_prompts = p + n;
        done_tokens += bt.n_tokens;
        progress_update(&pr, done_prompts, done_tokens, false);
        bool stop = stop_requested && done_prompts < ds.n;
        if ((stop || now_seconds() - last_checkpoint >= j.checkpoint_seconds) &&
            done_prompts < ds.n) {
            if ((rc = h5out_checkpoint(out, err)) < 0) goto done;
            last_checkpoint = now_seconds();
        }
        if (stop) {
            progress_update(&pr, done_prompts, done_tokens, true);
            rc = ah_fail(err, AH_ESTOP,
                         "stopped by a signal after %lld of %lld prompts; run the "
                         "same command with --resume to continue",
                         (long long)done_prompts, (long long)ds.n);
            goto done;
        }
    }
    progress_update(&pr, done_prompts, done_tokens, true);
    int64_t bytes = h5out_bytes(out);
    double t_close = now_seconds();
    rc = h5out_close(out, true, err);
    col.seconds += now_seconds() - t_close;
    out = NULL;
    if (stats)
        *stats = (struct run_stats){.prompts = ds.n - pr.start,
                                    .tokens = ds.n_tokens - pr.start_tokens,
                                    .seconds = now_seconds() - t_start,
                                    .seconds_write = col.seconds,
                                    .bytes = bytes};
    if (rc < 0) goto done;
    if (!o->quiet)
        fprintf(stderr,
                "harvest: wrote %lld prompts (%lld tokens, %d activations) to %s; "
                "%lld empty prompts skipped, %lld truncated to %lld tokens\n",
                (long long)ds.n, (long long)ds.n_tokens, n_want, j.out_path, (long long)ds.n_empty,
                (long long)ds.n_truncated, (long long)S);
done:
    if (out) {
        struct ah_error e2;
        int rc2 = h5out_close(out, false, &e2);
        if (rc == 0 && rc2 < 0) {
            rc = rc2;
            *err = e2;
        }
    }
    collector_free(&col);
    encdec_state_free(&st);
    free(lens);
    free(boff);
    free(brow);
    free(tok_pidx);
    free(tok_pos);
    free(dsets);
    free(dset_of_id);
    free(want);
    ds_free(&ds);
    model_free(&m);
    job_free(&j);
    return rc;
}

static int usage(void) {
    fprintf(stderr, "usage: harvest run JOB.json [--resume | --overwrite] [--quiet]\n");
    return 1;
}

int cmd_run(int argc, char **argv) {
    struct run_opts o = {0};
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--resume"))
            o.resume = true;
        else if (!strcmp(argv[i], "--overwrite"))
            o.overwrite = true;
        else if (!strcmp(argv[i], "--quiet"))
            o.quiet = true;
        else if (argv[i][0] == '-' || o.job_path)
            return usage();
        else
            o.job_path = argv[i];
    }
    if (!o.job_path) return usage();
    if (o.resume && o.overwrite) {
        fprintf(stderr, "harvest: --resume and --overwrite exclude each other\n");
        return 1;
    }
    int size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size > 1) {
        int rank = 0;
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        if (rank == 0)
            fprintf(stderr,
                    "harvest: this build runs on one rank; got %d (multi-rank runs are "
                    "not implemented yet)\n",
                    size);
        return 1;
    }
    struct ah_error err = {0};
    int rc = harvest_run(&o, NULL, &err);
    return report(rc, &err);
}
