// test_fp8.c - model/fp8.h: every float8_e4m3fn byte against its decode from the bits and a hand
// list (zeros, subnormals, 1, 448, NaN); the encoder rounds to nearest even, keeps the sign and
// round-trips every byte; block-scaled dequantization against its _ref twin with blocks at the
// edges (N, K not multiples of the block; bn != bk, so that a transposed scale index fails); the
// panel product against the float64 product of the dequantized matrix, and bit for bit against
// one sgemm of it, over several panels; the quantizer's scales and round trip.
#include "model/fp8.h"
#include "model/ops.h"
#include "tests/check.h"

#include <stdlib.h>
#include <string.h>

static uint32_t rng = 12345u;
static float frand(void) { // [-1, 1)
    rng = rng * 1664525u + 1013904223u;
    return (float)((rng >> 8) / 8388608.0 - 1.0);
}

static void test_every_byte_decodes(void) {
    for (int b = 0; b < 256; b++) {
        float t = fp8_e4m3(b), r = fp8_e4m3_ref((uint8_t)b);
        if (isnan(r)) {
            CHECK(isnan(t));
            CHECK((b & 0x7F) == 0x7F);
            continue;
        }
        if (memcmp(&t, &r, sizeof t)) {
            fprintf(stderr, "byte 0x%02x: table %.9g, from the bits %.9g\n", b, (double)t,
                    (double)r);
            check_failures++;
        }
    }
    // by hand: S.EEEE.MMM
    static const struct {
        uint8_t b;
        double v;
    } hand[] = {
        {0x00, 0.0},      {0x01, 0.001953125}, {0x02, 0.00390625}, {0x07, 0.013671875},
        {0x08, 0.015625}, {0x09, 0.017578125}, {0x38, 1.0},        {0x39, 1.125},
        {0x3C, 1.5},      {0x40, 2.0},         {0x7E, 448.0},      {0x77, 240.0},
        {0x78, 256.0},    {0xB8, -1.0},        {0xFE, -448.0},     {0x81, -0.001953125},
        {0x30, 0.5},      {0x2F, 0.46875},
    };
    for (size_t i = 0; i < sizeof hand / sizeof hand[0]; i++)
        if ((double)fp8_e4m3(hand[i].b) != hand[i].v) {
            fprintf(stderr, "byte 0x%02x: %.9g, by hand %.9g\n", hand[i].b,
                    (double)fp8_e4m3(hand[i].b), hand[i].v);
            check_failures++;
        }
    CHECK(isnan(fp8_e4m3(0x7F)) && isnan(fp8_e4m3(0xFF)));
    CHECK(fp8_e4m3(0x80) == 0.0f && signbit(fp8_e4m3(0x80)));
}

static void test_encode(void) {
    for (int b = 0; b < 256; b++)
        if (!isnan(fp8_e4m3(b))) CHECK_EQ(fp8_e4m3_encode(fp8_e4m3(b)), b);
    // nearest, ties to the even byte, over the whole range and the subnormals
    for (int i = 0; i < 200000; i++) {
        float x = frand() * (i % 2 ? 448.0f : 0.02f);
        uint8_t q = fp8_e4m3_encode(x);
        double v = fp8_e4m3(q), d = fabs(v - (double)x);
        for (int k = -1; k <= 1; k += 2) {
            int nb = (q & 0x7F) + k;
            if (nb < 0 || nb > 0x7E) continue;
            double w = fp8_e4m3((uint8_t)((q & 0x80) | nb)), dw = fabs(w - (double)x);
            if (dw < d || (dw == d && (q & 1))) {
                fprintf(stderr, "encode(%.9g) = 0x%02x (%.9g); 0x%02x (%.9g) is nearer\n",
                        (double)x, q, v, (q & 0x80) | nb, w);
                check_failures++;
                return;
            }
        }
    }
    CHECK_EQ(fp8_e4m3_encode(-1e-9f), 0x80);        // the sign kept, as torch's cast
    CHECK_EQ(fp8_e4m3_encode(0.0009765625f), 0x00); // 2^-10: the tie goes to even 0
    CHECK_EQ(fp8_e4m3_encode(0.0029296875f), 0x02); // 1.5 * 2^-9: to even 2
    CHECK_EQ(fp8_e4m3_encode(1.0625f), 0x38);       // tie between 1 and 1.125: 1
    CHECK_EQ(fp8_e4m3_encode(1.1875f), 0x3A);       // tie between 1.125 and 1.25: 1.25
    CHECK_EQ(fp8_e4m3_encode(500.0f) & 0x7F, 0x7F); // past the range: NaN (clamp first)
    CHECK_EQ(fp8_e4m3_encode(NAN) & 0x7F, 0x7F);
}

static void fill_q(uint8_t *q, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        q[i] = (uint8_t)((frand() + 1.0f) * 128.0f);
        if ((q[i] & 0x7F) == 0x7F) q[i] ^= 1; // no NaN in a weight
    }
}

static void fill_scales(float *s, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        s[i] = (frand() + 1.5f) * 0.01f;
}

// (N, K) in (bn, bk) blocks: every row range against the twin
static void check_dequant(int64_t N, int64_t K, int bn, int bk) {
    int64_t SN = (N + bn - 1) / bn, SK = (K + bk - 1) / bk;
    uint8_t *q = malloc((size_t)(N * K));
    float *s = malloc((size_t)(SN * SK) * sizeof *s), *a = malloc((size_t)(N * K) * sizeof *a);
    float *b = malloc((size_t)(N * K) * sizeof *b);
    fill_q(q, N * K);
    fill_scales(s, SN * SK);
    fp8_dequant_rows(a, q, s, K, 0, N, bn, bk);
    fp8_dequant_rows_ref(b, q, s, K, 0, N, bn, bk);
    char label[64];
    snprintf(label, sizeof label, "dequant %lldx%lld in %dx%d", (long long)N, (long long)K, bn, bk);
    check_close(label, a, b, N * K, 0.0f, 0.0f);
    int64_t r0 = N / 3, nr = N - r0 - 1;
    fp8_dequant_rows(a, q, s, K, r0, nr, bn, bk);
    check_close("dequant rows", a, b + r0 * K, nr * K, 0.0f, 0.0f);
    // the last block, by hand: its rows and columns are the partial ones
    float want = fp8_e4m3(q[N * K - 1]) * s[SN * SK - 1];
    CHECK(b[N * K - 1] == want);
    free(q), free(s), free(a), free(b);
}

static void test_dequant_edges(void) {
    check_dequant(300, 260, 128, 128);
    check_dequant(128, 256, 128, 128);
    check_dequant(37, 23, 7, 5);
    check_dequant(5, 41, 8, 16);
}

// out = in . W^T: vs the float64 product of the dequantized W; bit for bit vs one sgemm of it
static void check_matmul(int M, int K, int N, int bn, int bk) {
    int64_t SN = (N + bn - 1) / bn, SK = (K + bk - 1) / bk;
    uint8_t *q = malloc((size_t)N * K);
    float *s = malloc((size_t)(SN * SK) * sizeof *s), *w = malloc((size_t)N * K * sizeof *w);
    float *in = malloc((size_t)M * K * sizeof *in), *got = malloc((size_t)M * N * sizeof *got);
    float *ref = malloc((size_t)M * N * sizeof *ref), *one = malloc((size_t)M * N * sizeof *one);
    float *panel = malloc((size_t)op_bf16_panel_floats(K, N) * sizeof *panel);
    fill_q(q, (int64_t)N * K);
    fill_scales(s, SN * SK);
    for (int64_t i = 0; i < (int64_t)M * K; i++)
        in[i] = frand();
    fp8_dequant_rows_ref(w, q, s, K, 0, N, bn, bk);
    fp8_matmul(got, in, q, s, M, K, N, bn, bk, panel);
    op_matmul_ref(ref, in, w, M, K, N);
    op_matmul(one, in, w, M, K, N);
    char label[64];
    snprintf(label, sizeof label, "fp8_matmul %dx%dx%d", M, K, N);
    check_close(label, got, ref, (int64_t)M * N, 1e-4f, 1e-4f);
    if ((int64_t)N * K <= op_bf16_panel_floats(K, N)) // one panel: the same sgemm call
        CHECK(!memcmp(got, one, (size_t)M * N * sizeof *got));
    free(q), free(s), free(w), free(in), free(got), free(ref), free(one), free(panel);
}

static void test_matmul(void) {
    check_matmul(5, 260, 300, 128, 128);
    check_matmul(3, 37, 23, 7, 5);
    check_matmul(70, 4096, 2100, 128, 128); // three panels of 700 rows
}

static void test_quantize(void) {
    int64_t N = 200, K = 150, SN = 2, SK = 2;
    float *w = malloc((size_t)(N * K) * sizeof *w), *back = malloc((size_t)(N * K) * sizeof *w);
    uint8_t *q = malloc((size_t)(N * K));
    float s[4];
    for (int64_t i = 0; i < N * K; i++)
        w[i] = frand() * 0.05f;
    for (int64_t r = 128; r < N; r++) // an all-zero block: scale 1, bytes 0
        for (int64_t c = 128; c < K; c++)
            w[r * K + c] = 0.0f;
    fp8_quantize(q, s, w, N, K, 128, 128);
    CHECK(s[SN * SK - 1] == 1.0f && q[N * K - 1] == 0);
    float m = 0.0f;
    for (int64_t r = 0; r < 128; r++)
        for (int64_t c = 0; c < 128; c++)
            m = fabsf(w[r * K + c]) > m ? fabsf(w[r * K + c]) : m;
    CHECK(s[0] == 1.0f / (448.0f / m));
    fp8_dequant_rows(back, q, s, K, 0, N, 128, 128);
    for (int64_t i = 0; i < N * K; i++) { // within half a step of 3 mantissa bits (or subnormal)
        double e = fabs((double)back[i] - (double)w[i]);
        if (e > fabs((double)w[i]) / 16.0 + 0.0009765625 * (double)s[0]) {
            fprintf(stderr, "quantize[%lld]: %.9g back as %.9g\n", (long long)i, (double)w[i],
                    (double)back[i]);
            check_failures++;
            break;
        }
    }
    free(w), free(back), free(q);
}

int main(void) {
    test_every_byte_decodes();
    test_encode();
    test_dequant_edges();
    test_matmul();
    test_quantize();
    return check_failures ? EXIT_FAILURE : EXIT_SUCCESS;
}
