// sae_npz.h - the members of an .npz archive (numpy.savez / savez_compressed) in memory, and a
// writer of numpy.savez's stored layout (for init-sae). The .npy parser is in io/sae.h.
#ifndef AH_SAE_NPZ_H
#define AH_SAE_NPZ_H

#include <stddef.h>
#include <stdint.h>

struct ah_error;

struct sae_npz_data {
    const void *data; // the member's bytes: into the map (stored) or owned (deflated)
    size_t n;
    void *owned; // freed by sae_npz_free
};

// The member `name` ("W_enc.npy") of the zip archive map (size bytes; path names it in
// messages), its CRC-32 checked. Returns 0, 1 when the archive has no such member, or
// -AH_EFORMAT / -AH_ENOMEM with a message naming path and the member.
int sae_npz_member(struct sae_npz_data *d, const void *map, size_t size, const char *path,
                   const char *name, struct ah_error *err);
void sae_npz_free(struct sae_npz_data *d); // safe on a zeroed struct

// An array to write: float32, 1 or 2 dimensions, written as NAME.npy.
struct sae_npz_array {
    const char *name;
    int ndim;
    int64_t shape[2];
    const float *data;
};
// Writes path as numpy.savez does (stored members, .npy format 1.0). 0, or -1 with errno set.
int sae_npz_write(const char *path, const struct sae_npz_array *a, int n);

#endif
