/* fetch.c - commands that wait for rows the storage does not hold yet
 * (storage.h's fetch interface: postgres with storage-cache-size).
 *
 * The promise kept here: a command whose run met ECHD_EWOULDFETCH leaves
 * nothing behind (conn.c ran it in a nested transaction and aborted it,
 * and dropped its reply), waits like a blocked client while the loop
 * serves the others, and runs again, whole, once a fetch landed; its
 * client's pipelined commands wait behind it. A blocked reader that met
 * one while running again after its key changed stays blocked, and runs
 * again after the fetch too. A command that keeps missing (its rows do
 * not stay in memory until it runs: the cache is too small for it) gets
 * an error after BRK_FETCH_ROUNDS_MAX rounds rather than waiting for ever.
 *
 * The storage's socket and a timer (while it is busy) wake the loop;
 * storage_fetch_poll() runs at the end of each turn, after the commit,
 * with no transaction open (brk_fetch_turn()).
 */
#include <errno.h>
#include <string.h>

#include <event2/event.h>

#include "broker.h"
#include "http.h"
#include "server.h"

/* Rounds one command may wait for fetches before it is answered an error.
 * A long scan needs many (fetches grow to 4096 rows: an XRANGE - + of a
 * million cold entries takes some 250, each running the command again);
 * one whose rows are evicted between its rounds (which only a busy cache
 * under other fetches can do) would never end. */
#define BRK_FETCH_ROUNDS_MAX 1024

uint64_t
brk_fetch_misses(const struct brk_server *srv)
{
	return srv->fetch != NULL ? storage_fetch_misses(srv->fetch) : 0;
}

bool
brk_fetch_missed(const struct brk_server *srv, uint64_t m0)
{
	return brk_fetch_misses(srv) != m0;
}

static void
fetch_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg; /* only wakes the loop: brk_fetch_turn() polls at its end */
}

int
brk_fetch_init(struct brk_server *srv)
{
	srv->fetch = storage_fetch(srv->st);
	srv->fetch_fd = -1;
	if (srv->fetch == NULL) {
		return 0;
	}
	srv->fetch_timer = evtimer_new(srv->base, fetch_cb, srv);
	if (srv->fetch_timer == NULL) {
		return -ENOMEM;
	}
	brk_fetch_turn(srv);
	return 0;
}

void
brk_fetch_finish(struct brk_server *srv)
{
	if (srv->fetch_ev != NULL) {
		event_free(srv->fetch_ev);
		srv->fetch_ev = NULL;
	}
	if (srv->fetch_timer != NULL) {
		event_free(srv->fetch_timer);
		srv->fetch_timer = NULL;
	}
	srv->fetch = NULL;
}

/* Watches what the storage said: its socket (it may change), and a timer
 * while it is busy. */
static void
watch(struct brk_server *srv, const struct storage_fetch_state *fs)
{
	short what = (short)(EV_READ | EV_PERSIST | (fs->want_write ? EV_WRITE : 0));

	if (fs->fd != srv->fetch_fd || what != srv->fetch_what) {
		if (srv->fetch_ev != NULL) {
			event_free(srv->fetch_ev);
			srv->fetch_ev = NULL;
		}
		srv->fetch_fd = -1;
		if (fs->fd >= 0) {
			srv->fetch_ev = event_new(srv->base, fs->fd, what, fetch_cb, srv);
			if (srv->fetch_ev != NULL && event_add(srv->fetch_ev, NULL) == 0) {
				srv->fetch_fd = fs->fd;
				srv->fetch_what = what;
			}
		}
	}
	if (fs->busy) {
		struct timeval tv = {(time_t)(fs->poll_ms / 1000),
			(suseconds_t)(fs->poll_ms % 1000) * 1000};
		evtimer_add(srv->fetch_timer, &tv);
	} else {
		evtimer_del(srv->fetch_timer);
	}
}

void
brk_fetch_turn(struct brk_server *srv)
{
	struct storage_fetch_state fs;

	if (srv->fetch == NULL || srv->batch != NULL) {
		return;
	}
	/* the storage logs what failed; fs says where it stands either way */
	(void)storage_fetch_poll(srv->fetch, &fs);
	srv->fetch_state = fs;
	if (fs.landed != srv->fetch_landed) {
		struct brk_conn *c = srv->fetch_head;

		srv->fetch_landed = fs.landed;
		srv->fetch_head = NULL;
		while (c != NULL) {
			struct brk_conn *next = c->blk->fetch_next;

			c->blk->fetch_wait = false;
			c->blk->fetch_next = NULL;
			brk_block_ready(srv, c);
			c = next;
		}
		brk_http_fetch_landed(srv);
	}
	watch(srv, &fs);
}

int
brk_fetch_park(struct brk_ctx *x)
{
	struct brk_conn *c = x->c;
	int rc;

	if (++c->fetch_rounds > BRK_FETCH_ROUNDS_MAX) {
		c->fetch_rounds = 0;
		return ECHD_ELIMIT;
	}
	if (c->blk == NULL) {
		rc = brk_block_wait(x, BRK_BLOCK_FETCH, false, 0);
		if (rc != 0) {
			return rc;
		}
	}
	x->blocked = true;
	if (!c->blk->fetch_wait) {
		c->blk->fetch_wait = true;
		c->blk->fetch_next = x->srv->fetch_head;
		x->srv->fetch_head = c;
	}
	return 0;
}

void
brk_fetch_forget(struct brk_conn *c)
{
	struct brk_conn **pp;

	if (c->blk == NULL || !c->blk->fetch_wait) {
		return;
	}
	for (pp = &c->srv->fetch_head; *pp != NULL; pp = &(*pp)->blk->fetch_next) {
		if (*pp == c) {
			*pp = c->blk->fetch_next;
			break;
		}
	}
	c->blk->fetch_wait = false;
	c->blk->fetch_next = NULL;
}
