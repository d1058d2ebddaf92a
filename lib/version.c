/* SPDX-License-Identifier: Apache-2.0 */
/* version.c - the library's version, for tools and for engines that load it. */
#include <hicache/hicache.h>

const char *hc_version(void)
{
	return HICACHE_VERSION_STRING;
}
