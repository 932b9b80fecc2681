/* commands.c - the command table: what each command is (arity, flags, where
 * its keys are, its subcommands, its secrets, its docs), and the lookups
 * through which the dispatcher, the ACL, COMMAND, SLOWLOG and MONITOR read
 * it; and argument helpers shared by handlers. */
#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
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
#define NA BRK_CMD_NOAUTH
#define NQ BRK_CMD_NOQUEUE
#define EX BRK_CMD_EXEC
#define FR BRK_CMD_FREES
#define SB BRK_CMD_STANDBY
#define XC BRK_CMD_XCACHE
#define PS BRK_CMD_PUBSUB
#define SC BRK_CMD_SUBCTX
#define CH BRK_CMD_CHAN_ALL
#define CH1 BRK_CMD_CHAN_FIRST
#define CHP (BRK_CMD_CHAN_ALL | BRK_CMD_CHAN_PATTERN)

#define SUBS(t) .subs = (t), .nsubs = sizeof(t) / sizeof((t)[0])

/* Key specs, in Redis' words (src/commands/<cmd>.json) */
#define KRO  BRK_KS_RO
#define KRW  BRK_KS_RW
#define KOW  BRK_KS_OW
#define KRM  BRK_KS_RM
#define KACC BRK_KS_ACCESS
#define KUPD BRK_KS_UPDATE
#define KINS BRK_KS_INSERT
#define KDEL BRK_KS_DELETE
/* argv[p], and lastkey more (-1: to the end) */
#define KS_AT(p, last, fl) {.bs = BRK_KS_INDEX, .pos = (p), .lastkey = (last), .step = 1, .flags = (fl)}
/* after the keyword kw, searched from argv[from]: lastkey, limit as Redis' range */
#define KS_AFTER(kw, from, last, lim, fl) \
	{.bs = BRK_KS_KEYWORD, .keyword = (kw), .startfrom = (from), .lastkey = (last), \
		.limit = (lim), .step = 1, .flags = (fl)}
#define NOKEYS  {{BRK_KS_NONE}}
#define KEY1(fl) {KS_AT(1, 0, fl)}     /* argv[1] */
#define KEYSN(fl) {KS_AT(1, -1, fl)}   /* argv[1..] */
#define KEY2(fl) {KS_AT(2, 0, fl)}     /* a subcommand's key: the argument after its name */

/* ------------------------------------------------------------------------
 * Keys that move: found by reading the request as its handler reads it
 * ---------------------------------------------------------------------- */

/* XREAD [COUNT n] [MAXCOUNT n] [MAXSIZE n] [BLOCK ms] STREAMS key... id... and
 * XREADGROUP GROUP g c [COUNT n] [MAXCOUNT n] [MAXSIZE n] [BLOCK ms] [CLAIM ms]
 * [NOACK] STREAMS ...: the options are walked as brk_parse_read_opts()
 * walks them, in any order, so that the keys checked are the keys read
 * whatever the group, the consumer or a key is called ("streams"). The
 * key spec's keyword search would take XREADGROUP COUNT 1 GROUP g STREAMS
 * STREAMS k > for a read of "STREAMS"; Redis keeps xreadGetKeys for it. */
static bool
read_keys(int argc, const struct resp_arg *argv, bool group, struct brk_keys *out)
{
	for (int i = 1; i < argc; i++) {
		int more = argc - i - 1;
		const struct resp_arg *o = &argv[i];
		if ((brk_arg_eq(o, "BLOCK") || brk_arg_eq(o, "COUNT") ||
			    brk_arg_eq(o, "MAXCOUNT") || brk_arg_eq(o, "MAXSIZE") ||
			    (group && brk_arg_eq(o, "CLAIM"))) &&
			more) {
			i++;
		} else if (brk_arg_eq(o, "STREAMS") && more) {
			if (more % 2 != 0) {
				return false; /* unbalanced: refused */
			}
			out->r[out->n++] = (struct brk_keyrange){i + 1, i + more / 2, 1,
				BRK_KS_RO | BRK_KS_ACCESS};
			return true;
		} else if (group && brk_arg_eq(o, "GROUP") && more >= 2) {
			i += 2;
		} else if (!(group && brk_arg_eq(o, "NOACK"))) {
			return false; /* a syntax error: refused */
		}
	}
	return false;
}

static bool
xread_keys(int argc, const struct resp_arg *argv, struct brk_keys *out)
{
	return read_keys(argc, argv, false, out);
}

static bool
xreadgroup_keys(int argc, const struct resp_arg *argv, struct brk_keys *out)
{
	return read_keys(argc, argv, true, out);
}

/* ------------------------------------------------------------------------
 * Secrets: the arguments SLOWLOG and MONITOR show as "(redacted)"
 * ---------------------------------------------------------------------- */

static bool
redact_all(int argc, const struct resp_arg *argv, int i)
{
	return i >= 1; /* AUTH [user] password */
}

static bool
redact_rules(int argc, const struct resp_arg *argv, int i)
{
	return i >= 2; /* ACL SETUSER name rule...: a rule may be a password */
}

/* HELLO [protover [AUTH username password] [SETNAME name]], read in order
 * as HELLO reads it, so that a name "AUTH" is a name */
static bool
redact_hello(int argc, const struct resp_arg *argv, int i)
{
	for (int j = 2; j < argc; j++) {
		if (brk_arg_eq(&argv[j], "AUTH") && j + 2 < argc) {
			if (i == j + 1 || i == j + 2) {
				return true;
			}
			j += 2;
		} else if (brk_arg_eq(&argv[j], "SETNAME") && j + 1 < argc) {
			j++;
		} else {
			break;
		}
	}
	return false;
}

/* CONFIG SET name value [name value ...]: a value after a secret's name */
static bool
redact_config_set(int argc, const struct resp_arg *argv, int i)
{
	return i >= 3 && (i - 3) % 2 == 0 &&
		(brk_arg_eq(&argv[i - 1], "requirepass") ||
			brk_arg_eq(&argv[i - 1], "tls-key-file-pass"));
}

/* ------------------------------------------------------------------------
 * Subcommands: name, arity, flags, keys, categories, secrets; their docs
 * (summary, since, complexity, arguments) for COMMAND DOCS, as Redis' pages
 * give them, with the arguments echd reads
 * ---------------------------------------------------------------------- */

#define DOC(su, si, co, sy) .summary = (su), .since = (si), .complexity = (co), .syntax = (sy)
#define HELP_DOC(si) DOC("Returns helpful text about the different subcommands.", si, "O(1)", NULL)

/* DESTROY and DELCONSUMER make room: they run while the disk is full.
 * SETPOLICY is echd's own: its "since" is echd's version (ECHD_VERSION),
 * not a Redis release. Its DEADLETTER key is a key: the stream a later
 * XNACK FATAL or MAXDELIVER appends to. The keyword search is exact: it
 * starts after the key and the group (either may be called "DEADLETTER"),
 * every value before it is a number (one that is not is refused), and the
 * handler refuses a second DEADLETTER, which the search would not see. */
#define SETPOLICY_KEYS \
	{KS_AT(2, 0, KRW | KUPD), KS_AFTER("DEADLETTER", 4, 0, 0, KRW | KINS)}
static const struct brk_subcmd xgroup_subs[] = {
	{"create", -5, 0, KEY2(KRW | KINS), DOC("Creates a consumer group.", "5.0.0", "O(1)",
		"key group <id | $> [MKSTREAM] [ENTRIESREAD entries-read]")},
	{"setid", -5, 0, KEY2(KRW | KUPD), DOC("Sets the last-delivered ID of a consumer group.", "5.0.0",
		"O(1)", "key group <id | $> [ENTRIESREAD entries-read]")},
	{"destroy", 4, FR, KEY2(KRW | KDEL), DOC("Destroys a consumer group.", "5.0.0",
		"O(N) where N is the number of entries in the group's pending entries list (PEL).",
		"key group")},
	{"createconsumer", 5, 0, KEY2(KRW | KINS), DOC("Creates a consumer in a consumer group.", "6.2.0",
		"O(1)", "key group consumer")},
	{"delconsumer", 5, FR, KEY2(KRW | KDEL), DOC("Deletes a consumer from a consumer group.", "5.0.0",
		"O(1)", "key group consumer")},
	{"help", 2, FR, HELP_DOC("5.0.0")},
	{"setpolicy", -4, 0, SETPOLICY_KEYS, DOC("Sets a consumer group's delivery policy: ack deadline, "
		"redelivery backoff, delivery limit, dead-letter stream, pending limit.",
		ECHD_VERSION, "O(1); O(N) with N the group's pending entries when a deadline is set",
		"key group [ACKWAIT milliseconds] [BACKOFF numdelays delay [delay ...]] "
		"[MAXDELIVER count] [DEADLETTER key] [MAXACKPENDING count] [RESET]")},
};
static const struct brk_subcmd xinfo_subs[] = {
	{"stream", -3, 0, KEY2(KRO | KACC), DOC("Returns information about a stream.", "5.0.0", "O(1)",
		"key [FULL [COUNT count]]")},
	{"groups", 3, 0, KEY2(KRO | KACC), DOC("Returns a list of the consumer groups of a stream.", "5.0.0",
		"O(1)", "key")},
	{"consumers", 4, 0, KEY2(KRO | KACC), DOC("Returns a list of the consumers in a consumer group.",
		"5.0.0", "O(1)", "key group")},
	{"help", 2, HELP_DOC("5.0.0")},
};
static const struct brk_subcmd config_subs[] = {
	{"get", -3, A, DOC("Returns the effective values of configuration parameters.", "2.0.0",
		"O(N) when N is the number of configuration parameters provided",
		"parameter [parameter ...]")},
	{"set", -4, A, .redact = redact_config_set, DOC("Sets configuration parameters in-flight.",
		"2.0.0", "O(N) when N is the number of configuration parameters provided",
		"parameter value [parameter value ...]")},
	{"resetstat", 2, A, DOC("Resets the server's statistics.", "2.0.0", "O(1)", NULL)},
	{"rewrite", 2, A, DOC("Persists the effective configuration to file.", "2.8.0", "O(1)",
		NULL)},
	{"help", 2, HELP_DOC("5.0.0")},
};
static const struct brk_subcmd client_subs[] = {
	{"id", 2, DOC("Returns the unique client ID of the connection.", "5.0.0", "O(1)", NULL)},
	{"setname", 3, DOC("Sets the connection name.", "2.6.9", "O(1)", "connection-name")},
	{"getname", 2, DOC("Returns the name of the connection.", "2.6.9", "O(1)", NULL)},
	{"info", 2, DOC("Returns information about the connection.", "6.2.0", "O(1)", NULL)},
	{"list", -2, A, DOC("Lists open connections.", "2.4.0",
		"O(N) where N is the number of client connections",
		"[TYPE <NORMAL | MASTER | REPLICA | PUBSUB>] [ID client-id [client-id ...]]")},
	{"kill", -3, A, DOC("Terminates open connections.", "2.4.0",
		"O(N) where N is the number of client connections",
		"<ip:port | <[ID client-id] [TYPE <NORMAL | MASTER | SLAVE | REPLICA | PUBSUB>] "
		"[USER username] [ADDR ip:port] [LADDR ip:port] [SKIPME <YES | NO>] "
		"[MAXAGE maxage]>>")},
	{"unblock", -3, A, DOC("Unblocks a client blocked by a blocking command from a different "
		"connection.", "5.0.0", "O(log N) where N is the number of client connections",
		"client-id [<TIMEOUT | ERROR>]")},
	{"setinfo", 4, DOC("Sets information specific to the client or connection.", "7.2.0",
		"O(1)", "<LIB-NAME libname | LIB-VER libver>")},
	{"no-evict", 3, A, DOC("Sets the client eviction mode of the connection.", "7.0.0", "O(1)",
		"<ON | OFF>")},
	{"no-touch", 3, DOC("Controls whether commands sent by the client affect the LRU/LFU of "
		"accessed keys.", "7.2.0", "O(1)", "<ON | OFF>")},
	{"help", 2, HELP_DOC("5.0.0")},
};
/* WHOAMI, CAT, GENPASS and HELP are @slow only in Redis: a -@admin user
 * may run them, so they have permissions of their own. */
#define USERS_N "O(N). Where N is the number of configured users."
static const struct brk_subcmd acl_subs[] = {
	{"whoami", 2, 0, .acl = "@slow", DOC("Returns the authenticated username of the current "
		"connection.", "6.0.0", "O(1)", NULL)},
	{"users", 2, A, DOC("Lists all ACL users.", "6.0.0", USERS_N, NULL)},
	{"list", 2, A, DOC("Dumps the effective rules in ACL file format.", "6.0.0", USERS_N, NULL)},
	{"setuser", -3, A, .redact = redact_rules, DOC("Creates and modifies an ACL user and its "
		"rules.", "6.0.0", "O(N). Where N is the number of rules provided.",
		"username [rule [rule ...]]")},
	{"deluser", -3, A, DOC("Deletes ACL users, and terminates their connections.", "6.0.0",
		"O(1) amortized time considering the typical user.", "username [username ...]")},
	{"cat", -2, 0, .acl = "@slow", DOC("Lists the ACL categories, or the commands inside a "
		"category.", "6.0.0", "O(1) since the categories and commands are a fixed set.",
		"[category]")},
	{"save", 2, A, DOC("Saves the effective ACL rules in the configured ACL file.", "6.0.0",
		USERS_N, NULL)},
	{"load", 2, A, DOC("Reloads the rules from the configured ACL file.", "6.0.0", USERS_N,
		NULL)},
	{"log", -2, A, DOC("Lists recent security events generated due to ACL rules.", "6.0.0",
		"O(N) with N being the number of entries shown.", "[<count | RESET>]")},
	{"getuser", 3, A, DOC("Lists the ACL rules of a user.", "6.0.0", "O(N). Where N is the "
		"number of password, command and pattern rules that the user has.", "username")},
	{"genpass", -2, 0, .acl = "@slow", DOC("Generates a pseudorandom, secure password that can "
		"be used to identify ACL users.", "6.0.0", "O(1)", "[bits]")},
	{"dryrun", -4, A, DOC("Simulates the execution of a command by a user, without executing "
		"the command.", "7.0.0", "O(1).", "username command [arg [arg ...]]")},
	{"help", 2, 0, .acl = "@slow", HELP_DOC("6.0.0")},
};
#undef USERS_N
static const struct brk_subcmd slowlog_subs[] = {
	{"get", -2, A, DOC("Returns the slow log's entries.", "2.2.12",
		"O(N) where N is the number of entries returned", "[count]")},
	{"len", 2, A, DOC("Returns the number of entries in the slow log.", "2.2.12", "O(1)",
		NULL)},
	{"reset", 2, A, DOC("Clears all entries from the slow log.", "2.2.12",
		"O(N) where N is the number of entries in the slowlog", NULL)},
	/* Redis' page words this one differently from every other HELP */
	{"help", 2, DOC("Show helpful text about the different subcommands", "6.2.0", "O(1)",
		NULL)},
};
static const struct brk_subcmd latency_subs[] = {
	{"latest", 2, A, DOC("Returns the latest latency samples for all events.", "2.8.13",
		"O(1)", NULL)},
	{"history", 3, A, DOC("Returns timestamp-latency samples for an event.", "2.8.13", "O(1)",
		"event")},
	{"reset", -2, A, DOC("Resets the latency data for one or more events.", "2.8.13", "O(1)",
		"[event [event ...]]")},
	{"graph", 3, A, DOC("Returns a latency graph for an event.", "2.8.13", "O(1)", "event")},
	{"doctor", 2, A, DOC("Returns a human-readable latency analysis report.", "2.8.13", "O(1)",
		NULL)},
	{"histogram", -2, A, DOC("Returns the cumulative distribution of latencies of a subset or "
		"all commands.", "7.0.0", "O(N) where N is the number of commands with latency "
		"information being retrieved.", "[command [command ...]]")},
	{"help", 2, HELP_DOC("2.8.13")},
};
static const struct brk_subcmd object_subs[] = {
	{"encoding", 3, 0, KEY2(KRO), DOC("Returns the internal encoding of a Redis object.", "2.2.3",
		"O(1)", "key")},
	{"refcount", 3, 0, KEY2(KRO), DOC("Returns the reference count of a value of a key.", "2.2.3",
		"O(1)", "key")},
	{"freq", 3, 0, KEY2(KRO), DOC("Returns the logarithmic access frequency counter of a Redis "
		"object.", "4.0.0", "O(1)", "key")},
	{"help", 2, HELP_DOC("6.2.0")},
};
static const struct brk_subcmd memory_subs[] = {
	{"usage", -3, 0, KEY2(KRO), DOC("Estimates the memory usage of a key.", "4.0.0",
		"O(N) where N is the number of samples.", "key [SAMPLES count]")},
	{"help", 2, HELP_DOC("4.0.0")},
};
/* @pubsub as in Redis, which the container (@slow) is not */
static const struct brk_subcmd pubsub_subs[] = {
	{"channels", -2, 0, .acl = "@pubsub @slow", DOC("Returns the active channels.", "2.8.0",
		"O(N) where N is the number of active channels, and assuming constant time pattern "
		"matching (relatively short channels and patterns)", "[pattern]")},
	{"numpat", 2, 0, .acl = "@pubsub @slow", DOC("Returns a count of unique pattern "
		"subscriptions.", "2.8.0", "O(1)", NULL)},
	{"numsub", -2, 0, .acl = "@pubsub @slow", DOC("Returns a count of subscribers to channels.",
		"2.8.0", "O(N) for the NUMSUB subcommand, where N is the number of requested "
		"channels", "[channel [channel ...]]")},
	{"shardchannels", -2, 0, .acl = "@pubsub @slow", DOC("Returns the active shard channels.",
		"7.0.0", "O(N) where N is the number of active shard channels, and assuming constant "
		"time pattern matching (relatively short shard channels).", "[pattern]")},
	{"shardnumsub", -2, 0, .acl = "@pubsub @slow", DOC("Returns the count of subscribers of "
		"shard channels.", "7.0.0", "O(N) for the SHARDNUMSUB subcommand, where N is the "
		"number of requested shard channels", "[shardchannel [shardchannel ...]]")},
	{"help", 2, HELP_DOC("6.2.0")},
};
static const struct brk_subcmd command_subs[] = {
	{"count", 2, DOC("Returns a count of commands.", "2.8.13", "O(1)", NULL)},
	{"info", -2, DOC("Returns information about one, multiple or all commands.", "2.8.13",
		"O(N) where N is the number of commands to look up",
		"[command-name [command-name ...]]")},
	{"docs", -2, DOC("Returns documentary information about one, multiple or all commands.",
		"7.0.0", "O(N) where N is the number of commands to look up",
		"[command-name [command-name ...]]")},
	{"list", -2, DOC("Returns a list of command names.", "7.0.0",
		"O(N) where N is the total number of Redis commands",
		"[FILTERBY <MODULE module-name | ACLCAT category | PATTERN pattern>]")},
	{"getkeys", -4, DOC("Extracts the key names from an arbitrary command.", "2.8.13",
		"O(N) where N is the number of arguments to the command",
		"command [arg [arg ...]]")},
	{"getkeysandflags", -4, DOC("Extracts the key names and access flags for an arbitrary "
		"command.", "7.0.0", "O(N) where N is the number of arguments to the command",
		"command [arg [arg ...]]")},
	{"help", 2, HELP_DOC("5.0.0")},
};
/* echd's front ends answer as sentinels of one service (ha.c) */
static const struct brk_subcmd sentinel_subs[] = {
	{"get-master-addr-by-name", 3, 0, DOC("Returns the port and address of a master Redis "
		"instance.", "2.8.4", "O(1)", "master-name")},
	{"masters", 2, 0, DOC("Returns a list of monitored Redis masters.", "2.8.4",
		"O(N) where N is the number of masters", NULL)},
	{"master", 3, 0, DOC("Returns the state of a master Redis instance.", "2.8.4", "O(1)",
		"master-name")},
	{"myid", 2, 0, DOC("Returns the Redis Sentinel instance ID.", "6.2.0", "O(1)", NULL)},
	{"replicas", 3, 0, DOC("Returns a list of the monitored Redis replicas.", "5.0.0",
		"O(N) where N is the number of replicas", "master-name")},
	{"slaves", 3, 0, DOC("Returns a list of the monitored replicas.", "2.8.0",
		"O(N) where N is the number of replicas.", "master-name")},
	{"sentinels", 3, 0, DOC("Returns a list of Sentinel instances.", "2.8.4",
		"O(N) where N is the number of Sentinels", "master-name")},
	{"help", 2, HELP_DOC("6.2.0")},
};
/* CLUSTER (cmd_cluster.c): the map's views; none has keys (KEYSLOT's is a
 * name to hash, not a key it touches) */
static const struct brk_subcmd cluster_subs[] = {
	{"keyslot", 3, 0, DOC("Returns the hash slot for a key.", "3.0.0",
		"O(N) where N is the number of bytes in the key", "key")},
	{"myid", 2, 0, DOC("Returns the ID of a node.", "3.0.0", "O(1)", NULL)},
	{"info", 2, 0, DOC("Returns information about the state of a node.", "3.0.0", "O(1)",
		NULL)},
	{"nodes", 2, 0, DOC("Returns the cluster configuration for a node.", "3.0.0",
		"O(N) where N is the total number of Cluster nodes", NULL)},
	{"slots", 2, 0, DOC("Returns the mapping of cluster slots to nodes.", "3.0.0",
		"O(N) where N is the total number of Cluster nodes", NULL)},
	{"shards", 2, 0, DOC("Returns the mapping of cluster slots to shards.", "7.0.0",
		"O(N) where N is the total number of cluster nodes", NULL)},
	/* echd keeps no index by slot: both walk the keyspace (cmd_cluster.c) */
	{"countkeysinslot", 3, 0, DOC("Returns the number of keys in a hash slot.", "3.0.0",
		"O(N) where N is the number of keys in the database", "slot")},
	{"getkeysinslot", 4, 0, DOC("Returns the key names in a hash slot.", "3.0.0",
		"O(N) where N is the number of keys in the database", "slot count")},
	{"help", 2, 0, HELP_DOC("5.0.0")},
};
#undef HELP_DOC
#undef DOC

/* Sorted by nothing in particular; lookups compare length first. */
#define XADD_KEYS \
	{{.bs = BRK_KS_INDEX, .pos = 1, .step = 1, .flags = KRW | KUPD, \
		.notes = "UPDATE instead of INSERT because of the optional trimming feature"}}

static const struct brk_cmd cmds[] = {
	{"ping", brk_cmd_ping, -1, SB | NS | F | S | SC, NOKEYS,
		"@fast @connection", "connection", "1.0.0",
		"Returns the server's liveliness response.", "O(1)",
		.syntax = "[message]"},
	{"echo", brk_cmd_echo, 2, NS | F | L | S, NOKEYS, "@fast @connection", "connection",
		"1.0.0", "Returns the given string.", "O(1)",
		.syntax = "message"},
	{"hello", brk_cmd_hello, -1, SB | NS | F | L | S | NC | NA, NOKEYS, "@fast @connection",
		"connection", "6.0.0", "Handshakes with the server.", "O(1)",
		.syntax = "[protover [AUTH username password] [SETNAME clientname]]", .redact = redact_hello},
	{"quit", brk_cmd_quit, -1, SB | NS | F | L | S | NC | NA | NQ | SC, NOKEYS,
		"@fast @connection",
		"connection", "1.0.0", "Closes the connection.", "O(1)"},
	{"reset", brk_cmd_reset, 1, SB | NS | F | L | S | NC | NA | NQ | SC, NOKEYS,
		"@fast @connection",
		"connection", "6.2.0", "Resets the connection.", "O(1)"},
	{"select", brk_cmd_select, 2, SB | NS | F | L | S, NOKEYS,
		"@fast @connection", "connection",
		"1.0.0", "Changes the selected database.", "O(1)",
		.syntax = "index"},
	{"dbsize", brk_cmd_dbsize, 1, R | F, NOKEYS, "@keyspace @read @fast", "server", "1.0.0",
		"Returns the number of keys in the database.", "O(1)"},
	{"time", brk_cmd_time, 1, NS | F | L | S, NOKEYS, "@fast", "server", "2.6.0",
		"Returns the server time.", "O(1)"},
	{"del", brk_cmd_del, -2, W | FR, KEYSN(KRM | KDEL), "@keyspace @write @slow", "generic", "1.0.0",
		"Deletes one or more keys.", "O(N) keys; rows are reclaimed in the background",
		.syntax = "key [key ...]"},
	{"unlink", brk_cmd_del, -2, W | F | FR, KEYSN(KRM | KDEL), "@keyspace @write @fast", "generic", "4.0.0",
		"Asynchronously deletes one or more keys.", "O(1) per key",
		.syntax = "key [key ...]"},
	{"exists", brk_cmd_exists, -2, R | F, KEYSN(KRO), "@keyspace @read @fast", "generic",
		"1.0.0", "Determines whether one or more keys exist.", "O(N)",
		.syntax = "key [key ...]"},
	{"expire", brk_cmd_expire, -3, W | F, KEY1(KRW | KUPD), "@keyspace @write @fast", "generic", "1.0.0",
		"Sets the expiration time of a key in seconds.", "O(log N) keys with an expiry",
		.syntax = "key seconds [<NX | XX | GT | LT>]"},
	{"pexpire", brk_cmd_pexpire, -3, W | F, KEY1(KRW | KUPD), "@keyspace @write @fast", "generic",
		"2.6.0", "Sets the expiration time of a key in milliseconds.",
		"O(log N) keys with an expiry",
		.syntax = "key milliseconds [<NX | XX | GT | LT>]"},
	{"expireat", brk_cmd_expireat, -3, W | F, KEY1(KRW | KUPD), "@keyspace @write @fast", "generic",
		"1.2.0", "Sets the expiration time of a key to a Unix timestamp.",
		"O(log N) keys with an expiry",
		.syntax = "key unix-time-seconds [<NX | XX | GT | LT>]"},
	{"pexpireat", brk_cmd_pexpireat, -3, W | F, KEY1(KRW | KUPD), "@keyspace @write @fast", "generic",
		"2.6.0", "Sets the expiration time of a key to a Unix milliseconds timestamp.",
		"O(log N) keys with an expiry",
		.syntax = "key unix-time-milliseconds [<NX | XX | GT | LT>]"},
	{"ttl", brk_cmd_ttl, 2, R | F, KEY1(KRO | KACC), "@keyspace @read @fast", "generic", "1.0.0",
		"Returns the expiration time in seconds of a key.", "O(1)",
		.syntax = "key"},
	{"pttl", brk_cmd_pttl, 2, R | F, KEY1(KRO | KACC), "@keyspace @read @fast", "generic", "2.6.0",
		"Returns the expiration time in milliseconds of a key.", "O(1)",
		.syntax = "key"},
	{"expiretime", brk_cmd_expiretime, 2, R | F, KEY1(KRO | KACC), "@keyspace @read @fast", "generic",
		"7.0.0", "Returns the expiration time of a key as a Unix timestamp.", "O(1)",
		.syntax = "key"},
	{"pexpiretime", brk_cmd_pexpiretime, 2, R | F, KEY1(KRO | KACC), "@keyspace @read @fast",
		"generic", "7.0.0",
		"Returns the expiration time of a key as a Unix milliseconds timestamp.", "O(1)",
		.syntax = "key"},
	{"persist", brk_cmd_persist, 2, W | F | FR, KEY1(KRW | KUPD), "@keyspace @write @fast", "generic",
		"2.2.0", "Removes the expiration time of a key.", "O(log N) keys with an expiry",
		.syntax = "key"},
	{"touch", brk_cmd_touch, -2, R | F, KEYSN(KRO), "@keyspace @read @fast", "generic", "3.2.1",
		"Returns the number of existing keys out of those specified. echd keeps no access "
		"times to update.", "O(N) where N is the number of keys that will be touched.",
		.syntax = "key [key ...]"},
	{"randomkey", brk_cmd_randomkey, 1, R, NOKEYS, "@keyspace @read @slow", "generic",
		"1.0.0", "Returns a random key name from the database.", "O(log N)",
		.syntax = ""},
	{"object", brk_cmd_object, -2, R, NOKEYS, "@keyspace @read @slow", "generic", "2.2.3",
		"A container for object introspection commands.", "Depends on subcommand.",
		SUBS(object_subs)},
	{"memory", brk_cmd_memory, -2, R, NOKEYS, "@read @slow", "server", "4.0.0",
		"A container for memory diagnostics commands. MEMORY USAGE counts bytes in storage.",
		"Depends on subcommand.",
		SUBS(memory_subs)},
	{"type", brk_cmd_type, 2, R | F, KEY1(KRO), "@keyspace @read @fast", "generic", "1.0.0",
		"Determines the type of value stored at a key.", "O(1)",
		.syntax = "key"},
	{"keys", brk_cmd_keys, 2, R, NOKEYS, "@keyspace @read @slow @dangerous", "generic",
		"1.0.0", "Returns all key names that match a pattern.", "O(N)",
		.syntax = "pattern"},
	{"scan", brk_cmd_scan, -2, R, NOKEYS, "@keyspace @read @slow", "generic", "2.8.0",
		"Iterates over the key names in the database.", "O(1) per call",
		.syntax = "cursor [MATCH pattern] [COUNT count] [TYPE type]"},
	{"rename", brk_cmd_rename, 3, W, {KS_AT(1, 0, KRW | KACC | KDEL), KS_AT(2, 0, KOW | KUPD)}, "@keyspace @write @slow", "generic", "1.0.0",
		"Renames a key and overwrites the destination.", "O(1)",
		.syntax = "key newkey"},
	{"renamenx", brk_cmd_renamenx, 3, W | F, {KS_AT(1, 0, KRW | KACC | KDEL), KS_AT(2, 0, KOW | KINS)}, "@keyspace @write @fast", "generic",
		"1.0.0", "Renames a key only when the target key name doesn't exist.", "O(1)",
		.syntax = "key newkey"},
	{"copy", brk_cmd_copy, -3, W | OM | BULK, {KS_AT(1, 0, KRO | KACC), KS_AT(2, 0, KOW | KUPD)}, "@keyspace @write @slow", "generic", "6.2.0",
		"Copies the value of a key to a new key.",
		"O(N) in the entries, consumers and pending entries copied",
		.syntax = "source destination [DB destination-db] [REPLACE]"},
	{"move", brk_cmd_move, 3, W | F, KEY1(KRW | KACC | KUPD), "@keyspace @write @fast", "generic", "1.0.0",
		"Moves a key to another database.", "O(1)",
		.syntax = "key db"},
	{"flushdb", brk_cmd_flushdb, -1, W | FR, NOKEYS, "@keyspace @write @slow @dangerous", "server",
		"1.0.0", "Removes all keys from the current database.", "O(N)",
		.syntax = "[<ASYNC | SYNC>]"},
	{"flushall", brk_cmd_flushall, -1, W | FR, NOKEYS, "@keyspace @write @slow @dangerous",
		"server", "1.0.0", "Removes all keys from all databases.", "O(N)",
		.syntax = "[<ASYNC | SYNC>]"},
	{"info", brk_cmd_info, -1, SB | R | L | S, NOKEYS, "@slow @dangerous", "server", "1.0.0",
		"Returns information and statistics about the server.", "O(1)",
		.syntax = "[section [section ...]]"},
	{"config", brk_cmd_config, -2, NS | A | L | S | NC, NOKEYS, "@admin @slow @dangerous",
		"server", "2.0.0", "A container for server configuration commands.", "Depends on subcommand.",
		SUBS(config_subs)},
	{"client", brk_cmd_client, -2, SB | NS | L | S | NC, NOKEYS,
		"@slow @connection", "connection",
		"2.4.0", "A container for client connection commands.", "Depends on subcommand.",
		SUBS(client_subs)},
	{"command", brk_cmd_command, -1, SB | NS | L | S, NOKEYS, "@slow @connection", "server",
		"2.8.13", "Returns detailed information about all commands.", "O(N)",
		SUBS(command_subs)},
	{"shutdown", brk_cmd_shutdown, -1, NS | A | L | S | NC | NM, NOKEYS, "@admin @slow @dangerous",
		"server", "1.0.0", "Commits what is in flight and shuts down the server.", "O(1)",
		.syntax = "[<NOSAVE | SAVE>] [NOW] [FORCE] [ABORT]"},
	{"lastsave", brk_cmd_lastsave, 1, R | L | S | F, NOKEYS, "@admin @fast @dangerous",
		"server", "1.0.0", "Returns the Unix timestamp of the last durable commit.", "O(1)"},
	{"save", brk_cmd_save, 1, NS | A | NC | NM, NOKEYS, "@admin @slow @dangerous", "server",
		"1.0.0", "Everything is already on disk: returns OK.", "O(1)"},
	{"bgsave", brk_cmd_save, -1, NS | A | NC, NOKEYS, "@admin @slow @dangerous", "server",
		"1.0.0", "Everything is already on disk: returns OK.", "O(1)"},
	{"role", brk_cmd_role, 1, NS | SB | NC | L | S | F, NOKEYS, "@admin @fast @dangerous",
		"server", "2.8.12", "Returns the replication role.", "O(1)"},
	{"sentinel", brk_cmd_sentinel, -2, NS | SB | A | NC | L | S, NOKEYS,
		"@admin @slow @dangerous", "sentinel", "2.8.4",
		"A container for Redis Sentinel commands: the active front end of ha-name.",
		"Depends on subcommand.", SUBS(sentinel_subs)},
	/* a standby answers it too: clients read the map from any node */
	{"cluster", brk_cmd_cluster, -2, SB | R, NOKEYS, "@slow", "cluster", "3.0.0",
		"A container for Redis Cluster commands.", "Depends on subcommand.",
		SUBS(cluster_subs)},
	{"readonly", brk_cmd_readonly, 1, SB | NS | F | L | S, NOKEYS, "@fast @connection",
		"cluster", "3.0.0",
		"Enables read-only queries for a connection to a Redis Cluster replica node.", "O(1)"},
	{"readwrite", brk_cmd_readonly, 1, SB | NS | F | L | S, NOKEYS, "@fast @connection",
		"cluster", "3.0.0",
		"Enables read-write queries for a connection to a Redis Cluster replica node.",
		"O(1)"},
	{"asking", brk_cmd_readonly, 1, SB | NS | F, NOKEYS, "@fast @connection", "cluster",
		"3.0.0", "Signals that a cluster client is following an -ASK redirect.", "O(1)"},
	{"auth", brk_cmd_auth, -2, SB | NS | F | L | S | NC | NA, NOKEYS, "@fast @connection",
		"connection", "1.0.0", "Authenticates the connection.",
		"O(N) where N is the number of passwords defined for the user",
		.redact = redact_all},
	{"acl", brk_cmd_acl, -2, NS | A | L | S | NC, NOKEYS, "@admin @slow @dangerous", "server",
		"6.0.0", "A container for Access List Control commands.", "Depends on subcommand.",
		SUBS(acl_subs)},
	{"multi", brk_cmd_multi, 1, NS | F | L | S | NC | NQ, NOKEYS, "@fast @transaction",
		"transactions", "1.2.0", "Starts a transaction.", "O(1)"},
	{"exec", brk_cmd_exec, 1, NS | L | S | NC | NQ | EX, NOKEYS, "@slow @transaction",
		"transactions", "1.2.0", "Executes all commands in a transaction.",
		"Depends on commands in the transaction"},
	{"discard", brk_cmd_discard, 1, SB | NS | F | L | S | NC | NQ, NOKEYS,
		"@fast @transaction",
		"transactions", "2.0.0", "Discards a transaction.", "O(N), when N is the number of queued commands"},
	{"watch", brk_cmd_watch, -2, NS | F | L | S | NC | NQ, KEYSN(KRO), "@fast @transaction",
		"transactions", "2.2.0",
		"Monitors changes to keys to determine the execution of a transaction.", "O(1) for every key."},
	{"unwatch", brk_cmd_unwatch, 1, NS | F | L | S | NC, NOKEYS, "@fast @transaction",
		"transactions", "2.2.0", "Forgets about watched keys of a transaction.", "O(1)"},
	{"monitor", brk_cmd_monitor, 1, NS | A | L | S | NC, NOKEYS, "@admin @slow @dangerous",
		"server", "1.0.0", "Listens for all requests received by the server in real-time.",
		"O(1)"},
	{"slowlog", brk_cmd_slowlog, -2, NS | A | L | S, NOKEYS, "@admin @slow @dangerous", "server",
		"2.2.12", "A container for slow log commands.", "Depends on subcommand.",
		SUBS(slowlog_subs)},
	{"latency", brk_cmd_latency, -2, NS | A | L | S, NOKEYS, "@admin @slow @dangerous",
		"server", "2.8.13", "A container for latency diagnostics commands.",
		"Depends on subcommand.",
		SUBS(latency_subs)},
	{"wait", brk_cmd_wait, 3, NS | B, NOKEYS, "@slow @blocking @connection", "generic",
		"3.0.0", "Blocks until the asynchronous replication of all preceding write commands "
			 "sent by the connection is completed. echd has no replicas.", "O(1)",
		.syntax = "numreplicas timeout"},
	{"waitaof", brk_cmd_waitaof, 4, NS | B, NOKEYS, "@slow @blocking @connection", "generic",
		"7.2.0", "Blocks until all of the preceding write commands sent by the connection are "
			 "on disk. In echd they always are by the time this replies.", "O(1)",
		.syntax = "numlocal numreplicas timeout"},
	/* Pub/Sub (pubsub.c): not stored; shard channels are not keys to ACL */
	{"subscribe", brk_cmd_subscribe, -2, SB | NS | PS | NC | L | S | SC | CH, NOKEYS,
		"@pubsub @slow", "pubsub", "2.0.0", "Listens for messages published to channels.",
		"O(N) where N is the number of channels to subscribe to.",
		.syntax = "channel [channel ...]"},
	{"unsubscribe", brk_cmd_unsubscribe, -1, SB | NS | PS | NC | L | S | SC, NOKEYS,
		"@pubsub @slow", "pubsub", "2.0.0", "Stops listening to messages posted to channels.",
		"O(N) where N is the number of channels to unsubscribe.",
		.syntax = "[channel [channel ...]]"},
	{"psubscribe", brk_cmd_psubscribe, -2, SB | NS | PS | NC | L | S | SC | CHP, NOKEYS,
		"@pubsub @slow", "pubsub", "2.0.0",
		"Listens for messages published to channels that match one or more patterns.",
		"O(N) where N is the number of patterns to subscribe to.",
		.syntax = "pattern [pattern ...]"},
	{"punsubscribe", brk_cmd_punsubscribe, -1, SB | NS | PS | NC | L | S | SC, NOKEYS,
		"@pubsub @slow", "pubsub", "2.0.0",
		"Stops listening to messages published to channels that match one or more "
		"patterns.", "O(N) where N is the number of patterns to unsubscribe.",
		.syntax = "[pattern [pattern ...]]"},
	{"ssubscribe", brk_cmd_ssubscribe, -2, NS | PS | NC | L | S | SC | CH, {KS_AT(1, -1, BRK_KS_NOT_KEY)},
		"@pubsub @slow", "pubsub", "7.0.0",
		"Listens for messages published to shard channels.",
		"O(N) where N is the number of shard channels to subscribe to.",
		.syntax = "shardchannel [shardchannel ...]"},
	{"sunsubscribe", brk_cmd_sunsubscribe, -1, NS | PS | NC | L | S | SC, {KS_AT(1, -1, BRK_KS_NOT_KEY)},
		"@pubsub @slow", "pubsub", "7.0.0",
		"Stops listening to messages posted to shard channels.",
		"O(N) where N is the number of shard channels to unsubscribe.",
		.syntax = "[shardchannel [shardchannel ...]]"},
	{"publish", brk_cmd_publish, 3, NS | PS | L | S | F | CH1, NOKEYS, "@pubsub @fast",
		"pubsub", "2.0.0", "Posts a message to a channel.",
		"O(N+M) where N is the number of clients subscribed to the receiving channel and M "
		"is the total number of subscribed patterns (by any client).",
		.syntax = "channel message"},
	{"spublish", brk_cmd_spublish, 3, NS | PS | L | S | F | CH1, {KS_AT(1, 0, BRK_KS_NOT_KEY)}, "@pubsub @fast",
		"pubsub", "7.0.0", "Post a message to a shard channel",
		"O(N) where N is the number of clients subscribed to the receiving shard channel.",
		.syntax = "shardchannel message"},
	{"pubsub", brk_cmd_pubsub, -2, NS, NOKEYS, "@slow", "pubsub", "2.8.0",
		"A container for Pub/Sub commands.", "Depends on subcommand.", SUBS(pubsub_subs)},
	{"xadd", brk_cmd_xadd, -5, W | OM | F | XC, XADD_KEYS, "@write @stream @fast", "stream", "5.0.0",
		"Appends a new message to a stream. Creates the key if it doesn't exist.", "O(1)",
		.syntax = "key [NOMKSTREAM] [KEEPREF | DELREF | ACKED] [<IDMPAUTO pid | IDMP pid iid>] "
		 "[<MAXLEN | MINID> [<= | ~>] threshold [LIMIT count]] "
		 "<* | id> field value [field value ...]"},
	{"xcfgset", brk_cmd_xcfgset, -2, W | F, KEY1(KRW | KUPD), "@write @stream @fast", "stream", "8.6.0",
		"Sets the IDMP configuration parameters for a stream.", "O(1)",
		.syntax = "key [IDMP-DURATION idmp-duration] [IDMP-MAXSIZE idmp-maxsize]"},
	{"xidmprecord", brk_cmd_xidmprecord, 5, W | OM | F, KEY1(KRW | KUPD), "@write @stream @fast",
		"stream", "8.8.0",
		"An internal command for setting IDMP metadata on an existing stream message.", "O(1)",
		.syntax = "key pid iid stream-id"},
	{"xlen", brk_cmd_xlen, 2, R | F, KEY1(KRO), "@read @stream @fast", "stream", "5.0.0",
		"Return the number of messages in a stream.", "O(1)",
		.syntax = "key"},
	{"xrange", brk_cmd_xrange, -4, R, KEY1(KRO | KACC), "@read @stream @slow", "stream", "5.0.0",
		"Returns the messages from a stream within a range of IDs.", "O(log(N)+M)",
		.syntax = "key start end [COUNT count]"},
	{"xrevrange", brk_cmd_xrevrange, -4, R, KEY1(KRO | KACC), "@read @stream @slow", "stream", "5.0.0",
		"Returns the messages from a stream within a range of IDs in reverse order.",
		"O(log(N)+M)",
		.syntax = "key end start [COUNT count]"},
	{"xdel", brk_cmd_xdel, -3, W | F | FR, KEY1(KRW | KDEL), "@write @stream @fast", "stream", "5.0.0",
		"Returns the number of messages after removing them from a stream.", "O(1) per id",
		.syntax = "key id [id ...]"},
	{"xtrim", brk_cmd_xtrim, -4, W | FR, KEY1(KRW | KDEL), "@write @stream @slow", "stream", "5.0.0",
		"Deletes messages from the beginning of a stream.", "O(N)",
		.syntax = "key <MAXLEN | MINID> [<= | ~>] threshold [LIMIT count] "
			  "[KEEPREF | DELREF | ACKED]"},
	{"xdelex", brk_cmd_xdelex, -5, W | F | FR, KEY1(KRW | KDEL), "@write @stream @fast", "stream",
		"8.2.0", "Deletes one or multiple entries from the stream.",
		"O(1) for each single item to delete in the stream, regardless of the stream size.",
		.syntax = "key [KEEPREF | DELREF | ACKED] IDS numids id [id ...]"},
	{"xread", brk_cmd_xread, -4, R | B, {KS_AFTER("STREAMS", 1, -1, 2, KRO | KACC)}, "@read @stream @slow @blocking", "stream",
		"5.0.0", "Returns messages from multiple streams with IDs greater than the ones "
			 "requested. Blocks until a message is available otherwise.",
		"O(log(N)+M)",
		.syntax = "[COUNT count] [MAXCOUNT maxcount] [MAXSIZE maxsize] [BLOCK milliseconds] "
			  "STREAMS key [key ...] id [id ...]",
		.getkeys = xread_keys},
	{"xsetid", brk_cmd_xsetid, -3, W | OM | F, KEY1(KRW | KUPD), "@write @stream @fast", "stream",
		"5.0.0", "An internal command for replicating stream values.", "O(1)",
		.syntax = "key last-id [ENTRIESADDED entries-added] [MAXDELETEDID max-deleted-id]"},
	{"xinfo", brk_cmd_xinfo, -2, R, NOKEYS, "@read @stream @slow", "stream", "5.0.0",
		"A container for stream introspection commands.", "Depends on subcommand.",
		SUBS(xinfo_subs)},
	{"xgroup", brk_cmd_xgroup, -2, W, NOKEYS, "@write @stream @slow", "stream", "5.0.0",
		"A container for consumer groups commands.", "Depends on subcommand.",
		SUBS(xgroup_subs)},
	{"xreadgroup", brk_cmd_xreadgroup, -7, W | B, {KS_AFTER("STREAMS", 4, -1, 2, KRO | KACC)}, "@write @stream @slow @blocking",
		"stream", "5.0.0",
		"Returns new or historical messages from a stream for a consumer in a group. Blocks "
		"until a message is available otherwise.",
		"For each stream mentioned: O(M) with M the number of elements returned.",
		.syntax = "GROUP group consumer [COUNT count] [MAXCOUNT maxcount] [MAXSIZE maxsize] "
			  "[BLOCK milliseconds] [CLAIM min-idle-time] [NOACK] STREAMS key [key ...] "
			  "id [id ...]",
		.getkeys = xreadgroup_keys},
	{"xack", brk_cmd_xack, -4, W | F | FR, KEY1(KRW | KUPD), "@write @stream @fast", "stream", "5.0.0",
		"Returns the number of messages that were successfully acknowledged by the consumer "
		"group member of a stream.",
		"O(1) for each message ID processed.",
		.syntax = "key group id [id ...]"},
	{"xackdel", brk_cmd_xackdel, -6, W | F | FR, KEY1(KRW | KUPD | KDEL), "@write @stream @fast", "stream",
		"8.2.0",
		"Acknowledges and conditionally deletes one or multiple entries for a stream consumer "
		"group.",
		"O(1) for each entry ID processed.",
		.syntax = "key group [KEEPREF | DELREF | ACKED] IDS numids id [id ...]"},
	{"xnack", brk_cmd_xnack, -7, W | F, KEY1(KRW | KUPD), "@write @stream @fast", "stream", "8.8.0",
		"Releases pending messages back to the group's PEL without acknowledging them, "
		"making them available for re-delivery.",
		"O(1) for each message ID processed.",
		.syntax = "key group <SILENT | FAIL | FATAL> IDS numids id [id ...] [RETRYCOUNT count] "
		       "[FORCE] [DELAY milliseconds]"}, /* DELAY: echd's (group policies) */
	{"xpending", brk_cmd_xpending, -3, R, KEY1(KRO | KACC), "@read @stream @slow", "stream", "5.0.0",
		"Returns the information and entries from a stream consumer group's pending entries "
		"list.",
		"O(N) with N the number of elements returned; O(consumers) for the summary.",
		.syntax = "key group [[IDLE min-idle-time] start end count [consumer]]"},
	{"xclaim", brk_cmd_xclaim, -6, W | F, KEY1(KRW | KUPD), "@write @stream @fast", "stream", "5.0.0",
		"Changes, or acquires, ownership of a message in a consumer group, as if the message "
		"was delivered a consumer group member.",
		"O(log N) with N the number of messages in the PEL of the consumer group.",
		.syntax = "key group consumer min-idle-time id [id ...] [IDLE ms] [TIME unix-time-"
		   "milliseconds] [RETRYCOUNT count] [FORCE] [JUSTID] [LASTID lastid]"},
	{"xautoclaim", brk_cmd_xautoclaim, -6, W | F, KEY1(KRW | KDEL), "@write @stream @fast", "stream",
		"6.2.0",
		"Changes, or acquires, ownership of messages in a consumer group, as if the messages "
		"were delivered to as consumer group member.",
		"O(1) if COUNT is small.",
		.syntax = "key group consumer min-idle-time start [COUNT count] [JUSTID]"},
};

#define NCMDS (sizeof(cmds) / sizeof(cmds[0]))
_Static_assert(NCMDS < 255, "the lookup table stores indexes in a byte");

/* Lookups run once per request: a small open-addressing table over the
 * lower-cased names, built on first use. Names are ASCII: folding A-Z by
 * hand spares tolower()'s locale table and strncasecmp() per request. */
#define LOOKUP_SLOTS 256
static unsigned char slots[LOOKUP_SLOTS]; /* index + 1; 0 = empty */
static unsigned char name_lens[NCMDS];
static bool slots_ready;

static inline unsigned char
ascii_lower(unsigned char c)
{
	return c >= 'A' && c <= 'Z' ? (unsigned char)(c + ('a' - 'A')) : c;
}

static unsigned
name_hash(const char *name, size_t len)
{
	unsigned h = 2166136261u;

	for (size_t i = 0; i < len; i++) {
		h = (h ^ ascii_lower((unsigned char)name[i])) * 16777619u;
	}
	return h;
}

/* name (any case) is lower, a table name of the same length */
static bool
name_is(const char *lower, const char *name, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		if (ascii_lower((unsigned char)name[i]) != (unsigned char)lower[i]) {
			return false;
		}
	}
	return true;
}

static void
slots_build(void)
{
	for (size_t i = 0; i < NCMDS; i++) {
		unsigned h = name_hash(cmds[i].name, strlen(cmds[i].name));
		assert(strlen(cmds[i].name) <= 32);
		name_lens[i] = (unsigned char)strlen(cmds[i].name);
		while (slots[h % LOOKUP_SLOTS] != 0) {
			h++;
		}
		slots[h % LOOKUP_SLOTS] = (unsigned char)(i + 1);
	}
	/* a user keeps one permission per slot: raise BRK_MAX_PERMS for more */
	assert(brk_perm_count() <= BRK_MAX_PERMS);
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
		size_t i = slots[h % LOOKUP_SLOTS] - 1u;
		if (name_lens[i] == len && name_is(cmds[i].name, name, len)) {
			return &cmds[i];
		}
	}
	return NULL;
}

bool
brk_cmd_adds_data(const struct brk_cmd *cmd, int argc, const struct resp_arg *argv)
{
	const struct brk_subcmd *sc;

	if (!(cmd->flags & BRK_CMD_WRITE) || (cmd->flags & BRK_CMD_FREES)) {
		return false;
	}
	sc = argc >= 2 ? brk_subcmd_find(cmd, &argv[1]) : NULL;
	return sc == NULL || !(sc->flags & BRK_CMD_FREES);
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

const struct brk_subcmd *
brk_subcmd_find(const struct brk_cmd *cmd, const struct resp_arg *sub)
{
	for (size_t i = 0; i < cmd->nsubs; i++) {
		if (brk_arg_eq(sub, cmd->subs[i].name)) {
			return &cmd->subs[i];
		}
	}
	return NULL;
}

/* The subcommand a request names, if cmd is a container and knows it. */
static const struct brk_subcmd *
request_sub(const struct brk_cmd *cmd, int argc, const struct resp_arg *argv)
{
	return argc >= 2 ? brk_subcmd_find(cmd, &argv[1]) : NULL;
}

const struct brk_keyspec *
brk_keyspecs(const struct brk_cmd *cmd, const struct brk_subcmd *sub)
{
	return sub != NULL ? sub->keys : cmd->keys;
}

bool
brk_cmd_has_keys(const struct brk_cmd *cmd, const struct brk_subcmd *sub)
{
	const struct brk_keyspec *ks = brk_keyspecs(cmd, sub);

	if (sub == NULL && cmd->getkeys != NULL) {
		return true;
	}
	for (int i = 0; i < BRK_MAX_KEYSPECS && ks[i].bs != BRK_KS_NONE; i++) {
		if (!(ks[i].flags & BRK_KS_NOT_KEY)) {
			return true;
		}
	}
	return false;
}

/* Where spec ks's first key is in the request: its index, 0 when its
 * keyword is absent. The search from the front stops before the last
 * argument (a keyword there has no key after it), as Redis' does. */
static int
spec_begin(const struct brk_keyspec *ks, int argc, const struct resp_arg *argv)
{
	int i, end, dir;

	if (ks->bs == BRK_KS_INDEX) {
		return ks->pos;
	}
	if (ks->startfrom > 0) {
		i = ks->startfrom;
		end = argc - 1;
		dir = 1;
	} else {
		i = argc + ks->startfrom;
		end = 0;
		dir = -1;
	}
	for (; i != end && i >= 1 && i < argc; i += dir) {
		if (brk_arg_eq(&argv[i], ks->keyword)) {
			return i + 1;
		}
	}
	return 0;
}

/* Resolves spec ks against the request: 1 with *r set, 0 when its keyword
 * is absent (no keys), -EINVAL when the request does not fit it. */
static int
spec_resolve(const struct brk_keyspec *ks, int argc, const struct resp_arg *argv,
	struct brk_keyrange *r)
{
	int first = spec_begin(ks, argc, argv), last;

	if (first == 0) {
		return 0;
	}
	if (ks->fk == BRK_KS_RANGE) {
		if (ks->lastkey >= 0) {
			last = first + ks->lastkey;
		} else if (ks->limit == 0) {
			last = argc + ks->lastkey;
		} else {
			/* lastkey -1: the keys are 1/limit of what follows (XREAD's
			 * keys, then as many IDs) */
			last = first + (argc - first) / ks->limit + ks->lastkey;
		}
	} else {
		long long n;
		int at = first + ks->keynumidx;
		if (at >= argc || !brk_str2ll(argv[at].p, argv[at].len, &n) || n < 0 ||
			n > argc) {
			return -EINVAL;
		}
		first += ks->firstkey;
		last = first + (int)n - 1;
	}
	if (first >= argc || last >= argc || last < first || ks->step <= 0) {
		return -EINVAL;
	}
	*r = (struct brk_keyrange){first, last, ks->step, ks->flags};
	return 1;
}

int
brk_keys_find(const struct brk_cmd *cmd, int argc, const struct resp_arg *argv, unsigned how,
	struct brk_keys *out)
{
	const struct brk_subcmd *sub = NULL;
	const struct brk_keyspec *ks;
	struct brk_keys k = {0};

	if (cmd->subs != NULL) {
		/* a container's keys are its subcommand's; an unknown one is refused */
		sub = argc >= 2 ? brk_subcmd_find(cmd, &argv[1]) : NULL;
		if (sub == NULL) {
			*out = k;
			return 0;
		}
	}
	if (sub == NULL && cmd->getkeys != NULL) {
		/* the handler's own walk: a superset of what the specs say */
		if (!cmd->getkeys(argc, argv, &k) && !(how & BRK_KEYS_PARTIAL)) {
			return -EINVAL;
		}
		*out = k;
		return 0;
	}
	ks = brk_keyspecs(cmd, sub);
	for (int i = 0; i < BRK_MAX_KEYSPECS && ks[i].bs != BRK_KS_NONE; i++) {
		int rc;
		if ((ks[i].flags & BRK_KS_NOT_KEY) && !(how & BRK_KEYS_NOT_KEYS)) {
			continue;
		}
		rc = spec_resolve(&ks[i], argc, argv, &k.r[k.n]);
		if (rc < 0 && !(how & BRK_KEYS_PARTIAL)) {
			return rc;
		}
		k.n += rc > 0;
	}
	*out = k;
	return 0;
}

int
brk_keys_count(const struct brk_keys *k)
{
	int n = 0;

	for (int i = 0; i < k->n; i++) {
		n += (k->r[i].last - k->r[i].first) / k->r[i].step + 1;
	}
	return n;
}

int
brk_keys_at(const struct brk_keys *k, int i, unsigned *flags)
{
	for (int j = 0; j < k->n; j++) {
		int n = (k->r[j].last - k->r[j].first) / k->r[j].step + 1;
		if (i < n) {
			if (flags != NULL) {
				*flags = k->r[j].flags;
			}
			return k->r[j].first + i * k->r[j].step;
		}
		i -= n;
	}
	return -1;
}

void
brk_keys_legacy(const struct brk_cmd *cmd, const struct brk_subcmd *sub, int *first,
	int *last, int *step, bool *movable)
{
	const struct brk_keyspec *ks = brk_keyspecs(cmd, sub);
	int lo = INT_MAX, hi = 0, prev = 0, n = 0;
	bool mov = sub == NULL && cmd->getkeys != NULL;

	while (n < BRK_MAX_KEYSPECS && ks[n].bs != BRK_KS_NONE) {
		n++;
	}
	*first = *last = *step = 0;
	if (n == 1 && ks[0].bs == BRK_KS_INDEX && ks[0].fk == BRK_KS_RANGE) {
		/* one plain range: it is the legacy range, whatever its step */
		*first = ks[0].pos;
		*last = ks[0].lastkey >= 0 ? ks[0].pos + ks[0].lastkey : ks[0].lastkey;
		*step = ks[0].step;
		*movable = mov || (ks[0].flags & BRK_KS_INCOMPLETE);
		return;
	}
	for (int i = 0; i < n; i++) {
		int abs;
		if (ks[i].bs != BRK_KS_INDEX || ks[i].fk != BRK_KS_RANGE || ks[i].step != 1 ||
			(prev != 0 && prev != ks[i].pos - 1)) {
			mov = true; /* not one consecutive run of keys */
			continue;
		}
		mov |= (ks[i].flags & BRK_KS_INCOMPLETE) != 0;
		lo = ks[i].pos < lo ? ks[i].pos : lo;
		abs = ks[i].lastkey >= 0 ? ks[i].pos + ks[i].lastkey : ks[i].lastkey;
		/* unsigned, as Redis compares: a count from the end (-1) is the largest */
		hi = (unsigned)abs > (unsigned)hi ? abs : hi;
		prev = hi;
	}
	if (lo != INT_MAX) {
		*first = lo;
		*last = hi;
		*step = 1;
	}
	*movable = mov;
}

bool
brk_cmd_admin(const struct brk_cmd *cmd, int argc, const struct resp_arg *argv)
{
	const struct brk_subcmd *sub = request_sub(cmd, argc, argv);

	return ((sub != NULL ? sub->flags : cmd->flags) & BRK_CMD_ADMIN) != 0;
}

bool
brk_arg_secret(const struct brk_cmd *cmd, int argc, const struct resp_arg *argv, int i)
{
	const struct brk_subcmd *sub = request_sub(cmd, argc, argv);

	if (sub != NULL && sub->redact != NULL) {
		return sub->redact(argc, argv, i);
	}
	return cmd->redact != NULL && cmd->redact(argc, argv, i);
}

/* The permission slots past the commands': the subcommands with
 * categories of their own, in table order. */
static size_t
perm_subs(size_t want, const struct brk_cmd **cmd, const struct brk_subcmd **sub)
{
	size_t k = 0;

	for (size_t i = 0; i < NCMDS; i++) {
		for (size_t j = 0; j < cmds[i].nsubs; j++) {
			if (cmds[i].subs[j].acl == NULL) {
				continue;
			}
			if (k == want && cmd != NULL) {
				*cmd = &cmds[i];
				*sub = &cmds[i].subs[j];
			}
			k++;
		}
	}
	return k;
}

size_t
brk_perm_count(void)
{
	return NCMDS + perm_subs(SIZE_MAX, NULL, NULL);
}

void
brk_perm_at(size_t i, const struct brk_cmd **cmd, const struct brk_subcmd **sub)
{
	*cmd = NULL;
	*sub = NULL;
	if (i < NCMDS) {
		*cmd = &cmds[i];
	} else {
		perm_subs(i - NCMDS, cmd, sub);
	}
}

size_t
brk_perm_of(const struct brk_cmd *cmd, int argc, const struct resp_arg *argv)
{
	const struct brk_subcmd *sub = request_sub(cmd, argc, argv);
	size_t k = NCMDS;

	if (sub == NULL || sub->acl == NULL) {
		return (size_t)(cmd - cmds);
	}
	for (size_t i = 0; i < NCMDS; i++) {
		for (size_t j = 0; j < cmds[i].nsubs; j++) {
			if (&cmds[i].subs[j] == sub) {
				return k;
			}
			k += cmds[i].subs[j].acl != NULL;
		}
	}
	return (size_t)(cmd - cmds); /* not reached: sub is in the table */
}

/* ------------------------------------------------------------------------
 * Subcommand checks
 * ---------------------------------------------------------------------- */

/* Looks a container's subcommand up as Redis does before running (or
 * queueing) it: replies the error and returns false when unknown or of
 * the wrong arity. COMMAND alone is COMMAND, not a container. */
bool
brk_subcommand_ok(struct brk_ctx *x, const struct brk_cmd *cmd)
{
	const struct brk_subcmd *sub;
	char help[16]; /* "XGROUP": the name in upper case, for "Try XGROUP HELP." */
	size_t i;

	if (cmd->subs == NULL || x->argc < 2) {
		return true;
	}
	sub = brk_subcmd_find(cmd, &x->argv[1]);
	if (sub == NULL) {
		for (i = 0; cmd->name[i] != '\0' && i < sizeof(help) - 1; i++) {
			help[i] = (char)toupper((unsigned char)cmd->name[i]);
		}
		help[i] = '\0';
		resp_add_errorf(x->w, "ERR unknown subcommand '%.128s'. Try %s HELP.", x->argv[1].p,
			help);
		return false;
	}
	if ((sub->arity > 0 && x->argc != sub->arity) || (sub->arity < 0 && x->argc < -sub->arity)) {
		resp_add_errorf(x->w, "ERR wrong number of arguments for '%s|%s' command", cmd->name,
			sub->name);
		return false;
	}
	return true;
}

const char *
brk_subcommand_at(const struct brk_cmd *cmd, size_t i)
{
	return i < cmd->nsubs ? cmd->subs[i].name : NULL;
}

bool
brk_subcommand_known(const struct brk_cmd *cmd, const struct resp_arg *sub)
{
	return cmd->subs == NULL || brk_subcmd_find(cmd, sub) != NULL;
}

int
brk_subcommand_arity(const struct brk_cmd *cmd, const struct resp_arg *sub)
{
	const struct brk_subcmd *s = brk_subcmd_find(cmd, sub);

	return s != NULL ? s->arity : 0;
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
