/* config.h - the broker's options: their values in force (struct
 * brk_config), and reading them from the command line, a file and CONFIG SET.
 * The option table itself, with each option's default, range and help, is in
 * config.c. Included through broker.h.
 */
#ifndef ECHD_BROKER_CONFIG_H
#define ECHD_BROKER_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#define BRK_MAX_BIND 16

/* The longest line of a config file, and so of an option's value: the
 * loader refuses a longer line, and CONFIG SET a value that would not fit
 * in one with its name (BRK_CONFIG_VALUE_MAX), so what CONFIG GET shows and
 * CONFIG REWRITE writes is never cut. */
#define BRK_CONFIG_LINE_MAX  4096
#define BRK_CONFIG_VALUE_MAX (BRK_CONFIG_LINE_MAX - 128)

/* How many percentiles latency-tracking-info-percentiles may list. */
#define BRK_MAX_LATENCY_PCTS 16

struct brk_config {
	char *bind[BRK_MAX_BIND];
	int nbind;
	int port;
	char *unixsocket;
	unsigned unixsocketperm;
	char *dir;
	char *logfile;
	int loglevel; /* enum echd_log_level */
	char *pidfile;
	int databases;
	long long maxclients;
	long long timeout; /* seconds idle before a client is closed; 0 = never */
	long long tls_handshake_timeout; /* seconds from accept to the end of the handshake */
	long long auth_timeout;  /* seconds from accept to a login, when one is needed */
	long long tcp_backlog;
	long long tcp_keepalive;
	long long obuf_hard; /* client-output-buffer-limit normal: hard bytes */
	long long obuf_soft;
	long long obuf_soft_secs;
	long long obuf_pubsub_hard; /* client-output-buffer-limit pubsub: subscribers */
	long long obuf_pubsub_soft;
	long long obuf_pubsub_soft_secs;
	long long maxmemory_clients;    /* bytes, when maxmemory_clients_pct is 0; 0 = none */
	int maxmemory_clients_pct;      /* 1..100: percent of the machine's memory */
	long long query_buf_limit;   /* client-query-buffer-limit */
	long long proto_max_bulk_len;
	long long proto_max_multibulk_len;
	long long proto_inline_max_size;
	long long stream_node_max_entries;
	long long stream_node_max_bytes;
	long long stream_idmp_duration; /* a new stream's IDMP-DURATION, seconds */
	long long stream_idmp_maxsize;  /* a new stream's IDMP-MAXSIZE */
	int appendfsync;         /* BRK_FSYNC_* */
	long long map_size;      /* initial LMDB map size in bytes */
	long long maxdisk;       /* map growth limit in bytes; 0 = none */
	char *storage_backend;   /* "storage" (alias storage-backend) */
	long long storage_stage_size; /* lmdb-staged: the staging table's bound, bytes */
	/* a store on a server (postgres) and its front ends (ha.c) */
	char *storage_url;       /* a secret: CONFIG GET and the log hide its password */
	char *storage_pg_schema;
	long long storage_timeout_ms;
	long long storage_pg_depth;   /* postgres: commits in flight */
	long long storage_cache_size; /* postgres: bytes of the partial cache; 0: all */
	char *ha_name;
	char *ha_announce_ip;    /* "": the first bind address */
	long long ha_announce_port; /* 0: port */
	long long ha_retry_ms;
	long long ha_lease_ms;   /* 0: none */
	long long ha_reconnect_max_ms; /* postgres: the reconnect back-off's cap */
	bool cluster_enabled;    /* the Redis Cluster protocol (cluster.h): postgres only */
	long long cluster_shards; /* shards the slots are cut into (cluster.h) */
	long long cluster_shards_per_node; /* > 1: worker processes (workers.c) */
	long long cluster_node_timeout; /* ms; 0: brk_config_node_timeout() derives it */
	char cluster_node[41];   /* not an option: this front end's cluster node id,
				  * read at start-up (server.c), handed to the engine */
	long long batch_max_commands; /* commands in one group commit */
	long long batch_max_reply_bytes; /* one connection's replies per loop turn */
	long long slowlog_log_slower_than; /* microseconds; -1 = off */
	long long slowlog_max_len;
	long long acllog_max_len;     /* ACL LOG entries kept */
	bool latency_tracking;              /* per-command histograms */
	long long latency_monitor_threshold; /* ms; 0 = the latency monitor is off */
	double latency_pcts[BRK_MAX_LATENCY_PCTS]; /* INFO latencystats' percentiles */
	int nlatency_pcts;
	long long gc_batch_rows;      /* rows of deleted streams removed per batch */
	long long policy_batch_rows;  /* rows the policy timer dead-letters per loop turn */
	long long active_expire_keys; /* expired keys dropped per turn; 0 = lazily only */
	long long flush_wait_us;      /* wait for a next commit before flushing alone */
	long long multi_max_commands; /* commands one MULTI may queue */
	bool daemonize;               /* accepted, must be no */
	char *requirepass;            /* the default user's password */
	char *aclfile;
	bool protected_mode;          /* no password: loopback and unix clients only */
	int tls_port;                 /* 0: no TLS listener */
	char *tls_cert_file, *tls_key_file, *tls_key_file_pass;
	char *tls_ca_cert_file, *tls_ca_cert_dir;
	int tls_auth_clients;         /* BRK_TLS_AUTH_* */
	int tls_auth_clients_user;    /* BRK_TLS_USER_*: log mutual-TLS clients in by CN */
	char *tls_protocols, *tls_ciphers, *tls_ciphersuites;
	bool tls_prefer_server_ciphers;
	bool tls_session_caching;
	/* HTTP (http.c) and /metrics (metrics.c) */
	long long http_port;          /* 0: no HTTP listener */
	char *http_bind;              /* addresses, space separated */
	bool http_tls;                /* HTTPS with the tls-* certificate */
	long long http_maxclients;
	long long http_max_header_size;
	long long http_max_body_size;
	long long http_timeout;       /* seconds a request may take to arrive */
	long long metrics_max_series; /* per-stream, group and consumer series per scrape */
	/* the JSON API and console (api.c) */
	long long http_api_max_page;      /* items one /api/ request lists at most */
	long long http_sample_interval;   /* seconds between two samples of the groups */
	long long http_sample_max_groups; /* groups sampled at most */
};

enum { BRK_FSYNC_ALWAYS, BRK_FSYNC_EVERYSEC };
enum { BRK_TLS_AUTH_YES, BRK_TLS_AUTH_NO, BRK_TLS_AUTH_OPTIONAL };
enum { BRK_TLS_USER_OFF, BRK_TLS_USER_CN };

void brk_config_defaults(struct brk_config *cfg);
void brk_config_finish(struct brk_config *cfg);
/* Applies "name value..." (argv without the leading dashes). Returns 0 or
 * writes a message naming the option into err and returns -1. from_set
 * rejects options that cannot change at run time. */
int brk_config_apply(struct brk_config *cfg, int argc, char **argv, bool from_set, char *err,
	size_t errlen);
/* Loads a redis.conf style file. Returns 0 or -1 with err set. */
int brk_config_load_file(struct brk_config *cfg, const char *path, char *err, size_t errlen);
/* CONFIG REWRITE: writes the options in force to path, keeping its
 * comments and the place of each option it names, adding at the end those
 * that differ from their defaults. Atomic (a new file renamed over it) and
 * durable. Returns 0, or non-zero with the reason in err. */
int brk_config_rewrite(const struct brk_config *cfg, const char *path, char *err, size_t errlen);
/* Parses the command line: [CONFIG_FILE] [--name value ...].
 * Returns 0, 1 when --help/--version was handled, or -1 with err set. */
int brk_config_from_args(struct brk_config *cfg, int argc, char **argv, char *err,
	size_t errlen);
void brk_config_usage(FILE *f);

/* Iterates options for CONFIG GET: calls fn(name, value) for each option
 * whose name matches the glob pattern. */
typedef void (*brk_config_fn)(const char *name, const char *value, void *ud);
void brk_config_get(const struct brk_config *cfg, const char *pattern, brk_config_fn fn,
	void *ud);
/* The option name (any case) is known as: its own name (static), and
 * *runtime, whether CONFIG SET may change it; NULL when unknown. */
const char *brk_config_lookup(const char *name, bool *runtime);
/* Formats the value of option name (any case) into buf; false when unknown. */
bool brk_config_value(const struct brk_config *cfg, const char *name, char *buf, size_t len);

/* The storage engines' options (storage.h): one for each option of the
 * table that names an engine option, with its value in force as a string.
 * Returns 0 and *out (owned, free with brk_config_engine_opts_free()) and
 * *n, or -ENOMEM. */
struct storage_opt;
int brk_config_engine_opts(const struct brk_config *cfg, struct storage_opt **out, size_t *n);
void brk_config_engine_opts_free(struct storage_opt *opt, size_t n);
/* Milliseconds between two HA polls: ha-retry-ms, but at least three a
 * lease (ha-lease-ms), which a healthy front end renews by polling. */
long long brk_config_ha_poll_ms(const struct brk_config *cfg);
/* The bound past which a front end not heard from is not listed in the
 * cluster map (a standby's heartbeat: each HA poll): cluster-node-timeout,
 * or when 0 three polls, at least BRK_CONFIG_NODE_TIMEOUT_MIN ms. */
#define BRK_CONFIG_NODE_TIMEOUT_MIN 1000
long long brk_config_node_timeout(const struct brk_config *cfg);
/* This front end's address for clients, as SENTINEL tells them and a
 * shared store records it: ha-announce-ip, or the first bind address (a
 * wildcard: 127.0.0.1), into host (len bytes); ha-announce-port, or port. */
void brk_config_announce(const struct brk_config *cfg, char *host, size_t len, int *port);

#endif
