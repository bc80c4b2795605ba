// consumers.c - the tap consumers' protocol (harvest.h): the registered kinds, the ordered list
// of this rank's consumers, the fan-out of tap views and the batch and segment events.
#include "harvest/run.h"    // struct plan (the catalogue)
#include "harvest/saeval.h" // saeval_kind

#include <stdlib.h>
#include <string.h>

// ---- the registered kinds, in the order their consumers take a view ----
// A new consumer is one file defining its kind and one line here.
static const struct consumer_kind *const kinds[] = {
    &collect_kind,     // the HDF5 collector first: its writes are the output
    &wstats_kind,      // write-time statistics
    &normprofile_kind, // the per-position norm profile
    &saes_kind,        // the SAEs of "saes": latents' statistics, exemplars, metrics
    &saeval_kind,      // their splice-in evaluation (after saes: its final adds to /saes/NAME)
};
#define N_KINDS ((int)(sizeof kinds / sizeof kinds[0]))

int consumers_check(const struct plan *pl, const struct grid *g, struct ah_error *err) {
    for (int k = 0; k < N_KINDS; k++) {
        int rc = kinds[k]->check ? kinds[k]->check(pl, g, err) : 0;
        if (rc < 0) return rc;
    }
    return 0;
}

int consumers_init(struct consumers *cs, const struct consumer_env *env, struct ah_error *err) {
    memset(cs, 0, sizeof *cs);
    cs->pl = env->pl;
    cs->n_cat = env->pl->m.n_cat;
    cs->want = calloc((size_t)cs->n_cat + 1, 1);
    if (!cs->want)
        return ah_fail(err, AH_ENOMEM, "out of memory: a want list of %d names", cs->n_cat);
    for (int k = 0; k < N_KINDS; k++) {
        struct consumer c = {.name = kinds[k]->name};
        int rc = kinds[k]->make(&c, env, err);
        if (rc == 0 && c.take)
            rc = consumers_add(cs, &c, err);
        else if (c.free)
            c.free(c.u);
        if (rc < 0) return rc;
    }
    return 0;
}

int consumers_add(struct consumers *cs, const struct consumer *c, struct ah_error *err) {
    if (cs->n == CONSUMERS_MAX) {
        if (c->free) c->free(c->u);
        return ah_fail(err, AH_EINVAL, "more than %d tap consumers", CONSUMERS_MAX);
    }
    cs->list[cs->n++] = *c;
    for (int i = 0; c->want && i < cs->n_cat; i++)
        cs->want[i] |= c->want[i] != 0;
    return 0;
}

int consumers_begin(struct consumers *cs, const struct cbatch *bt, struct ah_error *err) {
    cs->bt = *bt;
    cs->rc = 0;
    for (int k = 0; k < cs->n; k++) {
        int rc = cs->list[k].begin ? cs->list[k].begin(cs->list[k].u, &cs->bt, err) : 0;
        if (rc < 0) return cs->rc = rc;
    }
    return 0;
}

// the tap's take: the view to every consumer that wants it, with its prompt's keep mask; after
// a failure the batch's other views are skipped (the run stops at consumers_end)
static void fan_out(void *u, int id, int b, const struct tview *v) {
    struct consumers *cs = u;
    if (cs->rc < 0) return;
    const struct cbatch *bt = &cs->bt;
    struct ctake t = {id, &cs->pl->m.cat[id], b, bt->keep ? bt->keep + bt->boff[b] : NULL, bt};
    for (int k = 0; k < cs->n && cs->rc == 0; k++) {
        struct consumer *c = &cs->list[k];
        if (!c->want || !c->want[id]) continue;
        double t0 = now_seconds();
        cs->rc = c->take(c->u, &t, v, &cs->err);
        c->seconds += now_seconds() - t0;
    }
}

int consumers_end(struct consumers *cs, struct ah_error *err) {
    if (cs->rc < 0) {
        *err = cs->err;
        return cs->rc;
    }
    for (int k = 0; k < cs->n; k++) {
        int rc = cs->list[k].end ? cs->list[k].end(cs->list[k].u, &cs->bt, err) : 0;
        if (rc < 0) return rc;
    }
    return 0;
}

int consumers_segment(struct consumers *cs, const struct out_ops *out, MPI_Comm comm,
                      const char *out_path, const char *file, struct ah_error *err) {
    for (int k = 0; cs && k < cs->n; k++) {
        const struct consumer *c = &cs->list[k];
        int rc = c->segment ? c->segment(c->u, out, comm, out_path, file, err) : 0;
        if (rc < 0) return rc;
    }
    return 0;
}

int consumers_final(const struct plan *pl, const struct out_ops *out,
                    const struct h5out_record *rec, int n_rec, bool if_missing,
                    struct ah_error *err) {
    for (int k = 0; k < N_KINDS; k++) {
        int rc = kinds[k]->final ? kinds[k]->final(pl, out, rec, n_rec, if_missing, err) : 0;
        if (rc < 0) return rc;
    }
    return 0;
}

struct tap consumers_tap(struct consumers *cs) {
    return (struct tap){cs->want, fan_out, cs, NULL, NULL, false};
}

double consumers_seconds(const struct consumers *cs, const char *name) {
    for (int k = 0; k < cs->n; k++)
        if (!strcmp(cs->list[k].name, name)) return cs->list[k].seconds;
    return 0;
}

void consumers_free(struct consumers *cs) {
    for (int k = 0; k < cs->n; k++)
        if (cs->list[k].free) cs->list[k].free(cs->list[k].u);
    free(cs->want);
    memset(cs, 0, sizeof *cs);
}
