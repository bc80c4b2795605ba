// inspect.c - `harvest activations` (the catalogue of a model) and `harvest inspect` (an output).
#define _POSIX_C_SOURCE 200809L // defines: access
#include "harvest/cliargs.h"
#include "harvest/harvest.h"
#include "io/h5profile.h" // h5prof_list
#include "io/h5sae.h"     // h5sae_print
#include "io/h5stats.h"
#include "model/aliases.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// `harvest activations MODEL --aliases`: each alias the model accepts (model/aliases.h) and the
// catalogue name it stands for, in catalogue order (GLOB filters the catalogue names)
static int list_aliases(const struct model *m, const char *glob, bool json) {
    cJSON *arr = json ? cJSON_CreateArray() : NULL;
    int shown = 0;
    char alias[TAP_NAME_MAX + 64];
    for (int i = 0; i < m->n_cat; i++) {
        const char *name = m->cat[i].name;
        if (glob && !tap_glob_match(glob, name)) continue;
        for (int k = 0; alias_of(m->family, name, k, alias, sizeof alias); k++, shown++) {
            if (!json) {
                printf("%-40s %s\n", alias, name);
                continue;
            }
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "alias", alias);
            cJSON_AddStringToObject(o, "canonical_name", name);
            cJSON_AddItemToArray(arr, o);
        }
    }
    if (json) {
        char *s = cJSON_Print(arr);
        puts(s ? s : "[]");
        free(s);
        cJSON_Delete(arr);
    }
    if (!shown)
        fprintf(stderr, "harvest: the %s model has no aliases%s%s\n", m->family,
                glob ? " for names matching " : "", glob ? glob : "");
    return 0;
}

int cmd_activations(int argc, char **argv) {
    const char *dir = NULL, *glob = NULL, *bad = NULL;
    bool json = false, aliases = false;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            json = true;
        else if (!strcmp(argv[i], "--aliases"))
            aliases = true;
        else if (argv[i][0] == '-') // an unknown flag, not a folder or glob
            bad = argv[i], i = argc;
        else if (!dir)
            dir = argv[i];
        else if (!glob)
            glob = argv[i];
        else
            bad = argv[i], i = argc;
    }
    if (bad) fprintf(stderr, "harvest activations: unexpected \"%s\"\n", bad);
    if (!dir || bad) {
        fprintf(stderr, "usage: harvest activations MODEL_DIR [GLOB] [--json] [--aliases]\n");
        return 1;
    }
    struct model m;
    struct ah_error err = {0};
    int rc = model_load(&m, dir, false, NULL, &err);
    if (rc < 0) return report(rc, &err);
    if (aliases) {
        rc = list_aliases(&m, glob, json);
        model_free(&m);
        return rc;
    }
    cJSON *arr = json ? cJSON_CreateArray() : NULL;
    int shown = 0;
    for (int i = 0; i < m.n_cat; i++) {
        const struct tap_desc *d = &m.cat[i];
        if (glob && !tap_glob_match(glob, d->name)) continue;
        shown++;
        if (json) {
            cJSON *o = cJSON_CreateObject(), *sh = cJSON_CreateArray();
            cJSON_AddStringToObject(o, "name", d->name);
            cJSON_AddStringToObject(o, "dtype", tap_dtype_name(d->dtype));
            for (int k = 0; k < d->ndim; k++)
                cJSON_AddItemToArray(sh, cJSON_CreateString(d->axes[k]));
            cJSON_AddItemToObject(o, "semantic_shape", sh);
            cJSON_AddStringToObject(o, "meaning", d->meaning);
            cJSON_AddItemToArray(arr, o);
            continue;
        }
        char shape[160] = "";
        for (int k = 0; k < d->ndim; k++)
            snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%s", k ? ", " : "",
                     d->axes[k]);
        printf("%-34s %-8s [%s]  %s\n", d->name, tap_dtype_name(d->dtype), shape, d->meaning);
    }
    if (json) {
        char *s = cJSON_Print(arr);
        puts(s ? s : "[]");
        free(s);
        cJSON_Delete(arr);
    }
    model_free(&m);
    if (glob && !shown) {
        fprintf(stderr, "harvest: no activation of %s matches \"%s\"\n", dir, glob);
        return 1;
    }
    return 0;
}

// ----------------------------------------------------------------------------
// inspect

// The tokenizer for an output's text: --tokenizer, else the job's model folder as written (from
// the working directory), else relative to the output's folder.
static int output_tokenizer(const char *out, const char *given, const char *job,
                            struct tokenizer **tok, struct ah_error *err) {
    if (given) return tok_load(tok, given, err);
    cJSON *j = job ? cJSON_Parse(job) : NULL;
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, "model");
    char path[4200] = "";
    int rc = -1;
    if (cJSON_IsString(m)) {
        snprintf(path, sizeof path, "%s/tokenizer.json", m->valuestring);
        if (access(path, F_OK) != 0 && m->valuestring[0] != '/') {
            const char *slash = strrchr(out, '/');
            snprintf(path, sizeof path, "%.*s/%s/tokenizer.json", slash ? (int)(slash - out) : 1,
                     slash ? out : ".", m->valuestring);
        }
        if (access(path, F_OK) == 0) rc = tok_load(tok, path, err);
    }
    cJSON_Delete(j);
    if (rc == -1)
        rc = ah_fail(err, AH_ENOENT,
                     "%s: no tokenizer.json found in the job's model folder (%s); give "
                     "--tokenizer PATH",
                     out, path[0] ? path : "no \"model\" in the job attribute");
    return rc;
}

int cmd_inspect(int argc, char **argv) {
    const char *path = NULL, *tokpath = NULL, *text_arg = NULL, *stats_name = NULL, *bad = NULL;
    long long text = -1;
    bool stats = false;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--text") && i + 1 < argc)
            text_arg = argv[++i];
        else if (!strcmp(argv[i], "--tokenizer") && i + 1 < argc)
            tokpath = argv[++i];
        else if (!strcmp(argv[i], "--stats")) // a name after it, once the output is given
            stats = true,
            stats_name = path && i + 1 < argc && argv[i + 1][0] != '-' ? argv[++i] : NULL;
        else if (!path && argv[i][0] != '-')
            path = argv[i];
        else
            bad = argv[i], i = argc;
    }
    if (bad) fprintf(stderr, "harvest inspect: unexpected \"%s\"\n", bad);
    if (!path || bad) {
        fprintf(stderr, "usage: harvest inspect OUT.h5 [--text PROMPT [--tokenizer PATH]] "
                        "[--stats [NAME]]\n");
        return 1;
    }
    int64_t t = -1; // --text: a prompt number, 0-based as in /prompts
    if (text_arg && cli_int("inspect", "--text", text_arg, 0, INT64_MAX, &t) < 0) return 1;
    text = (long long)t;
    struct ah_error err = {0};
    int rc = h5out_inspect(path, stdout, &err);
    char prof[4096]; // the profiled values (job key "norm_profile"), one line
    if (rc == 0 && h5prof_list(path, prof, sizeof prof) > 0) printf("norm profile: %s\n", prof);
    if (rc == 0) h5sae_print(path, stdout); // the job key "saes": a line a SAE
    if (rc == 0 && stats) rc = h5stats_print(path, stats_name, 5, stdout, &err);
    if (rc < 0 || text < 0) return report(rc, &err);
    int64_t *ids = NULL, n = 0;
    char *job = NULL, *s = NULL;
    size_t len = 0;
    struct tokenizer *tok = NULL;
    rc = h5out_prompt_ids(path, text, &ids, &n, &job, &err);
    if (rc == 0) rc = output_tokenizer(path, tokpath, job, &tok, &err);
    if (rc == 0) rc = tok_decode(tok, ids, (size_t)n, false, &s, &len, &err);
    if (rc == 0) printf("prompt %lld (%lld tokens): %s\n", text, (long long)n, s);
    free(s);
    free(ids);
    free(job);
    tok_free(tok);
    return report(rc, &err);
}
