// normguard.h - the norm guard of `harvest run` (job key select.max_norm_multiple, README
// "Statistics"): its pass (normguard.c) and the record of what it found, kept with the output
// (OUT.parts/normguard.bin) so that a --resume does not run the pass again. Internal to harvest/.
#ifndef AH_NORMGUARD_H
#define AH_NORMGUARD_H

#include "harvest/run.h"

// Collective, after plan_finish, when pl->ng.on: with o->resume, the record of an earlier
// pass over the same job, data and model (checked: its checksum, the job's text, the data's
// checksum and the model's fingerprint) if there is one; else the pass: every chosen token's norm
// of the guarded activation, the median of the first max_norm_sample finite ones, the drops, and
// plan_place again. Tokens with a NaN or infinite norm are warned of on stderr (even with
// o->quiet) and dropped; a sample without a finite norm (no median) is -AH_EINVAL naming the
// key. Progress on stderr unless o->quiet. A stop signal on any rank ends the pass within a
// batch: stopped() (run.c's: whether a stop signal has arrived on this rank) is asked after every
// batch, and true on any rank is -AH_ESTOP on every rank (nothing written). Returns a code every
// rank agrees on.
int normguard_run(struct plan *pl, const struct run_opts *o, bool (*stopped)(void),
                  struct ah_error *err);

// Rank 0, once the output is open: writes the pass's record (atomically, fsynced) when the job
// has the guard and the pass ran; removes a stale one when the job has none. A failure to
// write it is a warning (a --resume then runs the pass again).
void normguard_save(const struct plan *pl);

#endif
