/* SPDX-License-Identifier: Apache-2.0 */
/*
 * replay.h - hicache-bench replay: engines of TP rank processes serve a
 * workload (workload.h) through a real pool, a real service and a real
 * backend, moving and checking every byte (serve.c); the driver creates
 * what they need, runs them and reports (replay.c, report.c).
 *
 * Notes on synchronization: the driver maps struct hc_rp_shared (shared,
 * anonymous) before it forks the ranks.  Each rank writes only its own
 * stats row and its count of requests finished; the driver writes go; in
 * --serial runs turn and left pass one request at a time from rank to
 * rank.  The ranks of an engine serve in step, as TP ranks do (each waits
 * for the others to finish a request before it starts the next), so one
 * request's pages are all committed before the next one looks for them.
 */
#ifndef HC_TOOLS_REPLAY_REPLAY_H
#define HC_TOOLS_REPLAY_REPLAY_H

#include <stdatomic.h>
#include <stdint.h>

#include <hicache/service.h>

#include "../cli/cli.h"
#include "model.h"
#include "workload.h"

#define HC_RP_MAX_RANKS 64

struct hc_rp_opts {
	const char *trace;   /* NULL: the built-in workload */
	size_t max_requests; /* 0: all */
	struct hc_rp_gen_opts gen;
	const char *model;                               /* a preset */
	struct hc_component_spec comps[HC_RP_MAX_COMPS]; /* --kv, --state: instead of a preset */
	char comp_names[HC_RP_MAX_COMPS][HC_COMP_NAME_MAX + 1];
	unsigned ncomp;
	uint32_t page_tokens;
	double scale;
	uint32_t tp, engines;
	uint64_t pool_pages; /* L2; 0: a quarter of the workload's distinct pages */
	const char *pool;    /* an existing pool (and its hicached) instead of one made here */
	int tp_set;
	uint32_t l1_pages;   /* each rank's GPU cache; 0: none */
	const char *backend; /* "file", "shm", "none", or a backend spec */
	const char *dir;     /* where the file backend's directory goes */
	enum hc_write_policy write_policy;
	enum hc_prefetch_policy prefetch;
	uint32_t prefetch_timeout_ms;
	uint32_t prefetch_threshold; /* pages */
	enum hc_evict_policy evict;
	int serial;
	double speedup; /* 0: as fast as possible; else paced by timestamps / speedup */
	int reference;  /* compare the L2 hit ratio with the reference simulation */
	const char *json, *csv, *svg;
	int progress; /* -1: if stderr is a terminal */
	int keep;     /* leave the pool and the backend's files */
};

/* One rank's figures (a row of the shared area, written by that rank). */
struct hc_rp_rank_stats {
	int32_t err; /* 0, or the -errno that stopped the rank */
	char msg[512];
	uint32_t engine, tp_rank;
	uint64_t requests;
	/* request figures (every rank of an engine has the same) */
	uint64_t tok_total, tok_l1, tok_l2, tok_l3; /* input tokens, and hit tokens by tier */
	uint64_t pages, pages_l1, pages_l2, pages_l3, pages_stored, pages_nospace;
	uint64_t req_full, req_nospace; /* every missing page stored, or some not (ENOSPC) */
	uint64_t prefetches, prefetch_fails;
	/* this rank's bytes */
	uint64_t load_bytes, store_bytes, checked_bytes, bad_bytes;
	uint64_t load_ns, store_ns;
	double seconds;
};

struct hc_rp_shared {
	_Atomic int go;                             /* 1: the service is up, serve; -1: give up */
	_Atomic uint64_t turn;                      /* --serial: the request being served */
	_Atomic uint32_t left;                      /* --serial: its ranks that have not finished it */
	_Atomic uint64_t served;                    /* requests finished (by their engine's rank 0) */
	_Atomic uint32_t leaving;                   /* ranks done serving (they detach together) */
	_Atomic uint64_t finished[HC_RP_MAX_RANKS]; /* requests each rank has served */
	struct hc_rp_rank_stats st[HC_RP_MAX_RANKS];
};

struct hc_rp_ctx {
	const struct hc_rp_opts *o;
	const struct hc_rp_workload *w;
	const struct hc_rp_model *m;
	const char *pool;
	int l3;             /* a backend serves the pool */
	uint32_t max_pages; /* of any request */
	struct hc_rp_shared *sh;
};

/* serve.c: rank (engine, tp_rank) serves its engine's requests; its row
 * of the shared area says how it went.  Returns 0 or -errno. */
int hc_rp_serve(const struct hc_rp_ctx *cx, unsigned engine, unsigned tp_rank);

/* replay.c: hicache-bench replay [options] (argv[0] is "replay"). */
int hc_rp_main(int argc, char **argv);
/* leftovers.c: remove what replays that died left (pools, shm stores, L3
 * directories under dir, named after their PIDs), each said on say; how many. */
unsigned hc_rp_sweep(const char *dir, FILE *say);
/* leftovers.c: remove the directory tree at path (nftw's result). */
int hc_rp_rm_tree(const char *path, struct hc_cli_progress *pg);

#endif /* HC_TOOLS_REPLAY_REPLAY_H */
