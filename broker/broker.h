/* broker.h - internal header of the broker: the server's and connections'
 * state, and what the modules of broker/ share. The options are in
 * config.h, the command table's types in commands.h; this includes both.
 *
 * Only broker/ includes this. The broker owns the event loop (libevent),
 * the connections, command dispatch, blocking and the group commit; it
 * reaches data only through storage.h and stream.h.
 */
#ifndef ECHD_BROKER_BROKER_H
#define ECHD_BROKER_BROKER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "clock.h"
#include "commands.h"
#include "config.h"
#include "echd.h"
#include "hist.h"
#include "resp.h"
#include "group.h"
#include "storage.h"
#include "stream.h"

struct event_base;
struct event;
struct bufferevent;
struct evbuffer;
struct evbuffer_cb_entry;
struct evbuffer_cb_info;
struct evconnlistener;
struct ssl_ctx_st;

/* ------------------------------------------------------------------------
 * Connections and the server
 * ---------------------------------------------------------------------- */

struct brk_server;
struct brk_conn;
struct brk_cmd;
struct brk_user;
struct brk_pubsub;
struct brk_psub;
struct brk_http;
struct brk_scrape;
struct brk_api;
struct brk_cluster;

/* A copied request, for clients that block. */
struct brk_argv {
	int argc;
	struct resp_arg *argv; /* each p owned, freed by brk_argv_free() */
};

struct brk_block {
	struct brk_argv req;    /* the command to run again, '$' resolved */
	struct brk_argv orig;   /* as the client sent it, for SLOWLOG (empty: req) */
	struct event *timer;    /* NULL when blocking forever */
	struct event *claim_timer; /* XREADGROUP CLAIM: when an entry becomes claimable */
	uint64_t deadline_ms;   /* 0 = forever */
	int nkeys;
	struct brk_waitkey **keys; /* the keys it waits on */
	bool ready;             /* queued to run again */
	bool nokey;             /* XREADGROUP: answers NOGROUP if its key goes */
	const struct brk_cmd *cmd; /* counted in commandstats when it answers */
	/* WAIT/WAITAOF wait for replicas echd never has: they block on no key
	 * until their timeout, then answer what they have. */
	enum { BRK_BLOCK_READ, BRK_BLOCK_WAIT, BRK_BLOCK_WAITAOF, BRK_BLOCK_FETCH } kind;
	/* fetch.c: waiting for rows the storage is fetching (BRK_BLOCK_FETCH:
	 * only that; a reader: that too), on the list srv->fetch_head */
	bool fetch_wait;
	struct brk_conn *fetch_next;
	bool numlocal;          /* WAITAOF asked for the local flush */
	uint64_t run_us;        /* time its runs took, for SLOWLOG */
	struct brk_conn *next_ready;
};

enum {
	BRK_CONN_CLOSE_AFTER_REPLY = 1 << 0, /* QUIT, protocol error */
	BRK_CONN_CLOSE_ASAP = 1 << 1,        /* killed, limit exceeded */
	BRK_CONN_UNIX = 1 << 2,
	BRK_CONN_HELD = 1 << 3,              /* on the held list */
	BRK_CONN_PENDING = 1 << 4,           /* on the pending-input list */
	BRK_CONN_CLOSING = 1 << 5,           /* on the closing list */
	BRK_CONN_TLS = 1 << 7,               /* over TLS: direct writes by SSL_write */
	BRK_CONN_REFUSED = 1 << 8,           /* TLS, refused: told why, then closed */
	BRK_CONN_FAILED = 1 << 9,            /* its socket failed (and was logged) */
	BRK_CONN_WAITING = 1 << 6,           /* on the waiting-for-durability list */
	BRK_CONN_MONITOR = 1 << 10,          /* MONITOR: on the monitors list */
	BRK_CONN_HANDSHAKE = 1 << 11,        /* TLS, its handshake not finished yet */
	BRK_CONN_UNAUTH = 1 << 12,           /* on the unauthenticated list (conn.c) */
	BRK_CONN_NO_EVICT = 1 << 13,         /* CLIENT NO-EVICT on: maxmemory-clients spares it */
};

/* A key c WATCHes. expired: the key had expired (not yet dropped) when
 * WATCHed; its drop is then no change, as in Redis. */
struct brk_watch {
	struct brk_waitkey *wk;
	bool expired;
};

struct brk_conn {
	struct brk_server *srv;
	struct bufferevent *bev;
	struct event *rev; /* plain sockets: reads bypass bev (see conn.c) */
	int fd;
	uint64_t id;
	unsigned flags;
	char addr[64];  /* peer, "ip:port" */
	char laddr[64]; /* local */
	char *name;     /* CLIENT SETNAME; owned */
	char *lib_name; /* CLIENT SETINFO LIB-NAME; owned */
	char *lib_ver;  /* CLIENT SETINFO LIB-VER; owned */
	struct brk_user *user; /* logged in as; NULL until AUTH (borrowed from srv->users) */
	unsigned db;
	int resp;       /* 2 or 3 */
	struct resp_reader *rd;
	struct resp_buf out;     /* replies held until their batch commits */
	struct resp_writer w;    /* writes into out */
	size_t batch_mark;       /* out.len when this batch began for this conn */
	unsigned batch_replies;  /* replies added since batch_mark */
	/* Replies of this batch that used its transaction, as [start, end)
	 * offsets in out: only these become errors if the batch fails
	 * (SELECT, MULTI, QUEUED... did not touch it and stand). */
	struct {
		size_t start, end;
	} *ranges;
	int nranges, rcap;
	uint64_t ctime_ms;
	uint64_t last_ms;        /* last interaction */
	uint64_t obuf_soft_since; /* when the soft limit was first exceeded */
	char last_cmd[32];
	struct brk_block *blk;   /* non-NULL while blocked */
	int fetch_rounds;        /* fetch.c: fetches its command has waited for in a row */
	/* MULTI/EXEC */
	bool multi;              /* queueing */
	bool multi_dirty;        /* a command was refused while queueing: EXEC aborts */
	bool watch_dirty;        /* a watched key changed: EXEC answers null */
	struct brk_argv *queue;  /* owned copies of the queued commands */
	int nqueue, qcap;
	struct brk_watch *watched;
	int nwatched, watched_cap;
	struct brk_conn *prev, *next;   /* all connections */
	struct brk_conn *held_next;     /* held list */
	struct brk_conn *pending_next;  /* pending-input list */
	struct brk_conn *closing_next;  /* closing list */
	struct brk_conn *waiting_next;  /* waiting list */
	struct brk_conn *monitor_next;  /* monitors list */
	struct brk_conn *unauth_prev, *unauth_next; /* unauthenticated list, oldest first */
	/* Replies in out up to end may go once commit generation gen is
	 * durable (appendfsync always); in order, oldest first. */
	struct {
		uint64_t gen;
		size_t end;
	} marks[4];
	int nmarks;
	uint64_t write_gen; /* the commit generation of its last write */
	uint64_t wait_gen;  /* WAITAOF: this turn's replies wait for it to be durable */
	struct brk_psub *psub; /* pubsub.c: its subscriptions; NULL: none ever */
	/* evict.c: its output counted in srv->clients_mem (held in out, queued
	 * in the bufferevent), and the callback that follows the latter */
	size_t mem_held, mem_queued;
	struct evbuffer_cb_entry *mem_cb;
};

struct brk_cmdstat {
	uint64_t calls, usec, rejected, failed;
	struct brk_hist *hist; /* owned; LATENCY HISTOGRAM, NULL before the first call */
};

struct brk_stats {
	uint64_t start_ms;
	uint64_t total_connections;
	uint64_t rejected_connections;
	uint64_t total_commands;
	uint64_t total_error_replies;
	uint64_t commits;
	uint64_t commit_failures;
	uint64_t batch_commands_total; /* write commands in committed batches */
	uint64_t dirty;                /* changes since start (no RDB: never reset) */
	uint64_t expired_keys;         /* keys dropped because their time passed */
	uint64_t last_commit_ms;
	uint64_t net_input_bytes, net_output_bytes;
	uint64_t ops_sample_ms, ops_sample_cmds, ops_per_sec;
	uint64_t expired_obuf; /* clients closed for their output buffer */
	uint64_t evicted_clients; /* closed by maxmemory-clients (evict.c) */
	uint64_t map_grows;
	uint64_t meta_flush_waits; /* flush-wait-us ran out before a commit came */
	uint64_t gc_rows;
	uint64_t maint_steps;      /* storage_maintain_step()s committed (lmdb-staged) */
	uint64_t policy_dead_lettered; /* rows dead-lettered at their deadline (timer, reads) */
	uint64_t policy_turn_rows_max; /* the most one policy timer turn handled */
	uint64_t acl_denied_auth, acl_denied_cmd, acl_denied_key, acl_denied_channel;
};

/* The latency monitor's events (LATENCY LATEST): commands as Redis splits
 * them, and echd's own storage work. */
enum brk_lat_event {
	BRK_LAT_COMMAND,      /* "command": a command not flagged fast */
	BRK_LAT_FAST_COMMAND, /* "fast-command" */
	BRK_LAT_COMMIT,       /* "commit": a batch's commit, its data flush included */
	BRK_LAT_FLUSH,        /* "flush": the flush that makes a commit durable */
	BRK_LAT_EXPIRE,       /* "expire-cycle": one turn's active expiry */
	BRK_LAT_NEVENTS
};
struct brk_latseries;

/* commandstats of a container's subcommand ("xgroup|create"). */
struct brk_substat {
	char name[48];
	struct brk_cmdstat st;
};
#define BRK_MAX_SUBSTATS 96

/* An error reply counted by prefix for INFO errorstats. */
struct brk_errstat {
	char prefix[32];
	uint64_t count;
};
#define BRK_MAX_ERRSTATS 64

struct brk_waitkey {
	unsigned db;
	size_t len;
	char *name;          /* owned */
	struct brk_conn **waiters; /* arrival order */
	int nwaiters, cap;
	int nokey_waiters;   /* of those, XREADGROUP: answered NOGROUP if the key goes */
	struct brk_conn **watchers; /* WATCH */
	int nwatchers, wcap;
	bool touched;        /* changed in the current batch */
	struct brk_waitkey *hnext;
	struct brk_waitkey *touched_next;
};

struct brk_server {
	struct brk_config cfg;
	struct event_base *base;
	struct storage *st;
	struct evconnlistener *listeners[2 * BRK_MAX_BIND + 1];
	int nlisteners;
	int bound_port;       /* the TCP port actually bound (port 0 picks one) */
	int bound_tls_port;
	struct event *sig_term, *sig_int, *sig_hup, *cron, *fsync_timer;
	bool shutdown;
	int exit_code;
	struct brk_conn *conns;
	uint64_t nconns;
	uint64_t clients_mem; /* evict.c: the output of all clients not yet sent */
	uint64_t mem_total;   /* evict.c: the machine's memory, once a percentage needs it */
	/* Connections not yet past their TLS handshake and login, in accept
	 * order: the cron closes them at their deadline, and a new connection
	 * that finds no room closes the oldest (conn.c). */
	struct brk_conn *unauth, *unauth_tail;
	uint64_t nunauth;
	uint64_t next_client_id;
	/* group commit */
	struct storage_txn *batch;   /* the loop turn's write transaction, or NULL */
	struct stream_cache *xcache; /* the batch's streams as XADDs left them (commit.c) */
	uint64_t batch_writes;       /* write commands merged into batch */
	uint64_t batch_cmds;         /* commands run in this batch */
	uint64_t batch_open_ms;      /* everysec: when the batch began */
	struct brk_conn *held;       /* conns with replies to release */
	struct brk_conn *pending;    /* conns with parsed-but-unrun input */
	struct brk_conn *closing;    /* conns to free at the end of the turn */
	struct brk_conn *waiting;    /* conns with replies waiting for a durable commit */
	uint64_t nwaiting;
	struct event *flush_timer;   /* makes a lone commit durable */
	struct event *durable_ev;    /* the storage's socket: commits answered (commit.c) */
	int durable_fd;              /* durable_ev's (-1: none) */
	struct storage_inflight *inflight; /* commits answered later (NULL: none); borrowed */
	bool durable_watched;        /* replies wait for durable_ev, not a flush */
	struct event *watchdog;      /* WATCHDOG=1 from the loop, when asked */
	bool flush_armed;
	uint64_t rnd;                /* RANDOMKEY's generator state (splitmix64) */
	bool gc_pending;
	bool expire_due;             /* the cron's tick: drop keys whose time passed */
	bool maint_more;             /* commit.c: the storage has more deferred work, idle */
	uint64_t maint_cmds;         /* commit.c: total_commands when last seen changing */
	uint64_t maint_busy_ms;      /* commit.c: when it last changed */
	struct brk_pgroup *policies; /* policy.c: groups with a policy; owned */
	struct event *policy_timer;  /* policy.c: when the first of them has a row due */
	uint64_t policy_timer_at;
	bool policy_rescan;          /* policy.c: look for policy groups under new names */
	uint64_t expire_next_ms;     /* no key expires before this (0: look) */
	uint64_t cmd_ms;             /* the running command's time (EXEC's for its commands) */
	/* the storage's last storage_capacity_admit() answer (commit.c) */
	bool savepoints;             /* room is short: nest every write */
	bool disk_full;              /* commands that add data are refused */
	int disk_full_rc;            /* why: ECHD_ELIMIT (maxdisk) or the file system's error */
	bool fs_full;                /* disk_full because the file system is full */
	struct brk_conn *monitors;   /* MONITOR clients (monitor.c) */
	struct brk_pubsub *pubsub;   /* pubsub.c: channels and their subscribers; owned */
	/* SLOWLOG (slowlog.c), newest first */
	struct brk_slowentry *slowlog_newest, *slowlog_oldest;
	uint64_t slowlog_len, slowlog_next_id;
	/* ACL LOG (acllog.c), newest first */
	struct brk_acllog_entry *acllog_newest, *acllog_oldest;
	uint64_t acllog_len, acllog_next_id;
	/* the latency monitor (latency.c): NULL until an event's first spike */
	struct brk_latseries *latency[BRK_LAT_NEVENTS];
	/* histograms of every commit and flush (INFO persistence), owned; NULL: none yet */
	struct brk_hist *event_hist[BRK_LAT_NEVENTS];
	/* blocking */
	struct brk_seen *seen;    /* seen.c: in-memory seen-times by consumer id */
	size_t seen_size, seen_count;
	struct brk_waitkey **wk_table;
	size_t wk_size, wk_count;
	struct brk_waitkey *touched;
	struct brk_conn *ready_head, *ready_tail;
	uint64_t blocked_clients;   /* by blocking commands (not fetch waits) */
	/* fetching (fetch.c): NULL when the storage holds all it has */
	struct storage_fetch *fetch;
	struct storage_fetch_state fetch_state; /* the last poll's */
	uint64_t fetch_landed;      /* fetch_state.landed when the waiters last ran */
	struct brk_conn *fetch_head; /* clients waiting for a fetch */
	struct event *fetch_ev, *fetch_timer;
	int fetch_fd;
	short fetch_what;
	/* statistics */
	struct brk_stats stats;
	uint64_t syncs_at_reset; /* storage flushes before CONFIG RESETSTAT */
	struct brk_cmdstat *cmdstats; /* indexed like the command table */
	struct brk_substat substats[BRK_MAX_SUBSTATS];
	int nsubstats;
	struct brk_errstat errstats[BRK_MAX_ERRSTATS];
	int nerrstats;
	struct ssl_ctx_st *tls_ctx;  /* for new TLS connections (RESP and HTTP) */
	struct brk_http *http;       /* http.c: the HTTP listener, NULL: none */
	uint64_t metrics_dropped;    /* series /metrics scrapes left out (metrics.c) */
	struct brk_scrape *scrapes;  /* /metrics scrapes in progress (metrics.c), owned */
	struct brk_api *api;         /* the JSON API's state (api.c), owned */
	struct brk_user *users;      /* ACL users; "default" always exists */
	uint64_t acl_generation;
	unsigned users_loaded;
	/* active/standby front ends of a shared store (ha.c) */
	struct storage_ha_state ha; /* the last poll's answer; without HA: active */
	struct event *ha_timer;   /* every ha-retry-ms; NULL without HA */
	bool ha_was_active;       /* the role the broker last acted on */
	uint64_t ha_since_ms;     /* when it began */
	char ha_host[256];        /* this front end's address for clients (ha-announce-ip) */
	int ha_port;              /* ha-announce-port or port; 0: the port bound */
	char ha_myid[41];         /* SENTINEL MYID */
	struct brk_cluster *cluster; /* cluster-enabled yes: the shard map (cluster.h),
				      * owned; NULL: no cluster support */
	int worker;               /* workers.c: 1 + this worker's index; 0: not a worker */
	char *exe_path;
	char *config_file;
	int lock_fd;              /* holds dir/echd.lock while open; 0: none taken */
	/* The unix socket and pidfile this process made (st_ino 0: none): only
	 * these are removed at exit, and only if still the same file. */
	struct brk_made_file {
		dev_t dev;
		ino_t ino;
	} made_socket, made_pidfile;
	pid_t pid;
};

/* ------------------------------------------------------------------------
 * Server internals shared by the modules
 * ---------------------------------------------------------------------- */

/* Returns 0; BRK_INIT_CONFIG (2, echd's exit status for it) when the
 * configuration cannot work (ACL file, TLS files, nothing to listen on);
 * -1 on other failures (a port in use, the storage, the data directory). */
#define BRK_INIT_CONFIG 2
int brk_server_init(struct brk_server *srv);
int brk_server_run(struct brk_server *srv);
void brk_server_finish(struct brk_server *srv);

/* Opens the batch write transaction if needed; returns it or NULL with *rc.
 * What XADDs kept in the stream cache is written first (brk_xcache_flush),
 * so that the caller sees every row as it stands. */
struct storage_txn *brk_batch_txn(struct brk_server *srv, int *rc);
/* The same, leaving the stream cache as it is: for a command that uses it
 * (BRK_CMD_XCACHE) and runs straight on the batch. */
struct storage_txn *brk_batch_txn_cached(struct brk_server *srv, int *rc);
/* Writes what the stream cache keeps into the batch. On failure the batch
 * is aborted (every reply it held becomes an error) and the error returned. */
int brk_xcache_flush(struct brk_server *srv);
/* A transaction to read through from outside a command (the HTTP side),
 * which never opens the batch for a read: the batch when a command of this
 * turn has opened it, else a read-only transaction of its own. Returns it
 * (end it with brk_view_end()) or NULL with *rc (a standby front end: as
 * brk_batch_txn()). */
struct storage_txn *brk_view_begin(struct brk_server *srv, int *rc);
/* Ends what brk_view_begin() returned: aborts a read transaction, leaves
 * the batch to its commit. NULL is a no-op. */
void brk_view_end(struct brk_server *srv, struct storage_txn *t);
/* Commits the batch now (mid-turn, e.g. before growing the map). On failure
 * every reply held for the batch becomes an error reply. */
int brk_batch_commit(struct brk_server *srv);

/* Logs a command that ran duration_us in SLOWLOG if it was slow enough. */
void brk_slowlog_push(struct brk_server *srv, struct brk_conn *c, const struct brk_cmd *cmd, int argc,
	const struct resp_arg *argv, uint64_t duration_us);
void brk_slowlog_reset(struct brk_server *srv);
/* ACL LOG: why the rules refused something, and where. */
enum { BRK_ACLLOG_AUTH, BRK_ACLLOG_COMMAND, BRK_ACLLOG_KEY, BRK_ACLLOG_CHANNEL };
enum { BRK_ACLLOG_CTX_TOPLEVEL, BRK_ACLLOG_CTX_MULTI };
/* Logs a refusal caused by c: object is the command's full name, the key,
 * or for a failed login the command as typed (AUTH, HELLO); user the user's
 * name, or the one a login tried. */
void brk_acllog_add(struct brk_server *srv, struct brk_conn *c, int reason, int context,
	const void *object, size_t olen, const void *user, size_t ulen);
/* ACL LOG [count | RESET]. */
void brk_acllog_reply(struct brk_ctx *x);
void brk_acllog_reset(struct brk_server *srv);
/* Records a command's run in its histogram and, when it took at least
 * latency-monitor-threshold ms, as a spike of the monitor. */
void brk_latency_command(struct brk_server *srv, struct brk_cmdstat *stat,
	const struct brk_cmd *cmd, uint64_t duration_us);
/* Records a spike of event if it took at least latency-monitor-threshold ms. */
void brk_latency_sample(struct brk_server *srv, int event, uint64_t ms);
/* Records a commit or a flush that took us: in its histogram, and as above. */
void brk_latency_storage(struct brk_server *srv, int event, uint64_t us);
/* INFO persistence: the percentiles of commits and flushes. */
void brk_latency_storage_info(struct brk_server *srv, struct resp_buf *b);
/* INFO latencystats: the lines of every command with a histogram. */
void brk_latency_info(struct brk_server *srv, struct resp_buf *b);
/* Frees every command's, commit's and flush's histogram (CONFIG RESETSTAT, shutdown). */
void brk_latency_reset_hists(struct brk_server *srv);
/* Frees the monitor's series (shutdown). */
void brk_latency_free(struct brk_server *srv);
/* Sets latency-tracking-info-percentiles; NULL, or Redis' reason for
 * refusing them (a word not a number, one out of 0-100, too many). */
const char *brk_latency_parse_pcts(struct brk_config *cfg, int argc, char **argv);
/* Formats them as CONFIG GET shows them ("50 99 99.9"). */
void brk_latency_format_pcts(const struct brk_config *cfg, char *buf, size_t len);
/* Whether argument i of a command holds a secret: SLOWLOG and MONITOR show
 * "(redacted)" instead, as Redis does. */
bool brk_arg_secret(const struct brk_cmd *cmd, int argc, const struct resp_arg *argv, int i);
/* Whether a command is an admin command to Redis, which flags some
 * subcommands apart from their container (CLIENT LIST is, ACL WHOAMI and
 * every HELP are not). */
bool brk_cmd_admin(const struct brk_cmd *cmd, int argc, const struct resp_arg *argv);
/* Shows a command that ran to the MONITOR clients (not admin commands). */
void brk_monitor_feed(struct brk_conn *c, const struct brk_cmd *cmd, int argc,
	const struct resp_arg *argv);
/* Takes c off the monitors (RESET, closing). */
void brk_monitor_remove(struct brk_conn *c);

/* pubsub.c: channels, patterns, shard channels */
/* Channels, patterns and shard channels c is subscribed to, in all. */
int brk_pubsub_subscriptions(const struct brk_conn *c);
void brk_pubsub_counts(const struct brk_conn *c, int *channels, int *patterns, int *shard);
/* INFO: channels, patterns and shard channels with subscribers. */
void brk_pubsub_stats(struct brk_server *srv, uint64_t *channels, uint64_t *patterns,
	uint64_t *shard);
/* Unsubscribes c from everything (RESET, closing). */
void brk_pubsub_leave_all(struct brk_conn *c);
void brk_pubsub_finish(struct brk_server *srv);
/* PUBLISH from the server itself (ha.c's +switch-master); borrows both.
 * Returns the messages queued. */
long long brk_pubsub_publish(struct brk_server *srv, const char *channel, const char *msg);
/* The argv index of the first channel of a request u may not use, or -1. */
int brk_pubsub_denied_channel(const struct brk_user *u, const struct brk_cmd *cmd, int argc,
	const struct resp_arg *argv);
/* After an ACL change: closes subscribers whose user may no longer use a
 * channel or pattern they are subscribed to. */
void brk_pubsub_acl_changed(struct brk_server *srv);
/* Counts a write command of c into the batch, whose generation c's next
 * WAITAOF waits for. */
void brk_batch_wrote(struct brk_server *srv, struct brk_conn *c);
/* Aborts the batch: every reply held for it becomes an error. */
void brk_batch_abort(struct brk_server *srv, int rc);
/* Grows the storage map after a full map; returns 0 or ECHD_ELIMIT (also
 * 0, doing nothing, for a storage without the capacity interface). */
int brk_storage_grow(struct brk_server *srv);
/* The storage's capacity figures for INFO and the HTTP side; without the
 * capacity interface, what a store without bounds shows: map_size
 * UINT64_MAX, the rest 0. */
void brk_storage_capacity(struct brk_server *srv, struct storage_capacity_stat *out);
/* Queues the blocked clients of keys changed in the batch to run again. */
void brk_wake_touched(struct brk_server *srv);

/* seen.c: a consumer's seen-time when it is all a command changed. */
void brk_seen_note(struct brk_server *srv, uint64_t cid, uint64_t ms);
/* The later of stored and what was noted for cid. */
uint64_t brk_seen_get(const struct brk_server *srv, uint64_t cid, uint64_t stored);
void brk_seen_clear(struct brk_server *srv);
/* Queues c to be closed at the end of the loop turn. */
void brk_conn_close_asap(struct brk_conn *c);
/* Queues c to run its buffered requests in the next turn. */
void brk_conn_mark_pending(struct brk_conn *c);

/* stream_lookup() for a command: a key whose expiry time passed is not
 * found, and a write command drops it first (so it can make a new one).
 * Borrows key. */
int brk_lookup(struct brk_ctx *x, const struct st_buf *key, struct stream_meta *m);
/* The same in database db (MOVE's destination). */
int brk_lookup_in(struct brk_ctx *x, unsigned db, const struct st_buf *key, struct stream_meta *m);
/* Tells the cron that a key of the batch expires at when_ms. */
void brk_expire_note(struct brk_server *srv, uint64_t when_ms);
/* Says key (db, name) changed in this batch: its waiters run after commit. */
void brk_signal_key(struct brk_server *srv, unsigned db, const void *name, size_t len);
/* The same for a key dropped because it expired. */
void brk_signal_expired(struct brk_server *srv, unsigned db, const void *name, size_t len);
/* Says every key of db (or all dbs) changed (FLUSHDB/FLUSHALL). */
void brk_signal_db(struct brk_server *srv, unsigned db, bool all);

/* Blocks c on keys until timeout_ms (0 = forever); takes a copy of req. */
int brk_block(struct brk_ctx *x, int nkeys, const struct resp_arg *keys, uint64_t timeout_ms,
	int req_argc, const struct resp_arg *req_argv);
/* For a reader x blocked by brk_block() (XREADGROUP CLAIM): also run its
 * command again at at_ms (a time of brk_now_ms()), when a pending entry
 * becomes claimable; a later call moves that time. Nothing when the
 * block's timeout comes first. Returns 0 or -ENOMEM. */
int brk_block_claim_at(struct brk_ctx *x, uint64_t at_ms);
/* Blocks c on no key until timeout_ms (0 = forever): WAIT and WAITAOF,
 * whose replicas never come. kind is BRK_BLOCK_WAIT or _WAITAOF. */
int brk_block_wait(struct brk_ctx *x, int kind, bool numlocal, uint64_t timeout_ms);
void brk_unblock(struct brk_conn *c);
/* Queues blocked client c to run its command again in the next turn. */
void brk_block_ready(struct brk_server *srv, struct brk_conn *c);

/* fetch.c: commands waiting for rows the storage is fetching (storage.h's
 * fetch interface). brk_fetch_init() after the storage and the loop are
 * up: 0 or -ENOMEM. brk_fetch_turn() at the end of each turn, with no
 * batch open: polls the storage, and queues the waiting commands to run
 * again once a fetch landed. brk_fetch_park() parks x's command (its
 * reply not written, its work undone): 0, ECHD_ELIMIT when it has waited
 * too many rounds already, or -ENOMEM. brk_fetch_forget() takes a
 * client whose block ends off the list. */
int brk_fetch_init(struct brk_server *srv);
void brk_fetch_finish(struct brk_server *srv);
void brk_fetch_turn(struct brk_server *srv);
int brk_fetch_park(struct brk_ctx *x);
void brk_fetch_forget(struct brk_conn *c);
/* The storage's miss count (0 without fetching), and whether a read since
 * brk_fetch_misses() gave m0 was answered "not here yet": work that met
 * one is undone even when it did not pass the miss on, as its writes were
 * made from what it could not read. */
uint64_t brk_fetch_misses(const struct brk_server *srv);
bool brk_fetch_missed(const struct brk_server *srv, uint64_t m0);
/* The blocked command as its client sent it. */
static inline const struct brk_argv *
brk_block_argv(const struct brk_block *b)
{
	return b->orig.argc > 0 ? &b->orig : &b->req;
}
/* Unblocks c with the reply its timeout gives, or with the error reply
 * error (CLIENT UNBLOCK's, READONLY), and counts the call; the caller has
 * c run its pipeline next. */
void brk_block_end(struct brk_conn *c, const char *error);
/* WAITAOF's local count for c: 1 when its writes are on disk by the time
 * the reply goes out. With everysec and want, holds this turn's replies
 * until they are (and has the flush done now, not at the next second). */
int brk_waitaof_local(struct brk_conn *c, bool want);

/* WATCH: registers c on (db, key); brk_signal_key() marks it dirty. expired:
 * the key exists but has expired (see struct brk_watch). */
int brk_watch_key(struct brk_conn *c, const void *name, size_t len, bool expired);
void brk_unwatch_all(struct brk_conn *c);
/* Drops c's MULTI state (queue and watches). */
void brk_multi_reset(struct brk_conn *c);
/* Queues a command while in MULTI (copied); replies +QUEUED or an error. */
void brk_multi_queue(struct brk_ctx *x);

/* Connections */
struct brk_conn *brk_conn_create(struct brk_server *srv, int fd, const char *addr,
	const char *laddr, bool is_unix, bool is_tls);
void brk_conn_destroy(struct brk_conn *c);
/* Takes c off the unauthenticated list once its handshake is over and it
 * is logged in; a no-op otherwise. */
void brk_conn_admit(struct brk_conn *c);
/* Takes c off the unauthenticated list whatever its state (a connection
 * refused over TLS, which must not be closed to make room). */
void brk_conn_unauth_remove(struct brk_conn *c);
/* Runs the requests buffered in c until it blocks, empties, or the batch is full. */
void brk_conn_process(struct brk_conn *c);
/* Runs one request; returns after its reply is written to c->out. */
void brk_conn_execute(struct brk_conn *c, int argc, struct resp_arg *argv, bool from_block);
/* Runs one command EXEC queued, in EXEC's transaction txn, through the
 * same dispatcher as a request: the ACL is checked again (the rules may
 * have changed since it was queued: Redis' NOPERM text, ACL LOG context
 * multi), then it runs with the bookkeeping of any command (stats, latency,
 * SLOWLOG, MONITOR). count: false when EXEC runs its transaction again
 * after the map grew and this command was counted the first time. Sets
 * *wrote when it wrote, adds its changes to *dirty. Returns 0 (its reply
 * written), or a storage error that fails the whole transaction. Borrows
 * argv. */
int brk_conn_run_queued(struct brk_conn *c, struct storage_txn *txn, int argc,
	struct resp_arg *argv, bool count, bool *wrote, uint64_t *dirty);
void brk_conn_mark_held(struct brk_conn *c);
/* Sends the first upto bytes of c->out to the socket (they are durable). */
void brk_conn_flush(struct brk_conn *c, size_t upto);
/* The hard output limit of c's class (pubsub when subscribed), 0: none. */
size_t brk_conn_obuf_hard(const struct brk_conn *c);
/* Formats a CLIENT LIST line for c into b. */
void brk_conn_describe(struct brk_conn *c, struct resp_buf *b);

/* evict.c: maxmemory-clients. The bound in bytes (0: none). */
uint64_t brk_evict_limit(struct brk_server *srv);
/* Recounts c's output after it grew (a flush, a message) and closes the
 * biggest clients while all clients' output is over the bound. */
void brk_evict_note(struct brk_conn *c);
/* Takes c's output out of the count (it is closing). */
void brk_evict_forget(struct brk_conn *c);
/* The evbuffer callback on c's bufferevent output (arg: c): follows what
 * waits there as libevent adds and drains it. */
void brk_evict_obuf_cb(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg);
/* Client names and CLIENT SETINFO values: printable ASCII without spaces,
 * so that CLIENT LIST's fields stay split by spaces. */
bool brk_client_attr_valid(const struct resp_arg *a);
/* Replaces *dst (owned) with a copy of a, or NULL when a is empty.
 * Returns 0, or -ENOMEM with *dst as it was. */
int brk_client_attr_set(char **dst, const struct resp_arg *a);

/* acl.c: users and permissions */
int brk_acl_init(struct brk_server *srv, char *err, size_t errlen);
void brk_acl_finish(struct brk_server *srv);
void brk_acl_requirepass_changed(struct brk_server *srv);
struct brk_user *brk_acl_find(struct brk_server *srv, const char *name, size_t len);
/* Returns the user when name/password match and it is enabled, else NULL. */
struct brk_user *brk_acl_check(struct brk_server *srv, const char *user, size_t ulen,
	const char *pass, size_t plen);
bool brk_acl_nopass_default(struct brk_server *srv);
bool brk_acl_cmd_allowed(const struct brk_user *u, const struct brk_cmd *cmd, int argc,
	const struct resp_arg *argv);
bool brk_acl_key_allowed(const struct brk_user *u, const void *key, size_t len);
/* Whether u may use channel name; pattern: name is a PSUBSCRIBE pattern,
 * allowed only when it is one of u's own patterns (or u has all). */
bool brk_acl_channel_allowed(const struct brk_user *u, const void *name, size_t len,
	bool pattern);
/* The argv index of the first key of a request u may not touch, or -1. */
int brk_acl_denied_key(const struct brk_user *u, const struct brk_cmd *cmd, int argc,
	const struct resp_arg *argv);
const char *brk_user_name(const struct brk_user *u);
struct brk_user *brk_user_next(const struct brk_user *u);
/* Logs c in as user if pass matches; replies WRONGPASS and returns -1 if not. */
int brk_auth_login(struct brk_ctx *x, const struct resp_arg *user, const struct resp_arg *pass);
bool brk_user_enabled(const struct brk_user *u);
int brk_acl_setuser(struct brk_server *srv, const char *name, size_t nlen, int nrules,
	const struct resp_arg *rules, char *err, size_t errlen);
int brk_acl_deluser(struct brk_server *srv, const char *name, size_t len);
void brk_acl_describe(const struct brk_user *u, struct resp_buf *b);
/* ACL GETUSER's map of u: flags, passwords, commands, keys, channels, selectors. */
void brk_acl_getuser_reply(struct resp_writer *w, const struct brk_user *u);
int brk_acl_load(struct brk_server *srv, char *err, size_t errlen);
int brk_acl_save(struct brk_server *srv, char *err, size_t errlen);
int brk_acl_categories(const char *const **out);
/* Whether the categories acl ("@read @stream", a command's or a subcommand's) hold cat. */
bool brk_acl_in_category(const char *acl, const char *cat, size_t len);
bool brk_acl_known_category(const char *cat, size_t len);

/* tls.c: TLS for client connections */
int brk_tls_init(struct brk_server *srv);
/* Builds a context from the current files; keeps the old one on failure. */
int brk_tls_reload(struct brk_server *srv, char *err, size_t errlen);
void brk_tls_finish(struct brk_server *srv);
struct bufferevent *brk_tls_bufferevent(struct brk_server *srv, int fd);
void brk_tls_describe_error(struct bufferevent *bev, char *buf, size_t len);
int brk_tls_peer_name(struct bufferevent *bev, char *buf, size_t len);
ssize_t brk_tls_write_now(struct bufferevent *bev, const char *addr, const void *p, size_t n);

/* systemd.c: service manager integration */
#define BRK_SD_LISTEN_FDS_START 3
/* Sends a notification ("READY=1", ...) to $NOTIFY_SOCKET; 0 when none. */
int brk_sd_notify(const char *state);
/* From now on, notifications go to fd (a datagram socket; borrowed) as
 * "<worker>:<state>", for a supervisor to relay (workers.c). */
void brk_sd_notify_via(int fd, int worker);
/* The watchdog interval asked for, in microseconds, or 0. */
uint64_t brk_sd_watchdog_usec(void);
/* Sockets passed by socket activation (fds from 3), or 0, or -errno. */
int brk_sd_listen_fds(void);
/* True when stderr is connected to the journal (log with <N> priorities). */
bool brk_sd_journal_stderr(void);

/* Replies shared by handlers */
/* The error text for a storage failure rc (maxdisk named when full). */
void brk_error_text(struct brk_server *srv, int rc, char *buf, size_t len);
void brk_reply_error_rc(struct brk_ctx *x, int rc);
void brk_count_error(struct brk_server *srv, const char *msg);
/* The commandstats line a request counts on: its subcommand's for a
 * container (CONFIG GET -> "config|get"), else its command's. */
struct brk_cmdstat *brk_stat_for(struct brk_server *srv, const struct brk_cmd *cmd, int argc,
	const struct resp_arg *argv);
/* Counts the reply at mark in INFO's error statistics if it is an error. */
bool brk_count_reply_error(struct brk_server *srv, const struct resp_buf *out, size_t mark);

/* Parsing helpers: return true and set *out, or reply the Redis error and return false. */
bool brk_arg_ll(struct brk_ctx *x, const struct resp_arg *a, long long *out);
/* A timeout in milliseconds, as Redis reads one (BLOCK, WAIT); false after
 * replying the error. */
bool brk_arg_timeout(struct brk_ctx *x, const struct resp_arg *a, long long *ms);
bool brk_arg_eq(const struct resp_arg *a, const char *s); /* case-insensitive */
bool brk_glob_match(const char *pat, size_t plen, const char *s, size_t slen, bool nocase);
bool brk_str2ll(const char *s, size_t len, long long *out);

#define BRK_ERR_NOKEY_XGROUP                                                                       \
	"ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you may want "  \
	"to use the MKSTREAM option to create an empty stream automatically."
/* Looks up the stream and its group, replying nokey or NOGROUP (XGROUP's
 * text) when one is missing: 0 found, 1 replied, or an error. */
int brk_lookup_group(struct brk_ctx *x, const struct st_buf *key, const struct st_buf *gname,
	const char *nokey, struct stream_meta *m, struct group_meta *g);

/* A pending row about to be handed to c (cmd_group.c): its entry's fields
 * (borrowed), or ECHD_ENOTFOUND after dropping the row of an entry deleted
 * meanwhile (XAUTOCLAIM's rule; c's copy adjusted). */
int brk_pel_entry(struct brk_ctx *x, const struct stream_meta *m, struct group_meta *g,
	struct consumer_meta *c, const struct pel_row *r, struct st_buf *fields);
/* Hands row r to c now: owner c, delivery time now, one more delivery. */
int brk_pel_take(struct brk_ctx *x, struct group_meta *g, struct consumer_meta *c,
	const struct pel_row *r, uint64_t now);

/* Group policies (policy.c). */
int brk_policy_load(struct brk_server *srv);
void brk_policy_finish(struct brk_server *srv);
int brk_xgroup_setpolicy(struct brk_ctx *x);
/* After RENAME, MOVE or COPY: the policy groups are looked for again (by
 * the timer, at once; nothing when no group has a policy). */
void brk_policy_rescan(struct brk_server *srv);
/* XREADGROUP '>' of a group with a policy, before the consumer is touched:
 * when the group may have rows due, dead-letters those past MAXDELIVER (up
 * to policy-batch-rows; g changes, *changed) and collects up to count (0:
 * all) of the others into *due (owned: pel_due_finish()), by deadline.
 * Returns 1 after such a look, 0 when there was none, or an error. */
int brk_policy_prepare(struct brk_ctx *x, const struct st_buf *key, const struct st_buf *gname,
	const struct stream_meta *m, struct group_meta *g, uint64_t now, uint64_t count,
	struct pel_due *due, bool *changed);
/* Hands up to count (0: all) of due's rows to c in the plain entry shape,
 * within budget (NULL: none; XREAD's MAXCOUNT/MAXSIZE), and records the
 * group's next due time. */
struct brk_read_budget;
int brk_policy_serve(struct brk_ctx *x, const struct st_buf *key, const struct st_buf *gname,
	const struct stream_meta *m, struct group_meta *g, struct consumer_meta *c,
	const struct pel_due *due, uint64_t count, uint64_t now, size_t *n,
	struct brk_read_budget *budget);
/* After new entries were delivered in g: their deadline is noted. */
int brk_policy_delivered(struct brk_ctx *x, const struct st_buf *key, const struct st_buf *gname,
	const struct group_meta *g, uint64_t now);
/* The COUNT a '>' read may take of new entries under MAXACKPENDING (0:
 * all), or UINT64_MAX when it may take none. */
uint64_t brk_policy_room(const struct group_meta *g, uint64_t count);
/* After XNACK released rows of g, available at at (0: now): '>' readers
 * look for them then. */
int brk_policy_released(struct brk_ctx *x, const struct resp_arg *key, const struct st_buf *gname,
	const struct group_meta *g, uint64_t at);
/* After acks in g (pending was before): wakes readers waiting for room. */
void brk_policy_acked(struct brk_ctx *x, const struct st_buf *key, const struct group_meta *g,
	uint64_t before);
/* A batch was not committed (commit.c): what the timer and readers saw in
 * it did not happen, so every policy group is looked at again soon. */
void brk_policy_batch_failed(struct brk_server *srv);

/* Stream helpers shared by cmd_stream.c and cmd_group.c */
void brk_reply_id(struct resp_writer *w, const struct stream_id *id);
void brk_reply_entry(struct resp_writer *w, const struct stream_id *id,
	const struct st_buf *fields);
/* An entry's [field, value, ...] array. */
void brk_reply_fields(struct resp_writer *w, const struct st_buf *fields);
bool brk_parse_strict_id(struct brk_ctx *x, const struct resp_arg *a, uint64_t missing_seq,
	struct stream_id *out);
bool brk_parse_interval_id(struct brk_ctx *x, const struct resp_arg *a, uint64_t missing_seq,
	struct stream_id *out, bool *exclusive);
int brk_last_valid_id(struct storage_txn *t, const struct stream_meta *m, struct stream_id *out);
/* XREAD/XREADGROUP options up to STREAMS; replies the error and returns
 * false when they are wrong. */
struct brk_read_opts {
	long long count, timeout; /* timeout -1: no BLOCK */
	int streams_arg, nstreams;
	const struct resp_arg *group, *consumer;
	bool noack;
	long long claim; /* XREADGROUP CLAIM min-idle-time; -1: none */
	long long maxcount, maxsize; /* 8.10 caps over all streams; 0: none */
};
bool brk_parse_read_opts(struct brk_ctx *x, bool group, struct brk_read_opts *ro);
/* What is left of MAXCOUNT and MAXSIZE while one XREAD/XREADGROUP reply is
 * built: entries counted across all its streams, bytes from the reply's
 * first byte. */
struct brk_read_budget {
	uint64_t maxcount, maxsize; /* 0: no cap */
	size_t base;                /* reply length before the command's reply */
	uint64_t emitted;           /* entries replied so far, all streams */
};
void brk_read_budget_init(struct brk_read_budget *b, const struct brk_read_opts *ro,
	const struct resp_writer *w);
/* True when no further entry may go into the reply: MAXCOUNT entries are
 * in, or MAXSIZE bytes are and at least one entry (one entry larger than
 * MAXSIZE still goes out, so a reader always progresses). */
bool brk_read_budget_spent(const struct brk_read_budget *b, const struct resp_writer *w);
/* A deletion policy word (KEEPREF, DELREF, ACKED): true and *out. */
bool brk_parse_ref_policy(const struct resp_arg *a, enum stream_ref_policy *out);
/* stream_trim() under a deletion policy (cmd_delpol.c): the groups are
 * loaded, asked and updated when the policy needs them. */
int brk_trim_with_policy(struct storage_txn *t, struct stream_meta *m, struct stream_trim *tr,
	enum stream_ref_policy policy, uint64_t *removed);
int brk_reply_full_groups(struct brk_ctx *x, const struct stream_meta *m, uint64_t count);
int brk_xinfo_groups(struct brk_ctx *x);
int brk_xinfo_consumers(struct brk_ctx *x);
/* For a container (XGROUP, XINFO, CONFIG, CLIENT, COMMAND, ACL): replies
 * the error and returns false when the subcommand is unknown or has the
 * wrong arity (other commands: true). Handlers may rely on it. */
bool brk_subcommand_ok(struct brk_ctx *x, const struct brk_cmd *cmd);
/* Redis' error for a known subcommand whose arguments its handler refuses
 * (its arity passed): "unknown subcommand or wrong number of arguments for
 * '<sub>'. Try <HELP> HELP." */
void brk_reply_subcommand_syntax(struct brk_ctx *x, const char *help);
/* A HELP reply: the lines as simple strings. */
void brk_reply_help(struct resp_writer *w, const char *const *lines, size_t n);
#define BRK_REPLY_HELP(w, lines) brk_reply_help((w), (lines), sizeof(lines) / sizeof((lines)[0]))
/* The arity of container cmd's subcommand sub (counting the container's
 * name), or 0 when cmd has no such subcommand. */
int brk_subcommand_arity(const struct brk_cmd *cmd, const struct resp_arg *sub);
/* Whether sub is one of cmd's subcommands (true for a command without any). */
bool brk_subcommand_known(const struct brk_cmd *cmd, const struct resp_arg *sub);
/* Whether cmd (argv: its arguments, the name first) is a write that may add
 * state (keys, entries, groups, consumers, pending entries): one that a
 * full disk refuses, to keep the reserve for the writes that make room
 * (BRK_CMD_FREES, and XGROUP DESTROY and DELCONSUMER). */
bool brk_cmd_adds_data(const struct brk_cmd *cmd, int argc, const struct resp_arg *argv);
/* The i-th subcommand name of container cmd (lower case, static), or NULL past the last. */
const char *brk_subcommand_at(const struct brk_cmd *cmd, size_t i);
/* FLUSHDB/FLUSHALL: marks the watchers of watched keys that exist. */
int brk_watch_flush(struct brk_server *srv, struct storage_txn *t, unsigned db, bool all);

/* ha.c: active and standby front ends */
/* This front end's announced address, from the options (before storage_open). */
void brk_ha_announce(struct brk_server *srv);
/* After storage_open and the event base: the first poll and the timer. */
int brk_ha_init(struct brk_server *srv);
void brk_ha_finish(struct brk_server *srv);
/* This front end's role: the storage's HA interface's (as of the last poll
 * or commit; no round trip), or active when it has none. */
enum storage_role brk_ha_role(const struct brk_server *srv);
/* Whether this front end serves: brk_ha_role() is active. */
bool brk_ha_serving(const struct brk_server *srv);
/* After a failed commit or abort: if the storage says this front end is
 * no longer active, the loop's next step answers the blocked clients. */
void brk_ha_check(struct brk_server *srv);
/* Before reads are answered from the store: 0 while this front end is
 * known to be the active one (storage_ha_confirm(): may cost a round
 * trip), else ECHD_ESTANDBY, ECHD_EOFFLINE or another error, after which
 * brk_ha_check() has been called. 0 without HA. */
int brk_ha_confirm(struct brk_server *srv);
/* INFO replication's lines. */
void brk_ha_info(struct brk_server *srv, struct resp_buf *b);
/* 40 random hex digits and a NUL, as Redis' run and node ids (SENTINEL
 * MYID, a cluster node id), from /dev/urandom when it can be read. */
void brk_random_id(char out[41]);

#define BRK_ERR_READONLY "READONLY You can't write against a standby echd."
#define BRK_ERR_SYNTAX   "ERR syntax error"
#define BRK_ERR_NOTINT   "ERR value is not an integer or out of range"
#define BRK_ERR_BADID    "ERR Invalid stream ID specified as stream command argument"

#endif
