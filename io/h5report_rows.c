// h5report_rows.c - the parts of `harvest report` read from activation rows (io/h5report.h): the
// attention pattern of each chosen prompt, and the experts' load and router entropy of each block,
// a prompt's rows (or a block of token rows) at a time, so memory stays flat in the output's size.
#include "io/h5attr.h"
#include "io/h5report.h"
#include "model/ah.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

const struct rpt_dset *rpt_find_dset(const struct rpt_data *d, const char *name) {
    for (int i = 0; i < d->n_dsets; i++)
        if (!strcmp(d->dsets[i].name, name)) return &d->dsets[i];
    return NULL;
}

#define TOKEN_BLOCK 4096 // token rows read at once (token layout)

// rows [r0, r0 + nr) of a prompt (prompt layout: its positions [0, nr) of prompt r0) or of the
// token layout, as mtype, into buf (nr * width elements)
static int read_slab(hid_t ds, const struct rpt_dset *s, bool token, int64_t r0, int64_t nr,
                     hid_t mtype, void *buf) {
    hsize_t start[TAP_MAX_DIMS] = {0}, count[TAP_MAX_DIMS];
    for (int k = 0; k < s->ndim; k++)
        count[k] = (hsize_t)s->dims[k];
    start[0] = (hsize_t)r0;
    if (token) {
        count[0] = (hsize_t)nr;
    } else {
        count[0] = 1, count[1] = (hsize_t)nr;
    }
    hid_t fs = H5Dget_space(ds), ms = H5Screate_simple(s->ndim, count, NULL);
    herr_t e =
        fs >= 0 && ms >= 0 ? H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL) : -1;
    if (e >= 0) e = H5Dread(ds, mtype, ms, fs, H5P_DEFAULT, buf);
    if (ms >= 0) H5Sclose(ms);
    if (fs >= 0) H5Sclose(fs);
    return e < 0 ? -1 : 0;
}

typedef void (*rows_fn)(void *u, const void *rows, int64_t n, int64_t width);

// fn on every stored row of s (the token rows: a prompt's first length[p] positions in the prompt
// layout, every row in the token layout), a prompt or a block at a time
static int each_rows(hid_t g, const struct rpt_dset *s, const int64_t *len, int64_t n_prompts,
                     hid_t mtype, size_t esize, rows_fn fn, void *u) {
    bool token = !strcmp(s->axes[0], "token");
    int first = token ? 1 : 2;
    if (s->ndim < first) return -1;
    int64_t width = 1, block = token ? TOKEN_BLOCK : (s->ndim > 1 ? s->dims[1] : 0);
    for (int k = first; k < s->ndim; k++)
        width *= s->dims[k];
    hid_t ds = H5Dopen2(g, s->name, H5P_DEFAULT);
    void *buf = malloc(esize * (size_t)(block * width > 0 ? block * width : 1));
    int rc = ds >= 0 && buf ? 0 : -1;
    int64_t n_units = token ? (s->dims[0] + TOKEN_BLOCK - 1) / TOKEN_BLOCK : n_prompts;
    for (int64_t i = 0; i < n_units && rc == 0; i++) {
        int64_t r0 = token ? i * TOKEN_BLOCK : i;
        int64_t nr = token ? (s->dims[0] - r0 < TOKEN_BLOCK ? s->dims[0] - r0 : TOKEN_BLOCK)
                           : (len[i] < block ? len[i] : block);
        if (nr <= 0) continue;
        rc = read_slab(ds, s, token, r0, nr, mtype, buf);
        if (rc == 0) fn(u, buf, nr, width);
    }
    free(buf);
    if (ds >= 0) H5Dclose(ds);
    return rc;
}

// ----------------------------------------------------------------------------
// attention patterns

static bool is_attention(const struct rpt_dset *s) {
    return s->ndim == 4 && !strcmp(s->axes[0], "prompt") && !strcmp(s->axes[2], "query") &&
           (!strcmp(s->axes[3], "key") || !strcmp(s->axes[3], "global+local-key")) &&
           !strcmp(s->dtype, "float32") && (strstr(s->name, "prob") || strstr(s->name, "pattern"));
}

// the cells (rows, cols) of a's grid from one head's (T, nk) probabilities
static void add_head(struct rpt_attn *a, const float *x) {
    for (int64_t q = 0; q < a->T; q++) {
        int64_t r = q / a->bq, nq = r == a->rows - 1 ? a->T - r * a->bq : a->bq;
        for (int64_t k = 0; k < a->n_key; k++) {
            int64_t c = k / a->bk, nk = c == a->cols - 1 ? a->n_key - c * a->bk : a->bk;
            a->p[r * a->cols + c] += (double)x[q * a->n_key + k] / (double)(a->heads * nq * nk);
        }
    }
}

// one head at a time: memory T x n_key floats
static int read_pattern(struct rpt_attn *a, hid_t g, const struct rpt_dset *s, int64_t p,
                        int64_t T) {
    bool two = !strcmp(s->axes[3], "global+local-key");
    int64_t H = s->dims[1], nk = two ? 2 * T : T;
    if (nk > s->dims[3]) nk = s->dims[3];
    snprintf(a->name, sizeof a->name, "%s", s->name);
    a->prompt = p, a->T = T, a->n_key = nk, a->heads = H;
    a->bq = (T + RPT_HEAT_MAX - 1) / RPT_HEAT_MAX, a->bk = (nk + RPT_HEAT_MAX - 1) / RPT_HEAT_MAX;
    a->rows = (T + a->bq - 1) / a->bq, a->cols = (nk + a->bk - 1) / a->bk;
    a->p = calloc((size_t)(a->rows * a->cols), sizeof *a->p);
    float *buf = malloc(sizeof *buf * (size_t)(T * nk));
    hsize_t start[4] = {(hsize_t)p, 0, 0, 0}, count[4] = {1, 1, (hsize_t)T, (hsize_t)nk};
    hid_t ds = H5Dopen2(g, s->name, H5P_DEFAULT);
    hid_t fs = ds >= 0 ? H5Dget_space(ds) : -1, ms = H5Screate_simple(4, count, NULL);
    herr_t e = a->p && buf && fs >= 0 ? 0 : -1;
    for (int64_t h = 0; e >= 0 && h < H; h++) {
        start[1] = (hsize_t)h;
        e = H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL);
        if (e >= 0) e = H5Dread(ds, H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, buf);
        if (e >= 0) add_head(a, buf);
    }
    H5Sclose(ms);
    if (fs >= 0) H5Sclose(fs);
    if (ds >= 0) H5Dclose(ds);
    free(buf);
    return e < 0 ? -1 : 0;
}

static int read_attention(struct rpt_data *d, hid_t g, const int64_t *len, const int64_t *prompts,
                          int n_prompts, struct ah_error *err) {
    int n_att = 0;
    for (int i = 0; i < d->n_dsets; i++)
        n_att += is_attention(&d->dsets[i]);
    d->attn = calloc((size_t)(n_att > 0 && n_prompts > 0 ? n_att * n_prompts : 1), sizeof *d->attn);
    if (!d->attn) return -AH_ENOMEM;
    for (int i = 0; i < d->n_dsets; i++) {
        const struct rpt_dset *s = &d->dsets[i];
        if (!is_attention(s)) continue;
        for (int k = 0; k < n_prompts; k++) {
            int64_t p = prompts[k], T = len[p] < s->dims[2] ? len[p] : s->dims[2];
            if (T <= 0) continue;
            if (read_pattern(&d->attn[d->n_attn++], g, s, p, T) < 0)
                return ah_fail(err, AH_EIO, "%s: /activations/%s: cannot read prompt %lld", d->path,
                               s->name, (long long)p);
        }
    }
    return 0;
}

// ----------------------------------------------------------------------------
// experts: load and router entropy

static const char *suffix_of(const char *name, const char *suffix) {
    size_t n = strlen(name), m = strlen(suffix);
    return n >= m && !strcmp(name + n - m, suffix) ? name + n - m : NULL;
}

static void count_load(void *u, const void *rows, int64_t n, int64_t width) {
    struct rpt_moe *m = u;
    const int64_t *ix = rows;
    for (int64_t i = 0; i < n * width; i++)
        if (ix[i] >= 0 && ix[i] < m->E) m->load[ix[i]]++;
    m->load_tokens += n;
}

static void add_entropy(void *u, const void *rows, int64_t n, int64_t width) {
    struct rpt_moe *m = u;
    const float *z = rows;
    for (int64_t r = 0; r < n; r++, z += width) {
        double mx = -INFINITY, sum = 0, h = 0;
        for (int64_t e = 0; e < width; e++)
            mx = (double)z[e] > mx ? (double)z[e] : mx;
        if (!isfinite(mx)) continue;
        for (int64_t e = 0; e < width; e++)
            sum += exp((double)z[e] - mx);
        for (int64_t e = 0; e < width; e++) {
            double pr = exp((double)z[e] - mx) / sum;
            if (pr > 0) h -= pr * log(pr);
        }
        if (isnan(h)) continue;
        m->entropy += h; // a sum until the end
        m->entropy_tokens++;
    }
}

// the experts a block has: router_logits' last axis, else the config's count
static int64_t n_experts(hid_t f, const struct rpt_dset *logits) {
    if (logits) return logits->dims[logits->ndim - 1];
    char *cfg = h5attr_get_str(f, "model_config");
    cJSON *j = cfg ? cJSON_Parse(cfg) : NULL;
    static const char *const keys[] = {"num_experts", "num_local_experts", "n_routed_experts"};
    int64_t E = 0;
    for (int k = 0; k < 3 && !E; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, keys[k]);
        if (cJSON_IsNumber(v) && v->valuedouble >= 1 && v->valuedouble <= 1 << 20)
            E = (int64_t)v->valuedouble;
    }
    cJSON_Delete(j);
    free(cfg);
    return E;
}

static int read_moe_block(struct rpt_moe *m, hid_t f, hid_t g, const struct rpt_data *d,
                          const int64_t *len, const struct rpt_dset *idx,
                          const struct rpt_dset *lg) {
    m->E = n_experts(f, lg); // 0 if unknown: the load is left out
    int rc = 0;
    if (idx && m->E > 0 && !strcmp(idx->dtype, "int64")) {
        m->load = calloc((size_t)m->E, sizeof *m->load);
        if (!m->load) return -AH_ENOMEM;
        rc = each_rows(g, idx, len, d->n_prompts, H5T_NATIVE_INT64, 8, count_load, m);
        m->has_load = rc == 0;
    }
    if (rc == 0 && lg && !strcmp(lg->dtype, "float32")) {
        rc = each_rows(g, lg, len, d->n_prompts, H5T_NATIVE_FLOAT, 4, add_entropy, m);
        m->has_entropy = rc == 0 && m->entropy_tokens > 0;
        m->entropy = m->entropy_tokens ? m->entropy / (double)m->entropy_tokens : (double)NAN;
    }
    return rc < 0 ? -AH_EIO : 0;
}

static int read_experts(struct rpt_data *d, hid_t f, hid_t g, const int64_t *len,
                        struct ah_error *err) {
    d->moe = calloc((size_t)(d->n_dsets ? d->n_dsets : 1), sizeof *d->moe);
    if (!d->moe) return -AH_ENOMEM;
    for (int i = 0; i < d->n_dsets; i++) { // a block: its expert_indices, else its router_logits
        const char *nm = d->dsets[i].name, *sx = suffix_of(nm, "expert_indices");
        const char *sl = sx ? NULL : suffix_of(nm, "router_logits");
        if (!sx && !sl) continue;
        char pre[RPT_NAME_MAX], other[RPT_NAME_MAX + 16];
        snprintf(pre, sizeof pre, "%.*s", (int)((sx ? sx : sl) - nm), nm);
        snprintf(other, sizeof other, "%s%s", pre, sx ? "router_logits" : "expert_indices");
        if (sl && rpt_find_dset(d, other)) continue; // taken with its expert_indices
        const struct rpt_dset *idx = sx ? &d->dsets[i] : NULL;
        const struct rpt_dset *lg = sx ? rpt_find_dset(d, other) : &d->dsets[i];
        struct rpt_moe *m = &d->moe[d->n_moe++];
        snprintf(m->layer, sizeof m->layer, "%s", pre);
        if (read_moe_block(m, f, g, d, len, idx, lg) < 0)
            return ah_fail(err, AH_EIO, "%s: /activations/%s: cannot read its rows", d->path, nm);
    }
    return 0;
}

// ----------------------------------------------------------------------------

int rpt_read_rows(struct rpt_data *d, hid_t f, const int64_t *prompts, int n_prompts,
                  struct ah_error *err) {
    static const int64_t first = 0;
    if (!prompts) prompts = &first, n_prompts = d->n_prompts > 0;
    for (int k = 0; k < n_prompts; k++)
        if (prompts[k] < 0 || prompts[k] >= d->n_prompts)
            return ah_fail(err, AH_EINVAL, "%s: --prompts: prompt %lld: the output has %lld",
                           d->path, (long long)prompts[k], (long long)d->n_prompts);
    int64_t n = 0, *len = NULL;
    hid_t pl = H5Dopen2(f, "prompts/length", H5P_DEFAULT);
    if (pl >= 0) {
        len = malloc(sizeof *len * (size_t)(d->n_prompts ? d->n_prompts : 1));
        if (len && H5Dread(pl, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, len) >= 0)
            n = d->n_prompts;
        H5Dclose(pl);
    }
    if (n != d->n_prompts || !len) {
        free(len);
        return ah_fail(err, AH_EINVAL, "%s: /prompts/length does not read", d->path);
    }
    hid_t g = d->n_dsets ? H5Gopen2(f, "activations", H5P_DEFAULT) : H5I_INVALID_HID;
    int rc = g >= 0 || !d->n_dsets ? 0 : ah_fail(err, AH_EIO, "%s: /activations", d->path);
    if (rc == 0 && g >= 0) rc = read_attention(d, g, len, prompts, n_prompts, err);
    if (rc == 0 && g >= 0) rc = read_experts(d, f, g, len, err);
    if (g >= 0) H5Gclose(g);
    free(len);
    return rc;
}
