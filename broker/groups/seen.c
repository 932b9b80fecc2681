/* seen.c - consumers' seen-times that only live in memory.
 *
 * Redis 7.2+ updates a consumer's seen-time on every XREADGROUP, XCLAIM
 * and XAUTOCLAIM, even one that returns nothing. Stored in LMDB, that made
 * each empty poll a write transaction and a flush before its reply. When
 * the seen-time is all a command would change, it goes here instead,
 * keyed by the consumer's id (ids are never reused), and readers take the
 * later of this and the stored one. It is advisory, as in Redis, whose AOF
 * does not keep it either: a restart forgets it, and so does a full table.
 */
#include <string.h>

#include "broker.h"

/* Entries before the table is dropped and started again (16 bytes each). */
#define SEEN_MAX (1u << 20)

struct brk_seen {
	uint64_t cid; /* 0: free */
	uint64_t ms;
};

static size_t
slot(uint64_t cid, size_t size)
{
	return (size_t)((cid * 0x9E3779B97F4A7C15ULL) >> 20) & (size - 1);
}

void
brk_seen_clear(struct brk_server *srv)
{
	echd_free(srv->seen);
	srv->seen = NULL;
	srv->seen_size = 0;
	srv->seen_count = 0;
}

static int
seen_grow(struct brk_server *srv)
{
	size_t nsize = srv->seen_size ? srv->seen_size * 2 : 256;
	struct brk_seen *nt = echd_calloc(nsize, sizeof(*nt));

	if (nt == NULL) {
		return -1;
	}
	for (size_t i = 0; i < srv->seen_size; i++) {
		struct brk_seen *e = &srv->seen[i];
		size_t j;
		if (e->cid == 0) {
			continue;
		}
		for (j = slot(e->cid, nsize); nt[j].cid != 0; j = (j + 1) & (nsize - 1)) {
		}
		nt[j] = *e;
	}
	echd_free(srv->seen);
	srv->seen = nt;
	srv->seen_size = nsize;
	return 0;
}

void
brk_seen_note(struct brk_server *srv, uint64_t cid, uint64_t ms)
{
	size_t i;

	if (cid == 0) {
		return;
	}
	if (srv->seen_count >= SEEN_MAX) {
		brk_seen_clear(srv);
	}
	/* at most half full, so probes stay short */
	if (srv->seen_count + 1 > srv->seen_size / 2 && seen_grow(srv) != 0) {
		return; /* out of memory: the stored seen-time stays in use */
	}
	for (i = slot(cid, srv->seen_size); srv->seen[i].cid != 0;
		i = (i + 1) & (srv->seen_size - 1)) {
		if (srv->seen[i].cid == cid) {
			if (ms > srv->seen[i].ms) {
				srv->seen[i].ms = ms;
			}
			return;
		}
	}
	srv->seen[i].cid = cid;
	srv->seen[i].ms = ms;
	srv->seen_count++;
}

uint64_t
brk_seen_get(const struct brk_server *srv, uint64_t cid, uint64_t stored)
{
	if (srv->seen_size == 0 || cid == 0) {
		return stored;
	}
	for (size_t i = slot(cid, srv->seen_size); srv->seen[i].cid != 0;
		i = (i + 1) & (srv->seen_size - 1)) {
		if (srv->seen[i].cid == cid) {
			return srv->seen[i].ms > stored ? srv->seen[i].ms : stored;
		}
	}
	return stored;
}
