// h5part.h - the per-batch partials of a tap consumer in the segment files, read back (the norm
// profile's, io/h5profile.h; the SAEs', io/h5sae.h): a group G of a segment holds `batch` (n,)
// int64, the batches in the order held, and float64 datasets G/NAME whose rows are theirs (row j
// batch[j]'s), or which rows point into (the SAEs' exemplars). The HDF5 side of the writers:
// io/h5part_hid.h.
#ifndef AH_H5PART_H
#define AH_H5PART_H

#include <stdint.h>

// The batches of the segment at path whose partials G/NAME it holds (G = group, NAME = name):
// G/batch into *batch, malloc'd (*n of them). 1; 0 when it holds none of them (no such group or
// dataset: *batch NULL, *n 0); -1 on a read error (or when the file does not open).
int h5part_batches(const char *path, const char *group, const char *name, int64_t **batch,
                   int64_t *n);

// A reader of one segment's float64 dataset G/NAME, rows at a time: the file and the dataset
// stay open between reads of the same (batches in order come mostly from one segment after
// another).
struct h5part_src {
    char path[4400]; // the file open ("" when none)
    char dset[600];  // the dataset open, "G/NAME"
    int64_t f, d;    // their handles (hid_t)
};
void h5part_src_init(struct h5part_src *x);
void h5part_src_close(struct h5part_src *x); // safe on an initialised x, open or not
// Rows [row, row + n) of the (m, cols) float64 dataset G/NAME of the segment at path into buf
// (n x cols doubles). 0 (also for n 0, without a read), or -1: no such file or dataset, another
// shape (rank 2, cols columns, at least row + n rows), or a read error.
int h5part_read_rows(struct h5part_src *x, const char *path, const char *group, const char *name,
                     int64_t row, int64_t n, int64_t cols, double *buf);

#endif
