// htmlreport.c - the page of `harvest report` (io/htmlreport.h): provenance, selection counts,
// the residual norm by layer and by position (/norm_profile), the per-feature statistics
// (/stats), attention patterns and the experts, in that order; plots through io/htmlsvg.h.
#include "io/htmlreport.h"
#include "io/h5report.h"
#include "io/htmlsvg.h"
#include "model/ah.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define HIST_BINS   30  // bins of the feature mean / variance histograms
#define OUTLIERS_AT 5   // outliers a profiled value lists
#define POS_MAX     256 // positions a norm-by-position curve draws (more: blocks of positions)

static const char style[] =
    "<style>\n"
    "body{font:14px/1.4 system-ui,sans-serif;margin:24px auto;max-width:1180px;color:#222}\n"
    "h1{font-size:22px}h2{font-size:18px;border-bottom:1px solid #ccc;margin-top:32px}\n"
    "table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ddd;padding:2px 8px;"
    "text-align:left;font-variant-numeric:tabular-nums}th{background:#f4f4f4}\n"
    "figure{display:inline-block;margin:8px 6px 8px 0;vertical-align:top}\n"
    "figcaption{font-weight:600;margin-bottom:2px}\n"
    "svg .area{fill:#fafafa;stroke:#bbb}svg .grid{stroke:#e4e4e4}\n"
    "svg .series{fill:none;stroke-width:1.6}svg .band{stroke:none;opacity:.35}\n"
    "svg text{font-size:11px;fill:#444}svg .axis{font-size:12px;fill:#222}\n"
    "svg .bars rect{fill:#1f77b4}svg .bars rect:hover{fill:#d62728}\n"
    "code{white-space:pre;background:#eef}.notes "
    "li{color:#8a5a00}pre{background:#f6f6f6;padding:8px;overflow:auto;max-height:320px}\n"
    ".small figure{width:280px}.small figcaption{font-size:12px;height:34px;overflow:hidden}\n"
    "</style>\n";

// a note saying what is missing and which job key gives it
static void note(FILE *f, const char *what, const char *why) {
    fprintf(f, "<li class=\"note\" data-missing=\"%s\">", what);
    html_escape(f, why);
    fputs("</li>\n", f);
}

static void notes(FILE *f, const struct rpt_data *d) {
    fputs("<ul class=\"notes\">\n", f);
    if (!d->has_counts)
        note(f, "select",
             "Selection counts: the run had no \"select\"; the job key \"select\" "
             "(docs/statistics.md) gives them.");
    if (!d->n_prof)
        note(f, "norm_profile",
             "Residual norm by layer and by position: the output has no /norm_profile; the job "
             "key \"norm_profile\": [names] (e.g. [\"layers.*.layer_output\"]) gives it.");
    if (!d->n_stats)
        note(f, "stats",
             "Feature mean and variance histograms: the output has no /stats; the job "
             "key \"statistics\": true (or `harvest stats OUT.h5`) gives them.");
    if (!d->n_attn)
        note(f, "attention",
             "Attention patterns: no attention probabilities of the chosen prompts are stored; "
             "ask for them in \"activations\" (layers.N.attention_probabilities, or "
             "encoder_N_attn_probs on the spec model) with \"layout\": \"prompt\".");
    bool load = false, ent = false;
    for (int i = 0; i < d->n_moe; i++)
        load |= d->moe[i].has_load, ent |= d->moe[i].has_entropy;
    if (!load)
        note(f, "expert_indices",
             "Expert load per layer: no expert_indices stored; ask for "
             "layers.*.expert_indices in \"activations\" (MoE models).");
    if (!ent)
        note(f, "router_logits",
             "Router entropy per layer: no router_logits stored; ask for "
             "layers.*.router_logits in \"activations\" (MoE models).");
    fputs("</ul>\n", f);
}

static void row_num(FILE *f, const char *k, long long v) {
    fprintf(f, "<tr><th>%s</th><td>%lld</td></tr>\n", k, v);
}
static void row_str(FILE *f, const char *k, const char *v) {
    fprintf(f, "<tr><th>%s</th><td>", k);
    html_escape(f, v ? v : "");
    fputs("</td></tr>\n", f);
}

// a JSON text pretty-printed in a folded block
static void json_block(FILE *f, const char *title, const char *json) {
    cJSON *j = json ? cJSON_Parse(json) : NULL;
    char *s = j ? cJSON_Print(j) : NULL;
    fprintf(f, "<details><summary>%s</summary><pre>", title);
    html_escape(f, s ? s : json ? json : "(none)");
    fputs("</pre></details>\n", f);
    free(s);
    cJSON_Delete(j);
}

static void provenance(FILE *f, const struct rpt_data *d) {
    fputs("<h2 id=\"provenance\">Provenance</h2>\n<table class=\"provenance\">\n", f);
    row_str(f, "output", d->path);
    row_str(f, "model family", d->family);
    row_num(f, "harvest_format", (long long)d->format);
    row_str(f, "complete", d->complete == 1 ? "yes" : "no");
    row_num(f, "prompts", (long long)d->n_prompts);
    row_num(f, "tokens stored", (long long)d->n_tokens);
    row_num(f, "max_seq_len", (long long)d->max_seq_len);
    row_num(f, "batch_size", (long long)d->batch_size);
    row_num(f, "prompts skipped (empty)", (long long)d->n_empty);
    row_num(f, "prompts truncated", (long long)d->n_truncated);
    row_str(f, "storage dtype", d->storage);
    cJSON *p = d->provenance ? cJSON_Parse(d->provenance) : NULL, *e;
    cJSON_ArrayForEach(e, p) { // the scalar entries; the rest is in the JSON below
        if (cJSON_IsString(e)) row_str(f, e->string, e->valuestring);
        if (cJSON_IsNumber(e))
            fprintf(f, "<tr><th>%s</th><td>%.12g</td></tr>\n", e->string, e->valuedouble);
    }
    cJSON_Delete(p);
    fputs("</table>\n<table class=\"datasets\"><tr><th>dataset</th><th>shape</th><th>stored "
          "axes</th><th>dtype</th></tr>\n",
          f);
    for (int i = 0; i < d->n_dsets; i++) {
        const struct rpt_dset *s = &d->dsets[i];
        fputs("<tr><td>", f);
        html_escape(f, s->name);
        fputs("</td><td>", f);
        for (int k = 0; k < s->ndim; k++)
            fprintf(f, "%s%lld", k ? " &times; " : "", (long long)s->dims[k]);
        fputs("</td><td>", f);
        for (int k = 0; k < s->ndim; k++)
            fputs(k ? ", " : "", f), html_escape(f, s->axes[k]);
        fprintf(f, "</td><td>%s</td></tr>\n", s->dtype);
    }
    fputs("</table>\n", f);
    json_block(f, "job", d->job);
    json_block(f, "provenance", d->provenance);
}

static void selection(FILE *f, const struct rpt_data *d) {
    if (!d->has_counts) return;
    fputs("<h2 id=\"selection\">Selection</h2>\n", f);
    double v[RPT_N_COUNTS];
    const char *names[RPT_N_COUNTS];
    int n = 0;
    for (int i = 0; i < RPT_N_COUNTS; i++)
        if (d->has_count[i]) names[n] = rpt_count_names[i], v[n++] = (double)d->counts[i];
    struct svg_chart c = {.id = "selection-counts",
                          .title = "Tokens by what the selection did with them",
                          .xlabel = "",
                          .ylabel = "tokens",
                          .xnames = names,
                          .width = 900,
                          .height = 300};
    svg_bars(f, &c, n, v);
}

// ----------------------------------------------------------------------------
// norm profiles

static void norm_by_layer(FILE *f, const struct rpt_data *d) {
    int n = d->n_prof;
    double *v = malloc(sizeof *v * (size_t)n * (RPT_N_QUANTILE + 1) + 1);
    const char **names = malloc(sizeof *names * (size_t)n + 1);
    if (!v || !names) goto done;
    for (int i = 0; i < n; i++) {
        names[i] = d->prof[i].value;
        v[i] = d->prof[i].mean;
        for (int k = 0; k < RPT_N_QUANTILE; k++)
            v[(size_t)(k + 1) * n + i] = d->prof[i].q[k];
    }
    struct svg_series s[2] = {{"mean", "#d62728", v, false}, {"median", "#1f77b4", v + 3 * n, 1}};
    struct svg_band b[2] = {{"5-95 %", "#9ecae1", v + n, v + 5 * n},
                            {"25-75 %", "#4292c6", v + 2 * n, v + 4 * n}};
    struct svg_chart c = {.id = "norm-by-layer",
                          .title = "Residual norm by layer: mean and percentiles (L2 norm of a "
                                   "token's row)",
                          .xlabel = "profiled value, in layer order",
                          .ylabel = "L2 norm",
                          .xnames = names,
                          .width = 1100,
                          .height = 340};
    svg_lines(f, &c, n, s, 2, b, 2);
done:
    free(v);
    free(names);
}

// positions [b * B, b * B + B) of p: the mean (sum over count) and the largest norm there
static void position_block(const struct rpt_profile *p, int64_t b, int64_t B, double *mean,
                           double *max) {
    double s = 0, m = -INFINITY;
    int64_t c = 0;
    for (int64_t t = b * B; t < b * B + B && t < p->T; t++) {
        if (p->count[t] <= 0) continue;
        s += p->sum[t], c += p->count[t];
        m = p->max[t] > m ? p->max[t] : m;
    }
    *mean = c ? s / (double)c : (double)NAN;
    *max = c ? m : (double)NAN;
}

static void norm_by_position(FILE *f, const struct rpt_data *d) {
    int n = d->n_prof;
    int64_t T = 0; // up to the last position any profile counted
    for (int i = 0; i < n; i++)
        for (int64_t t = d->prof[i].T - 1; t >= T; t--)
            if (d->prof[i].count[t] > 0) {
                T = t + 1;
                break;
            }
    int64_t B = (T + POS_MAX - 1) / POS_MAX, nb = B ? (T + B - 1) / B : 0; // blocks of B
    double *v = malloc(sizeof *v * (size_t)(2 * n * nb) + 1);
    struct svg_series *s = calloc((size_t)(2 * n) + 1, sizeof *s);
    char(*col)[8] = calloc((size_t)n + 1, sizeof *col), xl[64];
    if (!v || !s || !col) goto done;
    for (int i = 0; i < n; i++) {
        double *mean = v + (size_t)(2 * i) * nb, *max = mean + nb;
        for (int64_t b = 0; b < nb; b++)
            position_block(&d->prof[i], b, B, &mean[b], &max[b]);
        svg_color(col[i], i, n);
        s[i] = (struct svg_series){d->prof[i].value, col[i], mean, false};
        s[n + i] = (struct svg_series){d->prof[i].value, col[i], max, false};
    }
    snprintf(xl, sizeof xl, B > 1 ? "position (blocks of %lld)" : "position", (long long)B);
    struct svg_chart c = {.id = "norm-mean-by-position",
                          .title = "Mean norm by position (an attention sink: a position far above "
                                   "the rest)",
                          .xlabel = xl,
                          .ylabel = "mean L2 norm",
                          .width = 1100,
                          .height = 320,
                          .logy = true,
                          .xunit = B};
    svg_lines(f, &c, nb, s, n, NULL, 0);
    c.id = "norm-max-by-position", c.title = "Largest norm by position", c.ylabel = "max L2 norm";
    svg_lines(f, &c, nb, s + n, n, NULL, 0);
done:
    free(v), free(s), free(col);
}

static void outliers(FILE *f, const struct rpt_data *d) {
    fputs("<table id=\"outliers\" class=\"outliers\"><tr><th>value</th><th>rank</th><th>prompt"
          "</th><th>position</th><th>token id</th><th>token</th><th>norm</th><th>&times; the "
          "value's mean</th></tr>\n",
          f);
    for (int i = 0; i < d->n_prof; i++) {
        const struct rpt_profile *p = &d->prof[i];
        for (int64_t k = 0; k < p->K && k < OUTLIERS_AT; k++) {
            fputs("<tr><td>", f);
            html_escape(f, p->value);
            fprintf(f, "</td><td>%lld</td><td>%lld</td><td>%lld</td><td>%lld</td><td>",
                    (long long)k + 1, (long long)p->o_prompt[k], (long long)p->o_pos[k],
                    (long long)p->o_tok[k]);
            if (p->o_text && p->o_text[k]) fputs("<code>", f), html_escape(f, p->o_text[k]);
            if (p->o_text && p->o_text[k]) fputs("</code>", f);
            fprintf(f, "</td><td>%.6g</td><td>%.3g</td></tr>\n", p->o_norm[k],
                    p->o_norm[k] / p->mean);
        }
    }
    fputs("</table>\n", f);
}

static void norms(FILE *f, const struct rpt_data *d) {
    if (!d->n_prof) return;
    fputs("<h2 id=\"norms\">Residual norm</h2>\n", f);
    norm_by_layer(f, d);
    norm_by_position(f, d);
    fputs("<h3>Largest norms: which positions and tokens carry them</h3>\n", f);
    outliers(f, d);
}

// ----------------------------------------------------------------------------
// statistics

static void hist_of(const double *x, int64_t n, bool log, int64_t *cnt, double *lo, double *hi) {
    *lo = INFINITY, *hi = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        double v = log ? (x[i] > 0 ? log10(x[i]) : (double)NAN) : x[i];
        if (isfinite(v)) *lo = v < *lo ? v : *lo, *hi = v > *hi ? v : *hi;
    }
    if (!(*lo <= *hi)) *lo = 0, *hi = 1;
    if (*hi == *lo) *lo -= 0.5, *hi += 0.5;
    memset(cnt, 0, sizeof *cnt * HIST_BINS);
    for (int64_t i = 0; i < n; i++) {
        double v = log ? (x[i] > 0 ? log10(x[i]) : (double)NAN) : x[i];
        if (!isfinite(v)) continue;
        int b = (int)((v - *lo) / (*hi - *lo) * HIST_BINS);
        cnt[b >= HIST_BINS ? HIST_BINS - 1 : b < 0 ? 0 : b]++;
    }
}

static void statistics(FILE *f, const struct rpt_data *d) {
    if (!d->n_stats) return;
    fputs("<h2 id=\"stats\">Per-feature statistics (/stats)</h2>\n<div class=\"small\">\n", f);
    for (int i = 0; i < d->n_stats; i++) {
        const struct rpt_stat *s = &d->stats[i];
        int64_t cnt[HIST_BINS];
        double lo, hi;
        char id[48], title[RPT_NAME_MAX + 96];
        struct svg_chart c = {
            .id = id, .title = title, .ylabel = "features", .width = 280, .height = 180};
        hist_of(s->mean, s->d, false, cnt, &lo, &hi);
        snprintf(id, sizeof id, "stats-mean-%d", i);
        snprintf(title, sizeof title, "%s: feature means (d %lld, %lld rows)", s->name,
                 (long long)s->d, (long long)s->rows);
        c.xlabel = "mean";
        svg_hist(f, &c, cnt, HIST_BINS, lo, hi);
        hist_of(s->var, s->d, true, cnt, &lo, &hi);
        snprintf(id, sizeof id, "stats-var-%d", i);
        snprintf(title, sizeof title, "%s: feature variances", s->name);
        c.xlabel = "log10 variance";
        svg_hist(f, &c, cnt, HIST_BINS, lo, hi);
    }
    fputs("</div>\n", f);
}

// ----------------------------------------------------------------------------
// attention and experts

static void attention(FILE *f, const struct rpt_data *d) {
    if (!d->n_attn) return;
    fputs("<h2 id=\"attention\">Attention patterns (mean over heads)</h2>\n<div class=\"small\">\n",
          f);
    for (int i = 0; i < d->n_attn; i++) {
        const struct rpt_attn *a = &d->attn[i];
        char id[48], title[RPT_NAME_MAX + 96];
        snprintf(id, sizeof id, "attention-%d", i);
        snprintf(title, sizeof title, "%s, prompt %lld (%lld tokens, %lld heads)", a->name,
                 (long long)a->prompt, (long long)a->T, (long long)a->heads);
        char xl[64], yl[64];
        snprintf(xl, sizeof xl, a->bk > 1 ? "key (blocks of %lld)" : "key", (long long)a->bk);
        snprintf(yl, sizeof yl, a->bq > 1 ? "query (blocks of %lld)" : "query", (long long)a->bq);
        struct svg_chart c = {.id = id,
                              .title = title,
                              .xlabel = xl,
                              .ylabel = yl,
                              .width = 280,
                              .height = 270,
                              .xunit = a->bk};
        svg_heatmap(f, &c, a->p, a->rows, a->cols, NULL);
    }
    fputs("</div>\n", f);
}

static void expert_load(FILE *f, const struct rpt_data *d) {
    int64_t E = 0;
    int n = 0;
    for (int i = 0; i < d->n_moe; i++)
        if (d->moe[i].has_load) E = d->moe[i].E > E ? d->moe[i].E : E, n++;
    if (!n) return;
    double *v = calloc((size_t)(n * E), sizeof *v);
    const char **names = calloc((size_t)n, sizeof *names);
    for (int i = 0, r = 0; v && names && i < d->n_moe; i++) {
        const struct rpt_moe *m = &d->moe[i];
        if (!m->has_load) continue;
        names[r] = m->layer;
        for (int64_t e = 0; e < m->E; e++)
            v[r * E + e] = (double)m->load[e];
        r++;
    }
    struct svg_chart c = {.id = "expert-load",
                          .title = "Expert load: tokens routed to each expert (every top-k slot)",
                          .xlabel = "expert",
                          .ylabel = "",
                          .width = 1100,
                          .height = 80 + 22 * n};
    if (v && names) svg_heatmap(f, &c, v, n, E, names);
    free(v);
    free(names);
}

static void experts(FILE *f, const struct rpt_data *d) {
    if (!d->n_moe) return;
    fputs("<h2 id=\"experts\">Experts</h2>\n", f);
    expert_load(f, d);
    int n = d->n_moe;
    double *v = malloc(sizeof *v * (size_t)(2 * n) + 1);
    const char **names = malloc(sizeof *names * (size_t)n + 1);
    int has = 0;
    for (int i = 0; v && names && i < n; i++) {
        names[i] = d->moe[i].layer;
        v[i] = d->moe[i].has_entropy ? d->moe[i].entropy : (double)NAN;
        v[n + i] = d->moe[i].E > 0 ? log((double)d->moe[i].E) : (double)NAN;
        has += d->moe[i].has_entropy;
    }
    struct svg_series s[2] = {{"mean router entropy", "#2ca02c", v, false},
                              {"log E (uniform routing)", "#888888", v ? v + n : NULL, true}};
    struct svg_chart c = {.id = "router-entropy",
                          .title =
                              "Router entropy by layer: -sum p log p of softmax(router_logits)",
                          .xlabel = "block",
                          .ylabel = "nats",
                          .xnames = names,
                          .width = 1100};
    if (v && names && has) svg_lines(f, &c, n, s, 2, NULL, 0);
    free(v);
    free(names);
}

int html_report_write(FILE *f, const struct rpt_data *d, const char *name, struct ah_error *err) {
    const char *base = strrchr(d->path, '/');
    base = base ? base + 1 : d->path;
    fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>harvest "
          "report: ",
          f);
    html_escape(f, base);
    fprintf(f, "</title>\n%s</head><body>\n<h1>harvest report: ", style);
    html_escape(f, base);
    fputs("</h1>\n", f);
    notes(f, d);
    norms(f, d);
    statistics(f, d);
    attention(f, d);
    experts(f, d);
    selection(f, d);
    provenance(f, d);
    fputs("</body></html>\n", f);
    if (fflush(f) != 0 || ferror(f)) return ah_fail(err, AH_EIO, "%s: write failed", name);
    return 0;
}
