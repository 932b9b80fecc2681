/* cmd_generic.c - connection and keyspace commands. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "broker.h"

static struct st_buf
arg_buf(const struct resp_arg *a)
{
	struct st_buf b = {a->p, a->len};
	return b;
}

int
brk_cmd_ping(struct brk_ctx *x)
{
	if (x->argc > 2) {
		resp_add_error(x->w, "ERR wrong number of arguments for 'ping' command");
		return 0;
	}
	if (x->c->resp == 2 && brk_pubsub_subscriptions(x->c) > 0) {
		/* in a RESP2 subscribed context a reply looks like a message */
		resp_add_array(x->w, 2);
		resp_add_bulk_cstr(x->w, "pong");
		resp_add_bulk(x->w, x->argc == 2 ? x->argv[1].p : "", x->argc == 2 ? x->argv[1].len : 0);
	} else if (x->argc == 2) {
		resp_add_bulk(x->w, x->argv[1].p, x->argv[1].len);
	} else {
		resp_add_simple(x->w, "PONG");
	}
	return 0;
}

int
brk_cmd_echo(struct brk_ctx *x)
{
	resp_add_bulk(x->w, x->argv[1].p, x->argv[1].len);
	return 0;
}

int
brk_cmd_hello(struct brk_ctx *x)
{
	struct brk_conn *c = x->c;
	long long ver = c->resp;
	int i = 2;

	if (x->argc >= 2) {
		if (!brk_str2ll(x->argv[1].p, x->argv[1].len, &ver)) {
			resp_add_error(x->w, "ERR Protocol version is not an integer or out of range");
			return 0;
		}
		if (ver < 2 || ver > 3) {
			resp_add_error(x->w, "NOPROTO unsupported protocol version");
			return 0;
		}
	}
	/* As Redis 7.0 (the oracle): each option takes effect as it is read,
	 * so a syntax error after AUTH or SETNAME leaves the login or name. */
	for (; i < x->argc; i++) {
		int more = x->argc - i - 1;
		if (brk_arg_eq(&x->argv[i], "AUTH") && more >= 2) {
			if (brk_auth_login(x, &x->argv[i + 1], &x->argv[i + 2]) != 0) {
				return 0;
			}
			i += 2;
		} else if (brk_arg_eq(&x->argv[i], "SETNAME") && more >= 1) {
			if (!brk_client_attr_valid(&x->argv[i + 1])) {
				resp_add_error(x->w, "ERR Client names cannot contain spaces, newlines "
						     "or special characters.");
				return 0;
			}
			if (brk_client_attr_set(&c->name, &x->argv[i + 1]) != 0) {
				return -ENOMEM;
			}
			i++;
		} else {
			resp_add_errorf(x->w, "ERR Syntax error in HELLO option '%.*s'",
				(int)x->argv[i].len, x->argv[i].p);
			return 0;
		}
	}
	if (c->user == NULL) {
		resp_add_error(x->w, "NOAUTH HELLO must be called with the client already "
				     "authenticated, otherwise the HELLO <proto> AUTH <user> <pass> "
				     "option can be used to authenticate the client and select the RESP "
				     "protocol version at the same time");
		return 0;
	}
	c->resp = (int)ver;
	c->w.proto = (int)ver;
	resp_add_map(x->w, 7);
	resp_add_bulk_cstr(x->w, "server");
	resp_add_bulk_cstr(x->w, "redis");
	resp_add_bulk_cstr(x->w, "version");
	resp_add_bulk_cstr(x->w, ECHD_REDIS_VERSION);
	resp_add_bulk_cstr(x->w, "proto");
	resp_add_int(x->w, ver);
	resp_add_bulk_cstr(x->w, "id");
	resp_add_int(x->w, (long long)c->id);
	resp_add_bulk_cstr(x->w, "mode");
	resp_add_bulk_cstr(x->w, "standalone");
	resp_add_bulk_cstr(x->w, "role");
	resp_add_bulk_cstr(x->w, brk_ha_serving(x->srv) ? "master" : "replica");
	resp_add_bulk_cstr(x->w, "modules");
	resp_add_array(x->w, 0);
	return 0;
}

int
brk_cmd_quit(struct brk_ctx *x)
{
	resp_add_simple(x->w, "OK");
	x->c->flags |= BRK_CONN_CLOSE_AFTER_REPLY;
	return 0;
}

int
brk_cmd_reset(struct brk_ctx *x)
{
	struct brk_conn *c = x->c;

	brk_multi_reset(c);
	brk_monitor_remove(c);
	brk_pubsub_leave_all(c);
	c->user = brk_acl_nopass_default(x->srv) ? brk_acl_find(x->srv, "default", 7) : NULL;
	c->db = 0;
	c->resp = 2;
	c->w.proto = 2;
	c->flags &= ~(unsigned)BRK_CONN_NO_EVICT;
	ECHD_FREE(c->name);
	resp_add_simple(x->w, "RESET");
	return 0;
}

/* Reads a database index as SELECT and MOVE do; replies the error and
 * returns false when it is not one. */
static bool
db_index_arg(struct brk_ctx *x, const struct resp_arg *a, unsigned *out)
{
	long long db;

	if (!brk_str2ll(a->p, a->len, &db)) {
		resp_add_error(x->w, BRK_ERR_NOTINT);
		return false;
	}
	if (db < INT_MIN || db > INT_MAX) {
		/* Redis reads the index as an int first */
		resp_add_errorf(x->w, "ERR value is out of range, value must between %d and %d",
			INT_MIN, INT_MAX);
		return false;
	}
	if (x->srv->cluster != NULL && db != 0) {
		/* a cluster has database 0 only (MOVE is refused before it asks) */
		resp_add_error(x->w, "ERR SELECT is not allowed in cluster mode");
		return false;
	}
	if (db < 0 || db >= x->srv->cfg.databases) {
		resp_add_error(x->w, "ERR DB index is out of range");
		return false;
	}
	*out = (unsigned)db;
	return true;
}

int
brk_cmd_select(struct brk_ctx *x)
{
	unsigned db;

	if (db_index_arg(x, &x->argv[1], &db)) {
		x->c->db = db;
		resp_add_simple(x->w, "OK");
	}
	return 0;
}

int
brk_cmd_dbsize(struct brk_ctx *x)
{
	uint64_t n;
	int rc = stream_db_size(x->txn, x->c->db, &n);

	if (rc != 0) {
		return rc;
	}
	resp_add_int(x->w, (long long)n);
	return 0;
}

int
brk_cmd_time(struct brk_ctx *x)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	resp_add_array(x->w, 2);
	resp_add_bulk_ll(x->w, (long long)ts.tv_sec);
	resp_add_bulk_ll(x->w, (long long)(ts.tv_nsec / 1000));
	return 0;
}

int
brk_cmd_del(struct brk_ctx *x)
{
	long long n = 0;

	for (int i = 1; i < x->argc; i++) {
		struct st_buf k = arg_buf(&x->argv[i]);
		struct stream_meta m;
		int rc = brk_lookup(x, &k, &m); /* an expired key is not counted */
		if (rc == 0) {
			rc = stream_delete(x->txn, x->c->db, &k);
		}
		if (rc == ECHD_ENOTFOUND) {
			continue;
		}
		if (rc != 0) {
			return rc;
		}
		n++;
		brk_signal_key(x->srv, x->c->db, k.data, k.len);
	}
	if (n > 0) {
		x->srv->gc_pending = true;
	}
	x->dirty += (uint64_t)n;
	resp_add_int(x->w, n);
	return 0;
}

int
brk_cmd_exists(struct brk_ctx *x)
{
	long long n = 0;

	for (int i = 1; i < x->argc; i++) {
		struct st_buf k = arg_buf(&x->argv[i]);
		struct stream_meta m;
		int rc = brk_lookup(x, &k, &m);
		if (rc == 0) {
			n++;
		} else if (rc != ECHD_ENOTFOUND) {
			return rc;
		}
	}
	resp_add_int(x->w, n);
	return 0;
}

int
brk_cmd_type(struct brk_ctx *x)
{
	struct st_buf k = arg_buf(&x->argv[1]);
	struct stream_meta m;
	int rc = brk_lookup(x, &k, &m);

	if (rc != 0 && rc != ECHD_ENOTFOUND) {
		return rc;
	}
	resp_add_simple(x->w, rc == 0 ? "stream" : "none");
	return 0;
}

struct keys_walk {
	struct resp_writer *w;
	const struct resp_arg *pattern; /* NULL: every key */
	size_t n;
};

static int
keys_cb(const struct st_buf *name, void *ud)
{
	struct keys_walk *kw = ud;

	if (kw->pattern != NULL &&
		!brk_glob_match(kw->pattern->p, kw->pattern->len, name->data, name->len, false)) {
		return 0;
	}
	resp_add_bulk(kw->w, name->data, name->len);
	kw->n++;
	return 0;
}

int
brk_cmd_keys(struct brk_ctx *x)
{
	struct keys_walk kw = {x->w, &x->argv[1], 0};
	uint64_t cursor = 0;
	size_t h;
	int rc;

	if (x->argv[1].len == 1 && x->argv[1].p[0] == '*') {
		kw.pattern = NULL;
	}
	h = resp_add_deferred(x->w);
	rc = stream_scan(x->txn, x->c->db, x->srv->cmd_ms, &cursor, UINT32_MAX, keys_cb, &kw);
	if (rc != 0) {
		return rc;
	}
	resp_set_deferred_len(x->w, h, '*', kw.n);
	return 0;
}

int
brk_cmd_scan(struct brk_ctx *x)
{
	struct resp_buf keys;
	struct resp_writer kwr;
	struct keys_walk kw = {&kwr, NULL, 0};
	const struct resp_arg *type = NULL;
	uint64_t cur = 0;
	long long count = 10;
	uint64_t cursor;
	int rc = 0;

	if (!echd_str2ull(x->argv[1].p, x->argv[1].len, &cur)) {
		resp_add_error(x->w, "ERR invalid cursor");
		return 0;
	}
	for (int i = 2; i < x->argc; i++) {
		int more = x->argc - i - 1;
		if (brk_arg_eq(&x->argv[i], "COUNT") && more >= 1) {
			if (!brk_arg_ll(x, &x->argv[i + 1], &count)) {
				return 0;
			}
			if (count < 1) {
				resp_add_error(x->w, BRK_ERR_SYNTAX);
				return 0;
			}
			i++;
		} else if (brk_arg_eq(&x->argv[i], "MATCH") && more >= 1) {
			kw.pattern = &x->argv[i + 1];
			if (kw.pattern->len == 1 && kw.pattern->p[0] == '*') {
				kw.pattern = NULL;
			}
			i++;
		} else if (brk_arg_eq(&x->argv[i], "TYPE") && more >= 1) {
			type = &x->argv[i + 1];
			i++;
		} else if (brk_arg_eq(&x->argv[i], "NOVALUES")) {
			resp_add_error(x->w, "ERR NOVALUES option can only be used in HSCAN");
			return 0;
		} else {
			resp_add_error(x->w, BRK_ERR_SYNTAX);
			return 0;
		}
	}
	/* The cursor comes first in the reply but is known last: collect the
	 * keys aside. */
	resp_buf_init(&keys);
	kwr.out = &keys;
	kwr.proto = x->w->proto;
	cursor = cur;
	if (type != NULL && !brk_arg_eq(type, "stream")) {
		cursor = 0; /* only streams exist */
	} else {
		rc = stream_scan(x->txn, x->c->db, x->srv->cmd_ms, &cursor,
			count > UINT32_MAX ? UINT32_MAX : (unsigned)count, keys_cb, &kw);
	}
	if (rc == 0 && keys.oom) {
		rc = -ENOMEM; /* fewer keys than counted */
	}
	if (rc == 0) {
		char cbuf[24];
		int n = snprintf(cbuf, sizeof(cbuf), "%llu", (unsigned long long)cursor);
		resp_add_array(x->w, 2);
		resp_add_bulk(x->w, cbuf, (size_t)n);
		resp_add_array(x->w, kw.n);
		resp_buf_append(x->w->out, keys.data, keys.len);
	}
	resp_buf_finish(&keys);
	return rc;
}

static int
do_rename(struct brk_ctx *x, bool nx)
{
	struct st_buf from = arg_buf(&x->argv[1]), to = arg_buf(&x->argv[2]);
	struct stream_meta m;
	int rc;

	rc = brk_lookup(x, &from, &m);
	if (rc == ECHD_ENOTFOUND) {
		resp_add_error(x->w, "ERR no such key");
		return 0;
	}
	if (rc != 0) {
		return rc;
	}
	if (nx) {
		struct stream_meta d;
		rc = brk_lookup(x, &to, &d);
		if (rc == 0) {
			resp_add_int(x->w, 0);
			return 0;
		}
		if (rc != ECHD_ENOTFOUND) {
			return rc;
		}
	}
	rc = stream_rename(x->txn, x->c->db, &from, &to);
	if (rc != 0) {
		return rc;
	}
	x->srv->gc_pending = true;
	x->dirty++;
	brk_signal_key(x->srv, x->c->db, from.data, from.len);
	brk_signal_key(x->srv, x->c->db, to.data, to.len);
	brk_policy_rescan(x->srv);
	if (nx) {
		resp_add_int(x->w, 1);
	} else {
		resp_add_simple(x->w, "OK");
	}
	return 0;
}

int
brk_cmd_rename(struct brk_ctx *x)
{
	return do_rename(x, false);
}

int
brk_cmd_renamenx(struct brk_ctx *x)
{
	return do_rename(x, true);
}

int
brk_cmd_move(struct brk_ctx *x)
{
	struct st_buf k = arg_buf(&x->argv[1]);
	struct stream_meta m, there;
	unsigned db;
	int rc;

	if (x->srv->cluster != NULL) {
		resp_add_error(x->w, "ERR MOVE is not allowed in cluster mode");
		return 0;
	}
	/* Redis' order: the index, the same database, then the keys */
	if (!db_index_arg(x, &x->argv[2], &db)) {
		return 0;
	}
	if (db == x->c->db) {
		resp_add_error(x->w, "ERR source and destination objects are the same");
		return 0;
	}
	rc = brk_lookup(x, &k, &m);
	if (rc == 0) {
		rc = brk_lookup_in(x, db, &k, &there);
		if (rc == 0) {
			resp_add_int(x->w, 0); /* the name is taken there */
			return 0;
		}
		if (rc == ECHD_ENOTFOUND) {
			rc = stream_move(x->txn, x->c->db, &k, db);
		}
	}
	if (rc == ECHD_ENOTFOUND) {
		resp_add_int(x->w, 0);
		return 0;
	}
	if (rc != 0) {
		return rc;
	}
	x->dirty++;
	brk_signal_key(x->srv, x->c->db, k.data, k.len);
	brk_signal_key(x->srv, db, k.data, k.len);
	brk_policy_rescan(x->srv);
	resp_add_int(x->w, 1);
	return 0;
}

int
brk_cmd_copy(struct brk_ctx *x)
{
	struct st_buf from = arg_buf(&x->argv[1]), to = arg_buf(&x->argv[2]);
	struct stream_meta m, there, copy;
	unsigned db = x->c->db;
	bool replace = false;
	int rc;

	for (int i = 3; i < x->argc; i++) {
		if (brk_arg_eq(&x->argv[i], "REPLACE")) {
			replace = true;
		} else if (brk_arg_eq(&x->argv[i], "DB") && i + 1 < x->argc) {
			/* Redis reads a long here, not an int: any other number is out of range */
			long long n;
			if (!brk_str2ll(x->argv[i + 1].p, x->argv[i + 1].len, &n)) {
				resp_add_error(x->w, BRK_ERR_NOTINT);
				return 0;
			}
			if (n < 0 || n >= x->srv->cfg.databases) {
				resp_add_error(x->w, "ERR DB index is out of range");
				return 0;
			}
			db = (unsigned)n;
			i++;
		} else {
			resp_add_error(x->w, BRK_ERR_SYNTAX);
			return 0;
		}
	}
	if (x->srv->cluster != NULL && (x->c->db != 0 || db != 0)) {
		resp_add_error(x->w, "ERR Copying to another database is not allowed in cluster mode");
		return 0;
	}
	if (db == x->c->db && from.len == to.len && memcmp(from.data, to.data, from.len) == 0) {
		resp_add_error(x->w, "ERR source and destination objects are the same");
		return 0;
	}
	rc = brk_lookup(x, &from, &m);
	if (rc == ECHD_ENOTFOUND) {
		resp_add_int(x->w, 0);
		return 0;
	}
	if (rc != 0) {
		return rc;
	}
	rc = brk_lookup_in(x, db, &to, &there);
	if (rc == 0) {
		if (!replace) {
			resp_add_int(x->w, 0);
			return 0;
		}
		rc = stream_delete(x->txn, db, &to);
		x->srv->gc_pending = true;
	} else if (rc == ECHD_ENOTFOUND) {
		rc = 0;
	}
	if (rc == 0) {
		rc = stream_copy(x->txn, x->c->db, &from, db, &to, &copy);
	}
	if (rc == 0 && m.groups > 0) {
		rc = group_copy(x->txn, &m, &copy);
	}
	if (rc != 0) {
		return rc;
	}
	x->dirty++;
	brk_signal_key(x->srv, db, to.data, to.len);
	if (m.groups > 0) {
		brk_policy_rescan(x->srv);
	}
	resp_add_int(x->w, 1);
	return 0;
}

static int
do_flush(struct brk_ctx *x, bool all)
{
	int rc;

	if (x->argc > 2 || (x->argc == 2 && !brk_arg_eq(&x->argv[1], "ASYNC") &&
				   !brk_arg_eq(&x->argv[1], "SYNC"))) {
		resp_add_error(x->w, BRK_ERR_SYNTAX);
		return 0;
	}
	rc = brk_watch_flush(x->srv, x->txn, x->c->db, all);
	if (rc == 0) {
		rc = stream_flush(x->txn, x->c->db, all);
	}
	if (rc != 0) {
		return rc;
	}
	x->srv->gc_pending = true;
	x->dirty++;
	brk_seen_clear(x->srv); /* consumer ids may start again */
	brk_signal_db(x->srv, x->c->db, all);
	resp_add_simple(x->w, "OK");
	return 0;
}

int
brk_cmd_flushdb(struct brk_ctx *x)
{
	return do_flush(x, false);
}

int
brk_cmd_flushall(struct brk_ctx *x)
{
	return do_flush(x, true);
}

int
brk_cmd_shutdown(struct brk_ctx *x)
{
	for (int i = 1; i < x->argc; i++) {
		if (brk_arg_eq(&x->argv[i], "ABORT")) {
			resp_add_error(x->w, "ERR No shutdown in progress.");
			return 0;
		}
		if (!brk_arg_eq(&x->argv[i], "NOSAVE") && !brk_arg_eq(&x->argv[i], "SAVE") &&
			!brk_arg_eq(&x->argv[i], "NOW") && !brk_arg_eq(&x->argv[i], "FORCE")) {
			resp_add_error(x->w, BRK_ERR_SYNTAX);
			return 0;
		}
	}
	echd_log(ECHD_LOG_WARNING, "User requested shutdown...");
	x->srv->shutdown = true;
	event_base_loopbreak(x->srv->base);
	/* Like Redis, no reply: the connection closes as the server exits. */
	brk_conn_close_asap(x->c);
	x->blocked = true;
	return 0;
}

int
brk_cmd_lastsave(struct brk_ctx *x)
{
	uint64_t t = x->srv->stats.last_commit_ms ? x->srv->stats.last_commit_ms
						   : x->srv->stats.start_ms;
	resp_add_int(x->w, (long long)(t / 1000));
	return 0;
}

int
brk_cmd_save(struct brk_ctx *x)
{
	/* Every acknowledged write is already durable in LMDB. */
	if (brk_arg_eq(&x->argv[0], "bgsave")) {
		/* BGSAVE [SCHEDULE], as Redis parses it */
		if (x->argc > 2 || (x->argc == 2 && !brk_arg_eq(&x->argv[1], "SCHEDULE"))) {
			resp_add_error(x->w, BRK_ERR_SYNTAX);
			return 0;
		}
		resp_add_simple(x->w, "Background saving started");
	} else {
		resp_add_simple(x->w, "OK");
	}
	return 0;
}

/* WAIT numreplicas timeout. echd has no replicas, so none is ever reached:
 * asking for one blocks until the timeout (0: for ever), as Redis does
 * without replicas, and answers 0. */
int
brk_cmd_wait(struct brk_ctx *x)
{
	long long want, timeout;

	if (!brk_arg_ll(x, &x->argv[1], &want) || !brk_arg_timeout(x, &x->argv[2], &timeout)) {
		return 0;
	}
	if (want <= 0 || x->in_exec) {
		resp_add_int(x->w, 0);
		return 0;
	}
	return brk_block_wait(x, BRK_BLOCK_WAIT, false, (uint64_t)timeout);
}

/* WAITAOF numlocal numreplicas timeout. The LMDB environment is echd's
 * append-only file, always on: the local count is 1 once the connection's
 * writes are durable (brk_waitaof_local), and replicas, as for WAIT, never
 * come. */
int
brk_cmd_waitaof(struct brk_ctx *x)
{
	long long local, replicas, timeout;

	if (!brk_arg_ll(x, &x->argv[1], &local)) {
		return 0;
	}
	if (local < 0 || local > 1) {
		resp_add_error(x->w, "ERR value is out of range, value must between 0 and 1");
		return 0;
	}
	if (!brk_str2ll(x->argv[2].p, x->argv[2].len, &replicas) || replicas < 0) {
		resp_add_error(x->w, "ERR value is out of range, must be positive");
		return 0;
	}
	if (!brk_arg_timeout(x, &x->argv[3], &timeout)) {
		return 0;
	}
	if (replicas == 0 || x->in_exec) {
		/* inside MULTI nothing waits: the count is what is durable now */
		resp_add_array(x->w, 2);
		resp_add_int(x->w, brk_waitaof_local(x->c, local == 1 && !x->in_exec));
		resp_add_int(x->w, 0);
		return 0;
	}
	return brk_block_wait(x, BRK_BLOCK_WAITAOF, local == 1, (uint64_t)timeout);
}

/* ---- expiry ------------------------------------------------------------- */

#define EXPIRE_NX 1
#define EXPIRE_XX 2
#define EXPIRE_GT 4
#define EXPIRE_LT 8

/* EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT: Redis' expireGenericCommand, its
 * checks in its order. base_ms is now for the relative forms, 0 for the
 * absolute; unit_ms 1000 for seconds. */
static int
expire_generic(struct brk_ctx *x, const char *name, uint64_t base_ms, long long unit_ms)
{
	struct st_buf k = arg_buf(&x->argv[1]);
	struct stream_meta m;
	unsigned flags = 0;
	long long when;
	int rc;

	for (int i = 3; i < x->argc; i++) {
		const struct resp_arg *a = &x->argv[i];
		if (brk_arg_eq(a, "NX")) {
			flags |= EXPIRE_NX;
		} else if (brk_arg_eq(a, "XX")) {
			flags |= EXPIRE_XX;
		} else if (brk_arg_eq(a, "GT")) {
			flags |= EXPIRE_GT;
		} else if (brk_arg_eq(a, "LT")) {
			flags |= EXPIRE_LT;
		} else {
			resp_add_errorf(x->w, "ERR Unsupported option %.*s", (int)a->len, a->p);
			return 0;
		}
	}
	if ((flags & EXPIRE_NX) && (flags & (EXPIRE_XX | EXPIRE_GT | EXPIRE_LT))) {
		resp_add_error(x->w, "ERR NX and XX, GT or LT options at the same time are not "
				     "compatible");
		return 0;
	}
	if ((flags & EXPIRE_GT) && (flags & EXPIRE_LT)) {
		resp_add_error(x->w, "ERR GT and LT options at the same time are not compatible");
		return 0;
	}
	if (!brk_arg_ll(x, &x->argv[2], &when)) {
		return 0;
	}
	if ((unit_ms > 1 && (when > LLONG_MAX / unit_ms || when < LLONG_MIN / unit_ms)) ||
		(when * unit_ms > LLONG_MAX - (long long)base_ms)) {
		resp_add_errorf(x->w, "ERR invalid expire time in '%s' command", name);
		return 0;
	}
	when = when * unit_ms + (long long)base_ms;

	rc = brk_lookup(x, &k, &m);
	if (rc == ECHD_ENOTFOUND) {
		resp_add_int(x->w, 0);
		return 0;
	}
	if (rc != 0) {
		return rc;
	}
	/* no expiry counts as for ever: GT always fails, LT always passes */
	if (((flags & EXPIRE_NX) && m.expire_ms != 0) ||
		((flags & EXPIRE_XX) && m.expire_ms == 0) ||
		((flags & EXPIRE_GT) && (m.expire_ms == 0 || when <= (long long)m.expire_ms)) ||
		((flags & EXPIRE_LT) && m.expire_ms != 0 && when >= (long long)m.expire_ms)) {
		resp_add_int(x->w, 0);
		return 0;
	}
	if (when <= (long long)x->srv->cmd_ms) {
		/* already past: the key goes now, as a DEL would */
		rc = stream_delete(x->txn, x->c->db, &k);
		if (rc != 0) {
			return rc;
		}
		x->srv->gc_pending = true;
	} else {
		rc = stream_set_expire(x->txn, x->c->db, &k, &m, (uint64_t)when);
		if (rc != 0) {
			return rc;
		}
		brk_expire_note(x->srv, (uint64_t)when);
	}
	brk_signal_key(x->srv, x->c->db, k.data, k.len);
	x->dirty++;
	resp_add_int(x->w, 1);
	return 0;
}

int
brk_cmd_expire(struct brk_ctx *x)
{
	return expire_generic(x, "expire", x->srv->cmd_ms, 1000);
}

int
brk_cmd_pexpire(struct brk_ctx *x)
{
	return expire_generic(x, "pexpire", x->srv->cmd_ms, 1);
}

int
brk_cmd_expireat(struct brk_ctx *x)
{
	return expire_generic(x, "expireat", 0, 1000);
}

int
brk_cmd_pexpireat(struct brk_ctx *x)
{
	return expire_generic(x, "pexpireat", 0, 1);
}

/* TTL, PTTL, EXPIRETIME, PEXPIRETIME: Redis' ttlGenericCommand. */
static int
ttl_generic(struct brk_ctx *x, bool ms, bool absolute)
{
	struct st_buf k = arg_buf(&x->argv[1]);
	struct stream_meta m;
	long long ttl;
	int rc = brk_lookup(x, &k, &m);

	if (rc == ECHD_ENOTFOUND) {
		resp_add_int(x->w, -2);
		return 0;
	}
	if (rc != 0) {
		return rc;
	}
	if (m.expire_ms == 0) {
		resp_add_int(x->w, -1);
		return 0;
	}
	ttl = absolute ? (long long)m.expire_ms : (long long)(m.expire_ms - x->srv->cmd_ms);
	resp_add_int(x->w, ms ? ttl : (ttl + 500) / 1000);
	return 0;
}

int
brk_cmd_ttl(struct brk_ctx *x)
{
	return ttl_generic(x, false, false);
}

int
brk_cmd_pttl(struct brk_ctx *x)
{
	return ttl_generic(x, true, false);
}

int
brk_cmd_expiretime(struct brk_ctx *x)
{
	return ttl_generic(x, false, true);
}

int
brk_cmd_pexpiretime(struct brk_ctx *x)
{
	return ttl_generic(x, true, true);
}

int
brk_cmd_persist(struct brk_ctx *x)
{
	struct st_buf k = arg_buf(&x->argv[1]);
	struct stream_meta m;
	int rc = brk_lookup(x, &k, &m);

	if (rc == ECHD_ENOTFOUND || (rc == 0 && m.expire_ms == 0)) {
		resp_add_int(x->w, 0);
		return 0;
	}
	if (rc == 0) {
		rc = stream_set_expire(x->txn, x->c->db, &k, &m, 0);
	}
	if (rc != 0) {
		return rc;
	}
	brk_signal_key(x->srv, x->c->db, k.data, k.len);
	x->dirty++;
	resp_add_int(x->w, 1);
	return 0;
}

int
brk_cmd_touch(struct brk_ctx *x)
{
	return brk_cmd_exists(x); /* echd keeps no access times to update */
}

/* splitmix64: RANDOMKEY needs spread, not secrecy. */
static uint64_t
next_random(struct brk_server *srv)
{
	uint64_t z;

	if (srv->rnd == 0) {
		srv->rnd = brk_now_us() ^ ((uint64_t)getpid() << 32);
	}
	z = (srv->rnd += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static int
randomkey_cb(const struct st_buf *name, void *ud)
{
	resp_add_bulk(ud, name->data, name->len);
	return 0;
}

int
brk_cmd_randomkey(struct brk_ctx *x)
{
	int rc = stream_random_key(x->txn, x->c->db, x->srv->cmd_ms, next_random(x->srv),
		randomkey_cb, x->w);

	if (rc == ECHD_ENOTFOUND) {
		resp_add_null(x->w);
		return 0;
	}
	return rc;
}

static const char *const object_help[] = {
	"OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
	"ENCODING <key>",
	"    Return the kind of internal representation used in order to store the value",
	"    associated with a <key>.",
	"FREQ <key>",
	"    Return the access logarithmic access frequency counter associated with a <key>.",
	"    echd tracks no access frequency: an error for a key that exists.",
	"REFCOUNT <key>",
	"    Return the number of references of the value associated with the specified",
	"    <key>.",
	"HELP",
	"    Print this help.",
};

int
brk_cmd_object(struct brk_ctx *x)
{
	const struct resp_arg *sub = &x->argv[1];
	struct st_buf k;
	struct stream_meta m;
	int rc;

	/* brk_subcommand_ok() checked the name and the arity */
	if (brk_arg_eq(sub, "HELP")) {
		BRK_REPLY_HELP(x->w, object_help);
		return 0;
	}
	k = arg_buf(&x->argv[2]);
	rc = brk_lookup(x, &k, &m);
	if (rc == ECHD_ENOTFOUND) {
		resp_add_null(x->w);
		return 0;
	}
	if (rc != 0) {
		return rc;
	}
	if (brk_arg_eq(sub, "ENCODING")) {
		resp_add_bulk_cstr(x->w, "stream");
	} else if (brk_arg_eq(sub, "REFCOUNT")) {
		resp_add_int(x->w, 1);
	} else if (brk_arg_eq(sub, "FREQ")) {
		/* Redis' reply without an LFU maxmemory-policy; echd has none */
		resp_add_error(x->w, "ERR An LFU maxmemory policy is not selected, access frequency "
				     "not tracked. Please note that when switching between policies at "
				     "runtime LRU and LFU data will take some time to adjust.");
	} else {
		brk_reply_subcommand_syntax(x, "OBJECT");
	}
	return 0;
}

static const char *const memory_help[] = {
	"MEMORY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
	"USAGE <key> [SAMPLES <count>]",
	"    Return the bytes that <key> and its value take in storage (echd keeps streams",
	"    on disk). Nested values are sampled up to <count> times (default: 5, 0 means",
	"    sample all).",
	"HELP",
	"    Print this help.",
};

/* Redis' default of MEMORY USAGE's SAMPLES (OBJ_COMPUTE_SIZE_DEF_SAMPLES). */
#define MEMORY_USAGE_SAMPLES 5

int
brk_cmd_memory(struct brk_ctx *x)
{
	const struct resp_arg *sub = &x->argv[1];
	long long samples = MEMORY_USAGE_SAMPLES;
	uint64_t bytes, gbytes = 0;
	struct st_buf k;
	struct stream_meta m;
	int rc;

	if (brk_arg_eq(sub, "HELP")) {
		BRK_REPLY_HELP(x->w, memory_help);
		return 0;
	}
	if (!brk_arg_eq(sub, "USAGE")) {
		brk_reply_subcommand_syntax(x, "MEMORY");
		return 0;
	}
	for (int i = 3; i < x->argc; i++) {
		if (brk_arg_eq(&x->argv[i], "SAMPLES") && i + 1 < x->argc) {
			if (!brk_arg_ll(x, &x->argv[i + 1], &samples)) {
				return 0;
			}
			if (samples < 0) {
				resp_add_error(x->w, BRK_ERR_SYNTAX);
				return 0;
			}
			i++;
		} else {
			resp_add_error(x->w, BRK_ERR_SYNTAX);
			return 0;
		}
	}
	k = arg_buf(&x->argv[2]);
	rc = brk_lookup(x, &k, &m);
	if (rc == ECHD_ENOTFOUND) {
		resp_add_null(x->w);
		return 0;
	}
	if (rc == 0) {
		rc = stream_usage(x->txn, x->c->db, &k, &m, (uint64_t)samples, &bytes);
	}
	if (rc == 0 && m.groups > 0) {
		rc = group_usage(x->txn, &m, &gbytes);
	}
	if (rc != 0) {
		return rc;
	}
	resp_add_int(x->w, (long long)(bytes + gbytes > LLONG_MAX ? LLONG_MAX : bytes + gbytes));
	return 0;
}
