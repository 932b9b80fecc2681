/* adm_live.c - echo-admin's views and actions on a live echd, over the
 * connection of adm_conn.c.
 *
 * Each action is exactly one server command, so the server applies it as one
 * transaction; the reads around it only check that what it names exists, to
 * give exit status 1 rather than a silent 0. Views page through the server
 * (SCAN, XPENDING) and print through adm_view.c, as the offline mode does.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "adm_conn.h"
#include "echd.h"

#define PAGE      1000  /* XPENDING COUNT per round trip */
#define SCAN_HINT "200" /* SCAN COUNT */

/* ---- streams -------------------------------------------------------------- */

/* One XINFO STREAM reply into s (name set by the caller). */
static int
stream_info(const struct resp_reply *r, struct adm_stream_info *s)
{
	const struct resp_reply *first = adm_rep_field(r, "first-entry");
	const struct resp_reply *last = adm_rep_field(r, "last-entry");
	int64_t len, groups, added;

	if (!adm_rep_int(adm_rep_field(r, "length"), &len) ||
		!adm_rep_int(adm_rep_field(r, "groups"), &groups) ||
		!adm_rep_int(adm_rep_field(r, "entries-added"), &added) ||
		!adm_rep_id(adm_rep_field(r, "last-generated-id"), &s->last_generated) ||
		!adm_rep_id(adm_rep_field(r, "max-deleted-entry-id"), &s->max_deleted)) {
		return -1;
	}
	s->length = (uint64_t)len;
	s->groups = (uint64_t)groups;
	s->entries_added = (uint64_t)added;
	{
		/* Redis 8.6's idempotent producers: an echd before them has none */
		static const char *const names[] = {"idmp-duration", "idmp-maxsize",
			"pids-tracked", "iids-tracked", "iids-added", "iids-duplicates"};
		uint64_t *dst[] = {&s->idmp.duration_s, &s->idmp.maxsize, &s->idmp.pids,
			&s->idmp.iids, &s->idmp.added, &s->idmp.duplicates};
		s->idmp_known = true;
		for (size_t i = 0; i < 6; i++) {
			int64_t v;
			if (!adm_rep_int(adm_rep_field(r, names[i]), &v) || v < 0) {
				s->idmp_known = false;
				break;
			}
			*dst[i] = (uint64_t)v;
		}
	}
	s->empty = first == NULL || first->type == RESP_REPLY_NULL;
	if (!s->empty) {
		if (!adm_rep_is_list(first) || first->elements < 1 ||
			!adm_rep_id(first->element[0], &s->first) || last == NULL ||
			!adm_rep_is_list(last) || last->elements < 1 ||
			!adm_rep_id(last->element[0], &s->last_entry)) {
			return -1;
		}
	}
	return 0;
}

int
adm_live_streams(struct adm_ctx *x)
{
	struct adm_conn *c = x->conn;
	struct adm_view *v = adm_view_streams_begin(x);
	char cursor[32] = "0";
	int rc = 0;

	if (v == NULL) {
		return ADM_EXIT_FAILED;
	}
	do {
		struct resp_reply *scan = NULL;
		const struct resp_reply *keys;

		adm_req_begin(c, 4);
		adm_req_str(c, "SCAN");
		adm_req_str(c, cursor);
		adm_req_str(c, "COUNT");
		adm_req_str(c, SCAN_HINT);
		rc = adm_call(x, &scan);
		if (rc != 0) {
			break;
		}
		if (scan->type != RESP_REPLY_ARRAY || scan->elements != 2 ||
			!adm_rep_is_text(scan->element[0]) ||
			scan->element[0]->len >= sizeof(cursor) ||
			!adm_rep_is_list(scan->element[1])) {
			rc = adm_bad_reply("SCAN", scan);
			resp_reply_free(scan);
			break;
		}
		memcpy(cursor, scan->element[0]->str, scan->element[0]->len + 1);
		keys = scan->element[1];
		/* one round trip for the whole batch */
		for (size_t i = 0; i < keys->elements; i++) {
			adm_req_begin(c, 3);
			adm_req_str(c, "XINFO");
			adm_req_str(c, "STREAM");
			adm_req_arg(c, keys->element[i]->str, keys->element[i]->len);
		}
		rc = adm_send(x);
		for (size_t i = 0; rc == 0 && i < keys->elements; i++) {
			struct adm_stream_info s;
			struct resp_reply *info = NULL;

			rc = adm_next_reply(x, &info);
			if (rc != 0) {
				break;
			}
			memset(&s, 0, sizeof(s));
			s.name = adm_rep_buf(keys->element[i]);
			if (adm_rep_err_starts(info, "ERR no such key") ||
				adm_rep_err_starts(info, "WRONGTYPE")) {
				/* deleted since SCAN saw it, or not a stream */
			} else if (adm_rep_is_err(info) || stream_info(info, &s) != 0) {
				rc = adm_bad_reply("XINFO STREAM", info);
			} else if (adm_view_stream(v, &s) != 0) {
				rc = adm_err(ADM_EXIT_FAILED, "out of memory");
			}
			resp_reply_free(info);
		}
		resp_reply_free(scan);
	} while (rc == 0 && strcmp(cursor, "0") != 0);
	adm_view_end(v, false);
	return rc;
}

/* ---- groups --------------------------------------------------------------- */

int
adm_live_groups(struct adm_ctx *x, const char *stream)
{
	struct adm_conn *c = x->conn;
	struct resp_reply *r = NULL;
	struct adm_view *v;
	int rc;

	adm_req_begin(c, 3);
	adm_req_str(c, "XINFO");
	adm_req_str(c, "GROUPS");
	adm_req_str(c, stream);
	rc = adm_call(x, &r);
	if (rc != 0) {
		return rc;
	}
	if (adm_rep_is_err(r)) {
		rc = adm_server_err(r, stream, NULL, "XINFO GROUPS");
		resp_reply_free(r);
		return rc;
	}
	if (!adm_rep_is_list(r)) {
		rc = adm_bad_reply("XINFO GROUPS", r);
		resp_reply_free(r);
		return rc;
	}
	/* the oldest pending entry of every group, in one round trip */
	for (size_t i = 0; i < r->elements; i++) {
		struct st_buf name = adm_rep_buf(adm_rep_field(r->element[i], "name"));
		adm_req_begin(c, 6);
		adm_req_str(c, "XPENDING");
		adm_req_str(c, stream);
		adm_req_arg(c, name.data, name.len);
		adm_req_str(c, "-");
		adm_req_str(c, "+");
		adm_req_str(c, "1");
	}
	rc = adm_send(x);
	if (rc != 0) {
		resp_reply_free(r);
		return rc;
	}
	v = adm_view_groups_begin(x, stream);
	for (size_t i = 0; i < r->elements; i++) {
		const struct resp_reply *g = r->element[i];
		const struct resp_reply *er = adm_rep_field(g, "entries-read");
		const struct resp_reply *lag = adm_rep_field(g, "lag");
		struct resp_reply *p = NULL;
		struct adm_group_info gi;
		int64_t pending, consumers;

		rc = adm_next_reply(x, &p);
		if (rc != 0) {
			break;
		}
		memset(&gi, 0, sizeof(gi));
		gi.name = adm_rep_buf(adm_rep_field(g, "name"));
		gi.entries_read = -1;
		if (!adm_rep_int(adm_rep_field(g, "pending"), &pending) ||
			!adm_rep_int(adm_rep_field(g, "consumers"), &consumers) ||
			!adm_rep_id(adm_rep_field(g, "last-delivered-id"), &gi.last_delivered)) {
			rc = adm_bad_reply("XINFO GROUPS", g);
			resp_reply_free(p);
			break;
		}
		gi.pending = (uint64_t)pending;
		gi.consumers = (uint64_t)consumers;
		if (er != NULL && er->type != RESP_REPLY_NULL) {
			adm_rep_int(er, &gi.entries_read);
		}
		gi.lag_known =
			lag != NULL && lag->type != RESP_REPLY_NULL && adm_rep_int(lag, &gi.lag);
		/* echd's policy fields follow Redis' when the group has one */
		gi.has_policy = adm_rep_int(adm_rep_field(g, "ack-wait"), &gi.ack_wait) &&
			adm_rep_int(adm_rep_field(g, "max-deliver"), &gi.max_deliver) &&
			adm_rep_int(adm_rep_field(g, "max-ack-pending"), &gi.max_ack_pending) &&
			adm_rep_int(adm_rep_field(g, "dead-lettered"), &gi.dead_lettered);
		if (gi.has_policy) {
			const struct resp_reply *dl = adm_rep_field(g, "dead-letter");
			if (dl != NULL && dl->type != RESP_REPLY_NULL) {
				gi.dead_letter = adm_rep_buf(dl);
			}
		}
		if (adm_rep_is_list(p) && p->elements == 1 && adm_rep_is_list(p->element[0]) &&
			p->element[0]->elements == 4 &&
			adm_rep_id(p->element[0]->element[0], &gi.oldest_id) &&
			adm_rep_int(p->element[0]->element[2], &gi.oldest_idle_ms)) {
			gi.has_oldest = true;
		}
		resp_reply_free(p);
		if (v != NULL && adm_view_group(v, &gi) != 0) {
			rc = adm_err(ADM_EXIT_FAILED, "out of memory");
			break;
		}
	}
	/* replies still owed after a failure are read by nobody: we exit */
	adm_view_end(v, false);
	resp_reply_free(r);
	return v == NULL ? ADM_EXIT_FAILED : rc;
}

/* ---- consumers ------------------------------------------------------------ */

/* XINFO CONSUMERS; *out owned. Returns an ADM_EXIT_ code. */
static int
xinfo_consumers(struct adm_ctx *x, const char *stream, const char *group, struct resp_reply **out)
{
	struct adm_conn *c = x->conn;
	struct resp_reply *r = NULL;
	int rc;

	adm_req_begin(c, 4);
	adm_req_str(c, "XINFO");
	adm_req_str(c, "CONSUMERS");
	adm_req_str(c, stream);
	adm_req_str(c, group);
	rc = adm_call(x, &r);
	if (rc != 0) {
		return rc;
	}
	if (adm_rep_is_err(r)) {
		rc = adm_server_err(r, stream, group, "XINFO CONSUMERS");
	} else if (!adm_rep_is_list(r)) {
		rc = adm_bad_reply("XINFO CONSUMERS", r);
	}
	if (rc != 0) {
		resp_reply_free(r);
		return rc;
	}
	*out = r;
	return 0;
}

static const struct resp_reply *
find_consumer(const struct resp_reply *list, const char *name)
{
	size_t n = strlen(name);

	for (size_t i = 0; i < list->elements; i++) {
		struct st_buf b = adm_rep_buf(adm_rep_field(list->element[i], "name"));
		if (b.len == n && memcmp(b.data, name, n) == 0) {
			return list->element[i];
		}
	}
	return NULL;
}

int
adm_live_consumers(struct adm_ctx *x, const char *stream, const char *group)
{
	struct resp_reply *r = NULL;
	struct adm_view *v;
	int rc = xinfo_consumers(x, stream, group, &r);

	if (rc != 0) {
		return rc;
	}
	v = adm_view_consumers_begin(x, stream, group);
	for (size_t i = 0; v != NULL && i < r->elements; i++) {
		const struct resp_reply *e = r->element[i];
		struct adm_consumer_info ci;
		int64_t pending;

		memset(&ci, 0, sizeof(ci));
		ci.name = adm_rep_buf(adm_rep_field(e, "name"));
		if (!adm_rep_int(adm_rep_field(e, "pending"), &pending) ||
			!adm_rep_int(adm_rep_field(e, "idle"), &ci.idle_ms)) {
			rc = adm_bad_reply("XINFO CONSUMERS", e);
			break;
		}
		ci.pending = (uint64_t)pending;
		/* Redis before 7.2 has no "inactive": unknown, shown as never */
		if (!adm_rep_int(adm_rep_field(e, "inactive"), &ci.inactive_ms)) {
			ci.inactive_ms = -1;
		}
		if (adm_view_consumer(v, &ci) != 0) {
			rc = adm_err(ADM_EXIT_FAILED, "out of memory");
			break;
		}
	}
	adm_view_end(v, false);
	resp_reply_free(r);
	return v == NULL ? ADM_EXIT_FAILED : rc;
}

/* ---- pending -------------------------------------------------------------- */

/* XPENDING pages of at most PAGE rows, resuming after the last id seen;
 * --payload pipelines one XRANGE per row of the page. */
int
adm_live_pending(struct adm_ctx *x, const char *stream, const char *group)
{
	const struct adm_opts *o = x->o;
	struct adm_conn *c = x->conn;
	struct stream_id after = {0, 0};
	bool first = true, end = false, truncated = false;
	uint64_t shown = 0;
	struct st_buf *fv = NULL;
	size_t fvcap = 0;
	struct adm_view *v = NULL;
	int rc = 0;

	if (o->consumer != NULL) {
		struct resp_reply *cl = NULL;
		rc = xinfo_consumers(x, stream, group, &cl);
		if (rc != 0) {
			return rc;
		}
		if (find_consumer(cl, o->consumer) == NULL) {
			rc = adm_err(ADM_EXIT_NOTFOUND, "no consumer '%s' in group '%s'",
				o->consumer, group);
		}
		resp_reply_free(cl);
		if (rc != 0) {
			return rc;
		}
	}
	while (!end && rc == 0) {
		struct resp_reply *page = NULL;
		uint64_t want = PAGE;
		size_t argc = 6 + (o->min_idle > 0 ? 2 : 0) + (o->consumer != NULL ? 1 : 0);

		if (o->limit >= 0 && o->min_deliveries < 0 && (uint64_t)o->limit - shown < want) {
			/* no client-side filter: ask for no more than is shown */
			want = (uint64_t)o->limit - shown + 1;
		}
		adm_req_begin(c, argc);
		adm_req_str(c, "XPENDING");
		adm_req_str(c, stream);
		adm_req_str(c, group);
		if (o->min_idle > 0) {
			adm_req_str(c, "IDLE");
			adm_req_u64(c, (uint64_t)o->min_idle);
		}
		if (first) {
			adm_req_str(c, "-");
		} else {
			adm_req_id(c, &after, true);
		}
		adm_req_str(c, "+");
		adm_req_u64(c, want);
		if (o->consumer != NULL) {
			adm_req_str(c, o->consumer);
		}
		rc = adm_call(x, &page);
		if (rc != 0) {
			break;
		}
		if (adm_rep_is_err(page) || !adm_rep_is_list(page)) {
			rc = adm_rep_is_err(page) ? adm_server_err(page, stream, group, "XPENDING")
					  : adm_bad_reply("XPENDING", page);
			resp_reply_free(page);
			break;
		}
		if (v == NULL) {
			/* the view opens after the first reply: NOGROUP prints nothing */
			v = adm_view_pending_begin(x, stream, group);
			if (v == NULL) {
				resp_reply_free(page);
				rc = ADM_EXIT_FAILED;
				break;
			}
		}
		first = false;
		end = page->elements < want;
		for (size_t i = 0; i < page->elements; i++) {
			const struct resp_reply *row = page->element[i];
			if (!adm_rep_is_list(row) || row->elements != 4 ||
				!adm_rep_id(row->element[0], &after)) {
				rc = adm_bad_reply("XPENDING", row);
				break;
			}
			if (o->payload) {
				adm_req_begin(c, 4);
				adm_req_str(c, "XRANGE");
				adm_req_str(c, stream);
				adm_req_id(c, &after, false);
				adm_req_id(c, &after, false);
			}
		}
		if (rc == 0 && o->payload) {
			rc = adm_send(x);
		}
		for (size_t i = 0; rc == 0 && i < page->elements; i++) {
			const struct resp_reply *row = page->element[i];
			struct resp_reply *ent = NULL;
			struct adm_pending_row pr;
			int64_t idle, count;

			if (o->payload) {
				rc = adm_next_reply(x, &ent);
				if (rc != 0) {
					break;
				}
			}
			memset(&pr, 0, sizeof(pr));
			adm_rep_id(row->element[0], &pr.id);
			pr.consumer = adm_rep_buf(row->element[1]);
			if (!adm_rep_int(row->element[2], &idle) ||
				!adm_rep_int(row->element[3], &count)) {
				rc = adm_bad_reply("XPENDING", row);
				resp_reply_free(ent);
				break;
			}
			pr.idle_ms = idle;
			pr.released = pr.consumer.len == 0 && idle == -1; /* XNACK'd */
			pr.deliveries = (uint64_t)count;
			if (o->min_deliveries >= 0 && count < o->min_deliveries) {
				resp_reply_free(ent);
				continue;
			}
			if (o->limit >= 0 && shown == (uint64_t)o->limit) {
				truncated = true;
				end = true;
				resp_reply_free(ent);
				break;
			}
			if (o->payload) {
				pr.with_payload = true;
				if (adm_rep_is_err(ent)) {
					rc = adm_bad_reply("XRANGE", ent);
					resp_reply_free(ent);
					break;
				}
				pr.deleted = !adm_rep_is_list(ent) || ent->elements == 0;
				if (!pr.deleted && (!adm_rep_is_list(ent->element[0]) ||
							   ent->element[0]->elements != 2 ||
							   adm_rep_entry_fields(ent->element[0]->element[1],
								   &fv, &fvcap, &pr.nfv) != 0)) {
					rc = adm_bad_reply("XRANGE", ent);
					resp_reply_free(ent);
					break;
				}
				pr.fv = fv;
			}
			if (adm_view_pending(v, &pr) != 0) {
				rc = adm_err(ADM_EXIT_FAILED, "out of memory");
			}
			shown++;
			resp_reply_free(ent);
		}
		if (rc == 0 && after.ms == UINT64_MAX && after.seq == UINT64_MAX) {
			end = true;
		}
		resp_reply_free(page);
	}
	adm_view_end(v, truncated);
	echd_free(fv);
	return rc;
}

/* ---- entry -------------------------------------------------------------- */

int
adm_live_entry(struct adm_ctx *x, const char *stream, const struct stream_id *id)
{
	struct adm_conn *c = x->conn;
	struct resp_reply *range = NULL, *groups = NULL, **pend = NULL;
	struct st_buf *fv = NULL;
	size_t fvcap = 0, nfv = 0, ng = 0;
	bool exists, held = false;
	struct adm_view *v = NULL;
	char idbuf[48];
	int rc;

	adm_req_begin(c, 4);
	adm_req_str(c, "XRANGE");
	adm_req_str(c, stream);
	adm_req_id(c, id, false);
	adm_req_id(c, id, false);
	adm_req_begin(c, 3);
	adm_req_str(c, "XINFO");
	adm_req_str(c, "GROUPS");
	adm_req_str(c, stream);
	rc = adm_call(x, &range);
	if (rc == 0) {
		rc = adm_next_reply(x, &groups);
	}
	if (rc != 0) {
		goto out;
	}
	if (adm_rep_is_err(groups)) {
		rc = adm_server_err(groups, stream, NULL, "XINFO GROUPS");
		goto out;
	}
	if (adm_rep_is_err(range) || !adm_rep_is_list(range) || !adm_rep_is_list(groups)) {
		rc = adm_bad_reply("XRANGE", adm_rep_is_err(range) ? range : groups);
		goto out;
	}
	exists = range->elements == 1;
	if (exists &&
		(!adm_rep_is_list(range->element[0]) || range->element[0]->elements != 2 ||
			adm_rep_entry_fields(range->element[0]->element[1], &fv, &fvcap, &nfv) !=
				0)) {
		rc = adm_bad_reply("XRANGE", range);
		goto out;
	}
	ng = groups->elements;
	pend = echd_calloc(ng ? ng : 1, sizeof(*pend));
	if (pend == NULL) {
		rc = adm_err(ADM_EXIT_FAILED, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < ng; i++) {
		struct st_buf name = adm_rep_buf(adm_rep_field(groups->element[i], "name"));
		adm_req_begin(c, 6);
		adm_req_str(c, "XPENDING");
		adm_req_str(c, stream);
		adm_req_arg(c, name.data, name.len);
		adm_req_id(c, id, false);
		adm_req_id(c, id, false);
		adm_req_str(c, "1");
	}
	rc = adm_send(x);
	if (rc != 0) {
		goto out;
	}
	for (size_t i = 0; i < ng; i++) {
		rc = adm_next_reply(x, &pend[i]);
		if (rc != 0) {
			goto out;
		}
		held = held || (adm_rep_is_list(pend[i]) && pend[i]->elements == 1);
	}
	if (!exists && !held) {
		rc = adm_err(ADM_EXIT_NOTFOUND, "no entry %s in stream '%s'", adm_fmt_id(idbuf, id),
			stream);
		goto out;
	}
	v = adm_view_entry_begin(x, stream, id, exists, fv, nfv);
	for (size_t i = 0; v != NULL && i < ng; i++) {
		const struct resp_reply *g = groups->element[i];
		struct adm_entry_group eg;
		struct stream_id last;

		memset(&eg, 0, sizeof(eg));
		eg.name = adm_rep_buf(adm_rep_field(g, "name"));
		eg.delivered = adm_rep_id(adm_rep_field(g, "last-delivered-id"), &last) &&
			       stream_id_cmp(id, &last) <= 0;
		if (adm_rep_is_list(pend[i]) && pend[i]->elements == 1 &&
			adm_rep_is_list(pend[i]->element[0]) &&
			pend[i]->element[0]->elements == 4) {
			const struct resp_reply *row = pend[i]->element[0];
			int64_t n = 0;
			eg.pending = true;
			eg.consumer = adm_rep_buf(row->element[1]);
			adm_rep_int(row->element[2], &eg.idle_ms);
			eg.released = eg.consumer.len == 0 && eg.idle_ms == -1;
			adm_rep_int(row->element[3], &n);
			eg.deliveries = (uint64_t)n;
		}
		if (adm_view_entry_group(v, &eg) != 0) {
			rc = adm_err(ADM_EXIT_FAILED, "out of memory");
			break;
		}
	}
	if (v == NULL) {
		rc = ADM_EXIT_FAILED;
	}
	adm_view_end(v, false);
out:
	for (size_t i = 0; pend != NULL && i < ng; i++) {
		resp_reply_free(pend[i]);
	}
	echd_free(pend);
	echd_free(fv);
	resp_reply_free(range);
	resp_reply_free(groups);
	return rc;
}

/* ---- actions ------------------------------------------------------------ */

/* Exit status 1 unless the stream has the group (XACK and XCLAIM answer 0
 * or nothing for a missing one). */
static int
need_group(struct adm_ctx *x, const char *stream, const char *group)
{
	struct resp_reply *r = NULL;
	int rc = xinfo_consumers(x, stream, group, &r);

	resp_reply_free(r);
	return rc;
}

static bool
valid_ids(int n, char **ids)
{
	for (int i = 0; i < n; i++) {
		struct stream_id id;
		if (stream_id_parse(ids[i], strlen(ids[i]), 0, false, &id) != 0) {
			adm_err(ADM_EXIT_USAGE, "'%s' is not a stream id (ms-seq)", ids[i]);
			return false;
		}
	}
	return true;
}

static void
json_action_header(const char *action, const char *stream, const char *group)
{
	adm_json_obj();
	adm_json_key("action");
	adm_json_cstr(action);
	adm_json_key("stream");
	adm_json_cstr(stream);
	if (group != NULL) {
		adm_json_key("group");
		adm_json_cstr(group);
	}
}

int
adm_live_ack(struct adm_ctx *x, const char *stream, const char *group, int nids, char **ids)
{
	struct adm_conn *c = x->conn;
	struct resp_reply *r = NULL;
	int rc;

	if (!valid_ids(nids, ids)) {
		return ADM_EXIT_USAGE;
	}
	rc = need_group(x, stream, group);
	if (rc != 0) {
		return rc;
	}
	adm_req_begin(c, 3 + (size_t)nids);
	adm_req_str(c, "XACK");
	adm_req_str(c, stream);
	adm_req_str(c, group);
	for (int i = 0; i < nids; i++) {
		adm_req_str(c, ids[i]);
	}
	rc = adm_call(x, &r);
	if (rc != 0) {
		return rc;
	}
	if (r->type != RESP_REPLY_INTEGER) {
		rc = adm_server_err(r, stream, group, "XACK");
	} else if (adm_out.json) {
		json_action_header("ack", stream, group);
		adm_json_key("requested");
		adm_json_int(nids);
		adm_json_key("acked");
		adm_json_int(r->integer);
		adm_json_obj_end();
		adm_json_done();
	} else {
		printf("acknowledged %lld of %d in group '%s'\n", r->integer, nids, group);
	}
	resp_reply_free(r);
	return rc;
}

static void
print_ids(const char *what, const struct resp_reply *list)
{
	size_t n = list != NULL && adm_rep_is_list(list) ? list->elements : 0;

	if (adm_out.json) {
		adm_json_key(what);
		adm_json_arr();
		for (size_t i = 0; i < n; i++) {
			struct st_buf b = adm_rep_buf(list->element[i]);
			adm_json_str(b.data, b.len);
		}
		adm_json_arr_end();
		return;
	}
	printf("%s %zu", what, n);
	for (size_t i = 0; i < n && i < 20; i++) {
		struct st_buf b = adm_rep_buf(list->element[i]);
		printf("%s%.*s", i == 0 ? ": " : " ", (int)b.len, (const char *)b.data);
	}
	printf("%s\n", n > 20 ? " ..." : "");
}

/* By ids: XCLAIM ... JUSTID (moves ownership, keeps delivery counts). By
 * idleness: one XAUTOCLAIM of up to --limit (default 100) entries. */
int
adm_live_claim(struct adm_ctx *x, const char *stream, const char *group, int nids, char **ids)
{
	const struct adm_opts *o = x->o;
	struct adm_conn *c = x->conn;
	uint64_t minidle = o->min_idle > 0 ? (uint64_t)o->min_idle : 0;
	struct resp_reply *r = NULL;
	int rc;

	if (!valid_ids(nids, ids)) {
		return ADM_EXIT_USAGE;
	}
	rc = need_group(x, stream, group);
	if (rc != 0) {
		return rc;
	}
	if (nids > 0) {
		adm_req_begin(c, 6 + (size_t)nids);
		adm_req_str(c, "XCLAIM");
		adm_req_str(c, stream);
		adm_req_str(c, group);
		adm_req_str(c, o->to);
		adm_req_u64(c, minidle);
		for (int i = 0; i < nids; i++) {
			adm_req_str(c, ids[i]);
		}
		adm_req_str(c, "JUSTID");
	} else {
		adm_req_begin(c, 9);
		adm_req_str(c, "XAUTOCLAIM");
		adm_req_str(c, stream);
		adm_req_str(c, group);
		adm_req_str(c, o->to);
		adm_req_u64(c, minidle);
		adm_req_str(c, "0-0");
		adm_req_str(c, "COUNT");
		adm_req_u64(c, o->limit > 0 ? (uint64_t)o->limit : 100);
		adm_req_str(c, "JUSTID");
	}
	rc = adm_call(x, &r);
	if (rc != 0) {
		return rc;
	}
	if (adm_rep_is_err(r) || !adm_rep_is_list(r) || (nids == 0 && r->elements < 2)) {
		rc = adm_rep_is_err(r)
			     ? adm_server_err(r, stream, group, nids ? "XCLAIM" : "XAUTOCLAIM")
			     : adm_bad_reply("XAUTOCLAIM", r);
		resp_reply_free(r);
		return rc;
	}
	if (adm_out.json) {
		json_action_header("claim", stream, group);
		adm_json_key("consumer");
		adm_json_cstr(o->to);
	} else {
		printf("to consumer '%s': ", o->to);
	}
	if (nids > 0) {
		print_ids("claimed", r);
	} else {
		struct st_buf next = adm_rep_buf(r->element[0]);
		print_ids("claimed", r->element[1]);
		if (r->elements > 2) {
			if (!adm_out.json) {
				printf("  ");
			}
			print_ids("deleted", r->element[2]);
		}
		if (adm_out.json) {
			adm_json_key("next");
			adm_json_str(next.data, next.len);
		} else if (!(next.len == 3 && memcmp(next.data, "0-0", 3) == 0)) {
			printf("  more may be idle enough: the scan stopped at %.*s (--limit)\n",
				(int)next.len, (const char *)next.data);
		}
	}
	if (adm_out.json) {
		adm_json_obj_end();
		adm_json_done();
	}
	resp_reply_free(r);
	return 0;
}

int
adm_live_delconsumer(struct adm_ctx *x, const char *stream, const char *group, const char *consumer)
{
	struct adm_conn *c = x->conn;
	struct resp_reply *r = NULL;
	int rc = xinfo_consumers(x, stream, group, &r);

	if (rc != 0) {
		return rc;
	}
	if (find_consumer(r, consumer) == NULL) {
		resp_reply_free(r);
		return adm_err(
			ADM_EXIT_NOTFOUND, "no consumer '%s' in group '%s'", consumer, group);
	}
	resp_reply_free(r);
	r = NULL;
	adm_req_begin(c, 5);
	adm_req_str(c, "XGROUP");
	adm_req_str(c, "DELCONSUMER");
	adm_req_str(c, stream);
	adm_req_str(c, group);
	adm_req_str(c, consumer);
	rc = adm_call(x, &r);
	if (rc != 0) {
		return rc;
	}
	if (r->type != RESP_REPLY_INTEGER) {
		rc = adm_server_err(r, stream, group, "XGROUP DELCONSUMER");
	} else if (adm_out.json) {
		json_action_header("delconsumer", stream, group);
		adm_json_key("consumer");
		adm_json_cstr(consumer);
		adm_json_key("pending_dropped");
		adm_json_int(r->integer);
		adm_json_obj_end();
		adm_json_done();
	} else {
		printf("deleted consumer '%s' of group '%s'; %lld pending entr%s dropped\n",
			consumer, group, r->integer, r->integer == 1 ? "y" : "ies");
	}
	resp_reply_free(r);
	return rc;
}

int
adm_live_setid(struct adm_ctx *x, const char *stream, const char *group, const char *id)
{
	const struct adm_opts *o = x->o;
	struct adm_conn *c = x->conn;
	struct resp_reply *r = NULL;
	int rc;

	adm_req_begin(c, o->entries_read >= -1 ? 7 : 5);
	adm_req_str(c, "XGROUP");
	adm_req_str(c, "SETID");
	adm_req_str(c, stream);
	adm_req_str(c, group);
	adm_req_str(c, id);
	if (o->entries_read >= -1) {
		char buf[24];
		snprintf(buf, sizeof(buf), "%lld", (long long)o->entries_read);
		adm_req_str(c, "ENTRIESREAD");
		adm_req_str(c, buf);
	}
	rc = adm_call(x, &r);
	if (rc != 0) {
		return rc;
	}
	if (adm_rep_is_err(r)) {
		rc = adm_server_err(r, stream, group, "XGROUP SETID");
	} else if (adm_out.json) {
		json_action_header("setid", stream, group);
		adm_json_key("last_delivered_id");
		adm_json_cstr(id);
		adm_json_obj_end();
		adm_json_done();
	} else {
		printf("group '%s' of '%s': last-delivered-id set to %s\n", group, stream, id);
	}
	resp_reply_free(r);
	return rc;
}

int
adm_live_trim(struct adm_ctx *x, const char *stream)
{
	const struct adm_opts *o = x->o;
	struct adm_conn *c = x->conn;
	struct resp_reply *r = NULL;
	size_t argc = 4 + (o->approx ? 1 : 0) + (o->limit >= 0 ? 2 : 0);
	int rc;

	adm_req_begin(c, 2);
	adm_req_str(c, "EXISTS");
	adm_req_str(c, stream);
	rc = adm_call(x, &r);
	if (rc != 0) {
		return rc;
	}
	if (r->type != RESP_REPLY_INTEGER || r->integer != 1) {
		rc = r->type == RESP_REPLY_INTEGER
			     ? adm_err(ADM_EXIT_NOTFOUND, "no stream '%s'", stream)
			     : adm_bad_reply("EXISTS", r);
		resp_reply_free(r);
		return rc;
	}
	resp_reply_free(r);
	r = NULL;
	adm_req_begin(c, argc);
	adm_req_str(c, "XTRIM");
	adm_req_str(c, stream);
	adm_req_str(c, o->minid != NULL ? "MINID" : "MAXLEN");
	if (o->approx) {
		adm_req_str(c, "~");
	}
	if (o->minid != NULL) {
		adm_req_str(c, o->minid);
	} else {
		adm_req_u64(c, (uint64_t)o->maxlen);
	}
	if (o->limit >= 0) {
		adm_req_str(c, "LIMIT");
		adm_req_u64(c, (uint64_t)o->limit);
	}
	rc = adm_call(x, &r);
	if (rc != 0) {
		return rc;
	}
	if (r->type != RESP_REPLY_INTEGER) {
		rc = adm_server_err(r, stream, NULL, "XTRIM");
	} else if (adm_out.json) {
		json_action_header("trim", stream, NULL);
		adm_json_key("removed");
		adm_json_int(r->integer);
		adm_json_obj_end();
		adm_json_done();
	} else {
		char buf[40];
		printf("removed %s entr%s from '%s'\n", adm_fmt_count(buf, (uint64_t)r->integer),
			r->integer == 1 ? "y" : "ies", stream);
	}
	resp_reply_free(r);
	return rc;
}

/* ---- stats ---------------------------------------------------------------- */

/* The value of "key:" in INFO text, copied into buf ("" when missing). */
static const char *
info_get(const struct resp_reply *info, const char *key, char *buf, size_t cap)
{
	size_t kl = strlen(key);
	const char *p = info->str, *end = info->str + info->len;

	buf[0] = '\0';
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *le = nl != NULL ? nl : end;
		size_t l = (size_t)(le - p);
		if (l > 0 && p[l - 1] == '\r') {
			l--;
		}
		if (l > kl && memcmp(p, key, kl) == 0 && p[kl] == ':') {
			size_t vl = l - kl - 1 < cap - 1 ? l - kl - 1 : cap - 1;
			memcpy(buf, p + kl + 1, vl);
			buf[vl] = '\0';
			return buf;
		}
		p = le + 1;
	}
	return buf;
}

/* "p50=901.119,p99=5799.935" (microseconds) as "p50 0.90 ms, p99 5.80 ms". */
static const char *
fmt_pcts(const char *line, char *buf, size_t cap)
{
	size_t n = 0;

	buf[0] = '\0';
	while (*line != '\0' && n < cap) {
		const char *eq = strchr(line, '='), *comma = strchr(line, ',');
		size_t len = comma != NULL ? (size_t)(comma - line) : strlen(line);
		if (eq == NULL || (comma != NULL && eq > comma)) {
			break;
		}
		n += (size_t)snprintf(buf + n, cap - n, "%s%.*s %.2f ms", n ? ", " : "",
			(int)(eq - line), line, strtod(eq + 1, NULL) / 1000.0);
		line += len + (comma != NULL);
	}
	return buf;
}

static uint64_t
info_u64(const struct resp_reply *info, const char *key)
{
	char buf[64];
	uint64_t v = 0;

	adm_parse_u64(info_get(info, key, buf, sizeof(buf)), &v);
	return v;
}

int
adm_live_stats(struct adm_ctx *x)
{
	static const char *const raw[] = {
		"redis_version",
		"echd_version",
		"process_id",
		"tcp_port",
		"uptime_in_seconds",
		"connected_clients",
		"blocked_clients",
		"maxclients",
		"total_connections_received",
		"total_commands_processed",
		"instantaneous_ops_per_sec",
		"total_error_replies",
		"rejected_connections",
		"commits",
		"commit_failures",
		"fsyncs",
		"avg_batch_size",
		"appendfsync",
		"map_grows",
		"used_memory",
		"used_memory_rss",
		"lmdb_map_size",
		"lmdb_used_bytes",
		"lmdb_page_size",
		"maxdisk",
		"storage_backend",
	};
	/* how long commits and their flushes took: what every reply waits for */
	static const char *const pcts[] = {
		"commit_latency_percentiles_usec",
		"flush_latency_percentiles_usec",
	};
	struct adm_conn *c = x->conn;
	struct resp_reply *r = NULL;
	struct adm_view *v;
	char a[64], b[64], d[64], line[256], pl[1024];
	int rc;

	adm_req_begin(c, 1);
	adm_req_str(c, "INFO");
	rc = adm_call(x, &r);
	if (rc != 0) {
		return rc;
	}
	if (!adm_rep_is_text(r)) {
		rc = adm_bad_reply("INFO", r);
		resp_reply_free(r);
		return rc;
	}
	v = adm_view_stats_begin(x);
	if (v == NULL) {
		resp_reply_free(r);
		return ADM_EXIT_FAILED;
	}
	if (adm_out.json) {
		for (size_t i = 0; i < sizeof(raw) / sizeof(raw[0]); i++) {
			info_get(r, raw[i], a, sizeof(a));
			if (a[0] != '\0') {
				adm_view_stat(v, raw[i], NULL, NULL, a, true);
			}
		}
		for (size_t i = 0; i < sizeof(pcts) / sizeof(pcts[0]); i++) {
			info_get(r, pcts[i], pl, sizeof(pl));
			if (pl[0] != '\0') {
				adm_view_stat(v, pcts[i], NULL, NULL, pl, false);
			}
		}
	} else {
		char e[64], f[64];
		uint64_t map = info_u64(r, "lmdb_map_size"), used = info_u64(r, "lmdb_used_bytes");

		info_get(r, "echd_version", a, sizeof(a));
		info_get(r, "redis_version", b, sizeof(b));
		snprintf(line, sizeof(line), "echd %s (redis %s), pid %s", a[0] ? a : "?", b,
			info_get(r, "process_id", d, sizeof(d)));
		adm_view_stat(v, NULL, "server", line, NULL, false);
		adm_view_stat(v, NULL, "uptime",
			adm_fmt_duration(a, (int64_t)info_u64(r, "uptime_in_seconds") * 1000), NULL,
			false);
		snprintf(line, sizeof(line), "%s connected, %s blocked, %s max",
			adm_fmt_count(a, info_u64(r, "connected_clients")),
			adm_fmt_count(b, info_u64(r, "blocked_clients")),
			adm_fmt_count(d, info_u64(r, "maxclients")));
		adm_view_stat(v, NULL, "clients", line, NULL, false);
		snprintf(line, sizeof(line), "%s processed, %s/s now, %s error replies",
			adm_fmt_count(a, info_u64(r, "total_commands_processed")),
			adm_fmt_count(b, info_u64(r, "instantaneous_ops_per_sec")),
			adm_fmt_count(d, info_u64(r, "total_error_replies")));
		adm_view_stat(v, NULL, "commands", line, NULL, false);
		snprintf(line, sizeof(line), "%s (%s failed), avg batch %s, fsyncs %s",
			adm_fmt_count(a, info_u64(r, "commits")),
			adm_fmt_count(b, info_u64(r, "commit_failures")),
			info_get(r, "avg_batch_size", d, sizeof(d)),
			adm_fmt_count(e, info_u64(r, "fsyncs")));
		adm_view_stat(v, NULL, "commits", line, NULL, false);
		snprintf(line, sizeof(line), "appendfsync %s",
			info_get(r, "appendfsync", a, sizeof(a)));
		adm_view_stat(v, NULL, "durability", line, NULL, false);
		for (size_t i = 0; i < sizeof(pcts) / sizeof(pcts[0]); i++) {
			char h[512];
			if (info_get(r, pcts[i], pl, sizeof(pl))[0] != '\0') {
				adm_view_stat(v, NULL, i == 0 ? "commit time" : "flush time",
					fmt_pcts(pl, h, sizeof(h)), NULL, false);
			}
		}
		snprintf(line, sizeof(line), "%s used of a %s map (%.0f%%), page %s",
			adm_fmt_bytes(a, used), adm_fmt_bytes(b, map),
			map ? 100.0 * (double)used / (double)map : 0.0,
			adm_fmt_bytes(d, info_u64(r, "lmdb_page_size")));
		adm_view_stat(v, NULL, "storage", line, NULL, false);
		snprintf(line, sizeof(line), "%s used, %s resident",
			adm_fmt_bytes(a, info_u64(r, "used_memory")),
			adm_fmt_bytes(f, info_u64(r, "used_memory_rss")));
		adm_view_stat(v, NULL, "memory", line, NULL, false);
	}
	/* "db0:keys=3,expires=0,avg_ttl=0" lines */
	{
		const char *p = r->str, *end = r->str + r->len;
		if (adm_out.json) {
			adm_json_key("keyspace");
			adm_json_obj();
		}
		while (p < end) {
			const char *nl = memchr(p, '\n', (size_t)(end - p));
			const char *le = nl != NULL ? nl : end;
			unsigned db;
			unsigned long long keys;
			if (sscanf(p, "db%u:keys=%llu", &db, &keys) == 2) {
				if (adm_out.json) {
					snprintf(line, sizeof(line), "db%u", db);
					adm_json_key(line);
					adm_json_uint(keys);
				} else {
					snprintf(a, sizeof(a), "keys db%u", db);
					adm_view_stat(
						v, NULL, a, adm_fmt_count(b, keys), NULL, false);
				}
			}
			p = le + 1;
		}
		if (adm_out.json) {
			adm_json_obj_end();
		}
	}
	adm_view_end(v, false);
	resp_reply_free(r);
	return 0;
}

/* ---- the data directory ------------------------------------------------------ */

/* Whether the server runs on this machine, so that its pid means a process here. */
static bool
server_is_local(const struct adm_opts *o)
{
	return o->unixsocket != NULL || strcmp(o->host, "localhost") == 0 ||
	       strncmp(o->host, "127.", 4) == 0 || strcmp(o->host, "::1") == 0;
}

int
adm_live_data_dir(struct adm_ctx *x, char **out)
{
	struct adm_conn *c = x->conn;
	struct resp_reply *r = NULL, *info = NULL;
	const struct resp_reply *val = NULL;
	char path[PATH_MAX], pid[32];
	struct stat sb;
	int rc;

	adm_req_begin(c, 3);
	adm_req_str(c, "CONFIG");
	adm_req_str(c, "GET");
	adm_req_str(c, "dir");
	adm_req_begin(c, 2);
	adm_req_str(c, "INFO");
	adm_req_str(c, "server");
	rc = adm_call(x, &r);
	if (rc == 0) {
		rc = adm_next_reply(x, &info);
	}
	if (rc != 0) {
		goto out;
	}
	val = adm_rep_field(r, "dir");
	if (val == NULL || !adm_rep_is_text(val) || val->len == 0 || val->len >= PATH_MAX / 2) {
		rc = adm_err(ADM_EXIT_FAILED, "CONFIG GET dir gave no directory: give --data-dir");
		goto out;
	}
	if (val->str[0] == '/') {
		snprintf(path, sizeof(path), "%s", val->str);
	} else {
		/* relative to the server's working directory: only readable when
		 * the server runs on this machine */
		char link[64], cwd[PATH_MAX / 2];
		ssize_t n;
		if (!server_is_local(x->o) || !adm_rep_is_text(info) ||
			info_get(info, "process_id", pid, sizeof(pid))[0] == '\0') {
			rc = adm_err(ADM_EXIT_FAILED,
				"the server's dir '%s' is relative: give --data-dir", val->str);
			goto out;
		}
		snprintf(link, sizeof(link), "/proc/%s/cwd", pid);
		n = readlink(link, cwd, sizeof(cwd) - 1);
		if (n < 0) {
			rc = adm_err(ADM_EXIT_FAILED,
				"the server's dir '%s' is relative and its working directory "
				"unknown "
				"(%s): give --data-dir",
				val->str, strerror(errno));
			goto out;
		}
		cwd[n] = '\0';
		snprintf(path, sizeof(path), "%s/%s", cwd, val->str);
	}
	if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
		rc = adm_err(ADM_EXIT_CONNECT,
			"the server's data directory %s is not reachable from here: give "
			"--data-dir",
			path);
		goto out;
	}
	*out = echd_strndup(path, strlen(path));
	if (*out == NULL) {
		rc = adm_err(ADM_EXIT_FAILED, "out of memory");
	}
out:
	resp_reply_free(r);
	resp_reply_free(info);
	return rc;
}
