/* echd.c - error strings, allocator hooks and the log sink. */
#include "echd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static unsigned long alloc_fail_at;

void
echd_alloc_fail_at(unsigned long n)
{
	alloc_fail_at = n;
}

/* True when this allocation is the one a test asked to fail. */
static int
alloc_should_fail(void)
{
	if (alloc_fail_at == 0) {
		return 0;
	}
	if (--alloc_fail_at == 0) {
		return 1;
	}
	return 0;
}

void *
echd_malloc(size_t n)
{
	return alloc_should_fail() ? NULL : malloc(n);
}

void *
echd_calloc(size_t nmemb, size_t n)
{
	return alloc_should_fail() ? NULL : calloc(nmemb, n);
}

void *
echd_realloc(void *p, size_t n)
{
	return alloc_should_fail() ? NULL : realloc(p, n);
}

char *
echd_strndup(const char *s, size_t n)
{
	char *d = echd_malloc(n + 1);
	if (d == NULL) {
		return NULL;
	}
	memcpy(d, s, n);
	d[n] = '\0';
	return d;
}

void
echd_free(void *p)
{
	free(p);
}

const char *
echd_strerror(int err)
{
	switch (err) {
	case 0:
		return "success";
	case ECHD_ENOTFOUND:
		return "not found";
	case ECHD_EPROTO:
		return "protocol error";
	case ECHD_ECORRUPT:
		return "stored data is corrupt";
	case ECHD_EEXIST:
		return "already exists";
	case ECHD_EMAPFULL:
		return "storage map is full";
	case ECHD_ELIMIT:
		return "limit reached";
	case ECHD_EINVAL:
		return "invalid argument";
	case ECHD_ETOOLONG:
		return "name too long";
	}
	if (err < 0 && err > -4096) {
		return strerror(-err);
	}
	return "unknown error";
}

static enum echd_log_level log_min = ECHD_LOG_NOTICE;
static echd_log_fn log_fn;
static void *log_ud;

void
echd_log_set(enum echd_log_level min, echd_log_fn fn, void *ud)
{
	log_min = min;
	log_fn = fn;
	log_ud = ud;
}

void
echd_log_set_level(enum echd_log_level min)
{
	log_min = min;
}

void
echd_log(enum echd_log_level level, const char *fmt, ...)
{
	char line[1024];
	va_list ap;

	if (level < log_min) {
		return;
	}
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (log_fn != NULL) {
		log_fn(level, line, log_ud);
		return;
	}
	fprintf(stderr, "%s\n", line);
}
