// saes.c - sparse autoencoders at harvest time (job key "saes", docs/saes.md "The saes job key",
// docs/output.md "SAE latents"): a tap consumer that encodes, for each SAE, every taken view of
// its site (batch, sequence, features) at the kept tokens, in float32 with one GEMM a view
// (model/sae.h: sae_pre, sae_count, sae_fill, sae_decode), and keeps per batch a partial:
//   per latent: firing count (value > 0), sum, sum of squares and max of its value (0 where it
//   does not fire), and its top-N exemplars (value, corpus token index), largest first, ties to
//   the smaller index
//   per SAE: tokens encoded, the L0 histogram (tokens with i latents > 0), the squared error of
//   the reconstruction, and per input feature the sum and sum of squares of the activation
// The partials go into the segment files as the norm profile's do (normprofile.c): each closed
// segment gets the partials of its batches before the master lists it (io/h5sae.h); at the end
// rank 0 merges every listed batch's partial in batch order into /saes/<name> of the master. So
// counts, max and exemplars are exact and the sums the same bits at any grid and after any
// resume: each batch's partial is made by one rank in prompt order and added in batch order.
//
// A partial is L = 6D + 3 + 2C + 2DN doubles (D = d_sae, C = d_in, N = top_n):
//   count (D), sum (D), sum_sq (D), max (D), l0_hist (D + 1), n_tok, sse, sum_x (C),
//   sum_xx (C), n_ex (D), then per latent N exemplars (value, position), largest first
// Counts and positions are exact as doubles (below 2^53).
#include "harvest/run.h"
#include "harvest/saelat.h"
#include "harvest/saeval.h" // saes_site, saes_open_sae (the evaluation's hooks)
#include "io/h5profile.h"   // h5prof_has_group
#include "io/h5sae.h"
#include "io/output.h" // out_parts_path
#include "io/sae.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SAE_DENSE 0.1 // a latent firing on more than this fraction of the tokens is dense

// ---------------------------------------------------------------------------------------------
// the job's "saes" against the catalogue

// whether d is (batch, sequence, features) of floats, with a sequence axis that is not a key axis
static bool encodable(const struct tap_desc *d) {
    return d->dtype == TAP_F32 && d->ndim == 3 && tap_axis_kind(d->axes[0]) == TAP_AXIS_BATCH &&
           tap_axis_kind(d->axes[1]) == TAP_AXIS_SEQ && strcmp(d->axes[1], "key") != 0 &&
           tap_axis_kind(d->axes[2]) == TAP_AXIS_FIXED;
}

// The catalogue id of saes[i].on (a name or alias naming one value), or a negative AH_E*.
static int site_of(const struct plan *pl, int i, struct ah_error *err) {
    const struct job *j = &pl->j;
    const struct model *m = &pl->m;
    uint8_t *want = calloc((size_t)m->n_cat + 1, 1);
    const char **alias = calloc((size_t)m->n_cat + 1, sizeof *alias);
    if (!want || !alias) {
        free(want), free(alias);
        return ah_fail(err, AH_ENOMEM, "out of memory: the SAEs' sites");
    }
    char key[64];
    snprintf(key, sizeof key, "saes[%d].on", i);
    int rc =
        job_select_list(j, key, &j->saes[i].on, 1, m->cat, m->n_cat, m->family, want, alias, err);
    int id = -1, hits = 0;
    for (int k = 0; rc == 0 && k < m->n_cat; k++)
        if (want[k]) id = k, hits++;
    if (rc == 0 && hits != 1)
        rc = ah_fail(err, AH_EINVAL,
                     "%s: \"saes[%d].on\": \"%s\" names %d activations (an SAE reads one: give "
                     "its name or alias)",
                     j->path, i, j->saes[i].on, hits);
    free(want), free(alias);
    return rc < 0 ? rc : id;
}

int saes_deepest(const struct plan *pl) {
    int deepest = -1;
    for (int i = 0; i < pl->j.n_saes; i++) {
        struct ah_error e = {0};
        int id = site_of(pl, i, &e);
        if (id >= 0 && pl->m.cat[id].block > deepest) deepest = pl->m.cat[id].block;
        if (id >= 0 && pl->j.saes[i].evaluate) deepest = pl->m.n_blocks; // the logits (saeval.c)
    }
    return deepest;
}

// whether this rank's stage computes the value of block b (grid.c's owner of a block)
static bool stage_computes(const struct plan *pl, const struct grid *g, int b) {
    int nb = pl->m.n_blocks;
    if (pl->place.blk_end == 0) return true; // the embeddings alone: one stage
    int o = b < 0 ? 0 : b >= nb ? nb - 1 : b;
    return o >= g->b0 && o < g->b1;
}

// saes[i] opened into f and checked against its site id: d_in the site's feature width
static int sae_of(const struct plan *pl, int i, int id, struct sae_file *f, struct ah_error *err) {
    const struct job *j = &pl->j;
    const struct tap_desc *d = &pl->m.cat[id];
    char shape[256] = "";
    for (int k = 0; k < d->ndim; k++)
        snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%s", k ? ", " : "",
                 d->axes[k]);
    if (!encodable(d))
        return ah_fail(err, AH_EINVAL,
                       "%s: \"saes[%d].on\": \"%s\" is %s (%s): an SAE reads a float activation "
                       "shaped (batch, sequence, features)",
                       j->path, i, d->name, tap_dtype_name(d->dtype), shape);
    struct ah_error e = {0};
    int rc = sae_open(f, j->saes[i].path, &e);
    if (rc < 0) return ah_fail(err, -rc, "%s: \"saes[%d].path\": %s", j->path, i, e.msg);
    int64_t width = model_axis_size(&pl->m, d->block, d->axes[2]);
    if (f->s.d_in != width) {
        rc = ah_fail(err, AH_EINVAL,
                     "%s: \"saes[%d]\": the SAE in %s has d_in %lld, but \"%s\" has %lld "
                     "features (%s)",
                     j->path, i, j->saes[i].path, (long long)f->s.d_in, d->name, (long long)width,
                     d->axes[2]);
        sae_close(f);
    }
    return rc;
}

static int saes_check(const struct plan *pl, const struct grid *g, struct ah_error *err) {
    for (int i = 0; i < pl->j.n_saes; i++) {
        int id = site_of(pl, i, err);
        if (id < 0) return id;
        struct sae_file f;
        memset(&f, 0, sizeof f);
        f.st.fd = -1;
        int rc = sae_of(pl, i, id, &f, err);
        if (rc < 0) return rc;
        sae_close(&f);
        if (stage_computes(pl, g, pl->m.cat[id].block) && g->scomm == MPI_COMM_NULL)
            return ah_fail(err, AH_EINVAL,
                           "%s: \"saes[%d].on\": \"%s\" is computed by pipeline stage %d, which "
                           "stores no value of \"activations\" (its SAE results go into that "
                           "stage's segments): store one of its values or use fewer stages",
                           pl->j.path, i, pl->m.cat[id].name, g->stage);
    }
    return 0;
}

// ---------------------------------------------------------------------------------------------
// one partial: accumulate, merge

struct sdims {
    int64_t D, C, N, L;
    int64_t cnt, sum, sq, max, hist, ntok, sse, sx, sxx, nex, ex; // offsets in a partial
};

static void dims_of(struct sdims *z, int64_t D, int64_t C, int64_t N) {
    z->D = D, z->C = C, z->N = N;
    z->cnt = 0, z->sum = D, z->sq = 2 * D, z->max = 3 * D, z->hist = 4 * D;
    z->ntok = 5 * D + 1, z->sse = z->ntok + 1, z->sx = z->sse + 1, z->sxx = z->sx + C;
    z->nex = z->sxx + C, z->ex = z->nex + D;
    z->L = z->ex + 2 * D * N;
}

static void part_reset(const struct sdims *z, double *p) {
    memset(p, 0, (size_t)z->L * sizeof *p);
}

// exemplar (v, pos) into latent j's sorted list of partial p (at most N): larger value first,
// then the smaller position
static void ex_add(const struct sdims *z, double *p, int64_t j, double v, double pos) {
    double *n_ex = p + z->nex + j, *ex = p + z->ex + 2 * z->N * j;
    int64_t n = (int64_t)*n_ex, N = z->N;
#define EX_BEFORE(a) (v > (a)[0] || (v == (a)[0] && pos < (a)[1]))
    if (n == N && !EX_BEFORE(ex + 2 * (N - 1))) return;
    int64_t at = n < N ? n : N - 1;
    while (at > 0 && EX_BEFORE(ex + 2 * (at - 1))) {
        ex[2 * at] = ex[2 * (at - 1)], ex[2 * at + 1] = ex[2 * (at - 1) + 1];
        at--;
    }
#undef EX_BEFORE
    ex[2 * at] = v, ex[2 * at + 1] = pos;
    if (n < N) *n_ex = (double)(n + 1);
}

// one token: its activation x (C), reconstruction y (C) and code (n entries idx, val)
static void token_add(const struct sdims *z, double *p, int64_t pos, const float *x, const float *y,
                      const int32_t *idx, const float *val, int64_t n) {
    int64_t l0 = 0;
    for (int64_t e = 0; e < n; e++) {
        double v = (double)val[e];
        if (!(v > 0)) continue;
        int64_t j = idx[e];
        l0++;
        p[z->cnt + j] += 1;
        p[z->sum + j] += v;
        p[z->sq + j] += v * v;
        if (v > p[z->max + j]) p[z->max + j] = v;
        ex_add(z, p, j, v, (double)pos);
    }
    p[z->hist + l0] += 1;
    p[z->ntok] += 1;
    double sse = 0;
    for (int64_t f = 0; f < z->C; f++) {
        double xf = (double)x[f], r = xf - (double)y[f];
        sse += r * r;
        p[z->sx + f] += xf;
        p[z->sxx + f] += xf * xf;
    }
    p[z->sse] += sse;
}

// total += part, in this order (the merge of batch partials, batch after batch)
static void part_merge(const struct sdims *z, double *total, const double *part) {
    for (int64_t j = 0; j < z->D; j++) {
        total[z->cnt + j] += part[z->cnt + j];
        total[z->sum + j] += part[z->sum + j];
        total[z->sq + j] += part[z->sq + j];
        if (part[z->max + j] > total[z->max + j]) total[z->max + j] = part[z->max + j];
    }
    for (int64_t k = 0; k <= z->D + 2; k++) // the histogram, n_tok and sse
        total[z->hist + k] += part[z->hist + k];
    for (int64_t f = 0; f < 2 * z->C; f++) // sum_x, sum_xx
        total[z->sx + f] += part[z->sx + f];
    for (int64_t j = 0; j < z->D; j++) {
        const double *ex = part + z->ex + 2 * z->N * j;
        for (int64_t e = 0; e < (int64_t)part[z->nex + j]; e++)
            ex_add(z, total, j, ex[2 * e], ex[2 * e + 1]);
    }
}

// ---------------------------------------------------------------------------------------------
// the consumer

struct sae_run {
    int id;            // catalogue id of its site
    struct sae_file f; // the SAE; owned
    struct sdims z;
    double *part;       // (L) the batch in hand; points into saes.part
    struct sae_lat lat; // its CSR latents since the last flush
};

struct saes {
    const struct plan *pl;
    struct sae_run *r; // (n) the SAEs on this stage's sites
    int *of;           // (n) their index in the job's "saes"
    int n;
    bool takes;    // this rank computes the values (expert shard 0)
    uint8_t *want; // (n_cat) what it takes; owned
    int64_t Lsum;  // doubles of a batch: the SAEs' L summed
    double *part;  // (Lsum) the batch in hand
    // scratch of one view (S rows at most): owned
    float *x, *u, *y, *nrm; // (S, Cmax), (S, Cmax), (S, Cmax), (S, 2)
    float *pre, *val;       // (S, Dmax) each
    int32_t *idx;           // (S, Dmax)
    int64_t *indptr, *pos;  // (S + 1), (S)
    int64_t n_held, cap_held;
    int64_t *held_batch; // (n_held) batches since the last flush
    double *held;        // (n_held, Lsum) their partials
};

static void saes_free(void *u) {
    struct saes *sa = u;
    if (!sa) return;
    for (int k = 0; sa->r && k < sa->n; k++)
        sae_close(&sa->r[k].f), saelat_free(&sa->r[k].lat);
    free(sa->r), free(sa->of), free(sa->want), free(sa->part);
    free(sa->x), free(sa->u), free(sa->y), free(sa->nrm), free(sa->pre), free(sa->val);
    free(sa->idx), free(sa->indptr), free(sa->pos);
    free(sa->held_batch), free(sa->held);
    free(sa);
}

// one SAE over the n kept rows of a view gathered in sa->x (positions sa->pos)
static int encode_rows(struct saes *sa, struct sae_run *r, int64_t n, struct ah_error *err) {
    const struct sae *s = &r->f.s;
    float *nrm = s->norm != SAE_NORM_NONE ? sa->nrm : NULL;
    sae_pre(sa->pre, sa->u, nrm, sa->x, s, n);
    sae_count(sa->indptr, sa->pre, s, n);
    sae_fill(sa->idx, sa->val, sa->indptr, sa->pre, s, n);
    sae_decode(sa->y, sa->indptr, sa->idx, sa->val, nrm, s, n);
    int64_t C = s->d_in;
    for (int64_t t = 0; t < n; t++) {
        int64_t e0 = sa->indptr[t], e1 = sa->indptr[t + 1];
        token_add(&r->z, r->part, sa->pos[t], sa->x + t * C, sa->y + t * C, sa->idx + e0,
                  sa->val + e0, e1 - e0);
    }
    return saelat_add(&r->lat, n, sa->pos, sa->indptr, sa->idx, sa->val, err);
}

static int saes_take(void *u, const struct ctake *t, const struct tview *v, struct ah_error *err) {
    struct saes *sa = u;
    const struct cbatch *bt = t->bt;
    AH_ASSERT(v->ndim == 3 && v->dtype == TAP_F32 && v->dims[0] == 1 &&
              v->dims[1] <= sa->pl->place.S);
    int64_t T = v->dims[1], F = v->dims[2], n = 0;
    const float *x = v->data;
    for (int64_t s = 0; s < T; s++) { // the kept rows, in order
        if (t->keep && !t->keep[s]) continue;
        memcpy(sa->x + n * F, x + s * F, (size_t)F * sizeof *x);
        sa->pos[n++] = bt->t0 + bt->boff[t->b] + s;
    }
    int rc = 0;
    for (int k = 0; rc == 0 && n > 0 && k < sa->n; k++)
        if (sa->r[k].id == t->id) {
            AH_ASSERT(sa->r[k].f.s.d_in == F);
            rc = encode_rows(sa, &sa->r[k], n, err);
        }
    return rc;
}

static int saes_begin(void *u, const struct cbatch *bt, struct ah_error *err) {
    struct saes *sa = u;
    int rc = 0;
    for (int k = 0; k < sa->n; k++) {
        part_reset(&sa->r[k].z, sa->r[k].part);
        if (rc == 0 && sa->takes) rc = saelat_begin(&sa->r[k].lat, bt->k, err);
    }
    return rc;
}

static int saes_end(void *u, const struct cbatch *bt, struct ah_error *err) {
    struct saes *sa = u;
    if (!sa->takes) return 0;
    int64_t B = sa->Lsum; // doubles a batch
    if (sa->n_held == sa->cap_held) {
        int64_t c = sa->cap_held * 2 + 8;
        int64_t *nb = realloc(sa->held_batch, (size_t)c * sizeof *nb);
        if (nb) sa->held_batch = nb;
        double *nh = nb ? realloc(sa->held, (size_t)(c * B) * sizeof *nh) : NULL;
        if (!nh)
            return ah_fail(err, AH_ENOMEM, "out of memory: the SAEs' partials of %lld batches",
                           (long long)c);
        sa->held = nh;
        sa->cap_held = c;
    }
    memcpy(sa->held + sa->n_held * B, sa->part, (size_t)B * sizeof *sa->held);
    sa->held_batch[sa->n_held++] = bt->k;
    return 0;
}

// rank 0 of the stage: the gathered partials v (total, Lsum) written per SAE into seg_path
static int write_gathered(const struct saes *sa, const char *seg_path, const int64_t *batch,
                          int total, const double *v, struct ah_error *err) {
    const char **names = calloc((size_t)sa->n + 1, sizeof *names);
    const double **vals = calloc((size_t)sa->n + 1, sizeof *vals);
    int64_t *L = calloc((size_t)sa->n + 1, sizeof *L);
    double *per = malloc(((size_t)total * (size_t)sa->Lsum + 1) * sizeof *per);
    int rc = 0;
    if (!names || !vals || !L || !per)
        rc = ah_fail(err, AH_ENOMEM, "out of memory: %d batches' SAE partials", total);
    for (int k = 0, off = 0; rc == 0 && k < sa->n; k++) { // (n, Lsum) -> per SAE (n, L)
        L[k] = sa->r[k].z.L;
        double *dst = per + (size_t)total * (size_t)off;
        for (int i = 0; i < total; i++)
            memcpy(dst + (size_t)i * (size_t)L[k], v + (size_t)i * (size_t)sa->Lsum + off,
                   (size_t)L[k] * sizeof *per);
        names[k] = sa->pl->j.saes[sa->of[k]].name;
        vals[k] = dst;
        off += (int)L[k];
    }
    if (rc == 0) rc = h5sae_write_partials(seg_path, batch, total, sa->n, names, vals, L, err);
    free(names), free(vals), free(L), free(per);
    return rc;
}

// Collective over the stage (comm): the partials held since the last flush go into the closed
// segment `file` of the output at out_path, written by comm's rank 0 (as the norm profile's)
static int saes_segment(void *u, const struct out_ops *out, MPI_Comm comm, const char *out_path,
                        const char *file, struct ah_error *err) {
    (void)out; // one format today; the partials are HDF5 (io/h5sae.c)
    struct saes *sa = u;
    char seg_path[4400];
    out_parts_path(seg_path, sizeof seg_path, out_path, file);
    int me = 0, size = 1, rc = 0, total = 0, mine = (int)sa->n_held;
    CHECK_MPI(MPI_Comm_rank(comm, &me));
    CHECK_MPI(MPI_Comm_size(comm, &size));
    int B = (int)sa->Lsum;
    int *cnt = NULL, *dsp = NULL, *cntv = NULL, *dspv = NULL;
    int64_t *batch = NULL;
    double *v = NULL;
    if (me == 0) {
        cnt = calloc((size_t)size, sizeof *cnt), dsp = calloc((size_t)size, sizeof *dsp);
        cntv = calloc((size_t)size, sizeof *cntv), dspv = calloc((size_t)size, sizeof *dspv);
        if (!cnt || !dsp || !cntv || !dspv) rc = -AH_ENOMEM;
    }
    CHECK_MPI(MPI_Gather(&mine, 1, MPI_INT, cnt, 1, MPI_INT, 0, comm));
    for (int m = 0; me == 0 && rc == 0 && m < size; m++) {
        dsp[m] = total, cntv[m] = cnt[m] * B, dspv[m] = total * B;
        total += cnt[m];
    }
    if (me == 0 && rc == 0) {
        batch = malloc(((size_t)total + 1) * sizeof *batch);
        v = malloc(((size_t)total * (size_t)B + 1) * sizeof *v);
        if (!batch || !v) rc = -AH_ENOMEM;
    }
    if (rc < 0) ah_fail(err, AH_ENOMEM, "out of memory: %d batches' SAE partials", total);
    CHECK_MPI(MPI_Bcast(&rc, 1, MPI_INT, 0, comm)); // no one sends to a rank 0 without room
    if (rc < 0) goto done;
    CHECK_MPI(
        MPI_Gatherv(sa->held_batch, mine, MPI_INT64_T, batch, cnt, dsp, MPI_INT64_T, 0, comm));
    CHECK_MPI(MPI_Gatherv(sa->held, mine * B, MPI_DOUBLE, v, cntv, dspv, MPI_DOUBLE, 0, comm));
    if (me == 0) rc = write_gathered(sa, seg_path, batch, total, v, err);
done:
    sa->n_held = 0;
    free(cnt), free(dsp), free(cntv), free(dspv), free(batch), free(v);
    for (int k = 0; k < sa->n; k++) { // every rank, whatever failed: each flush is collective
        struct ah_error e = {0};
        int r = saelat_flush(&sa->r[k].lat, comm, seg_path, sa->pl->j.saes[sa->of[k]].name, &e);
        if (r < 0 && rc == 0) rc = r, *err = e;
    }
    return rc;
}

// the SAEs whose site this rank's stage computes, opened, with their partials and scratch
static int saes_open(struct saes *sa, const struct grid *g, struct ah_error *err) {
    const struct plan *pl = sa->pl;
    int n = pl->j.n_saes, rc = 0;
    int64_t Cmax = 1, Dmax = 1, S = pl->place.S;
    sa->r = calloc((size_t)n + 1, sizeof *sa->r);
    sa->of = calloc((size_t)n + 1, sizeof *sa->of);
    sa->want = calloc((size_t)pl->m.n_cat + 1, 1);
    if (!sa->r || !sa->of || !sa->want) return ah_fail(err, AH_ENOMEM, "out of memory: the SAEs");
    for (int i = 0; rc == 0 && i < n; i++) {
        int id = site_of(pl, i, err);
        if (id < 0) return id;
        if (!stage_computes(pl, g, pl->m.cat[id].block)) continue;
        struct sae_run *r = &sa->r[sa->n];
        r->f.st.fd = -1;
        if ((rc = sae_of(pl, i, id, &r->f, err)) < 0) return rc;
        r->id = id;
        sa->of[sa->n++] = i;
        sa->want[id] = g->shard == 0;
        dims_of(&r->z, r->f.s.d_sae, r->f.s.d_in, pl->j.saes[i].top_n);
        sa->Lsum += r->z.L;
        Cmax = r->z.C > Cmax ? r->z.C : Cmax;
        Dmax = r->z.D > Dmax ? r->z.D : Dmax;
    }
    if (sa->n == 0) return 0;
    sa->part = malloc((size_t)sa->Lsum * sizeof *sa->part);
    for (int k = 0, off = 0; sa->part && k < sa->n; off += (int)sa->r[k++].z.L)
        sa->r[k].part = sa->part + off;
    size_t SC = (size_t)(S * Cmax), SD = (size_t)(S * Dmax);
    sa->x = malloc(SC * sizeof *sa->x), sa->u = malloc(SC * sizeof *sa->u);
    sa->y = malloc(SC * sizeof *sa->y), sa->nrm = malloc((size_t)(2 * S) * sizeof *sa->nrm);
    sa->pre = malloc(SD * sizeof *sa->pre), sa->val = malloc(SD * sizeof *sa->val);
    sa->idx = malloc(SD * sizeof *sa->idx);
    sa->indptr = malloc((size_t)(S + 1) * sizeof *sa->indptr);
    sa->pos = malloc((size_t)S * sizeof *sa->pos);
    if (!sa->part || !sa->x || !sa->u || !sa->y || !sa->nrm || !sa->pre || !sa->val || !sa->idx ||
        !sa->indptr || !sa->pos)
        return ah_fail(err, AH_ENOMEM, "out of memory: the SAEs' buffers (%lld x %lld floats)",
                       (long long)S, (long long)Dmax);
    return 0;
}

// Every rank of a stage that computes an SAE's site has one (to join the segment flushes); its
// expert shard 0 takes the views.
static int saes_make(struct consumer *c, const struct consumer_env *env, struct ah_error *err) {
    const struct plan *pl = env->pl;
    if (pl->j.n_saes == 0) return 0;
    struct saes *sa = calloc(1, sizeof *sa);
    if (!sa) return ah_fail(err, AH_ENOMEM, "out of memory: the SAEs");
    sa->pl = pl;
    int rc = saes_open(sa, env->g, err);
    if (rc < 0 || sa->n == 0 || env->g->scomm == MPI_COMM_NULL) {
        saes_free(sa);
        return rc;
    }
    sa->takes = env->g->shard == 0;
    *c = (struct consumer){.name = "saes",
                           .want = sa->want,
                           .begin = saes_begin,
                           .take = saes_take,
                           .end = saes_end,
                           .segment = saes_segment,
                           .free = saes_free,
                           .u = sa};
    return 0;
}

// ---------------------------------------------------------------------------------------------
// the final merge (rank 0, every batch in)

struct sentry {
    int64_t batch, row;
    int rec;
};

static int cmp_sentry(const void *a, const void *b) {
    const struct sentry *x = a, *y = b;
    return x->batch != y->batch ? (x->batch < y->batch ? -1 : 1) : x->rec - y->rec;
}

// whether record r lists prompt p's rows (a batch trimmed on resume is not listed)
static bool lists_prompt(const struct h5out_record *r, int64_t p) {
    for (int j = 0; j < r->n_runs; j++)
        if (p >= r->runs[j].p0 && p < r->runs[j].p1) return true;
    return false;
}

// every listed batch partial of SAE `name`: (*e, *n) malloc'd, sorted
static int sae_entries(const struct plan *pl, const struct h5out_record *rec, int n_rec,
                       const char *name, struct sentry **e, int64_t *n, struct ah_error *err) {
    int64_t cap = 0;
    *e = NULL;
    *n = 0;
    char path[4400];
    for (int r = 0; r < n_rec; r++) {
        out_parts_path(path, sizeof path, pl->j.out_path, rec[r].file);
        int64_t *b = NULL, m = 0;
        if (h5sae_batches(path, name, &b, &m) < 0)
            return ah_fail(err, AH_EIO, "%s: cannot read the SAE partials of \"%s\"", path, name);
        if (*n + m > cap) {
            struct sentry *ne = realloc(*e, (size_t)(cap = 2 * cap + m) * sizeof *ne);
            if (!ne) {
                free(b);
                return ah_fail(err, AH_ENOMEM, "out of memory: the SAE partials");
            }
            *e = ne;
        }
        for (int64_t j = 0; j < m; j++)
            if (lists_prompt(&rec[r], b[j] * pl->place.B))
                (*e)[(*n)++] = (struct sentry){b[j], j, r};
        free(b);
    }
    qsort(*e, (size_t)*n, sizeof **e, cmp_sentry);
    return 0;
}

// the batch partials of entries e merged, batch after batch, into total
static int sae_fold(const struct plan *pl, const struct h5out_record *rec, const struct sentry *e,
                    int64_t n, const char *name, const struct sdims *z, double *total,
                    struct ah_error *err) {
    double *buf = malloc((size_t)z->L * sizeof *buf);
    if (!buf) return ah_fail(err, AH_ENOMEM, "out of memory: the SAE partials");
    part_reset(z, total);
    struct h5sae_src src;
    h5sae_src_init(&src);
    char path[4400];
    int64_t next = 0;
    int rc = 0;
    for (int64_t i = 0; rc == 0 && i < n; i++) {
        if (e[i].batch < next) continue; // a batch listed twice: its first listing
        if (e[i].batch > next) break;
        out_parts_path(path, sizeof path, pl->j.out_path, rec[e[i].rec].file);
        if (h5sae_read_row(&src, path, name, e[i].row, z->L, buf) < 0)
            rc = ah_fail(err, AH_EIO, "%s: cannot read the SAE partials of \"%s\"", path, name);
        else
            part_merge(z, total, buf);
        next++;
    }
    if (rc == 0 && next < pl->place.K)
        rc = ah_fail(err, AH_EIO,
                     "%s: no listed segment holds the partials of SAE \"%s\" for batch %lld",
                     pl->j.out_path, name, (long long)next);
    h5sae_src_close(&src);
    free(buf);
    return rc;
}

static const char *arch_name(const struct sae *s) {
    return s->arch == SAE_TOPK ? "topk" : s->arch == SAE_JUMPRELU ? "jumprelu" : "relu";
}

// a merged partial p as the master stores it: arrays in *i64 and *f64 (malloc'd)
static int sae_item(const struct sdims *z, const double *p, const struct sae_file *f,
                    struct h5sae_item *it, int64_t **i64, double **f64) {
    int64_t D = z->D, N = z->N;
    *i64 = malloc((size_t)(D * 3 + 1 + D * N) * sizeof **i64);
    *f64 = malloc((size_t)(D * 3 + D * N) * sizeof **f64);
    if (!*i64 || !*f64) return -AH_ENOMEM;
    int64_t *cnt = *i64, *hist = cnt + D, *nex = hist + D + 1, *pos = nex + D;
    double *sum = *f64, *sq = sum + D, *mx = sq + D, *val = mx + D;
    double n_tok = p[z->ntok], l0 = 0, tv = 0;
    int64_t dead = 0, dense = 0;
    for (int64_t j = 0; j < D; j++) {
        cnt[j] = (int64_t)p[z->cnt + j], nex[j] = (int64_t)p[z->nex + j];
        sum[j] = p[z->sum + j], sq[j] = p[z->sq + j], mx[j] = p[z->max + j];
        dead += cnt[j] == 0;
        dense += n_tok > 0 && (double)cnt[j] > SAE_DENSE * n_tok;
        const double *ex = p + z->ex + 2 * N * j;
        for (int64_t e = 0; e < N; e++) {
            val[j * N + e] = e < nex[j] ? ex[2 * e] : (double)NAN;
            pos[j * N + e] = e < nex[j] ? (int64_t)ex[2 * e + 1] : -1;
        }
    }
    for (int64_t i = 0; i <= D; i++) {
        hist[i] = (int64_t)p[z->hist + i];
        l0 += (double)i * p[z->hist + i];
    }
    for (int64_t c = 0; c < z->C; c++)
        tv += p[z->sxx + c] - p[z->sx + c] * p[z->sx + c] / n_tok;
    *it = (struct h5sae_item){.layout = sae_layout_name(f->layout),
                              .arch = arch_name(&f->s),
                              .d_in = z->C,
                              .d_sae = D,
                              .k = f->s.arch == SAE_TOPK ? f->s.k : 0,
                              .top_n = N,
                              .n_tokens = (int64_t)n_tok,
                              .sse = p[z->sse],
                              .total_var = n_tok > 0 ? tv : (double)NAN,
                              .fvu = n_tok > 0 ? p[z->sse] / tv : (double)NAN,
                              .l0_mean = n_tok > 0 ? l0 / n_tok : (double)NAN,
                              .dense_threshold = SAE_DENSE,
                              .n_dead = dead,
                              .n_dense = dense,
                              .count = cnt,
                              .sum = sum,
                              .sum_sq = sq,
                              .max = mx,
                              .l0_hist = hist,
                              .ex_count = nex,
                              .ex_value = val,
                              .ex_position = pos};
    return 0;
}

// SAE i of the job folded from the listed segments into item it (arrays in *i64, *f64)
static int sae_result(const struct plan *pl, int i, const struct h5out_record *rec, int n_rec,
                      struct h5sae_item *it, int64_t **i64, double **f64, struct ah_error *err) {
    const struct job_sae *js = &pl->j.saes[i];
    struct sae_file f;
    memset(&f, 0, sizeof f);
    f.st.fd = -1;
    int id = site_of(pl, i, err), rc = id < 0 ? id : sae_of(pl, i, id, &f, err);
    if (rc < 0) return rc;
    struct sdims z;
    dims_of(&z, f.s.d_sae, f.s.d_in, js->top_n);
    struct sentry *e = NULL;
    int64_t ne = 0;
    double *total = malloc((size_t)z.L * sizeof *total);
    if (!total) rc = ah_fail(err, AH_ENOMEM, "out of memory: the SAE \"%s\"", js->name);
    if (rc == 0) rc = sae_entries(pl, rec, n_rec, js->name, &e, &ne, err);
    if (rc == 0) rc = sae_fold(pl, rec, e, ne, js->name, &z, total, err);
    if (rc == 0 && sae_item(&z, total, &f, it, i64, f64) < 0)
        rc = ah_fail(err, AH_ENOMEM, "out of memory: the SAE \"%s\"", js->name);
    if (rc == 0) {
        it->name = js->name;
        it->on = pl->m.cat[id].name;
        it->path = js->path;
    }
    free(e), free(total);
    sae_close(&f);
    return rc;
}

static int saes_final(const struct plan *pl, const struct out_ops *out,
                      const struct h5out_record *rec, int n_rec, bool if_missing,
                      struct ah_error *err) {
    (void)out; // the results are stored through io/h5sae.c
    int n = pl->j.n_saes, rc = 0;
    if (n == 0) return 0;
    if (if_missing && h5prof_has_group(pl->j.out_path, "saes")) return 0;
    struct h5sae_item *items = calloc((size_t)n, sizeof *items);
    int64_t **i64 = calloc((size_t)n, sizeof *i64);
    double **f64 = calloc((size_t)n, sizeof *f64);
    if (!items || !i64 || !f64) rc = ah_fail(err, AH_ENOMEM, "out of memory: the SAEs");
    for (int i = 0; rc == 0 && i < n; i++)
        rc = sae_result(pl, i, rec, n_rec, &items[i], &i64[i], &f64[i], err);
    if (rc == 0) rc = h5sae_store(pl->j.out_path, items, n, err);
    for (int k = 0; k < n && i64 && f64; k++)
        free(i64[k]), free(f64[k]);
    free(items), free(i64), free(f64);
    return rc;
}

const struct consumer_kind saes_kind = {"saes", saes_check, saes_make, saes_final};

// ---------------------------------------------------------------------------------------------
// the hooks of the splice-in evaluation (saeval.c)

int saes_site(const struct plan *pl, int i, struct ah_error *err) {
    return site_of(pl, i, err);
}

int saes_open_sae(const struct plan *pl, int i, int id, struct sae_file *f, struct ah_error *err) {
    return sae_of(pl, i, id, f, err);
}
