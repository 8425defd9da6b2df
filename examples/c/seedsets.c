/*
 * seedsets: what the application in ferry's founding report did, through
 * libferry: upload four data sets to an SFTP server and download them
 * back, verifying every file, with one progress callback.
 *
 * The sets, scaled from the report's: 1 x 256 MiB, 10 x 12 MB,
 * 100 x 1 MB, 1000 x 20 kB. `-s PERCENT` scales every file size (CI runs
 * `-s 5`); the counts stay.
 *
 *   cc seedsets.c $(pkg-config --cflags --libs ferry) -o seedsets
 *   ./seedsets [-s PERCENT] [-O name=value]... LOCALDIR sftp://user@host:port/dir/
 *
 * LOCALDIR gets up/ (the generated sets) and down/ (what came back); the
 * remote directory must exist. -O sets a libferry option by name (as
 * ferry cp's flags: identity=KEY, option=StrictHostKeyChecking=yes, ...).
 * Prints one line per set and direction: seconds and MB/s. Exit 0 only
 * when every file came back identical.
 *
 *   ./seedsets [-O name=value]... -c SRC DST
 *
 * copies once, recursively (bench/bindings-bench.py times libferry so).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <ferry.h>

struct set {
    const char *name;
    int count;
    uint64_t size;
};

static const struct set SETS[] = {
    {"set1", 1, 256ull << 20},
    {"set2", 10, 12000000},
    {"set3", 100, 1000000},
    {"set4", 1000, 20000},
};

/* Deterministic contents that differ per file: xorshift64 from a seed. */
static void fill(unsigned char *buf, uint64_t len, uint64_t seed) {
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (uint64_t i = 0; i < len; i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        for (int k = 0; k < 8 && i + k < len; k++)
            buf[i + k] = (unsigned char)(x >> (8 * k));
    }
}

static int mkdirs(const char *path) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p == '/') {
            *p = 0;
            if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
                return -1;
            *p = '/';
        }
    }
    return (mkdir(tmp, 0755) != 0 && errno != EEXIST) ? -1 : 0;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The one progress callback: a line at most every second. */
struct progress_state {
    const char *what;
    double last;
};

static int on_progress(void *userdata, const ferry_progress *p) {
    struct progress_state *st = userdata;
    double t = now();
    if (t - st->last >= 1.0) {
        fprintf(stderr, "  %s: %llu/%llu bytes, %llu/%llu files\n", st->what,
                (unsigned long long)p->bytes_done, (unsigned long long)p->bytes_total,
                (unsigned long long)p->files_done, (unsigned long long)p->files_total);
        st->last = t;
    }
    return 0; /* non-zero would abort the transfer */
}

static int nopts;
static char *opts[64];

/* One copy: libferry handle, options, callback, run, report. */
static int copy(const char *src, const char *dst, const char *what) {
    ferry_transfer *t = ferry_transfer_new();
    struct progress_state st = {what, now()};
    int rc = FERRY_CODE_OK;
    if (!t)
        return FERRY_CODE_ERR_INTERNAL;
    if ((rc = ferry_transfer_add_source(t, src)) != FERRY_CODE_OK ||
        (rc = ferry_transfer_set_dest(t, dst)) != FERRY_CODE_OK ||
        (rc = ferry_transfer_setopt(t, "recursive", "true")) != FERRY_CODE_OK)
        goto out;
    for (int i = 0; i < nopts; i++) {
        char *eq = strchr(opts[i], '=');
        if (!eq) {
            fprintf(stderr, "seedsets: -O %s: want name=value\n", opts[i]);
            rc = FERRY_CODE_ERR_USAGE;
            goto out;
        }
        *eq = 0;
        rc = ferry_transfer_setopt(t, opts[i], eq + 1);
        *eq = '=';
        if (rc != FERRY_CODE_OK)
            goto out;
    }
    ferry_transfer_set_progress(t, on_progress, &st);
    rc = ferry_transfer_run(t);
out:
    if (rc != FERRY_CODE_OK) {
        const char *msg = ferry_transfer_errmsg(t);
        fprintf(stderr, "seedsets: %s: %s (%s)\n", what, msg ? msg : "", ferry_strerror(rc));
    }
    ferry_transfer_free(t);
    return rc;
}

static int verify(const char *dir, const struct set *s, uint64_t size, unsigned char *want,
                  unsigned char *got) {
    for (int i = 0; i < s->count; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s/f%04d", dir, s->name, i);
        FILE *f = fopen(path, "rb");
        if (!f) {
            fprintf(stderr, "seedsets: %s: %s\n", path, strerror(errno));
            return -1;
        }
        size_t n = fread(got, 1, size + 1, f);
        fclose(f);
        fill(want, size, (uint64_t)(s - SETS) * 100000 + i);
        if (n != size || memcmp(want, got, size) != 0) {
            fprintf(stderr, "seedsets: %s differs from what was sent (%zu bytes, want %llu)\n",
                    path, n, (unsigned long long)size);
            return -1;
        }
    }
    return 0;
}

int main(int argc, char **argv) {
    int percent = 100;
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (!strcmp(argv[i], "-s") && i + 1 < argc)
            percent = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-O") && i + 1 < argc && nopts < 64)
            opts[nopts++] = argv[++i];
        else
            break;
    }
    if (argc - i == 3 && !strcmp(argv[i], "-c")) {
        double t0 = now();
        int rc = copy(argv[i + 1], argv[i + 2], "copy");
        printf("%.6f\n", now() - t0);
        return rc == FERRY_CODE_OK ? 0 : 1;
    }
    if (argc - i != 2 || percent < 1 || percent > 100) {
        fprintf(stderr, "usage: seedsets [-s PERCENT] [-O name=value]... LOCALDIR sftp://host/dir/\n");
        return 2;
    }
    const char *local = argv[i], *remote = argv[i + 1];
    size_t rlen = strlen(remote);
    const char *slash = (rlen && remote[rlen - 1] == '/') ? "" : "/";
    char up[1024], down[1024];
    if (strlen(local) > 1000) {
        fprintf(stderr, "seedsets: LOCALDIR is too long\n");
        return 2;
    }
    snprintf(up, sizeof up, "%s/up", local);
    snprintf(down, sizeof down, "%s/down", local);
    if (mkdirs(up) || mkdirs(down)) {
        fprintf(stderr, "seedsets: cannot create %s: %s\n", local, strerror(errno));
        return 1;
    }
    printf("libferry %s, sizes at %d%%\n", ferry_version(), percent);
    printf("%-6s %6s %12s %6s %9s %9s %9s %9s\n", "set", "files", "bytes/file", "", "up s",
           "up MB/s", "down s", "down MB/s");
    int failed = 0;
    for (size_t k = 0; k < sizeof SETS / sizeof SETS[0]; k++) {
        const struct set *s = &SETS[k];
        uint64_t size = s->size * (uint64_t)percent / 100;
        unsigned char *want = malloc(size + 1), *got = malloc(size + 1);
        char dir[2048], src[4096], dst[2048], what[64];
        if (!want || !got) {
            fprintf(stderr, "seedsets: out of memory\n");
            return 1;
        }
        snprintf(dir, sizeof dir, "%s/%s", up, s->name);
        mkdirs(dir);
        for (int n = 0; n < s->count; n++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/f%04d", dir, n);
            fill(want, size, (uint64_t)k * 100000 + n);
            FILE *f = fopen(path, "wb");
            if (!f || fwrite(want, 1, size, f) != size || fclose(f) != 0) {
                fprintf(stderr, "seedsets: writing %s failed\n", path);
                return 1;
            }
        }
        double total = (double)size * s->count;
        snprintf(what, sizeof what, "%s up", s->name);
        double t0 = now();
        int rc = copy(dir, remote, what);
        double t_up = now() - t0;
        snprintf(src, sizeof src, "%s%s%s", remote, slash, s->name);
        snprintf(dst, sizeof dst, "%s/", down);
        snprintf(what, sizeof what, "%s down", s->name);
        double t_down = 0;
        if (rc == FERRY_CODE_OK) {
            t0 = now();
            rc = copy(src, dst, what);
            t_down = now() - t0;
        }
        if (rc == FERRY_CODE_OK && verify(down, s, size, want, got) != 0)
            rc = -1;
        printf("%-6s %6d %12llu %6s %9.3f %9.1f %9.3f %9.1f%s\n", s->name, s->count,
               (unsigned long long)size, "", t_up, total / t_up / 1e6, t_down,
               t_down > 0 ? total / t_down / 1e6 : 0.0, rc == FERRY_CODE_OK ? "" : "  FAILED");
        failed |= rc != FERRY_CODE_OK;
        free(want);
        free(got);
    }
    printf(failed ? "seedsets: FAILED\n" : "seedsets: all files verified\n");
    return failed ? 1 : 0;
}
