// test_safetensors.c - st_write/st_open round trip in F32, F16 and BF16, widening through
// md_tensor_f32, and refusal of broken headers (fractional shapes and offsets, overlapping data,
// a name twice), of FIFOs, of fractional config integers and of non-finite weights; the pages the
// load's checks read are released from the process, and read back right.
#define _POSIX_C_SOURCE 200809L // defines: mkdtemp
#include "io/halfconv.h"
#include "io/modeldir.h"
#include "io/safetensors.h"
#include "model/ah.h"
#include "tests/check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[64];

static void write_file(const char *path, const void *data, size_t n) {
    FILE *fp = fopen(path, "wb");
    CHECK(fp && fwrite(data, 1, n, fp) == n);
    if (fp) fclose(fp);
}

static void test_round_trip_three_dtypes(void) {
    float a[6];
    uint16_t h[6], b[6];
    check_fill(a, 6, 1);
    hc_f32_to_f16_n(h, a, 6);
    hc_f32_to_bf16_n(b, a, 6);
    struct st_wtensor t[3] = {
        {"a", ST_F32, 2, {2, 3}, a}, {"h", ST_F16, 1, {6}, h}, {"b", ST_BF16, 2, {3, 2}, b}};
    char path[128], cfg[128];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    struct ah_error err = {0};
    CHECK_EQ(st_write(path, t, 3, &err), 0);
    struct st_file f;
    CHECK_EQ(st_open(&f, path, &err), 0);
    CHECK_EQ(f.n, 3);
    const struct st_tensor *ta = st_find(&f, "a");
    CHECK(ta && ta->dtype == ST_F32 && ta->ndim == 2 && ta->shape[1] == 3 && ta->nbytes == 24);
    CHECK(ta && memcmp(ta->data, a, 24) == 0);
    CHECK(st_find(&f, "zz") == NULL);
    st_close(&f);

    write_file(cfg, "{\"x\": 3}", 8);
    struct modeldir md;
    CHECK_EQ(md_open(&md, dir, false, &err), 0);
    const float *v = NULL;
    int64_t s6[1] = {6}, s23[2] = {2, 3}, s32[2] = {3, 2};
    CHECK_EQ(md_tensor_f32(&md, "a", 2, s23, &v, &err), 0);
    check_close("F32 view", v, a, 6, 0, 0);
    float wh[6], wb[6];
    for (int i = 0; i < 6; i++)
        wh[i] = hc_f16_to_f32(h[i]), wb[i] = hc_bf16_to_f32(b[i]);
    CHECK_EQ(md_tensor_f32(&md, "h", 1, s6, &v, &err), 0);
    check_close("F16 widened", v, wh, 6, 0, 0);
    CHECK_EQ(md_tensor_f32(&md, "b", 2, s32, &v, &err), 0);
    check_close("BF16 widened", v, wb, 6, 0, 0);
    CHECK_EQ(md_tensor_f32(&md, "b", 2, s23, &v, &err), -AH_EFORMAT);
    CHECK(strstr(err.msg, "shape [3, 2], expected [2, 3]") != NULL);
    int x = 0;
    CHECK_EQ(md_config_int(&md, "x", true, &x, &err), 0);
    CHECK_EQ(x, 3);
    CHECK_EQ(md_config_int(&md, "y", true, &x, &err), -AH_EINVAL);
    md_close(&md);
    md_close(&md); // safe twice
}

static void test_broken_headers_are_refused(void) {
    char path[128];
    snprintf(path, sizeof path, "%s/bad.safetensors", dir);
    struct {
        const char *header, *needle;
    } cases[] = {
        {"not json", "not a JSON object"},
        {"{\"t\": {\"dtype\": \"F64\", \"shape\": [1], \"data_offsets\": [0, 8]}}",
         "unsupported dtype"},
        {"{\"t\": {\"dtype\": \"F32\", \"shape\": [3], \"data_offsets\": [0, 8]}}", "need 12"},
        {"{\"t\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [12, 20]}}", "outside"},
        {"{\"t\": {\"dtype\": \"F32\", \"shape\": [-2], \"data_offsets\": [0, 8]}}",
         "\"t\": shape entry 0: expected an integer >= 0, not -2"},
        {"{\"t\": {\"shape\": [2], \"data_offsets\": [0, 8]}}", "expected \"dtype\""},
        {"{\"t\": {\"dtype\": \"U8\", \"shape\": [2.5, 2], \"data_offsets\": [0, 5]}}",
         "\"t\": shape entry 0: expected an integer >= 0, not 2.5"},
        {"{\"t\": {\"dtype\": \"U8\", \"shape\": [2], \"data_offsets\": [0.5, 2.5]}}",
         "\"t\": data_offsets[0]: expected an integer >= 0, not 0.5"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}, "
         "\"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]}}",
         "tensors \"a\" and \"b\" overlap: data_offsets [0, 8] and [4, 12]"},
        {"{\"b\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [8, 12]}, "
         "\"a\": {\"dtype\": \"F32\", \"shape\": [3], \"data_offsets\": [0, 12]}}",
         "tensors \"a\" and \"b\" overlap"},
        {"{\"t\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}, "
         "\"t\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [8, 16]}}",
         "tensor \"t\" appears twice in the header"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t hl = strlen(cases[i].header);
        unsigned char buf[512] = {0};
        for (int k = 0; k < 8; k++)
            buf[k] = (unsigned char)(hl >> (8 * k));
        memcpy(buf + 8, cases[i].header, hl);
        write_file(path, buf, 8 + hl + 16); // 16 data bytes
        struct st_file f;
        struct ah_error err = {0};
        int rc = st_open(&f, path, &err);
        CHECK_EQ(rc, -AH_EFORMAT);
        if (!strstr(err.msg, cases[i].needle) || !strstr(err.msg, "bad.safetensors")) {
            fprintf(stderr, "case %zu: message \"%s\" lacks \"%s\"\n", i, err.msg, cases[i].needle);
            check_failures++;
        }
        st_close(&f); // safe after a failed open
    }
    struct st_file f;
    struct ah_error err = {0};
    CHECK_EQ(st_open(&f, "/nonexistent/x.safetensors", &err), -AH_ENOENT);
    // two tensors back to back, and an empty one anywhere: no overlap
    const char *fine = "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}, "
                       "\"e\": {\"dtype\": \"F32\", \"shape\": [0], \"data_offsets\": [4, 4]}, "
                       "\"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [8, 16]}}";
    unsigned char buf[512] = {0};
    size_t hl = strlen(fine);
    for (int k = 0; k < 8; k++)
        buf[k] = (unsigned char)(hl >> (8 * k));
    memcpy(buf + 8, fine, hl);
    write_file(path, buf, 8 + hl + 16);
    CHECK_EQ(st_open(&f, path, &err), 0);
    CHECK_EQ(f.n, 3);
    st_close(&f);
}

// a FIFO in place of the weights: refused at once, not an open() that waits for a writer
static void test_fifo_is_refused(void) {
    char path[128];
    snprintf(path, sizeof path, "%s/fifo.safetensors", dir);
    CHECK_EQ(mkfifo(path, 0600), 0);
    struct st_file f;
    struct ah_error err = {0};
    CHECK_EQ(st_open(&f, path, &err), -AH_EINVAL);
    CHECK(strstr(err.msg, "fifo.safetensors: not a regular file (a FIFO)") != NULL);
    CHECK_EQ(st_regular(path, &err), -AH_EINVAL);
    CHECK_EQ(st_regular(dir, &err), -AH_EINVAL);
    CHECK(strstr(err.msg, "not a regular file (a folder)") != NULL);
    unlink(path);
}

// config integers: 2.5 and 1e10 are no ints (the latter was an undefined conversion)
static void test_config_int_refuses_fractions(void) {
    char cfg[128];
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    const char *text = "{\"a\": 2.5, \"b\": 1e10, \"c\": -7, \"d\": \"3\", \"e\": 2.0}";
    write_file(cfg, text, strlen(text));
    struct modeldir md;
    struct ah_error err = {0};
    CHECK_EQ(md_open(&md, cfg, true, &err), 0);
    int x = 0;
    const char *bad[] = {"a", "b", "d"};
    for (int i = 0; i < 3; i++) {
        char want[64];
        snprintf(want, sizeof want, "config.json: \"%s\": expected an integer", bad[i]);
        CHECK_EQ(md_config_int(&md, bad[i], true, &x, &err), -AH_EINVAL);
        CHECK(strstr(err.msg, want) != NULL);
    }
    CHECK_EQ(md_config_int(&md, "c", true, &x, &err), 0);
    CHECK_EQ(x, -7);
    CHECK_EQ(md_config_int(&md, "e", true, &x, &err), 0);
    CHECK_EQ(x, 2);
    md_close(&md);
}

// NaN or Inf anywhere in a weight: refused naming the file, the tensor and the element, in each
// dtype and through both views; finite extremes (the largest finite value) pass
static void test_nonfinite_weights_are_refused(void) {
    float a[40];
    check_fill(a, 40, 2);
    float big[3] = {3.3895313892515355e38f, -65504.0f, 1e-40f};
    uint16_t h[40], b[40], hb[3], bb[3];
    hc_f32_to_f16_n(h, a, 40);
    hc_f32_to_bf16_n(b, a, 40);
    hc_f32_to_bf16_n(bb, big, 3);
    hc_f32_to_f16_n(hb, big + 1, 2);
    float an[40], ai[40];
    memcpy(an, a, sizeof a);
    memcpy(ai, a, sizeof a);
    an[37] = NAN;
    ai[5] = -INFINITY;
    uint16_t hn[40], bn[40];
    memcpy(hn, h, sizeof h);
    memcpy(bn, b, sizeof b);
    hn[33] = 0x7c00; // +Inf in F16
    bn[38] = 0x7fc1; // a NaN in BF16
    uint16_t bi[40];
    memcpy(bi, b, sizeof b);
    bi[0] = 0xff80; // -Inf in BF16
    struct st_wtensor t[] = {
        {"ok32", ST_F32, 1, {40}, a},    {"ok16", ST_F16, 1, {40}, h},
        {"okbf", ST_BF16, 1, {40}, b},   {"nan32", ST_F32, 1, {40}, an},
        {"inf32", ST_F32, 1, {40}, ai},  {"inf16", ST_F16, 1, {40}, hn},
        {"nanbf", ST_BF16, 1, {40}, bn}, {"infbf", ST_BF16, 1, {40}, bi},
        {"bigbf", ST_BF16, 1, {3}, bb},  {"big16", ST_F16, 1, {2}, hb},
    };
    int n = (int)(sizeof t / sizeof t[0]);
    char path[128], cfg[128];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    write_file(cfg, "{}", 2);
    struct ah_error err = {0};
    CHECK_EQ(st_write(path, t, n, &err), 0);
    struct modeldir md;
    CHECK_EQ(md_open(&md, dir, false, &err), 0);
    int64_t s40[1] = {40}, s3[1] = {3}, s2[1] = {2};
    const float *v;
    const uint16_t *u;
    CHECK_EQ(md_tensor_f32(&md, "ok32", 1, s40, &v, &err), 0);
    CHECK_EQ(md_tensor_f32(&md, "ok16", 1, s40, &v, &err), 0);
    CHECK_EQ(md_tensor_f32(&md, "okbf", 1, s40, &v, &err), 0);
    CHECK_EQ(md_tensor_bf16(&md, "okbf", 1, s40, &u, &err), 0);
    CHECK_EQ(md_tensor_bf16(&md, "bigbf", 1, s3, &u, &err), 0);
    CHECK_EQ(md_tensor_f32(&md, "big16", 1, s2, &v, &err), 0);
    struct {
        const char *name, *needle;
        bool bf16_view;
    } bad[] = {
        {"nan32", "tensor \"nan32\": element 37 (flat index) is NaN", false},
        {"inf32", "tensor \"inf32\": element 5 (flat index) is -Inf", false},
        {"inf16", "tensor \"inf16\": element 33 (flat index) is +Inf", false},
        {"nanbf", "tensor \"nanbf\": element 38 (flat index) is NaN", false},
        {"nanbf", "tensor \"nanbf\": element 38 (flat index) is NaN", true},
        {"infbf", "tensor \"infbf\": element 0 (flat index) is -Inf", true},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = bad[i].bf16_view ? md_tensor_bf16(&md, bad[i].name, 1, s40, &u, &err)
                                  : md_tensor_f32(&md, bad[i].name, 1, s40, &v, &err);
        CHECK_EQ(rc, -AH_EFORMAT);
        if (!strstr(err.msg, bad[i].needle) || !strstr(err.msg, "model.safetensors")) {
            fprintf(stderr, "%s: message \"%s\" lacks \"%s\"\n", bad[i].name, err.msg,
                    bad[i].needle);
            check_failures++;
        }
    }
    md_close(&md);
}

// Resident kB of the mapping of this process that contains p (/proc/self/smaps), -1 if unknown
static long resident_kb(const void *p) {
    FILE *fp = fopen("/proc/self/smaps", "r");
    char line[512];
    bool in = false;
    long kb = -1;
    while (fp && fgets(line, sizeof line, fp)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) // a mapping's first line
            in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
        else if (in && sscanf(line, "Rss: %ld kB", &kb) == 1)
            break;
    }
    if (fp) fclose(fp);
    return kb;
}

// 2 MiB of BF16 and 2 MiB of F32, checked (so read) by the load: afterwards at most the pages
// the tensors share with the header stay resident, and the views read the file's values
static void test_checked_pages_are_released(void) {
    enum { N = 1 << 20, NF = 1 << 19 };
    float *a = malloc(NF * sizeof *a), *w = malloc(N * sizeof *w);
    uint16_t *b = malloc(N * sizeof *b);
    CHECK(a && w && b);
    if (!a || !w || !b) return;
    check_fill(a, NF, 3);
    check_fill(w, N, 4);
    hc_f32_to_bf16_n(b, w, N);
    struct st_wtensor t[] = {{"w", ST_BF16, 1, {N}, b}, {"f", ST_F32, 1, {NF}, a}};
    char path[128], cfg[128];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    write_file(cfg, "{}", 2);
    struct ah_error err = {0};
    CHECK_EQ(st_write(path, t, 2, &err), 0);
    struct modeldir md;
    CHECK_EQ(md_open(&md, dir, false, &err), 0);
    int64_t sn[1] = {N}, snf[1] = {NF};
    const uint16_t *u = NULL;
    const float *v = NULL;
    CHECK_EQ(md_tensor_bf16(&md, "w", 1, sn, &u, &err), 0);
    CHECK_EQ(md_tensor_f32(&md, "f", 1, snf, &v, &err), 0);
    long kb = u ? resident_kb(u) : -1;
    if (kb >= 0 && kb > 64) { // of 4 MiB mapped and read by the checks
        fprintf(stderr, "after the load: %ld kB of the checkpoint resident, expected <= 64\n", kb);
        check_failures++;
    }
    CHECK(u && memcmp(u, b, N * sizeof *b) == 0); // read back from the file
    CHECK(v && memcmp(v, a, NF * sizeof *a) == 0);
    CHECK(kb < 0 || resident_kb(u) >= 4096); // and now resident again
    md_close(&md);
    free(a), free(w), free(b);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/ah_st_XXXXXX");
    if (!mkdtemp(dir)) return EXIT_FAILURE;
    test_round_trip_three_dtypes();
    test_broken_headers_are_refused();
    test_fifo_is_refused();
    test_config_int_refuses_fractions();
    test_nonfinite_weights_are_refused();
    test_checked_pages_are_released();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) check_failures++;
    return check_failures ? EXIT_FAILURE : EXIT_SUCCESS;
}
