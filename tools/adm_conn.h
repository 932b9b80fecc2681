/* adm_conn.h - echo-admin's connection to a live echd (adm_conn.c), for the
 * live views and actions (adm_live.c). Not used by the offline half.
 *
 * A request is queued with adm_req_*(), sent with adm_send() (pipelining: the
 * replies are then read with adm_next_reply()) or with adm_call(), which also
 * reads its reply. These return an ADM_EXIT_ code; a failed connection has
 * already been reported. Replies are owned by the caller (resp_reply_free()).
 * The adm_rep_*() readers accept RESP2 and RESP3 shapes alike.
 */
#ifndef ECHD_TOOLS_ADM_CONN_H
#define ECHD_TOOLS_ADM_CONN_H

#include "adm.h"
#include "resp.h"

/* ---- requests ----------------------------------------------------------- */

void adm_req_begin(struct adm_conn *c, size_t argc);
/* Borrows p (copied). */
void adm_req_arg(struct adm_conn *c, const void *p, size_t len);
void adm_req_str(struct adm_conn *c, const char *s);
void adm_req_u64(struct adm_conn *c, uint64_t v);
/* exclusive: "(" before the id, as XPENDING and XRANGE take it */
void adm_req_id(struct adm_conn *c, const struct stream_id *id, bool exclusive);

int adm_send(struct adm_ctx *x);
/* *out: returns owned (free with resp_reply_free()) on ADM_EXIT_OK. */
int adm_call(struct adm_ctx *x, struct resp_reply **out);
int adm_next_reply(struct adm_ctx *x, struct resp_reply **out);

/* ---- reading replies ------------------------------------------------------ */

bool adm_rep_is_err(const struct resp_reply *r);
bool adm_rep_err_starts(const struct resp_reply *r, const char *prefix);
bool adm_rep_is_text(const struct resp_reply *r);
bool adm_rep_is_list(const struct resp_reply *r);
/* The value under name in a RESP3 map or a RESP2 array of pairs; returns
 * borrowed (valid until r is freed), or NULL. */
const struct resp_reply *adm_rep_field(const struct resp_reply *r, const char *name);
/* An integer reply, or a bulk string that holds one. r may be NULL. */
bool adm_rep_int(const struct resp_reply *r, int64_t *out);
bool adm_rep_id(const struct resp_reply *r, struct stream_id *out);
/* Returns a buffer borrowed from r (or ""). */
struct st_buf adm_rep_buf(const struct resp_reply *r);
/* Entry fields of an XRANGE-style [id, [f, v, ...]] into *fv (grown as needed,
 * *cap its size), borrowing from fields. 0 or -ENOMEM. */
int adm_rep_entry_fields(
	const struct resp_reply *fields, struct st_buf **fv, size_t *cap, size_t *nfv);

/* Report an unexpected reply (or error) to `what`; returns ADM_EXIT_FAILED. */
int adm_bad_reply(const char *what, const struct resp_reply *r);
/* Maps the server's "no such ..." errors to ADM_EXIT_NOTFOUND, bad ids to
 * ADM_EXIT_USAGE, the rest as adm_bad_reply(). */
int adm_server_err(
	const struct resp_reply *r, const char *stream, const char *group, const char *what);

#endif
