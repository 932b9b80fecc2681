/* commit.c - group commit: the batch of a loop turn, its commit, and the
 * release of the replies it holds.
 *
 * The promise kept here: nothing is acknowledged before it is durable. The
 * commands of one loop turn share one write transaction (brk_batch_txn());
 * brk_batch_end() commits it once, and the replies held during the turn
 * leave only when the storage says that commit is durable
 * (brk_release_durable()).
 * A failed commit turns every reply of the batch into an error. This file
 * also owns the disk-full policy: when writes are refused and when the map
 * grows.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <event2/event.h>

#include "broker.h"
#include "server.h"

/* How often a full file system is asked again for room when nothing commits. */
#define FS_RETRY_MS 1000

struct storage_txn *
brk_batch_txn(struct brk_server *srv, int *rc)
{
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

/* Replaces every reply c holds that depended on the failed batch with an
 * error; replies of commands that did not use the batch stand. */
static void
fail_held_replies(struct brk_conn *c, int rc)
{
	char msg[256], line[300];
	size_t mlen;

	if (rc == ECHD_EMAPFULL || rc == ECHD_ELIMIT || rc == -ENOSPC) {
		brk_error_text(c->srv, rc, msg, sizeof(msg));
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

/* Flushes the pending meta page, making every committed batch durable. */
int
brk_meta_flush(struct brk_server *srv)
{
	uint64_t t0;
	int rc;

	if (!srv->meta_pending) {
		return 0;
	}
	t0 = brk_now_us();
	rc = storage_sync(srv->st);
	brk_latency_storage(srv, BRK_LAT_FLUSH, brk_now_us() - t0);
	if (rc != 0) {
		echd_log(ECHD_LOG_WARNING, "flushing the storage failed: %s", echd_strerror(rc));
		return rc;
	}
	srv->meta_pending = false;
	srv->durable_gen = srv->commit_gen;
	return 0;
}

int
brk_batch_commit(struct brk_server *srv)
{
	int rc = 0;

	if (srv->batch == NULL) {
		return 0;
	}
	if (srv->batch_writes == 0) {
		storage_txn_abort(srv->batch);
	} else {
		uint64_t t0 = brk_now_us();
		rc = storage_txn_commit(srv->batch);
		brk_latency_storage(srv, BRK_LAT_COMMIT, brk_now_us() - t0);
		if (rc == 0) {
			srv->stats.commits++;
			srv->stats.batch_commands_total += srv->batch_writes;
			srv->stats.last_commit_ms = brk_now_ms();
			/* This commit's data flush also flushed the previous
			 * commit's meta page: that one is durable now. */
			srv->durable_gen = srv->commit_gen;
			srv->commit_gen++;
			srv->meta_pending = true;
		} else {
			srv->stats.commit_failures++;
			srv->expire_next_ms = 0; /* keys it dropped are back */
			echd_log(ECHD_LOG_WARNING, "batch commit of %llu write commands failed: %s",
				(unsigned long long)srv->batch_writes, echd_strerror(rc));
		}
	}
	srv->batch = NULL;
	srv->batch_writes = 0;
	srv->batch_cmds = 0;
	for (struct brk_conn *c = srv->held; c != NULL; c = c->held_next) {
		if (rc != 0) {
			fail_held_replies(c, rc);
		}
		c->batch_mark = c->out.len;
		c->batch_replies = 0;
		c->nranges = 0;
	}
	return rc;
}

void
brk_batch_wrote(struct brk_server *srv, struct brk_conn *c)
{
	srv->batch_writes++;
	c->write_gen = srv->commit_gen + 1; /* the generation this batch's commit gets */
}

void
brk_batch_abort(struct brk_server *srv, int rc)
{
	if (srv->batch == NULL) {
		return;
	}
	storage_txn_abort(srv->batch);
	srv->batch = NULL;
	srv->stats.commit_failures++;
	srv->expire_next_ms = 0; /* keys it dropped are back */
	echd_log(ECHD_LOG_WARNING, "batch of %llu commands aborted: %s",
		(unsigned long long)srv->batch_cmds, echd_strerror(rc));
	srv->batch_writes = 0;
	srv->batch_cmds = 0;
	for (struct brk_conn *c = srv->held; c != NULL; c = c->held_next) {
		fail_held_replies(c, rc);
		c->batch_mark = c->out.len;
		c->batch_replies = 0;
		c->nranges = 0;
	}
}

int
brk_storage_grow(struct brk_server *srv)
{
	struct storage_stat st;
	int rc;

	rc = brk_batch_commit(srv);
	if (rc != 0) {
		return rc;
	}
	rc = storage_grow(srv->st, (uint64_t)srv->cfg.maxdisk); /* CONFIG SET may change it */
	if (rc == 0) {
		srv->stats.map_grows++;
		if (storage_stat(srv->st, &st) == 0) {
			echd_log(ECHD_LOG_NOTICE, "storage map grown to %llu bytes",
				(unsigned long long)st.map_size);
		}
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
	uint64_t gen = srv->durable_gen < srv->commit_gen ? srv->commit_gen : 0;

	if (srv->cfg.appendfsync == BRK_FSYNC_EVERYSEC) {
		gen = 0; /* the commit's data flush is enough; the timer does the meta page */
	}
	if (c->wait_gen != 0) {
		/* WAITAOF under everysec. A write whose batch was aborted never
		 * got its generation: wait for no later commit than the last. */
		uint64_t w = c->wait_gen < srv->commit_gen ? c->wait_gen : srv->commit_gen;
		if (w > srv->durable_gen && w > gen) {
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
	int released = 0;

	for (c = srv->waiting; c != NULL; c = next) {
		size_t upto = 0;
		int i, k;

		next = c->waiting_next;
		for (i = 0; i < c->nmarks && c->marks[i].gen <= srv->durable_gen; i++) {
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

/* No commit came along to flush the last one's meta page: flush it alone. */
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
	rc = brk_meta_flush(srv);
	brk_release_durable(srv, rc);
}

/* The room kept for the writes that free space, out of a limit of `bytes`. */
static uint64_t
reserve_for(uint64_t bytes, uint64_t page_size)
{
	return bytes / 16 > 64 * page_size ? bytes / 16 : 64 * page_size;
}

/* When the file system is full: the storage could not claim disk past
 * its data (storage_stat's reserve_error). What it claimed before (the
 * LMDB backend keeps 1-2 MiB of zeroes written ahead) is then kept for the
 * commands that free space, as at maxdisk. Returns whether that is so. */
static bool
fs_full(struct brk_server *srv, struct storage_stat *st)
{
	uint64_t now = brk_now_ms(), free_bytes = 0;
	bool full;

	if (st->reserve_error != 0 && now - srv->reserve_retry_ms >= FS_RETRY_MS) {
		/* Space may have come back with no commit to find out. */
		srv->reserve_retry_ms = now;
		(void)storage_reserve(srv->st); /* its result is in the new stat */
		if (storage_stat(srv->st, st) != 0) {
			return srv->fs_full;
		}
	}
	/* Another error (EIO, say) is not a full disk: the commits that
	 * need the disk report it themselves. */
	full = st->reserve_error == -ENOSPC || st->reserve_error == -EDQUOT;
	if (full && storage_free_bytes(srv->st, &free_bytes) == 0) {
		/* Pages freed inside the data file (XTRIM, DEL) are room that
		 * needs no disk: the file grows only when they are used up. The
		 * room asked is that of maxdisk's reserve, over the file's data;
		 * what was written ahead stays the reserve. */
		full = free_bytes < reserve_for(st->used_bytes, st->page_size);
	}
	if (!full) {
		if (srv->fs_full && free_bytes != 0) {
			echd_log(ECHD_LOG_NOTICE, "the data directory's file system is full, but "
				"%llu bytes are free inside the data file: writes that add data are "
				"accepted", (unsigned long long)free_bytes);
		} else if (srv->fs_full) {
			echd_log(ECHD_LOG_NOTICE, "the data directory's file system has room again: "
						  "writes that add data are accepted");
		}
		srv->fs_full = false;
		return false;
	}
	if (!srv->fs_full) {
		echd_log(ECHD_LOG_WARNING,
			"the data directory's file system is full (%s): refusing writes that add "
			"data, keeping %llu bytes for the commands that free space",
			echd_strerror(st->reserve_error), (unsigned long long)st->reserve_bytes);
	}
	srv->fs_full = true;
	srv->savepoints = true;
	srv->disk_full = true;
	srv->disk_full_rc = st->reserve_error;
	return true;
}

/* Grows the map while a quarter of it is still free: when the map fills
 * to the last page, LMDB cannot even commit its free list, and the whole
 * batch fails rather than the one command that ran out of room.
 *
 * At maxdisk the map cannot grow: commands that add data are refused
 * (disk_full) while a reserve is still free, so that XDEL, XTRIM, XACK and
 * DEL, which need a few pages of their own to copy-on-write, can still run
 * and free space; and every write runs in a nested transaction so one that
 * does not fit fails alone. */
static void
map_headroom(struct brk_server *srv)
{
	struct storage_stat st;
	uint64_t free_bytes = 0, live, cap;

	if (srv->batch != NULL || storage_stat(srv->st, &st) != 0) {
		return;
	}
	srv->savepoints = false;
	srv->disk_full = false;
	srv->disk_full_rc = ECHD_ELIMIT;
	if (fs_full(srv, &st)) {
		return;
	}
	/* A maxdisk lowered below the map (CONFIG SET) bounds it from now on. */
	cap = st.map_size;
	if (srv->cfg.maxdisk != 0 && (uint64_t)srv->cfg.maxdisk < cap) {
		cap = (uint64_t)srv->cfg.maxdisk;
	}
	if (st.used_bytes < cap / 4 * 3) {
		return;
	}
	if (srv->cfg.maxdisk == 0 || st.map_size < (uint64_t)srv->cfg.maxdisk) {
		if (brk_storage_grow(srv) == 0) {
			return;
		}
	}
	srv->savepoints = true;
	if (storage_free_bytes(srv->st, &free_bytes) != 0) {
		free_bytes = 0;
	}
	live = st.used_bytes > free_bytes ? st.used_bytes - free_bytes : 0;
	srv->disk_full = live + reserve_for(cap, st.page_size) >= cap;
}

/* The end of a loop turn: commit, release replies, wake waiters.
 *
 * The storage is opened with STORAGE_SYNC_DATA: a commit flushes its data
 * pages, not its meta page. With appendfsync always the turn's replies
 * wait until the meta page is durable too: the next commit's flush covers
 * it, or a flush of its own after flush-wait-us (release_or_wait). With
 * everysec the replies go at once and a timer flushes the meta page each
 * second: a crash of the machine can undo the commits of that last second,
 * never corrupt, and a crash of the process loses nothing acknowledged. */
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
	if (brk_batch_commit(srv) == ECHD_EMAPFULL) {
		/* Even the commit found no room: its replies became errors; make
		 * room for the next batch now. */
		if (brk_storage_grow(srv) != 0) {
			echd_log(ECHD_LOG_WARNING, "storage full and at maxdisk (%lld bytes)",
				srv->cfg.maxdisk);
		}
	}
	map_headroom(srv);
	for (c = srv->held; c != NULL; c = next) {
		next = c->held_next;
		c->held_next = NULL;
		c->flags &= ~BRK_CONN_HELD;
		answered += release_or_wait(srv, c);
	}
	srv->held = NULL;
	/* a turn that touched no storage still ends a batch of commands */
	srv->batch_cmds = 0;
	answered += brk_release_durable(srv, 0);
	if (srv->waiting != NULL && !srv->flush_armed) {
		/* Under load the next turn's commit flushes this meta page for
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
	brk_meta_flush(srv);
}
