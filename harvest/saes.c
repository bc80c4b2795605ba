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
// The partial layout: harvest/saepart.h.
#include "harvest/partials.h" // parts_hold, parts_gather, parts_fold_listed
#include "harvest/run.h"
#include "harvest/saelat.h"
#include "harvest/saepart.h" // struct sdims, saepart_*
#include "harvest/saeval.h"  // saes_site, saes_open_sae (the evaluation's hooks)
#include "io/h5profile.h"    // h5prof_has_group
#include "io/h5sae.h"
#include "io/output.h" // out_parts_path
#include "io/sae.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SAE_DENSE 0.1 // a latent firing on more than this fraction of the tokens is dense
// sae_pre's (rows, d_sae) buffer holds at most this many floats (64 MiB): a view of more rows
// is encoded in chunks of rows (env AH_SAE_ROWS, a test hook, sets the rows a chunk)
#define SAE_PRE_FLOATS ((int64_t)1 << 24)
// a chunk's rows, a multiple of this: OpenBLAS's kernels compute a row by its place in the call
// modulo their row block, so that a chunk of other rows can change its last bits (OpenBLAS
// 0.3.21's AVX2 kernels, Haswell and Zen: chunks of 16 rows do); with chunks of a multiple of 48
// rows, each row gets the bits of one GEMM over the whole view on every core of 0.3.21 measured
#define SAE_ROW_BLOCK 48

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
// the consumer

struct sae_run {
    int id;            // catalogue id of its site
    struct sae_file f; // the SAE; owned
    struct sdims z;
    double *part;       // (L) the batch in hand; points into saes.part
    double *tab;        // (D, N, 2) its exemplar table; owned
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
    struct parts_held held; // batches since the last flush: (n, Lsum) their partials
    double *held_ex;        // (n_ex, 2) their exemplars, batch after batch, SAE after SAE
    int64_t n_ex, cap_ex;
    int64_t rows; // rows encoded at once (sae_pre's (rows, d_sae) buffer)
};

static void saes_free(void *u) {
    struct saes *sa = u;
    if (!sa) return;
    for (int k = 0; sa->r && k < sa->n; k++)
        sae_close(&sa->r[k].f), saelat_free(&sa->r[k].lat), free(sa->r[k].tab);
    free(sa->r), free(sa->of), free(sa->want), free(sa->part);
    free(sa->x), free(sa->u), free(sa->y), free(sa->nrm), free(sa->pre), free(sa->val);
    free(sa->idx), free(sa->indptr), free(sa->pos);
    parts_held_free(&sa->held), free(sa->held_ex);
    free(sa);
}

// one SAE over rows [r0, r0 + n) of the view gathered in sa->x (positions sa->pos)
static int encode_chunk(struct saes *sa, struct sae_run *r, int64_t r0, int64_t n,
                        struct ah_error *err) {
    const struct sae *s = &r->f.s;
    int64_t C = s->d_in;
    const float *x = sa->x + r0 * C;
    float *nrm = s->norm != SAE_NORM_NONE ? sa->nrm : NULL;
    sae_pre(sa->pre, sa->u, nrm, x, s, n);
    sae_count(sa->indptr, sa->pre, s, n);
    sae_fill(sa->idx, sa->val, sa->indptr, sa->pre, s, n);
    sae_decode(sa->y, sa->indptr, sa->idx, sa->val, nrm, s, n);
    for (int64_t t = 0; t < n; t++) {
        int64_t e0 = sa->indptr[t], e1 = sa->indptr[t + 1];
        saepart_token(&r->z, r->part, r->tab, sa->pos[r0 + t], x + t * C, sa->y + t * C,
                      sa->idx + e0, sa->val + e0, e1 - e0);
    }
    return saelat_add(&r->lat, n, sa->pos + r0, sa->indptr, sa->idx, sa->val, err);
}

// one SAE over the n kept rows of a view gathered in sa->x: sa->rows at a time (a view of a
// few rows, as every view unless d_sae is large, is one GEMM)
static int encode_rows(struct saes *sa, struct sae_run *r, int64_t n, struct ah_error *err) {
    int rc = 0;
    for (int64_t r0 = 0; rc == 0 && r0 < n; r0 += sa->rows)
        rc = encode_chunk(sa, r, r0, n - r0 < sa->rows ? n - r0 : sa->rows, err);
    return rc;
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
        saepart_reset(&sa->r[k].z, sa->r[k].part);
        if (rc == 0 && sa->takes) rc = saelat_begin(&sa->r[k].lat, bt->k, err);
    }
    return rc;
}

// the exemplars of the batch in hand, packed onto held_ex (SAE after SAE)
static int hold_ex(struct saes *sa, struct ah_error *err) {
    int64_t m = 0;
    for (int k = 0; k < sa->n; k++)
        m += saepart_ex_count(&sa->r[k].z, sa->r[k].part);
    if (sa->n_ex + m > sa->cap_ex) {
        int64_t c = 2 * sa->cap_ex + m + 64;
        double *ne = realloc(sa->held_ex, (size_t)(2 * c) * sizeof *ne);
        if (!ne)
            return ah_fail(err, AH_ENOMEM, "out of memory: the SAEs' exemplars of %lld batches",
                           (long long)sa->held.n + 1);
        sa->held_ex = ne, sa->cap_ex = c;
    }
    for (int k = 0; k < sa->n; k++)
        sa->n_ex +=
            saepart_ex_pack(&sa->r[k].z, sa->r[k].part, sa->r[k].tab, sa->held_ex + 2 * sa->n_ex);
    return 0;
}

static int saes_end(void *u, const struct cbatch *bt, struct ah_error *err) {
    struct saes *sa = u;
    if (!sa->takes) return 0;
    int rc = hold_ex(sa, err);
    if (rc < 0) return rc;
    double *at = parts_hold(&sa->held, bt->k, "the SAEs' partials", err);
    if (!at) return -AH_ENOMEM;
    memcpy(at, sa->part, (size_t)sa->Lsum * sizeof *at);
    return 0;
}

// Collective over comm: every rank's held exemplars to comm's rank 0 (*gx malloc'd there, *n_gx
// pairs), rank after rank. 0, or -AH_ENOMEM on every rank.
static int gather_ex(const struct saes *sa, MPI_Comm comm, int me, int size, double **gx,
                     int64_t *n_gx) {
    long long mine = (long long)(2 * sa->n_ex), tot = 0, *all = NULL;
    int *cnt = NULL, *dsp = NULL, rc = 0;
    if (me == 0) {
        all = calloc((size_t)size, sizeof *all);
        cnt = calloc((size_t)size, sizeof *cnt), dsp = calloc((size_t)size, sizeof *dsp);
        if (!all || !cnt || !dsp) rc = -AH_ENOMEM;
    }
    CHECK_MPI(MPI_Gather(&mine, 1, MPI_LONG_LONG, all, 1, MPI_LONG_LONG, 0, comm));
    for (int m = 0; me == 0 && rc == 0 && m < size; m++) {
        if (tot + all[m] > INT_MAX) rc = -AH_ENOMEM; // MPI counts are int: a shorter segment
        cnt[m] = (int)all[m], dsp[m] = (int)tot;
        tot += all[m];
    }
    if (me == 0 && rc == 0 && !(*gx = malloc(((size_t)tot + 1) * sizeof **gx))) rc = -AH_ENOMEM;
    CHECK_MPI(MPI_Bcast(&rc, 1, MPI_INT, 0, comm));
    if (rc == 0)
        CHECK_MPI(
            MPI_Gatherv(sa->held_ex, (int)mine, MPI_DOUBLE, *gx, cnt, dsp, MPI_DOUBLE, 0, comm));
    *n_gx = tot / 2;
    free(all), free(cnt), free(dsp);
    return rc;
}

// the gathered exemplars gx, rank after rank, batch after batch, SAE after SAE, split per SAE
// into exs[k] (E[k] pairs, each from pex), and each row's ex_off in per[k] (total, L[k]) set
static void split_ex(const struct saes *sa, int total, double *const *per, const double *gx,
                     double *pex, double **exs, int64_t *E) {
    for (int k = 0; k < sa->n; k++) {
        E[k] = 0;
        for (int i = 0; i < total; i++)
            E[k] += saepart_ex_count(&sa->r[k].z, per[k] + (size_t)i * (size_t)sa->r[k].z.L);
        exs[k] = pex;
        pex += 2 * E[k];
        E[k] = 0;
    }
    for (int i = 0; i < total; i++)
        for (int k = 0; k < sa->n; k++) {
            const struct sdims *z = &sa->r[k].z;
            double *row = per[k] + (size_t)i * (size_t)z->L;
            int64_t m = saepart_ex_count(z, row);
            row[z->exo] = (double)E[k];
            memcpy(exs[k] + 2 * E[k], gx, (size_t)(2 * m) * sizeof *gx);
            gx += 2 * m, E[k] += m;
        }
}

// rank 0 of the stage: the gathered partials v (total, Lsum) and exemplars gx (n_gx pairs)
// written per SAE into seg_path
static int write_gathered(const struct saes *sa, const char *seg_path, const int64_t *batch,
                          int total, const double *v, const double *gx, int64_t n_gx,
                          struct ah_error *err) {
    const char **names = calloc((size_t)sa->n + 1, sizeof *names);
    double **vals = calloc((size_t)sa->n + 1, sizeof *vals);
    double **exs = calloc((size_t)sa->n + 1, sizeof *exs);
    int64_t *L = calloc((size_t)sa->n + 1, sizeof *L), *E = calloc((size_t)sa->n + 1, sizeof *E);
    double *per = malloc(((size_t)total * (size_t)sa->Lsum + 1) * sizeof *per);
    double *pex = malloc(((size_t)(2 * n_gx) + 1) * sizeof *pex);
    int rc = 0;
    if (!names || !vals || !exs || !L || !E || !per || !pex)
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
    if (rc == 0) split_ex(sa, total, vals, gx, pex, exs, E);
    if (rc == 0)
        rc = h5sae_write_partials(seg_path, batch, total, sa->n, names, (const double *const *)vals,
                                  L, (const double *const *)exs, E, err);
    free(names), free(vals), free(exs), free(L), free(E), free(per), free(pex);
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
    int me = 0, size = 1, total = 0;
    CHECK_MPI(MPI_Comm_rank(comm, &me));
    CHECK_MPI(MPI_Comm_size(comm, &size));
    int64_t *batch = NULL, n_gx = 0;
    double *v = NULL, *gx = NULL;
    int rc = parts_gather(&sa->held, comm, &batch, &v, &total, "SAE partials", err);
    if (rc == 0 && (rc = gather_ex(sa, comm, me, size, &gx, &n_gx)) < 0)
        ah_fail(err, AH_ENOMEM,
                "out of memory: the exemplars of %d batches' SAE partials (a "
                "shorter output.checkpoint_seconds holds fewer)",
                total);
    else if (rc == 0 && me == 0)
        rc = write_gathered(sa, seg_path, batch, total, v, gx, n_gx, err);
    sa->held.n = 0, sa->n_ex = 0;
    free(batch), free(v), free(gx);
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
        saepart_dims(&r->z, r->f.s.d_sae, r->f.s.d_in, pl->j.saes[i].top_n);
        r->tab = malloc((size_t)(2 * r->z.D * r->z.N) * sizeof *r->tab);
        if (!r->tab) return ah_fail(err, AH_ENOMEM, "out of memory: the SAEs' exemplars");
        sa->Lsum += r->z.L;
        Cmax = r->z.C > Cmax ? r->z.C : Cmax;
        Dmax = r->z.D > Dmax ? r->z.D : Dmax;
    }
    if (sa->n == 0) return 0;
    parts_held_init(&sa->held, sa->Lsum);
    sa->part = malloc((size_t)sa->Lsum * sizeof *sa->part);
    for (int k = 0, off = 0; sa->part && k < sa->n; off += (int)sa->r[k++].z.L)
        sa->r[k].part = sa->part + off;
    const char *rows = getenv("AH_SAE_ROWS");
    sa->rows = rows && atoll(rows) > 0 ? atoll(rows) : SAE_PRE_FLOATS / Dmax;
    sa->rows = sa->rows < SAE_ROW_BLOCK ? SAE_ROW_BLOCK : sa->rows / SAE_ROW_BLOCK * SAE_ROW_BLOCK;
    sa->rows = sa->rows > S ? S : sa->rows;
    size_t SC = (size_t)(S * Cmax), SD = (size_t)(sa->rows * Dmax);
    sa->x = malloc(SC * sizeof *sa->x), sa->u = malloc(SC * sizeof *sa->u);
    sa->y = malloc(SC * sizeof *sa->y), sa->nrm = malloc((size_t)(2 * S) * sizeof *sa->nrm);
    sa->pre = malloc(SD * sizeof *sa->pre), sa->val = malloc(SD * sizeof *sa->val);
    sa->idx = malloc(SD * sizeof *sa->idx);
    sa->indptr = malloc((size_t)(S + 1) * sizeof *sa->indptr);
    sa->pos = malloc((size_t)S * sizeof *sa->pos);
    if (!sa->part || !sa->x || !sa->u || !sa->y || !sa->nrm || !sa->pre || !sa->val || !sa->idx ||
        !sa->indptr || !sa->pos)
        return ah_fail(err, AH_ENOMEM, "out of memory: the SAEs' buffers (%lld x %lld floats)",
                       (long long)sa->rows, (long long)Dmax);
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

// the fold of one SAE's partials: what sae_batches and sae_row share
struct sfold {
    const struct plan *pl;
    const struct h5out_record *rec;
    const char *name;
    const struct sdims *z;
    double *total, *tex; // (L), (D, N, 2): the merged partial and its exemplar table
    double *buf, *bex;   // (L), (D N, 2): a batch's partial and its exemplars, read back
    struct h5sae_src src;
};

static int sae_batches(void *u, const struct h5out_record *r, int64_t **b, int64_t *m,
                       struct ah_error *err) {
    const struct sfold *f = u;
    char path[4400];
    out_parts_path(path, sizeof path, f->pl->j.out_path, r->file);
    if (h5sae_batches(path, f->name, b, m) < 0)
        return ah_fail(err, AH_EIO, "%s: cannot read the SAE partials of \"%s\"", path, f->name);
    return 0;
}

static int sae_row(void *u, const struct part_entry *x, struct ah_error *err) {
    struct sfold *f = u;
    const struct sdims *z = f->z;
    char path[4400];
    out_parts_path(path, sizeof path, f->pl->j.out_path, f->rec[x->rec].file);
    int64_t m = 0;
    bool ok = h5sae_read_row(&f->src, path, f->name, x->row, z->L, f->buf) == 0;
    if (ok) m = saepart_ex_count(z, f->buf);
    ok = ok && m <= z->D * z->N &&
         h5sae_read_ex(&f->src, path, f->name, (int64_t)f->buf[z->exo], m, f->bex) == 0;
    if (!ok)
        return ah_fail(err, AH_EIO, "%s: cannot read the SAE partials of \"%s\"", path, f->name);
    saepart_merge(z, f->total, f->tex, f->buf, f->bex);
    return 0;
}

// every listed batch partial of SAE `name` merged, batch after batch, into total (exemplar
// table tex)
static int sae_fold(const struct plan *pl, const struct h5out_record *rec, int n_rec,
                    const char *name, const struct sdims *z, double *total, double *tex,
                    struct ah_error *err) {
    struct sfold f = {.pl = pl, .rec = rec, .name = name, .z = z, .total = total, .tex = tex};
    f.buf = malloc((size_t)z->L * sizeof *f.buf);
    f.bex = malloc(((size_t)(2 * z->D * z->N) + 1) * sizeof *f.bex);
    int64_t missing = -1;
    int rc = f.buf && f.bex ? 0 : ah_fail(err, AH_ENOMEM, "out of memory: the SAE partials");
    if (rc == 0) saepart_reset(z, total);
    h5sae_src_init(&f.src);
    if (rc == 0)
        rc = parts_fold_listed(rec, n_rec, pl->place.B, pl->place.K, sae_batches, sae_row, &f,
                               "the SAE partials", &missing, err);
    if (rc == 0 && missing >= 0)
        rc = ah_fail(err, AH_EIO,
                     "%s: no listed segment holds the partials of SAE \"%s\" for batch %lld",
                     pl->j.out_path, name, (long long)missing);
    h5sae_src_close(&f.src);
    free(f.buf), free(f.bex);
    return rc;
}

static const char *arch_name(const struct sae *s) {
    return s->arch == SAE_TOPK ? "topk" : s->arch == SAE_JUMPRELU ? "jumprelu" : "relu";
}

// a merged partial p (exemplar table tab) as the master stores it: arrays in *i64 and *f64
// (malloc'd)
static int sae_item(const struct sdims *z, const double *p, const double *tab,
                    const struct sae_file *f, struct h5sae_item *it, int64_t **i64, double **f64) {
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
        const double *ex = tab + 2 * N * j;
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
    saepart_dims(&z, f.s.d_sae, f.s.d_in, js->top_n);
    double *total = malloc((size_t)z.L * sizeof *total);
    double *tex = malloc(((size_t)(2 * z.D * z.N) + 1) * sizeof *tex);
    if (!total || !tex) rc = ah_fail(err, AH_ENOMEM, "out of memory: the SAE \"%s\"", js->name);
    if (rc == 0) rc = sae_fold(pl, rec, n_rec, js->name, &z, total, tex, err);
    if (rc == 0 && sae_item(&z, total, tex, &f, it, i64, f64) < 0)
        rc = ah_fail(err, AH_ENOMEM, "out of memory: the SAE \"%s\"", js->name);
    if (rc == 0) {
        it->name = js->name;
        it->on = pl->m.cat[id].name;
        it->path = js->path;
        it->ctx_before = js->ctx_before, it->ctx_after = js->ctx_after;
    }
    free(total), free(tex);
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
