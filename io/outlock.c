// outlock.c - see outlock.h. The lock is an flock on a file beside the output: the kernel drops it
// when its holder dies (SIGKILL, node loss on a local disk), so a killed run never leaves a stale
// lock behind, and the file's text only says who holds it.
#define _GNU_SOURCE // defines: flock, realpath, gethostname
#include "io/outlock.h"
#include "io/output.h" // out_parts_path

#include "model/ah.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

// out + suffix, malloc'd (NULL when out of memory)
static char *with_suffix(const char *out, const char *suffix) {
    size_t n = strlen(out) + strlen(suffix) + 1;
    char *s = malloc(n);
    if (s) snprintf(s, n, "%s%s", out, suffix);
    return s;
}

// the input among inputs[n] that is the same file as path (exists), or NULL
static const char *same_file(const char *path, const char *const *inputs, int n) {
    struct stat o, i;
    if (stat(path, &o) != 0) return NULL;
    for (int k = 0; k < n; k++)
        if (inputs[k] && stat(inputs[k], &i) == 0 && i.st_dev == o.st_dev && i.st_ino == o.st_ino)
            return inputs[k];
    return NULL;
}

// the input among inputs[n] inside the folder dir (exists), or NULL
static const char *inside(const char *dir, const char *const *inputs, int n) {
    char *d = realpath(dir, NULL), *f = NULL;
    const char *hit = NULL;
    size_t l = d ? strlen(d) : 0;
    for (int k = 0; d && !hit && k < n; k++) {
        if (!inputs[k] || !(f = realpath(inputs[k], NULL))) continue;
        if (!strncmp(f, d, l) && (f[l] == '/' || (l == 1 && d[0] == '/'))) hit = inputs[k];
        free(f);
    }
    free(d);
    return hit;
}

const char *outlock_input_at(const char *path, bool folder, const char *const *inputs, int n) {
    const char *hit = same_file(path, inputs, n);
    return hit || !folder ? hit : inside(path, inputs, n);
}

int outlock_check_inputs(const char *out, const char *const *inputs, int n, struct ah_error *err) {
    char parts[PATH_MAX];
    out_parts_path(parts, sizeof parts, out, NULL);
    const char *const suffix[] = {"", ".tmp", ".tokens", ".lock", parts + strlen(out)};
    static const char *const what[] = {"output file", "temporary master", "token spill file",
                                       "lock file", "parts folder"};
    int rc = 0;
    for (int s = 0; rc == 0 && s < 5; s++) {
        char *p = with_suffix(out, suffix[s]);
        if (!p) return ah_fail(err, AH_ENOMEM, "%s: out of memory", out);
        const char *hit = outlock_input_at(p, s == 4, inputs, n);
        if (hit)
            rc = ah_fail(err, AH_EINVAL,
                         "%s: the %s of \"output.path\" %s %s, an input of this job; choose "
                         "another \"output.path\" (--overwrite would destroy the input)",
                         p, what[s], same_file(p, inputs, n) ? "is" : "holds", hit);
        free(p);
    }
    return rc;
}

void outlock_files_free(char **files, int n) {
    for (int i = 0; files && i < n; i++)
        free(files[i]);
    free(files);
}

// appends a malloc'd a + b to *files (capacity *cap); -1 when out of memory
static int push_path(char ***files, int *n, int *cap, const char *a, const char *b) {
    if (*n == *cap) {
        char **t = realloc(*files, (size_t)(*cap = *cap * 2 + 8) * sizeof *t);
        if (!t) return -1;
        *files = t;
    }
    return ((*files)[*n] = with_suffix(a, b)) ? (++*n, 0) : -1;
}

int outlock_output_files(const char *out, char ***files, int *n) {
    int cap = 0, rc = 0;
    *files = NULL, *n = 0;
    char parts[PATH_MAX], leaf[PATH_MAX];
    out_parts_path(parts, sizeof parts, out, NULL);
    DIR *d = opendir(parts);
    if (push_path(files, n, &cap, out, "") || push_path(files, n, &cap, out, ".tokens") ||
        push_path(files, n, &cap, parts, ""))
        rc = -AH_ENOMEM;
    for (struct dirent *e; rc == 0 && d && (e = readdir(d));) {
        out_parts_path(leaf, sizeof leaf, out, e->d_name);
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
            push_path(files, n, &cap, leaf, ""))
            rc = -AH_ENOMEM;
    }
    if (d) closedir(d);
    if (rc < 0) outlock_files_free(*files, *n), *files = NULL, *n = 0;
    return rc;
}

// the (device, inode) of each of inputs[n], stated once (ino 0: missing); NULL when out of memory
static struct stat *input_ids(const char *const *inputs, int n) {
    struct stat *ids = calloc((size_t)n + 1, sizeof *ids);
    for (int k = 0; ids && k < n; k++)
        if (!inputs[k] || stat(inputs[k], &ids[k]) != 0) ids[k].st_ino = 0;
    return ids;
}

int outlock_check_folder(const char *cmd, const char *dir, const char *const *patterns, int n_pat,
                         const char *const *inputs, int n, struct ah_error *err) {
    DIR *d = opendir(dir);
    struct stat *ids = d ? input_ids(inputs, n) : NULL, o;
    int rc = d && !ids ? ah_fail(err, AH_ENOMEM, "%s: out of memory", dir) : 0;
    for (struct dirent *e; rc == 0 && d && (e = readdir(d));) {
        bool written = false;
        for (int k = 0; k < n_pat; k++)
            written |= fnmatch(patterns[k], e->d_name, 0) == 0;
        char *p = written ? with_suffix(dir, "/") : NULL, *q = p ? with_suffix(p, e->d_name) : NULL;
        if (written && !q) rc = ah_fail(err, AH_ENOMEM, "%s: out of memory", dir);
        bool exists = q && stat(q, &o) == 0;
        for (int k = 0; exists && rc == 0 && k < n; k++)
            if (ids[k].st_ino && ids[k].st_dev == o.st_dev && ids[k].st_ino == o.st_ino)
                rc = ah_fail(err, AH_EINVAL,
                             "%s: %s would write this file, and it is %s, one of its inputs; "
                             "choose another output folder",
                             q, cmd, inputs[k]);
        free(p), free(q);
    }
    if (d) closedir(d);
    free(ids);
    return rc;
}

// "HOST PID" of the holder, read from the lock file (or "unknown")
static void holder(int fd, char *buf, size_t n) {
    ssize_t r = pread(fd, buf, n - 1, 0);
    buf[r > 0 ? r : 0] = 0;
    buf[strcspn(buf, "\n")] = 0;
    if (!buf[0]) snprintf(buf, n, "unknown");
}

int outlock_take(struct outlock *l, const char *out, struct ah_error *err) {
    l->fd = -1;
    if (!(l->path = with_suffix(out, ".lock")))
        return ah_fail(err, AH_ENOMEM, "%s: out of memory", out);
    for (;;) {
        int fd = open(l->path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
        if (fd < 0)
            return ah_fail(err, AH_EIO,
                           "%s: cannot create the output file (check that its folder exists "
                           "and is writable): its lock file %s: %s",
                           out, l->path, strerror(errno));
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            int e = errno;
            char who[256];
            holder(fd, who, sizeof who);
            close(fd);
            if (e == EWOULDBLOCK)
                return ah_fail(err, AH_EEXIST,
                               "%s: the output is in use by another harvest run (host and PID: "
                               "%s; lock file %s); wait for it to end",
                               out, who, l->path);
            return ah_fail(err, AH_EIO, "%s: cannot lock: %s", l->path, strerror(e));
        }
        // the holder before us may have removed the file between our open and our flock: then
        // the lock is on a name nobody else sees, and we try again
        struct stat a, b;
        if (fstat(fd, &a) == 0 && stat(l->path, &b) == 0 && a.st_dev == b.st_dev &&
            a.st_ino == b.st_ino) {
            l->fd = fd;
            break;
        }
        close(fd);
    }
    char host[128] = "?", text[200];
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = 0;
    int n = snprintf(text, sizeof text, "%s %ld\n", host, (long)getpid());
    if (ftruncate(l->fd, 0) != 0 || pwrite(l->fd, text, (size_t)n, 0) != n) {
        int e = errno;
        outlock_release(l);
        return ah_fail(err, AH_EIO, "%s: cannot write the lock file: %s", out, strerror(e));
    }
    return 0;
}

void outlock_release(struct outlock *l) {
    if (l->fd >= 0) {
        unlink(l->path); // while held: a waiting run then locks a fresh file (see above)
        close(l->fd);
        l->fd = -1;
    }
    free(l->path);
    l->path = NULL;
}
