// saeval.h - the splice-in evaluation of the job key saes[i].evaluate (saeval.c; docs/saes.md
// "Splice-in evaluation"): per batch, the next-token cross-entropy of the clean forward, of the
// forward with an SAE's reconstruction written over its site (the write-back seam of
// model/tap.h), and with the site zeroed; folded per SAE into /saes/NAME (ce_clean, ce_spliced,
// ce_zero, ce_loss_recovered). Internal to harvest/.
#ifndef AH_SAEVAL_H
#define AH_SAEVAL_H

#include "harvest/run.h"
#include "io/sae.h"

#include <stdio.h>

// the consumer kind (registered in consumers.c after saes_kind: its final adds to /saes/NAME)
extern const struct consumer_kind saeval_kind;

struct saeval;
// This rank's evaluation among the consumers, or NULL when the job evaluates no SAE.
struct saeval *saeval_find(const struct consumers *cs);
// Batch bt through blocks [b0, b1): the clean forward with the consumers' tap tp (in pieces, the
// residual stream saved at each evaluated site's block), then for each evaluated SAE the spliced
// and the zero-ablated forwards from its site's block, each computing the logits and their
// next-token CE. ev NULL: model_forward alone. Collective over the expert shards (as the
// forward). 0, or -AH_EINVAL naming the key when a site cannot be written (emitted as a copy).
int saeval_forward(struct saeval *ev, const struct model *m, struct model_state *st,
                   const struct mbatch *bt, const struct tap *tp, int b0, int b1,
                   struct ah_error *err);

// saes.c's hooks the evaluation shares: the catalogue id of saes[i].on (or a negative AH_E*),
// and saes[i]'s SAE opened into f and checked against its site id.
int saes_site(const struct plan *pl, int i, struct ah_error *err);
int saes_open_sae(const struct plan *pl, int i, int id, struct sae_file *f, struct ah_error *err);

#endif
