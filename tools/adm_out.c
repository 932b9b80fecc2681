/* adm_out.c - echo-admin's output: numbers, durations, tables, JSON.
 *
 * Everything goes through stdio's stdout; errors go to stderr. Colour is
 * used only on a terminal, never with NO_COLOR set (https://no-color.org)
 * or TERM=dumb, and never in JSON.
 */
#include <errno.h>
#include <langinfo.h>
#include <locale.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "adm.h"
#include "echd.h"

#define TABLE_PROBE 100 /* rows held to size the columns */
#define TABLE_GAP   2   /* spaces between columns */
#define JSON_DEPTH  32
#define BOLD        "\033[1m"
#define RED         "\033[31m"
#define RESET       "\033[0m"

struct adm_out adm_out = {.width = 80};

static bool
color_allowed(int fd)
{
	const char *nc = getenv("NO_COLOR"), *term = getenv("TERM");

	if (nc != NULL && nc[0] != '\0') {
		return false;
	}
	if (term != NULL && strcmp(term, "dumb") == 0) {
		return false;
	}
	return isatty(fd) == 1;
}

void
adm_out_init(bool json, int color_mode)
{
	struct winsize ws;
	const char *cs;

	setlocale(LC_CTYPE, "");
	cs = nl_langinfo(CODESET);
	adm_out.utf8 = cs != NULL && (strcasecmp(cs, "UTF-8") == 0 || strcasecmp(cs, "utf8") == 0);
	adm_out.json = json;
	adm_out.color = !json && color_mode != 0 && color_allowed(STDOUT_FILENO);
	adm_out.color2 = color_mode != 0 && color_allowed(STDERR_FILENO);
	adm_out.width = 80;
	if (isatty(STDOUT_FILENO) == 1 && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 &&
		ws.ws_col >= 40) {
		adm_out.width = ws.ws_col;
	}
}

int64_t
adm_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* "echo-admin: message", the message in red on a terminal. */
int
adm_err(int code, const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	fputs(adm_out.color2 ? "echo-admin: " RED : "echo-admin: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs(adm_out.color2 ? RESET "\n" : "\n", stderr);
	return code;
}

/* ---- formatting ----------------------------------------------------------- */

char *
adm_fmt_count(char *buf, uint64_t v)
{
	char tmp[32];
	int n = snprintf(tmp, sizeof(tmp), "%llu", (unsigned long long)v);
	size_t o = 0;

	for (int i = 0; i < n; i++) {
		if (i > 0 && (n - i) % 3 == 0) {
			buf[o++] = ',';
		}
		buf[o++] = tmp[i];
	}
	buf[o] = '\0';
	return buf;
}

char *
adm_fmt_duration(char *buf, int64_t ms)
{
	long long s = ms / 1000;

	if (ms < 0) {
		strcpy(buf, "-");
	} else if (ms < 1000) {
		snprintf(buf, 32, "%lldms", (long long)ms);
	} else if (s < 60) {
		snprintf(buf, 32, "%llds", s);
	} else if (s < 3600) {
		snprintf(buf, 32, "%lldm%llds", s / 60, s % 60);
	} else if (s < 86400) {
		snprintf(buf, 32, "%lldh%lldm", s / 3600, s / 60 % 60);
	} else {
		snprintf(buf, 32, "%lldd%lldh", s / 86400, s / 3600 % 24);
	}
	return buf;
}

char *
adm_fmt_bytes(char *buf, uint64_t v)
{
	static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
	double d = (double)v;
	size_t u = 0;

	while (d >= 1024 && u + 1 < sizeof(units) / sizeof(units[0])) {
		d /= 1024;
		u++;
	}
	if (u == 0) {
		snprintf(buf, 32, "%llu B", (unsigned long long)v);
	} else {
		snprintf(buf, 32, "%.1f %s", d, units[u]);
	}
	return buf;
}

char *
adm_fmt_id(char *buf, const struct stream_id *id)
{
	stream_id_format(id, buf);
	return buf;
}

/* ---- strings ---------------------------------------------------------------- */

static void
str_reserve(struct adm_str *s, size_t more)
{
	size_t cap;
	char *p;

	if (s->len + more + 1 <= s->cap) {
		return;
	}
	cap = s->cap ? s->cap : 64;
	while (cap < s->len + more + 1) {
		cap *= 2;
	}
	p = echd_realloc(s->p, cap);
	if (p == NULL) {
		/* a CLI out of memory has nothing better to do */
		adm_err(ADM_EXIT_FAILED, "out of memory");
		exit(ADM_EXIT_FAILED);
	}
	s->p = p;
	s->cap = cap;
}

void
adm_str_add(struct adm_str *s, const char *p, size_t n)
{
	str_reserve(s, n);
	memcpy(s->p + s->len, p, n);
	s->len += n;
	s->p[s->len] = '\0';
}

void
adm_str_addf(struct adm_str *s, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0) {
		return;
	}
	str_reserve(s, (size_t)n);
	va_start(ap, fmt);
	vsnprintf(s->p + s->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	s->len += (size_t)n;
}

/* Length of the valid UTF-8 sequence at p (2-4 bytes), or 0. */
static size_t
utf8_seq(const unsigned char *p, size_t n)
{
	size_t len;
	uint32_t cp;

	if (p[0] >= 0xc2 && p[0] <= 0xdf) {
		len = 2;
		cp = p[0] & 0x1f;
	} else if (p[0] >= 0xe0 && p[0] <= 0xef) {
		len = 3;
		cp = p[0] & 0x0f;
	} else if (p[0] >= 0xf0 && p[0] <= 0xf4) {
		len = 4;
		cp = p[0] & 0x07;
	} else {
		return 0;
	}
	if (n < len) {
		return 0;
	}
	for (size_t i = 1; i < len; i++) {
		if ((p[i] & 0xc0) != 0x80) {
			return 0;
		}
		cp = (cp << 6) | (p[i] & 0x3f);
	}
	if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
		(cp >= 0xd800 && cp <= 0xdfff)) {
		return 0;
	}
	return len;
}

void
adm_str_add_escaped(struct adm_str *s, const void *data, size_t n)
{
	const unsigned char *p = data;
	size_t i = 0;

	while (i < n) {
		size_t l;
		if (p[i] >= 0x20 && p[i] < 0x7f) {
			if (p[i] == '\\') {
				adm_str_add(s, "\\\\", 2);
			} else {
				adm_str_add(s, (const char *)p + i, 1);
			}
			i++;
		} else if (p[i] >= 0x80 && adm_out.utf8 && (l = utf8_seq(p + i, n - i)) > 0) {
			adm_str_add(s, (const char *)p + i, l);
			i += l;
		} else {
			adm_str_addf(s, "\\x%02x", p[i]);
			i++;
		}
	}
	if (s->p == NULL) {
		adm_str_add(s, "", 0);
	}
}

void
adm_str_clear(struct adm_str *s)
{
	s->len = 0;
	if (s->p != NULL) {
		s->p[0] = '\0';
	}
}

void
adm_str_finish(struct adm_str *s)
{
	ECHD_FREE(s->p);
	s->len = 0;
	s->cap = 0;
}

/* ---- tables ----------------------------------------------------------------- */

struct adm_table {
	const struct adm_col *cols;
	size_t ncols;
	char **held; /* nheld rows of ncols cells */
	size_t nheld;
	size_t *w;
	bool sized;
};

/* Columns a string takes: one per code point (escaping made it printable). */
static size_t
display_width(const char *s)
{
	size_t w = 0;

	for (; *s != '\0'; s++) {
		w += ((unsigned char)*s & 0xc0) != 0x80;
	}
	return w;
}

struct adm_table *
adm_table_create(const struct adm_col *cols, size_t ncols)
{
	struct adm_table *t = echd_calloc(1, sizeof(*t));

	if (t == NULL) {
		return NULL;
	}
	t->cols = cols;
	t->ncols = ncols;
	t->held = echd_calloc(TABLE_PROBE * ncols, sizeof(char *));
	t->w = echd_calloc(ncols, sizeof(size_t));
	if (t->held == NULL || t->w == NULL) {
		echd_free(t->held);
		echd_free(t->w);
		echd_free(t);
		return NULL;
	}
	return t;
}

static void
put_cell(const struct adm_table *t, size_t i, const char *cell)
{
	const struct adm_col *c = &t->cols[i];
	size_t w = display_width(cell), width = t->w[i];
	bool last = i + 1 == t->ncols;

	if (i > 0) {
		printf("%*s", TABLE_GAP, "");
	}
	if (w > width && (c->flags & ADM_FLEX)) {
		/* keep width-1 code points, then the ellipsis */
		size_t keep = 0, cps = 0;
		while (cell[keep] != '\0') {
			if (((unsigned char)cell[keep] & 0xc0) != 0x80) {
				if (cps == width - 1) {
					break;
				}
				cps++;
			}
			keep++;
		}
		printf("%.*s%s", (int)keep, cell, adm_out.utf8 ? "\u2026" : "~");
		return;
	}
	if (w >= width) {
		fputs(cell, stdout);
	} else if (c->flags & ADM_RIGHT) {
		printf("%*s%s", (int)(width - w), "", cell);
	} else if (last) {
		fputs(cell, stdout);
	} else {
		printf("%s%*s", cell, (int)(width - w), "");
	}
}

static void
put_row(const struct adm_table *t, const char *const *cells)
{
	for (size_t i = 0; i < t->ncols; i++) {
		put_cell(t, i, cells[i] != NULL ? cells[i] : "");
	}
	putchar('\n');
}

/* Sizes the columns from the titles and the held rows, shrinking flexible
 * columns (the widest first) until the table fits the terminal. */
static void
table_size(struct adm_table *t)
{
	size_t total = TABLE_GAP * (t->ncols - 1);

	for (size_t i = 0; i < t->ncols; i++) {
		t->w[i] = display_width(t->cols[i].title);
		for (size_t r = 0; r < t->nheld; r++) {
			size_t w = display_width(t->held[r * t->ncols + i]);
			if (w > t->w[i]) {
				t->w[i] = w;
			}
		}
		total += t->w[i];
	}
	while (total > adm_out.width) {
		size_t best = t->ncols;
		for (size_t i = 0; i < t->ncols; i++) {
			size_t min = t->cols[i].min > 2 ? t->cols[i].min : 2;
			if ((t->cols[i].flags & ADM_FLEX) && t->w[i] > min &&
				(best == t->ncols || t->w[i] > t->w[best])) {
				best = i;
			}
		}
		if (best == t->ncols) {
			break;
		}
		t->w[best]--;
		total--;
	}
	t->sized = true;
	if (adm_out.color) {
		fputs(BOLD, stdout);
	}
	for (size_t i = 0; i < t->ncols; i++) {
		put_cell(t, i, t->cols[i].title);
	}
	if (adm_out.color) {
		fputs(RESET, stdout);
	}
	putchar('\n');
	for (size_t r = 0; r < t->nheld; r++) {
		put_row(t, (const char *const *)&t->held[r * t->ncols]);
		for (size_t i = 0; i < t->ncols; i++) {
			ECHD_FREE(t->held[r * t->ncols + i]);
		}
	}
	t->nheld = 0;
}

int
adm_table_row(struct adm_table *t, const char *const *cells)
{
	if (t->sized) {
		put_row(t, cells);
		return 0;
	}
	for (size_t i = 0; i < t->ncols; i++) {
		const char *c = cells[i] != NULL ? cells[i] : "";
		char *d = echd_strndup(c, strlen(c));
		if (d == NULL) {
			return -ENOMEM;
		}
		t->held[t->nheld * t->ncols + i] = d;
	}
	if (++t->nheld == TABLE_PROBE) {
		table_size(t);
	}
	return 0;
}

void
adm_table_end(struct adm_table *t)
{
	if (t == NULL) {
		return;
	}
	if (!t->sized) {
		table_size(t);
	}
	echd_free(t->held);
	echd_free(t->w);
	echd_free(t);
	fflush(stdout);
}

/* ---- JSON ------------------------------------------------------------------- */

static struct {
	int depth;
	bool first[JSON_DEPTH];
	bool after_key;
} js;

/* The separator before a value (or key) at the current level. */
static void
json_sep(void)
{
	if (js.after_key) {
		js.after_key = false;
		return;
	}
	if (js.depth > 0) {
		if (!js.first[js.depth - 1]) {
			putchar(',');
		}
		js.first[js.depth - 1] = false;
	}
}

static void
json_open(char c)
{
	json_sep();
	putchar(c);
	if (js.depth < JSON_DEPTH) {
		js.first[js.depth] = true;
	}
	js.depth++;
}

void
adm_json_obj(void)
{
	json_open('{');
}

void
adm_json_arr(void)
{
	json_open('[');
}

void
adm_json_obj_end(void)
{
	js.depth--;
	putchar('}');
}

void
adm_json_arr_end(void)
{
	js.depth--;
	putchar(']');
}

/* Strings are UTF-8; a byte that is not part of valid UTF-8 is written as
 * the code point of the same value (\u00XX), so any binary name survives
 * as valid JSON. */
static void
json_string(const void *data, size_t n)
{
	const unsigned char *p = data;
	size_t i = 0;

	putchar('"');
	while (i < n) {
		unsigned char c = p[i];
		size_t l;
		if (c == '"' || c == '\\') {
			printf("\\%c", c);
			i++;
		} else if (c == '\n') {
			fputs("\\n", stdout);
			i++;
		} else if (c == '\t') {
			fputs("\\t", stdout);
			i++;
		} else if (c == '\r') {
			fputs("\\r", stdout);
			i++;
		} else if (c < 0x20 || c == 0x7f) {
			printf("\\u%04x", c);
			i++;
		} else if (c < 0x80) {
			putchar(c);
			i++;
		} else if ((l = utf8_seq(p + i, n - i)) > 0) {
			fwrite(p + i, 1, l, stdout);
			i += l;
		} else {
			printf("\\u%04x", c);
			i++;
		}
	}
	putchar('"');
}

void
adm_json_key(const char *k)
{
	json_sep();
	json_string(k, strlen(k));
	putchar(':');
	js.after_key = true;
}

void
adm_json_str(const void *p, size_t n)
{
	json_sep();
	json_string(p, n);
}

void
adm_json_cstr(const char *s)
{
	if (s == NULL) {
		adm_json_null();
		return;
	}
	adm_json_str(s, strlen(s));
}

void
adm_json_int(int64_t v)
{
	json_sep();
	printf("%lld", (long long)v);
}

void
adm_json_uint(uint64_t v)
{
	json_sep();
	printf("%llu", (unsigned long long)v);
}

void
adm_json_bool(bool v)
{
	json_sep();
	fputs(v ? "true" : "false", stdout);
}

void
adm_json_null(void)
{
	json_sep();
	fputs("null", stdout);
}

/* JSON's number grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? */
static bool
json_number_ok(const char *s)
{
	if (*s == '-') {
		s++;
	}
	if (*s == '0') {
		s++;
	} else if (*s >= '1' && *s <= '9') {
		while (*s >= '0' && *s <= '9') {
			s++;
		}
	} else {
		return false;
	}
	if (*s == '.') {
		s++;
		if (*s < '0' || *s > '9') {
			return false;
		}
		while (*s >= '0' && *s <= '9') {
			s++;
		}
	}
	if (*s == 'e' || *s == 'E') {
		s++;
		if (*s == '+' || *s == '-') {
			s++;
		}
		if (*s < '0' || *s > '9') {
			return false;
		}
		while (*s >= '0' && *s <= '9') {
			s++;
		}
	}
	return *s == '\0';
}

void
adm_json_number(const char *text)
{
	if (!json_number_ok(text)) {
		adm_json_cstr(text);
		return;
	}
	json_sep();
	fputs(text, stdout);
}

void
adm_json_id(const struct stream_id *id)
{
	char buf[48];

	adm_json_cstr(adm_fmt_id(buf, id));
}

void
adm_json_done(void)
{
	putchar('\n');
	fflush(stdout);
	js.depth = 0;
	js.after_key = false;
}

/* ---- parsing helpers ---------------------------------------------------------- */

bool
adm_parse_u64(const char *s, uint64_t *out)
{
	uint64_t v = 0;

	if (*s == '\0') {
		return false;
	}
	for (; *s != '\0'; s++) {
		unsigned d;
		if (*s < '0' || *s > '9') {
			return false;
		}
		d = (unsigned)(*s - '0');
		if (v > (UINT64_MAX - d) / 10) {
			return false;
		}
		v = v * 10 + d;
	}
	*out = v;
	return true;
}

bool
adm_parse_duration(const char *s, int64_t *out)
{
	static const struct {
		const char *unit;
		int64_t ms;
	} units[] = {
		/* "ms" before "m" */
		{"ms", 1},
		{"s", 1000},
		{"m", 60000},
		{"h", 3600000},
		{"d", 86400000},
	};
	int64_t total = 0;
	bool any = false;

	while (*s != '\0') {
		uint64_t v = 0;
		const char *d = s;
		size_t i;

		while (*s >= '0' && *s <= '9') {
			if (v > (uint64_t)INT64_MAX / 10) {
				return false;
			}
			v = v * 10 + (uint64_t)(*s - '0');
			s++;
		}
		if (s == d) {
			return false;
		}
		if (*s == '\0') {
			if (any) {
				return false; /* "1h30" is ambiguous */
			}
			*out = (int64_t)v;
			return v <= (uint64_t)INT64_MAX;
		}
		for (i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
			size_t l = strlen(units[i].unit);
			if (strncmp(s, units[i].unit, l) == 0) {
				break;
			}
		}
		if (i == sizeof(units) / sizeof(units[0])) {
			return false;
		}
		if (v > (uint64_t)(INT64_MAX - total) / (uint64_t)units[i].ms) {
			return false;
		}
		total += (int64_t)v * units[i].ms;
		s += strlen(units[i].unit);
		any = true;
	}
	if (!any) {
		return false;
	}
	*out = total;
	return true;
}
