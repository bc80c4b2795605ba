// test_feistel.c - the export's keyed permutation: a bijection of [0, n) for n around powers of
// two and odd sizes, different keys give different orders, and the hashes: unit_hash in [0, 1)
// and about uniform, fnv64_words the same hashed whole or in pieces of multiples of 8 bytes.
#include "io/feistel.h"
#include "tests/check.h"

#include <stdlib.h>
#include <string.h>

static void test_feistel_is_a_bijection(void) {
    const uint64_t sizes[] = {1, 2, 3, 4, 5, 15, 16, 17, 1000, 4095, 4096, 4097, 65537, 300001};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        uint64_t n = sizes[k];
        uint8_t *seen = calloc(n, 1);
        struct feistel f;
        feistel_init(&f, n, 42 + k);
        uint64_t fixed = 0;
        for (uint64_t i = 0; i < n; i++) {
            uint64_t j = feistel_map(&f, i);
            CHECK(j < n);
            if (j >= n) break;
            CHECK(!seen[j]);
            seen[j] = 1;
            fixed += j == i;
        }
        if (n >= 1000) CHECK(fixed < n / 100); // shuffled, not the identity
        free(seen);
    }
}

static void test_feistel_keys_differ(void) {
    struct feistel a, b;
    feistel_init(&a, 100000, 1);
    feistel_init(&b, 100000, 2);
    int same = 0;
    for (uint64_t i = 0; i < 1000; i++)
        same += feistel_map(&a, i) == feistel_map(&b, i);
    CHECK(same < 10);
}

static void test_unit_hash_uniform(void) {
    int below = 0;
    for (uint64_t i = 0; i < 100000; i++) {
        double u = unit_hash(7, i);
        CHECK(u >= 0 && u < 1);
        below += u < 0.25;
    }
    CHECK(below > 24000 && below < 26000);
}

static void test_fnv_pieces(void) {
    unsigned char buf[1003];
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = (unsigned char)(i * 31 + 7);
    uint64_t whole = fnv64_words(FNV64_INIT, buf, sizeof buf);
    uint64_t h = fnv64_words(FNV64_INIT, buf, 512);
    h = fnv64_words(h, buf + 512, 488);
    h = fnv64_words(h, buf + 1000, 3);
    CHECK(h == whole);
    buf[500] ^= 1;
    CHECK(fnv64_words(FNV64_INIT, buf, sizeof buf) != whole);
}

int main(void) {
    test_feistel_is_a_bijection();
    test_feistel_keys_differ();
    test_unit_hash_uniform();
    test_fnv_pieces();
    return check_failures ? EXIT_FAILURE : EXIT_SUCCESS;
}
