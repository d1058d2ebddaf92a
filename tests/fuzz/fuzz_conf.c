/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_conf.c - libFuzzer on hicached's config file (hicache.conf(5)):
 * the bytes are the file, read as 'hicached --config FILE' reads it
 * (hcd_conf_load, tools/daemon/conf.c: inih under its own line reader,
 * the option table, the pool options of tools/cli/pool.c), then, as
 * hicached does before it creates a pool, its geometry finished
 * (hc_cli_pool_finish: the components, the dtype tables).  The file is a
 * memfd reached by its /proc path: nothing is left behind.  What is taken
 * must name a pool and a backend; the errors go to /dev/null, not the
 * fuzzer's log.
 */
#include <fcntl.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tools/daemon/hicached.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int fd = -1, null_fd = -1;
	static char path[64], prog[] = "hicached", opt[] = "--config";
	char *argv[] = { prog, opt, path, NULL };
	struct hcd_conf c;
	int ret, err_fd;

	if (fd < 0) {
		if ((fd = memfd_create("hicache-fuzz-conf", MFD_CLOEXEC)) < 0 ||
		    (null_fd = open("/dev/null", O_WRONLY | O_CLOEXEC)) < 0)
			abort();
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	}
	if (ftruncate(fd, 0) < 0 || (size && pwrite(fd, data, size, 0) != (ssize_t)size))
		abort();
	optind = 0; /* getopt_long starts over */
	fflush(stderr);
	if ((err_fd = dup(STDERR_FILENO)) < 0 || dup2(null_fd, STDERR_FILENO) < 0)
		abort();
	ret = hcd_conf_load(&c, 3, argv);
	if (ret == HCD_GO && hc_cli_pool_has_geometry(&c.geo))
		hc_cli_pool_finish(&c.geo);
	fflush(stderr);
	if (dup2(err_fd, STDERR_FILENO) < 0)
		abort();
	close(err_fd);
	if (ret == HCD_GO && (!c.pool || !c.pool[0] || !c.svc.backend))
		abort(); /* taken, yet not what hicached needs to run */
	if (ret != HCD_GO && ret != HC_CLI_EXIT_USAGE)
		abort(); /* a config file is right, or a usage error */
	hcd_conf_free(&c);
	return 0;
}
