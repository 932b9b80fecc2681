/* cmd_group.c - consumer-group commands: XGROUP, XREADGROUP, XACK, XNACK,
 * XPENDING, XCLAIM, XAUTOCLAIM and the group parts of XINFO.
 *
 * Each runs in its own nested write transaction inside the loop turn's
 * batch, so a delivery (cursor + PEL rows) commits with the reply that
 * reports it, or not at all.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "broker.h"


static struct st_buf
arg_buf(const struct resp_arg *a)
{
	struct st_buf b = {a->p, a->len};
	return b;
}

static void
reply_nogroup(struct brk_ctx *x, const struct resp_arg *key, const struct resp_arg *group,
	const char *suffix)
{
	resp_add_errorf(x->w, "NOGROUP No such key '%.*s' or consumer group '%.*s'%s",
		(int)key->len, key->p, (int)group->len, group->p, suffix);
}

/* Looks up stream and group; replies NOGROUP when either is missing.
 * Returns 0 (found), 1 (replied), or a storage error. */
static int
lookup_stream_group(struct brk_ctx *x, const struct resp_arg *key, const struct resp_arg *group,
	struct stream_meta *m, struct group_meta *g, const char *suffix)
{
	struct st_buf k = arg_buf(key), gn = arg_buf(group);
	int rc;

	rc = brk_lookup(x, &k, m);
	if (rc == 0) {
		rc = group_lookup(x->txn, m, &gn, g);
	}
	if (rc == ECHD_ENOTFOUND) {
		reply_nogroup(x, key, group, suffix);
		return 1;
	}
	return rc;
}

int
brk_lookup_group(struct brk_ctx *x, const struct st_buf *key, const struct st_buf *gname,
	const char *nokey, struct stream_meta *m, struct group_meta *g)
{
	int rc = brk_lookup(x, key, m);

	if (rc == ECHD_ENOTFOUND) {
		resp_add_error(x->w, nokey);
		return 1;
	}
	if (rc == 0) {
		rc = group_lookup(x->txn, m, gname, g);
		if (rc == ECHD_ENOTFOUND) {
			resp_add_errorf(x->w, "NOGROUP No such consumer group '%.*s' for key name '%.*s'",
				(int)gname->len, (const char *)gname->data, (int)key->len,
				(const char *)key->data);
			return 1;
		}
	}
	return rc;
}

/* Finds or creates the consumer, marking it seen now (Redis 7.2+). The
 * seen-time alone is not written (seen.c): *before is what the consumer
 * was, and save_touched() writes it only when more than that changed. */
static int
touch_consumer(struct brk_ctx *x, struct group_meta *g, const struct st_buf *name,
	struct consumer_meta *c, uint64_t now, struct consumer_meta *before)
{
	int rc = consumer_lookup(x->txn, g, name, c);

	if (rc == ECHD_ENOTFOUND) {
		rc = consumer_create(x->txn, g, name, now, c);
		if (rc == 0) {
			/* a change, as XGROUP CREATECONSUMER's is (Redis counts it
			 * in streamCreateConsumer()) */
			x->dirty++;
			memset(before, 0, sizeof(*before)); /* never equal to c: saved */
			return 0;
		}
	}
	if (rc != 0) {
		return rc;
	}
	c->seen_time = now;
	*before = *c;
	brk_seen_note(x->srv, c->cid, now);
	return 0;
}

/* Writes the consumer and the group back if the command changed them
 * beyond the consumer's seen-time (kept by touch_consumer()); the
 * seen-time too once the command writes anyway. The structs have no
 * padding (all 64-bit fields), so memcmp compares their values. */
static int
save_touched(struct brk_ctx *x, const struct stream_meta *m, const struct st_buf *gname,
	const struct group_meta *g, const struct group_meta *g_before,
	const struct st_buf *cname, const struct consumer_meta *c,
	const struct consumer_meta *c_before)
{
	int rc = 0;

	if (brk_cmd_wrote(x) || x->dirty > 0 || memcmp(c, c_before, sizeof(*c)) != 0) {
		rc = consumer_save(x->txn, g, cname, c);
	}
	if (rc == 0 && memcmp(g, g_before, sizeof(*g)) != 0) {
		rc = group_save(x->txn, m, gname, g);
	}
	return rc;
}

/* ------------------------------------------------------------------------
 * XGROUP
 * ---------------------------------------------------------------------- */

static const char *const xgroup_help[] = {
	"XGROUP <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
	"CREATE <key> <groupname> <id|$> [option]",
	"    Create a new consumer group. Options are:",
	"    * MKSTREAM",
	"      Create the empty stream if it does not exist.",
	"    * ENTRIESREAD entries_read",
	"      Set the group's entries_read counter (internal use).",
	"CREATECONSUMER <key> <groupname> <consumer>",
	"    Create a new consumer in the specified group.",
	"DELCONSUMER <key> <groupname> <consumer>",
	"    Remove the specified consumer.",
	"DESTROY <key> <groupname>",
	"    Remove the specified group.",
	"SETID <key> <groupname> <id|$> [ENTRIESREAD entries_read]",
	"    Set the current group ID and entries_read counter.",
	"SETPOLICY <key> <groupname> [ACKWAIT ms] [BACKOFF n ms1 ... msn] [MAXDELIVER n]",
	"          [DEADLETTER key] [MAXACKPENDING n] [RESET]",
	"    Set the group's delivery policy (echd's extension); 0 turns an option off.",
	"HELP",
	"    Print this help.",
};


void
brk_reply_subcommand_syntax(struct brk_ctx *x, const char *help)
{
	resp_add_errorf(x->w, "ERR unknown subcommand or wrong number of arguments for '%.*s'. "
			      "Try %s HELP.",
		(int)(x->argv[1].len < 128 ? x->argv[1].len : 128), x->argv[1].p, help);
}

void
brk_reply_help(struct resp_writer *w, const char *const *lines, size_t n)
{
	resp_add_array(w, n);
	for (size_t i = 0; i < n; i++) {
		resp_add_simple(w, lines[i]);
	}
}

int
brk_cmd_xgroup(struct brk_ctx *x)
{
	const struct resp_arg *opt = &x->argv[1];
	struct stream_meta m;
	struct group_meta g;
	struct st_buf key, gname;
	long long entries_read = GROUP_ENTRIES_READ_UNKNOWN;
	bool mkstream = false, have_stream = false, have_group = false;
	bool create, setid;
	int rc;

	/* the subcommand and its arity were checked by brk_subcommand_ok() */
	if (brk_arg_eq(opt, "HELP")) {
		BRK_REPLY_HELP(x->w, xgroup_help);
		return 0;
	}
	if (brk_arg_eq(opt, "SETPOLICY")) {
		return brk_xgroup_setpolicy(x);
	}
	create = brk_arg_eq(opt, "CREATE");
	setid = brk_arg_eq(opt, "SETID");
	for (int i = 5; i < x->argc;) {
		if (create && brk_arg_eq(&x->argv[i], "MKSTREAM")) {
			mkstream = true;
			i++;
		} else if ((create || setid) && brk_arg_eq(&x->argv[i], "ENTRIESREAD") &&
			   i + 1 < x->argc) {
			if (!brk_arg_ll(x, &x->argv[i + 1], &entries_read)) {
				return 0;
			}
			if (entries_read < 0 && entries_read != GROUP_ENTRIES_READ_UNKNOWN) {
				resp_add_error(x->w, "ERR value for ENTRIESREAD must be positive or -1");
				return 0;
			}
			i += 2;
		} else {
			brk_reply_subcommand_syntax(x, "XGROUP");
			return 0;
		}
	}
	key = arg_buf(&x->argv[2]);
	gname = arg_buf(&x->argv[3]);
	rc = brk_lookup(x, &key, &m);
	if (rc == 0) {
		have_stream = true;
		rc = group_lookup(x->txn, &m, &gname, &g);
		have_group = rc == 0;
		if (rc == ECHD_ENOTFOUND) {
			rc = 0;
		}
	} else if (rc == ECHD_ENOTFOUND) {
		rc = 0;
	}
	if (rc != 0) {
		return rc;
	}
	if (!mkstream) {
		if (!have_stream) {
			resp_add_error(x->w, BRK_ERR_NOKEY_XGROUP);
			return 0;
		}
		if (!have_group && (setid || brk_arg_eq(opt, "CREATECONSUMER") ||
					   brk_arg_eq(opt, "DELCONSUMER"))) {
			resp_add_errorf(x->w, "NOGROUP No such consumer group '%.*s' for key name '%.*s'",
				(int)gname.len, (const char *)gname.data, (int)key.len,
				(const char *)key.data);
			return 0;
		}
	}
	if ((create && x->argc > 8) || (setid && x->argc != 5 && x->argc != 7)) {
		/* As Redis: options parse at any count, the key and group are
		 * checked, and only then is CREATE held to 5..8 arguments and
		 * SETID to 5 or 7 (an option given twice). */
		brk_reply_subcommand_syntax(x, "XGROUP");
		return 0;
	}
	if (create || setid) {
		struct stream_id id;
		const struct resp_arg *ida = &x->argv[4];
		if (ida->len == 1 && ida->p[0] == '$') {
			if (have_stream) {
				id = m.last;
			} else {
				id.ms = id.seq = 0;
			}
		} else if (setid) {
			/* SETID also takes "-" and "+" (0-0 and the largest id) */
			if (stream_id_parse(ida->p, ida->len, 0, true, &id) != 0) {
				resp_add_error(x->w, BRK_ERR_BADID);
				return 0;
			}
		} else if (!brk_parse_strict_id(x, ida, 0, &id)) {
			return 0;
		}
		/* As Redis 8.2.2: a count past what was ever added is clamped to
		 * it (a new MKSTREAM stream has added nothing). */
		if (entries_read > 0 &&
			(uint64_t)entries_read > (have_stream ? m.entries_added : 0)) {
			entries_read = have_stream ? (long long)m.entries_added : 0;
		}
		if (setid) {
			g.last_delivered = id;
			g.entries_read = entries_read;
			rc = group_save(x->txn, &m, &gname, &g);
			if (rc != 0) {
				return rc;
			}
			x->dirty++;
			resp_add_simple(x->w, "OK");
			return 0;
		}
		if (gname.len > GROUP_NAME_MAX) {
			return ECHD_ETOOLONG; /* before MKSTREAM writes anything */
		}
		if (!have_stream) {
			rc = stream_create(x->txn, x->c->db, &key, &m);
			if (rc != 0) {
				return rc;
			}
			brk_signal_key(x->srv, x->c->db, key.data, key.len);
		}
		if (have_group) {
			resp_add_error(x->w, "BUSYGROUP Consumer Group name already exists");
			return 0;
		}
		rc = group_create(x->txn, &m, &gname, &id, entries_read, &g);
		if (rc == 0) {
			rc = stream_meta_save(x->txn, x->c->db, &key, &m);
		}
		if (rc != 0) {
			return rc;
		}
		x->dirty++;
		resp_add_simple(x->w, "OK");
		return 0;
	}
	if (brk_arg_eq(opt, "DESTROY")) {
		if (!have_group) {
			resp_add_int(x->w, 0);
			return 0;
		}
		rc = group_destroy(x->txn, &m, &gname);
		if (rc == 0) {
			rc = stream_meta_save(x->txn, x->c->db, &key, &m);
		}
		if (rc != 0) {
			return rc;
		}
		x->srv->gc_pending = true;
		x->dirty++;
		/* blocked readers of this group must now learn it is gone */
		brk_signal_key(x->srv, x->c->db, key.data, key.len);
		resp_add_int(x->w, 1);
		return 0;
	}
	if (brk_arg_eq(opt, "CREATECONSUMER")) {
		struct consumer_meta c;
		struct st_buf cname = arg_buf(&x->argv[4]);
		rc = consumer_create(x->txn, &g, &cname, brk_now_ms(), &c);
		if (rc == ECHD_EEXIST) {
			resp_add_int(x->w, 0);
			return 0;
		}
		if (rc == 0) {
			rc = group_save(x->txn, &m, &gname, &g);
		}
		if (rc != 0) {
			return rc;
		}
		x->dirty++;
		resp_add_int(x->w, 1);
		return 0;
	}
	/* DELCONSUMER */
	{
		struct st_buf cname = arg_buf(&x->argv[4]);
		uint64_t pending = 0;
		rc = consumer_delete(x->txn, &g, &cname, &pending);
		if (rc == ECHD_ENOTFOUND) {
			resp_add_int(x->w, 0);
			return 0;
		}
		if (rc == 0) {
			rc = group_save(x->txn, &m, &gname, &g);
		}
		if (rc != 0) {
			return rc;
		}
		x->dirty++;
		resp_add_int(x->w, (long long)pending);
		return 0;
	}
}

/* ------------------------------------------------------------------------
 * XREADGROUP
 * ---------------------------------------------------------------------- */

static uint64_t idle_ms(uint64_t now, uint64_t t);
static bool entry_exists(struct brk_ctx *x, const struct stream_meta *m, const struct stream_id *id,
	int *rc);

/* A row released by XNACK DELAY whose delay has not passed: no one takes
 * it (CLAIM, XCLAIM, XAUTOCLAIM, a policy's redelivery) before then. */
static bool
held_back(const struct pel_row *r, uint64_t now)
{
	return r->cid == PEL_UNOWNED && r->delivery_time > now;
}

/* A delivery count plus one delivery, staying at XNACK FATAL's LLONG_MAX
 * (Redis' counter would wrap to a negative reply). */
static uint64_t
count_incr(uint64_t n)
{
	return n < (uint64_t)LLONG_MAX ? n + 1 : n;
}

/* One entry of a CLAIM read: [id, fields, idle ms, deliveries before
 * this one]; a new entry's are 0 and 0. */
static void
reply_claim_entry(struct resp_writer *w, const struct stream_id *id, const struct st_buf *fields,
	uint64_t idle, uint64_t count)
{
	resp_add_array(w, 4);
	brk_reply_id(w, id);
	brk_reply_fields(w, fields);
	resp_add_int(w, (long long)idle);
	resp_add_int(w, (long long)count);
}

/* Delivers up to count entries after the group's cursor to consumer c,
 * in CLAIM's four-element shape when claim is set. With header false the
 * entries go into an array the caller opened. */
static int
serve_new(struct brk_ctx *x, struct stream_meta *m, struct group_meta *g,
	struct consumer_meta *c, uint64_t count, bool noack, bool claim, uint64_t now, bool header,
	size_t *n, struct brk_read_budget *budget)
{
	struct stream_id start = g->last_delivered, end = {UINT64_MAX, UINT64_MAX}, id, last;
	struct stream_iter *it;
	struct st_buf fields;
	bool fresh = false;
	size_t h = 0;
	int rc;

	*n = 0;
	if (header) {
		h = resp_add_deferred(x->w);
	}
	if (!stream_id_incr(&start)) {
		if (header) {
			resp_set_deferred_len(x->w, h, '*', 0);
		}
		return 0;
	}
	if (!noack) {
		/* Rows above the cursor exist only after SETID moved it back
		 * or XCLAIM FORCE; with none, no lookup per delivery. */
		rc = pel_last(x->txn, g, &last);
		if (rc == ECHD_ENOTFOUND) {
			fresh = true;
		} else if (rc != 0) {
			return rc;
		} else {
			fresh = stream_id_cmp(&last, &start) < 0;
		}
	}
	rc = stream_iter_create(x->txn, m, &start, &end, false, &it);
	if (rc != 0) {
		return rc;
	}
	/* a reply that outgrew the output limit is dropped: deliver no more */
	while ((count == 0 || *n < count) && !x->w->out->oom &&
		!brk_read_budget_spent(budget, x->w) &&
		(rc = stream_iter_next(it, &id, &fields)) == 0) {
		if (claim) {
			reply_claim_entry(x->w, &id, &fields, 0, 0);
		} else {
			brk_reply_entry(x->w, &id, &fields);
		}
		group_advance(m, g, &id);
		if (!noack) {
			/* The PEL write may move the iterator's cursor in LMDB, but
			 * the entries table is not the one written here. */
			rc = fresh ? pel_deliver_new(x->txn, g, c, &id, now) :
				     pel_deliver(x->txn, g, c, &id, now);
			if (rc != 0) {
				break;
			}
		}
		(*n)++;
		budget->emitted++;
	}
	stream_iter_destroy(it);
	if (rc != 0 && rc != ECHD_ENOTFOUND) {
		return rc;
	}
	if (header) {
		resp_set_deferred_len(x->w, h, '*', *n);
	}
	return 0;
}

/* '>' in a group with a policy: the due rows first (redelivered in the
 * plain shape), then new entries as MAXACKPENDING leaves room; COUNT over
 * both. The entries go into an array the caller opened. */
static int
serve_policy_new(struct brk_ctx *x, const struct st_buf *key, const struct st_buf *gname,
	struct stream_meta *m, struct group_meta *g, struct consumer_meta *c,
	const struct pel_due *due, bool scanned, uint64_t count, bool noack, uint64_t now,
	size_t *n, struct brk_read_budget *budget)
{
	size_t nre = 0, nnew = 0;
	uint64_t room;
	int rc = 0;

	if (scanned) {
		rc = brk_policy_serve(x, key, gname, m, g, c, due, count, now, &nre, budget);
	}
	room = brk_policy_room(g, count == 0 ? 0 : count - nre);
	if (rc == 0 && (count == 0 || nre < count) && room != UINT64_MAX) {
		rc = serve_new(x, m, g, c, room, noack, false, now, false, &nnew, budget);
		if (rc == 0 && nnew > 0 && !noack) {
			rc = brk_policy_delivered(x, key, gname, g, now);
		}
	}
	*n = nre + nnew;
	return rc;
}

/* ---- XREADGROUP CLAIM -------------------------------------------------- */

/* The rows of a group PEL that CLAIM min-idle-time takes now, in the
 * order it takes them: released ones (delivery time 0) first, then by
 * idle time, longest first; ties by id. */
struct claim_set {
	struct pel_row *rows;
	size_t n, cap;
	uint64_t next_at; /* ms: when the next row becomes claimable; UINT64_MAX none */
};

static int
claim_cmp(const void *a, const void *b)
{
	const struct pel_row *x = a, *y = b;

	if (x->delivery_time != y->delivery_time) {
		return x->delivery_time < y->delivery_time ? -1 : 1;
	}
	return stream_id_cmp(&x->id, &y->id);
}

/* One walk of the group PEL: O(pending). */
static int
claim_collect(struct brk_ctx *x, const struct group_meta *g, uint64_t minidle, uint64_t now,
	struct claim_set *cs)
{
	struct stream_id lo = {0, 0}, hi = {UINT64_MAX, UINT64_MAX};
	struct pel_iter *it;
	struct pel_row r;
	int rc;

	cs->next_at = UINT64_MAX;
	rc = pel_iter_create(x->txn, g, 0, &lo, &hi, &it);
	if (rc != 0) {
		return rc;
	}
	while ((rc = pel_iter_next(it, &r)) == 0) {
		if (held_back(&r, now) ||
			(r.cid != PEL_UNOWNED && idle_ms(now, r.delivery_time) < minidle)) {
			uint64_t at = r.cid == PEL_UNOWNED ? r.delivery_time : r.delivery_time + minidle;
			if (at < cs->next_at) {
				cs->next_at = at;
			}
			continue;
		}
		if (cs->n == cs->cap) {
			size_t ncap = cs->cap ? cs->cap * 2 : 16;
			struct pel_row *nr = echd_realloc(cs->rows, ncap * sizeof(*nr));
			if (nr == NULL) {
				rc = -ENOMEM;
				break;
			}
			cs->rows = nr;
			cs->cap = ncap;
		}
		cs->rows[cs->n++] = r;
	}
	pel_iter_destroy(it);
	if (rc != 0 && rc != ECHD_ENOTFOUND) {
		return rc;
	}
	if (cs->n > 1) {
		/* qsort() must not see the NULL of an empty set */
		qsort(cs->rows, cs->n, sizeof(*cs->rows), claim_cmp);
	}
	return 0;
}

int
brk_pel_entry(struct brk_ctx *x, const struct stream_meta *m, struct group_meta *g,
	struct consumer_meta *c, const struct pel_row *r, struct st_buf *fields)
{
	int rc = stream_get_entry(x->txn, m, &r->id, fields);

	if (rc != ECHD_ENOTFOUND) {
		return rc;
	}
	rc = pel_remove(x->txn, g, &r->id);
	if (rc != 0) {
		return rc;
	}
	if (r->cid == c->cid) {
		c->pending--; /* keep our copy equal to the stored record */
	}
	x->dirty++;
	return ECHD_ENOTFOUND;
}

int
brk_pel_take(struct brk_ctx *x, struct group_meta *g, struct consumer_meta *c,
	const struct pel_row *r, uint64_t now)
{
	struct pel_row t = *r;

	t.cid = c->cid;
	t.delivery_time = now;
	t.delivery_count = count_incr(r->delivery_count);
	x->dirty++;
	return pel_put(x->txn, g, c, &t, r->cid);
}

/* Whether a row of cs still has its entry: Redis serves a CLAIM read
 * only for a claimable row it can reply (the first live one decides). */
static int
claim_any_live(struct brk_ctx *x, const struct stream_meta *m, const struct claim_set *cs,
	bool *live)
{
	int rc = 0;

	*live = false;
	for (size_t i = 0; i < cs->n && !*live && rc == 0; i++) {
		*live = entry_exists(x, m, &cs->rows[i].id, &rc);
	}
	return rc;
}

/* Claims up to count rows of cs (0: all) for c and replies each as [id,
 * fields, idle ms, deliveries before this one]. The idle time is Redis':
 * now less the delivery time, so a row released by XNACK (delivery time
 * 0) shows the clock. A row whose entry is gone from the stream is
 * skipped and stays pending (XAUTOCLAIM and XCLAIM drop it, CLAIM not). */
static int
serve_claimed(struct brk_ctx *x, const struct stream_meta *m, struct group_meta *g,
	struct consumer_meta *c, const struct claim_set *cs, uint64_t count, uint64_t now,
	size_t *n, struct brk_read_budget *budget)
{
	int rc = 0;

	*n = 0;
	for (size_t i = 0; i < cs->n && (count == 0 || *n < count); i++) {
		if (x->w->out->oom || brk_read_budget_spent(budget, x->w)) {
			break;
		}
		struct pel_row r = cs->rows[i];
		struct st_buf fields;

		rc = stream_get_entry(x->txn, m, &r.id, &fields);
		if (rc == ECHD_ENOTFOUND) {
			continue;
		}
		if (rc != 0) {
			return rc;
		}
		reply_claim_entry(x->w, &r.id, &fields, idle_ms(now, r.delivery_time),
			r.delivery_count);
		rc = brk_pel_take(x, g, c, &r, now);
		if (rc != 0) {
			return rc;
		}
		(*n)++;
		budget->emitted++;
	}
	return 0;
}

/* Replies the consumer's pending entries after start (its history). */
static int
serve_history(struct brk_ctx *x, struct stream_meta *m, struct group_meta *g,
	struct consumer_meta *c, const struct stream_id *start, uint64_t count, uint64_t now,
	struct brk_read_budget *budget)
{
	struct stream_id end = {UINT64_MAX, UINT64_MAX};
	struct pel_iter *it;
	struct pel_row r;
	size_t h, n = 0;
	int rc;

	h = resp_add_deferred(x->w);
	rc = pel_iter_create(x->txn, g, c->cid, start, &end, &it);
	if (rc != 0) {
		return rc;
	}
	while ((count == 0 || n < count) && !x->w->out->oom &&
		!brk_read_budget_spent(budget, x->w) && (rc = pel_iter_next(it, &r)) == 0) {
		struct st_buf fields;
		rc = stream_get_entry(x->txn, m, &r.id, &fields);
		if (rc == ECHD_ENOTFOUND) {
			/* pending, but deleted from the stream: the id, no fields */
			resp_add_array(x->w, 2);
			brk_reply_id(x->w, &r.id);
			resp_add_null_array(x->w);
			rc = 0;
		} else if (rc == 0) {
			brk_reply_entry(x->w, &r.id, &fields);
			r.delivery_time = now;
			r.delivery_count = count_incr(r.delivery_count);
			rc = pel_put(x->txn, g, c, &r, c->cid);
		}
		if (rc != 0) {
			break;
		}
		n++;
		budget->emitted++;
	}
	pel_iter_destroy(it);
	if (rc != 0 && rc != ECHD_ENOTFOUND) {
		return rc;
	}
	resp_set_deferred_len(x->w, h, '*', n);
	return 0;
}

int
brk_cmd_xreadgroup(struct brk_ctx *x)
{
	const struct resp_arg *group = NULL, *consumer = NULL;
	long long count = 0, timeout = -1;
	int streams_arg = 0, nstreams = 0, rc = 0;
	bool noack = false;
	struct stream_id *ids = NULL;
	bool *is_new = NULL;
	size_t served = 0, h = 0;
	uint64_t now = brk_now_ms(), claim_at = UINT64_MAX;
	long long claim;
	struct claim_set cs = {NULL, 0, 0, UINT64_MAX};
	struct pel_due due = {NULL, 0, 0, UINT64_MAX};

	struct brk_read_opts ro;
	struct brk_read_budget budget;

	if (!brk_parse_read_opts(x, true, &ro)) {
		return 0;
	}
	count = ro.count;
	timeout = ro.timeout;
	streams_arg = ro.streams_arg;
	nstreams = ro.nstreams;
	group = ro.group;
	consumer = ro.consumer;
	noack = ro.noack;
	claim = ro.claim;
	if (group == NULL) {
		resp_add_error(x->w, "ERR Missing GROUP option for XREADGROUP");
		return 0;
	}
	ids = echd_calloc((size_t)nstreams, sizeof(*ids));
	is_new = echd_calloc((size_t)nstreams, sizeof(*is_new));
	if (ids == NULL || is_new == NULL) {
		rc = -ENOMEM;
		goto out;
	}
	/* Check every stream and id before serving any. */
	for (int i = 0; i < nstreams; i++) {
		const struct resp_arg *ida = &x->argv[streams_arg + nstreams + i];
		struct stream_meta m;
		struct group_meta g;

		rc = lookup_stream_group(x, &x->argv[streams_arg + i], group, &m, &g,
			" in XREADGROUP with GROUP option");
		if (rc != 0) {
			rc = rc == 1 ? 0 : rc;
			goto out;
		}
		if (ida->len == 1 && (ida->p[0] == '$' || ida->p[0] == '+')) {
			resp_add_errorf(x->w, "ERR The %c ID is meaningless in the context of XREADGROUP: "
					      "you want to read the history of this consumer by "
					      "specifying a proper ID, or use the > ID to get new "
					      "messages. The %c ID would just return an empty result set.",
				ida->p[0], ida->p[0]);
			goto out;
		}
		if (ida->len == 1 && ida->p[0] == '>') {
			is_new[i] = true;
			continue;
		}
		if (!brk_parse_strict_id(x, ida, 0, &ids[i])) {
			goto out;
		}
	}
	brk_read_budget_init(&budget, &ro, x->w);
	/* streams in the caller's order; once the budget is spent the rest
	 * are left out, untouched (no consumer made there) */
	for (int i = 0; i < nstreams && !brk_read_budget_spent(&budget, x->w); i++) {
		struct st_buf key = arg_buf(&x->argv[streams_arg + i]), gname = arg_buf(group);
		struct st_buf cname = arg_buf(consumer);
		struct stream_meta m;
		struct group_meta g, g0;
		struct consumer_meta c, c0;
		struct stream_id maxid;
		size_t n = 0, nclaimed = 0;
		bool serve = false, policy = false, scanned = false, pchanged = false;

		rc = brk_lookup(x, &key, &m);
		if (rc == 0) {
			rc = group_lookup(x->txn, &m, &gname, &g);
		}
		if (rc != 0) {
			goto out;
		}
		g0 = g;
		cs.n = 0;
		due.n = 0;
		if (is_new[i] && claim < 0 && group_policy_active(&g.policy)) {
			/* echd's group policies: redeliveries and MAXACKPENDING */
			policy = true;
			rc = brk_policy_prepare(x, &key, &gname, &m, &g, now, (uint64_t)count,
				&due, &pchanged);
			if (rc < 0) {
				goto out;
			}
			scanned = rc == 1;
			rc = 0;
			serve = due.n > 0;
		}
		if (is_new[i] && claim >= 0) {
			rc = claim_collect(x, &g, (uint64_t)claim, now, &cs);
			if (rc != 0) {
				goto out;
			}
			if (cs.next_at < claim_at) {
				claim_at = cs.next_at;
			}
			rc = claim_any_live(x, &m, &cs, &serve);
			if (rc != 0) {
				goto out;
			}
		}
		if (serve) {
			/* claimable rows: served, whatever is new */
		} else if (!is_new[i]) {
			serve = true;
		} else if (policy && brk_policy_room(&g, 0) == UINT64_MAX) {
			/* MAXACKPENDING reached: nothing new until acks make room */
		} else if (m.length > 0 && stream_id_cmp(&m.last, &g.last_delivered) > 0) {
			/* Nothing is new when even the last id generated is not
			 * past the cursor; otherwise the last one may be deleted. */
			rc = brk_last_valid_id(x->txn, &m, &maxid);
			if (rc != 0) {
				goto out;
			}
			serve = stream_id_cmp(&maxid, &g.last_delivered) > 0;
		}
		rc = touch_consumer(x, &g, &cname, &c, now, &c0);
		if (rc != 0) {
			goto out;
		}
		if (serve) {
			if (served++ == 0) {
				h = resp_add_deferred(x->w);
			}
			if (x->w->proto == 2) {
				resp_add_array(x->w, 2);
			}
			resp_add_bulk(x->w, key.data, key.len);
			if (is_new[i] && claim >= 0) {
				/* claimed first, then new ones, COUNT over both */
				size_t eh = resp_add_deferred(x->w);
				rc = serve_claimed(x, &m, &g, &c, &cs, (uint64_t)count, now, &nclaimed,
					&budget);
				if (rc == 0 && (count == 0 || nclaimed < (size_t)count)) {
					rc = serve_new(x, &m, &g, &c,
						count == 0 ? 0 : (uint64_t)count - nclaimed, noack, true,
						now, false, &n, &budget);
				}
				if (rc == 0 && nclaimed + n > 0) {
					if (nclaimed > 0 || !noack) {
						c.active_time = (int64_t)now;
					}
					x->dirty++;
				}
				resp_set_deferred_len(x->w, eh, '*', nclaimed + n);
			} else if (policy) {
				size_t eh = resp_add_deferred(x->w);
				rc = serve_policy_new(x, &key, &gname, &m, &g, &c, &due, scanned,
					(uint64_t)count, noack, now, &n, &budget);
				if (rc == 0 && n > 0) {
					c.active_time = (int64_t)now;
					x->dirty++;
				}
				resp_set_deferred_len(x->w, eh, '*', n);
			} else if (is_new[i]) {
				rc = serve_new(x, &m, &g, &c, (uint64_t)count, noack, false, now,
					true, &n, &budget);
				if (rc == 0 && n > 0) {
					if (!noack) {
						/* NOACK takes nothing on: not activity (7.2+) */
						c.active_time = (int64_t)now;
					}
					x->dirty++;
				}
			} else {
				struct stream_id start = ids[i];
				if (stream_id_incr(&start)) {
					rc = serve_history(x, &m, &g, &c, &start, (uint64_t)count, now,
						&budget);
				} else {
					resp_add_array(x->w, 0);
				}
			}
			if (rc != 0) {
				goto out;
			}
		} else if (scanned) {
			/* the scan's result is the group's next due time */
			rc = brk_policy_serve(x, &key, &gname, &m, &g, &c, &due, 0, now, &n, NULL);
			if (rc != 0) {
				goto out;
			}
		}
		/* an empty read changes nothing stored: no write, no flush */
		rc = save_touched(x, &m, &gname, &g, &g0, &cname, &c, &c0);
		if (rc != 0) {
			goto out;
		}
	}
	if (served > 0) {
		resp_set_deferred_len(x->w, h, x->w->proto == 2 ? '*' : '%', served);
		goto out;
	}
	if (timeout < 0) {
		resp_add_null_array(x->w);
		goto out;
	}
	rc = brk_block(x, nstreams, &x->argv[streams_arg], (uint64_t)timeout, x->argc, x->argv);
	if (rc == 0 && x->blocked && claim_at != UINT64_MAX) {
		/* wake when the first pending row becomes claimable */
		rc = brk_block_claim_at(x, claim_at);
	}
out:
	pel_due_finish(&due);
	echd_free(cs.rows);
	echd_free(ids);
	echd_free(is_new);
	return rc;
}

/* ------------------------------------------------------------------------
 * XACK
 * ---------------------------------------------------------------------- */

int
brk_cmd_xack(struct brk_ctx *x)
{
	struct st_buf key = arg_buf(&x->argv[1]), gname = arg_buf(&x->argv[2]);
	struct stream_meta m;
	struct group_meta g;
	struct stream_id id;
	struct pel_run run = {0, 0};
	long long acked = 0;
	uint64_t before;
	int rc;

	/* As in Redis, no key or group is 0 before the ids are looked at. */
	rc = brk_lookup(x, &key, &m);
	if (rc == 0) {
		rc = group_lookup(x->txn, &m, &gname, &g);
	}
	if (rc == ECHD_ENOTFOUND) {
		resp_add_int(x->w, 0);
		return 0;
	}
	if (rc != 0) {
		return rc;
	}
	/* Every id must parse before anything is acknowledged. */
	for (int j = 3; j < x->argc; j++) {
		if (!brk_parse_strict_id(x, &x->argv[j], 0, &id)) {
			return 0;
		}
	}
	before = g.pending;
	for (int j = 3; j < x->argc; j++) {
		stream_id_parse(x->argv[j].p, x->argv[j].len, 0, false, &id);
		rc = pel_remove_run(x->txn, &g, &id, &run);
		if (rc == ECHD_ENOTFOUND) {
			continue;
		}
		if (rc != 0) {
			return rc;
		}
		acked++;
	}
	rc = pel_run_end(x->txn, &g, &run);
	if (rc != 0) {
		return rc;
	}
	if (acked > 0) {
		rc = group_save(x->txn, &m, &gname, &g);
		if (rc != 0) {
			return rc;
		}
		x->dirty += (uint64_t)acked;
		brk_policy_acked(x, &key, &g, before);
	}
	resp_add_int(x->w, acked);
	return 0;
}

static bool
entry_exists(struct brk_ctx *x, const struct stream_meta *m, const struct stream_id *id, int *rc)
{
	struct st_buf f;

	*rc = stream_get_entry(x->txn, m, id, &f);
	if (*rc == ECHD_ENOTFOUND) {
		*rc = 0;
		return false;
	}
	return *rc == 0;
}

/* ------------------------------------------------------------------------
 * XNACK
 * ---------------------------------------------------------------------- */

enum nack_mode { NACK_SILENT, NACK_FAIL, NACK_FATAL };

/* The delivery count a released row gets: RETRYCOUNT when given, else by
 * mode from its count (a FORCE-created row starts from 0). */
static uint64_t
nack_count(enum nack_mode mode, long long retrycount, uint64_t count)
{
	if (retrycount >= 0) {
		return (uint64_t)retrycount;
	}
	switch (mode) {
	case NACK_SILENT:
		return count > 0 ? count - 1 : 0; /* undo the delivery, not below 0 */
	case NACK_FATAL:
		return (uint64_t)LLONG_MAX;
	case NACK_FAIL:
		break;
	}
	return count;
}

/* Whether g's policy dead-letters (a DEADLETTER stream or MAXDELIVER). */
static bool
dead_letters(const struct group_meta *g)
{
	return g->policy.dl_len > 0 || g->policy.max_deliver > 0;
}

/* XNACK FATAL in a group that dead-letters: the row goes (with the count
 * it had) to the dead-letter stream instead of back to the group. */
static int
nack_dead_letter(struct brk_ctx *x, const struct stream_meta *m, struct group_meta *g,
	const struct pel_row *r)
{
	struct st_buf key = arg_buf(&x->argv[1]), gname = arg_buf(&x->argv[2]);
	struct dead_letter d = {x->c->db, &key, &gname, "fatal", brk_now_ms(),
		(uint64_t)x->srv->cfg.stream_node_max_entries,
		(uint64_t)x->srv->cfg.stream_node_max_bytes};
	struct pel_row had;
	int rc = pel_get(x->txn, g, &r->id, &had);

	if (rc == 0) {
		rc = pel_dead_letter(x->txn, m, g, &had, &d);
	}
	if (rc == 0 && g->policy.dl_len > 0) {
		brk_signal_key(x->srv, x->c->db, g->policy.dl, g->policy.dl_len);
	}
	return rc;
}

/* XNACK key group SILENT|FAIL|FATAL IDS numids id... [RETRYCOUNT n] [FORCE]
 * [DELAY ms]:
 * the rows go back to the group, owned by no one, claimable at once. As
 * Redis parses it: the key and group first, the mode in its place, then
 * the IDS block and the options in any order (a second IDS block wins). */
int
brk_cmd_xnack(struct brk_ctx *x)
{
	struct st_buf gname = arg_buf(&x->argv[2]);
	long long numids = 0, retrycount = -1, released = 0, delay = 0;
	enum nack_mode mode;
	bool force = false;
	struct stream_meta m;
	struct group_meta g;
	struct stream_id id;
	int first = 0, j, rc;

	rc = lookup_stream_group(x, &x->argv[1], &x->argv[2], &m, &g, "");
	if (rc != 0) {
		return rc == 1 ? 0 : rc;
	}
	if (brk_arg_eq(&x->argv[3], "SILENT")) {
		mode = NACK_SILENT;
	} else if (brk_arg_eq(&x->argv[3], "FAIL")) {
		mode = NACK_FAIL;
	} else if (brk_arg_eq(&x->argv[3], "FATAL")) {
		mode = NACK_FATAL;
	} else {
		resp_add_error(x->w, "ERR mode must be SILENT, FAIL, or FATAL");
		return 0;
	}
	for (j = 4; j < x->argc; j++) {
		const struct resp_arg *o = &x->argv[j];
		bool more = j + 1 < x->argc;

		if (brk_arg_eq(o, "IDS") && more) {
			if (!brk_str2ll(x->argv[j + 1].p, x->argv[j + 1].len, &numids) ||
				numids < 1 || numids > INT_MAX) {
				resp_add_error(x->w, "ERR numids must be a positive integer");
				return 0;
			}
			first = j + 2;
			if (numids > x->argc - first) {
				resp_add_error(x->w, "ERR number of IDs doesn't match numids");
				return 0;
			}
			j = first + (int)numids - 1;
		} else if (brk_arg_eq(o, "FORCE")) {
			force = true;
		} else if (brk_arg_eq(o, "RETRYCOUNT") && more) {
			if (!brk_arg_ll(x, &x->argv[++j], &retrycount)) {
				return 0;
			}
			if (retrycount < 0) {
				resp_add_error(x->w, "ERR Invalid RETRYCOUNT value, must be >= 0");
				return 0;
			}
		} else if (brk_arg_eq(o, "DELAY") && more) {
			/* echd's extension (group policies): not handed out before */
			j++;
			if (!brk_str2ll(x->argv[j].p, x->argv[j].len, &delay) || delay < 0) {
				resp_add_error(x->w, "ERR Invalid DELAY option argument for XNACK");
				return 0;
			}
		} else {
			resp_add_errorf(x->w, "ERR Unrecognized XNACK option '%.*s'", (int)o->len, o->p);
			return 0;
		}
	}
	if (first == 0) {
		resp_add_error(x->w, "ERR syntax error, expected IDS keyword");
		return 0;
	}
	/* Every id must parse before anything is released. */
	for (j = first; j < first + numids; j++) {
		if (!brk_parse_strict_id(x, &x->argv[j], 0, &id)) {
			return 0;
		}
	}
	for (j = first; j < first + numids; j++) {
		struct pel_row r;
		uint64_t prev;

		stream_id_parse(x->argv[j].p, x->argv[j].len, 0, false, &id);
		rc = pel_get(x->txn, &g, &id, &r);
		if (rc == 0) {
			prev = r.cid;
		} else if (rc != ECHD_ENOTFOUND) {
			return rc;
		} else if (!force) {
			continue; /* not pending: ignored */
		} else if (!entry_exists(x, &m, &id, &rc)) {
			if (rc != 0) {
				return rc;
			}
			continue; /* FORCE, but not an entry of the stream */
		} else {
			prev = PEL_NEW;
			r.id = id;
			r.delivery_count = 0;
		}
		r.delivery_count = nack_count(mode, retrycount, r.delivery_count);
		if (mode == NACK_FATAL && prev != PEL_NEW && dead_letters(&g)) {
			rc = nack_dead_letter(x, &m, &g, &r);
		} else {
			rc = pel_release_until(x->txn, &g, &r, prev,
				delay > 0 ? brk_now_ms() + (uint64_t)delay : 0);
		}
		if (rc != 0) {
			return rc;
		}
		released++;
	}
	if (released > 0 && group_policy_timed(&g.policy)) {
		rc = brk_policy_released(x, &x->argv[1], &gname, &g,
			delay > 0 ? brk_now_ms() + (uint64_t)delay : 0);
		if (rc != 0) {
			return rc;
		}
	}
	if (released > 0) {
		rc = group_save(x->txn, &m, &gname, &g);
		if (rc != 0) {
			return rc;
		}
		x->dirty += (uint64_t)released;
		/* claimable at once: XREADGROUP CLAIM readers blocked on it run again */
		brk_signal_key(x->srv, x->c->db, x->argv[1].p, x->argv[1].len);
	}
	resp_add_int(x->w, released);
	return 0;
}

/* ------------------------------------------------------------------------
 * XPENDING
 * ---------------------------------------------------------------------- */

struct pending_sum {
	struct resp_writer *w;
	size_t n;
};

/* How long ago t was, in ms; 0 for a time not before now (a clock that went
 * back), so that a minimum idle time is not met by a wrapped difference. */
static uint64_t
idle_ms(uint64_t now, uint64_t t)
{
	return now > t ? now - t : 0;
}

static int
pending_sum_cb(const struct st_buf *name, const struct consumer_meta *c, void *ud)
{
	struct pending_sum *ps = ud;

	if (c->pending == 0) {
		return 0;
	}
	resp_add_array(ps->w, 2);
	resp_add_bulk(ps->w, name->data, name->len);
	resp_add_bulk_ll(ps->w, (long long)c->pending);
	ps->n++;
	return 0;
}

/* The first or last id of the group PEL. */
static int
pel_edge(struct brk_ctx *x, const struct group_meta *g, bool last, struct stream_id *out)
{
	struct stream_id lo = {0, 0}, hi = {UINT64_MAX, UINT64_MAX};
	struct pel_iter *it;
	struct pel_row r;
	int rc;

	if (!last) {
		rc = pel_iter_create(x->txn, g, 0, &lo, &hi, &it);
		if (rc != 0) {
			return rc;
		}
		rc = pel_iter_next(it, &r);
		pel_iter_destroy(it);
		if (rc == 0) {
			*out = r.id;
		}
		return rc;
	}
	return pel_last(x->txn, g, out);
}

static int
reply_pending_name(struct brk_ctx *x, const struct group_meta *g, uint64_t cid)
{
	struct consumer_meta c;
	struct st_buf name;
	int rc;

	if (cid == PEL_UNOWNED) {
		resp_add_bulk(x->w, "", 0); /* released by XNACK: no owner */
		return 0;
	}
	rc = consumer_by_id(x->txn, g, cid, &c, &name);
	if (rc != 0) {
		return rc == ECHD_ENOTFOUND ? ECHD_ECORRUPT : rc;
	}
	resp_add_bulk(x->w, name.data, name.len);
	return 0;
}

int
brk_cmd_xpending(struct brk_ctx *x)
{
	struct stream_id start = {0, 0}, end = {UINT64_MAX, UINT64_MAX};
	const struct resp_arg *consumer = NULL;
	long long minidle = 0, count = 0;
	struct stream_meta m;
	struct group_meta g;
	bool ex;
	int rc;

	if (x->argc != 3 && (x->argc < 6 || x->argc > 9)) {
		resp_add_error(x->w, BRK_ERR_SYNTAX);
		return 0;
	}
	if (x->argc >= 6) {
		int si = 3;
		if (brk_arg_eq(&x->argv[3], "IDLE")) {
			if (!brk_arg_ll(x, &x->argv[4], &minidle)) {
				return 0;
			}
			if (x->argc < 8) {
				resp_add_error(x->w, BRK_ERR_SYNTAX);
				return 0;
			}
			si += 2;
		}
		if (!brk_arg_ll(x, &x->argv[si + 2], &count)) {
			return 0;
		}
		if (count < 0) {
			count = 0;
		}
		if (!brk_parse_interval_id(x, &x->argv[si], 0, &start, &ex)) {
			return 0;
		}
		if (ex && !stream_id_incr(&start)) {
			resp_add_error(x->w, "ERR invalid start ID for the interval");
			return 0;
		}
		if (!brk_parse_interval_id(x, &x->argv[si + 1], UINT64_MAX, &end, &ex)) {
			return 0;
		}
		if (ex && !stream_id_decr(&end)) {
			resp_add_error(x->w, "ERR invalid end ID for the interval");
			return 0;
		}
		if (si + 3 < x->argc) {
			consumer = &x->argv[si + 3];
		}
	}
	rc = lookup_stream_group(x, &x->argv[1], &x->argv[2], &m, &g, "");
	if (rc != 0) {
		return rc == 1 ? 0 : rc;
	}
	if (x->argc == 3) {
		struct stream_id first, last;
		struct pending_sum ps = {x->w, 0};
		size_t h;
		if (g.pending == 0) {
			resp_add_array(x->w, 4);
			resp_add_int(x->w, 0);
			resp_add_null(x->w);
			resp_add_null(x->w);
			resp_add_null_array(x->w);
			return 0;
		}
		rc = pel_edge(x, &g, false, &first);
		if (rc == 0) {
			rc = pel_edge(x, &g, true, &last);
		}
		if (rc != 0) {
			return rc == ECHD_ENOTFOUND ? ECHD_ECORRUPT : rc;
		}
		resp_add_array(x->w, 4);
		resp_add_int(x->w, (long long)g.pending);
		brk_reply_id(x->w, &first);
		brk_reply_id(x->w, &last);
		h = resp_add_deferred(x->w);
		rc = consumer_each(x->txn, &g, pending_sum_cb, &ps);
		if (rc != 0) {
			return rc;
		}
		resp_set_deferred_len(x->w, h, '*', ps.n);
		return 0;
	}
	{
		struct consumer_meta c;
		struct pel_iter *it;
		struct pel_row r;
		uint64_t now = brk_now_ms(), cid = 0;
		size_t h, n = 0;

		if (consumer != NULL) {
			struct st_buf cname = arg_buf(consumer);
			rc = consumer_lookup(x->txn, &g, &cname, &c);
			if (rc == ECHD_ENOTFOUND) {
				resp_add_array(x->w, 0);
				return 0;
			}
			if (rc != 0) {
				return rc;
			}
			cid = c.cid;
		}
		h = resp_add_deferred(x->w);
		if (count > 0) {
			rc = pel_iter_create(x->txn, &g, cid, &start, &end, &it);
			if (rc != 0) {
				return rc;
			}
			while (n < (uint64_t)count && (rc = pel_iter_next(it, &r)) == 0) {
				uint64_t idle = idle_ms(now, r.delivery_time);
				if (minidle > 0 && idle < (uint64_t)minidle) {
					continue;
				}
				resp_add_array(x->w, 4);
				brk_reply_id(x->w, &r.id);
				rc = reply_pending_name(x, &g, r.cid);
				if (rc != 0) {
					break;
				}
				/* a released row was delivered to no one: -1 */
				resp_add_int(x->w, r.cid == PEL_UNOWNED ? -1 : (long long)idle);
				resp_add_int(x->w, (long long)r.delivery_count);
				n++;
			}
			pel_iter_destroy(it);
			if (rc != 0 && rc != ECHD_ENOTFOUND) {
				return rc;
			}
		}
		resp_set_deferred_len(x->w, h, '*', n);
		return 0;
	}
}

/* ------------------------------------------------------------------------
 * XCLAIM / XAUTOCLAIM
 * ---------------------------------------------------------------------- */

/* Moves row r to consumer c as a claim does, and replies the entry. */
static int
claim_row(struct brk_ctx *x, struct stream_meta *m, struct group_meta *g,
	struct consumer_meta *c, struct pel_row *r, uint64_t prev_cid, bool justid)
{
	struct st_buf fields;
	int rc;

	rc = pel_put(x->txn, g, c, r, prev_cid);
	if (rc != 0) {
		return rc;
	}
	if (justid) {
		brk_reply_id(x->w, &r->id);
		return 0;
	}
	rc = stream_get_entry(x->txn, m, &r->id, &fields);
	if (rc != 0) {
		return rc == ECHD_ENOTFOUND ? ECHD_ECORRUPT : rc;
	}
	brk_reply_entry(x->w, &r->id, &fields);
	return 0;
}

int
brk_cmd_xclaim(struct brk_ctx *x)
{
	struct st_buf key = arg_buf(&x->argv[1]), gname = arg_buf(&x->argv[2]);
	struct st_buf cname = arg_buf(&x->argv[3]);
	long long minidle, retrycount = -1, deliverytime = -1;
	struct stream_id lastid = {0, 0}, id;
	bool force = false, justid = false;
	struct stream_meta m;
	struct group_meta g, g0;
	struct consumer_meta c, c0;
	uint64_t now = brk_now_ms();
	int j, last_id_arg, rc;
	size_t h, n = 0;

	rc = lookup_stream_group(x, &x->argv[1], &x->argv[2], &m, &g, "");
	if (rc != 0) {
		return rc == 1 ? 0 : rc;
	}
	g0 = g; /* what the command may change, from here on */
	if (!brk_str2ll(x->argv[4].p, x->argv[4].len, &minidle)) {
		resp_add_error(x->w, "ERR Invalid min-idle-time argument for XCLAIM");
		return 0;
	}
	if (minidle < 0) {
		minidle = 0;
	}
	/* Ids are strict, as in Redis: "-" and "+" are not ids here, so they
	 * (like any other non-id) begin the options. */
	for (j = 5; j < x->argc; j++) {
		if (x->argv[j].len > 127 ||
			stream_id_parse(x->argv[j].p, x->argv[j].len, 0, false, &id) != 0) {
			break;
		}
	}
	last_id_arg = j - 1;
	for (; j < x->argc; j++) {
		int more = x->argc - 1 - j;
		const struct resp_arg *o = &x->argv[j];
		if (brk_arg_eq(o, "FORCE")) {
			force = true;
		} else if (brk_arg_eq(o, "JUSTID")) {
			justid = true;
		} else if (brk_arg_eq(o, "IDLE") && more) {
			j++;
			if (!brk_str2ll(x->argv[j].p, x->argv[j].len, &deliverytime)) {
				resp_add_error(x->w, "ERR Invalid IDLE option argument for XCLAIM");
				return 0;
			}
			/* IDLE n is the time now - n; a negative n, or one past the
			 * clock, is a bogus time and becomes now (below), as in
			 * Redis, without overflowing on the way */
			deliverytime = deliverytime < 0 || (uint64_t)deliverytime > now
				? (long long)now
				: (long long)(now - (uint64_t)deliverytime);
		} else if (brk_arg_eq(o, "TIME") && more) {
			j++;
			if (!brk_str2ll(x->argv[j].p, x->argv[j].len, &deliverytime)) {
				resp_add_error(x->w, "ERR Invalid TIME option argument for XCLAIM");
				return 0;
			}
		} else if (brk_arg_eq(o, "RETRYCOUNT") && more) {
			j++;
			if (!brk_str2ll(x->argv[j].p, x->argv[j].len, &retrycount)) {
				resp_add_error(x->w, "ERR Invalid RETRYCOUNT option argument for XCLAIM");
				return 0;
			}
		} else if (brk_arg_eq(o, "LASTID") && more) {
			j++;
			if (!brk_parse_strict_id(x, &x->argv[j], 0, &lastid)) {
				return 0;
			}
		} else {
			resp_add_errorf(x->w, "ERR Unrecognized XCLAIM option '%.*s'", (int)o->len, o->p);
			return 0;
		}
	}
	if (stream_id_cmp(&lastid, &g.last_delivered) > 0) {
		g.last_delivered = lastid;
		x->dirty++;
	}
	if (deliverytime != -1) {
		/* a bogus time (past the clock, or negative) becomes now */
		if (deliverytime < 0 || deliverytime > (long long)now) {
			deliverytime = (long long)now;
		}
	} else {
		deliverytime = (long long)now;
	}
	rc = touch_consumer(x, &g, &cname, &c, now, &c0);
	if (rc != 0) {
		return rc;
	}
	h = resp_add_deferred(x->w);
	for (j = 5; j <= last_id_arg; j++) {
		struct pel_row r;
		bool found;
		uint64_t prev;

		stream_id_parse(x->argv[j].p, x->argv[j].len, 0, false, &id);
		rc = pel_get(x->txn, &g, &id, &r);
		if (rc != 0 && rc != ECHD_ENOTFOUND) {
			return rc;
		}
		found = rc == 0;
		if (!entry_exists(x, &m, &id, &rc)) {
			if (rc != 0) {
				return rc;
			}
			/* deleted from the stream: it leaves the PEL too */
			if (found) {
				rc = pel_remove(x->txn, &g, &id);
				if (rc != 0) {
					return rc;
				}
				if (r.cid == c.cid) {
					c.pending--; /* keep our copy equal to the stored record */
				}
				x->dirty++;
			}
			continue;
		}
		if (!found && !force) {
			continue;
		}
		if (found && ((minidle > 0 && idle_ms(now, r.delivery_time) < (uint64_t)minidle) ||
				     held_back(&r, now))) {
			continue;
		}
		prev = found ? r.cid : PEL_NEW;
		if (!found) {
			/* FORCE: a new row starts as a first delivery would */
			r.id = id;
			r.delivery_count = 1;
		}
		r.cid = c.cid;
		r.delivery_time = (uint64_t)deliverytime;
		if (retrycount >= 0) {
			r.delivery_count = (uint64_t)retrycount;
		} else if (!justid) {
			r.delivery_count = count_incr(r.delivery_count);
		}
		rc = claim_row(x, &m, &g, &c, &r, prev, justid);
		if (rc != 0) {
			return rc;
		}
		c.active_time = (int64_t)now;
		x->dirty++;
		n++;
	}
	resp_set_deferred_len(x->w, h, '*', n);
	rc = save_touched(x, &m, &gname, &g, &g0, &cname, &c, &c0);
	(void)key;
	return rc;
}

int
brk_cmd_xautoclaim(struct brk_ctx *x)
{
	struct st_buf gname = arg_buf(&x->argv[2]), cname = arg_buf(&x->argv[3]);
	struct stream_id start, end = {UINT64_MAX, UINT64_MAX}, next = {0, 0};
	struct stream_id *deleted = NULL;
	long long minidle, count = 100, attempts;
	bool justid = false, ex;
	struct stream_meta m;
	struct group_meta g, g0;
	struct consumer_meta c, c0;
	struct pel_iter *it = NULL;
	struct pel_row r;
	uint64_t now = brk_now_ms();
	size_t h, n = 0, ndeleted = 0;
	int rc;

	if (!brk_str2ll(x->argv[4].p, x->argv[4].len, &minidle)) {
		resp_add_error(x->w, "ERR Invalid min-idle-time argument for XAUTOCLAIM");
		return 0;
	}
	if (minidle < 0) {
		minidle = 0;
	}
	if (!brk_parse_interval_id(x, &x->argv[5], 0, &start, &ex)) {
		return 0;
	}
	if (ex && !stream_id_incr(&start)) {
		resp_add_error(x->w, "ERR invalid start ID for the interval");
		return 0;
	}
	for (int j = 6; j < x->argc; j++) {
		int more = x->argc - 1 - j;
		if (brk_arg_eq(&x->argv[j], "COUNT") && more) {
			long long max_count = LONG_MAX / 16;
			if (!brk_str2ll(x->argv[j + 1].p, x->argv[j + 1].len, &count) || count < 1 ||
				count > max_count) {
				resp_add_error(x->w, "ERR COUNT must be > 0");
				return 0;
			}
			j++;
		} else if (brk_arg_eq(&x->argv[j], "JUSTID")) {
			justid = true;
		} else {
			resp_add_error(x->w, BRK_ERR_SYNTAX);
			return 0;
		}
	}
	rc = lookup_stream_group(x, &x->argv[1], &x->argv[2], &m, &g, "");
	if (rc != 0) {
		return rc == 1 ? 0 : rc;
	}
	g0 = g; /* what the command may change, from here on */
	attempts = count * 10;
	deleted = echd_calloc((size_t)(count < 1024 ? count : 1024), sizeof(*deleted));
	if (deleted == NULL) {
		return -ENOMEM;
	}
	rc = touch_consumer(x, &g, &cname, &c, now, &c0);
	if (rc != 0) {
		goto out;
	}
	resp_add_array(x->w, 3);
	/* The cursor is known last: it is patched in after the walk. */
	h = resp_add_deferred(x->w);
	{
		size_t ah = resp_add_deferred(x->w);
		size_t cap = (size_t)(count < 1024 ? count : 1024);

		rc = pel_iter_create(x->txn, &g, 0, &start, &end, &it);
		if (rc != 0) {
			goto out;
		}
		while (attempts-- > 0 && count > 0 && (rc = pel_iter_next(it, &r)) == 0) {
			bool exists = entry_exists(x, &m, &r.id, &rc);
			uint64_t prev;

			if (rc != 0) {
				goto out;
			}
			if (!exists) {
				rc = pel_remove(x->txn, &g, &r.id);
				if (rc != 0) {
					goto out;
				}
				if (r.cid == c.cid) {
					c.pending--; /* keep our copy equal to the stored record */
				}
				if (ndeleted == cap) {
					struct stream_id *nd = echd_realloc(deleted,
						cap * 2 * sizeof(*deleted));
					if (nd == NULL) {
						rc = -ENOMEM;
						goto out;
					}
					deleted = nd;
					cap *= 2;
				}
				deleted[ndeleted++] = r.id;
				x->dirty++;
				count--;
				continue;
			}
			if ((minidle > 0 && idle_ms(now, r.delivery_time) < (uint64_t)minidle) ||
				held_back(&r, now)) {
				continue;
			}
			prev = r.cid;
			r.cid = c.cid;
			r.delivery_time = now;
			if (!justid) {
				r.delivery_count = count_incr(r.delivery_count);
			}
			rc = claim_row(x, &m, &g, &c, &r, prev, justid);
			if (rc != 0) {
				goto out;
			}
			c.active_time = (int64_t)now;
			x->dirty++;
			n++;
			count--;
		}
		if (rc != 0 && rc != ECHD_ENOTFOUND) {
			goto out;
		}
		/* The next call starts at the row after the last one looked at. */
		rc = pel_iter_next(it, &r);
		if (rc == 0) {
			next = r.id;
		} else if (rc != ECHD_ENOTFOUND) {
			goto out;
		}
		rc = 0;
		resp_set_deferred_len(x->w, ah, '*', n);
	}
	{
		/* Insert the cursor id where the deferred slot was reserved. */
		struct resp_buf tmp;
		struct resp_writer tw;
		struct resp_buf *b = x->w->out;

		resp_buf_init(&tmp);
		tw.out = &tmp;
		tw.proto = x->w->proto;
		brk_reply_id(&tw, &next);
		if (tmp.oom) {
			b->oom = true; /* a reply without its id: the client is closed */
		} else {
			resp_buf_append(b, tmp.data, tmp.len); /* make room */
		}
		if (!b->oom) {
			memmove(b->data + h + tmp.len, b->data + h, b->len - tmp.len - h);
			memcpy(b->data + h, tmp.data, tmp.len);
		}
		resp_buf_finish(&tmp);
	}
	resp_add_array(x->w, ndeleted);
	for (size_t i = 0; i < ndeleted; i++) {
		brk_reply_id(x->w, &deleted[i]);
	}
	rc = save_touched(x, &m, &gname, &g, &g0, &cname, &c, &c0);
out:
	pel_iter_destroy(it);
	echd_free(deleted);
	return rc;
}

/* ------------------------------------------------------------------------
 * XINFO GROUPS / CONSUMERS / STREAM FULL
 * ---------------------------------------------------------------------- */

struct info_walk {
	struct brk_ctx *x;
	const struct stream_meta *m;
	uint64_t count; /* FULL: rows of each PEL to show; 0 = all */
	size_t n;
};

static int
reply_lag(struct brk_ctx *x, const struct stream_meta *m, const struct group_meta *g)
{
	int64_t lag;
	int rc = group_lag(x->txn, m, g, &lag);

	if (rc != 0) {
		return rc;
	}
	resp_add_int(x->w, lag);
	return 0;
}

static void
reply_entries_read(struct brk_ctx *x, const struct group_meta *g)
{
	if (g->entries_read == GROUP_ENTRIES_READ_UNKNOWN) {
		resp_add_null(x->w);
	} else {
		resp_add_int(x->w, g->entries_read);
	}
}

static int
groups_cb(const struct st_buf *name, const struct group_meta *g, void *ud)
{
	struct info_walk *iw = ud;
	struct brk_ctx *x = iw->x;
	const struct group_policy *p = &g->policy;
	bool pol = group_policy_active(p) || p->dead_lettered != 0;
	int rc;

	resp_add_map(x->w, pol ? 11 : 6);
	resp_add_bulk_cstr(x->w, "name");
	resp_add_bulk(x->w, name->data, name->len);
	resp_add_bulk_cstr(x->w, "consumers");
	resp_add_int(x->w, (long long)g->consumers);
	resp_add_bulk_cstr(x->w, "pending");
	resp_add_int(x->w, (long long)g->pending);
	resp_add_bulk_cstr(x->w, "last-delivered-id");
	brk_reply_id(x->w, &g->last_delivered);
	resp_add_bulk_cstr(x->w, "entries-read");
	reply_entries_read(x, g);
	resp_add_bulk_cstr(x->w, "lag");
	iw->n++;
	rc = reply_lag(x, iw->m, g);
	if (rc != 0 || !pol) {
		return rc;
	}
	/* echd's group policy, only for a group that has one */
	resp_add_bulk_cstr(x->w, "ack-wait");
	resp_add_int(x->w, (long long)p->ack_wait);
	resp_add_bulk_cstr(x->w, "max-deliver");
	resp_add_int(x->w, (long long)p->max_deliver);
	resp_add_bulk_cstr(x->w, "dead-letter");
	if (p->dl_len > 0) {
		resp_add_bulk(x->w, p->dl, p->dl_len);
	} else {
		resp_add_null(x->w);
	}
	resp_add_bulk_cstr(x->w, "max-ack-pending");
	resp_add_int(x->w, (long long)p->max_ack_pending);
	resp_add_bulk_cstr(x->w, "dead-lettered");
	resp_add_int(x->w, (long long)p->dead_lettered);
	return 0;
}

int
brk_xinfo_groups(struct brk_ctx *x)
{
	struct st_buf key = arg_buf(&x->argv[2]);
	struct stream_meta m;
	struct info_walk iw = {x, &m, 0, 0};
	size_t h;
	int rc;

	rc = brk_lookup(x, &key, &m);
	if (rc == ECHD_ENOTFOUND) {
		resp_add_error(x->w, "ERR no such key");
		return 0;
	}
	if (rc != 0) {
		return rc;
	}
	h = resp_add_deferred(x->w);
	rc = group_each(x->txn, &m, groups_cb, &iw);
	if (rc != 0) {
		return rc;
	}
	resp_set_deferred_len(x->w, h, '*', iw.n);
	return 0;
}

static int
consumers_cb(const struct st_buf *name, const struct consumer_meta *c, void *ud)
{
	struct info_walk *iw = ud;
	struct brk_ctx *x = iw->x;
	uint64_t now = brk_now_ms(), seen = brk_seen_get(x->srv, c->cid, c->seen_time);

	resp_add_map(x->w, 4);
	resp_add_bulk_cstr(x->w, "name");
	resp_add_bulk(x->w, name->data, name->len);
	resp_add_bulk_cstr(x->w, "pending");
	resp_add_int(x->w, (long long)c->pending);
	resp_add_bulk_cstr(x->w, "idle");
	resp_add_int(x->w, now > seen ? (long long)(now - seen) : 0);
	resp_add_bulk_cstr(x->w, "inactive");
	if (c->active_time < 0) {
		resp_add_int(x->w, -1);
	} else {
		resp_add_int(x->w, (int64_t)now > c->active_time ? (long long)now - c->active_time : 0);
	}
	iw->n++;
	return 0;
}

int
brk_xinfo_consumers(struct brk_ctx *x)
{
	struct st_buf key = arg_buf(&x->argv[2]), gname = arg_buf(&x->argv[3]);
	struct stream_meta m;
	struct group_meta g;
	struct info_walk iw = {x, &m, 0, 0};
	size_t h;
	int rc;

	rc = brk_lookup_group(x, &key, &gname, "ERR no such key", &m, &g);
	if (rc != 0) {
		return rc == 1 ? 0 : rc;
	}
	h = resp_add_deferred(x->w);
	rc = consumer_each(x->txn, &g, consumers_cb, &iw);
	if (rc != 0) {
		return rc;
	}
	resp_set_deferred_len(x->w, h, '*', iw.n);
	return 0;
}

/* XINFO STREAM FULL: one consumer, with its PEL rows. */
struct full_consumer {
	struct info_walk *iw;
	const struct group_meta *g;
	size_t n;
};

static int
full_consumer_cb(const struct st_buf *name, const struct consumer_meta *c, void *ud)
{
	struct full_consumer *fc = ud;
	struct brk_ctx *x = fc->iw->x;
	struct stream_id lo = {0, 0}, hi = {UINT64_MAX, UINT64_MAX};
	struct pel_iter *it;
	struct pel_row r;
	size_t h, n = 0;
	int rc;

	fc->n++;
	resp_add_map(x->w, 5);
	resp_add_bulk_cstr(x->w, "name");
	resp_add_bulk(x->w, name->data, name->len);
	resp_add_bulk_cstr(x->w, "seen-time");
	resp_add_int(x->w, (long long)brk_seen_get(x->srv, c->cid, c->seen_time));
	resp_add_bulk_cstr(x->w, "active-time");
	resp_add_int(x->w, c->active_time);
	resp_add_bulk_cstr(x->w, "pel-count");
	resp_add_int(x->w, (long long)c->pending);
	resp_add_bulk_cstr(x->w, "pending");
	h = resp_add_deferred(x->w);
	rc = pel_iter_create(x->txn, fc->g, c->cid, &lo, &hi, &it);
	if (rc != 0) {
		return rc;
	}
	while ((fc->iw->count == 0 || n < fc->iw->count) && (rc = pel_iter_next(it, &r)) == 0) {
		resp_add_array(x->w, 3);
		brk_reply_id(x->w, &r.id);
		resp_add_int(x->w, (long long)r.delivery_time);
		resp_add_int(x->w, (long long)r.delivery_count);
		n++;
	}
	pel_iter_destroy(it);
	if (rc != 0 && rc != ECHD_ENOTFOUND) {
		return rc;
	}
	resp_set_deferred_len(x->w, h, '*', n);
	return 0;
}

static int
full_group_cb(const struct st_buf *name, const struct group_meta *g, void *ud)
{
	struct info_walk *iw = ud;
	struct brk_ctx *x = iw->x;
	struct stream_id lo = {0, 0}, hi = {UINT64_MAX, UINT64_MAX};
	struct full_consumer fc = {iw, g, 0};
	struct pel_iter *it;
	struct pel_row r;
	size_t h, n = 0;
	int rc;

	resp_add_map(x->w, 8);
	resp_add_bulk_cstr(x->w, "name");
	resp_add_bulk(x->w, name->data, name->len);
	resp_add_bulk_cstr(x->w, "last-delivered-id");
	brk_reply_id(x->w, &g->last_delivered);
	resp_add_bulk_cstr(x->w, "entries-read");
	reply_entries_read(x, g);
	resp_add_bulk_cstr(x->w, "lag");
	rc = reply_lag(x, iw->m, g);
	if (rc != 0) {
		return rc;
	}
	resp_add_bulk_cstr(x->w, "pel-count");
	resp_add_int(x->w, (long long)g->pending);
	/* released by XNACK and not taken since (Redis 8.8's NACK zone) */
	resp_add_bulk_cstr(x->w, "nacked-count");
	resp_add_int(x->w, (long long)g->nacked);
	resp_add_bulk_cstr(x->w, "pending");
	h = resp_add_deferred(x->w);
	rc = pel_iter_create(x->txn, g, 0, &lo, &hi, &it);
	if (rc != 0) {
		return rc;
	}
	while ((iw->count == 0 || n < iw->count) && (rc = pel_iter_next(it, &r)) == 0) {
		resp_add_array(x->w, 4);
		brk_reply_id(x->w, &r.id);
		rc = reply_pending_name(x, g, r.cid);
		if (rc != 0) {
			break;
		}
		resp_add_int(x->w, (long long)r.delivery_time);
		resp_add_int(x->w, (long long)r.delivery_count);
		n++;
	}
	pel_iter_destroy(it);
	if (rc != 0 && rc != ECHD_ENOTFOUND) {
		return rc;
	}
	resp_set_deferred_len(x->w, h, '*', n);
	resp_add_bulk_cstr(x->w, "consumers");
	h = resp_add_deferred(x->w);
	rc = consumer_each(x->txn, g, full_consumer_cb, &fc);
	if (rc != 0) {
		return rc;
	}
	resp_set_deferred_len(x->w, h, '*', fc.n);
	iw->n++;
	return 0;
}

int
brk_reply_full_groups(struct brk_ctx *x, const struct stream_meta *m, uint64_t count)
{
	struct info_walk iw = {x, m, count, 0};
	size_t h = resp_add_deferred(x->w);
	int rc = group_each(x->txn, m, full_group_cb, &iw);

	if (rc != 0) {
		return rc;
	}
	resp_set_deferred_len(x->w, h, '*', iw.n);
	return 0;
}
