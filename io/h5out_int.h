// h5out_int.h - what the files of io/h5out*.c share (internal to them: io/h5out.h is the
// contract). h5out.c: the helpers, the index and the master; h5out_seg.c: segments;
// h5out_check.c: the listed files checked, inspect; h5out_resume.c: the master reopened (--resume),
// closed, and an output removed.
#ifndef AH_H5OUT_INT_H
#define AH_H5OUT_INT_H

#include "io/h5out.h"
#include "model/ah.h"

#include <hdf5.h>

#include <stdbool.h>
#include <stdint.h>

// a failed HDF5 call: -AH_EIO naming the file and the call's place, then `goto fail` (the caller
// declares int rc and struct ah_error *err)
#define CHECK_H5(call, file, what)                                                            \
    do {                                                                                      \
        if ((call) < 0) {                                                                     \
            rc = ah_fail(err, AH_EIO, "%s: HDF5 failed to %s (disk full? %s:%d)", file, what, \
                         __FILE__, __LINE__);                                                 \
            goto fail;                                                                        \
        }                                                                                     \
    } while (0)

#define PATH_MAX_ 4096
#define WHY_MAX   300

// ---- h5out.c: shared helpers ----
hid_t h5o_make_half(int bf); // the float16 (bf 0) or bfloat16 (bf 1) file type, or < 0
// the file type of an activation of dtype dt stored as `store` (f16, bf16: h5o_make_half's)
hid_t h5o_file_type(hid_t f16, hid_t bf16, enum out_store store, enum tap_dtype dt);
bool h5o_by_token(const struct h5out_dset *d); // token-major (first axis "token")
bool h5o_is_seg_name(const char *name);        // a name h5out_seg_name makes
// appends a run, merging it into the last one when it continues it; 0 or -AH_ENOMEM
int h5o_push_run(struct h5out_run **runs, int *n, int *cap, struct h5out_run r);
// the index's tables: prompts/source_index, length, token_offset; tokens/input_ids,
// prompt_index, position
extern const char *const h5o_table_names[6];
// rank 0: OUT.parts/index.h5 (/prompts and /tokens) written whole
int h5o_write_index(const struct h5out_params *p, struct ah_error *err);

// ---- h5out.c: the master ----
struct h5master {
    struct h5out_params p;      // strings and arrays borrowed from the caller
    const struct h5out_dset *d; // (n) borrowed
    int n;
    hid_t f16, bf16;
    struct h5out_record *rec; // (n_rec) listed segments
    int n_rec, cap_rec;
    int run; // runs of this output so far, this one included
    char tmp[PATH_MAX_];
};

int h5o_records_parse(struct h5master *m, const char *text); // the master's segment list (JSON)
char *h5o_provenance_fingerprint(const char *prov); // its "model_fingerprint" (malloc'd) or NULL
int64_t h5o_n_batches(const struct h5out_params *p);
void h5o_batches_done(const struct h5master *m, uint8_t *done); // 1 for each batch all in
int h5o_trim_records(struct h5master *m, const uint8_t *done);  // drops rows of other batches

// ---- h5out_check.c ----
// whether dataset `name` of r's segment is token-major: 1, 0, or -1 for a name it should not hold
typedef int (*token_major_fn)(void *u, const struct h5out_record *r, const char *name);

// What is wrong with the files of an output: its listed segments and index.h5 (each checked as
// h5out_check.c does), and every mapping of the master's virtual datasets, which must name a file
// of the master's own parts folder (BASE.parts/LEAF, BASE the master's own file name) whose dataset
// holds the rows and shape the mapping reads.
struct health {
    const char *path;               // the master
    const struct h5out_record *rec; // (n_rec) its listed segments
    int n_rec, n_dsets;
    char (*why)[WHY_MAX]; // (n_rec + 1): "" or what is wrong with a record's file; [n_rec]: index
    hid_t *fid;           // (n_rec + 1) the files, opened when a mapping first reads them
    char foreign[PATH_MAX_];      // a source named outside the master's own parts folder, or ""
    char unlisted[PATH_MAX_ * 2]; // a damaged source that the master does not list, or ""
    char redirect[PATH_MAX_ * 5]; // a source HDF5_VDS_PREFIX finds elsewhere, or ""
    bool index_always;            // index.h5 checked even if no mapping reads it (--resume)
    bool index_read;              // a mapping reads index.h5
};

// fills h's why and fid for the master f (open), reading names with tm(u, ...); 0 or < 0
int h5o_health_check(struct health *h, hid_t f, token_major_fn tm, void *u, int64_t n_prompts,
                     int64_t n_tokens);
void h5o_health_free(struct health *h);
int64_t h5o_dset_len(hid_t file, const char *path); // rows of dataset path of file, or -1

#endif
