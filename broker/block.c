/* block.c - keys changed in a batch, and who waits on them: blocked readers
 * (XREAD/XREADGROUP BLOCK, WAIT, WAITAOF) and WATCH.
 *
 * The promise kept here: a blocked reader wakes exactly once, in arrival
 * order, after the commit of the batch that changed its key, and runs its
 * command again (Redis 7.4 semantics); a timeout or CLIENT UNBLOCK ends it.
 * An XREADGROUP CLAIM reader also runs again when the first pending entry
 * it waits for becomes claimable (a timer at that time, not a poll).
 * Waiters and watchers live in one table keyed by (db, key).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "broker.h"
#include "server.h"

static void wk_maybe_free(struct brk_server *srv, struct brk_waitkey *wk);
static void block_timeout_cb(evutil_socket_t fd, short what, void *arg);

/* Queues blocked reader w to run again (once) by brk_serve_ready(). */
static void
ready_push(struct brk_server *srv, struct brk_conn *w)
{
	brk_block_ready(srv, w);
}

void
brk_block_ready(struct brk_server *srv, struct brk_conn *w)
{
	if (w->blk == NULL || w->blk->ready) {
		return;
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
			ready_push(srv, wk->waiters[i]);
		}
		wk_maybe_free(srv, wk);
	}
	srv->touched = NULL;
}

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
	brk_fetch_forget(c);
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
	if (b->claim_timer) {
		event_free(b->claim_timer);
	}
	argv_free(&b->req);
	argv_free(&b->orig);
	echd_free(b->keys);
	if (b->kind != BRK_BLOCK_FETCH) {
		srv->blocked_clients--;
	}
	echd_free(b);
	c->blk = NULL;
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
	if (kind != BRK_BLOCK_FETCH) {
		x->srv->blocked_clients++; /* a fetch wait is not a blocking command */
	}
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
	if (srv->cfg.appendfsync != BRK_FSYNC_EVERYSEC ||
		c->write_gen <= storage_durable_gen(srv->st)) {
		return 1;
	}
	if (!want) {
		return 0;
	}
	c->wait_gen = c->write_gen;
	return 1;
}

void
brk_block_end(struct brk_conn *c, const char *error)
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
	if (error != NULL) {
		resp_add_error(&c->w, error);
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
	brk_block_end(c, NULL);
	brk_conn_mark_pending(c); /* run what it pipelined meanwhile */
}

static void
claim_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct brk_conn *c = arg;

	(void)fd;
	(void)what;
	ready_push(c->srv, c); /* runs in this turn's brk_serve_ready() */
}

int
brk_block_claim_at(struct brk_ctx *x, uint64_t at_ms)
{
	struct brk_block *b = x->c->blk;
	uint64_t now = brk_now_ms(), delay;
	struct timeval tv;

	if (b == NULL || !x->blocked) {
		return 0;
	}
	if (b->deadline_ms != 0 && at_ms >= b->deadline_ms) {
		if (b->claim_timer != NULL) {
			evtimer_del(b->claim_timer); /* the timeout answers first */
		}
		return 0;
	}
	if (b->claim_timer == NULL) {
		b->claim_timer = evtimer_new(x->srv->base, claim_timer_cb, x->c);
		if (b->claim_timer == NULL) {
			return -ENOMEM;
		}
	}
	delay = at_ms > now ? at_ms - now : 0;
	tv.tv_sec = (time_t)(delay / 1000);
	tv.tv_usec = (suseconds_t)(delay % 1000) * 1000;
	evtimer_add(b->claim_timer, &tv); /* moves a pending one */
	return 0;
}

/* Runs the commands of clients whose keys changed (or whose rows were
 * fetched), in arrival order: those queued when it begins, taken off the
 * queue one at a time (a command run here may end another's block, which
 * unlinks it), within batch-max-commands but one at least. */
void
brk_serve_ready(struct brk_server *srv)
{
	size_t n = 0;

	for (struct brk_conn *r = srv->ready_head; r != NULL; r = r->blk->next_ready) {
		n++;
	}
	for (size_t ran = 0; ran < n && srv->ready_head != NULL; ran++) {
		struct brk_conn *c = srv->ready_head;
		struct brk_block *b = c->blk;

		if (ran > 0 && srv->batch_cmds >= (uint64_t)srv->cfg.batch_max_commands) {
			break; /* the rest next turn, first */
		}
		srv->ready_head = b->next_ready;
		if (srv->ready_head == NULL) {
			srv->ready_tail = NULL;
		}
		b->ready = false;
		b->next_ready = NULL;
		if (b->kind == BRK_BLOCK_FETCH) {
			/* a command that waited for rows runs again as it came */
			struct brk_argv a = b->req;

			b->req.argc = 0;
			b->req.argv = NULL;
			brk_unblock(c);
			brk_conn_execute(c, a.argc, a.argv, false);
			argv_free(&a);
		} else {
			brk_conn_execute(c, b->req.argc, b->req.argv, true);
		}
		if (c->blk == NULL) {
			brk_conn_mark_pending(c); /* run what it pipelined meanwhile */
		}
	}
}
