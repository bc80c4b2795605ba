// feistel.h - a keyed bijection over [0, n) for shuffling token indices in flat memory, and the
// keyed hashes the export uses to split documents and to check shards.
//
// feistel_map(&f, i) is a permutation of [0, n): a balanced Feistel network of 4 rounds over the
// smallest even number of bits covering n, with cycle-walking (a value >= n is encrypted again
// until it lands in [0, n); on average fewer than 4 steps). No table: O(1) memory whatever n.
#ifndef AH_FEISTEL_H
#define AH_FEISTEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct feistel {
    uint64_t n;      // domain [0, n)
    uint64_t key[4]; // one key a round
    int half;        // bits of each half
    uint64_t mask;   // (1 << half) - 1
};

// Sets up the permutation of [0, n) for the key (n >= 1).
void feistel_init(struct feistel *f, uint64_t n, uint64_t key);
// The image of i (0 <= i < n) under the permutation.
uint64_t feistel_map(const struct feistel *f, uint64_t i);

// splitmix64's finaliser: a well-mixed 64-bit hash of x.
uint64_t mix64(uint64_t x);
// A uniform number in [0, 1) keyed by (key, x): the held-out split draws one per document.
double unit_hash(uint64_t key, uint64_t x);

// FNV-1a over 64-bit words (the trailing n % 8 bytes byte by byte), chained from h: the same
// result for a buffer hashed whole or in pieces whose sizes are multiples of 8 bytes.
#define FNV64_INIT 0xcbf29ce484222325ULL
uint64_t fnv64_words(uint64_t h, const void *data, size_t n);

#endif
