/* echd.c - error strings, allocator hooks, the log sink and fsync by path. */
#include "echd.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

int
echd_fsync_path(const char *path, int flags)
{
	int fd = open(path, flags | O_CLOEXEC), rc = 0;

	if (fd < 0) {
		return -errno;
	}
	if (fsync(fd) != 0) {
		rc = -errno;
	}
	close(fd);
	return rc;
}

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
	case ECHD_ESTANDBY:
		return "not the active front end of the shared store";
	case ECHD_EINDOUBT:
		return "connection to the store lost during commit: outcome unknown";
	case ECHD_EOFFLINE:
		return "the store cannot be reached";
	case ECHD_EWOULDFETCH:
		return "rows not in memory yet: being fetched";
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

bool
echd_str2ll(const char *s, size_t len, long long *out)
{
	unsigned long long v = 0;
	size_t i = 0;
	bool neg = false;

	if (len == 0 || len > 20) {
		return false;
	}
	if (len == 1 && s[0] == '0') {
		*out = 0;
		return true;
	}
	if (s[0] == '-') {
		neg = true;
		i = 1;
	}
	if (i == len || s[i] < '1' || s[i] > '9') {
		return false;
	}
	if (len - i <= 18) {
		/* under 10^18: no overflow to check for (RESP's lengths) */
		for (; i < len; i++) {
			unsigned d = (unsigned)(s[i] - '0');
			if (d > 9) {
				return false;
			}
			v = v * 10 + d;
		}
	}
	for (; i < len; i++) {
		unsigned d = (unsigned)(s[i] - '0');
		if (d > 9 || v > (ULLONG_MAX - d) / 10) {
			return false;
		}
		v = v * 10 + d;
	}
	if (neg ? v > (unsigned long long)LLONG_MAX + 1 : v > (unsigned long long)LLONG_MAX) {
		return false;
	}
	*out = neg ? (long long)(0 - v) : (long long)v;
	return true;
}

bool
echd_str2ull(const char *s, size_t len, uint64_t *out)
{
	const char *nul = memchr(s, '\0', len);
	unsigned long long v = 0;
	long long ll;
	size_t i = 0, digits;
	bool neg = false;

	if (nul != NULL) {
		len = (size_t)(nul - s);
	}
	if (echd_str2ll(s, len, &ll)) {
		if (ll < 0) {
			return false;
		}
		*out = (uint64_t)ll;
		return true;
	}
	/* strtoull(s, &end, 10), and then end must be the end of s */
	while (i < len && (s[i] == ' ' || (s[i] >= '\t' && s[i] <= '\r'))) {
		i++;
	}
	if (i < len && (s[i] == '+' || s[i] == '-')) {
		neg = s[i] == '-';
		i++;
	}
	for (digits = 0; i < len && s[i] >= '0' && s[i] <= '9'; i++, digits++) {
		unsigned d = (unsigned)(s[i] - '0');
		if (v > (ULLONG_MAX - d) / 10) {
			return false; /* ERANGE */
		}
		v = v * 10 + d;
	}
	if (digits == 0 || i != len) {
		return false;
	}
	*out = neg ? (uint64_t)(0 - v) : (uint64_t)v;
	return true;
}

/* Appends s[0..n) to out at *o, cut to fit. */
static void
url_put(char *out, size_t len, size_t *o, const char *s, size_t n)
{
	if (*o + 1 >= len) {
		return;
	}
	if (n > len - 1 - *o) {
		n = len - 1 - *o;
	}
	memcpy(out + *o, s, n);
	*o += n;
	out[*o] = '\0';
}

void
echd_url_redact(const char *url, char *out, size_t len)
{
	static const char mask[] = "(redacted)";
	const char *p = url, *scheme = strstr(url, "://");
	size_t o = 0;

	if (len == 0) {
		return;
	}
	out[0] = '\0';
	if (scheme != NULL) {
		/* postgresql://user:secret@host...: the userinfo's password */
		const char *auth = scheme + 3, *end = auth + strcspn(auth, "/?#"), *at = NULL;
		for (const char *q = auth; q < end; q++) {
			at = *q == '@' ? q : at;
		}
		const char *colon = at != NULL ? memchr(auth, ':', (size_t)(at - auth)) : NULL;
		if (colon != NULL) {
			url_put(out, len, &o, url, (size_t)(colon + 1 - url));
			url_put(out, len, &o, mask, sizeof(mask) - 1);
			p = at;
		}
	}
	/* password=secret and sslpassword=secret (a client key's), as a
	 * key=value word or a URI parameter */
	while (*p) {
		const char *k = p;
		bool start = k == url || strchr(" \t?&", k[-1]) != NULL;
		size_t kl = start && strncasecmp(k, "ssl", 3) == 0 ? 3 : 0;
		if (start && strncasecmp(k + kl, "password", 8) == 0) {
			const char *v = k + kl + 8;
			while (*v == ' ' || *v == '\t') {
				v++;
			}
			if (*v == '=') {
				v++;
				while (*v == ' ' || *v == '\t') {
					v++;
				}
				url_put(out, len, &o, p, (size_t)(v - p));
				url_put(out, len, &o, mask, sizeof(mask) - 1);
				if (*v == '\'') {
					for (v++; *v && *v != '\''; v++) {
						v += v[0] == '\\' && v[1] != '\0';
					}
					v += *v == '\'';
				} else {
					v += strcspn(v, scheme != NULL ? "&#" : " \t");
				}
				p = v;
				continue;
			}
		}
		url_put(out, len, &o, p, 1);
		p++;
	}
}
