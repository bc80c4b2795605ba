// saelat.h - the sparse latents of one SAE of "saes" (saes.c), held per batch as CSR since the
// last segment flush and written into each closed segment (io/h5sae.h, group
// /saes_latents/<name>; docs/output.md "SAE latents"). Internal to harvest/.
#ifndef AH_SAELAT_H
#define AH_SAELAT_H

#include <mpi.h>
#include <stdint.h>

struct ah_error;

struct sae_lat {
    int64_t nb, nt, nz;          // batches, tokens and entries held
    int64_t cap_b, cap_t, cap_z; // their room
    int64_t *batch, *btok;       // (nb) the batches, and tokens of each; owned
    int64_t *pos, *n_ent;        // (nt) corpus token index, entries of the token; owned
    int32_t *idx;                // (nz) latent indices; owned
    float *val;                  // (nz) values; owned
};

void saelat_free(struct sae_lat *l); // safe on a zeroed struct
// A batch begins (batch index k). 0 or -AH_ENOMEM.
int saelat_begin(struct sae_lat *l, int64_t k, struct ah_error *err);
// n tokens of the batch: their positions (n) and CSR code (indptr (n + 1), idx, val). 0 or
// -AH_ENOMEM.
int saelat_add(struct sae_lat *l, int64_t n, const int64_t *pos, const int64_t *indptr,
               const int32_t *idx, const float *val, struct ah_error *err);
// Collective over comm: every rank's held latents to comm's rank 0, which writes them into the
// closed segment seg_path under the SAE's name; then nothing is held. 0 or a negative AH_E*.
int saelat_flush(struct sae_lat *l, MPI_Comm comm, const char *seg_path, const char *name,
                 struct ah_error *err);

#endif
