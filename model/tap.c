// tap.c - catalogue helpers (see tap.h)
#define _POSIX_C_SOURCE 200809L // fnmatch
#include "model/tap.h"

#include "model/ah.h"
#include "model/ops.h"

#include <fnmatch.h> // defines: fnmatch (POSIX libc)
#include <string.h>

int tap_desc_set(struct tap_desc *d, const char *name, enum tap_dtype dtype, const char *shape_csv,
                 const char *meaning, int block) {
    memset(d, 0, sizeof *d);
    if (strlen(name) >= sizeof d->name) return -1;
    strcpy(d->name, name);
    d->dtype = dtype;
    d->meaning = meaning;
    d->block = block;
    const char *p = shape_csv;
    while (*p) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (d->ndim == TAP_MAX_DIMS || n >= TAP_AXIS_MAX) return -1;
        memcpy(d->axes[d->ndim], p, n);
        d->axes[d->ndim][n] = '\0';
        d->ndim++;
        p += n;
        if (*p == ',') p++;
    }
    return 0;
}

enum tap_axis_kind tap_axis_kind(const char *axis) {
    if (!strcmp(axis, "batch")) return TAP_AXIS_BATCH;
    if (!strcmp(axis, "sequence") || !strcmp(axis, "seq") || !strcmp(axis, "query") ||
        !strcmp(axis, "key"))
        return TAP_AXIS_SEQ;
    if (!strcmp(axis, "global+local-key")) return TAP_AXIS_SEQ2;
    return TAP_AXIS_FIXED;
}

int tap_n_seq_axes(const struct tap_desc *d) {
    int n = 0;
    for (int i = 0; i < d->ndim; i++) {
        enum tap_axis_kind k = tap_axis_kind(d->axes[i]);
        n += k == TAP_AXIS_SEQ || k == TAP_AXIS_SEQ2;
    }
    return n;
}

const char *tap_dtype_name(enum tap_dtype t) {
    return t == TAP_I64 ? "int64" : "float32";
}

size_t tap_dtype_size(enum tap_dtype t) {
    return t == TAP_I64 ? 8 : 4;
}

bool tap_glob_match(const char *pattern, const char *name) {
    return fnmatch(pattern, name, 0) == 0;
}

int tap_desc_find(const struct tap_desc *cat, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(cat[i].name, name)) return i;
    return -1;
}

// the write and the takes of one view v of the live buffer `live` (NULL: not replaceable)
static void emit_view(const struct tap *tp, int id, int b, float *live, const struct tview *v) {
    if (tap_writes(tp, id)) tp->write_fn(tp->u, id, b, live, v);
    if (tp->want[id]) tp->take(tp->u, id, b, v);
}

void tap_emit_rows(const struct tap *tp, int id, const struct mbatch *bt, float *buf, int width) {
    if (!tap_wants(tp, id)) return;
    for (int b = 0; b < bt->n; b++) {
        float *rows = buf + bt->off[b] * width;
        struct tview v = {rows, TAP_F32, 3, {1, bt->len[b], width}};
        emit_view(tp, id, b, rows, &v);
    }
}

void tap_emit_rows_i64(const struct tap *tp, int id, const struct mbatch *bt, const int64_t *buf,
                       int width) {
    if (!tap_wants(tp, id)) return;
    for (int b = 0; b < bt->n; b++) {
        struct tview v = {buf + bt->off[b] * width, TAP_I64, 3, {1, bt->len[b], width}};
        emit_view(tp, id, b, NULL, &v);
    }
}

void tap_emit_token_heads(const struct tap *tp, int id, const struct mbatch *bt, float *buf, int H,
                          int D) {
    if (!tap_wants(tp, id)) return;
    for (int b = 0; b < bt->n; b++) {
        float *rows = buf + bt->off[b] * H * D;
        struct tview v = {rows, TAP_F32, 4, {1, bt->len[b], H, D}};
        emit_view(tp, id, b, rows, &v);
    }
}

// (T, H*D) rows <-> (H, T, D) heads; back: heads into rows
static void heads_copy(float *rows, float *heads, int T, int H, int D, bool back) {
#pragma omp parallel for num_threads(op_threads()) if ((int64_t)H * T * D >= OP_PAR_MIN) \
    schedule(static)
    for (int h = 0; h < H; h++)
        for (int t = 0; t < T; t++) {
            float *r = rows + (int64_t)t * H * D + h * D, *c = heads + ((int64_t)h * T + t) * D;
            memcpy(back ? r : c, back ? c : r, (size_t)D * sizeof(float));
        }
}

void tap_emit_heads(const struct tap *tp, int id, const struct mbatch *bt, float *buf, int H, int D,
                    float *scratch) {
    if (!tap_wants(tp, id)) return;
    for (int b = 0; b < bt->n; b++) {
        int T = bt->len[b];
        float *src = buf + bt->off[b] * H * D;
        heads_copy(src, scratch, T, H, D, false);
        struct tview v = {scratch, TAP_F32, 4, {1, H, T, D}};
        if (tap_writes(tp, id)) {
            tp->write_fn(tp->u, id, b, scratch, &v);
            heads_copy(src, scratch, T, H, D, true);
        }
        if (tp->want[id]) tp->take(tp->u, id, b, &v);
    }
}

int tview_seq_axis(const struct tap_desc *d, const struct tview *v) {
    int k = 1;
    while (k < v->ndim && tap_axis_kind(d->axes[k]) != TAP_AXIS_SEQ)
        k++;
    AH_ASSERT(k < v->ndim);
    return k;
}

int64_t tview_rows(const struct tview *v, int seq, const uint8_t *keep, char *dst) {
    size_t es = tap_dtype_size(v->dtype);
    int64_t T = v->dims[seq], outer = 1, inner = 1, n = 0;
    for (int i = 1; i < seq; i++)
        outer *= v->dims[i];
    for (int i = seq + 1; i < v->ndim; i++)
        inner *= v->dims[i];
    const char *src = v->data;
    size_t run = (size_t)inner * es;
    for (int64_t t = 0; t < T; t++) {
        if (keep && !keep[t]) continue;
        for (int64_t o = 0; o < outer; o++)
            memcpy(dst + (size_t)(n * outer + o) * run, src + (size_t)(o * T + t) * run, run);
        n++;
    }
    return n;
}
