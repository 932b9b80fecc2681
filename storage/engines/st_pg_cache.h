/* st_pg_cache.h - the bookkeeping of st_pg.c's partial cache (issue 34),
 * for st_pg.c (and its unit test) only: no I/O, no libpq.
 *
 * With postgres.cache-size, the entries and nodes tables (the lazy ones)
 * are held only in part. What is known about a lazy table:
 *  - spans: key ranges [lo, hi) whose rows are all in memory, so that a
 *    key missing there is missing from the store too. Kept merged: no two
 *    overlap or touch.
 *  - parts: when each partition (a key's first 8 bytes: the model's stream
 *    id) was last used, for eviction (the least recently used first).
 *  - gone: keys deleted by commits while a fetch was out: that fetch's
 *    answer may still hold them, and must not bring them back.
 * A key of a lazy table is at most PGC_KEY_MAX - 1 bytes (the model's are
 * 24), so that "just after key k" (k + a 0 byte) fits a bound.
 */
#ifndef ECHD_STORAGE_ST_PG_CACHE_H
#define ECHD_STORAGE_ST_PG_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PGC_KEY_MAX  40
#define PGC_PART_LEN 8

/* A point between keys: before key k (k itself, after = false), just after
 * it (after = true: k + a 0 byte), the start of the key space (len 0) or
 * its end (inf). */
struct pgc_bound {
	bool inf;
	uint8_t len;
	unsigned char k[PGC_KEY_MAX];
};

/* Sets b before (after: just after) the key k of len bytes, which must be
 * below PGC_KEY_MAX bytes. */
void pgc_bound_key(struct pgc_bound *b, const void *k, size_t len, bool after);
void pgc_bound_min(struct pgc_bound *b);
void pgc_bound_inf(struct pgc_bound *b);
/* The first point past every key that begins with k's first PGC_PART_LEN
 * bytes (inf when they are all 0xff). */
void pgc_bound_part_end(struct pgc_bound *b, const void *k, size_t len);
int pgc_bound_cmp(const struct pgc_bound *a, const struct pgc_bound *b);

struct pgc_span {
	struct pgc_bound lo, hi;
};
struct pgc_spans {
	struct pgc_span *v; /* owned; sorted */
	size_t n, cap;
};

void pgc_spans_clear(struct pgc_spans *s); /* frees */
/* Adds [lo, hi), merged with what it meets. Returns 0 or -ENOMEM. */
int pgc_spans_add(struct pgc_spans *s, const struct pgc_bound *lo, const struct pgc_bound *hi);
/* Removes [lo, hi) from every span. Returns 0 or -ENOMEM. */
int pgc_spans_cut(struct pgc_spans *s, const struct pgc_bound *lo, const struct pgc_bound *hi);
/* Whether [lo, hi) lies in one span (an empty range always does). */
bool pgc_spans_covered(const struct pgc_spans *s, const struct pgc_bound *lo,
	const struct pgc_bound *hi);
/* The first gap at or after at: [*glo, *ghi) holds no span, *glo >= at. */
void pgc_spans_gap_after(const struct pgc_spans *s, const struct pgc_bound *at,
	struct pgc_bound *glo, struct pgc_bound *ghi);
/* The last gap below at: [*glo, *ghi) holds no span, *ghi <= at. */
void pgc_spans_gap_before(const struct pgc_spans *s, const struct pgc_bound *at,
	struct pgc_bound *glo, struct pgc_bound *ghi);

/* Partitions and when they were last used. */
struct pgc_part {
	uint64_t id;   /* the first 8 bytes, big-endian */
	uint64_t tick; /* 0: an empty slot */
};
struct pgc_parts {
	struct pgc_part *v; /* owned: an open-addressed table */
	size_t cap, n;
	uint64_t tick;
};

void pgc_parts_clear(struct pgc_parts *p); /* frees */
/* Marks the partition of key k used now. Returns 0 or -ENOMEM. */
int pgc_parts_touch(struct pgc_parts *p, const void *k, size_t len);
/* The least recently used partition (its first 8 bytes into prefix):
 * false when there is none. */
bool pgc_parts_oldest(const struct pgc_parts *p, unsigned char prefix[PGC_PART_LEN]);
void pgc_parts_drop(struct pgc_parts *p, const unsigned char prefix[PGC_PART_LEN]);

/* Keys (of either lazy table) deleted while a fetch was out. */
struct pgc_gone {
	unsigned char *k; /* owned: n keys of PGC_KEY_MAX + 1 bytes (table, len, key) */
	size_t n, cap;
	bool sorted;
};
void pgc_gone_clear(struct pgc_gone *g); /* forgets, keeps the memory */
void pgc_gone_free(struct pgc_gone *g);
int pgc_gone_add(struct pgc_gone *g, unsigned tb, const void *k, size_t len);
bool pgc_gone_has(struct pgc_gone *g, unsigned tb, const void *k, size_t len);

#endif
