/* monitor.c - MONITOR: every command the server runs, as a line to each
 * monitoring client.
 *
 * As in Redis: a command is shown once it has run (so SELECT shows its new
 * database), admin commands are not shown, secrets are "(redacted)", and a
 * monitoring client may not touch keys. Its lines wait in its output with
 * the batch's replies, so they go out once the commands are committed. */
#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>

#include "broker.h"

/* Appends p as Redis' sdscatrepr() quotes it. */
static void
add_repr(struct resp_buf *b, const char *p, size_t len)
{
	static const char from[] = "\\\"\n\r\t\a\b", to[] = "\\\"nrtab";

	resp_buf_printf(b, "\"");
	for (size_t i = 0; i < len; i++) {
		unsigned char ch = (unsigned char)p[i];
		const char *hit = ch != '\0' ? strchr(from, ch) : NULL;
		if (hit != NULL) {
			resp_buf_printf(b, "\\%c", to[hit - from]);
		} else if (isprint(ch)) {
			resp_buf_printf(b, "%c", ch);
		} else {
			resp_buf_printf(b, "\\x%02x", ch);
		}
	}
	resp_buf_printf(b, "\"");
}

void
brk_monitor_feed(struct brk_conn *c, const struct brk_cmd *cmd, int argc,
	const struct resp_arg *argv)
{
	struct brk_server *srv = c->srv;
	struct resp_buf line;
	struct timeval tv;

	if (srv->monitors == NULL || brk_cmd_admin(cmd, argc, argv)) {
		return;
	}
	gettimeofday(&tv, NULL);
	resp_buf_init(&line);
	if (c->flags & BRK_CONN_UNIX) {
		resp_buf_printf(&line, "%ld.%06ld [%u unix:%s]", (long)tv.tv_sec, (long)tv.tv_usec,
			c->db, srv->cfg.unixsocket);
	} else {
		resp_buf_printf(&line, "%ld.%06ld [%u %s]", (long)tv.tv_sec, (long)tv.tv_usec,
			c->db, c->addr);
	}
	for (int i = 0; i < argc; i++) {
		resp_buf_printf(&line, " ");
		if (brk_arg_secret(cmd, argc, argv, i)) {
			add_repr(&line, "(redacted)", 10);
		} else {
			add_repr(&line, argv[i].p, argv[i].len);
		}
	}
	resp_buf_append(&line, "", 1); /* printable only (add_repr), now a C string */
	if (line.oom) {
		goto out; /* a lost line is the lesser harm */
	}
	for (struct brk_conn *m = srv->monitors; m != NULL; m = m->monitor_next) {
		if (m->flags & (BRK_CONN_CLOSING | BRK_CONN_FAILED)) {
			continue;
		}
		resp_add_simple(&m->w, line.data);
		brk_conn_mark_held(m);
	}
out:
	resp_buf_finish(&line);
}

void
brk_monitor_remove(struct brk_conn *c)
{
	struct brk_conn **pp;

	if (!(c->flags & BRK_CONN_MONITOR)) {
		return;
	}
	for (pp = &c->srv->monitors; *pp != NULL; pp = &(*pp)->monitor_next) {
		if (*pp == c) {
			*pp = c->monitor_next;
			break;
		}
	}
	c->monitor_next = NULL;
	c->flags &= ~BRK_CONN_MONITOR;
}

int
brk_cmd_monitor(struct brk_ctx *x)
{
	struct brk_conn *c = x->c;

	if (x->in_exec) {
		resp_add_error(x->w, "ERR MONITOR isn't allowed for DENY BLOCKING client");
		return 0;
	}
	if (c->flags & BRK_CONN_MONITOR) {
		x->blocked = true; /* already monitoring: no reply, as Redis */
		return 0;
	}
	c->flags |= BRK_CONN_MONITOR;
	c->monitor_next = x->srv->monitors;
	x->srv->monitors = c;
	resp_add_simple(x->w, "OK");
	return 0;
}
