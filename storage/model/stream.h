/* stream.h - the stream data model over the storage interface.
 *
 * Streams live in the tables of storage.h: a metadata row per key, one
 * row per entry, and node bookkeeping rows that mirror Redis' radix-tree
 * nodes so that approximate (~) trimming removes the same entries Redis
 * would. Every function runs inside the caller's transaction and changes
 * nothing outside it; callers save metadata with stream_meta_save().
 */
#ifndef ECHD_STORAGE_STREAM_H
#define ECHD_STORAGE_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "storage.h"

struct stream_id {
	uint64_t ms;
	uint64_t seq;
};

/* Per-stream metadata, kept exact in the same transaction as the rows. */
struct stream_meta {
	uint64_t sid;                 /* internal id; rows refer to it, not to the name */
	uint64_t length;              /* live entries */
	struct stream_id first;       /* first live entry, 0-0 when empty */
	struct stream_id last;        /* last generated id (survives XDEL) */
	struct stream_id max_deleted; /* max-deleted-entry-id */
	uint64_t entries_added;
	uint64_t nodes;  /* node rows (XINFO radix-tree-keys) */
	struct stream_id tail_node; /* first id of the last node, when nodes > 0 */
	uint64_t groups; /* consumer groups */
	uint64_t expire_ms; /* Unix time in ms the key expires at; 0: never */
};

/* ---- ids ---------------------------------------------------------------- */

int stream_id_cmp(const struct stream_id *a, const struct stream_id *b);
/* Parses "ms-seq" or "ms" (seq then missing_seq) as Redis does: at most
 * STREAM_ID_MAX_TEXT bytes, read up to a NUL, split at the first '-', each
 * half by echd_str2ull() (so " 1" and "+1" are 1, and "1- -1" has seq
 * 2^64-1). "-" and "+" are accepted when allow_minmax. Borrows s. Returns 0
 * or ECHD_EINVAL. */
#define STREAM_ID_MAX_TEXT 127
int stream_id_parse(const char *s, size_t len, uint64_t missing_seq, bool allow_minmax,
	struct stream_id *out);
/* Formats as "ms-seq" into buf (at least 42 bytes); returns the length. */
size_t stream_id_format(const struct stream_id *id, char *buf);
/* Increments/decrements; returns false on overflow (id stays). */
bool stream_id_incr(struct stream_id *id);
bool stream_id_decr(struct stream_id *id);

/* ---- keys --------------------------------------------------------------- */

/* Looks up a stream. db is the SELECTed database. Borrows name.
 * Returns 0 (and *out), ECHD_ENOTFOUND, or a negative error. */
int stream_lookup(struct storage_txn *t, unsigned db, const struct st_buf *name,
	struct stream_meta *out);
/* Creates an empty stream (the key must not exist). Returns 0 and *out. */
int stream_create(struct storage_txn *t, unsigned db, const struct st_buf *name,
	struct stream_meta *out);
int stream_meta_save(struct storage_txn *t, unsigned db, const struct st_buf *name,
	const struct stream_meta *m);
/* Deletes the key at once; its rows are removed later by stream_gc_step().
 * Returns 0 or ECHD_ENOTFOUND. */
int stream_delete(struct storage_txn *t, unsigned db, const struct st_buf *name);
/* Renames; an existing destination is deleted first. Same name is a no-op.
 * Returns 0 or ECHD_ENOTFOUND (no source). */
int stream_rename(struct storage_txn *t, unsigned db, const struct st_buf *from,
	const struct st_buf *to);
/* Moves the key to database dst, where its name must be free; its
 * entries, groups and expiry time go with it. Returns 0, ECHD_ENOTFOUND,
 * or ECHD_EEXIST (dst has the name; nothing changes). */
int stream_move(struct storage_txn *t, unsigned db, const struct st_buf *name, unsigned dst);
/* Copies the key (db, name) to (dst, dst_name), which must be free: its
 * entries and nodes, its metadata and expiry time, under a new internal
 * id (*out). Its groups are copied by group_copy(). Returns 0,
 * ECHD_ENOTFOUND, or ECHD_EEXIST (the destination exists; nothing
 * changes). O(N) in the rows copied. */
int stream_copy(struct storage_txn *t, unsigned db, const struct st_buf *name, unsigned dst,
	const struct st_buf *dst_name, struct stream_meta *out);
/* Deletes every key of db, or of every database when all_dbs. */
int stream_flush(struct storage_txn *t, unsigned db, bool all_dbs);
/* Number of keys in db. */
int stream_db_size(struct storage_txn *t, unsigned db, uint64_t *out);
/* Sets *pending when deleted streams or groups still have rows. */
int stream_gc_pending(struct storage_txn *t, bool *pending);
/* Removes up to budget rows of deleted streams. *more is set when rows remain. */
int stream_gc_step(struct storage_txn *t, unsigned budget, bool *more);

/* Expiry. An expired key still has its rows until stream_expire_due() or a
 * write drops it; stream_expired() tells the caller to act as if it were
 * gone. Each key with an expiry time has an EXPIRES row, so the due ones
 * are found in time order. */
static inline bool
stream_expired(const struct stream_meta *m, uint64_t now_ms)
{
	return m->expire_ms != 0 && m->expire_ms <= now_ms;
}
/* Sets m's expiry time (0: none) and saves m under (db, name). */
int stream_set_expire(struct storage_txn *t, unsigned db, const struct st_buf *name,
	struct stream_meta *m, uint64_t when_ms);
/* Called with each key stream_expire_due() drops, before it goes; name is
 * borrowed for the call. */
typedef void (*stream_expired_fn)(unsigned db, const struct st_buf *name, void *ud);
/* Takes up to budget rows of keys whose expiry time is at most now_ms,
 * earliest first, dropping their keys (a row that matches no key is only
 * removed, without fn); *n says how many rows, *next_ms when the next is
 * due (now_ms when more are due already, 0 when no key has an expiry time). */
int stream_expire_due(struct storage_txn *t, uint64_t now_ms, unsigned budget,
	stream_expired_fn fn, void *ud, unsigned *n, uint64_t *next_ms);
/* Per database (256 slots each): keys with an expiry time not yet passed
 * and the mean of their remaining ms, for INFO's keyspace lines.
 * O(keys with an expiry time). */
int stream_expires_stat(struct storage_txn *t, uint64_t now_ms, uint64_t *count,
	uint64_t *avg_ttl);

/* Key iteration in creation order (SCAN cursors): calls fn for keys whose
 * internal id >= *cursor, up to count of them (expired ones at now_ms are
 * counted but skipped); *cursor becomes the next internal id to visit, or 0
 * when done. fn's name is borrowed for the call. A non-zero return from fn
 * stops the walk and is returned. */
typedef int (*stream_key_fn)(const struct st_buf *name, void *ud);
int stream_scan(struct storage_txn *t, unsigned db, uint64_t now_ms, uint64_t *cursor,
	unsigned count, stream_key_fn fn, void *ud);

/* Bytes of the key's rows (keys and values): its metadata, index and
 * expiry rows, node rows and entry rows, for MEMORY USAGE. Like Redis, it
 * counts the first samples nodes (every node when 0) and takes their mean
 * per node and per entry for the others. Groups: group_usage(). */
int stream_usage(struct storage_txn *t, unsigned db, const struct st_buf *name,
	const struct stream_meta *m, uint64_t samples, uint64_t *out);

/* Calls fn with a random key of db that has not expired at now_ms, drawn
 * with rnd: the first key from a random internal id on, so not every key
 * is equally likely. Returns fn's return, or ECHD_ENOTFOUND when db has no
 * such key. O(log N); O(N) when most keys have expired. */
int stream_random_key(struct storage_txn *t, unsigned db, uint64_t now_ms, uint64_t rnd,
	stream_key_fn fn, void *ud);

/* ---- entries ------------------------------------------------------------ */

/* Encodes nfv field/value buffers as one entry under id, appended after
 * m->last (the caller checked id > m->last). Updates m. */
int stream_append(struct storage_txn *t, struct stream_meta *m, const struct stream_id *id,
	const struct st_buf *fv, size_t nfv, uint64_t node_max_entries, uint64_t node_max_bytes);

/* ---- the stream cache -------------------------------------------------- */

/* A write transaction's streams as appends left them: the decoded metadata
 * and open tail node of each stream XADD touched, kept across the commands
 * of a batch, with their rows written once, by stream_cache_flush(), rather
 * than by every append. Entries rows are written at once. Until the flush
 * the keys and nodes rows of the cached streams are stale: whoever else
 * reads or writes the transaction must flush first (the broker does it
 * whenever it hands the batch to anything but a cached XADD), and a
 * transaction that ends without a flush must drop the cache. One cache
 * serves one transaction at a time. */
struct stream_cache;
int stream_cache_create(struct stream_cache **out);
void stream_cache_destroy(struct stream_cache *c); /* NULL: a no-op */
bool stream_cache_empty(const struct stream_cache *c);
/* Looks up a stream as stream_lookup() does, from the cache or, the first
 * time, from t (then kept). Borrows name. Returns 0 and *out,
 * ECHD_ENOTFOUND (nothing kept), or a negative error. */
int stream_cache_lookup(struct stream_cache *c, struct storage_txn *t, unsigned db,
	const struct st_buf *name, struct stream_meta *out);
/* stream_append() to the stream the last stream_cache_lookup() found (m is
 * its metadata, m->sid must match), keeping its keys and nodes rows for the
 * flush; updates m and the cache. On failure the transaction must be
 * aborted and the cache dropped. */
int stream_cache_append(struct stream_cache *c, struct storage_txn *t, struct stream_meta *m,
	const struct stream_id *id, const struct st_buf *fv, size_t nfv, uint64_t node_max_entries,
	uint64_t node_max_bytes);
/* Writes what the cache kept into t and empties it. On failure the cache is
 * dropped and t must be aborted. */
int stream_cache_flush(struct stream_cache *c, struct storage_txn *t);
/* Forgets what the cache kept (its transaction was aborted). */
void stream_cache_drop(struct stream_cache *c);

enum stream_trim_strategy { STREAM_TRIM_NONE, STREAM_TRIM_MAXLEN, STREAM_TRIM_MINID };

/* What a deletion does to the consumer groups' references to an entry
 * (Redis 8.2's KEEPREF, DELREF and ACKED). */
enum stream_ref_policy {
	STREAM_REF_KEEP,  /* delete; pending records stay, pointing at nothing (XDEL) */
	STREAM_REF_DEL,   /* delete and drop the entry from every group's PEL */
	STREAM_REF_ACKED, /* delete only what no group holds (group_refs_held()) */
};

/* Hooks through which trimming asks about and drops references; filled
 * by group_refs_trim(). The hooks may read any table and write the group
 * tables, never the entries or nodes. */
struct stream_refs {
	enum stream_ref_policy policy;
	/* ACKED: *held when an entry in [first, last] is pending in a group or
	 * not yet delivered to one; *stop when every entry from first on is
	 * held (nothing past it can go). */
	int (*held)(void *ud, const struct stream_id *first, const struct stream_id *last,
		bool *held, bool *stop);
	/* DELREF: drops a removed entry's records from every group. */
	int (*drop)(void *ud, const struct stream_id *id);
	void *ud;
};
struct stream_trim {
	enum stream_trim_strategy strategy;
	bool approx;           /* ~: only whole nodes */
	uint64_t maxlen;
	struct stream_id minid;
	uint64_t limit;        /* max entries removed, 0 = no limit */
	const struct stream_refs *refs; /* NULL: KEEPREF */
};
/* Trims; *removed counts the entries removed. Updates m. Under ACKED the
 * entries a group holds are skipped, not removed. As in Redis, ~ spares
 * the inside of the first node the target cuts through only under KEEPREF
 * (refs NULL); DELREF and ACKED trim it exactly (up to the limit). */
int stream_trim(struct storage_txn *t, struct stream_meta *m, const struct stream_trim *tr,
	uint64_t *removed);
/* Deletes one entry. Returns 0 or ECHD_ENOTFOUND. Updates m (length,
 * first, max_deleted). */
int stream_delete_entry(struct storage_txn *t, struct stream_meta *m, const struct stream_id *id);
/* Reads one entry; *fields is borrowed (see storage_get). */
int stream_get_entry(struct storage_txn *t, const struct stream_meta *m, const struct stream_id *id,
	struct st_buf *fields);

/* The number of live entries after the id after: O(1) when after is
 * before the first entry or not before the last; otherwise one node row
 * per node past after, plus the entries of the node after falls in. */
int stream_count_after(struct storage_txn *t, const struct stream_meta *m,
	const struct stream_id *after, uint64_t *out);

/* Iterates live entries within [start, end] (inclusive), forwards or in
 * reverse. Returns owned (free with stream_iter_destroy()). */
struct stream_iter;
int stream_iter_create(struct storage_txn *t, const struct stream_meta *m,
	const struct stream_id *start, const struct stream_id *end, bool rev,
	struct stream_iter **out);
/* Returns 0 with *id and *fields (borrowed until the next call), or
 * ECHD_ENOTFOUND at the end. */
int stream_iter_next(struct stream_iter *it, struct stream_id *id, struct st_buf *fields);
void stream_iter_destroy(struct stream_iter *it);
/* A hint: about rows entries will be read (storage_cursor_ahead()). */
void stream_iter_ahead(struct stream_iter *it, unsigned rows);

/* Decodes an entry's field/value pairs: *count pairs. */
size_t stream_fields_count(const struct st_buf *fields);
/* Walks pairs: *pos starts at 0; returns false at the end or on a malformed row. */
bool stream_fields_next(const struct st_buf *fields, size_t *pos, struct st_buf *f,
	struct st_buf *v);

/* ---- idempotent producers (stream_idmp.c) ----------------------------- */

/* XADD IDMP/IDMPAUTO records: (producer id, idempotent id) -> the id of
 * the entry first added with them, per stream, kept for a duration and up
 * to a number per producer. Rows live with the stream (COPY copies them,
 * DEL drops them with its entries). Every function runs in the caller's
 * transaction. */
#define STREAM_IDMP_DURATION_MIN 1
#define STREAM_IDMP_DURATION_MAX 86400
#define STREAM_IDMP_MAXSIZE_MIN  1
#define STREAM_IDMP_MAXSIZE_MAX  10000
#define STREAM_IDMP_AUTO_LEN     16

/* The settings of a stream that has none of its own yet. */
struct stream_idmp_cfg {
	uint64_t duration_s;
	uint64_t maxsize;
};

struct stream_idmp_info {
	uint64_t duration_s, maxsize;
	uint64_t pids;       /* producers with records */
	uint64_t iids;       /* records */
	uint64_t added;      /* records ever added */
	uint64_t duplicates; /* duplicates ever answered */
};

/* The iid IDMPAUTO derives from an entry's nfv field/value buffers, keyed
 * by m's secret: the same pairs in any order give the same iid, and
 * without the secret no one can make two messages share one. make: a
 * stream without a secret gets one (written to its settings row in t, a
 * write transaction; def: the settings a new row takes); without make,
 * such a stream returns ECHD_ENOTFOUND (no record of it is keyed). Borrows
 * fv. Returns 0, ECHD_ENOTFOUND, -ENOMEM or the storage's error. */
int stream_idmp_auto_iid(struct storage_txn *t, const struct stream_meta *m,
	const struct stream_idmp_cfg *def, bool make, const struct st_buf *fv, size_t nfv,
	unsigned char out[STREAM_IDMP_AUTO_LEN]);
/* The hash under it, for the tests: the iid of fv's nfv / 2 pairs under
 * key (scratch: 16 bytes a pair); and SipHash-2-4-128 of data. */
void stream_idmp_keyed_iid(const unsigned char key[16], const struct st_buf *fv, size_t nfv,
	unsigned char *scratch, unsigned char out[STREAM_IDMP_AUTO_LEN]);
void stream_idmp_siphash128(const unsigned char key[16], const void *data, size_t n,
	unsigned char out[16]);
/* Looks up (pid, iid) in m's records, as of now_ms. Returns 0 with *out
 * (and counts a duplicate when count_dup), or ECHD_ENOTFOUND. Borrows pid
 * and iid. */
int stream_idmp_find(struct storage_txn *t, const struct stream_meta *m, const struct st_buf *pid,
	const struct st_buf *iid, uint64_t now_ms, bool count_dup, struct stream_id *out);
/* Records (pid, iid) -> id at now_ms, first evicting the producer's
 * expired records and its oldest beyond the stream's maxsize; a record of
 * the same pair still there is replaced. def: the settings when the stream
 * has none yet. */
int stream_idmp_record(struct storage_txn *t, const struct stream_meta *m, const struct st_buf *pid,
	const struct st_buf *iid, const struct stream_id *id, uint64_t now_ms,
	const struct stream_idmp_cfg *def);
/* Sets the duration and maxsize (0: unchanged); a change drops every
 * record (the lifetime counters stay). O(records) when it drops them. */
int stream_idmp_configure(struct storage_txn *t, const struct stream_meta *m, uint64_t duration_s,
	uint64_t maxsize, const struct stream_idmp_cfg *def);
int stream_idmp_info(struct storage_txn *t, const struct stream_meta *m,
	const struct stream_idmp_cfg *def, struct stream_idmp_info *out);
/* Copies the records of stream from to stream to (stream_copy()). */
int stream_idmp_copy(struct storage_txn *t, uint64_t from, uint64_t to);
/* Bytes of m's records for MEMORY USAGE: the first rows of each kind,
 * extrapolated to the counts. */
int stream_idmp_usage(struct storage_txn *t, const struct stream_meta *m, uint64_t *out);
/* Removes expired records of up to budget streams whose check is due at
 * now_ms; *n says how many streams, *next_ms when the next is due (now_ms:
 * more are due already; 0: none). */
int stream_idmp_expire_due(struct storage_txn *t, uint64_t now_ms, unsigned budget, unsigned *n,
	uint64_t *next_ms);

#endif
