/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mcd.h - real memcached servers for the tests and the benchmark: started
 * from the Debian package's binary on free loopback ports, killed with the
 * process that started them (PR_SET_PDEATHSIG), so a failing test leaves
 * none behind.
 */
#ifndef HC_TESTS_MCD_H
#define HC_TESTS_MCD_H

#include <stddef.h>
#include <sys/types.h>

#define HCT_MCD_MAX 8

struct hct_mcd {
	unsigned n;
	pid_t pid[HCT_MCD_MAX]; /* 0: not running */
	int port[HCT_MCD_MAX];
	char args[256];      /* extra arguments, split on spaces (e.g. "-I 64k -m 8") */
	char sasl_conf[256]; /* SASL_CONF_PATH for the servers (memcached -S), or "" */
};

/*
 * Start n servers (n <= HCT_MCD_MAX) with extra arguments (NULL: none), each
 * listening on 127.0.0.1 only and answering before this returns.  0, or -1
 * with the reason in err (a server that would not start, or the binary
 * missing).
 */
int hct_mcd_start(struct hct_mcd *m, unsigned n, const char *args, char *err, size_t errlen);
/* The same for SASL servers (memcached -S) whose users are in a sasldb that
 * this makes in dir (which must exist): user with password. */
int hct_mcd_start_sasl(struct hct_mcd *m, const char *dir, const char *user, const char *password, char *err,
		       size_t errlen);
/* Start server i again on its port (after hct_mcd_kill): 0 or -1. */
int hct_mcd_restart(struct hct_mcd *m, unsigned i, char *err, size_t errlen);
/* Send sig to server i and reap it (SIGKILL: the server dies at once). */
void hct_mcd_kill(struct hct_mcd *m, unsigned i, int sig);
/* Stop every server still running. */
void hct_mcd_stop(struct hct_mcd *m);
/* "127.0.0.1:P1;127.0.0.1:P2;..." for servers=. */
void hct_mcd_servers(const struct hct_mcd *m, char *buf, size_t len);

#endif
