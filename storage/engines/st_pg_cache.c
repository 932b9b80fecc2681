/* st_pg_cache.c - spans, partitions and deleted keys of st_pg.c's partial
 * cache (st_pg_cache.h says what each means).
 */
#include "st_pg_cache.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "echd.h"

/* ---- bounds ----------------------------------------------------------------- */

void
pgc_bound_key(struct pgc_bound *b, const void *k, size_t len, bool after)
{
	assert(len < PGC_KEY_MAX);
	b->inf = false;
	memcpy(b->k, k, len);
	if (after) {
		b->k[len++] = 0;
	}
	b->len = (uint8_t)len;
}

void
pgc_bound_min(struct pgc_bound *b)
{
	b->inf = false;
	b->len = 0;
}

void
pgc_bound_inf(struct pgc_bound *b)
{
	b->inf = true;
	b->len = 0;
}

void
pgc_bound_part_end(struct pgc_bound *b, const void *k, size_t len)
{
	size_t n = len < PGC_PART_LEN ? len : PGC_PART_LEN;

	memcpy(b->k, k, n);
	while (n > 0 && b->k[n - 1] == 0xff) {
		n--;
	}
	if (n == 0) {
		pgc_bound_inf(b);
		return;
	}
	b->k[n - 1]++;
	b->inf = false;
	b->len = (uint8_t)n;
}

int
pgc_bound_cmp(const struct pgc_bound *a, const struct pgc_bound *b)
{
	size_t n;
	int c;

	if (a->inf || b->inf) {
		return (int)a->inf - (int)b->inf;
	}
	n = a->len < b->len ? a->len : b->len;
	c = n > 0 ? memcmp(a->k, b->k, n) : 0;
	if (c != 0) {
		return c < 0 ? -1 : 1;
	}
	return a->len < b->len ? -1 : a->len > b->len ? 1 : 0;
}

/* ---- spans ------------------------------------------------------------------ */

void
pgc_spans_clear(struct pgc_spans *s)
{
	ECHD_FREE(s->v);
	s->n = s->cap = 0;
}

/* The index of the first span whose hi is past at (s->n when none). */
static size_t
first_past(const struct pgc_spans *s, const struct pgc_bound *at)
{
	size_t lo = 0, hi = s->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (pgc_bound_cmp(&s->v[mid].hi, at) <= 0) {
			lo = mid + 1;
		} else {
			hi = mid;
		}
	}
	return lo;
}

static int
reserve(struct pgc_spans *s, size_t more)
{
	size_t cap;
	struct pgc_span *v;

	if (s->n + more <= s->cap) {
		return 0;
	}
	cap = s->cap != 0 ? s->cap * 2 : 16;
	while (cap < s->n + more) {
		cap *= 2;
	}
	v = echd_realloc(s->v, cap * sizeof(*v));
	if (v == NULL) {
		return -ENOMEM;
	}
	s->v = v;
	s->cap = cap;
	return 0;
}

int
pgc_spans_add(struct pgc_spans *s, const struct pgc_bound *lo, const struct pgc_bound *hi)
{
	struct pgc_span nw = {*lo, *hi};
	size_t i, j;

	if (pgc_bound_cmp(lo, hi) >= 0) {
		return 0;
	}
	if (reserve(s, 1) != 0) {
		return -ENOMEM;
	}
	/* the spans it meets: from the first whose hi reaches lo (touching
	 * counts) to the last whose lo is within hi */
	for (i = first_past(s, lo); i > 0 && pgc_bound_cmp(&s->v[i - 1].hi, lo) == 0; i--) {
	}
	for (j = i; j < s->n && pgc_bound_cmp(&s->v[j].lo, hi) <= 0; j++) {
		if (pgc_bound_cmp(&s->v[j].lo, &nw.lo) < 0) {
			nw.lo = s->v[j].lo;
		}
		if (pgc_bound_cmp(&s->v[j].hi, &nw.hi) > 0) {
			nw.hi = s->v[j].hi;
		}
	}
	/* spans [i, j) become nw */
	if (j == i) {
		memmove(&s->v[i + 1], &s->v[i], (s->n - i) * sizeof(*s->v));
		s->n++;
	} else if (j > i + 1) {
		memmove(&s->v[i + 1], &s->v[j], (s->n - j) * sizeof(*s->v));
		s->n -= j - i - 1;
	}
	s->v[i] = nw;
	return 0;
}

int
pgc_spans_cut(struct pgc_spans *s, const struct pgc_bound *lo, const struct pgc_bound *hi)
{
	size_t i;

	if (pgc_bound_cmp(lo, hi) >= 0) {
		return 0;
	}
	if (reserve(s, 1) != 0) {
		return -ENOMEM;
	}
	for (i = first_past(s, lo); i < s->n && pgc_bound_cmp(&s->v[i].lo, hi) < 0;) {
		struct pgc_span *sp = &s->v[i];
		bool left = pgc_bound_cmp(&sp->lo, lo) < 0, right = pgc_bound_cmp(&sp->hi, hi) > 0;

		if (left && right) {
			/* [sp.lo, lo) and [hi, sp.hi) */
			memmove(&s->v[i + 1], &s->v[i], (s->n - i) * sizeof(*s->v));
			s->n++;
			s->v[i].hi = *lo;
			s->v[i + 1].lo = *hi;
			return 0;
		}
		if (left) {
			sp->hi = *lo;
			i++;
		} else if (right) {
			sp->lo = *hi;
			return 0;
		} else {
			memmove(&s->v[i], &s->v[i + 1], (s->n - i - 1) * sizeof(*s->v));
			s->n--;
		}
	}
	return 0;
}

bool
pgc_spans_covered(const struct pgc_spans *s, const struct pgc_bound *lo,
	const struct pgc_bound *hi)
{
	size_t i;

	if (pgc_bound_cmp(lo, hi) >= 0) {
		return true;
	}
	i = first_past(s, lo);
	return i < s->n && pgc_bound_cmp(&s->v[i].lo, lo) <= 0 &&
	       pgc_bound_cmp(&s->v[i].hi, hi) >= 0;
}

void
pgc_spans_gap_after(const struct pgc_spans *s, const struct pgc_bound *at,
	struct pgc_bound *glo, struct pgc_bound *ghi)
{
	size_t i = first_past(s, at);

	*glo = *at;
	if (i < s->n && pgc_bound_cmp(&s->v[i].lo, at) <= 0) {
		*glo = s->v[i].hi; /* at is inside span i */
		i++;
	}
	if (i < s->n) {
		*ghi = s->v[i].lo;
	} else {
		pgc_bound_inf(ghi);
	}
}

void
pgc_spans_gap_before(const struct pgc_spans *s, const struct pgc_bound *at,
	struct pgc_bound *glo, struct pgc_bound *ghi)
{
	/* the span holding the points just below at: lo < at <= hi */
	size_t i = first_past(s, at);

	*ghi = *at;
	if (i > 0 && pgc_bound_cmp(&s->v[i - 1].hi, at) == 0) {
		i--;
	}
	if (i < s->n && pgc_bound_cmp(&s->v[i].lo, at) < 0) {
		*ghi = s->v[i].lo;
	}
	/* the last span wholly below ghi */
	i = first_past(s, ghi);
	while (i > 0 && pgc_bound_cmp(&s->v[i - 1].lo, ghi) >= 0) {
		i--;
	}
	if (i > 0) {
		*glo = s->v[i - 1].hi;
		if (pgc_bound_cmp(glo, ghi) > 0) {
			*glo = *ghi;
		}
	} else {
		pgc_bound_min(glo);
	}
}

/* ---- partitions ------------------------------------------------------------- */

static uint64_t
part_id(const void *k, size_t len)
{
	const unsigned char *p = k;
	uint64_t v = 0;

	for (size_t i = 0; i < PGC_PART_LEN; i++) {
		v = v << 8 | (i < len ? p[i] : 0);
	}
	return v;
}

static size_t
part_slot(uint64_t id, size_t cap)
{
	return (size_t)((id * 0x9E3779B97F4A7C15ULL) >> 17) & (cap - 1);
}

void
pgc_parts_clear(struct pgc_parts *p)
{
	ECHD_FREE(p->v);
	p->cap = p->n = 0;
}

static int
parts_grow(struct pgc_parts *p)
{
	size_t cap = p->cap != 0 ? p->cap * 2 : 64;
	struct pgc_part *v = echd_calloc(cap, sizeof(*v));

	if (v == NULL) {
		return -ENOMEM;
	}
	for (size_t i = 0; i < p->cap; i++) {
		size_t j;

		if (p->v[i].tick == 0) {
			continue;
		}
		for (j = part_slot(p->v[i].id, cap); v[j].tick != 0; j = (j + 1) & (cap - 1)) {
		}
		v[j] = p->v[i];
	}
	echd_free(p->v);
	p->v = v;
	p->cap = cap;
	return 0;
}

int
pgc_parts_touch(struct pgc_parts *p, const void *k, size_t len)
{
	uint64_t id = part_id(k, len);
	size_t j;

	if ((p->n + 1) * 2 > p->cap && parts_grow(p) != 0) {
		return -ENOMEM;
	}
	for (j = part_slot(id, p->cap); p->v[j].tick != 0; j = (j + 1) & (p->cap - 1)) {
		if (p->v[j].id == id) {
			p->v[j].tick = ++p->tick;
			return 0;
		}
	}
	p->v[j].id = id;
	p->v[j].tick = ++p->tick;
	p->n++;
	return 0;
}

bool
pgc_parts_oldest(const struct pgc_parts *p, unsigned char prefix[PGC_PART_LEN])
{
	const struct pgc_part *best = NULL;

	for (size_t i = 0; i < p->cap; i++) {
		if (p->v[i].tick != 0 && (best == NULL || p->v[i].tick < best->tick)) {
			best = &p->v[i];
		}
	}
	if (best == NULL) {
		return false;
	}
	for (size_t i = 0; i < PGC_PART_LEN; i++) {
		prefix[i] = (unsigned char)(best->id >> (8 * (PGC_PART_LEN - 1 - i)));
	}
	return true;
}

void
pgc_parts_drop(struct pgc_parts *p, const unsigned char prefix[PGC_PART_LEN])
{
	uint64_t id = part_id(prefix, PGC_PART_LEN);
	size_t j, k;

	if (p->cap == 0) {
		return;
	}
	for (j = part_slot(id, p->cap); p->v[j].tick != 0; j = (j + 1) & (p->cap - 1)) {
		if (p->v[j].id == id) {
			break;
		}
	}
	if (p->v[j].tick == 0) {
		return;
	}
	/* backward-shift deletion keeps every probe chain unbroken */
	p->v[j].tick = 0;
	p->n--;
	for (k = (j + 1) & (p->cap - 1); p->v[k].tick != 0; k = (k + 1) & (p->cap - 1)) {
		size_t home = part_slot(p->v[k].id, p->cap);
		bool move = j <= k ? (home <= j || home > k) : (home <= j && home > k);

		if (move) {
			p->v[j] = p->v[k];
			p->v[k].tick = 0;
			j = k;
		}
	}
}

/* ---- deleted keys ----------------------------------------------------------- */

#define GONE_REC (PGC_KEY_MAX + 2)

void
pgc_gone_clear(struct pgc_gone *g)
{
	g->n = 0;
	g->sorted = true;
}

void
pgc_gone_free(struct pgc_gone *g)
{
	ECHD_FREE(g->k);
	g->n = g->cap = 0;
}

static void
gone_rec(unsigned char *r, unsigned tb, const void *k, size_t len)
{
	memset(r, 0, GONE_REC);
	r[0] = (unsigned char)tb;
	r[1] = (unsigned char)len;
	memcpy(r + 2, k, len);
}

int
pgc_gone_add(struct pgc_gone *g, unsigned tb, const void *k, size_t len)
{
	if (len >= PGC_KEY_MAX) {
		return 0; /* never in a lazy table */
	}
	if (g->n == g->cap) {
		size_t cap = g->cap != 0 ? g->cap * 2 : 64;
		unsigned char *p = echd_realloc(g->k, cap * GONE_REC);

		if (p == NULL) {
			return -ENOMEM;
		}
		g->k = p;
		g->cap = cap;
	}
	gone_rec(g->k + g->n * GONE_REC, tb, k, len);
	g->n++;
	g->sorted = false;
	return 0;
}

static int
gone_cmp(const void *a, const void *b)
{
	return memcmp(a, b, GONE_REC);
}

bool
pgc_gone_has(struct pgc_gone *g, unsigned tb, const void *k, size_t len)
{
	unsigned char r[GONE_REC];

	if (g->n == 0 || len >= PGC_KEY_MAX) {
		return false;
	}
	if (!g->sorted) {
		qsort(g->k, g->n, GONE_REC, gone_cmp);
		g->sorted = true;
	}
	gone_rec(r, tb, k, len);
	return bsearch(r, g->k, g->n, GONE_REC, gone_cmp) != NULL;
}
