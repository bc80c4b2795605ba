// sae_encode.c - an SAE folder (io/sae.h) and a batch of activations encoded by model/sae.h, for
// tests/test_sae.py to compare with the numpy reference (not a test itself).
//   sae_encode SAE_DIR X.npy OUT   X: float32 (N, d_in). Writes OUT.indptr.npy (int64, N + 1),
//                                  OUT.indices.npy (int32), OUT.values.npy (float32) and
//                                  OUT.recon.npy (float32 (N, d_in): the decode); prints one line
//                                  "layout L arch A d_in C d_sae M k K b_dec_in B norm N".
//   sae_encode SAE_DIR X1.npy OUT1 X2.npy OUT2 ...   each pair as above, one GEMM each, the SAE
//                                  read once (tests/test_saes.py: one batch of rows a prompt).
// Exit 1 on bad input (the message names the file, key or tensor), 2 on a system failure.
#define _POSIX_C_SOURCE 200809L
#include "io/sae.h"
#include "model/ah.h"
#include "model/sae.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const struct ah_error *err, int rc) {
    fprintf(stderr, "sae_encode: %s\n", err->msg);
    return ah_exit_code(rc);
}

static int write_npy(const char *out, const char *leaf, const char *descr, int ndim,
                     const int64_t *shape, const void *data, size_t nbytes) {
    char path[4200], dict[256], hdr[256];
    snprintf(path, sizeof path, "%s.%s.npy", out, leaf);
    if (ndim == 1)
        snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (%lld,), }",
                 descr, (long long)shape[0]);
    else
        snprintf(dict, sizeof dict,
                 "{'descr': '%s', 'fortran_order': False, 'shape': (%lld, %lld), }", descr,
                 (long long)shape[0], (long long)shape[1]);
    size_t dl = strlen(dict), hl = (10 + dl + 1 + 63) / 64 * 64;
    memcpy(hdr, "\x93NUMPY\x01\x00", 8);
    hdr[8] = (char)((hl - 10) & 0xff), hdr[9] = (char)((hl - 10) >> 8);
    memcpy(hdr + 10, dict, dl);
    memset(hdr + 10 + dl, ' ', hl - 11 - dl);
    hdr[hl - 1] = '\n';
    FILE *fp = fopen(path, "wb");
    int ok =
        fp && fwrite(hdr, 1, hl, fp) == hl && (!nbytes || fwrite(data, 1, nbytes, fp) == nbytes);
    if (fp && fclose(fp) != 0) ok = 0;
    if (!ok) fprintf(stderr, "sae_encode: %s: cannot write\n", path);
    return ok ? 0 : 2;
}

// x (N, d_in) read from path; 0, or the exit code after a message
static int read_x(const char *path, const struct sae *s, char **buf, struct sae_npy *a) {
    struct ah_error err = {0};
    int rc = ah_read_file(path, buf, &err);
    if (rc < 0) return fail(&err, rc);
    size_t n = 0;
    FILE *fp = fopen(path, "rb"); // the file's size (ah_read_file NUL-terminates)
    if (fp && fseek(fp, 0, SEEK_END) == 0) n = (size_t)ftell(fp);
    if (fp) fclose(fp);
    rc = sae_npy_parse(a, *buf, n, path, &err);
    if (rc < 0) return fail(&err, rc);
    if (strcmp(a->descr, "<f4") || a->ndim != 2 || a->shape[1] != s->d_in) {
        fprintf(stderr, "sae_encode: %s: expected float32 (N, %lld)\n", path, (long long)s->d_in);
        return 1;
    }
    return 0;
}

static int encode(const struct sae *s, const float *x, int64_t N, const char *out) {
    int64_t C = s->d_in, L = s->d_sae;
    float *pre = malloc((size_t)(N * L + 1) * sizeof *pre), *u = malloc((size_t)(N * C + 1) * 4);
    float *no = malloc((size_t)(2 * N + 1) * 4), *y = malloc((size_t)(N * C + 1) * 4);
    int64_t *ip = malloc((size_t)(N + 1) * sizeof *ip);
    if (!pre || !u || !no || !y || !ip) return 2;
    sae_pre(pre, u, no, x, s, N);
    sae_count(ip, pre, s, N);
    int32_t *idx = malloc((size_t)(ip[N] + 1) * 4);
    float *val = malloc((size_t)(ip[N] + 1) * 4);
    if (!idx || !val) return 2;
    sae_fill(idx, val, ip, pre, s, N);
    sae_decode(y, ip, idx, val, no, s, N);
    int64_t n1 = N + 1, nnz = ip[N], ys[2] = {N, C};
    int rc = write_npy(out, "indptr", "<i8", 1, &n1, ip, (size_t)n1 * 8);
    if (rc == 0) rc = write_npy(out, "indices", "<i4", 1, &nnz, idx, (size_t)nnz * 4);
    if (rc == 0) rc = write_npy(out, "values", "<f4", 1, &nnz, val, (size_t)nnz * 4);
    if (rc == 0) rc = write_npy(out, "recon", "<f4", 2, ys, y, (size_t)(N * C) * 4);
    free(pre), free(u), free(no), free(y), free(ip), free(idx), free(val);
    return rc;
}

// x from path encoded into out; 0, or the exit code after a message
static int encode_file(const struct sae *s, const char *path, const char *out) {
    char *buf = NULL;
    struct sae_npy a;
    int code = read_x(path, s, &buf, &a);
    if (code == 0) {
        float *x = malloc(a.nbytes + 4); // aligned copy of the data
        if (!x) return 2;
        memcpy(x, a.data, a.nbytes);
        code = encode(s, x, a.shape[0], out);
        free(x);
    }
    free(buf);
    return code;
}

int main(int argc, char **argv) {
    if (argc < 4 || argc % 2) {
        fprintf(stderr, "usage: sae_encode SAE_DIR X.npy OUT [X.npy OUT ...]\n");
        return 2;
    }
    struct sae_file f;
    struct ah_error err = {0};
    int rc = sae_open(&f, argv[1], &err);
    if (rc < 0) return fail(&err, rc);
    static const char *const arch[] = {"relu", "jumprelu", "topk"};
    static const char *const norm[] = {"none", "constant_norm_rescale", "layer_norm"};
    printf("layout %s arch %s d_in %lld d_sae %lld k %d b_dec_in %d norm %s\n",
           sae_layout_name(f.layout), arch[f.s.arch], (long long)f.s.d_in, (long long)f.s.d_sae,
           f.s.k, f.s.b_dec_in, norm[f.s.norm]);
    int code = 0;
    for (int i = 2; i + 1 < argc && code == 0; i += 2)
        code = encode_file(&f.s, argv[i], argv[i + 1]);
    sae_close(&f);
    return code;
}
