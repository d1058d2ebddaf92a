/* SPDX-License-Identifier: Apache-2.0 */
/*
 * error.c - the tools' last error: a line that names what was wrong, set
 * by hc_cli_fail and read by hc_cli_error.  Alone in its file: readers
 * that need nothing else of the tools (the trace reader, and its fuzzer)
 * take it without the library.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

static __thread char cli_error[512];

const char *hc_cli_error(void)
{
	return cli_error[0] ? cli_error : "no error";
}

int hc_cli_fail(int err, const char *fmt, ...)
{
	char msg[sizeof(cli_error)];
	va_list ap;

	/* format into a copy: callers may pass hc_cli_error() as an argument */
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	memcpy(cli_error, msg, sizeof(cli_error));
	return -err;
}
