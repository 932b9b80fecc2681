/* cluster.c - the Redis Cluster side of echd (issue 36): the hash slot of a
 * key, the shard map, this front end's node id, and the slot a request's
 * keys share (conn.c's admission asks it, beside the ACL's key check).
 *
 * The keys come from the command table's key specs through
 * brk_keys_find(), the one finder the ACL uses too: no command's keys are
 * found by hand here. The CLUSTER commands that print the map are in
 * commands/cmd_cluster.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "broker.h"
#include "cluster.h"

/* CRC16-CCITT as XMODEM computes it (polynomial 0x1021, initial value 0,
 * no reflection): the Redis Cluster specification's key hash. Bit by bit:
 * keys are short, and a table would cost more cache than it saves. */
static uint16_t
crc16_xmodem(const unsigned char *p, size_t len)
{
	uint16_t crc = 0;

	for (size_t i = 0; i < len; i++) {
		crc ^= (uint16_t)(p[i] << 8);
		for (int b = 0; b < 8; b++) {
			crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
		}
	}
	return crc;
}

unsigned
brk_cluster_keyslot(const char *key, size_t len)
{
	const char *open = memchr(key, '{', len);

	if (open != NULL) {
		size_t from = (size_t)(open - key) + 1;
		const char *close = memchr(open + 1, '}', len - from);
		/* "{}" is no tag: the whole key is hashed */
		if (close != NULL && close > open + 1) {
			key = open + 1;
			len = (size_t)(close - key);
		}
	}
	return crc16_xmodem((const unsigned char *)key, len) & (BRK_CLUSTER_SLOTS - 1);
}

/* ------------------------------------------------------------------------
 * The shard map
 * ---------------------------------------------------------------------- */

int
brk_cluster_create(unsigned nshards, struct brk_cluster **out)
{
	struct brk_cluster *cl;

	if (nshards < 1 || nshards > BRK_CLUSTER_SLOTS) {
		return -EINVAL;
	}
	cl = echd_calloc(1, sizeof(*cl));
	if (cl == NULL) {
		return -ENOMEM;
	}
	cl->shards = echd_calloc(nshards, sizeof(*cl->shards));
	if (cl->shards == NULL) {
		echd_free(cl);
		return -ENOMEM;
	}
	cl->nshards = nshards;
	for (unsigned i = 0; i < nshards; i++) {
		cl->shards[i].first = i * BRK_CLUSTER_SLOTS / nshards;
		cl->shards[i].last = (i + 1) * BRK_CLUSTER_SLOTS / nshards - 1;
	}
	/* Redis' epochs begin at 0 and a primary that holds slots has one of
	 * its own; with the map kept by one front end there is one epoch */
	cl->epoch = 1;
	*out = cl;
	return 0;
}

void
brk_cluster_destroy(struct brk_cluster *cl)
{
	if (cl == NULL) {
		return;
	}
	for (size_t i = 0; i < cl->nshards && cl->shards != NULL; i++) {
		echd_free(cl->shards[i].nodes);
	}
	echd_free(cl->shards);
	echd_free(cl);
}

int
brk_cluster_add_node(struct brk_cluster *cl, size_t i, const struct brk_cluster_node *n)
{
	struct brk_cluster_shard *s;
	struct brk_cluster_node *nodes;
	size_t at;

	if (i >= cl->nshards) {
		return -EINVAL;
	}
	s = &cl->shards[i];
	nodes = echd_realloc(s->nodes, (s->nnodes + 1) * sizeof(*nodes));
	if (nodes == NULL) {
		return -ENOMEM;
	}
	s->nodes = nodes;
	at = n->role == BRK_CLUSTER_PRIMARY ? 0 : s->nnodes;
	memmove(&nodes[at + 1], &nodes[at], (s->nnodes - at) * sizeof(*nodes));
	nodes[at] = *n;
	s->nnodes++;
	return 0;
}

int
brk_cluster_add_replica(struct brk_cluster *cl, const struct brk_cluster_node *n)
{
	for (size_t i = 0; i < cl->nshards; i++) {
		const struct brk_cluster_node *p = brk_cluster_primary(&cl->shards[i]);
		struct brk_cluster_node r = *n;
		int rc;

		if (p == NULL) {
			continue; /* no one to be the replica of: a standby takes it next poll */
		}
		r.role = BRK_CLUSTER_REPLICA;
		r.epoch = p->epoch;
		rc = brk_cluster_add_node(cl, i, &r);
		if (rc != 0) {
			return rc;
		}
	}
	return 0;
}

const struct brk_cluster_node *
brk_cluster_replica_of(const struct brk_cluster *cl, const char *id)
{
	for (size_t i = 0; i < cl->nshards; i++) {
		const struct brk_cluster_shard *s = &cl->shards[i];
		for (size_t j = 0; j < s->nnodes; j++) {
			const struct brk_cluster_node *n = &s->nodes[j];

			if (n->role == BRK_CLUSTER_REPLICA && strcmp(n->id, id) == 0) {
				return brk_cluster_primary(s);
			}
		}
	}
	return NULL;
}

bool
brk_cluster_listed_before(const struct brk_cluster *cl, size_t i, size_t j)
{
	const char *id = cl->shards[i].nodes[j].id;

	for (size_t k = 0; k < i; k++) {
		for (size_t m = 0; m < cl->shards[k].nnodes; m++) {
			if (strcmp(cl->shards[k].nodes[m].id, id) == 0) {
				return true;
			}
		}
	}
	return false;
}

size_t
brk_cluster_nnodes(const struct brk_cluster *cl)
{
	size_t n = 0;
	bool me = false;

	for (size_t i = 0; i < cl->nshards; i++) {
		for (size_t j = 0; j < cl->shards[i].nnodes; j++) {
			me = me || cl->shards[i].nodes[j].myself;
			n += !brk_cluster_listed_before(cl, i, j);
		}
	}
	return n + !me;
}

int
brk_cluster_ranges(unsigned nshards, char *buf, size_t len)
{
	struct brk_cluster *cl = NULL;
	size_t at = 0;
	int rc;

	if (nshards > BRK_CLUSTER_SHARDS_MAX) {
		return -EINVAL;
	}
	rc = brk_cluster_create(nshards, &cl);
	for (size_t i = 0; rc == 0 && i < cl->nshards; i++) {
		int n = snprintf(buf + at, len - at, "%s%u-%u", i > 0 ? "," : "",
			cl->shards[i].first, cl->shards[i].last);

		if (n < 0 || (size_t)n >= len - at) {
			rc = -ENOSPC;
		} else {
			at += (size_t)n;
		}
	}
	brk_cluster_destroy(cl);
	return rc;
}

const struct brk_cluster_shard *
brk_cluster_shard_of(const struct brk_cluster *cl, unsigned slot)
{
	size_t lo = 0, hi = cl->nshards;

	/* the shards cut the slots in order: a binary search */
	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;
		if (cl->shards[mid].first <= slot) {
			lo = mid;
		} else {
			hi = mid;
		}
	}
	return &cl->shards[lo];
}

const struct brk_cluster_node *
brk_cluster_primary(const struct brk_cluster_shard *s)
{
	/* brk_cluster_add_node() puts a primary first */
	return s->nnodes > 0 && s->nodes[0].role == BRK_CLUSTER_PRIMARY ? &s->nodes[0] : NULL;
}

/* ------------------------------------------------------------------------
 * The node id
 * ---------------------------------------------------------------------- */

static bool
is_node_id(const char *s, size_t len)
{
	if (len != BRK_CLUSTER_ID_LEN) {
		return false;
	}
	for (size_t i = 0; i < len; i++) {
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) {
			return false;
		}
	}
	return true;
}

/* Writes id to path through a temporary file renamed over it, flushed
 * with its directory, so that a crash leaves the old file or the whole new one. */
static int
write_id(const char *dir, const char *path, const char *id)
{
	char tmp[4096];
	FILE *f;
	int rc = 0;

	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= sizeof(tmp)) {
		return -ENAMETOOLONG;
	}
	f = fopen(tmp, "w");
	if (f == NULL) {
		return -errno;
	}
	if (fprintf(f, "%s\n", id) < 0 || fflush(f) != 0 || fsync(fileno(f)) != 0) {
		rc = -errno;
	}
	if (fclose(f) != 0 && rc == 0) {
		rc = -errno;
	}
	if (rc == 0 && rename(tmp, path) != 0) {
		rc = -errno;
	}
	if (rc != 0) {
		unlink(tmp);
		return rc;
	}
	return echd_fsync_path(dir, O_RDONLY | O_DIRECTORY);
}

int
brk_cluster_node_id(const char *dir, char out[BRK_CLUSTER_ID_LEN + 1])
{
	char path[4096], buf[BRK_CLUSTER_ID_LEN + 2], id[BRK_CLUSTER_ID_LEN + 1];
	FILE *f;
	size_t n;
	int rc;

	if ((size_t)snprintf(path, sizeof(path), "%s/cluster-node-id", dir) >= sizeof(path)) {
		return -ENAMETOOLONG;
	}
	f = fopen(path, "r");
	if (f == NULL && errno != ENOENT) {
		return -errno;
	}
	if (f != NULL) {
		n = fread(buf, 1, sizeof(buf), f);
		rc = ferror(f) ? -EIO : 0;
		fclose(f);
		if (rc != 0) {
			return rc;
		}
		if (n > 0 && buf[n - 1] == '\n') {
			n--;
		}
		if (!is_node_id(buf, n)) {
			return ECHD_ECORRUPT;
		}
		memcpy(out, buf, n);
		out[n] = '\0';
		return 0;
	}
	brk_random_id(id);
	rc = write_id(dir, path, id);
	if (rc != 0) {
		return rc;
	}
	memcpy(out, id, sizeof(id));
	return 0;
}

/* ------------------------------------------------------------------------
 * The slot of a request
 * ---------------------------------------------------------------------- */

bool
brk_cluster_slot_add(const struct brk_cmd *cmd, int argc, const struct resp_arg *argv,
	int *slot)
{
	struct brk_keys k;
	int s = *slot;

	if (brk_keys_find(cmd, argc, argv, BRK_KEYS_NOT_KEYS, &k) != 0) {
		return true; /* a request its handler refuses: no keys to route */
	}
	for (int i = 0; i < brk_keys_count(&k); i++) {
		const struct resp_arg *a = &argv[brk_keys_at(&k, i, NULL)];
		int ks = (int)brk_cluster_keyslot(a->p, a->len);

		if (s >= 0 && ks != s) {
			return false;
		}
		s = ks;
	}
	*slot = s;
	return true;
}

/* ------------------------------------------------------------------------
 * Start-up
 * ---------------------------------------------------------------------- */

int
brk_cluster_check(struct brk_server *srv)
{
	struct storage_ha *ha;

	if (!srv->cfg.cluster_enabled) {
		return 0;
	}
	/* A cluster's shards are stores its front ends share (the HA part):
	 * asked of the engine, not read from its name */
	if (storage_ha(srv->st) == NULL) {
		echd_log(ECHD_LOG_WARNING,
			"cluster-enabled yes needs storage postgres, a store front ends share; "
			"storage is '%s'", srv->cfg.storage_backend);
		return BRK_INIT_CONFIG;
	}
	ha = storage_ha(srv->st);
	if (srv->cfg.cluster_shards > 1 &&
		storage_ha_nparts(ha) != (size_t)srv->cfg.cluster_shards) {
		echd_log(ECHD_LOG_WARNING,
			"cluster-shards %lld: storage '%s' holds %zu part(s), not one per shard",
			srv->cfg.cluster_shards, srv->cfg.storage_backend, storage_ha_nparts(ha));
		return BRK_INIT_CONFIG;
	}
	return 0;
}

int
brk_cluster_init(struct brk_server *srv)
{
	struct brk_cluster_node me = {.role = BRK_CLUSTER_PRIMARY, .myself = true, .epoch = 1};
	int rc;

	if (!srv->cfg.cluster_enabled) {
		return 0;
	}
	/* read before the storage opened (server.c): the engine records it */
	snprintf(me.id, sizeof(me.id), "%s", srv->cfg.cluster_node);
	snprintf(me.host, sizeof(me.host), "%s", srv->ha_host);
	me.port = srv->ha_port != 0 ? srv->ha_port : srv->bound_port;
	rc = brk_cluster_create((unsigned)srv->cfg.cluster_shards, &srv->cluster);
	if (rc == 0) {
		srv->cluster->self = me;
		if (srv->cfg.cluster_shards == 1) {
			/* the store itself is the one shard (as a lone front end's) */
			rc = brk_cluster_add_node(srv->cluster, 0, &me);
		}
	}
	if (rc != 0) {
		echd_log(ECHD_LOG_WARNING, "cluster map: %s", echd_strerror(rc));
		return -1;
	}
	brk_cluster_update(srv);
	echd_log(ECHD_LOG_NOTICE, "cluster mode: node %s, %zu shard(s)", me.id,
		srv->cluster->nshards);
	return 0;
}

/* The primary of part i as the last poll read it, into *n: false when
 * the part has none (no front end holds it, or the store is unreachable:
 * nothing is known). */
static bool
part_primary(struct brk_server *srv, struct storage_ha *ha, size_t i,
	struct brk_cluster_node *n)
{
	struct storage_ha_part p;

	if (srv->ha.role == STORAGE_ROLE_OFFLINE || storage_ha_part(ha, i, &p) != 0 || !p.held) {
		return false;
	}
	if (srv->ha.role == STORAGE_ROLE_ACTIVE && srv->ha.part == (int)i) {
		*n = srv->cluster->self;
	} else {
		/* a front end of another version, or one between its lock and
		 * its ha row: not known yet, the next poll may tell */
		if (p.host[0] == '\0' || p.port <= 0 || !is_node_id(p.node, strlen(p.node))) {
			return false;
		}
		memset(n, 0, sizeof(*n));
		memcpy(n->id, p.node, BRK_CLUSTER_ID_LEN);
		snprintf(n->host, sizeof(n->host), "%s", p.host);
		n->port = p.port;
	}
	n->role = BRK_CLUSTER_PRIMARY;
	n->epoch = p.gen;
	return true;
}

static bool
is_primary(const struct brk_cluster *cl, const char *id)
{
	for (size_t i = 0; i < cl->nshards; i++) {
		const struct brk_cluster_node *p = brk_cluster_primary(&cl->shards[i]);
		if (p != NULL && strcmp(p->id, id) == 0) {
			return true;
		}
	}
	return false;
}

static int
node_cmp(const void *a, const void *b)
{
	return strcmp(((const struct brk_cluster_node *)a)->id,
		((const struct brk_cluster_node *)b)->id);
}

/* The standbys, as replicas of every shard with a primary: this front end
 * when it stands by, and the others the poll read from the registry. In
 * node id order, so that every front end lists them alike. */
static int
add_standbys(struct brk_server *srv, struct storage_ha *ha, struct brk_cluster *cl)
{
	size_t n = storage_ha_nfronts(ha), k = 0;
	struct brk_cluster_node *r;
	int rc = 0;

	if (srv->ha.role == STORAGE_ROLE_OFFLINE) {
		return 0; /* nothing is known */
	}
	r = echd_calloc(n + 1, sizeof(*r));
	if (r == NULL) {
		return -ENOMEM;
	}
	if (srv->ha.role == STORAGE_ROLE_STANDBY) {
		r[k++] = cl->self;
	}
	for (size_t i = 0; i < n; i++) {
		struct storage_ha_front f;

		/* a front end's row says standby until its next poll after a
		 * takeover: the ha rows say who is a primary */
		if (storage_ha_front(ha, i, &f) != 0 || f.part >= 0 || f.host[0] == '\0' ||
			f.port <= 0 || !is_node_id(f.node, strlen(f.node)) ||
			is_primary(cl, f.node)) {
			continue;
		}
		memset(&r[k], 0, sizeof(r[k]));
		memcpy(r[k].id, f.node, BRK_CLUSTER_ID_LEN);
		snprintf(r[k].host, sizeof(r[k].host), "%s", f.host);
		r[k++].port = f.port;
	}
	qsort(r, k, sizeof(*r), node_cmp);
	for (size_t i = 0; rc == 0 && i < k; i++) {
		rc = brk_cluster_add_replica(cl, &r[i]);
	}
	echd_free(r);
	return rc;
}

void
brk_cluster_update(struct brk_server *srv)
{
	struct storage_ha *ha = srv->cluster != NULL ? storage_ha(srv->st) : NULL;
	size_t n = ha != NULL ? storage_ha_nparts(ha) : 0;
	struct brk_cluster *cl = NULL;
	int rc;

	if (n == 0 || n != srv->cluster->nshards) {
		return; /* one shard: the store itself, this front end its primary */
	}
	rc = brk_cluster_create((unsigned)n, &cl);
	if (rc == 0) {
		cl->self = srv->cluster->self;
		cl->self.epoch = 0;
		cl->epoch = 0;
	}
	for (size_t i = 0; rc == 0 && i < n; i++) {
		struct brk_cluster_node p;

		if (!part_primary(srv, ha, i, &p)) {
			continue;
		}
		if (p.myself) {
			cl->self.epoch = p.epoch;
		}
		if (p.epoch > cl->epoch) {
			cl->epoch = p.epoch;
		}
		rc = brk_cluster_add_node(cl, i, &p);
	}
	if (rc == 0) {
		rc = add_standbys(srv, ha, cl);
	}
	if (rc == 0 && srv->ha.role == STORAGE_ROLE_STANDBY) {
		/* a replica's epoch is its primary's (CLUSTER INFO's my_epoch) */
		const struct brk_cluster_node *p = brk_cluster_replica_of(cl, cl->self.id);
		cl->self.epoch = p != NULL ? p->epoch : 0;
	}
	if (rc != 0) {
		echd_log(ECHD_LOG_WARNING, "cluster map: %s: the last one stays", echd_strerror(rc));
		brk_cluster_destroy(cl);
		return;
	}
	brk_cluster_destroy(srv->cluster);
	srv->cluster = cl;
}

void
brk_cluster_finish(struct brk_server *srv)
{
	brk_cluster_destroy(srv->cluster);
	srv->cluster = NULL;
}
