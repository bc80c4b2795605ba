// outlock.h - an output's neighbourhood: no input of a job is one of its output files, and one run
// at a time writes it.
//
// The files a run writes for output.path OUT: OUT (the master), OUT.tmp, OUT.tokens (the spill
// file of the token ids), OUT.lock, and the folder OUT.parts/ with everything in it.
#ifndef AH_OUTLOCK_H
#define AH_OUTLOCK_H

struct ah_error;

// -AH_EINVAL (naming the output file and the input) if one of those files is one of inputs[n]
// (compared by device and inode, so links and other spellings of a path count), or OUT.parts/
// holds one. Inputs that do not exist are skipped.
int outlock_check_inputs(const char *out, const char *const *inputs, int n, struct ah_error *err);

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
