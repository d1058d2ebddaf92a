/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hicached.h - the parts of the service daemon hicached(8): its settings
 * from the command line and the config file (conf.c), its log (log.c),
 * GET /metrics (metrics.c), and main (main.c), which creates or checks the
 * pool and runs the service until a signal stops it.
 */
#ifndef HC_TOOLS_HICACHED_H
#define HC_TOOLS_HICACHED_H

#include <hicache/hicache.h>
#include <hicache/service.h>

#include "../cli/cli.h"

#define HCD_PROG "hicached"

/* Log levels: the library's, and one more for the daemon's own detail. */
#define HCD_LOG_DEBUG 7

/* Everything hicached is told, after the config file and the command line. */
struct hcd_conf {
	const char *pool;           /* --pool NAME, [pool] name */
	const char *config;         /* --config FILE, or NULL */
	struct hc_cli_pool geo;     /* the pool's geometry, to create or check it */
	struct hc_service_opts svc; /* what hc_service_start takes */
	int log_level;              /* HC_LOG_ERR .. HCD_LOG_DEBUG */
	const char *log_file;       /* NULL: stderr */
	const char *metrics_listen; /* HOST:PORT for GET /metrics, or NULL: none */
	int sealed;                 /* --sealed, [pool] sealed: a memfd pool handed over socket */
	const char *socket;         /* --socket, [pool] socket: where ranks get the sealed pool */
	int socket_default;         /* socket is the default, /run/hicache/NAME.sock */
	int pool_fd;                /* the sealed pool's fd, or -1 */
	char **strs;                /* values read from the config file, owned here */
	unsigned nstrs;
};

/* Read the config file and the command line into c.  Returns HCD_GO to go
 * on, or the exit status, having printed the help, the version or one
 * error line ("hicached: FILE:LINE: what is wrong"). */
#define HCD_GO (-1)
int hcd_conf_load(struct hcd_conf *c, int argc, char **argv);
/* Every setting, one line each, to the log at debug level. */
void hcd_conf_log(const struct hcd_conf *c);
void hcd_conf_free(struct hcd_conf *c);

/* The log: timestamped lines with a level, on stderr or appended to a file
 * that SIGHUP reopens (logrotate).  Safe from any thread. */
int hcd_log_open(const char *file, int level);
int hcd_log_reopen(void);
void hcd_log_close(void);
void hcd_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* An hc_log_fn: the library's messages go to the same log. */
void hcd_log_lib(int level, const char *msg, void *arg);

/* GET /metrics on addr (HOST:PORT) from a thread of its own, reading the
 * pool read-only, and svc's L3 figures (metrics.c); stop it before svc.  hcd_metrics_listen binds the address
 * alone, before anything is created (a bad or busy address is a config
 * error); hcd_metrics_start serves on it (binding it first if need be).
 * 0, or -errno logged. */
int hcd_metrics_listen(const char *addr);
int hcd_metrics_start(const char *addr, const char *pool, const char *dir, int pool_fd, hc_service *svc);

/* A sealed pool's socket (handover.c): hcd_handover_listen checks that no
 * other process serves on c->socket (removing a stale socket), and binds
 * it, before anything is created (0, or the exit status); then
 * hcd_handover_start hands c->pool_fd to the ranks that connect, from a
 * thread of its own, until hcd_handover_stop, which removes the socket. */
int hcd_handover_listen(const struct hcd_conf *c);
int hcd_handover_start(const struct hcd_conf *c);
void hcd_handover_stop(void);
void hcd_metrics_stop(void);

#endif /* HC_TOOLS_HICACHED_H */
