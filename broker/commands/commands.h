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
	BRK_CMD_XCACHE = 1 << 22,  /* may keep stream rows in the batch's stream cache
				    * (XADD): the batch is not flushed for it (commit.c) */
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

/* A handler returns 0 (reply written; its writes kept) or a negative
 * storage error (nothing useful written: the dispatcher replies with the
 * error, and a write's batch or transaction is undone). */
typedef int (*brk_cmd_fn)(struct brk_ctx *x);

/* ------------------------------------------------------------------------
 * Key specs: where a request's keys are, as data (Redis 7's key specs, from
 * its src/commands/<cmd>.json). One finder, brk_keys_find(), reads them for
 * the ACL, COMMAND GETKEYS / GETKEYSANDFLAGS / INFO, ACL DRYRUN and EXEC.
 * ---------------------------------------------------------------------- */

/* What the command does with a key (COMMAND INFO's and GETKEYSANDFLAGS'
 * names): one of RO/RW/OW/RM, then what it does to the value. */
enum {
	BRK_KS_RO = 1 << 0, /* reads */
	BRK_KS_RW = 1 << 1, /* reads and changes */
	BRK_KS_OW = 1 << 2, /* overwrites without reading */
	BRK_KS_RM = 1 << 3, /* removes */
	BRK_KS_ACCESS = 1 << 4, /* returns or copies user data */
	BRK_KS_UPDATE = 1 << 5,
	BRK_KS_INSERT = 1 << 6,
	BRK_KS_DELETE = 1 << 7,
	BRK_KS_NOT_KEY = 1 << 8,    /* a shard channel: a slot, not a key (skipped by the ACL) */
	BRK_KS_INCOMPLETE = 1 << 9, /* may miss keys: the command needs a getkeys procedure */
	BRK_KS_VARIABLE_FLAGS = 1 << 10,
};

enum brk_ks_begin {
	BRK_KS_NONE = 0,    /* the end of a row's specs */
	BRK_KS_INDEX,       /* the first key is argv[pos] */
	BRK_KS_KEYWORD,     /* the first key follows the keyword, searched from startfrom
			     * to the end (startfrom < 0: from argc + startfrom back to 1) */
};

enum brk_ks_find {
	BRK_KS_RANGE = 0,   /* lastkey: from the first key (0: only it; < 0: from the end,
			     * or with limit, 1/limit of what follows); every step-th */
	BRK_KS_KEYNUM,      /* argv[first + keynumidx] counts the keys, the first of which is
			     * at first + firstkey; every step-th */
};

struct brk_keyspec {
	enum brk_ks_begin bs;
	int pos;             /* INDEX */
	const char *keyword; /* KEYWORD: matched in any case */
	int startfrom;       /* KEYWORD */
	enum brk_ks_find fk;
	int lastkey, limit;  /* RANGE */
	int keynumidx, firstkey; /* KEYNUM */
	int step;            /* both */
	unsigned flags;      /* BRK_KS_* */
	const char *notes;   /* COMMAND INFO's notes; NULL: none */
};
#define BRK_MAX_KEYSPECS 3

/* Where a request's keys are: ranges of argv, each with its spec's flags.
 * A request has at most one range per spec, so this needs no memory. */
struct brk_keyrange {
	int first, last, step; /* argv[first..last], every step-th */
	unsigned flags;
};
struct brk_keys {
	int n;
	struct brk_keyrange r[BRK_MAX_KEYSPECS];
};

/* For a command whose keyword search could be fooled (XREAD, XREADGROUP:
 * GROUP may follow COUNT, a group or consumer may be called "streams"):
 * adds the keys to *out as its handler finds them; false when the request
 * is one its handler refuses. */
typedef bool (*brk_getkeys_fn)(int argc, const struct resp_arg *argv, struct brk_keys *out);
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
	struct brk_keyspec keys[BRK_MAX_KEYSPECS]; /* counting the container's name */
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
	struct brk_keyspec keys[BRK_MAX_KEYSPECS]; /* key specs; COMMAND INFO derives its
						    * first, last, step from them */
	const char *acl;      /* space separated categories, e.g. "@write @stream @fast" */
	const char *group;    /* COMMAND DOCS group */
	const char *since;
	const char *summary;
	const char *complexity;
	const char *syntax;   /* arguments in the notation of Redis' docs, for COMMAND DOCS */
	brk_getkeys_fn getkeys; /* NULL: the specs find the keys (COMMAND INFO: movablekeys) */
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
/* brk_keys_find()'s ways */
enum {
	BRK_KEYS_PARTIAL = 1 << 0,  /* a spec the request does not fit is skipped, not an error */
	BRK_KEYS_NOT_KEYS = 1 << 1, /* include BRK_KS_NOT_KEY specs (shard channels) */
};
/* Finds the keys of a request (argv[0] the command, a container's
 * subcommand at argv[1]) from its row's key specs, or its getkeys
 * procedure, as Redis' getKeysFromCommandWithSpecs() does: a superset of
 * the keys its handler touches. Needs no connection and no memory.
 * Returns 0 with *out set (out->n 0: no keys), or -EINVAL when the request
 * does not fit the specs (a request its handler refuses; with
 * BRK_KEYS_PARTIAL the specs it fits still count). Borrows argv. */
int brk_keys_find(const struct brk_cmd *cmd, int argc, const struct resp_arg *argv, unsigned how,
	struct brk_keys *out);
/* The number of keys in k, and the argv index of the i-th (0-based, in the
 * order found) with its spec's flags in *flags (may be NULL). */
int brk_keys_count(const struct brk_keys *k);
int brk_keys_at(const struct brk_keys *k, int i, unsigned *flags);
/* The key specs of a command, or of its subcommand sub (NULL: the command's). */
const struct brk_keyspec *brk_keyspecs(const struct brk_cmd *cmd, const struct brk_subcmd *sub);
/* Whether a command (or subcommand) has keys: a spec other than NOT_KEY, or
 * a getkeys procedure (COMMAND GETKEYS' "The command has no key arguments"). */
bool brk_cmd_has_keys(const struct brk_cmd *cmd, const struct brk_subcmd *sub);
/* COMMAND INFO's first, last, step and movablekeys, derived from the specs
 * as Redis' populateCommandLegacyRangeSpec() does. */
void brk_keys_legacy(const struct brk_cmd *cmd, const struct brk_subcmd *sub, int *first,
	int *last, int *step, bool *movable);
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
BRK_DECL(cluster); BRK_DECL(readonly); /* cmd_cluster.c; READWRITE and ASKING: readonly */
#undef BRK_DECL

#endif
