// htmlsvg.h - the plots of `harvest report` as inline SVG inside an HTML page (no script, no
// external file, no URL: the SVG elements carry no xmlns, which HTML does not need).
//
// Each plot is one <figure class="plot" id=ID data-kind=KIND> holding a <figcaption> and one
// <svg>. The numbers a plot draws are in it as text too, for readers and tests: every series is a
// <polyline class="series" data-label=.. data-y="v0 v1 ..."> (values "%.9g", "nan" for a gap), a
// bar chart's <g class="bars" data-y=..>, a heatmap's <g class="heatmap" data-rows data-cols
// data-v=..> (row-major). Hovering an element shows its value (an SVG <title>).
// The writers cannot fail; the caller checks ferror(f) once at the end.
#ifndef AH_HTMLSVG_H
#define AH_HTMLSVG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

struct svg_chart {
    const char *id, *title;      // the figure's id and caption
    const char *xlabel, *ylabel; // axis titles
    const char *const *xnames;   // (n) a name for each x (a categorical axis), or NULL: 0, 1, ...
    int width, height;           // of the plot, in CSS pixels (0: 720 x 280)
    bool logy;                   // log10 y axis (values <= 0 are gaps)
    int64_t xunit; // heatmap: what a column's index is multiplied by in its tick (0: 1)
};

struct svg_series {
    const char *label, *color; // color: a CSS colour, e.g. "#1f77b4"
    const double *y;           // (n) NaN: a gap
    bool dashed;
};

struct svg_band { // a shaded range between two curves (the 5-95 %, 25-75 % percentiles)
    const char *label, *color;
    const double *lo, *hi; // (n)
};

// Lines over x = 0 .. n-1 (xnames, if given, label them), with bands below them.
void svg_lines(FILE *f, const struct svg_chart *c, int64_t n, const struct svg_series *s, int ns,
               const struct svg_band *b, int nb);
// One bar a name, value y[i].
void svg_bars(FILE *f, const struct svg_chart *c, int64_t n, const double *y);
// A histogram of nb bins of equal width over [lo, hi).
void svg_hist(FILE *f, const struct svg_chart *c, const int64_t *counts, int nb, double lo,
              double hi);
// A heatmap of rows x cols values (row-major; rows top to bottom), the colour scale from 0 to the
// largest value; row_names (rows) may be NULL.
void svg_heatmap(FILE *f, const struct svg_chart *c, const double *v, int64_t rows, int64_t cols,
                 const char *const *row_names);

// s with &, <, >, " and ' escaped for HTML text and attributes.
void html_escape(FILE *f, const char *s);
// a colour of the sequence used for the i-th of n series ("#rrggbb" into buf of 8 bytes)
const char *svg_color(char *buf, int i, int n);

#endif
