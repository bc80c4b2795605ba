// htmlreport.h - the page of `harvest report`: one self-contained HTML file (inline CSS and SVG,
// no script, no URL) showing what io/h5report.h read of an output. docs/report.md lists its plots
// and the job key each needs; a part the output lacks is one line in the page's notes instead.
#ifndef AH_HTMLREPORT_H
#define AH_HTMLREPORT_H

#include <stdio.h>

struct ah_error;
struct rpt_data;

// Writes the page for d to f. Returns 0, or -AH_EIO naming `name` (the file f writes) when f
// reports an error.
int html_report_write(FILE *f, const struct rpt_data *d, const char *name, struct ah_error *err);

#endif
