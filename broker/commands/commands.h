/* commands.h - what a command is (struct brk_cmd, one row of the table in
 * commands.c: arity, flags, keys, subcommands, categories, secrets) and what
 * its handler sees (struct brk_ctx). Adding a command is a row in commands.c
 * and a handler declared here. Included through broker.h.
 */
#ifndef ECHD_BROKER_COMMANDS_H
#define ECHD_BROKER_COMMANDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "resp.h"
#include "storage.h"

struct brk_server;
struct brk_conn;

enum {
	BRK_CMD_WRITE = 1 << 0,    /* changes data: runs in a nested write txn */
	BRK_CMD_READONLY = 1 << 1, /* reads data */
	BRK_CMD_ADMIN = 1 << 2,
	BRK_CMD_BLOCKING = 1 << 3,
	BRK_CMD_FAST = 1 << 4,
	BRK_CMD_NOSTORE = 1 << 5,  /* touches no storage */
	BRK_CMD_LOADING = 1 << 6,
	BRK_CMD_STALE = 1 << 7,
	BRK_CMD_NOSCRIPT = 1 << 8,
	BRK_CMD_DENYOOM = 1 << 9,
	BRK_CMD_NOMULTI = 1 << 10, /* refused inside MULTI */
	BRK_CMD_BULK = 1 << 11,    /* may write rows without bound: always in a nested txn */
	BRK_CMD_NOAUTH = 1 << 12,  /* runs before AUTH, and no ACL rule refuses it */
	BRK_CMD_NOQUEUE = 1 << 13, /* inside MULTI runs at once instead of being queued */
	BRK_CMD_EXEC = 1 << 14,    /* runs the queued commands: SLOWLOG logs those instead,
				    * its reply holds theirs, a refusal ends the transaction */
	BRK_CMD_PUBSUB = 1 << 15,  /* Pub/Sub (COMMAND INFO's "pubsub") */
	BRK_CMD_SUBCTX = 1 << 16,  /* allowed to a RESP2 client while subscribed */
	/* which arguments name channels, for ACL's & rules */
	BRK_CMD_CHAN_FIRST = 1 << 17,   /* argv[1] */
	BRK_CMD_CHAN_ALL = 1 << 18,     /* argv[1..] */
	BRK_CMD_CHAN_PATTERN = 1 << 19, /* they are patterns (PSUBSCRIBE) */
	BRK_CMD_FREES = 1 << 20,   /* a write that makes room: runs while the disk is full */
	BRK_CMD_STANDBY = 1 << 21, /* a standby front end runs it (touches no data); the
				    * others get -READONLY there (ha.c) */
};
#define BRK_MAX_PERMS 128 /* ACL permission slots: commands and subcommands */

/* What a command handler sees. */
struct brk_ctx {
	struct brk_server *srv;
	struct brk_conn *c;
	struct resp_writer *w;
	int argc;
	struct resp_arg *argv;
	struct storage_txn *txn; /* read: the batch; write: a child of it */
	uint64_t dirty;          /* changes made (Redis' dirty counter) */
	bool from_block;         /* re-run of a blocked command */
	bool in_exec;            /* run by EXEC: blocking commands do not block */
	uint64_t writes0;        /* storage_txn_writes(txn) as the handler began */
	bool blocked;            /* the handler blocked the client */
	bool may_write;          /* a write command: brk_lookup() drops expired keys */
};

/* Whether x's handler wrote rows so far (its own and those of children
 * it committed): the storage layer counts them, so a handler that changes
 * something need not say so for its writes to be kept. */
bool brk_cmd_wrote(const struct brk_ctx *x);

/* A handler returns 0 (reply written; writes kept), BRK_UNDO (reply
 * written, undo its writes), or a negative storage error (nothing useful
 * written: the dispatcher replies with the error). */
#define BRK_UNDO 1
typedef int (*brk_cmd_fn)(struct brk_ctx *x);

/* Where a request's keys are: argv[first..last], every step-th; last < 0
 * counts from the end (-1: the last argument). first 0: no keys. */
struct brk_keyspec {
	int first, last, step;
};

/* For a command whose keys move (XREAD's follow STREAMS, after options):
 * sets *ks to where the request's keys are, or returns false when it has
 * none, which is so only for a request its handler refuses. */
typedef bool (*brk_keys_fn)(int argc, const struct resp_arg *argv, struct brk_keyspec *ks);
/* Whether argv[i] of a request is a secret: SLOWLOG and MONITOR show
 * "(redacted)" instead, as Redis does. */
typedef bool (*brk_redact_fn)(int argc, const struct resp_arg *argv, int i);

/* A container's subcommand (XGROUP CREATE): Redis looks it up as a
 * command of its own, with its own arity, keys and flags. */
struct brk_subcmd {
	const char *name;         /* lower case */
	int arity;                /* counting the container's name */
	unsigned flags;           /* BRK_CMD_ADMIN: hidden from MONITOR; BRK_CMD_FREES: makes room
				   * (the rest: the container's) */
	struct brk_keyspec keys;
	const char *acl;          /* categories of its own, with an ACL permission of its own
				   * (acl|whoami); NULL: the container's */
	brk_redact_fn redact;     /* NULL: no secrets */
	/* COMMAND DOCS, as for a command (static strings); the group is the
	 * container's. syntax NULL or "": no arguments. */
	const char *summary;
	const char *since;
	const char *complexity;
	const char *syntax;
};

/* One row of the command table: everything the dispatcher, the ACL,
 * COMMAND, SLOWLOG and MONITOR know about a command. */
struct brk_cmd {
	const char *name;     /* lower case */
	brk_cmd_fn fn;
	int arity;            /* Redis convention: -N means at least N */
	unsigned flags;
	struct brk_keyspec keys; /* COMMAND INFO's first, last, step */
	const char *acl;      /* space separated categories, e.g. "@write @stream @fast" */
	const char *group;    /* COMMAND DOCS group */
	const char *since;
	const char *summary;
	const char *complexity;
	const char *syntax;   /* arguments in the notation of Redis' docs, for COMMAND DOCS */
	brk_keys_fn find_keys; /* keys that move (COMMAND INFO: movablekeys); NULL: .keys */
	const struct brk_subcmd *subs; /* a container's subcommands; NULL: none */
	size_t nsubs;
	brk_redact_fn redact; /* NULL: no secrets (a subcommand's own apply first) */
};

const struct brk_cmd *brk_cmd_lookup(const char *name, size_t len);
size_t brk_cmd_count(void);
const struct brk_cmd *brk_cmd_at(size_t i);
/* The subcommand of container cmd that sub names (any case); NULL when cmd
 * has no such subcommand, or none at all. */
const struct brk_subcmd *brk_subcmd_find(const struct brk_cmd *cmd, const struct resp_arg *sub);
/* Where the keys of a request are, resolved for its argc (first >= 1,
 * last < argc); false when it has none. The ACL, ACL DRYRUN and COMMAND
 * GETKEYS all ask here. Borrows argv. */
bool brk_keys_of(const struct brk_cmd *cmd, int argc, const struct resp_arg *argv,
	struct brk_keyspec *out);
/* ACL permission slots: one per command, then one per subcommand with
 * categories of its own. brk_perm_at() sets *cmd, and *sub for a
 * subcommand's slot (NULL for a command's). */
size_t brk_perm_count(void);
void brk_perm_at(size_t i, const struct brk_cmd **cmd, const struct brk_subcmd **sub);
/* The slot a request needs: its subcommand's own, else its command's. */
size_t brk_perm_of(const struct brk_cmd *cmd, int argc, const struct resp_arg *argv);

/* cmd_generic.c / cmd_stream.c / cmd_server.c handlers */
#define BRK_DECL(n) int brk_cmd_##n(struct brk_ctx *x)
BRK_DECL(ping); BRK_DECL(echo); BRK_DECL(hello); BRK_DECL(quit); BRK_DECL(reset);
BRK_DECL(select); BRK_DECL(dbsize); BRK_DECL(time); BRK_DECL(del); BRK_DECL(exists);
BRK_DECL(expire); BRK_DECL(pexpire); BRK_DECL(expireat); BRK_DECL(pexpireat); BRK_DECL(ttl);
BRK_DECL(pttl); BRK_DECL(expiretime); BRK_DECL(pexpiretime); BRK_DECL(persist);
BRK_DECL(type); BRK_DECL(keys); BRK_DECL(scan); BRK_DECL(rename); BRK_DECL(renamenx);
BRK_DECL(flushdb); BRK_DECL(flushall); BRK_DECL(info); BRK_DECL(config); BRK_DECL(client);
BRK_DECL(command); BRK_DECL(shutdown); BRK_DECL(lastsave); BRK_DECL(save);
BRK_DECL(xadd); BRK_DECL(xlen); BRK_DECL(xrange); BRK_DECL(xrevrange); BRK_DECL(xdel);
BRK_DECL(xtrim); BRK_DECL(xread); BRK_DECL(xsetid); BRK_DECL(xinfo);
BRK_DECL(xcfgset); BRK_DECL(xidmprecord);
BRK_DECL(xgroup); BRK_DECL(xreadgroup); BRK_DECL(xack); BRK_DECL(xpending); BRK_DECL(xclaim);
BRK_DECL(xautoclaim); BRK_DECL(xnack); BRK_DECL(multi); BRK_DECL(exec); BRK_DECL(discard); BRK_DECL(watch);
BRK_DECL(unwatch); BRK_DECL(auth); BRK_DECL(acl); BRK_DECL(wait); BRK_DECL(waitaof);
BRK_DECL(slowlog); BRK_DECL(monitor); BRK_DECL(touch); BRK_DECL(randomkey);
BRK_DECL(object); BRK_DECL(memory); BRK_DECL(move); BRK_DECL(copy); BRK_DECL(latency);
BRK_DECL(subscribe); BRK_DECL(unsubscribe); BRK_DECL(psubscribe); BRK_DECL(punsubscribe);
BRK_DECL(ssubscribe); BRK_DECL(sunsubscribe); BRK_DECL(publish); BRK_DECL(spublish);
BRK_DECL(pubsub); BRK_DECL(xdelex); BRK_DECL(xackdel); BRK_DECL(role); BRK_DECL(sentinel);
#undef BRK_DECL

#endif
