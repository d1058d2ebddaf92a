/* SPDX-License-Identifier: Apache-2.0 */
/*
 * file.c - a file the tools read as text (a trace, a config): a regular
 * file, or refused before anything is read.  /dev/zero or a FIFO would feed
 * a reader for ever, and a directory reads as empty.
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

/* What a path that is not a regular file is, for a message. */
static const char *kind_of(mode_t m)
{
	return S_ISDIR(m)    ? "a directory"
	       : S_ISFIFO(m) ? "a FIFO"
	       : S_ISCHR(m)  ? "a character device"
	       : S_ISBLK(m)  ? "a block device"
	       : S_ISSOCK(m) ? "a socket"
			     : "not a regular file";
}

int hc_cli_open_regular(const char *path, uint64_t max_bytes, FILE **out, const char **kind)
{
	/* O_NONBLOCK: a FIFO without a writer must not hold the open */
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC), err;
	struct stat st;

	*out = NULL;
	*kind = NULL;
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0)
		goto fail;
	if (!S_ISREG(st.st_mode) || (max_bytes && (uint64_t)st.st_size > max_bytes)) {
		*kind = S_ISREG(st.st_mode) ? NULL : kind_of(st.st_mode);
		close(fd);
		return S_ISREG(st.st_mode) ? -EFBIG : -EINVAL;
	}
	if (fcntl(fd, F_SETFL, 0) < 0 || !(*out = fdopen(fd, "r")))
		goto fail;
	return 0;
fail:
	err = errno;
	close(fd);
	return -err;
}
