/* api.c - the JSON API under /api/ that the console (console.c) and scripts
 * use: the server, its streams, a stream's groups, a group's consumers and
 * pending entries, one entry, the groups' lag/pending history, and the
 * actions (XACK, XCLAIM, XGROUP DELCONSUMER, XNACK).
 *
 * The promises kept here: a user sees what RESP would show it (the
 * equivalent command allowed by its ACL, the key matching its patterns);
 * one request does bounded work (pages of at most http-api-max-page items,
 * each from metadata rows: per group group_lag(), as XINFO GROUPS); an
 * action changes nothing before its reply says so durably.
 *
 * Actions. An action runs as the RESP command it stands for, on a RESP
 * connection of its own made over a socketpair (action_start()): the
 * dispatcher then does everything a RESP client gets -- ACL (the user's
 * command and key permissions), MULTI-free execution in the turn's batch,
 * stats, MONITOR, waking blocked readers -- and, above all, holds the reply
 * until the batch's commit is durable (commit.c), so the HTTP answer, which
 * is sent when that reply arrives on our end of the socketpair, is never
 * sent for a change that could still be lost. Re-implementing XACK & co.
 * here, or holding an HTTP reply on commit generations, would duplicate
 * that discipline; two file descriptors per action (rare, human-driven)
 * are the price. Actions come only as POST with the CSRF token GET
 * /api/server gives (an HMAC of the user name under a per-process secret,
 * sent back in the X-CSRF-Token header), and are refused when the listener
 * is plain HTTP bound beyond loopback (credentials and tokens in clear).
 *
 * History. A sampler (every http-sample-interval seconds, TURN_KEYS keys a
 * loop turn) records each group's lag and pending count into a ring of an
 * hour's points, for at most http-sample-max-groups groups, so a chart has
 * its hour as soon as the page opens. Rings of groups gone are dropped at
 * the end of each pass.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <openssl/crypto.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "broker.h"
#include "commands.h"
#include "http.h"

#define JSON "application/json; charset=utf-8"
/* Keys one loop turn of the sampler visits. */
#define TURN_KEYS 128
/* The history kept: an hour. */
#define HISTORY_MS (3600 * 1000ULL)

struct point {
	uint64_t t_ms;
	int64_t lag;
	uint64_t pending;
};

/* One group's history: a ring of npoints points. */
struct ring {
	unsigned db;
	char *stream, *group; /* owned */
	size_t slen, glen;
	uint64_t seen_pass;   /* the last pass that saw the group */
	unsigned head, n, cap;
	struct point *pts;    /* owned, cap of them */
};

struct action;

struct brk_api {
	struct brk_server *srv;
	unsigned char secret[32];   /* CSRF tokens' key */
	/* the sampler */
	struct event *sample_timer, *sample_turn;
	struct ring **rings;
	size_t nrings;
	uint64_t pass;
	unsigned db;
	uint64_t cursor;
	uint64_t now_ms;
	struct storage_txn *t;
	bool walking;
	struct action *actions;     /* in flight, owned */
};

/* ---- JSON and parameters ------------------------------------------------ */

/* A JSON string. A byte that is not UTF-8 becomes U+00XX (the name is then
 * shown, not sent back byte for byte: binary names are out of the
 * console's reach, as docs/operations.md says). */
static void
json_str(struct evbuffer *b, const void *data, size_t len)
{
	const unsigned char *p = data;
	size_t i = 0, run = 0;

	evbuffer_add(b, "\"", 1);
	while (i < len) {
		size_t n = brk_http_utf8_len(p + i, len - i);
		if (n > 1 || (n == 1 && p[i] >= 0x20 && p[i] != 0x7f && p[i] != '\\' && p[i] != '"')) {
			i += n;
			continue;
		}
		evbuffer_add(b, p + run, i - run);
		if (n == 1 && (p[i] == '\\' || p[i] == '"')) {
			evbuffer_add_printf(b, "\\%c", p[i]);
		} else {
			evbuffer_add_printf(b, "\\u%04x", p[i]);
		}
		i++;
		run = i;
	}
	evbuffer_add(b, p + run, len - run);
	evbuffer_add(b, "\"", 1);
}

static void
json_cstr(struct evbuffer *b, const char *s)
{
	json_str(b, s, strlen(s));
}

static void
json_id(struct evbuffer *b, const struct stream_id *id)
{
	char buf[48];
	size_t n = stream_id_format(id, buf);

	json_str(b, buf, n);
}

/* An error answer: {"error": msg}. */
static int
fail(struct evbuffer *out, const char **ctype, int code, const char *msg)
{
	evbuffer_drain(out, evbuffer_get_length(out));
	evbuffer_add(out, "{\"error\":", 9);
	json_cstr(out, msg);
	evbuffer_add(out, "}\n", 2);
	*ctype = JSON;
	return code;
}

/* A request's parameters: the query string's, then a form body's. */
struct params {
	struct evkeyvalq q;
	bool ok;
};

static void
params_read(struct brk_http_req *r, struct params *p)
{
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(r->req);
	const char *query = uri ? evhttp_uri_get_query(uri) : NULL;
	struct evbuffer *in = evhttp_request_get_input_buffer(r->req);
	size_t blen = in ? evbuffer_get_length(in) : 0;

	TAILQ_INIT(&p->q);
	p->ok = true;
	if (query != NULL && evhttp_parse_query_str(query, &p->q) != 0) {
		p->ok = false;
	}
	if (p->ok && blen > 0) {
		/* a form body (POST); its size is bounded by http-max-body-size */
		char *body = echd_malloc(blen + 1);
		struct evkeyvalq bq;
		if (body == NULL) {
			p->ok = false;
			return;
		}
		evbuffer_copyout(in, body, blen);
		body[blen] = '\0';
		TAILQ_INIT(&bq);
		if (strlen(body) != blen || evhttp_parse_query_str(body, &bq) != 0) {
			p->ok = false;
		} else {
			struct evkeyval *kv;
			TAILQ_FOREACH(kv, &bq, next) {
				evhttp_add_header(&p->q, kv->key, kv->value);
			}
		}
		evhttp_clear_headers(&bq);
		echd_free(body);
	}
}

static void
params_free(struct params *p)
{
	evhttp_clear_headers(&p->q);
}

static const char *
param(struct params *p, const char *name)
{
	return evhttp_find_header(&p->q, name);
}

/* An unsigned parameter in [lo, hi], def when absent; false: malformed. */
static bool
param_u64(struct params *p, const char *name, uint64_t def, uint64_t lo, uint64_t hi,
	uint64_t *out)
{
	const char *v = param(p, name);
	char *end;
	unsigned long long n;

	if (v == NULL) {
		*out = def;
		return true;
	}
	if (*v < '0' || *v > '9') {
		return false;
	}
	errno = 0;
	n = strtoull(v, &end, 10);
	if (errno != 0 || *end != '\0' || n < lo || n > hi) {
		return false;
	}
	*out = n;
	return true;
}

/* ---- access ------------------------------------------------------------- */

/* Whether r's user may run cmd (with sub, or none) on key, as RESP would
 * check it: the command (ACL rules) and the key (patterns). */
static bool
may(const struct brk_http_req *r, const char *cmd, const char *sub, const char *key, size_t klen)
{
	const struct brk_cmd *c = brk_cmd_lookup(cmd, strlen(cmd));
	struct resp_arg a[3] = {{cmd, strlen(cmd)}, {sub ? sub : key, sub ? strlen(sub) : klen},
		{key, klen}};

	if (c == NULL) {
		return false;
	}
	return brk_acl_cmd_allowed(r->user, c, sub ? 3 : 2, a) &&
		(key == NULL || brk_acl_key_allowed(r->user, key, klen));
}

static int
noperm(struct brk_http_req *r, struct evbuffer *out, const char **ctype, const char *what)
{
	char msg[200];

	r->srv->stats.acl_denied_cmd++;
	snprintf(msg, sizeof(msg), "NOPERM User %s has no permissions to run the '%s' command",
		brk_user_name(r->user), what);
	return fail(out, ctype, 403, msg);
}

/* What a request about one stream (and group) names, looked up. */
struct target {
	unsigned db;
	const char *stream, *group;
	struct st_buf sname, gname;
	struct storage_txn *t;
	struct stream_meta m;
	struct group_meta g;
	uint64_t now_ms;
};

/* Reads db, stream (and group when want_group) from p, checks that r's
 * user may run cmd/sub on the stream, and looks them up. 0 or the answer's
 * status (written to out). */
static int
target_open(struct brk_http_req *r, struct params *p, const char *cmd, const char *sub,
	bool want_group, struct target *tg, struct evbuffer *out, const char **ctype)
{
	uint64_t db;
	int rc;

	memset(tg, 0, sizeof(*tg));
	if (!param_u64(p, "db", 0, 0, (uint64_t)r->srv->cfg.databases - 1, &db)) {
		return fail(out, ctype, 400, "db: not a database number");
	}
	tg->db = (unsigned)db;
	tg->stream = param(p, "stream");
	if (tg->stream == NULL || tg->stream[0] == '\0') {
		return fail(out, ctype, 400, "stream: missing");
	}
	tg->sname.data = tg->stream;
	tg->sname.len = strlen(tg->stream);
	if (!may(r, cmd, sub, tg->stream, tg->sname.len)) {
		char what[64];
		snprintf(what, sizeof(what), sub ? "%s|%s" : "%s", cmd, sub ? sub : "");
		return noperm(r, out, ctype, what);
	}
	tg->t = brk_http_view(r, &rc);
	if (tg->t == NULL) {
		return fail(out, ctype, 503, "cannot read the storage");
	}
	tg->now_ms = brk_now_ms();
	rc = stream_lookup(tg->t, tg->db, &tg->sname, &tg->m);
	if (rc == 0 && stream_expired(&tg->m, tg->now_ms)) {
		rc = ECHD_ENOTFOUND;
	}
	if (rc == ECHD_ENOTFOUND) {
		return fail(out, ctype, 404, "no such stream");
	}
	if (rc != 0) {
		return fail(out, ctype, 503, echd_strerror(rc));
	}
	if (!want_group) {
		return 0;
	}
	tg->group = param(p, "group");
	if (tg->group == NULL || tg->group[0] == '\0') {
		return fail(out, ctype, 400, "group: missing");
	}
	tg->gname.data = tg->group;
	tg->gname.len = strlen(tg->group);
	rc = group_lookup(tg->t, &tg->m, &tg->gname, &tg->g);
	if (rc == ECHD_ENOTFOUND) {
		return fail(out, ctype, 404, "no such consumer group");
	}
	if (rc != 0) {
		return fail(out, ctype, 503, echd_strerror(rc));
	}
	return 0;
}

/* The page size of a request: count, at most http-api-max-page. */
static bool
page_size(struct brk_http_req *r, struct params *p, uint64_t *n)
{
	uint64_t max = (uint64_t)r->srv->cfg.http_api_max_page;

	return param_u64(p, "count", max < 50 ? max : 50, 1, max, n);
}

static void
csrf_token(struct brk_api *a, const struct brk_user *u, char out[33])
{
	unsigned char mac[32];
	unsigned int mlen = sizeof(mac);
	const char *name = brk_user_name(u);

	HMAC(EVP_sha256(), a->secret, sizeof(a->secret), (const unsigned char *)name, strlen(name),
		mac, &mlen);
	for (int i = 0; i < 16; i++) {
		snprintf(out + 2 * i, 3, "%02x", mac[i]);
	}
	OPENSSL_cleanse(mac, sizeof(mac));
}

/* Whether every address of http-bind is a loopback one. */
static bool
bound_to_loopback(const struct brk_server *srv)
{
	char addrs[BRK_CONFIG_LINE_MAX], *save = NULL;
	int n = 0;

	snprintf(addrs, sizeof(addrs), "%s", srv->cfg.http_bind ? srv->cfg.http_bind : "");
	for (char *s = strtok_r(addrs, " ,", &save); s; s = strtok_r(NULL, " ,", &save)) {
		if (strncmp(s, "127.", 4) != 0 && strcmp(s, "::1") != 0 &&
			strcmp(s, "localhost") != 0) {
			return false;
		}
		n++;
	}
	return n > 0;
}

static bool
actions_possible(const struct brk_server *srv)
{
	return srv->cfg.http_tls || bound_to_loopback(srv);
}

/* ---- GET /api/server ---------------------------------------------------- */

static void
hist_json(struct evbuffer *b, const struct brk_hist *h)
{
	uint64_t n = h ? brk_hist_total(h) : 0;

	evbuffer_add_printf(b, "{\"count\":%llu,\"mean_ms\":%.3f,\"p50_ms\":%.3f,\"p99_ms\":%.3f}",
		(unsigned long long)n, n ? (double)brk_hist_sum(h) / (double)n / 1e6 : 0.0,
		n ? (double)brk_hist_percentile(h, 50) / 1e6 : 0.0,
		n ? (double)brk_hist_percentile(h, 99) / 1e6 : 0.0);
}

int
brk_api_server(struct brk_http_req *r, struct evbuffer *out, const char **ctype)
{
	struct brk_server *srv = r->srv;
	struct storage_stat st;
	char tok[33];

	csrf_token(srv->api, r->user, tok);
	evbuffer_add_printf(out, "{\"version\":\"%s\",\"uptime_s\":%llu,\"clients\":%llu,"
				 "\"blocked_clients\":%llu,\"commits\":%llu,\"commands\":%llu,"
				 "\"databases\":%d,\"max_page\":%lld,\"sample_interval_s\":%lld,",
		ECHD_VERSION, (unsigned long long)((brk_now_ms() - srv->stats.start_ms) / 1000),
		(unsigned long long)srv->nconns, (unsigned long long)srv->blocked_clients,
		(unsigned long long)srv->stats.commits, (unsigned long long)srv->stats.total_commands,
		srv->cfg.databases, srv->cfg.http_api_max_page, srv->cfg.http_sample_interval);
	evbuffer_add(out, "\"commit\":", 9);
	hist_json(out, srv->event_hist[BRK_LAT_COMMIT]);
	evbuffer_add(out, ",\"flush\":", 9);
	hist_json(out, srv->event_hist[BRK_LAT_FLUSH]);
	if (storage_stat(srv->st, &st) == 0) {
		evbuffer_add_printf(out, ",\"used_bytes\":%llu", (unsigned long long)st.used_bytes);
		struct storage_capacity *cap = storage_capacity(srv->st);
		struct storage_capacity_stat cs;

		if (cap != NULL && storage_capacity_stat(cap, &cs) == 0) {
			evbuffer_add_printf(out, ",\"map_bytes\":%llu", (unsigned long long)cs.map_size);
		}
	}
	evbuffer_add_printf(out, ",\"ha_role\":\"%s\"",
		brk_ha_role(srv) == STORAGE_ROLE_ACTIVE	 ? "active" :
		brk_ha_role(srv) == STORAGE_ROLE_STANDBY ? "standby" :
							   "offline");
	evbuffer_add(out, ",\"user\":", 8);
	json_cstr(out, brk_user_name(r->user));
	evbuffer_add_printf(out, ",\"actions\":%s,\"csrf\":\"%s\"}\n",
		actions_possible(srv) ? "true" : "false", tok);
	*ctype = JSON;
	return 200;
}

/* ---- GET /api/streams --------------------------------------------------- */

struct streams_walk {
	struct brk_http_req *r;
	struct storage_txn *t;
	struct evbuffer *out;
	unsigned db;
	uint64_t now_ms;
	bool first;
	int rc;
};

static int
streams_cb(const struct st_buf *name, void *ud)
{
	struct streams_walk *w = ud;
	struct stream_meta m;
	int rc;

	if (!brk_acl_key_allowed(w->r->user, name->data, name->len)) {
		return 0;
	}
	rc = stream_lookup(w->t, w->db, name, &m);
	if (rc == ECHD_ENOTFOUND || (rc == 0 && stream_expired(&m, w->now_ms))) {
		return 0;
	}
	if (rc != 0) {
		w->rc = rc;
		return 1;
	}
	evbuffer_add(w->out, w->first ? "{\"name\":" : ",{\"name\":", w->first ? 8 : 9);
	w->first = false;
	json_str(w->out, name->data, name->len);
	evbuffer_add_printf(w->out, ",\"length\":%llu,\"groups\":%llu,\"first\":",
		(unsigned long long)m.length, (unsigned long long)m.groups);
	json_id(w->out, &m.first);
	evbuffer_add(w->out, ",\"last\":", 8);
	json_id(w->out, &m.last);
	if (m.length > 0 || m.last.ms > 0) {
		evbuffer_add_printf(w->out, ",\"last_age_ms\":%lld",
			(long long)w->now_ms - (long long)m.last.ms);
	} else {
		evbuffer_add(w->out, ",\"last_age_ms\":null", 18);
	}
	evbuffer_add(w->out, "}", 1);
	return 0;
}

int
brk_api_streams(struct brk_http_req *r, struct evbuffer *out, const char **ctype)
{
	struct params p;
	struct streams_walk w = {r, NULL, out, 0, brk_now_ms(), true, 0};
	uint64_t db, cursor, count;
	int rc, code = 200;

	params_read(r, &p);
	if (!p.ok) {
		code = fail(out, ctype, 400, "malformed query");
	} else if (!param_u64(&p, "db", 0, 0, (uint64_t)r->srv->cfg.databases - 1, &db)) {
		code = fail(out, ctype, 400, "db: not a database number");
	} else if (!param_u64(&p, "cursor", 0, 0, UINT64_MAX, &cursor)) {
		code = fail(out, ctype, 400, "cursor: not a number");
	} else if (!page_size(r, &p, &count)) {
		code = fail(out, ctype, 400, "count: not in 1..http-api-max-page");
	} else if (!may(r, "xinfo", "stream", NULL, 0)) {
		code = noperm(r, out, ctype, "xinfo|stream");
	} else if ((w.t = brk_http_view(r, &rc)) == NULL) {
		code = fail(out, ctype, 503, "cannot read the storage");
	}
	if (code != 200) {
		params_free(&p);
		return code;
	}
	w.db = (unsigned)db;
	evbuffer_add_printf(out, "{\"db\":%u,\"streams\":[", w.db);
	/* count keys visited, whether shown or not: the work is bounded */
	rc = stream_scan(w.t, w.db, w.now_ms, &cursor, (unsigned)count, streams_cb, &w);
	params_free(&p);
	if (w.rc != 0 || rc < 0) {
		return fail(out, ctype, 503, echd_strerror(w.rc ? w.rc : rc));
	}
	evbuffer_add_printf(out, "],\"cursor\":\"%llu\"}\n", (unsigned long long)cursor);
	*ctype = JSON;
	return 200;
}

/* ---- GET /api/groups ---------------------------------------------------- */

struct groups_walk {
	struct target *tg;
	struct evbuffer *out;
	bool first;
};

static int
groups_cb(const struct st_buf *name, const struct group_meta *g, void *ud)
{
	struct groups_walk *w = ud;
	int64_t lag = 0;
	int rc = group_lag(w->tg->t, &w->tg->m, g, &lag);

	if (rc != 0) {
		return rc;
	}
	evbuffer_add(w->out, w->first ? "{\"name\":" : ",{\"name\":", w->first ? 8 : 9);
	w->first = false;
	json_str(w->out, name->data, name->len);
	evbuffer_add_printf(w->out, ",\"pending\":%llu,\"lag\":%lld,\"consumers\":%llu,"
				    "\"last_delivered\":",
		(unsigned long long)g->pending, (long long)lag, (unsigned long long)g->consumers);
	json_id(w->out, &g->last_delivered);
	if (g->entries_read == GROUP_ENTRIES_READ_UNKNOWN) {
		evbuffer_add(w->out, ",\"entries_read\":null}", 21);
	} else {
		evbuffer_add_printf(w->out, ",\"entries_read\":%lld}", (long long)g->entries_read);
	}
	return 0;
}

int
brk_api_groups(struct brk_http_req *r, struct evbuffer *out, const char **ctype)
{
	struct params p;
	struct target tg;
	struct groups_walk w = {&tg, out, true};
	int code, rc;

	params_read(r, &p);
	code = p.ok ? target_open(r, &p, "xinfo", "groups", false, &tg, out, ctype)
		    : fail(out, ctype, 400, "malformed query");
	if (code != 0) {
		params_free(&p);
		return code;
	}
	if (tg.m.groups > (uint64_t)r->srv->cfg.http_api_max_page) {
		params_free(&p);
		return fail(out, ctype, 413, "the stream has more groups than http-api-max-page");
	}
	evbuffer_add(out, "{\"stream\":", 10);
	json_str(out, tg.sname.data, tg.sname.len);
	evbuffer_add_printf(out, ",\"db\":%u,\"length\":%llu,\"groups\":[", tg.db,
		(unsigned long long)tg.m.length);
	rc = tg.m.groups > 0 ? group_each(tg.t, &tg.m, groups_cb, &w) : 0;
	params_free(&p);
	if (rc != 0) {
		return fail(out, ctype, 503, echd_strerror(rc));
	}
	evbuffer_add(out, "]}\n", 3);
	*ctype = JSON;
	return 200;
}

/* ---- GET /api/consumers ------------------------------------------------- */

struct consumers_walk {
	struct evbuffer *out;
	uint64_t now_ms;
	bool first;
};

static int
consumers_cb(const struct st_buf *name, const struct consumer_meta *c, void *ud)
{
	struct consumers_walk *w = ud;

	evbuffer_add(w->out, w->first ? "{\"name\":" : ",{\"name\":", w->first ? 8 : 9);
	w->first = false;
	json_str(w->out, name->data, name->len);
	evbuffer_add_printf(w->out, ",\"pending\":%llu,\"idle_ms\":%lld,\"inactive_ms\":%lld}",
		(unsigned long long)c->pending, (long long)w->now_ms - (long long)c->seen_time,
		c->active_time < 0 ? -1LL : (long long)w->now_ms - (long long)c->active_time);
	return 0;
}

int
brk_api_consumers(struct brk_http_req *r, struct evbuffer *out, const char **ctype)
{
	struct params p;
	struct target tg;
	struct consumers_walk w = {out, 0, true};
	int code, rc;

	params_read(r, &p);
	code = p.ok ? target_open(r, &p, "xinfo", "consumers", true, &tg, out, ctype)
		    : fail(out, ctype, 400, "malformed query");
	if (code != 0) {
		params_free(&p);
		return code;
	}
	if (tg.g.consumers > (uint64_t)r->srv->cfg.http_api_max_page) {
		params_free(&p);
		return fail(out, ctype, 413, "the group has more consumers than http-api-max-page");
	}
	w.now_ms = tg.now_ms;
	evbuffer_add(out, "{\"consumers\":[", 14);
	rc = consumer_each(tg.t, &tg.g, consumers_cb, &w);
	params_free(&p);
	if (rc < 0) {
		return fail(out, ctype, 503, echd_strerror(rc));
	}
	evbuffer_add(out, "]}\n", 3);
	*ctype = JSON;
	return 200;
}

/* ---- GET /api/pending --------------------------------------------------- */

int
brk_api_pending(struct brk_http_req *r, struct evbuffer *out, const char **ctype)
{
	struct params p;
	struct target tg;
	struct stream_id lo = {0, 0}, hi = {UINT64_MAX, UINT64_MAX};
	struct pel_iter *it = NULL;
	struct pel_row row;
	uint64_t count, n = 0, owner_cid = PEL_NEW;
	char owner[256];
	size_t olen = 0;
	const char *after;
	int code, rc;
	bool more = false;

	params_read(r, &p);
	code = p.ok ? target_open(r, &p, "xpending", NULL, true, &tg, out, ctype)
		    : fail(out, ctype, 400, "malformed query");
	if (code == 0 && !page_size(r, &p, &count)) {
		code = fail(out, ctype, 400, "count: not in 1..http-api-max-page");
	}
	after = code == 0 ? param(&p, "after") : NULL;
	if (after != NULL && after[0] != '\0') {
		/* the page after this id (exclusive) */
		if (stream_id_parse(after, strlen(after), 0, false, &lo) != 0) {
			code = fail(out, ctype, 400, "after: not a stream id");
		} else if (!stream_id_incr(&lo)) {
			code = -1; /* after the last possible id: nothing */
		}
	}
	params_free(&p);
	if (code > 0) {
		return code;
	}
	evbuffer_add_printf(out, "{\"pending\":%llu,\"entries\":[", (unsigned long long)tg.g.pending);
	rc = code == 0 ? pel_iter_create(tg.t, &tg.g, 0, &lo, &hi, &it) : ECHD_ENOTFOUND;
	while (rc == 0 && (rc = pel_iter_next(it, &row)) == 0) {
		if (n == count) {
			more = true;
			break;
		}
		if (row.cid != PEL_UNOWNED && row.cid != owner_cid) {
			struct consumer_meta c;
			struct st_buf name;
			owner_cid = row.cid;
			olen = 0;
			if (consumer_by_id(tg.t, &tg.g, row.cid, &c, &name) == 0) {
				olen = name.len < sizeof(owner) ? name.len : sizeof(owner);
				memcpy(owner, name.data, olen);
			}
		}
		evbuffer_add(out, n ? ",{\"id\":" : "{\"id\":", n ? 7 : 6);
		json_id(out, &row.id);
		evbuffer_add(out, ",\"owner\":", 9);
		json_str(out, owner, row.cid == PEL_UNOWNED ? 0 : olen);
		evbuffer_add_printf(out, ",\"idle_ms\":%lld,\"deliveries\":%llu}",
			row.cid == PEL_UNOWNED ? -1LL
					       : (long long)tg.now_ms - (long long)row.delivery_time,
			(unsigned long long)row.delivery_count);
		lo = row.id;
		n++;
	}
	if (it != NULL) {
		pel_iter_destroy(it);
	}
	if (rc != 0 && rc != ECHD_ENOTFOUND) {
		return fail(out, ctype, 503, echd_strerror(rc));
	}
	evbuffer_add(out, "],\"next\":", 9);
	if (more) {
		json_id(out, &lo); /* the last one shown: ask for the page after it */
	} else {
		evbuffer_add(out, "null", 4);
	}
	evbuffer_add(out, "}\n", 2);
	*ctype = JSON;
	return 200;
}

/* ---- GET /api/entry ----------------------------------------------------- */

int
brk_api_entry(struct brk_http_req *r, struct evbuffer *out, const char **ctype)
{
	struct params p;
	struct target tg;
	struct stream_id id;
	struct st_buf fields, f, v;
	const char *ids;
	size_t pos = 0;
	int code, rc;
	bool first = true;

	params_read(r, &p);
	code = p.ok ? target_open(r, &p, "xrange", NULL, false, &tg, out, ctype)
		    : fail(out, ctype, 400, "malformed query");
	ids = code == 0 ? param(&p, "id") : NULL;
	if (code == 0 && (ids == NULL || stream_id_parse(ids, strlen(ids), 0, false, &id) != 0)) {
		code = fail(out, ctype, 400, "id: not a stream id");
	}
	params_free(&p);
	if (code != 0) {
		return code;
	}
	rc = stream_get_entry(tg.t, &tg.m, &id, &fields);
	if (rc == ECHD_ENOTFOUND) {
		return fail(out, ctype, 404, "no such entry (deleted or trimmed)");
	}
	if (rc != 0) {
		return fail(out, ctype, 503, echd_strerror(rc));
	}
	evbuffer_add(out, "{\"id\":", 6);
	json_id(out, &id);
	evbuffer_add(out, ",\"fields\":[", 11);
	while (stream_fields_next(&fields, &pos, &f, &v)) {
		evbuffer_add(out, first ? "[" : ",[", first ? 1 : 2);
		first = false;
		json_str(out, f.data, f.len);
		evbuffer_add(out, ",", 1);
		json_str(out, v.data, v.len);
		evbuffer_add(out, "]", 1);
	}
	evbuffer_add(out, "]}\n", 3);
	*ctype = JSON;
	return 200;
}

/* ---- the sampler and GET /api/history ----------------------------------- */

static void
ring_free(struct ring *g)
{
	echd_free(g->stream);
	echd_free(g->group);
	echd_free(g->pts);
	echd_free(g);
}

static struct ring *
ring_find(struct brk_api *a, unsigned db, const void *s, size_t slen, const void *g, size_t glen)
{
	for (size_t i = 0; i < a->nrings; i++) {
		struct ring *x = a->rings[i];
		if (x->db == db && x->slen == slen && x->glen == glen &&
			memcmp(x->stream, s, slen) == 0 && memcmp(x->group, g, glen) == 0) {
			return x;
		}
	}
	return NULL;
}

static struct ring *
ring_new(struct brk_api *a, unsigned db, const struct st_buf *s, const struct st_buf *g)
{
	long long iv = a->srv->cfg.http_sample_interval;
	struct ring *x;
	struct ring **rs;

	if ((long long)a->nrings >= a->srv->cfg.http_sample_max_groups) {
		return NULL;
	}
	rs = echd_realloc(a->rings, (a->nrings + 1) * sizeof(*rs));
	if (rs == NULL) {
		return NULL;
	}
	a->rings = rs;
	x = echd_calloc(1, sizeof(*x));
	if (x == NULL) {
		return NULL;
	}
	x->db = db;
	x->cap = (unsigned)(HISTORY_MS / 1000 / (uint64_t)(iv > 0 ? iv : 1)) + 1;
	x->stream = echd_strndup(s->data, s->len);
	x->group = echd_strndup(g->data, g->len);
	x->pts = echd_calloc(x->cap, sizeof(*x->pts));
	if (x->stream == NULL || x->group == NULL || x->pts == NULL) {
		ring_free(x);
		return NULL;
	}
	x->slen = s->len;
	x->glen = g->len;
	a->rings[a->nrings++] = x;
	return x;
}

static void
ring_push(struct ring *x, const struct point *pt)
{
	x->pts[(x->head + x->n) % x->cap] = *pt;
	if (x->n < x->cap) {
		x->n++;
	} else {
		x->head = (x->head + 1) % x->cap;
	}
}

struct sample_walk {
	struct brk_api *a;
	const struct st_buf *stream;
	const struct stream_meta *m;
	int rc;
	unsigned visited; /* keys this turn */
};

static int
sample_group_cb(const struct st_buf *name, const struct group_meta *g, void *ud)
{
	struct sample_walk *w = ud;
	struct brk_api *a = w->a;
	struct ring *x = ring_find(a, a->db, w->stream->data, w->stream->len, name->data, name->len);
	struct point pt = {a->now_ms, 0, g->pending};
	int rc;

	if (x == NULL) {
		x = ring_new(a, a->db, w->stream, name);
		if (x == NULL) {
			return 1; /* at the cap (or no memory): the stream's others neither */
		}
	}
	rc = group_lag(a->t, w->m, g, &pt.lag);
	if (rc != 0) {
		return rc;
	}
	x->seen_pass = a->pass;
	ring_push(x, &pt);
	return 0;
}

static int
sample_stream_cb(const struct st_buf *name, void *ud)
{
	struct sample_walk *w = ud;
	struct stream_meta m;
	int rc = stream_lookup(w->a->t, w->a->db, name, &m);

	w->visited++;
	if (rc == ECHD_ENOTFOUND || (rc == 0 && m.groups == 0)) {
		return 0;
	}
	if (rc == 0) {
		w->stream = name;
		w->m = &m;
		rc = group_each(w->a->t, &m, sample_group_cb, w);
		rc = rc == 1 ? 0 : rc;
	}
	if (rc != 0) {
		w->rc = rc;
		return 1;
	}
	return 0;
}

/* Drops the rings of groups the pass just over did not see. */
static void
sample_sweep(struct brk_api *a)
{
	size_t k = 0;

	for (size_t i = 0; i < a->nrings; i++) {
		if (a->rings[i]->seen_pass == a->pass) {
			a->rings[k++] = a->rings[i];
		} else {
			ring_free(a->rings[i]);
		}
	}
	a->nrings = k;
}

/* One turn of a pass: about TURN_KEYS keys, then the next turn. */
static void
sample_turn_cb(evutil_socket_t fd, short what, void *arg)
{
	struct brk_api *a = arg;
	struct brk_server *srv = a->srv;
	struct sample_walk w = {a, NULL, NULL, 0, 0};
	int rc = 0;

	(void)fd;
	(void)what;
	a->t = brk_view_begin(srv, &rc);
	if (a->t == NULL) {
		a->walking = false; /* the next pass tries again */
		return;
	}
	while ((int)a->db < srv->cfg.databases && w.visited < TURN_KEYS) {
		rc = stream_scan(a->t, a->db, a->now_ms, &a->cursor, TURN_KEYS - w.visited,
			sample_stream_cb, &w);
		w.visited++; /* an empty database costs its seek */
		if (rc < 0 || w.rc != 0) {
			echd_log(ECHD_LOG_VERBOSE, "HTTP: sampling the groups failed: %s",
				echd_strerror(rc < 0 ? rc : w.rc));
			a->walking = false;
			brk_view_end(srv, a->t);
			a->t = NULL;
			return;
		}
		if (a->cursor == 0) {
			a->db++;
		}
	}
	brk_view_end(srv, a->t);
	a->t = NULL;
	if ((int)a->db < srv->cfg.databases) {
		struct timeval now = {0, 0};
		event_add(a->sample_turn, &now);
		return;
	}
	sample_sweep(a);
	a->walking = false;
}

static void
sample_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct brk_api *a = arg;
	struct timeval tv = {(time_t)a->srv->cfg.http_sample_interval, 0};

	(void)fd;
	(void)what;
	event_add(a->sample_timer, &tv); /* CONFIG SET changes the interval */
	if (a->walking || a->srv->cfg.http_sample_max_groups == 0) {
		return;
	}
	a->walking = true;
	a->pass++;
	a->db = 0;
	a->cursor = 0;
	a->now_ms = brk_now_ms();
	sample_turn_cb(-1, 0, a);
}

int
brk_api_history(struct brk_http_req *r, struct evbuffer *out, const char **ctype)
{
	struct brk_api *a = r->srv->api;
	struct params p;
	struct target tg;
	uint64_t since = brk_now_ms() - HISTORY_MS;
	int code;
	bool first = true;

	params_read(r, &p);
	code = p.ok ? target_open(r, &p, "xinfo", "groups", false, &tg, out, ctype)
		    : fail(out, ctype, 400, "malformed query");
	if (code != 0) {
		params_free(&p);
		return code;
	}
	evbuffer_add_printf(out, "{\"interval_s\":%lld,\"groups\":[",
		r->srv->cfg.http_sample_interval);
	for (size_t i = 0; i < a->nrings; i++) {
		struct ring *x = a->rings[i];
		if (x->db != tg.db || x->slen != tg.sname.len ||
			memcmp(x->stream, tg.sname.data, x->slen) != 0) {
			continue;
		}
		evbuffer_add(out, first ? "{\"name\":" : ",{\"name\":", first ? 8 : 9);
		first = false;
		json_str(out, x->group, x->glen);
		evbuffer_add(out, ",\"points\":[", 11);
		for (unsigned k = 0, shown = 0; k < x->n; k++) {
			const struct point *pt = &x->pts[(x->head + k) % x->cap];
			if (pt->t_ms < since) {
				continue;
			}
			evbuffer_add_printf(out, "%s[%llu,%lld,%llu]", shown++ ? "," : "",
				(unsigned long long)pt->t_ms, (long long)pt->lag,
				(unsigned long long)pt->pending);
		}
		evbuffer_add(out, "]}", 2);
	}
	params_free(&p); /* after the last use of tg's names */
	evbuffer_add(out, "]}\n", 3);
	*ctype = JSON;
	return 200;
}

/* ---- actions ------------------------------------------------------------ */

/* An action in flight: our end of the socketpair, and the request. */
struct action {
	struct brk_api *a;
	struct evhttp_request *req;
	struct bufferevent *bev;
	int replies;          /* seen so far: SELECT's, then the command's */
	struct action *next;
};

static void
action_free(struct action *ac)
{
	struct action **pp = &ac->a->actions;

	while (*pp != NULL && *pp != ac) {
		pp = &(*pp)->next;
	}
	if (*pp == ac) {
		*pp = ac->next;
	}
	if (ac->bev != NULL) {
		bufferevent_free(ac->bev); /* closes our end: the RESP side closes too */
	}
	echd_free(ac);
}

static void
action_answer(struct action *ac, int code, const char *err, long long result)
{
	struct evbuffer *b = evbuffer_new();
	const char *ctype = JSON;

	if (b != NULL) {
		if (err != NULL) {
			fail(b, &ctype, code, err);
		} else {
			evbuffer_add_printf(b, "{\"ok\":true,\"result\":%lld}\n", result);
		}
	}
	brk_http_reply(ac->req, code, ctype, b);
	if (b != NULL) {
		evbuffer_free(b);
	}
	action_free(ac);
}

/* A reply arrived: the command's is the second (after SELECT's). */
static void
action_read_cb(struct bufferevent *bev, void *arg)
{
	struct action *ac = arg;
	struct evbuffer *in = bufferevent_get_input(bev);

	for (;;) {
		size_t len = evbuffer_get_length(in), used = 0;
		const char *buf = (const char *)evbuffer_pullup(in, -1);
		struct resp_reply *rep = NULL;
		int rc = len ? resp_reply_parse(buf, len, NULL, &used, &rep) : -EAGAIN;
		if (rc == -EAGAIN) {
			return;
		}
		if (rc != 0) {
			action_answer(ac, 502, "unreadable reply", 0);
			return;
		}
		evbuffer_drain(in, used);
		ac->replies++;
		if (rep->type == RESP_REPLY_ERROR) {
			char msg[512];
			int code = 400;
			snprintf(msg, sizeof(msg), "%.*s", (int)rep->len, rep->str);
			if (strncmp(msg, "NOPERM", 6) == 0) {
				code = 403;
			} else if (strncmp(msg, "NOGROUP", 7) == 0) {
				code = 404;
			} else if (strstr(msg, "storage") != NULL || strncmp(msg, "OOM", 3) == 0) {
				code = 503;
			}
			resp_reply_free(rep);
			action_answer(ac, code, msg, 0);
			return;
		}
		if (ac->replies == 2) {
			long long result = rep->type == RESP_REPLY_INTEGER ? rep->integer
									  : (long long)rep->elements;
			resp_reply_free(rep);
			action_answer(ac, 200, NULL, result);
			return;
		}
		resp_reply_free(rep);
	}
}

static void
action_event_cb(struct bufferevent *bev, short what, void *arg)
{
	(void)bev;
	if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) {
		/* closed unanswered: a flush failed, or the server is stopping */
		action_answer(arg, 503, "the command was not answered (see the server log)", 0);
	}
}

static void
put_arg(struct evbuffer *b, const char *s)
{
	evbuffer_add_printf(b, "$%zu\r\n%s\r\n", strlen(s), s);
}

/* Runs argv on a RESP connection of r's user (see the top of the file). */
static int
action_start(struct brk_http_req *r, unsigned db, int argc, const char **argv,
	struct evbuffer *out, const char **ctype)
{
	struct brk_server *srv = r->srv;
	struct brk_api *a = srv->api;
	struct action *ac;
	struct brk_conn *c;
	struct evbuffer *req;
	char dbs[16];
	int fds[2];

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds) != 0) {
		return fail(out, ctype, 503, strerror(errno));
	}
	ac = echd_calloc(1, sizeof(*ac));
	c = ac ? brk_conn_create(srv, fds[0], "http-console", "http", true, false) : NULL;
	if (c == NULL) {
		echd_free(ac);
		close(fds[0]);
		close(fds[1]);
		return fail(out, ctype, 503, "out of memory");
	}
	c->user = (struct brk_user *)r->user;
	c->name = echd_strndup("echd-http-console", 17);
	brk_conn_admit(c);
	ac->a = a;
	ac->req = r->req;
	ac->bev = bufferevent_socket_new(srv->base, fds[1], BEV_OPT_CLOSE_ON_FREE);
	if (ac->bev == NULL) {
		close(fds[1]);
		echd_free(ac);
		return fail(out, ctype, 503, "out of memory"); /* c sees EOF and closes */
	}
	ac->next = a->actions;
	a->actions = ac;
	bufferevent_setcb(ac->bev, action_read_cb, NULL, action_event_cb, ac);
	bufferevent_enable(ac->bev, EV_READ | EV_WRITE);
	req = bufferevent_get_output(ac->bev);
	snprintf(dbs, sizeof(dbs), "%u", db);
	evbuffer_add(req, "*2\r\n", 4);
	put_arg(req, "SELECT");
	put_arg(req, dbs);
	evbuffer_add_printf(req, "*%d\r\n", argc);
	for (int i = 0; i < argc; i++) {
		put_arg(req, argv[i]);
	}
	return BRK_HTTP_DEFERRED;
}

/* POST /api/action/<what>: checks the method, the listener, the token and
 * the parameters, then runs the command. */
int
brk_api_action(struct brk_http_req *r, struct evbuffer *out, const char **ctype)
{
	struct brk_server *srv = r->srv;
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(r->req);
	const char *path = uri ? evhttp_uri_get_path(uri) : "";
	const char *what = strrchr(path, '/') + 1;
	const char *tok = evhttp_find_header(evhttp_request_get_input_headers(r->req),
		"X-CSRF-Token");
	const char *stream, *group, *id, *consumer, *mode, *argv[8];
	char want[33];
	struct params p;
	uint64_t db;
	int argc = 0, code = 0;

	if (!actions_possible(srv)) {
		return fail(out, ctype, 403,
			"actions need http-tls yes, or an http-bind of loopback addresses only");
	}
	csrf_token(srv->api, r->user, want);
	if (tok == NULL || strlen(tok) != 32 || CRYPTO_memcmp(tok, want, 32) != 0) {
		return fail(out, ctype, 403, "missing or wrong X-CSRF-Token (GET /api/server has it)");
	}
	params_read(r, &p);
	stream = param(&p, "stream");
	group = param(&p, "group");
	id = param(&p, "id");
	consumer = param(&p, "consumer");
	mode = param(&p, "mode");
	if (!p.ok) {
		code = fail(out, ctype, 400, "malformed parameters");
	} else if (!param_u64(&p, "db", 0, 0, (uint64_t)srv->cfg.databases - 1, &db)) {
		code = fail(out, ctype, 400, "db: not a database number");
	} else if (stream == NULL || group == NULL || *stream == '\0' || *group == '\0') {
		code = fail(out, ctype, 400, "stream and group are needed");
	} else if (strcmp(what, "xack") == 0 && id != NULL) {
		const char *v[] = {"XACK", stream, group, id};
		memcpy(argv, v, sizeof(v));
		argc = 4;
	} else if (strcmp(what, "xclaim") == 0 && id != NULL && consumer != NULL) {
		const char *v[] = {"XCLAIM", stream, group, consumer, "0", id};
		memcpy(argv, v, sizeof(v));
		argc = 6;
	} else if (strcmp(what, "xnack") == 0 && id != NULL) {
		const char *v[] = {"XNACK", stream, group, mode ? mode : "FAIL", "IDS", "1", id};
		memcpy(argv, v, sizeof(v));
		argc = 7;
	} else if (strcmp(what, "delconsumer") == 0 && consumer != NULL) {
		const char *v[] = {"XGROUP", "DELCONSUMER", stream, group, consumer};
		memcpy(argv, v, sizeof(v));
		argc = 5;
	} else {
		code = fail(out, ctype, 400,
			"an action needs: xack (id), xclaim (id, consumer), xnack (id, [mode]), "
			"delconsumer (consumer)");
	}
	if (code == 0) {
		code = action_start(r, (unsigned)db, argc, argv, out, ctype);
	}
	params_free(&p); /* the command's arguments were copied into the request */
	return code;
}

/* ---- life cycle --------------------------------------------------------- */

int
brk_api_init(struct brk_server *srv)
{
	struct brk_api *a = echd_calloc(1, sizeof(*a));
	struct timeval tv = {1, 0};

	if (a == NULL) {
		return -1;
	}
	srv->api = a;
	a->srv = srv;
	if (RAND_bytes(a->secret, sizeof(a->secret)) != 1) {
		return -1;
	}
	a->sample_timer = evtimer_new(srv->base, sample_timer_cb, a);
	a->sample_turn = evtimer_new(srv->base, sample_turn_cb, a);
	if (a->sample_timer == NULL || a->sample_turn == NULL) {
		return -1;
	}
	event_add(a->sample_timer, &tv); /* the first sample a second after start */
	return 0;
}

static void
brk_api_cancel(struct brk_server *srv)
{
	struct brk_api *a = srv->api;

	while (a != NULL && a->actions != NULL) {
		action_answer(a->actions, 503, "echd is shutting down", 0);
	}
}

void
brk_api_finish(struct brk_server *srv)
{
	struct brk_api *a = srv->api;

	if (a == NULL) {
		return;
	}
	brk_api_cancel(srv);
	if (a->sample_timer != NULL) {
		event_free(a->sample_timer);
	}
	if (a->sample_turn != NULL) {
		event_free(a->sample_turn);
	}
	for (size_t i = 0; i < a->nrings; i++) {
		ring_free(a->rings[i]);
	}
	echd_free(a->rings);
	OPENSSL_cleanse(a->secret, sizeof(a->secret));
	echd_free(a);
	srv->api = NULL;
}
