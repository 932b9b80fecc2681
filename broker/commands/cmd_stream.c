/* cmd_stream.c - stream commands with Redis 7.4's replies and errors. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "broker.h"

#define ERR_XADD_SMALL  "ERR The ID specified in XADD is equal or smaller than the target stream top item"
#define ERR_XADD_ZERO   "ERR The ID specified in XADD must be greater than 0-0"
#define ERR_EXHAUSTED   "ERR The stream has exhausted the last possible ID, unable to add more items"
#define ERR_NOKEY       "ERR no such key"

static struct st_buf
arg_buf(const struct resp_arg *a)
{
	struct st_buf b = {a->p, a->len};
	return b;
}

static int lookup_or_nokey(struct brk_ctx *x, const struct st_buf *key, struct stream_meta *m);

void
brk_reply_id(struct resp_writer *w, const struct stream_id *id)
{
	char buf[48];
	size_t n = stream_id_format(id, buf);
	resp_add_bulk(w, buf, n);
}

/* One entry: [id, [field, value, ...]]. */
void
brk_reply_entry(struct resp_writer *w, const struct stream_id *id, const struct st_buf *fields)
{
	resp_add_array(w, 2);
	brk_reply_id(w, id);
	brk_reply_fields(w, fields);
}

void
brk_reply_fields(struct resp_writer *w, const struct st_buf *fields)
{
	struct st_buf f, v;
	size_t pos = 0, n = stream_fields_count(fields);

	resp_add_array(w, n * 2);
	while (stream_fields_next(fields, &pos, &f, &v)) {
		resp_add_bulk(w, f.data, f.len);
		resp_add_bulk(w, v.data, v.len);
	}
}

/* Entries a range asks its backend to read ahead at most (a hint: what a
 * batch of them costs in memory, not a limit on the reply). */
#define RANGE_AHEAD_MAX 256

/* Replies entries in [start, end] (count 0 = all); returns how many. */
static int
reply_range(struct brk_ctx *x, const struct stream_meta *m, const struct stream_id *start,
	const struct stream_id *end, uint64_t count, bool rev, size_t *emitted,
	struct brk_read_budget *budget)
{
	struct stream_iter *it;
	struct stream_id id;
	struct st_buf fields;
	size_t h, n = 0;
	int rc;

	h = resp_add_deferred(x->w);
	rc = stream_iter_create(x->txn, m, start, end, rev, &it);
	if (rc != 0) {
		return rc;
	}
	stream_iter_ahead(it,
		count == 0 || count > RANGE_AHEAD_MAX ? RANGE_AHEAD_MAX : (unsigned)count);
	/* a reply that outgrew the output limit is dropped: stop building it */
	while ((count == 0 || n < count) && !x->w->out->oom &&
		!brk_read_budget_spent(budget, x->w) &&
		(rc = stream_iter_next(it, &id, &fields)) == 0) {
		brk_reply_entry(x->w, &id, &fields);
		n++;
		if (budget != NULL) {
			budget->emitted++;
		}
	}
	stream_iter_destroy(it);
	if (rc != 0 && rc != ECHD_ENOTFOUND) {
		return rc;
	}
	resp_set_deferred_len(x->w, h, '*', n);
	if (emitted) {
		*emitted = n;
	}
	return 0;
}

/* The last live entry's id, or 0-0 when the stream is empty. */
int
brk_last_valid_id(struct storage_txn *t, const struct stream_meta *m, struct stream_id *out)
{
	struct stream_id lo = {0, 0}, hi = {UINT64_MAX, UINT64_MAX};
	struct stream_iter *it;
	struct st_buf f;
	int rc;

	out->ms = out->seq = 0;
	if (m->length == 0) {
		return 0;
	}
	rc = stream_iter_create(t, m, &lo, &hi, true, &it);
	if (rc != 0) {
		return rc;
	}
	rc = stream_iter_next(it, out, &f);
	stream_iter_destroy(it);
	return rc == ECHD_ENOTFOUND ? 0 : rc;
}

/* A strict id (no "-" or "+"); replies the error on failure. */
bool
brk_parse_strict_id(struct brk_ctx *x, const struct resp_arg *a, uint64_t missing_seq,
	struct stream_id *out)
{
	if (a->len > 127 || stream_id_parse(a->p, a->len, missing_seq, false, out) != 0) {
		resp_add_error(x->w, BRK_ERR_BADID);
		return false;
	}
	return true;
}

/* ------------------------------------------------------------------------
 * XADD / XTRIM
 * ---------------------------------------------------------------------- */

enum idmp_mode { IDMP_NONE, IDMP_GIVEN, IDMP_AUTO };

struct add_args {
	struct stream_trim trim;
	enum stream_ref_policy policy; /* KEEPREF | DELREF | ACKED for the trimming */
	bool nomkstream;
	bool id_given;
	bool seq_given;
	struct stream_id id;
	enum idmp_mode idmp;           /* XADD IDMP pid iid / IDMPAUTO pid */
	struct st_buf idmp_pid, idmp_iid;
};

#define ERR_IDMP_TWICE     "ERR IDMP/IDMPAUTO specified multiple times"
#define ERR_IDMP_NOPID     "ERR IDMP requires a non-empty producer ID"
#define ERR_IDMP_NOIID     "ERR IDMP requires a non-empty idempotent ID"
#define ERR_IDMPAUTO_NOPID "ERR IDMPAUTO requires a non-empty producer ID"
#define ERR_IDMP_EXPLICIT  "ERR IDMP/IDMPAUTO can be used only with auto-generated IDs"

/* Parses XADD/XTRIM options; returns the index of XADD's id argument (or
 * argc for XTRIM), or -1 after replying an error. */
static int
parse_add_trim(struct brk_ctx *x, bool xadd, struct add_args *a)
{
	bool limit_given = false, policy_given = false;
	long long limit = 0;
	int i;

	memset(a, 0, sizeof(*a));
	for (i = 2; i < x->argc; i++) {
		const struct resp_arg *o = &x->argv[i];
		int more = x->argc - 1 - i;

		if (xadd && o->len == 1 && o->p[0] == '*') {
			break;
		} else if (brk_arg_eq(o, "MAXLEN") && more) {
			long long v;
			const struct resp_arg *next = &x->argv[i + 1];
			if (a->trim.strategy != STREAM_TRIM_NONE) {
				resp_add_error(x->w, "ERR syntax error, MAXLEN and MINID options at the "
						     "same time are not compatible");
				return -1;
			}
			a->trim.approx = false;
			if (more >= 2 && next->len == 1 && next->p[0] == '~') {
				a->trim.approx = true;
				i++;
			} else if (more >= 2 && next->len == 1 && next->p[0] == '=') {
				i++;
			}
			if (!brk_arg_ll(x, &x->argv[i + 1], &v)) {
				return -1;
			}
			if (v < 0) {
				resp_add_error(x->w, "ERR The MAXLEN argument must be >= 0.");
				return -1;
			}
			a->trim.maxlen = (uint64_t)v;
			a->trim.strategy = STREAM_TRIM_MAXLEN;
			i++;
		} else if (brk_arg_eq(o, "MINID") && more) {
			const struct resp_arg *next = &x->argv[i + 1];
			if (a->trim.strategy != STREAM_TRIM_NONE) {
				resp_add_error(x->w, "ERR syntax error, MAXLEN and MINID options at the "
						     "same time are not compatible");
				return -1;
			}
			a->trim.approx = false;
			if (more >= 2 && next->len == 1 && next->p[0] == '~') {
				a->trim.approx = true;
				i++;
			} else if (more >= 2 && next->len == 1 && next->p[0] == '=') {
				i++;
			}
			if (!brk_parse_strict_id(x, &x->argv[i + 1], 0, &a->trim.minid)) {
				return -1;
			}
			a->trim.strategy = STREAM_TRIM_MINID;
			i++;
		} else if (brk_arg_eq(o, "LIMIT") && more) {
			if (!brk_arg_ll(x, &x->argv[i + 1], &limit)) {
				return -1;
			}
			if (limit < 0) {
				resp_add_error(x->w, "ERR The LIMIT argument must be >= 0.");
				return -1;
			}
			limit_given = true;
			i++;
		} else if (!policy_given && brk_parse_ref_policy(o, &a->policy)) {
			/* a second one is XTRIM's syntax error, XADD's bad id (Redis) */
			policy_given = true;
		} else if (xadd && brk_arg_eq(o, "NOMKSTREAM")) {
			a->nomkstream = true;
		} else if (xadd && ((brk_arg_eq(o, "IDMP") && more >= 2) ||
					   (brk_arg_eq(o, "IDMPAUTO") && more))) {
			bool aut = o->len == 8;
			if (a->idmp != IDMP_NONE) {
				resp_add_error(x->w, ERR_IDMP_TWICE);
				return -1;
			}
			a->idmp = aut ? IDMP_AUTO : IDMP_GIVEN;
			a->idmp_pid = arg_buf(&x->argv[++i]);
			if (a->idmp_pid.len == 0) {
				resp_add_error(x->w, aut ? ERR_IDMPAUTO_NOPID : ERR_IDMP_NOPID);
				return -1;
			}
			if (!aut) {
				a->idmp_iid = arg_buf(&x->argv[++i]);
				if (a->idmp_iid.len == 0) {
					resp_add_error(x->w, ERR_IDMP_NOIID);
					return -1;
				}
			}
		} else if (xadd) {
			/* the id: "ms-seq", "ms", or "ms-*"; Redis reads it up
			 * to a NUL and splits it at the first '-' */
			size_t n = o->len;
			const char *nul = n <= STREAM_ID_MAX_TEXT ? memchr(o->p, '\0', n) : NULL;
			const char *dash;
			if (nul != NULL) {
				n = (size_t)(nul - o->p);
			}
			dash = memchr(o->p, '-', n);
			a->seq_given = true;
			if (o->len <= STREAM_ID_MAX_TEXT && dash != NULL &&
				(size_t)(dash - o->p) + 2 == n && o->p[n - 1] == '*') {
				struct resp_arg ms = {o->p, n - 2};
				if (!brk_parse_strict_id(x, &ms, 0, &a->id)) {
					return -1;
				}
				a->seq_given = false;
			} else if (!brk_parse_strict_id(x, o, 0, &a->id)) {
				return -1;
			}
			a->id_given = true;
			break;
		} else {
			resp_add_error(x->w, BRK_ERR_SYNTAX);
			return -1;
		}
	}
	if (limit && a->trim.strategy == STREAM_TRIM_NONE) {
		resp_add_error(x->w, "ERR syntax error, LIMIT cannot be used without specifying a "
				     "trimming strategy");
		return -1;
	}
	if (!xadd && a->trim.strategy == STREAM_TRIM_NONE) {
		resp_add_error(x->w, "ERR syntax error, XTRIM must be called with a trimming "
				     "strategy");
		return -1;
	}
	if (limit_given) {
		if (!a->trim.approx) {
			resp_add_error(x->w, "ERR syntax error, LIMIT cannot be used without the "
					     "special ~ option");
			return -1;
		}
		a->trim.limit = (uint64_t)limit;
	} else if (a->trim.approx) {
		long long l = 100 * x->srv->cfg.stream_node_max_entries;
		if (l <= 0) {
			l = 10000;
		}
		if (l > 1000000) {
			l = 1000000;
		}
		a->trim.limit = (uint64_t)l;
	}
	return i;
}

/* Computes the id of the entry XADD appends; false if none is possible. */
static bool
next_id(const struct stream_meta *m, const struct add_args *a, struct stream_id *out)
{
	struct stream_id id;

	if (!a->id_given) {
		uint64_t now = brk_now_ms();
		if (now > m->last.ms) {
			id.ms = now;
			id.seq = 0;
		} else {
			id = m->last;
			if (!stream_id_incr(&id)) {
				return false;
			}
		}
	} else if (!a->seq_given) {
		id.ms = a->id.ms;
		if (m->last.ms == id.ms) {
			if (m->last.seq == UINT64_MAX) {
				return false;
			}
			id.seq = m->last.seq + 1;
		} else {
			id.seq = 0;
		}
	} else {
		id = a->id;
	}
	if (stream_id_cmp(&id, &m->last) <= 0) {
		return false;
	}
	*out = id;
	return true;
}

/* Looks XADD's stream up in the batch's stream cache when this XADD may
 * keep its rows there (*cached): a plain append (no IDMP, no trimming: they
 * read and write more rows of the stream, or of others) run straight on the
 * batch (not in a nested transaction, not in EXEC) to a stream that exists
 * and has not expired. Otherwise the cache is written out first and the
 * lookup is brk_lookup()'s. */
static int
xadd_lookup(struct brk_ctx *x, const struct add_args *a, const struct st_buf *key,
	struct stream_meta *m, bool *cached)
{
	struct brk_server *srv = x->srv;
	int rc;

	*cached = false;
	if (srv->xcache == NULL || x->txn != srv->batch || x->in_exec) {
		return brk_lookup(x, key, m); /* brk_batch_txn() flushed the cache */
	}
	if (a->idmp == IDMP_NONE && a->trim.strategy == STREAM_TRIM_NONE) {
		rc = stream_cache_lookup(srv->xcache, x->txn, x->c->db, key, m);
		if (rc != 0 || !stream_expired(m, srv->cmd_ms)) {
			*cached = rc == 0;
			return rc;
		}
	}
	rc = brk_xcache_flush(srv);
	return rc != 0 ? rc : brk_lookup(x, key, m);
}

/* The settings a stream without its own IDMP settings has. */
static struct stream_idmp_cfg
idmp_defaults(const struct brk_ctx *x)
{
	struct stream_idmp_cfg d = {(uint64_t)x->srv->cfg.stream_idmp_duration,
		(uint64_t)x->srv->cfg.stream_idmp_maxsize};
	return d;
}

int
brk_cmd_xadd(struct brk_ctx *x)
{
	struct st_buf key = arg_buf(&x->argv[1]);
	struct stream_meta m;
	struct stream_idmp_cfg idmp_def = idmp_defaults(x);
	unsigned char auto_iid[STREAM_IDMP_AUTO_LEN];
	struct add_args a;
	struct stream_id id;
	struct st_buf fv[64], *fvp = fv;
	int idpos, field_pos, nfv, rc;
	uint64_t removed, now;
	bool exists, cached, auto_ready = false;

	idpos = parse_add_trim(x, true, &a);
	if (idpos < 0) {
		return 0;
	}
	field_pos = idpos + 1;
	if (x->argc - field_pos < 2 || (x->argc - field_pos) % 2 == 1) {
		resp_add_error(x->w, "ERR wrong number of arguments for 'xadd' command");
		return 0;
	}
	if (a.idmp != IDMP_NONE && a.id_given) {
		resp_add_error(x->w, ERR_IDMP_EXPLICIT);
		return 0;
	}
	if (a.id_given && a.seq_given && a.id.ms == 0 && a.id.seq == 0) {
		resp_add_error(x->w, ERR_XADD_ZERO);
		return 0;
	}
	rc = xadd_lookup(x, &a, &key, &m, &cached);
	if (rc != 0 && rc != ECHD_ENOTFOUND) {
		return rc;
	}
	exists = rc == 0;
	rc = 0;
	if (!exists) {
		if (a.nomkstream) {
			resp_add_null(x->w);
			return 0;
		}
		memset(&m, 0, sizeof(m));
	}
	nfv = x->argc - field_pos;
	if (nfv > (int)(sizeof(fv) / sizeof(fv[0]))) {
		fvp = echd_malloc((size_t)nfv * sizeof(*fvp));
		if (fvp == NULL) {
			return -ENOMEM;
		}
	}
	for (int i = 0; i < nfv; i++) {
		fvp[i] = arg_buf(&x->argv[field_pos + i]);
	}
	now = brk_now_ms();
	if (a.idmp == IDMP_AUTO) {
		a.idmp_iid.data = auto_iid;
		a.idmp_iid.len = sizeof(auto_iid);
	}
	if (a.idmp == IDMP_AUTO && exists) {
		/* keyed by the stream's secret; a stream without one has no
		 * record an IDMPAUTO could match (it gets one when recording) */
		rc = stream_idmp_auto_iid(x->txn, &m, &idmp_def, false, fvp, (size_t)nfv, auto_iid);
		if (rc == 0) {
			auto_ready = true;
		} else if (rc != ECHD_ENOTFOUND) {
			goto out;
		}
		rc = 0;
	}
	if (a.idmp != IDMP_NONE && exists && (a.idmp != IDMP_AUTO || auto_ready)) {
		/* a producer's retry: the first entry's id, nothing added */
		rc = stream_idmp_find(x->txn, &m, &a.idmp_pid, &a.idmp_iid, now, true, &id);
		if (rc == 0) {
			x->dirty++; /* iids-duplicates */
			brk_reply_id(x->w, &id);
			goto out;
		}
		if (rc != ECHD_ENOTFOUND) {
			goto out;
		}
		rc = 0;
	}
	if (m.last.ms == UINT64_MAX && m.last.seq == UINT64_MAX) {
		resp_add_error(x->w, ERR_EXHAUSTED);
		goto out;
	}
	if (!next_id(&m, &a, &id)) {
		resp_add_error(x->w, ERR_XADD_SMALL);
		goto out;
	}
	if (!exists) {
		rc = stream_create(x->txn, x->c->db, &key, &m);
	}
	if (rc == 0 && cached) {
		/* its keys and node rows are written when the cache is */
		rc = stream_cache_append(x->srv->xcache, x->txn, &m, &id, fvp, (size_t)nfv,
			(uint64_t)x->srv->cfg.stream_node_max_entries,
			(uint64_t)x->srv->cfg.stream_node_max_bytes);
	} else if (rc == 0) {
		rc = stream_append(x->txn, &m, &id, fvp, (size_t)nfv,
			(uint64_t)x->srv->cfg.stream_node_max_entries,
			(uint64_t)x->srv->cfg.stream_node_max_bytes);
	}
	if (rc == 0 && a.idmp == IDMP_AUTO && !auto_ready) {
		rc = stream_idmp_auto_iid(x->txn, &m, &idmp_def, true, fvp, (size_t)nfv, auto_iid);
	}
	if (rc == 0 && a.idmp != IDMP_NONE) {
		rc = stream_idmp_record(x->txn, &m, &a.idmp_pid, &a.idmp_iid, &id, now, &idmp_def);
		if (rc == 0) {
			brk_expire_note(x->srv, now + STREAM_IDMP_DURATION_MIN * 1000);
		}
	}
	if (rc == 0 && a.trim.strategy != STREAM_TRIM_NONE) {
		rc = brk_trim_with_policy(x->txn, &m, &a.trim, a.policy, &removed);
	}
	if (rc == 0 && !cached) {
		rc = stream_meta_save(x->txn, x->c->db, &key, &m);
	}
	if (rc == 0) {
		x->dirty++;
		brk_signal_key(x->srv, x->c->db, key.data, key.len);
		brk_reply_id(x->w, &id);
	}
out:
	if (fvp != fv) {
		echd_free(fvp);
	}
	return rc;
}

/* XCFGSET key [IDMP-DURATION seconds] [IDMP-MAXSIZE n], in Redis' order:
 * the key, then each option (once), then whether there was any. */
int
brk_cmd_xcfgset(struct brk_ctx *x)
{
	struct st_buf key = arg_buf(&x->argv[1]);
	struct stream_idmp_cfg def = idmp_defaults(x);
	struct stream_meta m;
	long long duration = 0, maxsize = 0;
	int rc;

	rc = lookup_or_nokey(x, &key, &m);
	if (rc != 0) {
		return rc == ECHD_ENOTFOUND ? 0 : rc;
	}
	for (int i = 2; i < x->argc; i += 2) {
		bool dur = brk_arg_eq(&x->argv[i], "IDMP-DURATION");
		long long v;
		if ((!dur && !brk_arg_eq(&x->argv[i], "IDMP-MAXSIZE")) || i + 1 >= x->argc) {
			resp_add_error(x->w, BRK_ERR_SYNTAX);
			return 0;
		}
		if ((dur ? duration : maxsize) != 0) {
			resp_add_error(x->w, dur ? "ERR IDMP-DURATION specified multiple times" :
						   "ERR IDMP-MAXSIZE specified multiple times");
			return 0;
		}
		if (!brk_arg_ll(x, &x->argv[i + 1], &v)) {
			return 0;
		}
		if (dur && (v < STREAM_IDMP_DURATION_MIN || v > STREAM_IDMP_DURATION_MAX)) {
			resp_add_error(x->w, "ERR IDMP-DURATION must be between 1 and 86400 seconds");
			return 0;
		}
		if (!dur && (v < STREAM_IDMP_MAXSIZE_MIN || v > STREAM_IDMP_MAXSIZE_MAX)) {
			resp_add_error(x->w, "ERR IDMP-MAXSIZE must be between 1 and 10000 entries");
			return 0;
		}
		*(dur ? &duration : &maxsize) = v;
	}
	if (duration == 0 && maxsize == 0) {
		resp_add_error(x->w, "ERR At least one parameter must be specified");
		return 0;
	}
	rc = stream_idmp_configure(x->txn, &m, (uint64_t)duration, (uint64_t)maxsize, &def);
	if (rc != 0) {
		return rc;
	}
	x->dirty++;
	resp_add_simple(x->w, "OK");
	return 0;
}

/* XIDMPRECORD key pid iid stream-id: what an AOF replays of an XADD IDMP. */
int
brk_cmd_xidmprecord(struct brk_ctx *x)
{
	struct st_buf key = arg_buf(&x->argv[1]), pid = arg_buf(&x->argv[2]),
		      iid = arg_buf(&x->argv[3]), fields;
	struct stream_idmp_cfg def = idmp_defaults(x);
	struct stream_meta m;
	struct stream_id id, had;
	uint64_t now = brk_now_ms();
	int rc;

	/* Redis' order and texts (t_stream.c): the id, the names, the key */
	if (!brk_parse_strict_id(x, &x->argv[4], 0, &id)) {
		return 0;
	}
	if (pid.len == 0 || iid.len == 0) {
		resp_add_error(x->w, pid.len == 0 ? "ERR producer ID must be non-empty" :
						    "ERR idempotent ID must be non-empty");
		return 0;
	}
	rc = lookup_or_nokey(x, &key, &m);
	if (rc != 0) {
		return rc == ECHD_ENOTFOUND ? 0 : rc;
	}
	rc = stream_get_entry(x->txn, &m, &id, &fields);
	if (rc == ECHD_ENOTFOUND) {
		resp_add_error(x->w, "ERR No such message in stream");
		return 0;
	}
	if (rc != 0) {
		return rc;
	}
	rc = stream_idmp_find(x->txn, &m, &pid, &iid, now, false, &had);
	if (rc == 0) {
		if (stream_id_cmp(&had, &id) != 0) {
			resp_add_error(x->w,
				"ERR IID already exists for this producer with a different stream ID");
			return 0;
		}
		resp_add_simple(x->w, "OK");
		return 0;
	}
	if (rc != ECHD_ENOTFOUND) {
		return rc;
	}
	rc = stream_idmp_record(x->txn, &m, &pid, &iid, &id, now, &def);
	if (rc != 0) {
		return rc;
	}
	brk_expire_note(x->srv, now + STREAM_IDMP_DURATION_MIN * 1000);
	x->dirty++;
	resp_add_simple(x->w, "OK");
	return 0;
}

int
brk_cmd_xtrim(struct brk_ctx *x)
{
	struct st_buf key = arg_buf(&x->argv[1]);
	struct stream_meta m;
	struct add_args a;
	uint64_t removed = 0, nodes;
	int rc;

	if (parse_add_trim(x, false, &a) < 0) {
		return 0;
	}
	rc = brk_lookup(x, &key, &m);
	if (rc == ECHD_ENOTFOUND) {
		resp_add_int(x->w, 0);
		return 0;
	}
	if (rc != 0) {
		return rc;
	}
	nodes = m.nodes;
	rc = brk_trim_with_policy(x->txn, &m, &a.trim, a.policy, &removed);
	/* A node left with no live entries goes with no entry removed: a
	 * change all the same, to be saved and committed like any other. */
	if (rc == 0 && (removed > 0 || m.nodes != nodes)) {
		rc = stream_meta_save(x->txn, x->c->db, &key, &m);
	}
	if (rc != 0) {
		return rc;
	}
	if (removed > 0) {
		x->dirty += removed;
		brk_signal_key(x->srv, x->c->db, key.data, key.len);
	}
	resp_add_int(x->w, (long long)removed);
	return 0;
}

int
brk_cmd_xlen(struct brk_ctx *x)
{
	struct st_buf key = arg_buf(&x->argv[1]);
	struct stream_meta m;
	int rc = brk_lookup(x, &key, &m);

	if (rc == ECHD_ENOTFOUND) {
		resp_add_int(x->w, 0);
		return 0;
	}
	if (rc != 0) {
		return rc;
	}
	resp_add_int(x->w, (long long)m.length);
	return 0;
}

/* ------------------------------------------------------------------------
 * XRANGE / XREVRANGE
 * ---------------------------------------------------------------------- */

/* An interval bound: "-", "+", "ms[-seq]" or "(ms[-seq]" (exclusive). */
bool
brk_parse_interval_id(struct brk_ctx *x, const struct resp_arg *a, uint64_t missing_seq,
	struct stream_id *out, bool *exclusive)
{
	*exclusive = false;
	if (a->len > 1 && a->p[0] == '(') {
		struct resp_arg rest = {a->p + 1, a->len - 1};
		*exclusive = true;
		return brk_parse_strict_id(x, &rest, missing_seq, out);
	}
	if (a->len > 127 || stream_id_parse(a->p, a->len, missing_seq, true, out) != 0) {
		resp_add_error(x->w, BRK_ERR_BADID);
		return false;
	}
	return true;
}

static int
xrange_generic(struct brk_ctx *x, bool rev)
{
	const struct resp_arg *sa = rev ? &x->argv[3] : &x->argv[2];
	const struct resp_arg *ea = rev ? &x->argv[2] : &x->argv[3];
	struct st_buf key = arg_buf(&x->argv[1]);
	struct stream_id start, end;
	struct stream_meta m;
	long long count = -1;
	bool ex;
	int rc;

	if (!brk_parse_interval_id(x, sa, 0, &start, &ex)) {
		return 0;
	}
	if (ex && !stream_id_incr(&start)) {
		resp_add_error(x->w, "ERR invalid start ID for the interval");
		return 0;
	}
	if (!brk_parse_interval_id(x, ea, UINT64_MAX, &end, &ex)) {
		return 0;
	}
	if (ex && !stream_id_decr(&end)) {
		resp_add_error(x->w, "ERR invalid end ID for the interval");
		return 0;
	}
	for (int j = 4; j < x->argc; j++) {
		if (brk_arg_eq(&x->argv[j], "COUNT") && x->argc - j - 1 >= 1) {
			if (!brk_arg_ll(x, &x->argv[j + 1], &count)) {
				return 0;
			}
			if (count < 0) {
				count = 0;
			}
			j++;
		} else {
			resp_add_error(x->w, BRK_ERR_SYNTAX);
			return 0;
		}
	}
	rc = brk_lookup(x, &key, &m);
	if (rc == ECHD_ENOTFOUND) {
		resp_add_array(x->w, 0);
		return 0;
	}
	if (rc != 0) {
		return rc;
	}
	if (count == 0) {
		resp_add_null_array(x->w);
		return 0;
	}
	return reply_range(x, &m, &start, &end, count < 0 ? 0 : (uint64_t)count, rev, NULL, NULL);
}

int
brk_cmd_xrange(struct brk_ctx *x)
{
	return xrange_generic(x, false);
}

int
brk_cmd_xrevrange(struct brk_ctx *x)
{
	return xrange_generic(x, true);
}

/* ------------------------------------------------------------------------
 * XDEL / XSETID
 * ---------------------------------------------------------------------- */

int
brk_cmd_xdel(struct brk_ctx *x)
{
	struct st_buf key = arg_buf(&x->argv[1]);
	struct stream_meta m;
	struct stream_id id;
	long long deleted = 0;
	int rc;

	/* As in Redis, no key is 0 before the ids are looked at. */
	rc = brk_lookup(x, &key, &m);
	if (rc == ECHD_ENOTFOUND) {
		resp_add_int(x->w, 0);
		return 0;
	}
	if (rc != 0) {
		return rc;
	}
	/* Every id must parse before anything is deleted. */
	for (int j = 2; j < x->argc; j++) {
		if (!brk_parse_strict_id(x, &x->argv[j], 0, &id)) {
			return 0;
		}
	}
	for (int j = 2; j < x->argc; j++) {
		stream_id_parse(x->argv[j].p, x->argv[j].len, 0, false, &id);
		rc = stream_delete_entry(x->txn, &m, &id);
		if (rc == ECHD_ENOTFOUND) {
			continue;
		}
		if (rc != 0) {
			return rc;
		}
		deleted++;
	}
	if (deleted > 0) {
		rc = stream_meta_save(x->txn, x->c->db, &key, &m);
		if (rc != 0) {
			return rc;
		}
		x->dirty += (uint64_t)deleted;
		brk_signal_key(x->srv, x->c->db, key.data, key.len);
	}
	resp_add_int(x->w, deleted);
	return 0;
}

/* Looks key up; with none, replies Redis' "no such key" and returns
 * ECHD_ENOTFOUND. */
static int
lookup_or_nokey(struct brk_ctx *x, const struct st_buf *key, struct stream_meta *m)
{
	int rc = brk_lookup(x, key, m);

	if (rc == ECHD_ENOTFOUND) {
		resp_add_error(x->w, ERR_NOKEY);
	}
	return rc;
}

int
brk_cmd_xsetid(struct brk_ctx *x)
{
	struct st_buf key = arg_buf(&x->argv[1]);
	struct stream_id id, max_xdel = {0, 0}, maxid;
	struct stream_meta m;
	long long entries_added = -1;
	int i = 3, rc;

	if (!brk_parse_strict_id(x, &x->argv[2], 0, &id)) {
		return 0;
	}
	while (i < x->argc) {
		int more = x->argc - 1 - i;
		if (brk_arg_eq(&x->argv[i], "ENTRIESADDED") && more) {
			if (!brk_arg_ll(x, &x->argv[i + 1], &entries_added)) {
				return 0;
			}
			if (entries_added < 0) {
				resp_add_error(x->w, "ERR entries_added must be positive");
				return 0;
			}
			i += 2;
		} else if (brk_arg_eq(&x->argv[i], "MAXDELETEDID") && more) {
			if (!brk_parse_strict_id(x, &x->argv[i + 1], 0, &max_xdel)) {
				return 0;
			}
			if (stream_id_cmp(&id, &max_xdel) < 0) {
				resp_add_error(x->w, "ERR The ID specified in XSETID is smaller than the "
						     "provided max_deleted_entry_id");
				return 0;
			}
			i += 2;
		} else {
			resp_add_error(x->w, BRK_ERR_SYNTAX);
			return 0;
		}
	}
	rc = lookup_or_nokey(x, &key, &m);
	if (rc != 0) {
		return rc == ECHD_ENOTFOUND ? 0 : rc;
	}
	if (stream_id_cmp(&id, &m.max_deleted) < 0) {
		resp_add_error(x->w, "ERR The ID specified in XSETID is smaller than current "
				     "max_deleted_entry_id");
		return 0;
	}
	if (m.length > 0) {
		rc = brk_last_valid_id(x->txn, &m, &maxid);
		if (rc != 0) {
			return rc;
		}
		if (stream_id_cmp(&id, &maxid) < 0) {
			resp_add_error(x->w, "ERR The ID specified in XSETID is smaller than the "
					     "target stream top item");
			return 0;
		}
		if (entries_added != -1 && m.length > (uint64_t)entries_added) {
			resp_add_error(x->w, "ERR The entries_added specified in XSETID is smaller "
					     "than the target stream length");
			return 0;
		}
	}
	m.last = id;
	if (entries_added != -1) {
		m.entries_added = (uint64_t)entries_added;
	}
	if (max_xdel.ms != 0 || max_xdel.seq != 0) {
		m.max_deleted = max_xdel;
	}
	rc = stream_meta_save(x->txn, x->c->db, &key, &m);
	if (rc != 0) {
		return rc;
	}
	x->dirty++;
	brk_signal_key(x->srv, x->c->db, key.data, key.len);
	resp_add_simple(x->w, "OK");
	return 0;
}

/* ------------------------------------------------------------------------
 * XREAD
 * ---------------------------------------------------------------------- */

bool
brk_parse_read_opts(struct brk_ctx *x, bool group, struct brk_read_opts *ro)
{
	memset(ro, 0, sizeof(*ro));
	ro->timeout = -1;
	ro->claim = -1;
	for (int i = 1; i < x->argc; i++) {
		int more = x->argc - i - 1;
		const struct resp_arg *o = &x->argv[i];
		if (brk_arg_eq(o, "BLOCK") && more) {
			i++;
			if (!brk_arg_timeout(x, &x->argv[i], &ro->timeout)) {
				return false;
			}
		} else if (brk_arg_eq(o, "COUNT") && more) {
			i++;
			if (!brk_arg_ll(x, &x->argv[i], &ro->count)) {
				return false;
			}
			if (ro->count < 0) {
				ro->count = 0;
			}
		} else if ((brk_arg_eq(o, "MAXCOUNT") || brk_arg_eq(o, "MAXSIZE")) && more) {
			bool mc = brk_arg_eq(o, "MAXCOUNT");
			long long v;
			i++;
			/* any value but a positive integer, as Redis' range check */
			if (!brk_str2ll(x->argv[i].p, x->argv[i].len, &v) || v < 1) {
				resp_add_errorf(x->w, "ERR %s must be a positive integer",
					mc ? "MAXCOUNT" : "MAXSIZE");
				return false;
			}
			*(mc ? &ro->maxcount : &ro->maxsize) = v;
		} else if (brk_arg_eq(o, "STREAMS") && more) {
			ro->streams_arg = i + 1;
			ro->nstreams = x->argc - ro->streams_arg;
			if (ro->nstreams % 2 != 0) {
				/* Redis 8's texts: XREAD names '+' since it learnt it */
				resp_add_errorf(x->w, "ERR Unbalanced '%s' list of streams: for each "
						      "stream key an ID%s must be specified.",
					group ? "xreadgroup" : "xread",
					group ? " or '>'" : ", '+', or '$'");
				return false;
			}
			ro->nstreams /= 2;
			break;
		} else if (brk_arg_eq(o, "GROUP") && more >= 2) {
			if (!group) {
				resp_add_error(x->w, "ERR The GROUP option is only supported by "
						     "XREADGROUP. You called XREAD instead.");
				return false;
			}
			ro->group = &x->argv[i + 1];
			ro->consumer = &x->argv[i + 2];
			i += 2;
		} else if (brk_arg_eq(o, "NOACK")) {
			if (!group) {
				resp_add_error(x->w, "ERR The NOACK option is only supported by "
						     "XREADGROUP. You called XREAD instead.");
				return false;
			}
			ro->noack = true;
		} else if (brk_arg_eq(o, "CLAIM") && more) {
			if (!group) {
				resp_add_error(x->w, "ERR The CLAIM option is only supported by "
						     "XREADGROUP. You called XREAD instead.");
				return false;
			}
			i++;
			if (!brk_str2ll(x->argv[i].p, x->argv[i].len, &ro->claim)) {
				resp_add_error(x->w, "ERR min-idle-time is not an integer or out of range");
				return false;
			}
			if (ro->claim < 0) {
				resp_add_error(x->w, "ERR min-idle-time must be a positive integer");
				return false;
			}
		} else {
			resp_add_error(x->w, BRK_ERR_SYNTAX);
			return false;
		}
	}
	if (ro->streams_arg == 0) {
		resp_add_error(x->w, BRK_ERR_SYNTAX);
		return false;
	}
	if (ro->maxcount > 0 && ro->count > ro->maxcount) {
		/* a total below the per-stream cap is a caller's mistake */
		resp_add_error(x->w, "ERR MAXCOUNT must be greater than or equal to COUNT");
		return false;
	}
	return true;
}

void
brk_read_budget_init(struct brk_read_budget *b, const struct brk_read_opts *ro,
	const struct resp_writer *w)
{
	b->maxcount = (uint64_t)ro->maxcount;
	b->maxsize = (uint64_t)ro->maxsize;
	b->base = w->out->len;
	b->emitted = 0;
}

bool
brk_read_budget_spent(const struct brk_read_budget *b, const struct resp_writer *w)
{
	if (b == NULL) {
		return false;
	}
	if (b->maxcount > 0 && b->emitted >= b->maxcount) {
		return true;
	}
	return b->maxsize > 0 && b->emitted > 0 && w->out->len - b->base >= b->maxsize;
}

int
brk_cmd_xread(struct brk_ctx *x)
{
	long long count = 0, timeout = -1;
	int streams_arg = 0, nstreams = 0, rc = 0;
	struct stream_id ids_small[16], *ids = ids_small;
	char (*resolved)[48] = NULL;
	size_t served = 0, h = 0;

	struct brk_read_opts ro;
	struct brk_read_budget budget;

	if (!brk_parse_read_opts(x, false, &ro)) {
		return 0;
	}
	count = ro.count;
	timeout = ro.timeout;
	streams_arg = ro.streams_arg;
	nstreams = ro.nstreams;
	if (nstreams > 16) {
		ids = echd_calloc((size_t)nstreams, sizeof(*ids));
		if (ids == NULL) {
			return -ENOMEM;
		}
	}
	/* Resolve each id; '$' and '+' are read from the stream now. */
	for (int i = 0; i < nstreams; i++) {
		const struct resp_arg *ida = &x->argv[streams_arg + nstreams + i];
		struct st_buf key = arg_buf(&x->argv[streams_arg + i]);
		struct stream_meta m;
		bool dollar = ida->len == 1 && ida->p[0] == '$';
		bool plus = ida->len == 1 && ida->p[0] == '+';

		if (dollar || plus) {
			rc = brk_lookup(x, &key, &m);
			if (rc != 0 && rc != ECHD_ENOTFOUND) {
				goto out;
			}
			ids[i].ms = ids[i].seq = 0;
			if (rc == 0 && dollar) {
				ids[i] = m.last;
			} else if (rc == 0 && plus && m.length > 0) {
				rc = brk_last_valid_id(x->txn, &m, &ids[i]);
				if (rc != 0) {
					goto out;
				}
				stream_id_decr(&ids[i]);
			}
			rc = 0;
			continue;
		}
		if (ida->len == 1 && ida->p[0] == '>') {
			resp_add_error(x->w, "ERR The > ID can be specified only when calling XREADGROUP "
					     "using the GROUP <group> <consumer> option.");
			goto out;
		}
		if (!brk_parse_strict_id(x, ida, 0, &ids[i])) {
			goto out;
		}
	}
	brk_read_budget_init(&budget, &ro, x->w);
	/* streams in the caller's order; once the budget is spent the rest
	 * are left out */
	for (int i = 0; i < nstreams && !brk_read_budget_spent(&budget, x->w); i++) {
		struct st_buf key = arg_buf(&x->argv[streams_arg + i]);
		struct stream_meta m;
		struct stream_id maxid, start, end = {UINT64_MAX, UINT64_MAX};

		rc = brk_lookup(x, &key, &m);
		if (rc == ECHD_ENOTFOUND) {
			rc = 0;
			continue;
		}
		if (rc != 0) {
			goto out;
		}
		rc = brk_last_valid_id(x->txn, &m, &maxid);
		if (rc != 0) {
			goto out;
		}
		if (m.length == 0 || stream_id_cmp(&maxid, &ids[i]) <= 0) {
			continue;
		}
		if (served++ == 0) {
			h = resp_add_deferred(x->w);
		}
		if (x->w->proto == 2) {
			resp_add_array(x->w, 2);
		}
		resp_add_bulk(x->w, key.data, key.len);
		start = ids[i];
		stream_id_incr(&start);
		rc = reply_range(x, &m, &start, &end, (uint64_t)count, false, NULL, &budget);
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
	/* Nothing yet: block, with '$' and '+' replaced by what they meant now
	 * so that entries added meanwhile are not missed. */
	resolved = echd_calloc((size_t)nstreams, sizeof(*resolved));
	{
		struct resp_arg *req = echd_calloc((size_t)x->argc, sizeof(*req));
		if (resolved == NULL || req == NULL) {
			echd_free(req);
			rc = -ENOMEM;
			goto out;
		}
		memcpy(req, x->argv, (size_t)x->argc * sizeof(*req));
		for (int i = 0; i < nstreams; i++) {
			struct resp_arg *ida = &req[streams_arg + nstreams + i];
			ida->len = stream_id_format(&ids[i], resolved[i]);
			ida->p = resolved[i];
		}
		rc = brk_block(x, nstreams, &x->argv[streams_arg], (uint64_t)timeout, x->argc, req);
		echd_free(req);
	}
out:
	echd_free(resolved);
	if (ids != ids_small) {
		echd_free(ids);
	}
	return rc;
}

/* ------------------------------------------------------------------------
 * XINFO
 * ---------------------------------------------------------------------- */

static void
reply_edge_entry(struct brk_ctx *x, const struct stream_meta *m, bool last, int *rc)
{
	struct stream_id lo = {0, 0}, hi = {UINT64_MAX, UINT64_MAX}, id;
	struct stream_iter *it;
	struct st_buf f;

	*rc = stream_iter_create(x->txn, m, &lo, &hi, last, &it);
	if (*rc != 0) {
		return;
	}
	*rc = stream_iter_next(it, &id, &f);
	if (*rc == 0) {
		brk_reply_entry(x->w, &id, &f);
	} else if (*rc == ECHD_ENOTFOUND) {
		resp_add_null(x->w);
		*rc = 0;
	}
	stream_iter_destroy(it);
}

static int
xinfo_stream(struct brk_ctx *x)
{
	struct st_buf key;
	struct stream_meta m;
	struct stream_idmp_info idmp;
	bool full = false;
	long long count = 10;
	int rc;

	if (x->argc < 3) {
		resp_add_error(x->w, "ERR wrong number of arguments for 'xinfo|stream' command");
		return 0;
	}
	/* The key first, then the options, as Redis does. */
	key = arg_buf(&x->argv[2]);
	rc = lookup_or_nokey(x, &key, &m);
	if (rc != 0) {
		return rc == ECHD_ENOTFOUND ? 0 : rc;
	}
	if (x->argc > 3) {
		if (!brk_arg_eq(&x->argv[3], "FULL")) {
			goto syntax;
		}
		full = true;
		if (x->argc > 4) {
			if (x->argc != 6 || !brk_arg_eq(&x->argv[4], "COUNT")) {
				goto syntax;
			}
			if (!brk_arg_ll(x, &x->argv[5], &count)) {
				return 0;
			}
			if (count < 0) {
				count = 10;
			}
		}
	}
	{
		struct stream_idmp_cfg def = idmp_defaults(x);
		rc = stream_idmp_info(x->txn, &m, &def, &idmp);
		if (rc != 0) {
			return rc;
		}
	}
	resp_add_map(x->w, full ? 15 : 16);
	resp_add_bulk_cstr(x->w, "length");
	resp_add_int(x->w, (long long)m.length);
	/* Redis reports its radix tree here; echd's node rows play that part. */
	resp_add_bulk_cstr(x->w, "radix-tree-keys");
	resp_add_int(x->w, (long long)m.nodes);
	resp_add_bulk_cstr(x->w, "radix-tree-nodes");
	resp_add_int(x->w, (long long)m.nodes + 1);
	resp_add_bulk_cstr(x->w, "last-generated-id");
	brk_reply_id(x->w, &m.last);
	resp_add_bulk_cstr(x->w, "max-deleted-entry-id");
	brk_reply_id(x->w, &m.max_deleted);
	resp_add_bulk_cstr(x->w, "entries-added");
	resp_add_int(x->w, (long long)m.entries_added);
	resp_add_bulk_cstr(x->w, "recorded-first-entry-id");
	brk_reply_id(x->w, &m.first);
	{
		static const char *const names[] = {"idmp-duration", "idmp-maxsize",
			"pids-tracked", "iids-tracked", "iids-added", "iids-duplicates"};
		const uint64_t vals[] = {idmp.duration_s, idmp.maxsize, idmp.pids, idmp.iids,
			idmp.added, idmp.duplicates};
		for (size_t i = 0; i < 6; i++) {
			resp_add_bulk_cstr(x->w, names[i]);
			resp_add_int(x->w, (long long)vals[i]);
		}
	}
	if (!full) {
		resp_add_bulk_cstr(x->w, "groups");
		resp_add_int(x->w, (long long)m.groups);
		resp_add_bulk_cstr(x->w, "first-entry");
		reply_edge_entry(x, &m, false, &rc);
		if (rc != 0) {
			return rc;
		}
		resp_add_bulk_cstr(x->w, "last-entry");
		reply_edge_entry(x, &m, true, &rc);
		return rc;
	}
	{
		struct stream_id lo = {0, 0}, hi = {UINT64_MAX, UINT64_MAX};
		resp_add_bulk_cstr(x->w, "entries");
		rc = reply_range(x, &m, &lo, &hi, (uint64_t)count, false, NULL, NULL);
		if (rc != 0) {
			return rc;
		}
	}
	resp_add_bulk_cstr(x->w, "groups");
	return brk_reply_full_groups(x, &m, (uint64_t)count);
syntax:
	brk_reply_subcommand_syntax(x, "XINFO");
	return 0;
}

static const char *const xinfo_help[] = {
	"XINFO <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
	"CONSUMERS <key> <groupname>",
	"    Show consumers of <groupname>.",
	"GROUPS <key>",
	"    Show the stream consumer groups.",
	"STREAM <key> [FULL [COUNT <count>]",
	"    Show information about the stream.",
	"HELP",
	"    Print this help.",
};

int
brk_cmd_xinfo(struct brk_ctx *x)
{
	const struct resp_arg *sub = &x->argv[1];

	if (brk_arg_eq(sub, "HELP") && x->argc == 2) {
		BRK_REPLY_HELP(x->w, xinfo_help);
		return 0;
	}
	if (brk_arg_eq(sub, "STREAM")) {
		return xinfo_stream(x);
	}
	/* brk_subcommand_ok() checked the name and the arity */
	if (brk_arg_eq(sub, "GROUPS")) {
		return brk_xinfo_groups(x);
	}
	if (brk_arg_eq(sub, "CONSUMERS")) {
		return brk_xinfo_consumers(x);
	}
	brk_reply_subcommand_syntax(x, "XINFO"); /* not reached */
	return 0;
}
