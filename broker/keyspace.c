/* keyspace.c - the keyspace rules that sit above the stream model: a lookup
 * does not find a key whose time has passed (and a write drops it, waking its
 * waiters), the cron's active expiry, and the deferred deletion of dropped
 * streams in bounded steps.
 */
#include <errno.h>
#include <string.h>

#include "broker.h"
#include "server.h"

/* Runs the deferred deletion of dropped streams inside the batch. */
void
brk_gc_step(struct brk_server *srv)
{
	struct storage_txn *t, *child;
	bool more = false;
	uint64_t misses0;
	int rc;

	t = brk_batch_txn(srv, &rc);
	if (t == NULL) {
		return;
	}
	rc = stream_gc_pending(t, &more);
	if (rc != 0 || !more) {
		srv->gc_pending = rc != 0; /* nothing to do: no write, no commit */
		return;
	}
	rc = storage_txn_begin(srv->st, t, 0, &child);
	if (rc != 0) {
		return;
	}
	misses0 = brk_fetch_misses(srv);
	rc = stream_gc_step(child, (unsigned)srv->cfg.gc_batch_rows, &more);
	if (rc == 0 && brk_fetch_missed(srv, misses0)) {
		rc = ECHD_EWOULDFETCH; /* a miss it did not pass on: undone (fetch.c) */
	}
	if (rc != 0) {
		storage_txn_abort(child);
		/* not here yet: the rows are being fetched; the next turn goes on */
		if (rc != ECHD_EMAPFULL && rc != ECHD_EWOULDFETCH) {
			echd_log(ECHD_LOG_WARNING, "deleting rows of dropped streams: %s",
				echd_strerror(rc));
		}
		return;
	}
	rc = storage_txn_commit(child);
	if (rc == 0) {
		srv->batch_writes++;
		srv->gc_pending = more;
	}
}

static void
expired_cb(unsigned db, const struct st_buf *name, void *ud)
{
	struct brk_server *srv = ud;

	srv->stats.expired_keys++;
	brk_signal_expired(srv, db, name->data, name->len);
}

void
brk_expire_note(struct brk_server *srv, uint64_t when_ms)
{
	if (srv->expire_next_ms != 0 && when_ms < srv->expire_next_ms) {
		srv->expire_next_ms = when_ms; /* 0 already means: look */
	}
}

/* Active expiry: drops keys whose time passed, in the batch, so that keys
 * nobody reads go too. Runs on the cron's tick, and again each turn while
 * more are due. */
void
brk_expire_step(struct brk_server *srv)
{
	struct storage_txn *t, *child;
	uint64_t now = brk_now_ms(), next = 0, misses0;
	unsigned n = 0;
	bool idmp_only = false;
	int rc;

	srv->expire_due = false;
	if (srv->cfg.active_expire_keys == 0 || srv->expire_next_ms == UINT64_MAX ||
		now < srv->expire_next_ms) {
		return;
	}
	t = brk_batch_txn(srv, &rc);
	if (t == NULL) {
		return;
	}
	rc = storage_txn_begin(srv->st, t, 0, &child);
	if (rc != 0) {
		return;
	}
	misses0 = brk_fetch_misses(srv);
	rc = stream_expire_due(child, now, (unsigned)srv->cfg.active_expire_keys, expired_cb, srv,
		&n, &next);
	if (rc == 0) {
		/* idempotent producers' records past their duration, in the
		 * same budget and the same clock */
		unsigned ni = 0;
		uint64_t inext = 0;
		rc = stream_idmp_expire_due(child, now, (unsigned)srv->cfg.active_expire_keys, &ni,
			&inext);
		if (rc == 0 && inext != 0 && (next == 0 || inext < next)) {
			next = inext;
		}
		if (rc == 0 && ni > 0 && n == 0) {
			n = ni;
			idmp_only = true;
		}
	}
	if (rc == 0 && brk_fetch_missed(srv, misses0)) {
		rc = ECHD_EWOULDFETCH; /* a miss it did not pass on: undone (fetch.c) */
	}
	if (rc == 0 && n > 0) {
		rc = storage_txn_commit(child);
	} else {
		storage_txn_abort(child);
	}
	if (rc != 0) {
		if (rc != ECHD_EMAPFULL && rc != ECHD_EWOULDFETCH) {
			echd_log(ECHD_LOG_WARNING, "dropping expired keys: %s", echd_strerror(rc));
		}
		return; /* the next tick tries again */
	}
	if (n > 0) {
		srv->batch_writes++;
		srv->gc_pending = srv->gc_pending || !idmp_only;
	}
	srv->expire_next_ms = next == 0 ? UINT64_MAX : next;
	srv->expire_due = next != 0 && next <= now;
}

int
brk_lookup(struct brk_ctx *x, const struct st_buf *key, struct stream_meta *m)
{
	return brk_lookup_in(x, x->c->db, key, m);
}

int
brk_lookup_in(struct brk_ctx *x, unsigned db, const struct st_buf *key, struct stream_meta *m)
{
	struct brk_server *srv = x->srv;
	int rc = stream_lookup(x->txn, db, key, m);

	if (rc != 0 || !stream_expired(m, srv->cmd_ms)) {
		return rc;
	}
	if (!x->may_write) {
		return ECHD_ENOTFOUND; /* the cron drops it; a read writes nothing */
	}
	rc = stream_delete(x->txn, db, key);
	if (rc != 0) {
		return rc;
	}
	srv->stats.expired_keys++;
	srv->gc_pending = true;
	brk_signal_expired(srv, db, key->data, key->len);
	return ECHD_ENOTFOUND;
}
