/* metrics.c - GET /metrics: the server's state in Prometheus' text
 * exposition format (version 0.0.4).
 *
 * What it owns: which series exist, what they mean, how label values are
 * escaped, and what one scrape may cost the event loop.
 *
 * Cost of one scrape. The server-wide series come from counters kept in
 * memory (commandstats, the commit and flush histograms, storage_stat()).
 * The per-stream series come from metadata rows only: per stream one index
 * row (stream_scan) and its meta row; per group its group row, one PEL row
 * (the lowest id, for the oldest pending age; up to OLDEST_SKIP more past
 * released ones) and group_lag()'s count,
 * which reads one node row per node past the group's cursor
 * (stream-node-max-entries entries each; none when the group is caught up)
 * and the entry rows of the node the cursor is in; per consumer its
 * record. Never more than metrics-max-series series nor keys visited: past
 * that the walk stops, and what it left out is added to
 * echd_metrics_series_dropped_total -- exactly for the stream it stopped in
 * (from its groups' consumer counts), one per stream it did not reach
 * (their groups are not read: that would be the walk the cap prevents), so
 * the counter is a lower bound.
 *
 * The walk is spread over loop turns: TURN_KEYS keys a turn (measured: about
 * 30 us a stream with a group and two consumers, so a few ms a turn), each
 * turn in that turn's transaction, the RESP clients served in between. So a
 * scrape is not one snapshot: each stream's figures are consistent, and a
 * key made during the scrape may or may not be in it.
 *
 * What a user sees follows its ACL: streams whose names its key patterns
 * do not match are left out (not counted as dropped).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "broker.h"
#include "cluster.h"
#include "http.h"

/* The per-stream families, each gathered apart: the format wants every
 * line of a family in one group. */
enum { F_STREAM, F_GPENDING, F_GLAG, F_GOLDEST, F_GDEAD, F_CPENDING, NFAM };

static const struct family {
	const char *name, *type, *help;
} fams[NFAM] = {
	{"echd_stream_entries", "gauge", "Entries in the stream (XLEN)."},
	{"echd_group_pending_entries", "gauge",
		"Entries delivered to the group and not acknowledged (XPENDING)."},
	{"echd_group_lag_entries", "gauge",
		"Entries of the stream the group has not been given yet (XINFO GROUPS lag)."},
	{"echd_group_oldest_pending_age_seconds", "gauge",
		"Seconds since the delivery of the group's lowest pending id that has an owner (its "
		"XPENDING idle time; released entries, XNACK's, have none); 0 when none is pending."},
	{"echd_group_dead_lettered_total", "counter",
		"Entries the group's policy dead-lettered (XINFO GROUPS dead-lettered); 0 without one."},
	{"echd_consumer_pending_entries", "gauge",
		"Entries delivered to the consumer and not acknowledged."},
};

/* Keys one loop turn of a scrape visits: the walk goes on in the next turn,
 * so the clients of RESP are served in between. */
#define TURN_KEYS 128

/* Series of one group besides its consumers': pending, oldest, dead, lag */
#define GROUP_SERIES 4

/* Released pending rows the oldest-age series looks past for an owned one */
#define OLDEST_SKIP 64

/* Walks a scrape begins again when the storage was fetching rows it read
 * (storage-cache-size) before it answers 503 */
#define SCRAPE_RESTARTS_MAX 200

/* One scrape in progress: it walks TURN_KEYS keys a loop turn and answers
 * when done. On srv->scrapes until then. */
struct brk_scrape {
	struct brk_server *srv;
	struct evhttp_request *req;  /* answered by finish() */
	struct event *next_turn;
	char *user_name;             /* owned: looked up again each turn (ACL DELUSER) */
	size_t user_len;
	const struct brk_user *user; /* this turn's */
	struct storage_txn *t;       /* this turn's batch */
	uint64_t now_ms;
	uint64_t t0_us, busy_us;     /* when it began; time spent in its turns */
	unsigned turns;
	unsigned db;
	bool db_started;             /* db_size and cursor are db's */
	uint64_t db_size, cursor;
	struct evbuffer *fam[NFAM];
	long long budget;     /* series left under metrics-max-series */
	long long visits;     /* keys left to visit */
	uint64_t dropped;     /* series left out by this scrape */
	uint64_t visited_db;  /* keys of db the walk reached */
	bool full;            /* the cap was reached: the walk stops */
	int rc;
	unsigned restarts;    /* walks begun again after rows the storage was fetching */
	/* the stream and group being written */
	const struct st_buf *stream;
	const struct st_buf *group;
	uint64_t consumers_left;
	struct brk_scrape *next;
};
/* ---- label values ------------------------------------------------------- */

size_t
brk_http_utf8_len(const unsigned char *p, size_t n)
{
	size_t len;
	uint32_t cp;

	if (p[0] < 0x80) {
		return 1;
	} else if ((p[0] & 0xe0) == 0xc0) {
		len = 2;
		cp = p[0] & 0x1f;
	} else if ((p[0] & 0xf0) == 0xe0) {
		len = 3;
		cp = p[0] & 0x0f;
	} else if ((p[0] & 0xf8) == 0xf0) {
		len = 4;
		cp = p[0] & 0x07;
	} else {
		return 0;
	}
	if (len > n) {
		return 0;
	}
	for (size_t i = 1; i < len; i++) {
		if ((p[i] & 0xc0) != 0x80) {
			return 0;
		}
		cp = (cp << 6) | (p[i] & 0x3f);
	}
	/* no overlong forms, surrogates or values past U+10FFFF */
	if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
		(cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff) {
		return 0;
	}
	return len;
}

/* Writes a label value so that two names never share one: the value is
 * the name itself, except that a backslash stands as two and a byte that
 * is not UTF-8 or a control character other than newline as the four
 * characters \xHH (lower-case hex). Decoding \\ and \xHH gives the name
 * back byte for byte, and a name's own "\xff" (written \\xff) cannot be
 * taken for the byte 0xff. That value is then escaped as the format says
 * (backslash, double quote, newline), so each backslash of it is doubled
 * once more in the text. docs/operations.md describes it. */
static void
put_label(struct evbuffer *b, const void *data, size_t len)
{
	const unsigned char *p = data;
	size_t i = 0, run = 0;

	while (i < len) {
		size_t n = brk_http_utf8_len(p + i, len - i);
		if (n > 1 || (n == 1 && p[i] >= 0x20 && p[i] != 0x7f && p[i] != '\\' && p[i] != '"')) {
			i += n;
			continue;
		}
		evbuffer_add(b, p + run, i - run);
		if (n == 1 && p[i] == '\\') {
			evbuffer_add(b, "\\\\\\\\", 4); /* the value's \\, escaped */
		} else if (n == 1 && p[i] == '"') {
			evbuffer_add(b, "\\\"", 2);
		} else if (n == 1 && p[i] == '\n') {
			evbuffer_add(b, "\\n", 2);
		} else {
			evbuffer_add_printf(b, "\\\\x%02x", p[i]);
		}
		i++;
		run = i;
	}
	evbuffer_add(b, p + run, len - run);
}

/* Starts a per-stream line: name{db="..",stream=".."[,group=".."] and the
 * closing brace, except for the consumer family that adds its label. */
static void
line_start(struct brk_scrape *s, int f, bool group)
{
	struct evbuffer *b = s->fam[f];

	evbuffer_add_printf(b, "%s{db=\"%u\",stream=\"", fams[f].name, s->db);
	put_label(b, s->stream->data, s->stream->len);
	if (group) {
		evbuffer_add(b, "\",group=\"", 9);
		put_label(b, s->group->data, s->group->len);
	}
	evbuffer_add(b, f == F_CPENDING ? "\"" : "\"}", f == F_CPENDING ? 1 : 2);
}

/* ---- the walk ----------------------------------------------------------- */

static int
consumer_cb(const struct st_buf *name, const struct consumer_meta *c, void *ud)
{
	struct brk_scrape *s = ud;
	struct evbuffer *b = s->fam[F_CPENDING];

	if (s->budget < 1) {
		s->full = true;
		s->dropped += s->consumers_left;
		return 1;
	}
	s->budget--;
	s->consumers_left--;
	line_start(s, F_CPENDING, true);
	evbuffer_add(b, ",consumer=\"", 11);
	put_label(b, name->data, name->len);
	evbuffer_add_printf(b, "\"} %llu\n", (unsigned long long)c->pending);
	return 0;
}

static int
group_cb(const struct st_buf *name, const struct group_meta *g, void *ud)
{
	struct brk_scrape *s = ud;
	double oldest = 0;
	int rc;

	if (s->full || s->budget < GROUP_SERIES) {
		s->full = true;
		s->dropped += GROUP_SERIES + g->consumers;
		return 0; /* the stream's other groups are counted from their rows */
	}
	s->budget -= GROUP_SERIES;
	s->group = name;
	if (g->pending > 0) {
		struct stream_id lo = {0, 0}, hi = {UINT64_MAX, UINT64_MAX};
		struct pel_iter *it;
		struct pel_row r;
		rc = pel_iter_create(s->t, g, 0, &lo, &hi, &it);
		if (rc != 0) {
			return rc;
		}
		/* released rows (no owner, no delivery time) are skipped, a
		 * bounded number of them: past that the age reads 0 */
		for (int n = 0; (rc = pel_iter_next(it, &r)) == 0 && r.cid == PEL_UNOWNED; n++) {
			if (n == OLDEST_SKIP) {
				rc = ECHD_ENOTFOUND;
				break;
			}
		}
		pel_iter_destroy(it);
		if (rc == 0 && s->now_ms > r.delivery_time) {
			oldest = (double)(s->now_ms - r.delivery_time) / 1000.0;
		} else if (rc != 0 && rc != ECHD_ENOTFOUND) {
			return rc;
		}
	}
	line_start(s, F_GPENDING, true);
	evbuffer_add_printf(s->fam[F_GPENDING], " %llu\n", (unsigned long long)g->pending);
	line_start(s, F_GOLDEST, true);
	evbuffer_add_printf(s->fam[F_GOLDEST], " %.3f\n", oldest);
	line_start(s, F_GDEAD, true);
	evbuffer_add_printf(s->fam[F_GDEAD], " %llu\n", (unsigned long long)g->policy.dead_lettered);
	s->consumers_left = g->consumers;
	return consumer_each(s->t, g, consumer_cb, s) < 0 ? -1 : 0;
}

/* group_cb() with the stream's meta for group_lag(). */
struct group_walk {
	struct brk_scrape *s;
	const struct stream_meta *m;
};

static int
group_lag_cb(const struct st_buf *name, const struct group_meta *g, void *ud)
{
	struct group_walk *gw = ud;
	struct brk_scrape *s = gw->s;
	bool was_full = s->full || s->budget < GROUP_SERIES;
	int64_t lag;
	int rc;

	rc = group_cb(name, g, s);
	if (rc != 0 || was_full) {
		return rc;
	}
	rc = group_lag(s->t, gw->m, g, &lag);
	if (rc != 0) {
		return rc;
	}
	line_start(s, F_GLAG, true);
	evbuffer_add_printf(s->fam[F_GLAG], " %lld\n", (long long)lag);
	return 0;
}

static int
stream_cb(const struct st_buf *name, void *ud)
{
	struct brk_scrape *s = ud;
	struct stream_meta m;
	struct group_walk gw = {s, &m};
	int rc;

	if (s->visits < 1 || s->budget < 1) {
		s->full = true;
		return 1;
	}
	s->visits--;
	s->visited_db++;
	if (!brk_acl_key_allowed(s->user, name->data, name->len)) {
		return 0;
	}
	rc = stream_lookup(s->t, s->db, name, &m);
	if (rc == ECHD_ENOTFOUND) {
		return 0;
	}
	if (rc != 0) {
		s->rc = rc;
		return 1;
	}
	s->budget--;
	s->stream = name;
	line_start(s, F_STREAM, false);
	evbuffer_add_printf(s->fam[F_STREAM], " %llu\n", (unsigned long long)m.length);
	if (m.groups > 0) {
		rc = group_each(s->t, &m, group_lag_cb, &gw);
		if (rc != 0) {
			s->rc = rc;
			return 1;
		}
	}
	return s->full ? 1 : 0;
}

/* One turn of the walk over every database's streams, within the cap:
 * 0 when the walk is over, 1 when it goes on next turn, or an error. */
static int
walk_turn(struct brk_scrape *s)
{
	while ((int)s->db < s->srv->cfg.databases) {
		int rc;

		if (!s->db_started) {
			s->db_size = 0;
			rc = stream_db_size(s->t, s->db, &s->db_size);
			if (rc != 0 && rc != ECHD_ENOTFOUND) {
				return rc;
			}
			if (s->db_size == 0 || s->full) {
				s->dropped += s->db_size; /* a stream not reached counts as one */
				s->db++;
				continue;
			}
			s->db_started = true;
			s->cursor = 0;
			s->visited_db = 0;
		}
		rc = stream_scan(s->t, s->db, s->now_ms, &s->cursor, TURN_KEYS, stream_cb, s);
		if (s->rc != 0) {
			return s->rc;
		}
		if (rc < 0) {
			return rc;
		}
		if (s->full || s->cursor == 0) {
			if (s->full && s->db_size > s->visited_db) {
				s->dropped += s->db_size - s->visited_db;
			}
			s->db_started = false;
			s->db++;
			continue;
		}
		return 1;
	}
	return 0;
}

/* ---- the server-wide series --------------------------------------------- */

static void
header(struct evbuffer *b, const char *name, const char *type, const char *help)
{
	evbuffer_add_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void
gauge(struct evbuffer *b, const char *name, const char *help, unsigned long long v)
{
	header(b, name, "gauge", help);
	evbuffer_add_printf(b, "%s %llu\n", name, v);
}

static void
counter(struct evbuffer *b, const char *name, const char *help, unsigned long long v)
{
	header(b, name, "counter", help);
	evbuffer_add_printf(b, "%s %llu\n", name, v);
}

/* Fixed bucket edges, so that every scrape has the same series. */
static const struct {
	const char *le;
	uint64_t ns;
} edges[] = {
	{"0.00005", 50000}, {"0.0001", 100000}, {"0.00025", 250000}, {"0.0005", 500000},
	{"0.001", 1000000}, {"0.0025", 2500000}, {"0.005", 5000000}, {"0.01", 10000000},
	{"0.025", 25000000}, {"0.05", 50000000}, {"0.1", 100000000}, {"0.25", 250000000},
	{"0.5", 500000000}, {"1", 1000000000},
};

static void
histogram(struct evbuffer *b, const char *name, const char *help, const struct brk_hist *h)
{
	uint64_t total = h ? brk_hist_total(h) : 0;

	header(b, name, "histogram", help);
	for (size_t i = 0; i < sizeof(edges) / sizeof(edges[0]); i++) {
		evbuffer_add_printf(b, "%s_bucket{le=\"%s\"} %llu\n", name, edges[i].le,
			(unsigned long long)(h ? brk_hist_count_le(h, edges[i].ns) : 0));
	}
	evbuffer_add_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)total);
	evbuffer_add_printf(b, "%s_sum %.9f\n", name, h ? (double)brk_hist_sum(h) / 1e9 : 0.0);
	evbuffer_add_printf(b, "%s_count %llu\n", name, (unsigned long long)total);
}

static void
commands(struct brk_server *srv, struct evbuffer *b)
{
	size_t n = brk_cmd_count();

	header(b, "echd_commands_total", "counter",
		"Commands run, by command (a container's by subcommand, as INFO commandstats).");
	for (size_t i = 0; i < n + (size_t)srv->nsubstats; i++) {
		const struct brk_cmdstat *st = i < n ? &srv->cmdstats[i] : &srv->substats[i - n].st;
		const char *name = i < n ? brk_cmd_at(i)->name : srv->substats[i - n].name;
		if (st->calls == 0) {
			continue;
		}
		evbuffer_add(b, "echd_commands_total{cmd=\"", 25);
		put_label(b, name, strlen(name));
		evbuffer_add_printf(b, "\"} %llu\n", (unsigned long long)st->calls);
	}
}

static void
scrape_free(struct brk_scrape *s)
{
	struct brk_scrape **pp = &s->srv->scrapes;

	while (*pp != NULL && *pp != s) {
		pp = &(*pp)->next;
	}
	if (*pp == s) {
		*pp = s->next;
	}
	for (int f = 0; f < NFAM; f++) {
		if (s->fam[f] != NULL) {
			evbuffer_free(s->fam[f]);
		}
	}
	if (s->next_turn != NULL) {
		event_free(s->next_turn);
	}
	echd_free(s->user_name);
	echd_free(s);
}

/* Answers a failed scrape. */
static void
fail(struct brk_scrape *s, int code, const char *why)
{
	struct evbuffer *b = evbuffer_new();

	if (b != NULL) {
		evbuffer_add_printf(b, "%s\n", why);
	}
	brk_http_reply(s->req, code, "text/plain; charset=utf-8", b);
	if (b != NULL) {
		evbuffer_free(b);
	}
	scrape_free(s);
}

/* cluster-enabled yes: how many shards, and the one this front end serves
 * as an info series (its index and slots in labels, joined on instance with
 * echd_ha_active and the rest); a front end serving none (a standby, or one
 * that cannot reach the store) has no sample of it. */
static void
cluster_series(struct brk_server *srv, struct evbuffer *out)
{
	const struct brk_cluster *cl = srv->cluster;

	if (cl == NULL) {
		return;
	}
	gauge(out, "echd_cluster_shards", "Shards the 16384 slots are cut into (cluster-shards).",
		(unsigned long long)cl->nshards);
	header(out, "echd_cluster_shard_info", "gauge",
		"Always 1: the shard this front end serves, its index and slots in labels; no "
		"sample while it serves none (a standby).");
	for (size_t i = 0; brk_ha_serving(srv) && i < cl->nshards; i++) {
		const struct brk_cluster_node *p = brk_cluster_primary(&cl->shards[i]);

		if (p != NULL && p->myself) {
			evbuffer_add_printf(out,
				"echd_cluster_shard_info{shard=\"%zu\",first_slot=\"%u\","
				"last_slot=\"%u\"} 1\n",
				i, cl->shards[i].first, cl->shards[i].last);
		}
	}
}

/* Answers a finished scrape: the server-wide series, then the walk's. */
static void
finish(struct brk_scrape *s)
{
	struct brk_server *srv = s->srv;
	struct evbuffer *out = evbuffer_new();
	struct storage_stat st;

	if (out == NULL) {
		fail(s, 503, "out of memory");
		return;
	}
	srv->metrics_dropped += s->dropped;
	header(out, "echd_build_info", "gauge", "Always 1; the version in a label.");
	evbuffer_add_printf(out, "echd_build_info{version=\"%s\"} 1\n", ECHD_VERSION);
	gauge(out, "echd_uptime_seconds", "Seconds since echd started.",
		(unsigned long long)((brk_now_ms() - srv->stats.start_ms) / 1000));
	gauge(out, "echd_connected_clients", "RESP client connections.",
		(unsigned long long)srv->nconns);
	gauge(out, "echd_blocked_clients", "Clients blocked in XREAD, XREADGROUP or WAIT.",
		(unsigned long long)srv->blocked_clients);
	gauge(out, "echd_ha_active",
		"1 on the active front end (always without a shared store), 0 on a standby or one "
		"that cannot reach the store: a standby's scrape has the server-wide series only.",
		brk_ha_serving(srv) ? 1 : 0);
	cluster_series(srv, out);
	commands(srv, out);
	counter(out, "echd_command_errors_total", "Error replies (INFO total_error_replies).",
		(unsigned long long)srv->stats.total_error_replies);
	histogram(out, "echd_commit_duration_seconds",
		"Duration of the commits of batches, their data flush included.",
		srv->event_hist[BRK_LAT_COMMIT]);
	histogram(out, "echd_flush_duration_seconds",
		"Duration of the flushes that make commits durable.", srv->event_hist[BRK_LAT_FLUSH]);
	if (storage_stat(srv->st, &st) == 0) {
		gauge(out, "echd_storage_used_bytes", "Bytes of the storage's pages in use.",
			(unsigned long long)st.used_bytes);
		struct storage_capacity *cap = storage_capacity(srv->st);
		struct storage_capacity_stat cs;

		if (cap != NULL && storage_capacity_stat(cap, &cs) == 0) {
			gauge(out, "echd_storage_map_bytes", "Bytes of the storage's map (its size now).",
				(unsigned long long)cs.map_size);
		}
	}
	for (int f = 0; f < NFAM; f++) {
		header(out, fams[f].name, fams[f].type, fams[f].help);
		evbuffer_add_buffer(out, s->fam[f]);
	}
	gauge(out, "echd_metrics_max_series", "The per-stream series cap (metrics-max-series).",
		(unsigned long long)srv->cfg.metrics_max_series);
	counter(out, "echd_metrics_series_dropped_total",
		"Per-stream series scrapes left out at the cap (at least: a stream not reached counts "
		"one).",
		(unsigned long long)srv->metrics_dropped);
	header(out, "echd_metrics_scrape_duration_seconds", "gauge",
		"Time this scrape took, from its request to its answer (its walk took turns with the "
		"other clients).");
	evbuffer_add_printf(out, "echd_metrics_scrape_duration_seconds %.6f\n",
		(double)(brk_now_us() - s->t0_us) / 1e6);
	header(out, "echd_metrics_scrape_busy_seconds", "gauge",
		"Time the loop spent on this scrape's walk, over its turns.");
	evbuffer_add_printf(out, "echd_metrics_scrape_busy_seconds %.6f\n",
		(double)s->busy_us / 1e6);
	header(out, "echd_metrics_scrape_turns", "gauge", "Loop turns this scrape's walk took.");
	evbuffer_add_printf(out, "echd_metrics_scrape_turns %u\n", s->turns);
	brk_http_reply(s->req, 200, "text/plain; version=0.0.4; charset=utf-8", out);
	evbuffer_free(out);
	scrape_free(s);
}

/* Runs one turn of s; answers it when the walk is over. */
static void
turn(struct brk_scrape *s)
{
	struct brk_server *srv = s->srv;
	uint64_t t0 = brk_now_us();
	int rc = 0;

	s->turns++;
	s->now_ms = brk_now_ms();
	s->user = brk_acl_find(srv, s->user_name, s->user_len);
	if (s->user == NULL || !brk_user_enabled(s->user)) {
		fail(s, 503, "the user was removed or disabled during the scrape");
		return;
	}
	s->t = brk_view_begin(srv, &rc);
	if (s->t != NULL) {
		rc = walk_turn(s);
	} else if (rc == ECHD_ESTANDBY || rc == ECHD_EOFFLINE) {
		/* not the active front end: its store is not its to show, but
		 * Prometheus should see it up, and which it is (echd_ha_active) */
		for (int f = 0; f < NFAM; f++) {
			evbuffer_drain(s->fam[f], evbuffer_get_length(s->fam[f]));
		}
		rc = 0;
	}
	brk_view_end(srv, s->t);
	s->t = NULL;
	s->busy_us += brk_now_us() - t0;
	if (rc == ECHD_EWOULDFETCH && s->restarts++ < SCRAPE_RESTARTS_MAX) {
		/* rows not in memory yet (storage-cache-size): what this turn wrote
		 * may be half a stream's; the walk begins again once they are in,
		 * and finds more of them each time */
		struct timeval later = {0, 5000};

		for (int f = 0; f < NFAM; f++) {
			evbuffer_drain(s->fam[f], evbuffer_get_length(s->fam[f]));
		}
		s->db = 0;
		s->db_started = false;
		s->budget = srv->cfg.metrics_max_series;
		s->visits = srv->cfg.metrics_max_series;
		s->dropped = 0;
		s->full = false;
		s->rc = 0;
		event_add(s->next_turn, &later);
		return;
	}
	if (rc < 0) {
		char err[256], msg[300];
		brk_error_text(srv, rc, err, sizeof(err));
		snprintf(msg, sizeof(msg), "cannot read the streams: %s", err);
		fail(s, 503, msg);
	} else if (rc == 0) {
		finish(s);
	} else {
		struct timeval now = {0, 0};
		event_add(s->next_turn, &now); /* the next loop turn, after this one's commit */
	}
}

static void
next_turn_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	turn(arg);
}

int
brk_http_metrics(struct brk_http_req *r, struct evbuffer *out, const char **ctype)
{
	struct brk_server *srv = r->srv;
	const char *name = brk_user_name(r->user);
	struct brk_scrape *s = echd_calloc(1, sizeof(*s));

	if (s == NULL) {
		evbuffer_add_printf(out, "out of memory\n");
		return 503;
	}
	s->srv = srv;
	s->req = r->req;
	s->t0_us = brk_now_us();
	s->budget = srv->cfg.metrics_max_series;
	s->visits = srv->cfg.metrics_max_series;
	s->user_len = strlen(name);
	s->user_name = echd_strndup(name, s->user_len);
	s->next_turn = evtimer_new(srv->base, next_turn_cb, s);
	for (int f = 0; f < NFAM; f++) {
		s->fam[f] = evbuffer_new();
	}
	s->next = srv->scrapes;
	srv->scrapes = s;
	for (int f = 0; f < NFAM; f++) {
		if (s->fam[f] == NULL || s->user_name == NULL || s->next_turn == NULL) {
			s->req = NULL;
			scrape_free(s);
			evbuffer_add_printf(out, "out of memory\n");
			*ctype = "text/plain; charset=utf-8";
			return 503;
		}
	}
	turn(s); /* a small keyspace is answered at once */
	return BRK_HTTP_DEFERRED;
}

void
brk_http_metrics_cancel(struct brk_server *srv)
{
	while (srv->scrapes != NULL) {
		fail(srv->scrapes, 503, "echd is shutting down");
	}
}
