/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_sealed.c - sealed pools: a memfd with no name, sealed against
 * shrinking and growing, attached by fd or handed to ranks over a Unix
 * socket (hc_pool_serve), with real processes on both ends.
 */
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hct.h"

#define NOBODY 65534

static char sock_path[108];

/* A listening socket at a fresh path under /tmp, open to every user (the
 * pool's rule, not the socket's mode, decides who gets the fd). */
static int listen_at(void)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	static int n;
	int s;

	snprintf(sock_path, sizeof(sock_path), "/tmp/hct-sock-%d-%d", (int)getpid(), n++);
	unlink(sock_path);
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", sock_path);
	s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(s, 0);
	ck_assert_int_eq(bind(s, (struct sockaddr *)&a, sizeof(a)), 0);
	ck_assert_int_eq(chmod(sock_path, 0777), 0);
	ck_assert_int_eq(listen(s, 8), 0);
	return s;
}

static int connect_to(const char *path)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
	ck_assert_int_eq(connect(s, (struct sockaddr *)&a, sizeof(a)), 0);
	return s;
}

/* A sealed pool of npages (mode and group as given); its fd. */
static int make_sealed(const char *name, uint32_t npages, mode_t mode, const char *group)
{
	struct hct_spec s;
	int fd = -1;

	hct_spec_init(&s, name, npages);
	s.spec.sealed_fd = &fd;
	s.spec.mode = mode;
	s.spec.group = group;
	ck_assert_ok(hc_pool_create(&s.spec));
	ck_assert_int_ge(fd, 0);
	return fd;
}

static int shm_entry(const char *name)
{
	char path[256];

	snprintf(path, sizeof(path), "/dev/shm/hicache.%s", name);
	return access(path, F_OK) == 0;
}

static hc_pool *attach_fd(const char *name, int fd)
{
	struct hc_attach_opts o = { .size = sizeof(o), .flags = HC_ATTACH_FD | HC_ATTACH_NO_POPULATE, .fd = fd };
	hc_pool *p = NULL;

	ck_assert_ok(hc_pool_attach(name, &o, &p));
	return p;
}

static int attach_sock(const char *name, const char *path, uint32_t ms, hc_pool **p)
{
	struct hc_attach_opts o = { .size = sizeof(o),
				    .flags = HC_ATTACH_NO_POPULATE,
				    .socket = path,
				    .socket_timeout_ms = ms };

	return hc_pool_attach(name, &o, p);
}

START_TEST(sealed_has_no_name)
{
	const char *name = hct_name();
	hc_key_t k[4];
	struct stat st;
	struct hc_pool_info in;
	int fd = make_sealed(name, 16, 0, NULL);
	int seals = fcntl(fd, F_GET_SEALS);
	hc_pool *p;

	ck_assert_int_eq(seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL),
			 F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
	ck_assert_int_eq(fcntl(fd, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
	ck_assert(!shm_entry(name));
	ck_assert_int_eq(fstat(fd, &st), 0);
	ck_assert_uint_eq(st.st_mode & 07777, 0600);
	p = attach_fd(name, fd);
	ck_assert_ok(hc_pool_info(p, &in, sizeof(in)));
	ck_assert_str_eq(in.name, name);
	char want[128];
	snprintf(want, sizeof(want), "memfd:hicache.%s", name);
	ck_assert_str_eq(in.path, want);
	ck_assert_uint_eq(in.segment_bytes, (uint64_t)st.st_size);
	hct_keys(k, 4, 7);
	ck_assert_int_eq(hct_store(p, k, 4, 0), 4);
	ck_assert_int_eq(hct_hit(p, k, 4), 4);
	/* no holder can change its size, and the pool goes on */
	ck_assert_int_eq(ftruncate(fd, st.st_size / 2), -1);
	ck_assert_int_eq(errno, EPERM);
	ck_assert_int_eq(ftruncate(fd, st.st_size * 2), -1);
	ck_assert_int_eq(errno, EPERM);
	ck_assert_int_eq(fallocate(fd, 0, st.st_size, 4096), -1);
	ck_assert_int_eq(errno, EPERM);
	ck_assert_int_eq(hct_hit(p, k, 4), 4);
	/* no name to attach or destroy: it goes with its last fd and mapping */
	hc_pool *q = NULL;
	ck_assert_err(hc_pool_attach(name, NULL, &q), ENOENT);
	ck_assert_msg(strstr(hc_last_error(), "a sealed pool, hicached's default, has no name"), "%s", hc_last_error());
	ck_assert_err(hc_pool_destroy(name, NULL, 0), ENOENT);
	ck_assert_ok(hc_pool_detach(p));
	close(fd);
	ck_assert(!shm_entry(name));
}
END_TEST

START_TEST(sealed_bad_specs)
{
	const char *name = hct_name();
	struct hct_spec s;
	int fd = -1;

	hct_spec_init(&s, name, 8);
	s.spec.sealed_fd = &fd;
	s.spec.dir = "/dev/shm";
	ck_assert_err(hc_pool_create(&s.spec), EINVAL);
	ck_assert(strstr(hc_last_error(), "in no directory"));
	ck_assert_int_eq(fd, -1);
	/* a bad geometry leaves no fd behind either */
	s.spec.dir = NULL;
	s.spec.model_id = "";
	ck_assert_err(hc_pool_create(&s.spec), EINVAL);
	ck_assert_int_eq(fd, -1);
	ck_assert(!shm_entry(name));
}
END_TEST

START_TEST(attach_refuses_unsealed)
{
	const char *name = hct_name();
	struct hct_spec s;
	char path[256];
	hc_pool *p = NULL;
	int sfd = make_sealed(name, 8, 0, NULL), fd, nfd;
	struct stat st;
	void *src;

	ck_assert_int_eq(fstat(sfd, &st), 0);
	/* the same bytes in a memfd that can be sealed but is not */
	fd = memfd_create("unsealed", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, st.st_size), 0);
	src = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, sfd, 0);
	ck_assert(src != MAP_FAILED);
	ck_assert_int_eq(pwrite(fd, src, (size_t)st.st_size, 0), st.st_size);
	munmap(src, (size_t)st.st_size);
	struct hc_attach_opts o = { .size = sizeof(o), .flags = HC_ATTACH_FD, .fd = fd };
	ck_assert_err(hc_pool_attach(name, &o, &p), EPERM);
	ck_assert_msg(strstr(hc_last_error(), "not sealed against shrinking and growing"), "%s", hc_last_error());
	/* sealed against growing only: still refused */
	ck_assert_int_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_GROW), 0);
	ck_assert_err(hc_pool_attach(name, &o, &p), EPERM);
	/* both, but open to more seals (F_SEAL_FUTURE_WRITE would fail later
	 * ranks' mappings): refused */
	ck_assert_int_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK), 0);
	ck_assert_err(hc_pool_attach(name, &o, &p), EPERM);
	ck_assert_msg(strstr(hc_last_error(), "is open to more seals"), "%s", hc_last_error());
	/* all three: the same bytes attach */
	ck_assert_int_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_SEAL), 0);
	ck_assert_ok(hc_pool_attach(name, &o, &p));
	ck_assert_ok(hc_pool_detach(p));
	close(fd);
	/* a memfd that cannot be sealed at all */
	o.fd = nfd = memfd_create("nosealing", MFD_CLOEXEC);
	ck_assert_int_eq(ftruncate(nfd, st.st_size), 0);
	ck_assert_err(hc_pool_attach(name, &o, &p), EPERM);
	close(nfd);
	/* a named pool's file is no sealed pool */
	hct_spec_init(&s, name, 8);
	ck_assert_ok(hc_pool_create(&s.spec));
	snprintf(path, sizeof(path), "/dev/shm/hicache.%s", name);
	o.fd = nfd = open(path, O_RDWR | O_CLOEXEC);
	ck_assert_int_ge(nfd, 0);
	ck_assert_err(hc_pool_attach(name, &o, &p), EPERM);
	ck_assert_msg(strstr(hc_last_error(), "not sealed"), "%s", hc_last_error());
	close(nfd);
	ck_assert_ok(hc_pool_destroy(name, NULL, 0));
	/* a closed fd; a sealed memfd that is no pool */
	o.fd = nfd;
	ck_assert_err(hc_pool_attach(name, &o, &p), EBADF);
	o.fd = memfd_create("empty", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	ck_assert_int_eq(ftruncate(o.fd, 4096), 0);
	ck_assert_int_eq(fcntl(o.fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL), 0);
	ck_assert_err(hc_pool_attach(name, &o, &p), EBADMSG);
	close(o.fd);
	/* fd and socket, or a directory, with a sealed pool */
	o.fd = sfd;
	o.socket = "/tmp/x";
	ck_assert_err(hc_pool_attach(name, &o, &p), EINVAL);
	o.socket = NULL;
	o.dir = "/dev/shm";
	ck_assert_err(hc_pool_attach(name, &o, &p), EINVAL);
	close(sfd);
	ck_assert_ptr_null(p);
}
END_TEST

/* Children that attach over the socket write what they saw here. */
struct seen {
	int attach_ret;
	int truncate_errno;
	int hits;
	char err[512];
};

/* Fork a rank that attaches name over sock_path as uid (0: ours), stores
 * keys (seed) when store, looks them up, and tries to truncate the pool. */
static pid_t rank(const char *name, uid_t uid, gid_t gid, int store, struct seen *out)
{
	pid_t pid = fork();

	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		hc_key_t k[4];
		hc_pool *p = NULL;

		if (uid && (setgroups(0, NULL) < 0 || setgid(gid) < 0 || setuid(uid) < 0))
			_exit(3);
		out->attach_ret = attach_sock(name, sock_path, 0, &p);
		snprintf(out->err, sizeof(out->err), "%s", hc_last_error());
		if (out->attach_ret < 0)
			_exit(0);
		hct_keys(k, 4, 11);
		if (store && hct_store(p, k, 4, 0) != 4)
			_exit(4);
		out->hits = hct_hit(p, k, 4);
		out->truncate_errno = ftruncate(p->fd, 4096) < 0 ? errno : 0;
		hc_pool_detach(p);
		_exit(0);
	}
	return pid;
}

static void reap(pid_t pid)
{
	int st;

	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "rank exited with status 0x%x", st);
}

START_TEST(handover_to_ranks)
{
	const char *name = hct_name();
	struct seen *a = hct_shared(2 * sizeof(*a));
	int fd = make_sealed(name, 16, 0, NULL), ls = listen_at();
	hc_pool *mine = attach_fd(name, fd);
	hc_key_t k[4];
	pid_t pid;

	/* rank A stores, then tries to truncate the pool under everyone */
	pid = rank(name, 0, 0, 1, &a[0]);
	ck_assert_ok(hc_pool_serve(ls, fd, name, 10000, 0));
	reap(pid);
	ck_assert_msg(a[0].attach_ret == 0, "%s", a[0].err);
	ck_assert_int_eq(a[0].hits, 4);
	ck_assert_int_eq(a[0].truncate_errno, EPERM);
	/* rank B and this process go on reading what A stored */
	pid = rank(name, 0, 0, 0, &a[1]);
	ck_assert_ok(hc_pool_serve(ls, fd, name, 10000, 0));
	reap(pid);
	ck_assert_msg(a[1].attach_ret == 0, "%s", a[1].err);
	ck_assert_int_eq(a[1].hits, 4);
	hct_keys(k, 4, 11);
	ck_assert_int_eq(hct_hit(mine, k, 4), 4);
	ck_assert(!shm_entry(name));
	ck_assert_ok(hc_pool_detach(mine));
	close(fd);
	close(ls);
	unlink(sock_path);
}
END_TEST

START_TEST(other_uid_refused)
{
	const char *name = hct_name();
	struct seen *a = hct_shared(sizeof(*a));
	int fd = make_sealed(name, 8, 0, NULL), ls = listen_at();
	pid_t pid = rank(name, NOBODY, NOBODY, 0, a);

	ck_assert_err(hc_pool_serve(ls, fd, name, 10000, 0), EACCES);
	ck_assert_msg(strstr(hc_last_error(), "uid 65534") && strstr(hc_last_error(), "refused"), "%s",
		      hc_last_error());
	reap(pid);
	ck_assert_int_eq(a->attach_ret, -EACCES);
	/* the rank prints who was refused and why */
	ck_assert_msg(strstr(a->err, "uid 65534 gid 65534 refused") && strstr(a->err, "belongs to uid 0"), "%s",
		      a->err);
	close(fd);
	close(ls);
	unlink(sock_path);
}
END_TEST

START_TEST(group_admitted)
{
	const char *name = hct_name();
	struct group *gr = getgrgid(NOBODY);
	struct seen *a = hct_shared(sizeof(*a));
	int fd, ls;
	pid_t pid;

	if (!gr) {
		printf("group_admitted: no group %d here; skipped\n", NOBODY);
		return;
	}
	fd = make_sealed(name, 8, 0660, gr->gr_name);
	ls = listen_at();
	pid = rank(name, NOBODY, NOBODY, 1, a);
	ck_assert_ok(hc_pool_serve(ls, fd, name, 10000, 0));
	reap(pid);
	ck_assert_msg(a->attach_ret == 0, "%s", a->err);
	ck_assert_int_eq(a->hits, 4);
	ck_assert_int_eq(a->truncate_errno, EPERM);
	close(fd);
	close(ls);
	unlink(sock_path);
}
END_TEST

/* Send bytes as a peer would, then read what the server answers. */
static pid_t peer(const char *bytes, size_t n, int wait_close, char *answer, size_t alen)
{
	pid_t pid = fork();

	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int s = connect_to(sock_path);
		ssize_t got, total = 0;

		if (n && write(s, bytes, n) != (ssize_t)n)
			_exit(3);
		if (wait_close)
			while ((got = read(s, answer + total, alen - 1 - (size_t)total)) > 0)
				total += got;
		_exit(0);
	}
	return pid;
}

START_TEST(server_bad_peers)
{
	const char *name = hct_name();
	int fd = make_sealed(name, 8, 0, NULL), ls = listen_at();
	char *answer = hct_shared(1024), junk[80];
	pid_t pid;

	/* a silent peer is cut off */
	pid = peer(NULL, 0, 1, answer, 1024);
	ck_assert_err(hc_pool_serve(ls, fd, name, 10000, 200), ETIMEDOUT);
	ck_assert_msg(strstr(hc_last_error(), "sent no whole request"), "%s", hc_last_error());
	reap(pid);
	/* garbage gets a refusal it can print */
	memset(junk, 'x', sizeof(junk));
	pid = peer(junk, sizeof(junk), 1, answer, 1024);
	ck_assert_err(hc_pool_serve(ls, fd, name, 10000, 200), EPROTO);
	ck_assert_msg(strstr(hc_last_error(), "does not speak"), "%s", hc_last_error());
	reap(pid);
	ck_assert(memmem(answer, 1024, "does not speak", 14));
	/* a silent peer with no right to the pool is refused at once: it was
	 * read first, and held the server for the whole peer_ms */
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		ssize_t got, total = 0;
		int c;
		if (setgroups(0, NULL) < 0 || setgid(NOBODY) < 0 || setuid(NOBODY) < 0)
			_exit(10);
		c = connect_to(sock_path);
		while ((got = read(c, answer + total, 1023 - (size_t)total)) > 0)
			total += got;
		_exit(0);
	}
	ck_assert_err(hc_pool_serve(ls, fd, name, 10000, 5000), EACCES);
	reap(pid);
	ck_assert(memmem(answer, 1024, "uid 65534 gid 65534 refused", 27));
	/* half a request, then a hang-up */
	pid = peer(junk, 10, 0, answer, 1024);
	ck_assert_err(hc_pool_serve(ls, fd, name, 10000, 1000), EPROTO);
	ck_assert_msg(strstr(hc_last_error(), "hung up after 10"), "%s", hc_last_error());
	reap(pid);
	/* no one comes */
	ck_assert_err(hc_pool_serve(ls, fd, name, 50, 0), ETIMEDOUT);
	ck_assert_msg(strstr(hc_last_error(), "no peer connected"), "%s", hc_last_error());
	/* what the server is given */
	ck_assert_err(hc_pool_serve(ls, fd, "bad/name", 50, 0), EINVAL);
	ck_assert_err(hc_pool_serve(ls, fd, name, 50, -1), EINVAL);
	ck_assert_err(hc_pool_serve(ls, -1, name, 50, 0), EBADF);
	ck_assert_err(hc_pool_serve(fd, fd, name, 0, 0), ENOTSOCK);
	int plain = memfd_create("plain", MFD_CLOEXEC);
	ck_assert_err(hc_pool_serve(ls, plain, name, 50, 0), EPERM);
	close(plain);
	close(fd);
	close(ls);
	unlink(sock_path);
}
END_TEST

/* A server in a child that accepts one peer and answers with reply (len
 * bytes; 0: says nothing and waits to be killed). */
static pid_t fake_server(int ls, const void *reply, size_t len)
{
	pid_t pid = fork();

	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		char req[80];
		int s = accept(ls, NULL, NULL);

		if (s < 0 || read(s, req, sizeof(req)) != (ssize_t)sizeof(req))
			_exit(3);
		if (len && write(s, reply, len) != (ssize_t)len)
			_exit(4);
		pause();
		_exit(0);
	}
	return pid;
}

static void kill_reap(pid_t pid)
{
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
}

START_TEST(client_bad_servers)
{
	const char *name = hct_name();
	int ls = listen_at(), fd = make_sealed(name, 8, 0, NULL);
	hc_pool *p = NULL;
	char reply[352];
	pid_t pid;

	/* silent */
	pid = fake_server(ls, NULL, 0);
	ck_assert_err(attach_sock(name, sock_path, 200, &p), ETIMEDOUT);
	ck_assert_msg(strstr(hc_last_error(), "sent no reply within 200 ms"), "%s", hc_last_error());
	kill_reap(pid);
	/* garbage */
	memset(reply, 'y', sizeof(reply));
	pid = fake_server(ls, reply, sizeof(reply));
	ck_assert_err(attach_sock(name, sock_path, 1000, &p), EPROTO);
	ck_assert_msg(strstr(hc_last_error(), "does not speak version 1"), "%s", hc_last_error());
	kill_reap(pid);
	/* a good header for "handed over", but no fd */
	memset(reply, 0, sizeof(reply));
	memcpy(reply, "HCRP\1\0\0\0", 8);
	snprintf(reply + 24, 72, "%s", name);
	pid = fake_server(ls, reply, sizeof(reply));
	ck_assert_err(attach_sock(name, sock_path, 1000, &p), EPROTO);
	ck_assert_msg(strstr(hc_last_error(), "without an fd"), "%s", hc_last_error());
	kill_reap(pid);
	/* a short reply, then nothing */
	pid = fake_server(ls, reply, 100);
	ck_assert_err(attach_sock(name, sock_path, 200, &p), ETIMEDOUT);
	kill_reap(pid);
	close(ls);
	/* a stale socket; none at all; a path too long */
	ck_assert_err(attach_sock(name, sock_path, 200, &p), ECONNREFUSED);
	unlink(sock_path);
	ck_assert_err(attach_sock(name, sock_path, 200, &p), ENOENT);
	ck_assert_msg(strstr(hc_last_error(), "no socket at"), "%s", hc_last_error());
	char longp[200];
	memset(longp, 'a', sizeof(longp) - 1);
	longp[0] = '/';
	longp[sizeof(longp) - 1] = 0;
	ck_assert_err(attach_sock(name, longp, 200, &p), ENAMETOOLONG);
	/* the server serves another pool */
	ls = listen_at();
	pid = fork();
	if (pid == 0)
		_exit(hc_pool_serve(ls, fd, name, 10000, 0) == -ENOENT ? 0 : 5);
	ck_assert_err(attach_sock("another-pool", sock_path, 0, &p), ENOENT);
	ck_assert_msg(strstr(hc_last_error(), "this socket serves pool"), "%s", hc_last_error());
	reap(pid);
	ck_assert_ptr_null(p);
	close(fd);
	close(ls);
	unlink(sock_path);
}
END_TEST

START_TEST(owner_dies_no_name)
{
	const char *name = hct_name();
	int ls = listen_at(), ready[2];
	hc_key_t k[4];
	hc_pool *p = NULL;
	pid_t pid;
	char c;

	ck_assert_int_eq(pipe(ready), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int fd = make_sealed(name, 16, 0, NULL);
		if (write(ready[1], "r", 1) != 1)
			_exit(3);
		for (;;)
			hc_pool_serve(ls, fd, name, -1, 0);
	}
	ck_assert_int_eq(read(ready[0], &c, 1), 1);
	ck_assert_ok(attach_sock(name, sock_path, 0, &p));
	/* the owner is killed: the pool lives on in its ranks' mappings */
	kill_reap(pid);
	hct_keys(k, 4, 3);
	ck_assert_int_eq(hct_store(p, k, 4, 0), 4);
	ck_assert_int_eq(hct_hit(p, k, 4), 4);
	ck_assert(!shm_entry(name));
	ck_assert_ok(hc_pool_detach(p));
	ck_assert(!shm_entry(name));
	close(ls);
	unlink(sock_path);
	close(ready[0]);
	close(ready[1]);
}
END_TEST

/* The service attaches a sealed pool by its fd (HC_SERVICE_FD) and
 * answers a rank; what does not go with it is refused. */
START_TEST(service_by_fd)
{
	const char *name = hct_name();
	int fd = make_sealed(name, 16, 0, NULL);
	struct hc_service_opts o = { .size = sizeof(o), .backend = hct_l3_spec, .flags = HC_SERVICE_FD, .pool_fd = fd };
	hc_service *svc = NULL;
	hc_pool *p = attach_fd(name, fd);
	hc_key_t k[4];
	hc_page_t pg[4];
	hc_req *rq;

	svc = hct_service_start(name, &o);
	ck_assert_int_eq(hc_service_probe(p, NULL), 1);
	hct_keys(k, 4, 5);
	ck_assert_int_eq(hct_store(p, k, 4, 0), 4);
	struct hc_lookup_req lq = { .size = sizeof(lq), .keys = k, .nkeys = 4, .flags = HC_LOOKUP_PIN };
	ck_assert_int_eq(hc_lookup(p, &lq, pg), 4);
	ck_assert_ok(hc_req_backup(p, pg, 4, &rq));
	ck_assert_int_eq(hc_req_wait(rq, 10000), 4);
	ck_assert_ok(hc_req_free(rq));
	for (int i = 0; i < 4; i++)
		ck_assert_ok(hc_page_unpin(p, pg[i]));
	ck_assert_ok(hc_service_stop(svc));
	/* a flag it does not know; a directory; an fd that is no pool */
	o.flags = 0x2;
	ck_assert_err(hc_service_start(name, &o, &svc), EINVAL);
	o.flags = HC_SERVICE_FD;
	o.dir = "/dev/shm";
	ck_assert_err(hc_service_start(name, &o, &svc), EINVAL);
	ck_assert_msg(strstr(hc_last_error(), "is sealed"), "%s", hc_last_error());
	o.dir = NULL;
	o.pool_fd = memfd_create("plain", MFD_CLOEXEC);
	ck_assert_err(hc_service_start(name, &o, &svc), EPERM);
	close(o.pool_fd);
	ck_assert_ok(hc_pool_detach(p));
	close(fd);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("sealed");
	TCase *tc = tcase_create("sealed");

	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, sealed_has_no_name);
	tcase_add_test(tc, sealed_bad_specs);
	tcase_add_test(tc, attach_refuses_unsealed);
	tcase_add_test(tc, handover_to_ranks);
	tcase_add_test(tc, other_uid_refused);
	tcase_add_test(tc, group_admitted);
	tcase_add_test(tc, server_bad_peers);
	tcase_add_test(tc, client_bad_servers);
	tcase_add_test(tc, owner_dies_no_name);
	tcase_add_checked_fixture(tc, hct_l3_setup, hct_l3_teardown);
	tcase_add_test(tc, service_by_fd);
	suite_add_tcase(s, tc);
	return hct_run(s);
}
