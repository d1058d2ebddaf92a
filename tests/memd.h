/* SPDX-License-Identifier: Apache-2.0 */
/*
 * memd.h - real hicache-memd servers for the tests and the benchmark: the
 * binary just built (HCT_MEMD), each on an ephemeral loopback port that it
 * reports on stdout, killed with the process that started them
 * (PR_SET_PDEATHSIG), so a failing test leaves none behind.  The servers
 * inherit the environment: set UCX_TLS and the like before starting them.
 */
#ifndef HC_TESTS_MEMD_H
#define HC_TESTS_MEMD_H

#include <stddef.h>
#include <sys/types.h>

#define HCT_MEMD_MAX 8

struct hct_memd {
	unsigned n;
	pid_t pid[HCT_MEMD_MAX]; /* 0: not running */
	int port[HCT_MEMD_MAX];
	char args[256]; /* extra arguments, split on spaces (e.g. "--size 64M --lease-ms 500") */
	char log[256];  /* the file the servers' stderr is appended to, or "": this process's stderr */
	char host[64];  /* the address they listen on ("": 127.0.0.1) */
	char netns[64]; /* the network namespace they run in (ip netns), or "": this one */
};

/*
 * Start n servers (n <= HCT_MEMD_MAX) with extra arguments (NULL: none;
 * give at least --size), each with --listen 127.0.0.1:0 and listening
 * before this returns (10 s at most).  0, or -1 with the reason in err (a
 * server that exited or never said it listens, or the binary missing).
 */
int hct_memd_start(struct hct_memd *m, unsigned n, const char *args, char *err, size_t errlen);
/* The same, with the servers' stderr appended to the file log (for tests
 * that read what a server logged). */
int hct_memd_start_log(struct hct_memd *m, unsigned n, const char *args, const char *log, char *err, size_t errlen);
/* The same, each server in the network namespace netns (made by ip netns
 * add: /run/netns/NETNS) and listening on host there. */
int hct_memd_start_in(struct hct_memd *m, unsigned n, const char *netns, const char *host, const char *args, char *err,
		      size_t errlen);
/* Start server i again on its port (after hct_memd_kill): 0, or -1. */
int hct_memd_restart(struct hct_memd *m, unsigned i, char *err, size_t errlen);
/* Send sig to server i and reap it (SIGKILL: the server dies at once). */
void hct_memd_kill(struct hct_memd *m, unsigned i, int sig);
/* Stop every server still running: SIGTERM, then SIGKILL after 5 s. */
void hct_memd_stop(struct hct_memd *m);
/* "HOST:P1;HOST:P2;..." for servers= (HOST: 127.0.0.1, or the one given). */
void hct_memd_servers(const struct hct_memd *m, char *buf, size_t len);

#endif
