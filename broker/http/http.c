/* http.c - the HTTP listener (libevent's evhttp): its connections and their
 * limits, HTTP Basic authentication against the ACL users, and the routes.
 *
 * The promises kept here: a request that is malformed, too large or too
 * slow is answered 4xx or closed, never crashes the server nor stalls its
 * loop; no route runs before its user is logged in and allowed the route's
 * command (ACL), so the HTTP side never shows more than RESP would.
 *
 * Connections. evhttp 2.1 has no limit on connections and tells nothing
 * when one closes, so each connection's bufferevent is made here (the
 * bevcb) and kept referenced: evhttp frees it by clearing its callbacks,
 * which the sweep (at each accept and each second) notices before it drops
 * the last reference. Each connection has a deadline, http-timeout seconds
 * from its accept and again from each answer: a client that sends its
 * request a byte at a time is cut off there, its socket shut down so that
 * evhttp closes it the ordinary way.
 *
 * Slots. A connection is admitted once one of its requests has passed
 * authentication (a login, or the default user's when none is needed). When
 * a new connection finds http-maxclients in use, the oldest connection not
 * admitted makes way, as listen.c treats RESP clients not logged in: a
 * client that never finishes its headers (slowloris) or has no credentials
 * cannot keep the slots from those who have them. A newcomer is refused
 * (shut down at once, answered 503 if its request came in the same turn)
 * only when every slot is admitted.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>

#include "broker.h"
#include "http.h"

/* A route: a path, the methods it answers, and the ACL command a user
 * must be allowed to see it (INFO for /metrics; NULL: the handler checks
 * the command equivalent to what it shows, with its key, as api.c does). */
struct route {
	const char *path;
	unsigned methods; /* EVHTTP_REQ_* */
	const char *acl_cmd;
	brk_http_fn fn;
};

static const struct route routes[] = {
	{"/metrics", EVHTTP_REQ_GET | EVHTTP_REQ_HEAD, "info", brk_http_metrics},
	{"/", EVHTTP_REQ_GET | EVHTTP_REQ_HEAD, NULL, brk_http_console},
	{"/api/server", EVHTTP_REQ_GET | EVHTTP_REQ_HEAD, "info", brk_api_server},
	{"/api/streams", EVHTTP_REQ_GET | EVHTTP_REQ_HEAD, NULL, brk_api_streams},
	{"/api/groups", EVHTTP_REQ_GET | EVHTTP_REQ_HEAD, NULL, brk_api_groups},
	{"/api/consumers", EVHTTP_REQ_GET | EVHTTP_REQ_HEAD, NULL, brk_api_consumers},
	{"/api/pending", EVHTTP_REQ_GET | EVHTTP_REQ_HEAD, NULL, brk_api_pending},
	{"/api/entry", EVHTTP_REQ_GET | EVHTTP_REQ_HEAD, NULL, brk_api_entry},
	{"/api/history", EVHTTP_REQ_GET | EVHTTP_REQ_HEAD, NULL, brk_api_history},
	{"/api/action/xack", EVHTTP_REQ_POST, NULL, brk_api_action},
	{"/api/action/xclaim", EVHTTP_REQ_POST, NULL, brk_api_action},
	{"/api/action/xnack", EVHTTP_REQ_POST, NULL, brk_api_action},
	{"/api/action/delconsumer", EVHTTP_REQ_POST, NULL, brk_api_action},
};

struct http_conn {
	struct brk_http *h;
	struct bufferevent *bev; /* referenced: freed by the sweep once evhttp let go */
	struct event *deadline;
	bool refused;            /* refused or made way: shut down at once, holds no slot */
	bool admitted;           /* one of its requests passed authentication */
	/* its request, a read that met rows the storage is fetching: it runs
	 * again when they land (brk_http_fetch_landed()); valid while evhttp
	 * holds the connection (!conn_released()) */
	struct evhttp_request *fetch_req;
	struct http_conn *next;  /* newer first */
};

struct brk_http {
	struct brk_server *srv;
	struct evhttp *http;
	struct event *sweep_timer;
	struct http_conn *conns;
	long long nconns;
};

/* ---- connections -------------------------------------------------------- */

/* evhttp_connection_free() -> bufferevent_free() clears the callbacks. */
static bool
conn_released(struct http_conn *hc)
{
	bufferevent_event_cb ev = NULL;
	void *arg = NULL;

	bufferevent_getcb(hc->bev, NULL, NULL, &ev, &arg);
	return ev == NULL && arg == NULL;
}

static void
conn_free(struct http_conn *hc)
{
	SSL *ssl = bufferevent_openssl_get_ssl(hc->bev);

	event_free(hc->deadline);
	bufferevent_decref(hc->bev);
	if (ssl != NULL) {
		SSL_free(ssl); /* not BEV_OPT_CLOSE_ON_FREE: evhttp closes the socket */
	}
	echd_free(hc);
}

/* Frees the connections evhttp has closed. O(connections). */
static void
sweep(struct brk_http *h)
{
	struct http_conn **pp = &h->conns;

	while (*pp != NULL) {
		struct http_conn *hc = *pp;
		if (conn_released(hc)) {
			*pp = hc->next;
			h->nconns--;
			conn_free(hc);
		} else {
			pp = &hc->next;
		}
	}
}

static void
sweep_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	sweep(arg);
}

/* The deadline: shuts the socket down, and evhttp closes the connection. */
static void
deadline_cb(evutil_socket_t fd, short what, void *arg)
{
	struct http_conn *hc = arg;
	evutil_socket_t s;

	(void)fd;
	(void)what;
	if (conn_released(hc)) {
		return;
	}
	s = bufferevent_getfd(hc->bev);
	if (s >= 0) {
		shutdown(s, SHUT_RDWR);
	}
}

static void
conn_arm(struct http_conn *hc, long long secs)
{
	struct timeval tv = {(time_t)secs, 0};

	event_add(hc->deadline, &tv);
}

/* Before a new connection is counted: when every slot is held, the oldest
 * connection not admitted is shut down to make way (its request, if one
 * comes in this turn, is answered 503). Returns false when all are
 * admitted: the new one is to be refused. O(connections), as the sweep. */
static bool
make_room(struct brk_http *h)
{
	struct http_conn *oldest = NULL;
	long long held = 0;

	for (struct http_conn *hc = h->conns; hc != NULL; hc = hc->next) {
		if (hc->refused) {
			continue;
		}
		held++;
		if (!hc->admitted) {
			oldest = hc; /* the list is newest first */
		}
	}
	if (held < h->srv->cfg.http_maxclients) {
		return true;
	}
	if (oldest == NULL) {
		echd_log(ECHD_LOG_VERBOSE,
			"HTTP: http-maxclients (%lld) reached and every connection is logged in: "
			"connection closed",
			h->srv->cfg.http_maxclients);
		return false;
	}
	echd_log(ECHD_LOG_VERBOSE,
		"HTTP: http-maxclients (%lld) reached: closing the oldest connection without an "
		"authenticated request to make way",
		h->srv->cfg.http_maxclients);
	oldest->refused = true;
	conn_arm(oldest, 0);
	return true;
}

static struct bufferevent *
bev_cb(struct event_base *base, void *arg)
{
	struct brk_http *h = arg;
	struct brk_server *srv = h->srv;
	struct http_conn *hc;
	struct bufferevent *bev;

	sweep(h);
	if (srv->cfg.http_tls) {
		SSL *ssl = SSL_new(srv->tls_ctx);
		if (ssl == NULL) {
			return NULL;
		}
		bev = bufferevent_openssl_socket_new(base, -1, ssl, BUFFEREVENT_SSL_ACCEPTING, 0);
		if (bev == NULL) {
			SSL_free(ssl);
			return NULL;
		}
	} else {
		bev = bufferevent_socket_new(base, -1, 0);
		if (bev == NULL) {
			return NULL;
		}
	}
	hc = echd_calloc(1, sizeof(*hc));
	if (hc != NULL) {
		hc->deadline = evtimer_new(base, deadline_cb, hc);
	}
	if (hc == NULL || hc->deadline == NULL) {
		/* untracked: evhttp's own timeout still closes it */
		echd_free(hc);
		return bev;
	}
	hc->h = h;
	hc->bev = bev;
	bufferevent_incref(bev);
	hc->refused = !make_room(h);
	hc->next = h->conns;
	h->conns = hc;
	h->nconns++;
	conn_arm(hc, hc->refused ? 0 : srv->cfg.http_timeout);
	return bev;
}

static struct http_conn *
conn_of(struct brk_http *h, struct evhttp_request *req)
{
	struct evhttp_connection *evcon = evhttp_request_get_connection(req);
	struct bufferevent *bev = evcon ? evhttp_connection_get_bufferevent(evcon) : NULL;

	for (struct http_conn *hc = h->conns; hc != NULL && bev != NULL; hc = hc->next) {
		if (hc->bev == bev) {
			return hc;
		}
	}
	return NULL;
}

/* ---- answers ------------------------------------------------------------ */

/* The headers of every answer: never cached, never sniffed, never framed
 * (a route that sets its own Content-Security-Policy, the console's, keeps
 * it). */
static void
common_headers(struct evkeyvalq *hd)
{
	evhttp_add_header(hd, "Cache-Control", "no-store");
	evhttp_add_header(hd, "X-Content-Type-Options", "nosniff");
	evhttp_add_header(hd, "X-Frame-Options", "DENY");
	if (evhttp_find_header(hd, "Content-Security-Policy") == NULL) {
		evhttp_add_header(hd, "Content-Security-Policy",
			"default-src 'none'; frame-ancestors 'none'");
	}
}

static void
reply_text(struct evhttp_request *req, int code, const char *reason, const char *text)
{
	struct evbuffer *b = evbuffer_new();
	struct evkeyvalq *hd = evhttp_request_get_output_headers(req);

	evhttp_add_header(hd, "Content-Type", "text/plain; charset=utf-8");
	common_headers(hd);
	if (b != NULL) {
		evbuffer_add_printf(b, "%s\n", text);
	}
	evhttp_send_reply(req, code, reason, b);
	if (b != NULL) {
		evbuffer_free(b);
	}
}

static void
reply_unauthorized(struct evhttp_request *req, const char *why)
{
	evhttp_add_header(evhttp_request_get_output_headers(req), "WWW-Authenticate",
		"Basic realm=\"echd\", charset=\"UTF-8\"");
	reply_text(req, 401, "Unauthorized", why);
}

/* ---- authentication ----------------------------------------------------- */

/* Whether the peer is on loopback (protected mode, as listen.c decides it
 * for RESP clients). */
static bool
from_loopback(struct evhttp_request *req)
{
	struct evhttp_connection *evcon = evhttp_request_get_connection(req);
	char *addr = NULL;
	ev_uint16_t port = 0;

	if (evcon == NULL) {
		return false;
	}
	evhttp_connection_get_peer(evcon, &addr, &port);
	if (addr == NULL) {
		return false;
	}
	return strncmp(addr, "127.", 4) == 0 || strcmp(addr, "::1") == 0 ||
		strncmp(addr, "::ffff:127.", 11) == 0;
}

/* The user of a request: the one its Basic credentials name, or the
 * default user when it sends none and the default user needs no password
 * (as a RESP connection starts; protected mode then serves loopback
 * clients only). NULL: answered 401 (or 403) here. */
static const struct brk_user *
authenticate(struct brk_server *srv, struct evhttp_request *req)
{
	const char *auth = evhttp_find_header(evhttp_request_get_input_headers(req),
		"Authorization");
	unsigned char dec[768];
	const char *user, *pass, *colon;
	size_t ulen, plen, alen, dlen;
	const struct brk_user *u;
	int n;

	if (srv->cfg.protected_mode && brk_acl_nopass_default(srv) && !from_loopback(req)) {
		/* as listen.c refuses such a RESP client, whatever it sends */
		reply_text(req, 403, "Forbidden",
			"DENIED echd is running in protected mode because protected mode is enabled "
			"and no password is set for the default user: only loopback clients are "
			"served");
		return NULL;
	}
	if (auth == NULL) {
		if (brk_acl_nopass_default(srv)) {
			return brk_acl_find(srv, "default", 7);
		}
		reply_unauthorized(req, "authentication required: HTTP Basic with an ACL user");
		return NULL;
	}
	if (strncasecmp(auth, "Basic ", 6) != 0) {
		reply_unauthorized(req, "only HTTP Basic authentication is supported");
		return NULL;
	}
	auth += 6;
	while (*auth == ' ') {
		auth++;
	}
	alen = strlen(auth);
	while (alen > 0 && auth[alen - 1] == ' ') {
		alen--;
	}
	if (alen == 0 || alen % 4 != 0 || alen / 4 * 3 >= sizeof(dec)) {
		reply_unauthorized(req, "malformed Basic credentials");
		return NULL;
	}
	n = EVP_DecodeBlock(dec, (const unsigned char *)auth, (int)alen);
	if (n < 0) {
		reply_unauthorized(req, "malformed Basic credentials");
		return NULL;
	}
	/* EVP_DecodeBlock counts the '=' padding as zero bytes */
	dlen = (size_t)n;
	for (size_t i = alen; i > 0 && auth[i - 1] == '=' && dlen > 0; i--) {
		dlen--;
	}
	colon = memchr(dec, ':', dlen);
	if (colon == NULL) {
		OPENSSL_cleanse(dec, sizeof(dec));
		reply_unauthorized(req, "malformed Basic credentials");
		return NULL;
	}
	user = (const char *)dec;
	ulen = (size_t)(colon - user);
	pass = colon + 1;
	plen = dlen - ulen - 1;
	if (ulen == 0) {
		user = "default"; /* curl -u :password, as AUTH password */
		ulen = 7;
	}
	u = brk_acl_check(srv, user, ulen, pass, plen);
	OPENSSL_cleanse(dec, sizeof(dec));
	if (u == NULL) {
		srv->stats.acl_denied_auth++;
		reply_unauthorized(req, "WRONGPASS invalid username-password pair or user is disabled.");
		return NULL;
	}
	return u;
}

/* ---- requests ----------------------------------------------------------- */

static void
request_cb(struct evhttp_request *req, void *arg)
{
	struct brk_http *h = arg;
	struct brk_server *srv = h->srv;
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
	const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
	const struct route *rt = NULL;
	struct brk_http_req r;
	struct http_conn *hc = conn_of(h, req);
	const struct brk_cmd *cmd;
	struct evbuffer *body;
	const char *ctype = "text/plain; charset=utf-8";
	uint64_t misses0;
	int code;

	if (hc != NULL && hc->refused) {
		/* its request came in the turn it was accepted, before the shutdown */
		evhttp_add_header(evhttp_request_get_output_headers(req), "Connection", "close");
		reply_text(req, 503, "Service Unavailable", "too many HTTP connections");
		return;
	}
	if (hc != NULL) {
		conn_arm(hc, srv->cfg.http_timeout); /* the next request's time starts now */
	}
	if (path == NULL || path[0] == '\0') {
		path = "/";
	}
	for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
		if (strcmp(routes[i].path, path) == 0) {
			rt = &routes[i];
			break;
		}
	}
	if (rt == NULL) {
		reply_text(req, 404, "Not Found", "not found");
		return;
	}
	if (!(rt->methods & evhttp_request_get_command(req))) {
		evhttp_add_header(evhttp_request_get_output_headers(req), "Allow",
			rt->methods & EVHTTP_REQ_POST ? "POST" : "GET, HEAD");
		reply_text(req, 405, "Method Not Allowed", "method not allowed");
		return;
	}
	r.srv = srv;
	r.req = req;
	r.view = NULL;
	r.user = authenticate(srv, req);
	if (r.user == NULL) {
		return;
	}
	if (hc != NULL) {
		hc->admitted = true; /* holds its slot from now on */
	}
	cmd = rt->acl_cmd ? brk_cmd_lookup(rt->acl_cmd, strlen(rt->acl_cmd)) : NULL;
	if (cmd != NULL) {
		struct resp_arg a = {rt->acl_cmd, strlen(rt->acl_cmd)};
		if (!brk_acl_cmd_allowed(r.user, cmd, 1, &a)) {
			char msg[160];
			srv->stats.acl_denied_cmd++;
			snprintf(msg, sizeof(msg),
				"NOPERM User %s has no permissions to run the '%s' command",
				brk_user_name(r.user), rt->acl_cmd);
			reply_text(req, 403, "Forbidden", msg);
			return;
		}
	}
	body = evbuffer_new();
	if (body == NULL) {
		reply_text(req, 503, "Service Unavailable", "out of memory");
		return;
	}
	misses0 = brk_fetch_misses(srv);
	code = rt->fn(&r, body, &ctype);
	brk_view_end(srv, r.view);
	if (code != BRK_HTTP_DEFERRED && hc != NULL && !(rt->methods & EVHTTP_REQ_POST) &&
		brk_fetch_missed(srv, misses0)) {
		/* rows not in memory yet: answer once they are, as a command waits */
		hc->fetch_req = req;
		evbuffer_free(body);
		return;
	}
	if (code != BRK_HTTP_DEFERRED) {
		brk_http_reply(req, code, ctype, body);
	}
	evbuffer_free(body);
}

void
brk_http_fetch_landed(struct brk_server *srv)
{
	struct brk_http *h = srv->http;

	for (struct http_conn *hc = h != NULL ? h->conns : NULL; hc != NULL; hc = hc->next) {
		struct evhttp_request *req = hc->fetch_req;

		hc->fetch_req = NULL;
		if (req != NULL && !conn_released(hc)) {
			request_cb(req, h);
		}
	}
}

struct storage_txn *
brk_http_view(struct brk_http_req *r, int *rc)
{
	if (r->view == NULL) {
		r->view = brk_view_begin(r->srv, rc);
	} else {
		*rc = 0;
	}
	return r->view;
}

void
brk_http_reply(struct evhttp_request *req, int code, const char *ctype, struct evbuffer *body)
{
	struct evkeyvalq *hd = evhttp_request_get_output_headers(req);
	const char *reason;

	switch (code) {
	case 200:
		reason = "OK";
		break;
	case 400:
		reason = "Bad Request";
		break;
	case 403:
		reason = "Forbidden";
		break;
	case 404:
		reason = "Not Found";
		break;
	case 503:
		reason = "Service Unavailable";
		break;
	default:
		reason = "Error";
		break;
	}
	evhttp_add_header(hd, "Content-Type", ctype);
	common_headers(hd);
	evhttp_send_reply(req, code, reason, body);
}

/* ---- life cycle --------------------------------------------------------- */

int
brk_http_init(struct brk_server *srv)
{
	struct brk_http *h;
	struct timeval tv1 = {1, 0}, tvt;
	char addrs[BRK_CONFIG_LINE_MAX], *save = NULL;
	int nbound = 0;

	if (srv->cfg.http_port == 0) {
		return 0;
	}
	if (srv->cfg.http_tls && srv->tls_ctx == NULL && brk_tls_init(srv) != 0) {
		return BRK_INIT_CONFIG;
	}
	h = echd_calloc(1, sizeof(*h));
	if (h == NULL) {
		return -1;
	}
	srv->http = h;
	h->srv = srv;
	h->http = evhttp_new(srv->base);
	h->sweep_timer = event_new(srv->base, -1, EV_PERSIST, sweep_cb, h);
	if (h->http == NULL || h->sweep_timer == NULL) {
		return -1;
	}
	event_add(h->sweep_timer, &tv1);
	if (brk_api_init(srv) != 0) {
		return -1;
	}
	evhttp_set_bevcb(h->http, bev_cb, h);
	evhttp_set_gencb(h->http, request_cb, h);
	/* every method, known to evhttp or not, reaches request_cb, which
	 * answers 405 where its route does not take it (evhttp would answer
	 * 501 to the methods it was not told to allow) */
	evhttp_set_allowed_methods(h->http, 0xffff);
	evhttp_set_max_headers_size(h->http, (ev_ssize_t)srv->cfg.http_max_header_size);
	evhttp_set_max_body_size(h->http, (ev_ssize_t)srv->cfg.http_max_body_size);
	tvt.tv_sec = (time_t)srv->cfg.http_timeout;
	tvt.tv_usec = 0;
	evhttp_set_timeout_tv(h->http, &tvt);
	snprintf(addrs, sizeof(addrs), "%s", srv->cfg.http_bind ? srv->cfg.http_bind : "");
	for (char *a = strtok_r(addrs, " ,", &save); a; a = strtok_r(NULL, " ,", &save)) {
		if (evhttp_bind_socket_with_handle(h->http, a, (ev_uint16_t)srv->cfg.http_port) ==
			NULL) {
			echd_log(ECHD_LOG_WARNING, "HTTP: cannot listen on %s port %lld: %s", a,
				srv->cfg.http_port, strerror(errno));
			return -1;
		}
		nbound++;
	}
	if (nbound == 0) {
		echd_log(ECHD_LOG_WARNING, "HTTP: http-port is set but http-bind names no address");
		return BRK_INIT_CONFIG;
	}
	echd_log(ECHD_LOG_NOTICE, "Ready to accept connections %s on port %lld (%s)",
		srv->cfg.http_tls ? "https" : "http", srv->cfg.http_port, srv->cfg.http_bind);
	return 0;
}

void
brk_http_finish(struct brk_server *srv)
{
	struct brk_http *h = srv->http;

	if (h == NULL) {
		return;
	}
	brk_http_metrics_cancel(srv); /* before evhttp_free() frees their requests */
	brk_api_finish(srv);
	if (h->http != NULL) {
		evhttp_free(h->http); /* frees its connections and their bufferevents */
	}
	while (h->conns != NULL) {
		struct http_conn *hc = h->conns;
		h->conns = hc->next;
		conn_free(hc);
	}
	if (h->sweep_timer != NULL) {
		event_free(h->sweep_timer);
	}
	echd_free(h);
	srv->http = NULL;
}
