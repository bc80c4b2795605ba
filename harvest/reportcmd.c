// reportcmd.c - `harvest report OUT.h5 -o report.html`: one self-contained HTML page of plots of
// an output (io/h5report.h reads it, io/htmlreport.h writes the page; docs/report.md). The page is
// written to REPORT.tmp and renamed (never a half file), and is never one of the output's files.
#define _POSIX_C_SOURCE 200809L // defines: access
#include "harvest/cliargs.h"
#include "harvest/harvest.h"
#include "io/fsutil.h"
#include "io/h5report.h"
#include "io/htmlreport.h"
#include "io/outlock.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char report_usage[] =
    "usage: harvest report OUT.h5 -o REPORT.html [--prompts P[,P...]] [--quiet]\n";

#define MAX_PROMPTS 64

struct report_opts {
    const char *path, *html;
    int64_t prompts[MAX_PROMPTS]; // whose attention patterns are shown (default: prompt 0)
    int n_prompts;
    bool quiet;
};

// --prompts 0,3,7
static int parse_prompts(struct report_opts *o, const char *v) {
    char buf[1024];
    if (!v) return -1;
    if (strlen(v) >= sizeof buf) {
        fprintf(stderr, "harvest report: --prompts: too long a list\n");
        return -1;
    }
    strcpy(buf, v);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (o->n_prompts == MAX_PROMPTS) {
            fprintf(stderr, "harvest report: --prompts: at most %d prompts\n", MAX_PROMPTS);
            return -1;
        }
        if (cli_int("report", "--prompts", t, 0, INT64_MAX, &o->prompts[o->n_prompts]) < 0)
            return -1;
        o->n_prompts++;
    }
    if (!o->n_prompts) return cli_int("report", "--prompts", "", 0, 0, &o->prompts[0]);
    return 0;
}

static int parse_args(struct report_opts *o, int argc, char **argv) {
    memset(o, 0, sizeof *o);
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--quiet")) {
            o->quiet = true;
        } else if (!strcmp(argv[i], "-o")) {
            if (!(o->html = cli_value("report", argc, argv, &i))) return -1;
        } else if (!strcmp(argv[i], "--prompts")) {
            if (parse_prompts(o, cli_value("report", argc, argv, &i)) < 0) return -1;
        } else if (argv[i][0] != '-' && !o->path) {
            o->path = argv[i];
        } else {
            fprintf(stderr, "harvest report: unexpected \"%s\"\n", argv[i]);
            return -1;
        }
    }
    if (!o->path || !o->html) {
        fprintf(stderr, "harvest report: %s\n",
                !o->path ? "no output given"
                         : "-o REPORT.html "
                           "is required");
        return -1;
    }
    return 0;
}

// the page and its temporary are none of the files the report reads (the master, its .tokens,
// its parts folder and what is in it; compared by device and inode)
static int check_target(const char *path, const char *html, const char *tmp, struct ah_error *err) {
    char **in = NULL;
    int n = 0;
    if (outlock_output_files(path, &in, &n) < 0) return ah_fail(err, AH_ENOMEM, "out of memory");
    const char *hit = outlock_input_at(html, false, (const char *const *)in, n);
    const char *thit = hit ? NULL : outlock_input_at(tmp, false, (const char *const *)in, n);
    int rc = hit || thit ? ah_fail(err, AH_EINVAL,
                                   "%s: -o: report would write this file, and it is %s, a file "
                                   "of the output it reads; give another -o",
                                   hit ? html : tmp, hit ? hit : thit)
                         : 0;
    outlock_files_free(in, n);
    return rc;
}

// the token text of each outlier, with the tokenizer of the job's model folder (as written in the
// job, from the working directory or the output's folder); none found: the text is left out
// (path: the tokenizer.json read, "" if none; PATH_LEN bytes)
#define PATH_LEN 4200
static void outlier_text(struct rpt_data *d, bool quiet, char *path) {
    cJSON *j = d->job ? cJSON_Parse(d->job) : NULL;
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, "model");
    path[0] = 0;
    struct tokenizer *tok = NULL;
    struct ah_error err = {0};
    if (cJSON_IsString(m)) {
        snprintf(path, PATH_LEN, "%s/tokenizer.json", m->valuestring);
        if (access(path, F_OK) != 0 && m->valuestring[0] != '/') {
            const char *slash = strrchr(d->path, '/');
            snprintf(path, PATH_LEN, "%.*s/%s/tokenizer.json", slash ? (int)(slash - d->path) : 1,
                     slash ? d->path : ".", m->valuestring);
        }
        if (access(path, F_OK) != 0 || tok_load(&tok, path, &err) < 0) tok = NULL;
    }
    if (!tok) path[0] = 0;
    cJSON_Delete(j);
    if (!tok && d->n_prof && !quiet)
        fprintf(stderr, "harvest report: no tokenizer.json in the job's model folder: the "
                        "outliers' token text is left out\n");
    for (int i = 0; tok && i < d->n_prof; i++) {
        struct rpt_profile *p = &d->prof[i];
        p->o_text = calloc((size_t)(p->K ? p->K : 1), sizeof *p->o_text);
        for (int64_t k = 0; p->o_text && k < p->K; k++) {
            size_t len = 0;
            if (tok_decode(tok, &p->o_tok[k], 1, false, &p->o_text[k], &len, &err) < 0)
                p->o_text[k] = NULL;
        }
    }
    tok_free(tok);
}

// the page into tmp, then renamed to html; neither may be the tokenizer read, nor html a folder
static int write_page(const struct rpt_data *d, const char *html, const char *tmp, const char *tok,
                      struct ah_error *err) {
    const char *in[1] = {tok[0] ? tok : NULL};
    const char *hit = outlock_input_at(html, false, in, 1)  ? html
                      : outlock_input_at(tmp, false, in, 1) ? tmp
                                                            : NULL;
    if (hit)
        return ah_fail(err, AH_EINVAL,
                       "%s: -o: report would write this file, and it is %s, the tokenizer it "
                       "reads; give another -o",
                       hit, tok);
    struct stat st;
    if (stat(html, &st) == 0 && S_ISDIR(st.st_mode))
        return ah_fail(err, AH_EINVAL, "%s: -o: is a folder; give the page's file name", html);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        int e = errno;
        return ah_fail(err, e == ENOSPC || e == EIO || e == ENOMEM ? AH_EIO : AH_EINVAL,
                       "%s: -o: cannot write: %s", html, strerror(e));
    }
    int rc = html_report_write(f, d, tmp, err);
    if (fclose(f) != 0 && rc == 0) rc = ah_fail(err, AH_EIO, "%s: cannot write", tmp);
    if (rc == 0 && fs_replace(tmp, html) < 0)
        rc = ah_fail(err, AH_EIO, "%s: cannot rename %s to it: %s", html, tmp, strerror(errno));
    if (rc < 0) unlink(tmp);
    return rc;
}

int cmd_report(int argc, char **argv) {
    struct report_opts o;
    if (parse_args(&o, argc, argv) < 0) {
        fputs(report_usage, stderr);
        return 1;
    }
    struct ah_error err = {0};
    size_t n = strlen(o.html) + 5;
    char *tmp = malloc(n);
    if (!tmp) return report(-AH_ENOMEM, NULL);
    snprintf(tmp, n, "%s.tmp", o.html);
    struct rpt_data d = {0};
    int rc = check_target(o.path, o.html, tmp, &err);
    if (rc == 0) rc = rpt_read(&d, o.path, o.n_prompts ? o.prompts : NULL, o.n_prompts, &err);
    char tok[PATH_LEN] = "";
    if (rc == 0) outlier_text(&d, o.quiet, tok);
    if (rc == 0) rc = write_page(&d, o.html, tmp, tok, &err);
    if (rc == 0 && !o.quiet) fprintf(stderr, "harvest report: wrote %s\n", o.html);
    rpt_free(&d);
    free(tmp);
    return report(rc, &err);
}
