/* storage_impl.h - for storage backend authors only; the broker includes
 * storage.h. A backend fills a struct storage_ops and embeds struct
 * storage (and struct storage_txn / storage_cursor) first in its own. */
#ifndef ECHD_STORAGE_STORAGE_IMPL_H
#define ECHD_STORAGE_STORAGE_IMPL_H

#include "storage.h"

#define STORAGE_OPS_V1 1

struct storage_ops {
	int version; /* STORAGE_OPS_V1; append-only */
	const char *name;
	int (*open)(const struct storage_opts *o, struct storage **out);
	void (*close)(struct storage *st); /* accepts half-open */
	int (*txn_begin)(struct storage *st, struct storage_txn *parent, unsigned flags,
		struct storage_txn **out);
	int (*txn_commit)(struct storage_txn *t); /* a top-level write one that
						   * returns 0 gets generation
						   * st->commit_gen + 1 */
	void (*txn_abort)(struct storage_txn *t);
	int (*get)(struct storage_txn *t, enum storage_table tb, const struct st_buf *k,
		struct st_buf *v);
	int (*put)(struct storage_txn *t, enum storage_table tb, const struct st_buf *k,
		const struct st_buf *v, unsigned flags);
	int (*del)(struct storage_txn *t, enum storage_table tb, const struct st_buf *k);
	int (*cursor_open)(struct storage_txn *t, enum storage_table tb,
		struct storage_cursor **out);
	void (*cursor_close)(struct storage_cursor *c);
	int (*cursor_seek)(struct storage_cursor *c, const struct st_buf *k, struct st_buf *key,
		struct st_buf *val);
	int (*cursor_seek_last)(struct storage_cursor *c, const struct st_buf *k,
		struct st_buf *key, struct st_buf *val);
	int (*cursor_next)(struct storage_cursor *c, struct st_buf *key, struct st_buf *val);
	int (*cursor_prev)(struct storage_cursor *c, struct st_buf *key, struct st_buf *val);
	int (*cursor_del)(struct storage_cursor *c);
	int (*stat)(struct storage *st, struct storage_stat *out);
	int (*grow)(struct storage *st, uint64_t max_bytes); /* capacity; may be NULL */
	int (*sync)(struct storage *st); /* then durable_gen() is st->commit_gen */
	int (*copy)(struct storage *st, const char *dir);
	int (*free_bytes)(struct storage *st, uint64_t *out); /* capacity; may be NULL */
	int (*reserve)(struct storage *st); /* capacity; may be NULL */
	void (*cursor_ahead)(struct storage_cursor *c, unsigned rows); /* may be NULL */
	/* Capacity: storage.h's storage_write_admit(). NULL: no capacity,
	 * every write admitted (then grow, free_bytes and reserve are NULL). */
	int (*write_admit)(struct storage *st, uint64_t max_bytes, struct storage_room *out);
	/* storage.h's storage_durable_gen(), in st->commit_gen's numbering.
	 * NULL: every commit is durable when it returns. */
	uint64_t (*durable_gen)(struct storage *st);
	/* HA: storage.h's storage_ha_poll() and storage_ha_role(); both NULL
	 * for a store that is always active. */
	int (*ha_poll)(struct storage *st, struct storage_ha *out);
	enum storage_role (*ha_role)(const struct storage *st);
};

struct storage {
	const struct storage_ops *ops;
	bool read_only;             /* storage.c: opened so */
	struct storage_txn *writer; /* storage.c: the top-level write txn */
	uint64_t commit_gen;        /* storage.c: top-level write commits since open */
};
/* The backend sets ops, st and txn; storage.c keeps the rest, for every
 * backend alike: it refuses a txn_begin that breaks storage.h's rules
 * (bad flags, a read-only parent, a second child or writer, writing a
 * read-only storage) before the backend sees it, counts writes, polices
 * cursors (storage.h's rule), ends an open child before its parent, and
 * closes the cursors a transaction left open before the backend's commit
 * or abort sees it. */
struct storage_txn {
	struct storage *st;
	struct storage_txn *parent, *child;  /* storage.c */
	bool rdonly;                         /* storage.c */
	uint64_t writes[STORAGE_T__COUNT];   /* storage.c: rows written per table,
					      * committed children included */
	struct storage_cursor *cursors;      /* storage.c: the open ones */
};
struct storage_cursor {
	struct storage_txn *txn;
	enum storage_table tb; /* storage.c */
	uint64_t seen;         /* storage.c: txn->writes[tb] at the last move;
				* CURSOR_UNSET before the first */
	struct storage_cursor *prev, *next; /* storage.c: in txn->cursors */
};

extern const struct storage_ops st_lmdb_ops;
extern const struct storage_ops st_fault_ops; /* st_fault.c: tests only */
extern const struct storage_ops st_mem_ops;   /* st_mem.c: in memory, not persistent */
extern const struct storage_ops st_pg_ops;    /* st_pg.c: PostgreSQL through libpq */

#endif
