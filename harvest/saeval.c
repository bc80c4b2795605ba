// saeval.c - the splice-in evaluation (saeval.h; docs/saes.md "Splice-in evaluation").
//
// For a batch, the clean forward runs in pieces: the residual stream (the family's hand-off
// arrays) is saved at the input of each evaluated site's block. The consumer takes the clean
// logits of every prompt. Then for each SAE with "evaluate": true, twice, the stream is restored
// and the forward runs on from the site's block to the head with a tap whose writer replaces the
// site at its emit point (model/tap.h, the write-back seam): with the SAE's float32
// reconstruction (sae_decode of its encoding, model/sae.h) of every token of the prompt, then
// with zeros. Each forward's logits give the next-token cross-entropy in float64: token t of a
// prompt predicts token t + 1 of the same prompt (the last token predicts nothing),
//   ce(t) = logsumexp(logits[t]) - logits[t][ids[t + 1]].
// A batch's partial per SAE is 4 doubles: the CE sums clean, spliced and zero-ablated (prompts in
// order, tokens in order) and the predicted tokens. The partials go into the segment files
// (io/h5sae.h, /saes_eval) as saes.c's do; rank 0 folds every listed batch's partial in batch
// order into the attributes of /saes/NAME (after saes.c's final has made the group):
//   ce_clean, ce_spliced, ce_zero = sums / predicted tokens
//   ce_loss_recovered = (ce_zero - ce_spliced) / (ce_zero - ce_clean)   (SAELens's definition)
// so the results are the same bits at any grid of replicas and expert shards and after any
// resume. Pipeline stages are refused (the spliced stream would have to travel down them).
#include "harvest/saeval.h"

#include "io/h5sae.h"
#include "io/output.h" // out_parts_path
#include "model/sae.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define EV_L 4 // doubles of a batch partial of one SAE: clean, spliced, zero sums; tokens

struct ev_sae {
    int job;           // index in the job's "saes"
    int id, block;     // its site's catalogue id and block (tap_desc.block)
    int start;         // the forward runs on from this block (0: from the embeddings)
    struct sae_file f; // owned
    double part[EV_L]; // the batch in hand
};

struct saeval {
    const struct plan *pl;
    int logits; // catalogue id of "logits"
    struct ev_sae *e;
    int n;
    bool takes;          // expert shard 0 holds the partials
    uint8_t *want_clean; // (n_cat) the consumer's: the logits
    uint8_t *want, *wr;  // (n_cat) an evaluation forward's: takes the logits, writes the site
    int *starts; // (n_starts) distinct blocks in (0, n_blocks] the stream is saved at, increasing
    int n_starts;
    float *saved; // (n_starts, n_hand, max_tokens * hidden) the saved streams
    int64_t hand_floats;
    // during an evaluation forward
    const struct mbatch *bt;
    struct ev_sae *cur;
    int mode; // 1 spliced, 2 zero
    double clean, n_pred;
    int refused; // the site came as a copy (not writable): its prompt count
    // encoding scratch of one prompt (S rows)
    float *u, *y, *nrm, *pre, *val;
    int32_t *idx;
    int64_t *indptr;
    // partials since the last flush
    int64_t n_held, cap_held;
    int64_t *held_batch; // (n_held)
    double *held;        // (n_held, n EV_L)
};

// ---------------------------------------------------------------------------------------------
// the cross-entropy of one prompt's logits (T, V): the sum over its T - 1 predictions

static double ce_sum(const float *logits, const int64_t *ids, int64_t T, int64_t V) {
    double sum = 0;
    for (int64_t t = 0; t + 1 < T; t++) {
        const float *z = logits + t * V;
        double mx = -INFINITY, s = 0;
        for (int64_t v = 0; v < V; v++)
            mx = (double)z[v] > mx ? (double)z[v] : mx;
        for (int64_t v = 0; v < V; v++)
            s += exp((double)z[v] - mx);
        sum += mx + log(s) - (double)z[ids[t + 1]];
    }
    return sum;
}

// ---------------------------------------------------------------------------------------------
// the evaluation forward's tap: the writer and the logits

static void ev_write(void *u, int id, int b, float *live, const struct tview *v) {
    struct saeval *ev = u;
    (void)id, (void)b;
    if (!live) {
        ev->refused++;
        return;
    }
    const struct sae *s = &ev->cur->f.s;
    AH_ASSERT(v->ndim == 3 && v->dims[2] == s->d_in && v->dims[1] <= ev->pl->place.S);
    int64_t T = v->dims[1], C = s->d_in;
    if (ev->mode == 2) {
        memset(live, 0, (size_t)(T * C) * sizeof *live);
        return;
    }
    float *nrm = s->norm != SAE_NORM_NONE ? ev->nrm : NULL;
    sae_pre(ev->pre, ev->u, nrm, live, s, T);
    sae_count(ev->indptr, ev->pre, s, T);
    sae_fill(ev->idx, ev->val, ev->indptr, ev->pre, s, T);
    sae_decode(ev->y, ev->indptr, ev->idx, ev->val, nrm, s, T);
    memcpy(live, ev->y, (size_t)(T * C) * sizeof *live);
}

static void ev_take(void *u, int id, int b, const struct tview *v) {
    struct saeval *ev = u;
    (void)id;
    const struct mbatch *bt = ev->bt;
    ev->cur->part[ev->mode] += ce_sum(v->data, bt->ids + bt->off[b], v->dims[1], v->dims[2]);
}

// ---------------------------------------------------------------------------------------------
// the batch

struct saeval *saeval_find(const struct consumers *cs) {
    for (int k = 0; k < cs->n; k++)
        if (!strcmp(cs->list[k].name, "saeval")) return cs->list[k].u;
    return NULL;
}

// the saved stream s (n arrays of N floats) into or out of the hand-off arrays
static void stream_copy(struct saeval *ev, int s, float **hand, int n_hand, int64_t N, bool out) {
    for (int a = 0; a < n_hand; a++) {
        float *keep = ev->saved + ((int64_t)s * n_hand + a) * ev->hand_floats;
        memcpy(out ? hand[a] : keep, out ? keep : hand[a], (size_t)N * sizeof(float));
    }
}

static int start_index(const struct saeval *ev, int start) {
    for (int s = 0; s < ev->n_starts; s++)
        if (ev->starts[s] == start) return s;
    return -1;
}

// SAE e spliced (mode 1) and zeroed (mode 2), each from its start block to the head
static int splice_one(struct saeval *ev, struct ev_sae *e, const struct model *m,
                      struct model_state *st, const struct mbatch *bt, int b1,
                      struct ah_error *err) {
    float *hand[2];
    int n_hand = 0;
    model_handoff(m, st, hand, &n_hand);
    int64_t N = bt->n_tokens * model_hidden(m);
    int s = e->start > 0 ? start_index(ev, e->start) : -1;
    memset(ev->wr, 0, (size_t)m->n_cat);
    ev->wr[e->id] = 1;
    struct tap tp = {ev->want, ev_take, ev, ev->wr, ev_write, false};
    ev->cur = e;
    ev->bt = bt;
    ev->refused = 0;
    for (ev->mode = 1; ev->mode <= 2; ev->mode++) {
        if (s >= 0) stream_copy(ev, s, hand, n_hand, N, true);
        model_forward(m, st, bt, &tp, e->start, b1);
    }
    ev->wr[e->id] = 0;
    if (ev->refused)
        return ah_fail(err, AH_EINVAL,
                       "%s: \"saes[%d].evaluate\": \"%s\" is emitted as a copy, which cannot be "
                       "replaced: splice the SAE in at another value",
                       ev->pl->j.path, e->job, m->cat[e->id].name);
    return 0;
}

int saeval_forward(struct saeval *ev, const struct model *m, struct model_state *st,
                   const struct mbatch *bt, const struct tap *tp, int b0, int b1,
                   struct ah_error *err) {
    if (!ev) {
        model_forward(m, st, bt, tp, b0, b1);
        return 0;
    }
    float *hand[2];
    int n_hand = 0, at = b0;
    model_handoff(m, st, hand, &n_hand);
    int64_t N = bt->n_tokens * model_hidden(m);
    struct tap whole = *tp; // the stream is kept at the splice sites: every block runs whole
    whole.stream_ends = false;
    tp = &whole;
    for (int s = 0; s < ev->n_starts; s++) { // the clean forward, the stream saved on the way
        if (ev->starts[s] < b1) model_forward(m, st, bt, tp, at, ev->starts[s]);
        if (ev->starts[s] < b1) at = ev->starts[s];
        if (ev->starts[s] < b1) stream_copy(ev, s, hand, n_hand, N, false);
    }
    model_forward(m, st, bt, tp, at, b1);
    for (int s = 0; s < ev->n_starts; s++) // a site after the last block: the final stream
        if (ev->starts[s] >= b1) stream_copy(ev, s, hand, n_hand, N, false);
    for (int k = 0; k < ev->n; k++) {
        int rc = splice_one(ev, &ev->e[k], m, st, bt, b1, err);
        if (rc < 0) return rc;
    }
    return 0;
}

// ---------------------------------------------------------------------------------------------
// the consumer: the clean logits, the batch partials

static int ev_cons_begin(void *u, const struct cbatch *bt, struct ah_error *err) {
    struct saeval *ev = u;
    (void)bt, (void)err;
    ev->clean = ev->n_pred = 0;
    for (int k = 0; k < ev->n; k++)
        memset(ev->e[k].part, 0, sizeof ev->e[k].part);
    return 0;
}

static int ev_cons_take(void *u, const struct ctake *t, const struct tview *v,
                        struct ah_error *err) {
    struct saeval *ev = u;
    (void)err;
    const struct cbatch *bt = t->bt;
    ev->clean += ce_sum(v->data, bt->ids + bt->boff[t->b], v->dims[1], v->dims[2]);
    ev->n_pred += (double)(v->dims[1] - 1);
    return 0;
}

static int ev_cons_end(void *u, const struct cbatch *bt, struct ah_error *err) {
    struct saeval *ev = u;
    if (!ev->takes) return 0;
    int64_t B = (int64_t)ev->n * EV_L;
    if (ev->n_held == ev->cap_held) {
        int64_t c = ev->cap_held * 2 + 8;
        int64_t *nb = realloc(ev->held_batch, (size_t)c * sizeof *nb);
        if (nb) ev->held_batch = nb;
        double *nh = nb ? realloc(ev->held, (size_t)(c * B) * sizeof *nh) : NULL;
        if (!nh) return ah_fail(err, AH_ENOMEM, "out of memory: the CE partials");
        ev->held = nh;
        ev->cap_held = c;
    }
    double *row = ev->held + ev->n_held * B;
    for (int k = 0; k < ev->n; k++) {
        ev->e[k].part[0] = ev->clean;
        ev->e[k].part[3] = ev->n_pred;
        memcpy(row + k * EV_L, ev->e[k].part, sizeof ev->e[k].part);
    }
    ev->held_batch[ev->n_held++] = bt->k;
    return 0;
}

// rank 0 of the stage: the gathered rows v (total, n EV_L) per SAE into seg_path
static int write_rows(const struct saeval *ev, const char *seg_path, const int64_t *batch,
                      int total, const double *v, struct ah_error *err) {
    const char **names = calloc((size_t)ev->n, sizeof *names);
    double *per = malloc(((size_t)total * (size_t)ev->n * EV_L + 1) * sizeof *per);
    int rc = 0;
    if (!names || !per) rc = ah_fail(err, AH_ENOMEM, "out of memory: %d CE partials", total);
    for (int k = 0; rc == 0 && k < ev->n; k++) {
        names[k] = ev->pl->j.saes[ev->e[k].job].name;
        for (int i = 0; i < total; i++)
            memcpy(per + ((size_t)k * total + i) * EV_L, v + ((size_t)i * ev->n + k) * EV_L,
                   EV_L * sizeof *per);
    }
    if (rc == 0) rc = h5sae_write_eval(seg_path, batch, total, ev->n, names, per, err);
    free(names), free(per);
    return rc;
}

// Collective over the stage (comm): the partials held since the last flush into segment file
static int ev_cons_segment(void *u, const struct out_ops *out, MPI_Comm comm, const char *out_path,
                           const char *file, struct ah_error *err) {
    (void)out;
    struct saeval *ev = u;
    char seg_path[4400];
    out_parts_path(seg_path, sizeof seg_path, out_path, file);
    int me = 0, size = 1, rc = 0, total = 0, mine = (int)ev->n_held, B = ev->n * EV_L;
    CHECK_MPI(MPI_Comm_rank(comm, &me));
    CHECK_MPI(MPI_Comm_size(comm, &size));
    int *cnt = calloc((size_t)size, sizeof *cnt), *dsp = calloc((size_t)size, sizeof *dsp);
    int *cntv = calloc((size_t)size, sizeof *cntv), *dspv = calloc((size_t)size, sizeof *dspv);
    int64_t *batch = NULL;
    double *v = NULL;
    if (!cnt || !dsp || !cntv || !dspv) rc = -AH_ENOMEM;
    CHECK_MPI(MPI_Allgather(&mine, 1, MPI_INT, cnt, 1, MPI_INT, comm)); // every rank: no NULLs
    for (int r = 0; rc == 0 && r < size; r++) {
        dsp[r] = total, cntv[r] = cnt[r] * B, dspv[r] = total * B;
        total += cnt[r];
    }
    if (rc == 0) {
        batch = malloc(((size_t)total + 1) * sizeof *batch);
        v = malloc(((size_t)total * (size_t)B + 1) * sizeof *v);
        if (!batch || !v) rc = -AH_ENOMEM;
    }
    int worst = rc;
    CHECK_MPI(MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MIN, comm));
    if (worst < 0) {
        rc = ah_fail(err, AH_ENOMEM, "out of memory: %d batches' CE partials", total);
        goto done;
    }
    CHECK_MPI(
        MPI_Gatherv(ev->held_batch, mine, MPI_INT64_T, batch, cnt, dsp, MPI_INT64_T, 0, comm));
    CHECK_MPI(MPI_Gatherv(ev->held, mine * B, MPI_DOUBLE, v, cntv, dspv, MPI_DOUBLE, 0, comm));
    if (me == 0 && total > 0) rc = write_rows(ev, seg_path, batch, total, v, err);
done:
    ev->n_held = 0;
    free(cnt), free(dsp), free(cntv), free(dspv), free(batch), free(v);
    return rc;
}

static void saeval_free(void *u) {
    struct saeval *ev = u;
    if (!ev) return;
    for (int k = 0; ev->e && k < ev->n; k++)
        sae_close(&ev->e[k].f);
    free(ev->e), free(ev->starts), free(ev->want_clean), free(ev->want), free(ev->wr),
        free(ev->saved);
    free(ev->u), free(ev->y), free(ev->nrm), free(ev->pre), free(ev->val), free(ev->idx);
    free(ev->indptr), free(ev->held_batch), free(ev->held);
    free(ev);
}

// ---------------------------------------------------------------------------------------------
// the job's evaluate keys against the model and the grid

static int logits_id(const struct model *m) {
    return tap_desc_find(m->cat, m->n_cat, "logits");
}

// saes[i].evaluate: a site the forward can replace and after which the logits are computed
static int check_one(const struct plan *pl, const struct grid *g, int i, struct ah_error *err) {
    const char *path = pl->j.path;
    if (g->n_stages > 1)
        return ah_fail(err, AH_EINVAL,
                       "%s: \"saes[%d].evaluate\": the splice-in evaluation runs on one pipeline "
                       "stage (\"parallel.pipeline_stages\" is %d)",
                       path, i, g->n_stages);
    int lg = logits_id(&pl->m), id = saes_site(pl, i, err);
    if (id < 0) return id;
    if (lg < 0)
        return ah_fail(err, AH_EINVAL,
                       "%s: \"saes[%d].evaluate\": the %s model has no \"logits\" to take the "
                       "next-token loss of",
                       path, i, pl->m.family);
    const char *name = pl->m.cat[id].name;
    if (id >= lg)
        return ah_fail(err, AH_EINVAL,
                       "%s: \"saes[%d].evaluate\": nothing runs after \"%s\" that the next-token "
                       "loss reads: splice the SAE in before the logits",
                       path, i, name);
    if (!strcmp(name, "lm_head_output"))
        return ah_fail(err, AH_EINVAL,
                       "%s: \"saes[%d].evaluate\": \"%s\" is emitted as a copy, which cannot be "
                       "replaced: splice the SAE in at another value",
                       path, i, name);
    return 0;
}

static int saeval_check(const struct plan *pl, const struct grid *g, struct ah_error *err) {
    for (int i = 0; i < pl->j.n_saes; i++) {
        int rc = pl->j.saes[i].evaluate ? check_one(pl, g, i, err) : 0;
        if (rc < 0) return rc;
    }
    return 0;
}

// the most tokens a batch has
static int64_t max_batch_tokens(const struct plan *pl) {
    int64_t most = 1;
    for (int64_t k = 0; k < pl->place.K; k++) {
        struct h5out_run r = place_batch(&pl->place.pc, k);
        int64_t t0 = pl->ds.off[r.p0], t1 = r.p1 < pl->ds.n ? pl->ds.off[r.p1] : pl->ds.n_tokens;
        most = t1 - t0 > most ? t1 - t0 : most;
    }
    return most;
}

// the evaluated SAEs opened, their start blocks, the buffers
static int saeval_open(struct saeval *ev, struct ah_error *err) {
    const struct plan *pl = ev->pl;
    const struct model *m = &pl->m;
    int n = pl->j.n_saes, rc = 0;
    int64_t Cmax = 1, Dmax = 1, S = pl->place.S;
    ev->e = calloc((size_t)n + 1, sizeof *ev->e);
    ev->starts = calloc((size_t)n + 1, sizeof *ev->starts);
    ev->want_clean = calloc((size_t)m->n_cat + 1, 1);
    ev->want = calloc((size_t)m->n_cat + 1, 1);
    ev->wr = calloc((size_t)m->n_cat + 1, 1);
    if (!ev->e || !ev->starts || !ev->want_clean || !ev->want || !ev->wr)
        return ah_fail(err, AH_ENOMEM, "out of memory: the SAE evaluation");
    ev->logits = logits_id(m);
    ev->want_clean[ev->logits] = ev->want[ev->logits] = 1;
    for (int i = 0; rc == 0 && i < n; i++) {
        if (!pl->j.saes[i].evaluate) continue;
        struct ev_sae *e = &ev->e[ev->n++];
        e->f.st.fd = -1;
        e->job = i;
        if ((e->id = saes_site(pl, i, err)) < 0) return e->id;
        if ((rc = saes_open_sae(pl, i, e->id, &e->f, err)) < 0) return rc;
        e->block = m->cat[e->id].block;
        e->start = e->block > 0 ? e->block : 0;
        int s = 0;
        while (s < ev->n_starts && ev->starts[s] < e->start)
            s++;
        if (e->start > 0 && (s == ev->n_starts || ev->starts[s] != e->start)) {
            memmove(ev->starts + s + 1, ev->starts + s, (size_t)(ev->n_starts - s) * sizeof(int));
            ev->starts[s] = e->start;
            ev->n_starts++;
        }
        Cmax = e->f.s.d_in > Cmax ? e->f.s.d_in : Cmax;
        Dmax = e->f.s.d_sae > Dmax ? e->f.s.d_sae : Dmax;
    }
    ev->hand_floats = max_batch_tokens(pl) * model_hidden(m);
    size_t SC = (size_t)(S * Cmax), SD = (size_t)(S * Dmax);
    ev->saved = malloc(((size_t)ev->n_starts * 2 * (size_t)ev->hand_floats + 1) * sizeof(float));
    ev->u = malloc(SC * sizeof *ev->u), ev->y = malloc(SC * sizeof *ev->y);
    ev->nrm = malloc((size_t)(2 * S) * sizeof *ev->nrm);
    ev->pre = malloc(SD * sizeof *ev->pre), ev->val = malloc(SD * sizeof *ev->val);
    ev->idx = malloc(SD * sizeof *ev->idx);
    ev->indptr = malloc((size_t)(S + 1) * sizeof *ev->indptr);
    if (!ev->saved || !ev->u || !ev->y || !ev->nrm || !ev->pre || !ev->val || !ev->idx ||
        !ev->indptr)
        return ah_fail(err, AH_ENOMEM, "out of memory: the SAE evaluation's buffers");
    return 0;
}

// Every rank of the (one) stage has one: it runs the forwards with the other expert shards and
// joins the segment flushes; expert shard 0 holds the partials.
static int saeval_make(struct consumer *c, const struct consumer_env *env, struct ah_error *err) {
    const struct plan *pl = env->pl;
    bool any = false;
    for (int i = 0; i < pl->j.n_saes; i++)
        any |= pl->j.saes[i].evaluate;
    if (!any || env->g->scomm == MPI_COMM_NULL) return 0;
    struct saeval *ev = calloc(1, sizeof *ev);
    if (!ev) return ah_fail(err, AH_ENOMEM, "out of memory: the SAE evaluation");
    ev->pl = pl;
    int rc = saeval_open(ev, err);
    if (rc < 0) {
        saeval_free(ev);
        return rc;
    }
    ev->takes = env->g->shard == 0;
    *c = (struct consumer){.name = "saeval",
                           .want = ev->want_clean,
                           .begin = ev_cons_begin,
                           .take = ev_cons_take,
                           .end = ev_cons_end,
                           .segment = ev_cons_segment,
                           .free = saeval_free,
                           .u = ev};
    return 0;
}

// ---------------------------------------------------------------------------------------------
// the final fold (rank 0, every batch in)

struct eentry {
    int64_t batch;
    int rec;
    double v[EV_L];
};

static int cmp_eentry(const void *a, const void *b) {
    const struct eentry *x = a, *y = b;
    return x->batch != y->batch ? (x->batch < y->batch ? -1 : 1) : x->rec - y->rec;
}

// whether record r lists prompt p's rows (a batch trimmed on resume is not listed)
static bool lists_prompt(const struct h5out_record *r, int64_t p) {
    for (int j = 0; j < r->n_runs; j++)
        if (p >= r->runs[j].p0 && p < r->runs[j].p1) return true;
    return false;
}

// every listed batch's partial of SAE name, sorted: (*e, *n) malloc'd
static int ev_entries(const struct plan *pl, const struct h5out_record *rec, int n_rec,
                      const char *name, struct eentry **e, int64_t *n, struct ah_error *err) {
    int64_t cap = 0;
    *e = NULL, *n = 0;
    char path[4400];
    for (int r = 0; r < n_rec; r++) {
        out_parts_path(path, sizeof path, pl->j.out_path, rec[r].file);
        int64_t *b = NULL, m = 0;
        double *v = NULL;
        if (h5sae_read_eval(path, name, &b, &v, &m) < 0)
            return ah_fail(err, AH_EIO, "%s: cannot read the CE partials of \"%s\"", path, name);
        if (*n + m > cap) {
            struct eentry *ne = realloc(*e, (size_t)(cap = 2 * cap + m) * sizeof *ne);
            if (!ne) {
                free(b), free(v);
                return ah_fail(err, AH_ENOMEM, "out of memory: the CE partials");
            }
            *e = ne;
        }
        for (int64_t j = 0; j < m; j++)
            if (lists_prompt(&rec[r], b[j] * pl->place.B)) {
                struct eentry *x = &(*e)[(*n)++];
                x->batch = b[j], x->rec = r;
                memcpy(x->v, v + j * EV_L, sizeof x->v);
            }
        free(b), free(v);
    }
    if (*n) qsort(*e, (size_t)*n, sizeof **e, cmp_eentry);
    return 0;
}

// SAE i's partials folded in batch order into out (sums, then the attributes' values)
static int ev_fold(const struct plan *pl, int i, const struct h5out_record *rec, int n_rec,
                   struct h5sae_eval *out, struct ah_error *err) {
    const char *name = pl->j.saes[i].name;
    struct eentry *e = NULL;
    int64_t n = 0, next = 0;
    double tot[EV_L] = {0, 0, 0, 0};
    int rc = ev_entries(pl, rec, n_rec, name, &e, &n, err);
    for (int64_t k = 0; rc == 0 && k < n; k++) {
        if (e[k].batch < next) continue; // a batch listed twice: its first listing
        if (e[k].batch > next) break;
        for (int j = 0; j < EV_L; j++)
            tot[j] += e[k].v[j];
        next++;
    }
    free(e);
    if (rc == 0 && next < pl->place.K)
        rc = ah_fail(err, AH_EIO,
                     "%s: no listed segment holds the CE partials of SAE \"%s\" for batch %lld",
                     pl->j.out_path, name, (long long)next);
    if (rc < 0) return rc;
    double nt = tot[3];
    *out = (struct h5sae_eval){.name = name,
                               .n_tokens = (int64_t)nt,
                               .clean = nt > 0 ? tot[0] / nt : (double)NAN,
                               .spliced = nt > 0 ? tot[1] / nt : (double)NAN,
                               .zero = nt > 0 ? tot[2] / nt : (double)NAN};
    out->recovered = (out->zero - out->spliced) / (out->zero - out->clean);
    return 0;
}

static int saeval_final(const struct plan *pl, const struct out_ops *out,
                        const struct h5out_record *rec, int n_rec, bool if_missing,
                        struct ah_error *err) {
    (void)out; // stored through io/h5sae.c
    int n = 0, rc = 0;
    struct h5sae_eval *items = calloc((size_t)pl->j.n_saes + 1, sizeof *items);
    if (!items) return ah_fail(err, AH_ENOMEM, "out of memory: the SAE evaluation");
    for (int i = 0; rc == 0 && i < pl->j.n_saes; i++)
        if (pl->j.saes[i].evaluate) rc = ev_fold(pl, i, rec, n_rec, &items[n++], err);
    if (rc == 0 && n > 0 && !(if_missing && h5sae_has_eval(pl->j.out_path, items[0].name)))
        rc = h5sae_store_eval(pl->j.out_path, items, n, err);
    free(items);
    return rc;
}

const struct consumer_kind saeval_kind = {"saeval", saeval_check, saeval_make, saeval_final};
