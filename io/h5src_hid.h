// h5src_hid.h - for io/ files only (io/h5shard.c, io/h5probe.c): the HDF5 handles behind
// io/h5src.h's opaque types, borrowed (valid until h5src_close / h5src_dset_close).
#ifndef AH_H5SRC_HID_H
#define AH_H5SRC_HID_H

#include "io/h5src.h"

#include <hdf5.h>

hid_t h5src_hid(const struct h5src *f);
hid_t h5src_dset_hid(const struct h5dset *d);

#endif
