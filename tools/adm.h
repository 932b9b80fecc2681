/* adm.h - echo-admin's internals, shared by tools/adm_*.c (not API).
 *
 * echo-admin reads one of two sources: a live echd over RESP (adm_live.c)
 * or the store itself, read-only (adm_offline.c): the LMDB directory, or
 * echd's schema on PostgreSQL. Both hand rows to the
 * same views (adm_view.c), which print them as tables or as one JSON
 * document (adm_out.c), so the two modes cannot drift apart in format.
 */
#ifndef ECHD_TOOLS_ADM_H
#define ECHD_TOOLS_ADM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "resp.h"
#include "storage.h"
#include "stream.h"

/* ---- exit codes ---------------------------------------------------------- */

#define ADM_EXIT_OK       0
#define ADM_EXIT_NOTFOUND 1 /* stream, group, consumer or entry */
#define ADM_EXIT_USAGE    2 /* bad arguments; a change asked of a directory */
#define ADM_EXIT_CONNECT  3 /* cannot connect, authenticate or open */
#define ADM_EXIT_DAMAGED  4 /* check found broken invariants */
#define ADM_EXIT_FAILED   5 /* the server or the storage refused */

/* ---- options ------------------------------------------------------------- */

struct adm_opts {
	/* connection */
	const char *host;
	int port;
	const char *unixsocket;
	const char *user;
	char *pass;            /* owned copy; the argv original is blanked */
	bool tls;              /* also set by any of the TLS options below */
	const char *cacert;    /* NULL: the system's trusted CAs (unless cacertdir) */
	const char *cacertdir; /* c_rehash directory */
	const char *cert;      /* client certificate (chain); with key */
	const char *key;
	bool insecure; /* no check of the server's certificate */
	int timeout_ms;
	unsigned db;
	/* offline: one of these two */
	const char *data_dir;
	const char *storage_url; /* the postgres backend: a libpq URI or key=value string */
	const char *pg_schema;   /* with storage_url; NULL: echd's default, "echd" */
	/* output */
	bool json;
	bool color;
	/* subcommand */
	const char *cmd;
	int nargs;
	char **args;
	const char *consumer;   /* pending --consumer */
	int64_t min_idle;       /* ms; -1 unset */
	int64_t min_deliveries; /* -1 unset */
	int64_t limit;          /* -1 unset */
	bool payload;
	const char *to;    /* claim --to */
	int64_t maxlen;    /* trim --maxlen; -1 unset */
	const char *minid; /* trim --minid */
	bool approx;
	int64_t entries_read; /* setid --entries-read; -2 unset */
};

/* ---- output (adm_out.c) --------------------------------------------------- */

/* Set once by main(). */
struct adm_out {
	bool json;
	bool color;   /* stdout */
	bool color2;  /* stderr */
	bool utf8;    /* the locale's charset: "…" rather than "~" */
	size_t width; /* columns a table may use */
};
extern struct adm_out adm_out;

/* color_mode: -1 on a terminal (unless NO_COLOR or TERM=dumb), 0 never. */
void adm_out_init(bool json, int color_mode);

/* "echo-admin: ..." on stderr (red on a TTY). Returns code, for tail calls. */
int adm_err(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Formatting into caller buffers of at least 32 bytes; each returns buf. */
char *adm_fmt_count(char *buf, uint64_t v);              /* 1,234,567 */
char *adm_fmt_duration(char *buf, int64_t ms);           /* 850ms 12s 3m12s 2h5m 3d4h; <0: "-" */
char *adm_fmt_bytes(char *buf, uint64_t v);              /* 1.5 MiB */
char *adm_fmt_id(char *buf, const struct stream_id *id); /* needs 42 bytes */

/* Appends s[0, n) to a growable string, escaped for a terminal (control
 * bytes and invalid UTF-8 as \xHH). */
struct adm_str {
	char *p;
	size_t len;
	size_t cap;
};
void adm_str_add(struct adm_str *s, const char *p, size_t n);
void adm_str_addf(struct adm_str *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void adm_str_add_escaped(struct adm_str *s, const void *p, size_t n);
void adm_str_clear(struct adm_str *s);
void adm_str_finish(struct adm_str *s);

/* Tables: the first rows are held to size the columns, later rows are
 * printed as they come (a million-row PEL starts printing at once). */
#define ADM_RIGHT 0x1u /* right-aligned (numbers) */
#define ADM_FLEX  0x2u /* may be shrunk (names); truncated with an ellipsis */
struct adm_col {
	const char *title;
	unsigned flags;
	size_t min; /* narrowest a flexible column gets */
};
struct adm_table;
/* Returns owned (free with adm_table_end()), NULL on ENOMEM. Borrows cols
 * for the table's life. */
struct adm_table *adm_table_create(const struct adm_col *cols, size_t ncols);
/* Borrows cells (copied when held). Returns 0 or -ENOMEM. */
int adm_table_row(struct adm_table *t, const char *const *cells);
/* Prints what is held and frees t; NULL is a no-op. */
void adm_table_end(struct adm_table *t);

/* JSON, streamed to stdout: one document per call. */
void adm_json_obj(void);          /* { */
void adm_json_obj_end(void);      /* } */
void adm_json_arr(void);          /* [ */
void adm_json_arr_end(void);      /* ] */
void adm_json_key(const char *k); /* "k": (inside an object) */
void adm_json_str(const void *p, size_t n);
void adm_json_cstr(const char *s);
void adm_json_int(int64_t v);
void adm_json_uint(uint64_t v);
void adm_json_bool(bool v);
void adm_json_null(void);
/* A number as text, written as it is when it is one (else as a string). */
void adm_json_number(const char *text);
void adm_json_id(const struct stream_id *id);
void adm_json_done(void); /* newline after the document */

/* ---- the shared context ---------------------------------------------------- */

struct adm_conn;

struct adm_ctx {
	const struct adm_opts *o;
	bool live;
	struct adm_conn *conn;   /* live */
	struct storage *st;      /* offline */
	struct storage_txn *txn; /* offline: one read-only snapshot */
	int64_t now_ms;          /* offline: "now" for idle times */
};

int64_t adm_now_ms(void);

/* ---- views (adm_view.c): both modes print through these ----------------- */

struct adm_stream_info {
	struct st_buf name;
	uint64_t length;
	uint64_t groups;
	uint64_t entries_added;
	bool empty; /* no live entry: first/last_entry unset */
	struct stream_id first;
	struct stream_id last_entry;
	struct stream_id last_generated;
	struct stream_id max_deleted;
	bool idmp_known; /* the idempotent producers' settings below were read */
	struct stream_idmp_info idmp;
};

struct adm_group_info {
	struct st_buf name;
	struct stream_id last_delivered;
	int64_t entries_read; /* -1: unknown */
	bool lag_known;
	int64_t lag;
	uint64_t pending;
	uint64_t consumers;
	bool has_oldest; /* pending > 0 */
	struct stream_id oldest_id;
	int64_t oldest_idle_ms;
	/* echd's group policy (XGROUP SETPOLICY), when the group has one */
	bool has_policy;
	int64_t ack_wait, max_deliver, max_ack_pending, dead_lettered;
	struct st_buf dead_letter; /* len 0: none */
};

struct adm_consumer_info {
	struct st_buf name;
	uint64_t pending;
	int64_t idle_ms;
	int64_t inactive_ms; /* -1: never active */
};

struct adm_pending_row {
	struct stream_id id;
	struct st_buf consumer;
	int64_t idle_ms;
	uint64_t deliveries;
	bool released;           /* XNACK gave it back: no owner (consumer ""), idle -1 */
	bool with_payload;       /* --payload */
	bool deleted;            /* with_payload: the entry is gone from the stream */
	const struct st_buf *fv; /* field, value, field, value ... */
	size_t nfv;
};

struct adm_entry_group {
	struct st_buf name;
	bool delivered; /* id <= the group's last-delivered id */
	bool pending;
	bool released; /* pending with no owner (XNACK) */
	struct st_buf consumer;
	int64_t idle_ms;
	uint64_t deliveries;
};

struct adm_view;
/* Each view: _begin returns an owned view or NULL (ENOMEM reported);
 * rows; _end prints the rest and frees it. */
struct adm_view *adm_view_streams_begin(const struct adm_ctx *x);
int adm_view_stream(struct adm_view *v, const struct adm_stream_info *s);
struct adm_view *adm_view_groups_begin(const struct adm_ctx *x, const char *stream);
int adm_view_group(struct adm_view *v, const struct adm_group_info *g);
struct adm_view *adm_view_consumers_begin(
	const struct adm_ctx *x, const char *stream, const char *group);
int adm_view_consumer(struct adm_view *v, const struct adm_consumer_info *c);
struct adm_view *adm_view_pending_begin(
	const struct adm_ctx *x, const char *stream, const char *group);
int adm_view_pending(struct adm_view *v, const struct adm_pending_row *r);
/* The entry view: the entry (exists false: deleted or never there), then
 * one row per group. */
struct adm_view *adm_view_entry_begin(const struct adm_ctx *x, const char *stream,
	const struct stream_id *id, bool exists, const struct st_buf *fv, size_t nfv);
int adm_view_entry_group(struct adm_view *v, const struct adm_entry_group *g);
/* truncated: the listing stopped at --limit. */
void adm_view_end(struct adm_view *v, bool truncated);

/* stats: name/value rows. */
struct adm_view *adm_view_stats_begin(const struct adm_ctx *x);
int adm_view_stat(struct adm_view *v, const char *key, const char *human_name,
	const char *human_value, const char *json_value, bool json_number);

/* ---- live mode (adm_live.c) ----------------------------------------------- */

/* Connects, authenticates and selects o->db. Returns an ADM_EXIT_ code,
 * having reported any failure. */
int adm_live_open(struct adm_ctx *x);
void adm_live_close(struct adm_ctx *x);

int adm_live_streams(struct adm_ctx *x);
int adm_live_groups(struct adm_ctx *x, const char *stream);
int adm_live_consumers(struct adm_ctx *x, const char *stream, const char *group);
int adm_live_pending(struct adm_ctx *x, const char *stream, const char *group);
int adm_live_entry(struct adm_ctx *x, const char *stream, const struct stream_id *id);
int adm_live_ack(struct adm_ctx *x, const char *stream, const char *group, int nids, char **ids);
int adm_live_claim(struct adm_ctx *x, const char *stream, const char *group, int nids, char **ids);
int adm_live_delconsumer(
	struct adm_ctx *x, const char *stream, const char *group, const char *consumer);
int adm_live_setid(struct adm_ctx *x, const char *stream, const char *group, const char *id);
int adm_live_trim(struct adm_ctx *x, const char *stream);
int adm_live_stats(struct adm_ctx *x);
/* The server's data directory (CONFIG GET dir, resolved against the
 * server's working directory when it is local). *out owned (echd_free). */
int adm_live_data_dir(struct adm_ctx *x, char **out);

/* ---- offline mode (adm_offline.c) ----------------------------------------- */

/* Opens dir read-only (dir NULL: the postgres schema of x->o's storage_url
 * and pg_schema) and begins the snapshot. Returns an ADM_EXIT_ code. */
int adm_off_open(struct adm_ctx *x, const char *dir);
void adm_off_close(struct adm_ctx *x);
/* The schema --storage-pg-schema names, or echd's default. Borrowed. */
#define ADM_PG_SCHEMA_DEFAULT "echd"
const char *adm_pg_schema(const struct adm_opts *o);

int adm_off_streams(struct adm_ctx *x);
int adm_off_groups(struct adm_ctx *x, const char *stream);
int adm_off_consumers(struct adm_ctx *x, const char *stream, const char *group);
int adm_off_pending(struct adm_ctx *x, const char *stream, const char *group);
int adm_off_entry(struct adm_ctx *x, const char *stream, const struct stream_id *id);
int adm_off_stats(struct adm_ctx *x);
/* The shards of the cluster whose base schema x->o names (storage_url,
 * pg_schema): each one's slots, schema, and the front end holding it (node,
 * address, generation), read from PostgreSQL without a lock. Opens and
 * closes the store itself. Returns an ADM_EXIT_ code. */
int adm_off_shards(struct adm_ctx *x);
/* Puts shard ix on the PostgreSQL of url (NULL: back on the store's own),
 * as storage_ha_part_move() allows. Returns an ADM_EXIT_ code. */
int adm_off_shard_url(struct adm_ctx *x, size_t ix, const char *url);
/* storage_copy() of src into dest (created if missing, must hold no
 * environment). Works while echd writes to src. */
int adm_backup(const char *src, const char *dest);

/* ---- check (adm_check.c) ---------------------------------------------------- */

int adm_check(const char *dir);
/* The same of dir, or (dir NULL) of the postgres schema o names
 * (storage_url, pg_schema). Borrows both. */
int adm_check_store(const struct adm_opts *o, const char *dir);

/* ---- small shared helpers ---------------------------------------------------- */

/* Parses "5m", "90s", "1h30m", "250ms", "2d"; a bare number is ms. */
bool adm_parse_duration(const char *s, int64_t *out);
bool adm_parse_u64(const char *s, uint64_t *out);

#endif
