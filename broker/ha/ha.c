/* ha.c - active and standby front ends of a shared store (issue 27), and
 * how clients find the active one: ROLE and SENTINEL.
 *
 * The storage decides who is active (storage.h's HA part: postgres); this
 * file asks it every ha-retry-ms, between batches, and acts on a change.
 * Becoming active, the broker drops what it derived from the store, as at
 * start-up: the policy index, the expiry schedule, deferred deletion, the
 * seen-times. Leaving active (a poll, or a commit the storage refused),
 * it answers the blocked clients -READONLY and spoils open transactions;
 * conn.c's gate then answers every command but the few of
 * BRK_CMD_STANDBY -READONLY. Without the HA part (LMDB, mem) the server is
 * always active, and ROLE and SENTINEL name it as the active one.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "broker.h"
#include "cluster.h"

static const char *
role_name(enum storage_role r)
{
	return r == STORAGE_ROLE_ACTIVE ? "active" : r == STORAGE_ROLE_STANDBY ? "standby"
									     : "offline";
}

void
brk_random_id(char out[41])
{
	unsigned char raw[20];
	int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, raw, sizeof(raw)) : -1;

	if (fd >= 0) {
		close(fd);
	}
	if (n != (ssize_t)sizeof(raw)) {
		/* no urandom: unique enough among front ends for an id */
		uint64_t s = brk_now_us() ^ ((uint64_t)getpid() << 32);
		for (size_t i = 0; i < sizeof(raw); i++) {
			s = s * 6364136223846793005ULL + 1442695040888963407ULL;
			raw[i] = (unsigned char)(s >> 56);
		}
	}
	for (size_t i = 0; i < sizeof(raw); i++) {
		snprintf(out + 2 * i, 3, "%02x", raw[i]);
	}
}

void
brk_ha_announce(struct brk_server *srv)
{
	brk_config_announce(&srv->cfg, srv->ha_host, sizeof(srv->ha_host), &srv->ha_port);
	if (srv->ha_myid[0] == '\0') {
		brk_random_id(srv->ha_myid);
	}
}

/* This front end's port for clients: port 0 picks one at bind. */
static int
own_port(const struct brk_server *srv)
{
	return srv->ha_port != 0 ? srv->ha_port : srv->bound_port;
}

enum storage_role
brk_ha_role(const struct brk_server *srv)
{
	struct storage_ha *ha = srv->st != NULL ? storage_ha(srv->st) : NULL;

	return ha != NULL ? storage_ha_role(ha) : STORAGE_ROLE_ACTIVE;
}

bool
brk_ha_serving(const struct brk_server *srv)
{
	return brk_ha_role(srv) == STORAGE_ROLE_ACTIVE;
}

/* The store was read fresh: drop what was derived from it before, and
 * tell sentinel clients subscribed here (go-redis, ioredis' failover
 * detector) as Sentinel does: "+switch-master name old-ip old-port new-ip
 * new-port". old: the active front end before ("" unknown). */
static void
became_active(struct brk_server *srv, const char *old_host, int old_port)
{
	char msg[700];
	int rc;

	srv->ha_was_active = true;
	srv->ha_since_ms = brk_now_ms();
	srv->gc_pending = true;     /* finish deletions another front end left */
	srv->expire_next_ms = 0;    /* look for keys to expire again */
	srv->policy_rescan = false;
	brk_seen_clear(srv);
	brk_policy_finish(srv);
	rc = brk_policy_load(srv);
	if (rc != 0) {
		echd_log(ECHD_LOG_WARNING, "cannot load group policies: %s", echd_strerror(rc));
	}
	/* keys watched before may have changed under another front end */
	for (struct brk_conn *c = srv->conns; c != NULL; c = c->next) {
		c->watch_dirty |= c->nwatched > 0;
	}
	echd_log(ECHD_LOG_NOTICE, "became the active front end (generation %llu)",
		(unsigned long long)srv->ha.gen);
	snprintf(msg, sizeof(msg), "%s %s %d %s %d", srv->cfg.ha_name ? srv->cfg.ha_name : "",
		old_host[0] ? old_host : "?", old_port, srv->ha_host, own_port(srv));
	brk_pubsub_publish(srv, "+switch-master", msg);
}

static void
left_active(struct brk_server *srv, const char *why)
{
	uint64_t n = 0;

	srv->ha_was_active = false;
	srv->ha_since_ms = brk_now_ms();
	for (struct brk_conn *c = srv->conns; c != NULL; c = c->next) {
		if (c->flags & BRK_CONN_CLOSING) {
			continue;
		}
		if (c->blk != NULL) {
			brk_block_end(c, BRK_ERR_READONLY);
			brk_conn_mark_pending(c);
			n++;
		}
		c->multi_dirty |= c->multi; /* EXEC: EXECABORT */
		c->watch_dirty |= c->nwatched > 0;
	}
	echd_log(ECHD_LOG_WARNING, "no longer the active front end (%s): %llu blocked clients "
				   "answered READONLY",
		why, (unsigned long long)n);
}

/* Asks the storage who is active, and acts on a change. No batch open;
 * the storage has the HA interface (brk_ha_init() polls only then). */
static void
ha_poll(struct brk_server *srv)
{
	struct storage_ha_state h;
	enum storage_role before = srv->ha.role;
	char old_host[sizeof(srv->ha.active_host)];
	int old_port = srv->ha.active_port, rc;

	memset(&h, 0, sizeof(h));
	rc = storage_ha_poll(storage_ha(srv->st), &h);
	if (rc != 0 && strcmp(h.why, srv->ha.why) != 0) {
		/* the backend logs its own failures; once per new reason here,
		 * as a poll repeats every ha-retry-ms */
		echd_log(ECHD_LOG_VERBOSE, "storage: %s (%s)", h.why[0] ? h.why : "unreachable",
			echd_strerror(rc));
	}
	memcpy(old_host, srv->ha.active_host, sizeof(old_host));
	srv->ha = h;
	if (h.role == STORAGE_ROLE_ACTIVE && (h.became_active || !srv->ha_was_active)) {
		became_active(srv, old_host, old_port);
	} else if (h.role != STORAGE_ROLE_ACTIVE && srv->ha_was_active) {
		left_active(srv, h.role == STORAGE_ROLE_OFFLINE ? "the store is unreachable"
								: "another front end took over");
	} else if (h.role != before) {
		echd_log(ECHD_LOG_NOTICE, "front end: %s%s%s", role_name(h.role),
			h.role == STORAGE_ROLE_OFFLINE && h.why[0] ? ": " : "",
			h.role == STORAGE_ROLE_OFFLINE ? h.why : "");
	}
	brk_cluster_update(srv); /* the shards' primaries, as this poll read them */
}

/* Between two polls: ha-retry-ms, but at least three a lease, which a
 * healthy front end renews by polling (st_pg.c: PostgreSQL ends a session
 * idle for the lease). */
static struct timeval
poll_interval(const struct brk_server *srv)
{
	long long ms = brk_config_ha_poll_ms(&srv->cfg);
	struct timeval tv;

	tv.tv_sec = (time_t)(ms / 1000);
	tv.tv_usec = (suseconds_t)(ms % 1000 * 1000);
	return tv;
}

static void
ha_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct brk_server *srv = arg;
	struct timeval tv = poll_interval(srv);

	(void)fd;
	(void)what;
	if (srv->ha_was_active && !brk_ha_serving(srv)) {
		/* a commit found the store lost or taken (brk_ha_check) */
		srv->ha.role = brk_ha_role(srv);
		left_active(srv, srv->ha.role == STORAGE_ROLE_OFFLINE
				     ? "the store was lost during a commit"
				     : "another front end took over (a commit was refused)");
	}
	if (srv->batch == NULL) {
		ha_poll(srv);
	}
	evtimer_add(srv->ha_timer, &tv); /* CONFIG SET may change ha-retry-ms */
}

int
brk_ha_init(struct brk_server *srv)
{
	struct timeval tv = {0, 0};

	memset(&srv->ha, 0, sizeof(srv->ha));
	srv->ha.role = STORAGE_ROLE_ACTIVE;
	srv->ha_was_active = true;
	srv->ha_since_ms = brk_now_ms();
	if (storage_ha(srv->st) == NULL) {
		return 0; /* always active: nothing to poll */
	}
	srv->ha_timer = evtimer_new(srv->base, ha_timer_cb, srv);
	if (srv->ha_timer == NULL) {
		return -ENOMEM;
	}
	/* State was loaded at open as the role then was: the first poll (now,
	 * before any client) says which role that is. */
	srv->ha_was_active = brk_ha_serving(srv);
	srv->ha.role = brk_ha_role(srv);
	ha_poll(srv);
	if (!srv->ha_was_active) {
		echd_log(ECHD_LOG_NOTICE, "front end: %s (generation %llu, active: %s:%d)",
			role_name(srv->ha.role), (unsigned long long)srv->ha.gen,
			srv->ha.active_host[0] ? srv->ha.active_host : "unknown", srv->ha.active_port);
	}
	tv = poll_interval(srv);
	evtimer_add(srv->ha_timer, &tv);
	return 0;
}

void
brk_ha_check(struct brk_server *srv)
{
	struct timeval now = {0, 0};

	if (srv->ha_timer != NULL && srv->ha_was_active && !brk_ha_serving(srv)) {
		evtimer_add(srv->ha_timer, &now); /* act from the loop, not mid-command */
	}
}

int
brk_ha_confirm(struct brk_server *srv)
{
	struct storage_ha *ha = srv->st != NULL ? storage_ha(srv->st) : NULL;
	int rc;

	if (ha == NULL) {
		return 0;
	}
	rc = storage_ha_confirm(ha);
	if (rc != 0) {
		brk_ha_check(srv);
	}
	return rc;
}

void
brk_ha_finish(struct brk_server *srv)
{
	if (srv->ha_timer != NULL) {
		event_free(srv->ha_timer);
		srv->ha_timer = NULL;
	}
}

/* The active front end's address: false when none is known. */
static bool
active_addr(const struct brk_server *srv, const char **host, int *port)
{
	if (storage_ha(srv->st) == NULL) {
		*host = srv->ha_host;
		*port = own_port(srv);
		return true;
	}
	if (brk_ha_serving(srv) && srv->ha.active_host[0] == '\0') {
		*host = srv->ha_host; /* active: this one, whatever the poll read */
		*port = own_port(srv);
		return true;
	}
	*host = srv->ha.active_host;
	*port = srv->ha.active_port;
	return srv->ha.active_host[0] != '\0' && srv->ha.role != STORAGE_ROLE_OFFLINE;
}

void
brk_ha_info(struct brk_server *srv, struct resp_buf *b)
{
	const char *host;
	int port;
	bool known = active_addr(srv, &host, &port);
	enum storage_role r = brk_ha_role(srv);

	resp_buf_printf(b, "role:%s\r\nconnected_slaves:0\r\n",
		r == STORAGE_ROLE_ACTIVE ? "master" : "standby");
	resp_buf_printf(b, "ha_state:%s\r\nha_generation:%llu\r\n", role_name(r),
		(unsigned long long)srv->ha.gen);
	if (known && strchr(host, ':') != NULL) {
		resp_buf_printf(b, "ha_active_addr:[%s]:%d\r\n", host, port);
	} else if (known) {
		resp_buf_printf(b, "ha_active_addr:%s:%d\r\n", host, port);
	} else {
		resp_buf_printf(b, "ha_active_addr:\r\n");
	}
	resp_buf_printf(b, "ha_name:%s\r\n", srv->cfg.ha_name ? srv->cfg.ha_name : "");
}

/* ROLE: Redis' master shape when active, its replica shape otherwise. */
int
brk_cmd_role(struct brk_ctx *x)
{
	const char *host;
	int port;
	bool known = active_addr(x->srv, &host, &port);

	if (brk_ha_serving(x->srv)) {
		resp_add_array(x->w, 3);
		resp_add_bulk_cstr(x->w, "master");
		resp_add_int(x->w, 0); /* no replication offset: no replicas */
		resp_add_array(x->w, 0);
		return 0;
	}
	resp_add_array(x->w, 5);
	resp_add_bulk_cstr(x->w, "slave");
	resp_add_bulk_cstr(x->w, known ? host : "");
	resp_add_int(x->w, known ? port : 0);
	/* "connected": it follows a known active one; "connect": it looks for one */
	resp_add_bulk_cstr(x->w,
		known && x->srv->ha.role == STORAGE_ROLE_STANDBY ? "connected" : "connect");
	resp_add_int(x->w, -1);
	return 0;
}

static bool
is_our_name(const struct brk_server *srv, const struct resp_arg *a)
{
	const char *n = srv->cfg.ha_name ? srv->cfg.ha_name : "";
	return a->len == strlen(n) && memcmp(a->p, n, a->len) == 0;
}

static void
add_field(struct resp_writer *w, const char *k, const char *v)
{
	resp_add_bulk_cstr(w, k);
	resp_add_bulk_cstr(w, v);
}

static void
add_field_ll(struct resp_writer *w, const char *k, long long v)
{
	char buf[32];

	snprintf(buf, sizeof(buf), "%lld", v);
	add_field(w, k, buf);
}

#define MASTER_FIELDS 20

/* One master's state as Redis Sentinel gives it (values as bulk strings): a
 * map in RESP3, key/value pairs in RESP2. Without a known active front
 * end its flags say s_down, so that clients ask the next sentinel. */
static void
add_master(struct brk_ctx *x)
{
	struct brk_server *srv = x->srv;
	struct resp_writer *w = x->w;
	const char *host;
	int port;
	bool known = active_addr(srv, &host, &port);
	bool self = brk_ha_serving(srv);
	long long since = (long long)(brk_now_ms() - srv->ha_since_ms);

	resp_add_map(w, MASTER_FIELDS);
	add_field(w, "name", srv->cfg.ha_name ? srv->cfg.ha_name : "");
	add_field(w, "ip", known ? host : "");
	add_field_ll(w, "port", known ? port : 0);
	add_field(w, "runid", self ? srv->ha_myid : "");
	add_field(w, "flags", known ? "master" : "s_down,master,disconnected");
	add_field_ll(w, "link-pending-commands", 0);
	add_field_ll(w, "link-refcount", 1);
	add_field_ll(w, "last-ping-sent", 0);
	add_field_ll(w, "last-ok-ping-reply", self ? 0 : since);
	add_field_ll(w, "last-ping-reply", self ? 0 : since);
	add_field_ll(w, "down-after-milliseconds", srv->cfg.storage_timeout_ms);
	add_field_ll(w, "info-refresh", self ? 0 : since);
	add_field(w, "role-reported", "master");
	add_field_ll(w, "role-reported-time", since);
	add_field_ll(w, "config-epoch", (long long)srv->ha.gen);
	add_field_ll(w, "num-slaves", 0);
	add_field_ll(w, "num-other-sentinels", 0);
	add_field_ll(w, "quorum", 1);
	add_field_ll(w, "failover-timeout", srv->cfg.ha_retry_ms);
	add_field_ll(w, "parallel-syncs", 1);
}

static const char *const sentinel_help[] = {
	"SENTINEL <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
	"GET-MASTER-ADDR-BY-NAME <master-name>",
	"    Return the ip and port number of the active front end of <master-name>.",
	"MASTER <master-name>",
	"    Show the state and info of <master-name>.",
	"MASTERS",
	"    Show a list of monitored masters (the one service, ha-name).",
	"MYID",
	"    Return the ID of this front end.",
	"REPLICAS <master-name>",
	"    An empty list: echd's front ends do not list each other.",
	"SENTINELS <master-name>",
	"    An empty list: echd's front ends do not list each other.",
	"HELP",
	"    Print this help.",
};

/* SENTINEL: every front end answers as a sentinel of the one service
 * ha-name, whose master is the active front end. */
int
brk_cmd_sentinel(struct brk_ctx *x)
{
	const struct resp_arg *sub = &x->argv[1];

	if (brk_arg_eq(sub, "HELP")) {
		BRK_REPLY_HELP(x->w, sentinel_help);
		return 0;
	}
	if (brk_arg_eq(sub, "MYID")) {
		resp_add_bulk_cstr(x->w, x->srv->ha_myid);
		return 0;
	}
	if (brk_arg_eq(sub, "MASTERS")) {
		resp_add_array(x->w, 1);
		add_master(x);
		return 0;
	}
	/* the rest name the service */
	if (!is_our_name(x->srv, &x->argv[2])) {
		if (brk_arg_eq(sub, "GET-MASTER-ADDR-BY-NAME")) {
			resp_add_null_array(x->w); /* Redis: a null for a name it does not know */
		} else {
			resp_add_error(x->w, "ERR No such master with that name");
		}
		return 0;
	}
	if (brk_arg_eq(sub, "GET-MASTER-ADDR-BY-NAME")) {
		const char *host;
		int port;
		if (!active_addr(x->srv, &host, &port)) {
			resp_add_null_array(x->w);
			return 0;
		}
		char pbuf[16];
		snprintf(pbuf, sizeof(pbuf), "%d", port);
		resp_add_array(x->w, 2);
		resp_add_bulk_cstr(x->w, host);
		resp_add_bulk_cstr(x->w, pbuf); /* a bulk string, as Sentinel sends it */
		return 0;
	}
	if (brk_arg_eq(sub, "MASTER")) {
		add_master(x);
		return 0;
	}
	/* SENTINELS, REPLICAS, SLAVES: front ends do not list each other */
	resp_add_array(x->w, 0);
	return 0;
}
