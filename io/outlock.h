// outlock.h - an output's neighbourhood: no input of a job is one of its output files, and one run
// at a time writes it.
//
// The files a run writes for output.path OUT: OUT (the master), OUT.tmp, OUT.tokens (the spill
// file of the token ids), OUT.lock, and the folder OUT.parts/ with everything in it.
#ifndef AH_OUTLOCK_H
#define AH_OUTLOCK_H

#include <stdbool.h>

struct ah_error;

// The one test of "an output is one of its inputs", which every command that writes makes: the
// input among inputs[n] that path is (same device and inode, so hard and symbolic links and other
// spellings of a path count), or, when folder, that lies inside the folder path; NULL if none.
// A path or input that does not exist is skipped (NULL entries too).
const char *outlock_input_at(const char *path, bool folder, const char *const *inputs, int n);

// -AH_EINVAL (naming the output file and the input) if one of those files is one of inputs[n]
// (compared by device and inode, so links and other spellings of a path count), or OUT.parts/
// holds one. Inputs that do not exist are skipped.
int outlock_check_inputs(const char *out, const char *const *inputs, int n, struct ah_error *err);

// The files a reader of output OUT reads: OUT, OUT.tokens, the folder OUT.parts and every entry
// of it (listed now; a missing one is skipped by outlock_input_at), in that order. *files: *n
// malloc'd strings in a malloc'd array, freed with outlock_files_free. 0 or -AH_ENOMEM.
int outlock_output_files(const char *out, char ***files, int *n);
void outlock_files_free(char **files, int n); // safe on NULL

// -AH_EINVAL naming both paths ("DIR/NAME: CMD would write this file, and it is INPUT, one of its
// inputs") if an entry of folder dir whose name matches one of the fnmatch(3) patterns (the
// files cmd writes there) is one of inputs[n]. A missing folder: 0.
int outlock_check_folder(const char *cmd, const char *dir, const char *const *patterns, int n_pat,
                         const char *const *inputs, int n, struct ah_error *err);

struct outlock {
    int fd;     // the lock file, -1 when not held
    char *path; // OUT.lock; owned
};

// Takes an exclusive flock on OUT.lock (made if absent) without waiting, and writes "HOST PID"
// into it. Held by another process: -AH_EEXIST naming that host and PID. l->fd is -1 on failure.
int outlock_take(struct outlock *l, const char *out, struct ah_error *err);
// Removes OUT.lock and releases the lock; safe on a zeroed struct with fd = -1, or a released one.
void outlock_release(struct outlock *l);

#endif
