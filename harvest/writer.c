// writer.c - see writer.h. Each rank writes only what it computes; the ranks of a stage share
// its segment files (parallel HDF5 over MPI-IO, io/h5out.h) and go in lockstep rounds of one
// batch each, agreeing at the start of every round on stops and checkpoints. Closed segments'
// records travel to rank 0, which replaces the master. `complete` is set only when every batch
// is in.
#define _POSIX_C_SOURCE 200809L // defines: access
#include "harvest/writer.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// ----------------------------------------------------------------------------
// segment records travel to rank 0 as bytes: a header, then the runs

struct rec_header {
    char file[64];
    int32_t i0, i1, n_runs;
};

// Record sends are non-blocking: a stage must never wait for rank 0 (which is a first stage, and
// may itself be waiting for that stage to take a micro-batch). The buffers stay until sent.
struct pending {
    MPI_Request req;
    char *buf;
};

static int send_record(struct writer *w, const struct h5out_record *r, struct ah_error *err) {
    size_t n = sizeof(struct rec_header) + (size_t)r->n_runs * sizeof(struct h5out_run);
    char *buf = malloc(n);
    struct pending *np = realloc(w->pend, ((size_t)w->n_pend + 1) * sizeof *np);
    if (np) w->pend = np;
    if (!buf || !np) {
        free(buf);
        return ah_fail(err, AH_ENOMEM, "out of memory: a segment record of %zu bytes", n);
    }
    struct rec_header h = {{0}, r->i0, r->i1, r->n_runs};
    memcpy(h.file, r->file, sizeof h.file);
    memcpy(buf, &h, sizeof h);
    memcpy(buf + sizeof h, r->runs, (size_t)r->n_runs * sizeof(struct h5out_run));
    np[w->n_pend].buf = buf;
    CHECK_MPI(MPI_Isend(buf, (int)n, MPI_BYTE, 0, TAG_REC, MPI_COMM_WORLD, &np[w->n_pend].req));
    w->n_pend++;
    return 0;
}

// completes every record send (before the DONE message, so rank 0 has them all)
static void finish_records(struct writer *w) {
    for (int i = 0; i < w->n_pend; i++) {
        CHECK_MPI(MPI_Wait(&w->pend[i].req, MPI_STATUS_IGNORE));
        free(w->pend[i].buf);
    }
    free(w->pend);
    w->pend = NULL;
    w->n_pend = 0;
}

// rank 0: receives one record message and adds it to the master
static int recv_record(struct writer *w, int src, struct ah_error *err) {
    MPI_Status stt;
    int n = 0;
    CHECK_MPI(MPI_Probe(src, TAG_REC, MPI_COMM_WORLD, &stt));
    CHECK_MPI(MPI_Get_count(&stt, MPI_BYTE, &n));
    char *buf = malloc((size_t)n + 1);
    struct rec_header h;
    if (!buf || (size_t)n < sizeof h)
        return ah_fail(err, buf ? AH_EIO : AH_ENOMEM, "a segment record of %d bytes from rank %d",
                       n, stt.MPI_SOURCE);
    CHECK_MPI(
        MPI_Recv(buf, n, MPI_BYTE, stt.MPI_SOURCE, TAG_REC, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    memcpy(&h, buf, sizeof h);
    struct h5out_record r = {{0}, h.i0, h.i1, NULL, h.n_runs};
    memcpy(r.file, h.file, sizeof r.file);
    r.runs = malloc(((size_t)h.n_runs + 1) * sizeof *r.runs);
    if (r.runs) memcpy(r.runs, buf + sizeof h, (size_t)h.n_runs * sizeof *r.runs);
    free(buf);
    if (!r.runs || w->out->master_add(w->mst, &r) < 0) {
        free(r.runs);
        return ah_fail(err, AH_ENOMEM, "out of memory: a record of %d runs", h.n_runs);
    }
    return 0;
}

// ----------------------------------------------------------------------------
// segments and the master

static enum out_store store_of(const struct job *j) {
    return j->out_dtype == JOB_F16 ? OUT_F16 : j->out_dtype == JOB_BF16 ? OUT_BF16 : OUT_F32;
}

// Collective over the stage: opens its next segment.
static int seg_begin(struct writer *w, struct ah_error *err) {
    const struct plan *pl = w->pl;
    char file[64];
    h5out_seg_name(file, sizeof file, w->run, w->g->stage * w->g->n_shards, w->seq++);
    return w->out->seg_open(&w->seg, w->g->scomm, pl->j.out_path, file, store_of(&pl->j),
                            pl->j.compression, pl->place.B, pl->names.dsets, w->g->i0, w->g->i1,
                            err);
}

// Collective over the stage: closes the open segment and the stage's first rank hands its record
// to rank 0.
static int seg_finish(struct writer *w, struct ah_error *err) {
    if (!w->seg) return 0;
    struct h5out_record rec;
    int me = 0;
    double t0 = now_seconds();
    w->bytes += w->out->seg_bytes(w->seg);
    int rc = w->out->seg_close(w->seg, &rec, err);
    w->seg = NULL;
    w->seconds += now_seconds() - t0; // the fsync is part of writing
    if (rc < 0) return rc;
    if (w->cons &&
        w->segment) { // the consumers' partials (statistics...) go in before it is listed
        if ((rc = w->segment(w->cons, w->out, w->g->scomm, w->pl->j.out_path, rec.file, err)) < 0) {
            h5out_record_free(&rec);
            return rc;
        }
    }
    CHECK_MPI(MPI_Comm_rank(w->g->scomm, &me));
    if (me == 0 && w->g->rank == 0) {
        rc = w->out->master_add(w->mst, &rec);
        w->master_dirty = true;
    } else if (me == 0) {
        rc = send_record(w, &rec, err);
    }
    h5out_record_free(&rec);
    return rc;
}

// rank 0: takes the records that have arrived and, if any, replaces the master
static int master_poll(struct writer *w, struct ah_error *err) {
    int flag = 1, rc = 0;
    while (rc == 0 && flag) {
        MPI_Status stt;
        CHECK_MPI(MPI_Iprobe(MPI_ANY_SOURCE, TAG_REC, MPI_COMM_WORLD, &flag, &stt));
        if (flag) {
            rc = recv_record(w, stt.MPI_SOURCE, err);
            w->master_dirty = true;
        }
    }
    if (rc == 0 && w->master_dirty) {
        rc = w->out->master_write(w->mst, false, err);
        w->master_dirty = false;
    }
    return rc;
}

// ----------------------------------------------------------------------------
// the output opened

// rank 0, resuming under the norm guard: the pass just run must have dropped what the output's
// did (its median and count), or the rows already written sit elsewhere than the plan says
static int guard_same(const struct plan *pl, const struct out_peek *pk, struct ah_error *err) {
    double med = pk->ng_median;
    int64_t n = pk->n_dropped_norm;
    bool same_med = med == pl->ng.median || (isnan(med) && isnan(pl->ng.median));
    if (same_med && n == pl->sel.sc.dropped_norm) return 0;
    return ah_fail(err, AH_EINVAL,
                   "%s: --resume: the norm guard (select.max_norm_multiple) now finds median "
                   "%.17g and %lld tokens to drop; the output was made with %.17g and %lld (the "
                   "model's numbers changed?): run with --overwrite",
                   pl->j.out_path, pl->ng.median, (long long)pl->sel.sc.dropped_norm, med,
                   (long long)n);
}

// rank 0, resuming: the output was made with the job's "compute" (no attribute: float32)
static int compute_same(const struct plan *pl, const struct out_peek *pk, struct ah_error *err) {
    const char *now = job_compute_name(pl->j.compute);
    const char *then = pk->compute_dtype ? pk->compute_dtype : "float32";
    return !strcmp(now, then) ? 0
                              : ah_fail(err, AH_EINVAL,
                                        "%s: --resume: the job's \"compute\" is \"%s\", the "
                                        "output was made with \"%s\": use that, or --overwrite",
                                        pl->j.out_path, now, then);
}

// rank 0, resuming: the output was made as this run would make it (no master that opens:
// master_open says so)
static int resume_same(const struct writer *w, struct ah_error *err) {
    struct out_peek pk;
    if (w->out->peek(w->pl->j.out_path, &pk) < 0) return 0;
    int rc = compute_same(w->pl, &pk, err);
    if (rc == 0 && w->pl->ng.on) rc = guard_same(w->pl, &pk, err);
    out_peek_free(&pk);
    return rc;
}

// rank 0: makes the output (removing an old one unless resuming) or reopens it
static int master_open(struct writer *w, const struct run_opts *o, const char *prov, uint8_t *done,
                       bool *complete, struct ah_error *err) {
    const struct plan *pl = w->pl;
    bool exists = access(pl->j.out_path, F_OK) == 0;
    if (exists && !o->resume && !o->overwrite)
        return ah_fail(err, AH_EEXIST,
                       "%s: the output exists; run with --resume to continue it or "
                       "--overwrite to replace it",
                       pl->j.out_path);
    // --overwrite, or a fresh start: nothing of an old output may stay
    int rc = exists && o->resume ? 0 : w->out->remove(pl->j.out_path, err);
    if (rc == 0 && exists && o->resume) rc = resume_same(w, err);
    char *fp = NULL;
    if (rc == 0) rc = plan_fingerprint(pl, &fp, err);
    if (rc == 0) rc = plan_index_tables(pl, &w->t_ids, &w->t_pos, &w->t_count, &w->t_sel, err);
    static const char *const count_names[5] = {"n_tokens_selected", "n_tokens_skipped_first",
                                               "n_tokens_skipped_id", "n_tokens_not_chosen",
                                               "n_tokens_dropped_norm"};
    static const char *const real_names[1] = {"norm_guard_median"};
    int64_t *c = w->counts;
    c[0] = pl->sel.sc.kept, c[1] = pl->sel.sc.skipped_first, c[2] = pl->sel.sc.skipped_id;
    c[3] = pl->sel.sc.not_chosen, c[4] = pl->sel.sc.dropped_norm;
    struct h5out_params hp = {
        .path = pl->j.out_path,
        .store = store_of(&pl->j),
        .model_family = pl->m.family,
        .model_config = pl->m.md.config_text,
        .job = pl->j.text,
        .compute_dtype = job_compute_name(pl->j.compute),
        .data_checksum = plan_checksum(pl),
        .n_prompts = pl->ds.n,
        .source_index = pl->ds.source,
        .length = pl->ds.len,
        .token_offset = w->t_ids ? pl->sel.st_off : pl->ds.off,
        .n_tokens = w->t_ids ? pl->sel.n_stored : pl->ds.n_tokens,
        .input_ids = w->t_ids ? w->t_ids : pl->ds.ids,
        .batch_size = pl->place.B,
        .max_seq_len = pl->place.S,
        .n_skipped_empty = pl->ds.n_empty,
        .n_truncated = pl->ds.n_truncated,
        .provenance = prov,
        .model_fingerprint = fp,
        .fields = pl->ds.fields, // data.fields (rank 0 read them)
        .n_fields = pl->ds.n_fields,
        .token_position = w->t_pos,
        .token_count = w->t_count,
        .token_selected = w->t_sel,
        .n_counts = pl->sel.on ? (pl->ng.on ? 5 : 4) : 0, // the guard's with it only
        .count_names = count_names,
        .count_values = w->counts,
        .n_reals = pl->ng.on,
        .real_names = real_names,
        .real_values = &pl->ng.median,
    };
    if (rc == 0)
        rc = w->out->master_open(&w->mst, &hp, pl->names.dsets, pl->names.n_dsets,
                                 exists && o->resume, done, &w->run, complete, err);
    w->fingerprint = fp; // the master borrows it
    return rc;
}

int writer_open(struct writer *w, const struct plan *pl, const struct grid *g,
                const struct run_opts *o, const char *provenance, uint8_t *done, bool *complete,
                struct ah_error *err) {
    memset(w, 0, sizeof *w);
    w->pl = pl;
    w->g = g;
    w->out = out_format(pl->j.out_path);
    w->lockstep = g->scomm != MPI_COMM_NULL;
    w->members = 1;
    if (w->lockstep) CHECK_MPI(MPI_Comm_size(g->scomm, &w->members));
    w->say = malloc((size_t)w->members * sizeof *w->say);
    w->rows = malloc((size_t)w->members * sizeof *w->rows);
    int rc = w->say && w->rows
                 ? 0
                 : ah_fail(err, AH_ENOMEM, "out of memory: rounds of %d ranks", w->members);
    *complete = false;
    if (rc == 0 && g->rank == 0) rc = master_open(w, o, provenance, done, complete, err);
    if ((rc = run_agree(rc, err)) < 0) return rc;
    int flags[2] = {w->run, *complete}; // every rank must take the same path
    CHECK_MPI(MPI_Bcast(done, (int)pl->place.K, MPI_UINT8_T, 0, MPI_COMM_WORLD));
    CHECK_MPI(MPI_Bcast(flags, 2, MPI_INT, 0, MPI_COMM_WORLD));
    w->run = flags[0];
    *complete = flags[1];
    w->last_checkpoint = now_seconds();
    return 0;
}

// ----------------------------------------------------------------------------
// rounds

int writer_round_begin(struct writer *w, int64_t k, int stop, bool *play, struct ah_error *err) {
    const struct grid *g = w->g;
    bool checkpoint = false;
    int rc = 0;
    struct round_say mine = {k, stop,
                             now_seconds() - w->last_checkpoint >= w->pl->j.checkpoint_seconds};
    CHECK_MPI(MPI_Allgather(&mine, 3, MPI_INT64_T, w->say, 3, MPI_INT64_T, g->scomm));
    rounds_agree(&w->pl->place.pc, w->say, w->members, g->n_shards, g->stage == 0, play,
                 &checkpoint, w->rows);
    if (!*play) return 0;
    if (checkpoint && w->seg) { // the stage's first rank keeps the checkpoint clock
        if ((rc = seg_finish(w, err)) < 0) return rc;
        if (g->rank == 0 && (rc = master_poll(w, err)) < 0) return rc;
        w->last_checkpoint = now_seconds();
    }
    if (!w->seg && (rc = seg_begin(w, err)) < 0) return rc;
    return w->out->seg_begin_round(w->seg, w->rows, err);
}

int writer_rows(struct writer *w, int i, int64_t row, int64_t n, const void *data,
                struct ah_error *err) {
    return w->out->seg_write(w->seg, i, row, n, data, err);
}

int writer_round_end(struct writer *w, struct ah_error *err) {
    int rc = 0;
    if (w->lockstep) {
        double t0 = now_seconds();
        rc = w->out->seg_end_round(w->seg, err);
        w->seconds += now_seconds() - t0;
    }
    if (rc == 0 && w->g->rank == 0) rc = master_poll(w, err);
    return rc;
}

// ----------------------------------------------------------------------------
// the end

int writer_finish(struct writer *w, struct ah_error *err) {
    int rc = seg_finish(w, err);
    if (rc < 0 || w->g->size == 1) return rc;
    if (w->g->rank != 0) {
        finish_records(w);
        CHECK_MPI(MPI_Send(NULL, 0, MPI_CHAR, 0, TAG_DONE, MPI_COMM_WORLD));
        return 0;
    }
    for (int left = w->g->size - 1; left > 0;) { // every other rank's records, then its end
        MPI_Status stt;
        CHECK_MPI(MPI_Probe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &stt));
        if (stt.MPI_TAG == TAG_REC) {
            if (rc == 0) rc = recv_record(w, stt.MPI_SOURCE, err);
            continue;
        }
        // DONE, or a late stop notice
        CHECK_MPI(MPI_Recv(NULL, 0, MPI_CHAR, stt.MPI_SOURCE, stt.MPI_TAG, MPI_COMM_WORLD,
                           MPI_STATUS_IGNORE));
        if (stt.MPI_TAG == TAG_DONE) left--;
    }
    return rc;
}

int writer_stats(struct writer *w, bool if_missing, struct ah_error *err) {
    if (w->g->rank != 0 || !w->final) return 0;
    int n = 0;
    const struct h5out_record *rec = w->out->master_records(w->mst, &n);
    double t0 = now_seconds();
    int rc = w->final(w->pl, w->out, rec, n, if_missing, err);
    w->seconds += now_seconds() - t0;
    return rc;
}

int writer_final(struct writer *w, const char *provenance, int64_t *prompts_done,
                 struct ah_error *err) {
    if (w->g->rank != 0) return 0;
    const struct plan *pl = w->pl;
    w->out->master_set_provenance(w->mst, provenance);
    int64_t all = w->out->master_done_prompts(w->mst);
    double t0 = now_seconds();
    int rc = w->out->master_write(w->mst, all == pl->ds.n, err);
    w->seconds += now_seconds() - t0;
    *prompts_done = all;
    if (rc == 0 && all == pl->ds.n) rc = writer_stats(w, false, err);
    if (rc == 0 && all < pl->ds.n)
        rc = ah_fail(err, AH_ESTOP,
                     "stopped by a signal after %lld of %lld prompts; run the same command "
                     "with --resume to continue",
                     (long long)all, (long long)pl->ds.n);
    return rc;
}

void writer_close(struct writer *w) {
    if (w->out) w->out->master_close(w->mst);
    for (int i = 0; i < w->n_pend; i++)
        free(w->pend[i].buf);
    free(w->pend);
    free(w->say);
    free(w->rows);
    free(w->fingerprint);
    free(w->t_ids), free(w->t_pos), free(w->t_count), free(w->t_sel);
    memset(w, 0, sizeof *w);
}
