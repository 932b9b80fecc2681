/* idmp_collide.c - crafts two XADD IDMPAUTO messages that shared an iid
 * under echd's unkeyed iid of before issue 35, for tests/integration/25-idmp.py
 * (which then proves they no longer share one).
 *
 * That iid was a sum over the pairs of unkeyed 128-bit hashes (two 64-bit
 * lanes, each added mod 2^64), so finding two messages with equal sums is
 * Wagner's generalised birthday problem: 2048 lists of 2048 candidate
 * pairs (list j is field "kJJJJ" with values "<salt>.<i>"), the first 1024
 * lists for message 1, the other 1024 negated for message 2, merged in a
 * binary tree that zeroes 11 more bits of the difference at each of its 11
 * levels (the last: the remaining 18). About 2^22 hashes and 10 MB.
 *
 * Prints two lines, message 1 and message 2, each "field value field
 * value ..." (ASCII, no spaces inside), and exits 0 once it has checked
 * that the old iid of both is the same. Exit 1 when it found none.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LEVELS  11
#define NLISTS  (1u << LEVELS)
#define LSIZE   2048u
#define CAP     (2 * LSIZE)
#define WINDOW  11

/* ---- the old iid (stream_idmp.c before issue 35) ---------------------- */

static uint64_t
mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebULL;
	x ^= x >> 31;
	return x;
}

static uint64_t
hash_bytes(const unsigned char *p, size_t n, uint64_t seed)
{
	uint64_t h = mix64(seed ^ ((uint64_t)n * 0x9e3779b97f4a7c15ULL));

	while (n >= 8) {
		uint64_t w = 0;
		for (int i = 7; i >= 0; i--) {
			w = (w << 8) | p[i];
		}
		h = mix64(h ^ w) + 0x632be59bd9b4e019ULL;
		p += 8;
		n -= 8;
	}
	if (n > 0) {
		uint64_t w = 0;
		for (size_t i = n; i > 0; i--) {
			w = (w << 8) | p[i - 1];
		}
		h = mix64(h ^ w ^ ((uint64_t)n << 56));
	}
	return mix64(h);
}

/* One pair's two terms of the old sums. */
static void
pair_terms(const char *f, const char *v, uint64_t *a, uint64_t *b)
{
	size_t fl = strlen(f), vl = strlen(v);
	uint64_t f1 = hash_bytes((const unsigned char *)f, fl, 0xa4093822299f31d0ULL);
	uint64_t v1 = hash_bytes((const unsigned char *)v, vl, 0x082efa98ec4e6c89ULL);
	uint64_t f2 = hash_bytes((const unsigned char *)f, fl, 0x452821e638d01377ULL);
	uint64_t v2 = hash_bytes((const unsigned char *)v, vl, 0xbe5466cf34e90c6cULL);

	*a = mix64(f1 ^ ((v1 << 17) | (v1 >> 47)));
	*b = mix64(f2 + v2 * 0xc0ac29b7c97c50ddULL);
}

/* ---- the tree ----------------------------------------------------------- */

static unsigned salt;

static void
field_of(unsigned list, char *f)
{
	snprintf(f, 16, "k%04u", list);
}

static void
value_of(unsigned idx, char *v)
{
	snprintf(v, 32, "%u.%u", salt, idx);
}

/* A list at some level: n items, each two lane sums and the leaf index it
 * took in each of its 2^level lists. */
struct list {
	size_t n;
	unsigned level;
	uint64_t *a, *b;
	uint16_t *leaves;
};

static void
list_free(struct list *l)
{
	free(l->a);
	free(l->b);
	free(l->leaves);
}

static int
list_alloc(struct list *l, size_t cap, unsigned level)
{
	l->n = 0;
	l->level = level;
	l->a = malloc(cap * sizeof(uint64_t));
	l->b = malloc(cap * sizeof(uint64_t));
	l->leaves = malloc(cap * ((size_t)1 << level) * sizeof(uint16_t));
	return l->a && l->b && l->leaves ? 0 : -1;
}

/* n bits from bit lo of the 128-bit vector (lane a low, lane b high). */
static uint64_t
bits(uint64_t a, uint64_t b, unsigned lo, unsigned n)
{
	uint64_t mask = n >= 64 ? ~0ULL : ((1ULL << n) - 1), v;

	if (lo >= 64) {
		v = b >> (lo - 64);
	} else if (lo + n <= 64) {
		v = a >> lo;
	} else {
		v = (a >> lo) | (b << (64 - lo));
	}
	return v & mask;
}

struct keyed {
	uint64_t key;
	size_t idx;
};

static int
keyed_cmp(const void *x, const void *y)
{
	const struct keyed *p = x, *q = y;

	return p->key < q->key ? -1 : p->key > q->key ? 1 : 0;
}

/* The pairs x + y of L and R whose bits [lo, lo + n) are zero (the bits
 * below are zero already, so no carry comes into them). */
static int
merge(const struct list *L, const struct list *R, unsigned lo, unsigned n, struct list *out)
{
	size_t half = (size_t)1 << L->level;
	struct keyed *k = malloc(R->n * sizeof(*k));

	if (k == NULL || list_alloc(out, CAP, L->level + 1) != 0) {
		free(k);
		return -1;
	}
	for (size_t j = 0; j < R->n; j++) {
		k[j].key = bits(-R->a[j], -R->b[j], lo, n);
		k[j].idx = j;
	}
	qsort(k, R->n, sizeof(*k), keyed_cmp);
	for (size_t i = 0; i < L->n && out->n < CAP; i++) {
		struct keyed want = {bits(L->a[i], L->b[i], lo, n), 0};
		struct keyed *hit = bsearch(&want, k, R->n, sizeof(*k), keyed_cmp);
		if (hit == NULL) {
			continue;
		}
		while (hit > k && hit[-1].key == want.key) {
			hit--;
		}
		for (; hit < k + R->n && hit->key == want.key && out->n < CAP; hit++) {
			size_t j = hit->idx, o = out->n++;
			out->a[o] = L->a[i] + R->a[j];
			out->b[o] = L->b[i] + R->b[j];
			memcpy(out->leaves + o * 2 * half, L->leaves + i * half, half * 2);
			memcpy(out->leaves + o * 2 * half + half, R->leaves + j * half, half * 2);
		}
	}
	free(k);
	return 0;
}

/* The list of the subtree at level over lists first..first + 2^level. */
static int
build(unsigned level, unsigned first, struct list *out)
{
	struct list L, R;
	unsigned lo, n;
	int rc;

	if (level == 0) {
		char f[16], v[32];
		if (list_alloc(out, LSIZE, 0) != 0) {
			return -1;
		}
		field_of(first, f);
		for (unsigned i = 0; i < LSIZE; i++) {
			uint64_t a, b;
			value_of(i, v);
			pair_terms(f, v, &a, &b);
			if (first >= NLISTS / 2) { /* message 2's side of the difference */
				a = -a;
				b = -b;
			}
			out->a[i] = a;
			out->b[i] = b;
			out->leaves[i] = (uint16_t)i;
		}
		out->n = LSIZE;
		return 0;
	}
	if (build(level - 1, first, &L) != 0) {
		return -1;
	}
	if (build(level - 1, first + (1u << (level - 1)), &R) != 0) {
		list_free(&L);
		return -1;
	}
	lo = (level - 1) * WINDOW;
	n = level == LEVELS ? 128 - lo : WINDOW;
	rc = merge(&L, &R, lo, n, out);
	list_free(&L);
	list_free(&R);
	return rc;
}

static void
print_message(const uint16_t *leaves, unsigned from, unsigned to)
{
	char f[16], v[32];

	for (unsigned j = from; j < to; j++) {
		field_of(j, f);
		value_of(leaves[j], v);
		printf("%s%s %s", j == from ? "" : " ", f, v);
	}
	printf("\n");
}

/* The old iid of one side's pairs. */
static void
old_iid(const uint16_t *leaves, unsigned from, unsigned to, uint64_t out[2])
{
	uint64_t a = 0, b = 0, ta, tb, nfv = 2 * (uint64_t)(to - from);
	char f[16], v[32];

	for (unsigned j = from; j < to; j++) {
		field_of(j, f);
		value_of(leaves[j], v);
		pair_terms(f, v, &ta, &tb);
		a += ta;
		b += tb;
	}
	out[0] = mix64(a ^ nfv);
	out[1] = mix64(b + nfv);
}

int
main(void)
{
	for (salt = 1; salt <= 8; salt++) {
		struct list root;
		uint64_t i1[2], i2[2];

		if (build(LEVELS, 0, &root) != 0) {
			fprintf(stderr, "idmp_collide: out of memory\n");
			return 1;
		}
		if (root.n == 0) {
			list_free(&root);
			continue; /* none this time: other values */
		}
		old_iid(root.leaves, 0, NLISTS / 2, i1);
		old_iid(root.leaves, NLISTS / 2, NLISTS, i2);
		if (i1[0] != i2[0] || i1[1] != i2[1]) {
			fprintf(stderr, "idmp_collide: the sums met but the iids differ\n");
			list_free(&root);
			return 1;
		}
		print_message(root.leaves, 0, NLISTS / 2);
		print_message(root.leaves, NLISTS / 2, NLISTS);
		fprintf(stderr, "idmp_collide: salt %u, %zu collisions; old iid %016llx%016llx\n", salt,
			root.n, (unsigned long long)i1[0], (unsigned long long)i1[1]);
		list_free(&root);
		return 0;
	}
	fprintf(stderr, "idmp_collide: no collision found\n");
	return 1;
}
