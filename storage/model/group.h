/* group.h - consumer groups over the storage interface.
 *
 * A group partitions a stream: its cursor (last-delivered id) says what
 * is new, its pending-entries list (PEL) says what is owed and by whom.
 * Rows, all keyed by fixed-width integers so one group's or consumer's
 * rows form one contiguous range:
 *   groups     sid(8) name            -> group record
 *   consumers  gid(8) name            -> cid(8)
 *   consrec    gid(8) cid(8)          -> consumer record (with its name)
 *   pel        gid(8) ms(8) seq(8)    -> cid(8) delivery-time(8) count(8)
 *   cpel       gid(8) cid(8) ms seq   -> (empty): one consumer's PEL in id order
 * A pel row with cid PEL_UNOWNED (released by XNACK) has no cpel row.
 * Counters (group pending and released, consumers, consumer pending) are
 * kept exact in the same transaction as the rows, so summaries cost
 * O(consumers).
 * Every function runs inside the caller's transaction.
 */
#ifndef ECHD_STORAGE_GROUP_H
#define ECHD_STORAGE_GROUP_H

#include <stdbool.h>
#include <stdint.h>

#include "storage.h"
#include "stream.h"

#define GROUP_ENTRIES_READ_UNKNOWN (-1) /* Redis' SCG_INVALID_ENTRIES_READ */
/* Group and consumer names are keys (after an 8-byte prefix), and LMDB
 * keys stop at 511 bytes: longer names are refused with ECHD_ETOOLONG,
 * always before anything is written (the broker relies on it). */
#define GROUP_NAME_MAX 400

/* A group's delivery policy (echd's XGROUP SETPOLICY), kept at the end of
 * its record: a row without it (as every row before policies) reads as all
 * zero, and a record without a policy is written without it. 0 turns an
 * option off. */
#define GROUP_BACKOFF_MAX 32 /* BACKOFF values */
#define GROUP_DEADLETTER_MAX GROUP_NAME_MAX /* bytes of the DEADLETTER key */
struct group_policy {
	uint64_t ack_wait;        /* ms */
	uint64_t max_deliver;     /* deliveries */
	uint64_t max_ack_pending; /* group pending count */
	uint64_t dead_lettered;   /* entries dead-lettered (or acknowledged for it) */
	uint32_t nbackoff;
	uint32_t dl_len;          /* 0: no DEADLETTER stream */
	uint64_t backoff[GROUP_BACKOFF_MAX];
	unsigned char dl[GROUP_DEADLETTER_MAX];
};

struct group_meta {
	uint64_t gid;
	struct stream_id last_delivered;
	int64_t entries_read; /* or GROUP_ENTRIES_READ_UNKNOWN */
	uint64_t pending;     /* rows in the group PEL */
	uint64_t nacked;      /* of them released (PEL_UNOWNED): Redis' NACK zone */
	uint64_t consumers;
	struct group_policy policy; /* unused bytes zero: records compare with memcmp */
};

struct consumer_meta {
	uint64_t cid;
	uint64_t seen_time;   /* ms: last attempted interaction */
	int64_t active_time;  /* ms: last successful one; -1 = never */
	uint64_t pending;
};

/* A PEL row's cid when no consumer owns it: XNACK released it to the
 * group. It has no cpel row and counts in no consumer's pending, only in
 * the group's; its delivery_time is 0, so it is claimable at once. */
#define PEL_UNOWNED 0
/* pel_put()'s prev_cid for a row that was not in the PEL before. */
#define PEL_NEW UINT64_MAX

struct pel_row {
	struct stream_id id;
	uint64_t cid; /* owner, or PEL_UNOWNED */
	uint64_t delivery_time; /* ms */
	uint64_t delivery_count;
};

/* ---- groups ------------------------------------------------------------- */

/* Returns 0 with *out, ECHD_ENOTFOUND, or an error. Borrows name. */
int group_lookup(struct storage_txn *t, const struct stream_meta *m, const struct st_buf *name,
	struct group_meta *out);
/* Creates a group (ECHD_EEXIST if it exists); counts it in m->groups
 * (the caller saves m). */
int group_create(struct storage_txn *t, struct stream_meta *m, const struct st_buf *name,
	const struct stream_id *last, int64_t entries_read, struct group_meta *out);
int group_save(struct storage_txn *t, const struct stream_meta *m, const struct st_buf *name,
	const struct group_meta *g);
/* Deletes the group row at once and schedules its consumers and PEL rows
 * for deletion by stream_gc_step(). Returns 0 or ECHD_ENOTFOUND. */
int group_destroy(struct storage_txn *t, struct stream_meta *m, const struct st_buf *name);

/* Calls fn for each group of the stream in name order; name borrowed for
 * the call. A non-zero return from fn stops the walk and is returned. */
typedef int (*group_fn)(const struct st_buf *name, const struct group_meta *g, void *ud);
int group_each(struct storage_txn *t, const struct stream_meta *m, group_fn fn, void *ud);

/* Bytes of the rows of m's groups, consumers and PELs (keys and values),
 * the PEL rows counted from the groups' pending counts: O(groups +
 * consumers). For MEMORY USAGE. */
int group_usage(struct storage_txn *t, const struct stream_meta *m, uint64_t *out);
/* Copies m's groups, consumers and PELs to the stream to (a stream_copy()
 * of from), each under a new id. O(groups + consumers + pending). */
int group_copy(struct storage_txn *t, const struct stream_meta *from, const struct stream_meta *to);

/* The logical position of id in the stream ("entries read" up to it), or
 * GROUP_ENTRIES_READ_UNKNOWN (Redis' streamEstimateDistanceFromFirstEverEntry). */
int64_t group_estimate_distance(const struct stream_meta *m, const struct stream_id *id);
/* True when a deleted entry may lie in [start, end] (end NULL: to the end). */
bool group_range_has_tombstones(const struct stream_meta *m, const struct stream_id *start,
	const struct stream_id *end);
/* The group's lag: the live entries after its cursor, the ones the group
 * will still be given; never unknown (where Redis answers NULL). Cost:
 * stream_count_after(). */
int group_lag(struct storage_txn *t, const struct stream_meta *m, const struct group_meta *g,
	int64_t *lag);
/* Advances the cursor to id after delivering it, keeping entries_read as
 * Redis does (with its fixes for a cursor before the first entry). */
void group_advance(const struct stream_meta *m, struct group_meta *g, const struct stream_id *id);

/* ---- policies ----------------------------------------------------------- */

/* True when the policy sets a rule (the dead-lettered count is not one). */
bool group_policy_active(const struct group_policy *p);
/* True when pending rows have deadlines (ACKWAIT or BACKOFF). */
bool group_policy_timed(const struct group_policy *p);
/* The ack wait of a row delivered count times: the count-th BACKOFF value,
 * the last repeating, else ACKWAIT; 0: none. */
uint64_t group_policy_wait(const struct group_policy *p, uint64_t count);
/* When row r is due under p: a released row at its delivery time (0, or
 * the end of an XNACK DELAY), an owned one at its ack deadline;
 * UINT64_MAX: never. */
uint64_t pel_deadline(const struct group_policy *p, const struct pel_row *r);

/* Due rows. For a group whose policy is timed, each PEL row with a
 * deadline has one row in the due table, written in the same transaction
 * as the PEL row (so it follows what commits, and what a restart or
 * another front end reads):
 *   due  gid(8) kind(1) deadline(8) ms(8) seq(8) -> (empty)
 * kind PEL_DUE_DEAD when the row is dead-lettered at its deadline (its
 * delivery count has reached MAXDELIVER), PEL_DUE_REDELIVER when it is
 * handed out again. So the next due rows of either kind are found in
 * O(log pending), never by a walk of the PEL. A group without a timed
 * policy has no due rows; a change of its ACKWAIT, BACKOFF or MAXDELIVER
 * rewrites them (pel_due_rebuild()). */
enum pel_due_kind {
	PEL_DUE_DEAD = 0,
	PEL_DUE_REDELIVER = 1,
};
/* Whether r has a due row under p, and which (*kind, *at). */
bool pel_due_of(const struct group_policy *p, const struct pel_row *r, enum pel_due_kind *kind,
	uint64_t *at);

struct pel_due_row {
	uint64_t at; /* its deadline */
	struct pel_row row;
};
struct pel_due {
	struct pel_due_row *rows; /* owned: pel_due_finish() */
	size_t n, cap;
	uint64_t next; /* the deadline of the first row of the kind left; UINT64_MAX: none */
};
/* Up to limit (0: no limit) of g's rows of kind whose deadline is at or
 * before now, by deadline then id, with their PEL rows: O(log pending +
 * rows). out->next <= now when due rows were left for lack of room. A due
 * row whose PEL row is gone or says otherwise (written by a bug) is
 * dropped on the way. */
int pel_due_collect(struct storage_txn *t, const struct group_meta *g, enum pel_due_kind kind,
	uint64_t now, size_t limit, struct pel_due *out);
void pel_due_finish(struct pel_due *d);
/* *any: g has at least one due row. */
int pel_due_any(struct storage_txn *t, const struct group_meta *g, bool *any);
/* Drops g's due rows and writes them again from its PEL under g->policy
 * (none unless timed): O(pending). After a change of the policy's timing
 * or MAXDELIVER, and for a PEL written by an echd before due rows. */
int pel_due_rebuild(struct storage_txn *t, const struct group_meta *g);
/* Called with the group id and deadline of every due row written (the
 * broker's timer lowers its next time with it); fn NULL: none. One per
 * process: the storage model keeps no other state. */
typedef void (*pel_due_hook_fn)(void *ud, uint64_t gid, uint64_t at);
void pel_due_hook_set(pel_due_hook_fn fn, void *ud);

/* What a dead-lettering needs beyond the row: where the group lives, why,
 * and how to append to the dead-letter stream. */
struct dead_letter {
	unsigned db;
	const struct st_buf *key;   /* the stream (borrowed) */
	const struct st_buf *group; /* the group's name (borrowed) */
	const char *reason;         /* "maxdeliver" or "fatal" */
	uint64_t now;               /* ms, for the record's id */
	uint64_t node_max_entries, node_max_bytes;
};
/* Dead-letters row r of g (in m): appends the record to g's DEADLETTER
 * stream (created if missing; none configured: nothing appended), removes
 * r from the PEL and counts it in g->policy.dead_lettered. The record's
 * fields: stream, id, group, consumer (the last owner, "" when released),
 * deliveries, reason, then the entry's own pairs (none when it was
 * deleted). The caller saves g. Same note on consumer records as
 * pel_remove(). */
int pel_dead_letter(struct storage_txn *t, const struct stream_meta *m, struct group_meta *g,
	const struct pel_row *r, const struct dead_letter *d);

/* Calls fn for each group with an active policy, in every database below
 * ndb: O(groups). Names are borrowed for the call. */
typedef int (*group_policy_fn)(unsigned db, const struct st_buf *key, const struct st_buf *name,
	const struct group_meta *g, void *ud);
int group_policy_each(struct storage_txn *t, unsigned ndb, group_policy_fn fn, void *ud);

/* ---- consumers ---------------------------------------------------------- */

int consumer_lookup(struct storage_txn *t, const struct group_meta *g, const struct st_buf *name,
	struct consumer_meta *out);
/* Creates a consumer (ECHD_EEXIST if present), counted in g->consumers. */
int consumer_create(struct storage_txn *t, struct group_meta *g, const struct st_buf *name,
	uint64_t now, struct consumer_meta *out);
int consumer_save(struct storage_txn *t, const struct group_meta *g, const struct st_buf *name,
	const struct consumer_meta *c);
/* Reads a consumer by id; *name is borrowed like a storage value. */
int consumer_by_id(struct storage_txn *t, const struct group_meta *g, uint64_t cid,
	struct consumer_meta *out, struct st_buf *name);
/* Deletes a consumer and its PEL rows; *pending gets how many it held.
 * Updates g (pending, consumers). Returns 0 or ECHD_ENOTFOUND. */
int consumer_delete(struct storage_txn *t, struct group_meta *g, const struct st_buf *name,
	uint64_t *pending);

typedef int (*consumer_fn)(const struct st_buf *name, const struct consumer_meta *c, void *ud);
int consumer_each(struct storage_txn *t, const struct group_meta *g, consumer_fn fn, void *ud);

/* ---- pending entries ---------------------------------------------------- */

int pel_get(struct storage_txn *t, const struct group_meta *g, const struct stream_id *id,
	struct pel_row *out);
/* Records a delivery of id to consumer c: a new row, or (as Redis does
 * after SETID moved the cursor back) a row moved to c with count 1.
 * Updates g->pending and c->pending; a previous owner's record is updated
 * in storage. */
int pel_deliver(struct storage_txn *t, struct group_meta *g, struct consumer_meta *c,
	const struct stream_id *id, uint64_t now);
/* pel_deliver() of an id above pel_last(), which cannot have a row: it
 * skips the lookup. XREADGROUP's '>' checks that once per call. */
int pel_deliver_new(struct storage_txn *t, struct group_meta *g, struct consumer_meta *c,
	const struct stream_id *id, uint64_t now);
/* Writes row r (owned by c; c NULL and r->cid PEL_UNOWNED for a released
 * row) as it is, moving it from its previous owner prev_cid when that
 * differs: PEL_NEW for a new row (as XCLAIM FORCE makes), PEL_UNOWNED for
 * a released one. */
int pel_put(struct storage_txn *t, struct group_meta *g, struct consumer_meta *c,
	const struct pel_row *r, uint64_t prev_cid);
/* Releases row r to the group (XNACK): no owner, delivery time 0, the
 * count as r has it. prev_cid is its owner before (PEL_NEW: a new row, as
 * XNACK FORCE makes; PEL_UNOWNED: already released). Updates g->pending
 * and the previous owner's record in storage (see the note below). */
int pel_release(struct storage_txn *t, struct group_meta *g, const struct pel_row *r,
	uint64_t prev_cid);
/* pel_release() with a delivery time of until (ms): XNACK DELAY's row,
 * which no one takes before then (0: at once). */
int pel_release_until(struct storage_txn *t, struct group_meta *g, const struct pel_row *r,
	uint64_t prev_cid, uint64_t until);
/* Removes id from the group PEL and its owner's (none when released); returns ECHD_ENOTFOUND
 * when it was not pending. Updates g and the owner's record in storage.
 *
 * Consumer records: pel_remove(), and pel_deliver()/pel_put() moving a row
 * away from another consumer, change that owner's record in storage. A
 * caller holding a copy of that record must save its own changes first
 * and reload (or adjust) the copy after, or it writes a stale count back. */
int pel_remove(struct storage_txn *t, struct group_meta *g, const struct stream_id *id);
/* pel_remove() for many ids (XACK): the owners' pending counts are
 * gathered in *run while the owner stays the same, and written when it
 * changes and by pel_run_end(), which must follow the last call. So ten ids
 * of one consumer write its record once, not ten times. Start with a
 * zeroed run. */
struct pel_run {
	uint64_t cid;
	uint64_t n;
};
int pel_remove_run(struct storage_txn *t, struct group_meta *g, const struct stream_id *id,
	struct pel_run *run);
int pel_run_end(struct storage_txn *t, const struct group_meta *g, struct pel_run *run);

/* The highest id in the group PEL; ECHD_ENOTFOUND when it is empty. */
int pel_last(struct storage_txn *t, const struct group_meta *g, struct stream_id *out);

/* Iterates the group PEL (cid 0) or one consumer's PEL within [start, end],
 * with one cursor of t: destroy the iterator before t ends. */
struct pel_iter;
int pel_iter_create(struct storage_txn *t, const struct group_meta *g, uint64_t cid,
	const struct stream_id *start, const struct stream_id *end, struct pel_iter **out);
/* Returns 0 with *r, or ECHD_ENOTFOUND at the end. Writes between calls
 * are allowed: after one, the iterator seeks past the last row it
 * returned (storage.h's cursor rule); otherwise it moves on. */
int pel_iter_next(struct pel_iter *it, struct pel_row *r);
void pel_iter_destroy(struct pel_iter *it);

/* ---- references to entries (deletion policies) ---------------------------- */
/* Every group of a stream, loaded once, for the commands that delete
 * entries under DELREF or ACKED (XDELEX, XACKDEL, XADD and XTRIM's
 * trimming). An entry is held by a group that has it pending or has not
 * yet delivered it (its last-delivered id is before it); ACKED deletes
 * only entries no group holds. */
struct group_refs;
/* Loads m's groups. Returns 0 with *out owned (free with
 * group_refs_destroy()), or an error. */
int group_refs_create(struct storage_txn *t, const struct stream_meta *m,
	struct group_refs **out);
/* *held when some entry id in [first, last] is held by a group; *stop when
 * every id from first on is (first is past some group's cursor). With no
 * groups nothing is held. */
int group_refs_held(struct group_refs *r, const struct stream_id *first,
	const struct stream_id *last, bool *held, bool *stop);
/* Drops id from every group's PEL and its owner's list; *n (may be NULL)
 * gets how many groups had it. The group records are written by
 * group_refs_save(). */
int group_refs_drop(struct group_refs *r, const struct stream_id *id, uint64_t *n);
/* Fills *out with hooks over r for stream_trim() under policy. */
void group_refs_trim(struct group_refs *r, enum stream_ref_policy policy,
	struct stream_refs *out);
/* Writes the records of the groups group_refs_drop() changed. */
int group_refs_save(struct group_refs *r);
/* Frees r (NULL: no-op); unsaved changes to group records are lost. */
void group_refs_destroy(struct group_refs *r);
#endif
