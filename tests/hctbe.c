/* SPDX-License-Identifier: Apache-2.0 */
#include <check.h>
#include <string.h>

#include "hctbe.h"

void hct_stat_emit(void *arg, const char *name, uint64_t value)
{
	struct hct_stat *s = arg;

	ck_assert_msg(name[0] && strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789_") == strlen(name),
		      "stat name '%s'", name);
	if (strcmp(name, s->name) == 0) {
		s->value = value;
		s->found++;
	}
}

uint64_t hct_stat_value(const struct hct_stat *s, int r)
{
	ck_assert_msg(r == 0, "stats: %d", r);
	ck_assert_msg(s->found == 1, "stat %s emitted %d times", s->name, s->found);
	return s->value;
}

uint64_t hct_be_stat(const struct hc_backend *be, void *inst, const char *name)
{
	struct hct_stat s = { .name = name };

	return hct_stat_value(&s, be->stats(inst, hct_stat_emit, &s));
}
