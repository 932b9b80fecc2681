/* policy.c - group policies (echd's XGROUP SETPOLICY): ack deadlines with
 * back-off, redelivery to '>' readers, dead-lettering, in-flight limits.
 *
 * The promise kept here: a group without a policy costs nothing. The policy
 * lives in the group's record, and each pending row of a group whose policy
 * is timed has a due row keyed by its deadline, written with the PEL row
 * (group.c): the next due rows are found in O(log pending), and they are
 * what committed, restarted or read by another front end. This file keeps,
 * for the groups with a policy, an in-memory lower bound of when the timer
 * may have work there, and one timer at the earliest of them. The bound
 * may only fall outside the timer: a due row written anywhere lowers it
 * (group.c's hook), and a batch that fails lowers every bound to a retry
 * soon, since what the timer read in that batch did not happen. The timer
 * raises a bound only to what the due rows say, inside its batch.
 * XREADGROUP '>' dead-letters the rows past MAXDELIVER and redelivers the
 * due ones, in deadline order, only when the group may have some; the timer
 * dead-letters with nobody reading, at most policy-batch-rows rows a loop
 * turn (the rest in the next turns), and wakes the group's blocked readers
 * for redeliveries. The index is rebuilt at start and when a front end
 * becomes active (every policy group looked at once, at once).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "broker.h"

/* After a failed commit or storage error: look again this much later. */
#define POLICY_RETRY_MS 1000
/* a group whose rows the storage is fetching (ECHD_EWOULDFETCH) tries again sooner */
#define POLICY_FETCH_RETRY_MS 20

/* One group with a policy. Linear lists: a server has few such groups. */
struct brk_pgroup {
	struct brk_pgroup *next;
	unsigned db;
	uint64_t gid;
	uint64_t at;  /* ms: the timer has nothing to do here before (a lower bound) */
	bool due;     /* redeliveries wait for a reader: woken once, not again */
	bool checked; /* its due rows were looked at since load (an older echd wrote none) */
	size_t klen, glen;
	unsigned char name[]; /* key, then group name */
};

static struct brk_pgroup *
pg_find(struct brk_server *srv, unsigned db, const struct st_buf *key, const struct st_buf *gname)
{
	for (struct brk_pgroup *p = srv->policies; p != NULL; p = p->next) {
		if (p->db == db && p->klen == key->len && p->glen == gname->len &&
			memcmp(p->name, key->data, key->len) == 0 &&
			memcmp(p->name + key->len, gname->data, gname->len) == 0) {
			return p;
		}
	}
	return NULL;
}

static void
pg_arm(struct brk_server *srv)
{
	uint64_t at = UINT64_MAX, now = brk_now_ms(), delay;
	struct timeval tv;

	for (struct brk_pgroup *p = srv->policies; p != NULL; p = p->next) {
		if (p->at < at) {
			at = p->at;
		}
	}
	if (at == UINT64_MAX) {
		if (srv->policy_timer != NULL) {
			evtimer_del(srv->policy_timer);
		}
		srv->policy_timer_at = UINT64_MAX;
		return;
	}
	if (srv->policy_timer == NULL) {
		return; /* not started yet: brk_policy_load() arms it */
	}
	if (at == srv->policy_timer_at && evtimer_pending(srv->policy_timer, NULL)) {
		return;
	}
	delay = at > now ? at - now : 0;
	tv.tv_sec = (time_t)(delay / 1000);
	tv.tv_usec = (suseconds_t)(delay % 1000) * 1000;
	evtimer_add(srv->policy_timer, &tv);
	srv->policy_timer_at = at;
}

/* Lowers g's time to at (a group not indexed yet, or indexed under an
 * older group of that name, starts there). Returns 0 or -ENOMEM. */
static int
pg_lower(struct brk_server *srv, unsigned db, const struct st_buf *key, const struct st_buf *gname,
	uint64_t gid, uint64_t at)
{
	struct brk_pgroup *p = pg_find(srv, db, key, gname);

	if (p == NULL) {
		p = echd_malloc(sizeof(*p) + key->len + gname->len);
		if (p == NULL) {
			return -ENOMEM;
		}
		p->db = db;
		p->klen = key->len;
		p->glen = gname->len;
		memcpy(p->name, key->data, key->len);
		memcpy(p->name + key->len, gname->data, gname->len);
		p->gid = gid + 1; /* set below */
		p->next = srv->policies;
		srv->policies = p;
	}
	if (p->gid != gid) {
		p->gid = gid;
		p->at = at;
		p->due = false;
		p->checked = false;
	} else if (at < p->at) {
		p->at = at;
	}
	pg_arm(srv);
	return 0;
}

/* group.c's hook: a due row of group gid was written, due at at. */
static void
due_written(void *ud, uint64_t gid, uint64_t at)
{
	struct brk_server *srv = ud;
	bool lower = false;

	for (struct brk_pgroup *p = srv->policies; p != NULL; p = p->next) {
		if (p->gid == gid && at < p->at) {
			p->at = at;
			lower = true;
		}
	}
	if (lower && at < srv->policy_timer_at) {
		pg_arm(srv);
	}
}

static void
pg_drop(struct brk_server *srv, struct brk_pgroup *gone)
{
	for (struct brk_pgroup **pp = &srv->policies; *pp != NULL; pp = &(*pp)->next) {
		if (*pp == gone) {
			*pp = gone->next;
			echd_free(gone);
			return;
		}
	}
}

/* Moves p to the end of the list: the next timer turn serves the others first. */
static void
pg_to_tail(struct brk_server *srv, struct brk_pgroup *p)
{
	struct brk_pgroup **pp = &srv->policies;

	while (*pp != NULL && *pp != p) {
		pp = &(*pp)->next;
	}
	if (*pp == NULL || p->next == NULL) {
		return;
	}
	*pp = p->next;
	while (*pp != NULL) {
		pp = &(*pp)->next;
	}
	p->next = NULL;
	*pp = p;
}

void
brk_policy_batch_failed(struct brk_server *srv)
{
	uint64_t retry = brk_now_ms() + POLICY_RETRY_MS;

	/* What the timer and the readers read in the batch did not happen:
	 * every group is looked at again (its due rows say what is left). */
	for (struct brk_pgroup *p = srv->policies; p != NULL; p = p->next) {
		p->due = false;
		p->checked = false;
		if (p->at > retry) {
			p->at = retry;
		}
	}
	pg_arm(srv);
}

/* ---- due rows ------------------------------------------------------------ */

/* Dead-letters up to limit of g's rows due at now whose deliveries are
 * spent (their due kind says so); *next: the next such deadline (<= now
 * when some were left), *n: how many. The caller saves g when *n > 0. */
static int
dead_letter_due(struct brk_server *srv, struct storage_txn *t, unsigned db,
	const struct st_buf *key, const struct st_buf *gname, const struct stream_meta *m,
	struct group_meta *g, uint64_t now, size_t limit, uint64_t *next, size_t *n)
{
	struct dead_letter d = {db, key, gname, "maxdeliver", now,
		(uint64_t)srv->cfg.stream_node_max_entries, (uint64_t)srv->cfg.stream_node_max_bytes};
	struct pel_due dead = {NULL, 0, 0, UINT64_MAX};
	int rc;

	*n = 0;
	rc = pel_due_collect(t, g, PEL_DUE_DEAD, now, limit, &dead);
	for (size_t i = 0; rc == 0 && i < dead.n; i++) {
		rc = pel_dead_letter(t, m, g, &dead.rows[i].row, &d);
		if (rc == 0) {
			(*n)++;
		}
	}
	if (rc == 0 && *n > 0 && g->policy.dl_len > 0) {
		brk_signal_key(srv, db, g->policy.dl, g->policy.dl_len);
	}
	*next = dead.next;
	pel_due_finish(&dead);
	srv->stats.policy_dead_lettered += rc == 0 ? *n : 0;
	return rc;
}

static size_t
turn_rows(const struct brk_server *srv)
{
	return (size_t)srv->cfg.policy_batch_rows;
}

int
brk_policy_prepare(struct brk_ctx *x, const struct st_buf *key, const struct st_buf *gname,
	const struct stream_meta *m, struct group_meta *g, uint64_t now, uint64_t count,
	struct pel_due *due, bool *changed)
{
	struct brk_pgroup *p;
	uint64_t next;
	size_t n;
	int rc;

	due->n = 0;
	due->next = UINT64_MAX;
	if (!group_policy_timed(&g->policy)) {
		return 0;
	}
	p = pg_find(x->srv, x->c->db, key, gname);
	if (p != NULL && p->gid == g->gid && !p->due && p->at > now) {
		return 0; /* nothing can be due yet: no look */
	}
	rc = dead_letter_due(x->srv, x->txn, x->c->db, key, gname, m, g, now, turn_rows(x->srv),
		&next, &n);
	if (rc == 0 && n > 0) {
		*changed = true;
	}
	if (rc == 0) {
		rc = pel_due_collect(x->txn, g, PEL_DUE_REDELIVER, now,
			count > SIZE_MAX ? 0 : (size_t)count, due);
	}
	return rc == 0 ? 1 : rc;
}

int
brk_policy_serve(struct brk_ctx *x, const struct st_buf *key, const struct st_buf *gname,
	const struct stream_meta *m, struct group_meta *g, struct consumer_meta *c,
	const struct pel_due *due, uint64_t count, uint64_t now, size_t *n,
	struct brk_read_budget *budget)
{
	struct brk_pgroup *p;
	size_t i;
	int rc = 0;

	*n = 0;
	for (i = 0; i < due->n && (count == 0 || *n < count) && !x->w->out->oom &&
		(budget == NULL || !brk_read_budget_spent(budget, x->w)); i++) {
		const struct pel_row *r = &due->rows[i].row;
		struct st_buf fields;

		rc = brk_pel_entry(x, m, g, c, r, &fields);
		if (rc == ECHD_ENOTFOUND) {
			continue; /* deleted meanwhile: nothing to hand out */
		}
		if (rc == 0) {
			brk_reply_entry(x->w, &r->id, &fields);
			rc = brk_pel_take(x, g, c, r, now);
			if (budget != NULL) {
				budget->emitted++;
			}
		}
		if (rc != 0) {
			return rc;
		}
		(*n)++;
	}
	p = pg_find(x->srv, x->c->db, key, gname);
	if (p == NULL || p->gid != g->gid || i < due->n || due->next <= now) {
		return 0; /* redeliveries are left: the timer's wake stands */
	}
	/* None left: the timer looks at the group again (its deadlines moved;
	 * this read's own are lower bounds through the hook). Only lowered
	 * here: this command may yet fail. */
	p->due = false;
	if (p->at > now) {
		p->at = now;
		pg_arm(x->srv);
	}
	return 0;
}

int
brk_policy_delivered(struct brk_ctx *x, const struct st_buf *key, const struct st_buf *gname,
	const struct group_meta *g, uint64_t now)
{
	uint64_t w = group_policy_wait(&g->policy, 1);

	if (!group_policy_timed(&g->policy) || w == 0) {
		return 0;
	}
	return pg_lower(x->srv, x->c->db, key, gname, g->gid, now + w);
}

int
brk_policy_released(struct brk_ctx *x, const struct resp_arg *key, const struct st_buf *gname,
	const struct group_meta *g, uint64_t at)
{
	struct st_buf k = {key->p, key->len};

	/* due at once: readers look (the key's signal wakes blocked ones) */
	return pg_lower(x->srv, x->c->db, &k, gname, g->gid, at);
}

uint64_t
brk_policy_room(const struct group_meta *g, uint64_t count)
{
	uint64_t max = g->policy.max_ack_pending, room;

	if (max == 0) {
		return count;
	}
	room = g->pending < max ? max - g->pending : 0;
	if (room == 0) {
		return UINT64_MAX; /* none: the caller serves nothing new */
	}
	return count == 0 || count > room ? room : count;
}

void
brk_policy_acked(struct brk_ctx *x, const struct st_buf *key, const struct group_meta *g,
	uint64_t before)
{
	uint64_t max = g->policy.max_ack_pending;

	/* blocked readers waiting for room run again, in arrival order */
	if (max != 0 && before >= max && g->pending < max) {
		brk_signal_key(x->srv, x->c->db, key->data, key->len);
	}
}

/* ---- the timer ----------------------------------------------------------- */

/* One group whose time came: dead-letters up to limit spent rows (*n:
 * how many), wakes readers for redeliveries, and sets its next time.
 * Returns 1 when p is to be dropped. */
static int
pg_run(struct brk_server *srv, struct storage_txn *t, struct brk_pgroup *p, uint64_t now,
	size_t limit, size_t *n)
{
	struct st_buf key = {p->name, p->klen}, gname = {p->name + p->klen, p->glen};
	struct pel_due peek = {NULL, 0, 0, UINT64_MAX};
	struct stream_meta m;
	struct group_meta g;
	uint64_t next0 = UINT64_MAX, at1;
	int rc;

	*n = 0;

	rc = stream_lookup(t, p->db, &key, &m);
	if (rc == 0 && stream_expired(&m, now)) {
		rc = ECHD_ENOTFOUND;
	}
	if (rc == 0) {
		rc = group_lookup(t, &m, &gname, &g);
	}
	if (rc == ECHD_ENOTFOUND || (rc == 0 && (g.gid != p->gid || !group_policy_timed(&g.policy)))) {
		return 1;
	}
	if (rc == 0 && !p->checked && g.pending > 0) {
		/* rows pending and no due row: a PEL from an echd before them */
		bool any = false;
		rc = pel_due_any(t, &g, &any);
		if (rc == 0 && !any) {
			echd_log(ECHD_LOG_NOTICE, "group policy: writing the deadlines of %llu "
						  "pending entries of a group of '%.*s'",
				(unsigned long long)g.pending, (int)p->klen, (const char *)p->name);
			rc = pel_due_rebuild(t, &g);
			srv->batch_writes++;
		}
	}
	if (rc == 0) {
		rc = dead_letter_due(srv, t, p->db, &key, &gname, &m, &g, now, limit, &next0, n);
	}
	if (rc == 0 && *n > 0) {
		rc = group_save(t, &m, &gname, &g);
	}
	if (rc == 0) {
		rc = pel_due_collect(t, &g, PEL_DUE_REDELIVER, now, 1, &peek);
	}
	if (rc == 0) {
		p->checked = true;
		at1 = peek.n > 0 ? peek.rows[0].at : peek.next;
		if (at1 <= now && !p->due) {
			brk_signal_key(srv, p->db, key.data, key.len); /* redeliveries wait */
		}
		p->due = at1 <= now;
		p->at = p->due || next0 < at1 ? next0 : at1;
		if (*n > 0) {
			srv->batch_writes++;
		}
	}
	pel_due_finish(&peek);
	return rc;
}

struct load_walk {
	struct brk_server *srv;
	uint64_t now;
};

static int
load_cb(unsigned db, const struct st_buf *key, const struct st_buf *name,
	const struct group_meta *g, void *ud)
{
	struct load_walk *w = ud;

	if (!group_policy_timed(&g->policy)) {
		return 0;
	}
	/* due now: the first run looks at it and sets its time */
	return pg_lower(w->srv, db, key, name, g->gid, w->now);
}

void
brk_policy_rescan(struct brk_server *srv)
{
	struct timeval tv = {0, 0};

	if (srv->policies == NULL || srv->policy_timer == NULL) {
		return; /* no policy anywhere: nothing a rename could have moved */
	}
	srv->policy_rescan = true;
	evtimer_add(srv->policy_timer, &tv);
	srv->policy_timer_at = 0;
}

static void
policy_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct brk_server *srv = arg;
	struct storage_txn *t, *child;
	uint64_t now = brk_now_ms();
	struct brk_pgroup *p, *next, *last = NULL;
	size_t cap = turn_rows(srv), done = 0, n;
	uint64_t misses0;
	int rc;

	(void)fd;
	(void)what;
	srv->policy_timer_at = UINT64_MAX;
	t = brk_batch_txn(srv, &rc);
	if (t != NULL && srv->policy_rescan) {
		/* a stream with groups was renamed, moved or copied: find its
		 * groups under their new names (O(groups)) */
		struct load_walk w = {srv, now};

		srv->policy_rescan = false;
		rc = group_policy_each(t, (unsigned)srv->cfg.databases, load_cb, &w);
		if (rc != 0) {
			echd_log(ECHD_LOG_WARNING, "group policy: %s", echd_strerror(rc));
		}
	}
	for (p = srv->policies; t != NULL && p != NULL && done < cap; p = next) {
		next = p->next;
		if (p->at > now) {
			continue;
		}
		/* one child per group: a failure undoes only that group's work */
		rc = storage_txn_begin(srv->st, t, 0, &child);
		if (rc != 0) {
			break;
		}
		misses0 = brk_fetch_misses(srv);
		rc = pg_run(srv, child, p, now, cap - done, &n);
		if (rc == 0 && brk_fetch_missed(srv, misses0)) {
			rc = ECHD_EWOULDFETCH; /* a miss it did not pass on: undone (fetch.c) */
		}
		if (rc == 1) {
			storage_txn_abort(child);
			pg_drop(srv, p);
			continue;
		}
		if (rc == 0) {
			rc = storage_txn_commit(child);
		} else {
			storage_txn_abort(child);
		}
		if (rc == ECHD_EWOULDFETCH) {
			p->at = now + POLICY_FETCH_RETRY_MS;
		} else if (rc != 0) {
			echd_log(ECHD_LOG_WARNING, "group policy: %s", echd_strerror(rc));
			p->at = now + POLICY_RETRY_MS;
		} else {
			done += n;
		}
		last = p;
	}
	if (done >= cap && last != NULL) {
		pg_to_tail(srv, last); /* the cap was reached there: the others first next turn */
	}
	if (done > srv->stats.policy_turn_rows_max) {
		srv->stats.policy_turn_rows_max = done;
	}
	if (t == NULL) {
		for (p = srv->policies; p != NULL; p = p->next) {
			if (p->at <= now) {
				p->at = now + POLICY_RETRY_MS;
			}
		}
	}
	pg_arm(srv);
}

int
brk_policy_load(struct brk_server *srv)
{
	struct storage_txn *t;
	struct load_walk w = {srv, brk_now_ms()};
	int rc;

	srv->policy_timer_at = UINT64_MAX;
	srv->policy_timer = evtimer_new(srv->base, policy_timer_cb, srv);
	if (srv->policy_timer == NULL) {
		return -ENOMEM;
	}
	pel_due_hook_set(due_written, srv);
	rc = storage_txn_begin(srv->st, NULL, STORAGE_TXN_RDONLY, &t);
	if (rc != 0) {
		return rc;
	}
	rc = group_policy_each(t, (unsigned)srv->cfg.databases, load_cb, &w);
	storage_txn_abort(t);
	if (rc == 0) {
		pg_arm(srv);
	}
	return rc;
}

void
brk_policy_finish(struct brk_server *srv)
{
	pel_due_hook_set(NULL, NULL);
	while (srv->policies != NULL) {
		pg_drop(srv, srv->policies);
	}
	if (srv->policy_timer != NULL) {
		event_free(srv->policy_timer);
		srv->policy_timer = NULL;
	}
}

/* ---- XGROUP SETPOLICY ---------------------------------------------------- */

static bool
arg_u64(struct brk_ctx *x, const struct resp_arg *a, const char *what, uint64_t *out)
{
	long long v;

	if (!brk_str2ll(a->p, a->len, &v) || v < 0) {
		resp_add_errorf(x->w, "ERR value for %s must be a non-negative integer", what);
		return false;
	}
	*out = (uint64_t)v;
	return true;
}

/* Whether the due rows of a group change from policy a to b: its waits or
 * MAXDELIVER (which decides their kind). */
static bool
due_changed(const struct group_policy *a, const struct group_policy *b)
{
	return a->ack_wait != b->ack_wait || a->nbackoff != b->nbackoff ||
		memcmp(a->backoff, b->backoff, sizeof(a->backoff)) != 0 ||
		(group_policy_timed(b) && a->max_deliver != b->max_deliver);
}

/* XGROUP SETPOLICY key group [ACKWAIT ms] [BACKOFF n ms...] [MAXDELIVER n]
 * [DEADLETTER key] [MAXACKPENDING n] [RESET] */
int
brk_xgroup_setpolicy(struct brk_ctx *x)
{
	struct st_buf key = {x->argv[2].p, x->argv[2].len};
	struct st_buf gname = {x->argv[3].p, x->argv[3].len};
	struct group_policy set, old;
	struct stream_meta m;
	struct group_meta g;
	bool reset = false, has[5] = {false};
	uint64_t dead_lettered;
	int rc;

	memset(&set, 0, sizeof(set));
	for (int i = 4; i < x->argc; i++) {
		const struct resp_arg *o = &x->argv[i];
		bool more = i + 1 < x->argc;

		if (brk_arg_eq(o, "RESET")) {
			reset = true;
		} else if (brk_arg_eq(o, "ACKWAIT") && more) {
			if (!arg_u64(x, &x->argv[++i], "ACKWAIT", &set.ack_wait)) {
				return 0;
			}
			has[0] = true;
		} else if (brk_arg_eq(o, "MAXDELIVER") && more) {
			if (!arg_u64(x, &x->argv[++i], "MAXDELIVER", &set.max_deliver)) {
				return 0;
			}
			has[1] = true;
		} else if (brk_arg_eq(o, "MAXACKPENDING") && more) {
			if (!arg_u64(x, &x->argv[++i], "MAXACKPENDING", &set.max_ack_pending)) {
				return 0;
			}
			has[2] = true;
		} else if (brk_arg_eq(o, "DEADLETTER") && more) {
			const struct resp_arg *k = &x->argv[++i];
			if (has[3]) {
				/* the ACL checks the key the first DEADLETTER names
				 * (the table's key spec): a second is not let through */
				resp_add_error(x->w, "ERR DEADLETTER may be given only once");
				return 0;
			}
			if (k->len > GROUP_DEADLETTER_MAX) {
				resp_add_error(x->w, "ERR DEADLETTER key is too long");
				return 0;
			}
			if (k->len == key.len && memcmp(k->p, key.data, key.len) == 0) {
				resp_add_error(x->w, "ERR DEADLETTER key must not be the stream itself");
				return 0;
			}
			memcpy(set.dl, k->p, k->len);
			set.dl_len = (uint32_t)k->len;
			has[3] = true;
		} else if (brk_arg_eq(o, "BACKOFF") && more) {
			uint64_t n;
			if (!arg_u64(x, &x->argv[++i], "BACKOFF", &n)) {
				return 0;
			}
			if (n > GROUP_BACKOFF_MAX) {
				resp_add_errorf(x->w, "ERR BACKOFF takes at most %d values",
					GROUP_BACKOFF_MAX);
				return 0;
			}
			if ((uint64_t)(x->argc - i - 1) < n) {
				resp_add_error(x->w, BRK_ERR_SYNTAX);
				return 0;
			}
			for (uint64_t j = 0; j < n; j++) {
				if (!arg_u64(x, &x->argv[++i], "BACKOFF", &set.backoff[j])) {
					return 0;
				}
				if (set.backoff[j] == 0) {
					resp_add_error(x->w, "ERR BACKOFF values must be positive");
					return 0;
				}
			}
			set.nbackoff = (uint32_t)n;
			has[4] = true;
		} else {
			resp_add_error(x->w, BRK_ERR_SYNTAX);
			return 0;
		}
	}
	rc = brk_lookup_group(x, &key, &gname, BRK_ERR_NOKEY_XGROUP, &m, &g);
	if (rc != 0) {
		return rc == 1 ? 0 : rc;
	}
	old = g.policy;
	dead_lettered = g.policy.dead_lettered;
	if (reset) {
		memset(&g.policy, 0, sizeof(g.policy));
		g.policy.dead_lettered = dead_lettered;
	}
	if (has[0]) {
		g.policy.ack_wait = set.ack_wait;
	}
	if (has[1]) {
		g.policy.max_deliver = set.max_deliver;
	}
	if (has[2]) {
		g.policy.max_ack_pending = set.max_ack_pending;
	}
	if (has[3]) {
		memset(g.policy.dl, 0, sizeof(g.policy.dl));
		memcpy(g.policy.dl, set.dl, set.dl_len);
		g.policy.dl_len = set.dl_len;
	}
	if (has[4]) {
		memset(g.policy.backoff, 0, sizeof(g.policy.backoff));
		memcpy(g.policy.backoff, set.backoff, sizeof(set.backoff));
		g.policy.nbackoff = set.nbackoff;
	}
	if (memcmp(&old, &g.policy, sizeof(old)) != 0) {
		rc = group_save(x->txn, &m, &gname, &g);
		if (rc != 0) {
			return rc;
		}
		x->dirty++;
	}
	if (due_changed(&old, &g.policy)) {
		/* the deadlines move: every pending row's due row (O(pending)) */
		rc = pel_due_rebuild(x->txn, &g);
		if (rc != 0) {
			return rc;
		}
	}
	if (group_policy_timed(&g.policy)) {
		/* look at once: rows may be due under the new waits */
		rc = pg_lower(x->srv, x->c->db, &key, &gname, g.gid, 0);
		if (rc != 0) {
			return rc;
		}
	}
	/* readers blocked for room or for redeliveries look again */
	brk_signal_key(x->srv, x->c->db, key.data, key.len);
	resp_add_simple(x->w, "OK");
	return 0;
}
