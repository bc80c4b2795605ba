// initsae.c - `harvest init-sae`: a random SAE in one of the published layouts (io/sae.h) for
// tests and demos. Values depend only on the seed and the tensor's name. Every file is written
// to a temporary beside it and renamed over the name, so a file already there (a link to some
// other file, say) is replaced, never written through.
#define _POSIX_C_SOURCE 200809L // defines: mkdir, rename, unlink
#include "harvest/cliargs.h"
#include "harvest/harvest.h"

#include "io/halfconv.h"
#include "io/sae_npz.h"
#include "io/safetensors.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct sae_args {
    const char *layout, *arch, *dir, *dtype;
    int64_t seed;
    int d_in, d_sae, k; // k 0: not given
    bool overwrite;
};

// ----------------------------------------------------------------------------
// values

static uint64_t mix(uint64_t *s) { // splitmix64
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double unit(uint64_t *s) { // (0, 1)
    return ((double)(mix(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

static uint64_t seed_of(uint64_t seed, const char *name) {
    uint64_t h = 1469598103934665603ull;
    while (*name)
        h = (h ^ (unsigned char)*name++) * 1099511628211ull;
    return seed * 0x9e3779b97f4a7c15ull ^ h;
}

// n values named `name`: normal(mean, sd), or uniform [0, sd) when uniform
static float *values(const char *name, int64_t n, double mean, double sd, bool uniform,
                     uint64_t seed) {
    float *v = malloc((size_t)n * sizeof *v + 1);
    uint64_t s = seed_of(seed, name);
    for (int64_t i = 0; v && i < n; i++) {
        double u = unit(&s),
               g = uniform ? u : sqrt(-2.0 * log(u)) * cos(6.283185307179586 * unit(&s));
        v[i] = (float)(uniform ? sd * g : mean + sd * g);
    }
    return v;
}

// W_dec rows of unit norm, as SAELens and sparsify initialise them
static void unit_rows(float *w, int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; r++) {
        double ss = 0.0;
        for (int64_t c = 0; c < cols; c++)
            ss += (double)w[r * cols + c] * (double)w[r * cols + c];
        for (int64_t c = 0; c < cols; c++)
            w[r * cols + c] = (float)((double)w[r * cols + c] / sqrt(ss));
    }
}

// ----------------------------------------------------------------------------
// files

// path written through path.tmp and a rename
static int tmp_name(char *tmp, size_t n, const char *path) {
    return snprintf(tmp, n, "%s.tmp", path) < (int)n ? 0 : -1;
}

static int write_cfg(const char *dir, cJSON *o, struct ah_error *err) {
    char path[4200], tmp[4300];
    snprintf(path, sizeof path, "%s/cfg.json", dir);
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    FILE *fp = text && tmp_name(tmp, sizeof tmp, path) == 0 ? fopen(tmp, "w") : NULL;
    int ok = fp && fputs(text, fp) >= 0 && fputc('\n', fp) != EOF;
    if (fp && fclose(fp) != 0) ok = 0;
    free(text);
    if (ok && rename(tmp, path) != 0) ok = 0;
    return ok ? 0 : ah_fail(err, AH_EIO, "%s: cannot write: %s", path, strerror(errno));
}

// the tensors t (n) in dtype dt: float32 as they are, BF16 rounded
static int write_st(const char *dir, const char *leaf, struct st_wtensor *t, int n,
                    enum st_dtype dt, struct ah_error *err) {
    char path[4200], tmp[4300];
    snprintf(path, sizeof path, "%s/%s", dir, leaf);
    uint16_t *half[8] = {0};
    int rc = 0;
    for (int i = 0; dt == ST_BF16 && rc == 0 && i < n; i++) {
        int64_t cnt = t[i].shape[0] * (t[i].ndim == 2 ? t[i].shape[1] : 1);
        if (!(half[i] = malloc((size_t)cnt * 2 + 2))) rc = -AH_ENOMEM;
        if (half[i]) hc_f32_to_bf16_n(half[i], t[i].data, cnt), t[i].data = half[i];
        t[i].dtype = ST_BF16;
    }
    if (rc == 0 && tmp_name(tmp, sizeof tmp, path) == 0) rc = st_write(tmp, t, n, err);
    if (rc == 0 && rename(tmp, path) != 0)
        rc = ah_fail(err, AH_EIO, "%s: cannot rename: %s", path, strerror(errno));
    for (int i = 0; i < n; i++)
        free(half[i]);
    return rc;
}

static int write_npz(const char *dir, const struct sae_npz_array *a, int n, struct ah_error *err) {
    char path[4200], tmp[4300];
    snprintf(path, sizeof path, "%s/params.npz", dir);
    if (tmp_name(tmp, sizeof tmp, path) < 0 || sae_npz_write(tmp, a, n) < 0 ||
        rename(tmp, path) != 0)
        return ah_fail(err, AH_EIO, "%s: cannot write: %s", path, strerror(errno));
    return 0;
}

// ----------------------------------------------------------------------------
// the layouts

struct tensors {
    float *W_enc, *b_enc, *W_dec, *b_dec, *thr; // owned
};

static int make_tensors(struct tensors *t, const struct sae_args *a, bool enc_t) {
    int64_t C = a->d_in, L = a->d_sae;
    t->W_enc = values(enc_t ? "encoder.weight" : "W_enc", C * L, 0.0, 1.0 / sqrt((double)C), false,
                      (uint64_t)a->seed);
    t->W_dec = values("W_dec", L * C, 0.0, 1.0, false, (uint64_t)a->seed);
    t->b_enc = values("b_enc", L, -0.05, 0.1, false, (uint64_t)a->seed);
    t->b_dec = values("b_dec", C, 0.0, 0.1, false, (uint64_t)a->seed);
    t->thr = values("threshold", L, 0.0, 0.2, true, (uint64_t)a->seed);
    if (!t->W_enc || !t->W_dec || !t->b_enc || !t->b_dec || !t->thr) return -AH_ENOMEM;
    unit_rows(t->W_dec, L, C);
    if (!strcmp(a->arch, "batchtopk")) // one threshold, as BatchTopK saves its topk_threshold
        for (int64_t j = 0; j < L; j++)
            t->thr[j] = t->thr[0];
    return 0;
}

static void free_tensors(struct tensors *t) {
    free(t->W_enc), free(t->b_enc), free(t->W_dec), free(t->b_dec), free(t->thr);
}

// SAELens 6's cfg.json (SAEConfig.to_dict) and sae_weights.safetensors
static int write_saelens(const struct sae_args *a, const struct tensors *t, enum st_dtype dt,
                         struct ah_error *err) {
    bool topk = !strcmp(a->arch, "topk"), relu = !strcmp(a->arch, "relu");
    cJSON *o = cJSON_CreateObject(), *md;
    cJSON_AddStringToObject(o, "architecture", relu ? "standard" : topk ? "topk" : "jumprelu");
    cJSON_AddNumberToObject(o, "d_in", a->d_in);
    cJSON_AddNumberToObject(o, "d_sae", a->d_sae);
    cJSON_AddStringToObject(o, "dtype", dt == ST_BF16 ? "bfloat16" : "float32");
    cJSON_AddStringToObject(o, "device", "cpu");
    cJSON_AddBoolToObject(o, "apply_b_dec_to_input", true);
    cJSON_AddStringToObject(o, "normalize_activations", "none");
    cJSON_AddStringToObject(o, "reshape_activations", "none");
    if (topk) {
        cJSON_AddNumberToObject(o, "k", a->k);
        cJSON_AddBoolToObject(o, "rescale_acts_by_decoder_norm", false);
    }
    md = cJSON_AddObjectToObject(o, "metadata");
    cJSON_AddStringToObject(md, "sae_lens_version", "6.0.0");
    cJSON_AddStringToObject(md, "model_name", "harvest init-sae");
    int rc = write_cfg(a->dir, o, err);
    int64_t C = a->d_in, L = a->d_sae;
    struct st_wtensor w[5] = {{"W_enc", ST_F32, 2, {C, L}, t->W_enc},
                              {"b_enc", ST_F32, 1, {L}, t->b_enc},
                              {"W_dec", ST_F32, 2, {L, C}, t->W_dec},
                              {"b_dec", ST_F32, 1, {C}, t->b_dec},
                              {"threshold", ST_F32, 1, {L}, t->thr}};
    if (rc == 0) rc = write_st(a->dir, "sae_weights.safetensors", w, topk || relu ? 4 : 5, dt, err);
    return rc;
}

// sparsify's cfg.json (SparseCoderConfig.to_dict + d_in) and sae.safetensors
static int write_sparsify(const struct sae_args *a, const struct tensors *t, enum st_dtype dt,
                          struct ah_error *err) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "activation", "topk");
    cJSON_AddNumberToObject(o, "expansion_factor", a->d_sae % a->d_in ? 32 : a->d_sae / a->d_in);
    cJSON_AddBoolToObject(o, "normalize_decoder", true);
    cJSON_AddNumberToObject(o, "num_latents", a->d_sae);
    cJSON_AddNumberToObject(o, "k", a->k);
    cJSON_AddBoolToObject(o, "multi_topk", false);
    cJSON_AddBoolToObject(o, "skip_connection", false);
    cJSON_AddBoolToObject(o, "transcode", false);
    cJSON_AddNumberToObject(o, "d_in", a->d_in);
    int rc = write_cfg(a->dir, o, err);
    int64_t C = a->d_in, L = a->d_sae;
    struct st_wtensor w[4] = {{"encoder.weight", ST_F32, 2, {L, C}, t->W_enc},
                              {"encoder.bias", ST_F32, 1, {L}, t->b_enc},
                              {"W_dec", ST_F32, 2, {L, C}, t->W_dec},
                              {"b_dec", ST_F32, 1, {C}, t->b_dec}};
    return rc < 0 ? rc : write_st(a->dir, "sae.safetensors", w, 4, dt, err);
}

static int write_gemmascope(const struct sae_args *a, const struct tensors *t,
                            struct ah_error *err) {
    int64_t C = a->d_in, L = a->d_sae;
    struct sae_npz_array w[5] = {{"W_dec", 2, {L, C}, t->W_dec},
                                 {"W_enc", 2, {C, L}, t->W_enc},
                                 {"b_dec", 1, {C}, t->b_dec},
                                 {"b_enc", 1, {L}, t->b_enc},
                                 {"threshold", 1, {L}, t->thr}};
    return write_npz(a->dir, w, 5, err);
}

// ----------------------------------------------------------------------------
// the command

static int usage(void) {
    fprintf(stderr, "usage: harvest init-sae --layout saelens|sparsify|gemmascope "
                    "--arch relu|jumprelu|topk|batchtopk --d-in N --d-sae M [--k K] "
                    "[--dtype f32|bf16] [--seed S] [--overwrite] OUT_DIR\n");
    return 1;
}

static int parse_flag(int argc, char **argv, int *i, struct sae_args *a) {
    static const char *const cmd = "init-sae";
    const char *f = argv[*i], *v;
    if (!strcmp(f, "--overwrite")) return a->overwrite = true, 0;
    const char **text = !strcmp(f, "--layout")  ? &a->layout
                        : !strcmp(f, "--arch")  ? &a->arch
                        : !strcmp(f, "--dtype") ? &a->dtype
                                                : NULL;
    if (!text && strcmp(f, "--seed") && strcmp(f, "--d-in") && strcmp(f, "--d-sae") &&
        strcmp(f, "--k")) {
        fprintf(stderr, "harvest init-sae: unknown option \"%s\"\n", f);
        return usage();
    }
    if (!(v = cli_value(cmd, argc, argv, i))) return 1;
    if (text) return *text = v, 0;
    if (!strcmp(f, "--seed")) return -cli_int(cmd, f, v, 0, INT64_MAX, &a->seed);
    if (!strcmp(f, "--k")) return -cli_int32(cmd, f, v, 1, 1 << 30, &a->k);
    return -cli_int32(cmd, f, v, 1, 1 << 20, !strcmp(f, "--d-in") ? &a->d_in : &a->d_sae);
}

// which layout takes which architecture, k and dtype: 0, or 1 after a message
static int check_combination(const struct sae_args *a) {
    const char *bad = NULL;
    bool topk = a->arch && !strcmp(a->arch, "topk");
    if (!a->layout || !a->arch || !a->d_in || !a->d_sae || !a->dir) return usage();
    if (strcmp(a->layout, "saelens") && strcmp(a->layout, "sparsify") &&
        strcmp(a->layout, "gemmascope"))
        bad = "--layout: expected saelens, sparsify or gemmascope";
    else if (strcmp(a->arch, "relu") && strcmp(a->arch, "jumprelu") && !topk &&
             strcmp(a->arch, "batchtopk"))
        bad = "--arch: expected relu, jumprelu, topk or batchtopk";
    else if (!strcmp(a->layout, "sparsify") && !topk)
        bad = "--arch: sparsify's layout is a TopK SAE (--arch topk)";
    else if (!strcmp(a->layout, "gemmascope") && strcmp(a->arch, "jumprelu"))
        bad = "--arch: Gemma Scope's layout is a JumpReLU SAE (--arch jumprelu)";
    else if (topk != (a->k != 0))
        bad = topk ? "--arch topk needs --k" : "--k: only --arch topk takes it";
    else if (a->k > a->d_sae)
        bad = "--k: more than --d-sae";
    else if (a->dtype && strcmp(a->dtype, "f32") && strcmp(a->dtype, "bf16"))
        bad = "--dtype: expected f32 or bf16";
    else if (a->dtype && !strcmp(a->dtype, "bf16") && !strcmp(a->layout, "gemmascope"))
        bad = "--dtype bf16: params.npz holds float32 (numpy has no bfloat16)";
    if (bad) fprintf(stderr, "harvest init-sae: %s\n", bad);
    return bad ? 1 : 0;
}

// OUT_DIR: made when absent; an existing one must be a folder, and empty unless --overwrite
// (then the SAE files of the other layouts in it are removed, so that it holds one SAE)
static int prepare_dir(const struct sae_args *a, struct ah_error *err) {
    struct stat st;
    if (stat(a->dir, &st) != 0) {
        if (mkdir(a->dir, 0777) == 0) return 0;
        return ah_fail(err, errno == ENOENT ? AH_EINVAL : AH_EIO, "init-sae: %s: cannot create: %s",
                       a->dir, strerror(errno));
    }
    if (!S_ISDIR(st.st_mode))
        return ah_fail(err, AH_EINVAL, "init-sae: %s: exists and is not a folder", a->dir);
    DIR *d = opendir(a->dir);
    struct dirent *e;
    bool empty = true;
    while (d && (e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) empty = false;
    if (d) closedir(d);
    if (!empty && !a->overwrite)
        return ah_fail(err, AH_EEXIST,
                       "init-sae: %s: exists and is not empty (--overwrite replaces the SAE in it)",
                       a->dir);
    static const char *const others[] = {"sae_weights.safetensors", "sae.safetensors", "params.npz",
                                         "cfg.json"};
    for (int i = 0; i < 4; i++) {
        char p[4200];
        snprintf(p, sizeof p, "%s/%s", a->dir, others[i]);
        if (unlink(p) != 0 && errno != ENOENT)
            return ah_fail(err, AH_EIO, "init-sae: %s: cannot remove: %s", p, strerror(errno));
    }
    return 0;
}

int cmd_init_sae(int argc, char **argv) {
    struct sae_args a = {0};
    for (int i = 0; i < argc; i++) {
        if (argv[i][0] != '-') {
            if (a.dir) return usage();
            a.dir = argv[i];
        } else if (parse_flag(argc, argv, &i, &a)) {
            return 1;
        }
    }
    if (check_combination(&a)) return 1;
    enum st_dtype dt = a.dtype && !strcmp(a.dtype, "bf16") ? ST_BF16 : ST_F32;
    struct ah_error err = {0};
    struct tensors t = {0};
    int rc = prepare_dir(&a, &err);
    if (rc == 0 && make_tensors(&t, &a, !strcmp(a.layout, "sparsify")) < 0)
        rc = ah_fail(&err, AH_ENOMEM, "init-sae: no memory for the tensors");
    if (rc == 0)
        rc = !strcmp(a.layout, "saelens")    ? write_saelens(&a, &t, dt, &err)
             : !strcmp(a.layout, "sparsify") ? write_sparsify(&a, &t, dt, &err)
                                             : write_gemmascope(&a, &t, &err);
    free_tensors(&t);
    if (rc == 0)
        fprintf(
            stderr,
            "harvest: wrote a random %s %s SAE (d_in %d, d_sae %d, k %d, seed %lld, %s) to %s\n",
            a.layout, a.arch, a.d_in, a.d_sae, a.k, (long long)a.seed, st_dtype_name(dt), a.dir);
    return report(rc, &err);
}
