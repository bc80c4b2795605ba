// cliargs.h - the values of every subcommand's flags, parsed one way: the whole value, finite and
// in range, or exit 1 naming the flag.
//
// Each parser takes the command ("export"), the flag ("--memory") and its value (NULL: the flag
// ended the command line), and returns 0 with *out set, or -1 after printing
// `harvest CMD: FLAG VALUE: expected ...` (or `FLAG needs a value`) on stderr; *out is then
// unchanged. Values are read in full: no empty value, leading space, trailing junk, NaN or inf.
#ifndef AH_CLIARGS_H
#define AH_CLIARGS_H

#include <stdint.h>

// A decimal integer in [lo, hi].
int cli_int(const char *cmd, const char *flag, const char *v, int64_t lo, int64_t hi, int64_t *out);
// The same into an int (lo and hi within int's range).
int cli_int32(const char *cmd, const char *flag, const char *v, int lo, int hi, int *out);
// Bytes: a decimal number with an optional K, M, G or T (powers of 1024), "512M", "1.5G";
// rounded down to whole bytes, then in [lo, hi].
int cli_size(const char *cmd, const char *flag, const char *v, int64_t lo, int64_t hi,
             int64_t *out);
// A decimal fraction in [lo, hi) (hi itself excluded).
int cli_fraction(const char *cmd, const char *flag, const char *v, double lo, double hi,
                 double *out);
// The value of the flag at argv[*i] (and *i moved onto it), or NULL after printing that the flag
// needs one.
const char *cli_value(const char *cmd, int argc, char **argv, int *i);

#endif
