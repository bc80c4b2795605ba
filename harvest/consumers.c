// consumers.c - the ordered list of tap consumers (harvest.h).
#include "harvest/harvest.h"

#include <stdlib.h>
#include <string.h>

int consumers_init(struct consumers *cs, int n_cat, struct ah_error *err) {
    memset(cs, 0, sizeof *cs);
    cs->n_cat = n_cat;
    cs->want = calloc((size_t)n_cat + 1, 1);
    if (!cs->want) return ah_fail(err, AH_ENOMEM, "out of memory: a want list of %d names", n_cat);
    return 0;
}

int consumers_add(struct consumers *cs, const struct consumer *c, struct ah_error *err) {
    if (cs->n == CONSUMERS_MAX)
        return ah_fail(err, AH_EINVAL, "more than %d tap consumers", CONSUMERS_MAX);
    cs->list[cs->n++] = *c;
    for (int i = 0; i < cs->n_cat; i++)
        cs->want[i] |= c->want[i] != 0;
    return 0;
}

static void fan_out(void *u, int id, int b, const struct tview *v) {
    const struct consumers *cs = u;
    for (int k = 0; k < cs->n; k++)
        if (cs->list[k].want[id]) cs->list[k].take(cs->list[k].u, id, b, v);
}

struct tap consumers_tap(struct consumers *cs) {
    return (struct tap){cs->want, fan_out, cs};
}

void consumers_free(struct consumers *cs) {
    free(cs->want);
    memset(cs, 0, sizeof *cs);
}
