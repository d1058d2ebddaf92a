/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mcd.c - real memcached servers on free loopback ports (see mcd.h).
 *
 * A port is found by binding port 0 and closing; the server may lose it to
 * another process before it binds, so a server that exits at start is
 * tried again on a new port.  Run as root, the child becomes nobody before
 * it runs memcached (which refuses root without -u).
 */
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>

#include "mcd.h"

#ifndef HCT_MEMCACHED
#define HCT_MEMCACHED "/usr/bin/memcached"
#endif
#ifndef HCT_SASLPASSWD2
#define HCT_SASLPASSWD2 "/usr/sbin/saslpasswd2"
#endif

#define START_TRIES 5
#define READY_MS    5000

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int free_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;

	if (fd < 0)
		return -1;
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 && getsockname(fd, (struct sockaddr *)&a, &len) == 0)
		port = ntohs(a.sin_port);
	close(fd);
	return port;
}

static int answers(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET,
				 .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(AF_INET, SOCK_STREAM, 0), ok;

	if (fd < 0)
		return 0;
	ok = connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
	close(fd);
	return ok;
}

static pid_t spawn(const struct hct_mcd *m, int port)
{
	char portbuf[16], args[sizeof(m->args)], *argv[64], *save = NULL, envbuf[300], *envp[2] = { NULL, NULL };
	int argc = 0;
	pid_t parent = getpid(), pid;
	struct passwd *pw;
	uid_t uid;
	gid_t gid;

	snprintf(portbuf, sizeof(portbuf), "%d", port);
	snprintf(envbuf, sizeof(envbuf), "SASL_CONF_PATH=%s", m->sasl_conf);
	envp[0] = m->sasl_conf[0] ? envbuf : NULL;
	snprintf(args, sizeof(args), "%s", m->args);
	argv[argc++] = (char *)HCT_MEMCACHED;
	argv[argc++] = (char *)"-p";
	argv[argc++] = portbuf;
	argv[argc++] = (char *)"-l";
	argv[argc++] = (char *)"127.0.0.1";
	argv[argc++] = (char *)"-U";
	argv[argc++] = (char *)"0";
	argv[argc++] = (char *)"-t";
	argv[argc++] = (char *)"2";
	for (char *t = strtok_r(args, " ", &save); t && argc < 62; t = strtok_r(NULL, " ", &save))
		argv[argc++] = t;
	argv[argc] = NULL;
	/* looked up before the fork: the child of a threaded process may
	 * only make async-signal-safe calls */
	pw = geteuid() == 0 ? getpwnam("nobody") : NULL;
	uid = pw ? pw->pw_uid : 0;
	gid = pw ? pw->pw_gid : 0;
	pid = fork();
	if (pid != 0)
		return pid;
	/* memcached refuses root without -u, and its own setuid would clear
	 * the parent-death signal: become nobody first, then ask for it */
	if (geteuid() == 0 && (!uid || setgroups(0, NULL) < 0 || setgid(gid) < 0 || setuid(uid) < 0))
		_exit(126);
	/* the server dies with whoever started it, whatever way that ends */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(125);
	execve(argv[0], argv, envp);
	_exit(127);
}

/* Start server i on its port, or on new ones if that is taken. */
static int start_one(struct hct_mcd *m, unsigned i, int keep_port, char *err, size_t errlen)
{
	for (int t = 0; t < START_TRIES; t++) {
		int port = keep_port ? m->port[i] : free_port(), status;
		double until = now_s() + READY_MS / 1000.0;
		pid_t pid;

		if (port <= 0)
			continue;
		if ((pid = spawn(m, port)) < 0) {
			snprintf(err, errlen, "fork: %s", strerror(errno));
			return -1;
		}
		while (now_s() < until) {
			if (waitpid(pid, &status, WNOHANG) == pid) {
				pid = 0;
				break;
			}
			if (answers(port)) {
				m->pid[i] = pid;
				m->port[i] = port;
				return 0;
			}
			poll(NULL, 0, 5);
		}
		if (pid) {
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
		}
		if (WIFEXITED(status) && WEXITSTATUS(status) == 127) {
			snprintf(err, errlen, "%s could not be run: apt-get install memcached", HCT_MEMCACHED);
			return -1;
		}
		if (WIFEXITED(status) && WEXITSTATUS(status) == 126) {
			snprintf(err, errlen, "cannot become user nobody to run memcached");
			return -1;
		}
		if (keep_port)
			poll(NULL, 0, 50); /* the old server's socket may linger a moment */
	}
	snprintf(err, errlen, "memcached %s would not start on 127.0.0.1 in %d tries", m->args, START_TRIES);
	return -1;
}

static int start_all(struct hct_mcd *m, unsigned n, const char *args, const char *sasl_conf, char *err, size_t errlen)
{
	memset(m, 0, sizeof(*m));
	if (n == 0 || n > HCT_MCD_MAX) {
		snprintf(err, errlen, "%u servers: 1 to %d", n, HCT_MCD_MAX);
		return -1;
	}
	snprintf(m->args, sizeof(m->args), "%s", args ? args : "");
	snprintf(m->sasl_conf, sizeof(m->sasl_conf), "%s", sasl_conf ? sasl_conf : "");
	m->n = n;
	for (unsigned i = 0; i < n; i++)
		if (start_one(m, i, 0, err, errlen) < 0) {
			hct_mcd_stop(m);
			return -1;
		}
	return 0;
}

int hct_mcd_start(struct hct_mcd *m, unsigned n, const char *args, char *err, size_t errlen)
{
	return start_all(m, n, args, NULL, err, errlen);
}

int hct_mcd_start_sasl(struct hct_mcd *m, const char *dir, const char *user, const char *password, char *err,
		       size_t errlen)
{
	char path[512], cmd[1200];
	FILE *f;
	int status;

	snprintf(path, sizeof(path), "%s/memcached.conf", dir);
	if (!(f = fopen(path, "w"))) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return -1;
	}
	fprintf(f, "mech_list: plain\nsasldb_path: %s/sasldb2\n", dir);
	fclose(f);
	/* the servers run as nobody: they must read the database */
	snprintf(
		cmd, sizeof(cmd),
		"printf '%%s' '%s' | %s -p -a memcached -c -f '%s/sasldb2' '%s' && chmod 0644 '%s/sasldb2' && chmod 0755 '%s'",
		password, HCT_SASLPASSWD2, dir, user, dir, dir);
	status = system(cmd);
	if (status != 0) {
		snprintf(err, errlen, "%s failed (status %d): apt-get install sasl2-bin", HCT_SASLPASSWD2, status);
		return -1;
	}
	return start_all(m, 1, "-S", dir, err, errlen);
}

int hct_mcd_restart(struct hct_mcd *m, unsigned i, char *err, size_t errlen)
{
	if (i >= m->n || m->pid[i]) {
		snprintf(err, errlen, "server %u is not stopped", i);
		return -1;
	}
	return start_one(m, i, 1, err, errlen);
}

void hct_mcd_kill(struct hct_mcd *m, unsigned i, int sig)
{
	if (i >= m->n || !m->pid[i])
		return;
	kill(m->pid[i], sig);
	waitpid(m->pid[i], NULL, 0);
	m->pid[i] = 0;
}

void hct_mcd_stop(struct hct_mcd *m)
{
	for (unsigned i = 0; i < m->n; i++)
		hct_mcd_kill(m, i, SIGKILL);
}

void hct_mcd_servers(const struct hct_mcd *m, char *buf, size_t len)
{
	size_t off = 0;

	buf[0] = '\0';
	for (unsigned i = 0; i < m->n && off < len; i++)
		off += (size_t)snprintf(buf + off, len - off, "%s127.0.0.1:%d", i ? ";" : "", m->port[i]);
}
