// h5src_hid.h - for io/ files only (io/h5shard.c, io/h5probe.c): the HDF5 handles behind
// io/h5src.h's opaque types, borrowed (valid until h5src_close / h5src_dset_close), and the
// attribute reader the HDF5 shard format shares.
#ifndef AH_H5SRC_HID_H
#define AH_H5SRC_HID_H

#include "io/h5src.h"

#include <hdf5.h>

hid_t h5src_hid(const struct h5src *f);
hid_t h5src_dset_hid(const struct h5dset *d);
// Every attribute of obj (a group or dataset; name order) added to w as PREFIX.NAME (prefix
// NULL: NAME): integers as int64 (sf_attr_i64), floats as float64 (sf_attr_f64); with all, also
// unsigned integers as uint64 and strings; the others, and any unreadable, left out. 0, or -1
// (an attribute not listed, or out of memory).
int h5src_attrs_to_shard(hid_t obj, const char *prefix, bool all, struct sf_shard *w);

#endif
