/* conn.c - client connections: input, dispatch, held replies, output.
 *
 * Replies never go straight to the socket: they collect in the
 * connection's held buffer and are released by the server once the batch
 * they belong to has committed (server.c).
 */
#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/uio.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "broker.h"
#include "cluster.h"

/* A read this big counts as activity for the idle timeout (read_cb). */
#define ACTIVE_READ_BYTES 1024

/* Most a plain socket gives in one read; more waits for the next turn,
 * as a bufferevent would do. */
#define RAW_READ_BYTES (16 * 1024)

static void read_cb(struct bufferevent *bev, void *arg);
static void raw_read_cb(evutil_socket_t fd, short what, void *arg);
static void write_cb(struct bufferevent *bev, void *arg);
static void event_cb(struct bufferevent *bev, short what, void *arg);

static void
limits_from_config(const struct brk_config *cfg, struct resp_limits *l)
{
	resp_limits_default(l);
	l->max_bulk_len = (size_t)cfg->proto_max_bulk_len;
	l->max_multibulk_len = (size_t)cfg->proto_max_multibulk_len;
	l->max_inline_len = (size_t)cfg->proto_inline_max_size;
	l->max_query_buf = (size_t)cfg->query_buf_limit;
}

struct brk_conn *
brk_conn_create(struct brk_server *srv, int fd, const char *addr, const char *laddr,
	bool is_unix, bool is_tls)
{
	struct brk_conn *c = echd_calloc(1, sizeof(*c));
	struct resp_limits lim;

	if (c == NULL) {
		return NULL;
	}
	c->srv = srv;
	c->fd = fd;
	c->resp = 2;
	resp_buf_init(&c->out);
	c->w.out = &c->out;
	c->w.proto = 2;
	limits_from_config(&srv->cfg, &lim);
	c->rd = resp_reader_create(&lim);
	if (c->rd == NULL) {
		goto fail;
	}
	c->bev = is_tls ? brk_tls_bufferevent(srv, fd)
			: bufferevent_socket_new(srv->base, fd, BEV_OPT_CLOSE_ON_FREE);
	if (c->bev == NULL) {
		goto fail;
	}
	if (is_tls) {
		c->flags |= BRK_CONN_TLS;
	}
	bufferevent_setcb(c->bev, read_cb, write_cb, event_cb, c);
	c->mem_cb = evbuffer_add_cb(bufferevent_get_output(c->bev), brk_evict_obuf_cb, c);
	if (c->mem_cb == NULL) {
		goto fail;
	}
	if (is_tls) {
		bufferevent_enable(c->bev, EV_READ | EV_WRITE);
	} else {
		/* A bufferevent asks the kernel how much is readable before each
		 * read (one more system call per request); plain sockets read
		 * straight into the request reader and keep the bufferevent for
		 * output only. */
		c->rev = event_new(srv->base, fd, EV_READ | EV_PERSIST, raw_read_cb, c);
		if (c->rev == NULL || event_add(c->rev, NULL) != 0) {
			goto fail;
		}
		bufferevent_enable(c->bev, EV_WRITE);
	}
	c->id = srv->next_client_id++;
	snprintf(c->addr, sizeof(c->addr), "%s", addr);
	snprintf(c->laddr, sizeof(c->laddr), "%s", laddr);
	if (is_unix) {
		c->flags |= BRK_CONN_UNIX;
	}
	c->ctime_ms = c->last_ms = brk_now_ms();
	/* With no password the default user is logged in from the start. */
	if (brk_acl_nopass_default(srv)) {
		c->user = brk_acl_find(srv, "default", 7);
	}
	c->next = srv->conns;
	if (srv->conns) {
		srv->conns->prev = c;
	}
	srv->conns = c;
	srv->nconns++;
	if (is_tls) {
		c->flags |= BRK_CONN_HANDSHAKE;
	}
	if (is_tls || c->user == NULL) {
		/* newest last: the list stays in accept order */
		c->flags |= BRK_CONN_UNAUTH;
		c->unauth_prev = srv->unauth_tail;
		if (srv->unauth_tail) {
			srv->unauth_tail->unauth_next = c;
		} else {
			srv->unauth = c;
		}
		srv->unauth_tail = c;
		srv->nunauth++;
	}
	echd_log(ECHD_LOG_DEBUG, "accepted %s (id %llu)", addr, (unsigned long long)c->id);
	return c;
fail:
	if (c->rev) {
		event_free(c->rev);
	}
	if (c->bev) {
		/* the caller still owns fd on failure */
		bufferevent_setfd(c->bev, -1);
		bufferevent_free(c->bev);
	}
	resp_reader_destroy(c->rd);
	echd_free(c);
	return NULL;
}

void
brk_conn_unauth_remove(struct brk_conn *c)
{
	struct brk_server *srv = c->srv;

	if (!(c->flags & BRK_CONN_UNAUTH)) {
		return;
	}
	c->flags &= ~(unsigned)BRK_CONN_UNAUTH;
	if (c->unauth_prev) {
		c->unauth_prev->unauth_next = c->unauth_next;
	} else {
		srv->unauth = c->unauth_next;
	}
	if (c->unauth_next) {
		c->unauth_next->unauth_prev = c->unauth_prev;
	} else {
		srv->unauth_tail = c->unauth_prev;
	}
	c->unauth_prev = c->unauth_next = NULL;
	srv->nunauth--;
}

void
brk_conn_admit(struct brk_conn *c)
{
	if ((c->flags & BRK_CONN_UNAUTH) && !(c->flags & BRK_CONN_HANDSHAKE) && c->user != NULL) {
		brk_conn_unauth_remove(c);
	}
}

/* Unlinks c from a singly linked list threaded through field off. */
static void
unlink_from(struct brk_conn **head, struct brk_conn *c, size_t off)
{
	for (struct brk_conn **pp = head; *pp != NULL;
		pp = (struct brk_conn **)((char *)*pp + off)) {
		if (*pp == c) {
			*pp = *(struct brk_conn **)((char *)c + off);
			return;
		}
	}
}

void
brk_conn_destroy(struct brk_conn *c)
{
	struct brk_server *srv;

	if (c == NULL) {
		return;
	}
	srv = c->srv;
	brk_unblock(c);
	brk_multi_reset(c);
	brk_monitor_remove(c);
	brk_pubsub_leave_all(c);
	if (c->flags & BRK_CONN_PENDING) {
		unlink_from(&srv->pending, c, offsetof(struct brk_conn, pending_next));
	}
	if (c->flags & BRK_CONN_HELD) {
		unlink_from(&srv->held, c, offsetof(struct brk_conn, held_next));
	}
	if (c->flags & BRK_CONN_CLOSING) {
		unlink_from(&srv->closing, c, offsetof(struct brk_conn, closing_next));
	}
	if (c->flags & BRK_CONN_WAITING) {
		unlink_from(&srv->waiting, c, offsetof(struct brk_conn, waiting_next));
		srv->nwaiting--;
	}
	brk_conn_unauth_remove(c);
	if (c->prev) {
		c->prev->next = c->next;
	} else {
		srv->conns = c->next;
	}
	if (c->next) {
		c->next->prev = c->prev;
	}
	srv->nconns--;
	echd_log(ECHD_LOG_DEBUG, "client %s closed (id %llu)", c->addr, (unsigned long long)c->id);
	if (c->rev) {
		event_free(c->rev); /* before the bufferevent closes the fd */
	}
	if (c->bev) {
		if (c->mem_cb != NULL) {
			evbuffer_remove_cb_entry(bufferevent_get_output(c->bev), c->mem_cb);
		}
		bufferevent_free(c->bev);
	}
	brk_evict_forget(c);
	resp_reader_destroy(c->rd);
	resp_buf_finish(&c->out);
	echd_free(c->ranges);
	echd_free(c->watched);
	echd_free(c->name);
	echd_free(c->lib_name);
	echd_free(c->lib_ver);
	echd_free(c);
}

void
brk_conn_close_asap(struct brk_conn *c)
{
	if (c->flags & BRK_CONN_CLOSING) {
		return;
	}
	c->flags |= BRK_CONN_CLOSING | BRK_CONN_CLOSE_ASAP;
	brk_conn_unauth_remove(c); /* leaving anyway: neither counted nor closed again for room */
	brk_evict_forget(c);       /* nor for maxmemory-clients */
	if (c->rev) {
		event_del(c->rev);
	}
	if (c->bev) {
		bufferevent_disable(c->bev, EV_READ);
	}
	c->closing_next = c->srv->closing;
	c->srv->closing = c;
}

void
brk_conn_mark_held(struct brk_conn *c)
{
	if (c->flags & BRK_CONN_HELD) {
		return;
	}
	c->flags |= BRK_CONN_HELD;
	c->held_next = c->srv->held;
	c->srv->held = c;
}

void
brk_conn_mark_pending(struct brk_conn *c)
{
	if (c->flags & (BRK_CONN_PENDING | BRK_CONN_CLOSING)) {
		return;
	}
	c->flags |= BRK_CONN_PENDING;
	c->pending_next = c->srv->pending;
	c->srv->pending = c;
}

/* ------------------------------------------------------------------------
 * Output
 * ---------------------------------------------------------------------- */

size_t
brk_conn_obuf_hard(const struct brk_conn *c)
{
	const struct brk_config *cfg = &c->srv->cfg;
	long long hard = brk_pubsub_subscriptions(c) > 0 ? cfg->obuf_pubsub_hard : cfg->obuf_hard;

	return hard > 0 ? (size_t)hard : 0;
}

/* client-output-buffer-limit of c's class: a client subscribed to a channel
 * is a pubsub client, as in Redis. */
static void
check_output_limits(struct brk_conn *c, size_t pending)
{
	const struct brk_config *cfg = &c->srv->cfg;
	bool sub = brk_pubsub_subscriptions(c) > 0;
	long long soft = sub ? cfg->obuf_pubsub_soft : cfg->obuf_soft;
	long long secs = sub ? cfg->obuf_pubsub_soft_secs : cfg->obuf_soft_secs;
	size_t hard = brk_conn_obuf_hard(c);
	uint64_t now;

	if (c->flags & BRK_CONN_CLOSING) {
		return; /* already on its way out: count and log it once */
	}
	if (hard > 0 && pending > hard) {
		goto close;
	}
	if (soft > 0 && pending > (size_t)soft) {
		now = brk_now_ms();
		if (c->obuf_soft_since == 0) {
			c->obuf_soft_since = now;
		} else if (now - c->obuf_soft_since >= (uint64_t)secs * 1000) {
			goto close;
		}
		return;
	}
	c->obuf_soft_since = 0;
	return;
close:
	echd_log(ECHD_LOG_WARNING,
		"client id=%llu addr=%s closed for overcoming of output buffer limits "
		"(%zu bytes pending)",
		(unsigned long long)c->id, c->addr, pending);
	c->srv->stats.expired_obuf++;
	brk_conn_close_asap(c);
}

/* The held replies outgrew the hard limit while one was built (out.limit):
 * that reply is dropped whole and the client closed, as if it had been
 * sent and not read, rather than first built in full in memory. */
static void
reply_over_limit(struct brk_conn *c, size_t mark)
{
	resp_buf_truncate(&c->out, mark);
	c->out.oom = false;
	c->out.over_limit = false;
	if (c->flags & BRK_CONN_CLOSING) {
		return;
	}
	echd_log(ECHD_LOG_WARNING,
		"client id=%llu addr=%s closed for overcoming of output buffer limits "
		"(over %zu bytes while building a reply)",
		(unsigned long long)c->id, c->addr, brk_conn_obuf_hard(c));
	c->srv->stats.expired_obuf++;
	brk_conn_close_asap(c);
}

void
brk_conn_flush(struct brk_conn *c, size_t upto)
{
	struct evbuffer *ob;
	size_t off = 0;
	bool again = false, broken = false;

	if (c->out.over_limit) {
		c->batch_mark = 0;
		reply_over_limit(c, 0);
		return;
	}
	if (c->out.oom) {
		echd_log(ECHD_LOG_WARNING, "client %s: out of memory building a reply; closing",
			c->addr);
		resp_buf_truncate(&c->out, 0);
		c->out.oom = false;
		c->batch_mark = 0;
		brk_conn_close_asap(c);
		return;
	}
	if (upto > c->out.len) {
		upto = c->out.len;
	}
	if (upto == 0 || c->bev == NULL) {
		goto done;
	}
	ob = bufferevent_get_output(c->bev);
	c->srv->stats.net_output_bytes += upto;
	if (evbuffer_get_length(ob) == 0 && !(c->flags & BRK_CONN_FAILED)) {
		/* Write at once rather than wait a poll round for writability.
		 * A connection closed on purpose still gets its last reply (the
		 * OK of an ACL DELUSER of its own user, say); one whose socket
		 * failed in this turn, after its commands ran, is not written
		 * to (and logged as closed) a second time. */
		ssize_t n;
		if (c->flags & BRK_CONN_TLS) {
			n = brk_tls_write_now(c->bev, c->addr, c->out.data, upto);
			again = n == -EAGAIN;
			broken = n < 0 && !again;
		} else {
			n = write(c->fd, c->out.data, upto); /* errors: the bufferevent's */
		}
		if (n > 0) {
			off = (size_t)n;
		}
	}
	if (off < upto && !broken) {
		/* OpenSSL repeats a write that must wait (again) with the
		 * bufferevent's first chunk, which must hold these bytes in
		 * full. Bytes not queued would leave a gap in the replies, and
		 * over TLS OpenSSL would count the next reply's first bytes as
		 * the ones it sent: without memory, close instead. */
		if (evbuffer_add(ob, c->out.data + off, upto - off) != 0 ||
			(again && evbuffer_pullup(ob, (ev_ssize_t)(upto - off)) == NULL)) {
			echd_log(ECHD_LOG_WARNING, "client %s: out of memory queueing a reply; closing",
				c->addr);
			broken = true;
		}
	}
	resp_buf_consume(&c->out, upto);
	c->batch_mark = c->batch_mark > upto ? c->batch_mark - upto : 0;
	if (broken) {
		brk_conn_close_asap(c);
		return;
	}
	check_output_limits(c, evbuffer_get_length(ob));
	if (!(c->flags & BRK_CONN_CLOSING)) {
		brk_evict_note(c);
	}
done:
	if ((c->flags & BRK_CONN_CLOSE_AFTER_REPLY) && c->out.len == 0 && c->bev &&
		evbuffer_get_length(bufferevent_get_output(c->bev)) == 0) {
		brk_conn_close_asap(c);
	}
}

static void
write_cb(struct bufferevent *bev, void *arg)
{
	struct brk_conn *c = arg;

	(void)bev;
	if ((c->flags & BRK_CONN_CLOSE_AFTER_REPLY) && c->out.len == 0) {
		brk_conn_close_asap(c);
	}
}

static void
event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct brk_conn *c = arg;

	if (what & BEV_EVENT_CONNECTED) {
		/* TLS handshake done: a client certificate may name the user */
		char name[256];
		c->flags &= ~(unsigned)BRK_CONN_HANDSHAKE;
		if (c->srv->cfg.tls_auth_clients_user == BRK_TLS_USER_CN &&
			brk_tls_peer_name(bev, name, sizeof(name)) > 0) {
			struct brk_user *u = brk_acl_find(c->srv, name, strlen(name));
			if (brk_user_enabled(u)) {
				c->user = u;
				echd_log(ECHD_LOG_VERBOSE, "client %s logged in as '%s' by certificate",
					c->addr, name);
			}
		}
		brk_conn_admit(c);
		return;
	}
	if ((what & BEV_EVENT_ERROR) && (c->flags & BRK_CONN_TLS)) {
		char err[256];
		brk_tls_describe_error(bev, err, sizeof(err));
		echd_log(ECHD_LOG_VERBOSE, "TLS connection from %s closed: %s", c->addr, err);
	}
	if (what & BEV_EVENT_ERROR) {
		c->flags |= BRK_CONN_FAILED;
	}
	if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) {
		brk_conn_close_asap(c);
	}
}

/* ------------------------------------------------------------------------
 * Input
 * ---------------------------------------------------------------------- */

/* Feeds what a read brought to the request reader and runs what is
 * complete; returns false when the connection is closing. */
static bool
conn_input(struct brk_conn *c, const struct evbuffer_iovec *vec, int n)
{
	size_t total = 0;
	int rc = 0;

	for (int i = 0; i < n && rc == 0; i++) {
		rc = resp_reader_feed(c->rd, vec[i].iov_base, vec[i].iov_len);
		total += vec[i].iov_len;
	}
	c->srv->stats.net_input_bytes += total;
	if (total >= ACTIVE_READ_BYTES) {
		/* Bytes alone do not make a client active for the idle timeout:
		 * one trickling a request a byte at a time (slow loris) would
		 * never be idle. A read counts when it brings a real chunk (a
		 * big upload in progress); otherwise the client is active when a
		 * request it sent runs (brk_conn_execute). */
		c->last_ms = brk_now_ms();
	}
	if (rc != 0) {
		echd_log(ECHD_LOG_WARNING, "closing client %s (id %llu): %s", c->addr,
			(unsigned long long)c->id,
			rc == ECHD_ELIMIT ? "client query buffer limit reached" : echd_strerror(rc));
		brk_conn_close_asap(c);
		return false;
	}
	brk_conn_process(c);
	return true;
}

/* TLS connections: OpenSSL's bufferevent has decrypted into its input. */
static void
read_cb(struct bufferevent *bev, void *arg)
{
	struct brk_conn *c = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	struct evbuffer_iovec vec[16];
	size_t total = 0;
	int n;

	if (c->flags & (BRK_CONN_CLOSE_AFTER_REPLY | BRK_CONN_CLOSING)) {
		evbuffer_drain(in, evbuffer_get_length(in));
		return;
	}
	n = evbuffer_peek(in, -1, NULL, vec, 16);
	if (n > 16) {
		n = 16;
	}
	for (int i = 0; i < n; i++) {
		total += vec[i].iov_len;
	}
	if (!conn_input(c, vec, n)) {
		return;
	}
	evbuffer_drain(in, total);
	if (evbuffer_get_length(in) > 0) {
		/* more than 16 chunks were waiting: come back next turn */
		bufferevent_trigger(bev, EV_READ, 0);
	}
}

/* Plain sockets: one read(2) per readable event, level-triggered, so what
 * is left is read on the next turn. */
static void
raw_read_cb(evutil_socket_t fd, short what, void *arg)
{
	static char buf[RAW_READ_BYTES]; /* one thread; consumed before return */
	struct brk_conn *c = arg;
	struct evbuffer_iovec vec;
	ssize_t n;

	(void)what;
	n = read(fd, buf, sizeof(buf));
	if (n < 0) {
		if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
			return;
		}
		echd_log(ECHD_LOG_VERBOSE, "client %s (id %llu): read: %s", c->addr,
			(unsigned long long)c->id, strerror(errno));
		c->flags |= BRK_CONN_FAILED;
		brk_conn_close_asap(c);
		return;
	}
	if (n == 0) {
		brk_conn_close_asap(c);
		return;
	}
	if (c->flags & (BRK_CONN_CLOSE_AFTER_REPLY | BRK_CONN_CLOSING)) {
		return; /* the rest after a protocol error is discarded */
	}
	vec.iov_base = buf;
	vec.iov_len = (size_t)n;
	conn_input(c, &vec, 1);
}

void
brk_conn_process(struct brk_conn *c)
{
	struct brk_server *srv = c->srv;

	while (c->blk == NULL && !(c->flags & (BRK_CONN_CLOSE_AFTER_REPLY | BRK_CONN_CLOSING))) {
		struct resp_arg *argv;
		int argc, rc;

		/* Close this batch so its clients get their replies; the rest of
		 * this pipeline runs in the next one. The byte cap keeps one
		 * pipeline of big reads from holding every other client for the
		 * seconds its replies take to build. */
		if (srv->batch_cmds >= (uint64_t)srv->cfg.batch_max_commands ||
			c->out.len - c->batch_mark >= (size_t)srv->cfg.batch_max_reply_bytes) {
			if (resp_reader_pending(c->rd) > 0) {
				brk_conn_mark_pending(c);
			}
			break;
		}
		rc = resp_reader_next(c->rd, &argc, &argv);
		if (rc == -EAGAIN) {
			break;
		}
		if (rc == ECHD_EPROTO) {
			echd_log(ECHD_LOG_VERBOSE, "protocol error from client %s: %s", c->addr,
				resp_reader_errstr(c->rd));
			resp_add_errorf(&c->w, "ERR Protocol error: %s", resp_reader_errstr(c->rd));
			srv->stats.total_error_replies++;
			brk_count_error(srv, "ERR");
			c->batch_replies++;
			c->flags |= BRK_CONN_CLOSE_AFTER_REPLY;
			brk_conn_mark_held(c);
			break;
		}
		if (rc != 0) {
			brk_conn_close_asap(c);
			break;
		}
		if (argc == 0) {
			continue;
		}
		brk_conn_execute(c, argc, argv, false);
	}
}

/* ------------------------------------------------------------------------
 * Dispatch
 * ---------------------------------------------------------------------- */

static void
reply_unknown(struct brk_ctx *x)
{
	char args[512];
	size_t n = 0;

	args[0] = '\0';
	for (int i = 1; i < x->argc && n < 128; i++) {
		int room = 128 - (int)n;
		n += (size_t)snprintf(args + n, sizeof(args) - n, "'%.*s' ",
			(int)(x->argv[i].len < (size_t)room ? x->argv[i].len : (size_t)room),
			x->argv[i].p);
	}
	resp_add_errorf(x->w, "ERR unknown command '%.128s', with args beginning with: %s",
		x->argv[0].p, args);
}

/* Counts an error reply by its code (the first word) for INFO errorstats. */
void
brk_count_error(struct brk_server *srv, const char *msg)
{
	size_t len = strcspn(msg, " ");
	int i;

	if (len >= sizeof(srv->errstats[0].prefix)) {
		len = sizeof(srv->errstats[0].prefix) - 1;
	}
	for (i = 0; i < srv->nerrstats; i++) {
		if (strlen(srv->errstats[i].prefix) == len &&
			memcmp(srv->errstats[i].prefix, msg, len) == 0) {
			srv->errstats[i].count++;
			return;
		}
	}
	if (srv->nerrstats == BRK_MAX_ERRSTATS) {
		return; /* Redis also caps the table; the total still counts */
	}
	memcpy(srv->errstats[i].prefix, msg, len);
	srv->errstats[i].prefix[len] = '\0';
	srv->errstats[i].count = 1;
	srv->nerrstats++;
}

void
brk_error_text(struct brk_server *srv, int rc, char *buf, size_t len)
{
	if (rc == -ENOSPC) {
		/* The file system is full, not the map: maxdisk is no help. */
		snprintf(buf, len,
			"ERR storage full: no space left on the file system of the data directory; "
			"free space there");
	} else if (rc == ECHD_ELIMIT || rc == ECHD_EMAPFULL) {
		snprintf(buf, len,
			"ERR storage full: the data file may not grow beyond maxdisk (%lld bytes); "
			"trim or delete streams, or raise maxdisk",
			srv->cfg.maxdisk);
	} else {
		snprintf(buf, len, "ERR storage error: %s", echd_strerror(rc));
	}
}

static bool
is_container(const struct brk_cmd *cmd)
{
	return brk_subcommand_at(cmd, 0) != NULL; /* it has a subcommand table */
}

struct brk_cmdstat *
brk_stat_for(struct brk_server *srv, const struct brk_cmd *cmd, int argc,
	const struct resp_arg *argv)
{
	/* Redis counts an unknown subcommand in errorstats only: no line of its own */
	static struct brk_cmdstat unknown_sub;
	char name[48];
	int n, i;

	if (argc < 2 || !is_container(cmd) || argv[1].len > 24) {
		return &srv->cmdstats[cmd - brk_cmd_at(0)];
	}
	if (!brk_subcommand_known(cmd, &argv[1])) {
		return &unknown_sub;
	}
	n = snprintf(name, sizeof(name), "%s|%.*s", cmd->name, (int)argv[1].len, argv[1].p);
	for (i = 0; i < n; i++) {
		name[i] = (char)tolower((unsigned char)name[i]);
	}
	for (i = 0; i < srv->nsubstats; i++) {
		if (strcmp(srv->substats[i].name, name) == 0) {
			return &srv->substats[i].st;
		}
	}
	if (srv->nsubstats == BRK_MAX_SUBSTATS) {
		return &srv->cmdstats[cmd - brk_cmd_at(0)];
	}
	memset(&srv->substats[i], 0, sizeof(srv->substats[i]));
	memcpy(srv->substats[i].name, name, (size_t)n + 1);
	srv->nsubstats++;
	return &srv->substats[i].st;
}

bool
brk_count_reply_error(struct brk_server *srv, const struct resp_buf *out, size_t mark)
{
	char code[32];
	size_t n;

	if (out->len <= mark || out->data[mark] != '-') {
		return false;
	}
	n = strcspn(out->data + mark + 1, " \r");
	if (n >= sizeof(code)) {
		n = sizeof(code) - 1;
	}
	memcpy(code, out->data + mark + 1, n);
	code[n] = '\0';
	srv->stats.total_error_replies++;
	brk_count_error(srv, code);
	return true;
}

void
brk_reply_error_rc(struct brk_ctx *x, int rc)
{
	if (rc == ECHD_ELIMIT || rc == ECHD_EMAPFULL || rc == -ENOSPC) {
		char msg[256];
		brk_error_text(x->srv, rc, msg, sizeof(msg));
		resp_add_error(x->w, msg);
		return;
	}
	if (rc == -ENOMEM) {
		resp_add_error(x->w, "ERR out of memory");
		return;
	}
	if (rc == ECHD_ESTANDBY) {
		resp_add_error(x->w, BRK_ERR_READONLY); /* another front end took over */
		return;
	}
	if (rc == ECHD_ETOOLONG) {
		resp_add_errorf(x->w, "ERR consumer group and consumer names are limited to %d bytes",
			GROUP_NAME_MAX);
		return;
	}
	if (rc == -EFBIG) {
		/* st_pg.c's PG_VALUE_MAX: only this command fails, not its batch */
		resp_add_error(x->w, "ERR value too large for the storage: the postgres storage keeps "
				     "at most 960mb in one row (PostgreSQL's limit on a value is 1gb)");
		return;
	}
	resp_add_errorf(x->w, "ERR storage error: %s", echd_strerror(rc));
}

/* Writes bigger than this run in their own nested transaction, so a full
 * map fails only them. */
#define NEST_ARG_BYTES (1024 * 1024)

/* Runs the handler inside the right transaction; returns its result.
 *
 * A write command runs straight on the batch transaction: each command
 * checks its arguments before it writes, so only a storage failure can
 * stop one half-way, and then the whole batch is aborted (every reply it
 * holds becomes an error), which keeps each command all-or-nothing. Nested
 * transactions cost a copy of every page a command touches, so they are
 * kept for when a failure is likely: a near-full map at maxdisk, a large
 * command, one that writes rows without bound (BRK_CMD_BULK: COPY), or a
 * storage that may answer a read ECHD_EWOULDFETCH (fetch.c: the command
 * is undone and runs again later). *nested says which way it ran. */
static int
run_handler(struct brk_ctx *x, const struct brk_cmd *cmd, bool *nested)
{
	struct brk_server *srv = x->srv;
	struct storage_txn *batch = NULL, *child = NULL;
	uint64_t misses0 = brk_fetch_misses(srv);
	size_t bytes = 0;
	bool straight;
	int rc;

	*nested = false;
	if ((cmd->flags & (BRK_CMD_WRITE | BRK_CMD_READONLY)) && !brk_ha_serving(srv)) {
		return cmd->fn(x); /* INFO on a standby: no transaction to read in */
	}
	if (!(cmd->flags & (BRK_CMD_WRITE | BRK_CMD_READONLY))) {
		return cmd->fn(x);
	}
	for (int i = 0; (cmd->flags & BRK_CMD_WRITE) && i < x->argc && bytes <= NEST_ARG_BYTES;
		i++) {
		bytes += x->argv[i].len;
	}
	/* with a storage that fetches, every write runs nested: a miss undoes it (fetch.c) */
	straight = !srv->savepoints && srv->fetch == NULL && bytes <= NEST_ARG_BYTES &&
		!(cmd->flags & BRK_CMD_BULK);
	/* only a command that runs straight on the batch may use the stream
	 * cache; a nested one must find the rows written */
	batch = (cmd->flags & BRK_CMD_XCACHE) && straight ? brk_batch_txn_cached(srv, &rc)
							   : brk_batch_txn(srv, &rc);
	if (batch == NULL) {
		return rc;
	}
	x->txn = batch;
	x->writes0 = storage_txn_writes(batch);
	if (!(cmd->flags & BRK_CMD_WRITE)) {
		return cmd->fn(x);
	}
	if (straight) {
		rc = cmd->fn(x);
		if (rc == 0 && (x->dirty > 0 || brk_cmd_wrote(x))) {
			brk_batch_wrote(srv, x->c);
			srv->stats.dirty += x->dirty;
		}
		return rc;
	}
	*nested = true;
	rc = storage_txn_begin(srv->st, batch, 0, &child);
	if (rc != 0) {
		return rc;
	}
	x->txn = child;
	x->writes0 = 0;
	rc = cmd->fn(x);
	if (rc == 0 && brk_fetch_missed(srv, misses0)) {
		rc = ECHD_EWOULDFETCH; /* a miss it did not pass on: its reply may be wrong */
	}
	if (rc != 0 || (x->dirty == 0 && !brk_cmd_wrote(x))) {
		storage_txn_abort(child);
		return rc;
	}
	rc = storage_txn_commit(child);
	if (rc == 0) {
		brk_batch_wrote(srv, x->c);
		srv->stats.dirty += x->dirty;
	}
	return rc;
}

bool
brk_cmd_wrote(const struct brk_ctx *x)
{
	return x->txn != NULL && storage_txn_writes(x->txn) != x->writes0;
}

/* Makes room to remember one more held reply (note_batch_reply) before a
 * command runs: a reply that could not be remembered would stand as a
 * success if its batch failed later. False when there is no memory. */
static bool
reserve_range(struct brk_conn *c)
{
	int ncap;
	void *nr;

	if (c->nranges < c->rcap) {
		return true;
	}
	ncap = c->rcap ? c->rcap * 2 : 8;
	nr = echd_realloc(c->ranges, (size_t)ncap * sizeof(*c->ranges));
	if (nr == NULL) {
		return false;
	}
	c->ranges = nr;
	c->rcap = ncap;
	return true;
}

/* Remembers that the reply from mark on depends on the batch (its room
 * was reserved before the command ran). */
static void
note_batch_reply(struct brk_conn *c, size_t mark)
{
	if (c->out.len <= mark) {
		return;
	}
	assert(c->nranges < c->rcap);
	c->ranges[c->nranges].start = mark;
	c->ranges[c->nranges].end = c->out.len;
	c->nranges++;
}

/* A request's command name as Redis reports it: "name", or "name|sub" for
 * a container's subcommand, lower case. */
static void
command_name(const struct brk_cmd *cmd, int argc, const struct resp_arg *argv, char *buf,
	size_t len)
{
	if (argc >= 2 && is_container(cmd)) {
		int n = snprintf(buf, len, "%s|%.*s", cmd->name, (int)argv[1].len, argv[1].p);
		for (int i = 0; i < n && i < (int)len; i++) {
			buf[i] = (char)tolower((unsigned char)buf[i]);
		}
	} else {
		/* every request: a copy, not snprintf() */
		size_t n = strnlen(cmd->name, len - 1);
		memcpy(buf, cmd->name, n);
		buf[n] = '\0';
	}
}

/* ------------------------------------------------------------------------
 * The checks: before a request runs (or is queued), and the ACL again
 * when EXEC runs what was queued
 * ---------------------------------------------------------------------- */

/* Whether c's user may run the request: its command, its keys (the
 * table's key specs, brk_keys_find()) and its channels. If not, the NOPERM
 * error is written and ACL LOG has the entry. at_exec: EXEC runs a command
 * queued when the rules allowed it (Redis' words for that; context
 * "multi"); log: false when EXEC runs its transaction again after the map
 * grew, and this refusal was logged and counted the first time. */
static bool
acl_permits(struct brk_conn *c, const struct brk_cmd *cmd, struct brk_cmdstat *stat, int argc,
	const struct resp_arg *argv, bool at_exec, bool log)
{
	struct brk_server *srv = c->srv;
	const char *uname = brk_user_name(c->user);
	char name[sizeof(c->last_cmd)];
	int reason, denied = -1;

	if (c->user == NULL) {
		return true; /* only the no-auth commands get here without a user */
	}
	if (!brk_acl_cmd_allowed(c->user, cmd, argc, argv)) {
		reason = BRK_ACLLOG_COMMAND;
	} else if ((denied = brk_acl_denied_key(c->user, cmd, argc, argv)) >= 0) {
		reason = BRK_ACLLOG_KEY;
	} else if ((denied = brk_pubsub_denied_channel(c->user, cmd, argc, argv)) >= 0) {
		reason = BRK_ACLLOG_CHANNEL;
	} else {
		return true;
	}
	command_name(cmd, argc, argv, name, sizeof(name));
	if (at_exec) {
		resp_add_errorf(&c->w,
			"NOPERM ACLs rules changed between the moment the transaction was "
			"accumulated and the EXEC call. This command is no longer allowed for the "
			"following reason: %s",
			reason == BRK_ACLLOG_COMMAND ? "no permission to execute the command or "
						       "subcommand"
			: reason == BRK_ACLLOG_KEY   ? "no permission to touch the specified keys"
						     : "no permission to access one of the channels "
						       "used as arguments");
	} else if (reason == BRK_ACLLOG_COMMAND) {
		resp_add_errorf(&c->w, "NOPERM User %s has no permissions to run the '%s' command",
			uname, name);
	} else if (reason == BRK_ACLLOG_KEY) {
		resp_add_error(&c->w, "NOPERM No permissions to access a key");
	} else {
		resp_add_error(&c->w, "NOPERM No permissions to access a channel");
	}
	if (!log) {
		return false;
	}
	if (reason == BRK_ACLLOG_COMMAND) {
		srv->stats.acl_denied_cmd++;
	} else if (reason == BRK_ACLLOG_KEY) {
		srv->stats.acl_denied_key++;
	} else {
		srv->stats.acl_denied_channel++;
	}
	brk_acllog_add(srv, c, reason,
		c->multi || at_exec ? BRK_ACLLOG_CTX_MULTI : BRK_ACLLOG_CTX_TOPLEVEL,
		denied >= 0 ? argv[denied].p : name, denied >= 0 ? argv[denied].len : strlen(name),
		uname, strlen(uname));
	c->multi_dirty |= c->multi; /* a refused command in MULTI aborts its EXEC */
	stat->rejected++;
	return false;
}

/* Whether the request's keys may run here (cluster-enabled): they share a
 * slot (EXEC: the keys of every command it queued, as Redis' getNodeByQuery()
 * takes them), and this front end serves it. If not, Redis' CROSSSLOT or
 * MOVED error is written; in MULTI the transaction is spoiled, and a
 * refused EXEC discards it. A woken reader's keys passed when it blocked. */
static bool
cluster_permits(struct brk_ctx *x, const struct brk_cmd *cmd, struct brk_cmdstat *stat)
{
	struct brk_conn *c = x->c;
	const struct brk_cluster *cl = x->srv->cluster;
	const struct brk_cluster_node *owner;
	int slot = -1;
	bool same = true;

	if (cl == NULL || x->from_block) {
		return true;
	}
	if (!(cmd->flags & BRK_CMD_EXEC)) {
		same = brk_cluster_slot_add(cmd, x->argc, x->argv, &slot);
	}
	for (int i = 0; (cmd->flags & BRK_CMD_EXEC) && c->multi && same && i < c->nqueue; i++) {
		const struct brk_argv *q = &c->queue[i];
		const struct brk_cmd *qc = brk_cmd_lookup(q->argv[0].p, q->argv[0].len);

		/* (queued only once looked up: qc is never NULL) */
		same = qc == NULL || brk_cluster_slot_add(qc, q->argc, q->argv, &slot);
	}
	if (same && slot < 0) {
		return true; /* no keys */
	}
	owner = same ? brk_cluster_primary(brk_cluster_shard_of(cl, (unsigned)slot)) : NULL;
	if (same && owner != NULL && owner->myself) {
		return true;
	}
	stat->rejected++;
	if (cmd->flags & BRK_CMD_EXEC) {
		brk_multi_reset(c);
	}
	c->multi_dirty |= c->multi;
	if (!same) {
		resp_add_error(x->w, BRK_CLUSTER_ERR_CROSSSLOT);
	} else if (owner != NULL) {
		/* another shard's slot: its primary serves it (Redis' MOVED) */
		resp_add_errorf(x->w, "MOVED %d %s:%d", slot, owner->host, owner->port);
	} else {
		resp_add_error(x->w, "CLUSTERDOWN Hash slot not served");
	}
	return false;
}

/* What admit() decided */
enum admit {
	ADMIT_RUN,     /* run it now */
	ADMIT_REPLIED, /* refused or queued: the reply is written */
	ADMIT_GONE,    /* a blocked client's re-run refused: its block ended, argv freed */
};

/* The checks before a request runs, in Redis' order: lookup, arity, auth,
 * the ACL, the subcommand, the connection's state, a standby front end,
 * MULTI, a full disk; a request in MULTI is queued here. Sets *cmdp, and
 * *statp when there is a command. */
static enum admit
admit(struct brk_ctx *x, const struct brk_cmd **cmdp, struct brk_cmdstat **statp)
{
	struct brk_conn *c = x->c;
	struct brk_server *srv = x->srv;
	const struct brk_cmd *cmd;
	struct brk_cmdstat *stat;
	int argc = x->argc;

	cmd = *cmdp = brk_cmd_lookup(x->argv[0].p, x->argv[0].len);
	if (cmd == NULL) {
		reply_unknown(x);
		c->multi_dirty |= c->multi; /* EXEC will abort */
		return ADMIT_REPLIED;
	}
	stat = *statp = brk_stat_for(srv, cmd, argc, x->argv);
	/* containers report "name|sub", as Redis does */
	command_name(cmd, argc, x->argv, c->last_cmd, sizeof(c->last_cmd));
	if ((cmd->arity > 0 && argc != cmd->arity) || (cmd->arity < 0 && argc < -cmd->arity)) {
		stat->rejected++;
		if (cmd->flags & BRK_CMD_EXEC) {
			/* a refused EXEC discards the transaction */
			brk_multi_reset(c);
			resp_add_error(x->w, "EXECABORT Transaction discarded because of: wrong number "
					     "of arguments for 'exec' command");
			return ADMIT_REPLIED;
		}
		resp_add_errorf(x->w, "ERR wrong number of arguments for '%s' command", cmd->name);
		c->multi_dirty |= c->multi;
		return ADMIT_REPLIED;
	}
	/* Logged in is enough: a user switched off later keeps the connections
	 * it has (Redis does); it only cannot log in again. */
	if (c->user == NULL && !(cmd->flags & BRK_CMD_NOAUTH)) {
		resp_add_error(x->w, "NOAUTH Authentication required.");
		stat->rejected++;
		c->multi_dirty |= c->multi;
		return ADMIT_REPLIED;
	}
	if (!acl_permits(c, cmd, stat, argc, x->argv, false, true)) {
		return ADMIT_REPLIED;
	}
	if (!cluster_permits(x, cmd, stat)) {
		return ADMIT_REPLIED;
	}
	if (!brk_subcommand_ok(x, cmd)) {
		/* an unknown subcommand or its arity: refused before it runs */
		stat->rejected++;
		c->multi_dirty |= c->multi;
		return ADMIT_REPLIED;
	}
	if ((c->flags & BRK_CONN_MONITOR) && (cmd->flags & (BRK_CMD_WRITE | BRK_CMD_READONLY))) {
		/* a monitor is a replica to Redis */
		resp_add_error(x->w, "ERR Replica can't interact with the keyspace");
		stat->rejected++;
		c->multi_dirty |= c->multi;
		return ADMIT_REPLIED;
	}
	if (c->resp == 2 && !(cmd->flags & BRK_CMD_SUBCTX) && brk_pubsub_subscriptions(c) > 0) {
		resp_add_errorf(x->w,
			"ERR Can't execute '%s': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / "
			"QUIT / RESET are allowed in this context",
			c->last_cmd);
		stat->rejected++;
		c->multi_dirty |= c->multi;
		return ADMIT_REPLIED;
	}
	if (!(cmd->flags & BRK_CMD_STANDBY) && !brk_ha_serving(srv)) {
		/* A standby front end has no data: it serves only what finds
		 * the active one (in MULTI: not queued, and EXEC aborts). */
		stat->rejected++;
		if (x->from_block) {
			brk_block_end(c, BRK_ERR_READONLY); /* frees argv: nothing after */
			return ADMIT_GONE;
		}
		if (cmd->flags & BRK_CMD_EXEC) {
			brk_multi_reset(c);
		}
		resp_add_error(x->w, BRK_ERR_READONLY);
		c->multi_dirty |= c->multi;
		return ADMIT_REPLIED;
	}
	if (c->multi && (cmd->flags & BRK_CMD_NOMULTI)) {
		resp_add_error(x->w, "ERR Command not allowed inside a transaction");
		stat->rejected++;
		c->multi_dirty = true;
		return ADMIT_REPLIED;
	}
	if (srv->disk_full && brk_cmd_adds_data(cmd, argc, x->argv)) {
		/* Refused (in MULTI: not queued, as Redis' OOM) while the disk is full. */
		char msg[256];
		brk_error_text(srv, srv->disk_full_rc, msg, sizeof(msg));
		resp_add_error(x->w, msg);
		stat->rejected++;
		c->multi_dirty |= c->multi;
		return ADMIT_REPLIED;
	}
	if (c->multi && !(cmd->flags & BRK_CMD_NOQUEUE)) {
		brk_multi_queue(x);
		return ADMIT_REPLIED;
	}
	return ADMIT_RUN;
}

/* ------------------------------------------------------------------------
 * The run: one command whose checks passed, with the bookkeeping of every
 * run (stats, latency histogram, SLOWLOG, MONITOR, held replies, blocking),
 * whether it came as a request, woke from a block, or was queued for EXEC
 * ---------------------------------------------------------------------- */

/* A command EXEC queued runs in EXEC's transaction (x->txn on entry):
 * nothing of its own to commit or undo; EXEC keeps or undoes it all. */
static int
run_in_exec(struct brk_ctx *x, const struct brk_cmd *cmd)
{
	struct storage_txn *t = x->txn;

	x->txn = (cmd->flags & (BRK_CMD_WRITE | BRK_CMD_READONLY)) ? t : NULL;
	x->writes0 = storage_txn_writes(t);
	return cmd->fn(x);
}

/* Runs cmd for x. count: whether this run is counted (false when EXEC runs
 * its transaction again after the map grew, for what it counted before).
 * Returns 1 when the client blocked with no reply yet, 0 when the reply is
 * written; for a command EXEC queued (x->in_exec), a storage error fails
 * EXEC's whole transaction: nothing is replied or counted for it here. */
static int
run_command(struct brk_ctx *x, const struct brk_cmd *cmd, struct brk_cmdstat *stat, size_t mark,
	bool count)
{
	struct brk_server *srv = x->srv;
	struct brk_conn *c = x->c;
	bool queued = x->in_exec, nested = false;
	uint64_t t0, misses0;
	int rc, tries = 0;

	if (!queued) {
		if ((cmd->flags & (BRK_CMD_WRITE | BRK_CMD_READONLY | BRK_CMD_EXEC)) &&
			!reserve_range(c)) {
			resp_add_error(x->w, "ERR out of memory");
			stat->rejected++;
			return 0;
		}
		c->out.limit = brk_conn_obuf_hard(c);
		srv->cmd_ms = brk_now_ms(); /* one time for the whole command, EXEC's included */
	}
	x->may_write = (cmd->flags & BRK_CMD_WRITE) != 0;
	t0 = brk_now_us();
again:
	x->dirty = 0;
	x->blocked = false;
	misses0 = brk_fetch_misses(srv);
	rc = queued ? run_in_exec(x, cmd) : run_handler(x, cmd, &nested);
	if (rc < 0 && queued) {
		return rc; /* EXEC undoes its transaction and says why */
	}
	if (!queued && (rc == ECHD_EWOULDFETCH || brk_fetch_missed(srv, misses0))) {
		/* rows not in memory yet: nothing of it stands (a write ran
		 * nested), whatever it answered (an error made of a miss too);
		 * it waits for them and runs again (fetch.c) */
		resp_buf_truncate(&c->out, mark);
		rc = brk_fetch_park(x);
		if (rc == 0) {
			return 1;
		}
		if (rc == ECHD_ELIMIT) {
			resp_add_error(x->w, "ERR storage-cache-size is too small for this command: "
					     "the rows it reads did not stay in memory until it ran");
			rc = 0;
		}
	}
	if (!queued) {
		c->fetch_rounds = 0;
	}
	if (rc < 0) {
		resp_buf_truncate(&c->out, mark);
		if (!nested && (cmd->flags & BRK_CMD_WRITE) && rc != ECHD_ETOOLONG) {
			/* It may have written half: nothing of this batch stands.
			 * A name too long is found before a command writes (the
			 * handlers check it first), so it fails that one alone. */
			brk_batch_abort(srv, rc);
			mark = c->out.len;
		}
		if (rc == ECHD_EMAPFULL && tries++ < 4) {
			rc = brk_storage_grow(srv);
			mark = c->out.len; /* the commit may have rewritten held replies */
			if (rc == 0) {
				goto again;
			}
		}
		if (rc != 0) {
			if (rc != ECHD_ETOOLONG) {
				echd_log(ECHD_LOG_WARNING, "%s failed: %s", cmd->name,
					echd_strerror(rc));
			}
			brk_reply_error_rc(x, rc);
		}
	}
	t0 = brk_now_us() - t0;
	if (count) {
		srv->stats.total_commands++; /* counted once it ran, as Redis does */
		stat->calls += x->blocked ? 0 : 1; /* a blocked call counts when it answers */
		stat->usec += t0;
	}
	if (x->blocked && c->blk != NULL) {
		c->blk->run_us += t0;
	} else if (!x->blocked && count) {
		uint64_t run = x->from_block && c->blk != NULL ? t0 + c->blk->run_us : t0;
		brk_latency_command(srv, stat, cmd, run);
		if (!(cmd->flags & BRK_CMD_EXEC)) {
			/* EXEC logs the commands it ran instead, as Redis does */
			const struct brk_argv *a =
				x->from_block && c->blk != NULL ? brk_block_argv(c->blk) : NULL;
			brk_slowlog_push(srv, c, cmd, a ? a->argc : x->argc, a ? a->argv : x->argv,
				run);
		}
	}
	if (x->blocked) {
		if (c->out.len == mark) {
			if (!x->from_block) {
				brk_monitor_feed(c, cmd, x->argc, x->argv);
			}
			return 1; /* waiting: no reply yet */
		}
	} else if (x->from_block) {
		brk_unblock(c);
	}
	if (count && c->out.len > mark && c->out.data[mark] == '-') {
		stat->failed++;
		if (queued) {
			/* a runtime error fails only this command's element of EXEC's
			 * reply (an array): errorstats count it here */
			brk_count_reply_error(srv, &c->out, mark);
		}
	}
	if (queued) {
		if (count) {
			brk_monitor_feed(c, cmd, x->argc, x->argv);
		}
		return 0; /* EXEC's own run holds, limits and notes the whole reply */
	}
	if (c->out.over_limit) {
		reply_over_limit(c, mark);
	}
	if ((cmd->flags & (BRK_CMD_WRITE | BRK_CMD_READONLY | BRK_CMD_EXEC)) &&
		(brk_ha_serving(srv) || !(cmd->flags & BRK_CMD_STANDBY))) {
		/* (INFO on a standby used no batch) */
		note_batch_reply(c, mark);
	}
	if (!x->from_block) {
		/* after the reply's range (a monitor sees its own commands);
		 * EXEC after the commands it ran */
		brk_monitor_feed(c, cmd, x->argc, x->argv);
	}
	return 0;
}

static void
ctx_init(struct brk_ctx *x, struct brk_conn *c, int argc, struct resp_arg *argv)
{
	memset(x, 0, sizeof(*x));
	x->srv = c->srv;
	x->c = c;
	x->w = &c->w;
	x->argc = argc;
	x->argv = argv;
}

void
brk_conn_execute(struct brk_conn *c, int argc, struct resp_arg *argv, bool from_block)
{
	struct brk_server *srv = c->srv;
	const struct brk_cmd *cmd = NULL;
	struct brk_cmdstat *stat = NULL;
	struct brk_ctx x;
	size_t mark = c->out.len;

	ctx_init(&x, c, argc, argv);
	x.from_block = from_block;
	c->last_ms = brk_now_ms();
	srv->batch_cmds++;
	switch (admit(&x, &cmd, &stat)) {
	case ADMIT_GONE:
		return;
	case ADMIT_REPLIED:
		break;
	case ADMIT_RUN:
		if (run_command(&x, cmd, stat, mark, true) == 1) {
			return; /* blocked: it replies when it wakes */
		}
		break;
	}
	brk_conn_admit(c); /* AUTH, HELLO AUTH... */
	brk_count_reply_error(srv, &c->out, mark);
	c->batch_replies++;
	brk_conn_mark_held(c);
	if (srv->cfg.obuf_hard > 0) {
		/* Replies wait in out until the batch commits: a pipeline of big
		 * reads would pile up there, unseen by brk_conn_flush()'s check,
		 * so the hard limit counts them too and stops the pipeline. */
		size_t obl = c->bev ? evbuffer_get_length(bufferevent_get_output(c->bev)) : 0;
		if (c->out.len + obl > (size_t)srv->cfg.obuf_hard) {
			check_output_limits(c, c->out.len + obl);
		}
	}
}

int
brk_conn_run_queued(struct brk_conn *c, struct storage_txn *txn, int argc,
	struct resp_arg *argv, bool count, bool *wrote, uint64_t *dirty)
{
	const struct brk_cmd *cmd = brk_cmd_lookup(argv[0].p, argv[0].len);
	struct brk_cmdstat *stat;
	struct brk_ctx x;
	int rc;

	ctx_init(&x, c, argc, argv);
	if (cmd == NULL) {
		reply_unknown(&x); /* not reached: EXEC aborts when one was unknown */
		return 0;
	}
	stat = brk_stat_for(c->srv, cmd, argc, argv);
	/* the rules may have changed since it was queued: Redis checks again */
	if (!acl_permits(c, cmd, stat, argc, argv, true, count)) {
		return 0;
	}
	x.in_exec = true;
	x.txn = txn;
	rc = run_command(&x, cmd, stat, c->out.len, count);
	if (x.dirty > 0 || brk_cmd_wrote(&x)) {
		*wrote = true;
		/* for a WAITAOF later in it */
		c->write_gen = storage_commit_gen(c->srv->st) + 1;
	}
	*dirty += x.dirty;
	return rc;
}

bool
brk_client_attr_valid(const struct resp_arg *a)
{
	for (size_t i = 0; i < a->len; i++) {
		if (a->p[i] < '!' || a->p[i] > '~') {
			return false;
		}
	}
	return true;
}

int
brk_client_attr_set(char **dst, const struct resp_arg *a)
{
	char *v = NULL;

	if (a->len > 0 && (v = echd_strndup(a->p, a->len)) == NULL) {
		return -ENOMEM;
	}
	echd_free(*dst);
	*dst = v;
	return 0;
}

void
brk_conn_describe(struct brk_conn *c, struct resp_buf *b)
{
	uint64_t now = brk_now_ms();
	size_t obl = c->bev ? evbuffer_get_length(bufferevent_get_output(c->bev)) : 0;
	int nsub, npsub, nssub;
	char flags[4];
	size_t nf = 0;

	brk_pubsub_counts(c, &nsub, &npsub, &nssub);
	/* Redis' letters: one for what it is doing, 'e' for NO-EVICT, 'N' for none */
	if (c->flags & BRK_CONN_MONITOR) {
		flags[nf++] = 'O';
	} else if (nsub + npsub + nssub > 0) {
		flags[nf++] = 'P';
	} else if (c->blk) {
		flags[nf++] = 'b';
	} else if (c->multi) {
		flags[nf++] = 'x';
	}
	if (c->flags & BRK_CONN_NO_EVICT) {
		flags[nf++] = 'e';
	}
	if (nf == 0) {
		flags[nf++] = 'N';
	}
	flags[nf] = '\0';
	/* Names and lib-name/lib-ver are limited only by proto-max-bulk-len:
	 * resp_buf_printf() formats a line of any length. */
	resp_buf_printf(b,
		"id=%llu addr=%s laddr=%s fd=%d name=%s age=%llu idle=%llu flags=%s db=%u sub=%d "
		"psub=%d ssub=%d multi=%d qbuf=%zu qbuf-free=%zu argv-mem=0 multi-mem=0 rbs=%zu "
		"rbp=0 obl=%zu oll=0 omem=%zu tot-mem=%zu events=r cmd=%s user=%s redir=-1 "
		"resp=%d lib-name=%s lib-ver=%s\n",
		(unsigned long long)c->id, c->addr, c->laddr, c->fd, c->name ? c->name : "",
		(unsigned long long)((now - c->ctime_ms) / 1000),
		(unsigned long long)((now - c->last_ms) / 1000), flags, c->db, nsub, npsub, nssub, c->multi ? c->nqueue : -1,
		resp_reader_pending(c->rd),
		resp_reader_capacity(c->rd) - resp_reader_pending(c->rd),
		resp_reader_capacity(c->rd), c->out.len, obl,
		sizeof(*c) + resp_reader_capacity(c->rd) + c->out.cap + obl,
		c->last_cmd[0] ? c->last_cmd : "NULL", c->user ? brk_user_name(c->user) : "default",
		c->resp, c->lib_name ? c->lib_name : "", c->lib_ver ? c->lib_ver : "");
}
