// h5attr.h - HDF5 attributes: a UTF-8 variable-length string, a 1-D array of them, or one number,
// written on a new attribute and read back (the helpers h5out, h5stats and harvest export share).
#ifndef AH_H5ATTR_H
#define AH_H5ATTR_H

#include <hdf5.h>

// Creates the scalar attribute `name` on obj holding value as a variable-length UTF-8 string
// (value is copied; the caller keeps it). Fails if the attribute already exists.
// Returns >= 0 on success, < 0 on any HDF5 failure (nothing is left open).
herr_t h5attr_put_str(hid_t obj, const char *name, const char *value);

// Reads the scalar string attribute `name` of obj (read as variable-length UTF-8) into a malloc'd
// copy the caller frees. Returns NULL if the attribute is missing, cannot be read, holds a null
// string, or memory runs out.
char *h5attr_get_str(hid_t obj, const char *name);

// Creates the attribute `name` on obj holding the n strings values[0..n) as a 1-D array of
// variable-length UTF-8 strings (e.g. stored_axes). Fails if the attribute already exists.
// Returns >= 0 on success, < 0 on any HDF5 failure (nothing is left open).
herr_t h5attr_put_strs(hid_t obj, const char *name, int n, const char *const *values);

// Reads the string attribute `name` of obj (scalar: one string, or 1-D: at most max strings, read
// as variable-length UTF-8) into out, a caller's (max, len) array of NUL-terminated strings
// (each cut to len - 1 bytes; a null string reads as ""). Returns the number of strings, or -1 if
// the attribute is missing, has no or more than max strings, cannot be read, or memory runs out.
int h5attr_get_strs(hid_t obj, const char *name, char *out, int len, int max);

// Creates the scalar attribute `name` on obj stored as file type ftype, writing *value given in
// memory type mtype (e.g. H5T_STD_I64LE / H5T_NATIVE_INT64). Fails if the attribute exists.
// Returns >= 0 on success, < 0 on any HDF5 failure (nothing is left open).
herr_t h5attr_put_num(hid_t obj, const char *name, hid_t ftype, hid_t mtype, const void *value);

// Reads the scalar attribute `name` of obj into *value, converted to memory type mtype.
// Returns 0 on success, -1 if the attribute is missing or cannot be opened or read (*value is
// then unchanged unless HDF5 wrote it part-way).
int h5attr_get_num(hid_t obj, const char *name, hid_t mtype, void *value);

#endif
