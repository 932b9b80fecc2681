/* cmd_cluster.c - CLUSTER, READONLY, READWRITE, ASKING: the shard map of
 * cluster.h as Redis Cluster's clients read it (issue 36).
 *
 * Replies are Redis' own, field for field. Without cluster-enabled every
 * one of them answers Redis' "This instance has cluster support disabled".
 */
#include <stdio.h>
#include <string.h>

#include "broker.h"
#include "cluster.h"

static const char *const cluster_help[] = {
	"CLUSTER <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
	"COUNTKEYSINSLOT <slot>",
	"    Return the number of keys in <slot>.",
	"GETKEYSINSLOT <slot> <count>",
	"    Return key names stored by current node in a slot.",
	"INFO",
	"    Return information about the cluster.",
	"KEYSLOT <key>",
	"    Return the hash slot for <key>.",
	"MYID",
	"    Return the node id.",
	"NODES",
	"    Return cluster configuration seen by node. Output format:",
	"    <id> <ip:port> <flags> <master> <pings> <pongs> <epoch> <link> <slot> ...",
	"SLOTS",
	"    Return information about slots range mappings. Each range is made of:",
	"    start, end, master and replicas IP addresses, ports and ids",
	"SHARDS",
	"    Return information about slot range mappings and the nodes associated with them.",
	"HELP",
	"    Prints this help.",
};

static const struct brk_cluster_node *
myself(const struct brk_cluster *cl)
{
	for (size_t i = 0; i < cl->nshards; i++) {
		for (size_t j = 0; j < cl->shards[i].nnodes; j++) {
			if (cl->shards[i].nodes[j].myself) {
				return &cl->shards[i].nodes[j];
			}
		}
	}
	return NULL;
}

/* Replies b's text (CLUSTER INFO, NODES: a verbatim string in RESP3) and frees it. */
static void
reply_text(struct brk_ctx *x, struct resp_buf *b)
{
	if (b->oom) {
		resp_add_error(x->w, "ERR out of memory");
	} else {
		resp_add_verbatim(x->w, "txt", b->data, b->len);
	}
	resp_buf_finish(b);
}

/* CLUSTER INFO: the fields Redis always prints. No bus, so no bus
 * messages. A shard no front end holds has no node: its slots are not
 * assigned, and the cluster is down (Redis' cluster-require-full-coverage). */
static void
cluster_info(struct brk_ctx *x, const struct brk_cluster *cl)
{
	struct resp_buf b;
	size_t nodes = brk_cluster_nnodes(cl), served = 0;
	unsigned slots = 0;

	resp_buf_init(&b);
	for (size_t i = 0; i < cl->nshards; i++) {
		if (brk_cluster_primary(&cl->shards[i]) != NULL) {
			served++;
			slots += cl->shards[i].last - cl->shards[i].first + 1;
		}
	}
	resp_buf_printf(&b,
		"cluster_state:%s\r\n"
		"cluster_slots_assigned:%d\r\n"
		"cluster_slots_ok:%d\r\n"
		"cluster_slots_pfail:0\r\n"
		"cluster_slots_fail:0\r\n"
		"cluster_known_nodes:%zu\r\n"
		"cluster_size:%zu\r\n"
		"cluster_current_epoch:%llu\r\n"
		"cluster_my_epoch:%llu\r\n"
		"cluster_stats_messages_sent:0\r\n"
		"cluster_stats_messages_received:0\r\n"
		"total_cluster_links_buffer_limit_exceeded:0\r\n",
		slots == BRK_CLUSTER_SLOTS ? "ok" : "fail", slots, slots, nodes, served,
		(unsigned long long)cl->epoch, (unsigned long long)cl->self.epoch);
	reply_text(x, &b);
}

/* CLUSTER NODES: one line per node, Redis' format: id ip:port@cport flags
 * primary-id ping-sent pong-recv config-epoch link-state slots... A
 * standby, a replica of every shard with a primary, once: under the first
 * (a line names one primary). */
static void
cluster_nodes(struct brk_ctx *x, const struct brk_cluster *cl)
{
	struct resp_buf b;

	resp_buf_init(&b);
	if (myself(cl) == NULL) {
		/* a standby while no shard has a primary: one without slots, as
		 * Redis shows an empty primary */
		resp_buf_printf(&b, "%s %s:%d@%d myself,master - 0 0 %llu connected\n", cl->self.id,
			cl->self.host, cl->self.port, cl->self.port + BRK_CLUSTER_BUS_INCR,
			(unsigned long long)cl->self.epoch);
	}
	for (size_t i = 0; i < cl->nshards; i++) {
		const struct brk_cluster_shard *s = &cl->shards[i];
		for (size_t j = 0; j < s->nnodes; j++) {
			const struct brk_cluster_node *n = &s->nodes[j];
			const struct brk_cluster_node *p = brk_cluster_primary(s);
			bool primary = n->role == BRK_CLUSTER_PRIMARY;

			if (brk_cluster_listed_before(cl, i, j)) {
				continue;
			}
			resp_buf_printf(&b, "%s %s:%d@%d %s%s %s 0 0 %llu connected", n->id, n->host,
				n->port, n->port + BRK_CLUSTER_BUS_INCR, n->myself ? "myself," : "",
				primary ? "master" : "slave", primary || p == NULL ? "-" : p->id,
				(unsigned long long)n->epoch);
			if (primary) {
				resp_buf_printf(&b, " %u-%u", s->first, s->last);
			}
			resp_buf_printf(&b, "\n");
		}
	}
	reply_text(x, &b);
}

/* CLUSTER SLOTS: per range, its first and last slot and its nodes, the
 * primary first, each as ip, port, id and a map of further addresses
 * (none: echd announces an address, not a hostname). */
static void
cluster_slots(struct brk_ctx *x, const struct brk_cluster *cl)
{
	size_t n = 0;

	for (size_t i = 0; i < cl->nshards; i++) {
		n += brk_cluster_primary(&cl->shards[i]) != NULL;
	}
	resp_add_array(x->w, n);
	for (size_t i = 0; i < cl->nshards; i++) {
		const struct brk_cluster_shard *s = &cl->shards[i];
		if (brk_cluster_primary(s) == NULL) {
			continue; /* Redis lists only slots with a primary */
		}
		resp_add_array(x->w, 2 + s->nnodes);
		resp_add_int(x->w, s->first);
		resp_add_int(x->w, s->last);
		for (size_t j = 0; j < s->nnodes; j++) {
			resp_add_array(x->w, 4);
			resp_add_bulk_cstr(x->w, s->nodes[j].host);
			resp_add_int(x->w, s->nodes[j].port);
			resp_add_bulk_cstr(x->w, s->nodes[j].id);
			resp_add_map(x->w, 0);
		}
	}
}

/* CLUSTER SHARDS: per shard, its slot ranges and its nodes, each a map. */
static void
cluster_shards(struct brk_ctx *x, const struct brk_cluster *cl)
{
	resp_add_array(x->w, cl->nshards);
	for (size_t i = 0; i < cl->nshards; i++) {
		const struct brk_cluster_shard *s = &cl->shards[i];

		resp_add_map(x->w, 2);
		resp_add_bulk_cstr(x->w, "slots");
		resp_add_array(x->w, 2);
		resp_add_int(x->w, s->first);
		resp_add_int(x->w, s->last);
		resp_add_bulk_cstr(x->w, "nodes");
		resp_add_array(x->w, s->nnodes);
		for (size_t j = 0; j < s->nnodes; j++) {
			const struct brk_cluster_node *n = &s->nodes[j];

			resp_add_map(x->w, 7);
			resp_add_bulk_cstr(x->w, "id");
			resp_add_bulk_cstr(x->w, n->id);
			resp_add_bulk_cstr(x->w, "port");
			resp_add_int(x->w, n->port);
			resp_add_bulk_cstr(x->w, "ip");
			resp_add_bulk_cstr(x->w, n->host);
			resp_add_bulk_cstr(x->w, "endpoint");
			resp_add_bulk_cstr(x->w, n->host);
			resp_add_bulk_cstr(x->w, "role");
			resp_add_bulk_cstr(x->w, n->role == BRK_CLUSTER_PRIMARY ? "master" : "replica");
			/* every acknowledged write is in PostgreSQL: nothing to lag behind */
			resp_add_bulk_cstr(x->w, "replication-offset");
			resp_add_int(x->w, 0);
			resp_add_bulk_cstr(x->w, "health");
			resp_add_bulk_cstr(x->w, "online");
		}
	}
}

/* The slot argument of COUNTKEYSINSLOT and GETKEYSINSLOT, with Redis'
 * errors; false when one was written. */
static bool
slot_arg(struct brk_ctx *x, const struct resp_arg *a, const char *bad, long long *slot)
{
	if (!brk_arg_ll(x, a, slot)) {
		return false;
	}
	if (*slot < 0 || *slot >= BRK_CLUSTER_SLOTS) {
		resp_add_error(x->w, bad);
		return false;
	}
	return true;
}

struct slot_walk {
	struct resp_writer *w; /* NULL: count only */
	unsigned slot;
	long long max;         /* keys to list at most */
	long long n;
};

static int
slot_cb(const struct st_buf *name, void *ud)
{
	struct slot_walk *sw = ud;

	if (brk_cluster_keyslot(name->data, name->len) != sw->slot) {
		return 0;
	}
	if (sw->w != NULL) {
		if (sw->n >= sw->max) {
			return 1; /* enough: stops the walk */
		}
		resp_add_bulk(sw->w, name->data, name->len);
	}
	sw->n++;
	return 0;
}

/* COUNTKEYSINSLOT and GETKEYSINSLOT walk the whole keyspace (SCAN's walk,
 * in creation order), hashing every key: O(keys), not Redis' O(1) and
 * O(count), since no index by slot is kept. With one shard only resharding
 * tools ask, and echd has no resharding yet. */
static int
keys_in_slot(struct brk_ctx *x, bool list)
{
	struct slot_walk sw = {NULL, 0, 0, 0};
	uint64_t cursor = 0;
	long long slot, max = 0;
	size_t h = 0;
	int rc;

	if (!slot_arg(x, &x->argv[2], list ? "ERR Invalid slot or number of keys" : "ERR Invalid slot",
		    &slot)) {
		return 0;
	}
	if (x->txn == NULL) {
		/* a standby (CLUSTER may run there): it holds no keys to walk */
		resp_add_error(x->w, BRK_ERR_READONLY);
		return 0;
	}
	if (list) {
		if (!brk_arg_ll(x, &x->argv[3], &max)) {
			return 0;
		}
		if (max < 0) {
			resp_add_error(x->w, "ERR Invalid slot or number of keys");
			return 0;
		}
		sw.w = x->w;
		h = resp_add_deferred(x->w);
	}
	sw.slot = (unsigned)slot;
	sw.max = max;
	rc = stream_scan(x->txn, x->c->db, x->srv->cmd_ms, &cursor, UINT32_MAX, slot_cb, &sw);
	if (rc < 0) {
		return rc;
	}
	if (list) {
		resp_set_deferred_len(x->w, h, '*', (size_t)sw.n);
	} else {
		resp_add_int(x->w, sw.n);
	}
	return 0;
}

int
brk_cmd_cluster(struct brk_ctx *x)
{
	const struct brk_cluster *cl = x->srv->cluster;
	const struct resp_arg *sub = &x->argv[1];

	/* brk_subcommand_ok() checked the name and the arity */
	if (cl == NULL) {
		resp_add_error(x->w, BRK_CLUSTER_ERR_DISABLED);
	} else if (brk_arg_eq(sub, "HELP")) {
		BRK_REPLY_HELP(x->w, cluster_help);
	} else if (brk_arg_eq(sub, "KEYSLOT")) {
		resp_add_int(x->w, brk_cluster_keyslot(x->argv[2].p, x->argv[2].len));
	} else if (brk_arg_eq(sub, "MYID")) {
		resp_add_bulk_cstr(x->w, cl->self.id);
	} else if (brk_arg_eq(sub, "INFO")) {
		cluster_info(x, cl);
	} else if (brk_arg_eq(sub, "NODES")) {
		cluster_nodes(x, cl);
	} else if (brk_arg_eq(sub, "SLOTS")) {
		cluster_slots(x, cl);
	} else if (brk_arg_eq(sub, "SHARDS")) {
		cluster_shards(x, cl);
	} else if (brk_arg_eq(sub, "COUNTKEYSINSLOT")) {
		return keys_in_slot(x, false);
	} else {
		return keys_in_slot(x, true); /* GETKEYSINSLOT: the table's last */
	}
	return 0;
}

/* READONLY, READWRITE, ASKING: a connection's reads from replicas and its
 * following of an ASK redirect. With one shard served by its primary
 * neither changes what the connection may do. */
int
brk_cmd_readonly(struct brk_ctx *x)
{
	if (x->srv->cluster == NULL) {
		resp_add_error(x->w, BRK_CLUSTER_ERR_DISABLED);
		return 0;
	}
	resp_add_simple(x->w, "OK");
	return 0;
}
