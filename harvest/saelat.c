// saelat.c - see saelat.h. The latents of a segment's batches are gathered to the stage's rank 0
// (rank after rank, each rank's batches in the order it ran them) and written as one group of
// flat arrays: the reader (harvest_data sae_latents) orders them by batch.
#include "harvest/saelat.h"

#include "harvest/run.h" // CHECK_MPI
#include "io/h5sae.h"
#include "model/ah.h"

#include <stdlib.h>
#include <string.h>

void saelat_free(struct sae_lat *l) {
    free(l->batch), free(l->btok), free(l->pos), free(l->n_ent), free(l->idx), free(l->val);
    memset(l, 0, sizeof *l);
}

// room for `need` elements of size el in *p (capacity *cap, doubled)
static int grow(void **p, int64_t *cap, int64_t need, size_t el) {
    if (need <= *cap) return 0;
    int64_t c = *cap * 2 > need ? *cap * 2 : need + 64;
    void *q = realloc(*p, (size_t)c * el);
    if (!q) return -AH_ENOMEM;
    *p = q;
    *cap = c;
    return 0;
}

int saelat_begin(struct sae_lat *l, int64_t k, struct ah_error *err) {
    int64_t cap = l->cap_b;
    if (grow((void **)&l->batch, &cap, l->nb + 1, sizeof *l->batch) < 0 ||
        grow((void **)&l->btok, &l->cap_b, l->nb + 1, sizeof *l->btok) < 0)
        return ah_fail(err, AH_ENOMEM, "out of memory: the SAE latents of %lld batches",
                       (long long)l->nb + 1);
    l->batch[l->nb] = k;
    l->btok[l->nb++] = 0;
    return 0;
}

int saelat_add(struct sae_lat *l, int64_t n, const int64_t *pos, const int64_t *indptr,
               const int32_t *idx, const float *val, struct ah_error *err) {
    AH_ASSERT(l->nb > 0 && indptr[0] == 0);
    int64_t z = indptr[n], cap_t = l->cap_t, cap_z = l->cap_z;
    if (grow((void **)&l->pos, &cap_t, l->nt + n, sizeof *l->pos) < 0 ||
        grow((void **)&l->n_ent, &l->cap_t, l->nt + n, sizeof *l->n_ent) < 0 ||
        grow((void **)&l->idx, &cap_z, l->nz + z, sizeof *l->idx) < 0 ||
        grow((void **)&l->val, &l->cap_z, l->nz + z, sizeof *l->val) < 0)
        return ah_fail(err, AH_ENOMEM, "out of memory: the SAE latents of %lld tokens",
                       (long long)(l->nt + n));
    memcpy(l->pos + l->nt, pos, (size_t)n * sizeof *pos);
    for (int64_t t = 0; t < n; t++)
        l->n_ent[l->nt + t] = indptr[t + 1] - indptr[t];
    memcpy(l->idx + l->nz, idx, (size_t)z * sizeof *idx);
    memcpy(l->val + l->nz, val, (size_t)z * sizeof *val);
    l->nt += n, l->nz += z;
    l->btok[l->nb - 1] += n;
    return 0;
}

// counts (size) and displacements of one array on rank 0, from each rank's count; -1 when a
// total passes what an MPI count holds
static int displ(const int64_t *each, int size, int stride, int *cnt, int *dsp, int64_t *total) {
    *total = 0;
    for (int m = 0; m < size; m++) {
        int64_t c = each[3 * m + stride];
        if (c > (1 << 30) || *total > (1 << 30)) return -1;
        cnt[m] = (int)c, dsp[m] = (int)*total;
        *total += c;
    }
    return 0;
}

int saelat_flush(struct sae_lat *l, MPI_Comm comm, const char *seg_path, const char *name,
                 struct ah_error *err) {
    int me = 0, size = 1, rc = 0;
    CHECK_MPI(MPI_Comm_rank(comm, &me));
    CHECK_MPI(MPI_Comm_size(comm, &size));
    int64_t mine[3] = {l->nb, l->nt, l->nz}, tot[3] = {0, 0, 0};
    int64_t *each = me == 0 ? calloc((size_t)size * 3, sizeof *each) : NULL;
    int *cnt = me == 0 ? calloc((size_t)size * 6, sizeof *cnt) : NULL,
        *dsp = cnt ? cnt + 3 * size : NULL;
    struct sae_lat all = {0};
    if (me == 0 && (!each || !cnt)) rc = -AH_ENOMEM;
    CHECK_MPI(MPI_Gather(mine, 3, MPI_INT64_T, each, 3, MPI_INT64_T, 0, comm));
    for (int a = 0; me == 0 && rc == 0 && a < 3; a++)
        if (displ(each, size, a, cnt + a * size, dsp + a * size, &tot[a]) < 0) rc = -AH_EINVAL;
    if (me == 0 && rc == 0) {
        all.batch = malloc((size_t)tot[0] * 8 + 8), all.btok = malloc((size_t)tot[0] * 8 + 8);
        all.pos = malloc((size_t)tot[1] * 8 + 8), all.n_ent = malloc((size_t)tot[1] * 8 + 8);
        all.idx = malloc((size_t)tot[2] * 4 + 4), all.val = malloc((size_t)tot[2] * 4 + 4);
        if (!all.batch || !all.btok || !all.pos || !all.n_ent || !all.idx || !all.val)
            rc = -AH_ENOMEM;
    }
    if (rc < 0)
        ah_fail(err, -rc,
                "%s: cannot gather the latents of SAE \"%s\" (%lld entries: out of memory, or "
                "more than 2^30 a segment)",
                seg_path, name, (long long)tot[2]);
    CHECK_MPI(MPI_Bcast(&rc, 1, MPI_INT, 0, comm)); // no one sends to a rank 0 without room
    if (rc == 0) {
        int nb = (int)l->nb, nt = (int)l->nt, nz = (int)l->nz, *c = cnt, *d = dsp;
        int s = size;
        CHECK_MPI(MPI_Gatherv(l->batch, nb, MPI_INT64_T, all.batch, c, d, MPI_INT64_T, 0, comm));
        CHECK_MPI(MPI_Gatherv(l->btok, nb, MPI_INT64_T, all.btok, c, d, MPI_INT64_T, 0, comm));
        c = cnt ? cnt + s : NULL, d = dsp ? dsp + s : NULL;
        CHECK_MPI(MPI_Gatherv(l->pos, nt, MPI_INT64_T, all.pos, c, d, MPI_INT64_T, 0, comm));
        CHECK_MPI(MPI_Gatherv(l->n_ent, nt, MPI_INT64_T, all.n_ent, c, d, MPI_INT64_T, 0, comm));
        c = cnt ? cnt + 2 * s : NULL, d = dsp ? dsp + 2 * s : NULL;
        CHECK_MPI(MPI_Gatherv(l->idx, nz, MPI_INT32_T, all.idx, c, d, MPI_INT32_T, 0, comm));
        CHECK_MPI(MPI_Gatherv(l->val, nz, MPI_FLOAT, all.val, c, d, MPI_FLOAT, 0, comm));
        if (me == 0)
            rc = h5sae_write_latents(seg_path, name, tot[0], all.batch, all.btok, tot[1], all.pos,
                                     all.n_ent, tot[2], all.idx, all.val, err);
    }
    l->nb = l->nt = l->nz = 0;
    saelat_free(&all);
    free(each), free(cnt);
    return rc;
}
