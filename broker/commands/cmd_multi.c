/* cmd_multi.c - MULTI, EXEC, DISCARD, WATCH, UNWATCH.
 *
 * EXEC runs every queued command, one after the other with nothing in
 * between, inside one nested transaction of the loop turn's batch: all of
 * it commits with the batch or none of it does, and its reply is held
 * until that commit is durable, like every other reply.
 */
#include <errno.h>
#include <string.h>

#include "broker.h"

static void
argv_free(struct brk_argv *a)
{
	for (int i = 0; i < a->argc; i++) {
		echd_free((void *)a->argv[i].p);
	}
	ECHD_FREE(a->argv);
	a->argc = 0;
}

void
brk_multi_reset(struct brk_conn *c)
{
	for (int i = 0; i < c->nqueue; i++) {
		argv_free(&c->queue[i]);
	}
	ECHD_FREE(c->queue);
	c->nqueue = c->qcap = 0;
	c->multi = false;
	c->multi_dirty = false;
	brk_unwatch_all(c);
}

void
brk_multi_queue(struct brk_ctx *x)
{
	struct brk_conn *c = x->c;
	struct brk_argv *q;

	if (c->nqueue >= x->srv->cfg.multi_max_commands) {
		resp_add_errorf(x->w, "ERR too many commands in MULTI (multi-max-commands is %lld)",
			x->srv->cfg.multi_max_commands);
		c->multi_dirty = true;
		return;
	}
	if (c->nqueue == c->qcap) {
		int ncap = c->qcap ? c->qcap * 2 : 8;
		struct brk_argv *nq = echd_realloc(c->queue, (size_t)ncap * sizeof(*nq));
		if (nq == NULL) {
			goto oom;
		}
		c->queue = nq;
		c->qcap = ncap;
	}
	q = &c->queue[c->nqueue];
	q->argc = 0;
	q->argv = echd_calloc((size_t)x->argc, sizeof(*q->argv));
	if (q->argv == NULL) {
		goto oom;
	}
	for (int i = 0; i < x->argc; i++) {
		char *p = echd_strndup(x->argv[i].p, x->argv[i].len);
		if (p == NULL) {
			argv_free(q);
			goto oom;
		}
		q->argv[i].p = p;
		q->argv[i].len = x->argv[i].len;
		q->argc++;
	}
	c->nqueue++;
	resp_add_simple(x->w, "QUEUED");
	return;
oom:
	resp_add_error(x->w, "ERR out of memory queueing the command");
	c->multi_dirty = true;
}

int
brk_cmd_multi(struct brk_ctx *x)
{
	if (x->c->multi) {
		resp_add_error(x->w, "ERR MULTI calls can not be nested");
		return 0;
	}
	x->c->multi = true;
	resp_add_simple(x->w, "OK");
	return 0;
}

int
brk_cmd_discard(struct brk_ctx *x)
{
	if (!x->c->multi) {
		resp_add_error(x->w, "ERR DISCARD without MULTI");
		return 0;
	}
	brk_multi_reset(x->c);
	resp_add_simple(x->w, "OK");
	return 0;
}

int
brk_cmd_watch(struct brk_ctx *x)
{
	struct storage_txn *t;
	int rc;

	if (x->c->multi) {
		resp_add_error(x->w, "ERR WATCH inside MULTI is not allowed");
		return 0;
	}
	t = brk_batch_txn(x->srv, &rc);
	if (t == NULL) {
		return rc;
	}
	for (int i = 1; i < x->argc; i++) {
		struct st_buf k = {x->argv[i].p, x->argv[i].len};
		struct stream_meta m;
		rc = stream_lookup(t, x->c->db, &k, &m);
		if (rc != 0 && rc != ECHD_ENOTFOUND) {
			return rc;
		}
		rc = brk_watch_key(x->c, k.data, k.len, rc == 0 && stream_expired(&m, x->srv->cmd_ms));
		if (rc != 0) {
			return rc;
		}
	}
	resp_add_simple(x->w, "OK");
	return 0;
}

int
brk_cmd_unwatch(struct brk_ctx *x)
{
	brk_unwatch_all(x->c);
	resp_add_simple(x->w, "OK");
	return 0;
}

/* A watched key whose expiry time passed counts as changed, as in Redis,
 * even before the cron drops it -- unless it had expired when WATCHed. */
static int
watched_expired(struct brk_ctx *x)
{
	struct brk_conn *c = x->c;
	struct storage_txn *t;
	int rc;

	t = brk_batch_txn(x->srv, &rc);
	if (t == NULL) {
		return rc;
	}
	for (int i = 0; i < c->nwatched && !c->watch_dirty; i++) {
		struct brk_waitkey *wk = c->watched[i].wk;
		struct st_buf k = {wk->name, wk->len};
		struct stream_meta m;

		if (c->watched[i].expired) {
			continue;
		}
		rc = stream_lookup(t, wk->db, &k, &m);
		if (rc == 0 && stream_expired(&m, x->srv->cmd_ms)) {
			c->watch_dirty = true;
		} else if (rc != 0 && rc != ECHD_ENOTFOUND) {
			return rc;
		}
	}
	return 0;
}

/* Whether a command c queued may add state (brk_cmd_adds_data). */
static bool
queue_adds_data(const struct brk_conn *c)
{
	for (int i = 0; i < c->nqueue; i++) {
		const struct brk_argv *q = &c->queue[i];
		const struct brk_cmd *cmd = brk_cmd_lookup(q->argv[0].p, q->argv[0].len);

		if (cmd != NULL && brk_cmd_adds_data(cmd, q->argc, q->argv)) {
			return true;
		}
	}
	return false;
}

int
brk_cmd_exec(struct brk_ctx *x)
{
	struct brk_server *srv = x->srv;
	struct brk_conn *c = x->c;
	struct storage_txn *batch, *child = NULL;
	size_t mark = x->w->out->len;
	bool wrote = false;
	uint64_t dirty = 0, misses0 = brk_fetch_misses(srv);
	int rc = 0, tries = 0;
	int counted = 0; /* commands already in the stats, SLOWLOG and MONITOR */

	if (!c->multi) {
		resp_add_error(x->w, "ERR EXEC without MULTI");
		return 0;
	}
	if (c->multi_dirty) {
		brk_multi_reset(c);
		resp_add_error(x->w, "EXECABORT Transaction discarded because of previous errors.");
		return 0;
	}
	if (srv->disk_full && queue_adds_data(c)) {
		/* The disk filled after the commands were queued: as Redis'
		 * EXEC under maxmemory, the transaction is discarded. */
		char msg[256];
		brk_multi_reset(c);
		brk_error_text(srv, srv->disk_full_rc, msg, sizeof(msg));
		resp_add_error(x->w, msg);
		return 0;
	}
	if (!c->watch_dirty && c->nwatched > 0) {
		rc = watched_expired(x);
		if (rc != 0) {
			brk_multi_reset(c);
			return rc;
		}
	}
	if (c->watch_dirty) {
		brk_multi_reset(c);
		resp_add_null_array(x->w);
		return 0;
	}
again:
	batch = brk_batch_txn(srv, &rc);
	if (batch == NULL) {
		goto out;
	}
	rc = storage_txn_begin(srv->st, batch, 0, &child);
	if (rc != 0) {
		goto out;
	}
	/* Commands run from here see c as outside MULTI, as Redis' do. */
	c->multi = false;
	resp_add_array(x->w, (size_t)c->nqueue);
	for (int i = 0; i < c->nqueue && rc == 0; i++) {
		struct brk_argv *q = &c->queue[i];

		/* the dispatcher's own run: ACL again, stats, SLOWLOG, MONITOR.
		 * Once each: after the map grew the transaction runs again, and
		 * what ran before the failure is counted already. */
		rc = brk_conn_run_queued(c, child, q->argc, q->argv, i >= counted, &wrote, &dirty);
		if (rc == 0 && i >= counted) {
			counted = i + 1;
		}
	}
	if (rc == ECHD_EWOULDFETCH || brk_fetch_missed(srv, misses0)) {
		/* Rows not in memory yet: nothing of it stands, and EXEC runs
		 * again, whole, once they are (conn.c parks it: fetch.c). */
		storage_txn_abort(child);
		resp_buf_truncate(x->w->out, mark);
		c->multi = true;
		return ECHD_EWOULDFETCH;
	}
	if (rc != 0) {
		/* A storage failure: nothing of the transaction stands. */
		storage_txn_abort(child);
		resp_buf_truncate(x->w->out, mark);
		if (rc == ECHD_EMAPFULL && tries++ < 4) {
			goto grow;
		}
		brk_reply_error_rc(x, rc);
		rc = 0;
		goto out;
	}
	if (!wrote) {
		storage_txn_abort(child);
		goto out;
	}
	rc = storage_txn_commit(child);
	if (rc != 0) {
		resp_buf_truncate(x->w->out, mark);
		if (rc == ECHD_EMAPFULL && tries++ < 4) {
			goto grow;
		}
		brk_reply_error_rc(x, rc);
		rc = 0;
		goto out;
	}
	brk_batch_wrote(srv, c);
	srv->stats.dirty += dirty;
	/* x->dirty stays 0: the commands' changes were counted above */
out:
	brk_multi_reset(c);
	return rc;
grow:
	/* The map filled up: grow it (which commits the batch first) and run
	 * the whole transaction again, as brk_conn_execute() does for a
	 * single command; at maxdisk the error names the limit. */
	rc = brk_storage_grow(srv);
	mark = x->w->out->len; /* the commit may have rewritten held replies */
	if (rc == 0) {
		child = NULL;
		wrote = false;
		dirty = 0;
		goto again;
	}
	brk_reply_error_rc(x, rc);
	rc = 0;
	goto out;
}
