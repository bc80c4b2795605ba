// tokenize.c - `harvest tokenize`: text in (JSON Lines, plain text a prompt per line or per file,
// gzip'd or not, globs), JSON Lines of token ids out; --decode turns ids back into text.
#define _POSIX_C_SOURCE 200809L // defines: glob
#include "harvest/harvest.h"

#include "io/outlock.h"
#include "io/textin.h"
#include "io/tokenizer.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

// a model folder's tokenizer must fit the model: its ids below config.json's vocabulary size
static int fits_model(const struct tokenizer *t, const char *path, struct ah_error *err) {
    char cfg[4200];
    struct stat st;
    snprintf(cfg, sizeof cfg, "%s/config.json", path);
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode) || stat(cfg, &st) != 0) return 0;
    struct model m;
    int rc = model_load(&m, path, false, NULL, err); // config.json only
    if (rc < 0) return rc;
    rc = tok_check_vocab(t, m.vocab, cfg, err);
    model_free(&m);
    return rc;
}

static int usage(void) {
    fprintf(stderr,
            "usage: harvest tokenize MODEL_DIR_OR_TOKENIZER_JSON FILE_OR_GLOB... [--field NAME] "
            "[--per-file] [--no-special] [--decode [--skip-special]] [-o OUT.jsonl] [--quiet]\n"
            "  FILE: .jsonl/.json (the \"text\" field, or --field), else plain text a prompt a "
            "line (--per-file: a prompt a file); .gz is read as gzip; - is standard input\n"
            "  --decode: FILE holds {\"input_ids\": [..]} lines; prints {\"text\": ..} lines\n");
    return 1;
}

struct tk {
    struct tokenizer *tok;
    FILE *out;
    bool special, decode, skip_special;
    struct tok_ids ids;
    int64_t prompts, bytes;
    struct ah_error err;
};

static int emit_ids(void *u, const char *text, size_t len, const char *where, long index) {
    struct tk *k = u;
    (void)index;
    k->ids.n = 0; // an empty record is a line too: `[]`, or the post-processor's special tokens
    int rc = tok_encode(k->tok, text, len, k->special, &k->ids);
    if (rc == -AH_EINVAL) return ah_fail(&k->err, AH_EINVAL, "%s: %s", where, tok_error(k->tok));
    if (rc == -AH_ENOMEM)
        return ah_fail(
            &k->err, AH_ENOMEM,
            "%s: cannot allocate memory to tokenize a text of %zu bytes (about %zu bytes "
            "needed)",
            where, len, 24 * len + 4096);
    if (rc < 0) return rc;
    fputs("{\"input_ids\": [", k->out);
    for (size_t i = 0; i < k->ids.n; i++) { // digits by hand: printf is a third of the time
        char d[24], *e = d + sizeof d, *q = e;
        uint64_t v = (uint64_t)k->ids.v[i]; // ids are >= 0
        do
            *--q = (char)('0' + v % 10);
        while (v /= 10);
        if (i) *--q = ' ', *--q = ',';
        fwrite(q, 1, (size_t)(e - q), k->out);
    }
    fputs("]}\n", k->out);
    k->prompts++;
    k->bytes += (int64_t)len;
    return 0;
}

// --decode: a JSON line with "input_ids" -> {"text": ...}
static int emit_text(void *u, const char *line, size_t len, const char *where, long index) {
    struct tk *k = u;
    (void)index;
    if (len == 0) { // an empty line stays a line
        fputs("{\"text\": \"\"}\n", k->out);
        k->prompts++;
        return 0;
    }
    cJSON *j = text_parse_json(line, len, where, &k->err);
    if (!j) return k->err.code;
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "input_ids"), *e;
    if (!cJSON_IsArray(a)) {
        cJSON_Delete(j);
        return ah_fail(&k->err, AH_EINVAL, "%s: expected {\"input_ids\": [...]}", where);
    }
    k->ids.n = 0;
    int rc = 0, i = 0;
    cJSON_ArrayForEach(e, a) {
        double d = e->valuedouble;
        if (!cJSON_IsNumber(e) || d != (double)(int64_t)d || d < 0) {
            rc = ah_fail(&k->err, AH_EINVAL, "%s: input_ids[%d]: expected a token id", where, i);
            break;
        }
        if ((rc = tok_ids_push(&k->ids, (int64_t)d)) < 0) break;
        i++;
    }
    cJSON_Delete(j);
    char *text = NULL;
    size_t tl = 0;
    if (rc == 0) rc = tok_decode(k->tok, k->ids.v, k->ids.n, k->skip_special, &text, &tl, &k->err);
    if (rc < 0) {
        snprintf(k->err.msg + strlen(k->err.msg), sizeof k->err.msg - strlen(k->err.msg), " (%s)",
                 where);
        return rc;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "text", text);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    free(text);
    if (!s) return -AH_ENOMEM;
    fprintf(k->out, "%s\n", s);
    free(s);
    k->prompts++;
    return 0;
}

// -o OUT is none of the files read: the tokenizer (the path, or the folder's tokenizer.json) and
// every input (a glob's matches): -AH_EINVAL naming both. Made before the output is opened (it
// would be emptied) and again after (a glob may match the new file).
static int check_output(const char *out, const char *tokpath, const char **inputs, int n_in,
                        struct ah_error *err) {
    char tokjson[4200];
    snprintf(tokjson, sizeof tokjson, "%s/tokenizer.json", tokpath);
    const char *fixed[2] = {tokpath, tokjson}, *hit = outlock_input_at(out, false, fixed, 2);
    for (int i = 0; !hit && i < n_in; i++) {
        glob_t g;
        if (glob(inputs[i], GLOB_NOCHECK, NULL, &g) != 0) continue;
        hit = outlock_input_at(out, false, (const char *const *)g.gl_pathv, (int)g.gl_pathc);
        hit = hit ? inputs[i] : NULL; // the pattern, which outlives g
        globfree(&g);
    }
    if (!hit) return 0;
    bool tok = hit == tokpath || hit == fixed[1], pattern = !tok && access(hit, F_OK) != 0;
    return ah_fail(err, AH_EINVAL,
                   "-o %s: the output is %s%s%s, one of the files tokenize reads; choose another "
                   "output file",
                   out, pattern ? "a match of the input pattern " : "", hit,
                   tok ? " (the tokenizer)" : "");
}

// k->out: stdout, or -o OUT (made here; removed again if it turns out to be an input)
static int open_output(struct tk *k, const char *out, const char *tokpath, const char **inputs,
                       int n_in) {
    k->out = stdout;
    if (!out) return 0;
    bool existed = access(out, F_OK) == 0;
    int rc = check_output(out, tokpath, inputs, n_in, &k->err);
    if (rc == 0 && !(k->out = fopen(out, "w")))
        return ah_fail(&k->err, AH_EIO, "%s: cannot write: %s", out, strerror(errno));
    if (rc == 0 && (rc = check_output(out, tokpath, inputs, n_in, &k->err)) < 0) {
        fclose(k->out), k->out = NULL;
        if (!existed) remove(out);
    }
    return rc;
}

int cmd_tokenize(int argc, char **argv) {
    const char *tokpath = NULL, *outpath = NULL, *field = "text";
    bool per_file = false, quiet = false;
    struct tk k = {.special = true};
    const char **inputs = calloc((size_t)argc + 1, sizeof *inputs);
    int n_in = 0;
    if (!inputs) return 2;
    for (int i = 0; i < argc; i++) {
        bool more = i + 1 < argc;
        if (!strcmp(argv[i], "--field") && more)
            field = argv[++i];
        else if (!strcmp(argv[i], "-o") && more)
            outpath = argv[++i];
        else if (!strcmp(argv[i], "--per-file"))
            per_file = true;
        else if (!strcmp(argv[i], "--no-special"))
            k.special = false;
        else if (!strcmp(argv[i], "--decode"))
            k.decode = true;
        else if (!strcmp(argv[i], "--skip-special"))
            k.skip_special = true;
        else if (!strcmp(argv[i], "--quiet"))
            quiet = true;
        else if (argv[i][0] == '-' && argv[i][1])
            return free(inputs), usage();
        else if (!tokpath)
            tokpath = argv[i];
        else
            inputs[n_in++] = argv[i];
    }
    if (!tokpath || n_in == 0) return free(inputs), usage();
    // a flag of the other direction is an error, not ignored
    const char *wrong = k.decode && strcmp(field, "text") ? "--field"
                        : k.decode && !k.special          ? "--no-special"
                        : !k.decode && k.skip_special     ? "--skip-special"
                                                          : NULL;
    if (wrong) {
        fprintf(stderr, "harvest tokenize: %s: not an option %s --decode\n", wrong,
                k.decode ? "with" : "without");
        free(inputs);
        return 1;
    }
    int rc = tok_load(&k.tok, tokpath, &k.err);
    if (rc == 0) rc = fits_model(k.tok, tokpath, &k.err);
    if (rc == 0) rc = open_output(&k, outpath, tokpath, inputs, n_in);
    double t0 = now_seconds();
    struct text_source src = {
        .field = k.decode ? NULL : field,
        .per_file = per_file,
        .raw_lines = k.decode,
    };
    for (int i = 0; rc == 0 && i < n_in; i++)
        rc = text_read(&src, inputs[i], k.decode ? emit_text : emit_ids, &k, &k.err);
    double dt = now_seconds() - t0;
    if (k.out && k.out != stdout && fclose(k.out) != 0 && rc == 0)
        rc = ah_fail(&k.err, AH_EIO, "%s: cannot write", outpath);
    if (rc == 0 && !quiet && !k.decode)
        fprintf(stderr, "harvest: tokenized %lld prompts, %.2f MB of text in %.2f s (%.1f MB/s)\n",
                (long long)k.prompts, (double)k.bytes / 1e6, dt,
                dt > 0 ? (double)k.bytes / 1e6 / dt : 0.0);
    tok_free(k.tok);
    tok_ids_free(&k.ids);
    free(inputs);
    return report(rc, &k.err);
}
