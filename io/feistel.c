// feistel.c - keyed permutation of [0, n) (see feistel.h).
#include "io/feistel.h"

#include <string.h>

uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

double unit_hash(uint64_t key, uint64_t x) {
    return (double)(mix64(mix64(key) ^ x) >> 11) * (1.0 / 9007199254740992.0);
}

void feistel_init(struct feistel *f, uint64_t n, uint64_t key) {
    int bits = 2;
    while (bits < 64 && (1ULL << bits) < n)
        bits++;
    bits += bits & 1; // even: two halves of equal width
    f->n = n;
    f->half = bits / 2;
    f->mask = (1ULL << f->half) - 1;
    for (int r = 0; r < 4; r++)
        f->key[r] = mix64(key + 0x632be59bd9b4e019ULL * (uint64_t)(r + 1));
}

static uint64_t encrypt(const struct feistel *f, uint64_t x) {
    uint64_t l = x >> f->half, r = x & f->mask;
    for (int k = 0; k < 4; k++) {
        uint64_t t = l ^ (mix64(r ^ f->key[k]) & f->mask);
        l = r;
        r = t;
    }
    return (l << f->half) | r;
}

uint64_t feistel_map(const struct feistel *f, uint64_t i) {
    // cycle-walking: the network permutes [0, 2^bits); following the cycle from i until it
    // re-enters [0, n) restricts it to a permutation of [0, n)
    do
        i = encrypt(f, i);
    while (i >= f->n);
    return i;
}

uint64_t fnv64_words(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    size_t w = n / 8;
    for (size_t k = 0; k < w; k++) {
        uint64_t v;
        memcpy(&v, p + 8 * k, 8);
        h = (h ^ v) * 0x100000001b3ULL;
    }
    for (size_t k = 8 * w; k < n; k++)
        h = (h ^ p[k]) * 0x100000001b3ULL;
    return h;
}
