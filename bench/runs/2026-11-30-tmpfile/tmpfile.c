/* tmpfile MODE DIR [THREADS [FILES [SIZE]]]: FILES files of SIZE bytes
   (default 1000 x 100000) made in DIR by THREADS threads (8): mode 0
   create a part, write, rename; 1 O_TMPFILE, write, linkat; 2 create
   the final name, write. Run tmpfile-1: `tmpfile 0|1 DIR 8`; run
   tmpfile-1c's window: `tmpfile 2 DIR 1 10000 1`. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <time.h>
static int mode, nthreads = 8, nfiles = 1000, size = 100000, next = 0;
static char dir[256]; static char buf[100000];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static void *work(void *a) {
  for (;;) {
    pthread_mutex_lock(&mu); int i = next++; pthread_mutex_unlock(&mu);
    if (i >= nfiles) return 0;
    char fin[512], part[512];
    snprintf(fin, sizeof fin, "%s/f%04d.bin", dir, i);
    snprintf(part, sizeof part, "%s/.f%04d.bin.ferry-part", dir, i);
    if (mode == 0) {
      int fd = open(part, O_WRONLY|O_CREAT|O_TRUNC|O_CLOEXEC, 0644);
      if (fd < 0) { perror("open"); exit(1); }
      write(fd, buf, size); close(fd);
      if (rename(part, fin)) { perror("rename"); exit(1); }
    } else if (mode == 1) {
      int fd = open(dir, O_WRONLY|O_TMPFILE|O_CLOEXEC, 0644);
      if (fd < 0) { perror("open tmp"); exit(1); }
      write(fd, buf, size);
      char p[64]; snprintf(p, sizeof p, "/proc/self/fd/%d", fd);
      if (linkat(AT_FDCWD, p, AT_FDCWD, fin, AT_SYMLINK_FOLLOW)) { perror("linkat"); exit(1); }
      close(fd);
    } else {
      int fd = open(fin, O_WRONLY|O_CREAT|O_TRUNC|O_CLOEXEC, 0644);
      write(fd, buf, size); close(fd);
    }
  }
}
int main(int c, char **v) {
  mode = atoi(v[1]); snprintf(dir, sizeof dir, "%s", v[2]); if (c > 3) nthreads = atoi(v[3]);
  if (c > 4) nfiles = atoi(v[4]);
  if (c > 5 && atoi(v[5]) <= (int)sizeof buf) size = atoi(v[5]);
  memset(buf, 7, sizeof buf); mkdir(dir, 0755);
  struct timespec t0, t1; clock_gettime(CLOCK_MONOTONIC, &t0);
  pthread_t t[64]; for (int i = 0; i < nthreads; i++) pthread_create(&t[i], 0, work, 0);
  for (int i = 0; i < nthreads; i++) pthread_join(t[i], 0);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  printf("mode %d: %.3f s\n", mode, (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9);
}
