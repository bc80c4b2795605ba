// inspect.c - `harvest activations` (the catalogue of a model) and `harvest inspect` (an output).
#include "harvest/harvest.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cmd_activations(int argc, char **argv) {
    const char *dir = NULL, *glob = NULL;
    bool json = false;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            json = true;
        else if (!dir)
            dir = argv[i];
        else if (!glob)
            glob = argv[i];
        else
            dir = NULL, i = argc;
    }
    if (!dir) {
        fprintf(stderr, "usage: harvest activations MODEL_DIR [GLOB] [--json]\n");
        return 1;
    }
    struct model m;
    struct ah_error err = {0};
    int rc = model_load(&m, dir, false, &err);
    if (rc < 0) return report(rc, &err);
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

int cmd_inspect(int argc, char **argv) {
    if (argc != 1) {
        fprintf(stderr, "usage: harvest inspect OUT.h5\n");
        return 1;
    }
    struct ah_error err = {0};
    return report(h5out_inspect(argv[0], stdout, &err), &err);
}
