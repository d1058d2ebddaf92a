/* SPDX-License-Identifier: Apache-2.0 */
/*
 * conn.c - libmemcached handles: the template every worker's handle is
 * cloned from (servers, ketama, timeouts, ejection, SASL, the placement
 * hash), the probe at open, and the mapping of libmemcached's results to
 * errnos.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mc.h"

static int set_behavior(memcached_st *mc, memcached_behavior_t b, uint64_t v, const char *what, char *err,
			size_t errlen)
{
	memcached_return_t rc = memcached_behavior_set(mc, b, v);

	if (rc != MEMCACHED_SUCCESS)
		return hc__mc_fail(err, errlen, EINVAL, "open: libmemcached refuses %s=%" PRIu64 ": %s", what, v,
				   memcached_strerror(mc, rc));
	return 0;
}

/* A handle with our behaviors and the given servers (all: first -1). */
static int handle_new(struct hc_mc *be, int only, memcached_st **out, char *err, size_t errlen)
{
	const struct hc_mc_opts *o = &be->o;
	memcached_st *mc = memcached_create(NULL);
	hashkit_st *hk = NULL;
	char sbuf[HC_BE_HOST_MAX + 16];
	int ret;

	if (!(*out = mc))
		return hc__mc_fail(err, errlen, ENOMEM, "open: out of memory");
	if ((ret = set_behavior(mc, MEMCACHED_BEHAVIOR_BINARY_PROTOCOL, 1, "binary protocol", err, errlen)) < 0 ||
	    (ret = set_behavior(mc, MEMCACHED_BEHAVIOR_DISTRIBUTION, MEMCACHED_DISTRIBUTION_CONSISTENT_KETAMA,
				"ketama distribution", err, errlen)) < 0 ||
	    (ret = set_behavior(mc, MEMCACHED_BEHAVIOR_KETAMA_HASH, MEMCACHED_HASH_MD5, "ketama hash", err, errlen)) <
		    0 ||
	    /* without it, Nagle and delayed ACKs stall every set (40 ms) */
	    (ret = set_behavior(mc, MEMCACHED_BEHAVIOR_TCP_NODELAY, 1, "tcp_nodelay", err, errlen)) < 0 ||
	    (ret = set_behavior(mc, MEMCACHED_BEHAVIOR_CONNECT_TIMEOUT, o->connect_timeout_ms, "connect_timeout_ms",
				err, errlen)) < 0 ||
	    (ret = set_behavior(mc, MEMCACHED_BEHAVIOR_POLL_TIMEOUT, o->io_timeout_ms, "io_timeout_ms", err, errlen)) <
		    0 ||
	    (ret = set_behavior(mc, MEMCACHED_BEHAVIOR_RETRY_TIMEOUT, o->eject_s, "eject_s", err, errlen)) < 0 ||
	    (ret = set_behavior(mc, MEMCACHED_BEHAVIOR_SERVER_TIMEOUT_LIMIT, o->eject_after, "eject_after", err,
				errlen)) < 0)
		return ret;
	/*
	 * The ring never changes: a key has one server, always.  After
	 * eject_after failed connects libmemcached leaves a server alone for
	 * eject_s (its ops fail at once: misses, and puts that fail), then
	 * tries it again.  Its REMOVE_FAILED_SERVERS would move the keys to
	 * other servers instead, but each worker's handle moves them on its
	 * own: a put through one and a get through another met different
	 * servers, and the get read the older copy an earlier ring had left
	 * (a test caught it).  No key moving, no such copy.
	 */
	/* every item of an object on the server of its manifest (names.c) */
	if (!(hk = hashkit_create(NULL)) ||
	    hashkit_set_custom_function(hk, hc__mc_place, (void *)(uintptr_t)strlen(o->prefix)) != HASHKIT_SUCCESS ||
	    memcached_set_hashkit(mc, hk) != MEMCACHED_SUCCESS) {
		if (hk)
			hashkit_free(hk);
		return hc__mc_fail(err, errlen, ENOMEM, "open: cannot set libmemcached's key hash");
	}
	hashkit_free(hk);
	for (unsigned i = 0; i < o->nservers; i++) {
		const struct hc_be_server *sv = &o->servers[i];
		memcached_return_t rc;
		if (only >= 0 && (unsigned)only != i)
			continue;
		rc = sv->port ? memcached_server_add(mc, sv->host, (in_port_t)sv->port)
			      : memcached_server_add_unix_socket(mc, sv->host);
		if (rc != MEMCACHED_SUCCESS)
			return hc__mc_fail(err, errlen, EINVAL, "servers=: %s: %s",
					   hc_be_server_str(sv, sbuf, sizeof(sbuf)), memcached_strerror(mc, rc));
	}
	if (o->sasl) {
		memcached_return_t rc = memcached_set_sasl_auth_data(mc, o->username, o->password);
		if (rc != MEMCACHED_SUCCESS)
			return hc__mc_fail(err, errlen, ENOTSUP,
					   "username=: SASL: %s (is libmemcached built with SASL?)",
					   memcached_strerror(mc, rc));
	}
	return 0;
}

int hc__mc_tmpl_new(struct hc_mc *be, char *err, size_t errlen)
{
	int ret;

	if ((ret = handle_new(be, -1, &be->tmpl, err, errlen)) < 0)
		return ret;
	if (!(be->solo = calloc(be->o.nservers, sizeof(*be->solo))) ||
	    !(be->hung_until = calloc(be->o.nservers, sizeof(*be->hung_until))))
		return hc__mc_fail(err, errlen, ENOMEM, "open: out of memory");
	/* one handle per server, for probes and stats: libmemcached's stats
	 * over several servers give nothing at all when one is down */
	for (unsigned i = 0; i < be->o.nservers; i++)
		if ((ret = handle_new(be, (int)i, &be->solo[i], err, errlen)) < 0)
			return ret;
	return 0;
}

void hc__mc_tmpl_free(struct hc_mc *be)
{
	for (unsigned i = 0; be->solo && i < be->o.nservers; i++)
		if (be->solo[i])
			memcached_free(be->solo[i]);
	free(be->solo);
	be->solo = NULL;
	free(be->hung_until);
	be->hung_until = NULL;
	if (be->tmpl)
		memcached_free(be->tmpl);
	be->tmpl = NULL;
}

struct probe {
	unsigned answered;
	uint64_t item_min;
	char item_min_server[HC_BE_HOST_MAX + 16];
};

uint64_t hc__mc_stat_u64(const char *value, size_t vlen)
{
	char v[32];

	if (vlen == 0 || vlen >= sizeof(v))
		return 0;
	memcpy(v, value, vlen);
	v[vlen] = '\0';
	return strtoull(v, NULL, 10);
}

static memcached_return_t probe_cb(const memcached_instance_st *inst, const char *key, size_t klen, const char *value,
				   size_t vlen, void *ctx)
{
	struct probe *pr = ctx;
	uint64_t x;

	if (klen != 13 || memcmp(key, "item_size_max", 13) || vlen == 0 || vlen >= 32)
		return MEMCACHED_SUCCESS;
	x = hc__mc_stat_u64(value, vlen);
	pr->answered++;
	if (x && (!pr->item_min || x < pr->item_min)) {
		pr->item_min = x;
		snprintf(pr->item_min_server, sizeof(pr->item_min_server), "%s:%u", memcached_server_name(inst),
			 (unsigned)memcached_server_port(inst));
	}
	return MEMCACHED_SUCCESS;
}

/*
 * Ask every server for its settings: at least one must answer (a list of
 * servers none of which answers is a mistake to say at once), and the
 * smallest item size sets the chunk size, or bounds the one given.
 */
int hc__mc_probe(struct hc_mc *be, char *err, size_t errlen)
{
	struct probe pr = { 0 };
	char sbuf[HC_BE_HOST_MAX + 16], why[HC_BE_HOST_MAX + 272] = "";

	for (unsigned i = 0; i < be->o.nservers; i++) {
		unsigned before = pr.answered;
		memcached_return_t rc = memcached_stat_execute(be->solo[i], "settings", probe_cb, &pr);
		if (pr.answered > before)
			continue;
		if (rc == MEMCACHED_SUCCESS) {
			/* connected, yet no settings: a SASL server refuses stats
			 * unauthenticated, and says why only to a store */
			char key[HC_MC_PREFIX_MAX + 8];
			int n = snprintf(key, sizeof(key), "%sprobe", be->o.prefix);
			rc = memcached_set(be->solo[i], key, (size_t)n, "", 0, 1, 0);
		}
		if ((rc == MEMCACHED_AUTH_FAILURE || rc == MEMCACHED_AUTH_PROBLEM) && be->o.sasl)
			return hc__mc_fail(err, errlen, EACCES,
					   "SASL authentication failed on %s: check username= and password=",
					   hc_be_server_str(&be->o.servers[i], sbuf, sizeof(sbuf)));
		if (rc == MEMCACHED_AUTH_FAILURE || rc == MEMCACHED_AUTH_PROBLEM)
			return hc__mc_fail(
				err, errlen, EACCES,
				"server %s requires SASL authentication: give username= and password= (or password_file=)",
				hc_be_server_str(&be->o.servers[i], sbuf, sizeof(sbuf)));
		snprintf(why, sizeof(why), "%s: %s", hc_be_server_str(&be->o.servers[i], sbuf, sizeof(sbuf)),
			 memcached_last_error_message(be->solo[i]));
		hc__mc_log(HC_BE_LOG_WARN, "server %s did not answer at open: its objects are misses until it does",
			   why);
	}
	if (!pr.answered)
		return hc__mc_fail(err, errlen, EHOSTDOWN,
				   "none of the %u servers answered (last %s): start them, or correct servers=",
				   be->o.nservers, why);
	if (be->o.chunk_bytes) {
		if (pr.item_min && be->o.chunk_bytes + HC_MC_ITEM_SLACK > pr.item_min)
			return hc__mc_fail(err, errlen, EINVAL,
					   "chunk_size=%" PRIu32 " does not fit server %s, whose item size is %" PRIu64
					   " (memcached -I): give chunk_size=%" PRIu64 " or less, or auto",
					   be->o.chunk_bytes, pr.item_min_server, pr.item_min,
					   pr.item_min - HC_MC_ITEM_SLACK);
		be->chunk_bytes = be->o.chunk_bytes;
	} else {
		uint64_t item = pr.item_min ? pr.item_min : HC_MC_DEFAULT_ITEM;
		if (item < HC_MC_MIN_CHUNK + HC_MC_ITEM_SLACK)
			return hc__mc_fail(err, errlen, EINVAL,
					   "server %s has an item size of %" PRIu64
					   " bytes: too small for chunks (2K or more, memcached -I)",
					   pr.item_min_server, item);
		item = item > (1ull << 30) ? (1ull << 30) : item;
		be->chunk_bytes = (uint32_t)(item - HC_MC_ITEM_SLACK);
	}
	return 0;
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

uint32_t hc__mc_server_of(struct hc_mc_worker *w, const uint8_t name[HC_BE_NAME_BYTES])
{
	char key[HC_MC_KEY_MAX];
	size_t klen = hc__mc_key(w->be, name, -1, key);

	return memcached_generate_hash(w->mc, key, klen);
}

bool hc__mc_hung(struct hc_mc *be, uint32_t server)
{
	uint64_t until;

	if (server >= be->o.nservers)
		return false;
	until = atomic_load_explicit(&be->hung_until[server], memory_order_relaxed);
	return until && now_ms() < until;
}

bool hc__mc_skip(struct hc_mc *be, uint32_t server)
{
	if (!hc__mc_hung(be, server))
		return false;
	HC_MC_COUNT(be, skipped, 1);
	return true;
}

void hc__mc_hang(struct hc_mc *be, memcached_st *mc, uint32_t server)
{
	char where[HC_BE_HOST_MAX + 16];

	if (server >= be->o.nservers)
		return;
	atomic_store_explicit(&be->hung_until[server], now_ms() + (uint64_t)be->o.eject_s * 1000, memory_order_relaxed);
	HC_MC_COUNT(be, hung, 1);
	memcached_quit(mc); /* its late answers must not meet the next request */
	hc__mc_warn_once(
		be, HC_MC_WARN_HUNG,
		"server %s answered nothing in io_timeout_ms=%u: left alone for eject_s=%u, its objects are misses (logged once)",
		hc_be_server_str(&be->o.servers[server], where, sizeof(where)), be->o.io_timeout_ms, be->o.eject_s);
}

int hc__mc_keys_reserve(struct hc_mc_worker *w, unsigned n)
{
	void *k, *p, *l;

	if (n <= w->nkeys_cap)
		return 0;
	n = n < 2 * w->nkeys_cap ? 2 * w->nkeys_cap : n;
	k = realloc(w->keys, (size_t)n * sizeof(*w->keys));
	if (k)
		w->keys = k;
	p = realloc(w->keyp, (size_t)n * sizeof(*w->keyp));
	if (p)
		w->keyp = p;
	l = realloc(w->keylen, (size_t)n * sizeof(*w->keylen));
	if (l)
		w->keylen = l;
	if (!k || !p || !l)
		return -ENOMEM;
	w->nkeys_cap = n;
	return 0;
}

int hc__mc_worker_init(struct hc_mc_worker *w, struct hc_mc *be)
{
	if (!(w->mc = memcached_clone(NULL, be->tmpl)))
		return -ENOMEM;
	if (!memcached_result_create(w->mc, &w->result))
		return -ENOMEM;
	if (!(w->bounce = malloc(be->chunk_bytes)) || !(w->man = malloc(HC_MC_MANIFEST_BYTES + HC_MC_HEAD_MAX)) ||
	    !(w->jobs = calloc(be->o.batch, sizeof(*w->jobs))))
		return -ENOMEM;
	return hc__mc_keys_reserve(w, 2 * be->o.batch + 16);
}

void hc__mc_worker_fini(struct hc_mc_worker *w)
{
	if (w->mc) {
		memcached_result_free(&w->result);
		memcached_free(w->mc);
	}
	free(w->bounce);
	free(w->man);
	free(w->jobs);
	free(w->keys);
	free(w->keyp);
	free(w->keylen);
	memset(w, 0, sizeof(*w));
}

int hc__mc_errno(memcached_return_t rc)
{
	switch (rc) {
	case MEMCACHED_SUCCESS:
	case MEMCACHED_STORED:
	case MEMCACHED_DELETED:
	case MEMCACHED_END:
		return 0;
	case MEMCACHED_NOTFOUND:
		return -ENOENT;
	case MEMCACHED_E2BIG:
		return -ENOSPC; /* an item the server never takes: chunk_size is too large for it */
	case MEMCACHED_SERVER_MEMORY_ALLOCATION_FAILURE:
	case MEMCACHED_MEMORY_ALLOCATION_FAILURE:
		/* the binary protocol's ENOMEM: the server could not make room in
		 * time (a slab class starved, or -M): worth a retry */
		return -EBUSY;
	case MEMCACHED_TIMEOUT:
		return -ETIMEDOUT;
	case MEMCACHED_SERVER_MARKED_DEAD:
	case MEMCACHED_SERVER_TEMPORARILY_DISABLED:
	case MEMCACHED_NO_SERVERS:
		return -EHOSTDOWN;
	case MEMCACHED_CONNECTION_FAILURE:
	case MEMCACHED_CONNECTION_SOCKET_CREATE_FAILURE:
	case MEMCACHED_HOST_LOOKUP_FAILURE:
		return -ECONNREFUSED;
	case MEMCACHED_WRITE_FAILURE:
	case MEMCACHED_READ_FAILURE:
	case MEMCACHED_UNKNOWN_READ_FAILURE:
	case MEMCACHED_ERRNO:
		return -ECONNRESET;
	case MEMCACHED_AUTH_FAILURE:
	case MEMCACHED_AUTH_PROBLEM:
		return -EACCES;
	case MEMCACHED_BAD_KEY_PROVIDED:
		return -EINVAL;
	default:
		return -EIO;
	}
}

/* Count a failure a server gave, and say so once per cause. */
void hc__mc_server_failed(struct hc_mc *be, memcached_st *mc, memcached_return_t rc, const char *what)
{
	const memcached_instance_st *inst = memcached_server_get_last_disconnect(mc);
	char where[HC_BE_HOST_MAX + 16] = "a server";

	if (inst)
		snprintf(where, sizeof(where), "%s:%u", memcached_server_name(inst),
			 (unsigned)memcached_server_port(inst));
	HC_MC_COUNT(be, server_errors, 1);
	if (rc == MEMCACHED_TIMEOUT)
		HC_MC_COUNT(be, timeouts, 1);
	switch (rc) {
	case MEMCACHED_E2BIG:
		hc__mc_warn_once(be, HC_MC_WARN_E2BIG,
				 "%s: an item of a %s was too large for a server (chunk_size %" PRIu32
				 "): lower chunk_size= or raise memcached -I",
				 memcached_strerror(mc, rc), what, be->chunk_bytes);
		break;
	case MEMCACHED_SERVER_MEMORY_ALLOCATION_FAILURE:
	case MEMCACHED_MEMORY_ALLOCATION_FAILURE:
		hc__mc_warn_once(
			be, HC_MC_WARN_FULL,
			"a %s: a server could not make room (%s): give it more memory (memcached -m), and no -M", what,
			memcached_strerror(mc, rc));
		break;
	case MEMCACHED_AUTH_FAILURE:
	case MEMCACHED_AUTH_PROBLEM:
		hc__mc_warn_once(be, HC_MC_WARN_AUTH,
				 "a %s on %s: SASL authentication failed: check username= and password=", what, where);
		break;
	default:
		hc__mc_warn_once(be, HC_MC_WARN_SERVER,
				 "a %s on %s failed: %s (%s); its objects are misses while it fails (logged once)",
				 what, where, memcached_strerror(mc, rc), memcached_last_error_message(mc));
		break;
	}
}
