/* adm_offline.c - echo-admin on the store itself, read-only: the LMDB
 * directory (opened through lmdb-staged, which reads plain lmdb's too and
 * sees rows lmdb-staged has not filed yet), or echd's schema on PostgreSQL
 * (--storage-url).
 *
 * Everything is read through one read-only transaction: a consistent
 * snapshot, taken without stopping or slowing echd (LMDB readers never
 * block its writer; the postgres backend opened read_only loads one
 * snapshot of the schema without the active front end's lock). Figures
 * are computed as the broker computes them for XINFO and XPENDING
 * (broker/commands/cmd_group.c), with this process's clock for idle times. Nothing
 * here can write: the store is opened read_only, so even a bug could not
 * change the data.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "adm.h"
#include "echd.h"
#include "group.h"

static const struct stream_id id_min = {0, 0};
static const struct stream_id id_max = {UINT64_MAX, UINT64_MAX};

static int
open_dir(const char *dir, struct storage **out)
{
	struct storage_opts so;
	char path[4096];
	struct stat sb;
	int rc;

	if (stat(dir, &sb) != 0) {
		return adm_err(ADM_EXIT_CONNECT, "cannot open %s: %s", dir, strerror(errno));
	}
	if (!S_ISDIR(sb.st_mode)) {
		return adm_err(ADM_EXIT_CONNECT, "cannot open %s: not a directory", dir);
	}
	snprintf(path, sizeof(path), "%s/data.mdb", dir);
	if (access(path, F_OK) != 0) {
		return adm_err(ADM_EXIT_CONNECT, "%s holds no echd data (no data.mdb)", dir);
	}
	memset(&so, 0, sizeof(so));
	so.dir = dir;
	so.read_only = true;
	/* lmdb-staged reads plain lmdb's directories too, and through the rows
	 * it staged (a missing staging table reads as empty) */
	rc = storage_open("lmdb-staged", &so, out);
	if (rc != 0) {
		return adm_err(
			ADM_EXIT_CONNECT, "cannot open %s read-only: %s", dir, echd_strerror(rc));
	}
	return 0;
}

/* The schema on PostgreSQL, read-only: a snapshot, no lock, no write (the
 * schema must exist: echd creates it). map: only its map of shards and who
 * holds each (storage_ha_part()), no data. */
static int
open_pg(const struct adm_opts *ao, bool map, struct storage **out)
{
	struct storage_opts so;
	struct storage_opt opt[4];
	char timeout[24];
	int rc;

	snprintf(timeout, sizeof(timeout), "%d", ao->timeout_ms);
	opt[0] = (struct storage_opt){"postgres.url", ao->storage_url};
	opt[1] = (struct storage_opt){"postgres.schema", adm_pg_schema(ao)};
	opt[2] = (struct storage_opt){"postgres.timeout-ms", timeout};
	opt[3] = (struct storage_opt){"postgres.shards", "map"};
	memset(&so, 0, sizeof(so));
	so.read_only = true;
	so.opt = opt;
	so.nopt = map ? 4 : 3;
	rc = storage_open("postgres", &so, out);
	if (rc != 0) {
		/* not the URL: it may carry a password */
		return adm_err(ADM_EXIT_CONNECT,
			"cannot open schema '%s' on PostgreSQL read-only: %s", adm_pg_schema(ao),
			echd_strerror(rc));
	}
	return 0;
}

const char *
adm_pg_schema(const struct adm_opts *o)
{
	return o->pg_schema != NULL ? o->pg_schema : ADM_PG_SCHEMA_DEFAULT;
}

int
adm_off_open(struct adm_ctx *x, const char *dir)
{
	int rc = dir != NULL ? open_dir(dir, &x->st) : open_pg(x->o, false, &x->st);

	if (rc != 0) {
		return rc;
	}
	rc = storage_txn_begin(x->st, NULL, STORAGE_TXN_RDONLY, &x->txn);
	if (rc != 0) {
		storage_close(x->st);
		x->st = NULL;
		if (dir == NULL) {
			return adm_err(ADM_EXIT_CONNECT, "cannot read schema '%s': %s",
				adm_pg_schema(x->o), echd_strerror(rc));
		}
		return adm_err(ADM_EXIT_CONNECT, "cannot read %s: %s", dir, echd_strerror(rc));
	}
	x->live = false;
	x->now_ms = adm_now_ms();
	return 0;
}

void
adm_off_close(struct adm_ctx *x)
{
	storage_txn_abort(x->txn);
	x->txn = NULL;
	storage_close(x->st);
	x->st = NULL;
}

static int
storage_fail(int rc, const char *what)
{
	return adm_err(ADM_EXIT_FAILED, "%s: %s", what, echd_strerror(rc));
}

static struct st_buf
cbuf(const char *s)
{
	struct st_buf b = {s, strlen(s)};
	return b;
}

static int64_t
since(const struct adm_ctx *x, int64_t t)
{
	return x->now_ms > t ? x->now_ms - t : 0;
}

/* Looks up the stream (and the group when group is not NULL); reports a
 * missing one. Returns an ADM_EXIT_ code. */
static int
lookup(struct adm_ctx *x, const char *stream, const char *group, struct stream_meta *m,
	struct group_meta *g)
{
	struct st_buf sn = cbuf(stream);
	int rc = stream_lookup(x->txn, x->o->db, &sn, m);

	if (rc == ECHD_ENOTFOUND || rc == ECHD_EINVAL) {
		return adm_err(ADM_EXIT_NOTFOUND, "no stream '%s'", stream);
	}
	if (rc != 0) {
		return storage_fail(rc, stream);
	}
	if (group != NULL) {
		struct st_buf gn = cbuf(group);
		rc = group_lookup(x->txn, m, &gn, g);
		if (rc == ECHD_ENOTFOUND) {
			return adm_err(
				ADM_EXIT_NOTFOUND, "no group '%s' in stream '%s'", group, stream);
		}
		if (rc != 0) {
			return storage_fail(rc, group);
		}
	}
	return 0;
}

/* Entry fields decoded into a reusable array of buffers. */
struct fields {
	struct st_buf *fv;
	size_t n;
	size_t cap;
};

static int
fields_decode(struct fields *f, const struct st_buf *row)
{
	size_t pairs = stream_fields_count(row), pos = 0;

	if (pairs > row->len / 8) {
		return ECHD_ECORRUPT; /* each pair takes at least its two lengths */
	}
	if (pairs * 2 > f->cap) {
		struct st_buf *p = echd_realloc(f->fv, pairs * 2 * sizeof(*p));
		if (p == NULL) {
			return -ENOMEM;
		}
		f->fv = p;
		f->cap = pairs * 2;
	}
	f->n = 0;
	while (f->n < pairs * 2 && stream_fields_next(row, &pos, &f->fv[f->n], &f->fv[f->n + 1])) {
		f->n += 2;
	}
	return f->n == pairs * 2 ? 0 : ECHD_ECORRUPT;
}

/* ---- streams -------------------------------------------------------------- */

struct streams_walk {
	struct adm_ctx *x;
	struct adm_view *v;
	int rc;
};

static int
last_live(struct storage_txn *t, const struct stream_meta *m, struct stream_id *out)
{
	struct stream_iter *it;
	struct st_buf f;
	int rc = stream_iter_create(t, m, &id_min, &id_max, true, &it);

	if (rc != 0) {
		return rc;
	}
	rc = stream_iter_next(it, out, &f);
	stream_iter_destroy(it);
	return rc;
}

static int
streams_cb(const struct st_buf *name, void *ud)
{
	struct streams_walk *w = ud;
	struct adm_stream_info s;
	struct stream_meta m;
	int rc = stream_lookup(w->x->txn, w->x->o->db, name, &m);

	if (rc == 0 && m.length > 0) {
		rc = last_live(w->x->txn, &m, &s.last_entry);
	}
	if (rc != 0) {
		w->rc = storage_fail(rc, "reading a stream");
		return 1;
	}
	s.name = *name;
	s.length = m.length;
	s.groups = m.groups;
	s.entries_added = m.entries_added;
	s.empty = m.length == 0;
	s.first = m.first;
	s.last_generated = m.last;
	s.max_deleted = m.max_deleted;
	{
		/* a stream that never used them has echd's defaults */
		static const struct stream_idmp_cfg def = {100, 100};
		rc = stream_idmp_info(w->x->txn, &m, &def, &s.idmp);
		if (rc != 0) {
			w->rc = storage_fail(rc, "reading a stream's idempotency settings");
			return 1;
		}
		s.idmp_known = true;
	}
	if (adm_view_stream(w->v, &s) != 0) {
		w->rc = adm_err(ADM_EXIT_FAILED, "out of memory");
		return 1;
	}
	return 0;
}

int
adm_off_streams(struct adm_ctx *x)
{
	struct streams_walk w = {x, adm_view_streams_begin(x), 0};
	uint64_t cursor = 0, now_ms;
	struct timespec ts;
	int rc;

	/* the streams a client would see: expired ones not yet dropped are not */
	clock_gettime(CLOCK_REALTIME, &ts);
	now_ms = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;

	if (w.v == NULL) {
		return ADM_EXIT_FAILED;
	}
	/* rows are printed as the walk finds them */
	do {
		rc = stream_scan(x->txn, x->o->db, now_ms, &cursor, 1000, streams_cb, &w);
	} while (rc == 0 && cursor != 0);
	adm_view_end(w.v, false);
	if (rc != 0 && w.rc == 0) {
		w.rc = storage_fail(rc, "listing streams");
	}
	return w.rc;
}

/* ---- groups --------------------------------------------------------------- */

struct groups_walk {
	struct adm_ctx *x;
	struct adm_view *v;
	const struct stream_meta *m;
	int rc;
};

static int
groups_cb(const struct st_buf *name, const struct group_meta *g, void *ud)
{
	struct groups_walk *w = ud;
	struct adm_group_info gi;
	struct pel_iter *it;
	struct pel_row r;
	int rc;

	memset(&gi, 0, sizeof(gi));
	gi.name = *name;
	gi.last_delivered = g->last_delivered;
	gi.entries_read = g->entries_read;
	gi.pending = g->pending;
	gi.consumers = g->consumers;
	rc = group_lag(w->x->txn, w->m, g, &gi.lag);
	gi.lag_known = rc == 0;
	if (rc == 0) {
		rc = pel_iter_create(w->x->txn, g, 0, &id_min, &id_max, &it);
	}
	if (rc == 0) {
		rc = pel_iter_next(it, &r);
		pel_iter_destroy(it);
		if (rc == 0) {
			gi.has_oldest = true;
			gi.oldest_id = r.id;
			/* a released row has no delivery time: -1, as XPENDING says */
			gi.oldest_idle_ms = r.cid == PEL_UNOWNED
				? -1
				: since(w->x, (int64_t)r.delivery_time);
		} else if (rc == ECHD_ENOTFOUND) {
			rc = 0;
		}
	}
	if (rc != 0) {
		w->rc = storage_fail(rc, "reading a group");
		return 1;
	}
	if (group_policy_active(&g->policy) || g->policy.dead_lettered != 0) {
		gi.has_policy = true;
		gi.ack_wait = (int64_t)g->policy.ack_wait;
		gi.max_deliver = (int64_t)g->policy.max_deliver;
		gi.max_ack_pending = (int64_t)g->policy.max_ack_pending;
		gi.dead_lettered = (int64_t)g->policy.dead_lettered;
		gi.dead_letter.data = g->policy.dl;
		gi.dead_letter.len = g->policy.dl_len;
	}
	if (adm_view_group(w->v, &gi) != 0) {
		w->rc = adm_err(ADM_EXIT_FAILED, "out of memory");
		return 1;
	}
	return 0;
}

int
adm_off_groups(struct adm_ctx *x, const char *stream)
{
	struct stream_meta m;
	struct groups_walk w = {x, NULL, &m, 0};
	int rc = lookup(x, stream, NULL, &m, NULL);

	if (rc != 0) {
		return rc;
	}
	w.v = adm_view_groups_begin(x, stream);
	if (w.v == NULL) {
		return ADM_EXIT_FAILED;
	}
	rc = group_each(x->txn, &m, groups_cb, &w);
	adm_view_end(w.v, false);
	if (rc != 0 && w.rc == 0) {
		w.rc = storage_fail(rc, "listing groups");
	}
	return w.rc;
}

/* ---- consumers ------------------------------------------------------------ */

struct consumers_walk {
	struct adm_ctx *x;
	struct adm_view *v;
};

static int
consumers_cb(const struct st_buf *name, const struct consumer_meta *c, void *ud)
{
	struct consumers_walk *w = ud;
	struct adm_consumer_info ci;

	ci.name = *name;
	ci.pending = c->pending;
	ci.idle_ms = since(w->x, (int64_t)c->seen_time);
	ci.inactive_ms = c->active_time < 0 ? -1 : since(w->x, c->active_time);
	return adm_view_consumer(w->v, &ci) != 0 ? -ENOMEM : 0;
}

int
adm_off_consumers(struct adm_ctx *x, const char *stream, const char *group)
{
	struct stream_meta m;
	struct group_meta g;
	struct consumers_walk w = {x, NULL};
	int rc = lookup(x, stream, group, &m, &g);

	if (rc != 0) {
		return rc;
	}
	w.v = adm_view_consumers_begin(x, stream, group);
	if (w.v == NULL) {
		return ADM_EXIT_FAILED;
	}
	rc = consumer_each(x->txn, &g, consumers_cb, &w);
	adm_view_end(w.v, false);
	return rc != 0 ? storage_fail(rc, "listing consumers") : 0;
}

/* ---- pending -------------------------------------------------------------- */

/* The name of consumer cid, remembered for the run of rows it owns. */
struct name_cache {
	uint64_t cid;
	struct st_buf name;
};

static int
consumer_name(struct adm_ctx *x, const struct group_meta *g, uint64_t cid, struct name_cache *nc)
{
	struct consumer_meta c;
	int rc;

	if (nc->cid == cid && cid != 0) {
		return 0;
	}
	rc = consumer_by_id(x->txn, g, cid, &c, &nc->name);
	if (rc != 0) {
		/* a PEL row whose owner is gone: `check` explains */
		return rc == ECHD_ENOTFOUND ? ECHD_ECORRUPT : rc;
	}
	nc->cid = cid;
	return 0;
}

static bool
row_matches(const struct adm_ctx *x, const struct pel_row *r, int64_t idle)
{
	const struct adm_opts *o = x->o;

	if (o->min_idle > 0 && idle < o->min_idle) {
		return false;
	}
	return o->min_deliveries < 0 || r->delivery_count >= (uint64_t)o->min_deliveries;
}

int
adm_off_pending(struct adm_ctx *x, const char *stream, const char *group)
{
	const struct adm_opts *o = x->o;
	struct stream_meta m;
	struct group_meta g;
	struct consumer_meta cm;
	struct name_cache nc = {0, {"", 0}};
	struct fields f = {NULL, 0, 0};
	struct pel_iter *it = NULL;
	struct adm_view *v = NULL;
	struct pel_row r;
	uint64_t cid = 0, shown = 0;
	bool truncated = false;
	int rc = lookup(x, stream, group, &m, &g);

	if (rc != 0) {
		return rc;
	}
	if (o->consumer != NULL) {
		struct st_buf cn = cbuf(o->consumer);
		rc = consumer_lookup(x->txn, &g, &cn, &cm);
		if (rc == ECHD_ENOTFOUND) {
			return adm_err(ADM_EXIT_NOTFOUND, "no consumer '%s' in group '%s'",
				o->consumer, group);
		}
		if (rc != 0) {
			return storage_fail(rc, o->consumer);
		}
		cid = cm.cid;
	}
	rc = pel_iter_create(x->txn, &g, cid, &id_min, &id_max, &it);
	if (rc != 0) {
		return storage_fail(rc, "reading the PEL");
	}
	v = adm_view_pending_begin(x, stream, group);
	if (v == NULL) {
		pel_iter_destroy(it);
		return ADM_EXIT_FAILED;
	}
	while ((rc = pel_iter_next(it, &r)) == 0) {
		struct adm_pending_row pr;
		int64_t idle = since(x, (int64_t)r.delivery_time);

		if (!row_matches(x, &r, idle)) {
			continue;
		}
		if (o->limit >= 0 && shown == (uint64_t)o->limit) {
			truncated = true;
			break;
		}
		memset(&pr, 0, sizeof(pr));
		if (r.cid == PEL_UNOWNED) {
			/* released by XNACK: shown as XPENDING shows it */
			pr.released = true;
			pr.consumer = (struct st_buf){"", 0};
			idle = -1;
		} else {
			rc = consumer_name(x, &g, r.cid, &nc);
			if (rc != 0) {
				break;
			}
			pr.consumer = nc.name;
		}
		pr.id = r.id;
		pr.idle_ms = idle;
		pr.deliveries = r.delivery_count;
		if (o->payload) {
			struct st_buf row;
			pr.with_payload = true;
			rc = stream_get_entry(x->txn, &m, &r.id, &row);
			if (rc == ECHD_ENOTFOUND) {
				pr.deleted = true;
				rc = 0;
			} else if (rc == 0) {
				rc = fields_decode(&f, &row);
				pr.fv = f.fv;
				pr.nfv = f.n;
			}
			if (rc != 0) {
				break;
			}
		}
		if (adm_view_pending(v, &pr) != 0) {
			rc = -ENOMEM;
			break;
		}
		shown++;
	}
	pel_iter_destroy(it);
	adm_view_end(v, truncated);
	echd_free(f.fv);
	if (rc != 0 && rc != ECHD_ENOTFOUND) {
		return storage_fail(rc, "reading the PEL");
	}
	return 0;
}

/* ---- entry -------------------------------------------------------------- */

struct entry_group {
	struct st_buf name;
	struct group_meta g;
};

struct entry_walk {
	struct entry_group *v;
	size_t n;
	size_t cap;
};

static int
entry_groups_cb(const struct st_buf *name, const struct group_meta *g, void *ud)
{
	struct entry_walk *w = ud;

	if (w->n == w->cap) {
		size_t cap = w->cap ? w->cap * 2 : 8;
		struct entry_group *p = echd_realloc(w->v, cap * sizeof(*p));
		if (p == NULL) {
			return -ENOMEM;
		}
		w->v = p;
		w->cap = cap;
	}
	/* names stay valid: nothing writes in a read-only transaction */
	w->v[w->n].name = *name;
	w->v[w->n].g = *g;
	w->n++;
	return 0;
}

int
adm_off_entry(struct adm_ctx *x, const char *stream, const struct stream_id *id)
{
	struct stream_meta m;
	struct entry_walk w = {NULL, 0, 0};
	struct fields f = {NULL, 0, 0};
	struct pel_row *rows = NULL;
	struct adm_view *v = NULL;
	struct st_buf row;
	bool exists, held = false;
	char buf[48];
	int rc = lookup(x, stream, NULL, &m, NULL);

	if (rc != 0) {
		return rc;
	}
	rc = stream_get_entry(x->txn, &m, id, &row);
	exists = rc == 0;
	if (rc == 0) {
		rc = fields_decode(&f, &row);
	} else if (rc == ECHD_ENOTFOUND) {
		rc = 0;
	}
	if (rc == 0) {
		rc = group_each(x->txn, &m, entry_groups_cb, &w);
	}
	if (rc == 0 && w.n > 0) {
		rows = echd_calloc(w.n, sizeof(*rows));
		rc = rows == NULL ? -ENOMEM : 0;
	}
	for (size_t i = 0; rc == 0 && i < w.n; i++) {
		rc = pel_get(x->txn, &w.v[i].g, id, &rows[i]);
		if (rc == 0) {
			held = true;
		} else if (rc == ECHD_ENOTFOUND) {
			rows[i].cid = PEL_NEW; /* not pending in this group */
			rc = 0;
		}
	}
	if (rc != 0) {
		rc = storage_fail(rc, "reading the entry");
		goto out;
	}
	if (!exists && !held) {
		rc = adm_err(ADM_EXIT_NOTFOUND, "no entry %s in stream '%s'", adm_fmt_id(buf, id),
			stream);
		goto out;
	}
	v = adm_view_entry_begin(x, stream, id, exists, f.fv, f.n);
	for (size_t i = 0; v != NULL && i < w.n; i++) {
		struct adm_entry_group eg;
		struct consumer_meta cm;

		memset(&eg, 0, sizeof(eg));
		eg.name = w.v[i].name;
		eg.delivered = stream_id_cmp(id, &w.v[i].g.last_delivered) <= 0;
		if (rows[i].cid == PEL_UNOWNED) {
			eg.pending = true;
			eg.released = true;
			eg.idle_ms = -1;
			eg.deliveries = rows[i].delivery_count;
		} else if (rows[i].cid != PEL_NEW) {
			rc = consumer_by_id(x->txn, &w.v[i].g, rows[i].cid, &cm, &eg.consumer);
			if (rc != 0) {
				rc = storage_fail(rc == ECHD_ENOTFOUND ? ECHD_ECORRUPT : rc,
					"reading the owner");
				break;
			}
			eg.pending = true;
			eg.idle_ms = since(x, (int64_t)rows[i].delivery_time);
			eg.deliveries = rows[i].delivery_count;
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
	echd_free(rows);
	echd_free(w.v);
	echd_free(f.fv);
	return rc;
}

/* ---- stats ---------------------------------------------------------------- */

int
adm_off_stats(struct adm_ctx *x)
{
	struct storage_stat ss;
	struct storage_capacity *cap = storage_capacity(x->st);
	struct storage_capacity_stat cs;
	struct adm_view *v;
	char a[64], b[64], c[64], line[200];
	bool gc = false;
	int rc;

	memset(&ss, 0, sizeof(ss));
	memset(&cs, 0, sizeof(cs));
	rc = storage_stat(x->st, &ss);
	if (rc == 0 && cap != NULL) {
		rc = storage_capacity_stat(cap, &cs);
	}
	if (rc == 0) {
		rc = stream_gc_pending(x->txn, &gc);
	}
	if (rc != 0) {
		return storage_fail(rc, "reading statistics");
	}
	v = adm_view_stats_begin(x);
	if (v == NULL) {
		return ADM_EXIT_FAILED;
	}
	if (adm_out.json && cap == NULL) {
		/* postgres: no map; its sizes are PostgreSQL's to tell */
		adm_json_key("storage_backend");
		adm_json_cstr("postgres");
		adm_json_key("schema");
		adm_json_cstr(adm_pg_schema(x->o));
		adm_json_key("last_txn_id");
		adm_json_uint(ss.last_txn_id);
		adm_json_key("deletions_pending");
		adm_json_bool(gc);
		adm_json_key("keyspace");
		adm_json_obj();
	} else if (adm_out.json) {
		adm_json_key("storage_backend");
		adm_json_cstr("lmdb");
		adm_json_key("lmdb_map_size");
		adm_json_uint(cs.map_size);
		adm_json_key("lmdb_used_bytes");
		adm_json_uint(ss.used_bytes);
		adm_json_key("lmdb_page_size");
		adm_json_uint(cs.page_size);
		adm_json_key("last_txn_id");
		adm_json_uint(ss.last_txn_id);
		adm_json_key("deletions_pending");
		adm_json_bool(gc);
		adm_json_key("keyspace");
		adm_json_obj();
	} else {
		if (cap != NULL) {
			snprintf(line, sizeof(line), "%s used of a %s map (%.0f%%), page %s",
				adm_fmt_bytes(a, ss.used_bytes), adm_fmt_bytes(b, cs.map_size),
				cs.map_size ? 100.0 * (double)ss.used_bytes / (double)cs.map_size
					    : 0.0,
				adm_fmt_bytes(c, cs.page_size));
		} else {
			snprintf(line, sizeof(line), "postgres, schema %s", adm_pg_schema(x->o));
		}
		adm_view_stat(v, NULL, "storage", line, NULL, false);
		adm_view_stat(v, NULL, "last txn", adm_fmt_count(a, ss.last_txn_id), NULL, false);
		adm_view_stat(v, NULL, "deletions",
			gc ? "pending (echd finishes them)" : "none pending", NULL, false);
	}
	for (unsigned db = 0; db < 256; db++) {
		uint64_t n = 0;
		rc = stream_db_size(x->txn, db, &n);
		if (rc != 0) {
			break;
		}
		if (n == 0) {
			continue;
		}
		if (adm_out.json) {
			snprintf(a, sizeof(a), "db%u", db);
			adm_json_key(a);
			adm_json_uint(n);
		} else {
			snprintf(b, sizeof(b), "keys db%u", db);
			adm_view_stat(v, NULL, b, adm_fmt_count(a, n), NULL, false);
		}
	}
	if (adm_out.json) {
		adm_json_obj_end();
	}
	adm_view_end(v, false);
	return rc != 0 ? storage_fail(rc, "reading key counts") : 0;
}

/* ---- backup ----------------------------------------------------------------- */

int
adm_backup(const char *src, const char *dest)
{
	struct storage *st = NULL, *copy = NULL;
	struct timespec t0, t1;
	char path[4096], sz[32];
	struct stat sb;
	int64_t ms;
	int rc;

	snprintf(path, sizeof(path), "%s/data.mdb", dest);
	if (stat(dest, &sb) == 0) {
		if (!S_ISDIR(sb.st_mode)) {
			return adm_err(ADM_EXIT_USAGE, "%s exists and is not a directory", dest);
		}
		if (access(path, F_OK) == 0) {
			return adm_err(ADM_EXIT_USAGE,
				"%s already holds a data.mdb: choose an empty "
				"directory",
				dest);
		}
	} else if (mkdir(dest, 0750) != 0) {
		return adm_err(ADM_EXIT_FAILED, "cannot create %s: %s", dest, strerror(errno));
	}
	rc = open_dir(src, &st);
	if (rc != 0) {
		return rc;
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	/* LMDB's compacting copy, in its own read transaction: a consistent
	 * point-in-time image, free pages left out, echd never waits on it */
	rc = storage_copy(st, dest);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	storage_close(st);
	if (rc != 0) {
		return adm_err(
			ADM_EXIT_FAILED, "copying %s to %s: %s", src, dest, echd_strerror(rc));
	}
	/* the copy must open as an environment of its own */
	rc = open_dir(dest, &copy);
	if (rc != 0) {
		return adm_err(ADM_EXIT_FAILED, "the copy in %s does not open", dest);
	}
	storage_close(copy);
	if (stat(path, &sb) != 0) {
		return adm_err(ADM_EXIT_FAILED, "%s: %s", path, strerror(errno));
	}
	ms = (int64_t)(t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
	if (adm_out.json) {
		adm_json_obj();
		adm_json_key("source");
		adm_json_cstr(src);
		adm_json_key("dest");
		adm_json_cstr(dest);
		adm_json_key("bytes");
		adm_json_uint((uint64_t)sb.st_size);
		adm_json_key("ms");
		adm_json_int(ms);
		adm_json_obj_end();
		adm_json_done();
	} else {
		printf("backup of %s written to %s (%s, %lld ms)\n", src, dest,
			adm_fmt_bytes(sz, (uint64_t)sb.st_size), (long long)ms);
	}
	return 0;
}

/* The front ends of the registry after the shards: each one's node,
 * address, role, shard and the age of its last heartbeat (one per HA
 * poll). A standby could take any shard: one line says it for all. */
static int
fronts_table(struct storage_ha *ha)
{
	static const struct adm_col cols[] = {{"FRONT END", ADM_FLEX, 8}, {"ADDRESS", 0, 0},
		{"ROLE", 0, 0}, {"SHARD", ADM_RIGHT, 0}, {"HEARTBEAT", ADM_RIGHT, 0}};
	struct adm_table *t;
	int rc = 0;

	if (storage_ha_nfronts(ha) == 0) {
		return 0; /* no front end of this version ran: no registry */
	}
	t = adm_table_create(cols, sizeof(cols) / sizeof(cols[0]));
	if (t == NULL) {
		return adm_err(ADM_EXIT_FAILED, "out of memory");
	}
	for (size_t i = 0; rc == 0 && i < storage_ha_nfronts(ha); i++) {
		struct storage_ha_front f;
		char addr[300], shard[24], age[32];

		if (storage_ha_front(ha, i, &f) != 0) {
			continue;
		}
		snprintf(addr, sizeof(addr), "%s:%d", f.host, f.port);
		snprintf(shard, sizeof(shard), "%d", f.part);
		snprintf(age, sizeof(age), "%.1fs", (double)f.age_ms / 1000.0);
		const char *cells[] = {f.node, addr, f.part >= 0 ? "active" : "standby",
			f.part >= 0 ? shard : "-", age};
		rc = adm_table_row(t, cells) == 0 ? 0 : adm_err(ADM_EXIT_FAILED, "out of memory");
	}
	putchar('\n');
	adm_table_end(t);
	return rc;
}

/* The registry's heartbeat age of the front end node (borrowed) in *age:
 * false when it has no row. */
static bool
front_age(struct storage_ha *ha, const char *node, uint64_t *age)
{
	for (size_t i = 0; i < storage_ha_nfronts(ha); i++) {
		struct storage_ha_front f;

		if (storage_ha_front(ha, i, &f) == 0 && strcmp(f.node, node) == 0) {
			*age = f.age_ms;
			return true;
		}
	}
	return false;
}

/* The registry in --json: every front end with its role and part (null:
 * a standby), or (standbys) only the standbys, as a shard lists them. */
static void
fronts_json(struct storage_ha *ha, bool standbys)
{
	adm_json_arr();
	for (size_t i = 0; ha != NULL && i < storage_ha_nfronts(ha); i++) {
		struct storage_ha_front f;
		char addr[300];

		if (storage_ha_front(ha, i, &f) != 0 || (standbys && f.part >= 0)) {
			continue;
		}
		snprintf(addr, sizeof(addr), "%s:%d", f.host, f.port);
		adm_json_obj();
		adm_json_key("node");
		adm_json_cstr(f.node);
		adm_json_key("address");
		adm_json_cstr(addr);
		if (!standbys) {
			adm_json_key("role");
			adm_json_cstr(f.part >= 0 ? "active" : "standby");
			adm_json_key("shard");
			if (f.part >= 0) {
				adm_json_uint((uint64_t)f.part);
			} else {
				adm_json_null();
			}
		}
		adm_json_key("heartbeat_age_ms");
		adm_json_uint(f.age_ms);
		adm_json_obj_end();
	}
	adm_json_arr_end();
}

/* The servers of the shards that live off the home one (their URLs,
 * password redacted), in the order the shards name them: the table's
 * SERVER column calls server j "pg<j+1>". Returns how many, *out owned
 * (NULL when none). */
static size_t
off_home(struct storage_ha *ha, size_t n, char (**out)[256])
{
	char(*v)[256] = n > 0 ? echd_calloc(n, sizeof(*v)) : NULL;
	size_t nv = 0;

	for (size_t i = 0; v != NULL && i < n; i++) {
		struct storage_ha_part p;
		size_t j = 0;

		if (storage_ha_part(ha, i, &p) != 0 || p.home) {
			continue;
		}
		while (j < nv && strcmp(v[j], p.server) != 0) {
			j++;
		}
		if (j == nv) {
			snprintf(v[nv++], sizeof(v[0]), "%s", p.server);
		}
	}
	if (nv == 0) {
		ECHD_FREE(v);
	}
	*out = v;
	return nv;
}

/* The SERVER column's name for p: home, or pg<j+1> (off_home()). */
static void
server_name(const struct storage_ha_part *p, char (*v)[256], size_t nv, char *buf, size_t len)
{
	size_t j = 0;

	while (j < nv && strcmp(v[j], p->server) != 0) {
		j++;
	}
	if (p->home || j == nv) {
		snprintf(buf, len, "home");
	} else {
		snprintf(buf, len, "pg%zu", j + 1);
	}
}

/* Under the shards, when some live off the home server: each server's
 * name and URL (password redacted). */
static int
servers_table(const struct adm_opts *o, char (*v)[256], size_t nv)
{
	static const struct adm_col cols[] = {{"SERVER", 0, 0}, {"URL", 0, 0}};
	struct adm_table *t = adm_table_create(cols, sizeof(cols) / sizeof(cols[0]));
	char name[24], home[256];
	int rc;

	if (t == NULL) {
		return adm_err(ADM_EXIT_FAILED, "out of memory");
	}
	echd_url_redact(o->storage_url, home, sizeof(home));
	const char *first[] = {"home", home};
	rc = adm_table_row(t, first);
	for (size_t j = 0; rc == 0 && j < nv; j++) {
		snprintf(name, sizeof(name), "pg%zu", j + 1);
		const char *cells[] = {name, v[j]};
		rc = adm_table_row(t, cells);
	}
	putchar('\n');
	adm_table_end(t);
	return rc == 0 ? 0 : adm_err(ADM_EXIT_FAILED, "out of memory");
}

/* Whether the server of some part has standbys of its own (the LAG
 * column). */
static bool
any_replicas(struct storage_ha *ha, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		struct storage_ha_part p;

		if (storage_ha_part(ha, i, &p) == 0 && p.replicas > 0) {
			return true;
		}
	}
	return false;
}

/* A part's server's replication lag for the LAG column: "-" without a
 * standby, "?" when PostgreSQL does not tell this role, else the WAL the
 * furthest one has not replayed yet. */
static const char *
lag_cell(const struct storage_ha_part *p, char *buf)
{
	if (p->replicas <= 0) {
		return "-";
	}
	return p->lag_bytes < 0 ? "?" : adm_fmt_bytes(buf, (uint64_t)p->lag_bytes);
}

/* -1 (not known) as null. */
static void
json_known(int64_t v)
{
	if (v < 0) {
		adm_json_null();
	} else {
		adm_json_uint((uint64_t)v);
	}
}

int
adm_off_shards(struct adm_ctx *x)
{
	/* SERVER only when a shard lives off the home server, LAG only when
	 * some server has standbys */
	static const struct adm_col base[] = {{"SHARD", ADM_RIGHT, 0}, {"SLOTS", 0, 0},
		{"SCHEMA", ADM_FLEX, 8}, {"STATE", 0, 0}, {"GEN", ADM_RIGHT, 0},
		{"NODE", ADM_FLEX, 8}, {"ADDRESS", 0, 0}};
	static const struct adm_col server_col = {"SERVER", 0, 0}, lag_col = {"LAG", ADM_RIGHT, 0};
	struct adm_col cols[sizeof(base) / sizeof(base[0]) + 2];
	struct storage *st = NULL;
	struct storage_ha *ha;
	struct adm_table *t = NULL;
	char(*srv)[256] = NULL;
	size_t n, nsrv = 0, ncols = sizeof(base) / sizeof(base[0]);
	bool lagged;
	int rc = open_pg(x->o, true, &st);

	if (rc != 0) {
		return rc;
	}
	ha = storage_ha(st);
	n = ha != NULL ? storage_ha_nparts(ha) : 0;
	nsrv = ha != NULL ? off_home(ha, n, &srv) : 0;
	lagged = ha != NULL && any_replicas(ha, n);
	memcpy(cols, base, sizeof(base));
	if (nsrv > 0) {
		cols[ncols++] = server_col;
	}
	if (lagged) {
		cols[ncols++] = lag_col;
	}
	if (adm_out.json) {
		adm_json_obj();
		adm_json_key("schema");
		adm_json_cstr(adm_pg_schema(x->o));
		adm_json_key("shards");
		adm_json_arr();
	} else {
		t = adm_table_create(cols, ncols);
		if (t == NULL) {
			storage_close(st);
			echd_free(srv);
			return adm_err(ADM_EXIT_FAILED, "out of memory");
		}
	}
	for (size_t i = 0; i < n && rc == 0; i++) {
		struct storage_ha_part p;
		char ix[24], slots[48], gen[24], addr[300], sname[24];
		uint64_t age;

		if (storage_ha_part(ha, i, &p) != 0) {
			continue;
		}
		/* the address of a front end that died is its last: shown only held */
		snprintf(addr, sizeof(addr), "%s:%d", p.host, p.port);
		if (adm_out.json) {
			adm_json_obj();
			adm_json_key("shard");
			adm_json_uint(i);
			adm_json_key("first_slot");
			adm_json_uint(p.first);
			adm_json_key("last_slot");
			adm_json_uint(p.last);
			adm_json_key("schema");
			adm_json_cstr(p.name);
			adm_json_key("held");
			adm_json_bool(p.held);
			adm_json_key("generation");
			adm_json_uint(p.gen);
			adm_json_key("node");
			if (p.held && p.node[0] != '\0') {
				adm_json_cstr(p.node);
			} else {
				adm_json_null();
			}
			adm_json_key("address");
			if (p.held && p.host[0] != '\0') {
				adm_json_cstr(addr);
			} else {
				adm_json_null();
			}
			/* the holder's last heartbeat in the registry */
			adm_json_key("heartbeat_age_ms");
			if (p.held && front_age(ha, p.node, &age)) {
				adm_json_uint(age);
			} else {
				adm_json_null();
			}
			/* its PostgreSQL, password redacted; home: the store's own */
			adm_json_key("server");
			adm_json_cstr(p.server);
			adm_json_key("home_server");
			adm_json_bool(p.home);
			/* that server's own standbys (PostgreSQL's replication) */
			adm_json_key("replicas");
			adm_json_uint(p.replicas > 0 ? (uint64_t)p.replicas : 0);
			adm_json_key("sync_replicas");
			adm_json_uint(p.sync_replicas > 0 ? (uint64_t)p.sync_replicas : 0);
			adm_json_key("lag_bytes");
			json_known(p.replicas > 0 ? p.lag_bytes : -1);
			adm_json_key("lag_ms");
			json_known(p.replicas > 0 ? p.lag_ms : -1);
			adm_json_key("standbys");
			fronts_json(ha, true);
			adm_json_obj_end();
			continue;
		}
		snprintf(ix, sizeof(ix), "%zu", i);
		snprintf(slots, sizeof(slots), "%u-%u", p.first, p.last);
		snprintf(gen, sizeof(gen), "%llu", (unsigned long long)p.gen);
		server_name(&p, srv, nsrv, sname, sizeof(sname));
		const char *cells[sizeof(cols) / sizeof(cols[0])] = {ix, slots, p.name,
			p.held ? "held" : "free", gen, p.held && p.node[0] != '\0' ? p.node : "-",
			p.held && p.host[0] != '\0' ? addr : "-"};
		size_t c = sizeof(base) / sizeof(base[0]);
		char lag[32];

		if (nsrv > 0) {
			cells[c++] = sname;
		}
		if (lagged) {
			cells[c++] = lag_cell(&p, lag);
		}
		rc = adm_table_row(t, cells) == 0 ? 0 : adm_err(ADM_EXIT_FAILED, "out of memory");
	}
	if (adm_out.json) {
		adm_json_arr_end();
		adm_json_key("front_ends");
		fronts_json(ha, false);
		adm_json_obj_end();
		adm_json_done();
	} else {
		adm_table_end(t);
		if (rc == 0 && nsrv > 0) {
			rc = servers_table(x->o, srv, nsrv);
		}
		if (rc == 0 && ha != NULL) {
			rc = fronts_table(ha);
		}
	}
	echd_free(srv);
	storage_close(st);
	return rc;
}

int
adm_off_shard_url(struct adm_ctx *x, size_t ix, const char *url)
{
	struct storage *st = NULL;
	struct storage_ha *ha;
	struct storage_ha_part p;
	char why[512], shown[256];
	int rc = open_pg(x->o, true, &st);

	if (rc != 0) {
		return rc;
	}
	ha = storage_ha(st);
	if (ha == NULL || ix >= storage_ha_nparts(ha)) {
		rc = adm_err(ADM_EXIT_NOTFOUND, "no shard %zu in the map of '%s' (%zu shards)", ix,
			adm_pg_schema(x->o), ha != NULL ? storage_ha_nparts(ha) : 0);
		goto out;
	}
	(void)storage_ha_part(ha, ix, &p);
	rc = storage_ha_part_move(ha, ix, url, why, sizeof(why));
	if (rc == ECHD_EOFFLINE) {
		rc = adm_err(ADM_EXIT_CONNECT, "shard %zu: %s", ix, why);
		goto out;
	}
	if (rc != 0) {
		rc = adm_err(ADM_EXIT_FAILED, "shard %zu stays on %s: %s", ix, p.server,
			why[0] != '\0' ? why : echd_strerror(rc));
		goto out;
	}
	/* never the password */
	echd_url_redact(url != NULL ? url : x->o->storage_url, shown, sizeof(shown));
	if (adm_out.json) {
		adm_json_obj();
		adm_json_key("shard");
		adm_json_uint(ix);
		adm_json_key("schema");
		adm_json_cstr(p.name);
		adm_json_key("from");
		adm_json_cstr(p.server);
		adm_json_key("server");
		adm_json_cstr(shown);
		adm_json_key("home_server");
		adm_json_bool(url == NULL);
		adm_json_obj_end();
		adm_json_done();
	} else {
		printf("shard %zu (schema %s) now lives on %s%s\n", ix, p.name, shown,
			url == NULL ? " (home)" : "");
	}
out:
	storage_close(st);
	return rc;
}
