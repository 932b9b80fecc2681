/* stream_impl.h - helpers shared by stream.c, stream_entry.c and group.c (not API). */
#ifndef ECHD_STORAGE_STREAM_IMPL_H
#define ECHD_STORAGE_STREAM_IMPL_H

#include <stdint.h>

#include "echd.h"
#include "storage.h"
#include "stream.h"

/* Big-endian integers and ids in rows, so that byte order is numeric
 * order. Inline: every row read or written goes through them. */
static inline void
st_put_u32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)(v >> 24);
	p[1] = (unsigned char)(v >> 16);
	p[2] = (unsigned char)(v >> 8);
	p[3] = (unsigned char)v;
}

static inline uint32_t
st_get_u32(const unsigned char *p)
{
	return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static inline void
st_put_u64(unsigned char *p, uint64_t v)
{
	echd_put_be64(p, v);
}

static inline uint64_t
st_get_u64(const unsigned char *p)
{
	return echd_get_be64(p);
}

static inline void
st_put_id(unsigned char *p, const struct stream_id *id)
{
	st_put_u64(p, id->ms);
	st_put_u64(p + 8, id->seq);
}

static inline void
st_get_id(const unsigned char *p, struct stream_id *id)
{
	id->ms = st_get_u64(p);
	id->seq = st_get_u64(p + 8);
}
/* A node row's value: this many bytes of counts and ids, then the node's
 * master fields. */
#define ST_NODE_FIXED (8 * 3 + 16 + 4)

/* A stream's tail node, decoded and kept between appends (stream_entry.c
 * owns its layout), for stream_append() and the stream cache. */
struct st_tail;
int st_tail_create(struct st_tail **out);
void st_tail_destroy(struct st_tail *tl); /* NULL: a no-op */
/* Appends an entry with id to m: writes its entries row, and the full tail
 * node's row when a new node begins; loads the tail node into tl when tl
 * has none; updates m and tl in memory, and leaves the tail node's own row
 * to st_tail_save(). at_end: no entries row of another stream sorts after
 * m's (the put is STORAGE_PUT_APPEND). On failure rows may be half written:
 * the transaction must be aborted, as after any failed write. */
int st_tail_append(struct storage_txn *t, struct stream_meta *m, struct st_tail *tl,
	const struct stream_id *id, const struct st_buf *fv, size_t nfv, uint64_t node_max_entries,
	uint64_t node_max_bytes, bool at_end);
/* Writes tl's node row when appends changed it. */
int st_tail_save(struct storage_txn *t, uint64_t sid, struct st_tail *tl);

/* An entries row's key, sid(8) ms(8) seq(8), into k; returns its length. */
size_t st_entry_key(unsigned char *k, uint64_t sid, const struct stream_id *id);

/* Allocates a fresh internal id (streams, groups and consumers share the
 * counter; 0 is never used). */
int st_next_id(struct storage_txn *t, uint64_t *out);

/* Rows still to delete: a whole stream, or one group of a stream. */
enum st_trash_kind { ST_TRASH_STREAM = 'S', ST_TRASH_GROUP = 'G' };
int st_trash_add(struct storage_txn *t, enum st_trash_kind kind, uint64_t id);

/* Deletes rows of table tb whose key starts with prefix (plen bytes), up
 * to *budget (less what it deleted); *done when none is left. */
int st_delete_prefix(struct storage_txn *t, enum storage_table tb, const unsigned char *prefix,
	size_t plen, unsigned *budget, bool *done);
/* Copies the rows of table tb whose keys start with from (8 bytes, big
 * endian) to keys that start with to instead. fn, when not NULL, may
 * rewrite each copy's key and value in place before it is written, and
 * returns 0 or an error that stops the copy. Rows are read in chunks and
 * written with no cursor open, so fn may write (st_next_id()). */
typedef int (*st_copy_fn)(unsigned char *key, size_t klen, unsigned char *val, size_t vlen,
	void *ud);
int st_copy_rows(struct storage_txn *t, enum storage_table tb, uint64_t from, uint64_t to,
	st_copy_fn fn, void *ud);

#endif
