/* slowlog.c - SLOWLOG: the commands that ran longer than slowlog-log-slower-than.
 *
 * As in Redis: the newest entry first, at most slowlog-max-len of them (the
 * oldest go when one is added), 32 arguments and 128 bytes of each kept,
 * passwords replaced by "(redacted)". The time is the command's own run, not
 * its wait for the commit: that is shared by the whole batch (INFO
 * persistence shows it). */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "broker.h"

#define SLOWLOG_MAX_ARGC 32
#define SLOWLOG_MAX_STRING 128

struct brk_slowentry {
	uint64_t id;
	long long time;     /* unix seconds */
	long long duration; /* microseconds */
	int argc;
	struct resp_arg *argv; /* each p owned */
	char *peer, *name;     /* owned */
	struct brk_slowentry *newer, *older;
};

static void
entry_free(struct brk_slowentry *e)
{
	for (int i = 0; i < e->argc; i++) {
		echd_free((void *)e->argv[i].p);
	}
	echd_free(e->argv);
	echd_free(e->peer);
	echd_free(e->name);
	echd_free(e);
}

static void
drop_oldest(struct brk_server *srv)
{
	struct brk_slowentry *e = srv->slowlog_oldest;

	srv->slowlog_oldest = e->newer;
	if (e->newer != NULL) {
		e->newer->older = NULL;
	} else {
		srv->slowlog_newest = NULL;
	}
	srv->slowlog_len--;
	entry_free(e);
}

void
brk_slowlog_reset(struct brk_server *srv)
{
	while (srv->slowlog_oldest != NULL) {
		drop_oldest(srv);
	}
}

static int
copy_arg(struct resp_arg *dst, const char *p, size_t len)
{
	char *s;

	if (len > SLOWLOG_MAX_STRING) {
		char tail[48];
		int n = snprintf(tail, sizeof(tail), "... (%zu more bytes)", len - SLOWLOG_MAX_STRING);
		s = echd_malloc(SLOWLOG_MAX_STRING + (size_t)n + 1);
		if (s == NULL) {
			return -1;
		}
		memcpy(s, p, SLOWLOG_MAX_STRING);
		memcpy(s + SLOWLOG_MAX_STRING, tail, (size_t)n + 1);
		len = SLOWLOG_MAX_STRING + (size_t)n;
	} else if ((s = echd_strndup(p, len)) == NULL) {
		return -1;
	}
	dst->p = s;
	dst->len = len;
	return 0;
}

void
brk_slowlog_push(struct brk_server *srv, struct brk_conn *c, const struct brk_cmd *cmd, int argc,
	const struct resp_arg *argv, uint64_t duration_us)
{
	long long limit = srv->cfg.slowlog_log_slower_than;
	struct brk_slowentry *e;
	int n = argc > SLOWLOG_MAX_ARGC ? SLOWLOG_MAX_ARGC : argc;

	if (limit < 0 || srv->cfg.slowlog_max_len == 0 || (long long)duration_us < limit) {
		return;
	}
	e = echd_calloc(1, sizeof(*e));
	if (e == NULL) {
		return; /* a lost log line is the lesser harm */
	}
	e->argv = echd_calloc((size_t)n, sizeof(*e->argv));
	e->peer = echd_strndup(c->addr, strlen(c->addr));
	e->name = echd_strndup(c->name ? c->name : "", c->name ? strlen(c->name) : 0);
	if (e->argv == NULL || e->peer == NULL || e->name == NULL) {
		goto fail;
	}
	for (int i = 0; i < n; i++, e->argc++) {
		char more[48];
		int rc;
		if (n < argc && i == n - 1) {
			int m = snprintf(more, sizeof(more), "... (%d more arguments)", argc - n + 1);
			rc = copy_arg(&e->argv[i], more, (size_t)m);
		} else if (brk_arg_secret(cmd, argc, argv, i)) {
			rc = copy_arg(&e->argv[i], "(redacted)", strlen("(redacted)"));
		} else {
			rc = copy_arg(&e->argv[i], argv[i].p, argv[i].len);
		}
		if (rc != 0) {
			goto fail;
		}
	}
	e->id = srv->slowlog_next_id++;
	e->time = (long long)time(NULL);
	e->duration = (long long)duration_us;
	e->older = srv->slowlog_newest;
	if (e->older != NULL) {
		e->older->newer = e;
	} else {
		srv->slowlog_oldest = e;
	}
	srv->slowlog_newest = e;
	srv->slowlog_len++;
	while (srv->slowlog_len > (uint64_t)srv->cfg.slowlog_max_len) {
		drop_oldest(srv);
	}
	return;
fail:
	entry_free(e);
}

static const char *const slowlog_help[] = {
	"SLOWLOG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
	"GET [<count>]",
	"    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
	"    Entries are made of:",
	"    id, timestamp, time in microseconds, arguments array, client IP and port,",
	"    client name",
	"LEN",
	"    Return the length of the slowlog.",
	"RESET",
	"    Reset the slowlog.",
	"HELP",
	"    Prints this help.",
};

int
brk_cmd_slowlog(struct brk_ctx *x)
{
	struct brk_server *srv = x->srv;
	const struct resp_arg *sub = &x->argv[1];

	/* brk_subcommand_ok() checked the name and the arity */
	if (brk_arg_eq(sub, "GET") && x->argc <= 3) {
		long long count = 10;
		if (x->argc == 3 && (!brk_str2ll(x->argv[2].p, x->argv[2].len, &count) || count < -1)) {
			resp_add_error(x->w, "ERR count should be greater than or equal to -1");
			return 0;
		}
		if (count == -1 || (uint64_t)count > srv->slowlog_len) {
			count = (long long)srv->slowlog_len;
		}
		resp_add_array(x->w, (size_t)count);
		for (struct brk_slowentry *e = srv->slowlog_newest; e != NULL && count > 0;
			e = e->older, count--) {
			resp_add_array(x->w, 6);
			resp_add_int(x->w, (long long)e->id);
			resp_add_int(x->w, e->time);
			resp_add_int(x->w, e->duration);
			resp_add_array(x->w, (size_t)e->argc);
			for (int i = 0; i < e->argc; i++) {
				resp_add_bulk(x->w, e->argv[i].p, e->argv[i].len);
			}
			resp_add_bulk_cstr(x->w, e->peer);
			resp_add_bulk_cstr(x->w, e->name);
		}
	} else if (brk_arg_eq(sub, "LEN")) {
		resp_add_int(x->w, (long long)srv->slowlog_len);
	} else if (brk_arg_eq(sub, "RESET")) {
		brk_slowlog_reset(srv);
		resp_add_simple(x->w, "OK");
	} else if (brk_arg_eq(sub, "HELP")) {
		BRK_REPLY_HELP(x->w, slowlog_help);
	} else {
		brk_reply_subcommand_syntax(x, "SLOWLOG");
	}
	return 0;
}
