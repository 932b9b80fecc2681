/* cmd_auth.c - AUTH and ACL. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include "broker.h"

#define GENPASS_MAX_BITS 4096 /* Redis' bound on ACL GENPASS */

/* Logs a failed login without the password, and counts it for INFO. */
static void
auth_failed(struct brk_ctx *x, const char *user, size_t len)
{
	x->srv->stats.acl_denied_auth++;
	brk_acllog_add(x->srv, x->c, BRK_ACLLOG_AUTH,
		x->in_exec ? BRK_ACLLOG_CTX_MULTI : BRK_ACLLOG_CTX_TOPLEVEL, x->argv[0].p,
		x->argv[0].len, user, len);
	echd_log(ECHD_LOG_NOTICE, "AUTH failed for user '%.*s' from %s", (int)(len > 64 ? 64 : len),
		user, x->c->addr);
	resp_add_error(x->w, "WRONGPASS invalid username-password pair or user is disabled.");
}

int
brk_auth_login(struct brk_ctx *x, const struct resp_arg *user, const struct resp_arg *pass)
{
	struct brk_user *u = brk_acl_check(x->srv, user->p, user->len, pass->p, pass->len);

	if (u == NULL) {
		auth_failed(x, user->p, user->len);
		return -1;
	}
	x->c->user = u;
	return 0;
}

int
brk_cmd_auth(struct brk_ctx *x)
{
	struct resp_arg def = {"default", 7};

	if (x->argc > 3) {
		resp_add_error(x->w, BRK_ERR_SYNTAX);
		return 0;
	}
	if (x->argc == 2 && brk_acl_nopass_default(x->srv)) {
		resp_add_error(x->w, "ERR AUTH <password> called without any password configured "
				     "for the default user. Are you sure your configuration is correct?");
		return 0;
	}
	if (brk_auth_login(x, x->argc == 3 ? &x->argv[1] : &def, &x->argv[x->argc - 1]) == 0) {
		resp_add_simple(x->w, "OK");
	}
	return 0;
}

static const char *const acl_help[] = {
	"ACL <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
	"CAT [<category>]", "    List all commands that belong to <category>, or all command categories",
	"    when no category is specified.",
	"DELUSER <username> [<username> ...]", "    Delete a list of users.",
	"DRYRUN <username> <command> [<arg> ...]",
	"    Returns whether the user can execute the given command without executing the command.",
	"GETUSER <username>", "    Get the user's details.",
	"GENPASS [<bits>]",
	"    Generate a secure 256-bit user password. The optional `bits` argument can",
	"    be used to specify a different size.",
	"LIST", "    Show users details in config file format.",
	"LOAD", "    Reload users from the ACL file.",
	"LOG [<count> | RESET]", "    Show the ACL log entries.",
	"SAVE", "    Save the current config to the ACL file.",
	"SETUSER <username> <attribute> [<attribute> ...]", "    Create or modify a user with the specified attributes.",
	"USERS", "    List all the registered usernames.",
	"WHOAMI", "    Return the current connection username.",
	"HELP", "    Print this help.",
};

/* The first max users sorted by name, as Redis lists them (USERS, LIST). */
static size_t
sorted_users(struct brk_server *srv, struct brk_user **out, size_t max)
{
	size_t n = 0;

	for (struct brk_user *u = srv->users; u != NULL && n < max; u = brk_user_next(u)) {
		out[n++] = u;
	}
	for (size_t i = 1; i < n; i++) {
		for (size_t j = i;
			j > 0 && strcmp(brk_user_name(out[j - 1]), brk_user_name(out[j])) > 0; j--) {
			struct brk_user *t = out[j];
			out[j] = out[j - 1];
			out[j - 1] = t;
		}
	}
	return n;
}

/* ACL GENPASS [bits]: bits (256 by default) of the system's randomness, in hex. */
static void
genpass(struct brk_ctx *x)
{
	unsigned char raw[GENPASS_MAX_BITS / 8];
	char hex[GENPASS_MAX_BITS / 4 + 1];
	long long bits = 256;
	size_t chars;

	if (x->argc == 3 && !brk_arg_ll(x, &x->argv[2], &bits)) {
		return;
	}
	if (bits <= 0 || bits > GENPASS_MAX_BITS) {
		resp_add_error(x->w, "ERR ACL GENPASS argument must be the number of bits for the "
				     "output password, a positive number up to 4096");
		return;
	}
	chars = ((size_t)bits + 3) / 4;
	if (RAND_bytes(raw, (int)((chars + 1) / 2)) != 1) {
		resp_add_error(x->w, "ERR no randomness available for ACL GENPASS");
		return;
	}
	for (size_t i = 0; i < chars; i++) {
		hex[i] = "0123456789abcdef"[(raw[i / 2] >> (i % 2 ? 0 : 4)) & 15];
	}
	resp_add_bulk(x->w, hex, chars);
	OPENSSL_cleanse(raw, sizeof(raw)); /* a password: no copy left behind */
	OPENSSL_cleanse(hex, sizeof(hex));
}

/* ACL DRYRUN user command [arg ...]: OK, or (as a string, not an error)
 * why the user may not run it; nothing runs. */
static void
dryrun(struct brk_ctx *x)
{
	const struct resp_arg *name = &x->argv[2], *argv = x->argv + 3;
	const struct brk_user *u = brk_acl_find(x->srv, name->p, name->len);
	const struct brk_cmd *cmd = brk_cmd_lookup(argv[0].p, argv[0].len);
	int argc = x->argc - 3, arity, key, chan = -1;
	struct resp_buf b;
	char full[80];

	if (u == NULL) {
		resp_add_errorf(x->w, "ERR User '%.*s' not found", (int)name->len, name->p);
		return;
	}
	arity = cmd != NULL ? cmd->arity : 0;
	if (cmd != NULL && argc >= 2 && brk_subcommand_at(cmd, 0) != NULL) {
		/* a container: its subcommand is the command, as Redis looks it up */
		arity = brk_subcommand_arity(cmd, &argv[1]);
		if (arity == 0) {
			cmd = NULL;
		}
	}
	if (cmd == NULL) {
		resp_add_errorf(x->w, "ERR Command '%.*s' not found", (int)argv[0].len, argv[0].p);
		return;
	}
	if (argc >= 2 && brk_subcommand_at(cmd, 0) != NULL) {
		snprintf(full, sizeof(full), "%s|%.*s", cmd->name, (int)argv[1].len, argv[1].p);
		for (char *p = full; *p; p++) {
			*p = (char)tolower((unsigned char)*p);
		}
	} else {
		snprintf(full, sizeof(full), "%s", cmd->name);
	}
	if ((arity > 0 && argc != arity) || (arity < 0 && argc < -arity)) {
		resp_add_errorf(x->w, "ERR wrong number of arguments for '%s' command", full);
		return;
	}
	key = brk_acl_cmd_allowed(u, cmd, argc, argv) ? brk_acl_denied_key(u, cmd, argc, argv) : -2;
	if (key == -1 && (chan = brk_pubsub_denied_channel(u, cmd, argc, argv)) < 0) {
		resp_add_simple(x->w, "OK");
		return;
	}
	/* names and keys may be long: built whole, not in a fixed buffer */
	resp_buf_init(&b);
	if (key == -2) {
		resp_buf_printf(&b, "User %s has no permissions to run the '%s' command",
			brk_user_name(u), full);
	} else if (key == -1) {
		resp_buf_printf(&b, "User %s has no permissions to access the '%.*s' channel",
			brk_user_name(u), (int)argv[chan].len, argv[chan].p);
	} else {
		resp_buf_printf(&b, "No permissions to access the '%.*s' key", (int)argv[key].len,
			argv[key].p);
	}
	if (b.oom) {
		resp_add_error(x->w, "ERR out of memory");
	} else {
		resp_add_bulk(x->w, b.data, b.len);
	}
	resp_buf_finish(&b);
}

int
brk_cmd_acl(struct brk_ctx *x)
{
	struct brk_server *srv = x->srv;
	const struct resp_arg *sub = &x->argv[1];
	char err[512];
	int rc;

	if (brk_arg_eq(sub, "WHOAMI") && x->argc == 2) {
		resp_add_bulk_cstr(x->w, brk_user_name(x->c->user));
	} else if (brk_arg_eq(sub, "USERS") && x->argc == 2) {
		struct brk_user *users[1024];
		size_t n = sorted_users(srv, users, 1024);
		resp_add_array(x->w, n);
		for (size_t i = 0; i < n; i++) {
			resp_add_bulk_cstr(x->w, brk_user_name(users[i]));
		}
	} else if (brk_arg_eq(sub, "LIST") && x->argc == 2) {
		struct brk_user *users[1024];
		size_t n = sorted_users(srv, users, 1024);
		resp_add_array(x->w, n);
		for (size_t i = 0; i < n; i++) {
			struct resp_buf b;
			resp_buf_init(&b);
			brk_acl_describe(users[i], &b);
			if (b.oom) {
				/* the caller drops the part of the reply written */
				resp_buf_finish(&b);
				return -ENOMEM;
			}
			resp_add_bulk(x->w, b.data, b.len);
			resp_buf_finish(&b);
		}
	} else if (brk_arg_eq(sub, "SETUSER") && x->argc >= 3) {
		rc = brk_acl_setuser(srv, x->argv[2].p, x->argv[2].len, x->argc - 3, x->argv + 3, err,
			sizeof(err));
		if (rc == ECHD_EINVAL) {
			resp_add_errorf(x->w, "ERR %s", err);
			return 0;
		}
		if (rc != 0) {
			return rc;
		}
		resp_add_simple(x->w, "OK");
	} else if (brk_arg_eq(sub, "DELUSER") && x->argc >= 3) {
		long long n = 0;
		for (int i = 2; i < x->argc; i++) {
			if (x->argv[i].len == 7 && !memcmp(x->argv[i].p, "default", 7)) {
				resp_add_error(x->w, "ERR The 'default' user cannot be removed");
				return 0;
			}
		}
		for (int i = 2; i < x->argc; i++) {
			n += brk_acl_deluser(srv, x->argv[i].p, x->argv[i].len);
		}
		resp_add_int(x->w, n);
	} else if (brk_arg_eq(sub, "CAT") && (x->argc == 2 || x->argc == 3)) {
		const char *const *cats;
		brk_acl_categories(&cats);
		if (x->argc == 2) {
			size_t n = 0;
			while (cats[n] != NULL) {
				n++;
			}
			resp_add_array(x->w, n);
			for (size_t i = 0; i < n; i++) {
				resp_add_bulk_cstr(x->w, cats[i]);
			}
		} else {
			size_t h, n = 0;
			if (!brk_acl_known_category(x->argv[2].p, x->argv[2].len)) {
				resp_add_errorf(x->w, "ERR Unknown category '%.*s'", (int)x->argv[2].len,
					x->argv[2].p);
				return 0;
			}
			h = resp_add_deferred(x->w);
			/* by permission slot: a subcommand with categories of its
			 * own (pubsub|numsub) is listed by its full name */
			for (size_t i = 0; i < brk_perm_count(); i++) {
				const struct brk_cmd *cmd;
				const struct brk_subcmd *sc;
				brk_perm_at(i, &cmd, &sc);
				if (!brk_acl_in_category(sc ? sc->acl : cmd->acl, x->argv[2].p,
					    x->argv[2].len)) {
					continue;
				}
				if (sc != NULL) {
					char full[80];
					snprintf(full, sizeof(full), "%s|%s", cmd->name, sc->name);
					resp_add_bulk_cstr(x->w, full);
				} else {
					resp_add_bulk_cstr(x->w, cmd->name);
				}
				n++;
			}
			resp_set_deferred_len(x->w, h, '*', n);
		}
	} else if (brk_arg_eq(sub, "SAVE") && x->argc == 2) {
		rc = brk_acl_save(srv, err, sizeof(err));
		if (rc != 0) {
			resp_add_errorf(x->w, "ERR %s", err);
			return 0;
		}
		resp_add_simple(x->w, "OK");
	} else if (brk_arg_eq(sub, "LOAD") && x->argc == 2) {
		rc = brk_acl_load(srv, err, sizeof(err));
		if (rc != 0) {
			resp_add_errorf(x->w, "ERR %s", err);
			return 0;
		}
		resp_add_simple(x->w, "OK");
	} else if (brk_arg_eq(sub, "LOG") && x->argc <= 3) {
		brk_acllog_reply(x);
	} else if (brk_arg_eq(sub, "GETUSER")) {
		struct brk_user *u = brk_acl_find(srv, x->argv[2].p, x->argv[2].len);
		if (u == NULL) {
			resp_add_null(x->w);
		} else {
			brk_acl_getuser_reply(x->w, u);
		}
	} else if (brk_arg_eq(sub, "GENPASS") && x->argc <= 3) {
		genpass(x);
	} else if (brk_arg_eq(sub, "DRYRUN")) {
		dryrun(x);
	} else if (brk_arg_eq(sub, "HELP") && x->argc == 2) {
		BRK_REPLY_HELP(x->w, acl_help);
	} else {
		/* brk_subcommand_ok() passed its name and arity (CAT with two
		 * categories, say): Redis' catch-all */
		brk_reply_subcommand_syntax(x, "ACL");
	}
	return 0;
}
