// htmlsvg.c - inline SVG plots (io/htmlsvg.h): axes with rounded ticks, lines with bands, bars,
// histograms and heatmaps, each carrying its numbers as data-* attributes.
#include "io/htmlsvg.h"

#include <math.h>
#include <string.h>

#define ML 70 // margins: left, right, top, bottom
#define MR 16
#define MT 24
#define MB 56

struct frame {
    double w, h, pw, ph; // the svg, the plot area
    double y0, y1;       // y range (log10 of it when logy)
    bool logy;
    bool cat; // a categorical x axis: the points in the middle of n equal steps
};

void html_escape(FILE *f, const char *s) {
    for (; s && *s; s++) {
        switch (*s) {
            case '&':
                fputs("&amp;", f);
                break;
            case '<':
                fputs("&lt;", f);
                break;
            case '>':
                fputs("&gt;", f);
                break;
            case '"':
                fputs("&quot;", f);
                break;
            case '\'':
                fputs("&#39;", f);
                break;
            default:
                fputc(*s, f);
        }
    }
}

// a colour scale close to matplotlib's viridis, t in [0, 1]
static void viridis(double t, char *buf) {
    static const double st[5][3] = {
        {68, 1, 84}, {59, 82, 139}, {33, 145, 140}, {94, 201, 98}, {253, 231, 37}};
    t = t < 0 || isnan(t) ? 0 : t > 1 ? 1 : t;
    int i = t >= 1 ? 3 : (int)(t * 4);
    double u = t * 4 - i, c[3];
    for (int k = 0; k < 3; k++)
        c[k] = st[i][k] + u * (st[i + 1][k] - st[i][k]);
    snprintf(buf, 8, "#%02x%02x%02x", (int)c[0], (int)c[1], (int)c[2]);
}

const char *svg_color(char *buf, int i, int n) {
    static const char *const tab[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd",
                                      "#ff7f0e", "#17becf", "#8c564b", "#e377c2"};
    if (n <= 8) {
        snprintf(buf, 8, "%s", tab[i % 8]);
        return buf;
    }
    viridis(n > 1 ? 0.9 * i / (n - 1) : 0, buf); // many layers: a gradient, early dark
    return buf;
}

static void put_num(FILE *f, double v) {
    if (isnan(v))
        fputs("nan", f);
    else if (isinf(v))
        fputs(v > 0 ? "inf" : "-inf", f);
    else
        fprintf(f, "%.9g", v);
}

static void put_values(FILE *f, const char *attr, const double *v, int64_t n) {
    fprintf(f, " %s=\"", attr);
    for (int64_t i = 0; i < n; i++) {
        if (i) fputc(' ', f);
        put_num(f, v[i]);
    }
    fputc('"', f);
}

// a round tick step for a range of about 5 ticks
static double tick_step(double span) {
    if (!(span > 0)) return 1;
    double p = pow(10, floor(log10(span / 5))), r = span / 5 / p;
    return (r < 1.5 ? 1 : r < 3.5 ? 2 : r < 7.5 ? 5 : 10) * p;
}

static double fy(const struct frame *fr, double v) {
    double t = fr->logy ? (v > 0 ? log10(v) : (double)NAN) : v;
    return MT + fr->ph * (1 - (t - fr->y0) / (fr->y1 - fr->y0));
}
static double fx(const struct frame *fr, int64_t i, int64_t n) {
    if (fr->cat) return ML + fr->pw * ((double)i + 0.5) / (double)n;
    return ML + (n > 1 ? fr->pw * (double)i / (double)(n - 1) : fr->pw / 2);
}

static void open_plot(FILE *f, const struct svg_chart *c, const char *kind, struct frame *fr) {
    fr->w = c->width ? c->width : 720, fr->h = c->height ? c->height : 280;
    fr->pw = fr->w - ML - MR, fr->ph = fr->h - MT - MB;
    fprintf(f, "<figure class=\"plot\" id=\"%s\" data-kind=\"%s\"><figcaption>", c->id, kind);
    html_escape(f, c->title);
    fprintf(f,
            "</figcaption>\n<svg width=\"%g\" height=\"%g\" viewBox=\"0 0 %g %g\" role=\"img\">\n",
            fr->w, fr->h, fr->w, fr->h);
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%g\" height=\"%g\" class=\"area\"/>\n", ML, MT,
            fr->pw, fr->ph);
}

static void close_plot(FILE *f, const struct svg_chart *c, const struct frame *fr) {
    fprintf(f, "<text class=\"axis\" x=\"%g\" y=\"%g\" text-anchor=\"middle\">", ML + fr->pw / 2,
            fr->h - 6);
    html_escape(f, c->xlabel);
    fprintf(f,
            "</text><text class=\"axis\" transform=\"translate(14,%g) rotate(-90)\" "
            "text-anchor=\"middle\">",
            MT + fr->ph / 2);
    html_escape(f, c->ylabel);
    fputs("</text>\n</svg></figure>\n", f);
}

// y ticks and grid lines over [y0, y1]
static void y_tick(FILE *f, const struct frame *fr, double t, double label) {
    double y = MT + fr->ph * (1 - (t - fr->y0) / (fr->y1 - fr->y0));
    fprintf(f, "<line class=\"grid\" x1=\"%d\" x2=\"%g\" y1=\"%.2f\" y2=\"%.2f\"/>", ML,
            ML + fr->pw, y, y);
    fprintf(f, "<text class=\"tick\" x=\"%d\" y=\"%.2f\" text-anchor=\"end\">%.4g</text>\n", ML - 4,
            y + 4, label);
}

// y ticks and grid lines over [y0, y1]; on a log axis of less than two decades, round values
static void y_axis(FILE *f, const struct frame *fr) {
    if (fr->logy && fr->y1 - fr->y0 < 2) {
        double lo = pow(10, fr->y0), hi = pow(10, fr->y1), st = tick_step(hi - lo);
        for (double v = ceil(lo / st) * st; v <= hi; v += st)
            if (v > 0) y_tick(f, fr, log10(v), v);
        return;
    }
    double st = tick_step(fr->y1 - fr->y0);
    if (fr->logy) st = st < 1 ? 1 : round(st);
    for (double t = ceil(fr->y0 / st) * st; t <= fr->y1 + st * 1e-9; t += st)
        y_tick(f, fr, t, fr->logy ? pow(10, t) : fabs(t) < st * 1e-9 ? 0.0 : t);
}

// x ticks of n points: names (at most about 16 shown) or numbers
static void x_axis(FILE *f, const struct frame *fr, const struct svg_chart *c, int64_t n) {
    int64_t every = n > 16 ? (n + 15) / 16 : 1;
    if (!c->xnames && n > 1) every = (int64_t)tick_step((double)(n - 1)), every += !every;
    for (int64_t i = 0; i < n; i += every) {
        double x = fx(fr, i, n), y = MT + fr->ph + 14;
        if (c->xnames && n <= 8) {
            fprintf(f, "<text class=\"tick\" x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\">", x, y);
            html_escape(f, c->xnames[i]);
        } else if (c->xnames) {
            fprintf(f,
                    "<text class=\"tick\" x=\"%.2f\" y=\"%.2f\" text-anchor=\"end\" "
                    "transform=\"rotate(-25 %.2f %.2f)\">",
                    x, y, x, y);
            html_escape(f, c->xnames[i]);
        } else {
            fprintf(f, "<text class=\"tick\" x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\">%lld", x,
                    y, (long long)(i * (c->xunit > 0 ? c->xunit : 1)));
        }
        fputs("</text>\n", f);
    }
}

static void range_of(const double *v, int64_t n, bool logy, double *lo, double *hi) {
    for (int64_t i = 0; i < n; i++) {
        double t = logy ? (v[i] > 0 ? log10(v[i]) : (double)NAN) : v[i];
        if (!isfinite(t)) continue;
        *lo = t < *lo ? t : *lo, *hi = t > *hi ? t : *hi;
    }
}

static void settle_range(struct frame *fr, double lo, double hi) {
    if (!(lo <= hi)) lo = 0, hi = 1;
    double pad = hi > lo ? (hi - lo) * 0.05 : (fabs(hi) > 0 ? fabs(hi) * 0.1 : 1);
    fr->y0 = lo - pad, fr->y1 = hi + pad;
}

// a path through the finite points, a gap at each NaN
static void put_path(FILE *f, const struct frame *fr, const double *y, int64_t n, bool close_back,
                     const double *back) {
    bool pen = false;
    fputs(" d=\"", f);
    for (int64_t i = 0; i < n; i++) {
        double v = fy(fr, y[i]);
        if (!isfinite(v)) {
            pen = false;
            continue;
        }
        fprintf(f, "%c%.2f %.2f ", pen ? 'L' : 'M', fx(fr, i, n), v);
        pen = true;
    }
    for (int64_t i = n - 1; close_back && i >= 0; i--) {
        double v = fy(fr, back[i]);
        if (isfinite(v)) fprintf(f, "L%.2f %.2f ", fx(fr, i, n), v);
    }
    fputs(close_back ? "Z\"" : "\"", f);
}

static void legend(FILE *f, const struct frame *fr, int i, const char *label, const char *color) {
    double x = ML + 8 + (i % 4) * (fr->pw / 4), y = MT - 8 - 0 * i;
    if (i >= 4) return; // more series than fit: the colours run early (dark) to late (light)
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"10\" height=\"10\" fill=\"%s\"/>", x, y - 9,
            color);
    fprintf(f, "<text class=\"legend\" x=\"%.1f\" y=\"%.1f\">", x + 14, y);
    html_escape(f, label);
    fputs("</text>\n", f);
}

void svg_lines(FILE *f, const struct svg_chart *c, int64_t n, const struct svg_series *s, int ns,
               const struct svg_band *b, int nb) {
    struct frame fr = {.logy = c->logy, .cat = c->xnames != NULL};
    double lo = INFINITY, hi = -INFINITY;
    for (int k = 0; k < ns; k++)
        range_of(s[k].y, n, c->logy, &lo, &hi);
    for (int k = 0; k < nb; k++)
        range_of(b[k].lo, n, c->logy, &lo, &hi), range_of(b[k].hi, n, c->logy, &lo, &hi);
    open_plot(f, c, "lines", &fr);
    settle_range(&fr, lo, hi);
    y_axis(f, &fr);
    x_axis(f, &fr, c, n);
    for (int k = 0; k < nb; k++) {
        fprintf(f, "<path class=\"band\" fill=\"%s\" data-label=\"", b[k].color);
        html_escape(f, b[k].label);
        fputc('"', f);
        put_values(f, "data-lo", b[k].lo, n), put_values(f, "data-hi", b[k].hi, n);
        put_path(f, &fr, b[k].hi, n, true, b[k].lo);
        fputs("/>\n", f);
    }
    for (int k = 0; k < ns; k++) {
        fprintf(f, "<path class=\"series\" stroke=\"%s\"%s data-label=\"", s[k].color,
                s[k].dashed ? " stroke-dasharray=\"5 3\"" : "");
        html_escape(f, s[k].label);
        fputc('"', f);
        put_values(f, "data-y", s[k].y, n);
        put_path(f, &fr, s[k].y, n, false, NULL);
        fputs("/>\n", f);
        for (int64_t i = 0; n <= 64 && i < n; i++) { // points to hover
            double y = fy(&fr, s[k].y[i]);
            if (!isfinite(y)) continue;
            fprintf(f, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"2.5\" fill=\"%s\"><title>",
                    fx(&fr, i, n), y, s[k].color);
            if (c->xnames) html_escape(f, c->xnames[i]);
            if (!c->xnames) fprintf(f, "%lld", (long long)i);
            fputs(": ", f);
            put_num(f, s[k].y[i]);
            fputs("</title></circle>", f);
        }
    }
    for (int k = 0; k < ns + nb; k++)
        legend(f, &fr, k, k < ns ? s[k].label : b[k - ns].label,
               k < ns ? s[k].color : b[k - ns].color);
    close_plot(f, c, &fr);
}

void svg_bars(FILE *f, const struct svg_chart *c, int64_t n, const double *y) {
    struct frame fr = {0};
    double lo = 0, hi = 0;
    range_of(y, n, false, &lo, &hi);
    open_plot(f, c, "bars", &fr);
    settle_range(&fr, lo, hi);
    fr.y0 = lo >= 0 ? 0 : fr.y0;
    y_axis(f, &fr);
    fputs("<g class=\"bars\"", f);
    put_values(f, "data-y", y, n);
    fputs(">\n", f);
    double bw = n ? fr.pw / (double)n : 0;
    for (int64_t i = 0; i < n; i++) {
        double y0 = fy(&fr, 0), y1 = fy(&fr, isfinite(y[i]) ? y[i] : 0);
        fprintf(f, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\"><title>",
                ML + i * bw + bw * 0.1, y1 < y0 ? y1 : y0, bw * 0.8, fabs(y0 - y1));
        if (c->xnames) html_escape(f, c->xnames[i]), fputs(": ", f);
        put_num(f, y[i]);
        fputs("</title></rect>\n", f);
        double x = ML + (i + 0.5) * bw, ty = MT + fr.ph + 14;
        if (!c->xnames || (n > 16 && i % ((n + 15) / 16))) continue;
        if (n <= 6) // few bars: their names fit level
            fprintf(f, "<text class=\"tick\" x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\">", x, ty);
        else
            fprintf(f,
                    "<text class=\"tick\" x=\"%.2f\" y=\"%.2f\" text-anchor=\"end\" "
                    "transform=\"rotate(-25 %.2f %.2f)\">",
                    x, ty, x, ty);
        html_escape(f, c->xnames[i]);
        fputs("</text>\n", f);
    }
    fputs("</g>\n", f);
    close_plot(f, c, &fr);
}

void svg_hist(FILE *f, const struct svg_chart *c, const int64_t *counts, int nb, double lo,
              double hi) {
    struct frame fr = {0};
    double top = 0;
    for (int i = 0; i < nb; i++)
        top = (double)counts[i] > top ? (double)counts[i] : top;
    open_plot(f, c, "hist", &fr);
    fr.y0 = 0, fr.y1 = top > 0 ? top * 1.05 : 1;
    y_axis(f, &fr);
    fprintf(f, "<g class=\"bars\" data-lo=\"%.9g\" data-hi=\"%.9g\" data-y=\"", lo, hi);
    for (int i = 0; i < nb; i++)
        fprintf(f, "%s%lld", i ? " " : "", (long long)counts[i]);
    fputs("\">\n", f);
    double bw = fr.pw / nb;
    for (int i = 0; i < nb; i++) {
        double y1 = fy(&fr, (double)counts[i]);
        fprintf(f,
                "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\"><title>[%.4g, %.4g): "
                "%lld</title></rect>\n",
                ML + i * bw, y1, bw, MT + fr.ph - y1, lo + (hi - lo) * i / nb,
                lo + (hi - lo) * (i + 1) / nb, (long long)counts[i]);
    }
    fputs("</g>\n", f);
    for (int i = 0; i <= 4; i++)
        fprintf(f,
                "<text class=\"tick\" x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\">%.3g</text>\n",
                ML + fr.pw * i / 4, MT + fr.ph + 14, lo + (hi - lo) * i / 4);
    close_plot(f, c, &fr);
}

void svg_heatmap(FILE *f, const struct svg_chart *c, const double *v, int64_t rows, int64_t cols,
                 const char *const *row_names) {
    struct frame fr = {0};
    double top = 0;
    for (int64_t i = 0; i < rows * cols; i++)
        top = isfinite(v[i]) && v[i] > top ? v[i] : top;
    open_plot(f, c, "heatmap", &fr);
    fprintf(f, "<g class=\"heatmap\" data-rows=\"%lld\" data-cols=\"%lld\" data-max=\"%.9g\"",
            (long long)rows, (long long)cols, top);
    put_values(f, "data-v", v, rows * cols);
    fputs(">\n", f);
    double cw = fr.pw / (double)cols, ch = fr.ph / (double)rows;
    char col[8];
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t k = 0; k < cols; k++) {
            viridis(top > 0 ? v[r * cols + k] / top : 0, col);
            fprintf(f,
                    "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"%s\">"
                    "<title>%lld, %lld: ",
                    ML + k * cw, MT + r * ch, cw + 0.3, ch + 0.3, col, (long long)r, (long long)k);
            put_num(f, v[r * cols + k]);
            fputs("</title></rect>", f);
        }
        fputc('\n', f);
        if (!row_names || (rows > 24 && r % ((rows + 23) / 24))) continue;
        fprintf(f, "<text class=\"tick\" x=\"%d\" y=\"%.2f\" text-anchor=\"end\">", ML - 4,
                MT + (r + 0.5) * ch + 4);
        html_escape(f, row_names[r]);
        fputs("</text>\n", f);
    }
    fputs("</g>\n", f);
    int64_t every = cols <= 16 ? 1 : (int64_t)tick_step((double)cols); // column ticks, centred
    int64_t unit = c->xunit > 0 ? c->xunit : 1;
    for (int64_t k = 0; k < cols; k += every ? every : 1)
        fprintf(f,
                "<text class=\"tick\" x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\">%lld</text>\n",
                ML + (k + 0.5) * cw, MT + fr.ph + 14, (long long)(k * unit));
    close_plot(f, c, &fr);
}
