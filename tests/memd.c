/* SPDX-License-Identifier: Apache-2.0 */
/*
 * memd.c - real hicache-memd servers on loopback ports (see memd.h).
 *
 * A server is told port 0 and says which port it bound, once it is ready,
 * in one line on stdout ("hicache-memd: listening on 127.0.0.1:PORT"):
 * no port is guessed, and no connection is tried before it answers.  A
 * restart names the old port; the server binds it with SO_REUSEADDR, and
 * is tried again a few times in case something else took it meanwhile.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "memd.h"

#ifndef HCT_MEMD
#define HCT_MEMD "tools/hicache-memd"
#endif

#define READY_MS      10000
#define STOP_MS       5000
#define RESTART_TRIES 5
#define READY_LINE    "hicache-memd: listening on "

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Fork and exec the server on port, its stdout into a pipe whose read end
 * is *out; the pid, or -1 with errno. */
static pid_t spawn(const struct hct_memd *m, int port, int *out)
{
	char listen[96], args[sizeof(m->args)], nsname[sizeof(m->netns)], *argv[64], *save = NULL;
	int argc = 0, p[2], logfd = -1, e;
	pid_t parent = getpid(), pid;

	snprintf(listen, sizeof(listen), "%s:%d", m->host[0] ? m->host : "127.0.0.1", port);
	snprintf(args, sizeof(args), "%s", m->args);
	snprintf(nsname, sizeof(nsname), "%s", m->netns);
	argv[argc++] = (char *)HCT_MEMD;
	argv[argc++] = (char *)"--listen";
	argv[argc++] = listen;
	for (char *t = strtok_r(args, " ", &save); t && argc < 63; t = strtok_r(NULL, " ", &save))
		argv[argc++] = t;
	argv[argc] = NULL;
	if (pipe2(p, O_CLOEXEC) < 0)
		return -1;
	if (m->log[0] && (logfd = open(m->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644)) < 0)
		goto fail;
	if ((pid = fork()) < 0)
		goto fail;
	if (pid == 0) {
		/* the server dies with whoever started it, whatever way that ends */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(125);
		if (m->netns[0]) {
			/* ip netns exec, not setns(): it also mounts the
			 * namespace's /sys, where UCX finds its interfaces */
			char *nargv[70] = { (char *)"ip", (char *)"netns", (char *)"exec", nsname };
			memcpy(nargv + 4, argv, (size_t)(argc + 1) * sizeof(*argv));
			if (dup2(p[1], STDOUT_FILENO) < 0 || (logfd >= 0 && dup2(logfd, STDERR_FILENO) < 0))
				_exit(126);
			execvp("ip", nargv);
			_exit(124);
		}
		if (dup2(p[1], STDOUT_FILENO) < 0 || (logfd >= 0 && dup2(logfd, STDERR_FILENO) < 0))
			_exit(126);
		execv(argv[0], argv);
		_exit(127);
	}
	close(p[1]);
	if (logfd >= 0)
		close(logfd);
	*out = p[0];
	return pid;
fail:
	e = errno;
	close(p[0]);
	close(p[1]);
	if (logfd >= 0)
		close(logfd);
	errno = e;
	return -1;
}

/* Wait for the ready line on fd: the port, 0 when the server exited
 * first, or -1 after READY_MS. */
static int read_port(int fd)
{
	char line[256];
	size_t got = 0;
	long long until = now_ms() + READY_MS;

	for (;;) {
		struct pollfd pf = { .fd = fd, .events = POLLIN };
		long long left = until - now_ms();
		char *nl;
		ssize_t r;

		if (left <= 0)
			return -1;
		if (poll(&pf, 1, (int)left) <= 0)
			continue; /* EINTR, or the time is up: the loop decides */
		r = read(fd, line + got, sizeof(line) - 1 - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return 0;
		got += (size_t)r;
		line[got] = '\0';
		if (!(nl = strchr(line, '\n'))) {
			if (got == sizeof(line) - 1)
				return 0; /* not the line we wait for; the server will say why */
			continue;
		}
		if (strncmp(line, READY_LINE, strlen(READY_LINE)) != 0 || !(nl = strrchr(line, ':')))
			return 0;
		return atoi(nl + 1);
	}
}

/* Start server i on port (0: a new one); 0, or -1 with err set. */
static int start_one(struct hct_memd *m, unsigned i, int port, char *err, size_t errlen)
{
	const char *host = m->host[0] ? m->host : "127.0.0.1";
	int fd, got, status = 0;
	pid_t pid;

	if ((pid = spawn(m, port, &fd)) < 0) {
		snprintf(err, errlen, "cannot start %s: %s", HCT_MEMD, strerror(errno));
		return -1;
	}
	got = read_port(fd);
	close(fd); /* the server writes nothing more to stdout */
	if (got > 0 && (port == 0 || got == port)) {
		m->pid[i] = pid;
		m->port[i] = got;
		return 0;
	}
	if (got < 0)
		kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	if (got < 0)
		snprintf(err, errlen,
			 "%s --listen %s:%d %s did not say it was listening within %d ms (its stderr says why)",
			 HCT_MEMD, host, port, m->args, READY_MS);
	else if (WIFEXITED(status) && WEXITSTATUS(status) == 124)
		snprintf(err, errlen, "cannot run ip netns exec %s (iproute2: apt-get install iproute2)", m->netns);
	else if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
		snprintf(err, errlen, "%s could not be run: build it first (make tools/hicache-memd)", HCT_MEMD);
	else if (WIFEXITED(status))
		snprintf(err, errlen,
			 "%s --listen %s:%d %s exited with status %d before it listened (its stderr says why)",
			 HCT_MEMD, host, port, m->args, WEXITSTATUS(status));
	else
		snprintf(err, errlen, "%s --listen %s:%d %s died of signal %d before it listened", HCT_MEMD, host, port,
			 m->args, WIFSIGNALED(status) ? WTERMSIG(status) : 0);
	return -1;
}

/* Start n servers as m (its log, host and netns set) says. */
static int start_all(struct hct_memd *m, unsigned n, const char *args, char *err, size_t errlen)
{
	if (n == 0 || n > HCT_MEMD_MAX) {
		snprintf(err, errlen, "%u servers: 1 to %d", n, HCT_MEMD_MAX);
		return -1;
	}
	snprintf(m->args, sizeof(m->args), "%s", args ? args : "");
	m->n = n;
	for (unsigned i = 0; i < n; i++)
		if (start_one(m, i, 0, err, errlen) < 0) {
			hct_memd_stop(m);
			return -1;
		}
	return 0;
}

int hct_memd_start_log(struct hct_memd *m, unsigned n, const char *args, const char *log, char *err, size_t errlen)
{
	memset(m, 0, sizeof(*m));
	snprintf(m->log, sizeof(m->log), "%s", log ? log : "");
	return start_all(m, n, args, err, errlen);
}

int hct_memd_start_in(struct hct_memd *m, unsigned n, const char *netns, const char *host, const char *args, char *err,
		      size_t errlen)
{
	memset(m, 0, sizeof(*m));
	snprintf(m->netns, sizeof(m->netns), "%s", netns);
	snprintf(m->host, sizeof(m->host), "%s", host);
	return start_all(m, n, args, err, errlen);
}

int hct_memd_start(struct hct_memd *m, unsigned n, const char *args, char *err, size_t errlen)
{
	return hct_memd_start_log(m, n, args, NULL, err, errlen);
}

int hct_memd_restart(struct hct_memd *m, unsigned i, char *err, size_t errlen)
{
	if (i >= m->n || m->pid[i]) {
		snprintf(err, errlen, "server %u is not stopped", i);
		return -1;
	}
	for (int t = 0;; t++) {
		if (start_one(m, i, m->port[i], err, errlen) == 0)
			return 0;
		if (t + 1 == RESTART_TRIES)
			return -1;
		poll(NULL, 0, 100); /* another process may hold the port a moment */
	}
}

void hct_memd_kill(struct hct_memd *m, unsigned i, int sig)
{
	if (i >= m->n || !m->pid[i])
		return;
	kill(m->pid[i], sig);
	waitpid(m->pid[i], NULL, 0);
	m->pid[i] = 0;
}

void hct_memd_stop(struct hct_memd *m)
{
	long long until = now_ms() + STOP_MS;

	for (unsigned i = 0; i < m->n; i++)
		if (m->pid[i])
			kill(m->pid[i], SIGTERM);
	for (unsigned i = 0; i < m->n; i++) {
		if (!m->pid[i])
			continue;
		while (waitpid(m->pid[i], NULL, WNOHANG) == 0) {
			if (now_ms() >= until) {
				kill(m->pid[i], SIGKILL); /* a server that will not stop must not hang the test */
				waitpid(m->pid[i], NULL, 0);
				break;
			}
			poll(NULL, 0, 5);
		}
		m->pid[i] = 0;
	}
}

void hct_memd_servers(const struct hct_memd *m, char *buf, size_t len)
{
	size_t off = 0;

	buf[0] = '\0';
	for (unsigned i = 0; i < m->n && off < len; i++)
		off += (size_t)snprintf(buf + off, len - off, "%s%s:%d", i ? ";" : "",
					m->host[0] ? m->host : "127.0.0.1", m->port[i]);
}
