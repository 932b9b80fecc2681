/* fuzz_dispatch.c - libFuzzer harness for whole-command dispatch.
 *
 * Each input is a stream of RESP requests (multibulk or inline) run against
 * a broker built by hand around a throw-away LMDB environment: no socket,
 * no listener, no event loop turn. The harness plays the loop's part:
 *   - two client connections (no bufferevent); requests go to the first,
 *     or to the second while the first is blocked or closing;
 *   - a "turn" ends every few requests (the count comes from the input
 *     hash) or when the batch is full: the batch commits with
 *     brk_batch_commit(), deferred deletions and active expiry run as
 *     gc_step() and expire_step() do, the replies held for the turn are
 *     checked and thrown away, and blocked clients whose keys changed run
 *     again, as serve_ready() does;
 *   - a client still blocked when the other is needed, or at the end,
 *     times out as block_timeout_cb() does.
 * The oracle besides ASan/UBSan/LSan: every connection's output must be a
 * sequence of whole, well-formed replies, with RESP3 types only on a
 * connection that spoke RESP3 in that turn (fuzz_common.h); and once the
 * broker has closed the environment, `echo-admin check` (adm_check()) must
 * find every counter and index in agreement with the rows, whatever the
 * commands did and wherever an allocation failed.
 *
 * The environment lives in $FUZZ_TMPDIR, or /dev/shm when it is writable
 * (commits fsync), or $TMPDIR; it is made afresh for every input, so a
 * saved crash replays alone. One input in eight also has one allocation
 * failure injected.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "adm.h"
#include "broker.h"
#include "server.h" /* the turn's expiry and gc steps, driven by hand */

#include "fuzz_common.h"

#define NCONN        2
#define MAX_REQUESTS 4096
#define MAX_TURNS    8 /* ready-client rounds after one commit */

static char env_dir[PATH_MAX];
static bool spoke_resp3[NCONN];
/* The first client's replies, kept for self_test() (else they are dropped). */
static struct {
	bool on;
	size_t len;
	char buf[4096];
} capture;

static void
log_discard(enum echd_log_level level, const char *line, void *ud)
{
	(void)level;
	(void)line;
	(void)ud;
}

static void
dir_clear(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char path[PATH_MAX + 256];

	if (d == NULL) {
		return;
	}
	while ((e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) {
			continue;
		}
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		unlink(path);
	}
	closedir(d);
}

static void
cleanup_at_exit(void)
{
	if (env_dir[0]) {
		dir_clear(env_dir);
		rmdir(env_dir);
	}
}

static void
config_set(struct brk_server *srv, const char *name, const char *value)
{
	char *words[2] = {(char *)name, (char *)value};
	char err[256];

	if (brk_config_apply(&srv->cfg, 2, words, false, err, sizeof(err)) != 0) {
		fprintf(stderr, "fuzz: config %s %s: %s\n", name, value, err);
		abort();
	}
}

/* What brk_server_init() does, less the listeners, signals and timers. */
static void
server_setup(struct brk_server *srv)
{
	struct storage_opts so;
	struct storage_opt *eopt;
	char err[512];
	int rc;

	memset(srv, 0, sizeof(*srv));
	brk_config_defaults(&srv->cfg);
	config_set(srv, "dir", env_dir);
	config_set(srv, "map-size", "1mb"); /* so that growing the map is exercised */
	config_set(srv, "maxdisk", "256mb");
	srv->pid = getpid();
	srv->stats.start_ms = brk_now_ms();
	srv->stats.ops_sample_ms = srv->stats.start_ms;
	srv->next_client_id = 1;
	srv->cmdstats = echd_calloc(brk_cmd_count(), sizeof(*srv->cmdstats));
	if (srv->cmdstats == NULL) {
		abort();
	}
	if (brk_acl_init(srv, err, sizeof(err)) != 0) {
		fprintf(stderr, "fuzz: ACL: %s\n", err);
		abort();
	}
	memset(&so, 0, sizeof(so));
	so.dir = srv->cfg.dir;
	so.sync_mode = STORAGE_SYNC_DATA;
	if (brk_config_engine_opts(&srv->cfg, &eopt, &so.nopt) != 0) {
		abort();
	}
	so.opt = eopt;
	rc = storage_open(srv->cfg.storage_backend, &so, &srv->st);
	brk_config_engine_opts_free(eopt, so.nopt);
	if (rc != 0) {
		fprintf(stderr, "fuzz: cannot open storage in %s: %s\n", env_dir,
			echd_strerror(rc));
		abort();
	}
	srv->base = event_base_new();
	if (srv->base == NULL) {
		abort();
	}
}

/* What brk_conn_create() does, without a socket. */
static struct brk_conn *
conn_setup(struct brk_server *srv, int i)
{
	struct brk_conn *c = echd_calloc(1, sizeof(*c));
	struct resp_limits lim;

	if (c == NULL) {
		abort();
	}
	c->srv = srv;
	c->fd = -1;
	c->resp = 2;
	resp_buf_init(&c->out);
	c->w.out = &c->out;
	c->w.proto = 2;
	resp_limits_default(&lim);
	lim.max_bulk_len = (size_t)srv->cfg.proto_max_bulk_len;
	lim.max_multibulk_len = (size_t)srv->cfg.proto_max_multibulk_len;
	lim.max_inline_len = (size_t)srv->cfg.proto_inline_max_size;
	lim.max_query_buf = (size_t)srv->cfg.query_buf_limit;
	c->rd = resp_reader_create(&lim);
	if (c->rd == NULL) {
		abort();
	}
	c->id = srv->next_client_id++;
	snprintf(c->addr, sizeof(c->addr), "127.0.0.1:%d", 40000 + i);
	snprintf(c->laddr, sizeof(c->laddr), "127.0.0.1:6379");
	c->ctime_ms = c->last_ms = brk_now_ms();
	/* as brk_conn_create(): no password, so the default user is logged in */
	if (brk_acl_nopass_default(srv)) {
		c->user = brk_acl_find(srv, "default", 7);
	}
	c->next = srv->conns;
	if (srv->conns) {
		srv->conns->prev = c;
	}
	srv->conns = c;
	srv->nconns++;
	return c;
}

static bool
usable(const struct brk_conn *c)
{
	return !(c->flags & (BRK_CONN_CLOSE_AFTER_REPLY | BRK_CONN_CLOSING));
}

/* block_timeout_cb(): the client's BLOCK (or WAIT) ran out. */
static void
time_out(struct brk_conn *c)
{
	brk_block_end(c, NULL);
}

static void
note_proto(struct brk_conn *const *conns)
{
	for (int i = 0; i < NCONN; i++) {
		spoke_resp3[i] |= conns[i]->w.proto == 3;
	}
}

/* batch_end() and the reply release, with every reply checked and dropped. */
static void
turn_end(struct brk_server *srv, struct brk_conn *const *conns)
{
	struct brk_conn *c, *next;

	brk_expire_step(srv);
	if (srv->gc_pending) {
		brk_gc_step(srv);
	}
	if (brk_batch_commit(srv) == ECHD_EMAPFULL) {
		(void)brk_storage_grow(srv);
	}
	srv->batch_cmds = 0; /* a turn of commands that touched no storage */
	for (c = srv->held; c != NULL; c = next) {
		next = c->held_next;
		c->held_next = NULL;
		c->flags &= ~BRK_CONN_HELD;
	}
	srv->held = NULL;
	note_proto(conns);
	for (int i = 0; i < NCONN; i++) {
		c = conns[i];
		if (c->out.oom) {
			/* brk_conn_flush() closes such a client */
			c->out.oom = false;
			brk_conn_close_asap(c);
		} else {
			reply_check_all(c->out.data, c->out.len, spoke_resp3[i]);
			if (i == 0 && capture.on && c->out.len > 0) {
				size_t n = c->out.len;
				if (n > sizeof(capture.buf) - capture.len) {
					n = sizeof(capture.buf) - capture.len;
				}
				memcpy(capture.buf + capture.len, c->out.data, n);
				capture.len += n;
			}
		}
		resp_buf_truncate(&c->out, 0);
		c->batch_mark = 0;
		c->batch_replies = 0;
		c->nmarks = 0;
		spoke_resp3[i] = c->w.proto == 3;
	}
	brk_wake_touched(srv);
}

/* brk_serve_ready() without its hand-over to run_pending(), which the harness
 * does not have: pick() feeds each client its next request instead. */
static bool
serve_ready(struct brk_server *srv)
{
	struct brk_conn *head = srv->ready_head;
	bool any = head != NULL;

	srv->ready_head = srv->ready_tail = NULL;
	while (head != NULL) {
		struct brk_conn *c = head;
		struct brk_block *b = c->blk;

		head = b->next_ready;
		b->ready = false;
		b->next_ready = NULL;
		brk_conn_execute(c, b->req.argc, b->req.argv, true);
	}
	return any;
}

static void
full_turn(struct brk_server *srv, struct brk_conn *const *conns)
{
	turn_end(srv, conns);
	for (int i = 0; i < MAX_TURNS && serve_ready(srv); i++) {
		turn_end(srv, conns);
	}
}

/* The client that gets the next request, or NULL when none can. */
static struct brk_conn *
pick(struct brk_conn *const *conns)
{
	for (int i = 0; i < NCONN; i++) {
		if (usable(conns[i]) && conns[i]->blk == NULL) {
			return conns[i];
		}
	}
	for (int i = 0; i < NCONN; i++) {
		if (usable(conns[i])) {
			time_out(conns[i]);
			return conns[i];
		}
	}
	return NULL;
}

static void run_input(const uint8_t *data, size_t size, bool may_inject);

/* adm_check() of the closed environment; its report is printed only when
 * it finds something (then the input is a finding: abort). */
static void
check_env(void)
{
	int saved = dup(STDOUT_FILENO), null = open("/dev/null", O_WRONLY | O_CLOEXEC);
	int rc;

	if (saved < 0 || null < 0) {
		abort();
	}
	fflush(stdout);
	dup2(null, STDOUT_FILENO);
	close(null);
	rc = adm_check(env_dir);
	fflush(stdout);
	dup2(saved, STDOUT_FILENO);
	close(saved);
	if (rc != ADM_EXIT_OK) {
		fprintf(stderr, "fuzz: echo-admin check of %s exited %d:\n", env_dir, rc);
		adm_check(env_dir);
		fflush(stdout);
		abort();
	}
}

/* The harness must reach the commands: a client that is not logged in, say,
 * would get NOAUTH for everything and the fuzzer would explore nothing. */
static void
self_test(void)
{
	static const char in[] = "PING\r\nXADD s 1-1 f v\r\nXGROUP CREATE s g 0\r\n"
				 "XREADGROUP GROUP g c STREAMS s >\r\nXACK s g 1-1\r\n";
	static const char want[] = "+PONG\r\n$3\r\n1-1\r\n+OK\r\n"
				   "*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n1-1\r\n"
				   "*2\r\n$1\r\nf\r\n$1\r\nv\r\n:1\r\n";

	capture.on = true;
	capture.len = 0;
	run_input((const uint8_t *)in, sizeof(in) - 1, false);
	capture.on = false;
	if (capture.len != sizeof(want) - 1 || memcmp(capture.buf, want, capture.len) != 0) {
		fprintf(stderr, "fuzz: self-test: the harness did not get the replies a server "
				"would give:\n%.*s\n", (int)capture.len, capture.buf);
		abort();
	}
}

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *base = getenv("FUZZ_TMPDIR");

	(void)argc;
	(void)argv;
	if (base == NULL && access("/dev/shm", W_OK) == 0) {
		base = "/dev/shm";
	}
	if (base == NULL) {
		base = getenv("TMPDIR");
	}
	if (base == NULL) {
		base = "/tmp";
	}
	snprintf(env_dir, sizeof(env_dir), "%s/echd-fuzz-XXXXXX", base);
	if (mkdtemp(env_dir) == NULL) {
		fprintf(stderr, "fuzz: mkdtemp %s: %s\n", env_dir, strerror(errno));
		abort();
	}
	atexit(cleanup_at_exit);
	echd_log_set(ECHD_LOG_WARNING, log_discard, NULL);
	self_test();
	return 0;
}

static void
run_input(const uint8_t *data, size_t size, bool may_inject)
{
	uint64_t seed = fuzz_hash(1469598103934665603ULL, data, size);
	unsigned turn_len = 1 + (unsigned)(seed % 8), in_turn = 0, nreq = 0;
	struct brk_server srv;
	struct brk_conn *conns[NCONN];
	struct resp_reader *rd;
	bool inject = may_inject && seed % 8 == 0;

	server_setup(&srv);
	for (int i = 0; i < NCONN; i++) {
		conns[i] = conn_setup(&srv, i);
		spoke_resp3[i] = false;
	}
	/* The first client's reader takes the input: CONFIG SET of the
	 * proto limits applies to it as it would to a real client. */
	rd = conns[0]->rd;
	if (resp_reader_feed(rd, (const char *)data, size) != 0) {
		goto done; /* bigger than client-query-buffer-limit */
	}
	if (inject) {
		echd_alloc_fail_at(1 + (seed >> 8) % 512);
	}
	while (nreq < MAX_REQUESTS && !srv.shutdown) {
		struct brk_conn *c = pick(conns);
		struct resp_arg *argv;
		int argc, rc;

		if (c == NULL) {
			break;
		}
		rc = resp_reader_next(rd, &argc, &argv);
		if (rc == -EAGAIN) {
			break;
		}
		if (rc == ECHD_EPROTO) {
			/* brk_conn_process(): the error, then the client is closed */
			resp_add_errorf(&c->w, "ERR Protocol error: %s", resp_reader_errstr(rd));
			c->batch_replies++;
			c->flags |= BRK_CONN_CLOSE_AFTER_REPLY;
			brk_conn_mark_held(c);
			break;
		}
		if (rc != 0) {
			break; /* -ENOMEM: the server closes such a client */
		}
		if (argc == 0) {
			continue;
		}
		nreq++;
		brk_conn_execute(c, argc, argv, false);
		note_proto(conns);
		if (++in_turn >= turn_len ||
			srv.batch_cmds >= (uint64_t)srv.cfg.batch_max_commands) {
			full_turn(&srv, conns);
			in_turn = 0;
		}
	}
	for (int i = 0; i < NCONN; i++) {
		time_out(conns[i]);
	}
	full_turn(&srv, conns);
done:
	echd_alloc_fail_at(0);
	brk_server_finish(&srv);
	check_env();
	dir_clear(env_dir);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	run_input(data, size, true);
	return 0;
}
