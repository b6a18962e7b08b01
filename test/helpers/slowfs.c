/*
 * slowfs: a read-only FUSE view of one folder whose reads are paced to a given rate, for tests that need a
 * load to be honestly slow (a spinning disk, a USB stick, a NAS over Wi-Fi) without any sleep inside relay.
 * Usage: slowfs SOURCE_DIR BYTES_PER_SECOND MOUNTPOINT   (runs in the foreground; SIGTERM unmounts)
 * Single-threaded (-s), so the rate is the whole mount's, and no kernel_cache: every open reads through again.
 */
#define FUSE_USE_VERSION 31
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const char *source;
static double rate;

static void full(char *out, size_t n, const char *path) { snprintf(out, n, "%s%s", source, path); }

static int fs_getattr(const char *path, struct stat *st, struct fuse_file_info *fi) {
  (void)fi;
  char f[4096];
  full(f, sizeof f, path);
  return lstat(f, st) == 0 ? 0 : -errno;
}

static int fs_readdir(const char *path, void *buf, fuse_fill_dir_t fill, off_t off, struct fuse_file_info *fi, enum fuse_readdir_flags flags) {
  (void)off, (void)fi, (void)flags;
  char f[4096];
  full(f, sizeof f, path);
  DIR *d = opendir(f);
  if (!d) return -errno;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) fill(buf, e->d_name, NULL, 0, 0);
  closedir(d);
  return 0;
}

static int fs_open(const char *path, struct fuse_file_info *fi) {
  char f[4096];
  full(f, sizeof f, path);
  int fd = open(f, O_RDONLY);
  if (fd < 0) return -errno;
  fi->fh = (uint64_t)fd;
  return 0;
}

static int fs_read(const char *path, char *buf, size_t n, off_t off, struct fuse_file_info *fi) {
  (void)path;
  ssize_t r = pread((int)fi->fh, buf, n, off);
  if (r < 0) return -errno;
  if (rate > 0 && r > 0) {
    double s = (double)r / rate;
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
  }
  return (int)r;
}

static int fs_release(const char *path, struct fuse_file_info *fi) {
  (void)path;
  close((int)fi->fh);
  return 0;
}

static const struct fuse_operations ops = {.getattr = fs_getattr, .readdir = fs_readdir, .open = fs_open, .read = fs_read, .release = fs_release};

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: slowfs SOURCE_DIR BYTES_PER_SECOND MOUNTPOINT\n");
    return 2;
  }
  source = argv[1];
  rate = atof(argv[2]);
  char *args[] = {argv[0], "-f", "-s", "-o", "ro,default_permissions,fsname=slowfs", argv[3], NULL};
  return fuse_main(6, args, &ops, NULL);
}
