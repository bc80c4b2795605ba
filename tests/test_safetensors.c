// test_safetensors.c - st_write/st_open round trip in F32, F16 and BF16, widening through
// md_tensor_f32, and refusal of broken headers.
#define _POSIX_C_SOURCE 200809L // defines: mkdtemp
#include "io/halfconv.h"
#include "io/modeldir.h"
#include "io/safetensors.h"
#include "model/ah.h"
#include "tests/check.h"

#include <stdlib.h>
#include <string.h>
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
        {"{\"t\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]}}", "outside"},
        {"{\"t\": {\"dtype\": \"F32\", \"shape\": [-2], \"data_offsets\": [0, 8]}}", "bad shape"},
        {"{\"t\": {\"shape\": [2], \"data_offsets\": [0, 8]}}", "expected \"dtype\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t hl = strlen(cases[i].header);
        unsigned char buf[256] = {0};
        for (int k = 0; k < 8; k++)
            buf[k] = (unsigned char)(hl >> (8 * k));
        memcpy(buf + 8, cases[i].header, hl);
        write_file(path, buf, 8 + hl + 8); // 8 data bytes
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
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/ah_st_XXXXXX");
    if (!mkdtemp(dir)) return EXIT_FAILURE;
    test_round_trip_three_dtypes();
    test_broken_headers_are_refused();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) check_failures++;
    return check_failures ? EXIT_FAILURE : EXIT_SUCCESS;
}
