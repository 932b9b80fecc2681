/* commands.c - the command table and argument helpers shared by handlers. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <string.h>
#include <strings.h>

#include "broker.h"

#define W  BRK_CMD_WRITE
#define R  BRK_CMD_READONLY
#define A  BRK_CMD_ADMIN
#define B  BRK_CMD_BLOCKING
#define F  BRK_CMD_FAST
#define NS BRK_CMD_NOSTORE
#define L  BRK_CMD_LOADING
#define S  BRK_CMD_STALE
#define NC BRK_CMD_NOSCRIPT
#define OM BRK_CMD_DENYOOM
#define NM BRK_CMD_NOMULTI
#define BULK BRK_CMD_BULK
#define FR BRK_CMD_FREES

/* Sorted by nothing in particular; lookups compare length first. */
static const struct brk_cmd cmds[] = {
	{"ping", brk_cmd_ping, -1, NS | F | S, 0, 0, 0, "@fast @connection", "connection", "1.0.0",
		"Returns the server's liveliness response.", "O(1)"},
	{"echo", brk_cmd_echo, 2, NS | F | L | S, 0, 0, 0, "@fast @connection", "connection",
		"1.0.0", "Returns the given string.", "O(1)"},
	{"hello", brk_cmd_hello, -1, NS | F | L | S | NC, 0, 0, 0, "@fast @connection",
		"connection", "6.0.0", "Handshakes with the server.", "O(1)"},
	{"quit", brk_cmd_quit, -1, NS | F | L | S | NC, 0, 0, 0, "@fast @connection", "connection",
		"1.0.0", "Closes the connection.", "O(1)"},
	{"reset", brk_cmd_reset, 1, NS | F | L | S | NC, 0, 0, 0, "@fast @connection",
		"connection", "6.2.0", "Resets the connection.", "O(1)"},
	{"select", brk_cmd_select, 2, NS | F | L | S, 0, 0, 0, "@fast @connection", "connection",
		"1.0.0", "Changes the selected database.", "O(1)"},
	{"dbsize", brk_cmd_dbsize, 1, R | F, 0, 0, 0, "@keyspace @read @fast", "server", "1.0.0",
		"Returns the number of keys in the database.", "O(1)"},
	{"time", brk_cmd_time, 1, NS | F | L | S, 0, 0, 0, "@fast", "server", "2.6.0",
		"Returns the server time.", "O(1)"},
	{"del", brk_cmd_del, -2, W | FR, 1, -1, 1, "@keyspace @write @slow", "generic", "1.0.0",
		"Deletes one or more keys.", "O(N) keys; rows are reclaimed in the background"},
	{"unlink", brk_cmd_del, -2, W | F | FR, 1, -1, 1, "@keyspace @write @fast", "generic",
		"4.0.0", "Asynchronously deletes one or more keys.", "O(1) per key"},
	{"exists", brk_cmd_exists, -2, R | F, 1, -1, 1, "@keyspace @read @fast", "generic",
		"1.0.0", "Determines whether one or more keys exist.", "O(N)"},
	{"expire", brk_cmd_expire, -3, W | F, 1, 1, 1, "@keyspace @write @fast", "generic", "1.0.0",
		"Sets the expiration time of a key in seconds.", "O(log N) keys with an expiry"},
	{"pexpire", brk_cmd_pexpire, -3, W | F, 1, 1, 1, "@keyspace @write @fast", "generic",
		"2.6.0", "Sets the expiration time of a key in milliseconds.",
		"O(log N) keys with an expiry"},
	{"expireat", brk_cmd_expireat, -3, W | F, 1, 1, 1, "@keyspace @write @fast", "generic",
		"1.2.0", "Sets the expiration time of a key to a Unix timestamp.",
		"O(log N) keys with an expiry"},
	{"pexpireat", brk_cmd_pexpireat, -3, W | F, 1, 1, 1, "@keyspace @write @fast", "generic",
		"2.6.0", "Sets the expiration time of a key to a Unix milliseconds timestamp.",
		"O(log N) keys with an expiry"},
	{"ttl", brk_cmd_ttl, 2, R | F, 1, 1, 1, "@keyspace @read @fast", "generic", "1.0.0",
		"Returns the expiration time in seconds of a key.", "O(1)"},
	{"pttl", brk_cmd_pttl, 2, R | F, 1, 1, 1, "@keyspace @read @fast", "generic", "2.6.0",
		"Returns the expiration time in milliseconds of a key.", "O(1)"},
	{"expiretime", brk_cmd_expiretime, 2, R | F, 1, 1, 1, "@keyspace @read @fast", "generic",
		"7.0.0", "Returns the expiration time of a key as a Unix timestamp.", "O(1)"},
	{"pexpiretime", brk_cmd_pexpiretime, 2, R | F, 1, 1, 1, "@keyspace @read @fast",
		"generic", "7.0.0",
		"Returns the expiration time of a key as a Unix milliseconds timestamp.", "O(1)"},
	{"persist", brk_cmd_persist, 2, W | F | FR, 1, 1, 1, "@keyspace @write @fast", "generic",
		"2.2.0", "Removes the expiration time of a key.", "O(log N) keys with an expiry"},
	{"touch", brk_cmd_touch, -2, R | F, 1, -1, 1, "@keyspace @read @fast", "generic", "3.2.1",
		"Returns the number of existing keys out of those specified. echd keeps no access "
		"times to update.", "O(N) where N is the number of keys that will be touched."},
	{"randomkey", brk_cmd_randomkey, 1, R, 0, 0, 0, "@keyspace @read @slow", "generic",
		"1.0.0", "Returns a random key name from the database.", "O(log N)"},
	{"object", brk_cmd_object, -2, R, 0, 0, 0, "@keyspace @read @slow", "generic", "2.2.3",
		"A container for object introspection commands.", "Depends on subcommand."},
	{"memory", brk_cmd_memory, -2, R, 0, 0, 0, "@read @slow", "server", "4.0.0",
		"A container for memory diagnostics commands. MEMORY USAGE counts bytes in storage.",
		"Depends on subcommand."},
	{"type", brk_cmd_type, 2, R | F, 1, 1, 1, "@keyspace @read @fast", "generic", "1.0.0",
		"Determines the type of value stored at a key.", "O(1)"},
	{"keys", brk_cmd_keys, 2, R, 0, 0, 0, "@keyspace @read @slow @dangerous", "generic",
		"1.0.0", "Returns all key names that match a pattern.", "O(N)"},
	{"scan", brk_cmd_scan, -2, R, 0, 0, 0, "@keyspace @read @slow", "generic", "2.8.0",
		"Iterates over the key names in the database.", "O(1) per call"},
	{"rename", brk_cmd_rename, 3, W, 1, 2, 1, "@keyspace @write @slow", "generic", "1.0.0",
		"Renames a key and overwrites the destination.", "O(1)"},
	{"renamenx", brk_cmd_renamenx, 3, W | F, 1, 2, 1, "@keyspace @write @fast", "generic",
		"1.0.0", "Renames a key only when the target key name doesn't exist.", "O(1)"},
	{"copy", brk_cmd_copy, -3, W | OM | BULK, 1, 2, 1, "@keyspace @write @slow", "generic", "6.2.0",
		"Copies the value of a key to a new key.",
		"O(N) in the entries, consumers and pending entries copied"},
	{"move", brk_cmd_move, 3, W | F, 1, 1, 1, "@keyspace @write @fast", "generic", "1.0.0",
		"Moves a key to another database.", "O(1)"},
	{"flushdb", brk_cmd_flushdb, -1, W | FR, 0, 0, 0, "@keyspace @write @slow @dangerous",
		"server", "1.0.0", "Removes all keys from the current database.", "O(N)"},
	{"flushall", brk_cmd_flushall, -1, W | FR, 0, 0, 0, "@keyspace @write @slow @dangerous",
		"server", "1.0.0", "Removes all keys from all databases.", "O(N)"},
	{"info", brk_cmd_info, -1, R | L | S, 0, 0, 0, "@slow @dangerous", "server", "1.0.0",
		"Returns information and statistics about the server.", "O(1)"},
	{"config", brk_cmd_config, -2, NS | A | L | S | NC, 0, 0, 0, "@admin @slow @dangerous",
		"server", "2.0.0", "A container for server configuration commands.", "Depends on subcommand."},
	{"client", brk_cmd_client, -2, NS | L | S | NC, 0, 0, 0, "@slow @connection", "connection",
		"2.4.0", "A container for client connection commands.", "Depends on subcommand."},
	{"command", brk_cmd_command, -1, NS | L | S, 0, 0, 0, "@slow @connection", "server",
		"2.8.13", "Returns detailed information about all commands.", "O(N)"},
	{"shutdown", brk_cmd_shutdown, -1, NS | A | L | S | NC | NM, 0, 0, 0, "@admin @slow @dangerous",
		"server", "1.0.0", "Commits what is in flight and shuts down the server.", "O(1)"},
	{"lastsave", brk_cmd_lastsave, 1, R | L | S | F, 0, 0, 0, "@admin @fast @dangerous",
		"server", "1.0.0", "Returns the Unix timestamp of the last durable commit.", "O(1)"},
	{"save", brk_cmd_save, 1, NS | A | NC | NM, 0, 0, 0, "@admin @slow @dangerous", "server", "1.0.0",
		"Everything is already on disk: returns OK.", "O(1)"},
	{"bgsave", brk_cmd_save, -1, NS | A | NC, 0, 0, 0, "@admin @slow @dangerous", "server",
		"1.0.0", "Everything is already on disk: returns OK.", "O(1)"},
	{"auth", brk_cmd_auth, -2, NS | F | L | S | NC, 0, 0, 0, "@fast @connection",
		"connection", "1.0.0", "Authenticates the connection.",
		"O(N) where N is the number of passwords defined for the user"},
	{"acl", brk_cmd_acl, -2, NS | A | L | S | NC, 0, 0, 0, "@admin @slow @dangerous", "server",
		"6.0.0", "A container for Access List Control commands.", "Depends on subcommand."},
	{"multi", brk_cmd_multi, 1, NS | F | L | S | NC, 0, 0, 0, "@fast @transaction",
		"transactions", "1.2.0", "Starts a transaction.", "O(1)"},
	{"exec", brk_cmd_exec, 1, NS | L | S | NC, 0, 0, 0, "@slow @transaction", "transactions",
		"1.2.0", "Executes all commands in a transaction.",
		"Depends on commands in the transaction"},
	{"discard", brk_cmd_discard, 1, NS | F | L | S | NC, 0, 0, 0, "@fast @transaction",
		"transactions", "2.0.0", "Discards a transaction.", "O(N), when N is the number of queued commands"},
	{"watch", brk_cmd_watch, -2, NS | F | L | S | NC, 1, -1, 1, "@fast @transaction",
		"transactions", "2.2.0",
		"Monitors changes to keys to determine the execution of a transaction.", "O(1) for every key."},
	{"unwatch", brk_cmd_unwatch, 1, NS | F | L | S | NC, 0, 0, 0, "@fast @transaction",
		"transactions", "2.2.0", "Forgets about watched keys of a transaction.", "O(1)"},
	{"monitor", brk_cmd_monitor, 1, NS | A | L | S | NC, 0, 0, 0, "@admin @slow @dangerous",
		"server", "1.0.0", "Listens for all requests received by the server in real-time.",
		"O(1)"},
	{"slowlog", brk_cmd_slowlog, -2, NS | A | L | S, 0, 0, 0, "@admin @slow @dangerous", "server",
		"2.2.12", "A container for slow log commands.", "Depends on subcommand."},
	{"latency", brk_cmd_latency, -2, NS | A | L | S, 0, 0, 0, "@admin @slow @dangerous",
		"server", "2.8.13", "A container for latency diagnostics commands.",
		"Depends on subcommand."},
	{"wait", brk_cmd_wait, 3, NS | B, 0, 0, 0, "@slow @blocking @connection", "generic",
		"3.0.0", "Blocks until the asynchronous replication of all preceding write commands "
			 "sent by the connection is completed. echd has no replicas.", "O(1)"},
	{"waitaof", brk_cmd_waitaof, 4, NS | B, 0, 0, 0, "@slow @blocking @connection", "generic",
		"7.2.0", "Blocks until all of the preceding write commands sent by the connection are "
			 "on disk. In echd they always are by the time this replies.", "O(1)"},
	{"xadd", brk_cmd_xadd, -5, W | OM | F, 1, 1, 1, "@write @stream @fast", "stream", "5.0.0",
		"Appends a new message to a stream. Creates the key if it doesn't exist.", "O(1)"},
	{"xlen", brk_cmd_xlen, 2, R | F, 1, 1, 1, "@read @stream @fast", "stream", "5.0.0",
		"Return the number of messages in a stream.", "O(1)"},
	{"xrange", brk_cmd_xrange, -4, R, 1, 1, 1, "@read @stream @slow", "stream", "5.0.0",
		"Returns the messages from a stream within a range of IDs.", "O(log(N)+M)"},
	{"xrevrange", brk_cmd_xrevrange, -4, R, 1, 1, 1, "@read @stream @slow", "stream", "5.0.0",
		"Returns the messages from a stream within a range of IDs in reverse order.",
		"O(log(N)+M)"},
	{"xdel", brk_cmd_xdel, -3, W | F | FR, 1, 1, 1, "@write @stream @fast", "stream", "5.0.0",
		"Returns the number of messages after removing them from a stream.", "O(1) per id"},
	{"xtrim", brk_cmd_xtrim, -4, W | FR, 1, 1, 1, "@write @stream @slow", "stream", "5.0.0",
		"Deletes messages from the beginning of a stream.", "O(N)"},
	{"xread", brk_cmd_xread, -4, R | B, 0, 0, 0, "@read @stream @slow @blocking", "stream",
		"5.0.0", "Returns messages from multiple streams with IDs greater than the ones "
			 "requested. Blocks until a message is available otherwise.",
		"O(log(N)+M)"},
	{"xsetid", brk_cmd_xsetid, -3, W | OM | F, 1, 1, 1, "@write @stream @fast", "stream",
		"5.0.0", "An internal command for replicating stream values.", "O(1)"},
	{"xinfo", brk_cmd_xinfo, -2, R, 0, 0, 0, "@read @stream @slow", "stream", "5.0.0",
		"A container for stream introspection commands.", "Depends on subcommand."},
	{"xgroup", brk_cmd_xgroup, -2, W, 0, 0, 0, "@write @stream @slow", "stream", "5.0.0",
		"A container for consumer groups commands.", "Depends on subcommand."},
	{"xreadgroup", brk_cmd_xreadgroup, -7, W | B, 0, 0, 0, "@write @stream @slow @blocking",
		"stream", "5.0.0",
		"Returns new or historical messages from a stream for a consumer in a group. Blocks "
		"until a message is available otherwise.",
		"For each stream mentioned: O(M) with M the number of elements returned."},
	{"xack", brk_cmd_xack, -4, W | F | FR, 1, 1, 1, "@write @stream @fast", "stream", "5.0.0",
		"Returns the number of messages that were successfully acknowledged by the consumer "
		"group member of a stream.",
		"O(1) for each message ID processed."},
	{"xpending", brk_cmd_xpending, -3, R, 1, 1, 1, "@read @stream @slow", "stream", "5.0.0",
		"Returns the information and entries from a stream consumer group's pending entries "
		"list.",
		"O(N) with N the number of elements returned; O(consumers) for the summary."},
	{"xclaim", brk_cmd_xclaim, -6, W | F, 1, 1, 1, "@write @stream @fast", "stream", "5.0.0",
		"Changes, or acquires, ownership of a message in a consumer group, as if the message "
		"was delivered a consumer group member.",
		"O(log N) with N the number of messages in the PEL of the consumer group."},
	{"xautoclaim", brk_cmd_xautoclaim, -6, W | F, 1, 1, 1, "@write @stream @fast", "stream",
		"6.2.0",
		"Changes, or acquires, ownership of messages in a consumer group, as if the messages "
		"were delivered to as consumer group member.",
		"O(1) if COUNT is small."},
};

#define NCMDS (sizeof(cmds) / sizeof(cmds[0]))
_Static_assert(NCMDS < 255, "the lookup table stores indexes in a byte");

/* Lookups run once per request: a small open-addressing table over the
 * lower-cased names, built on first use. */
#define LOOKUP_SLOTS 256
static unsigned char slots[LOOKUP_SLOTS]; /* index + 1; 0 = empty */
static bool slots_ready;

static unsigned
name_hash(const char *name, size_t len)
{
	unsigned h = 2166136261u;

	for (size_t i = 0; i < len; i++) {
		h = (h ^ (unsigned char)tolower((unsigned char)name[i])) * 16777619u;
	}
	return h;
}

static void
slots_build(void)
{
	for (size_t i = 0; i < NCMDS; i++) {
		unsigned h = name_hash(cmds[i].name, strlen(cmds[i].name));
		while (slots[h % LOOKUP_SLOTS] != 0) {
			h++;
		}
		slots[h % LOOKUP_SLOTS] = (unsigned char)(i + 1);
	}
	slots_ready = true;
}

const struct brk_cmd *
brk_cmd_lookup(const char *name, size_t len)
{
	unsigned h;

	if (!slots_ready) {
		slots_build();
	}
	if (len == 0 || len > 32) {
		return NULL;
	}
	for (h = name_hash(name, len); slots[h % LOOKUP_SLOTS] != 0; h++) {
		const struct brk_cmd *c = &cmds[slots[h % LOOKUP_SLOTS] - 1];
		if (strlen(c->name) == len && strncasecmp(c->name, name, len) == 0) {
			return c;
		}
	}
	return NULL;
}

size_t
brk_cmd_count(void)
{
	return NCMDS;
}

const struct brk_cmd *
brk_cmd_at(size_t i)
{
	return i < NCMDS ? &cmds[i] : NULL;
}

/* ------------------------------------------------------------------------
 * Argument helpers
 * ---------------------------------------------------------------------- */

/* Redis' string2ll: no spaces, no '+', no leading zeros, fits long long. */
bool
brk_str2ll(const char *s, size_t len, long long *out)
{
	return echd_str2ll(s, len, out);
}

bool
brk_arg_ll(struct brk_ctx *x, const struct resp_arg *a, long long *out)
{
	if (!brk_str2ll(a->p, a->len, out)) {
		resp_add_error(x->w, BRK_ERR_NOTINT);
		return false;
	}
	return true;
}

bool
brk_cmd_admin(const struct brk_cmd *cmd, int argc, const struct resp_arg *argv)
{
	const struct resp_arg *sub = argc >= 2 ? &argv[1] : NULL;

	if (sub != NULL && cmd->fn == brk_cmd_client) {
		return brk_arg_eq(sub, "LIST") || brk_arg_eq(sub, "KILL") ||
			brk_arg_eq(sub, "UNBLOCK") || brk_arg_eq(sub, "NO-EVICT");
	}
	if (sub != NULL && cmd->fn == brk_cmd_acl) {
		return !brk_acl_sub_light(sub); /* WHOAMI, CAT, HELP */
	}
	if (sub != NULL && (cmd->fn == brk_cmd_config || cmd->fn == brk_cmd_slowlog ||
				cmd->fn == brk_cmd_latency)) {
		return !brk_arg_eq(sub, "HELP");
	}
	return (cmd->flags & BRK_CMD_ADMIN) != 0;
}

bool
brk_arg_timeout(struct brk_ctx *x, const struct resp_arg *a, long long *ms)
{
	if (!brk_str2ll(a->p, a->len, ms)) {
		resp_add_error(x->w, "ERR timeout is not an integer or out of range");
		return false;
	}
	if (*ms < 0) {
		resp_add_error(x->w, "ERR timeout is negative");
		return false;
	}
	return true;
}

bool
brk_arg_eq(const struct resp_arg *a, const char *s)
{
	size_t n = strlen(s);
	return a->len == n && strncasecmp(a->p, s, n) == 0;
}

/* Stars a pattern may nest; past this it matches nothing (Redis' bound). */
#define GLOB_MAX_NESTING 1000

/* *giveup: the rest of the pattern after some star matched the string at
 * no position, so a longer match for an earlier star cannot help either.
 * Without it "*a*a*a...*b" against a long run of a's backtracks through
 * every way of placing its stars: one KEYS would hold the loop for hours. */
static bool
glob_match(const char *pat, size_t plen, const char *s, size_t slen, bool nocase, bool *giveup,
	int nesting)
{
	if (nesting > GLOB_MAX_NESTING) {
		return false;
	}
	while (plen > 0) {
		switch (pat[0]) {
		case '*':
			while (plen > 1 && pat[1] == '*') {
				pat++;
				plen--;
			}
			if (plen == 1) {
				return true;
			}
			while (slen > 0) {
				if (glob_match(pat + 1, plen - 1, s, slen, nocase, giveup, nesting + 1)) {
					return true;
				}
				if (*giveup) {
					return false;
				}
				s++;
				slen--;
			}
			/* What follows the star is not all stars (they were
			 * merged), so it cannot match the empty rest either. */
			*giveup = true;
			return false;
		case '?':
			if (slen == 0) {
				return false;
			}
			s++;
			slen--;
			break;
		case '[': {
			bool neg, match = false;
			pat++;
			plen--;
			neg = plen > 0 && pat[0] == '^';
			if (neg) {
				pat++;
				plen--;
			}
			while (plen > 0 && pat[0] != ']') {
				if (pat[0] == '\\' && plen >= 2) {
					pat++;
					plen--;
					if (slen > 0 && pat[0] == s[0]) {
						match = true;
					}
				} else if (plen >= 3 && pat[1] == '-') {
					int a = (unsigned char)pat[0], b = (unsigned char)pat[2];
					int ch = slen > 0 ? (unsigned char)s[0] : -1;
					if (a > b) {
						int t = a;
						a = b;
						b = t;
					}
					if (nocase && ch >= 0) {
						a = tolower(a);
						b = tolower(b);
						ch = tolower(ch);
					}
					if (ch >= a && ch <= b) {
						match = true;
					}
					pat += 2;
					plen -= 2;
				} else if (slen > 0) {
					if (nocase ? tolower((unsigned char)pat[0]) ==
							tolower((unsigned char)s[0])
						   : pat[0] == s[0]) {
						match = true;
					}
				}
				pat++;
				plen--;
			}
			if (neg) {
				match = !match;
			}
			if (!match || slen == 0) {
				return false;
			}
			s++;
			slen--;
			if (plen == 0) {
				return slen == 0;
			}
			break;
		}
		case '\\':
			if (plen >= 2) {
				pat++;
				plen--;
			}
			__attribute__((fallthrough));
		default:
			if (slen == 0) {
				return false;
			}
			if (nocase ? tolower((unsigned char)pat[0]) != tolower((unsigned char)s[0])
				   : pat[0] != s[0]) {
				return false;
			}
			s++;
			slen--;
			break;
		}
		pat++;
		plen--;
	}
	return slen == 0;
}

/* Redis' stringmatchlen: * ? [...] [^...] and \ escapes. As there, the
 * empty string matches only the empty pattern: callers that take a lone
 * "*" for "everything" (KEYS, SCAN, ACL ~*) say so themselves. */
bool
brk_glob_match(const char *pat, size_t plen, const char *s, size_t slen, bool nocase)
{
	bool giveup = false;

	if (slen == 0) {
		return plen == 0;
	}
	return glob_match(pat, plen, s, slen, nocase, &giveup, 0);
}
