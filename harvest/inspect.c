// inspect.c - `harvest activations` (the catalogue of a model) and `harvest inspect` (an output).
#include "harvest/harvest.h"

#include <cjson/cJSON.h>
#include <hdf5.h>
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
            for (int k = 0; k < d->ndim; k++) cJSON_AddItemToArray(sh, cJSON_CreateString(d->axes[k]));
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

static int64_t read_i64_attr(hid_t obj, const char *name, int64_t dflt) {
    int64_t v = dflt;
    if (H5Aexists(obj, name) <= 0) return dflt;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    if (a < 0 || H5Aread(a, H5T_NATIVE_INT64, &v) < 0) v = dflt;
    if (a >= 0) H5Aclose(a);
    return v;
}

static void read_str_attr(hid_t obj, const char *name, char *out, size_t n) {
    out[0] = '\0';
    if (H5Aexists(obj, name) <= 0) return;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    char *v = NULL;
    if (a >= 0 && H5Aread(a, t, &v) >= 0 && v) {
        snprintf(out, n, "%s", v);
        H5free_memory(v);
    }
    H5Tclose(t);
    if (a >= 0) H5Aclose(a);
}

static int64_t dset_len(hid_t file, const char *path) {
    hid_t d = H5Dopen2(file, path, H5P_DEFAULT);
    if (d < 0) return -1;
    hid_t s = H5Dget_space(d);
    hsize_t n = 0;
    H5Sget_simple_extent_dims(s, &n, NULL);
    H5Sclose(s);
    H5Dclose(d);
    return (int64_t)n;
}

static herr_t show_dset(hid_t g, const char *name, const H5L_info_t *info, void *u) {
    (void)info;
    (void)u;
    hid_t d = H5Dopen2(g, name, H5P_DEFAULT);
    if (d < 0) return 0;
    hid_t s = H5Dget_space(d), t = H5Dget_type(d);
    hsize_t dims[8];
    int nd = H5Sget_simple_extent_dims(s, dims, NULL);
    char shape[128] = "", dtype[16], stored[16];
    for (int k = 0; k < nd; k++)
        snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%llu", k ? ", " : "",
                 (unsigned long long)dims[k]);
    read_str_attr(d, "dtype", dtype, sizeof dtype);
    if (H5Tget_class(t) == H5T_INTEGER)
        snprintf(stored, sizeof stored, "int%zu", H5Tget_size(t) * 8);
    else if (H5Tget_size(t) == 4)
        snprintf(stored, sizeof stored, "float32");
    else {
        size_t spos, epos, esize, mpos, msize;
        H5Tget_fields(t, &spos, &epos, &esize, &mpos, &msize);
        snprintf(stored, sizeof stored, "%s", esize == 8 ? "bfloat16" : "float16");
    }
    printf("  %-34s %-8s stored %-8s [%s]\n", name, dtype, stored, shape);
    H5Tclose(t);
    H5Sclose(s);
    H5Dclose(d);
    return 0;
}

int cmd_inspect(int argc, char **argv) {
    if (argc != 1) {
        fprintf(stderr, "usage: harvest inspect OUT.h5\n");
        return 1;
    }
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    hid_t f = H5Fopen(argv[0], H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) {
        fprintf(stderr, "harvest: %s: cannot open as HDF5 (missing, not HDF5, or left open by a "
                        "killed job)\n", argv[0]);
        return 1;
    }
    char family[64];
    read_str_attr(f, "model_family", family, sizeof family);
    int64_t fmt = read_i64_attr(f, "harvest_format", -1);
    if (fmt < 0) {
        fprintf(stderr, "harvest: %s: not a harvest output (no harvest_format attribute)\n",
                argv[0]);
        H5Fclose(f);
        return 1;
    }
    int64_t complete = read_i64_attr(f, "complete", 0), done = read_i64_attr(f, "prompts_done", -1);
    int64_t n = dset_len(f, "prompts/length"), nt = dset_len(f, "tokens/input_ids");
    printf("%s: harvest_format %lld, model_family %s\n", argv[0], (long long)fmt, family);
    printf("complete: %s", complete == 1 ? "yes\n" : "no");
    if (complete != 1)
        printf(" (%lld of %lld prompts written; continue with `harvest run JOB --resume`)\n",
               (long long)done, (long long)n);
    printf("prompts: %lld (%lld empty skipped, %lld truncated), tokens: %lld, max_seq_len %lld\n",
           (long long)n, (long long)read_i64_attr(f, "n_prompts_skipped_empty", 0),
           (long long)read_i64_attr(f, "n_prompts_truncated", 0), (long long)nt,
           (long long)read_i64_attr(f, "max_seq_len", 0));
    hid_t g = H5Gopen2(f, "activations", H5P_DEFAULT);
    if (g >= 0) {
        H5G_info_t gi;
        H5Gget_info(g, &gi);
        printf("activations (%llu):\n", (unsigned long long)gi.nlinks);
        H5Literate(g, H5_INDEX_CRT_ORDER, H5_ITER_INC, NULL, show_dset, NULL);
        H5Gclose(g);
    }
    H5Fclose(f);
    return 0;
}
