/*
 * credentials.c: libferry's credentials callback answering an SSH
 * password prompt, as an application with its own login dialog would.
 * bindings/python/tests/test_capi.py runs it against an sshd with password
 * authentication (scripts/test.sh builds it next to seedsets.c).
 *
 *   cc credentials.c $(pkg-config --cflags --libs ferry) -o credentials
 *   FERRY_TEST_PASSWORD=secret ./credentials [-O name=value]... SRC DST
 *
 * The password comes from $FERRY_TEST_PASSWORD (never argv, which other
 * users can read in /proc); unset, the callback declines. It prints one
 * line per question the callback was asked ("asked password user@host")
 * and ends with "result N" (a ferry_code) and the error message, if any.
 * Exit status: 0 when the copy succeeded, 1 otherwise.
 */
#include <ferry.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct answers {
    const char *password;
    int asked;
};

/* Called on one of libferry's threads; never twice at once for a handle. */
static int on_credentials(void *userdata, ferry_ask kind, const char *subject, char *answer,
                          size_t answer_len)
{
    struct answers *a = userdata;
    a->asked++;
    switch (kind) {
    case FERRY_ASK_PASSWORD:
        printf("asked password %s\n", subject);
        fflush(stdout);
        if (a->password == NULL || strlen(a->password) + 1 > answer_len)
            return 0;
        memcpy(answer, a->password, strlen(a->password) + 1);
        return 1;
    case FERRY_ASK_PASSPHRASE:
        printf("asked passphrase %s\n", subject);
        return 0;
    case FERRY_ASK_HOST_KEY:
        printf("asked host key\n");
        return 0; /* never trust an unknown key here */
    case FERRY_ASK_NOTICE:
        printf("notice %s\n", subject);
        return 0;
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct answers a = {getenv("FERRY_TEST_PASSWORD"), 0};
    ferry_transfer *t = ferry_transfer_new();
    int i, rc = FERRY_CODE_ERR_USAGE;
    if (t == NULL)
        return 1;
    for (i = 1; i + 1 < argc && !strcmp(argv[i], "-O"); i += 2) {
        char name[128];
        const char *eq = strchr(argv[i + 1], '=');
        if (eq == NULL || (size_t)(eq - argv[i + 1]) >= sizeof name)
            goto usage;
        memcpy(name, argv[i + 1], (size_t)(eq - argv[i + 1]));
        name[eq - argv[i + 1]] = '\0';
        if ((rc = ferry_transfer_setopt(t, name, eq + 1)) != FERRY_CODE_OK)
            goto done;
    }
    if (argc - i != 2)
        goto usage;
    if ((rc = ferry_transfer_add_source(t, argv[i])) != FERRY_CODE_OK ||
        (rc = ferry_transfer_set_dest(t, argv[i + 1])) != FERRY_CODE_OK ||
        (rc = ferry_transfer_set_credentials(t, on_credentials, &a)) != FERRY_CODE_OK)
        goto done;
    rc = ferry_transfer_run(t);
    goto done;
usage:
    fprintf(stderr, "usage: credentials [-O name=value]... SRC DST\n");
done:
    printf("result %d %s\n", rc, rc == FERRY_CODE_OK ? "" : ferry_strerror(rc));
    if (rc != FERRY_CODE_OK && ferry_transfer_errmsg(t) != NULL)
        printf("error %s\n", ferry_transfer_errmsg(t));
    ferry_transfer_free(t);
    return rc == FERRY_CODE_OK ? 0 : 1;
}
