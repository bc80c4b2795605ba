// fsutil.c - see fsutil.h
#define _POSIX_C_SOURCE 200809L // defines: fsync
#include "io/fsutil.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int fs_sync_path(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return -1;
    int r = fsync(fd);
    close(fd);
    return r;
}

int fs_replace(const char *tmp, const char *path) {
    char dir[4200];
    const char *slash = strrchr(path, '/');
    // "a/b" -> "a/", "/b" -> "/", "b" -> "."
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) + 1 : 1, slash ? path : ".");
    if (fs_sync_path(tmp) != 0 || rename(tmp, path) != 0) return -1;
    return fs_sync_path(dir);
}
