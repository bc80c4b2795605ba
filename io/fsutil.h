// fsutil.h - durability on a local or shared file system: a file's bytes (or a folder's entries)
// reach the disk, and a file is replaced whole through a temporary (write TMP, fsync, rename,
// fsync the folder), so a crash leaves either the old file or the new one.
#ifndef AH_FSUTIL_H
#define AH_FSUTIL_H

// fsyncs path, a file or a folder. Returns 0, or -1 with errno set (open or fsync failed).
int fs_sync_path(const char *path);

// Replaces path by tmp: fsyncs tmp, renames it over path, fsyncs path's folder (so the rename
// itself is durable). Returns 0, or -1 with errno set by the step that failed (tmp then may
// still exist: the caller removes it if it wants).
int fs_replace(const char *tmp, const char *path);

#endif
