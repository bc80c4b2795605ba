// test_job.c - data-driven job file cases: tests/jobs/valid/<case>/{job.json,expected} must parse
// to the dump in `expected`; tests/jobs/invalid/<case>/{job.json,error} must fail with a message
// containing the text of `error`. argv[1]: the tests/jobs folder.
#define _POSIX_C_SOURCE 200809L // defines: opendir
#include "jobs/job.h"
#include "model/ah.h"
#include "tests/check.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>

static char *slurp(const char *path) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    static char buf[8192];
    size_t n = fread(buf, 1, sizeof buf - 1, fp);
    fclose(fp);
    buf[n] = '\0';
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
        buf[--n] = '\0';
    return buf;
}

// resolved paths are shown relative to the case folder
static const char *rel(const char *p, const char *dir) {
    size_t n = strlen(dir);
    return strncmp(p, dir, n) == 0 && p[n] == '/' ? p + n + 1 : p;
}

static void dump(const struct job *j, const char *dir, char *out, size_t cap) {
    char acts[512] = "";
    for (int i = 0; i < j->n_activations; i++)
        snprintf(acts + strlen(acts), sizeof acts - strlen(acts), "%s%s", i ? "," : "",
                 j->activations[i]);
    snprintf(
        out, cap,
        "model=%s\ndata=%s\nformat=%s\nfield=%s\nactivations=%s\nmax_seq_len=%d\n"
        "batch_size=%d\noutput=%s\ndtype=%s\nlayout=%s\ncompression=%d\ncheckpoint_seconds=%d\n"
        "pipeline_stages=%d\nexpert_parallel=%d",
        rel(j->model, dir), rel(j->data_path, dir), j->data_format,
        j->data_field ? j->data_field : "-", acts, j->max_seq_len, j->batch_size,
        rel(j->out_path, dir), job_dtype_name(j->out_dtype),
        j->layout == JOB_LAYOUT_TOKEN ? "token" : "prompt", j->compression, j->checkpoint_seconds,
        j->pipeline_stages, j->expert_parallel);
    if (j->pack)
        snprintf(out + strlen(out), cap - strlen(out), "\npack=separator %d, bos %d",
                 j->pack_separator, j->pack_bos);
}

static int run_suite(const char *root, const char *kind) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", root, kind);
    DIR *d = opendir(path);
    if (!d) {
        fprintf(stderr, "cannot open %s\n", path);
        check_failures++;
        return 0;
    }
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char dir[1536], job[1600], exp[1600];
        snprintf(dir, sizeof dir, "%s/%s", path, e->d_name);
        snprintf(job, sizeof job, "%s/job.json", dir);
        snprintf(exp, sizeof exp, "%s/%s", dir, strcmp(kind, "valid") ? "error" : "expected");
        struct job j;
        struct ah_error err = {0};
        int rc = job_load(&j, job, &err);
        char *want = slurp(exp);
        n++;
        if (!want) {
            fprintf(stderr, "%s: missing\n", exp);
            check_failures++;
        } else if (!strcmp(kind, "valid")) {
            char got[2048];
            if (rc == 0) dump(&j, dir, got, sizeof got);
            if (rc != 0 || strcmp(got, want)) {
                fprintf(stderr, "%s: rc %d (%s)\ngot:\n%s\nwant:\n%s\n", e->d_name, rc, err.msg,
                        rc == 0 ? got : "", want);
                check_failures++;
            }
        } else if (rc == 0 || !strstr(err.msg, want) || !strstr(err.msg, "job.json")) {
            fprintf(stderr, "%s: rc %d, message \"%s\" lacks \"%s\"\n", e->d_name, rc, err.msg,
                    want);
            check_failures++;
        }
        if (rc == 0) job_free(&j);
    }
    closedir(d);
    return n;
}

int main(int argc, char **argv) {
    if (argc != 2) return EXIT_FAILURE;
    int nv = run_suite(argv[1], "valid"), ni = run_suite(argv[1], "invalid");
    printf("%d valid and %d invalid job cases\n", nv, ni);
    CHECK(nv >= 3 && ni >= 8);
    return check_failures ? EXIT_FAILURE : EXIT_SUCCESS;
}
