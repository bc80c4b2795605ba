// writer.h - the output side of `harvest run`: segments, lockstep rounds, segment records and
// the master. The rank loop (run.c) talks to it through these calls:
//
//   writer_open         rank 0 makes or reopens the output; every rank learns what is done
//   writer_round_begin  the ranks of a stage agree on a round (batches, stop, checkpoint: a due
//                       checkpoint closes the open segment first), and it opens in a segment
//   writer_rows         rows of the round go to the open segment (the collector calls it)
//   writer_round_end    the round's rows are out; rank 0 relists closed segments
//   writer_finish       the last segment closes, records reach rank 0
//   writer_final        rank 0 writes the final master
//
// Rows are placed by rounds.h alone. Functions return 0 or a negative AH_E* code with a message
// in err; "Collective" ones are called by every rank of the stage (round calls) or of the world.
#ifndef AH_WRITER_H
#define AH_WRITER_H

#include "harvest/run.h"
#include "harvest/wstats.h"
#include "io/output.h"

struct pending;

struct writer {
    const struct plan *pl;     // borrowed
    const struct grid *g;      // borrowed
    const struct out_ops *out; // the output's format (io/output.h)
    struct out_master *mst;    // rank 0 only
    int run;                   // number of this run of the output (segment names)
    int seq;                   // segments the stage has opened
    struct out_seg *seg;       // the open segment, or NULL
    bool lockstep;             // the stage writes: its ranks go in rounds
    int members;               // ranks of the stage
    struct round_say *say;     // (members) this round's says
    struct h5out_run *rows;    // (members) this round's rows
    double last_checkpoint;    // when the stage's first rank last closed a segment
    bool master_dirty;         // rank 0: records added since the master was written
    int64_t bytes;             // activation bytes this rank wrote
    double seconds;            // spent writing (rows, closing, the master)
    struct pending *pend;      // (n_pend) record sends in flight (ranks other than 0)
    int n_pend;
    char *fingerprint; // rank 0: the model's fingerprint (JSON text), owned
    // the tap consumers (harvest.h), wired by run.c: told when a segment closes (cons NULL:
    // none), and what they store in the master when every batch is in (final NULL: nothing)
    struct consumers *cons; // borrowed
    int (*segment)(struct consumers *cs, const struct out_ops *out, MPI_Comm comm,
                   const char *out_path, const char *file, struct ah_error *err);
    int (*final)(const struct plan *pl, const struct out_ops *out, const struct h5out_record *rec,
                 int n_rec, bool if_missing, struct ah_error *err);
    // rank 0 under "select": the /tokens tables (plan_index_tables) the master borrows; owned
    int64_t *t_ids, *t_pos, *t_count;
    uint8_t *t_sel;
    int64_t counts[5]; // the selection's counts, root attributes
};

// Collective over the world: rank 0 makes the output (resume: reopens it, see h5m_open); done
// (pl->place.K entries) receives 1 for each batch already in; *complete is the output's flag.
int writer_open(struct writer *w, const struct plan *pl, const struct grid *g,
                const struct run_opts *o, const char *provenance, uint8_t *done, bool *complete,
                struct ah_error *err);
// Collective over the stage: this rank holds batch k (-1: none) and saw a stop (stop). *play
// false: the round is not played (no batch anywhere, or a first stage was asked to stop).
int writer_round_begin(struct writer *w, int64_t k, int stop, bool *play, struct ah_error *err);
// Rows [row, row + n) of dataset i (counted over the whole output), from data laid out as stored.
int writer_rows(struct writer *w, int i, int64_t row, int64_t n, const void *data,
                struct ah_error *err);
// Collective over the stage (ranks not in lockstep: rank 0 only relists).
int writer_round_end(struct writer *w, struct ah_error *err);
// Collective over the world: closes the open segment and brings every record to rank 0.
int writer_finish(struct writer *w, struct ah_error *err);
// Rank 0 (others return 0): writes the final master with this provenance (JSON text, borrowed
// until writer_close); *prompts_done: prompts in. -AH_ESTOP when some are missing (a stop), with
// a message saying how to continue.
int writer_final(struct writer *w, const char *provenance, int64_t *prompts_done,
                 struct ah_error *err);
// Rank 0 (others return 0), every batch in: what the consumers store in the master (write-time
// statistics, the norm profile: consumers_final). writer_final calls it; a run that finds its
// output complete calls it with if_missing (each kind adds what the master lacks).
int writer_stats(struct writer *w, bool if_missing, struct ah_error *err);
void writer_close(struct writer *w); // frees; safe on a zeroed struct

#endif
