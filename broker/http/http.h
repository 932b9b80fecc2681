/* http.h - what the HTTP side (http.c, metrics.c) shares: the listener's
 * life cycle for server.c, and the request a route's handler answers.
 *
 * Only broker/ includes this. A route is one row of http.c's table (path,
 * method, the ACL command it needs); adding an endpoint is a row and a
 * handler of this type.
 */
#ifndef ECHD_BROKER_HTTP_H
#define ECHD_BROKER_HTTP_H

#include <stdbool.h>
#include <stdint.h>

#include "broker.h"

struct evbuffer;
struct evhttp_request;

/* A request that passed authentication and its route's permission. */
struct brk_http_req {
	struct brk_server *srv;
	struct evhttp_request *req;   /* libevent's, borrowed for the call */
	const struct brk_user *user;  /* logged in as (the default user when no login is needed) */
	struct storage_txn *view;     /* brk_http_view()'s; http.c ends it after the handler */
};

/* The transaction a handler reads the store through (brk_view_begin()),
 * begun at the first call and ended by http.c when the handler returns:
 * borrowed for the call, not to be kept by a deferred answer. NULL with
 * *rc when the store cannot be read (a standby). */
struct storage_txn *brk_http_view(struct brk_http_req *r, int *rc);

/* A route's handler: writes the body into out (borrowed) and returns the
 * HTTP status, setting *ctype to a static content type; or returns
 * BRK_HTTP_DEFERRED after taking r->req, which it answers in a later loop
 * turn with brk_http_reply() (libevent keeps the request until then, even
 * when its client has gone: the reply then only frees it). */
#define BRK_HTTP_DEFERRED 0
typedef int (*brk_http_fn)(struct brk_http_req *r, struct evbuffer *out, const char **ctype);

/* Answers req with code and body (borrowed; NULL: none) and the headers
 * every answer has. */
void brk_http_reply(struct evhttp_request *req, int code, const char *ctype,
	struct evbuffer *body);

/* Length of the valid UTF-8 sequence at p (at most n bytes; no overlong
 * forms, surrogates or values past U+10FFFF), or 0 (metrics.c). */
size_t brk_http_utf8_len(const unsigned char *p, size_t n);

/* Starts the listener when http-port is set: 0, BRK_INIT_CONFIG (a TLS
 * certificate that does not load), or -1 (an address that cannot be bound;
 * logged). Called from brk_server_init() once the event base exists. */
int brk_http_init(struct brk_server *srv);
/* A fetch of the storage landed: the reads that waited for it run again. */
void brk_http_fetch_landed(struct brk_server *srv);
/* Closes the listener and every HTTP connection; NULL-safe, half-built too. */
void brk_http_finish(struct brk_server *srv);
/* metrics.c: GET /metrics, answered over several loop turns (deferred). */
int brk_http_metrics(struct brk_http_req *r, struct evbuffer *out, const char **ctype);
/* Ends the scrapes still running (shutdown), before the listener is freed:
 * each is answered 503, which leaves only if its socket takes it at once,
 * and freed. */
void brk_http_metrics_cancel(struct brk_server *srv);

/* api.c: the JSON API (GET /api/...) and the actions (POST /api/action/...). */
int brk_api_server(struct brk_http_req *r, struct evbuffer *out, const char **ctype);
int brk_api_streams(struct brk_http_req *r, struct evbuffer *out, const char **ctype);
int brk_api_groups(struct brk_http_req *r, struct evbuffer *out, const char **ctype);
int brk_api_consumers(struct brk_http_req *r, struct evbuffer *out, const char **ctype);
int brk_api_pending(struct brk_http_req *r, struct evbuffer *out, const char **ctype);
int brk_api_entry(struct brk_http_req *r, struct evbuffer *out, const char **ctype);
int brk_api_history(struct brk_http_req *r, struct evbuffer *out, const char **ctype);
int brk_api_action(struct brk_http_req *r, struct evbuffer *out, const char **ctype);
/* The sampler and the CSRF secret: started with the listener. */
int brk_api_init(struct brk_server *srv);
/* Answers the actions in flight 503 (before evhttp_free()) and frees it all. */
void brk_api_finish(struct brk_server *srv);
/* console.c: GET /, the console page. */
int brk_http_console(struct brk_http_req *r, struct evbuffer *out, const char **ctype);

#endif
