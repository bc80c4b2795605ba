// sae_npz.c - the .npy format and the members of an .npz (a zip archive of .npy files, as
// numpy.savez writes it: stored, or deflated by savez_compressed; Zip64 extra fields as numpy
// writes them with force_zip64). Only what reading an archive in memory needs: the central
// directory, each member's local header, stored or deflated data (zlib), its CRC-32.
#include "io/sae_npz.h"

#include "io/sae.h"
#include "model/ah.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h> // defines: inflateInit2, inflate, crc32

// ----------------------------------------------------------------------------
// .npy

size_t sae_npy_elsize(const char *d) {
    static const char *const names[] = {"<f4", "<f2", "<f8", "<i4", "<i8", "|u1", "<u4", "|i1"};
    static const size_t sizes[] = {4, 2, 8, 4, 8, 1, 4, 1};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
        if (!strcmp(d, names[i])) return sizes[i];
    return 0;
}

// the value text after 'key': in the header dict h, or NULL
static const char *npy_value(const char *h, const char *key) {
    const char *p = strstr(h, key);
    if (!p) return NULL;
    p = strchr(p + strlen(key), ':');
    if (!p) return NULL;
    for (p++; *p == ' '; p++) {
    }
    return p;
}

// "(3, 4)" or "(3,)" or "()" into shape
static int npy_shape(struct sae_npy *a, const char *p) {
    if (*p++ != '(') return -1;
    a->ndim = 0;
    for (;;) {
        while (*p == ' ' || *p == ',')
            p++;
        if (*p == ')') return 0;
        if (*p < '0' || *p > '9' || a->ndim == ST_MAX_DIMS) return -1;
        char *end;
        long long v = strtoll(p, &end, 10);
        if (v < 0 || end == p) return -1;
        a->shape[a->ndim++] = v;
        p = end;
    }
}

int sae_npy_parse(struct sae_npy *a, const void *buf, size_t n, const char *what,
                  struct ah_error *err) {
    const unsigned char *b = buf;
    *a = (struct sae_npy){0};
    if (n < 10 || memcmp(b, "\x93NUMPY", 6) || b[6] < 1 || b[6] > 3)
        return ah_fail(err, AH_EFORMAT, "%s: not an .npy array (no \\x93NUMPY magic)", what);
    size_t hl = b[6] == 1
                    ? (size_t)b[8] | (size_t)b[9] << 8
                    : (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 | (size_t)b[11] << 24;
    size_t h0 = b[6] == 1 ? 10 : 12;
    if (hl > 65536 || h0 + hl > n)
        return ah_fail(err, AH_EFORMAT, "%s: .npy header runs past the end", what);
    char h[65537];
    memcpy(h, b + h0, hl);
    h[hl] = '\0';
    const char *d = npy_value(h, "'descr'"), *fo = npy_value(h, "'fortran_order'");
    const char *sh = npy_value(h, "'shape'");
    if (!d || *d != '\'' || !fo || !sh)
        return ah_fail(err, AH_EFORMAT, "%s: .npy header without descr, fortran_order or shape",
                       what);
    size_t dl = strcspn(d + 1, "'");
    if (dl >= sizeof a->descr) dl = sizeof a->descr - 1;
    memcpy(a->descr, d + 1, dl);
    size_t es = sae_npy_elsize(a->descr);
    if (!es) return ah_fail(err, AH_EFORMAT, "%s: .npy dtype '%s' is not read", what, a->descr);
    if (strncmp(fo, "False", 5))
        return ah_fail(err, AH_EFORMAT, "%s: a Fortran-order .npy array is not read", what);
    if (npy_shape(a, sh) < 0) return ah_fail(err, AH_EFORMAT, "%s: .npy shape unreadable", what);
    size_t count = 1;
    for (int i = 0; i < a->ndim; i++) {
        if (a->shape[i] && count > SIZE_MAX / 16 / (size_t)a->shape[i])
            return ah_fail(err, AH_EFORMAT, "%s: .npy shape too large", what);
        count *= (size_t)a->shape[i];
    }
    a->nbytes = count * es;
    if (a->nbytes != n - h0 - hl)
        return ah_fail(err, AH_EFORMAT, "%s: .npy data is %zu bytes, its shape needs %zu", what,
                       n - h0 - hl, a->nbytes);
    a->data = b + h0 + hl;
    return 0;
}

// ----------------------------------------------------------------------------
// zip

static uint64_t le(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

// The central directory: *cd its first byte, *n_entries, *cd_size. 0 or -1.
static int zip_directory(const unsigned char *m, size_t size, size_t *cd, uint64_t *n_entries,
                         uint64_t *cd_size) {
    if (size < 22) return -1;
    size_t lo = size > 65557 ? size - 65557 : 0, e = size - 22;
    for (;; e--) {
        if (le(m + e, 4) == 0x06054b50) break;
        if (e == lo) return -1;
    }
    *n_entries = le(m + e + 10, 2), *cd_size = le(m + e + 12, 4);
    uint64_t off = le(m + e + 16, 4);
    if (*n_entries == 0xffff || off == 0xffffffff || *cd_size == 0xffffffff) { // Zip64
        if (e < 20 || le(m + e - 20, 4) != 0x07064b50) return -1;
        uint64_t z = le(m + e - 20 + 8, 8);
        if (size < 56 || z > size - 56 || le(m + z, 4) != 0x06064b50) return -1;
        *n_entries = le(m + z + 32, 8), *cd_size = le(m + z + 40, 8), off = le(m + z + 48, 8);
    }
    if (off > size || *cd_size > size - off) return -1;
    *cd = (size_t)off;
    return 0;
}

// a central directory entry's Zip64 extra field: the 64-bit values of the fields that are
// 0xffffffff, in the order usize, csize, offset
static void zip64_extra(const unsigned char *x, size_t xn, uint64_t *usize, uint64_t *csize,
                        uint64_t *off) {
    for (size_t i = 0; i + 4 <= xn;) {
        size_t id = le(x + i, 2), len = le(x + i + 2, 2), p = i + 4;
        if (id == 1) {
            uint64_t *f[3] = {usize, csize, off};
            for (int k = 0; k < 3; k++)
                if (*f[k] == 0xffffffff && p + 8 <= i + 4 + len && p + 8 <= xn)
                    *f[k] = le(x + p, 8), p += 8;
            return;
        }
        i += 4 + len;
    }
}

struct zip_entry {
    int method;
    uint32_t crc;
    uint64_t csize, usize, off;
};

// the entry named name, or 1 when there is none; -1 when the directory is damaged
static int zip_find(const unsigned char *m, size_t size, const char *name, struct zip_entry *z) {
    size_t p;
    uint64_t n, cds;
    if (zip_directory(m, size, &p, &n, &cds) < 0) return -1;
    size_t end = p + (size_t)cds, nl = strlen(name);
    for (uint64_t i = 0; i < n; i++) {
        if (p + 46 > end || le(m + p, 4) != 0x02014b50) return -1;
        size_t fnl = le(m + p + 28, 2), xl = le(m + p + 30, 2), cl = le(m + p + 32, 2);
        if (p + 46 + fnl + xl + cl > end) return -1;
        if (fnl == nl && !memcmp(m + p + 46, name, nl)) {
            if (le(m + p + 8, 2) & 1) return -1; // encrypted
            *z = (struct zip_entry){(int)le(m + p + 10, 2), (uint32_t)le(m + p + 16, 4),
                                    le(m + p + 20, 4), le(m + p + 24, 4), le(m + p + 42, 4)};
            zip64_extra(m + p + 46 + fnl, xl, &z->usize, &z->csize, &z->off);
            return 0;
        }
        p += 46 + fnl + xl + cl;
    }
    return 1;
}

static int inflate_raw(unsigned char *out, size_t on, const unsigned char *in, size_t in_n) {
    z_stream zs = {0};
    if (inflateInit2(&zs, -MAX_WBITS) != Z_OK) return -1;
    int rc = 0;
    size_t done_in = 0, done_out = 0;
    while (rc == 0) {
        size_t ci = in_n - done_in > 1u << 30 ? 1u << 30 : in_n - done_in;
        size_t co = on - done_out > 1u << 30 ? 1u << 30 : on - done_out;
        zs.next_in = (Bytef *)(uintptr_t)(in + done_in), zs.avail_in = (uInt)ci;
        zs.next_out = out + done_out, zs.avail_out = (uInt)co;
        int z = inflate(&zs, Z_NO_FLUSH);
        done_in += ci - zs.avail_in, done_out += co - zs.avail_out;
        if (z == Z_STREAM_END) break;
        if (z != Z_OK || (zs.avail_in == ci && zs.avail_out == co)) rc = -1;
    }
    inflateEnd(&zs);
    return rc == 0 && done_out == on ? 0 : -1;
}

static uint32_t crc_of(const unsigned char *p, size_t n) {
    uLong c = crc32(0L, Z_NULL, 0);
    for (size_t i = 0; i < n;) {
        size_t k = n - i > 1u << 30 ? 1u << 30 : n - i;
        c = crc32(c, p + i, (uInt)k);
        i += k;
    }
    return (uint32_t)c;
}

int sae_npz_member(struct sae_npz_data *d, const void *map, size_t size, const char *path,
                   const char *name, struct ah_error *err) {
    const unsigned char *m = map;
    struct zip_entry z;
    *d = (struct sae_npz_data){0};
    int rc = zip_find(m, size, name, &z);
    if (rc == 1) return 1;
    if (rc < 0) return ah_fail(err, AH_EFORMAT, "%s: not a readable zip archive (npz)", path);
    if (size < 30 || z.off > size - 30 || le(m + z.off, 4) != 0x04034b50)
        return ah_fail(err, AH_EFORMAT, "%s: %s: damaged local header", path, name);
    uint64_t data = z.off + 30 + le(m + z.off + 26, 2) + le(m + z.off + 28, 2);
    if (data > size || z.csize > size - data)
        return ah_fail(err, AH_EFORMAT, "%s: %s: runs past the end of the file", path, name);
    if (z.method == 0) {
        if (z.csize != z.usize)
            return ah_fail(err, AH_EFORMAT, "%s: %s: stored sizes disagree", path, name);
        d->data = m + data, d->n = (size_t)z.usize;
    } else if (z.method == 8) {
        if (z.usize > (uint64_t)1 << 40)
            return ah_fail(err, AH_EFORMAT, "%s: %s: %llu bytes uncompressed", path, name,
                           (unsigned long long)z.usize);
        d->owned = malloc(z.usize ? (size_t)z.usize : 1);
        if (!d->owned) return ah_fail(err, AH_ENOMEM, "%s: %s: no memory", path, name);
        if (inflate_raw(d->owned, (size_t)z.usize, m + data, (size_t)z.csize) < 0) {
            sae_npz_free(d);
            return ah_fail(err, AH_EFORMAT, "%s: %s: deflate data damaged", path, name);
        }
        d->data = d->owned, d->n = (size_t)z.usize;
    } else {
        return ah_fail(err, AH_EFORMAT, "%s: %s: zip method %d is not read (stored or deflate)",
                       path, name, z.method);
    }
    if (crc_of(d->data, d->n) != z.crc) {
        sae_npz_free(d);
        return ah_fail(err, AH_EFORMAT, "%s: %s: CRC-32 mismatch (the archive is damaged)", path,
                       name);
    }
    return 0;
}

void sae_npz_free(struct sae_npz_data *d) {
    free(d->owned);
    *d = (struct sae_npz_data){0};
}

// ----------------------------------------------------------------------------
// writing: numpy.savez's layout (stored members), for init-sae

struct npz_w {
    FILE *fp;
    uint64_t off;
    unsigned char *cd; // the central directory so far; owned
    size_t cd_n, cd_cap;
    int n;
};

static void put(unsigned char *p, uint64_t v, int n) {
    for (int i = 0; i < n; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static int npz_add(struct npz_w *w, const char *name, const void *hdr, size_t hn, const void *data,
                   size_t dn) {
    size_t nl = strlen(name), total = hn + dn;
    uLong c = crc32(crc32(0L, Z_NULL, 0), hdr, (uInt)hn);
    for (size_t i = 0; i < dn;) {
        size_t k = dn - i > 1u << 30 ? 1u << 30 : dn - i;
        c = crc32(c, (const Bytef *)data + i, (uInt)k);
        i += k;
    }
    if (total >= 0xffffffffu || w->off >= 0xffffffffu) return -1; // no Zip64 writer
    unsigned char lh[30] = {0};
    put(lh, 0x04034b50, 4), put(lh + 4, 20, 2), put(lh + 14, c, 4);
    put(lh + 18, total, 4), put(lh + 22, total, 4), put(lh + 26, nl, 2);
    if (fwrite(lh, 1, 30, w->fp) != 30 || fwrite(name, 1, nl, w->fp) != nl ||
        fwrite(hdr, 1, hn, w->fp) != hn || (dn && fwrite(data, 1, dn, w->fp) != dn))
        return -1;
    if (w->cd_n + 46 + nl > w->cd_cap) {
        size_t cap = (w->cd_cap + 46 + nl) * 2;
        unsigned char *p = realloc(w->cd, cap);
        if (!p) return -1;
        w->cd = p, w->cd_cap = cap;
    }
    unsigned char *e = w->cd + w->cd_n;
    memset(e, 0, 46);
    put(e, 0x02014b50, 4), put(e + 4, 20, 2), put(e + 6, 20, 2), put(e + 16, c, 4);
    put(e + 20, total, 4), put(e + 24, total, 4), put(e + 28, nl, 2), put(e + 42, w->off, 4);
    memcpy(e + 46, name, nl);
    w->cd_n += 46 + nl, w->n++, w->off += 30 + nl + total;
    return 0;
}

static int npz_end(struct npz_w *w) {
    unsigned char e[22] = {0};
    put(e, 0x06054b50, 4), put(e + 8, (uint64_t)w->n, 2), put(e + 10, (uint64_t)w->n, 2);
    put(e + 12, w->cd_n, 4), put(e + 16, w->off, 4);
    return fwrite(w->cd, 1, w->cd_n, w->fp) == w->cd_n && fwrite(e, 1, 22, w->fp) == 22 ? 0 : -1;
}

int sae_npz_write(const char *path, const struct sae_npz_array *a, int n) {
    struct npz_w w = {fopen(path, "wb"), 0, NULL, 0, 0, 0};
    if (!w.fp) return -1;
    int rc = 0;
    for (int i = 0; rc == 0 && i < n; i++) {
        char dict[256], hdr[256], name[128];
        if (a[i].ndim == 1)
            snprintf(dict, sizeof dict,
                     "{'descr': '<f4', 'fortran_order': False, 'shape': (%lld,), }",
                     (long long)a[i].shape[0]);
        else
            snprintf(dict, sizeof dict,
                     "{'descr': '<f4', 'fortran_order': False, 'shape': (%lld, %lld), }",
                     (long long)a[i].shape[0], (long long)a[i].shape[1]);
        size_t dl = strlen(dict), hl = (10 + dl + 1 + 63) / 64 * 64; // padded to 64, as numpy
        memcpy(hdr, "\x93NUMPY\x01\x00", 8);
        put((unsigned char *)hdr + 8, hl - 10, 2);
        memcpy(hdr + 10, dict, dl);
        memset(hdr + 10 + dl, ' ', hl - 10 - dl - 1);
        hdr[hl - 1] = '\n';
        size_t count = (size_t)a[i].shape[0] * (size_t)(a[i].ndim == 2 ? a[i].shape[1] : 1);
        snprintf(name, sizeof name, "%s.npy", a[i].name);
        rc = npz_add(&w, name, hdr, hl, a[i].data, count * sizeof(float));
    }
    if (rc == 0) rc = npz_end(&w);
    free(w.cd);
    if (fclose(w.fp) != 0) rc = -1;
    return rc;
}
