/* acllog.c - ACL LOG: the logins and commands the ACL rules refused.
 *
 * As in Redis 7.4: newest first, at most acllog-max-len entries; an event
 * like one of the 10 newest entries (same reason, context, object and user)
 * within 60 s of that entry's last update counts there instead of making a
 * new one. Each entry keeps the CLIENT INFO line of the last client that
 * caused it. Entry ids count from 0 since the start, across ACL LOG RESET.
 */
#include <string.h>

#include "broker.h"

#define GROUP_MS   60000 /* Redis' ACL_LOG_GROUPING_MAX_TIME_DELTA */
#define GROUP_SCAN 10    /* newest entries an event may be grouped with */

struct brk_acllog_entry {
	uint64_t count;
	int reason;  /* BRK_ACLLOG_* */
	int context; /* BRK_ACLLOG_CTX_* */
	char *object, *username, *cinfo; /* owned; a key may hold any byte */
	size_t olen, ulen;
	uint64_t id;
	uint64_t created_ms, updated_ms;
	struct brk_acllog_entry *newer, *older;
};

static const char *const reasons[] = {
	[BRK_ACLLOG_AUTH] = "auth",
	[BRK_ACLLOG_COMMAND] = "command",
	[BRK_ACLLOG_KEY] = "key",
	[BRK_ACLLOG_CHANNEL] = "channel",
};

static const char *const contexts[] = {
	[BRK_ACLLOG_CTX_TOPLEVEL] = "toplevel",
	[BRK_ACLLOG_CTX_MULTI] = "multi",
};

static void
entry_free(struct brk_acllog_entry *e)
{
	echd_free(e->object);
	echd_free(e->username);
	echd_free(e->cinfo);
	echd_free(e);
}

static void
unlink_entry(struct brk_server *srv, struct brk_acllog_entry *e)
{
	if (e->newer != NULL) {
		e->newer->older = e->older;
	} else {
		srv->acllog_newest = e->older;
	}
	if (e->older != NULL) {
		e->older->newer = e->newer;
	} else {
		srv->acllog_oldest = e->newer;
	}
	e->newer = e->older = NULL;
	srv->acllog_len--;
}

static void
push_newest(struct brk_server *srv, struct brk_acllog_entry *e)
{
	e->older = srv->acllog_newest;
	e->newer = NULL;
	if (srv->acllog_newest != NULL) {
		srv->acllog_newest->newer = e;
	} else {
		srv->acllog_oldest = e;
	}
	srv->acllog_newest = e;
	srv->acllog_len++;
}

void
brk_acllog_reset(struct brk_server *srv)
{
	while (srv->acllog_oldest != NULL) {
		struct brk_acllog_entry *e = srv->acllog_oldest;
		unlink_entry(srv, e);
		entry_free(e);
	}
}

static bool
same(const char *s, size_t slen, const void *p, size_t len)
{
	return slen == len && memcmp(s, p, len) == 0;
}

void
brk_acllog_add(struct brk_server *srv, struct brk_conn *c, int reason, int context,
	const void *object, size_t olen, const void *user, size_t ulen)
{
	struct brk_acllog_entry *e = srv->acllog_newest;
	uint64_t now = brk_now_ms();
	struct resp_buf info;
	char *cinfo;
	int scanned = 0;

	resp_buf_init(&info);
	brk_conn_describe(c, &info);
	cinfo = info.oom ? NULL : echd_strndup(info.data, info.len > 0 ? info.len - 1 : 0);
	resp_buf_finish(&info); /* the line without its newline, as Redis keeps it */
	if (cinfo == NULL) {
		return; /* a lost entry is the lesser harm; the INFO counters still count */
	}
	for (; e != NULL && scanned < GROUP_SCAN; e = e->older, scanned++) {
		if (e->reason == reason && e->context == context && now - e->updated_ms <= GROUP_MS &&
			same(e->object, e->olen, object, olen) &&
			same(e->username, e->ulen, user, ulen)) {
			break;
		}
	}
	if (e != NULL && scanned < GROUP_SCAN) {
		unlink_entry(srv, e);
		e->count++;
		e->updated_ms = now;
		echd_free(e->cinfo);
		e->cinfo = cinfo;
		push_newest(srv, e);
		return;
	}
	e = echd_calloc(1, sizeof(*e));
	if (e == NULL || (e->object = echd_strndup(object, olen)) == NULL ||
		(e->username = echd_strndup(user, ulen)) == NULL) {
		if (e != NULL) {
			e->cinfo = cinfo;
			entry_free(e);
		} else {
			echd_free(cinfo);
		}
		return;
	}
	e->olen = olen;
	e->ulen = ulen;
	e->count = 1;
	e->reason = reason;
	e->context = context;
	e->cinfo = cinfo;
	e->id = srv->acllog_next_id++;
	e->created_ms = e->updated_ms = now;
	push_newest(srv, e);
	while (srv->acllog_len > (uint64_t)srv->cfg.acllog_max_len) {
		struct brk_acllog_entry *old = srv->acllog_oldest;
		unlink_entry(srv, old);
		entry_free(old);
	}
}

/* ACL LOG [count | RESET]: the newest count entries (10 by default). */
void
brk_acllog_reply(struct brk_ctx *x)
{
	struct brk_server *srv = x->srv;
	uint64_t now = brk_now_ms();
	long long count = 10;
	size_t n;

	if (x->argc == 3) {
		if (brk_arg_eq(&x->argv[2], "RESET")) {
			brk_acllog_reset(srv);
			resp_add_simple(x->w, "OK");
			return;
		}
		if (!brk_arg_ll(x, &x->argv[2], &count)) {
			return;
		}
		if (count < 0) {
			count = 0;
		}
	}
	n = (uint64_t)count < srv->acllog_len ? (size_t)count : (size_t)srv->acllog_len;
	resp_add_array(x->w, n);
	for (struct brk_acllog_entry *e = srv->acllog_newest; e != NULL && n > 0;
		e = e->older, n--) {
		resp_add_map(x->w, 10);
		resp_add_bulk_cstr(x->w, "count");
		resp_add_int(x->w, (long long)e->count);
		resp_add_bulk_cstr(x->w, "reason");
		resp_add_bulk_cstr(x->w, reasons[e->reason]);
		resp_add_bulk_cstr(x->w, "context");
		resp_add_bulk_cstr(x->w, contexts[e->context]);
		resp_add_bulk_cstr(x->w, "object");
		resp_add_bulk(x->w, e->object, e->olen);
		resp_add_bulk_cstr(x->w, "username");
		resp_add_bulk(x->w, e->username, e->ulen);
		resp_add_bulk_cstr(x->w, "age-seconds");
		resp_add_double(x->w, (double)(now - e->updated_ms) / 1000.0);
		resp_add_bulk_cstr(x->w, "client-info");
		resp_add_bulk_cstr(x->w, e->cinfo);
		resp_add_bulk_cstr(x->w, "entry-id");
		resp_add_int(x->w, (long long)e->id);
		resp_add_bulk_cstr(x->w, "timestamp-created");
		resp_add_int(x->w, (long long)e->created_ms);
		resp_add_bulk_cstr(x->w, "timestamp-last-updated");
		resp_add_int(x->w, (long long)e->updated_ms);
	}
}
