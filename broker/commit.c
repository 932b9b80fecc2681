/* commit.c - group commit: the batch of a loop turn, its commit, and the
 * release of the replies it holds.
 *
 * The promise kept here: nothing is acknowledged before it is durable. The
 * commands of one loop turn share one write transaction (brk_batch_txn());
 * brk_batch_end() commits it once, and the replies held during the turn
 * leave only when the storage says that commit is durable: a commit gets a
 * generation, the storage answers the highest durable one
 * (storage_durable_gen()), and brk_release_durable() sends what waited
 * for it. A failed commit turns every reply of the batch into an error.
 * This file also asks the storage, at the end of each turn, whether writes
 * that add data may run (the capacity interface's storage_capacity_admit():
 * maxdisk and a full file system; a storage without the interface admits
 * everything), and grows it when a write found no room (ECHD_EMAPFULL);
 * and gives a storage with deferred work (storage_maintain(): lmdb-staged
 * files what it staged) a step of it in each batch that wants one.
 * And it opens the views the HTTP side reads through (brk_view_begin()):
 * reads from outside a command never open the batch.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <event2/event.h>

#include "broker.h"
#include "server.h"

/* No command for this long: the server is idle, and the storage may do
 * deferred work that is not due yet (lmdb-staged files what it staged). */
#define MAINT_IDLE_MS 100

struct storage_txn *
brk_batch_txn_cached(struct brk_server *srv, int *rc)
{
	if (srv->batch == NULL && !brk_ha_serving(srv)) {
		/* a standby front end: refused quietly (the cron, the samplers
		 * would ask every turn); conn.c's gate answers the clients */
		*rc = brk_ha_role(srv) == STORAGE_ROLE_OFFLINE ? ECHD_EOFFLINE : ECHD_ESTANDBY;
		return NULL;
	}
	if (srv->batch == NULL) {
		*rc = storage_txn_begin(srv->st, NULL, 0, &srv->batch);
		if (*rc != 0) {
			srv->batch = NULL;
			echd_log(ECHD_LOG_WARNING, "cannot begin a write transaction: %s",
				echd_strerror(*rc));
			return NULL;
		}
		srv->batch_open_ms = brk_now_ms();
	}
	*rc = 0;
	return srv->batch;
}

/* The stream cache (storage/model/stream_cache.c) holds the keys and tail
 * node rows of the streams the batch's XADDs appended to. Everything but
 * such an XADD gets the batch from brk_batch_txn() or brk_view_begin(),
 * which write those rows first; the commit does too, and an abort drops
 * them with the rest of the batch. */
int
brk_xcache_flush(struct brk_server *srv)
{
	int rc;

	if (srv->xcache == NULL || stream_cache_empty(srv->xcache)) {
		return 0;
	}
	if (srv->batch == NULL) {
		stream_cache_drop(srv->xcache); /* not reached: the cache lives in a batch */
		return 0;
	}
	rc = stream_cache_flush(srv->xcache, srv->batch);
	if (rc != 0) {
		brk_batch_abort(srv, rc);
	}
	return rc;
}

struct storage_txn *
brk_batch_txn(struct brk_server *srv, int *rc)
{
	*rc = brk_xcache_flush(srv);
	return *rc == 0 ? brk_batch_txn_cached(srv, rc) : NULL;
}

/* The batch when open: a read from outside a command then sees what the
 * turn's commands wrote, as a command run now would. Otherwise a read
 * transaction, which the storage contract allows beside a writer that a
 * later command of the turn may open (LMDB: MDB_NOTLS), and which sees the
 * last commit. Either way the view may show a commit that is not durable
 * yet (appendfsync always holds RESP replies for that, not the HTTP side's:
 * a view of the store, not an acknowledgement), and the batch a write of
 * this turn not committed yet. */
struct storage_txn *
brk_view_begin(struct brk_server *srv, int *rc)
{
	struct storage_txn *t;

	if (srv->batch != NULL) {
		*rc = brk_xcache_flush(srv);
		if (*rc == 0) {
			return srv->batch;
		}
	}
	if (!brk_ha_serving(srv)) {
		/* as brk_batch_txn(): a standby's store is not this front end's to show */
		*rc = brk_ha_role(srv) == STORAGE_ROLE_OFFLINE ? ECHD_EOFFLINE : ECHD_ESTANDBY;
		return NULL;
	}
	*rc = brk_ha_confirm(srv); /* nor a deposed one's, which may not know yet */
	if (*rc != 0) {
		return NULL;
	}
	*rc = storage_txn_begin(srv->st, NULL, STORAGE_TXN_RDONLY, &t);
	if (*rc != 0) {
		echd_log(ECHD_LOG_WARNING, "cannot begin a read transaction: %s", echd_strerror(*rc));
		return NULL;
	}
	return t;
}

void
brk_view_end(struct brk_server *srv, struct storage_txn *t)
{
	if (t != NULL && t != srv->batch) {
		storage_txn_abort(t);
	}
}

/* Replaces every reply c holds that depended on the failed batch with an
 * error; replies of commands that did not use the batch stand. */
static void
fail_held_replies(struct brk_conn *c, int rc)
{
	char msg[256], line[300];
	size_t mlen;

	if (rc == ECHD_EMAPFULL || rc == ECHD_ELIMIT || rc == -ENOSPC) {
		brk_error_text(c->srv, rc, msg, sizeof(msg));
	} else if (rc == ECHD_ESTANDBY) {
		/* fenced: another front end took over, nothing was applied */
		snprintf(msg, sizeof(msg), "%s", BRK_ERR_READONLY);
	} else {
		snprintf(msg, sizeof(msg), "ERR storage commit failed: %s; nothing of this command "
					   "was applied",
			echd_strerror(rc));
	}
	mlen = (size_t)snprintf(line, sizeof(line), "-%s\r\n", msg);
	/* from the last range back, so earlier offsets stay valid */
	for (int i = c->nranges - 1; i >= 0; i--) {
		size_t start = c->ranges[i].start, end = c->ranges[i].end;
		size_t tail = c->out.len - end;

		if (end > c->out.len || start > end) {
			continue;
		}
		if (mlen > end - start) {
			resp_buf_append(&c->out, line, mlen - (end - start)); /* room */
			if (c->out.oom) {
				return;
			}
		} else {
			c->out.len -= (end - start) - mlen;
		}
		memmove(c->out.data + start + mlen, c->out.data + end, tail);
		memcpy(c->out.data + start, line, mlen);
	}
	c->srv->stats.total_error_replies += (uint64_t)c->nranges;
	c->nranges = 0;
}

/* The store was lost during the commit of c's replies (ECHD_EINDOUBT):
 * whether they were applied is unknown, so c is closed unanswered, as for
 * a failed flush, rather than told OK or an error. */
static void
close_in_doubt(struct brk_conn *c)
{
	echd_log(ECHD_LOG_WARNING, "commit outcome unknown (the store was lost during COMMIT): "
				   "closing client %s unanswered",
		c->addr);
	resp_buf_truncate(&c->out, 0);
	c->nmarks = 0;
	brk_conn_close_asap(c);
}

/* Makes every committed batch durable, when the storage has not said so
 * yet (with LMDB: flushes the last commit's meta page). */
int
brk_storage_flush(struct brk_server *srv)
{
	uint64_t t0;
	int rc;

	if (storage_durable_gen(srv->st) >= storage_commit_gen(srv->st)) {
		return 0;
	}
	t0 = brk_now_us();
	rc = storage_sync(srv->st);
	brk_latency_storage(srv, BRK_LAT_FLUSH, brk_now_us() - t0);
	brk_clock_refresh(); /* a flush can take milliseconds */
	if (rc != 0) {
		echd_log(ECHD_LOG_WARNING, "flushing the storage failed: %s", echd_strerror(rc));
		return rc;
	}
	return 0;
}

int
brk_batch_commit(struct brk_server *srv)
{
	int rc = 0;

	if (srv->batch == NULL) {
		return 0;
	}
	rc = brk_xcache_flush(srv);
	if (rc != 0) {
		return rc; /* the batch was aborted: its replies are errors */
	}
	if (srv->batch_writes == 0) {
		storage_txn_abort(srv->batch);
		/* reads: answered only while known current (a deposed front end
		 * must not serve its old state) */
		rc = brk_ha_confirm(srv);
	} else {
		uint64_t t0 = brk_now_us();
		rc = storage_txn_commit(srv->batch);
		brk_latency_storage(srv, BRK_LAT_COMMIT, brk_now_us() - t0);
		brk_clock_refresh(); /* a commit's flush can take milliseconds */
		if (rc == 0) {
			srv->stats.commits++;
			srv->stats.batch_commands_total += srv->batch_writes;
			srv->stats.last_commit_ms = brk_now_ms();
		} else {
			srv->stats.commit_failures++;
			srv->expire_next_ms = 0; /* keys it dropped are back */
			brk_policy_batch_failed(srv); /* so are rows it acked or dead-lettered */
			echd_log(ECHD_LOG_WARNING, "batch commit of %llu write commands failed: %s",
				(unsigned long long)srv->batch_writes, echd_strerror(rc));
		}
	}
	srv->batch = NULL;
	srv->batch_writes = 0;
	srv->batch_cmds = 0;
	for (struct brk_conn *c = srv->held; c != NULL; c = c->held_next) {
		if (rc == ECHD_EINDOUBT && c->nranges > 0) {
			close_in_doubt(c);
		} else if (rc != 0) {
			fail_held_replies(c, rc);
		}
		c->batch_mark = c->out.len;
		c->batch_replies = 0;
		c->nranges = 0;
	}
	if (rc != 0) {
		brk_ha_check(srv); /* fenced or lost: no longer the active front end? */
	}
	return rc;
}

void
brk_batch_wrote(struct brk_server *srv, struct brk_conn *c)
{
	srv->batch_writes++;
	c->write_gen = storage_commit_gen(srv->st) + 1; /* the one this batch's commit gets */
}

void
brk_batch_abort(struct brk_server *srv, int rc)
{
	if (srv->batch == NULL) {
		return;
	}
	storage_txn_abort(srv->batch);
	srv->batch = NULL;
	if (srv->xcache != NULL) {
		stream_cache_drop(srv->xcache);
	}
	srv->stats.commit_failures++;
	srv->expire_next_ms = 0; /* keys it dropped are back */
	brk_policy_batch_failed(srv);
	echd_log(ECHD_LOG_WARNING, "batch of %llu commands aborted: %s",
		(unsigned long long)srv->batch_cmds, echd_strerror(rc));
	srv->batch_writes = 0;
	srv->batch_cmds = 0;
	for (struct brk_conn *c = srv->held; c != NULL; c = c->held_next) {
		if (rc == ECHD_EINDOUBT && c->nranges > 0) {
			close_in_doubt(c);
		} else {
			fail_held_replies(c, rc);
		}
		c->batch_mark = c->out.len;
		c->batch_replies = 0;
		c->nranges = 0;
	}
	brk_ha_check(srv);
}

void
brk_storage_capacity(struct brk_server *srv, struct storage_capacity_stat *out)
{
	struct storage_capacity *cap = storage_capacity(srv->st);

	memset(out, 0, sizeof(*out));
	out->map_size = UINT64_MAX;
	if (cap != NULL && storage_capacity_stat(cap, out) != 0) {
		memset(out, 0, sizeof(*out)); /* as INFO showed a failed stat */
	}
}

/* Logs the size the store grew to. */
static void
log_grown(struct storage_capacity *cap)
{
	struct storage_capacity_stat cs;

	if (storage_capacity_stat(cap, &cs) == 0) {
		echd_log(ECHD_LOG_NOTICE, "storage map grown to %llu bytes",
			(unsigned long long)cs.map_size);
	}
}

int
brk_storage_grow(struct brk_server *srv)
{
	struct storage_capacity *cap = storage_capacity(srv->st);
	int rc;

	rc = brk_batch_commit(srv);
	if (rc != 0 || cap == NULL) {
		return rc; /* without capacity there is nothing to grow: retry */
	}
	rc = storage_capacity_grow(cap, (uint64_t)srv->cfg.maxdisk); /* CONFIG SET may change it */
	if (rc == 0) {
		srv->stats.map_grows++;
		log_grown(cap);
	}
	return rc;
}

static void
waiting_add(struct brk_server *srv, struct brk_conn *c)
{
	if (c->flags & BRK_CONN_WAITING) {
		return;
	}
	c->flags |= BRK_CONN_WAITING;
	c->waiting_next = srv->waiting;
	srv->waiting = c;
	srv->nwaiting++;
}

/* Sends what c may send now; what depends on a commit not yet durable
 * (or reads that may have seen one) waits for that commit's flush.
 * Returns whether all of c's replies went out. */
static bool
release_or_wait(struct brk_server *srv, struct brk_conn *c)
{
	uint64_t last = storage_commit_gen(srv->st), durable = storage_durable_gen(srv->st);
	uint64_t gen = durable < last ? last : 0;

	if (srv->cfg.appendfsync == BRK_FSYNC_EVERYSEC) {
		gen = 0; /* the commit is enough; the timer makes it durable */
	}
	if (c->wait_gen != 0) {
		/* WAITAOF under everysec. A write whose batch was aborted never
		 * got its generation: wait for no later commit than the last. */
		uint64_t w = c->wait_gen < last ? c->wait_gen : last;
		if (w > durable && w > gen) {
			gen = w;
		}
		c->wait_gen = 0;
	}
	if (gen == 0 && c->nmarks == 0) {
		brk_conn_flush(c, c->out.len);
		return true;
	}
	if (gen == 0) {
		gen = c->marks[c->nmarks - 1].gen; /* stay behind what waits */
	}
	if (c->nmarks > 0 && c->marks[c->nmarks - 1].gen == gen) {
		c->marks[c->nmarks - 1].end = c->out.len;
	} else if (c->nmarks < (int)(sizeof(c->marks) / sizeof(c->marks[0]))) {
		c->marks[c->nmarks].gen = gen;
		c->marks[c->nmarks].end = c->out.len;
		c->nmarks++;
	} else {
		/* Too many generations in flight for this one: merge into the
		 * newest, which is only released after all of them anyway. */
		c->marks[c->nmarks - 1].gen = gen;
		c->marks[c->nmarks - 1].end = c->out.len;
	}
	waiting_add(srv, c);
	return false;
}

/* Sends every waiting reply whose commit is durable now; returns to how
 * many connections. On a failed flush (err), whether those commands are
 * on disk is unknown: their connections are closed unanswered. */
int
brk_release_durable(struct brk_server *srv, int err)
{
	struct brk_conn *c, *next, *keep = NULL;
	uint64_t durable = storage_durable_gen(srv->st);
	int released = 0;

	for (c = srv->waiting; c != NULL; c = next) {
		size_t upto = 0;
		int i, k;

		next = c->waiting_next;
		for (i = 0; i < c->nmarks && c->marks[i].gen <= durable; i++) {
			upto = c->marks[i].end;
		}
		if (err != 0 && i < c->nmarks) {
			echd_log(ECHD_LOG_WARNING, "flush failed (%s): closing client %s unanswered",
				echd_strerror(err), c->addr);
			resp_buf_truncate(&c->out, 0);
			c->nmarks = 0;
			c->flags &= ~BRK_CONN_WAITING;
			srv->nwaiting--;
			brk_conn_close_asap(c);
			continue;
		}
		if (i > 0) {
			released++;
			brk_conn_flush(c, upto);
			for (k = 0; i + k < c->nmarks; k++) {
				c->marks[k] = c->marks[i + k];
				c->marks[k].end -= upto;
			}
			c->nmarks = k;
		}
		if (c->nmarks == 0) {
			c->flags &= ~BRK_CONN_WAITING;
			srv->nwaiting--;
			continue;
		}
		c->waiting_next = keep;
		keep = c;
	}
	srv->waiting = keep;
	return released;
}

/* A storage whose commits become durable in the background (postgres:
 * commits in flight) reads what came in; replies whose commit is durable
 * now leave. While others wait, its socket is watched rather than a flush
 * paid (which would wait for the answers in the loop, serving no one): the
 * loop reads the next commands meanwhile, whose commit goes out behind.
 * It is polled every BRK_DURABLE_POLL_MS meanwhile too: the storage
 * judges an answer late by its own timeout. A failure reported: a flush,
 * which answers it, and the clients that waited for it are closed
 * unanswered. Returns how many connections were answered. */
#define BRK_DURABLE_POLL_MS 100

static void durable_cb(evutil_socket_t fd, short what, void *arg);

static int
durable_poll(struct brk_server *srv)
{
	struct timeval tv = {0, BRK_DURABLE_POLL_MS * 1000};
	int fd, rc, released;

	if (srv->inflight == NULL) {
		fd = -1;
		rc = 0;
	} else {
		rc = storage_inflight_poll(srv->inflight, &fd);
	}
	released = brk_release_durable(srv, rc != 0 ? brk_storage_flush(srv) : 0);
	srv->durable_watched = false;
	if (fd < 0 || srv->waiting == NULL) {
		if (srv->durable_ev != NULL) {
			event_del(srv->durable_ev);
		}
		return released;
	}
	if (fd != srv->durable_fd || srv->durable_ev == NULL) {
		if (srv->durable_ev != NULL) {
			event_free(srv->durable_ev);
		}
		srv->durable_fd = -1;
		srv->durable_ev = event_new(srv->base, fd, EV_READ, durable_cb, srv);
		if (srv->durable_ev == NULL) {
			return released; /* a flush then */
		}
		srv->durable_fd = fd;
	}
	srv->durable_watched = event_add(srv->durable_ev, &tv) == 0;
	return released;
}

static void
durable_cb(evutil_socket_t fd, short what, void *arg)
{
	struct brk_server *srv = arg;

	(void)fd;
	srv->durable_watched = false;
	if (srv->batch != NULL) {
		return; /* a batch is running: its end polls */
	}
	(void)what; /* an answer, or time to look whether one is late */
	(void)durable_poll(srv);
	if (srv->waiting != NULL && !srv->durable_watched) {
		brk_release_durable(srv, brk_storage_flush(srv));
	}
}

/* No commit came along to make the last one durable: flush it alone. */
void
brk_flush_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct brk_server *srv = arg;
	int rc;

	(void)fd;
	srv->flush_armed = false;
	if (srv->batch != NULL) {
		return; /* a batch is running: its commit will do */
	}
	if (what & EV_TIMEOUT) {
		srv->stats.meta_flush_waits++; /* the timer fired: no commit came */
	}
	rc = brk_storage_flush(srv);
	brk_release_durable(srv, rc);
}

/* Asks the storage whether the next turns' writes that add data may run
 * (maxdisk, a full file system; LMDB grows its map here while a quarter
 * of it is free) and keeps the answer for brk_conn_execute() and MULTI:
 * commands that add data are refused while !adds_ok, so that XDEL, XTRIM,
 * XACK and DEL can still run in the reserve and free space, and while room
 * is short every write runs nested, so that one that does not fit fails
 * alone. A storage without capacity admits everything. */
static void
admit_writes(struct brk_server *srv)
{
	struct storage_capacity *cap = storage_capacity(srv->st);
	struct storage_room room = {.adds_ok = true}; /* without capacity */

	if (srv->batch != NULL ||
		(cap != NULL && storage_capacity_admit(cap, (uint64_t)srv->cfg.maxdisk, &room) != 0)) {
		return; /* the last answer stands */
	}
	if (room.grew) {
		srv->stats.map_grows++;
		log_grown(cap);
	}
	srv->savepoints = room.nest;
	srv->disk_full = !room.adds_ok;
	srv->disk_full_rc = room.adds_ok ? ECHD_ELIMIT : room.full_rc;
	srv->fs_full = room.fs_full;
}

/* A step of the storage's deferred work (storage_maintain(), storage.h),
 * in a child of the batch so that a failure costs the step alone, and
 * committed with the batch: one flush for both. Due when the storage says
 * so (its mark), and when idle: then the loop keeps turning (maint_more)
 * until nothing is left. A storage without the interface has none.
 * While writes that add are refused (maxdisk, a full file system:
 * admit_writes()) a step that fits as a child may still make the batch's
 * commit fail, and the commands' replies with it: then it runs only in a
 * turn without commands, in a batch of its own (at the pace of the loop's
 * timers, not spinning, as its commit may not fit either). */
static void
maintain_step(struct brk_server *srv)
{
	struct storage_maintain *m = storage_maintain(srv->st);
	uint64_t now = brk_now_ms();
	struct storage_txn *t, *child;
	bool idle, more = false, short_room = srv->disk_full;
	int rc;

	srv->maint_more = false;
	if (m == NULL) {
		return;
	}
	if (srv->stats.total_commands != srv->maint_cmds) {
		srv->maint_cmds = srv->stats.total_commands;
		srv->maint_busy_ms = now;
	}
	/* full: filing is what frees room (a staged deletion frees nothing
	 * until it is filed), so any deferred work is worth a step */
	idle = now - srv->maint_busy_ms >= MAINT_IDLE_MS || short_room;
	if (!storage_maintain_due(m, idle) || (short_room && srv->batch != NULL)) {
		return;
	}
	t = brk_batch_txn(srv, &rc);
	if (t == NULL || storage_txn_begin(srv->st, t, 0, &child) != 0) {
		return;
	}
	rc = storage_maintain_step(m, child, idle, &more);
	if (rc != 0) {
		storage_txn_abort(child);
		if (rc != ECHD_EMAPFULL) {
			echd_log(ECHD_LOG_WARNING, "filing staged rows: %s", echd_strerror(rc));
		}
		return;
	}
	if (storage_txn_commit(child) == 0) {
		srv->batch_writes++;
		srv->stats.maint_steps++;
		srv->maint_more = more && !short_room;
	}
}

/* The end of a loop turn: commit, release replies, wake waiters.
 *
 * The storage is opened with STORAGE_SYNC_DATA: a commit may return before
 * it is durable (LMDB: its meta page is written, not flushed), and
 * storage_durable_gen() says when it is. With appendfsync always the
 * turn's replies wait for their commit's generation to be durable: the
 * next commit usually makes it so, or a flush of its own after
 * flush-wait-us (release_or_wait). With everysec the replies go at once
 * and a timer flushes each second: a crash of the machine can undo the
 * commits of that last second, never corrupt, and a crash of the process
 * loses nothing acknowledged. */
void
brk_batch_end(struct brk_server *srv)
{
	struct brk_conn *c, *next;
	int answered = 0;

	if (srv->expire_due) {
		uint64_t t0 = brk_now_us();
		brk_expire_step(srv);
		brk_latency_sample(srv, BRK_LAT_EXPIRE, (brk_now_us() - t0) / 1000);
	}
	if (srv->gc_pending && (srv->batch != NULL || srv->pending == NULL)) {
		brk_gc_step(srv);
	}
	maintain_step(srv);
	if (brk_batch_commit(srv) == ECHD_EMAPFULL) {
		/* Even the commit found no room: its replies became errors; make
		 * room for the next batch now. */
		if (brk_storage_grow(srv) != 0) {
			echd_log(ECHD_LOG_WARNING, "storage full and at maxdisk (%lld bytes)",
				srv->cfg.maxdisk);
		}
	}
	admit_writes(srv);
	for (c = srv->held; c != NULL; c = next) {
		next = c->held_next;
		c->held_next = NULL;
		c->flags &= ~BRK_CONN_HELD;
		answered += release_or_wait(srv, c);
	}
	srv->held = NULL;
	brk_fetch_turn(srv); /* no transaction open: fetched rows go in, waiters wake */
	/* a turn that touched no storage still ends a batch of commands */
	srv->batch_cmds = 0;
	answered += brk_release_durable(srv, 0);
	if (srv->waiting != NULL) {
		answered += durable_poll(srv);
	}
	if (srv->waiting != NULL && !srv->flush_armed && !srv->durable_watched) {
		/* Under load the next turn's commit makes this one durable for
		 * free; give it that long before paying a flush of its own. The
		 * next commit is likely when clients were just answered (they
		 * tend to send again at once); when none was, the others are
		 * idle (an idle connection pool, say) and waiting would only add
		 * flush-wait-us to every reply of a lone writer. */
		struct timeval tv = {0, (suseconds_t)srv->cfg.flush_wait_us};
		bool others = srv->nconns > srv->nwaiting + srv->blocked_clients;
		if (srv->cfg.flush_wait_us == 0 || srv->shutdown || !others || answered == 0) {
			brk_flush_timer_cb(-1, 0, srv);
		} else {
			evtimer_add(srv->flush_timer, &tv);
			srv->flush_armed = true;
		}
	}
	brk_wake_touched(srv);
}

void
brk_fsync_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct brk_server *srv = arg;

	(void)fd;
	(void)what;
	/* a failure closes what waited for it (WAITAOF), as at any flush */
	brk_release_durable(srv, brk_storage_flush(srv));
}
