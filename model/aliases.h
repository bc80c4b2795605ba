// aliases.h - names users already type, accepted in a job's "activations" (issue 11 "Names"):
// TransformerLens hook names (blocks.{i}.hook_resid_post, ...) and Hugging Face module paths as
// nnsight / sparsify users write them (model.layers.{i}, GPT-2's transformer.h.{i}), each mapped
// to the nnterp name of the catalogue holding the same value. The mapping is a table of data
// (aliases.c), after the reference tests/ref/hf/aliases.py and tests/ref/hf/NAMES.md.
//
// A pattern's "{i}" stands for a layer number (decimal digits), the same in alias and canonical
// name. Rows that hold for some families only (Gemma's post-norm outputs, GPT-2's module paths,
// the non-rotary queries) are those families' own rows; the first matching row decides. `family` is
// a registry family's name or one of its ids ("gemma3_text").
#ifndef AH_ALIASES_H
#define AH_ALIASES_H

#include <stddef.h>

// One row: alias pattern -> canonical pattern. A family's own rows live with the family
// (struct model_family's aliases, model/family.h) and are tried before the shared rows of
// model/aliases.c, so that a family's row decides for its aliases.
struct alias_row {
    const char *alias;     // pattern, "{i}" a layer number; NULL ends a family's rows
    const char *canonical; // pattern, or NULL: the family has no such value
    const char *why;       // with canonical NULL: the reason (the alias is refused with it);
                           // NULL too: the name is no alias for the family (a family row)
};

// Whether name is an alias for a model of `family` (its name as struct model says it: "laguna",
// "gpt2", ...): returns 1 and writes the canonical name into canon (cap bytes); returns 0 if name
// is no alias; returns -1 if it is an alias the family has no value for, writing the reason into
// canon (e.g. "a parallel-residual block has no mid stream").
int alias_resolve(const char *family, const char *name, char *canon, size_t cap);

// The k-th alias (k = 0, 1, ...) of the catalogue name canonical for `family`, written into alias
// (cap bytes): returns 1, or 0 when there are no more. Lists what alias_resolve accepts.
int alias_of(const char *family, const char *canonical, int k, char *alias, size_t cap);

#endif
