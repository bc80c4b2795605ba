// h5sae.h - the files of the "saes" consumer (harvest/saes.c; docs/output.md "SAE latents"):
// per-batch partials in the segment files, and the folded results in the master.
//
// Segment: group /saes_latents/<name> per SAE, its sparse latents (h5sae_write_latents), and
// group /saes_part with `batch` (n,) int64 (the batches, in the order held) and one
// (n, L) float64 dataset per SAE, named by the job's SAE name: row j is batch batch[j]'s packed
// partial (L doubles; harvest/saes.c says how they are packed, L depends on the SAE); and group
// /saes_part_ex with one (E, 2) float64 dataset per SAE: the batches' exemplars (value,
// position), packed one after another (a row of /saes_part says where its own are).
// Master: group /saes/<name> per SAE (its datasets and attributes are struct h5sae_item's).
#ifndef AH_H5SAE_H
#define AH_H5SAE_H

#include "io/h5part.h" // struct h5part_src

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct ah_error;

// Writes /saes_part and /saes_part_ex into the closed segment file seg_path and fsyncs it: batch
// (n), the n_saes datasets names[k] (n, L[k]) with data v[k], and names[k] (E[k], 2) of
// /saes_part_ex with data ex[k]. 0 or -AH_EIO naming the file.
int h5sae_write_partials(const char *seg_path, const int64_t *batch, int64_t n, int n_saes,
                         const char *const *names, const double *const *v, const int64_t *L,
                         const double *const *ex, const int64_t *E, struct ah_error *err);

// Writes /saes_latents/<name> into the closed segment file seg_path and fsyncs it: batch and
// batch_tokens (nb), position and n_entries (nt), indices (int32) and values (float32) (nz): the
// CSR latents of the segment's batches (rank after rank; a batch's tokens in corpus order).
// 0 or -AH_EIO naming the file.
int h5sae_write_latents(const char *seg_path, const char *name, int64_t nb, const int64_t *batch,
                        const int64_t *btok, int64_t nt, const int64_t *pos, const int64_t *n_ent,
                        int64_t nz, const int32_t *idx, const float *val, struct ah_error *err);

// A segment's partials of one SAE, read row by row (the file stays open between reads).
struct h5sae_src {
    struct h5part_src rows, ex; // the partials, the exemplars (io/h5part.h)
};
void h5sae_src_init(struct h5sae_src *x);
// The batches of segment path whose partials of SAE `name` it holds: *batch malloc'd (*n).
// Returns 1, 0 when it holds none of that SAE (no such group or dataset), -1 on a read error.
int h5sae_batches(const char *path, const char *name, int64_t **batch, int64_t *n);
// Row `row` (L doubles) of segment path's partials of SAE name into buf. 0 or -1.
int h5sae_read_row(struct h5sae_src *x, const char *path, const char *name, int64_t row, int64_t L,
                   double *buf);
// Exemplar rows [off, off + n) (n x 2 doubles) of segment path's SAE name into buf. 0 or -1.
int h5sae_read_ex(struct h5sae_src *x, const char *path, const char *name, int64_t off, int64_t n,
                  double *buf);
void h5sae_src_close(struct h5sae_src *x);

// One SAE's folded results (docs/output.md "SAE latents").
struct h5sae_item {
    const char *name;                      // the job's name: group /saes/<name>
    const char *on, *path, *layout, *arch; // attributes: the site, the folder, layout, arch
    int64_t d_in, d_sae, k, top_n;         // attributes (k 0 unless topk)
    int64_t ctx_before, ctx_after;         // attributes: the job's "context" (the reader's window)
    int64_t n_tokens;                      // attribute: tokens encoded
    double sse, total_var, fvu, l0_mean;   // attributes: the reconstruction metrics
    double dense_threshold;           // attribute: firing fraction above which a latent is dense
    int64_t n_dead, n_dense;          // attributes
    const int64_t *count;             // (d_sae) tokens where the latent fires (value > 0)
    const double *sum, *sum_sq, *max; // (d_sae) over all encoded tokens (0 where unfired)
    const int64_t *l0_hist;           // (d_sae + 1) tokens with L0 = i
    const int64_t *ex_count;          // (d_sae) exemplars held, <= top_n
    const double *ex_value;           // (d_sae, top_n) largest first, NaN padded
    const int64_t *ex_position;       // (d_sae, top_n) corpus token index, -1 padded
};
// Replaces the master at path with a copy that has /saes/<name> for each item (other groups
// kept; an item's old group replaced), through path.tmp. 0 or -AH_EIO naming the file.
int h5sae_store(const char *path, const struct h5sae_item *items, int n, struct ah_error *err);

// One line a SAE of /saes in the file at path onto out ("sae NAME (ARCH, LAYOUT) on SITE: ...":
// tokens, FVU, L0 mean, dead and dense latents). Returns how many (0: none, or no file).
int h5sae_print(const char *path, FILE *out);

// ---- the splice-in evaluation (harvest/saeval.c; docs/output.md "SAE latents") ----
// Segment: group /saes_eval with `batch` (n,) int64 and per evaluated SAE an (n, 4) float64
// dataset named by its job name: the batch's CE sums clean, spliced, zero-ablated and its
// predicted tokens. Writes them into the closed segment seg_path (v: n_saes blocks of (n, 4),
// SAE after SAE) and fsyncs it. 0 or -AH_EIO naming the file.
int h5sae_write_eval(const char *seg_path, const int64_t *batch, int64_t n, int n_saes,
                     const char *const *names, const double *v, struct ah_error *err);
// Segment path's CE partials of SAE name: *batch (n) and *v (n, 4), malloc'd (NULL, 0 when the
// segment holds none). 0, or -1 on a read error.
int h5sae_read_eval(const char *path, const char *name, int64_t **batch, double **v, int64_t *n);

// One SAE's folded CE: the attributes of /saes/<name> ce_clean, ce_spliced, ce_zero,
// ce_loss_recovered (float64), n_ce_tokens (int64).
struct h5sae_eval {
    const char *name;
    int64_t n_tokens; // predicted tokens
    double clean, spliced, zero,
        recovered; // corpus means (nats); (zero - spliced) / (zero - clean)
};
// Adds the attributes to each item's existing group /saes/<name> of the master at path, through
// path.tmp. 0 or -AH_EIO naming the file.
int h5sae_store_eval(const char *path, const struct h5sae_eval *items, int n, struct ah_error *err);
// Whether /saes/<name> of the master at path has ce_loss_recovered.
bool h5sae_has_eval(const char *path, const char *name);
// One line an SAE of /saes with the CE attributes onto out, each starting with prefix
// ("PREFIXsae NAME: CE loss recovered R (CE clean C, spliced S, zero-ablated Z nats over N
// tokens)"). Returns how many.
int h5sae_print_eval(const char *path, const char *prefix, FILE *out);

#endif
