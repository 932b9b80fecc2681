/* st_lmdb.c - the LMDB storage backend.
 *
 * One environment per data directory, one named sub-database per table.
 * This is the only file that includes <lmdb.h>: LMDB return codes are
 * translated here and never cross the vtable.
 */
#define _GNU_SOURCE /* statx() */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <lmdb.h>
#include <setjmp.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "echd.h"
#include "storage_impl.h"

/* storage_capacity_grow() adds at least this much. */
#define GROW_MIN_STEP ((uint64_t)64 << 20)
/* Transaction wrappers kept for reuse: one nested txn per write command. */
#define TXN_CACHE_MAX 8
/* data.mdb and lock.mdb: echo-admin may run as another user of the group. */
#define ENV_FILE_MODE 0640
/* How often a full file system is asked again for room when nothing
 * commits (lmdb_write_admit()). */
#define FS_RETRY_MS 1000
/* Zeroes written past LMDB's last page (see zero_ahead()). */
#define ZERO_AHEAD_MIN ((uint64_t)1 << 20)
#define ZERO_AHEAD_MAX ((uint64_t)2 << 20)

/* The size of the data file, without asking for its times. Where the file
 * system keeps fine-grained timestamps (ext4 and XFS since Linux 6.13), a
 * stat() that reads them makes the next write stamp a new mtime, so every
 * commit's fdatasync writes the inode as well; unasked, the stamp changes
 * once a clock tick. Measured here (ext4, 4 KiB write + fdatasync): 160 us
 * against 230 with an fstat() after each. */
static int
file_size(mdb_filehandle_t fd, uint64_t *out)
{
	struct stat sb;

#ifdef STATX_SIZE
	struct statx sx;

	if (statx(fd, "", AT_EMPTY_PATH, STATX_SIZE, &sx) == 0 && (sx.stx_mask & STATX_SIZE)) {
		*out = sx.stx_size;
		return 0;
	}
	/* EPERM under a seccomp filter, or a file system that did not say
	 * (glibc itself stands in for statx on kernels without it): fstat. */
#endif
	if (fstat(fd, &sb) != 0) {
		/* never 0 here: the callers read *out after a 0 */
		return errno > 0 ? -errno : -EIO;
	}
	*out = (uint64_t)sb.st_size;
	return 0;
}

/* A switch rather than an array: -Wswitch (-Werror) then refuses to build
 * until a table added to storage.h gets its sub-database name here. */
static const char *
table_name(enum storage_table tb)
{
	if (tb == STORAGE_T_STAGE) {
		return "stage"; /* st_stage.c's (storage_impl.h) */
	}
	switch (tb) {
	case STORAGE_T_META:
		return "meta";
	case STORAGE_T_KEYS:
		return "keys";
	case STORAGE_T_ENTRIES:
		return "entries";
	case STORAGE_T_NODES:
		return "nodes";
	case STORAGE_T_GROUPS:
		return "groups";
	case STORAGE_T_CONSUMERS:
		return "consumers";
	case STORAGE_T_CONSREC:
		return "consrec";
	case STORAGE_T_PEL:
		return "pel";
	case STORAGE_T_CPEL:
		return "cpel";
	case STORAGE_T_BYID:
		return "byid";
	case STORAGE_T_TRASH:
		return "trash";
	case STORAGE_T_EXPIRES:
		return "expires";
	case STORAGE_T_IDMP:
		return "idmp";
	case STORAGE_T_DUE:
		return "due";
	case STORAGE_T__COUNT:
		break;
	}
	return NULL;
}

/* Where a cursor stands. LMDB's own notion differs at the edges (after a
 * MDB_NEXT past the end, MDB_PREV returns the second-to-last row), so the
 * edges are tracked here and LMDB is asked only to move from a real row. */
enum cursor_pos {
	POS_UNSET,   /* never positioned: next() is first, prev() is last */
	POS_ON,      /* on a row */
	POS_BEFORE,  /* before the first row: next() is first */
	POS_AFTER,   /* after the last row: prev() is last */
	POS_DELETED, /* row deleted; LMDB already stands on its successor */
};

struct lmdb_cursor {
	struct storage_cursor base;
	MDB_cursor *mc;
	enum cursor_pos pos;
	struct lmdb_cursor *prev, *next; /* the txn's open cursors */
};

struct lmdb_txn {
	struct storage_txn base;
	MDB_txn *mt;
	struct lmdb_txn *parent;
	struct lmdb_txn *child;      /* open nested txn, if any */
	struct lmdb_cursor *cursors; /* closed when the txn ends */
	int err;                     /* first error that made LMDB fail the txn */
	bool rdonly;
	MDB_cursor *probe[STORAGE_T__ALL];   /* write_probe()'s, opened at first use */
	struct lmdb_txn *next_free; /* link in st_lmdb.free_txns */
};

struct st_lmdb {
	struct storage base;
	struct storage_capacity cap; /* the map: storage_capacity() */
	MDB_env *env;
	MDB_dbi dbi[STORAGE_T__ALL];
	unsigned absent;            /* read-only: tables an older echd did not make (bits) */
	bool read_only;
	unsigned ntxn;              /* open txns, nested and read ones included */
	struct lmdb_txn *writer;    /* the open top-level write txn */
	MDB_txn *idle_rd;           /* a reset read txn, renewed by the next reader */
	struct lmdb_txn *free_txns; /* wrapper cache */
	unsigned nfree;
	uint64_t commits;
	uint64_t syncs;
	int reserve_err;    /* zero_ahead()'s last failure, 0 once it succeeds */
	bool nometasync;    /* STORAGE_SYNC_DATA: commits leave the meta page unflushed */
	bool meta_pending;  /* a commit's meta page is written, not flushed */
	uint64_t durable;   /* storage_durable_gen(): every commit up to it is on disk */
	bool fs_full;       /* lmdb_write_admit()'s last answer: the file system is full */
	uint64_t reserve_retry_ms; /* when it last claimed disk again, CLOCK_MONOTONIC */
	struct {            /* write_probe(): the key whose path it last read, per table */
		size_t len; /* 0: none since the writer began or a child aborted */
		unsigned char key[STORAGE_KEY_MAX];
	} probed[STORAGE_T__ALL];
};

static struct st_lmdb *
lmdb_from(struct storage *st)
{
	assert(st->ops == &st_lmdb_ops);
	return (struct st_lmdb *)st;
}

static struct lmdb_txn *
txn_from(struct storage_txn *t)
{
	assert(t->st->ops == &st_lmdb_ops);
	return (struct lmdb_txn *)t;
}

static struct lmdb_cursor *
cursor_from(struct storage_cursor *c)
{
	assert(c->txn->st->ops == &st_lmdb_ops);
	return (struct lmdb_cursor *)c;
}

/* ---- corruption met by a read ---------------------------------------- */

/* LMDB checks some of what it reads from a page with assertions, which
 * call the env's assert function and then abort(): a page of the wrong
 * kind where a leaf should be (IS_LEAF in mdb_cursor_next) killed the
 * process serving a read. The reads (mdb_get, mdb_cursor_get) run under
 * guarded_read(), and the assert function jumps back out of LMDB to it
 * instead of returning, which turns the assertion into MDB_CORRUPTED.
 * A read changes nothing LMDB keeps (no dirty page, no free list), so
 * nothing is left half-done but the cursor, which the caller drops with
 * the error. Writes are not jumped out of (see write_probe()): they read
 * their key's path under the guard first. Thread-local: each thread's
 * reads are its own. */
static _Thread_local sigjmp_buf *read_guard;

static void
lmdb_assert(MDB_env *env, const char *msg)
{
	echd_log(ECHD_LOG_WARNING, "lmdb: %s: the data file is corrupt", msg);
	if (read_guard != NULL) {
		sigjmp_buf *jb = read_guard;

		read_guard = NULL;
		siglongjmp(*jb, 1);
	}
	/* not a guarded read: LMDB aborts */
}

/* mdb_cursor_get(), or mdb_get() when mc is NULL, with assertions in
 * them returned as MDB_CORRUPTED. */
static int
guarded_read(MDB_cursor *mc, MDB_txn *mt, MDB_dbi dbi, MDB_val *k, MDB_val *v,
	MDB_cursor_op op)
{
	sigjmp_buf jb;
	int rc;

	if (sigsetjmp(jb, 0) != 0) {
		return MDB_CORRUPTED;
	}
	read_guard = &jb;
	rc = mc != NULL ? mdb_cursor_get(mc, k, v, op) : mdb_get(mt, dbi, k, v);
	read_guard = NULL;
	return rc;
}

/* Remembers that key's path in table tb was read under the guard. */
static void
probed(struct st_lmdb *s, enum storage_table tb, const MDB_val *key)
{
	if (key->mv_size <= sizeof(s->probed[tb].key)) {
		memcpy(s->probed[tb].key, key->mv_data, key->mv_size);
		s->probed[tb].len = key->mv_size;
	}
}

/* Corruption met by a write. A write cannot be jumped out of like a read:
 * mdb_put() links a cursor on its stack into the txn before it searches,
 * and page splits and merges link more, so after a jump ending the txn
 * would walk (and free) cursors of a stack frame that is gone. So a put or
 * a del first walks its key's path, root to leaf, with a guarded read: the
 * pages its own search is about to meet, where LMDB's checks of a page's
 * kind and key count are. Corruption found there fails the write (and its
 * txn) before anything changes; a corrupt sibling met only when a page is
 * split or merged still aborts.
 *
 * A path once read needs no second look in the same writer: every page a
 * write then leaves on it is a copy LMDB made of a page read, or a new one
 * (XADD puts the same keys row and node row again and again; XACK reads
 * the pending row it deletes). So the probe, and lmdb_get() in a write
 * txn, remember the last key per table; a child's abort may bring back
 * pages the child did not read, so it forgets, as does a new writer. A
 * page merged into one on the path in between is LMDB's copy of a page
 * not read here: the probe is a best effort against a corrupt file, not a
 * proof. Returns 0 or MDB_CORRUPTED. */
static int
write_probe(struct st_lmdb *s, struct lmdb_txn *t, enum storage_table tb, MDB_val *key)
{
	MDB_val k = *key, v;
	size_t n = key->mv_size;

	if (n != 0 && n == s->probed[tb].len && memcmp(key->mv_data, s->probed[tb].key, n) == 0) {
		return 0;
	}
	/* A cursor of its own per table, which LMDB keeps placed through the
	 * txn's writes: a key on the leaf it stands on (the next pending row,
	 * the next entry) is found there without a walk from the root, as
	 * mdb_cursor_set() looks at the current page first. */
	if (t->probe[tb] == NULL && mdb_cursor_open(t->mt, s->dbi[tb], &t->probe[tb]) != 0) {
		t->probe[tb] = NULL; /* mdb_get() then */
	}
	if (guarded_read(t->probe[tb], t->mt, s->dbi[tb], &k, &v, MDB_SET_RANGE) ==
		MDB_CORRUPTED) {
		return MDB_CORRUPTED;
	}
	probed(s, tb, key);
	return 0;
}

static void
probes_forget(struct st_lmdb *s)
{
	for (int tb = 0; tb < STORAGE_T__ALL; tb++) {
		s->probed[tb].len = 0;
	}
}

/* LMDB codes stop here. */
static int
xlate(int rc)
{
	switch (rc) {
	case MDB_SUCCESS:
		return 0;
	case MDB_NOTFOUND:
		return ECHD_ENOTFOUND;
	case MDB_KEYEXIST:
		return ECHD_EEXIST;
	case MDB_MAP_FULL:
		return ECHD_EMAPFULL;
	case MDB_PAGE_NOTFOUND:
	case MDB_CORRUPTED:
	case MDB_VERSION_MISMATCH:
	case MDB_INVALID:
	case MDB_INCOMPATIBLE:
		return ECHD_ECORRUPT;
	case MDB_DBS_FULL:
	case MDB_READERS_FULL:
	case MDB_TLS_FULL:
	case MDB_TXN_FULL:
	case MDB_CURSOR_FULL:
	case MDB_PAGE_FULL:
	case MDB_MAP_RESIZED:
		return ECHD_ELIMIT;
	case MDB_BAD_RSLOT:
	case MDB_BAD_TXN:
	case MDB_BAD_VALSIZE:
	case MDB_BAD_DBI:
		return ECHD_EINVAL;
	case MDB_PANIC:
		return -EIO;
	}
	if (rc > 0) {
		return -rc;
	}
	/* A code from a newer LMDB than this file knows. */
	return -EIO;
}

static MDB_val
to_val(const struct st_buf *b)
{
	/* LMDB never writes through mv_data of an input. */
	MDB_val v = {.mv_size = b->len, .mv_data = (void *)b->data};
	return v;
}

static void
to_buf(const MDB_val *v, struct st_buf *out)
{
	if (out != NULL) {
		out->data = v->mv_data;
		out->len = v->mv_size;
	}
}

/* Translates rc, remembering errors after which LMDB has marked the txn
 * failed: committing such a child would also fail its parent (LMDB sets
 * MDB_TXN_ERROR on the parent), so lmdb_txn_commit() aborts it instead. */
static int
txn_err(struct lmdb_txn *t, int rc)
{
	switch (rc) {
	case MDB_SUCCESS:
	case MDB_NOTFOUND:
	case MDB_KEYEXIST:
	case MDB_BAD_VALSIZE: /* checked before anything changes */
	case EINVAL:
	case EACCES:          /* a write in a read txn */
		break;
	default:
		if (t->err == 0) {
			t->err = xlate(rc);
		}
		break;
	}
	return xlate(rc);
}

/* ---- environment ------------------------------------------------------- */

static void
lmdb_close(struct storage *st)
{
	struct st_lmdb *s = lmdb_from(st);
	struct lmdb_txn *t;

	assert(s->ntxn == 0);
	if (s->idle_rd != NULL) {
		mdb_txn_abort(s->idle_rd);
	}
	while ((t = s->free_txns) != NULL) {
		s->free_txns = t->next_free;
		echd_free(t);
	}
	if (s->env != NULL) {
		mdb_env_close(s->env);
	}
	echd_free(s);
}

/* The map is the larger of what the options ask and what the environment
 * already records: a map grown in an earlier run is not shrunk, except to
 * max (maxdisk lowered since), and LMDB never shrinks it below the data. */
static int
settle_map_size(struct st_lmdb *s, uint64_t want, uint64_t max)
{
	MDB_envinfo info;
	int rc;

	/* Size 0 adopts the size recorded in the meta page. */
	rc = mdb_env_set_mapsize(s->env, 0);
	if (rc != 0) {
		return rc;
	}
	rc = mdb_env_info(s->env, &info);
	if (rc != 0) {
		return rc;
	}
	if (info.me_mapsize < want) {
		rc = mdb_env_set_mapsize(s->env, want);
	} else if (max != 0 && info.me_mapsize > max && !s->read_only) {
		MDB_stat ms;
		uint64_t used, room;

		/* Data already past max keep room to be trimmed in: a map
		 * full to its last page cannot even commit a deletion. */
		rc = mdb_env_stat(s->env, &ms);
		if (rc != 0) {
			return rc;
		}
		used = ((uint64_t)info.me_last_pgno + 1) * ms.ms_psize;
		room = 64 * (uint64_t)ms.ms_psize;
		room = max / 16 > room ? max / 16 : room;
		room = (room + ms.ms_psize - 1) / ms.ms_psize * ms.ms_psize;
		if (max < used + room) {
			max = used + room < info.me_mapsize ? used + room : info.me_mapsize;
		}
		rc = mdb_env_set_mapsize(s->env, max);
	}
	return rc;
}

static int
open_tables(struct st_lmdb *s)
{
	MDB_txn *mt;
	unsigned flags = s->read_only ? 0 : MDB_CREATE;
	int rc;

	rc = mdb_txn_begin(s->env, NULL, s->read_only ? MDB_RDONLY : 0, &mt);
	if (rc != 0) {
		return rc;
	}
	for (int i = 0; i < STORAGE_T__ALL; i++) {
		const char *name = table_name((enum storage_table)i);

		assert(name != NULL);
		rc = mdb_dbi_open(mt, name, flags, &s->dbi[i]);
		if (rc == MDB_NOTFOUND && (i == STORAGE_T_EXPIRES || i == STORAGE_T_IDMP ||
						  i == STORAGE_T_DUE || i == STORAGE_T_STAGE)) {
			/* Read-only on an environment of an echd before expiry,
			 * idempotent producers, policy deadlines or staging:
			 * the table reads as empty. */
			s->absent |= 1u << i;
			rc = 0;
		} else if (rc == MDB_NOTFOUND) {
			/* Read-only on an environment echd never opened. */
			rc = MDB_INVALID;
		}
		if (rc != 0) {
			mdb_txn_abort(mt);
			return rc;
		}
	}
	/* Even a read txn must commit for its handles to outlive it. */
	return mdb_txn_commit(mt);
}

/* Refuses to write an environment whose staging table holds rows when the
 * opener is not the engine that reads them (st_stage.c, which sets
 * lmdb.stage-owner): they are the newest state of their rows, and writing
 * around them would lose them. */
static int
check_no_staged_rows(struct st_lmdb *s, const char *dir)
{
	MDB_txn *mt;
	MDB_stat ms;
	int rc;

	rc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, &mt);
	if (rc != 0) {
		return xlate(rc);
	}
	rc = mdb_stat(mt, s->dbi[STORAGE_T_STAGE], &ms);
	mdb_txn_abort(mt);
	if (rc != 0) {
		return xlate(rc);
	}
	if (ms.ms_entries == 0) {
		return 0;
	}
	echd_log(ECHD_LOG_WARNING,
		"lmdb: %s holds %llu staged rows not yet moved to their tables: open it with "
		"storage lmdb-staged (which moves them home)",
		dir, (unsigned long long)ms.ms_entries);
	return ECHD_EINVAL;
}

/* Refuses a data.mdb that exists but is empty: LMDB would take it for a
 * new environment and echd would serve an empty broker without a word. A
 * new directory has no data.mdb at all. */
static int
check_not_emptied(const char *dir)
{
	char path[4096];
	struct stat sb;

	if ((size_t)snprintf(path, sizeof(path), "%s/data.mdb", dir) >= sizeof(path)) {
		return -ENAMETOOLONG;
	}
	if (stat(path, &sb) != 0 || sb.st_size != 0) {
		return 0; /* no file (a new directory), or LMDB's to judge */
	}
	echd_log(ECHD_LOG_WARNING,
		"lmdb: %s is empty (0 bytes): its data are lost (emptied, or a first start "
		"that crashed before writing any). Restore it from a backup; to start afresh with "
		"an empty broker, remove data.mdb and lock.mdb from %s",
		path, dir);
	return ECHD_ECORRUPT;
}

/* Refuses a data.mdb shorter than the pages its meta page says are in
 * use (a copy or restore cut short): reading a page past the end of the
 * file through the map would kill the process with SIGBUS. The meta
 * pages themselves are read by LMDB with read(), not through the map. */
static int
check_not_truncated(struct st_lmdb *s, const char *dir)
{
	MDB_envinfo info;
	MDB_stat ms;
	mdb_filehandle_t fd;
	uint64_t size, need;
	int rc;

	rc = mdb_env_info(s->env, &info);
	if (rc == 0) {
		rc = mdb_env_stat(s->env, &ms);
	}
	if (rc == 0) {
		rc = mdb_env_get_fd(s->env, &fd);
	}
	if (rc != 0) {
		return xlate(rc);
	}
	rc = file_size(fd, &size);
	if (rc != 0) {
		return rc;
	}
	need = ((uint64_t)info.me_last_pgno + 1) * ms.ms_psize;
	if (size >= need) {
		return 0;
	}
	echd_log(ECHD_LOG_WARNING,
		"lmdb: %s/data.mdb is %llu bytes, but its pages reach %llu bytes: the file was "
		"cut short (a copy or restore that did not finish?). Restore it from a backup; "
		"to start afresh with an empty broker, remove data.mdb and lock.mdb from %s",
		dir, (unsigned long long)size, (unsigned long long)need, dir);
	return ECHD_ECORRUPT;
}

/* The options lmdb reads (storage.h: "lmdb.<name>"). */
struct lmdb_settings {
	uint64_t map_size; /* 0: the size recorded, or LMDB's default */
	uint64_t map_max;  /* 0: no limit */
	uint64_t stage_owner; /* 1: the opener reads the staging table (st_stage.c) */
};
static const struct storage_optdef lmdb_optdefs[] = {
	{"map-size", STORAGE_OPTDEF_U64, 0, UINT64_MAX, offsetof(struct lmdb_settings, map_size)},
	{"map-max", STORAGE_OPTDEF_U64, 0, UINT64_MAX, offsetof(struct lmdb_settings, map_max)},
	{"stage-owner", STORAGE_OPTDEF_U64, 0, 1, offsetof(struct lmdb_settings, stage_owner)},
};

static const struct storage_capacity_ops lmdb_capacity_ops;

static int
lmdb_open(const struct storage_opts *o, struct storage **out)
{
	struct lmdb_settings set = {0, 0, 0};
	struct st_lmdb *s;
	/* MDB_NOMEMINIT: LMDB would otherwise clear the unused part of every
	 * page it allocates; the file never holds anything but our rows. */
	unsigned flags = MDB_NOTLS | MDB_NOMEMINIT;
	uint64_t os_page, map_size, map_max;
	int dead = 0;
	int rc;

	rc = storage_opts_read(o, "lmdb", lmdb_optdefs,
		sizeof(lmdb_optdefs) / sizeof(lmdb_optdefs[0]), &set);
	if (rc != 0) {
		return rc;
	}
	if (set.map_max != 0 && set.map_max < set.map_size) {
		/* LMDB itself then refuses to grow past map_max from the first write. */
		set.map_size = set.map_max;
	}
	s = echd_calloc(1, sizeof(*s));
	if (s == NULL) {
		return -ENOMEM;
	}
	s->base.ops = &st_lmdb_ops;
	s->cap.ops = &lmdb_capacity_ops;
	s->cap.st = &s->base;
	s->read_only = o->read_only;

	if (o->read_only) {
		flags |= MDB_RDONLY;
	}
	if (o->sync_mode == STORAGE_SYNC_DATA) {
		/* The commit's fdatasync covers data pages only; the meta page
		 * reaches the disk with the next commit or storage_sync(). */
		flags |= MDB_NOMETASYNC;
		s->nometasync = true;
	}

	rc = mdb_env_create(&s->env);
	if (rc != 0) {
		s->env = NULL;
		goto err;
	}
	rc = mdb_env_set_assert(s->env, lmdb_assert);
	if (rc != 0) {
		goto err;
	}
	rc = mdb_env_set_maxdbs(s->env, STORAGE_T__ALL);
	if (rc != 0) {
		goto err;
	}
	/* LMDB wants a multiple of the OS page size (maxdisk may be any size). */
	os_page = (uint64_t)sysconf(_SC_PAGESIZE);
	map_size = set.map_size / os_page * os_page;
	map_max = set.map_max / os_page * os_page;
	if (map_size == 0 && set.map_size != 0) {
		map_size = os_page; /* a tiny maxdisk: LMDB raises it to its minimum */
	}
	if (map_size != 0) {
		rc = mdb_env_set_mapsize(s->env, map_size);
		if (rc != 0) {
			goto err;
		}
	}
	rc = check_not_emptied(o->dir);
	if (rc != 0) {
		lmdb_close(&s->base);
		return rc;
	}
	rc = mdb_env_open(s->env, o->dir, flags, ENV_FILE_MODE);
	if (rc != 0) {
		goto err;
	}
	rc = check_not_truncated(s, o->dir);
	if (rc != 0) {
		lmdb_close(&s->base);
		return rc;
	}
	/* Slots of crashed readers would pin old pages forever. */
	rc = mdb_reader_check(s->env, &dead);
	if (rc != 0) {
		goto err;
	}
	if (dead > 0) {
		echd_log(ECHD_LOG_WARNING, "lmdb: cleared %d stale reader slot(s) in %s", dead,
			o->dir);
	}
	rc = settle_map_size(s, map_size, map_max);
	if (rc != 0) {
		goto err;
	}
	rc = open_tables(s);
	if (rc != 0) {
		goto err;
	}
	if (!o->read_only && set.stage_owner == 0) {
		rc = check_no_staged_rows(s, o->dir);
		if (rc != 0) {
			lmdb_close(&s->base);
			return rc;
		}
	}
	*out = &s->base;
	return 0;

err:
	lmdb_close(&s->base);
	return xlate(rc);
}

/* What lmdb_stat() and the capacity interface's stat tell, read together. */
static int
figures(struct st_lmdb *s, struct storage_stat *out, struct storage_capacity_stat *cap)
{
	MDB_envinfo info;
	MDB_stat ms;
	mdb_filehandle_t fd;
	uint64_t size;
	int rc;

	rc = mdb_env_info(s->env, &info);
	if (rc == 0) {
		rc = mdb_env_stat(s->env, &ms);
	}
	if (rc != 0) {
		return xlate(rc);
	}
	out->used_bytes = ((uint64_t)info.me_last_pgno + 1) * ms.ms_psize;
	out->last_txn_id = info.me_last_txnid;
	out->commits = s->commits;
	out->syncs = s->syncs;
	cap->map_size = info.me_mapsize;
	cap->page_size = ms.ms_psize;
	cap->reserve_error = s->reserve_err;
	cap->reserve_bytes = 0;
	if (mdb_env_get_fd(s->env, &fd) == 0 && file_size(fd, &size) == 0 &&
		size > out->used_bytes) {
		cap->reserve_bytes = size - out->used_bytes;
	}
	return 0;
}

static int
lmdb_stat(struct storage *st, struct storage_stat *out)
{
	struct storage_capacity_stat cap;

	return figures(lmdb_from(st), out, &cap);
}

static int
lmdb_cap_stat(struct storage *st, struct storage_capacity_stat *out)
{
	struct storage_stat core;

	return figures(lmdb_from(st), &core, out);
}

static int
lmdb_free_bytes(struct storage *st, uint64_t *out)
{
	struct st_lmdb *s = lmdb_from(st);
	MDB_txn *txn;
	MDB_cursor *cur;
	MDB_val k, v;
	MDB_stat ms;
	uint64_t pages = 0;
	int rc;

	rc = mdb_env_stat(s->env, &ms);
	if (rc != 0) {
		return xlate(rc);
	}
	rc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn);
	if (rc != 0) {
		return xlate(rc);
	}
	/* The free list is sub-database 0; each record holds a page-number
	 * list whose first word is its length. */
	rc = mdb_cursor_open(txn, 0, &cur);
	if (rc == 0) {
		while ((rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) == 0) {
			if (v.mv_size >= sizeof(size_t)) {
				size_t n;
				memcpy(&n, v.mv_data, sizeof(n));
				pages += n;
			}
		}
		mdb_cursor_close(cur);
	}
	mdb_txn_abort(txn);
	if (rc != MDB_NOTFOUND) {
		return xlate(rc);
	}
	*out = pages * ms.ms_psize;
	return 0;
}

static int
lmdb_grow(struct storage *st, uint64_t max_bytes)
{
	struct st_lmdb *s = lmdb_from(st);
	MDB_envinfo info;
	MDB_stat ms;
	uint64_t cur, want, psize;
	int rc;

	/* mdb_env_set_mapsize() remaps: pointers held by open txns would dangle. */
	if (s->ntxn != 0) {
		return -EBUSY;
	}
	if (s->read_only) {
		return -EROFS;
	}
	rc = mdb_env_info(s->env, &info);
	if (rc == 0) {
		rc = mdb_env_stat(s->env, &ms);
	}
	if (rc != 0) {
		return xlate(rc);
	}
	cur = info.me_mapsize;
	psize = ms.ms_psize;
	want = cur > UINT64_MAX / 2 ? UINT64_MAX : cur * 2;
	if (want - cur < GROW_MIN_STEP) {
		want = cur + GROW_MIN_STEP;
	}
	/* LMDB wants a multiple of the OS page size. */
	want = (want + psize - 1) / psize * psize;
	if (max_bytes != 0 && want > max_bytes) {
		want = max_bytes / psize * psize;
	}
	if (want <= cur) {
		return ECHD_ELIMIT;
	}
	if (s->idle_rd != NULL) {
		mdb_txn_abort(s->idle_rd);
		s->idle_rd = NULL;
	}
	rc = mdb_env_set_mapsize(s->env, want);
	if (rc != 0) {
		return xlate(rc);
	}
	echd_log(ECHD_LOG_NOTICE, "lmdb: map grown from %llu to %llu bytes",
		(unsigned long long)cur, (unsigned long long)want);
	return 0;
}

static int
lmdb_sync(struct storage *st)
{
	struct st_lmdb *s = lmdb_from(st);
	int rc;

	if (s->read_only) {
		/* Nothing of ours to flush; LMDB would say EACCES. */
		return 0;
	}
	rc = mdb_env_sync(s->env, 1);
	if (rc != 0) {
		return xlate(rc);
	}
	s->syncs++;
	s->meta_pending = false;
	s->durable = s->base.commit_gen;
	return 0;
}

/* Commit N's meta page is written but not flushed (MDB_NOMETASYNC): a
 * crash before it reaches the disk reverts to commit N-1. It is in the
 * same file as the data pages, so the next commit's fdatasync, or a sync,
 * flushes it: commit N is durable when commit N+1 returns. */
static uint64_t
lmdb_durable_gen(struct storage *st)
{
	return lmdb_from(st)->durable;
}

static int
lmdb_copy(struct storage *st, const char *dir)
{
	struct st_lmdb *s = lmdb_from(st);
	char path[4096];
	int rc;

	/* The compacting copy runs in its own read txn and so does not wait
	 * for (or deadlock on) a write txn of this thread. */
	rc = xlate(mdb_env_copy2(s->env, dir, MDB_CP_COMPACT));
	if (rc != 0) {
		return rc;
	}
	/* LMDB writes the copy with O_DIRECT but never syncs it: the device's
	 * cache and the file's size and directory entry would not survive a
	 * power cut. A backup is done when it is on disk. */
	if ((size_t)snprintf(path, sizeof(path), "%s/data.mdb", dir) >= sizeof(path)) {
		return -ENAMETOOLONG;
	}
	rc = echd_fsync_path(path, O_RDONLY);
	if (rc == 0) {
		rc = echd_fsync_path(dir, O_RDONLY | O_DIRECTORY);
	}
	return rc;
}

/* ---- transactions ------------------------------------------------------ */

static struct lmdb_txn *
txn_alloc(struct st_lmdb *s)
{
	struct lmdb_txn *t = s->free_txns;

	if (t == NULL) {
		return echd_calloc(1, sizeof(*t));
	}
	s->free_txns = t->next_free;
	s->nfree--;
	memset(t, 0, sizeof(*t));
	return t;
}

static void
txn_release(struct st_lmdb *s, struct lmdb_txn *t)
{
	if (s->nfree >= TXN_CACHE_MAX) {
		echd_free(t);
		return;
	}
	t->next_free = s->free_txns;
	s->free_txns = t;
	s->nfree++;
}

/* Starts an LMDB txn, renewing the cached reader when there is one. */
static int
begin_mdb(struct st_lmdb *s, MDB_txn *parent, bool rdonly, MDB_txn **out)
{
	int rc;

	if (rdonly && s->idle_rd != NULL) {
		MDB_txn *mt = s->idle_rd;

		s->idle_rd = NULL;
		if (mdb_txn_renew(mt) == 0) {
			*out = mt;
			return 0;
		}
		mdb_txn_abort(mt);
	}
	rc = mdb_txn_begin(s->env, parent, rdonly ? MDB_RDONLY : 0, out);
	if (rc == MDB_MAP_RESIZED && s->ntxn == 0) {
		/* Another process grew the map past ours (echo-admin reading
		 * while echd writes): adopt its size, legal with no txn open. */
		rc = mdb_env_set_mapsize(s->env, 0);
		if (rc == 0) {
			rc = mdb_txn_begin(s->env, parent, rdonly ? MDB_RDONLY : 0, out);
		}
	}
	return rc;
}

static int
lmdb_txn_begin(struct storage *st, struct storage_txn *parent, unsigned flags,
	struct storage_txn **out)
{
	struct st_lmdb *s = lmdb_from(st);
	struct lmdb_txn *p = parent != NULL ? txn_from(parent) : NULL;
	bool rdonly = (flags & STORAGE_TXN_RDONLY) != 0;
	struct lmdb_txn *t;
	MDB_txn *mt;
	int rc;

	if ((flags & ~STORAGE_TXN_RDONLY) != 0) {
		return ECHD_EINVAL;
	}
	if (p != NULL) {
		if (rdonly || p->rdonly || p->child != NULL || parent->st != st) {
			return ECHD_EINVAL;
		}
	} else if (!rdonly) {
		if (s->read_only) {
			return -EROFS;
		}
		/* A second writer would wait on LMDB's mutex forever. */
		if (s->writer != NULL) {
			return -EBUSY;
		}
	}

	t = txn_alloc(s);
	if (t == NULL) {
		return -ENOMEM;
	}
	rc = begin_mdb(s, p != NULL ? p->mt : NULL, rdonly, &mt);
	if (rc != 0) {
		txn_release(s, t);
		return xlate(rc);
	}
	t->base.st = st;
	t->mt = mt;
	t->parent = p;
	t->rdonly = rdonly;
	if (p != NULL) {
		p->child = t;
	} else if (!rdonly) {
		s->writer = t;
		probes_forget(s); /* a new snapshot: what others committed is unread */
	}
	s->ntxn++;
	*out = &t->base;
	return 0;
}

static void
cursors_close(struct lmdb_txn *t)
{
	struct lmdb_cursor *c;

	while ((c = t->cursors) != NULL) {
		t->cursors = c->next;
		mdb_cursor_close(c->mc);
		echd_free(c);
	}
	for (int tb = 0; tb < STORAGE_T__ALL; tb++) {
		if (t->probe[tb] != NULL) {
			mdb_cursor_close(t->probe[tb]);
			t->probe[tb] = NULL;
		}
	}
}

/* Ends a read txn: the first one is kept reset for reuse, which saves the
 * malloc and the reader-slot search of the next mdb_txn_begin(). */
static void
read_end(struct st_lmdb *s, MDB_txn *mt)
{
	if (s->idle_rd == NULL) {
		mdb_txn_reset(mt);
		s->idle_rd = mt;
	} else {
		mdb_txn_abort(mt);
	}
}

/* The wrapper side of a txn's end, after LMDB's. */
static void
txn_end(struct st_lmdb *s, struct lmdb_txn *t)
{
	if (t->parent != NULL) {
		t->parent->child = NULL;
	} else if (s->writer == t) {
		s->writer = NULL;
	}
	assert(s->ntxn > 0);
	s->ntxn--;
	txn_release(s, t);
}

static void
lmdb_txn_abort(struct storage_txn *base)
{
	struct lmdb_txn *t = txn_from(base);
	struct st_lmdb *s = lmdb_from(base->st);

	if (t->child != NULL) {
		lmdb_txn_abort(&t->child->base);
	}
	cursors_close(t);
	if (t->rdonly) {
		read_end(s, t->mt);
	} else {
		mdb_txn_abort(t->mt);
		probes_forget(s);
	}
	txn_end(s, t);
}

/* Keeps ZERO_AHEAD_MIN..MAX of written zeroes past LMDB's last page.
 *
 * A commit that writes a page past the end of the file grows it, and its
 * fdatasync must then commit the file's new size through the filesystem
 * journal too: about twice the flush of one that only overwrites (ext4 on
 * this kind of disk: 570 us against 280). Blocks written ahead, once, make
 * the growth of the next commits overwrites. They must be written, not
 * fallocated: an unwritten extent costs a journal entry on first write.
 * They are also a reserve: when the file system is full, the broker keeps
 * them for the commands that free space (storage_capacity_stat's reserve_error).
 * Runs when no write transaction is open, so nothing else writes the
 * file; never past the map, so maxdisk still bounds the file. Returns 0
 * or the error that stopped it, remembered in s->reserve_err. */
static int
zero_ahead(struct st_lmdb *s)
{
	static const char zeroes[64 * 1024];
	MDB_envinfo info;
	MDB_stat ms;
	uint64_t used, end, want, start, size;
	mdb_filehandle_t fd;
	int err = 0;

	if (s->read_only || mdb_env_get_fd(s->env, &fd) != 0 ||
		mdb_env_info(s->env, &info) != 0 || mdb_env_stat(s->env, &ms) != 0 ||
		file_size(fd, &size) != 0) {
		return 0;
	}
	used = ((uint64_t)info.me_last_pgno + 1) * ms.ms_psize;
	want = used + ZERO_AHEAD_MAX < info.me_mapsize ? used + ZERO_AHEAD_MAX : info.me_mapsize;
	start = end = size > used ? size : used;
	if (end >= used + ZERO_AHEAD_MIN || end >= want) {
		s->reserve_err = 0;
		return 0; /* enough ahead, or the map ends there */
	}
	while (end < want) {
		size_t n = want - end < sizeof(zeroes) ? (size_t)(want - end) : sizeof(zeroes);
		ssize_t w = pwrite(fd, zeroes, n, (off_t)end);
		if (w < 0 && errno == EINTR) {
			continue;
		}
		if (w <= 0) {
			/* A full disk, say: the commits grow the file themselves
			 * as far as they can, and the next one tries again. */
			err = w < 0 ? -errno : -ENOSPC;
			break;
		}
		end += (uint64_t)w;
	}
	if (end >= used + ZERO_AHEAD_MIN) {
		err = 0; /* short of want, but enough */
	}
	/* Now, so that the file's new size is not the next commit's flush. */
	if (end > start && fdatasync(fd) != 0 && err == 0) {
		err = -errno;
	}
	if (err != 0 && s->reserve_err == 0) {
		echd_log(ECHD_LOG_VERBOSE, "lmdb: cannot write ahead of the data file: %s",
			echd_strerror(err));
	}
	s->reserve_err = err;
	return err;
}

static int
lmdb_reserve(struct storage *st)
{
	struct st_lmdb *s = lmdb_from(st);

	/* A write txn may spill pages past the last one. */
	return s->writer != NULL ? -EBUSY : zero_ahead(s);
}

static int
lmdb_txn_commit(struct storage_txn *base)
{
	struct lmdb_txn *t = txn_from(base);
	struct st_lmdb *s = lmdb_from(base->st);
	bool top, wrote;
	int rc;

	if (t->child != NULL) {
		/* As LMDB does: an open child commits first. */
		rc = lmdb_txn_commit(&t->child->base);
		if (rc != 0) {
			lmdb_txn_abort(base);
			return rc;
		}
	}
	if (t->err != 0) {
		/* LMDB would refuse with MDB_BAD_TXN and fail the parent too;
		 * report the original error and leave the parent usable. */
		rc = t->err;
		lmdb_txn_abort(base);
		return rc;
	}
	cursors_close(t);
	if (t->rdonly) {
		read_end(s, t->mt);
		txn_end(s, t);
		return 0;
	}
	top = t->parent == NULL;
	/* LMDB writes (and flushes) nothing for a txn that changed nothing. */
	wrote = storage_txn_writes(base) != 0;
	/* mdb_txn_commit() frees the txn whether it succeeds or not. */
	rc = mdb_txn_commit(t->mt);
	txn_end(s, t);
	if (rc != 0) {
		return xlate(rc);
	}
	if (top) {
		uint64_t gen = s->base.commit_gen + 1; /* storage.c's numbering */

		s->commits++;
		s->syncs++;
		if (!s->nometasync) {
			s->durable = gen;
		} else if (wrote) {
			/* This flush carried the previous commits' meta pages. */
			s->durable = gen - 1;
			s->meta_pending = true;
		} else if (!s->meta_pending) {
			s->durable = gen;
		}
		(void)zero_ahead(s); /* remembered in s->reserve_err */
	}
	return 0;
}

/* ---- capacity ---------------------------------------------------------- */

static uint64_t
mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* The room kept for the writes that free space, out of a limit of `bytes`. */
static uint64_t
reserve_for(uint64_t bytes, uint64_t page_size)
{
	return bytes / 16 > 64 * page_size ? bytes / 16 : 64 * page_size;
}

/* Whether the file system is full: the backend could not claim disk past
 * its data (reserve_err). What it claimed before (zero_ahead()'s 1-2 MiB)
 * is then kept for the writes that free space, as at max_bytes. Returns 1
 * (full), 0, or a negative error. */
static int
fs_full(struct st_lmdb *s, struct storage_stat *st, struct storage_capacity_stat *cs)
{
	uint64_t now = mono_ms(), free_bytes = 0;
	bool full;
	int rc;

	if (cs->reserve_error != 0 && now - s->reserve_retry_ms >= FS_RETRY_MS) {
		/* Space may have come back with no commit to find out. */
		s->reserve_retry_ms = now;
		(void)zero_ahead(s); /* its result is in the new stat */
		rc = figures(s, st, cs);
		if (rc != 0) {
			return rc;
		}
	}
	/* Another error (EIO, say) is not a full disk: the commits that
	 * need the disk report it themselves. */
	full = cs->reserve_error == -ENOSPC || cs->reserve_error == -EDQUOT;
	if (full && lmdb_free_bytes(&s->base, &free_bytes) == 0) {
		/* Pages freed inside the data file (XTRIM, DEL) are room that
		 * needs no disk: the file grows only when they are used up. The
		 * room asked is that of max_bytes' reserve, over the file's
		 * data; what was written ahead stays the reserve. */
		full = free_bytes < reserve_for(st->used_bytes, cs->page_size);
	}
	if (!full) {
		if (s->fs_full && free_bytes != 0) {
			echd_log(ECHD_LOG_NOTICE, "the data directory's file system is full, but "
				"%llu bytes are free inside the data file: writes that add data are "
				"accepted", (unsigned long long)free_bytes);
		} else if (s->fs_full) {
			echd_log(ECHD_LOG_NOTICE, "the data directory's file system has room again: "
						  "writes that add data are accepted");
		}
		s->fs_full = false;
		return 0;
	}
	if (!s->fs_full) {
		echd_log(ECHD_LOG_WARNING,
			"the data directory's file system is full (%s): refusing writes that add "
			"data, keeping %llu bytes for the commands that free space",
			echd_strerror(cs->reserve_error), (unsigned long long)cs->reserve_bytes);
	}
	s->fs_full = true;
	return 1;
}

/* Grows the map while a quarter of it is still free: when the map fills
 * to the last page, LMDB cannot even commit its free list, and the whole
 * batch fails rather than the one write that ran out of room.
 *
 * At max_bytes (or on a full file system) the map cannot grow: writes that
 * add data are refused while a reserve is still free, so that the writes
 * that free space, which need a few pages of their own to copy-on-write,
 * can still run; and each write should run nested, so that one that does
 * not fit fails alone. */
static int
lmdb_write_admit(struct storage *st, uint64_t max_bytes, struct storage_room *out)
{
	struct st_lmdb *s = lmdb_from(st);
	struct storage_room room = {.adds_ok = true, .full_rc = ECHD_ELIMIT};
	struct storage_stat ss;
	struct storage_capacity_stat cs;
	uint64_t free_bytes = 0, live, cap;
	int rc;

	if (s->ntxn != 0) {
		return -EBUSY;
	}
	rc = figures(s, &ss, &cs);
	if (rc != 0) {
		return rc;
	}
	rc = fs_full(s, &ss, &cs);
	if (rc < 0) {
		return rc;
	}
	if (rc == 1) {
		room.adds_ok = false;
		room.nest = true;
		room.fs_full = true;
		room.full_rc = cs.reserve_error;
		*out = room;
		return 0;
	}
	/* A max_bytes lowered below the map bounds it from now on. */
	cap = cs.map_size;
	if (max_bytes != 0 && max_bytes < cap) {
		cap = max_bytes;
	}
	if (ss.used_bytes >= cap / 4 * 3) {
		if ((max_bytes == 0 || cs.map_size < max_bytes) && lmdb_grow(st, max_bytes) == 0) {
			room.grew = true;
		} else {
			room.nest = true;
			if (lmdb_free_bytes(st, &free_bytes) != 0) {
				free_bytes = 0;
			}
			live = ss.used_bytes > free_bytes ? ss.used_bytes - free_bytes : 0;
			room.adds_ok = live + reserve_for(cap, cs.page_size) < cap;
		}
	}
	*out = room;
	return 0;
}

/* ---- rows -------------------------------------------------------------- */

static int
lmdb_get(struct storage_txn *base, enum storage_table tb, const struct st_buf *k,
	struct st_buf *v)
{
	struct lmdb_txn *t = txn_from(base);
	struct st_lmdb *s = lmdb_from(base->st);
	MDB_val key = to_val(k);
	MDB_val val;
	int rc;

	assert((unsigned)tb < STORAGE_T__ALL);
	if (s->absent & (1u << tb)) {
		return ECHD_ENOTFOUND;
	}
	rc = guarded_read(NULL, t->mt, s->dbi[tb], &key, &val, MDB_SET);
	if (!t->rdonly && (rc == 0 || rc == MDB_NOTFOUND)) {
		probed(s, tb, &key); /* a put or del of it needs no probe */
	}
	if (rc != 0) {
		return txn_err(t, rc);
	}
	to_buf(&val, v);
	return 0;
}

static int
lmdb_put(struct storage_txn *base, enum storage_table tb, const struct st_buf *k,
	const struct st_buf *v, unsigned flags)
{
	struct lmdb_txn *t = txn_from(base);
	struct st_lmdb *s = lmdb_from(base->st);
	MDB_val key = to_val(k);
	MDB_val val = to_val(v);
	unsigned mflags;
	int rc;

	assert((unsigned)tb < STORAGE_T__ALL);
	if ((flags & ~STORAGE_PUT_APPEND) != 0) {
		return ECHD_EINVAL;
	}
	/* MDB_APPEND answers MDB_KEYEXIST when k does not sort last. */
	mflags = (flags & STORAGE_PUT_APPEND) != 0 ? MDB_APPEND : 0;
	/* An append searches the last page, which is k's path as well: k
	 * sorts after every key, or the put fails before it writes. */
	rc = write_probe(s, t, tb, &key);
	if (rc == 0) {
		rc = mdb_put(t->mt, s->dbi[tb], &key, &val, mflags);
	}
	return txn_err(t, rc);
}

static int
lmdb_del(struct storage_txn *base, enum storage_table tb, const struct st_buf *k)
{
	struct lmdb_txn *t = txn_from(base);
	struct st_lmdb *s = lmdb_from(base->st);
	MDB_val key = to_val(k);
	int rc;

	assert((unsigned)tb < STORAGE_T__ALL);
	rc = write_probe(s, t, tb, &key);
	if (rc == 0) {
		rc = mdb_del(t->mt, s->dbi[tb], &key, NULL);
	}
	return txn_err(t, rc);
}

/* ---- cursors ----------------------------------------------------------- */

static int
lmdb_cursor_open(struct storage_txn *base, enum storage_table tb, struct storage_cursor **out)
{
	struct lmdb_txn *t = txn_from(base);
	struct st_lmdb *s = lmdb_from(base->st);
	struct lmdb_cursor *c;
	int rc;

	assert((unsigned)tb < STORAGE_T__ALL);
	if (s->absent & (1u << tb)) {
		return ECHD_ENOTFOUND; /* callers read that as an empty table */
	}
	c = echd_calloc(1, sizeof(*c));
	if (c == NULL) {
		return -ENOMEM;
	}
	rc = mdb_cursor_open(t->mt, s->dbi[tb], &c->mc);
	if (rc != 0) {
		echd_free(c);
		return txn_err(t, rc);
	}
	c->base.txn = base;
	c->pos = POS_UNSET;
	c->next = t->cursors;
	if (t->cursors != NULL) {
		t->cursors->prev = c;
	}
	t->cursors = c;
	*out = &c->base;
	return 0;
}

static void
lmdb_cursor_close(struct storage_cursor *base)
{
	struct lmdb_cursor *c = cursor_from(base);
	struct lmdb_txn *t = txn_from(base->txn);

	if (c->prev != NULL) {
		c->prev->next = c->next;
	} else {
		t->cursors = c->next;
	}
	if (c->next != NULL) {
		c->next->prev = c->prev;
	}
	mdb_cursor_close(c->mc);
	echd_free(c);
}

/* One LMDB move. A miss leaves the cursor at the edge `miss`. */
static int
cursor_move(struct lmdb_cursor *c, MDB_val *k, MDB_cursor_op op, enum cursor_pos miss,
	struct st_buf *key, struct st_buf *val)
{
	MDB_val v;
	int rc;

	rc = guarded_read(c->mc, NULL, 0, k, &v, op);
	if (rc == MDB_NOTFOUND) {
		c->pos = miss;
		return ECHD_ENOTFOUND;
	}
	if (rc != 0) {
		c->pos = POS_UNSET;
		return txn_err(txn_from(c->base.txn), rc);
	}
	c->pos = POS_ON;
	to_buf(k, key);
	to_buf(&v, val);
	return 0;
}

static int
lmdb_cursor_seek(struct storage_cursor *base, const struct st_buf *k, struct st_buf *key,
	struct st_buf *val)
{
	struct lmdb_cursor *c = cursor_from(base);
	MDB_val mk = {0, NULL};

	/* LMDB rejects empty keys; every key is >= the empty one. */
	if (k == NULL || k->len == 0) {
		return cursor_move(c, &mk, MDB_FIRST, POS_AFTER, key, val);
	}
	mk = to_val(k);
	return cursor_move(c, &mk, MDB_SET_RANGE, POS_AFTER, key, val);
}

static int
lmdb_cursor_seek_last(struct storage_cursor *base, const struct st_buf *k, struct st_buf *key,
	struct st_buf *val)
{
	struct lmdb_cursor *c = cursor_from(base);
	MDB_val mk = {0, NULL};
	MDB_val v;
	int rc;

	if (k == NULL) {
		return cursor_move(c, &mk, MDB_LAST, POS_BEFORE, key, val);
	}
	if (k->len == 0) {
		/* No key is <= the empty one. */
		c->pos = POS_BEFORE;
		return ECHD_ENOTFOUND;
	}
	mk = to_val(k);
	rc = guarded_read(c->mc, NULL, 0, &mk, &v, MDB_SET_RANGE);
	if (rc == MDB_NOTFOUND) {
		/* Every key is < k. */
		return cursor_move(c, &mk, MDB_LAST, POS_BEFORE, key, val);
	}
	if (rc != 0) {
		c->pos = POS_UNSET;
		return txn_err(txn_from(base->txn), rc);
	}
	if (mk.mv_size == k->len && memcmp(mk.mv_data, k->data, k->len) == 0) {
		c->pos = POS_ON;
		to_buf(&mk, key);
		to_buf(&v, val);
		return 0;
	}
	/* Landed on the first key > k: the one before it is the answer. */
	return cursor_move(c, &mk, MDB_PREV, POS_BEFORE, key, val);
}

static int
lmdb_cursor_next(struct storage_cursor *base, struct st_buf *key, struct st_buf *val)
{
	struct lmdb_cursor *c = cursor_from(base);
	MDB_val mk = {0, NULL};

	switch (c->pos) {
	case POS_AFTER:
		return ECHD_ENOTFOUND;
	case POS_UNSET:
	case POS_BEFORE:
		return cursor_move(c, &mk, MDB_FIRST, POS_AFTER, key, val);
	case POS_ON:
	case POS_DELETED:
		/* After mdb_cursor_del() LMDB stands on the successor with
		 * C_DEL set, and its MDB_NEXT returns that row without moving:
		 * nothing is skipped (checked against 0.9.24, see the tests). */
		break;
	}
	return cursor_move(c, &mk, MDB_NEXT, POS_AFTER, key, val);
}

static int
lmdb_cursor_prev(struct storage_cursor *base, struct st_buf *key, struct st_buf *val)
{
	struct lmdb_cursor *c = cursor_from(base);
	MDB_val mk = {0, NULL};

	switch (c->pos) {
	case POS_BEFORE:
		return ECHD_ENOTFOUND;
	case POS_UNSET:
	case POS_AFTER:
		return cursor_move(c, &mk, MDB_LAST, POS_BEFORE, key, val);
	case POS_ON:
	case POS_DELETED:
		break;
	}
	return cursor_move(c, &mk, MDB_PREV, POS_BEFORE, key, val);
}

static int
lmdb_cursor_del(struct storage_cursor *base)
{
	struct lmdb_cursor *c = cursor_from(base);
	int rc;

	/* Only the row last returned may go: after a delete LMDB stands on
	 * the successor, which the caller has not seen. */
	if (c->pos != POS_ON) {
		return ECHD_ENOTFOUND;
	}
	rc = mdb_cursor_del(c->mc, 0);
	if (rc != 0) {
		return txn_err(txn_from(base->txn), rc);
	}
	c->pos = POS_DELETED;
	return 0;
}

static void *
lmdb_iface(struct storage *st, enum storage_iface which)
{
	return which == STORAGE_IFACE_CAPACITY ? &lmdb_from(st)->cap : NULL;
}

static const struct storage_capacity_ops lmdb_capacity_ops = {
	.admit = lmdb_write_admit,
	.grow = lmdb_grow,
	.stat = lmdb_cap_stat,
	.free_bytes = lmdb_free_bytes,
	.reserve = lmdb_reserve,
};

const struct storage_ops st_lmdb_ops = {
	.version = STORAGE_OPS_V2,
	.name = "lmdb",
	.open = lmdb_open,
	.close = lmdb_close,
	.txn_begin = lmdb_txn_begin,
	.txn_commit = lmdb_txn_commit,
	.txn_abort = lmdb_txn_abort,
	.get = lmdb_get,
	.put = lmdb_put,
	.del = lmdb_del,
	.cursor_open = lmdb_cursor_open,
	.cursor_close = lmdb_cursor_close,
	.cursor_seek = lmdb_cursor_seek,
	.cursor_seek_last = lmdb_cursor_seek_last,
	.cursor_next = lmdb_cursor_next,
	.cursor_prev = lmdb_cursor_prev,
	.cursor_del = lmdb_cursor_del,
	.stat = lmdb_stat,
	.sync = lmdb_sync,
	.copy = lmdb_copy,
	.durable_gen = lmdb_durable_gen,
	.iface = lmdb_iface,
};
