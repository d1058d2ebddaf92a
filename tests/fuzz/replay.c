/* SPDX-License-Identifier: Apache-2.0 */
/*
 * replay.c - a libFuzzer harness's corpus, replayed without libFuzzer:
 * every file of $HC_SRCDIR/tests/fuzz/corpus/HC_FUZZ_CORPUS (or of the folders
 * named as arguments) through LLVMFuzzerTestOneInput, once each, so that
 * make check runs the seeds (and every crash once saved into the corpus)
 * with any compiler.  A missing or empty corpus is a failure: a replay of
 * nothing proves nothing.
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#ifndef HC_FUZZ_CORPUS
#define HC_FUZZ_CORPUS "memd" /* the harness's folder under tests/fuzz/corpus */
#endif

/* Replay every regular file of dir: how many, or -1. */
static int replay_dir(const char *dir)
{
	struct dirent **names;
	int n, count = 0;

	n = scandir(dir, &names, NULL, alphasort); /* sorted: runs are the same */
	if (n < 0) {
		fprintf(stderr, "replay: cannot read the corpus %s: %s\n", dir, strerror(errno));
		return -1;
	}
	for (int i = 0; i < n; i++) {
		char path[4096];
		struct stat sb;
		uint8_t *buf;
		FILE *f;

		if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, names[i]->d_name) >= sizeof(path)) {
			fprintf(stderr, "replay: a path in %s is too long\n", dir);
			exit(1);
		}
		free(names[i]);
		if (stat(path, &sb) < 0 || !S_ISREG(sb.st_mode))
			continue;
		if (!(f = fopen(path, "rb")) || !(buf = malloc((size_t)sb.st_size + 1)) ||
		    fread(buf, 1, (size_t)sb.st_size, f) != (size_t)sb.st_size) {
			fprintf(stderr, "replay: cannot read %s: %s\n", path, strerror(errno));
			exit(1);
		}
		fclose(f);
		LLVMFuzzerTestOneInput(buf, (size_t)sb.st_size);
		free(buf);
		count++;
	}
	free(names);
	return count;
}

int main(int argc, char **argv)
{
	const char *src = getenv("HC_SRCDIR");
	char dir[4096];
	int total = 0;

	if (argc < 2)
		snprintf(dir, sizeof(dir), "%s/tests/fuzz/corpus/" HC_FUZZ_CORPUS, src && *src ? src : ".");
	for (int i = argc < 2 ? 0 : 1; i < (argc < 2 ? 1 : argc); i++) {
		const char *d = argc < 2 ? dir : argv[i];
		int n = replay_dir(d);

		if (n < 0)
			return 1;
		if (n == 0) {
			fprintf(stderr, "replay: the corpus %s is empty: run tests/fuzz/corpus/make-corpus.py\n", d);
			return 1;
		}
		printf("replay: %d inputs of %s, no failure\n", n, d);
		total += n;
	}
	return total ? 0 : 1;
}
