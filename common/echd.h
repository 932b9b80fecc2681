/* echd.h - cross-cutting helpers: error codes, allocation, logging.
 *
 * Every module may include this header; it depends on nothing but libc.
 */
#ifndef ECHD_COMMON_ECHD_H
#define ECHD_COMMON_ECHD_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ECHD_VERSION       "0.1.0"
/* What HELLO and INFO report: the Redis whose stream commands echd matches,
 * so client libraries enable them. */
#define ECHD_REDIS_VERSION "8.10.0"

/* Domain errors, at or below -1000 so they never collide with -errno. */
#define ECHD_ENOTFOUND -1000 /* key, record or entry does not exist */
#define ECHD_EPROTO    -1001 /* malformed protocol input */
#define ECHD_ECORRUPT  -1002 /* stored data fails validation */
#define ECHD_EEXIST    -1003 /* record already exists */
#define ECHD_EMAPFULL  -1004 /* storage map full; may be grown and retried */
#define ECHD_ELIMIT    -1005 /* a configured limit was reached */
#define ECHD_EINVAL    -1006 /* argument out of domain */
#define ECHD_ETOOLONG  -1007 /* a name longer than storage keys allow */
#define ECHD_ESTANDBY  -1008 /* this front end is not the active one of a shared store */
#define ECHD_EINDOUBT  -1009 /* the store was lost during a commit: its outcome is unknown */
#define ECHD_EOFFLINE  -1010 /* the store cannot be reached (reconnecting) */
#define ECHD_EWOULDFETCH -1011 /* rows not in memory yet: fetching (storage_fetch()) */

/* Returns borrowed static text for -errno values and ECHD_E* codes. */
const char *echd_strerror(int err);

/* Redis' string2ll: an optional '-', no '+', no blanks, no leading zeros,
 * within long long. Reads exactly len bytes. */
bool echd_str2ll(const char *s, size_t len, long long *out);
/* Redis' string2ull, which reads cursors and the halves of stream ids: a
 * strict decimal (as string2ll) that is not negative, or else what
 * strtoull(3) reads whole: leading white space, a sign ('-' wraps around),
 * digits to the end. s ends at len or at its first NUL, as a C string. */
bool echd_str2ull(const char *s, size_t len, uint64_t *out);

/* fsync(2) of the file or directory at path, opened with flags (O_RDONLY,
 * and O_DIRECTORY for a directory). Returns 0 or -errno. */
int echd_fsync_path(const char *path, int flags);

/* Copies a libpq URI or key=value string into out (len bytes, cut to fit)
 * with its password replaced by "(redacted)": what may be shown or logged
 * (storage-url, and a shard's server). */
void echd_url_redact(const char *url, char *out, size_t len);

/* All heap memory goes through these so tests can inject failures. */
void *echd_malloc(size_t n);
void *echd_calloc(size_t nmemb, size_t n);
void *echd_realloc(void *p, size_t n);
char *echd_strndup(const char *s, size_t n);
void echd_free(void *p);
#define ECHD_FREE(p)                                                                               \
	do {                                                                                       \
		echd_free(p);                                                                      \
		(p) = NULL;                                                                        \
	} while (0)

/* Big-endian u64 at p (8 bytes): the byte order of every stored key and
 * number, so that memcmp order is numeric order. */
static inline void
echd_put_be64(unsigned char *p, uint64_t v)
{
	for (int i = 7; i >= 0; i--) {
		p[i] = (unsigned char)v;
		v >>= 8;
	}
}

static inline uint64_t
echd_get_be64(const void *data)
{
	const unsigned char *p = data;
	uint64_t v = 0;

	for (int i = 0; i < 8; i++) {
		v = v << 8 | p[i];
	}
	return v;
}

/* Test hook: the Nth allocation from now on (1-based) fails; 0 disables. */
void echd_alloc_fail_at(unsigned long n);

enum echd_log_level {
	ECHD_LOG_DEBUG,
	ECHD_LOG_VERBOSE,
	ECHD_LOG_NOTICE,
	ECHD_LOG_WARNING,
};

/* Sink for log lines; default writes to stderr. The line has no newline. */
typedef void (*echd_log_fn)(enum echd_log_level level, const char *line, void *ud);
void echd_log_set(enum echd_log_level min, echd_log_fn fn, void *ud);
void echd_log_set_level(enum echd_log_level min);
void echd_log(enum echd_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#endif
