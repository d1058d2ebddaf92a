/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <execinfo.h>
#include <ftw.h>
#include <limits.h>
#include <string.h>
#include <sys/syscall.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifdef HAVE_CUDA
#include <cuda_runtime.h>
#endif
#include "hct.h"
#include "hctbe.h"

const char *hct_name(void)
{
	static char bufs[8][64];
	static unsigned n;
	char *b = bufs[n % 8];

	snprintf(b, sizeof(bufs[0]), HCT_PREFIX "%d-%u", (int)getpid(), n++);
	return b;
}

/* Is what pid made left over: its process gone, or ours when 'mine'? */
static int gone(int pid, int mine)
{
	return pid > 0 && (pid == getpid() ? mine : kill(pid, 0) != 0);
}

static void sweep_l3(int mine)
{
	DIR *d = opendir("/tmp");
	struct dirent *e;
	char path[512];
	int pid;

	while (d && (e = readdir(d)))
		if (sscanf(e->d_name, "hct-l3-%d-", &pid) == 1 && gone(pid, mine)) {
			snprintf(path, sizeof(path), "/tmp/%s", e->d_name);
			hct_rmtree(path);
		}
	if (d)
		closedir(d);
}

void hct_sweep(int mine)
{
	DIR *d = opendir("/dev/shm");
	struct dirent *e;

	sweep_l3(mine);
	if (!d)
		return;
	while ((e = readdir(d))) {
		const char *n = e->d_name;
		int pid;

		if (strncmp(n, "hicache." HCT_PREFIX, 15) == 0)
			n += 15;
		else if (strncmp(n, ".hicache." HCT_PREFIX, 16) == 0)
			n += 16;
		else
			continue;
		pid = atoi(n);
		if (!gone(pid, mine))
			continue;
		char path[512];
		snprintf(path, sizeof(path), "/dev/shm/%s", e->d_name);
		remove(path); /* a file, or the directory a bad-input test made */
	}
	closedir(d);
}

void hct_spec_init(struct hct_spec *s, const char *name, uint32_t npages)
{
	memset(s, 0, sizeof(*s));
	s->spec.size = sizeof(s->spec);
	s->comps[0] = (struct hc_component_spec){ .size = sizeof(struct hc_component_spec),
						  .name = "kv",
						  .dtype = HC_DTYPE_BF16,
						  .kind = HC_COMP_KV,
						  .sharding = HC_SHARDED,
						  .kv_heads = 4,
						  .head_bytes = 64,
						  .layers = 2 };
	s->comps[1] = (struct hc_component_spec){ .size = sizeof(struct hc_component_spec),
						  .name = "state",
						  .dtype = HC_DTYPE_F32,
						  .kind = HC_COMP_STATE,
						  .sharding = HC_REPLICATED,
						  .bytes_per_layer = 1024,
						  .layers = 2 };
	s->spec.name = name;
	s->spec.model_id = "test/model-7b";
	s->spec.page_tokens = 16;
	s->spec.tp_size = 2;
	s->spec.comps = s->comps;
	s->spec.ncomp = 2;
	s->spec.capacity_pages = npages;
	s->spec.flags = HC_CREATE_NO_POPULATE;
}

hc_pool *hct_attach(const char *name, unsigned flags)
{
	struct hc_attach_opts o = { .size = sizeof(struct hc_attach_opts), .flags = flags | HC_ATTACH_NO_POPULATE };
	hc_pool *p = NULL;
	int ret = hc_pool_attach(name, &o, &p);

	ck_assert_msg(ret == 0, "attach %s: %d %s", name, ret, hc_last_error());
	return p;
}

hc_pool *hct_create_attach(const char *name, uint32_t npages, uint32_t quarantine_ms, uint32_t max_ranks)
{
	struct hct_spec s;
	int ret;

	hct_spec_init(&s, name, npages);
	s.spec.quarantine_ms = quarantine_ms;
	s.spec.max_ranks = max_ranks;
	ret = hc_pool_create(&s.spec);
	ck_assert_msg(ret == 0, "create %s: %d %s", name, ret, hc_last_error());
	return hct_attach(name, 0);
}

static uint8_t pattern(hc_page_t page, uint32_t group_bit, unsigned comp, size_t off)
{
	uint64_t x = page * UINT64_C(0x9E3779B97F4A7C15) ^ ((uint64_t)group_bit << 7) ^ ((uint64_t)comp << 3) ^
		     (off * UINT64_C(0xff51afd7ed558ccd));
	return (uint8_t)(x ^ (x >> 29) ^ (x >> 47));
}

/* Visit every (comp, layer) run of one shard and fill or compare it. */
static int shard_runs(hc_pool *p, hc_page_t page, uint32_t group_bit, int fill)
{
	struct hc_pool_info info;
	uint32_t presence = 0;

	hc_pool_info(p, &info, sizeof(info));
	hc_page_presence(p, page, &presence);
	for (unsigned c = 0; c < info.ncomp; c++) {
		struct hc_component_info ci;
		hc_pool_component(p, c, &ci, sizeof(ci));
		if (!(presence & (1u << c)))
			continue;
		if ((ci.sharding == HC_REPLICATED) != (group_bit == HC_SHARD_REPLICATED))
			continue;
		unsigned g = group_bit == HC_SHARD_REPLICATED ? 0 : (unsigned)__builtin_ctz(group_bit);
		for (unsigned l = 0; l < ci.layers; l++) {
			uint8_t *a;
			size_t len;
			if (hc_page_addr(p, page, c, l, g, (void **)&a, &len) < 0)
				return -1;
			for (size_t i = 0; i < len; i++) {
				uint8_t want = pattern(page, group_bit, c, l * len + i);
				if (fill)
					a[i] = want;
				else if (a[i] != want)
					return -1;
			}
		}
	}
	return 0;
}

void hct_fill(hc_pool *p, hc_page_t page, uint32_t group_bit)
{
	shard_runs(p, page, group_bit, 1);
}

int hct_verify(hc_pool *p, hc_page_t page, uint32_t group_bit)
{
	return shard_runs(p, page, group_bit, 0);
}

int hct_fill_commit_all(hc_pool *p, hc_page_t page)
{
	uint32_t presence = 0, need;
	int ret = -EINVAL;

	hc_page_presence(p, page, &presence);
	need = hc_page_needed(p, presence);
	for (unsigned b = 0; b < 32; b++) {
		if (!(need & (1u << b)))
			continue;
		hct_fill(p, page, 1u << b);
		ret = hc_page_commit(p, page, 1u << b);
		if (ret < 0)
			return ret;
	}
	return ret;
}

void hct_board_put(struct hct_board *b, hc_page_t pg)
{
	for (int i = 0; i < HCT_BOARD; i++) {
		uint64_t z = 0;
		if (atomic_compare_exchange_strong(&b->slot[i], &z, pg))
			return;
	}
}

void hct_board_drop(struct hct_board *b, hc_page_t pg)
{
	for (int i = 0; i < HCT_BOARD; i++) {
		uint64_t w = pg;
		atomic_compare_exchange_strong(&b->slot[i], &w, 0);
	}
}

int hct_board_read(hc_pool *p, struct hct_board *b, unsigned *seed)
{
	hc_page_t pg = atomic_load(&b->slot[rand_r(seed) % HCT_BOARD]);
	int ret, bad;

	if (!pg)
		return 0;
	ret = hc_page_pin(p, pg);
	if (ret == -ESTALE || ret == -EAGAIN)
		return 0; /* freed or being freed since it was published */
	if (ret < 0)
		return ret;
	bad = hct_verify(p, pg, 1) || hct_verify(p, pg, 2) || hct_verify(p, pg, HC_SHARD_REPLICATED);
	if ((ret = hc_page_unpin(p, pg)) < 0)
		return ret;
	return bad ? -EBADMSG : 1;
}

void hct_perm(uint64_t *v, unsigned n, uint64_t range)
{
	for (unsigned i = 0; i < n; i++) {
		int dup;
		do {
			v[i] = (uint64_t)rand() % range;
			dup = 0;
			for (unsigned j = 0; j < i; j++)
				dup |= v[j] == v[i];
		} while (dup);
	}
}

int hct_cuda_devices(void)
{
#ifdef HAVE_CUDA
	int n = 0;

	if (cudaGetDeviceCount(&n) != cudaSuccess)
		n = 0;
	return n;
#else
	return 0;
#endif
}

double hct_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double hct_seconds(double normal)
{
	const char *q = getenv("HC_QUICK");

	return q && atoi(q) ? normal / 4 : normal;
}

const char *hct_tool(const char *name)
{
	static char path[1024];
	const char *b = getenv("HC_BUILDDIR");

	snprintf(path, sizeof(path), "%s/tools/%s", b && *b ? b : ".", name);
	return path;
}

static void slurp(int fd, char *buf, size_t len)
{
	ssize_t n = pread(fd, buf, len - 1, 0);

	buf[n > 0 ? n : 0] = 0;
	close(fd);
}

int hct_tool_run(const char *name, const char *const *args, char *out, size_t outlen, char *err, size_t errlen)
{
	const char *argv[128] = { name };
	const char *path = hct_tool(name);
	int argc = 1, fo, fe, st;
	pid_t pid;

	for (; args && args[argc - 1] && argc < 127; argc++)
		argv[argc] = args[argc - 1];
	argv[argc] = NULL;
	fo = memfd_create("tool-out", MFD_CLOEXEC);
	fe = memfd_create("tool-err", MFD_CLOEXEC);
	ck_assert_msg(fo >= 0 && fe >= 0, "memfd_create: %s", strerror(errno));
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		dup2(fo, 1);
		dup2(fe, 2);
		execv(path, (char *const *)argv);
		fprintf(stderr, "cannot run %s: %s\n", path, strerror(errno));
		_exit(127);
	}
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	slurp(fo, out, outlen);
	slurp(fe, err, errlen);
	st = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	ck_assert_msg(st != 127, "%s did not run: %s", path, err);
	return st;
}

static void quiet_log(int level, const char *msg, void *arg)
{
	(void)level;
	(void)msg;
	(void)arg;
}

int hct_run(Suite *s)
{
	SRunner *sr = srunner_create(s);
	int failed;

	hc_set_log(quiet_log, NULL);
	hct_sweep(0);
	srunner_set_fork_status(sr, CK_FORK);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	hct_sweep(1);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

void hct_keys(hc_key_t *out, unsigned n, uint32_t seed)
{
	uint32_t *tok = malloc((size_t)n * 4 * sizeof(*tok));
	uint64_t x = seed * UINT64_C(0x9E3779B97F4A7C15) + 1;

	ck_assert_ptr_nonnull(tok);
	for (unsigned i = 0; i < n * 4; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		tok[i] = (uint32_t)x;
	}
	ck_assert_int_eq(hc_key_chain(NULL, NULL, tok, (size_t)n * 4, 4, out), (int)n);
	free(tok);
}

static uint8_t key_byte(const hc_key_t key, unsigned comp, unsigned layer, unsigned group, size_t i)
{
	uint64_t x;

	memcpy(&x, key, 8);
	x ^= (uint64_t)comp << 56 ^ (uint64_t)layer << 48 ^ (uint64_t)group << 40 ^ i * UINT64_C(0x9E3779B97F4A7C15);
	x ^= x >> 31;
	return (uint8_t)(x * UINT64_C(0xff51afd7ed558ccd) >> 56);
}

int hct_key_shard(hc_pool *p, hc_page_t pg, const hc_key_t key, uint32_t bit, int fill)
{
	struct hc_pool_info info;
	uint32_t presence;

	if (hc_pool_info(p, &info, sizeof(info)) < 0 || hc_page_presence(p, pg, &presence) < 0)
		return -1;
	for (unsigned c = 0; c < info.ncomp; c++) {
		struct hc_component_info ci;
		if (!(presence & (1u << c)) || hc_pool_component(p, c, &ci, sizeof(ci)) < 0)
			continue;
		for (unsigned g = 0; g < (ci.sharding == HC_REPLICATED ? 1 : info.head_groups); g++) {
			uint32_t gb = ci.sharding == HC_REPLICATED ? HC_SHARD_REPLICATED : UINT32_C(1) << g;
			if (bit && bit != gb)
				continue;
			for (unsigned l = 0; l < ci.layers; l++) {
				uint8_t *a;
				size_t len;
				if (hc_page_addr(p, pg, c, l, g, (void **)&a, &len) < 0)
					return -1;
				for (size_t i = 0; i < len; i++) {
					uint8_t want = key_byte(key, c, l, g, i);
					if (fill)
						a[i] = want;
					else if (a[i] != want)
						return -1;
				}
			}
		}
	}
	return 0;
}

void hct_nothing(hc_pool *p, void *arg)
{
	(void)p;
	(void)arg;
}

void hct_collect(void *arg, const char *line)
{
	struct hct_lines *l = arg;
	size_t len = strlen(l->all);

	l->n++;
	snprintf(l->all + len, sizeof(l->all) - len, "%s\n", line);
}

int hct_key_bytes(hc_pool *p, hc_page_t pg, const hc_key_t key, int fill)
{
	return hct_key_shard(p, pg, key, 0, fill);
}

void hct_store_by_key(hc_pool *p, const hc_key_t *keys, unsigned n, uint32_t depth0, hc_page_t *pg)
{
	uint8_t *skip = calloc(n, 1);
	struct hc_reserve_req rr = { .size = sizeof(struct hc_reserve_req),
				     .keys = keys,
				     .nkeys = n,
				     .first_depth = depth0 };
	uint32_t pres;

	ck_assert_ptr_nonnull(skip);
	ck_assert_int_eq(hc_reserve(p, &rr, pg, skip), (int)n);
	for (unsigned i = 0; i < n; i++) {
		ck_assert_int_eq(hct_key_bytes(p, pg[i], keys[i], 1), 0);
		ck_assert_ok(hc_page_presence(p, pg[i], &pres));
		ck_assert_int_eq(hc_page_commit(p, pg[i], hc_page_needed(p, pres)), 1);
	}
	free(skip);
}

int hct_store(hc_pool *p, const hc_key_t *keys, unsigned n, uint32_t depth0)
{
	hc_page_t *pages = calloc(n, sizeof(*pages));
	uint8_t *skip = calloc(n, 1);
	struct hc_reserve_req rq = { .size = sizeof(struct hc_reserve_req),
				     .keys = keys,
				     .nkeys = n,
				     .first_depth = depth0 };
	int m = hc_reserve(p, &rq, pages, skip);

	for (unsigned i = 0; m > 0 && i < n; i++) {
		if (skip[i])
			continue;
		ck_assert_int_eq(hct_fill_commit_all(p, pages[i]), 1);
	}
	free(pages);
	free(skip);
	return m;
}

int hct_l3_exists(hc_pool *p, const hc_key_t *keys, unsigned n)
{
	hc_req *rq;
	int r;

	ck_assert_ok(hc_req_exists(p, keys, n, &rq));
	r = hc_req_wait(rq, 10000);
	ck_assert_ok(hc_req_free(rq));
	return r;
}

int hct_hit(hc_pool *p, const hc_key_t *keys, unsigned n)
{
	hc_page_t *pages = calloc(n, sizeof(*pages));
	struct hc_lookup_req rq = { .size = sizeof(struct hc_lookup_req), .keys = keys, .nkeys = n };
	int h = hc_lookup(p, &rq, pages);

	free(pages);
	return h;
}

uint64_t hct_store_stat(hc_store *st, const char *name)
{
	struct hct_stat s = { .name = name };

	ck_assert_ok(hc_store_stats(st, hct_stat_emit, &s));
	return hct_stat_value(&s, 0);
}

struct hc_stats hct_stats(hc_pool *p)
{
	struct hc_stats st;

	ck_assert_ok(hc_pool_stats(p, &st, sizeof(st)));
	return st;
}

void hct_counters(hc_pool *p, uint64_t out[HC_CTR__COUNT])
{
	struct hc_stats st = hct_stats(p);

	memcpy(out, st.counter, HC_CTR__COUNT * sizeof(out[0]));
}

uint64_t hct_counter(hc_pool *p, enum hc_counter c)
{
	uint64_t v[HC_CTR__COUNT];

	hct_counters(p, v);
	return v[c];
}

void *hct_shared(size_t bytes)
{
	void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	ck_assert_ptr_ne(m, MAP_FAILED);
	memset(m, 0, bytes);
	return m;
}

void hct_print_violation(void *arg, const char *line)
{
	(void)arg;
	fprintf(stderr, "violation: %s\n", line);
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st, (void)flag, (void)ftw;
	return remove(path);
}

void hct_mkdtemp(char *buf, size_t len, const char *tag)
{
	snprintf(buf, len, "/tmp/hct-%s-XXXXXX", tag);
	ck_assert_ptr_nonnull(mkdtemp(buf));
}

void hct_rmtree(const char *dir)
{
	if (dir[0])
		nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

char hct_l3_dir[64];
char hct_l3_spec[128];
static pid_t l3_owner; /* the process that made it: not a child that inherits the name */

static void l3_at_exit(void)
{
	if (l3_owner == getpid())
		hct_l3_teardown();
}

void hct_l3_setup(void)
{
	char tag[32];

	snprintf(tag, sizeof(tag), "l3-%d", (int)getpid());
	hct_mkdtemp(hct_l3_dir, sizeof(hct_l3_dir), tag);
	snprintf(hct_l3_spec, sizeof(hct_l3_spec), "file:dir=%s", hct_l3_dir);
	if (l3_owner != getpid())
		atexit(l3_at_exit);
	l3_owner = getpid();
}

void hct_l3_teardown(void)
{
	hct_rmtree(hct_l3_dir);
	hct_l3_dir[0] = '\0';
}

/* Service children still running: a hung rank shows where they are too. */
#define HCT_MAX_SVC 8
static pid_t svc_kids[HCT_MAX_SVC];

static void dump_stack(int sig);

pid_t hct_service_child(const char *name, const struct hc_service_opts *o)
{
	int *ready = hct_shared(sizeof(int));
	sigset_t term;
	pid_t pid;
	int st;

	sigemptyset(&term);
	sigaddset(&term, SIGTERM);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		hc_service *s;
		int sig;
		sigprocmask(SIG_BLOCK, &term, NULL);
		signal(SIGUSR2, dump_stack);
		if (hc_service_start(name, o, &s) < 0) {
			fprintf(stderr, "hct: service child: %s\n", hc_last_error());
			_exit(1);
		}
		__atomic_store_n(ready, 1, __ATOMIC_RELEASE);
		sigwait(&term, &sig);
		_exit(hc_service_stop(s) < 0 ? 2 : 0);
	}
	while (!__atomic_load_n(ready, __ATOMIC_ACQUIRE)) {
		ck_assert_msg(waitpid(pid, &st, WNOHANG) == 0, "the service child exited (status 0x%x) without serving",
			      st);
		usleep(1000);
	}
	munmap(ready, sizeof(int));
	for (unsigned i = 0; i < HCT_MAX_SVC; i++)
		if (!svc_kids[i] || kill(svc_kids[i], 0) < 0) {
			svc_kids[i] = pid;
			break;
		}
	return pid;
}

void hct_service_child_stop(pid_t pid)
{
	int st;

	kill(pid, SIGTERM);
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "service: status 0x%x", st);
}

hc_service *hct_service_start(const char *name, const struct hc_service_opts *o)
{
	hc_service *s = NULL;

	ck_assert_msg(hc_service_start(name, o, &s) == 0, "service: %s", hc_last_error());
	return s;
}

/* A hung child says where each of its threads is before it is killed. */
static void dump_stack(int sig)
{
	void *frames[48];
	char head[64];
	int n = backtrace(frames, 48), len;

	(void)sig;
	len = snprintf(head, sizeof(head), "hct: thread %d of pid %d:\n", (int)gettid(), (int)getpid());
	if (write(2, head, (size_t)len) < 0)
		return;
	backtrace_symbols_fd(frames, n, 2);
}

static void dump_task_files(pid_t pid)
{
	char path[512], line[512];
	DIR *d;
	struct dirent *e;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	if (!(d = opendir(path)))
		return;
	while ((e = readdir(d))) {
		static const char *const files[] = { "comm", "wchan", "syscall", "stack" };
		if (e->d_name[0] == '.')
			continue;
		for (unsigned i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
			FILE *f;
			snprintf(path, sizeof(path), "/proc/%d/task/%s/%s", (int)pid, e->d_name, files[i]);
			if (!(f = fopen(path, "r")))
				continue;
			while (fgets(line, sizeof(line), f))
				fprintf(stderr, "hct: %d/%s %s: %s%s", (int)pid, e->d_name, files[i], line,
					strchr(line, '\n') ? "" : "\n");
			fclose(f);
		}
		if (pid != getpid())
			syscall(SYS_tgkill, pid, atoi(e->d_name), SIGUSR2);
	}
	closedir(d);
	usleep(200000);
}

pid_t hct_spawn(const char *pool_name, void (*fn)(hc_pool *, void *), void *arg)
{
	pid_t pid = fork();

	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		hc_pool *p;
		signal(SIGUSR2, dump_stack);
		struct hc_attach_opts o = { .size = sizeof(struct hc_attach_opts), .flags = HC_ATTACH_NO_POPULATE };
		if (hc_pool_attach(pool_name, &o, &p) < 0)
			_exit(100);
		fn(p, arg);
		hc_pool_detach(p);
		_exit(0);
	}
	return pid;
}

int hct_in_child(const char *pool_name, void (*fn)(hc_pool *, void *), void *arg)
{
	return hct_wait_child(hct_spawn(pool_name, fn, arg));
}

int hct_wait_child(pid_t pid)
{
	int st;

	/* Bounded, below the test's timeout: a child that hangs is shown, with
	 * this process's threads (an embedded service), not just timed out. */
	for (int ms = 0;; ms += 10) {
		pid_t w = waitpid(pid, &st, WNOHANG);
		ck_assert_int_ge(w, 0);
		if (w == pid)
			break;
		if (ms >= HCT_CHILD_MAX_MS) {
			fprintf(stderr, "hct: child %d still runs after %d ms; where it and we are:\n", (int)pid, ms);
			dump_task_files(pid);
			for (unsigned i = 0; i < HCT_MAX_SVC; i++)
				if (svc_kids[i] && waitpid(svc_kids[i], &st, WNOHANG) == 0) {
					fprintf(stderr, "hct: and service child %d:\n", (int)svc_kids[i]);
					dump_task_files(svc_kids[i]);
				}
			dump_task_files(getpid());
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			ck_abort_msg("child %d hung for %d ms (threads shown above)", (int)pid, ms);
		}
		usleep(10000);
	}
	return st;
}

/* ---- puppets */

struct hct_puppet_ctl {
	_Atomic unsigned sent, done; /* step counters: the test's and the child's */
	_Atomic int quit;
	_Atomic int slot;
	hct_step_fn fn;
	long arg;
};

struct hct_puppet {
	pid_t pid;
	struct hct_puppet_ctl *c;
	unsigned sent;
	int gone;
};

static void puppet_main(const char *pool_name, struct hct_puppet_ctl *c)
{
	struct hc_attach_opts o = { .size = sizeof(struct hc_attach_opts), .flags = HC_ATTACH_NO_POPULATE };
	unsigned seen = 0;
	hc_pool *p;

	signal(SIGUSR2, dump_stack);
	if (hc_pool_attach(pool_name, &o, &p) < 0) {
		fprintf(stderr, "puppet: attach %s: %s\n", pool_name, hc_last_error());
		_exit(100);
	}
	atomic_store(&c->slot, p->slot);
	atomic_store(&c->done, 0);
	for (;;) {
		while (atomic_load(&c->sent) == seen && !atomic_load(&c->quit))
			usleep(50);
		if (atomic_load(&c->sent) == seen)
			break;
		seen++;
		c->fn(p, c->arg);
		atomic_store(&c->done, seen);
	}
	hc_pool_detach(p);
	_exit(0);
}

struct hct_puppet *hct_puppet(const char *pool_name)
{
	struct hct_puppet *pp = calloc(1, sizeof(*pp));

	ck_assert_ptr_nonnull(pp);
	pp->c = hct_shared(sizeof(*pp->c));
	atomic_store(&pp->c->done, UINT_MAX);
	atomic_store(&pp->c->slot, -1);
	pp->pid = fork();
	ck_assert_int_ge(pp->pid, 0);
	if (pp->pid == 0)
		puppet_main(pool_name, pp->c);
	/* Attached and waiting for its first step. */
	for (int ms = 0; atomic_load(&pp->c->done) != 0; ms++) {
		int st;
		ck_assert_msg(waitpid(pp->pid, &st, WNOHANG) == 0, "puppet %d died attaching (status %d)", (int)pp->pid,
			      st);
		ck_assert_msg(ms < HCT_CHILD_MAX_MS, "puppet %d did not attach", (int)pp->pid);
		usleep(1000);
	}
	return pp;
}

pid_t hct_puppet_pid(const struct hct_puppet *pp)
{
	return pp->pid;
}

int hct_puppet_slot(const struct hct_puppet *pp)
{
	return atomic_load(&pp->c->slot);
}

void hct_puppet_send(struct hct_puppet *pp, hct_step_fn fn, long arg)
{
	ck_assert_msg(!pp->gone, "puppet %d is gone", (int)pp->pid);
	ck_assert_uint_eq(atomic_load(&pp->c->done), pp->sent);
	pp->c->fn = fn;
	pp->c->arg = arg;
	atomic_store(&pp->c->sent, ++pp->sent);
}

void hct_puppet_wait(struct hct_puppet *pp)
{
	for (int ms10 = 0; atomic_load(&pp->c->done) != pp->sent; ms10++) {
		int st;
		pid_t w = waitpid(pp->pid, &st, WNOHANG);
		ck_assert_msg(w == 0, "puppet %d ended in step %u (status 0x%x)", (int)pp->pid, pp->sent, st);
		if (ms10 >= HCT_CHILD_MAX_MS * 10) {
			dump_task_files(pp->pid);
			kill(pp->pid, SIGKILL);
			waitpid(pp->pid, &st, 0);
			pp->gone = 1;
			ck_abort_msg("puppet %d hung in step %u", (int)pp->pid, pp->sent);
		}
		usleep(100);
	}
}

void hct_puppet_do(struct hct_puppet *pp, hct_step_fn fn, long arg)
{
	hct_puppet_send(pp, fn, arg);
	hct_puppet_wait(pp);
}

void hct_puppet_stopped(struct hct_puppet *pp)
{
	for (int ms = 0;; ms++) {
		int st;
		pid_t w = waitpid(pp->pid, &st, WNOHANG | WUNTRACED);
		ck_assert_int_ge(w, 0);
		if (w == pp->pid) {
			ck_assert_msg(WIFSTOPPED(st), "puppet %d ended (status 0x%x) before it stopped", (int)pp->pid,
				      st);
			return;
		}
		ck_assert_msg(atomic_load(&pp->c->done) != pp->sent, "puppet %d ended step %u without stopping",
			      (int)pp->pid, pp->sent);
		if (ms >= HCT_CHILD_MAX_MS) {
			kill(pp->pid, SIGKILL);
			waitpid(pp->pid, &st, 0);
			pp->gone = 1;
			ck_abort_msg("puppet %d did not stop in step %u", (int)pp->pid, pp->sent);
		}
		usleep(1000);
	}
}

void hct_puppet_cont(struct hct_puppet *pp)
{
	kill(pp->pid, SIGCONT);
}

void hct_puppet_kill(struct hct_puppet *pp)
{
	int st;

	if (pp->gone)
		return;
	kill(pp->pid, SIGKILL);
	waitpid(pp->pid, &st, 0);
	pp->gone = 1;
}

void hct_puppet_end(struct hct_puppet *pp)
{
	if (!pp->gone) {
		atomic_store(&pp->c->quit, 1);
		ck_assert_int_eq(hct_wait_child(pp->pid), 0);
		pp->gone = 1;
	}
	munmap(pp->c, sizeof(*pp->c));
	free(pp);
}

uint64_t hct_in_state(hc_pool *p, enum hc_page_state s)
{
	uint64_t n[HC_PAGE__COUNT];

	ck_assert_ok(hc_pool_count_states(p, n, HC_PAGE__COUNT));
	return n[s];
}

int hct_drained(hc_pool *p)
{
	for (int i = 0; i < 1000; i++) {
		if (hct_in_state(p, HC_PAGE_READY) == 0 && hct_in_state(p, HC_PAGE_RESERVED) == 0)
			return 1;
		usleep(10000);
	}
	fprintf(stderr, "not drained: %llu READY, %llu RESERVED\n", (unsigned long long)hct_in_state(p, HC_PAGE_READY),
		(unsigned long long)hct_in_state(p, HC_PAGE_RESERVED));
	return 0;
}

void hct_stage_write(hc_pool *p, const hc_key_t *k, unsigned n, uint32_t depth0)
{
	hc_page_t *pg = calloc(n, sizeof(*pg));
	hc_req *g, *b;

	ck_assert_ok(hc_req_stage(p, n, 0, &g));
	ck_assert_int_eq(hc_req_wait(g, 10000), (int)n);
	hct_store_by_key(p, k, n, depth0, pg);
	ck_assert_ok(hc_req_backup(p, pg, n, &b));
	ck_assert_int_eq(hc_req_wait(b, 10000), (int)n);
	ck_assert_ok(hc_req_free(b));
	ck_assert_ok(hc_req_free(g)); /* the grant goes back */
	free(pg);
}

void hct_prefetch_read(hc_pool *p, const hc_key_t *k, unsigned n, uint32_t depth0)
{
	struct hc_prefetch_req pr = { .size = sizeof(struct hc_prefetch_req),
				      .keys = k,
				      .nkeys = n,
				      .first_depth = depth0,
				      .policy = HC_PREFETCH_WAIT_COMPLETE };
	hc_page_t *pg = calloc(n, sizeof(*pg));
	hc_req *rq;

	ck_assert_ok(hc_req_prefetch(p, &pr, &rq));
	ck_assert_int_eq(hc_req_prefetch_take(rq, pg, NULL), (int)n);
	for (unsigned i = 0; i < n; i++) {
		ck_assert_int_eq(hct_key_bytes(p, pg[i], k[i], 0), 0);
		ck_assert_ok(hc_page_unpin(p, pg[i]));
	}
	ck_assert_ok(hc_req_free(rq));
	free(pg);
}
