// test_blocks.c - the shared pieces of model/blocks.h: the activations against float64 formulas
// of their torch definitions, the tensor list's names and shapes, the arena's aligned pieces.
#include "model/ah.h"
#include "model/blocks.h"
#include "model/hugemem.h"
#include "tests/check.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// |got - want| <= 1e-6 + 2e-6 |want|: float32 formulas (GELU's 1 + erf cancels for x << 0, as
// torch's float32 GELU does) against float64
static void near(const char *what, float x, double got, double want) {
    if (!(fabs(got - want) <= 1e-6 + 2e-6 * fabs(want))) {
        fprintf(stderr, "%s(%g): got %.9g, want %.9g\n", what, (double)x, got, want);
        check_failures++;
    }
}

static void test_activations(void) {
    for (int i = -400; i <= 400; i++) {
        float x = (float)i / 16.0f; // -25 .. 25: both sides of softplus' threshold
        double d = x, sig = 1.0 / (1.0 + exp(-d));
        near("silu", x, act_silu(x), d * sig);
        near("sigmoid", x, act_sigmoid(x), sig);
        near("softplus", x, act_softplus(x), d > 20 ? d : log1p(exp(d)));
        near("gelu", x, act_gelu(x), 0.5 * d * (1.0 + erf(d / sqrt(2.0))));
        near("gelu_tanh", x, act_gelu_tanh(x),
             0.5 * d *
                 (1.0 + tanh(sqrt(2.0 / 3.14159265358979323846) * (d + 0.044715 * d * d * d))));
    }
    CHECK(act_softplus(30.0f) == 30.0f); // torch's threshold: x itself
}

static void test_tensor_list(void) {
    struct model_tensor t[3];
    const uint16_t *b = NULL;
    const float *f = NULL;
    int n = 0;
    model_tensor_add(t, &n, &b, NULL, 8, 4, "model.layers", 3, "self_attn.q_proj.weight");
    model_tensor_add(t, &n, NULL, &f, 4, 0, NULL, 0, "model.norm.weight");
    model_tensor_add(NULL, &n, NULL, &f, 4, 0, NULL, 0, "counted only");
    CHECK_EQ(n, 3);
    CHECK(!strcmp(t[0].name, "model.layers.3.self_attn.q_proj.weight") && t[0].ndim == 2);
    CHECK(t[0].shape[0] == 8 && t[0].shape[1] == 4 && t[0].bf16 == &b && !t[0].dst);
    CHECK(!strcmp(t[1].name, "model.norm.weight") && t[1].ndim == 1 && t[1].dst == &f);
}

static void test_arena(void) {
    float *a, *b, *c;
    int64_t *d;
    struct arena_piece f[] = {
        {(void **)&a, 1}, {(void **)&b, 17}, {(void **)&c, 0}, {(void **)&d, 2 * 5}};
    void *arena = arena_alloc(f, 4);
    CHECK(arena == (void *)a);
    CHECK((uintptr_t)a % 64 == 0 && (uintptr_t)b % 64 == 0 && (uintptr_t)d % 64 == 0);
    CHECK(b == a + 16 && c == b + 32 && (float *)(void *)d == c);
    for (int i = 0; i < 5; i++) // every piece is usable to its length
        d[i] = i;
    memset(b, 0, 17 * sizeof *b);
    free(arena);
}

// a large arena (model/hugemem.h): aligned to 2 MiB, and, where the kernel gives transparent huge
// pages on advice ("always" or "madvise" in /sys/kernel/mm/transparent_hugepage/enabled), made of
// them once touched (AnonHugePages of its mapping in /proc/self/smaps; not under a sanitizer,
// whose allocator maps memory its own way); an impossible size is NULL, not a crash
static void test_huge_arena(void) {
    float *a;
    struct arena_piece f[] = {{(void **)&a, (int64_t)6 << 20}}; // 24 MiB
    void *arena = arena_alloc(f, 1);
    CHECK(arena && (uintptr_t)arena % HUGE_MIN == 0);
    memset(a, 1, sizeof(float) * ((size_t)6 << 20));
    char mode[128] = "";
    FILE *fp = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (fp && !fgets(mode, sizeof mode, fp)) mode[0] = 0;
    if (fp) fclose(fp);
    bool thp = strstr(mode, "[always]") || strstr(mode, "[madvise]");
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_UNDEFINED__)
    long huge_kb = -1;
    char line[512];
    uintptr_t at = (uintptr_t)arena;
    bool in = false; // within the mapping that holds the arena
    fp = fopen("/proc/self/smaps", "r");
    while (fp && fgets(line, sizeof line, fp)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' '))
            in = at >= lo && at < hi;
        else if (in && !strncmp(line, "AnonHugePages:", 14))
            huge_kb = strtol(line + 14, NULL, 10);
    }
    if (fp) fclose(fp);
    if (thp) CHECK(huge_kb >= 2048);
#endif
    (void)thp;
    free(arena);
    CHECK(huge_alloc(SIZE_MAX - 16) == NULL);
    void *small = huge_alloc(100);
    CHECK(small && (uintptr_t)small % 64 == 0);
    free(small);
}

// the one parser of the MLP activation names (model/ops.h), its error naming the file, the key
// and the value
static void test_cfg_act(void) {
    struct ah_error err = {0};
    enum op_act_kind a = OP_ACT_RELU;
    CHECK(block_cfg_act("c.json", "hidden_act", "gelu_pytorch_tanh", &a, &err) == 0);
    CHECK(a == OP_ACT_GELU_TANH && err.code == 0);
    CHECK(block_cfg_act("c.json", "hidden_act", "swish", &a, &err) == 0 && a == OP_ACT_SILU);
    CHECK(block_cfg_act("c.json", "hidden_activation", "gelu_10", &a, &err) == -AH_EINVAL);
    CHECK(strstr(err.msg, "c.json") && strstr(err.msg, "\"hidden_activation\"") &&
          strstr(err.msg, "\"gelu_10\"") && strstr(err.msg, "gelu_new") && a == OP_ACT_SILU);
    CHECK(block_cfg_act("c.json", "activation_function", NULL, &a, &err) == -AH_EINVAL);
    CHECK(strstr(err.msg, "\"activation_function\": that value is not supported"));
}

int main(void) {
    test_activations();
    test_tensor_list();
    test_arena();
    test_huge_arena();
    test_cfg_act();
    return check_failures ? EXIT_FAILURE : EXIT_SUCCESS;
}
