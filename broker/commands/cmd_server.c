/* cmd_server.c - INFO, CONFIG, CLIENT and COMMAND. */
#include <errno.h>
#include <ctype.h>
#include <malloc.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <event2/event.h>

#include "broker.h"

/* ------------------------------------------------------------------------
 * INFO
 * ---------------------------------------------------------------------- */

static uint64_t
rss_bytes(void)
{
	FILE *f = fopen("/proc/self/statm", "r");
	unsigned long size = 0, res = 0;

	if (f == NULL) {
		return 0;
	}
	if (fscanf(f, "%lu %lu", &size, &res) != 2) {
		res = 0;
	}
	fclose(f);
	return (uint64_t)res * (uint64_t)sysconf(_SC_PAGESIZE);
}

static void
human_bytes(char *buf, size_t len, uint64_t n)
{
	if (n < 1024) {
		snprintf(buf, len, "%lluB", (unsigned long long)n);
	} else if (n < 1024 * 1024) {
		snprintf(buf, len, "%.2fK", n / 1024.0);
	} else if (n < 1024ULL * 1024 * 1024) {
		snprintf(buf, len, "%.2fM", n / (1024.0 * 1024));
	} else {
		snprintf(buf, len, "%.2fG", n / (1024.0 * 1024 * 1024));
	}
}

enum {
	SEC_SERVER = 1 << 0,
	SEC_CLIENTS = 1 << 1,
	SEC_MEMORY = 1 << 2,
	SEC_PERSISTENCE = 1 << 3,
	SEC_STATS = 1 << 4,
	SEC_REPLICATION = 1 << 5,
	SEC_CPU = 1 << 6,
	SEC_COMMANDSTATS = 1 << 7,
	SEC_ERRORSTATS = 1 << 8,
	SEC_KEYSPACE = 1 << 9,
	SEC_STORAGE = 1 << 10,
	SEC_LATENCYSTATS = 1 << 11,
	SEC_CLUSTER = 1 << 12,
};

static const struct {
	const char *name;
	unsigned bit;
} sections[] = {
	{"server", SEC_SERVER},
	{"clients", SEC_CLIENTS},
	{"memory", SEC_MEMORY},
	{"persistence", SEC_PERSISTENCE},
	{"stats", SEC_STATS},
	{"replication", SEC_REPLICATION},
	{"cpu", SEC_CPU},
	{"commandstats", SEC_COMMANDSTATS},
	{"errorstats", SEC_ERRORSTATS},
	{"keyspace", SEC_KEYSPACE},
	{"storage", SEC_STORAGE},
	{"latencystats", SEC_LATENCYSTATS},
	{"cluster", SEC_CLUSTER},
};

#define SEC_DEFAULT                                                                                \
	(SEC_SERVER | SEC_CLIENTS | SEC_MEMORY | SEC_PERSISTENCE | SEC_STATS | SEC_REPLICATION |    \
		SEC_CPU | SEC_ERRORSTATS | SEC_CLUSTER | SEC_KEYSPACE | SEC_STORAGE)
#define SEC_ALL (SEC_DEFAULT | SEC_COMMANDSTATS | SEC_LATENCYSTATS)

static size_t
watching_clients(const struct brk_server *srv)
{
	size_t n = 0;

	for (const struct brk_conn *c = srv->conns; c != NULL; c = c->next) {
		n += c->nwatched > 0;
	}
	return n;
}

static int
info_build(struct brk_ctx *x, unsigned secs, struct resp_buf *b)
{
	struct brk_server *srv = x->srv;
	struct brk_stats *s = &srv->stats;
	uint64_t now = brk_now_ms();
	bool first = true;

#define SECTION(name)                                                                              \
	do {                                                                                       \
		resp_buf_printf(b, "%s# %s\r\n", first ? "" : "\r\n", name);                       \
		first = false;                                                                     \
	} while (0)

	if (secs & SEC_SERVER) {
		struct utsname u;
		uname(&u);
		SECTION("Server");
		resp_buf_printf(b, "redis_version:%s\r\necho_version:%s\r\nechd_version:%s\r\n",
			ECHD_REDIS_VERSION, ECHD_VERSION, ECHD_VERSION);
		resp_buf_printf(b, "redis_git_sha1:00000000\r\nredis_git_dirty:0\r\nredis_mode:%s\r\n",
			srv->cluster != NULL ? "cluster" : "standalone");
		resp_buf_printf(b, "os:%s %s %s\r\narch_bits:%d\r\nmultiplexing_api:%s\r\n", u.sysname,
			u.release, u.machine, (int)(sizeof(void *) * 8),
			event_base_get_method(srv->base));
		resp_buf_printf(b, "process_id:%d\r\ntcp_port:%d\r\nserver_time_usec:%llu\r\n",
			(int)srv->pid, srv->bound_port, (unsigned long long)now * 1000);
		resp_buf_printf(b, "uptime_in_seconds:%llu\r\nuptime_in_days:%llu\r\nhz:10\r\n",
			(unsigned long long)((now - s->start_ms) / 1000),
			(unsigned long long)((now - s->start_ms) / 86400000));
		resp_buf_printf(b, "executable:%s\r\nconfig_file:%s\r\nstorage_backend:%s\r\n",
			srv->exe_path ? srv->exe_path : "", srv->config_file ? srv->config_file : "",
			srv->cfg.storage_backend);
	}
	if (secs & SEC_CLIENTS) {
		SECTION("Clients");
		resp_buf_printf(b, "connected_clients:%llu\r\nmaxclients:%lld\r\n",
			(unsigned long long)srv->nconns, srv->cfg.maxclients);
		size_t keys = 0, nokey = 0, watching = 0;
		for (size_t i = 0; i < srv->wk_size; i++) {
			for (struct brk_waitkey *wk = srv->wk_table[i]; wk; wk = wk->hnext) {
				keys += wk->nwaiters > 0;
				nokey += wk->nokey_waiters > 0;
				watching += wk->nwatchers > 0;
			}
		}
		resp_buf_printf(b, "blocked_clients:%llu\r\ntotal_blocking_keys:%zu\r\n",
			(unsigned long long)srv->blocked_clients, keys);
		resp_buf_printf(b, "total_blocking_keys_on_nokey:%zu\r\nwatching_clients:%zu\r\n", nokey,
			(size_t)0 + watching_clients(srv));
		resp_buf_printf(b, "total_watched_keys:%zu\r\n", watching);
		/* echd's own: of connected_clients, those not past handshake and login */
		resp_buf_printf(b, "unauthenticated_clients:%llu\r\n",
			(unsigned long long)srv->nunauth);
	}
	if (secs & SEC_MEMORY) {
		struct mallinfo2 mi = mallinfo2();
		struct storage_stat st;
		struct storage_capacity_stat cs;
		char h1[32], h2[32];
		uint64_t used = mi.uordblks + mi.hblkhd, rss = rss_bytes();
		if (used == 0) {
			used = rss; /* a replaced allocator (e.g. ASan's) keeps malloc's counts at 0 */
		}
		memset(&st, 0, sizeof(st));
		storage_stat(srv->st, &st);
		brk_storage_capacity(srv, &cs);
		human_bytes(h1, sizeof(h1), used);
		human_bytes(h2, sizeof(h2), rss);
		SECTION("Memory");
		resp_buf_printf(b, "used_memory:%llu\r\nused_memory_human:%s\r\n", (unsigned long long)used,
			h1);
		resp_buf_printf(b, "used_memory_rss:%llu\r\nused_memory_rss_human:%s\r\n",
			(unsigned long long)rss, h2);
		resp_buf_printf(b, "maxmemory:0\r\nmaxmemory_policy:noeviction\r\n");
		resp_buf_printf(b, "lmdb_map_size:%llu\r\nlmdb_used_bytes:%llu\r\nlmdb_page_size:%llu\r\n",
			(unsigned long long)cs.map_size, (unsigned long long)st.used_bytes,
			(unsigned long long)cs.page_size);
		resp_buf_printf(b, "maxdisk:%lld\r\n", srv->cfg.maxdisk);
	}
	if (secs & SEC_PERSISTENCE) {
		struct storage_stat st;
		memset(&st, 0, sizeof(st));
		storage_stat(srv->st, &st);
		SECTION("Persistence");
		resp_buf_printf(b, "loading:0\r\nasync_loading:0\r\nrdb_changes_since_last_save:%llu\r\n",
			(unsigned long long)s->dirty);
		resp_buf_printf(b, "rdb_bgsave_in_progress:0\r\nrdb_last_save_time:%llu\r\n",
			(unsigned long long)((s->last_commit_ms ? s->last_commit_ms : s->start_ms) /
				1000));
		resp_buf_printf(b, "aof_enabled:1\r\naof_rewrite_in_progress:0\r\nappendfsync:%s\r\n",
			srv->cfg.appendfsync == BRK_FSYNC_ALWAYS ? "always" : "everysec");
		resp_buf_printf(b, "last_commit_time_ms:%llu\r\ncommits:%llu\r\ncommit_failures:%llu\r\n",
			(unsigned long long)s->last_commit_ms, (unsigned long long)s->commits,
			(unsigned long long)s->commit_failures);
		resp_buf_printf(b, "meta_flush_waits:%llu\r\n", (unsigned long long)s->meta_flush_waits);
		resp_buf_printf(b, "fsyncs:%llu\r\navg_batch_size:%.2f\r\nmap_grows:%llu\r\n",
			(unsigned long long)(st.syncs - srv->syncs_at_reset),
			s->commits ? (double)s->batch_commands_total / (double)s->commits : 0.0,
			(unsigned long long)s->map_grows);
		brk_latency_storage_info(srv, b);
	}
	if (secs & SEC_STORAGE) {
		/* echd's own section: the storage behind the keyspace */
		struct storage_stat st;
		struct storage_capacity_stat cs;
		memset(&st, 0, sizeof(st));
		storage_stat(srv->st, &st);
		brk_storage_capacity(srv, &cs);
		SECTION("Storage");
		resp_buf_printf(b, "storage_dir:%s\r\n", srv->cfg.dir); /* the backend is in Server */
		resp_buf_printf(b, "storage_map_bytes:%llu\r\nstorage_used_bytes:%llu\r\n",
			(unsigned long long)cs.map_size, (unsigned long long)st.used_bytes);
		resp_buf_printf(b, "storage_page_size:%llu\r\nstorage_maxdisk:%lld\r\n",
			(unsigned long long)cs.page_size, srv->cfg.maxdisk);
		resp_buf_printf(b, "storage_disk_full:%d\r\nstorage_map_grows:%llu\r\n",
			srv->disk_full ? 1 : 0, (unsigned long long)s->map_grows);
		resp_buf_printf(b, "storage_fs_full:%d\r\nstorage_reserve_bytes:%llu\r\n",
			srv->fs_full ? 1 : 0, (unsigned long long)cs.reserve_bytes);
		if (srv->fetch != NULL) {
			/* a partial cache (postgres, storage-cache-size), as of the last turn */
			const struct storage_fetch_state *f = &srv->fetch_state;
			resp_buf_printf(b, "storage_cache_bytes:%llu\r\nstorage_cache_max:%llu\r\n",
				(unsigned long long)f->cache_bytes, (unsigned long long)f->cache_max);
			resp_buf_printf(b, "storage_cache_misses:%llu\r\nstorage_cache_fetches:%llu\r\n",
				(unsigned long long)f->misses, (unsigned long long)f->landed);
			resp_buf_printf(b, "storage_cache_fetched_rows:%llu\r\n"
					   "storage_cache_evicted_rows:%llu\r\n",
				(unsigned long long)f->fetched_rows, (unsigned long long)f->evicted_rows);
		}
		if (storage_maintain(srv->st) != NULL) {
			/* deferred work (lmdb-staged: rows in arrival order, not yet
			 * in their tables) */
			struct storage_maintain_stat ms;
			memset(&ms, 0, sizeof(ms));
			storage_maintain_stat(storage_maintain(srv->st), &ms);
			resp_buf_printf(b, "storage_stage_rows:%llu\r\nstorage_stage_bytes:%llu\r\n"
					   "storage_stage_size:%llu\r\nstorage_stage_filed:%llu\r\n"
					   "storage_stage_epochs:%llu\r\nstorage_stage_steps:%llu\r\n",
				(unsigned long long)ms.rows, (unsigned long long)ms.bytes,
				(unsigned long long)ms.bound, (unsigned long long)ms.filed,
				(unsigned long long)ms.rounds, (unsigned long long)s->maint_steps);
		}
	}
	if (secs & SEC_STATS) {
		SECTION("Stats");
		uint64_t nch, npat, nshard;
		resp_buf_printf(b, "total_connections_received:%llu\r\ntotal_commands_processed:%llu\r\n",
			(unsigned long long)s->total_connections, (unsigned long long)s->total_commands);
		resp_buf_printf(b, "instantaneous_ops_per_sec:%llu\r\ntotal_net_input_bytes:%llu\r\n",
			(unsigned long long)s->ops_per_sec, (unsigned long long)s->net_input_bytes);
		resp_buf_printf(b, "total_net_output_bytes:%llu\r\nrejected_connections:%llu\r\n",
			(unsigned long long)s->net_output_bytes,
			(unsigned long long)s->rejected_connections);
		resp_buf_printf(b, "expired_keys:%llu\r\nkeyspace_hits:0\r\nkeyspace_misses:0\r\n",
			(unsigned long long)s->expired_keys);
		resp_buf_printf(b, "policy_dead_lettered:%llu\r\npolicy_turn_rows_max:%llu\r\n",
			(unsigned long long)s->policy_dead_lettered,
			(unsigned long long)s->policy_turn_rows_max);
		resp_buf_printf(b, "client_output_buffer_limit_disconnections:%llu\r\n",
			(unsigned long long)s->expired_obuf);
		resp_buf_printf(b, "evicted_clients:%llu\r\n", (unsigned long long)s->evicted_clients);
		resp_buf_printf(b, "total_error_replies:%llu\r\n", (unsigned long long)s->total_error_replies);
		resp_buf_printf(b, "acl_access_denied_auth:%llu\r\nacl_access_denied_cmd:%llu\r\n"
			   "acl_access_denied_key:%llu\r\nacl_access_denied_channel:%llu\r\n",
			(unsigned long long)s->acl_denied_auth, (unsigned long long)s->acl_denied_cmd,
			(unsigned long long)s->acl_denied_key, (unsigned long long)s->acl_denied_channel);
		brk_pubsub_stats(srv, &nch, &npat, &nshard);
		resp_buf_printf(b, "pubsub_channels:%llu\r\npubsub_patterns:%llu\r\n"
			   "pubsubshard_channels:%llu\r\n",
			(unsigned long long)nch, (unsigned long long)npat, (unsigned long long)nshard);
	}
	if (secs & SEC_REPLICATION) {
		SECTION("Replication");
		brk_ha_info(srv, b);
	}
	if (secs & SEC_CPU) {
		SECTION("CPU");
		{
			FILE *f = fopen("/proc/self/stat", "r");
			unsigned long ut = 0, st = 0;
			if (f != NULL) {
				char buf[1024];
				if (fgets(buf, sizeof(buf), f)) {
					char *p = strrchr(buf, ')');
					if (p) {
						sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu",
							&ut, &st);
					}
				}
				fclose(f);
			}
			long hz = sysconf(_SC_CLK_TCK);
			resp_buf_printf(b, "used_cpu_sys:%.6f\r\nused_cpu_user:%.6f\r\n", (double)st / hz,
				(double)ut / hz);
		}
	}
	if (secs & SEC_COMMANDSTATS) {
		SECTION("Commandstats");
		for (size_t i = 0; i < brk_cmd_count() + (size_t)srv->nsubstats; i++) {
			const struct brk_cmdstat *c = i < brk_cmd_count()
				? &srv->cmdstats[i] : &srv->substats[i - brk_cmd_count()].st;
			const char *name = i < brk_cmd_count()
				? brk_cmd_at(i)->name : srv->substats[i - brk_cmd_count()].name;
			if (c->calls == 0 && c->rejected == 0 && c->failed == 0) {
				continue;
			}
			resp_buf_printf(b, "cmdstat_%s:calls=%llu,usec=%llu,usec_per_call=%.2f,rejected_calls="
				   "%llu,failed_calls=%llu\r\n",
				name, (unsigned long long)c->calls, (unsigned long long)c->usec,
				c->calls ? (double)c->usec / (double)c->calls : 0.0,
				(unsigned long long)c->rejected, (unsigned long long)c->failed);
		}
	}
	if (secs & SEC_ERRORSTATS) {
		SECTION("Errorstats");
		for (int i = 0; i < srv->nerrstats; i++) {
			resp_buf_printf(b, "errorstat_%s:count=%llu\r\n", srv->errstats[i].prefix,
				(unsigned long long)srv->errstats[i].count);
		}
	}
	if (secs & SEC_LATENCYSTATS) {
		SECTION("Latencystats");
		brk_latency_info(srv, b);
	}
	if (secs & SEC_CLUSTER) {
		/* client libraries' set-ups and monitoring agents read this field of
		 * every Redis (cluster-enabled: cluster.h) */
		SECTION("Cluster");
		resp_buf_printf(b, "cluster_enabled:%d\r\n", srv->cluster != NULL);
	}
	if ((secs & SEC_KEYSPACE) && x->txn == NULL) {
		SECTION("Keyspace"); /* a standby front end: no data to count */
	} else if (secs & SEC_KEYSPACE) {
		SECTION("Keyspace");
		uint64_t *nexp = echd_calloc(2 * 256, sizeof(*nexp)), *avgs = nexp + 256;
		int rc = nexp == NULL ? -ENOMEM : stream_expires_stat(x->txn, srv->cmd_ms, nexp, avgs);

		for (int db = 0; db < srv->cfg.databases && rc == 0; db++) {
			uint64_t n = 0;
			rc = stream_db_size(x->txn, (unsigned)db, &n);
			if (rc == 0 && n > 0) {
				resp_buf_printf(b, "db%d:keys=%llu,expires=%llu,avg_ttl=%llu\r\n", db,
					(unsigned long long)n, (unsigned long long)nexp[db],
					(unsigned long long)avgs[db]);
			}
		}
		echd_free(nexp);
		if (rc != 0) {
			return rc;
		}
	}
#undef SECTION
	return 0;
}

int
brk_cmd_info(struct brk_ctx *x)
{
	struct resp_buf b;
	unsigned secs = 0;
	int rc;

	if (x->argc == 1) {
		secs = SEC_DEFAULT;
	}
	for (int i = 1; i < x->argc; i++) {
		if (brk_arg_eq(&x->argv[i], "all")) {
			secs |= SEC_ALL;
		} else if (brk_arg_eq(&x->argv[i], "everything")) {
			secs |= SEC_ALL;
		} else if (brk_arg_eq(&x->argv[i], "default")) {
			secs |= SEC_DEFAULT;
		} else {
			for (size_t j = 0; j < sizeof(sections) / sizeof(sections[0]); j++) {
				if (brk_arg_eq(&x->argv[i], sections[j].name)) {
					secs |= sections[j].bit;
				}
			}
		}
	}
	resp_buf_init(&b);
	rc = info_build(x, secs, &b);
	if (rc == 0 && b.oom) {
		rc = -ENOMEM; /* not a cut-off text */
	}
	if (rc == 0) {
		resp_add_verbatim(x->w, "txt", b.data ? b.data : "", b.len);
	}
	resp_buf_finish(&b);
	return rc;
}

/* ------------------------------------------------------------------------
 * CONFIG
 * ---------------------------------------------------------------------- */

struct config_reply {
	struct resp_buf buf;
	struct resp_writer w;
	size_t n;
	char seen[64][48];
	int nseen;
	/* CONFIG SET: the values before, to undo a refused TLS change */
	char oldname[16][64];
	char oldval[16][BRK_CONFIG_LINE_MAX];
	int nold;
	const char *want;
	bool found;
};

static void
config_old_cb(const char *name, const char *value, void *ud)
{
	struct config_reply *cr = ud;

	if (strcasecmp(name, cr->want) == 0) {
		snprintf(cr->oldval[cr->nold], sizeof(cr->oldval[0]), "%s", value);
		cr->found = true;
	}
}

static void
config_get_cb(const char *name, const char *value, void *ud)
{
	struct config_reply *cr = ud;

	for (int i = 0; i < cr->nseen; i++) {
		if (strcmp(cr->seen[i], name) == 0) {
			return; /* several patterns may match one option */
		}
	}
	if (cr->nseen < 64) {
		snprintf(cr->seen[cr->nseen++], sizeof(cr->seen[0]), "%s", name);
	}
	resp_add_bulk_cstr(&cr->w, name);
	resp_add_bulk_cstr(&cr->w, value);
	cr->n++;
}

static void
apply_runtime_config(struct brk_server *srv)
{
	struct resp_limits lim;

	echd_log_set_level((enum echd_log_level)srv->cfg.loglevel);
	resp_limits_default(&lim);
	lim.max_bulk_len = (size_t)srv->cfg.proto_max_bulk_len;
	lim.max_multibulk_len = (size_t)srv->cfg.proto_max_multibulk_len;
	lim.max_inline_len = (size_t)srv->cfg.proto_inline_max_size;
	lim.max_query_buf = (size_t)srv->cfg.query_buf_limit;
	for (struct brk_conn *c = srv->conns; c != NULL; c = c->next) {
		resp_reader_set_limits(c->rd, &lim);
	}
}

static void
stats_reset(struct brk_server *srv)
{
	uint64_t start = srv->stats.start_ms, last = srv->stats.last_commit_ms;
	uint64_t dirty = srv->stats.dirty;

	struct storage_stat st;

	memset(&srv->stats, 0, sizeof(srv->stats));
	if (storage_stat(srv->st, &st) == 0) {
		srv->syncs_at_reset = st.syncs;
	}
	srv->stats.start_ms = start;
	srv->stats.last_commit_ms = last;
	/* Redis' dirty counter is reset by a save, not by RESETSTAT */
	srv->stats.dirty = dirty;
	brk_latency_reset_hists(srv); /* before the memset below loses them */
	/* keep the names: a pointer to one may be in use by this very call */
	for (int i = 0; i < srv->nsubstats; i++) {
		memset(&srv->substats[i].st, 0, sizeof(srv->substats[i].st));
	}
	srv->stats.ops_sample_ms = brk_now_ms();
	memset(srv->cmdstats, 0, brk_cmd_count() * sizeof(*srv->cmdstats));
	memset(srv->errstats, 0, sizeof(srv->errstats));
	srv->nerrstats = 0;
}

static const char *const config_help[] = {
	"CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
	"GET <pattern>",
	"    Return parameters matching the glob-like <pattern> and their values.",
	"SET <directive> <value>",
	"    Set the configuration <directive> to <value>.",
	"RESETSTAT",
	"    Reset statistics reported by the INFO command.",
	"REWRITE",
	"    Rewrite the configuration file.",
	"HELP",
	"    Print this help.",
};

int
brk_cmd_config(struct brk_ctx *x)
{
	struct brk_server *srv = x->srv;
	const struct resp_arg *sub = &x->argv[1];

	if (brk_arg_eq(sub, "GET")) {
		struct config_reply *cr;
		if (x->argc < 3) {
			resp_add_error(x->w, "ERR wrong number of arguments for 'config|get' command");
			return 0;
		}
		cr = echd_calloc(1, sizeof(*cr));
		if (cr == NULL) {
			return -ENOMEM;
		}
		resp_buf_init(&cr->buf);
		cr->w.out = &cr->buf;
		cr->w.proto = x->w->proto;
		for (int i = 2; i < x->argc; i++) {
			const char *name = x->argv[i].p, *canon;
			char value[BRK_CONFIG_LINE_MAX];
			bool runtime, dup = false;
			if (strpbrk(name, "[*?") != NULL) {
				brk_config_get(&srv->cfg, name, config_get_cb, cr);
				continue;
			}
			/* A plain name is looked up and answered as it was
			 * typed, as Redis does (MAXCLIENTS, not maxclients). */
			canon = brk_config_lookup(name, &runtime);
			if (canon == NULL || !brk_config_value(&srv->cfg, canon, value, sizeof(value))) {
				continue;
			}
			for (int k = 0; k < cr->nseen; k++) {
				dup |= strcmp(cr->seen[k], canon) == 0;
			}
			if (!dup && cr->nseen < 64) {
				snprintf(cr->seen[cr->nseen++], sizeof(cr->seen[0]), "%s", canon);
				resp_add_bulk_cstr(&cr->w, name);
				resp_add_bulk_cstr(&cr->w, value);
				cr->n++;
			}
		}
		if (cr->buf.oom) {
			/* fewer pairs than counted: refuse rather than send that */
			resp_buf_finish(&cr->buf);
			echd_free(cr);
			return -ENOMEM;
		}
		resp_add_map(x->w, cr->n);
		if (cr->buf.len) {
			resp_buf_append(x->w->out, cr->buf.data, cr->buf.len);
		}
		resp_buf_finish(&cr->buf);
		echd_free(cr);
		return 0;
	}
	if (brk_arg_eq(sub, "SET")) {
		struct brk_config scratch;
		bool failed = false, pass_changed = false, tls_changed = false;
		struct config_reply *old;
		if (x->argc < 4) {
			resp_add_error(x->w, "ERR wrong number of arguments for 'config|set' command");
			return 0;
		}
		if (x->argc % 2 != 0) {
			resp_add_error(x->w, BRK_ERR_SYNTAX);
			return 0;
		}
		/* As Redis: every name is checked before any value, and the first
		 * unknown, immutable or repeated one is the error, named as typed. */
		for (int i = 2; i < x->argc; i += 2) {
			bool runtime = false;
			const char *canon = brk_config_lookup(x->argv[i].p, &runtime);
			const char *why = NULL;
			char toolong[64];
			if (canon == NULL) {
				resp_add_errorf(x->w, "ERR Unknown option or number of arguments for "
						      "CONFIG SET - '%s'",
					x->argv[i].p);
				return 0;
			}
			if (!runtime) {
				why = "can't set immutable config";
			} else if (x->argv[i + 1].len > BRK_CONFIG_VALUE_MAX) {
				snprintf(toolong, sizeof(toolong), "value longer than %d bytes",
					BRK_CONFIG_VALUE_MAX);
				why = toolong;
			}
			for (int j = 2; j < i && why == NULL; j += 2) {
				if (strcasecmp(x->argv[j].p, canon) == 0) {
					why = "duplicate parameter";
				}
			}
			if (why != NULL) {
				resp_add_errorf(x->w, "ERR CONFIG SET failed (possibly related to "
						      "argument '%s') - %s",
					x->argv[i].p, why);
				return 0;
			}
		}
		/* Every value is checked on a scratch configuration first, so a
		 * refused one leaves the real one untouched; then all apply. */
		old = echd_calloc(1, sizeof(*old));
		if (old == NULL) {
			return -ENOMEM;
		}
		for (int i = 2; i < x->argc && old->nold < 16; i += 2) {
			char name[64];
			snprintf(name, sizeof(name), "%.*s", (int)x->argv[i].len, x->argv[i].p);
			snprintf(old->oldname[old->nold], sizeof(old->oldname[0]), "%s", name);
			old->found = false;
			old->want = old->oldname[old->nold];
			brk_config_get(&srv->cfg, name, config_old_cb, old);
			if (old->found) {
				old->nold++;
			}
		}
		brk_config_defaults(&scratch);
		for (int pass = 0; pass < 2 && !failed; pass++) {
			for (int i = 2; i < x->argc; i += 2) {
				char *words[BRK_MAX_BIND + 2];
				char name[128], vbuf[BRK_CONFIG_VALUE_MAX + 1];
				char err[256];
				int n = 0;

				snprintf(name, sizeof(name), "%.*s", (int)x->argv[i].len, x->argv[i].p);
				snprintf(vbuf, sizeof(vbuf), "%.*s", (int)x->argv[i + 1].len,
					x->argv[i + 1].p);
				words[n++] = name;
				pass_changed |= !strcasecmp(name, "requirepass");
				if (!strcasecmp(name, "client-output-buffer-limit")) {
					char *p, *save = NULL;
					for (p = strtok_r(vbuf, " ", &save); p && n < BRK_MAX_BIND + 2;
						p = strtok_r(NULL, " ", &save)) {
						words[n++] = p;
					}
					if (n == 1) {
						continue; /* no classes: nothing changes (Redis: OK) */
					}
				} else {
					words[n++] = vbuf;
				}
				if (brk_config_apply(pass == 0 ? &scratch : &srv->cfg, n, words, true, err,
					    sizeof(err)) == 0) {
					continue;
				}
				/* a bad value is named by the option's own name */
				{
					bool rt;
					const char *canon = brk_config_lookup(name, &rt);
					resp_add_errorf(x->w, "ERR CONFIG SET failed (possibly related to "
							      "argument '%s') - %s",
						canon != NULL ? canon : name, err);
				}
				failed = true;
				break;
			}
		}
		brk_config_finish(&scratch);
		if (failed) {
			echd_free(old);
			return 0;
		}
		for (int i = 2; i < x->argc; i += 2) {
			tls_changed |= x->argv[i].len > 4 && !strncasecmp(x->argv[i].p, "tls-", 4);
		}
		if (tls_changed && srv->cfg.tls_port != 0) {
			char err[512];
			if (brk_tls_reload(srv, err, sizeof(err)) != 0) {
				/* keep what was in use: put the old values back */
				for (int k = 0; k < old->nold; k++) {
					char *words[2] = {old->oldname[k], old->oldval[k]};
					char e2[256];
					brk_config_apply(&srv->cfg, 2, words, true, e2, sizeof(e2));
				}
				echd_free(old);
				resp_add_errorf(x->w, "ERR CONFIG SET failed - Unable to update TLS "
						      "configuration: %s",
					err);
				return 0;
			}
		}
		echd_free(old);
		apply_runtime_config(srv);
		if (pass_changed) {
			brk_acl_requirepass_changed(srv);
		}
		resp_add_simple(x->w, "OK");
		return 0;
	}
	if (brk_arg_eq(sub, "REWRITE") && x->argc == 2) {
		char err[512];
		if (srv->worker != 0) {
			/* its port and dir are the file's shifted: it would write them shifted */
			resp_add_error(x->w, "ERR Rewriting config file: not from a worker of "
					     "cluster-shards-per-node; edit the file");
		} else if (srv->config_file == NULL) {
			resp_add_error(x->w, "ERR The server is running without a config file");
		} else if (brk_config_rewrite(&srv->cfg, srv->config_file, err, sizeof(err)) != 0) {
			echd_log(ECHD_LOG_WARNING, "CONFIG REWRITE of %s failed: %s", srv->config_file,
				err);
			resp_add_errorf(x->w, "ERR Rewriting config file: %s", err);
		} else {
			echd_log(ECHD_LOG_NOTICE, "CONFIG REWRITE executed with success.");
			resp_add_simple(x->w, "OK");
		}
		return 0;
	}
	if (brk_arg_eq(sub, "RESETSTAT") && x->argc == 2) {
		stats_reset(srv);
		resp_add_simple(x->w, "OK");
		return 0;
	}
	if (brk_arg_eq(sub, "HELP") && x->argc == 2) {
		BRK_REPLY_HELP(x->w, config_help);
		return 0;
	}
	brk_reply_subcommand_syntax(x, "CONFIG"); /* not reached: the table fits */
	return 0;
}

/* ------------------------------------------------------------------------
 * CLIENT
 * ---------------------------------------------------------------------- */

static struct brk_conn *
conn_by_id(struct brk_server *srv, uint64_t id)
{
	for (struct brk_conn *c = srv->conns; c != NULL; c = c->next) {
		if (c->id == id) {
			return c;
		}
	}
	return NULL;
}

static int
client_kill(struct brk_ctx *x)
{
	struct brk_server *srv = x->srv;
	const struct resp_arg *id = NULL, *addr = NULL, *laddr = NULL;
	const struct brk_user *user = NULL;
	bool skipme = true, by_user = false, none = false;
	int type = -1; /* TYPE: 0 normal, 1 pubsub (a client subscribed to something) */
	long long killed = 0, idv = 0, maxage = 0;
	uint64_t now = brk_now_ms();

	if (x->argc == 3) {
		/* old form: CLIENT KILL addr:port */
		for (struct brk_conn *c = srv->conns; c != NULL; c = c->next) {
			if (strlen(c->addr) == x->argv[2].len &&
				memcmp(c->addr, x->argv[2].p, x->argv[2].len) == 0) {
				if (c == x->c) {
					c->flags |= BRK_CONN_CLOSE_AFTER_REPLY; /* the OK first */
				} else {
					brk_conn_close_asap(c);
				}
				resp_add_simple(x->w, "OK");
				return 0;
			}
		}
		resp_add_error(x->w, "ERR No such client");
		return 0;
	}
	for (int i = 2; i < x->argc; i += 2) {
		if (i + 1 >= x->argc) {
			resp_add_error(x->w, BRK_ERR_SYNTAX);
			return 0;
		}
		if (brk_arg_eq(&x->argv[i], "ID")) {
			id = &x->argv[i + 1];
			if (!brk_str2ll(id->p, id->len, &idv) || idv <= 0) {
				resp_add_error(x->w, "ERR client-id should be greater than 0");
				return 0;
			}
		} else if (brk_arg_eq(&x->argv[i], "ADDR")) {
			addr = &x->argv[i + 1];
		} else if (brk_arg_eq(&x->argv[i], "LADDR")) {
			laddr = &x->argv[i + 1];
		} else if (brk_arg_eq(&x->argv[i], "SKIPME")) {
			if (brk_arg_eq(&x->argv[i + 1], "yes")) {
				skipme = true;
			} else if (brk_arg_eq(&x->argv[i + 1], "no")) {
				skipme = false;
			} else {
				resp_add_error(x->w, BRK_ERR_SYNTAX);
				return 0;
			}
		} else if (brk_arg_eq(&x->argv[i], "TYPE")) {
			const struct resp_arg *t = &x->argv[i + 1];
			if (brk_arg_eq(t, "master") || brk_arg_eq(t, "slave") ||
				brk_arg_eq(t, "replica")) {
				none = true; /* echd has no replication clients */
			} else if (brk_arg_eq(t, "normal") || brk_arg_eq(t, "pubsub")) {
				type = brk_arg_eq(t, "pubsub");
			} else {
				resp_add_errorf(x->w, "ERR Unknown client type '%.*s'", (int)t->len, t->p);
				return 0;
			}
		} else if (brk_arg_eq(&x->argv[i], "USER")) {
			const struct resp_arg *u = &x->argv[i + 1];
			user = brk_acl_find(srv, u->p, u->len);
			if (user == NULL) {
				resp_add_errorf(x->w, "ERR No such user '%.*s'", (int)u->len, u->p);
				return 0;
			}
			by_user = true;
		} else if (brk_arg_eq(&x->argv[i], "MAXAGE")) {
			if (!brk_arg_ll(x, &x->argv[i + 1], &maxage)) {
				return 0;
			}
		} else {
			resp_add_error(x->w, BRK_ERR_SYNTAX);
			return 0;
		}
	}
	for (struct brk_conn *c = srv->conns; c != NULL && !none; c = c->next) {
		if (id && c->id != (uint64_t)idv) {
			continue;
		}
		if (by_user && c->user != user) {
			continue;
		}
		if (type >= 0 && (brk_pubsub_subscriptions(c) > 0) != (type == 1)) {
			continue;
		}
		/* MAXAGE n: connections at least n seconds old */
		if (maxage > 0 && (now - c->ctime_ms) / 1000 < (uint64_t)maxage) {
			continue;
		}
		if (addr && (strlen(c->addr) != addr->len || memcmp(c->addr, addr->p, addr->len))) {
			continue;
		}
		if (laddr &&
			(strlen(c->laddr) != laddr->len || memcmp(c->laddr, laddr->p, laddr->len))) {
			continue;
		}
		if (c == x->c && skipme) {
			continue;
		}
		if (c == x->c) {
			c->flags |= BRK_CONN_CLOSE_AFTER_REPLY;
		} else {
			brk_conn_close_asap(c);
		}
		killed++;
	}
	resp_add_int(x->w, killed);
	return 0;
}

static const char *const client_help[] = {
	"CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
	"GETNAME", "    Return the name of the current connection.",
	"ID", "    Return the ID of the current connection.",
	"INFO", "    Return information about the current client connection.",
	"KILL <ip:port> | KILL <option> <value> [<option> <value> [...]]",
	"    Kill connections (ID, ADDR, LADDR, SKIPME).",
	"LIST [TYPE normal] [ID <id> [<id> ...]]", "    Return information about client connections.",
	"SETNAME <name>", "    Assign the name <name> to the current connection.",
	"SETINFO <option> <value>", "    Set client meta attr. Options are:",
	"    * LIB-NAME: the client lib name.", "    * LIB-VER: the client lib version.",
	"UNBLOCK <clientid> [TIMEOUT|ERROR]", "    Unblock the specified blocked client.",
	"HELP", "    Print this help.",
};

int
brk_cmd_client(struct brk_ctx *x)
{
	struct brk_conn *c = x->c;
	const struct resp_arg *sub = &x->argv[1];

	if (brk_arg_eq(sub, "ID") && x->argc == 2) {
		resp_add_int(x->w, (long long)c->id);
	} else if (brk_arg_eq(sub, "SETNAME") && x->argc == 3) {
		if (!brk_client_attr_valid(&x->argv[2])) {
			resp_add_error(x->w, "ERR Client names cannot contain spaces, newlines "
					     "or special characters.");
			return 0;
		}
		if (brk_client_attr_set(&c->name, &x->argv[2]) != 0) {
			return -ENOMEM;
		}
		resp_add_simple(x->w, "OK");
	} else if (brk_arg_eq(sub, "SETINFO") && x->argc == 4) {
		const struct resp_arg *attr = &x->argv[2];
		char **dst = brk_arg_eq(attr, "LIB-NAME") ? &c->lib_name
			   : brk_arg_eq(attr, "LIB-VER") ? &c->lib_ver : NULL;
		if (dst == NULL) {
			resp_add_errorf(x->w, "ERR Unrecognized option '%.*s'", (int)attr->len,
				attr->p);
			return 0;
		}
		if (!brk_client_attr_valid(&x->argv[3])) {
			resp_add_errorf(x->w, "ERR %.*s cannot contain spaces, newlines or special "
					      "characters.", (int)attr->len, attr->p);
			return 0;
		}
		if (brk_client_attr_set(dst, &x->argv[3]) != 0) {
			return -ENOMEM;
		}
		resp_add_simple(x->w, "OK");
	} else if (brk_arg_eq(sub, "GETNAME") && x->argc == 2) {
		if (c->name) {
			resp_add_bulk_cstr(x->w, c->name);
		} else {
			resp_add_null(x->w);
		}
	} else if (brk_arg_eq(sub, "INFO") && x->argc == 2) {
		struct resp_buf b;
		resp_buf_init(&b);
		brk_conn_describe(c, &b);
		if (b.oom) {
			resp_buf_finish(&b);
			return -ENOMEM;
		}
		resp_add_verbatim(x->w, "txt", b.data, b.len);
		resp_buf_finish(&b);
	} else if (brk_arg_eq(sub, "LIST")) {
		struct resp_buf b;
		long long want = 0;
		int i = 2;
		if (x->argc == 4 && brk_arg_eq(&x->argv[2], "TYPE")) {
			if (!brk_arg_eq(&x->argv[3], "normal") && !brk_arg_eq(&x->argv[3], "replica") &&
				!brk_arg_eq(&x->argv[3], "slave") && !brk_arg_eq(&x->argv[3], "master") &&
				!brk_arg_eq(&x->argv[3], "pubsub")) {
				resp_add_errorf(x->w, "ERR Unknown client type '%.*s'",
					(int)x->argv[3].len, x->argv[3].p);
				return 0;
			}
			want = brk_arg_eq(&x->argv[3], "normal")   ? 0
			       : brk_arg_eq(&x->argv[3], "pubsub") ? 1
								   : -1;
			i = 4;
		} else if (x->argc >= 4 && brk_arg_eq(&x->argv[2], "ID")) {
			i = 3;
		} else if (x->argc != 2) {
			resp_add_error(x->w, BRK_ERR_SYNTAX);
			return 0;
		}
		resp_buf_init(&b);
		if (i == 3) {
			/* As Redis: one line per id given, in their order (twice if
			 * given twice); an id no client has, 0 or negative too, adds
			 * nothing; only a non-number is an error. */
			for (int j = 3; j < x->argc; j++) {
				long long v;
				if (!brk_str2ll(x->argv[j].p, x->argv[j].len, &v)) {
					resp_add_error(x->w, "ERR Invalid client ID");
					return 0;
				}
			}
			for (int j = 3; j < x->argc; j++) {
				long long v = 0;
				struct brk_conn *o;
				(void)brk_str2ll(x->argv[j].p, x->argv[j].len, &v);
				o = v > 0 ? conn_by_id(x->srv, (uint64_t)v) : NULL;
				if (o != NULL) {
					brk_conn_describe(o, &b);
				}
			}
		}
		if (i != 3 && want >= 0) {
			/* oldest first, as Redis lists them; the list is newest first */
			struct brk_conn *o = x->srv->conns;
			while (o != NULL && o->next != NULL) {
				o = o->next;
			}
			for (; o != NULL; o = o->prev) {
				/* TYPE normal or pubsub: a subscribed client is pubsub */
				if (i == 2 || (brk_pubsub_subscriptions(o) > 0) == (want == 1)) {
					brk_conn_describe(o, &b);
				}
			}
		}
		if (b.oom) {
			resp_buf_finish(&b);
			return -ENOMEM;
		}
		resp_add_verbatim(x->w, "txt", b.data ? b.data : "", b.len);
		resp_buf_finish(&b);
	} else if (brk_arg_eq(sub, "KILL") && x->argc >= 3) {
		return client_kill(x);
	} else if (brk_arg_eq(sub, "UNBLOCK") && (x->argc == 3 || x->argc == 4)) {
		long long id;
		bool err = false;
		struct brk_conn *t;
		if (!brk_arg_ll(x, &x->argv[2], &id)) {
			return 0;
		}
		if (x->argc == 4) {
			if (brk_arg_eq(&x->argv[3], "ERROR")) {
				err = true;
			} else if (!brk_arg_eq(&x->argv[3], "TIMEOUT")) {
				resp_add_error(x->w, "ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR");
				return 0;
			}
		}
		t = conn_by_id(x->srv, (uint64_t)id);
		if (t == NULL || t->blk == NULL || t->blk->kind == BRK_BLOCK_FETCH) {
			/* a command waiting for rows is not a blocking one */
			resp_add_int(x->w, 0);
			return 0;
		}
		brk_block_end(t, err ? "UNBLOCKED client unblocked via CLIENT UNBLOCK" : NULL);
		brk_conn_mark_pending(t);
		resp_add_int(x->w, 1);
	} else if ((brk_arg_eq(sub, "NO-EVICT") || brk_arg_eq(sub, "NO-TOUCH")) && x->argc == 3) {
		bool on = brk_arg_eq(&x->argv[2], "ON");
		if (!on && !brk_arg_eq(&x->argv[2], "OFF")) {
			resp_add_error(x->w, BRK_ERR_SYNTAX);
			return 0;
		}
		/* NO-TOUCH is accepted without effect: echd tracks no access */
		if (brk_arg_eq(sub, "NO-EVICT") && on) {
			x->c->flags |= BRK_CONN_NO_EVICT; /* maxmemory-clients spares it */
		} else if (brk_arg_eq(sub, "NO-EVICT")) {
			x->c->flags &= ~(unsigned)BRK_CONN_NO_EVICT;
		}
		resp_add_simple(x->w, "OK");
	} else if (brk_arg_eq(sub, "HELP") && x->argc == 2) {
		BRK_REPLY_HELP(x->w, client_help);
	} else {
		/* brk_subcommand_ok() passed its name and arity (UNBLOCK with
		 * five arguments, say): Redis' catch-all */
		brk_reply_subcommand_syntax(x, "CLIENT");
	}
	return 0;
}

/* ------------------------------------------------------------------------
 * COMMAND
 * ---------------------------------------------------------------------- */

static void
reply_words(struct resp_writer *w, const char *words, bool set)
{
	char buf[256];
	const char *v[16];
	size_t n = 0;
	char *p, *save = NULL;

	snprintf(buf, sizeof(buf), "%s", words);
	for (p = strtok_r(buf, " ", &save); p && n < 16; p = strtok_r(NULL, " ", &save)) {
		v[n++] = p;
	}
	if (set) {
		resp_add_set(w, n);
	} else {
		resp_add_array(w, n);
	}
	for (size_t i = 0; i < n; i++) {
		resp_add_simple(w, v[i]);
	}
}

/* A key's flags as Redis names them (COMMAND INFO, GETKEYSANDFLAGS): a set. */
static void
reply_key_flags(struct resp_writer *w, unsigned flags)
{
	static const struct {
		unsigned bit;
		const char *name;
	} names[] = {
		{BRK_KS_RO, "RO"}, {BRK_KS_RW, "RW"}, {BRK_KS_OW, "OW"}, {BRK_KS_RM, "RM"},
		{BRK_KS_ACCESS, "access"}, {BRK_KS_UPDATE, "update"}, {BRK_KS_INSERT, "insert"},
		{BRK_KS_DELETE, "delete"}, {BRK_KS_NOT_KEY, "not_key"},
		{BRK_KS_INCOMPLETE, "incomplete"}, {BRK_KS_VARIABLE_FLAGS, "variable_flags"},
	};
	size_t n = 0;

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		n += (flags & names[i].bit) != 0;
	}
	resp_add_set(w, n);
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (flags & names[i].bit) {
			resp_add_simple(w, names[i].name);
		}
	}
}

/* A map's entry: a name and a number. */
static void
reply_kv_int(struct resp_writer *w, const char *name, long long v)
{
	resp_add_bulk_cstr(w, name);
	resp_add_int(w, v);
}

/* A map's entry whose value is a map {type: t, spec: {...}}; the caller
 * writes the spec's n entries. */
static void
reply_kv_typed(struct resp_writer *w, const char *name, const char *t, size_t n)
{
	resp_add_bulk_cstr(w, name);
	resp_add_map(w, 2);
	resp_add_bulk_cstr(w, "type");
	resp_add_bulk_cstr(w, t);
	resp_add_bulk_cstr(w, "spec");
	resp_add_map(w, n);
}

/* COMMAND INFO's element 9, in Redis 7's shape: a set of maps, each with
 * its notes (if any), flags, begin_search and find_keys. */
static void
reply_key_specs(struct resp_writer *w, const struct brk_keyspec *ks)
{
	size_t n = 0;

	while (n < BRK_MAX_KEYSPECS && ks[n].bs != BRK_KS_NONE) {
		n++;
	}
	resp_add_set(w, n);
	for (size_t i = 0; i < n; i++) {
		resp_add_map(w, ks[i].notes != NULL ? 4 : 3);
		if (ks[i].notes != NULL) {
			resp_add_bulk_cstr(w, "notes");
			resp_add_bulk_cstr(w, ks[i].notes);
		}
		resp_add_bulk_cstr(w, "flags");
		reply_key_flags(w, ks[i].flags);
		if (ks[i].bs == BRK_KS_INDEX) {
			reply_kv_typed(w, "begin_search", "index", 1);
			reply_kv_int(w, "index", ks[i].pos);
		} else {
			reply_kv_typed(w, "begin_search", "keyword", 2);
			resp_add_bulk_cstr(w, "keyword");
			resp_add_bulk_cstr(w, ks[i].keyword);
			reply_kv_int(w, "startfrom", ks[i].startfrom);
		}
		if (ks[i].fk == BRK_KS_RANGE) {
			reply_kv_typed(w, "find_keys", "range", 3);
			reply_kv_int(w, "lastkey", ks[i].lastkey);
			reply_kv_int(w, "keystep", ks[i].step);
			reply_kv_int(w, "limit", ks[i].limit);
		} else {
			reply_kv_typed(w, "find_keys", "keynum", 3);
			reply_kv_int(w, "keynumidx", ks[i].keynumidx);
			reply_kv_int(w, "firstkey", ks[i].firstkey);
			reply_kv_int(w, "keystep", ks[i].step);
		}
	}
}

/* COMMAND INFO's entry for cmd, or for its subcommand sub ("xgroup|create":
 * the container's flags but its own admin flag, arity, keys and, where it
 * has them, categories). */
static void
reply_info_entry(struct resp_writer *w, const struct brk_cmd *cmd, const struct brk_subcmd *sub)
{
	static const struct {
		unsigned bit;
		const char *name;
	} flagnames[] = {
		{BRK_CMD_WRITE, "write"}, {BRK_CMD_READONLY, "readonly"},
		{BRK_CMD_DENYOOM, "denyoom"}, {BRK_CMD_ADMIN, "admin"}, {BRK_CMD_PUBSUB, "pubsub"},
		{BRK_CMD_NOSCRIPT, "noscript"}, {BRK_CMD_BLOCKING, "blocking"},
		{BRK_CMD_LOADING, "loading"}, {BRK_CMD_STALE, "stale"}, {BRK_CMD_FAST, "fast"},
		{BRK_CMD_NOAUTH, "no_auth"}, {BRK_CMD_NOMULTI, "no_multi"},
	};
	unsigned fl = sub != NULL ? (cmd->flags & ~BRK_CMD_ADMIN) | (sub->flags & BRK_CMD_ADMIN)
				  : cmd->flags;
	char flags[256] = "", name[64];
	int first, last, step;
	bool movable;
	size_t n = 0;

	brk_keys_legacy(cmd, sub, &first, &last, &step, &movable);
	for (size_t i = 0; i < sizeof(flagnames) / sizeof(flagnames[0]); i++) {
		if (fl & flagnames[i].bit) {
			n += (size_t)snprintf(flags + n, sizeof(flags) - n, "%s ", flagnames[i].name);
		}
	}
	if (movable) {
		n += (size_t)snprintf(flags + n, sizeof(flags) - n, "movablekeys ");
	}
	snprintf(name, sizeof(name), "%s%s%s", cmd->name, sub != NULL ? "|" : "",
		sub != NULL ? sub->name : "");
	resp_add_array(w, 10);
	resp_add_bulk_cstr(w, name);
	resp_add_int(w, sub != NULL ? sub->arity : cmd->arity);
	reply_words(w, flags, true);
	resp_add_int(w, first);
	resp_add_int(w, last);
	resp_add_int(w, step);
	reply_words(w, sub != NULL && sub->acl != NULL ? sub->acl : cmd->acl, true);
	/* empty ones are sets in RESP3, as Redis sends them */
	resp_add_set(w, 0); /* tips */
	reply_key_specs(w, brk_keyspecs(cmd, sub));
	if (sub != NULL || cmd->nsubs == 0) {
		resp_add_set(w, 0); /* subcommands */
		return;
	}
	resp_add_array(w, cmd->nsubs);
	for (size_t i = 0; i < cmd->nsubs; i++) {
		reply_info_entry(w, cmd, &cmd->subs[i]);
	}
}

static void
reply_command_info(struct resp_writer *w, const struct brk_cmd *cmd)
{
	reply_info_entry(w, cmd, NULL);
}

/* A command by name, or with *sub a container's subcommand by
 * "container|sub" as Redis looks names up for COMMAND INFO and DOCS; NULL
 * when there is none. */
static const struct brk_cmd *
cmd_by_full_name(const struct resp_arg *a, const struct brk_subcmd **sub)
{
	const char *bar = memchr(a->p, '|', a->len);
	size_t len = bar != NULL ? (size_t)(bar - a->p) : a->len;
	const struct brk_cmd *c = brk_cmd_lookup(a->p, len);

	*sub = NULL;
	if (c != NULL && bar != NULL) {
		struct resp_arg sa = {bar + 1, a->len - len - 1};
		*sub = brk_subcmd_find(c, &sa);
		c = *sub != NULL ? c : NULL;
	}
	return c;
}

/* COMMAND INFO's entry for a name: a command, or "container|sub"; null
 * when there is none. */
static void
reply_command_info_name(struct resp_writer *w, const struct resp_arg *a)
{
	const struct brk_subcmd *sub = NULL;
	const struct brk_cmd *c = cmd_by_full_name(a, &sub);

	if (c != NULL) {
		reply_info_entry(w, c, sub);
	} else {
		resp_add_null(w); /* $-1 in RESP2, as Redis */
	}
}

/* Splits a syntax string into top-level items; *p advances past one. */
static size_t
syntax_item(const char **p, char *buf, size_t cap)
{
	const char *s = *p;
	size_t n = 0;
	int depth = 0;

	while (*s == ' ') {
		s++;
	}
	while (*s && (depth > 0 || *s != ' ')) {
		if (*s == '[' || *s == '<') {
			depth++;
		} else if (*s == ']' || *s == '>') {
			depth--;
		}
		if (n + 1 < cap) {
			buf[n++] = *s;
		}
		s++;
	}
	buf[n] = '\0';
	*p = s;
	return n;
}

static void reply_syntax_args(struct resp_writer *w, const char *syntax);

/* One argument map: name, type, and token/flags/arguments as needed. */
static void
reply_syntax_arg(struct resp_writer *w, char *item, bool optional, bool multiple)
{
	size_t len = strlen(item), fields = 2;
	const char *type = "string";
	char name[64];
	char inner[256];
	bool upper = true;

	if (len >= 2 && item[0] == '[' && item[len - 1] == ']') {
		char *body = item + 1;
		item[len - 1] = '\0';
		{
			/* "[x [x ...]]": one optional argument that repeats; a
			 * longer body ("[ID id [id ...]]") is a block whose own
			 * items repeat */
			char one[256], two[256];
			const char *bp = body;
			syntax_item(&bp, one, sizeof(one));
			syntax_item(&bp, two, sizeof(two));
			while (*bp == ' ') {
				bp++;
			}
			if (*bp == '\0' && strstr(two, " ...]") != NULL) {
				reply_syntax_arg(w, one, true, true);
				return;
			}
		}
		{
			/* "[x]" or "[<a | b>]": one optional item */
			char one[256];
			const char *bp = body;
			syntax_item(&bp, one, sizeof(one));
			while (*bp == ' ') {
				bp++;
			}
			if (*bp == '\0') {
				reply_syntax_arg(w, one, true, multiple);
				return;
			}
		}
		snprintf(inner, sizeof(inner), "%s", body);
		type = "block";
		optional = true;
	} else if (len >= 2 && item[0] == '<' && item[len - 1] == '>') {
		char *q = inner;
		item[len - 1] = '\0';
		/* "<a | b>": the alternatives become the inner arguments */
		for (char *t = item + 1; *t; t++) {
			if (*t == '|' && t[1] == ' ') {
				t++; /* " | " becomes one space */
				continue;
			}
			*q++ = *t;
		}
		*q = '\0';
		type = "oneof";
	}
	if (!strcmp(type, "string")) {
		for (size_t i = 0; i < len; i++) {
			upper &= !(item[i] >= 'a' && item[i] <= 'z');
		}
		if (upper) {
			type = "pure-token";
		} else if (!strcmp(item, "key") || !strcmp(item, "newkey")) {
			type = "key";
		} else if (!strcmp(item, "count") || !strcmp(item, "milliseconds") ||
			   !strcmp(item, "index") || !strcmp(item, "cursor") ||
			   !strcmp(item, "protover")) {
			type = "integer";
		}
		snprintf(name, sizeof(name), "%s", item);
		for (char *c = name; *c; c++) {
			*c = (char)tolower((unsigned char)*c);
		}
	} else {
		char first[64];
		const char *ip = inner;
		syntax_item(&ip, first, sizeof(first));
		snprintf(name, sizeof(name), "%s", first[0] == '[' || first[0] == '<' ? "option"
											: first);
		for (char *c = name; *c; c++) {
			*c = (char)tolower((unsigned char)*c);
		}
	}
	fields += !strcmp(type, "pure-token") ? 1 : 0;
	fields += optional || multiple ? 1 : 0;
	fields += !strcmp(type, "block") || !strcmp(type, "oneof") ? 1 : 0;
	resp_add_map(w, fields);
	resp_add_bulk_cstr(w, "name");
	resp_add_bulk_cstr(w, name);
	resp_add_bulk_cstr(w, "type");
	resp_add_bulk_cstr(w, type);
	if (!strcmp(type, "pure-token")) {
		resp_add_bulk_cstr(w, "token");
		resp_add_bulk_cstr(w, item);
	}
	if (optional || multiple) {
		resp_add_bulk_cstr(w, "flags");
		resp_add_array(w, (optional ? 1 : 0) + (multiple ? 1 : 0));
		if (optional) {
			resp_add_simple(w, "optional");
		}
		if (multiple) {
			resp_add_simple(w, "multiple");
		}
	}
	if (!strcmp(type, "block") || !strcmp(type, "oneof")) {
		resp_add_bulk_cstr(w, "arguments");
		reply_syntax_args(w, inner);
	}
}

/* Whether next repeats item: "x [x ...]", or "a b [a b ...]" read as a
 * repeating b; not "x [OPT a [a ...]]", an option of its own. */
static bool
syntax_repeats(const char *item, const char *next)
{
	size_t il = strlen(item), nl = strlen(next);

	if (nl < il + 6 || next[0] != '[' || strcmp(next + nl - 5, " ...]") != 0 ||
		strchr(next + 1, '[') != NULL || strncmp(next + nl - 5 - il, item, il) != 0) {
		return false;
	}
	return nl == il + 6 || next[nl - 6 - il] == ' ';
}

static void
reply_syntax_args(struct resp_writer *w, const char *syntax)
{
	char items[24][256];
	size_t n = 0;
	const char *p = syntax;

	while (n < 24 && syntax_item(&p, items[n], sizeof(items[n])) > 0) {
		n++;
	}
	/* "x [x ...]" collapses into one repeating x */
	size_t out = n;
	for (size_t i = 0; i + 1 < n; i++) {
		if (syntax_repeats(items[i], items[i + 1])) {
			out--;
		}
	}
	resp_add_array(w, out);
	for (size_t i = 0; i < n; i++) {
		bool multiple = i + 1 < n && syntax_repeats(items[i], items[i + 1]);
		reply_syntax_arg(w, items[i], false, multiple);
		if (multiple) {
			i++;
		}
	}
}

/* One command's or subcommand's doc map, named by its full name
 * ("xgroup|create"): arguments when it has any, summary, since, group,
 * complexity, and for a container the map of its subcommands' docs, as
 * Redis nests them. */
static void
reply_doc_map(struct resp_writer *w, const char *name, const char *summary,
	const char *since, const char *group, const char *complexity, const char *syntax,
	const struct brk_cmd *container)
{
	bool args = syntax != NULL && syntax[0] != '\0';

	resp_add_bulk_cstr(w, name);
	resp_add_map(w, 4 + (args ? 1 : 0) + (container != NULL ? 1 : 0));
	if (args) {
		resp_add_bulk_cstr(w, "arguments");
		reply_syntax_args(w, syntax);
	}
	resp_add_bulk_cstr(w, "summary");
	resp_add_bulk_cstr(w, summary);
	resp_add_bulk_cstr(w, "since");
	resp_add_bulk_cstr(w, since);
	resp_add_bulk_cstr(w, "group");
	resp_add_bulk_cstr(w, group);
	resp_add_bulk_cstr(w, "complexity");
	resp_add_bulk_cstr(w, complexity);
	if (container != NULL) {
		resp_add_bulk_cstr(w, "subcommands");
		resp_add_map(w, container->nsubs);
		for (size_t i = 0; i < container->nsubs; i++) {
			const struct brk_subcmd *sub = &container->subs[i];
			char full[64];
			snprintf(full, sizeof(full), "%s|%s", container->name, sub->name);
			reply_doc_map(w, full, sub->summary, sub->since, container->group,
				sub->complexity, sub->syntax, NULL);
		}
	}
}

/* A command's docs, or with sub a subcommand's */
static void
reply_command_docs(struct resp_writer *w, const struct brk_cmd *cmd,
	const struct brk_subcmd *sub)
{
	if (sub != NULL) {
		char full[64];
		snprintf(full, sizeof(full), "%s|%s", cmd->name, sub->name);
		reply_doc_map(w, full, sub->summary, sub->since, cmd->group, sub->complexity,
			sub->syntax, NULL);
		return;
	}
	reply_doc_map(w, cmd->name, cmd->summary, cmd->since, cmd->group, cmd->complexity,
		cmd->syntax, cmd->nsubs > 0 ? cmd : NULL);
}

/* COMMAND LIST [FILTERBY MODULE name | ACLCAT category | PATTERN glob]:
 * commands and, as in Redis, their subcommands ("xgroup|create"). For
 * ACLCAT a subcommand is in the categories echd's ACL gives it (its own, or
 * its container's), and a container itself only in @slow, as Redis files
 * containers. */
static int
command_list(struct brk_ctx *x)
{
	enum { ALL, MODULE, ACLCAT, PATTERN } by = ALL;
	const struct resp_arg *arg = NULL;
	size_t h, listed = 0;

	if (x->argc == 5 && brk_arg_eq(&x->argv[2], "FILTERBY")) {
		arg = &x->argv[4];
		if (brk_arg_eq(&x->argv[3], "MODULE")) {
			by = MODULE;
		} else if (brk_arg_eq(&x->argv[3], "ACLCAT")) {
			by = ACLCAT;
		} else if (brk_arg_eq(&x->argv[3], "PATTERN")) {
			by = PATTERN;
		} else {
			resp_add_error(x->w, BRK_ERR_SYNTAX);
			return 0;
		}
	} else if (x->argc != 2) {
		resp_add_error(x->w, BRK_ERR_SYNTAX);
		return 0;
	}
	h = resp_add_deferred(x->w);
	for (size_t i = 0; by != MODULE && i < brk_cmd_count(); i++) {
		const struct brk_cmd *cmd = brk_cmd_at(i);
		bool container = brk_subcommand_at(cmd, 0) != NULL;
		bool slow = by == ACLCAT && arg->len == 4 && !strncasecmp(arg->p, "slow", 4);
		const char *sub = NULL;

		for (size_t j = 0; j == 0 || (sub = brk_subcommand_at(cmd, j - 1)) != NULL; j++) {
			char name[64];
			int len = j == 0 ? snprintf(name, sizeof(name), "%s", cmd->name)
					 : snprintf(name, sizeof(name), "%s|%s", cmd->name, sub);
			/* a subcommand has its own categories (acl|whoami) or its container's */
			const char *acl = j > 0 && cmd->subs[j - 1].acl != NULL ? cmd->subs[j - 1].acl
										: cmd->acl;
			bool in_cat = by != ACLCAT || brk_acl_in_category(acl, arg->p, arg->len);
			bool want = j == 0 && container && by == ACLCAT ? slow : in_cat;
			if (want && by == PATTERN) {
				want = brk_glob_match(arg->p, arg->len, name, (size_t)len, true);
			}
			if (want) {
				resp_add_bulk(x->w, name, (size_t)len);
				listed++;
			}
		}
	}
	resp_set_deferred_len(x->w, h, '*', listed);
	return 0;
}

/* COMMAND GETKEYS / GETKEYSANDFLAGS command [arg ...]: the keys the ACL
 * would check, found as it finds them (brk_keys_find()), but all or
 * nothing, and with Redis' errors. */
static void
command_getkeys(struct brk_ctx *x, bool with_flags)
{
	int argc = x->argc - 2, arity, n;
	const struct resp_arg *argv = x->argv + 2;
	const struct brk_cmd *cmd = brk_cmd_lookup(argv[0].p, argv[0].len);
	const struct brk_subcmd *sub = NULL;
	struct brk_keys k;

	if (cmd != NULL && cmd->subs != NULL && argc >= 2) {
		/* a container's subcommand is the command, as Redis looks it up */
		sub = brk_subcmd_find(cmd, &argv[1]);
		cmd = sub != NULL ? cmd : NULL;
	}
	if (cmd == NULL) {
		resp_add_error(x->w, "ERR Invalid command specified");
		return;
	}
	if (!brk_cmd_has_keys(cmd, sub)) {
		resp_add_error(x->w, "ERR The command has no key arguments");
		return;
	}
	arity = sub != NULL ? sub->arity : cmd->arity;
	if ((arity > 0 && argc != arity) || (arity < 0 && argc < -arity)) {
		resp_add_error(x->w, "ERR Invalid number of arguments specified for command");
		return;
	}
	if (brk_keys_find(cmd, argc, argv, 0, &k) != 0 || (n = brk_keys_count(&k)) == 0) {
		resp_add_error(x->w, "ERR Invalid arguments specified for command");
		return;
	}
	resp_add_array(x->w, (size_t)n);
	for (int i = 0; i < n; i++) {
		unsigned flags;
		int at = brk_keys_at(&k, i, &flags);
		if (with_flags) {
			resp_add_array(x->w, 2);
		}
		resp_add_bulk(x->w, argv[at].p, argv[at].len);
		if (with_flags) {
			reply_key_flags(x->w, flags);
		}
	}
}

int
brk_cmd_command(struct brk_ctx *x)
{
	size_t n = brk_cmd_count();

	if (x->argc == 1) {
		resp_add_array(x->w, n);
		for (size_t i = 0; i < n; i++) {
			reply_command_info(x->w, brk_cmd_at(i));
		}
		return 0;
	}
	if (brk_arg_eq(&x->argv[1], "COUNT") && x->argc == 2) {
		resp_add_int(x->w, (long long)n);
	} else if (brk_arg_eq(&x->argv[1], "INFO")) {
		if (x->argc == 2) {
			resp_add_array(x->w, n);
			for (size_t i = 0; i < n; i++) {
				reply_command_info(x->w, brk_cmd_at(i));
			}
			return 0;
		}
		resp_add_array(x->w, (size_t)(x->argc - 2));
		for (int i = 2; i < x->argc; i++) {
			reply_command_info_name(x->w, &x->argv[i]);
		}
	} else if (brk_arg_eq(&x->argv[1], "DOCS")) {
		if (x->argc == 2) {
			resp_add_map(x->w, n);
			for (size_t i = 0; i < n; i++) {
				reply_command_docs(x->w, brk_cmd_at(i), NULL);
			}
			return 0;
		}
		size_t h = resp_add_deferred(x->w), found = 0;
		for (int i = 2; i < x->argc; i++) {
			const struct brk_subcmd *sub = NULL;
			const struct brk_cmd *c = cmd_by_full_name(&x->argv[i], &sub);
			if (c) {
				reply_command_docs(x->w, c, sub);
				found++;
			}
		}
		resp_set_deferred_len(x->w, h, '%', found);
	} else if (brk_arg_eq(&x->argv[1], "LIST")) {
		return command_list(x);
	} else if (brk_arg_eq(&x->argv[1], "GETKEYS")) {
		command_getkeys(x, false);
	} else if (brk_arg_eq(&x->argv[1], "GETKEYSANDFLAGS")) {
		command_getkeys(x, true);
	} else if (brk_arg_eq(&x->argv[1], "HELP") && x->argc == 2) {
		static const char *const help[] = {
			"COMMAND <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
			"(no subcommand)", "    Return details about all commands.",
			"COUNT", "    Return the total number of commands in this server.",
			"LIST", "    Return a list of all commands in this server.",
			"INFO [<command-name> ...]",
			"    Return details about multiple commands.",
			"DOCS [<command-name> ...]",
			"    Return documentation details about multiple commands.",
			"GETKEYS <full-command>",
			"    Return the keys from a full Redis command.",
			"GETKEYSANDFLAGS <full-command>",
			"    Return the keys and the access flags from a full Redis command.",
			"HELP", "    Print this help.",
		};
		BRK_REPLY_HELP(x->w, help);
	} else {
		/* brk_subcommand_ok() checked the name and the arity */
		brk_reply_subcommand_syntax(x, "COMMAND"); /* not reached */
	}
	return 0;
}
