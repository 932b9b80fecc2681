/* server.c - the server's life: start-up, the event loop, signals and the
 * cron, logging, and shut-down.
 *
 * One thread runs everything. Each loop turn reads what the sockets have and
 * runs the requests (conn.c), ends the batch (commit.c: one commit, then the
 * replies held for it go), then runs the blocked clients whose keys changed
 * (block.c). The other rooms: keyspace.c (expiry and deferred deletion) and
 * listen.c (listeners, accepting, the data directory's lock).
 */
#include <errno.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/listener.h>

#include "broker.h"
#include "cluster.h"
#include "http.h"
#include "server.h"

/* ------------------------------------------------------------------------
 * Logging
 * ---------------------------------------------------------------------- */

static FILE *log_file;
static bool log_journal;

static void
log_sink(enum echd_log_level level, const char *line, void *ud)
{
	static const char marks[] = ".-*#";
	static const int prio[] = {7, 6, 5, 4}; /* debug info notice warning */
	struct timespec ts;
	struct tm tm;
	char tbuf[64];
	FILE *f = log_file ? log_file : stderr;

	if (log_file == NULL && log_journal) {
		/* journald keeps the level from the prefix and adds the time */
		fprintf(stderr, "<%d>%s\n", prio[level], line);
		fflush(stderr);
		return;
	}
	clock_gettime(CLOCK_REALTIME, &ts);
	localtime_r(&ts.tv_sec, &tm);
	strftime(tbuf, sizeof(tbuf), "%d %b %Y %H:%M:%S", &tm);
	fprintf(f, "%d:M %s.%03d %c %s\n", (int)getpid(), tbuf, (int)(ts.tv_nsec / 1000000),
		marks[level], line);
	fflush(f);
}

int
brk_log_open(struct brk_server *srv)
{
	if (log_file != NULL) {
		fclose(log_file);
		log_file = NULL;
	}
	log_journal = brk_sd_journal_stderr();
	if (srv->cfg.logfile && srv->cfg.logfile[0]) {
		log_file = fopen(srv->cfg.logfile, "a");
		if (log_file == NULL) {
			fprintf(stderr, "echd: cannot open logfile '%s': %s\n", srv->cfg.logfile,
				strerror(errno));
			return -1;
		}
	}
	echd_log_set((enum echd_log_level)srv->cfg.loglevel, log_sink, NULL);
	return 0;
}

/* ------------------------------------------------------------------------
 * Signals and cron
 * ---------------------------------------------------------------------- */

static void
signal_cb(evutil_socket_t sig, short what, void *arg)
{
	struct brk_server *srv = arg;

	(void)what;
	if (sig == SIGHUP) {
		char err[512];
		brk_sd_notify("RELOADING=1");
		echd_log(ECHD_LOG_NOTICE, "SIGHUP: reopening the log file, reloading TLS and ACLs");
		brk_log_open(srv);
		brk_tls_reload(srv, err, sizeof(err)); /* logs a refusal itself */
		if (srv->cfg.aclfile && srv->cfg.aclfile[0] && brk_acl_load(srv, err, sizeof(err)) != 0) {
			echd_log(ECHD_LOG_WARNING, "ACL reload refused: %s", err);
		}
		brk_sd_notify("READY=1");
		return;
	}
	echd_log(ECHD_LOG_WARNING, "received %s, scheduling shutdown...",
		sig == SIGTERM ? "SIGTERM" : "SIGINT");
	brk_sd_notify("STOPPING=1\nSTATUS=Finishing the batch in flight");
	srv->shutdown = true;
	event_base_loopbreak(srv->base);
}

/* Free memory glibc may keep before it is handed back (heap_trim). */
#define HEAP_TRIM_BYTES (8u << 20)

/* glibc keeps the heap pages of freed memory for reuse, and after a few
 * big frees it serves even multi-megabyte buffers from the heap: once
 * thousands of clients have gone, or a burst of big replies or requests
 * has been freed, the resident size would stay at its peak. When the free
 * memory held has grown by HEAP_TRIM_BYTES since the last look, give it
 * back. (Other allocators return memory by themselves.) */
static void
heap_trim(void)
{
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
	static size_t kept; /* free bytes held after the last trim */
	struct mallinfo2 mi = mallinfo2();

	if (mi.fordblks < kept) {
		kept = mi.fordblks; /* reused since */
	} else if (mi.fordblks - kept >= HEAP_TRIM_BYTES) {
		malloc_trim(0);
		kept = mi.fordblks; /* trimmed pages stay free chunks: count them as kept */
	}
#endif
}

/* Closes the connections whose handshake or login is overdue. The time
 * counts from accept, not from the last byte: a peer sending a byte now
 * and then (slow loris) is closed all the same. */
static void
unauth_expire(struct brk_server *srv, uint64_t now)
{
	uint64_t tls_ms = (uint64_t)srv->cfg.tls_handshake_timeout * 1000;
	uint64_t auth_ms = (uint64_t)srv->cfg.auth_timeout * 1000;
	uint64_t first = tls_ms < auth_ms ? tls_ms : auth_ms;
	struct brk_conn *c, *next;

	for (c = srv->unauth; c != NULL && now >= c->ctime_ms + first; c = next) {
		next = c->unauth_next; /* closing takes c off the list */
		if ((c->flags & BRK_CONN_HANDSHAKE) && now >= c->ctime_ms + tls_ms) {
			echd_log(ECHD_LOG_VERBOSE,
				"closing client %s: TLS handshake not finished within %llds",
				c->addr, srv->cfg.tls_handshake_timeout);
			brk_conn_close_asap(c);
		} else if (c->user == NULL && now >= c->ctime_ms + auth_ms) {
			echd_log(ECHD_LOG_VERBOSE, "closing client %s: not authenticated within %llds",
				c->addr, srv->cfg.auth_timeout);
			brk_conn_close_asap(c);
		}
	}
}

static void
cron_cb(evutil_socket_t fd, short what, void *arg)
{
	struct brk_server *srv = arg;
	uint64_t now = brk_now_ms();
	static unsigned ticks;

	(void)fd;
	(void)what;
	srv->expire_due = true;
	if (now - srv->stats.ops_sample_ms >= 1000) {
		uint64_t dt = now - srv->stats.ops_sample_ms;
		srv->stats.ops_per_sec =
			(srv->stats.total_commands - srv->stats.ops_sample_cmds) * 1000 / (dt ? dt : 1);
		srv->stats.ops_sample_ms = now;
		srv->stats.ops_sample_cmds = srv->stats.total_commands;
	}
	if (++ticks % 50 == 0) {
		char status[160];
		snprintf(status, sizeof(status),
			"STATUS=%llu clients, %llu blocked, %llu commands, %llu commits",
			(unsigned long long)srv->nconns, (unsigned long long)srv->blocked_clients,
			(unsigned long long)srv->stats.total_commands,
			(unsigned long long)srv->stats.commits);
		brk_sd_notify(status);
	}
	unauth_expire(srv, now);
	if (ticks % 10 != 0) {
		return;
	}
	heap_trim();
	for (struct brk_conn *c = srv->conns; c != NULL; c = c->next) {
		/* refused over TLS, and still waiting for the handshake to say why */
		if ((c->flags & BRK_CONN_REFUSED) &&
			now >= c->ctime_ms + (uint64_t)srv->cfg.tls_handshake_timeout * 1000) {
			brk_conn_close_asap(c);
		}
	}
	if (srv->cfg.timeout <= 0) {
		return;
	}
	for (struct brk_conn *c = srv->conns; c != NULL; c = c->next) {
		/* blocked clients wait for their own timeout; monitors only listen */
		if (c->blk == NULL && !(c->flags & BRK_CONN_MONITOR) &&
			now - c->last_ms > (uint64_t)srv->cfg.timeout * 1000) {
			echd_log(ECHD_LOG_VERBOSE, "closing idle client %s", c->addr);
			brk_conn_close_asap(c);
		}
	}
}

static void
watchdog_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
	/* sent from the loop: a loop that is stuck stops sending it */
	brk_sd_notify("WATCHDOG=1");
}

/* ------------------------------------------------------------------------
 * Life cycle
 * ---------------------------------------------------------------------- */

int
brk_server_init(struct brk_server *srv)
{
	struct storage_opts so;
	struct storage_opt *eopt;
	struct timeval tv100 = {0, 100000}, tv1s = {1, 0};
	uint64_t wd;
	int rc, activated;

	srv->pid = getpid();
	srv->stats.start_ms = brk_now_ms();
	srv->stats.ops_sample_ms = srv->stats.start_ms;
	srv->next_client_id = 1;
	if (brk_log_open(srv) != 0) {
		return -1;
	}
	signal(SIGPIPE, SIG_IGN);
	srv->cmdstats = echd_calloc(brk_cmd_count(), sizeof(*srv->cmdstats));
	if (srv->cmdstats == NULL) {
		return -1;
	}
	{
		char err[512];
		if (brk_acl_init(srv, err, sizeof(err)) != 0) {
			echd_log(ECHD_LOG_WARNING, "ACL: %s", err);
			return BRK_INIT_CONFIG;
		}
	}
	rc = brk_mkdir_p(srv->cfg.dir);
	if (rc != 0) {
		echd_log(ECHD_LOG_WARNING, "cannot create data directory '%s': %s", srv->cfg.dir,
			echd_strerror(rc));
		return -1;
	}
	if (brk_lock_dir(srv) != 0) {
		return -1;
	}
	brk_ha_announce(srv);
	if (srv->cfg.storage_backend != NULL && !strcmp(srv->cfg.storage_backend, "postgres") &&
		(srv->cfg.storage_url == NULL || srv->cfg.storage_url[0] == '\0')) {
		echd_log(ECHD_LOG_WARNING, "storage postgres needs storage-url (a libpq "
					   "URI such as postgresql://user@host/db, or key=value "
					   "words)");
		return BRK_INIT_CONFIG;
	}
	if (srv->cfg.cluster_enabled) {
		/* before the storage: the engine records it for the other front ends */
		rc = brk_cluster_node_id(srv->cfg.dir, srv->cfg.cluster_node);
		if (rc != 0) {
			echd_log(ECHD_LOG_WARNING, "cannot read or write %s/cluster-node-id: %s",
				srv->cfg.dir, echd_strerror(rc));
			return -1;
		}
	}
	memset(&so, 0, sizeof(so));
	so.dir = srv->cfg.dir;
	so.sync_mode = STORAGE_SYNC_DATA;
	/* the engines' own options travel opaque: config.c's table names them */
	if (brk_config_engine_opts(&srv->cfg, &eopt, &so.nopt) != 0) {
		return -1;
	}
	so.opt = eopt;
	rc = storage_open(srv->cfg.storage_backend, &so, &srv->st);
	brk_config_engine_opts_free(eopt, so.nopt);
	if (rc != 0 && srv->cfg.storage_url != NULL && srv->cfg.storage_url[0] != '\0') {
		char shown[512];
		echd_url_redact(srv->cfg.storage_url, shown, sizeof(shown)); /* never the password */
		echd_log(ECHD_LOG_WARNING, "cannot open storage '%s' at '%s' (schema %s): %s",
			srv->cfg.storage_backend, shown, srv->cfg.storage_pg_schema, echd_strerror(rc));
		return -1;
	}
	if (rc != 0) {
		echd_log(ECHD_LOG_WARNING, "cannot open storage '%s' in '%s': %s",
			srv->cfg.storage_backend, srv->cfg.dir, echd_strerror(rc));
		return -1;
	}
	rc = brk_cluster_check(srv);
	if (rc != 0) {
		return rc;
	}
	if (stream_cache_create(&srv->xcache) != 0) {
		return -1;
	}
	srv->gc_pending = true; /* finish deletions a previous run left */
	{
		/* precise timers: flush-wait-us is in microseconds */
		struct event_config *ec = event_config_new();
		if (ec == NULL) {
			return -1;
		}
		event_config_set_flag(ec, EVENT_BASE_FLAG_PRECISE_TIMER);
		srv->base = event_base_new_with_config(ec);
		event_config_free(ec);
	}
	if (srv->base == NULL) {
		return -1;
	}
	srv->flush_timer = evtimer_new(srv->base, brk_flush_timer_cb, srv);
	srv->durable_fd = -1;
	srv->inflight = storage_inflight(srv->st);
	if (srv->flush_timer == NULL) {
		return -1;
	}
	rc = brk_policy_load(srv);
	if (rc != 0) {
		echd_log(ECHD_LOG_WARNING, "cannot load group policies: %s", echd_strerror(rc));
		return -1;
	}
	if (brk_ha_init(srv) != 0 || brk_fetch_init(srv) != 0) {
		return -1;
	}
	activated = brk_sd_listen_fds();
	if (activated < 0) {
		echd_log(ECHD_LOG_WARNING, "socket activation: %s", echd_strerror(activated));
		return -1;
	}
	if (activated > 0) {
		if (brk_listen_activated(srv, activated) != 0) {
			return -1;
		}
	} else if (srv->cfg.port != 0) {
		for (int i = 0; i < srv->cfg.nbind; i++) {
			if (brk_listen_tcp(srv, srv->cfg.bind[i], srv->cfg.port, false) != 0) {
				echd_log(ECHD_LOG_WARNING, "failed listening on %s port %d, exiting",
					srv->cfg.bind[i], srv->cfg.port);
				return -1;
			}
		}
		if (srv->nlisteners == 0) {
			echd_log(ECHD_LOG_WARNING, "no TCP address could be bound, exiting");
			return -1;
		}
	}
	if (activated == 0 && srv->cfg.tls_port != 0) {
		if (brk_tls_init(srv) != 0) {
			return BRK_INIT_CONFIG; /* a certificate, key or CA that does not load */
		}
		for (int i = 0; i < srv->cfg.nbind; i++) {
			if (brk_listen_tcp(srv, srv->cfg.bind[i], srv->cfg.tls_port, true) != 0) {
				echd_log(ECHD_LOG_WARNING, "failed listening on %s TLS port %d, exiting",
					srv->cfg.bind[i], srv->cfg.tls_port);
				return -1;
			}
		}
		echd_log(ECHD_LOG_NOTICE, "Ready to accept connections tls on port %d",
			srv->bound_tls_port);
	}
	/* HTTP is not part of socket activation: it listens on its own port. */
	rc = brk_http_init(srv);
	if (rc != 0) {
		return rc;
	}
	/* With socket activation the manager's sockets are all we listen on. */
	if (activated == 0 && srv->cfg.unixsocket && srv->cfg.unixsocket[0] &&
		brk_listen_unix(srv) != 0) {
		return -1;
	}
	if (srv->nlisteners == 0) {
		echd_log(ECHD_LOG_WARNING, "nothing to listen on: set port or unixsocket");
		return BRK_INIT_CONFIG;
	}
	if (brk_cluster_init(srv) != 0) {
		return -1;
	}
	srv->sig_term = evsignal_new(srv->base, SIGTERM, signal_cb, srv);
	srv->sig_int = evsignal_new(srv->base, SIGINT, signal_cb, srv);
	srv->sig_hup = evsignal_new(srv->base, SIGHUP, signal_cb, srv);
	srv->cron = event_new(srv->base, -1, EV_PERSIST, cron_cb, srv);
	srv->fsync_timer = event_new(srv->base, -1, EV_PERSIST, brk_fsync_timer_cb, srv);
	if (!srv->sig_term || !srv->sig_int || !srv->sig_hup || !srv->cron || !srv->fsync_timer) {
		return -1;
	}
	evsignal_add(srv->sig_term, NULL);
	evsignal_add(srv->sig_int, NULL);
	evsignal_add(srv->sig_hup, NULL);
	event_add(srv->cron, &tv100);
	if (srv->cfg.appendfsync == BRK_FSYNC_EVERYSEC) {
		event_add(srv->fsync_timer, &tv1s);
	}
	brk_pidfile_write(srv);
	echd_log(ECHD_LOG_NOTICE, "echd %s started, pid %d, data in %s, appendfsync %s",
		ECHD_VERSION, (int)srv->pid, srv->cfg.dir,
		srv->cfg.appendfsync == BRK_FSYNC_ALWAYS ? "always" : "everysec");
	if (srv->cfg.port != 0) {
		echd_log(ECHD_LOG_NOTICE, "Ready to accept connections tcp on port %d",
			srv->bound_port);
	}
	if (srv->cfg.unixsocket && srv->cfg.unixsocket[0] && activated == 0) {
		echd_log(ECHD_LOG_NOTICE, "Ready to accept connections unix on %s",
			srv->cfg.unixsocket);
	}
	wd = brk_sd_watchdog_usec();
	if (wd > 0) {
		struct timeval tv = {(time_t)(wd / 2 / 1000000), (suseconds_t)(wd / 2 % 1000000)};
		srv->watchdog = event_new(srv->base, -1, EV_PERSIST, watchdog_cb, srv);
		if (srv->watchdog == NULL) {
			return -1;
		}
		event_add(srv->watchdog, &tv);
	}
	/* The environment is open and every listener is bound: ready. */
	{
		char msg[128];
		snprintf(msg, sizeof(msg), "READY=1\nSTATUS=Ready to accept connections\nMAINPID=%d",
			(int)srv->pid);
		brk_sd_notify(msg);
	}
	return 0;
}

static void
close_pending(struct brk_server *srv)
{
	while (srv->closing != NULL) {
		struct brk_conn *c = srv->closing;
		srv->closing = c->closing_next;
		brk_conn_destroy(c);
	}
}

/* Runs the requests of connections that have some buffered. */
static void
run_pending(struct brk_server *srv)
{
	struct brk_conn *list = srv->pending;

	srv->pending = NULL;
	while (list != NULL) {
		struct brk_conn *c = list;
		list = c->pending_next;
		c->pending_next = NULL;
		c->flags &= ~BRK_CONN_PENDING;
		if (!(c->flags & BRK_CONN_CLOSING)) {
			brk_conn_process(c);
		}
	}
}

int
brk_server_run(struct brk_server *srv)
{
	brk_clock_cache(true);
	while (!srv->shutdown) {
		int flags = EVLOOP_ONCE;

		if (srv->ready_head != NULL || srv->pending != NULL || srv->expire_due ||
			srv->maint_more) {
			/* expire_due: more expired keys to drop; maint_more: more
			 * staged rows to file while idle */
			flags |= EVLOOP_NONBLOCK;
		}
		brk_clock_refresh(); /* the turn's time is read after the poll */
		if (event_base_loop(srv->base, flags) < 0) {
			echd_log(ECHD_LOG_WARNING, "event loop failed");
			srv->exit_code = 1;
			break;
		}
		run_pending(srv);
		brk_serve_ready(srv);
		brk_batch_end(srv);
		close_pending(srv);
	}
	brk_clock_cache(false);
	/* Finish the batch in flight so every reply it holds is true. */
	brk_batch_end(srv);
	close_pending(srv);
	return srv->exit_code;
}

void
brk_pidfile_write(struct brk_server *srv)
{
	if (srv->cfg.pidfile && srv->cfg.pidfile[0]) {
		FILE *f = fopen(srv->cfg.pidfile, "w");
		if (f != NULL) {
			fprintf(f, "%d\n", (int)srv->pid);
			fclose(f);
			brk_made_note(srv->cfg.pidfile, &srv->made_pidfile);
		}
	}
}

/* It goes only if it still holds this process' pid: an echd started later
 * on the same path rewrote it in place. */
void
brk_pidfile_remove(struct brk_server *srv)
{
	char buf[32];
	FILE *f;

	if (srv->made_pidfile.ino == 0 || (f = fopen(srv->cfg.pidfile, "r")) == NULL) {
		return;
	}
	if (fgets(buf, sizeof(buf), f) == NULL || strtol(buf, NULL, 10) != (long)srv->pid) {
		srv->made_pidfile.ino = 0;
	}
	fclose(f);
	brk_made_remove(srv->cfg.pidfile, &srv->made_pidfile);
}

void
brk_server_finish(struct brk_server *srv)
{
	for (int i = 0; i < srv->nlisteners; i++) {
		evconnlistener_free(srv->listeners[i]);
	}
	srv->nlisteners = 0;
	brk_http_finish(srv);
	if (srv->batch != NULL) {
		brk_batch_commit(srv);
	}
	if (srv->st != NULL) {
		brk_release_durable(srv, brk_storage_flush(srv));
	}
	while (srv->conns != NULL) {
		struct brk_conn *c = srv->conns;
		brk_conn_flush(c, c->out.len);
		brk_conn_destroy(c);
	}
	brk_pubsub_finish(srv);
	brk_policy_finish(srv);
	brk_ha_finish(srv);
	brk_cluster_finish(srv);
	brk_fetch_finish(srv);
	brk_slowlog_reset(srv);
	brk_acllog_reset(srv);
	stream_cache_destroy(srv->xcache); /* the batch committed above flushed it */
	srv->xcache = NULL;
	if (srv->st != NULL) {
		storage_close(srv->st);
		srv->st = NULL;
		echd_log(ECHD_LOG_NOTICE, "storage closed; echd is now ready to exit, bye bye...");
	}
	if (srv->cfg.unixsocket) {
		brk_made_remove(srv->cfg.unixsocket, &srv->made_socket);
	}
	if (srv->cfg.pidfile) {
		brk_pidfile_remove(srv);
	}
	if (srv->lock_fd > 0) {
		close(srv->lock_fd); /* after the storage: the next echd may open it now */
		srv->lock_fd = 0;
	}
	if (srv->sig_term) {
		event_free(srv->sig_term);
	}
	if (srv->sig_int) {
		event_free(srv->sig_int);
	}
	if (srv->sig_hup) {
		event_free(srv->sig_hup);
	}
	if (srv->cron) {
		event_free(srv->cron);
	}
	if (srv->fsync_timer) {
		event_free(srv->fsync_timer);
	}
	if (srv->flush_timer) {
		event_free(srv->flush_timer);
	}
	if (srv->durable_ev) {
		event_free(srv->durable_ev);
	}
	if (srv->watchdog) {
		event_free(srv->watchdog);
	}
	for (size_t i = 0; i < srv->wk_size; i++) {
		struct brk_waitkey *wk = srv->wk_table[i], *next;
		for (; wk != NULL; wk = next) {
			next = wk->hnext;
			echd_free(wk->waiters);
			echd_free(wk->watchers);
			echd_free(wk->name);
			echd_free(wk);
		}
	}
	ECHD_FREE(srv->wk_table);
	brk_seen_clear(srv);
	if (srv->base) {
		event_base_free(srv->base);
	}
	brk_latency_reset_hists(srv);
	brk_latency_free(srv);
	ECHD_FREE(srv->cmdstats);
	brk_acl_finish(srv);
	brk_tls_finish(srv);
	brk_config_finish(&srv->cfg);
	if (log_file) {
		fclose(log_file);
		log_file = NULL;
	}
}
