// pipe.h - the pipeline between stages: stage s receives each batch's hand-off arrays (the
// residual stream, and encoder_output for encdec) from stage s-1 into pre-posted, double-buffered
// receives, and sends its own on with non-blocking sends (run.c's rank loop).
#ifndef AH_PIPE_H
#define AH_PIPE_H

#include "harvest/run.h"

struct pipe {
    bool first, last;
    int prev, next; // the same shard of the stages before and after
    size_t msg;     // floats a message holds at most
    float *rbuf[2], *sbuf[2];
    int64_t rhdr[2], shdr[2];
    MPI_Request rreq[2][2], sreq[2][2];
    int cur;      // the receive buffer to wait on next
    int64_t sent; // messages sent
    bool ended;   // the stage before has ended
};

int pipe_init(struct pipe *p, const struct grid *g, size_t msg, struct ah_error *err);
// The next batch from the stage before (-1: it has ended); *in: its hand-off arrays, valid until
// the call after next.
int64_t pipe_recv(struct pipe *p, const float **in);
// Sends batch k's n arrays of len floats each on to the next stage.
void pipe_send(struct pipe *p, int64_t k, float *const *arrays, int n, size_t len);
// End of stream for the next stage.
void pipe_end(struct pipe *p);
// After a failure the job ends at once (MPI_Abort): no wait for sends (wait false).
void pipe_free(struct pipe *p, bool wait);

#endif
