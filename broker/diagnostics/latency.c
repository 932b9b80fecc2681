/* latency.c - LATENCY and INFO latencystats: how long commands and commits take.
 *
 * Two things, as in Redis:
 * - a histogram per command (and per container subcommand) of every run,
 *   while latency-tracking is on: LATENCY HISTOGRAM and INFO latencystats;
 * - the latency monitor: for each event, the spikes of at least
 *   latency-monitor-threshold ms (0, the default, turns it off), one per
 *   second at most, the last LAT_SAMPLES of them: LATENCY LATEST, HISTORY,
 *   GRAPH, DOCTOR, RESET.
 * A command's time is its own run, not its wait for the commit, which the
 * whole batch shares; that wait shows as the "commit" and "flush" events.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "broker.h"

#define LAT_SAMPLES 160 /* spikes kept per event (Redis' LATENCY_TS_LEN) */

struct lat_sample {
	long long time; /* unix seconds; 0: unused slot */
	uint64_t ms;
};

struct brk_latseries {
	struct lat_sample s[LAT_SAMPLES];
	int next; /* the slot the next second's spike goes to */
	uint64_t max;
};

static const char *const event_names[BRK_LAT_NEVENTS] = {
	[BRK_LAT_COMMAND] = "command",
	[BRK_LAT_FAST_COMMAND] = "fast-command",
	[BRK_LAT_COMMIT] = "commit",
	[BRK_LAT_FLUSH] = "flush",
	[BRK_LAT_EXPIRE] = "expire-cycle",
};

void
brk_latency_sample(struct brk_server *srv, int event, uint64_t ms)
{
	struct brk_latseries *ts;
	long long now;
	int prev;

	if (srv->cfg.latency_monitor_threshold <= 0 ||
		ms < (uint64_t)srv->cfg.latency_monitor_threshold) {
		return;
	}
	ts = srv->latency[event];
	if (ts == NULL) {
		ts = srv->latency[event] = echd_calloc(1, sizeof(*ts));
		if (ts == NULL) {
			return; /* a lost sample is the lesser harm */
		}
	}
	now = (long long)time(NULL);
	if (ms > ts->max) {
		ts->max = ms;
	}
	/* one sample per second: a second spike in it keeps the worse */
	prev = (ts->next + LAT_SAMPLES - 1) % LAT_SAMPLES;
	if (ts->s[prev].time == now) {
		if (ms > ts->s[prev].ms) {
			ts->s[prev].ms = ms;
		}
		return;
	}
	ts->s[ts->next].time = now;
	ts->s[ts->next].ms = ms;
	ts->next = (ts->next + 1) % LAT_SAMPLES;
}

/* Records ns in *h, made on first use; nothing when tracking is off. */
static void
hist_record(struct brk_server *srv, struct brk_hist **h, uint64_t ns)
{
	if (!srv->cfg.latency_tracking) {
		return;
	}
	if (*h == NULL) {
		*h = brk_hist_new(); /* NULL: not tracked until memory comes back */
	}
	if (*h != NULL) {
		brk_hist_record(*h, ns);
	}
}

void
brk_latency_storage(struct brk_server *srv, int event, uint64_t us)
{
	hist_record(srv, &srv->event_hist[event], us * 1000);
	brk_latency_sample(srv, event, us / 1000);
}

void
brk_latency_command(struct brk_server *srv, struct brk_cmdstat *stat, const struct brk_cmd *cmd,
	uint64_t duration_us)
{
	hist_record(srv, &stat->hist, duration_us * 1000);
	brk_latency_sample(srv, (cmd->flags & BRK_CMD_FAST) ? BRK_LAT_FAST_COMMAND : BRK_LAT_COMMAND,
		duration_us / 1000);
}

void
brk_latency_free(struct brk_server *srv)
{
	for (int i = 0; i < BRK_LAT_NEVENTS; i++) {
		ECHD_FREE(srv->latency[i]);
	}
}

/* ------------------------------------------------------------------------
 * Histograms
 * ---------------------------------------------------------------------- */

/* The i-th command statistic and its name: the table's, then the subcommands'. */
static struct brk_cmdstat *
stat_at(struct brk_server *srv, size_t i, const char **name)
{
	size_t ncmd = brk_cmd_count();

	if (i < ncmd) {
		*name = brk_cmd_at(i)->name;
		return &srv->cmdstats[i];
	}
	if (i - ncmd < (size_t)srv->nsubstats) {
		*name = srv->substats[i - ncmd].name;
		return &srv->substats[i - ncmd].st;
	}
	return NULL;
}

void
brk_latency_reset_hists(struct brk_server *srv)
{
	const char *name;
	struct brk_cmdstat *st;

	for (size_t i = 0; srv->cmdstats != NULL && (st = stat_at(srv, i, &name)) != NULL; i++) {
		brk_hist_free(st->hist);
		st->hist = NULL;
	}
	for (int ev = 0; ev < BRK_LAT_NEVENTS; ev++) {
		brk_hist_free(srv->event_hist[ev]);
		srv->event_hist[ev] = NULL;
	}
}

/* "99.900000" as Redis prints a percentile: "99.9". */
static void
format_pct(double p, char *buf, size_t len)
{
	size_t n = (size_t)snprintf(buf, len, "%f", p);

	if (n >= len || strchr(buf, '.') == NULL) {
		return;
	}
	while (n > 0 && buf[n - 1] == '0') {
		buf[--n] = '\0';
	}
	if (n > 0 && buf[n - 1] == '.') {
		buf[--n] = '\0';
	}
}

void
brk_latency_format_pcts(const struct brk_config *cfg, char *buf, size_t len)
{
	size_t n = 0;

	buf[0] = '\0';
	for (int i = 0; i < cfg->nlatency_pcts && n < len; i++) {
		char one[64];
		format_pct(cfg->latency_pcts[i], one, sizeof(one));
		n += (size_t)snprintf(buf + n, len - n, "%s%s", i ? " " : "", one);
	}
}

const char *
brk_latency_parse_pcts(struct brk_config *cfg, int argc, char **argv)
{
	double v[BRK_MAX_LATENCY_PCTS];

	if (argc > BRK_MAX_LATENCY_PCTS) {
		return "at most 16 latency-tracking-info-percentiles parameters";
	}
	for (int i = 0; i < argc; i++) {
		char *end;
		v[i] = strtod(argv[i], &end);
		if (end == argv[i] || *end != '\0' || v[i] != v[i]) {
			return "Invalid latency-tracking-info-percentiles parameters";
		}
		if (v[i] < 0.0 || v[i] > 100.0) {
			return "latency-tracking-info-percentiles parameters should sit between "
			       "[0.0,100.0]";
		}
	}
	memcpy(cfg->latency_pcts, v, (size_t)argc * sizeof(v[0]));
	cfg->nlatency_pcts = argc;
	return NULL;
}

/* "p50=1.003,p99=2.007,p99.9=2.007": h's percentiles in microseconds. */
static void
pcts_line(struct brk_server *srv, struct resp_buf *b, const struct brk_hist *h)
{
	for (int j = 0; j < srv->cfg.nlatency_pcts; j++) {
		char p[64];
		double pct = srv->cfg.latency_pcts[j];
		format_pct(pct, p, sizeof(p));
		resp_buf_printf(b, "%sp%s=%.3f", j ? "," : "", p,
			(double)brk_hist_percentile(h, pct) / 1000.0);
	}
	resp_buf_printf(b, "\r\n");
}

void
brk_latency_info(struct brk_server *srv, struct resp_buf *b)
{
	const char *name;
	struct brk_cmdstat *st;

	if (!srv->cfg.latency_tracking) {
		return;
	}
	for (size_t i = 0; (st = stat_at(srv, i, &name)) != NULL; i++) {
		if (st->hist != NULL) {
			resp_buf_printf(b, "latency_percentiles_usec_%s:", name);
			pcts_line(srv, b, st->hist);
		}
	}
}

void
brk_latency_storage_info(struct brk_server *srv, struct resp_buf *b)
{
	static const int shown[] = {BRK_LAT_COMMIT, BRK_LAT_FLUSH};

	if (!srv->cfg.latency_tracking) {
		return;
	}
	for (size_t i = 0; i < sizeof(shown) / sizeof(shown[0]); i++) {
		const struct brk_hist *h = srv->event_hist[shown[i]];
		if (h != NULL) {
			resp_buf_printf(b, "%s_latency_percentiles_usec:", event_names[shown[i]]);
			pcts_line(srv, b, h);
		}
	}
}

static void
reply_cdf(struct resp_writer *w, const char *name, const struct brk_hist *h)
{
	uint64_t usec[BRK_HIST_LEVELS], count[BRK_HIST_LEVELS];
	int n = brk_hist_cdf(h, usec, count);

	resp_add_bulk_cstr(w, name);
	resp_add_map(w, 2);
	resp_add_bulk_cstr(w, "calls");
	resp_add_int(w, (long long)brk_hist_total(h));
	resp_add_bulk_cstr(w, "histogram_usec");
	resp_add_map(w, (size_t)n);
	for (int i = 0; i < n; i++) {
		resp_add_int(w, (long long)usec[i]);
		resp_add_int(w, (long long)count[i]);
	}
}

/* Whether statistic name belongs to the command a client named: the
 * command itself, a container's subcommands under its name, or one
 * subcommand as "container|sub". */
static bool
names_match(const char *name, const struct resp_arg *a)
{
	size_t n = strlen(name);

	if (a->len == n && strncasecmp(name, a->p, n) == 0) {
		return true;
	}
	return n > a->len && name[a->len] == '|' && strncasecmp(name, a->p, a->len) == 0 &&
		memchr(a->p, '|', a->len) == NULL;
}

/* LATENCY HISTOGRAM [command ...]: every command with a histogram, or the
 * ones named (unknown names are skipped; a container brings its
 * subcommands), as a map of name to calls and the cumulative buckets. */
static void
histogram_reply(struct brk_ctx *x)
{
	struct brk_server *srv = x->srv;
	const char *name;
	struct brk_cmdstat *st;
	size_t n = 0;

	for (int pass = 0; pass < 2; pass++) {
		if (pass == 1) {
			resp_add_map(x->w, n);
		}
		for (int a = 2; a < x->argc || (a == 2 && x->argc == 2); a++) {
			for (size_t i = 0; (st = stat_at(srv, i, &name)) != NULL; i++) {
				if (st->hist == NULL ||
					(x->argc > 2 && !names_match(name, &x->argv[a]))) {
					continue;
				}
				if (pass == 0) {
					n++;
				} else {
					reply_cdf(x->w, name, st->hist);
				}
			}
		}
	}
}

/* ------------------------------------------------------------------------
 * The monitor's replies
 * ---------------------------------------------------------------------- */

static int
event_find(const struct resp_arg *a)
{
	for (int i = 0; i < BRK_LAT_NEVENTS; i++) {
		if (strlen(event_names[i]) == a->len && memcmp(event_names[i], a->p, a->len) == 0) {
			return i;
		}
	}
	return -1;
}

static const struct lat_sample *
latest(const struct brk_latseries *ts)
{
	return &ts->s[(ts->next + LAT_SAMPLES - 1) % LAT_SAMPLES];
}

/* The series' samples, oldest first, and their statistics. */
struct lat_view {
	const struct lat_sample *s[LAT_SAMPLES];
	int n;
	uint64_t min, max, sum;
};

static void
view_of(const struct brk_latseries *ts, struct lat_view *v)
{
	memset(v, 0, sizeof(*v));
	for (int j = 0; j < LAT_SAMPLES; j++) {
		const struct lat_sample *s = &ts->s[(ts->next + j) % LAT_SAMPLES];
		if (s->time == 0) {
			continue;
		}
		v->s[v->n++] = s;
		v->sum += s->ms;
		if (v->n == 1 || s->ms < v->min) {
			v->min = s->ms;
		}
		if (s->ms > v->max) {
			v->max = s->ms;
		}
	}
}

/* LATENCY GRAPH: one line per spike, oldest first, a bar scaled to the worst. */
static void
graph_reply(struct brk_ctx *x, int ev)
{
	const struct brk_latseries *ts = x->srv->latency[ev];
	struct resp_buf b;
	struct lat_view v;
	long long now = (long long)time(NULL);

	view_of(ts, &v);
	resp_buf_init(&b);
	resp_buf_printf(&b, "%s - high %llu ms, low %llu ms (all time high %llu ms)\n",
		event_names[ev], (unsigned long long)v.max, (unsigned long long)v.min,
		(unsigned long long)ts->max);
	resp_buf_printf(&b, "%.*s\n", 72,
		"------------------------------------------------------------------------");
	for (int i = 0; i < v.n; i++) {
		int width = v.max ? (int)((v.s[i]->ms * 50 + v.max - 1) / v.max) : 0;
		resp_buf_printf(&b, "%8llds ago %8llu ms  %.*s\n", now - v.s[i]->time,
			(unsigned long long)v.s[i]->ms, width,
			"##################################################");
	}
	if (b.oom) {
		resp_add_error(x->w, "ERR out of memory");
	} else {
		resp_add_verbatim(x->w, "txt", b.data, b.len);
	}
	resp_buf_finish(&b);
}

/* What each event usually means, for LATENCY DOCTOR. */
static const char *const event_advice[BRK_LAT_NEVENTS] = {
	[BRK_LAT_COMMAND] = "A slow command: see SLOWLOG GET for which. XRANGE, XREAD and "
			    "XPENDING over many entries, DEL of a large stream and KEYS are the "
			    "usual ones; use COUNT and SCAN.",
	[BRK_LAT_FAST_COMMAND] = "A command that should take O(1) was slow: the machine may be "
				 "short of CPU, or swapping.",
	[BRK_LAT_COMMIT] = "Writing a batch's pages and flushing them was slow: look at the "
			   "disk of the data directory (iostat), and at large writes such as COPY "
			   "or XADD of big entries.",
	[BRK_LAT_FLUSH] = "The flush that makes a commit durable was slow: the disk's write "
			  "cache is slow to drain. With appendfsync always every reply waits "
			  "for it.",
	[BRK_LAT_EXPIRE] = "Dropping expired keys took long: many keys expired at once.",
};

static void
doctor_reply(struct brk_ctx *x)
{
	struct brk_server *srv = x->srv;
	struct resp_buf b;
	int shown = 0;

	resp_buf_init(&b);
	if (srv->cfg.latency_monitor_threshold <= 0) {
		resp_buf_printf(&b, "The latency monitor is off (latency-monitor-threshold is 0). "
				    "Turn it on with CONFIG SET latency-monitor-threshold <milliseconds>; "
				    "LATENCY HISTOGRAM and INFO latencystats show every command's "
				    "latency without it.\n");
	} else {
		for (int ev = 0; ev < BRK_LAT_NEVENTS; ev++) {
			const struct brk_latseries *ts = srv->latency[ev];
			struct lat_view v;
			if (ts == NULL) {
				continue;
			}
			view_of(ts, &v);
			if (v.n == 0) {
				continue;
			}
			shown++;
			resp_buf_printf(&b, "%d. %s: %d latency spikes of at least %lld ms (average "
					    "%llu ms, worst kept %llu ms, worst since reset %llu ms), "
					    "the last %lld seconds ago.\n   %s\n",
				shown, event_names[ev], v.n, srv->cfg.latency_monitor_threshold,
				(unsigned long long)(v.sum / (uint64_t)v.n),
				(unsigned long long)v.max, (unsigned long long)ts->max,
				(long long)time(NULL) - latest(ts)->time, event_advice[ev]);
		}
		if (shown == 0) {
			resp_buf_printf(&b, "No latency spike of %lld ms or more since the monitor was "
					    "turned on or reset.\n",
				srv->cfg.latency_monitor_threshold);
		}
	}
	if (b.oom) {
		resp_add_error(x->w, "ERR out of memory");
	} else {
		resp_add_verbatim(x->w, "txt", b.data, b.len);
	}
	resp_buf_finish(&b);
}

static const char *const latency_help[] = {
	"LATENCY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
	"DOCTOR",
	"    Return a human readable latency analysis report.",
	"GRAPH <event>",
	"    Return an ASCII latency graph for the <event> class.",
	"HISTORY <event>",
	"    Return time-latency samples for the <event> class.",
	"LATEST",
	"    Return the latest latency samples for all events.",
	"RESET [<event> ...]",
	"    Reset latency data of one or more <event> classes.",
	"    (default: reset all data for all event classes)",
	"HISTOGRAM [COMMAND ...]",
	("    Return a cumulative distribution of latencies in the format of a histogram for "
	 "the specified command names."),
	"    If no commands are specified then all histograms are replied.",
	"HELP",
	"    Prints this help.",
};

int
brk_cmd_latency(struct brk_ctx *x)
{
	struct brk_server *srv = x->srv;
	const struct resp_arg *sub = &x->argv[1];

	/* brk_subcommand_ok() checked the name and the arity */
	if (brk_arg_eq(sub, "LATEST")) {
		size_t n = 0;
		for (int ev = 0; ev < BRK_LAT_NEVENTS; ev++) {
			n += srv->latency[ev] != NULL;
		}
		resp_add_array(x->w, n);
		for (int ev = 0; ev < BRK_LAT_NEVENTS; ev++) {
			const struct brk_latseries *ts = srv->latency[ev];
			if (ts == NULL) {
				continue;
			}
			resp_add_array(x->w, 4);
			resp_add_bulk_cstr(x->w, event_names[ev]);
			resp_add_int(x->w, latest(ts)->time);
			resp_add_int(x->w, (long long)latest(ts)->ms);
			resp_add_int(x->w, (long long)ts->max);
		}
	} else if (brk_arg_eq(sub, "HISTORY")) {
		int ev = event_find(&x->argv[2]);
		struct lat_view v;
		if (ev < 0 || srv->latency[ev] == NULL) {
			resp_add_array(x->w, 0);
			return 0;
		}
		view_of(srv->latency[ev], &v);
		resp_add_array(x->w, (size_t)v.n);
		for (int i = 0; i < v.n; i++) {
			resp_add_array(x->w, 2);
			resp_add_int(x->w, v.s[i]->time);
			resp_add_int(x->w, (long long)v.s[i]->ms);
		}
	} else if (brk_arg_eq(sub, "RESET")) {
		long long n = 0;
		for (int ev = 0; ev < BRK_LAT_NEVENTS; ev++) {
			bool named = x->argc == 2;
			for (int a = 2; a < x->argc && !named; a++) {
				named = event_find(&x->argv[a]) == ev;
			}
			if (named && srv->latency[ev] != NULL) {
				ECHD_FREE(srv->latency[ev]);
				n++;
			}
		}
		resp_add_int(x->w, n);
	} else if (brk_arg_eq(sub, "GRAPH")) {
		int ev = event_find(&x->argv[2]);
		if (ev < 0 || srv->latency[ev] == NULL) {
			resp_add_errorf(x->w, "ERR No samples available for event '%.*s'",
				(int)x->argv[2].len, x->argv[2].p);
			return 0;
		}
		graph_reply(x, ev);
	} else if (brk_arg_eq(sub, "DOCTOR")) {
		doctor_reply(x);
	} else if (brk_arg_eq(sub, "HISTOGRAM")) {
		histogram_reply(x);
	} else if (brk_arg_eq(sub, "HELP")) {
		BRK_REPLY_HELP(x->w, latency_help);
	} else {
		brk_reply_subcommand_syntax(x, "LATENCY");
	}
	return 0;
}
