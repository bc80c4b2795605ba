// sae.c - the published SAE layouts read into model/sae.h's views (see sae.h, docs/saes.md).
// The keys and their meaning follow the loaders: SAELens sae_lens/loading/
// pretrained_sae_loaders.py (handle_config_defaulting, handle_pre_6_0_config,
// gemma_2_sae_huggingface_loader, read_sae_components_from_disk) and sae_lens/saes/*.py;
// sparsify sparsify/sparse_coder.py (SparseCoder.load_from_disk) and sparsify/config.py.
#define _POSIX_C_SOURCE 200809L // defines: mmap, munmap, fstat
#include "io/sae.h"

#include "io/config_json.h"
#include "io/halfconv.h"
#include "io/sae_npz.h"
#include "model/ah.h"
#include "model/config.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

const char *sae_layout_name(enum sae_layout l) {
    static const char *const names[] = {"saelens", "sparsify", "gemmascope"};
    return names[l];
}

void sae_close(struct sae_file *f) {
    st_close(&f->st);
    free(f->owned);
    f->owned = NULL;
    f->s = (struct sae){0};
}

// ----------------------------------------------------------------------------
// tensors: what is wanted of each, then bound (borrowed or converted into f->owned)

struct want {
    const char *name; // as the file names it
    int ndim;
    int64_t shape[2];
    const float **dst;
    const char *dims; // "[d_in, d_sae]": the shape in words, for messages
};

// "[3, 4]"
static void shape_text(char *out, size_t n, int ndim, const int64_t *shape) {
    int k = snprintf(out, n, "[");
    for (int i = 0; i < ndim && k > 0 && (size_t)k < n; i++)
        k += snprintf(out + k, n - (size_t)k, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (k > 0 && (size_t)k < n) snprintf(out + k, n - (size_t)k, "]");
}

static int shape_check(const struct want *w, int ndim, const int64_t *shape, const char *file,
                       struct ah_error *err) {
    bool ok = ndim == w->ndim;
    for (int i = 0; ok && i < ndim; i++)
        ok = shape[i] == w->shape[i];
    if (ok) return 0;
    char got[128], want[128];
    shape_text(got, sizeof got, ndim, shape);
    shape_text(want, sizeof want, w->ndim, w->shape);
    return ah_fail(err, AH_EINVAL, "%s: tensor \"%s\" has shape %s, expected %s = %s", file,
                   w->name, got, w->dims, want);
}

// a NaN or an infinity in a bound tensor: an error naming it
static int finite_check(const float *p, int64_t n, const char *file, const char *name,
                        struct ah_error *err) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(p[i]))
            return ah_fail(err, AH_EINVAL, "%s: tensor \"%s\": %s at element %lld", file, name,
                           isnan(p[i]) ? "NaN" : "infinity", (long long)i);
    return 0;
}

static int64_t want_count(const struct want *w) {
    return w->ndim == 1 ? w->shape[0] : w->shape[0] * w->shape[1];
}

// Binds the wanted tensors of the safetensors file f->st (file: its path for messages).
static int bind_st(struct sae_file *f, const struct want *w, int n, const char *file,
                   struct ah_error *err) {
    int64_t conv = 0;
    for (int i = 0; i < n; i++) {
        const struct st_tensor *t = st_find(&f->st, w[i].name);
        if (!t) return ah_fail(err, AH_EINVAL, "%s: tensor \"%s\" is missing", file, w[i].name);
        if (t->dtype != ST_F32 && t->dtype != ST_BF16 && t->dtype != ST_F16)
            return ah_fail(err, AH_EINVAL,
                           "%s: tensor \"%s\": dtype %s (expected F32, BF16 or F16)", file,
                           w[i].name, st_dtype_name(t->dtype));
        int rc = shape_check(&w[i], t->ndim, t->shape, file, err);
        if (rc < 0) return rc;
        if (t->dtype != ST_F32 || (uintptr_t)t->data % sizeof(float)) conv += want_count(&w[i]);
    }
    f->owned = malloc((size_t)(conv ? conv : 1) * sizeof(float));
    if (!f->owned) return ah_fail(err, AH_ENOMEM, "%s: no memory for the SAE", file);
    float *o = f->owned;
    for (int i = 0; i < n; i++) {
        const struct st_tensor *t = st_find(&f->st, w[i].name);
        int64_t cnt = want_count(&w[i]);
        if (t->dtype == ST_F32 && (uintptr_t)t->data % sizeof(float) == 0) {
            *w[i].dst = t->data;
        } else {
            const unsigned char *b = t->data;
            for (int64_t j = 0; j < cnt; j++) {
                uint32_t u32;
                uint16_t u;
                if (t->dtype == ST_F32) {
                    memcpy(&u32, b + 4 * j, 4);
                    memcpy(&o[j], &u32, 4);
                    continue;
                }
                memcpy(&u, b + 2 * j, 2);
                o[j] = t->dtype == ST_BF16 ? hc_bf16_to_f32(u) : hc_f16_to_f32(u);
            }
            *w[i].dst = o;
            o += cnt;
        }
        int rc = finite_check(*w[i].dst, cnt, file, w[i].name, err);
        if (rc < 0) return rc;
    }
    return 0;
}

// A tensor "scaling_factor" (SAELens's finetuning scaling factor, dropped when all ones): an
// error unless it is absent or all ones.
static int scaling_check(const struct sae_file *f, const char *file, struct ah_error *err) {
    const struct st_tensor *t = st_find(&f->st, "scaling_factor");
    if (!t) return 0;
    bool ones = t->dtype == ST_F32 && t->ndim == 1;
    for (int64_t j = 0; ones && j < t->shape[0]; j++) {
        float v;
        memcpy(&v, (const char *)t->data + 4 * j, 4);
        ones = v == 1.0f;
    }
    return ones ? 0
                : ah_fail(err, AH_EINVAL,
                          "%s: tensor \"scaling_factor\" is not all ones: a finetuning scaling "
                          "factor is not implemented",
                          file);
}

// ----------------------------------------------------------------------------
// config keys

// A boolean key: *out unchanged when absent or null. 0 or an error naming the key.
static int key_bool(const struct config *c, const char *key, bool *out, struct ah_error *err) {
    const struct cfg_value *v = cfg_get(c, NULL, key);
    enum cfg_kind k = cfg_kind(c, v);
    if (k == CFG_ABSENT || k == CFG_NULL) return 0;
    if (k != CFG_BOOL)
        return ah_fail(err, AH_EINVAL, "%s: \"%s\": expected true or false", c->path, key);
    *out = cfg_is_true(c, v);
    return 0;
}

// A boolean key harvest implements only at `ok`: an error naming it at the other value.
static int key_refuse_bool(const struct config *c, const char *key, bool ok, const char *why,
                           struct ah_error *err) {
    bool v = ok;
    int rc = key_bool(c, key, &v, err);
    if (rc < 0 || v == ok) return rc;
    return ah_fail(err, AH_EINVAL, "%s: \"%s\": %s is not implemented%s", c->path, key,
                   v ? "true" : "false", why);
}

// A string key: NULL when absent or null, else an error when not a string.
static int key_str(const struct config *c, const char *key, const char **out,
                   struct ah_error *err) {
    const struct cfg_value *v = cfg_get(c, NULL, key);
    enum cfg_kind k = cfg_kind(c, v);
    *out = NULL;
    if (k == CFG_ABSENT || k == CFG_NULL) return 0;
    if (k != CFG_STRING)
        return ah_fail(err, AH_EINVAL, "%s: \"%s\": expected a string", c->path, key);
    *out = cfg_string(c, v);
    return 0;
}

// k of a TopK SAE, 1..d_sae: the key `key` (or SAELens's pre-6.0 activation_fn_kwargs.k)
static int key_k(const struct config *c, struct sae *s, bool required, struct ah_error *err) {
    const struct cfg_value *v = cfg_get(c, NULL, "k");
    const char *where = "k";
    if (!v) {
        v = cfg_get(c, cfg_get(c, NULL, "activation_fn_kwargs"), "k");
        where = "activation_fn_kwargs.k";
    }
    if (!v && !required && s->k <= s->d_sae) return 0;
    if (!v && !required)
        return ah_fail(err, AH_EINVAL, "%s: no \"k\": the default %d is more than d_sae = %lld",
                       c->path, s->k, (long long)s->d_sae);
    if (!v)
        return ah_fail(err, AH_EINVAL, "%s: missing \"k\" (a TopK SAE's latents a token)", c->path);
    double d = cfg_kind(c, v) == CFG_NUMBER ? cfg_number(c, v) : (double)NAN;
    if (!(d >= 1 && d <= (double)s->d_sae) || d != floor(d))
        return ah_fail(err, AH_EINVAL,
                       "%s: \"%s\": %g is out of range (expected an integer 1 to d_sae = %lld)",
                       c->path, where, d, (long long)s->d_sae);
    s->k = (int)d;
    return 0;
}

// ----------------------------------------------------------------------------
// SAELens

static int saelens_arch(const struct config *c, struct sae *s, struct ah_error *err) {
    const char *a = NULL, *fn = NULL, *fn_old = NULL;
    int rc = key_str(c, "architecture", &a, err);
    if (rc == 0) rc = key_str(c, "activation_fn", &fn, err);
    if (rc == 0) rc = key_str(c, "activation_fn_str", &fn_old, err);
    if (rc < 0) return rc;
    const char *fkey = fn ? "activation_fn" : "activation_fn_str";
    if (!fn) fn = fn_old;
    if (!a) a = "standard"; // handle_config_defaulting
    if (!strcmp(a, "standard"))
        s->arch = SAE_RELU;
    else if (!strcmp(a, "jumprelu"))
        s->arch = SAE_JUMPRELU;
    else if (!strcmp(a, "topk"))
        s->arch = SAE_TOPK;
    else
        return ah_fail(
            err, AH_EINVAL,
            "%s: \"architecture\": \"%s\" is not implemented (harvest reads standard, "
            "jumprelu and topk; SAELens saves a BatchTopK SAE as jumprelu for inference)",
            c->path, a);
    const char *want = s->arch == SAE_TOPK ? "topk" : "relu";
    if (fn && strcmp(fn, want) && !(s->arch == SAE_TOPK && !strcmp(fn, "relu")))
        return ah_fail(
            err, AH_EINVAL,
            "%s: \"%s\": \"%s\" is not implemented with architecture \"%s\" (expected \"%s\")",
            c->path, fkey, fn, a, want);
    return 0;
}

static int saelens_norm(const struct config *c, struct sae *s, struct ah_error *err) {
    const struct cfg_value *v = cfg_get(c, NULL, "normalize_activations");
    enum cfg_kind k = cfg_kind(c, v);
    s->norm = SAE_NORM_NONE;
    if (k == CFG_ABSENT || k == CFG_NULL || k == CFG_BOOL)
        return 0; // bool: none / expected_average_only_in
    const char *n = cfg_string(c, v);
    if (n && (!strcmp(n, "none") || !strcmp(n, "expected_average_only_in"))) return 0;
    if (n && !strcmp(n, "constant_norm_rescale")) return s->norm = SAE_NORM_CONSTANT, 0;
    if (n && !strcmp(n, "layer_norm")) return s->norm = SAE_NORM_LAYER, 0;
    return ah_fail(err, AH_EINVAL,
                   "%s: \"normalize_activations\": %s%s%s is not implemented (expected none, "
                   "expected_average_only_in, constant_norm_rescale or layer_norm)",
                   c->path, n ? "\"" : "", n ? n : "that value", n ? "\"" : "");
}

// the options of SAELens's cfg.json that change what inference computes
static int saelens_options(const struct config *c, struct sae *s, struct ah_error *err) {
    s->b_dec_in = true; // handle_config_defaulting
    int rc = key_bool(c, "apply_b_dec_to_input", &s->b_dec_in, err);
    if (rc == 0) rc = saelens_norm(c, s, err);
    if (rc == 0) rc = key_refuse_bool(c, "finetuning_scaling_factor", false, "", err);
    if (rc == 0)
        rc = key_refuse_bool(c, "rescale_acts_by_decoder_norm", false,
                             " (fold the decoder norms into the encoder first)", err);
    const char *r = NULL;
    if (rc == 0) rc = key_str(c, "reshape_activations", &r, err);
    if (rc == 0 && r && strcmp(r, "none"))
        rc = ah_fail(err, AH_EINVAL, "%s: \"reshape_activations\": \"%s\" is not implemented",
                     c->path, r);
    enum cfg_kind hk = cfg_kind(c, cfg_get(c, NULL, "hook_head_index"));
    if (rc == 0 && hk != CFG_ABSENT && hk != CFG_NULL)
        rc = ah_fail(err, AH_EINVAL,
                     "%s: \"hook_head_index\": an SAE of one head is not implemented", c->path);
    return rc;
}

static int saelens_open(struct sae_file *f, const struct config *c, const char *wpath,
                        struct ah_error *err) {
    struct sae *s = &f->s;
    int d_in, d_sae;
    int rc = saelens_arch(c, s, err);
    if (rc == 0) rc = cfg_int_in(c, "d_in", true, &d_in, 1, 1 << 30, err);
    if (rc == 0) rc = cfg_int_in(c, "d_sae", true, &d_sae, 1, 1 << 30, err);
    if (rc < 0) return rc;
    s->d_in = d_in, s->d_sae = d_sae;
    if (rc == 0 && s->arch == SAE_TOPK) rc = key_k(c, s, true, err);
    if (rc == 0) rc = saelens_options(c, s, err);
    if (rc == 0) rc = st_open(&f->st, wpath, err);
    if (rc < 0) return rc;
    struct want w[5] = {
        {"W_enc", 2, {d_in, d_sae}, &s->W_enc, "[d_in, d_sae]"},
        {"b_enc", 1, {d_sae}, &s->b_enc, "[d_sae]"},
        {"W_dec", 2, {d_sae, d_in}, &s->W_dec, "[d_sae, d_in]"},
        {"b_dec", 1, {d_in}, &s->b_dec, "[d_in]"},
        {"threshold", 1, {d_sae}, &s->threshold, "[d_sae]"},
    };
    rc = scaling_check(f, wpath, err);
    return rc < 0 ? rc : bind_st(f, w, s->arch == SAE_JUMPRELU ? 5 : 4, wpath, err);
}

// ----------------------------------------------------------------------------
// sparsify (SparseCoderConfig's defaults where a key is absent)

static int sparsify_open(struct sae_file *f, const struct config *c, const char *wpath,
                         struct ah_error *err) {
    struct sae *s = &f->s;
    int d_in, n_lat = 0, expansion = 32;
    const char *act = NULL;
    int rc = cfg_int_in(c, "d_in", true, &d_in, 1, 1 << 30, err);
    if (rc == 0) rc = cfg_int_in(c, "num_latents", false, &n_lat, 0, 1 << 30, err);
    if (rc == 0) rc = cfg_int_in(c, "expansion_factor", false, &expansion, 1, 1 << 20, err);
    if (rc == 0) rc = key_str(c, "activation", &act, err);
    if (rc < 0) return rc;
    if (act && strcmp(act, "topk"))
        return ah_fail(err, AH_EINVAL,
                       "%s: \"activation\": \"%s\" is not implemented (expected \"topk\")", c->path,
                       act);
    s->d_in = d_in, s->d_sae = n_lat ? n_lat : (int64_t)d_in * expansion;
    if (s->d_sae > 1 << 30)
        return ah_fail(err, AH_EINVAL, "%s: d_in x expansion_factor = %lld latents is too many",
                       c->path, (long long)s->d_sae);
    s->arch = SAE_TOPK, s->k = 32, s->b_dec_in = true, s->relu_first = true, s->enc_t = true;
    rc = key_k(c, s, false, err);
    if (rc == 0)
        rc = key_refuse_bool(c, "skip_connection", false, " (a skip connection, W_skip)", err);
    if (rc == 0) rc = key_refuse_bool(c, "transcode", false, " (a transcoder)", err);
    bool b = false; // multi_topk, normalize_decoder: training only, but booleans
    if (rc == 0) rc = key_bool(c, "multi_topk", &b, err);
    if (rc == 0) rc = key_bool(c, "normalize_decoder", &b, err);
    if (rc == 0) rc = st_open(&f->st, wpath, err);
    if (rc < 0) return rc;
    int64_t L = s->d_sae;
    struct want w[4] = {
        {"encoder.weight", 2, {L, d_in}, &s->W_enc, "[d_sae, d_in]"},
        {"encoder.bias", 1, {L}, &s->b_enc, "[d_sae]"},
        {"W_dec", 2, {L, d_in}, &s->W_dec, "[d_sae, d_in]"},
        {"b_dec", 1, {d_in}, &s->b_dec, "[d_in]"},
    };
    return bind_st(f, w, 4, wpath, err);
}

// ----------------------------------------------------------------------------
// Gemma Scope: params.npz, d_in and d_sae from W_enc (SAELens takes them from the release name)

struct npz_member {
    struct sae_npz_data d;
    struct sae_npy a;
};

// member NAME.npy (or its lower-case w_ spelling, which SAELens renames) parsed; 1 when absent
static int npz_get(struct npz_member *m, const void *map, size_t size, const char *path,
                   const char *name, struct ah_error *err) {
    char leaf[64], what[4200];
    snprintf(leaf, sizeof leaf, "%s.npy", name);
    int rc = sae_npz_member(&m->d, map, size, path, leaf, err);
    if (rc == 1 && name[0] == 'W') {
        snprintf(leaf, sizeof leaf, "w%s.npy", name + 1);
        rc = sae_npz_member(&m->d, map, size, path, leaf, err);
    }
    if (rc != 0) return rc;
    snprintf(what, sizeof what, "%s: %s", path, leaf);
    rc = sae_npy_parse(&m->a, m->d.data, m->d.n, what, err);
    if (rc == 0 && strcmp(m->a.descr, "<f4") && strcmp(m->a.descr, "<f2") &&
        strcmp(m->a.descr, "<f8"))
        rc = ah_fail(err, AH_EINVAL, "%s: dtype '%s' (expected float16, float32 or float64)", what,
                     m->a.descr);
    return rc;
}

static void npy_to_f32(float *o, const struct sae_npy *a, int64_t n) {
    const unsigned char *b = a->data;
    for (int64_t j = 0; j < n; j++) {
        if (a->descr[2] == '4') {
            memcpy(&o[j], b + 4 * j, 4);
        } else if (a->descr[2] == '8') {
            double d;
            memcpy(&d, b + 8 * j, 8);
            o[j] = (float)d;
        } else {
            uint16_t u;
            memcpy(&u, b + 2 * j, 2);
            o[j] = hc_f16_to_f32(u);
        }
    }
}

static int gemmascope_bind(struct sae_file *f, struct npz_member *m, const char *path,
                           struct ah_error *err) {
    struct sae *s = &f->s;
    if (m[0].a.ndim != 2)
        return ah_fail(err, AH_EINVAL, "%s: W_enc has %d dimensions, expected 2 [d_in, d_sae]",
                       path, m[0].a.ndim);
    int64_t C = m[0].a.shape[0], L = m[0].a.shape[1];
    if (C < 1 || L < 1 || C > 1 << 30 || L > 1 << 30)
        return ah_fail(err, AH_EINVAL, "%s: W_enc shape [%lld, %lld] out of range", path,
                       (long long)C, (long long)L);
    *s = (struct sae){.arch = SAE_JUMPRELU, .d_in = C, .d_sae = L}; // apply_b_dec_to_input false
    struct want w[5] = {
        {"W_enc", 2, {C, L}, &s->W_enc, "[d_in, d_sae]"},
        {"W_dec", 2, {L, C}, &s->W_dec, "[d_sae, d_in]"},
        {"b_enc", 1, {L}, &s->b_enc, "[d_sae]"},
        {"b_dec", 1, {C}, &s->b_dec, "[d_in]"},
        {"threshold", 1, {L}, &s->threshold, "[d_sae]"},
    };
    int64_t total = 0;
    for (int i = 0; i < 5; i++) {
        int rc = shape_check(&w[i], m[i].a.ndim, m[i].a.shape, path, err);
        if (rc < 0) return rc;
        total += want_count(&w[i]);
    }
    f->owned = malloc((size_t)total * sizeof(float));
    if (!f->owned) return ah_fail(err, AH_ENOMEM, "%s: no memory for the SAE", path);
    float *o = f->owned;
    for (int i = 0; i < 5; i++) {
        npy_to_f32(o, &m[i].a, want_count(&w[i]));
        *w[i].dst = o;
        int rc = finite_check(o, want_count(&w[i]), path, w[i].name, err);
        if (rc < 0) return rc;
        o += want_count(&w[i]);
    }
    return 0;
}

// an npz "scaling_factor" that is not all ones: an error (as for SAELens's safetensors)
static int gemmascope_scaling(const void *map, size_t size, const char *path,
                              struct ah_error *err) {
    struct npz_member m = {0};
    int rc = npz_get(&m, map, size, path, "scaling_factor", err);
    if (rc == 1) return 0;
    bool ones = rc == 0;
    size_t es = sae_npy_elsize(m.a.descr), n = ones && es ? m.a.nbytes / es : 0;
    for (size_t j = 0; ones && j < n; j++) {
        struct sae_npy one = m.a;
        float v;
        one.data = (const char *)m.a.data + j * es;
        npy_to_f32(&v, &one, 1);
        ones = v == 1.0f;
    }
    sae_npz_free(&m.d);
    if (rc < 0 || ones) return rc;
    return ah_fail(err, AH_EINVAL,
                   "%s: scaling_factor is not all ones: a finetuning scaling factor is not "
                   "implemented",
                   path);
}

static int gemmascope_open(struct sae_file *f, const char *path, struct ah_error *err) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return ah_fail(err, AH_ENOENT, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    void *map = MAP_FAILED;
    if (fstat(fd, &st) == 0 && st.st_size > 0)
        map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED)
        return ah_fail(err, st.st_size == 0 ? AH_EFORMAT : AH_EIO, "%s: cannot map: %s", path,
                       st.st_size == 0 ? "empty file" : strerror(errno));
    static const char *const names[5] = {"W_enc", "W_dec", "b_enc", "b_dec", "threshold"};
    struct npz_member m[5] = {0};
    int rc = 0;
    for (int i = 0; rc == 0 && i < 5; i++) {
        rc = npz_get(&m[i], map, (size_t)st.st_size, path, names[i], err);
        if (rc == 1) rc = ah_fail(err, AH_EINVAL, "%s: array \"%s\" is missing", path, names[i]);
    }
    if (rc == 0) rc = gemmascope_scaling(map, (size_t)st.st_size, path, err);
    if (rc == 0) rc = gemmascope_bind(f, m, path, err);
    for (int i = 0; i < 5; i++)
        sae_npz_free(&m[i].d);
    munmap(map, (size_t)st.st_size);
    return rc;
}

// ----------------------------------------------------------------------------
// the folder

static bool is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static int config_open(struct sae_file *f, const char *dir, bool saelens, const char *wpath,
                       struct ah_error *err) {
    char cpath[4200], *text = NULL;
    snprintf(cpath, sizeof cpath, "%s/cfg.json", dir);
    int rc = ah_read_file(cpath, &text, err);
    if (rc < 0) return rc;
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return ah_fail(err, AH_EFORMAT, "%s: not a JSON object", cpath);
    }
    struct config c = config_json(root, cpath);
    rc = saelens ? saelens_open(f, &c, wpath, err) : sparsify_open(f, &c, wpath, err);
    cJSON_Delete(root);
    return rc;
}

int sae_open(struct sae_file *f, const char *dir, struct ah_error *err) {
    *f = (struct sae_file){.st = {.fd = -1}};
    static const char *const leaf[3] = {"sae_weights.safetensors", "sae.safetensors", "params.npz"};
    char path[3][4200];
    int found = -1;
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return ah_fail(err, AH_ENOENT, "%s: not a folder (an SAE is a folder of files)", dir);
    snprintf(f->dir, sizeof f->dir, "%s", dir);
    for (int l = 0; l < 3; l++) {
        snprintf(path[l], sizeof path[l], "%s/%s", dir, leaf[l]);
        if (!is_file(path[l])) continue;
        if (found >= 0)
            return ah_fail(err, AH_EINVAL, "%s: holds both %s (%s) and %s (%s): one SAE a folder",
                           dir, leaf[found], sae_layout_name((enum sae_layout)found), leaf[l],
                           sae_layout_name((enum sae_layout)l));
        found = l;
    }
    if (found < 0)
        return ah_fail(err, AH_ENOENT,
                       "%s: no SAE: expected cfg.json + sae_weights.safetensors (SAELens), "
                       "cfg.json + sae.safetensors (sparsify) or params.npz (Gemma Scope)",
                       dir);
    f->layout = (enum sae_layout)found;
    int rc = found == SAE_LAYOUT_GEMMASCOPE
                 ? gemmascope_open(f, path[found], err)
                 : config_open(f, dir, found == SAE_LAYOUT_SAELENS, path[found], err);
    if (rc < 0) sae_close(f);
    return rc;
}
