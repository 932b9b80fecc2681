/* cluster.h - echd as Redis Cluster sees it (issue 36): the hash slot of a
 * key, the shard map (which slots each shard holds and the front ends that
 * serve it), this front end's node id, and where a request's keys belong.
 *
 * Unstable. cluster-shards 1: one shard, holding every slot, on the store
 * itself, this front end its primary. cluster-shards N > 1: the store is
 * cut into N parts (storage.h's storage_ha_nparts(): postgres schemas),
 * each with one active front end; the map is read again after each HA
 * poll (brk_cluster_update()): this front end is the primary of the part
 * it holds, the other parts' active front ends of theirs, and a part no
 * one holds has no primary (CLUSTERDOWN). A standby front end (the poll
 * read the live ones from the engine's registry, storage_ha_front()) is
 * a replica of every shard that has a primary: it could take any of them
 * over. Called from the event loop's thread only.
 */
#ifndef ECHD_BROKER_CLUSTER_H
#define ECHD_BROKER_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "resp.h"

struct brk_cmd;
struct brk_server;

#define BRK_CLUSTER_SLOTS  16384
#define BRK_CLUSTER_ID_LEN 40 /* hex digits of a node id, as Redis' */
/* The cluster bus port Redis adds to a node's port in CLUSTER NODES: echd
 * has no bus, and prints the port Redis would use, as clients parse it. */
#define BRK_CLUSTER_BUS_INCR 10000
/* cluster-shards' bound: each shard is a schema of its own, and every HA
 * poll reads who holds each one. */
#define BRK_CLUSTER_SHARDS_MAX 256
/* cluster-shards-per-node's bound: a worker process each (workers.c). */
#define BRK_WORKERS_MAX 64

/* The hash slot of key (len bytes, borrowed): CRC16 (XMODEM) mod 16384 of
 * its hash tag, the bytes between the first '{' and the next '}' when there
 * is at least one, else of the whole key (Redis Cluster's keyHashSlot()). */
unsigned brk_cluster_keyslot(const char *key, size_t len);

enum brk_cluster_role {
	BRK_CLUSTER_PRIMARY,
	BRK_CLUSTER_REPLICA,
};

/* A front end serving a shard. */
struct brk_cluster_node {
	char id[BRK_CLUSTER_ID_LEN + 1];
	char host[256]; /* the announced address (ha-announce-ip, or the first bind address) */
	int port;
	enum brk_cluster_role role;
	bool myself;    /* this front end */
	uint64_t epoch; /* its config epoch: the shard's generation (takeovers) */
};

/* A shard: a range of slots (first..last) and its front ends, the primary
 * first (nnodes 0: none known yet). */
struct brk_cluster_shard {
	unsigned first, last;
	struct brk_cluster_node *nodes; /* owned by the map */
	size_t nnodes;
};

struct brk_cluster {
	struct brk_cluster_shard *shards; /* owned; in slot order */
	size_t nshards;
	uint64_t epoch; /* CLUSTER INFO's current epoch: the largest config epoch */
	struct brk_cluster_node self; /* this front end, in a shard or not (a standby) */
};

/* A map of nshards (1..16384) shards cutting the slots evenly, in order
 * (shard i: from i*16384/nshards), with no front ends yet. Returns 0 and
 * *out (owned, free with brk_cluster_destroy()), -EINVAL or -ENOMEM. */
int brk_cluster_create(unsigned nshards, struct brk_cluster **out);
/* Frees cl and all it owns; NULL is a no-op. */
void brk_cluster_destroy(struct brk_cluster *cl);
/* Adds node n (borrowed: copied) to shard i of cl; a primary goes first.
 * Returns 0, -EINVAL (no shard i) or -ENOMEM. */
int brk_cluster_add_node(struct brk_cluster *cl, size_t i, const struct brk_cluster_node *n);
/* Adds n (borrowed: copied as a replica) to every shard of cl that has a
 * primary, after the nodes already there, with that primary's config epoch
 * (a replica shows its primary's, as in Redis). Returns 0 or -ENOMEM. */
int brk_cluster_add_replica(struct brk_cluster *cl, const struct brk_cluster_node *n);
/* The primary the replica id (borrowed) is listed under first, the one
 * CLUSTER NODES names (its line has room for one): returns borrowed (valid
 * until cl changes), or NULL when no shard lists id as a replica. */
const struct brk_cluster_node *brk_cluster_replica_of(const struct brk_cluster *cl,
	const char *id);
/* Whether node j of shard i is listed in an earlier shard already (a
 * replica of several): CLUSTER NODES prints each node once. */
bool brk_cluster_listed_before(const struct brk_cluster *cl, size_t i, size_t j);
/* The nodes cl knows, each once, this front end included. */
size_t brk_cluster_nnodes(const struct brk_cluster *cl);
/* The shard holding slot (< 16384) of cl: returns borrowed (valid until cl
 * changes). Every slot has one. */
const struct brk_cluster_shard *brk_cluster_shard_of(const struct brk_cluster *cl,
	unsigned slot);

/* Writes the slot ranges of nshards (1..BRK_CLUSTER_SHARDS_MAX) shards as
 * brk_cluster_create() cuts them, "first-last,first-last,...", to buf (len
 * bytes): the ranges the engine keeps beside its parts (postgres.shards).
 * Returns 0, -EINVAL or -ENOSPC. */
int brk_cluster_ranges(unsigned nshards, char *buf, size_t len);

/* The primary of shard s (borrowed, valid as s), or NULL when it has none:
 * no front end serves its slots. */
const struct brk_cluster_node *brk_cluster_primary(const struct brk_cluster_shard *s);

/* This front end's node id, kept in the data directory dir (borrowed) as
 * the file "cluster-node-id": read when it exists, else 40 random hex
 * digits written there (atomically, durably) on first start. One echd per
 * directory (echd.lock), so the id is the front end's for as long as its
 * directory lives. Returns 0 with out set, -errno, or ECHD_ECORRUPT when
 * the file does not hold a node id. */
int brk_cluster_node_id(const char *dir, char out[BRK_CLUSTER_ID_LEN + 1]);

/* The slot a request's keys share. Start with slot -1 (no keys yet) and add
 * each request (argv[0] its command's name, borrowed; EXEC adds each one it
 * queued): the keys that brk_keys_find() finds from cmd's key specs, shard
 * channels included, as Redis' getNodeByQuery() takes them. Returns false
 * when a key hashes to a slot other than *slot (CROSSSLOT), else true with
 * *slot the keys' slot, or left at -1 when there were none (a request that
 * does not fit its specs has none here: its handler refuses it). */
bool brk_cluster_slot_add(const struct brk_cmd *cmd, int argc, const struct resp_arg *argv,
	int *slot);

/* Start-up, for brk_server_init(). brk_cluster_check(), after storage_open:
 * 0 when the options and the engine fit (cluster-enabled no: any engine);
 * BRK_INIT_CONFIG, with the reason logged naming the option, when they do
 * not (an engine without the HA interface, that is not a store front ends
 * share; cluster-shards N > 1 and an engine that did not cut its store in
 * N parts). brk_cluster_init(), once the
 * listeners are bound (the port is known): srv->cluster, the map of one
 * shard served by this front end; 0, or -1 logged. brk_cluster_finish()
 * frees it. */
int brk_cluster_check(struct brk_server *srv);
int brk_cluster_init(struct brk_server *srv);
void brk_cluster_finish(struct brk_server *srv);
/* After each HA poll (ha.c): builds the map again from what the poll read
 * of the store's parts (cluster-shards > 1; else nothing changes). On
 * -ENOMEM the old map stays, logged. */
void brk_cluster_update(struct brk_server *srv);

#define BRK_CLUSTER_ERR_CROSSSLOT "CROSSSLOT Keys in request don't hash to the same slot"
#define BRK_CLUSTER_ERR_DISABLED  "ERR This instance has cluster support disabled"

/* workers.c: cluster-shards-per-node N > 1 makes this process the
 * supervisor of N workers. Returns in each worker with *worker set and
 * srv->cfg made the worker's (port + i, <dir>/node<i>, ...): it goes on to
 * brk_server_init(). Returns in the supervisor, *worker false, once every
 * worker has stopped: echd's exit status. */
int brk_workers_run(struct brk_server *srv, bool *worker);

#endif
