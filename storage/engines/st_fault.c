/* st_fault.c - a storage backend for tests: "lmdb" with chosen operations
 * made to fail (the SQLite syscall-override idea, at the vtable).
 *
 * Compiled into echd so that end-to-end tests can select it with
 * `--storage-backend fault`; never use it for real data. It owns an
 * "lmdb" backend and forwards everything to it through the forwarding
 * base (forward.h), lmdb's options and capacity included; what it changes
 * is the begins, writes, commits and syncs below. With ECHD_FAULT_FILE
 * unset (or empty) it behaves exactly like "lmdb".
 *
 * Control file
 *   ECHD_FAULT_FILE names a text file of rules, one a line:
 *
 *       <op> <when> <error>        # a comment
 *
 *   op     begin      beginning a top-level write transaction
 *          put        storage_put()
 *          del        storage_del() and storage_cursor_del()
 *          commit     committing a top-level write transaction
 *          subcommit  committing a nested transaction
 *          sync       storage_sync()
 *   when   N          the Nth such operation from the time the file was
 *                     read fails, once (N >= 1)
 *          every      every such operation fails until the rule is removed
 *   error  EIO, ENOSPC, ENOMEM (-errno), MAPFULL (ECHD_EMAPFULL) or
 *          CORRUPT (ECHD_ECORRUPT)
 *
 *   e.g. `put 5 EIO`, `commit 1 ENOSPC`, `put 3 MAPFULL`, `commit every EIO`.
 *   Rules count independently: every rule for an op counts each such op,
 *   and when several are due at once the first in the file decides the
 *   error. A missing or empty file means no faults; a line that does not
 *   parse is logged and ignored.
 *
 *   The file is checked (one stat()) at every transaction begin and every
 *   storage_sync(), and re-read when its inode, size, mtime or ctime
 *   changed; re-reading
 *   restarts every count. Writers should replace the file (write a new
 *   one, rename it over) so that a rewrite within one timestamp tick is
 *   still seen. Each injected failure is logged at warning level as
 *   "st_fault: failing <op> #<n> with <error>".
 *
 * What a failure leaves, as LMDB would:
 *   - put/del: nothing is written; the transaction is marked failed, so
 *     its further reads and writes return ECHD_EINVAL (LMDB's
 *     MDB_BAD_TXN) and committing it aborts it and returns the error. A
 *     parent of a failed nested transaction stays usable.
 *   - commit/subcommit: the transaction is aborted (nothing of it is
 *     applied) and freed; the error is returned.
 *   - begin: nothing is opened. sync: nothing is flushed.
 *
 * Single-threaded, like the broker's event loop.
 */
#include <assert.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "echd.h"
#include "forward.h"

#define FAULT_ENV       "ECHD_FAULT_FILE"
#define FAULT_MAX_RULES 32

enum fault_op { OP_BEGIN, OP_PUT, OP_DEL, OP_COMMIT, OP_SUBCOMMIT, OP_SYNC, OP__COUNT };

static const char *const op_names[OP__COUNT] = {
	[OP_BEGIN] = "begin",
	[OP_PUT] = "put",
	[OP_DEL] = "del",
	[OP_COMMIT] = "commit",
	[OP_SUBCOMMIT] = "subcommit",
	[OP_SYNC] = "sync",
};

static const struct {
	const char *name;
	int err;
} err_names[] = {
	{"EIO", -EIO},
	{"ENOSPC", -ENOSPC},
	{"ENOMEM", -ENOMEM},
	{"MAPFULL", ECHD_EMAPFULL},
	{"CORRUPT", ECHD_ECORRUPT},
};

struct fault_rule {
	enum fault_op op;
	unsigned long left; /* one-shot: ops until it fires */
	int err;
	bool every; /* fires at every op */
	bool spent; /* a one-shot rule that fired */
};

struct st_fault {
	struct storage_fwd fwd; /* over "lmdb" */
	char *path;             /* the control file; NULL: never any fault */
	bool have_file;         /* seen describes the rules loaded */
	struct stat seen;
	struct fault_rule rules[FAULT_MAX_RULES];
	unsigned nrules;
	unsigned long count[OP__COUNT]; /* ops of each kind since the file was read */
};

static struct st_fault *
fault_from(struct storage *st)
{
	assert(st->ops == &st_fault_ops);
	return (struct st_fault *)st;
}

/* ---- the control file -------------------------------------------------- */

static bool
parse_rule(const char *line, struct fault_rule *out)
{
	char op[16], when[24], err[16], extra[2];
	struct fault_rule r = {0};
	size_t i;

	if (sscanf(line, "%15s %23s %15s %1s", op, when, err, extra) != 3) {
		return false;
	}
	for (i = 0; i < OP__COUNT && strcmp(op, op_names[i]) != 0; i++) {
	}
	if (i == OP__COUNT) {
		return false;
	}
	r.op = (enum fault_op)i;
	if (strcmp(when, "every") == 0) {
		r.every = true;
	} else {
		char *end;

		errno = 0;
		if (when[0] < '1' || when[0] > '9') {
			return false;
		}
		r.left = strtoul(when, &end, 10);
		if (errno != 0 || *end != '\0') {
			return false;
		}
	}
	for (i = 0; i < sizeof(err_names) / sizeof(err_names[0]); i++) {
		if (strcmp(err, err_names[i].name) == 0) {
			break;
		}
	}
	if (i == sizeof(err_names) / sizeof(err_names[0])) {
		return false;
	}
	r.err = err_names[i].err;
	*out = r;
	return true;
}

static void
load_rules(struct st_fault *s)
{
	char line[256];
	unsigned lineno = 0;
	FILE *f;

	s->nrules = 0;
	memset(s->count, 0, sizeof(s->count));
	f = fopen(s->path, "r");
	if (f == NULL) {
		echd_log(ECHD_LOG_WARNING, "st_fault: cannot read %s: %s", s->path,
			strerror(errno));
		return;
	}
	while (fgets(line, sizeof(line), f) != NULL) {
		char *hash = strchr(line, '#');
		char *p = line;

		lineno++;
		if (hash != NULL) {
			*hash = '\0';
		}
		line[strcspn(line, "\r\n")] = '\0';
		while (*p == ' ' || *p == '\t') {
			p++;
		}
		if (*p == '\0') {
			continue;
		}
		if (s->nrules == FAULT_MAX_RULES) {
			echd_log(ECHD_LOG_WARNING, "st_fault: %s:%u: more than %d rules, ignored",
				s->path, lineno, FAULT_MAX_RULES);
			break;
		}
		if (!parse_rule(p, &s->rules[s->nrules])) {
			echd_log(ECHD_LOG_WARNING, "st_fault: %s:%u: bad rule '%s', ignored", s->path,
				lineno, p);
			continue;
		}
		s->nrules++;
	}
	fclose(f);
	echd_log(ECHD_LOG_NOTICE, "st_fault: %u rule(s) loaded from %s", s->nrules, s->path);
}

static bool
same_file(const struct stat *a, const struct stat *b)
{
	return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
	       a->st_mtim.tv_sec == b->st_mtim.tv_sec &&
	       a->st_mtim.tv_nsec == b->st_mtim.tv_nsec &&
	       a->st_ctim.tv_sec == b->st_ctim.tv_sec && a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

/* Re-reads the control file if it changed. */
static void
refresh(struct st_fault *s)
{
	struct stat sb;

	if (s->path == NULL) {
		return;
	}
	if (stat(s->path, &sb) != 0) {
		if (s->have_file) {
			echd_log(ECHD_LOG_NOTICE, "st_fault: %s is gone: no faults", s->path);
			s->have_file = false;
			s->nrules = 0;
		}
		return;
	}
	if (s->have_file && same_file(&sb, &s->seen)) {
		return;
	}
	s->seen = sb;
	s->have_file = true;
	load_rules(s);
}

static const char *
err_name(int err)
{
	for (size_t i = 0; i < sizeof(err_names) / sizeof(err_names[0]); i++) {
		if (err_names[i].err == err) {
			return err_names[i].name;
		}
	}
	return "?";
}

/* Counts one op; returns the error to inject, or 0 to let it run. */
static int
check(struct st_fault *s, enum fault_op op)
{
	int err = 0;

	if (s->nrules == 0) {
		return 0;
	}
	s->count[op]++;
	/* Every rule counts the op, even when an earlier one already fires. */
	for (unsigned i = 0; i < s->nrules; i++) {
		struct fault_rule *r = &s->rules[i];
		bool due;

		if (r->op != op || r->spent) {
			continue;
		}
		if (r->every) {
			due = true;
		} else {
			due = --r->left == 0;
			r->spent = due;
		}
		if (due && err == 0) {
			err = r->err;
		}
	}
	if (err != 0) {
		echd_log(ECHD_LOG_WARNING, "st_fault: failing %s #%lu with %s", op_names[op],
			s->count[op], err_name(err));
	}
	return err;
}

/* ---- environment ------------------------------------------------------- */

static void
fault_close(struct storage *st)
{
	struct st_fault *s = fault_from(st);

	storage_fwd_finish(&s->fwd);
	echd_free(s->path);
	echd_free(s);
}

static int
fault_open(const struct storage_opts *o, struct storage **out)
{
	struct st_fault *s;
	const char *path = getenv(FAULT_ENV);
	int rc;

	rc = storage_opts_read(o, "fault", NULL, 0, NULL); /* none: lmdb reads its own */
	if (rc != 0) {
		return rc;
	}
	s = echd_calloc(1, sizeof(*s));
	if (s == NULL) {
		return -ENOMEM;
	}
	storage_fwd_init(&s->fwd, &st_fault_ops, sizeof(struct storage_fwd_txn),
		sizeof(struct storage_fwd_cursor));
	if (path != NULL && path[0] != '\0') {
		s->path = echd_strndup(path, strlen(path));
		if (s->path == NULL) {
			fault_close(&s->fwd.base);
			return -ENOMEM;
		}
	}
	rc = storage_open("lmdb", o, &s->fwd.inner);
	if (rc != 0) {
		s->fwd.inner = NULL;
		fault_close(&s->fwd.base);
		return rc;
	}
	echd_log(ECHD_LOG_NOTICE, "st_fault: test backend over lmdb; faults from %s",
		s->path != NULL ? s->path : "nowhere (" FAULT_ENV " is not set)");
	refresh(s);
	*out = &s->fwd.base;
	return 0;
}

static int
fault_sync(struct storage *st)
{
	struct st_fault *s = fault_from(st);
	int rc;

	refresh(s);
	rc = check(s, OP_SYNC);
	if (rc != 0) {
		return rc;
	}
	return storage_fwd_sync(st);
}

/* ---- transactions ------------------------------------------------------ */

static int
fault_txn_begin(struct storage *st, struct storage_txn *parent, unsigned flags,
	struct storage_txn **out)
{
	struct st_fault *s = fault_from(st);
	int rc;

	refresh(s);
	if (parent == NULL && (flags & STORAGE_TXN_RDONLY) == 0) {
		rc = check(s, OP_BEGIN);
		if (rc != 0) {
			return rc;
		}
	}
	return storage_fwd_txn_begin(st, parent, flags, out);
}

static int
fault_txn_commit(struct storage_txn *t)
{
	int rc;

	/* A failed txn's commit is the base's: it aborts and returns why. */
	if (storage_fwd_txn_err(t) == 0 && !t->rdonly) {
		rc = check(fault_from(t->st), t->parent != NULL ? OP_SUBCOMMIT : OP_COMMIT);
		if (rc != 0) {
			storage_fwd_txn_abort(t);
			return rc;
		}
	}
	return storage_fwd_txn_commit(t);
}

/* ---- writes ------------------------------------------------------------- */

/* Counts a write op; a due fault marks t failed, as LMDB marks a txn after
 * a failed write (the base then refuses its every call). */
static int
write_check(struct storage_txn *t, enum fault_op op)
{
	int rc;

	if (storage_fwd_txn_err(t) != 0) {
		return ECHD_EINVAL;
	}
	rc = check(fault_from(t->st), op);
	if (rc != 0) {
		storage_fwd_txn_fail(t, rc);
	}
	return rc;
}

static int
fault_put(struct storage_txn *t, enum storage_table tb, const struct st_buf *k,
	const struct st_buf *v, unsigned flags)
{
	int rc = write_check(t, OP_PUT);

	return rc != 0 ? rc : storage_fwd_put(t, tb, k, v, flags);
}

static int
fault_del(struct storage_txn *t, enum storage_table tb, const struct st_buf *k)
{
	int rc = write_check(t, OP_DEL);

	return rc != 0 ? rc : storage_fwd_del(t, tb, k);
}

static int
fault_cursor_del(struct storage_cursor *c)
{
	int rc = write_check(c->txn, OP_DEL);

	return rc != 0 ? rc : storage_fwd_cursor_del(c);
}

/* Reads, cursors, stat, copy, durable_gen and lmdb's capacity: the base's. */
const struct storage_ops st_fault_ops = {
	.version = STORAGE_OPS_V2,
	.name = "fault",
	.base = &storage_fwd_ops,
	.open = fault_open,
	.close = fault_close,
	.txn_begin = fault_txn_begin,
	.txn_commit = fault_txn_commit,
	.put = fault_put,
	.del = fault_del,
	.cursor_del = fault_cursor_del,
	.sync = fault_sync,
};
