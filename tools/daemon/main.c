/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hicached - the service daemon: one per pool, it owns the pool's L3
 * backend and answers the ranks' requests (doc/design.md, "Rings and
 * requests" and "The transfer engine").
 *
 * It creates the pool if it does not exist (or checks that the geometry it
 * was given agrees with the one that does), starts the service, and waits
 * in the main thread for a signal on a signalfd: SIGTERM and SIGINT stop
 * it after the work in flight, SIGHUP reopens the log file.  No work is
 * done in a signal handler; the signals are blocked before the service
 * thread starts, so only the signalfd ever sees them.
 *
 * A sealed pool (the default; hicache-sealed(7)) is created afresh at
 * each start in a memfd, and its fd handed to the ranks that connect to
 * the socket; it has no name to check, reuse or remove, and is gone when
 * the daemon and its ranks are.
 *
 * Exit status: 0 after a clean stop, 1 when the pool or the service
 * failed, 2 for a wrong option, a bad config file, a backend that does not
 * open with its options, a metrics address that does not bind, or a
 * geometry that disagrees with the existing pool.  Those are all found
 * before the pool is created; a pool this run created and then could not
 * serve is removed.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>

#include "hicached.h"

static const char *dir_of(const struct hcd_conf *c)
{
	return c->sealed ? "a sealed memfd" : c->svc.dir ? c->svc.dir : "/dev/shm";
}

/* How long systemd waits for a pool to be created and populated. */
#define CREATE_TIMEOUT_US (UINT64_C(15) * 60 * 1000000)

/* How creating a pool goes: systemd's STATUS at every step (a GiB), and
 * the log every PROGRESS_LOG_S, and at the end once it said something. */
#define PROGRESS_LOG_S 10
struct create_progress {
	const char *pool;
	time_t t0, logged;
	int said;
};

static void create_progress(void *arg, const char *phase, uint64_t done, uint64_t total)
{
	struct create_progress *cp = arg;
	const char *what = strcmp(phase, "allocate") ? "populating" : "allocating";
	time_t now = time(NULL);
	char b1[32], b2[32];

	hc_cli_format_size(done, b1, sizeof(b1));
	hc_cli_format_size(total, b2, sizeof(b2));
	sd_notifyf(0, "STATUS=creating pool '%s': %s %s of %s", cp->pool, what, b1, b2);
	if (done < total ? now - cp->logged < PROGRESS_LOG_S : !cp->said)
		return;
	hcd_log(HC_LOG_INFO, "creating pool '%s': %s %s of %s (%.0f%%), %lld s", cp->pool, what, b1, b2,
		total ? 100.0 * (double)done / (double)total : 100.0, (long long)(now - cp->t0));
	cp->logged = now;
	cp->said = done < total;
}

/* Create the pool from the geometry given; 0, or the exit status.
 * *created: this run made it (and removes it if it cannot serve it). */
static int create_pool(struct hcd_conf *c, int *created)
{
	struct create_progress cp;
	int r;

	if (!hc_cli_pool_has_geometry(&c->geo)) {
		hcd_log(HC_LOG_ERR,
			"no pool '%s' in %s, and no geometry to create it: give --model, --page-tokens, --tp, "
			"--kv or --state, and --pages or --size (or [pool] in the config file), or create it with "
			"'hicache-pool create'",
			c->pool, dir_of(c));
		return HC_CLI_EXIT_USAGE;
	}
	if (hc_cli_pool_finish(&c->geo) < 0) {
		hcd_log(HC_LOG_ERR, "cannot create pool '%s': %s", c->pool, hc_cli_error());
		return HC_CLI_EXIT_USAGE;
	}
	c->geo.spec.name = c->pool;
	/* A large pool takes a while to populate: say so, and give the start
	 * the time (systemd's default start timeout is 90 s). */
	sd_notifyf(0, "STATUS=creating and populating pool '%s' in %s\nEXTEND_TIMEOUT_USEC=%llu", c->pool, dir_of(c),
		   (unsigned long long)CREATE_TIMEOUT_US);
	cp = (struct create_progress){ c->pool, time(NULL), time(NULL), 0 };
	c->geo.spec.progress = create_progress;
	c->geo.spec.progress_arg = &cp;
	if (c->sealed)
		c->geo.spec.sealed_fd = &c->pool_fd;
	r = hc_pool_create(&c->geo.spec);
	if (r == -EEXIST)
		return 0; /* another process made it just now: check it like any other */
	if (r < 0) {
		hcd_log(HC_LOG_ERR, "%s", hc_last_error());
		return HC_CLI_EXIT_FAIL;
	}
	hcd_log(HC_LOG_INFO, "created pool '%s' in %s", c->pool, dir_of(c));
	*created = !c->sealed; /* a sealed pool has no name to remove */
	return 0;
}

/* The pool exists (created now if need be) and agrees with the geometry
 * given; 0, or the exit status. */
static int prepare_pool(struct hcd_conf *c, int *created)
{
	struct hc_attach_opts ao = { .size = sizeof(struct hc_attach_opts),
				     .dir = c->svc.dir,
				     .flags = HC_ATTACH_READONLY };
	struct hc_pool_info in;
	char b1[32], b2[32];
	hc_pool *p;
	int r;

	if (c->sealed) {
		if ((r = create_pool(c, created)) != 0)
			return r;
		ao.flags |= HC_ATTACH_FD;
		ao.fd = c->pool_fd;
	}
	r = hc_pool_attach(c->pool, &ao, &p);
	if (r == -ENOENT && !c->sealed) {
		if ((r = create_pool(c, created)) != 0)
			return r;
		r = hc_pool_attach(c->pool, &ao, &p);
	}
	if (r < 0) {
		hcd_log(HC_LOG_ERR, "%s", hc_last_error());
		return HC_CLI_EXIT_FAIL;
	}
	if (hc_cli_pool_agrees(&c->geo, p) < 0) {
		hcd_log(HC_LOG_ERR, "%s", hc_cli_error());
		hc_pool_detach(p);
		return HC_CLI_EXIT_USAGE;
	}
	hc_pool_info(p, &in, sizeof(in));
	hcd_log(HC_LOG_INFO,
		"pool '%s' at %s: model %s, %" PRIu32 " pages of %s (%s segment), %" PRIu32 "-token pages, tp %" PRIu32
		", %" PRIu32 " rank slots",
		in.name, in.path, in.model_id, in.npages, hc_cli_format_size(in.envelope_bytes, b1, sizeof(b1)),
		hc_cli_format_size(in.segment_bytes, b2, sizeof(b2)), in.page_tokens, in.tp_size, in.max_ranks);
	hc_pool_detach(p);
	return 0;
}

/* Is the pool, if it exists, served already?  Said before the backend is
 * opened: a second daemon's backend would find the first one's L3 in use,
 * which hides why.  0, or the exit status (1: not a config error). */
static int served_already(const struct hcd_conf *c)
{
	struct hc_attach_opts ao = { .size = sizeof(struct hc_attach_opts),
				     .dir = c->svc.dir,
				     .flags = HC_ATTACH_ADMIN };
	uint32_t pid = 0;
	hc_pool *p;
	int r;

	if (c->sealed) /* none yet: its socket says whether another serves */
		return hcd_handover_listen(c);
	if (hc_pool_attach(c->pool, &ao, &p) < 0)
		return 0; /* none yet, or one the later steps will name */
	r = hc_service_probe(p, &pid);
	hc_pool_detach(p);
	if (r != 1)
		return 0;
	hcd_log(HC_LOG_ERR,
		"cannot start the service: pool '%s' is already served by pid %" PRIu32 ": one service per pool",
		c->pool, pid);
	return HC_CLI_EXIT_FAIL;
}

/* Serve until SIGTERM or SIGINT; SIGHUP reopens the log.  0, or -errno. */
static int wait_signals(int sfd)
{
	struct signalfd_siginfo si;
	ssize_t n;

	for (;;) {
		n = read(sfd, &si, sizeof(si));
		if (n < 0 && errno == EINTR)
			continue;
		if (n != (ssize_t)sizeof(si)) {
			hcd_log(HC_LOG_ERR, "cannot read signals: %s; stopping",
				n < 0 ? strerror(errno) : "short read");
			return -EIO;
		}
		if (si.ssi_signo == SIGHUP) {
			int r;

			sd_notify(0, "RELOADING=1");
			r = hcd_log_reopen();

			if (r < 0)
				hcd_log(HC_LOG_ERR,
					"SIGHUP: cannot reopen the log file: %s; still writing to the old one",
					strerror(-r));
			else
				hcd_log(HC_LOG_INFO, "SIGHUP: log file reopened");
			sd_notify(0, "READY=1");
			continue;
		}
		sd_notifyf(0, "STOPPING=1\nSTATUS=%s: finishing the requests in flight",
			   si.ssi_signo == SIGTERM ? "SIGTERM" : "SIGINT");
		hcd_log(HC_LOG_INFO, "%s from pid %u: finishing the requests in flight, then stopping",
			si.ssi_signo == SIGTERM ? "SIGTERM" : "SIGINT", si.ssi_pid);
		return 0;
	}
}

int main(int argc, char **argv)
{
	static struct hcd_conf c;
	hc_service *svc = NULL;
	sigset_t set;
	int ret, r, sfd = -1, created = 0;

	ret = hcd_conf_load(&c, argc, argv);
	if (ret != HCD_GO)
		goto out;
	/* Before any thread exists, so the service thread inherits the mask
	 * and the signalfd alone receives these. */
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	signal(SIGPIPE, SIG_IGN); /* a closed stderr must not kill the service */
	if (sigprocmask(SIG_BLOCK, &set, NULL) < 0 || (sfd = signalfd(-1, &set, SFD_CLOEXEC)) < 0) {
		fprintf(stderr, HCD_PROG ": cannot set up signal handling: %s\n", strerror(errno));
		ret = HC_CLI_EXIT_FAIL;
		goto out;
	}
	if ((r = hcd_log_open(c.log_file, c.log_level)) < 0) {
		fprintf(stderr, HCD_PROG ": cannot open the log file %s: %s\n", c.log_file, strerror(-r));
		ret = HC_CLI_EXIT_FAIL;
		goto out;
	}
	hc_set_log(hcd_log_lib, NULL);
	hcd_log(HC_LOG_INFO, HCD_PROG " %s starting, pid %d: pool '%s' in %s, backend %s", hc_version(), (int)getpid(),
		c.pool, dir_of(&c), c.svc.backend);
	hcd_conf_log(&c);

	sd_notifyf(0, "STATUS=checking the configuration of pool '%s'", c.pool);
	if ((ret = served_already(&c)) != 0)
		goto out_log;
	/* Configuration errors first: a backend that will not open with its
	 * options, an address that will not bind.  Exit 2 (the unit does not
	 * restart on it), and nothing created yet. */
	if (hc_backend_check(c.svc.backend, c.svc.backend_dir) < 0) {
		hcd_log(HC_LOG_ERR, "--backend %s: %s", c.svc.backend, hc_last_error());
		ret = HC_CLI_EXIT_USAGE;
		goto out_log;
	}
	if (c.svc.mac_key_file && hc_mac_key_check(c.svc.mac_key_file) < 0) {
		hcd_log(HC_LOG_ERR, "--mac-key-file: %s", hc_last_error());
		ret = HC_CLI_EXIT_USAGE;
		goto out_log;
	}
	if (c.metrics_listen && hcd_metrics_listen(c.metrics_listen) < 0) {
		ret = HC_CLI_EXIT_USAGE;
		goto out_log;
	}
	if ((ret = prepare_pool(&c, &created)) != 0)
		goto out_unmade;
	sd_notifyf(0, "STATUS=opening backend %s for pool '%s'", c.svc.backend, c.pool);
	if (c.svc.retries == 0)
		c.svc.retries = -1; /* none, as the library says it */
	if (c.sealed) {
		c.svc.flags |= HC_SERVICE_FD;
		c.svc.pool_fd = c.pool_fd;
	}
	r = hc_service_start(c.pool, &c.svc, &svc);
	if (r < 0) {
		hcd_log(HC_LOG_ERR, "cannot start the service: %s", hc_last_error());
		ret = HC_CLI_EXIT_FAIL;
		goto out_unmade;
	}
	hcd_log(HC_LOG_INFO, "serving pool '%s' with backend %s", c.pool, c.svc.backend);
	if (c.metrics_listen && hcd_metrics_start(c.metrics_listen, c.pool, c.svc.dir, c.pool_fd, svc) < 0) {
		hc_service_stop(svc);
		ret = HC_CLI_EXIT_FAIL;
		goto out_unmade;
	}
	if (c.sealed && hcd_handover_start(&c) < 0) {
		hcd_metrics_stop();
		hc_service_stop(svc);
		ret = HC_CLI_EXIT_FAIL;
		goto out_unmade;
	}
	if (c.sealed)
		hcd_log(HC_LOG_INFO, "ranks attach pool '%s' with socket %s", c.pool, c.socket);
	/* Ready once the pool is attached, the backend open, /metrics up and
	 * the socket served. */
	sd_notifyf(0, "READY=1\nSTATUS=serving pool '%s' with backend %s%s%s%s%s", c.pool, c.svc.backend,
		   c.metrics_listen ? ", metrics at " : "", c.metrics_listen ? c.metrics_listen : "",
		   c.sealed ? ", ranks attach at " : "", c.sealed ? c.socket : "");
	ret = wait_signals(sfd) < 0 ? HC_CLI_EXIT_FAIL : HC_CLI_EXIT_OK;
	hcd_handover_stop();
	hcd_metrics_stop();
	hc_service_stop(svc);
	hcd_log(HC_LOG_INFO, "stopped serving pool '%s'", c.pool);
	goto out_log;
out_unmade:
	hcd_metrics_stop();
	/* A pool this run made and never served is not left behind. */
	if (created && (r = hc_pool_destroy(c.pool, c.svc.dir, 0)) < 0)
		hcd_log(HC_LOG_WARN, "cannot remove pool '%s', made by this run: %s", c.pool, hc_last_error());
	else if (created)
		hcd_log(HC_LOG_INFO, "removed pool '%s', made by this run", c.pool);
out_log:
	hcd_handover_stop(); /* no-op unless the socket was bound */
	hc_set_log(NULL, NULL);
	hcd_log_close();
out:
	if (c.pool_fd >= 0)
		close(c.pool_fd);
	if (sfd >= 0)
		close(sfd);
	hcd_conf_free(&c);
	return ret;
}
