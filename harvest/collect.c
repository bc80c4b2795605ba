// collect.c - the tap consumer: turns one prompt's view into stored rows and writes them.
//
// prompt layout: the view (1, ...) goes to row `prompt` as the leading corner of the padded row
//                (sequence axes padded to S, global+local-key to 2S); padding is NaN or 0.
// token layout:  the view's one sequence axis moves to the front: (1, A.., T, B..) -> (T, A.., B..)
//                at rows token_offset .. token_offset + T; under "select" only the chosen
//                positions, at the prompt's stored rows (harvest/run.h st_off).
#include "harvest/writer.h" // writer_rows; harvest/run.h: struct plan, struct grid

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct collector {
    struct writer *w;               // borrowed
    const struct placement *pc;     // where rows go (harvest/rounds.h); borrowed
    const struct h5out_dset *dsets; // borrowed
    const int *dset_of_id;          // (n_cat) dataset index of a catalogue id, or -1
    enum job_layout layout;
    uint8_t *want; // (n_cat) this stage's datasets; owned
    float *buf;    // padded/transposed row; owned
    size_t buf_bytes;
    struct ah_error *err; // where a failure's message goes (the take's)
};

static void *scratch(struct collector *c, size_t bytes) {
    if (bytes > c->buf_bytes) {
        free(c->buf);
        c->buf = malloc(bytes);
        c->buf_bytes = c->buf ? bytes : 0;
        if (!c->buf) ah_fail(c->err, AH_ENOMEM, "out of memory: a row buffer of %zu bytes", bytes);
    }
    return c->buf;
}

// Copies a contiguous src (nd dims sd) into the leading corner of a contiguous dst (dims dd).
static void copy_corner(char *dst, const char *src, int nd, const int64_t *sd, const int64_t *dd,
                        size_t es) {
    int64_t dstride[TAP_MAX_DIMS], idx[TAP_MAX_DIMS] = {0};
    dstride[nd - 1] = 1;
    for (int k = nd - 2; k >= 0; k--)
        dstride[k] = dstride[k + 1] * dd[k + 1];
    int64_t outer = 1;
    for (int k = 0; k < nd - 1; k++)
        outer *= sd[k];
    size_t run = (size_t)sd[nd - 1] * es;
    for (int64_t o = 0; o < outer; o++) {
        int64_t doff = 0;
        for (int k = 0; k < nd - 1; k++)
            doff += idx[k] * dstride[k];
        memcpy(dst + (size_t)doff * es, src + (size_t)o * run, run);
        for (int k = nd - 2; k >= 0; k--) { // odometer over the outer dims of src
            if (++idx[k] < sd[k]) break;
            idx[k] = 0;
        }
    }
}

static int take_prompt(struct collector *c, int di, const struct ctake *t, const struct tview *v) {
    const struct h5out_dset *d = &c->dsets[di];
    size_t es = tap_dtype_size(v->dtype);
    int nd = v->ndim - 1; // without the batch axis
    int64_t elems = 1;
    bool same = true;
    for (int k = 0; k < nd; k++) {
        elems *= d->dims[k + 1];
        same = same && v->dims[k + 1] == d->dims[k + 1];
    }
    const void *row = v->data;
    if (!same) {
        char *buf = scratch(c, (size_t)elems * es);
        if (!buf) return -AH_ENOMEM;
        if (v->dtype == TAP_F32)
            for (int64_t i = 0; i < elems; i++)
                ((float *)(void *)buf)[i] = NAN;
        else
            memset(buf, 0, (size_t)elems * es);
        copy_corner(buf, v->data, nd, v->dims + 1, d->dims + 1, es);
        row = buf;
    }
    return writer_rows(c->w, di, place_prompt_row(c->pc, t->bt->k, t->b, false), 1, row, c->err);
}

static int take_token(struct collector *c, int di, const struct ctake *t, const struct tview *v) {
    int k = tview_seq_axis(c->dsets[di].desc, v);
    int64_t T = v->dims[k], outer = 1;
    for (int i = 1; i < k; i++)
        outer *= v->dims[i];
    const uint8_t *keep = t->keep; // under "select"
    const void *rows = v->data;
    int64_t n = T;
    if (outer > 1 || keep) {
        int64_t elems = 1;
        for (int i = 1; i < v->ndim; i++)
            elems *= v->dims[i];
        char *buf = scratch(c, (size_t)elems * tap_dtype_size(v->dtype));
        if (!buf) return -AH_ENOMEM;
        n = tview_rows(v, k, keep, buf);
        rows = buf;
    }
    if (n == 0) return 0;
    return writer_rows(c->w, di, place_prompt_row(c->pc, t->bt->k, t->b, true), n, rows, c->err);
}

static int collect_take(void *u, const struct ctake *t, const struct tview *v,
                        struct ah_error *err) {
    struct collector *c = u;
    c->err = err;
    int di = c->dset_of_id[t->id];
    AH_ASSERT(di >= 0);
    return c->layout == JOB_LAYOUT_PROMPT ? take_prompt(c, di, t, v) : take_token(c, di, t, v);
}

static void collect_free(void *u) {
    struct collector *c = u;
    if (!c) return;
    free(c->buf);
    free(c->want);
    free(c);
}

// Expert shard 0 of a stage writes the stage's datasets (the shards of a replica compute them
// alike); the other shards collect nothing.
static int collect_make(struct consumer *out, const struct consumer_env *env,
                        struct ah_error *err) {
    const struct plan *pl = env->pl;
    const struct grid *g = env->g;
    if (g->shard != 0) return 0;
    struct collector *c = calloc(1, sizeof *c);
    if (c) c->want = calloc((size_t)pl->m.n_cat + 1, 1);
    if (!c || !c->want) {
        collect_free(c);
        return ah_fail(err, AH_ENOMEM, "out of memory: a want list of %d names", pl->m.n_cat);
    }
    *c = (struct collector){.w = env->w,
                            .pc = &pl->place.pc,
                            .dsets = pl->names.dsets,
                            .dset_of_id = pl->names.dset_of_id,
                            .layout = pl->j.layout,
                            .want = c->want};
    for (int i = 0; i < pl->m.n_cat; i++)
        c->want[i] = pl->names.dset_of_id[i] >= g->i0 && pl->names.dset_of_id[i] < g->i1;
    *out = (struct consumer){
        .name = "collect", .want = c->want, .take = collect_take, .free = collect_free, .u = c};
    return 0;
}

const struct consumer_kind collect_kind = {"collect", NULL, collect_make, NULL};
