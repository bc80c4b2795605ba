// aliases.c - the alias table (see aliases.h). Each row's choice follows tests/ref/hf/aliases.py,
// whose docstring gives the reasons; in short:
//   - hook_resid_pre / _mid / _post: the residual stream entering, between and leaving the block;
//   - hook_attn_out / hook_mlp_out: what the block adds to the residual stream, which for Gemma's
//     sandwich norms is after the post-attention / post-feed-forward norm;
//   - attn.hook_q / hook_k: TransformerLens's queries and keys before rotary (hook_rot_q is after),
//     so the *_pre_rope names on rotary families (a model without them refuses the alias, naming
//     the missing name); GPT-2 has no rotary. Its [pos, head, d_head] is our [head, seq, d_head];
//   - mlp.hook_post: what the down projection receives (mlp_neurons: act(gate) * up when gated);
//   - hook_embed: the token embedding (Gemma 2: times sqrt(hidden), which TransformerLens folds
//     into W_E and Hugging Face's Gemma 2 applies after the embedding: layers.0.layer_input);
//   - ln1/ln2.hook_normalized, mlp.hook_pre, attn.hook_result: values harvest does not compute
//     (before the norm's weight; before the activation; each head after W_O): refused, naming the
//     nearest value harvest has;
//   - module paths: the module's own output (the block, self_attn, mlp).
#include "model/aliases.h"

#include "model/family.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

static const struct alias_row rows[] = {
    // TransformerLens hook names
    {"blocks.{i}.hook_resid_pre", "layers.{i}.layer_input", NULL},
    {"blocks.{i}.hook_resid_mid", "layers.{i}.layer_mid", NULL},
    {"blocks.{i}.hook_resid_post", "layers.{i}.layer_output", NULL},
    {"blocks.{i}.hook_attn_out", "layers.{i}.attention_output", NULL},
    {"blocks.{i}.hook_mlp_out", "layers.{i}.mlp_output", NULL},
    {"blocks.{i}.attn.hook_q", "layers.{i}.attention_queries_pre_rope", NULL},
    {"blocks.{i}.attn.hook_k", "layers.{i}.attention_keys_pre_rope", NULL},
    {"blocks.{i}.attn.hook_v", "layers.{i}.attention_values", NULL},
    {"blocks.{i}.attn.hook_z", "layers.{i}.attention_head_outputs", NULL},
    {"blocks.{i}.attn.hook_pattern", "layers.{i}.attention_probabilities", NULL},
    {"blocks.{i}.attn.hook_attn_scores", "layers.{i}.attention_scores", NULL},
    {"blocks.{i}.mlp.hook_post", "layers.{i}.mlp_neurons", NULL},
    {"ln_final.hook_normalized", "final_norm_output", NULL},
    {"hook_embed", "token_embeddings", NULL},
    {"blocks.{i}.ln1.hook_normalized", NULL,
     "TransformerLens's hook_normalized is before the norm's weight; harvest has the norm's "
     "output after it: layers.{i}.attention_norm_output"},
    {"blocks.{i}.ln2.hook_normalized", NULL,
     "TransformerLens's hook_normalized is before the norm's weight; harvest has the norm's "
     "output after it: layers.{i}.mlp_norm_output"},
    {"blocks.{i}.mlp.hook_pre", NULL,
     "the MLP's pre-activation, which harvest does not store; it has layers.{i}.mlp_activation "
     "(after the activation)"},
    {"blocks.{i}.attn.hook_result", NULL,
     "each head's output after W_O, which harvest does not compute; it has "
     "layers.{i}.attention_head_outputs (before W_O), layers.{i}.attention_output (the sum)"},
    // Hugging Face module paths (nnsight, sparsify): the module's output (GPT-2 and GPT-NeoX
    // have their own, and rows saying these are none of theirs)
    {"model.layers.{i}", "layers.{i}.layer_output", NULL},
    {"model.layers.{i}.self_attn", "layers.{i}.attention_output", NULL},
    {"model.layers.{i}.mlp", "layers.{i}.mlp_output", NULL},
};
#define N_ROWS (int)(sizeof rows / sizeof rows[0])

// Whether name matches pattern; the digits "{i}" stood for go to num (at most 15 of them).
static bool match(const char *pattern, const char *name, char *num) {
    const char *at = strstr(pattern, "{i}");
    num[0] = '\0';
    if (!at) return !strcmp(pattern, name);
    size_t pre = (size_t)(at - pattern), k = 0;
    if (strncmp(pattern, name, pre)) return false;
    for (name += pre; name[k] >= '0' && name[k] <= '9'; k++)
        if (k == 15) return false;
    if (k == 0 || strcmp(at + 3, name + k)) return false;
    memcpy(num, name, k);
    num[k] = '\0';
    return true;
}

// pattern with every "{i}" replaced by num, into out (cut at cap - 1 bytes)
static void expand(const char *pattern, const char *num, char *out, size_t cap) {
    size_t n = 0;
    out[0] = '\0';
    for (const char *p = pattern, *at; n + 1 < cap && *p; p = at + 3) {
        at = strstr(p, "{i}");
        int k = snprintf(out + n, cap - n, "%.*s%s", (int)(at ? at - p : (long)strlen(p)), p,
                         at ? num : "");
        n += k < 0 ? 0 : (size_t)k;
        if (!at || n >= cap) break;
    }
}

// the registry family named `family` (its name, else one of its ids), or NULL
static const struct model_family *family_of(const char *family) {
    const struct model_family *f = model_family_named(family);
    return f ? f : model_family_with_id(family);
}

// the k-th row for f: its own rows, then the shared ones; NULL past the last
static const struct alias_row *row_at(const struct model_family *f, int k) {
    for (const struct alias_row *r = f ? f->aliases : NULL; r && r->alias; r++)
        if (k-- == 0) return r;
    return k < N_ROWS ? &rows[k] : NULL;
}

// the k-th row for f in listing order: the shared rows, then its own (the order the aliases of
// one canonical name are listed in); NULL past the last
static const struct alias_row *listed_at(const struct model_family *f, int k) {
    if (k < N_ROWS) return &rows[k];
    k -= N_ROWS;
    for (const struct alias_row *r = f ? f->aliases : NULL; r && r->alias; r++)
        if (k-- == 0) return r;
    return NULL;
}

// the first row for f whose alias pattern is alias_pattern (a row decides for its aliases iff it
// is that row)
static const struct alias_row *deciding(const struct model_family *f, const char *alias_pattern) {
    const struct alias_row *r;
    for (int k = 0; (r = row_at(f, k)) != NULL; k++)
        if (!strcmp(r->alias, alias_pattern)) return r;
    return NULL;
}

int alias_resolve(const char *family, const char *name, char *canon, size_t cap) {
    char num[16];
    const struct model_family *f = family_of(family);
    const struct alias_row *r;
    for (int k = 0; (r = row_at(f, k)) != NULL; k++) {
        if (!match(r->alias, name, num)) continue;
        if (!r->canonical && !r->why) return 0; // none of the family's
        if (!r->canonical) {
            expand(r->why, num, canon, cap);
            return -1;
        }
        expand(r->canonical, num, canon, cap);
        return 1;
    }
    return 0;
}

int alias_of(const char *family, const char *canonical, int k, char *alias, size_t cap) {
    char num[16];
    const struct model_family *f = family_of(family);
    const struct alias_row *r;
    for (int i = 0; (r = listed_at(f, i)) != NULL; i++) {
        if (!r->canonical || deciding(f, r->alias) != r || !match(r->canonical, canonical, num))
            continue;
        if (k-- == 0) {
            expand(r->alias, num, alias, cap);
            return 1;
        }
    }
    return 0;
}
