// h5fields.h - the data.fields of an output (io/dataset.h): /prompts/NAME, one dataset a field,
// typed so that h5py reads them back as they were written in the JSON Lines: int -> int64,
// float -> float64, bool -> numpy bool (an 8-bit HDF5 enum FALSE = 0, TRUE = 1, as h5py writes
// bools), string -> fixed-length UTF-8 (the longest value's bytes, NUL-padded; h5py gives bytes,
// `.asstr()` gives str). Each carries the attribute field_type ("int", "float", "bool", "string").
// Written by rank 0 into OUT.h5.parts/index.h5, and mapped into every master as virtual datasets
// (io/h5out.c).
#ifndef AH_H5FIELDS_H
#define AH_H5FIELDS_H

#include "io/dataset.h"

#include <hdf5.h>

struct ah_error;

// The file type of a field's dataset (the caller closes it), or < 0.
hid_t h5fields_type(const struct ds_field *f);
// Writes the n fields' values of n_prompts prompts as /prompts/NAME of the open file f (the group
// /prompts exists). path names f in errors. Returns 0 or -AH_EIO / -AH_ENOMEM.
int h5fields_write(hid_t f, const struct ds_field *fl, int n, int64_t n_prompts, const char *path,
                   struct ah_error *err);
// Creates /prompts/NAME in the master f as virtual datasets over src (the index file's name
// relative to the master). Returns 0 or -AH_EIO.
int h5fields_map(hid_t f, const char *src, const struct ds_field *fl, int n, int64_t n_prompts,
                 const char *path, struct ah_error *err);

#endif
