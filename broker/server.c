/* server.c - the event loop, listeners, group commit and blocking.
 *
 * One thread runs everything. Each loop turn reads what the sockets have,
 * runs the requests against one shared write transaction (each write
 * command in a nested one), commits once, and only then releases the
 * replies held during the turn: nothing is acknowledged before it is
 * durable, and one fsync serves every client of the turn.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>

#include "broker.h"

uint64_t
brk_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

uint64_t
brk_now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

/* ------------------------------------------------------------------------
 * Logging
 * ---------------------------------------------------------------------- */

static FILE *log_file;
static bool log_journal;

static void
log_sink(enum echd_log_level level, const char *line, void *ud)
{
	static const char marks[] = ".-*#";
	static const int prio[] = {7, 6, 5, 4}; /* debug info notice warning */
	struct timespec ts;
	struct tm tm;
	char tbuf[64];
	FILE *f = log_file ? log_file : stderr;

	if (log_file == NULL && log_journal) {
		/* journald keeps the level from the prefix and adds the time */
		fprintf(stderr, "<%d>%s\n", prio[level], line);
		fflush(stderr);
		return;
	}
	clock_gettime(CLOCK_REALTIME, &ts);
	localtime_r(&ts.tv_sec, &tm);
	strftime(tbuf, sizeof(tbuf), "%d %b %Y %H:%M:%S", &tm);
	fprintf(f, "%d:M %s.%03d %c %s\n", (int)getpid(), tbuf, (int)(ts.tv_nsec / 1000000),
		marks[level], line);
	fflush(f);
}

static int
log_open(struct brk_server *srv)
{
	if (log_file != NULL) {
		fclose(log_file);
		log_file = NULL;
	}
	log_journal = brk_sd_journal_stderr();
	if (srv->cfg.logfile && srv->cfg.logfile[0]) {
		log_file = fopen(srv->cfg.logfile, "a");
		if (log_file == NULL) {
			fprintf(stderr, "echd: cannot open logfile '%s': %s\n", srv->cfg.logfile,
				strerror(errno));
			return -1;
		}
	}
	echd_log_set((enum echd_log_level)srv->cfg.loglevel, log_sink, NULL);
	return 0;
}

/* ------------------------------------------------------------------------
 * Group commit
 * ---------------------------------------------------------------------- */

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
static int
meta_flush(struct brk_server *srv)
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

static int release_durable(struct brk_server *srv, int err);
static void wk_maybe_free(struct brk_server *srv, struct brk_waitkey *wk);

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

/* Runs the deferred deletion of dropped streams inside the batch. */
static void
gc_step(struct brk_server *srv)
{
	struct storage_txn *t, *child;
	bool more = false;
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
	rc = stream_gc_step(child, (unsigned)srv->cfg.gc_batch_rows, &more);
	if (rc != 0) {
		storage_txn_abort(child);
		if (rc != ECHD_EMAPFULL) {
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
static void
expire_step(struct brk_server *srv)
{
	struct storage_txn *t, *child;
	uint64_t now = brk_now_ms(), next = 0;
	unsigned n = 0;
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
	rc = stream_expire_due(child, now, (unsigned)srv->cfg.active_expire_keys, expired_cb, srv,
		&n, &next);
	if (rc == 0 && n > 0) {
		rc = storage_txn_commit(child);
	} else {
		storage_txn_abort(child);
	}
	if (rc != 0) {
		if (rc != ECHD_EMAPFULL) {
			echd_log(ECHD_LOG_WARNING, "dropping expired keys: %s", echd_strerror(rc));
		}
		return; /* the next tick tries again */
	}
	if (n > 0) {
		srv->batch_writes++;
		srv->gc_pending = true;
	}
	srv->expire_next_ms = next == 0 ? UINT64_MAX : next;
	srv->expire_due = next != 0 && next <= now;
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
static int
release_durable(struct brk_server *srv, int err)
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
static void
flush_timer_cb(evutil_socket_t fd, short what, void *arg)
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
	rc = meta_flush(srv);
	release_durable(srv, rc);
}

/* The room kept for the writes that free space, out of a limit of `bytes`. */
static uint64_t
reserve_for(uint64_t bytes, uint64_t page_size)
{
	return bytes / 16 > 64 * page_size ? bytes / 16 : 64 * page_size;
}

/* How often a full file system is asked again for room when nothing commits. */
#define FS_RETRY_MS 1000

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
static void
batch_end(struct brk_server *srv)
{
	struct brk_conn *c, *next;
	int answered = 0;

	if (srv->expire_due) {
		uint64_t t0 = brk_now_us();
		expire_step(srv);
		brk_latency_sample(srv, BRK_LAT_EXPIRE, (brk_now_us() - t0) / 1000);
	}
	if (srv->gc_pending && (srv->batch != NULL || srv->pending == NULL)) {
		gc_step(srv);
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
	answered += release_durable(srv, 0);
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
			flush_timer_cb(-1, 0, srv);
		} else {
			evtimer_add(srv->flush_timer, &tv);
			srv->flush_armed = true;
		}
	}
	brk_wake_touched(srv);
}

/* Waiters of keys changed in this batch run again in the next turn, after
 * the commit that changed them. */
void
brk_wake_touched(struct brk_server *srv)
{
	struct brk_waitkey *wk, *wnext;

	for (wk = srv->touched; wk != NULL; wk = wnext) {
		wnext = wk->touched_next;
		wk->touched = false;
		for (int i = 0; i < wk->nwaiters; i++) {
			struct brk_conn *w = wk->waiters[i];
			if (w->blk == NULL || w->blk->ready) {
				continue;
			}
			w->blk->ready = true;
			w->blk->next_ready = NULL;
			if (srv->ready_tail) {
				srv->ready_tail->blk->next_ready = w;
			} else {
				srv->ready_head = w;
			}
			srv->ready_tail = w;
		}
		wk_maybe_free(srv, wk);
	}
	srv->touched = NULL;
}

/* ------------------------------------------------------------------------
 * Blocking
 * ---------------------------------------------------------------------- */

static uint64_t
key_hash(unsigned db, const void *name, size_t len)
{
	const unsigned char *p = name;
	uint64_t h = 1469598103934665603ULL ^ db;

	for (size_t i = 0; i < len; i++) {
		h = (h ^ p[i]) * 1099511628211ULL;
	}
	return h;
}

static struct brk_waitkey *
wk_find(struct brk_server *srv, unsigned db, const void *name, size_t len)
{
	struct brk_waitkey *wk;

	if (srv->wk_size == 0) {
		return NULL;
	}
	wk = srv->wk_table[key_hash(db, name, len) & (srv->wk_size - 1)];
	for (; wk != NULL; wk = wk->hnext) {
		if (wk->db == db && wk->len == len && memcmp(wk->name, name, len) == 0) {
			return wk;
		}
	}
	return NULL;
}

static int
wk_grow(struct brk_server *srv)
{
	size_t nsize = srv->wk_size ? srv->wk_size * 2 : 64;
	struct brk_waitkey **nt = echd_calloc(nsize, sizeof(*nt));

	if (nt == NULL) {
		return -ENOMEM;
	}
	for (size_t i = 0; i < srv->wk_size; i++) {
		struct brk_waitkey *wk = srv->wk_table[i], *next;
		for (; wk != NULL; wk = next) {
			size_t b = key_hash(wk->db, wk->name, wk->len) & (nsize - 1);
			next = wk->hnext;
			wk->hnext = nt[b];
			nt[b] = wk;
		}
	}
	echd_free(srv->wk_table);
	srv->wk_table = nt;
	srv->wk_size = nsize;
	return 0;
}

static struct brk_waitkey *
wk_get(struct brk_server *srv, unsigned db, const void *name, size_t len)
{
	struct brk_waitkey *wk = wk_find(srv, db, name, len);
	size_t b;

	if (wk != NULL) {
		return wk;
	}
	if (srv->wk_count >= srv->wk_size && wk_grow(srv) != 0) {
		return NULL;
	}
	wk = echd_calloc(1, sizeof(*wk));
	if (wk == NULL) {
		return NULL;
	}
	wk->name = echd_strndup(name, len);
	if (wk->name == NULL) {
		echd_free(wk);
		return NULL;
	}
	wk->db = db;
	wk->len = len;
	b = key_hash(db, name, len) & (srv->wk_size - 1);
	wk->hnext = srv->wk_table[b];
	srv->wk_table[b] = wk;
	srv->wk_count++;
	return wk;
}

/* Frees wk once nothing refers to it. */
static void
wk_maybe_free(struct brk_server *srv, struct brk_waitkey *wk)
{
	struct brk_waitkey **pp;

	if (wk->nwaiters > 0 || wk->nwatchers > 0 || wk->touched) {
		return;
	}
	pp = &srv->wk_table[key_hash(wk->db, wk->name, wk->len) & (srv->wk_size - 1)];
	for (; *pp != NULL; pp = &(*pp)->hnext) {
		if (*pp == wk) {
			*pp = wk->hnext;
			break;
		}
	}
	srv->wk_count--;
	echd_free(wk->waiters);
	echd_free(wk->watchers);
	echd_free(wk->name);
	echd_free(wk);
}

/* Removes c from an array of connections; returns whether it was there. */
static bool
conn_array_remove(struct brk_conn **a, int *n, struct brk_conn *c)
{
	for (int i = 0; i < *n; i++) {
		if (a[i] == c) {
			memmove(&a[i], &a[i + 1], (size_t)(*n - i - 1) * sizeof(a[0]));
			(*n)--;
			return true;
		}
	}
	return false;
}

static void
wk_remove_waiter(struct brk_server *srv, struct brk_waitkey *wk, struct brk_conn *c)
{
	if (conn_array_remove(wk->waiters, &wk->nwaiters, c) && c->blk != NULL &&
		c->blk->nokey) {
		wk->nokey_waiters--;
	}
	wk_maybe_free(srv, wk);
}

/* Appends c to a growable connection array. */
static int
conn_array_add(struct brk_conn ***a, int *n, int *cap, struct brk_conn *c)
{
	if (*n == *cap) {
		int ncap = *cap ? *cap * 2 : 4;
		struct brk_conn **na = echd_realloc(*a, (size_t)ncap * sizeof(*na));
		if (na == NULL) {
			return -ENOMEM;
		}
		*a = na;
		*cap = ncap;
	}
	(*a)[(*n)++] = c;
	return 0;
}

int
brk_watch_key(struct brk_conn *c, const void *name, size_t len, bool expired)
{
	struct brk_server *srv = c->srv;
	struct brk_waitkey *wk;

	for (int i = 0; i < c->nwatched; i++) {
		wk = c->watched[i].wk;
		if (wk->db == c->db && wk->len == len && memcmp(wk->name, name, len) == 0) {
			return 0; /* already watched: Redis keeps the first WATCH's flag */
		}
	}
	wk = wk_get(srv, c->db, name, len);
	if (wk == NULL) {
		return -ENOMEM;
	}
	if (c->nwatched == c->watched_cap) {
		int ncap = c->watched_cap ? c->watched_cap * 2 : 4;
		struct brk_watch *nw = echd_realloc(c->watched, (size_t)ncap * sizeof(*nw));
		if (nw == NULL) {
			wk_maybe_free(srv, wk);
			return -ENOMEM;
		}
		c->watched = nw;
		c->watched_cap = ncap;
	}
	if (conn_array_add(&wk->watchers, &wk->nwatchers, &wk->wcap, c) != 0) {
		wk_maybe_free(srv, wk);
		return -ENOMEM;
	}
	c->watched[c->nwatched].wk = wk;
	c->watched[c->nwatched++].expired = expired;
	return 0;
}

void
brk_unwatch_all(struct brk_conn *c)
{
	for (int i = 0; i < c->nwatched; i++) {
		struct brk_waitkey *wk = c->watched[i].wk;
		conn_array_remove(wk->watchers, &wk->nwatchers, c);
		wk_maybe_free(c->srv, wk);
	}
	c->nwatched = 0;
	c->watch_dirty = false;
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

/* c's WATCH of wk. */
static struct brk_watch *
watch_of(struct brk_conn *c, const struct brk_waitkey *wk)
{
	for (int i = 0; i < c->nwatched; i++) {
		if (c->watched[i].wk == wk) {
			return &c->watched[i];
		}
	}
	return NULL;
}

/* dropped: the key went because it expired. A watcher that WATCHed it
 * already expired sees no change in that (Redis' touchWatchedKey); any
 * other change, or the drop of a key live when WATCHed, is one. */
static void
signal_key(struct brk_server *srv, unsigned db, const void *name, size_t len, bool dropped)
{
	struct brk_waitkey *wk = wk_find(srv, db, name, len);

	if (wk == NULL) {
		return;
	}
	for (int i = 0; i < wk->nwatchers; i++) {
		struct brk_conn *w = wk->watchers[i];
		struct brk_watch *e = watch_of(w, wk);
		if (e != NULL && e->expired) {
			e->expired = false; /* gone now, or made anew: no longer expired */
			if (dropped) {
				continue;
			}
		}
		w->watch_dirty = true;
	}
	if (wk->touched || wk->nwaiters == 0) {
		return;
	}
	wk->touched = true;
	wk->touched_next = srv->touched;
	srv->touched = wk;
}

void
brk_signal_key(struct brk_server *srv, unsigned db, const void *name, size_t len)
{
	signal_key(srv, db, name, len, false);
}

void
brk_signal_expired(struct brk_server *srv, unsigned db, const void *name, size_t len)
{
	signal_key(srv, db, name, len, true);
}

void
brk_signal_db(struct brk_server *srv, unsigned db, bool all)
{
	/* Blocked readers all run again; watchers were handled by
	 * brk_watch_flush(), which knows which of their keys existed. */
	for (size_t i = 0; i < srv->wk_size; i++) {
		for (struct brk_waitkey *wk = srv->wk_table[i]; wk != NULL; wk = wk->hnext) {
			if ((all || wk->db == db) && wk->nwaiters > 0 && !wk->touched) {
				wk->touched = true;
				wk->touched_next = srv->touched;
				srv->touched = wk;
			}
		}
	}
}

int
brk_watch_flush(struct brk_server *srv, struct storage_txn *t, unsigned db, bool all)
{
	for (size_t i = 0; i < srv->wk_size; i++) {
		for (struct brk_waitkey *wk = srv->wk_table[i]; wk != NULL; wk = wk->hnext) {
			struct st_buf k = {wk->name, wk->len};
			struct stream_meta m;
			int rc;

			if (wk->nwatchers == 0 || !(all || wk->db == db)) {
				continue;
			}
			rc = stream_lookup(t, wk->db, &k, &m);
			if (rc == ECHD_ENOTFOUND) {
				continue; /* a flush does not touch a key that was not there */
			}
			if (rc != 0) {
				return rc;
			}
			for (int j = 0; j < wk->nwatchers; j++) {
				struct brk_watch *e = watch_of(wk->watchers[j], wk);
				if (e != NULL && e->expired) {
					e->expired = false; /* an expired key deleted: no change */
					continue;
				}
				wk->watchers[j]->watch_dirty = true;
			}
		}
	}
	return 0;
}

static void
argv_free(struct brk_argv *a)
{
	for (int i = 0; i < a->argc; i++) {
		echd_free((void *)a->argv[i].p);
	}
	ECHD_FREE(a->argv);
	a->argc = 0;
}

/* Copies argv into a (empty); on failure a keeps what was copied, for argv_free(). */
static int
argv_copy(struct brk_argv *a, int argc, const struct resp_arg *argv)
{
	a->argv = echd_calloc((size_t)argc, sizeof(*a->argv));
	if (a->argv == NULL) {
		return -ENOMEM;
	}
	for (int i = 0; i < argc; i++) {
		char *p = echd_strndup(argv[i].p, argv[i].len);
		if (p == NULL) {
			return -ENOMEM;
		}
		a->argv[i].p = p;
		a->argv[i].len = argv[i].len;
		a->argc++;
	}
	return 0;
}

static void block_timeout_cb(evutil_socket_t fd, short what, void *arg);

/* Starts b's timeout (none when timeout_ms is 0: for ever). */
static int
block_arm(struct brk_server *srv, struct brk_conn *c, struct brk_block *b, uint64_t timeout_ms)
{
	struct timeval tv = {(time_t)(timeout_ms / 1000), (suseconds_t)(timeout_ms % 1000) * 1000};

	if (timeout_ms == 0) {
		return 0;
	}
	b->timer = evtimer_new(srv->base, block_timeout_cb, c);
	if (b->timer == NULL) {
		return -ENOMEM;
	}
	evtimer_add(b->timer, &tv);
	b->deadline_ms = brk_now_ms() + timeout_ms;
	return 0;
}

int
brk_block(struct brk_ctx *x, int nkeys, const struct resp_arg *keys, uint64_t timeout_ms,
	int req_argc, const struct resp_arg *req_argv)
{
	struct brk_conn *c = x->c;
	struct brk_server *srv = x->srv;
	struct brk_block *b;

	if (x->in_exec) {
		/* inside MULTI/EXEC a blocking read does not block (as Redis) */
		resp_add_null_array(x->w);
		return 0;
	}
	x->blocked = true;
	if (x->from_block) {
		return 0; /* still waiting: keep the block and its deadline */
	}
	b = echd_calloc(1, sizeof(*b));
	if (b == NULL) {
		goto oom;
	}
	c->blk = b;
	b->cmd = brk_cmd_lookup(req_argv[0].p, req_argv[0].len);
	b->nokey = brk_arg_eq(&req_argv[0], "xreadgroup");
	b->keys = echd_calloc((size_t)nkeys, sizeof(*b->keys));
	if (b->keys == NULL || argv_copy(&b->req, req_argc, req_argv) != 0 ||
		argv_copy(&b->orig, x->argc, x->argv) != 0) {
		goto oom;
	}
	for (int i = 0; i < nkeys; i++) {
		struct brk_waitkey *wk = wk_get(srv, c->db, keys[i].p, keys[i].len);
		bool dup = false;
		if (wk == NULL) {
			goto oom;
		}
		for (int j = 0; j < b->nkeys; j++) {
			dup |= b->keys[j] == wk;
		}
		if (dup) {
			continue;
		}
		if (conn_array_add(&wk->waiters, &wk->nwaiters, &wk->cap, c) != 0) {
			goto oom;
		}
		b->keys[b->nkeys++] = wk;
		if (b->nokey) {
			wk->nokey_waiters++;
		}
	}
	if (block_arm(srv, c, b, timeout_ms) != 0) {
		goto oom;
	}
	srv->blocked_clients++;
	return 0;
oom:
	x->blocked = false;
	if (c->blk != NULL) {
		srv->blocked_clients++; /* brk_unblock counts it down */
		brk_unblock(c);
	}
	return -ENOMEM;
}

void
brk_unblock(struct brk_conn *c)
{
	struct brk_server *srv = c->srv;
	struct brk_block *b = c->blk;

	if (b == NULL) {
		return;
	}
	for (int i = 0; i < b->nkeys; i++) {
		wk_remove_waiter(srv, b->keys[i], c);
	}
	if (b->ready) {
		/* unlink from the ready queue */
		struct brk_conn *prev = NULL;
		for (struct brk_conn *r = srv->ready_head; r != NULL; r = r->blk->next_ready) {
			if (r == c) {
				if (prev) {
					prev->blk->next_ready = b->next_ready;
				} else {
					srv->ready_head = b->next_ready;
				}
				if (srv->ready_tail == c) {
					srv->ready_tail = prev;
				}
				break;
			}
			prev = r;
		}
	}
	if (b->timer) {
		event_free(b->timer);
	}
	argv_free(&b->req);
	argv_free(&b->orig);
	echd_free(b->keys);
	echd_free(b);
	c->blk = NULL;
	srv->blocked_clients--;
}

int
brk_block_wait(struct brk_ctx *x, int kind, bool numlocal, uint64_t timeout_ms)
{
	struct brk_conn *c = x->c;
	struct brk_block *b;

	b = echd_calloc(1, sizeof(*b));
	if (b == NULL) {
		return -ENOMEM;
	}
	b->cmd = brk_cmd_lookup(x->argv[0].p, x->argv[0].len);
	b->kind = kind;
	b->numlocal = numlocal;
	if (argv_copy(&b->req, x->argc, x->argv) != 0) {
		goto oom;
	}
	if (block_arm(x->srv, c, b, timeout_ms) != 0) {
		goto oom;
	}
	c->blk = b;
	x->blocked = true;
	x->srv->blocked_clients++;
	return 0;
oom:
	argv_free(&b->req);
	echd_free(b);
	return -ENOMEM;
}

int
brk_waitaof_local(struct brk_conn *c, bool want)
{
	struct brk_server *srv = c->srv;

	/* With always, every reply already waits for the commits before it. */
	if (srv->cfg.appendfsync != BRK_FSYNC_EVERYSEC || c->write_gen <= srv->durable_gen) {
		return 1;
	}
	if (!want) {
		return 0;
	}
	c->wait_gen = c->write_gen;
	return 1;
}

void
brk_block_end(struct brk_conn *c, bool error)
{
	struct brk_server *srv = c->srv;
	const struct brk_cmd *cmd;
	struct brk_cmdstat *stat;
	size_t mark = c->out.len;
	uint64_t run_us;
	bool numlocal;
	int kind;

	if (c->blk == NULL) {
		return;
	}
	kind = c->blk->kind;
	numlocal = c->blk->numlocal;
	cmd = c->blk->cmd;
	run_us = c->blk->run_us;
	brk_slowlog_push(srv, c, cmd, brk_block_argv(c->blk)->argc, brk_block_argv(c->blk)->argv,
		run_us);
	brk_unblock(c);
	if (error) {
		resp_add_error(&c->w, "UNBLOCKED client unblocked via CLIENT UNBLOCK");
	} else if (kind == BRK_BLOCK_WAIT) {
		resp_add_int(&c->w, 0); /* replicas reached */
	} else if (kind == BRK_BLOCK_WAITAOF) {
		resp_add_array(&c->w, 2);
		resp_add_int(&c->w, brk_waitaof_local(c, numlocal));
		resp_add_int(&c->w, 0);
	} else {
		resp_add_null_array(&c->w);
	}
	/* The call counts now that it answered, as in Redis. */
	stat = brk_stat_for(srv, cmd, 1, NULL);
	stat->calls++;
	brk_latency_command(srv, stat, cmd, run_us);
	if (brk_count_reply_error(srv, &c->out, mark)) {
		stat->failed++;
	}
	c->batch_replies++;
	brk_conn_mark_held(c);
}

static void
block_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct brk_conn *c = arg;

	(void)fd;
	(void)what;
	brk_block_end(c, false);
	brk_conn_mark_pending(c); /* run what it pipelined meanwhile */
}

/* Runs the commands of clients whose keys changed, in arrival order. */
static void
serve_ready(struct brk_server *srv)
{
	struct brk_conn *head = srv->ready_head;

	srv->ready_head = srv->ready_tail = NULL;
	while (head != NULL) {
		struct brk_conn *c = head;
		struct brk_block *b = c->blk;

		head = b->next_ready;
		b->ready = false;
		b->next_ready = NULL;
		brk_conn_execute(c, b->req.argc, b->req.argv, true);
		if (c->blk == NULL) {
			brk_conn_mark_pending(c); /* run what it pipelined meanwhile */
		}
	}
}

/* ------------------------------------------------------------------------
 * Listeners
 * ---------------------------------------------------------------------- */

static bool
is_loopback(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
		return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
	}
	if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in = (const struct sockaddr_in6 *)sa;
		static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
		if (IN6_IS_ADDR_LOOPBACK(&in->sin6_addr)) {
			return true;
		}
		return memcmp(in->sin6_addr.s6_addr, mapped, 12) == 0 &&
			in->sin6_addr.s6_addr[12] == 127;
	}
	return false;
}

static void accept_common(struct brk_server *srv, evutil_socket_t fd, struct sockaddr *sa,
	bool is_tls);

static void
accept_cb(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen,
	void *arg)
{
	(void)l;
	(void)salen;
	accept_common(arg, fd, sa, false);
}

static void
accept_tls_cb(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen,
	void *arg)
{
	(void)l;
	(void)salen;
	accept_common(arg, fd, sa, true);
}

static void
accept_common(struct brk_server *srv, evutil_socket_t fd, struct sockaddr *sa, bool is_tls)
{
	static const char maxclients_msg[] = "-ERR max number of clients reached\r\n";
	static const char denied_msg[] =
		"-DENIED echd is running in protected mode because protected mode is enabled "
		"and no password is set for the default user. In this mode connections are "
		"only accepted from the loopback interface and unix sockets. Set a password "
		"(requirepass, or ACL users), or disable protected mode with "
		"'CONFIG SET protected-mode no' from the loopback interface.\r\n";
	char addr[64] = "", laddr[64] = "";
	struct sockaddr_storage ls;
	socklen_t lslen = sizeof(ls);
	bool is_unix = sa->sa_family == AF_UNIX;
	const char *refusal = NULL;
	struct brk_conn *c;

	if (srv->nconns >= (uint64_t)srv->cfg.maxclients && srv->unauth == NULL) {
		refusal = maxclients_msg;
		srv->stats.rejected_connections++;
		echd_log(ECHD_LOG_VERBOSE, "rejected a connection: max number of clients reached");
	} else if (srv->cfg.protected_mode && !is_unix && brk_acl_nopass_default(srv) &&
		   !is_loopback(sa)) {
		refusal = denied_msg;
		srv->stats.rejected_connections++;
		echd_log(ECHD_LOG_NOTICE, "protected mode: refused a non-loopback connection");
	} else if (srv->nconns >= (uint64_t)srv->cfg.maxclients) {
		/* No room: the oldest connection still in its handshake or not
		 * logged in makes way. Refusing the new one instead would let
		 * anyone who can open sockets keep every client out; this way a
		 * client gets in unless maxclients newer connections arrive
		 * before it has finished its handshake and login. */
		struct brk_conn *old = srv->unauth;
		echd_log(ECHD_LOG_VERBOSE,
			"closing client %s: not authenticated after %llu ms, and a new connection "
			"needs its slot",
			old->addr, (unsigned long long)(brk_now_ms() - old->ctime_ms));
		brk_conn_close_asap(old);
	}
	if (refusal != NULL && !is_tls) {
		ssize_t n = write(fd, refusal, strlen(refusal)); /* best effort, as Redis */
		(void)n;
		close(fd);
		return;
	}
	if (is_unix) {
		snprintf(addr, sizeof(addr), "%s:0", srv->cfg.unixsocket);
		snprintf(laddr, sizeof(laddr), "%s:0", srv->cfg.unixsocket);
	} else {
		char host[INET6_ADDRSTRLEN];
		int one = 1;
		if (sa->sa_family == AF_INET) {
			struct sockaddr_in *in = (struct sockaddr_in *)sa;
			inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
			snprintf(addr, sizeof(addr), "%s:%u", host, ntohs(in->sin_port));
		} else {
			struct sockaddr_in6 *in = (struct sockaddr_in6 *)sa;
			inet_ntop(AF_INET6, &in->sin6_addr, host, sizeof(host));
			snprintf(addr, sizeof(addr), "%s:%u", host, ntohs(in->sin6_port));
		}
		if (getsockname(fd, (struct sockaddr *)&ls, &lslen) == 0) {
			if (ls.ss_family == AF_INET) {
				struct sockaddr_in *in = (struct sockaddr_in *)&ls;
				inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
				snprintf(laddr, sizeof(laddr), "%s:%u", host, ntohs(in->sin_port));
			} else if (ls.ss_family == AF_INET6) {
				struct sockaddr_in6 *in = (struct sockaddr_in6 *)&ls;
				inet_ntop(AF_INET6, &in->sin6_addr, host, sizeof(host));
				snprintf(laddr, sizeof(laddr), "%s:%u", host, ntohs(in->sin6_port));
			}
		}
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		if (srv->cfg.tcp_keepalive > 0) {
			setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
		}
	}
	c = brk_conn_create(srv, fd, addr, laddr, is_unix, is_tls);
	if (c == NULL) {
		echd_log(ECHD_LOG_WARNING, "cannot set up a connection from %s: out of memory",
			addr);
		close(fd);
		return;
	}
	if (refusal != NULL) {
		/* Over TLS the refusal must be sent after the handshake, encrypted
		 * (plain bytes would read as a broken handshake); the connection
		 * then closes, or cron_cb closes it if the handshake never ends. */
		c->flags |= BRK_CONN_REFUSED | BRK_CONN_CLOSE_AFTER_REPLY;
		brk_conn_unauth_remove(c); /* it may not close another to make room */
		resp_buf_append(&c->out, refusal, strlen(refusal));
		brk_conn_flush(c, c->out.len);
		return;
	}
	srv->stats.total_connections++;
}

static void
listener_error_cb(struct evconnlistener *l, void *arg)
{
	int err = EVUTIL_SOCKET_ERROR();

	(void)l;
	(void)arg;
	/* EMFILE and friends: keep serving the connections we have. */
	echd_log(ECHD_LOG_WARNING, "accept failed: %s", evutil_socket_error_to_string(err));
}

static int
listen_tcp(struct brk_server *srv, const char *spec, int port, bool tls)
{
	bool optional = spec[0] == '-';
	const char *host = optional ? spec + 1 : spec;
	struct addrinfo hints, *res = NULL, *ai;
	char portbuf[16];
	int rc, bound = 0;

	if (!strcmp(host, "*")) {
		host = "0.0.0.0";
	}
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE | AI_NUMERICHOST;
	snprintf(portbuf, sizeof(portbuf), "%d", port);
	rc = getaddrinfo(host, portbuf, &hints, &res);
	if (rc != 0) {
		echd_log(optional ? ECHD_LOG_VERBOSE : ECHD_LOG_WARNING,
			"bind address '%s' is not a numeric address: %s", host, gai_strerror(rc));
		return optional ? 0 : -1;
	}
	for (ai = res; ai != NULL; ai = ai->ai_next) {
		struct evconnlistener *l;
		int fd, one = 1;

		if (srv->nlisteners >= 2 * BRK_MAX_BIND) {
			break;
		}
		fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd < 0) {
			continue;
		}
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (ai->ai_family == AF_INET6) {
			setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
		}
		if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
			int e = errno;
			close(fd);
			echd_log(optional ? ECHD_LOG_VERBOSE : ECHD_LOG_WARNING,
				"could not bind %s port %d: %s", host, port, strerror(e));
			continue;
		}
		l = evconnlistener_new(srv->base, tls ? accept_tls_cb : accept_cb, srv,
			LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, (int)srv->cfg.tcp_backlog, fd);
		if (l == NULL) {
			close(fd);
			continue;
		}
		evconnlistener_set_error_cb(l, listener_error_cb);
		srv->listeners[srv->nlisteners++] = l;
		if (tls && srv->bound_tls_port == 0) {
			struct sockaddr_storage ss;
			socklen_t sl = sizeof(ss);
			if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
				srv->bound_tls_port = ntohs(ss.ss_family == AF_INET
						? ((struct sockaddr_in *)&ss)->sin_port
						: ((struct sockaddr_in6 *)&ss)->sin6_port);
			}
		}
		if (!tls && srv->bound_port == 0) {
			struct sockaddr_storage ss;
			socklen_t sl = sizeof(ss);
			if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
				srv->bound_port = ntohs(ss.ss_family == AF_INET
						? ((struct sockaddr_in *)&ss)->sin_port
						: ((struct sockaddr_in6 *)&ss)->sin6_port);
			}
		}
		bound++;
	}
	freeaddrinfo(res);
	if (bound == 0 && !optional) {
		return -1;
	}
	return 0;
}

/* Remembers which file this process made at path, for made_remove(). */
static void
made_note(const char *path, struct brk_made_file *m)
{
	struct stat sb;

	if (lstat(path, &sb) == 0) {
		m->dev = sb.st_dev;
		m->ino = sb.st_ino;
	}
}

/* Removes path if it is still the file made_note() saw: not one that
 * another process put there since, and nothing at all if this process
 * never made one (it exits because it could not start, say, while the
 * echd that made them runs on). */
static void
made_remove(const char *path, struct brk_made_file *m)
{
	struct stat sb;

	if (m->ino != 0 && lstat(path, &sb) == 0 && sb.st_dev == m->dev && sb.st_ino == m->ino) {
		unlink(path);
	}
	m->ino = 0;
}

/* A socket file left at path by a process that died is removed; one that
 * a live process listens on, or a file that is no socket, is left alone
 * and refused. Returns 0 when path is free to bind. */
static int
stale_socket_gone(const char *path, const struct sockaddr_un *sun)
{
	struct stat sb;
	int fd, rc;

	if (lstat(path, &sb) != 0) {
		return 0;
	}
	if (!S_ISSOCK(sb.st_mode)) {
		echd_log(ECHD_LOG_WARNING, "unixsocket %s exists and is not a socket", path);
		return -1;
	}
	/* Non-blocking: a live listener with a full backlog says EAGAIN. */
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		return -1;
	}
	rc = connect(fd, (const struct sockaddr *)sun, sizeof(*sun)) == 0 ? 0 : errno;
	close(fd);
	if (rc == 0 || rc == EAGAIN) {
		echd_log(ECHD_LOG_WARNING, "unixsocket %s is in use by another process", path);
		return -1;
	}
	if (rc != ECONNREFUSED) {
		echd_log(ECHD_LOG_WARNING, "unixsocket %s: cannot tell whether it is in use: %s",
			path, strerror(rc));
		return -1;
	}
	unlink(path); /* nobody listens: left by a process that died */
	return 0;
}

static int
listen_unix(struct brk_server *srv)
{
	struct sockaddr_un sun;
	struct evconnlistener *l;
	int fd;

	if (strlen(srv->cfg.unixsocket) >= sizeof(sun.sun_path)) {
		echd_log(ECHD_LOG_WARNING, "unixsocket path too long: %s", srv->cfg.unixsocket);
		return -1;
	}
	memset(&sun, 0, sizeof(sun));
	sun.sun_family = AF_UNIX;
	strcpy(sun.sun_path, srv->cfg.unixsocket);
	if (stale_socket_gone(srv->cfg.unixsocket, &sun) != 0) {
		return -1;
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		return -1;
	}
	if (bind(fd, (struct sockaddr *)&sun, sizeof(sun)) != 0) {
		echd_log(ECHD_LOG_WARNING, "could not bind unix socket %s: %s",
			srv->cfg.unixsocket, strerror(errno));
		close(fd);
		return -1;
	}
	made_note(srv->cfg.unixsocket, &srv->made_socket);
	if (srv->cfg.unixsocketperm) {
		chmod(srv->cfg.unixsocket, srv->cfg.unixsocketperm);
	}
	l = evconnlistener_new(srv->base, accept_cb, srv,
		LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, (int)srv->cfg.tcp_backlog, fd);
	if (l == NULL) {
		close(fd);
		return -1;
	}
	evconnlistener_set_error_cb(l, listener_error_cb);
	srv->listeners[srv->nlisteners++] = l;
	return 0;
}

/* ------------------------------------------------------------------------
 * Signals and cron
 * ---------------------------------------------------------------------- */

static void
signal_cb(evutil_socket_t sig, short what, void *arg)
{
	struct brk_server *srv = arg;

	(void)what;
	if (sig == SIGHUP) {
		char err[512];
		brk_sd_notify("RELOADING=1");
		echd_log(ECHD_LOG_NOTICE, "SIGHUP: reopening the log file, reloading TLS and ACLs");
		log_open(srv);
		brk_tls_reload(srv, err, sizeof(err)); /* logs a refusal itself */
		if (srv->cfg.aclfile && srv->cfg.aclfile[0] && brk_acl_load(srv, err, sizeof(err)) != 0) {
			echd_log(ECHD_LOG_WARNING, "ACL reload refused: %s", err);
		}
		brk_sd_notify("READY=1");
		return;
	}
	echd_log(ECHD_LOG_WARNING, "received %s, scheduling shutdown...",
		sig == SIGTERM ? "SIGTERM" : "SIGINT");
	brk_sd_notify("STOPPING=1\nSTATUS=Finishing the batch in flight");
	srv->shutdown = true;
	event_base_loopbreak(srv->base);
}

/* Free memory glibc may keep before it is handed back (heap_trim). */
#define HEAP_TRIM_BYTES (8u << 20)

/* glibc keeps the heap pages of freed memory for reuse, and after a few
 * big frees it serves even multi-megabyte buffers from the heap: once
 * thousands of clients have gone, or a burst of big replies or requests
 * has been freed, the resident size would stay at its peak. When the free
 * memory held has grown by HEAP_TRIM_BYTES since the last look, give it
 * back. (Other allocators return memory by themselves.) */
static void
heap_trim(void)
{
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
	static size_t kept; /* free bytes held after the last trim */
	struct mallinfo2 mi = mallinfo2();

	if (mi.fordblks < kept) {
		kept = mi.fordblks; /* reused since */
	} else if (mi.fordblks - kept >= HEAP_TRIM_BYTES) {
		malloc_trim(0);
		kept = mi.fordblks; /* trimmed pages stay free chunks: count them as kept */
	}
#endif
}

/* Closes the connections whose handshake or login is overdue. The time
 * counts from accept, not from the last byte: a peer sending a byte now
 * and then (slow loris) is closed all the same. */
static void
unauth_expire(struct brk_server *srv, uint64_t now)
{
	uint64_t tls_ms = (uint64_t)srv->cfg.tls_handshake_timeout * 1000;
	uint64_t auth_ms = (uint64_t)srv->cfg.auth_timeout * 1000;
	uint64_t first = tls_ms < auth_ms ? tls_ms : auth_ms;
	struct brk_conn *c, *next;

	for (c = srv->unauth; c != NULL && now >= c->ctime_ms + first; c = next) {
		next = c->unauth_next; /* closing takes c off the list */
		if ((c->flags & BRK_CONN_HANDSHAKE) && now >= c->ctime_ms + tls_ms) {
			echd_log(ECHD_LOG_VERBOSE,
				"closing client %s: TLS handshake not finished within %llds",
				c->addr, srv->cfg.tls_handshake_timeout);
			brk_conn_close_asap(c);
		} else if (c->user == NULL && now >= c->ctime_ms + auth_ms) {
			echd_log(ECHD_LOG_VERBOSE, "closing client %s: not authenticated within %llds",
				c->addr, srv->cfg.auth_timeout);
			brk_conn_close_asap(c);
		}
	}
}

static void
cron_cb(evutil_socket_t fd, short what, void *arg)
{
	struct brk_server *srv = arg;
	uint64_t now = brk_now_ms();
	static unsigned ticks;

	(void)fd;
	(void)what;
	srv->expire_due = true;
	if (now - srv->stats.ops_sample_ms >= 1000) {
		uint64_t dt = now - srv->stats.ops_sample_ms;
		srv->stats.ops_per_sec =
			(srv->stats.total_commands - srv->stats.ops_sample_cmds) * 1000 / (dt ? dt : 1);
		srv->stats.ops_sample_ms = now;
		srv->stats.ops_sample_cmds = srv->stats.total_commands;
	}
	if (++ticks % 50 == 0) {
		char status[160];
		snprintf(status, sizeof(status),
			"STATUS=%llu clients, %llu blocked, %llu commands, %llu commits",
			(unsigned long long)srv->nconns, (unsigned long long)srv->blocked_clients,
			(unsigned long long)srv->stats.total_commands,
			(unsigned long long)srv->stats.commits);
		brk_sd_notify(status);
	}
	unauth_expire(srv, now);
	if (ticks % 10 != 0) {
		return;
	}
	heap_trim();
	for (struct brk_conn *c = srv->conns; c != NULL; c = c->next) {
		/* refused over TLS, and still waiting for the handshake to say why */
		if ((c->flags & BRK_CONN_REFUSED) &&
			now >= c->ctime_ms + (uint64_t)srv->cfg.tls_handshake_timeout * 1000) {
			brk_conn_close_asap(c);
		}
	}
	if (srv->cfg.timeout <= 0) {
		return;
	}
	for (struct brk_conn *c = srv->conns; c != NULL; c = c->next) {
		/* blocked clients wait for their own timeout; monitors only listen */
		if (c->blk == NULL && !(c->flags & BRK_CONN_MONITOR) &&
			now - c->last_ms > (uint64_t)srv->cfg.timeout * 1000) {
			echd_log(ECHD_LOG_VERBOSE, "closing idle client %s", c->addr);
			brk_conn_close_asap(c);
		}
	}
}

static void
watchdog_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
	/* sent from the loop: a loop that is stuck stops sending it */
	brk_sd_notify("WATCHDOG=1");
}

/* Listens on sockets handed over by socket activation. */
static int
listen_activated(struct brk_server *srv, int n)
{
	for (int fd = BRK_SD_LISTEN_FDS_START; fd < BRK_SD_LISTEN_FDS_START + n; fd++) {
		struct evconnlistener *l;
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);

		evutil_make_socket_nonblocking(fd);
		l = evconnlistener_new(srv->base, accept_cb, srv, LEV_OPT_CLOSE_ON_FREE, -1, fd);
		if (l == NULL) {
			echd_log(ECHD_LOG_WARNING, "cannot use activated socket fd %d", fd);
			return -1;
		}
		evconnlistener_set_error_cb(l, listener_error_cb);
		srv->listeners[srv->nlisteners++] = l;
		if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0 && srv->bound_port == 0 &&
			(ss.ss_family == AF_INET || ss.ss_family == AF_INET6)) {
			srv->bound_port = ntohs(ss.ss_family == AF_INET
					? ((struct sockaddr_in *)&ss)->sin_port
					: ((struct sockaddr_in6 *)&ss)->sin6_port);
		}
	}
	echd_log(ECHD_LOG_NOTICE, "using %d socket(s) from socket activation", n);
	return 0;
}

static void
fsync_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct brk_server *srv = arg;

	(void)fd;
	(void)what;
	meta_flush(srv);
}

/* ------------------------------------------------------------------------
 * Life cycle
 * ---------------------------------------------------------------------- */

static int
mkdir_p(const char *path)
{
	char buf[4096];
	size_t len = strlen(path);

	if (len >= sizeof(buf)) {
		return -ENAMETOOLONG;
	}
	memcpy(buf, path, len + 1);
	for (size_t i = 1; i <= len; i++) {
		if (buf[i] == '/' || buf[i] == '\0') {
			char c = buf[i];
			buf[i] = '\0';
			if (mkdir(buf, 0750) != 0 && errno != EEXIST) {
				return -errno;
			}
			buf[i] = c;
		}
	}
	return 0;
}

/* Takes dir/echd.lock for as long as this process lives: LMDB lets any
 * number of processes write one environment, but blocked readers, WATCH
 * and the group-commit order live in one echd's memory. echo-admin's
 * read-only opens do not take it. */
static int
lock_dir(struct brk_server *srv)
{
	char path[4096], pid[32];
	ssize_t n;
	int fd;

	if ((size_t)snprintf(path, sizeof(path), "%s/echd.lock", srv->cfg.dir) >= sizeof(path)) {
		echd_log(ECHD_LOG_WARNING, "data directory path too long: '%s'", srv->cfg.dir);
		return -1;
	}
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0640);
	if (fd < 0) {
		echd_log(ECHD_LOG_WARNING, "cannot open '%s': %s", path, strerror(errno));
		return -1;
	}
	if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
		int err = errno;
		n = pread(fd, pid, sizeof(pid) - 1, 0);
		pid[n > 0 ? n : 0] = '\0';
		pid[strcspn(pid, "\n")] = '\0';
		if (err == EWOULDBLOCK) {
			echd_log(ECHD_LOG_WARNING,
				"data directory '%s' is in use by another echd (pid %s); exiting",
				srv->cfg.dir, pid[0] ? pid : "unknown");
		} else {
			echd_log(ECHD_LOG_WARNING, "cannot lock '%s': %s", path, strerror(err));
		}
		close(fd);
		return -1;
	}
	n = snprintf(pid, sizeof(pid), "%d\n", (int)srv->pid);
	if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)n, 0) != n) {
		echd_log(ECHD_LOG_VERBOSE, "cannot write the pid to '%s': %s", path, strerror(errno));
	}
	srv->lock_fd = fd;
	return 0;
}

int
brk_server_init(struct brk_server *srv)
{
	struct storage_opts so;
	struct timeval tv100 = {0, 100000}, tv1s = {1, 0};
	uint64_t wd;
	int rc, activated;

	srv->pid = getpid();
	srv->stats.start_ms = brk_now_ms();
	srv->stats.ops_sample_ms = srv->stats.start_ms;
	srv->next_client_id = 1;
	if (log_open(srv) != 0) {
		return -1;
	}
	signal(SIGPIPE, SIG_IGN);
	srv->cmdstats = echd_calloc(brk_cmd_count(), sizeof(*srv->cmdstats));
	if (srv->cmdstats == NULL) {
		return -1;
	}
	{
		char err[512];
		if (brk_acl_init(srv, err, sizeof(err)) != 0) {
			echd_log(ECHD_LOG_WARNING, "ACL: %s", err);
			return BRK_INIT_CONFIG;
		}
	}
	rc = mkdir_p(srv->cfg.dir);
	if (rc != 0) {
		echd_log(ECHD_LOG_WARNING, "cannot create data directory '%s': %s", srv->cfg.dir,
			echd_strerror(rc));
		return -1;
	}
	if (lock_dir(srv) != 0) {
		return -1;
	}
	memset(&so, 0, sizeof(so));
	so.dir = srv->cfg.dir;
	so.map_size = (uint64_t)srv->cfg.map_size;
	if (srv->cfg.maxdisk != 0 && (uint64_t)srv->cfg.maxdisk < so.map_size) {
		/* LMDB itself then refuses to grow past maxdisk from the first write. */
		so.map_size = (uint64_t)srv->cfg.maxdisk;
	}
	so.map_max = (uint64_t)srv->cfg.maxdisk;
	so.sync_mode = STORAGE_SYNC_DATA;
	rc = storage_open(srv->cfg.storage_backend, &so, &srv->st);
	if (rc != 0) {
		echd_log(ECHD_LOG_WARNING, "cannot open storage '%s' in '%s': %s",
			srv->cfg.storage_backend, srv->cfg.dir, echd_strerror(rc));
		return -1;
	}
	srv->gc_pending = true; /* finish deletions a previous run left */
	{
		/* precise timers: flush-wait-us is in microseconds */
		struct event_config *ec = event_config_new();
		if (ec == NULL) {
			return -1;
		}
		event_config_set_flag(ec, EVENT_BASE_FLAG_PRECISE_TIMER);
		srv->base = event_base_new_with_config(ec);
		event_config_free(ec);
	}
	if (srv->base == NULL) {
		return -1;
	}
	srv->flush_timer = evtimer_new(srv->base, flush_timer_cb, srv);
	if (srv->flush_timer == NULL) {
		return -1;
	}
	activated = brk_sd_listen_fds();
	if (activated < 0) {
		echd_log(ECHD_LOG_WARNING, "socket activation: %s", echd_strerror(activated));
		return -1;
	}
	if (activated > 0) {
		if (listen_activated(srv, activated) != 0) {
			return -1;
		}
	} else if (srv->cfg.port != 0) {
		for (int i = 0; i < srv->cfg.nbind; i++) {
			if (listen_tcp(srv, srv->cfg.bind[i], srv->cfg.port, false) != 0) {
				echd_log(ECHD_LOG_WARNING, "failed listening on %s port %d, exiting",
					srv->cfg.bind[i], srv->cfg.port);
				return -1;
			}
		}
		if (srv->nlisteners == 0) {
			echd_log(ECHD_LOG_WARNING, "no TCP address could be bound, exiting");
			return -1;
		}
	}
	if (activated == 0 && srv->cfg.tls_port != 0) {
		if (brk_tls_init(srv) != 0) {
			return BRK_INIT_CONFIG; /* a certificate, key or CA that does not load */
		}
		for (int i = 0; i < srv->cfg.nbind; i++) {
			if (listen_tcp(srv, srv->cfg.bind[i], srv->cfg.tls_port, true) != 0) {
				echd_log(ECHD_LOG_WARNING, "failed listening on %s TLS port %d, exiting",
					srv->cfg.bind[i], srv->cfg.tls_port);
				return -1;
			}
		}
		echd_log(ECHD_LOG_NOTICE, "Ready to accept connections tls on port %d",
			srv->bound_tls_port);
	}
	/* With socket activation the manager's sockets are all we listen on. */
	if (activated == 0 && srv->cfg.unixsocket && srv->cfg.unixsocket[0] &&
		listen_unix(srv) != 0) {
		return -1;
	}
	if (srv->nlisteners == 0) {
		echd_log(ECHD_LOG_WARNING, "nothing to listen on: set port or unixsocket");
		return BRK_INIT_CONFIG;
	}
	srv->sig_term = evsignal_new(srv->base, SIGTERM, signal_cb, srv);
	srv->sig_int = evsignal_new(srv->base, SIGINT, signal_cb, srv);
	srv->sig_hup = evsignal_new(srv->base, SIGHUP, signal_cb, srv);
	srv->cron = event_new(srv->base, -1, EV_PERSIST, cron_cb, srv);
	srv->fsync_timer = event_new(srv->base, -1, EV_PERSIST, fsync_timer_cb, srv);
	if (!srv->sig_term || !srv->sig_int || !srv->sig_hup || !srv->cron || !srv->fsync_timer) {
		return -1;
	}
	evsignal_add(srv->sig_term, NULL);
	evsignal_add(srv->sig_int, NULL);
	evsignal_add(srv->sig_hup, NULL);
	event_add(srv->cron, &tv100);
	if (srv->cfg.appendfsync == BRK_FSYNC_EVERYSEC) {
		event_add(srv->fsync_timer, &tv1s);
	}
	if (srv->cfg.pidfile && srv->cfg.pidfile[0]) {
		FILE *f = fopen(srv->cfg.pidfile, "w");
		if (f != NULL) {
			fprintf(f, "%d\n", (int)srv->pid);
			fclose(f);
			made_note(srv->cfg.pidfile, &srv->made_pidfile);
		}
	}
	echd_log(ECHD_LOG_NOTICE, "echd %s started, pid %d, data in %s, appendfsync %s",
		ECHD_VERSION, (int)srv->pid, srv->cfg.dir,
		srv->cfg.appendfsync == BRK_FSYNC_ALWAYS ? "always" : "everysec");
	if (srv->cfg.port != 0) {
		echd_log(ECHD_LOG_NOTICE, "Ready to accept connections tcp on port %d",
			srv->bound_port);
	}
	if (srv->cfg.unixsocket && srv->cfg.unixsocket[0] && activated == 0) {
		echd_log(ECHD_LOG_NOTICE, "Ready to accept connections unix on %s",
			srv->cfg.unixsocket);
	}
	wd = brk_sd_watchdog_usec();
	if (wd > 0) {
		struct timeval tv = {(time_t)(wd / 2 / 1000000), (suseconds_t)(wd / 2 % 1000000)};
		srv->watchdog = event_new(srv->base, -1, EV_PERSIST, watchdog_cb, srv);
		if (srv->watchdog == NULL) {
			return -1;
		}
		event_add(srv->watchdog, &tv);
	}
	/* The environment is open and every listener is bound: ready. */
	{
		char msg[128];
		snprintf(msg, sizeof(msg), "READY=1\nSTATUS=Ready to accept connections\nMAINPID=%d",
			(int)srv->pid);
		brk_sd_notify(msg);
	}
	return 0;
}

static void
close_pending(struct brk_server *srv)
{
	while (srv->closing != NULL) {
		struct brk_conn *c = srv->closing;
		srv->closing = c->closing_next;
		brk_conn_destroy(c);
	}
}

/* Runs the requests of connections that have some buffered. */
static void
run_pending(struct brk_server *srv)
{
	struct brk_conn *list = srv->pending;

	srv->pending = NULL;
	while (list != NULL) {
		struct brk_conn *c = list;
		list = c->pending_next;
		c->pending_next = NULL;
		c->flags &= ~BRK_CONN_PENDING;
		if (!(c->flags & BRK_CONN_CLOSING)) {
			brk_conn_process(c);
		}
	}
}

int
brk_server_run(struct brk_server *srv)
{
	while (!srv->shutdown) {
		int flags = EVLOOP_ONCE;

		if (srv->ready_head != NULL || srv->pending != NULL || srv->expire_due) {
			flags |= EVLOOP_NONBLOCK; /* expire_due: more expired keys to drop */
		}
		if (event_base_loop(srv->base, flags) < 0) {
			echd_log(ECHD_LOG_WARNING, "event loop failed");
			srv->exit_code = 1;
			break;
		}
		run_pending(srv);
		serve_ready(srv);
		batch_end(srv);
		close_pending(srv);
	}
	/* Finish the batch in flight so every reply it holds is true. */
	batch_end(srv);
	close_pending(srv);
	return srv->exit_code;
}

/* The pidfile goes if it is the one this process wrote and still holds its
 * pid: an echd started later on the same path rewrote it in place. */
static void
pidfile_remove(struct brk_server *srv)
{
	char buf[32];
	FILE *f;

	if (srv->made_pidfile.ino == 0 || (f = fopen(srv->cfg.pidfile, "r")) == NULL) {
		return;
	}
	if (fgets(buf, sizeof(buf), f) == NULL || strtol(buf, NULL, 10) != (long)srv->pid) {
		srv->made_pidfile.ino = 0;
	}
	fclose(f);
	made_remove(srv->cfg.pidfile, &srv->made_pidfile);
}

void
brk_server_finish(struct brk_server *srv)
{
	for (int i = 0; i < srv->nlisteners; i++) {
		evconnlistener_free(srv->listeners[i]);
	}
	srv->nlisteners = 0;
	if (srv->batch != NULL) {
		brk_batch_commit(srv);
	}
	if (srv->st != NULL) {
		release_durable(srv, meta_flush(srv));
	}
	while (srv->conns != NULL) {
		struct brk_conn *c = srv->conns;
		brk_conn_flush(c, c->out.len);
		brk_conn_destroy(c);
	}
	brk_pubsub_finish(srv);
	brk_slowlog_reset(srv);
	brk_acllog_reset(srv);
	if (srv->st != NULL) {
		storage_close(srv->st);
		srv->st = NULL;
		echd_log(ECHD_LOG_NOTICE, "storage closed; echd is now ready to exit, bye bye...");
	}
	if (srv->cfg.unixsocket) {
		made_remove(srv->cfg.unixsocket, &srv->made_socket);
	}
	if (srv->cfg.pidfile) {
		pidfile_remove(srv);
	}
	if (srv->lock_fd > 0) {
		close(srv->lock_fd); /* after the storage: the next echd may open it now */
		srv->lock_fd = 0;
	}
	if (srv->sig_term) {
		event_free(srv->sig_term);
	}
	if (srv->sig_int) {
		event_free(srv->sig_int);
	}
	if (srv->sig_hup) {
		event_free(srv->sig_hup);
	}
	if (srv->cron) {
		event_free(srv->cron);
	}
	if (srv->fsync_timer) {
		event_free(srv->fsync_timer);
	}
	if (srv->flush_timer) {
		event_free(srv->flush_timer);
	}
	if (srv->watchdog) {
		event_free(srv->watchdog);
	}
	for (size_t i = 0; i < srv->wk_size; i++) {
		struct brk_waitkey *wk = srv->wk_table[i], *next;
		for (; wk != NULL; wk = next) {
			next = wk->hnext;
			echd_free(wk->waiters);
			echd_free(wk->watchers);
			echd_free(wk->name);
			echd_free(wk);
		}
	}
	ECHD_FREE(srv->wk_table);
	brk_seen_clear(srv);
	if (srv->base) {
		event_base_free(srv->base);
	}
	brk_latency_reset_hists(srv);
	brk_latency_free(srv);
	ECHD_FREE(srv->cmdstats);
	brk_acl_finish(srv);
	brk_tls_finish(srv);
	brk_config_finish(&srv->cfg);
	if (log_file) {
		fclose(log_file);
		log_file = NULL;
	}
}
