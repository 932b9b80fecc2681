/* storage_impl.h - for storage backend authors only; the broker includes
 * storage.h. A backend fills a struct storage_ops and embeds struct
 * storage (and struct storage_txn / storage_cursor) first in its own; an
 * engine that wraps another starts from forward.h's base instead. */
#ifndef ECHD_STORAGE_STORAGE_IMPL_H
#define ECHD_STORAGE_STORAGE_IMPL_H

#include "storage.h"

/* V2: capacity and HA left the vtable for the optional interfaces (iface),
 * and the options became opaque (storage_opts_read()). */
#define STORAGE_OPS_V2 2

/* The optional interfaces of storage.h, as an engine's iface() is asked
 * for them (the query-interface idea: one entry in the vtable, however many
 * interfaces come). */
enum storage_iface {
	STORAGE_IFACE_CAPACITY, /* returns a struct storage_capacity * */
	STORAGE_IFACE_HA,       /* returns a struct storage_ha * */
	STORAGE_IFACE_FETCH,    /* returns a struct storage_fetch * */
	STORAGE_IFACE_MAINTAIN, /* returns a struct storage_maintain * */
	STORAGE_IFACE_INFLIGHT, /* returns a struct storage_inflight * */
};

/* Tables private to the engines, past the model's (storage.h), so that
 * enum storage_table and its users stay as they are: an engine that wraps
 * another reaches them in the inner one through the public functions, and
 * every per-table array of storage.c's and st_lmdb.c's has room for them.
 * STORAGE_T_STAGE: st_stage.c's staging table, a sub-database of lmdb's
 * (which refuses to open it for writing unless lmdb.stage-owner is set). */
#define STORAGE_T_STAGE ((enum storage_table)STORAGE_T__COUNT)
#define STORAGE_T__ALL  (STORAGE_T__COUNT + 1)

struct storage_ops {
	int version; /* STORAGE_OPS_V2; append-only */
	const char *name;
	/* NULL, or where storage.c takes every operation left NULL here:
	 * &storage_fwd_ops for a wrapper (forward.h), which then names only
	 * the operations it changes. name, open and close are always its own. */
	const struct storage_ops *base;
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
	int (*sync)(struct storage *st); /* then durable_gen() is st->commit_gen */
	int (*copy)(struct storage *st, const char *dir);
	void (*cursor_ahead)(struct storage_cursor *c, unsigned rows); /* may be NULL */
	/* storage.h's storage_durable_gen(), in st->commit_gen's numbering.
	 * NULL: every commit is durable when it returns. */
	uint64_t (*durable_gen)(struct storage *st);
	/* The optional interface which (an enum storage_iface), or NULL when
	 * st has none; borrowed, valid until st is closed. NULL: none at all. */
	void *(*iface)(struct storage *st, enum storage_iface which);
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
	uint64_t writes[STORAGE_T__ALL];     /* storage.c: rows written per table,
					      * committed children included (a
					      * maintenance step's under
					      * STORAGE_T_STAGE) */
	struct storage_cursor *cursors;      /* storage.c: the open ones */
};
struct storage_cursor {
	struct storage_txn *txn;
	enum storage_table tb; /* storage.c */
	uint64_t seen;         /* storage.c: txn->writes[tb] at the last move;
				* CURSOR_UNSET before the first */
	struct storage_cursor *prev, *next; /* storage.c: in txn->cursors */
};

/* Capacity (storage.h): an engine with a bounded store embeds one struct
 * storage_capacity, its ops pointing at a static table and st at the
 * engine itself, and returns it from iface(STORAGE_IFACE_CAPACITY). Each
 * call gets that st. */
struct storage_capacity_ops {
	int (*admit)(struct storage *st, uint64_t max_bytes, struct storage_room *out);
	int (*grow)(struct storage *st, uint64_t max_bytes);
	int (*stat)(struct storage *st, struct storage_capacity_stat *out);
	int (*free_bytes)(struct storage *st, uint64_t *out);
	int (*reserve)(struct storage *st);
};
struct storage_capacity {
	const struct storage_capacity_ops *ops;
	struct storage *st; /* the engine that answers */
};

/* High availability (storage.h), the same way: iface(STORAGE_IFACE_HA). */
struct storage_ha_ops {
	int (*poll)(struct storage *st, struct storage_ha_state *out);
	enum storage_role (*role)(const struct storage *st);
	int (*confirm)(struct storage *st); /* NULL: the role says */
	/* NULL: a store of one piece (storage_ha_nparts() 0) */
	size_t (*nparts)(const struct storage *st);
	int (*part)(const struct storage *st, size_t i, struct storage_ha_part *out);
	/* NULL: parts stay where they are (-ENOTSUP) */
	int (*part_move)(struct storage *st, size_t i, const char *url, char *why, size_t len);
	/* NULL: no registry of front ends (storage_ha_nfronts() 0) */
	size_t (*nfronts)(const struct storage *st);
	int (*front)(const struct storage *st, size_t i, struct storage_ha_front *out);
};
struct storage_ha {
	const struct storage_ha_ops *ops;
	struct storage *st;
};

/* Fetching (storage.h), the same way: iface(STORAGE_IFACE_FETCH). */
struct storage_fetch_ops {
	int (*poll)(struct storage *st, struct storage_fetch_state *out);
	uint64_t (*misses)(const struct storage *st);
};
struct storage_fetch {
	const struct storage_fetch_ops *ops;
	struct storage *st;
};

/* Deferred work (storage.h), the same way: iface(STORAGE_IFACE_MAINTAIN).
 * step returns the rows it wrote (>= 0), which storage.c counts as writes
 * of t, or a negative error; t is always a transaction of st itself. */
struct storage_maintain_ops {
	bool (*due)(struct storage *st, bool idle);
	int (*step)(struct storage_txn *t, bool idle, bool *more);
	int (*stat)(struct storage *st, struct storage_maintain_stat *out);
	int (*verify)(struct storage_txn *t, storage_problem_fn problem, void *ud,
		uint64_t *rows);
};
struct storage_maintain {
	const struct storage_maintain_ops *ops;
	struct storage *st;
};

/* Commits in flight (storage.h), the same way: iface(STORAGE_IFACE_INFLIGHT). */
struct storage_inflight_ops {
	int (*poll)(struct storage *st, int *fd);
};
struct storage_inflight {
	const struct storage_inflight_ops *ops;
	struct storage *st;
};

/* st's optional interface which, or NULL (for wrappers passing on their
 * inner engine's, and for storage.c's typed getters). */
void *storage_iface(struct storage *st, enum storage_iface which);

/* Opens an engine by its ops rather than its name (wrappers over an engine
 * they name by ops; tests' own engines). As storage_open(). */
int storage_open_ops(const struct storage_ops *ops, const struct storage_opts *o,
	struct storage **out);

/* Engine options (storage.h's storage_opts.opt): an engine describes its
 * own in a table and reads them with storage_opts_read(). */
enum storage_optdef_type {
	STORAGE_OPTDEF_U64, /* decimal digits only, min..max; into a uint64_t */
	STORAGE_OPTDEF_STR, /* any string; into a const char * borrowed from the opts */
};
struct storage_optdef {
	const char *name; /* without the engine's prefix: "map-size" */
	enum storage_optdef_type type;
	uint64_t min, max; /* STORAGE_OPTDEF_U64: the values allowed */
	size_t off;        /* where in the engine's settings struct */
};
/* Reads the options of o named "<engine>.<name>" into the settings at out
 * (fields not named keep what they hold: the engine's defaults), by the
 * ndefs defs; options of other engines are left alone. Returns 0, or
 * ECHD_EINVAL for a name of engine's not in defs or a malformed or
 * out-of-range value, after logging which option and why. */
int storage_opts_read(const struct storage_opts *o, const char *engine,
	const struct storage_optdef *defs, size_t ndefs, void *out);

extern const struct storage_ops st_lmdb_ops;
extern const struct storage_ops st_fault_ops; /* st_fault.c: tests only */
extern const struct storage_ops st_mem_ops;   /* st_mem.c: in memory, not persistent */
extern const struct storage_ops st_pg_ops;    /* st_pg.c: PostgreSQL through libpq */
extern const struct storage_ops st_fwd_ops;   /* st_fwd.c: tests only: forwards to mem */
extern const struct storage_ops st_stage_ops; /* st_stage.c: lmdb, written in arrival order */

#endif
