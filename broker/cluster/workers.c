/* workers.c - a front end active for several shards at once
 * (cluster-shards-per-node N > 1).
 *
 * The engine makes a front end active for one shard: one PostgreSQL
 * session, one fence, one loop. Above 1, echd becomes a supervisor of N
 * worker processes, each a whole front end of its own (its loop, session,
 * data directory <dir>/node<i> with its node id, and port + i), active for
 * one shard no one holds or standing by, as a front end of 1 is. So one
 * echd serves up to N shards on up to N CPUs, and clients see a cluster
 * node per worker, as they see several redis-server processes on one host.
 *
 * The supervisor binds nothing and opens no storage. It forwards SIGTERM,
 * SIGINT and SIGHUP, starts again a worker that dies (after a delay that
 * doubles while it keeps dying young), and speaks to systemd for all of
 * them: READY once every worker is, WATCHDOG once every worker has sent one
 * since the last. A worker that exits 0 by itself (SHUTDOWN) stays down; a
 * worker that exits before it was ever ready (the configuration, a port
 * taken) stops the lot with its exit status, as one echd would not start. A kill -9 of the supervisor takes its workers with it
 * (PR_SET_PDEATHSIG), so their shards are free for a standby at once.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "broker.h"
#include "clock.h"
#include "cluster.h"
#include "server.h"

/* A worker that dies is started again after WORKER_RESTART_MS, doubled while
 * it keeps dying within WORKER_YOUNG_MS of its start, up to WORKER_RESTART_MAX_MS. */
#define WORKER_RESTART_MS     1000
#define WORKER_RESTART_MAX_MS 30000
#define WORKER_YOUNG_MS       10000

struct worker {
	pid_t pid;              /* 0: not running */
	uint64_t started_ms;
	uint64_t restart_at_ms; /* pid 0 and not done: start it again then */
	unsigned delay_ms;      /* the delay of its next start again */
	bool ever_ready;        /* said READY=1 once */
	bool ready;             /* ... since it last started */
	bool watchdog;          /* said WATCHDOG=1 since the last one relayed */
	bool done;              /* exited 0 by itself: not started again */
};

struct sup {
	struct brk_server *srv;
	struct worker w[BRK_WORKERS_MAX];
	int n;
	int fd[2];           /* notes from workers: [0] read here, [1] theirs */
	pid_t self;
	sigset_t orig;       /* the mask a worker gets back */
	bool stopping;
	bool told_ready;
	int exit_code;
};

static volatile sig_atomic_t got_term, got_hup, got_chld;

static void
on_signal(int sig)
{
	if (sig == SIGCHLD) {
		got_chld = 1;
	} else if (sig == SIGHUP) {
		got_hup = 1;
	} else {
		got_term = 1;
	}
}

/* The supervisor has no loop: its one thread reads the clock as the loop's would. */
static uint64_t
mono_ms(void)
{
	return brk_now_us() / 1000;
}

/* Replaces the owned string *s with a + b + (i >= 0: i in decimal); the old
 * one is freed. Returns 0 or -ENOMEM. */
static int
set_str(char **s, const char *a, const char *b, int i)
{
	char num[16] = "";
	size_t n;
	char *t;

	if (i >= 0) {
		snprintf(num, sizeof(num), "%d", i);
	}
	n = strlen(a) + strlen(b) + strlen(num);
	t = malloc(n + 1);
	if (t == NULL) {
		return -ENOMEM;
	}
	snprintf(t, n + 1, "%s%s%s", a, b, num);
	free(*s);
	*s = t;
	return 0;
}

/* In the child of a fork: becomes worker i. Returns 0, or -1 when it must
 * not go on (logged). */
static int
become_worker(struct sup *s, int i)
{
	struct brk_server *srv = s->srv;
	struct brk_config *cfg = &srv->cfg;
	struct sigaction sa;
	char pid[32];

	/* the supervisor's death is this worker's: its shard is free at once */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != s->self) {
		_exit(1);
	}
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = SIG_DFL;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	sigaction(SIGCHLD, &sa, NULL);
	sigprocmask(SIG_SETMASK, &s->orig, NULL);
	close(s->fd[0]);
	brk_sd_notify_via(s->fd[1], i);
	if (getenv("WATCHDOG_USEC") != NULL) {
		/* the interval is the supervisor's to keep; the worker sends to it */
		snprintf(pid, sizeof(pid), "%d", (int)getpid());
		setenv("WATCHDOG_PID", pid, 1);
	}
	if (srv->lock_fd > 0) {
		close(srv->lock_fd); /* the supervisor's; the worker locks its own dir */
		srv->lock_fd = 0;
	}
	memset(&srv->made_pidfile, 0, sizeof(srv->made_pidfile)); /* the supervisor's */
	srv->worker = i + 1;
	/* port p of worker i: p + i, 0 (none) stays 0; check_config() saw it fits */
	cfg->port += cfg->port != 0 ? i : 0;
	cfg->tls_port += cfg->tls_port != 0 ? i : 0;
	cfg->http_port += cfg->http_port != 0 ? i : 0;
	cfg->ha_announce_port += cfg->ha_announce_port != 0 ? i : 0;
	if (set_str(&cfg->dir, cfg->dir, "/node", i) != 0 ||
		set_str(&cfg->pidfile, "", "", -1) != 0 ||
		(i > 0 && cfg->unixsocket != NULL && cfg->unixsocket[0] != '\0' &&
			set_str(&cfg->unixsocket, cfg->unixsocket, ".", i) != 0)) {
		echd_log(ECHD_LOG_WARNING, "worker %d: out of memory", i);
		return -1;
	}
	return 0;
}

/* Starts worker i. Returns 1 in the new worker (which goes on to serve),
 * 0 in the supervisor (started or not: a failed fork is tried again
 * later), -1 in a worker that must exit. */
static int
start_worker(struct sup *s, int i)
{
	struct worker *w = &s->w[i];
	pid_t pid = fork();

	if (pid == 0) {
		return become_worker(s, i) == 0 ? 1 : -1;
	}
	if (pid < 0) {
		echd_log(ECHD_LOG_WARNING, "cannot start worker %d: %s", i, strerror(errno));
		w->restart_at_ms = mono_ms() + w->delay_ms;
		return 0;
	}
	w->pid = pid;
	w->started_ms = mono_ms();
	w->ready = false;
	w->watchdog = false;
	echd_log(ECHD_LOG_NOTICE, "worker %d started (pid %d, port %d)", i, (int)pid,
		s->srv->cfg.port != 0 ? s->srv->cfg.port + i : 0);
	return 0;
}

static void
signal_all(struct sup *s, int sig)
{
	for (int i = 0; i < s->n; i++) {
		if (s->w[i].pid > 0) {
			kill(s->w[i].pid, sig);
		}
	}
}

static void
stop_all(struct sup *s, int exit_code)
{
	if (!s->stopping) {
		s->stopping = true;
		brk_sd_notify("STOPPING=1");
	}
	if (exit_code > s->exit_code) {
		s->exit_code = exit_code;
	}
	signal_all(s, SIGTERM);
}

static void
reap(struct sup *s)
{
	int st;
	pid_t pid;

	while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
		struct worker *w;
		int i = 0;
		uint64_t now = mono_ms();

		while (i < s->n && s->w[i].pid != pid) {
			i++;
		}
		if (i == s->n) {
			continue;
		}
		w = &s->w[i];
		w->pid = 0;
		w->ready = false;
		if (WIFEXITED(st)) {
			echd_log(WEXITSTATUS(st) == 0 ? ECHD_LOG_NOTICE : ECHD_LOG_WARNING,
				"worker %d (pid %d) exited with status %d", i, (int)pid, WEXITSTATUS(st));
		} else {
			echd_log(ECHD_LOG_WARNING, "worker %d (pid %d) was killed by signal %d", i,
				(int)pid, WIFSIGNALED(st) ? WTERMSIG(st) : 0);
		}
		if (s->stopping) {
			if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
				s->exit_code = s->exit_code != 0 ? s->exit_code : 1;
			}
			continue;
		}
		if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
			w->done = true; /* SHUTDOWN: it was asked to stop */
			continue;
		}
		if (WIFEXITED(st) && !w->ever_ready) {
			/* it could not start (the configuration, a port taken): as a
			 * front end of one worker would, echd does not start */
			echd_log(ECHD_LOG_WARNING, "worker %d could not start; stopping", i);
			stop_all(s, WEXITSTATUS(st));
			continue;
		}
		if (now - w->started_ms >= WORKER_YOUNG_MS) {
			w->delay_ms = WORKER_RESTART_MS;
		}
		w->restart_at_ms = now + w->delay_ms;
		echd_log(ECHD_LOG_NOTICE, "worker %d starts again in %u ms", i, w->delay_ms);
		w->delay_ms = w->delay_ms * 2 > WORKER_RESTART_MAX_MS ? WORKER_RESTART_MAX_MS :
			w->delay_ms * 2;
	}
}

/* Reads the workers' notifications: READY and WATCHDOG are relayed once
 * every running worker has sent its own. */
static void
read_notes(struct sup *s)
{
	char msg[512];
	ssize_t len;

	while ((len = recv(s->fd[0], msg, sizeof(msg) - 1, MSG_DONTWAIT)) > 0) {
		char *end;
		long i;
		bool all_ready = true, all_dog = true;

		msg[len] = '\0';
		i = strtol(msg, &end, 10);
		if (end == msg || *end != ':' || i < 0 || i >= s->n || s->w[i].pid == 0) {
			continue;
		}
		for (char *line = end + 1; line != NULL && *line != '\0';) {
			char *nl = strchr(line, '\n');

			if (nl != NULL) {
				*nl = '\0';
			}
			if (!strcmp(line, "READY=1")) {
				s->w[i].ready = s->w[i].ever_ready = true;
			} else if (!strcmp(line, "WATCHDOG=1")) {
				s->w[i].watchdog = true;
			}
			line = nl != NULL ? nl + 1 : NULL;
		}
		for (int j = 0; j < s->n; j++) {
			const struct worker *w = &s->w[j];
			all_ready &= w->ready || w->done;
			all_dog &= w->watchdog || w->done || w->pid == 0;
		}
		if (all_ready && !s->told_ready) {
			char st[96];

			s->told_ready = true;
			snprintf(st, sizeof(st), "READY=1\nSTATUS=Ready: %d workers", s->n);
			echd_log(ECHD_LOG_NOTICE, "all %d workers are ready", s->n);
			brk_sd_notify(st);
		}
		if (all_dog) {
			for (int j = 0; j < s->n; j++) {
				s->w[j].watchdog = false;
			}
			brk_sd_notify("WATCHDOG=1");
		}
	}
}

/* The refusals the workers would each log, said once; BRK_INIT_CONFIG or 0. */
static int
check_config(const struct brk_config *cfg, int n)
{
	const struct {
		const char *name;
		long long v;
	} ports[] = {{"port", cfg->port}, {"tls-port", cfg->tls_port},
		{"http-port", cfg->http_port}, {"ha-announce-port", cfg->ha_announce_port}};
	const char *pid = getenv("LISTEN_PID");

	if (!cfg->cluster_enabled) {
		echd_log(ECHD_LOG_WARNING, "cluster-shards-per-node %d needs cluster-enabled yes", n);
		return BRK_INIT_CONFIG;
	}
	for (size_t k = 0; k < sizeof(ports) / sizeof(ports[0]); k++) {
		if (ports[k].v != 0 && ports[k].v + n - 1 > 65535) {
			echd_log(ECHD_LOG_WARNING, "cluster-shards-per-node %d: %s %lld + %d is past "
						   "65535", n, ports[k].name, ports[k].v, n - 1);
			return BRK_INIT_CONFIG;
		}
	}
	if (pid != NULL && atoll(pid) == (long long)getpid()) {
		echd_log(ECHD_LOG_WARNING, "cluster-shards-per-node %d: each worker binds its own "
					   "port, so echd takes no sockets from systemd", n);
		return BRK_INIT_CONFIG;
	}
	return 0;
}

int
brk_workers_run(struct brk_server *srv, bool *worker)
{
	struct sup s;
	struct sigaction sa;
	sigset_t block;
	int rc;

	*worker = false;
	memset(&s, 0, sizeof(s));
	s.srv = srv;
	s.n = (int)srv->cfg.cluster_shards_per_node;
	s.fd[0] = s.fd[1] = -1;
	s.self = srv->pid = getpid();
	if (brk_log_open(srv) != 0) {
		return 1;
	}
	rc = check_config(&srv->cfg, s.n);
	if (rc != 0) {
		return rc;
	}
	rc = brk_mkdir_p(srv->cfg.dir);
	if (rc != 0) {
		echd_log(ECHD_LOG_WARNING, "cannot create data directory '%s': %s", srv->cfg.dir,
			echd_strerror(rc));
		return 1;
	}
	if (brk_lock_dir(srv) != 0) {
		return 1;
	}
	if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, s.fd) != 0) {
		echd_log(ECHD_LOG_WARNING, "cannot make the workers' socket: %s", strerror(errno));
		s.exit_code = 1;
		goto out;
	}
	brk_pidfile_write(srv);
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&block);
	sigaddset(&block, SIGTERM);
	sigaddset(&block, SIGINT);
	sigaddset(&block, SIGHUP);
	sigaddset(&block, SIGCHLD);
	/* blocked but while pselect() waits: a signal is never missed between checks */
	sigprocmask(SIG_BLOCK, &block, &s.orig);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	sigaction(SIGCHLD, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	echd_log(ECHD_LOG_NOTICE, "echd supervises %d workers (cluster-shards-per-node), "
				  "pid %d", s.n, (int)s.self);
	for (int i = 0; i < s.n; i++) {
		s.w[i].delay_ms = WORKER_RESTART_MS;
		rc = start_worker(&s, i);
		if (rc != 0) {
			*worker = rc > 0;
			return rc > 0 ? 0 : 1;
		}
	}
	for (;;) {
		struct timespec ts, *tsp = NULL;
		uint64_t now = mono_ms(), next = UINT64_MAX;
		fd_set rd;
		int live = 0;

		for (int i = 0; i < s.n; i++) {
			struct worker *w = &s.w[i];

			if (w->pid == 0 && !w->done && !s.stopping && w->restart_at_ms <= now) {
				rc = start_worker(&s, i);
				if (rc != 0) {
					*worker = rc > 0;
					return rc > 0 ? 0 : 1;
				}
			}
			if (w->pid == 0 && !w->done && !s.stopping && w->restart_at_ms < next) {
				next = w->restart_at_ms;
			}
			live += w->pid > 0;
		}
		if (live == 0 && (s.stopping || next == UINT64_MAX)) {
			break; /* stopped, or every worker was shut down */
		}
		if (next != UINT64_MAX) {
			uint64_t wait = next > now ? next - now : 0;
			ts.tv_sec = (time_t)(wait / 1000);
			ts.tv_nsec = (long)(wait % 1000) * 1000000;
			tsp = &ts;
		}
		FD_ZERO(&rd);
		FD_SET(s.fd[0], &rd);
		if (pselect(s.fd[0] + 1, &rd, NULL, NULL, tsp, &s.orig) > 0) {
			read_notes(&s);
		}
		if (got_chld) {
			got_chld = 0;
			reap(&s);
		}
		if (got_term) {
			got_term = 0;
			echd_log(ECHD_LOG_WARNING, "stopping the workers");
			stop_all(&s, 0);
		}
		if (got_hup) {
			/* READY again once every worker has reloaded (each says READY) */
			got_hup = 0;
			brk_sd_notify("RELOADING=1");
			brk_log_open(srv);
			s.told_ready = false;
			for (int i = 0; i < s.n; i++) {
				s.w[i].ready = false;
			}
			signal_all(&s, SIGHUP);
		}
	}
	echd_log(ECHD_LOG_NOTICE, "every worker has stopped: echd exits");
out:
	if (s.fd[0] >= 0) {
		close(s.fd[0]);
		close(s.fd[1]);
	}
	if (srv->cfg.pidfile != NULL) {
		brk_pidfile_remove(srv);
	}
	if (srv->lock_fd > 0) {
		close(srv->lock_fd);
		srv->lock_fd = 0;
	}
	return s.exit_code;
}
