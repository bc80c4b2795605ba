// h5part_hid.h - for io/ files only (io/h5profile.c, io/h5sae.c): the HDF5 steps their writers
// share: a dataset written whole, a closed segment updated and made durable, a master replaced
// through a copy, a group's links walked.
#ifndef AH_H5PART_HID_H
#define AH_H5PART_HID_H

#include "io/h5part.h"

#include <hdf5.h>

struct ah_error;

// The dataset loc/name of rank nd (dims d) of file type ft, written whole from buf of memory
// type mt (nothing written when it has no elements). >= 0, or < 0 (nothing left open).
herr_t h5part_put_array(hid_t loc, const char *name, int nd, const hsize_t *d, hid_t ft, hid_t mt,
                        const void *buf);

// The group loc/name opened, or created when it does not exist; < 0 on failure.
hid_t h5part_group(hid_t loc, const char *name);
// The group loc/name created new (an old one of that name, and what it holds, unlinked first);
// < 0 on failure.
hid_t h5part_group_new(hid_t loc, const char *name);

// The segment file f (opened for writing by the caller; f < 0: it did not open) closed, then the
// file at seg_path fsynced, when r (what the caller's writes returned) is >= 0. >= 0, or -1 when
// r, the close or the fsync failed.
herr_t h5part_close_sync(hid_t f, const char *seg_path, herr_t r);

// Replaces the master at path with a copy (path.tmp, fsynced, then renamed over path) in which
// put(g, items, i) has run for each i < n, with g the root group `group` (made when missing).
// 0, or -AH_EIO naming the file (the copy removed): "cannot copy the master to path.tmp (disk
// full?)" or "cannot write WHAT into the master (disk full?)".
int h5part_store(const char *path, const char *group,
                 herr_t (*put)(hid_t g, const void *items, int i), const void *items, int n,
                 const char *what, struct ah_error *err);

// op (H5Literate's callback, with u) over the links of the root group `group` of the file at
// path, in name order; nothing when the file does not open or has no such group.
void h5part_iterate(const char *path, const char *group, H5L_iterate_t op, void *u);

#endif
