// pipe.c - the pipeline between stages (pipe.h).
#include "harvest/pipe.h"

#include <stdlib.h>
#include <string.h>

static void pipe_post(struct pipe *p, int b) {
    CHECK_MPI(
        MPI_Irecv(&p->rhdr[b], 1, MPI_INT64_T, p->prev, TAG_HDR, MPI_COMM_WORLD, &p->rreq[b][0]));
    CHECK_MPI(MPI_Irecv(p->rbuf[b], (int)p->msg, MPI_FLOAT, p->prev, TAG_DATA, MPI_COMM_WORLD,
                        &p->rreq[b][1]));
}

int pipe_init(struct pipe *p, const struct grid *g, size_t msg, struct ah_error *err) {
    memset(p, 0, sizeof *p);
    p->first = g->stage == 0;
    p->last = g->stage == g->n_stages - 1;
    p->prev = g->rank - g->n_shards;
    p->next = g->rank + g->n_shards;
    for (int i = 0; i < 2; i++) {
        p->rbuf[i] = malloc(msg * sizeof(float) + 4);
        p->sbuf[i] = malloc(msg * sizeof(float) + 4);
        for (int k = 0; k < 2; k++)
            p->rreq[i][k] = p->sreq[i][k] = MPI_REQUEST_NULL;
    }
    p->msg = msg; // from here on the requests are valid
    if (!p->rbuf[0] || !p->rbuf[1] || !p->sbuf[0] || !p->sbuf[1])
        return ah_fail(err, AH_ENOMEM, "out of memory: 4 hand-off buffers of %zu bytes",
                       msg * sizeof(float) + 4);
    if (!p->first) pipe_post(p, 0);
    return 0;
}

// The next batch from the stage before (-1: it has ended); *in: its hand-off arrays, valid until
// the call after next.
int64_t pipe_recv(struct pipe *p, const float **in) {
    CHECK_MPI(MPI_Waitall(2, p->rreq[p->cur], MPI_STATUSES_IGNORE));
    int64_t k = p->rhdr[p->cur];
    *in = p->rbuf[p->cur];
    p->ended = k < 0;
    p->cur = 1 - p->cur;
    if (!p->ended) pipe_post(p, p->cur);
    return k;
}

// Sends batch k's n arrays of len floats each on to the next stage.
void pipe_send(struct pipe *p, int64_t k, float *const *arrays, int n, size_t len) {
    int sb = (int)(p->sent++ % 2);
    CHECK_MPI(MPI_Waitall(2, p->sreq[sb], MPI_STATUSES_IGNORE)); // the buffer's last message is out
    for (int a = 0; a < n; a++)
        memcpy(p->sbuf[sb] + a * len, arrays[a], len * sizeof(float));
    p->shdr[sb] = k;
    CHECK_MPI(
        MPI_Isend(&p->shdr[sb], 1, MPI_INT64_T, p->next, TAG_HDR, MPI_COMM_WORLD, &p->sreq[sb][0]));
    CHECK_MPI(MPI_Isend(p->sbuf[sb], (int)((size_t)n * len), MPI_FLOAT, p->next, TAG_DATA,
                        MPI_COMM_WORLD, &p->sreq[sb][1]));
}

// End of stream for the next stage.
void pipe_end(struct pipe *p) {
    for (int sb = 0; sb < 2; sb++)
        CHECK_MPI(MPI_Waitall(2, p->sreq[sb], MPI_STATUSES_IGNORE));
    p->shdr[0] = -1;
    CHECK_MPI(MPI_Send(&p->shdr[0], 1, MPI_INT64_T, p->next, TAG_HDR, MPI_COMM_WORLD));
    CHECK_MPI(MPI_Send(p->sbuf[0], 0, MPI_FLOAT, p->next, TAG_DATA, MPI_COMM_WORLD));
}

// After a failure the job ends at once (MPI_Abort): no wait for sends (wait false).
void pipe_free(struct pipe *p, bool wait) {
    for (int s = 0; wait && p->msg && s < 2; s++)
        CHECK_MPI(MPI_Waitall(2, p->sreq[s], MPI_STATUSES_IGNORE));
    for (int s = 0; s < 2; s++) {
        free(p->rbuf[s]);
        free(p->sbuf[s]);
    }
}
