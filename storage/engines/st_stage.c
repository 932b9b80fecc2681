/* st_stage.c - "lmdb-staged": LMDB written in arrival order, filed later.
 *
 * A B+tree with copy-on-write pays a whole page for every place a
 * transaction writes: a batch of XADDs to 10,000 streams rewrites 10,000
 * leaf pages (and the branches above them) however few bytes each gets.
 * This engine writes a batch's rows instead, in arrival order, to one
 * staging table whose keys are a sequence (STORAGE_T_STAGE, appended with
 * MDB_APPEND: a commit fills the rightmost pages only), and files them in
 * their home tables later, sorted and in bulk, in the same transactions as
 * later batches (the deferred-work interface, storage_maintain()). Every
 * change still commits in one LMDB transaction, and recovery is still
 * reopening the environment.
 *
 * The pieces, each kept by the engine below it:
 *  - home: an "lmdb" storage holding the home tables and the staging table
 *    (opened with lmdb.stage-owner: plain lmdb refuses, for writing, a
 *    directory with staged rows), the inner storage of the forwarding base
 *    (forward.h) this engine sits on.
 *    A staged record is key = sequence (8 bytes, big-endian), value =
 *    table (1), kind (1: put or tombstone), key length (2), key, value.
 *  - overlay: a "mem" storage (st_mem.c's persistent trees) holding, per
 *    table, the newest staged version of each staged row: value = kind (1),
 *    sequence (8), value. Its transactions nest beside LMDB's, so that an
 *    aborted command undoes its overlay rows for free, and a read
 *    transaction's snapshot of it matches LMDB's.
 *  A write puts its row in the overlay and notes it in the writer's list;
 *  the top-level commit appends to staging the last version of each row
 *  written (stage_emit()); a read asks the overlay first (a tombstone hides
 *  the home row) and then home; a cursor merges both in key order. A
 *  commit is LMDB's commit, then the overlay's (which cannot fail).
 *
 * On the forwarding base: a transaction is the base's (its inner one is
 * home's) with the overlay's beside it, a cursor the base's (home's) with
 * the overlay's beside it; every row and cursor operation and the ends of
 * transactions are this file's, and stat, sync, copy and durable_gen are
 * lmdb's, forwarded (every top-level commit here is exactly one of lmdb's).
 * Of the optional interfaces it offers its own, deferred work
 * (STORAGE_IFACE_MAINTAIN: due, step, stat, verify), and passes lmdb's
 * capacity on. At maxdisk that capacity answers for the one file holding
 * home and staging: writes that add are refused as on lmdb; deletions
 * still run, but each stages a tombstone, so it takes room before it
 * frees any (until it is filed); filing steps are not commands: the
 * broker keeps running them, in turns of their own while full (commit.c),
 * a step that finds no room fails alone (ECHD_EMAPFULL, its child
 * transaction aborted) and is tried again, and the pages of the staged
 * head are free again once an epoch ends.
 *
 * Compaction runs in epochs. An epoch starts when staging passes half its
 * bound (or the broker is idle) and covers every record staged so far
 * (sequence < epoch_end). Its sweep walks the overlay in key order, a
 * bounded step per batch: each row whose newest version is older than
 * epoch_end is written home (or deleted home, for a tombstone) and leaves
 * the overlay. Rows staged since keep their place until the next epoch.
 * Once the sweep is through, every record < epoch_end is home or
 * superseded by a newer one, and the staging table's head (those records)
 * is deleted, again in bounded steps. A step and its batch commit together,
 * so a crash anywhere leaves staging replaying to the same state: reopen
 * replays every staged record into the overlay (some of them home
 * already, which does no harm: the newest version wins, and it is the one
 * home). A failed commit undoes the step; the sweep then starts again.
 *
 * Staging is bounded by stage_size (lmdb-staged.stage-size, from the
 * broker's storage-stage-size): the steps grow
 * when it is full, which slows the batches (the back-pressure), and shrink
 * to a trickle below half of it.
 *
 * Tests only: with ECHD_STAGE_EAGER=1 in the environment, every top-level
 * write commit first runs a step itself, so that the contract suites run
 * with rows on their way home at every point (tests/meson.build).
 */
#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "echd.h"
#include "forward.h"

#define STAGE_SIZE_DEFAULT ((uint64_t)64 << 20)
#define STAGE_SIZE_MIN     ((uint64_t)64 << 10) /* config.c's storage-stage-size too */
/* A staged record's value: table, kind, key length; then key and value. */
#define REC_HDR 4
/* An overlay row's value: kind, sequence; then the value. */
#define OV_HDR 9
/* What a staged row costs LMDB past its key and value (its node header),
 * counted against stage_size. */
#define REC_OVERHEAD 8
#define KIND_PUT  0
#define KIND_TOMB 1
/* Rows filed home per step: about twice what was staged since the last
 * one (so that a sweep outruns the writes), within these bounds; four
 * times as many while staging is full. */
#define STEP_MIN 1024
#define STEP_MAX 16384
/* Staged records deleted from the head per step, per row of the step. */
#define DROP_PER_ROW 4

struct stage_txn {
	struct storage_fwd_txn fwd; /* fwd.inner: the lmdb txn (nested in the parent's) */
	struct storage_txn *ov;     /* the overlay's txn (nested in the parent's) */
	struct stage_txn *parent;
	bool rdonly;
	bool compacted; /* a storage_maintain() step ran in it */
	size_t mark;    /* s->written_len when it began */
	int64_t bytes;  /* staged bytes added (dropped: negative), children's included */
	int64_t rows;   /* staged records, the same way */
};

/* Where a cursor stands, as st_mem.c's. */
enum stage_pos {
	POS_UNSET,   /* never positioned: next() is first, prev() is last */
	POS_ON,      /* on the row with key */
	POS_BEFORE,  /* before the first row */
	POS_AFTER,   /* after the last row */
	POS_DELETED, /* its row (key) was deleted: next() is the row after it */
};

/* One of the two cursors a merged one moves: its head row, if any. */
struct side {
	struct storage_cursor *c;
	bool ok;
	struct st_buf k, v;
};

struct stage_cursor {
	struct storage_fwd_cursor base; /* base.inner: home's cursor (home.c) */
	struct side home, ov;
	enum stage_pos pos;
	bool heads;   /* the sides stand just past key in direction fwd */
	bool fwd;
	unsigned char *key; /* owned copy of the current row's key */
	size_t klen, kcap;
};

struct st_stage {
	struct storage_fwd fwd;      /* fwd.inner: "lmdb", opened as the staging table's owner */
	struct storage_maintain maint; /* storage_maintain(): the filing */
	struct storage *ov;          /* "mem": the overlay */
	bool read_only;
	bool eager;         /* ECHD_STAGE_EAGER: a step in every top-level commit */
	unsigned ntxn;      /* open top-level txns */
	uint64_t size;      /* stage_size: the bound of staged bytes */
	uint64_t next_seq;  /* the next staged record's key */
	uint64_t bytes;     /* staged bytes, committed (REC_OVERHEAD each included) */
	uint64_t rows;      /* staged records, committed */
	uint64_t since_step; /* records staged since the last step */
	/* Compaction (see the top): */
	uint64_t epoch_end;  /* 0: no epoch; else it covers records < epoch_end */
	uint64_t epoch_saved; /* epoch_end before the step of the open writer */
	int sweep_tb;        /* the sweep's table; STORAGE_T__COUNT: swept */
	size_t sweep_klen;   /* 0: from the table's start; else past sweep_key */
	unsigned char sweep_key[STORAGE_KEY_MAX];
	uint64_t filed, dropped, epochs; /* rows filed home, records dropped, epochs done */
	unsigned char *rec, *ovv; /* scratch: a staged record, an overlay value */
	size_t rec_cap, ovv_cap;
	unsigned char *written;   /* the writer's writes, for stage_emit() */
	size_t written_len, written_cap;
	uint32_t *slots;          /* their rows' last writes (stage_write()) */
	uint32_t nslots, nrows_written;
};

static struct st_stage *
stage_from(struct storage *st)
{
	assert(st->ops == &st_stage_ops);
	return (struct st_stage *)st;
}

static struct stage_txn *
txn_from(struct storage_txn *t)
{
	assert(t->st->ops == &st_stage_ops);
	return (struct stage_txn *)t;
}

static struct stage_cursor *
cursor_from(struct storage_cursor *c)
{
	assert(c->txn->st->ops == &st_stage_ops);
	return (struct stage_cursor *)c;
}

/* The parts below that transactions call. */
static int stage_maintain(struct storage_txn *base, bool idle, bool *more);
static int stage_emit(struct st_stage *s, struct stage_txn *t);
static void written_cut(struct st_stage *s, size_t mark);

/* ---- encoding ----------------------------------------------------------- */

/* Memcmp order, a shorter key first on a tie (storage.h). */
static int
key_cmp(const struct st_buf *a, const struct st_buf *b)
{
	size_t n = a->len < b->len ? a->len : b->len;
	int c = n == 0 ? 0 : memcmp(a->data, b->data, n);

	if (c != 0) {
		return c;
	}
	return a->len < b->len ? -1 : a->len > b->len;
}

static bool
key_eq(const struct st_buf *a, const void *k, size_t klen)
{
	return a->len == klen && memcmp(a->data, k, klen) == 0;
}

static int
grow_buf(unsigned char **buf, size_t *cap, size_t need)
{
	unsigned char *p;

	if (need <= *cap) {
		return 0;
	}
	p = echd_realloc(*buf, need);
	if (p == NULL) {
		return -ENOMEM;
	}
	*buf = p;
	*cap = need;
	return 0;
}

/* A staged record's parts, checked. Returns 0 or ECHD_ECORRUPT. */
struct rec {
	enum storage_table tb;
	unsigned kind;
	struct st_buf k, v;
};

static int
rec_decode(const struct st_buf *val, struct rec *out)
{
	const unsigned char *p = val->data;
	size_t klen;

	if (val->len < REC_HDR) {
		return ECHD_ECORRUPT;
	}
	klen = (size_t)p[2] << 8 | p[3];
	if (p[0] >= STORAGE_T__COUNT || p[1] > KIND_TOMB || klen == 0 ||
		klen > STORAGE_KEY_MAX || REC_HDR + klen > val->len ||
		(p[1] == KIND_TOMB && REC_HDR + klen != val->len)) {
		return ECHD_ECORRUPT;
	}
	out->tb = (enum storage_table)p[0];
	out->kind = p[1];
	out->k.data = p + REC_HDR;
	out->k.len = klen;
	out->v.data = p + REC_HDR + klen;
	out->v.len = val->len - REC_HDR - klen;
	return 0;
}

/* What a staged record of `reclen` bytes costs against stage_size. */
static uint64_t
rec_cost(size_t reclen)
{
	return 8 + reclen + REC_OVERHEAD;
}

/* ---- the overlay, rebuilt from staging ---------------------------------- */

/* Puts every staged record, in sequence order, into a new overlay txn and
 * commits it; home is a txn of s->fwd.inner (read or write). Sets next_seq,
 * bytes and rows. */
static int
replay(struct st_stage *s, struct storage_txn *home)
{
	struct storage_txn *mt = NULL;
	struct storage_cursor *c = NULL;
	struct st_buf key, val;
	uint64_t bytes = 0, rows = 0, last = 0;
	int rc;

	rc = storage_cursor_open(home, STORAGE_T_STAGE, &c);
	if (rc == ECHD_ENOTFOUND) {
		rc = 0; /* read-only on an environment without staging: empty */
		goto done;
	}
	if (rc != 0) {
		return rc;
	}
	rc = storage_txn_begin(s->ov, NULL, 0, &mt);
	if (rc != 0) {
		goto out;
	}
	for (rc = storage_cursor_seek(c, NULL, &key, &val); rc == 0;
		rc = storage_cursor_next(c, &key, &val)) {
		struct rec r;
		struct st_buf ov;

		if (key.len != 8 || rec_decode(&val, &r) != 0) {
			echd_log(ECHD_LOG_WARNING, "lmdb-staged: a malformed staged record");
			rc = ECHD_ECORRUPT;
			goto out;
		}
		last = echd_get_be64(key.data);
		rc = grow_buf(&s->ovv, &s->ovv_cap, OV_HDR + r.v.len);
		if (rc != 0) {
			goto out;
		}
		s->ovv[0] = (unsigned char)r.kind;
		echd_put_be64(s->ovv + 1, last);
		if (r.v.len > 0) {
			memcpy(s->ovv + OV_HDR, r.v.data, r.v.len);
		}
		ov.data = s->ovv;
		ov.len = OV_HDR + r.v.len;
		rc = storage_put(mt, r.tb, &r.k, &ov, 0);
		if (rc != 0) {
			goto out;
		}
		bytes += rec_cost(val.len);
		rows++;
	}
	if (rc != ECHD_ENOTFOUND) {
		goto out;
	}
	storage_cursor_close(c);
	c = NULL;
	rc = storage_txn_commit(mt);
	mt = NULL;
	if (rc != 0) {
		goto out;
	}
done:
	s->bytes = bytes;
	s->rows = rows;
	if (last + 1 > s->next_seq) {
		s->next_seq = last + 1;
	}
out:
	storage_cursor_close(c);
	storage_txn_abort(mt);
	return rc;
}

/* Read-only (echo-admin beside a running echd): the overlay is rebuilt
 * from each new snapshot, so that it matches the home tables read. */
static int
rebuild(struct st_stage *s, struct storage_txn *home)
{
	struct storage_opts mo = {.dir = "", .sync_mode = STORAGE_SYNC_FULL};
	int rc;

	storage_close(s->ov);
	s->ov = NULL;
	rc = storage_open("mem", &mo, &s->ov);
	if (rc != 0) {
		s->ov = NULL;
		return rc;
	}
	return replay(s, home);
}

/* ---- environment -------------------------------------------------------- */

static void
stage_close(struct storage *st)
{
	struct st_stage *s = stage_from(st);

	assert(s->ntxn == 0);
	storage_close(s->ov);
	storage_fwd_finish(&s->fwd);
	echd_free(s->rec);
	echd_free(s->ovv);
	echd_free(s->written);
	echd_free(s->slots);
	echd_free(s);
}

/* The options lmdb-staged reads (storage.h: "lmdb-staged.<name>"); lmdb's
 * own ("lmdb.<name>") go on to its lmdb. */
struct stage_settings {
	uint64_t stage_size; /* the staging table's bound, bytes */
};
static const struct storage_optdef stage_optdefs[] = {
	{"stage-size", STORAGE_OPTDEF_U64, STAGE_SIZE_MIN, UINT64_MAX,
		offsetof(struct stage_settings, stage_size)},
};

static const struct storage_maintain_ops stage_maintain_ops;

/* Opens s's lmdb on o's directory with o's options and lmdb.stage-owner,
 * so that it opens a directory holding staged rows for writing. */
static int
open_home(struct st_stage *s, const struct storage_opts *o)
{
	struct storage_opts ho = *o;
	struct storage_opt *opt;
	int rc;

	opt = echd_calloc(o->nopt + 1, sizeof(*opt));
	if (opt == NULL) {
		return -ENOMEM;
	}
	if (o->nopt > 0) {
		memcpy(opt, o->opt, o->nopt * sizeof(*opt));
	}
	opt[o->nopt].name = "lmdb.stage-owner";
	opt[o->nopt].value = "1";
	ho.opt = opt;
	ho.nopt = o->nopt + 1;
	rc = storage_open("lmdb", &ho, &s->fwd.inner);
	if (rc != 0) {
		s->fwd.inner = NULL;
	}
	echd_free(opt);
	return rc;
}

static int
stage_open(const struct storage_opts *o, struct storage **out)
{
	struct storage_opts mo = {.dir = o->dir, .sync_mode = STORAGE_SYNC_FULL};
	struct stage_settings set = {STAGE_SIZE_DEFAULT};
	struct storage_txn *rt;
	struct st_stage *s;
	const char *eager = getenv("ECHD_STAGE_EAGER");
	int rc;

	rc = storage_opts_read(o, "lmdb-staged", stage_optdefs,
		sizeof(stage_optdefs) / sizeof(stage_optdefs[0]), &set);
	if (rc != 0) {
		return rc;
	}
	s = echd_calloc(1, sizeof(*s));
	if (s == NULL) {
		return -ENOMEM;
	}
	storage_fwd_init(&s->fwd, &st_stage_ops, sizeof(struct stage_txn),
		sizeof(struct stage_cursor));
	s->maint.ops = &stage_maintain_ops;
	s->maint.st = &s->fwd.base;
	s->read_only = o->read_only;
	s->size = set.stage_size;
	s->next_seq = 1;
	s->eager = eager != NULL && strcmp(eager, "1") == 0;
	rc = open_home(s, o);
	if (rc != 0) {
		goto err;
	}
	rc = storage_open("mem", &mo, &s->ov);
	if (rc != 0) {
		s->ov = NULL;
		goto err;
	}
	if (!s->read_only) {
		rc = storage_txn_begin(s->fwd.inner, NULL, STORAGE_TXN_RDONLY, &rt);
		if (rc != 0) {
			goto err;
		}
		rc = replay(s, rt);
		storage_txn_abort(rt);
		if (rc != 0) {
			goto err;
		}
		if (s->rows > 0) {
			echd_log(ECHD_LOG_NOTICE,
				"lmdb-staged: %llu staged rows (%llu bytes) read back from %s",
				(unsigned long long)s->rows, (unsigned long long)s->bytes, o->dir);
		}
	}
	*out = &s->fwd.base;
	return 0;
err:
	stage_close(&s->fwd.base);
	return rc;
}

/* Its own interface, and lmdb's others (capacity) passed on: maxdisk bounds
 * the one file that holds the home tables and the staging table alike. */
static void *
stage_iface(struct storage *st, enum storage_iface which)
{
	if (which == STORAGE_IFACE_MAINTAIN) {
		return &stage_from(st)->maint;
	}
	return storage_fwd_iface(st, which);
}

/* stat, sync, copy (the copy holds the staging table too: lmdb-staged
 * opens it) and durable_gen are the forwarding base's: every top-level
 * commit here is one of lmdb's, and only those (the filing steps ride in
 * them). */

/* ---- transactions ------------------------------------------------------- */

static int
stage_txn_begin(struct storage *st, struct storage_txn *parent, unsigned flags,
	struct storage_txn **out)
{
	struct st_stage *s = stage_from(st);
	struct stage_txn *p = parent != NULL ? txn_from(parent) : NULL;
	struct storage_txn *base;
	struct stage_txn *t;
	int rc;

	/* the base: t, zeroed, with its lmdb txn (refused under a failed parent) */
	rc = storage_fwd_txn_begin(st, parent, flags, &base);
	if (rc != 0) {
		return rc;
	}
	t = txn_from(base);
	if (s->read_only && p == NULL && s->ntxn == 0) {
		rc = rebuild(s, t->fwd.inner);
		if (rc != 0) {
			storage_fwd_txn_abort(base);
			return rc;
		}
	}
	rc = storage_txn_begin(s->ov, p != NULL ? p->ov : NULL, flags, &t->ov);
	if (rc != 0) {
		storage_fwd_txn_abort(base);
		return rc;
	}
	t->parent = p;
	t->rdonly = (flags & STORAGE_TXN_RDONLY) != 0;
	if (p == NULL) {
		s->ntxn++;
		if (!t->rdonly) {
			s->epoch_saved = s->epoch_end;
			written_cut(s, 0);
		}
	}
	t->mark = s->written_len;
	*out = base;
	return 0;
}

/* A writer that ran a compaction step ends without it: its rows are back
 * in the overlay, its drops back in staging, so the sweep starts again. */
static void
step_undone(struct st_stage *s)
{
	s->epoch_end = s->epoch_saved;
	s->sweep_tb = 0;
	s->sweep_klen = 0;
}

/* What t leaves undone when it ends without committing (its overlay txn is
 * ended): a child's writes leave the writer's list, a step starts again. */
static void
txn_undone(struct st_stage *s, struct stage_txn *t)
{
	if (t->parent != NULL) {
		written_cut(s, t->mark);
	}
	if (t->compacted) {
		step_undone(s);
	}
	if (t->parent == NULL) {
		assert(s->ntxn > 0);
		s->ntxn--;
	}
}

static void
stage_txn_abort(struct storage_txn *base)
{
	struct stage_txn *t = txn_from(base);
	struct st_stage *s = stage_from(base->st);

	/* storage.c has ended t's child and cursors. */
	storage_txn_abort(t->ov);
	txn_undone(s, t);
	storage_fwd_txn_abort(base); /* lmdb's txn, and t */
}

static int
stage_txn_commit(struct storage_txn *base)
{
	struct stage_txn *t = txn_from(base);
	struct st_stage *s = stage_from(base->st);
	struct stage_txn done = *t; /* what is needed once the base freed t */
	bool more;
	int rc;

	if (s->eager && done.parent == NULL && !done.rdonly && t->fwd.err == 0) {
		rc = stage_maintain(base, true, &more);
		if (rc < 0) {
			stage_txn_abort(base);
			return rc;
		}
		done = *t;
	}
	if (done.parent == NULL && !done.rdonly && t->fwd.err == 0) {
		rc = stage_emit(s, t);
		if (rc != 0) {
			stage_txn_abort(base);
			return rc;
		}
		done = *t;
	}
	/* LMDB first (the base's commit, which frees t, and fails a txn
	 * marked failed): when it fails nothing happened, and the overlay,
	 * not yet committed, is dropped with it. The overlay's commit cannot
	 * fail. */
	rc = storage_fwd_txn_commit(base);
	if (rc != 0) {
		storage_txn_abort(done.ov);
		txn_undone(s, &done);
		return rc;
	}
	rc = storage_txn_commit(done.ov);
	assert(rc == 0);
	if (done.parent != NULL) {
		done.parent->bytes += done.bytes;
		done.parent->rows += done.rows;
		done.parent->compacted |= done.compacted;
	} else {
		assert(s->ntxn > 0);
		s->ntxn--;
		if (!done.rdonly) {
			s->bytes = (uint64_t)((int64_t)s->bytes + done.bytes);
			s->rows = (uint64_t)((int64_t)s->rows + done.rows);
		}
	}
	return rc;
}

/* ---- rows --------------------------------------------------------------- */

static bool
key_ok(const struct st_buf *k)
{
	return k->len > 0 && k->len <= STORAGE_KEY_MAX;
}

/* The row as t sees it: the overlay's, unless it has none, then home's. */
static int
row_get(struct stage_txn *t, enum storage_table tb, const struct st_buf *k, struct st_buf *v)
{
	struct st_buf ov;
	int rc;

	rc = storage_get(t->ov, tb, k, &ov);
	if (rc == 0) {
		const unsigned char *p = ov.data;

		if (ov.len < OV_HDR) {
			return ECHD_ECORRUPT;
		}
		if (p[0] == KIND_TOMB) {
			return ECHD_ENOTFOUND;
		}
		v->data = p + OV_HDR;
		v->len = ov.len - OV_HDR;
		return 0;
	}
	if (rc != ECHD_ENOTFOUND) {
		return rc;
	}
	return storage_get(t->fwd.inner, tb, k, v);
}

static int
stage_get(struct storage_txn *base, enum storage_table tb, const struct st_buf *k,
	struct st_buf *v)
{
	struct stage_txn *t = txn_from(base);

	assert((unsigned)tb < STORAGE_T__COUNT);
	if (t->fwd.err != 0) {
		return ECHD_EINVAL;
	}
	return row_get(t, tb, k, v);
}

/* ---- the writer's writes, staged at its commit ---------------------------
 *
 * s->written lists every write of the open writer, its children's
 * included, in sequence order: sequence (8), table (1), kind (1), key
 * length (2), value length (4), the offset + 1 of the previous write of
 * the same row (4; 0: none), key, value. s->slots, an open-addressing
 * hash of (table, key), holds for each row the offset + 1 of its last
 * write, so that stage_emit() stages each row once, at its last version,
 * without a search of the overlay. An aborted child cuts the list back to
 * where it began, and the hash is rebuilt. */
#define W_HDR 20

static uint32_t
row_hash(enum storage_table tb, const unsigned char *k, size_t klen)
{
	uint32_t h = 2166136261u ^ (uint32_t)tb; /* FNV-1a */

	for (size_t i = 0; i < klen; i++) {
		h = (h ^ k[i]) * 16777619u;
	}
	return h;
}

static size_t
w_klen(const unsigned char *w)
{
	return (size_t)w[10] << 8 | w[11];
}

static uint32_t
w_vlen(const unsigned char *w)
{
	return (uint32_t)w[12] << 24 | (uint32_t)w[13] << 16 | (uint32_t)w[14] << 8 | w[15];
}

/* The slot of row (tb, k): the one holding its last write, or the empty
 * one where it would go. */
static uint32_t *
slot_of(struct st_stage *s, enum storage_table tb, const unsigned char *k, size_t klen)
{
	uint32_t mask = s->nslots - 1, i = row_hash(tb, k, klen) & mask;

	for (;; i = (i + 1) & mask) {
		const unsigned char *w;

		if (s->slots[i] == 0) {
			return &s->slots[i];
		}
		w = s->written + s->slots[i] - 1;
		if (w[8] == (unsigned char)tb && w_klen(w) == klen &&
			memcmp(w + W_HDR, k, klen) == 0) {
			return &s->slots[i];
		}
	}
}

/* Rebuilds s->slots from s->written, with room for twice its rows. */
static int
slots_rebuild(struct st_stage *s, uint32_t want)
{
	uint32_t n = 64;
	size_t pos = 0;

	while (n < 2 * want) {
		n *= 2;
	}
	if (n != s->nslots) {
		uint32_t *p = echd_realloc(s->slots, n * sizeof(*p));

		if (p == NULL) {
			return -ENOMEM;
		}
		s->slots = p;
		s->nslots = n;
	}
	memset(s->slots, 0, n * sizeof(*s->slots));
	s->nrows_written = 0;
	while (pos < s->written_len) {
		const unsigned char *w = s->written + pos;
		uint32_t *slot = slot_of(s, (enum storage_table)w[8], w + W_HDR, w_klen(w));

		s->nrows_written += *slot == 0;
		*slot = (uint32_t)pos + 1;
		pos += W_HDR + w_klen(w) + w_vlen(w);
	}
	return 0;
}

/* Whether deleting k needs a tombstone in the overlay: not when the
 * overlay holds a row that home never had (staged, not filed yet: a
 * pending entry acknowledged soon after it was delivered). Its row then
 * simply leaves the overlay. Staging still gets the tombstone record, so
 * that a replay does not bring back the staged row; the overlay does not,
 * so that a work queue does not leave a trail of tombstones for every
 * cursor to step over until the next epoch files them. */
static int
tomb_needed(struct stage_txn *t, enum storage_table tb, const struct st_buf *k, bool *needed)
{
	struct st_buf v;
	int rc;

	*needed = true;
	rc = storage_get(t->ov, tb, k, &v);
	if (rc == ECHD_ENOTFOUND) {
		return 0;
	}
	if (rc != 0) {
		return rc;
	}
	if (v.len < OV_HDR || ((const unsigned char *)v.data)[0] == KIND_TOMB) {
		return 0;
	}
	rc = storage_get(t->fwd.inner, tb, k, &v);
	if (rc == ECHD_ENOTFOUND) {
		*needed = false;
		return 0;
	}
	return rc;
}

/* Writes k (v NULL: a deletion) in the overlay, under the next sequence,
 * and notes the write for stage_emit(). Nothing reaches LMDB yet: a row
 * written many times in one batch (a stream's metadata and node row, XADD
 * after XADD) is staged once, at its last version. */
static int
stage_write(struct stage_txn *t, enum storage_table tb, const struct st_buf *k,
	const struct st_buf *v)
{
	struct st_stage *s = stage_from(t->fwd.base.st);
	size_t vlen = v != NULL ? v->len : 0, need = s->written_len + W_HDR + k->len + vlen;
	struct st_buf ovv;
	unsigned char *w;
	uint32_t *slot;
	uint64_t seq;
	bool tomb = true;
	int rc;

	if (need > UINT32_MAX - 1) {
		return ECHD_ELIMIT; /* a batch of 4 GiB: the offsets would not fit */
	}
	rc = v == NULL ? tomb_needed(t, tb, k, &tomb) : 0;
	if (rc == 0) {
		rc = grow_buf(&s->ovv, &s->ovv_cap, OV_HDR + vlen);
	}
	if (rc == 0) {
		rc = grow_buf(&s->written, &s->written_cap, need);
	}
	if (rc == 0 && 2 * (s->nrows_written + 1) > s->nslots) {
		rc = slots_rebuild(s, s->nrows_written + 1);
	}
	if (rc != 0) {
		return rc;
	}
	/* Never reused, even when t aborts: staging keys only grow. */
	seq = s->next_seq++;
	s->ovv[0] = v != NULL ? KIND_PUT : KIND_TOMB;
	echd_put_be64(s->ovv + 1, seq);
	if (vlen > 0) {
		memcpy(s->ovv + OV_HDR, v->data, vlen);
	}
	ovv.data = s->ovv;
	ovv.len = OV_HDR + vlen;
	rc = tomb ? storage_put(t->ov, tb, k, &ovv, 0) : storage_del(t->ov, tb, k);
	if (rc != 0) {
		return rc; /* the overlay is as it was (st_mem.c) */
	}
	w = s->written + s->written_len;
	slot = slot_of(s, tb, k->data, k->len);
	echd_put_be64(w, seq);
	w[8] = (unsigned char)tb;
	w[9] = s->ovv[0];
	w[10] = (unsigned char)(k->len >> 8);
	w[11] = (unsigned char)k->len;
	w[12] = (unsigned char)(vlen >> 24);
	w[13] = (unsigned char)(vlen >> 16);
	w[14] = (unsigned char)(vlen >> 8);
	w[15] = (unsigned char)vlen;
	w[16] = (unsigned char)(*slot >> 24);
	w[17] = (unsigned char)(*slot >> 16);
	w[18] = (unsigned char)(*slot >> 8);
	w[19] = (unsigned char)*slot;
	memcpy(w + W_HDR, k->data, k->len);
	if (vlen > 0) {
		memcpy(w + W_HDR + k->len, v->data, vlen);
	}
	s->nrows_written += *slot == 0;
	*slot = (uint32_t)s->written_len + 1;
	s->written_len = need;
	return 0;
}

/* At the top-level commit of t: appends to staging, in sequence order,
 * the last write of each row t wrote. (A row a step of t filed home is
 * staged again: harmless, its record holds what home holds, and it goes
 * with the next epoch's head.) */
static int
stage_emit(struct st_stage *s, struct stage_txn *t)
{
	size_t pos = 0;

	while (pos < s->written_len) {
		const unsigned char *w = s->written + pos;
		size_t klen = w_klen(w), vlen = w_vlen(w), rlen = REC_HDR + klen + vlen;
		struct st_buf sk = {w, 8}, rec;
		uint32_t *slot = slot_of(s, (enum storage_table)w[8], w + W_HDR, klen);
		int rc;

		if (*slot != pos + 1) {
			pos += W_HDR + klen + vlen;
			continue; /* written again later */
		}
		pos += W_HDR + klen + vlen;
		rc = grow_buf(&s->rec, &s->rec_cap, rlen);
		if (rc != 0) {
			return rc;
		}
		s->rec[0] = w[8];
		s->rec[1] = w[9];
		s->rec[2] = w[10];
		s->rec[3] = w[11];
		memcpy(s->rec + REC_HDR, w + W_HDR, klen + vlen);
		rec.data = s->rec;
		rec.len = rlen;
		rc = storage_put(t->fwd.inner, STORAGE_T_STAGE, &sk, &rec, STORAGE_PUT_APPEND);
		if (rc != 0) {
			return rc;
		}
		t->bytes += (int64_t)rec_cost(rlen);
		t->rows++;
		s->since_step++;
	}
	return 0;
}

/* Forgets the writes of an aborted child (those from its mark on). */
static void
written_cut(struct st_stage *s, size_t mark)
{
	if (mark < s->written_len) {
		s->written_len = mark;
		/* at the size it has: it cannot fail */
		(void)slots_rebuild(s, s->nslots / 2);
	}
}

/* The last key of tb as t sees it, for STORAGE_PUT_APPEND's check. */
static int
last_key_below(struct stage_txn *t, enum storage_table tb, const struct st_buf *k)
{
	struct storage_cursor *c;
	struct st_buf key;
	int rc;

	rc = storage_cursor_open(&t->fwd.base, tb, &c);
	if (rc != 0) {
		return rc;
	}
	rc = storage_cursor_seek_last(c, NULL, &key, NULL);
	if (rc == 0 && key_cmp(&key, k) >= 0) {
		rc = ECHD_EEXIST;
	} else if (rc == ECHD_ENOTFOUND) {
		rc = 0;
	}
	storage_cursor_close(c);
	return rc;
}

static int
stage_put(struct storage_txn *base, enum storage_table tb, const struct st_buf *k,
	const struct st_buf *v, unsigned flags)
{
	struct stage_txn *t = txn_from(base);
	int rc;

	assert((unsigned)tb < STORAGE_T__COUNT);
	if (t->fwd.err != 0) {
		return ECHD_EINVAL;
	}
	if (t->rdonly) {
		return -EACCES;
	}
	if ((flags & ~STORAGE_PUT_APPEND) != 0 || !key_ok(k)) {
		return ECHD_EINVAL;
	}
	if (flags & STORAGE_PUT_APPEND) {
		rc = last_key_below(t, tb, k);
		if (rc != 0) {
			return rc;
		}
	}
	return stage_write(t, tb, k, v);
}

static int
stage_del(struct storage_txn *base, enum storage_table tb, const struct st_buf *k)
{
	struct stage_txn *t = txn_from(base);
	struct st_buf v;
	int rc;

	assert((unsigned)tb < STORAGE_T__COUNT);
	if (t->fwd.err != 0) {
		return ECHD_EINVAL;
	}
	if (t->rdonly) {
		return -EACCES;
	}
	if (!key_ok(k)) {
		return ECHD_ENOTFOUND;
	}
	rc = row_get(t, tb, k, &v);
	if (rc != 0) {
		return rc;
	}
	return stage_write(t, tb, k, NULL);
}

/* ---- cursors: overlay and home merged in key order ----------------------- */

static int
stage_cursor_open(struct storage_txn *base, enum storage_table tb, struct storage_cursor **out)
{
	struct stage_txn *t = txn_from(base);
	struct storage_cursor *cb;
	struct stage_cursor *c;
	int rc;

	assert((unsigned)tb < STORAGE_T__COUNT);
	/* the base: c, zeroed, with home's cursor (refused in a failed txn) */
	rc = storage_fwd_cursor_open(base, tb, &cb);
	if (rc != 0) {
		return rc;
	}
	c = cursor_from(cb);
	c->home.c = c->base.inner;
	rc = storage_cursor_open(t->ov, tb, &c->ov.c);
	if (rc != 0) {
		storage_fwd_cursor_close(cb);
		return rc;
	}
	*out = cb;
	return 0;
}

static void
stage_cursor_close(struct storage_cursor *base)
{
	struct stage_cursor *c = cursor_from(base);

	storage_cursor_close(c->ov.c);
	echd_free(c->key);
	storage_fwd_cursor_close(base); /* home's cursor, and c */
}

static int
side_done(struct side *sd, int rc)
{
	sd->ok = rc == 0;
	return rc == ECHD_ENOTFOUND ? 0 : rc;
}

/* Places sd on the first row >= k (fwd) or the last <= k, or past it when
 * !incl; k NULL: the first or last row. */
static int
side_place(struct side *sd, const struct st_buf *k, bool fwd, bool incl)
{
	int rc;

	if (fwd) {
		rc = storage_cursor_seek(sd->c, k, &sd->k, &sd->v);
		if (rc == 0 && !incl && k != NULL && key_eq(&sd->k, k->data, k->len)) {
			rc = storage_cursor_next(sd->c, &sd->k, &sd->v);
		}
	} else {
		rc = storage_cursor_seek_last(sd->c, k, &sd->k, &sd->v);
		if (rc == 0 && !incl && k != NULL && key_eq(&sd->k, k->data, k->len)) {
			rc = storage_cursor_prev(sd->c, &sd->k, &sd->v);
		}
	}
	return side_done(sd, rc);
}

static int
side_step(struct side *sd, bool fwd)
{
	int rc = fwd ? storage_cursor_next(sd->c, &sd->k, &sd->v)
		     : storage_cursor_prev(sd->c, &sd->k, &sd->v);

	return side_done(sd, rc);
}

/* The merged row at the sides' heads in direction fwd: the nearer of the
 * two; on a tie the overlay's, whose tombstone hides both. */
static int
resolve(struct stage_cursor *c, bool fwd, struct st_buf *key, struct st_buf *val)
{
	struct side *o = &c->ov, *h = &c->home;
	int rc = 0;

	for (;;) {
		bool take_o, tie = false;
		const unsigned char *p;

		if (!o->ok && !h->ok) {
			return ECHD_ENOTFOUND;
		}
		if (!o->ok) {
			take_o = false;
		} else if (!h->ok) {
			take_o = true;
		} else {
			int cmp = key_cmp(&o->k, &h->k);

			tie = cmp == 0;
			take_o = tie || (cmp < 0) == fwd;
		}
		if (!take_o) {
			*key = h->k;
			*val = h->v;
			return 0;
		}
		p = o->v.data;
		if (o->v.len < OV_HDR) {
			return ECHD_ECORRUPT;
		}
		if (p[0] == KIND_TOMB) {
			rc = side_step(o, fwd);
			if (rc == 0 && tie) {
				rc = side_step(h, fwd);
			}
			if (rc != 0) {
				return rc;
			}
			continue;
		}
		*key = o->k;
		val->data = p + OV_HDR;
		val->len = o->v.len - OV_HDR;
		return 0;
	}
}

/* Stands c on the row resolve() found (rc 0), or at the edge miss. */
static int
land(struct stage_cursor *c, int rc, bool fwd, enum stage_pos miss, const struct st_buf *k,
	const struct st_buf *v, struct st_buf *key, struct st_buf *val)
{
	c->heads = false;
	if (rc == ECHD_ENOTFOUND) {
		c->pos = miss;
		return rc;
	}
	if (rc != 0) {
		c->pos = POS_UNSET;
		return rc;
	}
	if (grow_buf(&c->key, &c->kcap, k->len) != 0) {
		c->pos = POS_UNSET;
		return -ENOMEM;
	}
	memcpy(c->key, k->data, k->len);
	c->klen = k->len;
	c->pos = POS_ON;
	c->heads = true;
	c->fwd = fwd;
	if (key != NULL) {
		*key = *k;
	}
	if (val != NULL) {
		*val = *v;
	}
	return 0;
}

/* Places both sides from k (see side_place()) and lands on the merged row. */
static int
place(struct stage_cursor *c, const struct st_buf *k, bool fwd, bool incl, enum stage_pos miss,
	struct st_buf *key, struct st_buf *val)
{
	struct st_buf rk, rv;
	int rc;

	rc = side_place(&c->ov, k, fwd, incl);
	if (rc == 0) {
		rc = side_place(&c->home, k, fwd, incl);
	}
	if (rc == 0) {
		rc = resolve(c, fwd, &rk, &rv);
	}
	return land(c, rc, fwd, miss, &rk, &rv, key, val);
}

/* From the row c stands on to the next one in direction fwd. */
static int
move(struct stage_cursor *c, bool fwd, struct st_buf *key, struct st_buf *val)
{
	enum stage_pos miss = fwd ? POS_AFTER : POS_BEFORE;
	struct st_buf cur = {c->key, c->klen}, rk, rv;
	int rc = 0;

	if (!c->heads || c->fwd != fwd) {
		/* A turn, or the row was deleted: from the key, past it. */
		return place(c, &cur, fwd, false, miss, key, val);
	}
	if (c->ov.ok && key_eq(&c->ov.k, c->key, c->klen)) {
		rc = side_step(&c->ov, fwd);
	}
	if (rc == 0 && c->home.ok && key_eq(&c->home.k, c->key, c->klen)) {
		rc = side_step(&c->home, fwd);
	}
	if (rc == 0) {
		rc = resolve(c, fwd, &rk, &rv);
	}
	return land(c, rc, fwd, miss, &rk, &rv, key, val);
}

static int
stage_cursor_seek(struct storage_cursor *base, const struct st_buf *k, struct st_buf *key,
	struct st_buf *val)
{
	struct stage_cursor *c = cursor_from(base);

	if (k != NULL && k->len == 0) {
		k = NULL; /* every key is >= the empty one */
	}
	return place(c, k, true, true, POS_AFTER, key, val);
}

static int
stage_cursor_seek_last(struct storage_cursor *base, const struct st_buf *k, struct st_buf *key,
	struct st_buf *val)
{
	struct stage_cursor *c = cursor_from(base);

	if (k != NULL && k->len == 0) {
		c->pos = POS_BEFORE; /* no key is <= the empty one */
		c->heads = false;
		return ECHD_ENOTFOUND;
	}
	return place(c, k, false, true, POS_BEFORE, key, val);
}

static int
stage_cursor_next(struct storage_cursor *base, struct st_buf *key, struct st_buf *val)
{
	struct stage_cursor *c = cursor_from(base);

	switch (c->pos) {
	case POS_AFTER:
		return ECHD_ENOTFOUND;
	case POS_UNSET:
	case POS_BEFORE:
		return place(c, NULL, true, true, POS_AFTER, key, val);
	case POS_ON:
	case POS_DELETED:
		break;
	}
	return move(c, true, key, val);
}

static int
stage_cursor_prev(struct storage_cursor *base, struct st_buf *key, struct st_buf *val)
{
	struct stage_cursor *c = cursor_from(base);

	switch (c->pos) {
	case POS_BEFORE:
		return ECHD_ENOTFOUND;
	case POS_UNSET:
	case POS_AFTER:
		return place(c, NULL, false, true, POS_BEFORE, key, val);
	case POS_ON:
	case POS_DELETED:
		break;
	}
	return move(c, false, key, val);
}

static int
stage_cursor_del(struct storage_cursor *base)
{
	struct stage_cursor *c = cursor_from(base);
	struct stage_txn *t = txn_from(base->txn);
	struct st_buf k = {c->key, c->klen};
	int rc;

	if (t->fwd.err != 0) {
		return ECHD_EINVAL;
	}
	if (t->rdonly) {
		return -EACCES;
	}
	if (c->pos != POS_ON) {
		return ECHD_ENOTFOUND; /* only the row last returned may go */
	}
	rc = stage_write(t, base->tb, &k, NULL);
	if (rc == 0) {
		c->pos = POS_DELETED;
		c->heads = false; /* the overlay's cursor must seek again */
	}
	return rc;
}

static void
stage_cursor_ahead(struct storage_cursor *base, unsigned rows)
{
	struct stage_cursor *c = cursor_from(base);

	storage_cursor_ahead(c->ov.c, rows);
	storage_cursor_ahead(c->home.c, rows);
}

/* ---- compaction --------------------------------------------------------- */

static bool
stage_maintain_due(struct storage *st, bool idle)
{
	struct st_stage *s = stage_from(st);

	if (s->read_only) {
		return false;
	}
	if (s->epoch_end != 0) {
		return true;
	}
	return s->rows > 0 && (idle || s->bytes >= s->size / 2);
}

/* Files home, in t, the overlay rows older than the epoch, from where the
 * sweep stands, until `work` runs out (a row filed costs 4, one passed 1).
 * Returns the rows filed, or a negative error. */
static int
sweep(struct st_stage *s, struct stage_txn *t, uint64_t work)
{
	int filed = 0;

	while (s->sweep_tb < STORAGE_T__COUNT) {
		enum storage_table tb = (enum storage_table)s->sweep_tb;
		struct st_buf from = {s->sweep_key, s->sweep_klen}, key, val;
		struct storage_cursor *c;
		int rc;

		rc = storage_cursor_open(t->ov, tb, &c);
		if (rc != 0) {
			return rc;
		}
		rc = storage_cursor_seek(c, s->sweep_klen != 0 ? &from : NULL, &key, &val);
		if (rc == 0 && s->sweep_klen != 0 && key_eq(&key, from.data, from.len)) {
			rc = storage_cursor_next(c, &key, &val);
		}
		for (; rc == 0; rc = storage_cursor_next(c, &key, &val)) {
			const unsigned char *p = val.data;

			if (work < 4) {
				break;
			}
			if (val.len < OV_HDR) {
				rc = ECHD_ECORRUPT;
				break;
			}
			/* Past this key from now on, whatever happens to the row. */
			memcpy(s->sweep_key, key.data, key.len);
			s->sweep_klen = key.len;
			if (echd_get_be64(p + 1) >= s->epoch_end) {
				work--;
				continue; /* staged since the epoch began: the next one's */
			}
			if (p[0] == KIND_TOMB) {
				rc = storage_del(t->fwd.inner, tb, &key);
				rc = rc == ECHD_ENOTFOUND ? 0 : rc;
			} else {
				struct st_buf v = {p + OV_HDR, val.len - OV_HDR};

				rc = storage_put(t->fwd.inner, tb, &key, &v, 0);
			}
			if (rc == 0) {
				rc = storage_cursor_del(c);
			}
			if (rc != 0) {
				break;
			}
			filed++;
			work -= 4;
		}
		storage_cursor_close(c);
		if (rc == 0) {
			return filed; /* out of work, mid-table */
		}
		if (rc != ECHD_ENOTFOUND) {
			return rc;
		}
		s->sweep_tb++;
		s->sweep_klen = 0;
	}
	return filed;
}

/* Deletes in t up to n staged records older than the epoch, from the
 * head; when none is left, the epoch is over. Returns the records
 * deleted, or a negative error. */
static int
drop_head(struct st_stage *s, struct stage_txn *t, uint64_t n)
{
	struct storage_cursor *c;
	struct st_buf key, val;
	int dropped = 0;
	int rc;

	rc = storage_cursor_open(t->fwd.inner, STORAGE_T_STAGE, &c);
	if (rc != 0) {
		return rc;
	}
	for (rc = storage_cursor_seek(c, NULL, &key, &val); rc == 0;
		rc = storage_cursor_next(c, &key, &val)) {
		if (key.len != 8) {
			rc = ECHD_ECORRUPT;
			break;
		}
		if (echd_get_be64(key.data) >= s->epoch_end) {
			rc = ECHD_ENOTFOUND; /* the head is the next epoch's */
			break;
		}
		if ((uint64_t)dropped == n) {
			break;
		}
		t->bytes -= (int64_t)rec_cost(val.len);
		t->rows--;
		rc = storage_cursor_del(c);
		if (rc != 0) {
			break;
		}
		dropped++;
	}
	storage_cursor_close(c);
	if (rc == ECHD_ENOTFOUND) {
		s->epoch_end = 0;
		s->epochs++;
		rc = 0;
	}
	return rc != 0 ? rc : dropped;
}

static int
stage_maintain(struct storage_txn *base, bool idle, bool *more)
{
	struct stage_txn *t = txn_from(base);
	struct st_stage *s = stage_from(base->st);
	uint64_t rows;
	int rc, done = 0;

	if (t->fwd.err != 0) {
		return ECHD_EINVAL;
	}
	if (!stage_maintain_due(base->st, idle)) {
		return 0;
	}
	rows = 2 * s->since_step;
	rows = rows < STEP_MIN ? STEP_MIN : rows > STEP_MAX ? STEP_MAX : rows;
	if (s->bytes >= s->size) {
		rows *= 4; /* full: the batches wait for the filing */
	}
	s->since_step = 0;
	t->compacted = true;
	if (s->epoch_end == 0) {
		s->epoch_end = s->next_seq;
		s->sweep_tb = 0;
		s->sweep_klen = 0;
	}
	if (s->sweep_tb < STORAGE_T__COUNT) {
		rc = sweep(s, t, 4 * rows);
		if (rc < 0) {
			return rc;
		}
		done += rc;
		s->filed += (uint64_t)rc;
	}
	if (s->sweep_tb == STORAGE_T__COUNT) {
		rc = drop_head(s, t, DROP_PER_ROW * rows);
		if (rc < 0) {
			return rc;
		}
		done += rc;
		s->dropped += (uint64_t)rc;
	}
	*more = idle && (s->epoch_end != 0 || (int64_t)s->rows + t->rows > 0 ||
				s->written_len > 0);
	return done;
}

/* ---- echo-admin check ---------------------------------------------------- */

static void say(storage_problem_fn problem, void *ud, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void
say(storage_problem_fn problem, void *ud, const char *fmt, ...)
{
	char msg[160];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	problem(ud, msg);
}

/* Staging to overlay: each record decodes, and the overlay holds its row
 * at that version or a newer one (the newest record's exactly). */
static int
verify_staging(struct stage_txn *t, storage_problem_fn problem, void *ud, uint64_t *rows)
{
	struct storage_cursor *c;
	struct st_buf key, val, ov;
	uint64_t prev = 0;
	int rc;

	rc = storage_cursor_open(t->fwd.inner, STORAGE_T_STAGE, &c);
	if (rc == ECHD_ENOTFOUND) {
		return 0; /* no staging table: an environment of plain lmdb */
	}
	if (rc != 0) {
		return rc;
	}
	for (rc = storage_cursor_seek(c, NULL, &key, &val); rc == 0;
		rc = storage_cursor_next(c, &key, &val)) {
		struct rec r;
		uint64_t seq, oseq;
		const unsigned char *p;

		(*rows)++;
		if (key.len != 8 || (seq = echd_get_be64(key.data)) <= prev) {
			say(problem, ud, "staged record %llu: its key is not a sequence after %llu",
				(unsigned long long)*rows, (unsigned long long)prev);
			continue;
		}
		prev = seq;
		if (rec_decode(&val, &r) != 0) {
			say(problem, ud, "staged record %llu (table %u): malformed",
				(unsigned long long)seq,
				val.len > 0 ? ((const unsigned char *)val.data)[0] : 0u);
			continue;
		}
		rc = storage_get(t->ov, r.tb, &r.k, &ov);
		if (rc == ECHD_ENOTFOUND) {
			say(problem, ud, "staged record %llu (table %d): its row is not in the overlay",
				(unsigned long long)seq, (int)r.tb);
			continue;
		}
		if (rc != 0) {
			break;
		}
		p = ov.data;
		oseq = ov.len >= OV_HDR ? echd_get_be64(p + 1) : 0;
		if (oseq < seq) {
			say(problem, ud, "staged record %llu: the overlay holds an older version (%llu)",
				(unsigned long long)seq, (unsigned long long)oseq);
		} else if (oseq == seq && (p[0] != r.kind || ov.len - OV_HDR != r.v.len ||
						  memcmp(p + OV_HDR, r.v.data, r.v.len) != 0)) {
			say(problem, ud, "staged record %llu (table %d): the overlay's row differs",
				(unsigned long long)seq, (int)r.tb);
		}
	}
	storage_cursor_close(c);
	return rc == ECHD_ENOTFOUND ? 0 : rc;
}

/* Overlay to staging: each row's version is a staged record of that row. */
static int
verify_overlay(struct stage_txn *t, storage_problem_fn problem, void *ud)
{
	for (int tb = 0; tb < STORAGE_T__COUNT; tb++) {
		struct storage_cursor *c;
		struct st_buf key, val, rv;
		int rc;

		rc = storage_cursor_open(t->ov, (enum storage_table)tb, &c);
		if (rc != 0) {
			return rc;
		}
		for (rc = storage_cursor_seek(c, NULL, &key, &val); rc == 0;
			rc = storage_cursor_next(c, &key, &val)) {
			struct rec r;
			struct st_buf sk;
			uint64_t seq;

			if (val.len < OV_HDR) {
				say(problem, ud, "an overlay row of table %d is malformed", tb);
				continue;
			}
			seq = echd_get_be64((const unsigned char *)val.data + 1);
			sk.data = (const unsigned char *)val.data + 1;
			sk.len = 8;
			rc = storage_get(t->fwd.inner, STORAGE_T_STAGE, &sk, &rv);
			if (rc == ECHD_ENOTFOUND || (rc == 0 && (rec_decode(&rv, &r) != 0 ||
								 r.tb != (enum storage_table)tb ||
								 key_cmp(&r.k, &key) != 0))) {
				say(problem, ud, "an overlay row of table %d has no staged record (%llu)",
					tb, (unsigned long long)seq);
				rc = 0;
				continue;
			}
			if (rc != 0) {
				break;
			}
		}
		storage_cursor_close(c);
		if (rc != ECHD_ENOTFOUND) {
			return rc;
		}
	}
	return 0;
}

static int
stage_verify(struct storage_txn *base, storage_problem_fn problem, void *ud, uint64_t *rows)
{
	struct stage_txn *t = txn_from(base);
	int rc = verify_staging(t, problem, ud, rows);

	return rc != 0 ? rc : verify_overlay(t, problem, ud);
}

static int
stage_maintain_stat(struct storage *st, struct storage_maintain_stat *out)
{
	struct st_stage *s = stage_from(st);

	out->rows = s->rows;
	out->bytes = s->bytes;
	out->bound = s->size;
	out->filed = s->filed;
	out->rounds = s->epochs;
	return 0;
}

static const struct storage_maintain_ops stage_maintain_ops = {
	.due = stage_maintain_due,
	.step = stage_maintain,
	.stat = stage_maintain_stat,
	.verify = stage_verify,
};

/* On the forwarding base: stat, sync, copy and durable_gen are lmdb's;
 * every row and cursor operation is its own (the overlay and home merged),
 * and so are its transactions' ends (staging at the top-level commit). */
const struct storage_ops st_stage_ops = {
	.version = STORAGE_OPS_V2,
	.name = "lmdb-staged",
	.base = &storage_fwd_ops,
	.open = stage_open,
	.close = stage_close,
	.txn_begin = stage_txn_begin,
	.txn_commit = stage_txn_commit,
	.txn_abort = stage_txn_abort,
	.get = stage_get,
	.put = stage_put,
	.del = stage_del,
	.cursor_open = stage_cursor_open,
	.cursor_close = stage_cursor_close,
	.cursor_seek = stage_cursor_seek,
	.cursor_seek_last = stage_cursor_seek_last,
	.cursor_next = stage_cursor_next,
	.cursor_prev = stage_cursor_prev,
	.cursor_del = stage_cursor_del,
	.cursor_ahead = stage_cursor_ahead,
	.iface = stage_iface,
};
