/* test_cluster.c - unit tests for broker/cluster/cluster.c: the hash slot
 * of a key (values read from Redis 7.0's CLUSTER KEYSLOT in cluster mode),
 * the shard map cut into N shards, the node id file, and the slot a
 * request's keys share (through the command table's key specs).
 */
#include <check.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "broker.h"
#include "cluster.h"

static unsigned
slot(const char *key)
{
	return brk_cluster_keyslot(key, strlen(key));
}

/* ------------------------------------------------------------------------
 * The hash slot
 * ---------------------------------------------------------------------- */

START_TEST(keyslot_as_redis)
{
	/* redis-server 7.0 --cluster-enabled yes: CLUSTER KEYSLOT of each */
	ck_assert_uint_eq(slot("somekey"), 11058);
	ck_assert_uint_eq(slot("foo"), 12182);
	ck_assert_uint_eq(slot("{user1000}.following"), 3443);
	ck_assert_uint_eq(slot("{user1000}.followers"), 3443);
	ck_assert_uint_eq(slot(""), 0);
	ck_assert_uint_eq(slot("a{}"), 6082);
	ck_assert_uint_eq(slot("{}"), 15257);
	ck_assert_uint_eq(slot("foo{bar}{zap}"), 5061);
}
END_TEST

START_TEST(keyslot_hash_tags)
{
	/* an empty tag: the whole key */
	ck_assert_uint_eq(slot("foo{}{bar}"), 8363);
	ck_assert_uint_ne(slot("foo{}{bar}"), slot("bar"));
	/* the first '{' and the next '}': the tag is "{bar" */
	ck_assert_uint_eq(slot("foo{{bar}}zap"), 4015);
	ck_assert_uint_eq(slot("foo{{bar}}zap"), slot("{bar"));
	/* only the first tag counts */
	ck_assert_uint_eq(slot("foo{bar}{zap}"), slot("bar"));
	/* no '}' after the '{': the whole key */
	ck_assert_uint_eq(slot("foo{bar"), 15278);
	/* binary keys: the length, not a NUL, ends them */
	ck_assert_uint_eq(brk_cluster_keyslot("x{a\0b}y", 7), 8383);
	ck_assert_uint_eq(brk_cluster_keyslot("a\0b", 3), 8383);
	ck_assert_uint_eq(slot("a"), 15495);
}
END_TEST

/* ------------------------------------------------------------------------
 * The shard map
 * ---------------------------------------------------------------------- */

static struct brk_cluster_node
node(const char *id, int port, enum brk_cluster_role role)
{
	struct brk_cluster_node n = {.port = port, .role = role};

	snprintf(n.id, sizeof(n.id), "%s", id);
	snprintf(n.host, sizeof(n.host), "127.0.0.1");
	return n;
}

START_TEST(map_one_shard)
{
	struct brk_cluster *cl = NULL;
	struct brk_cluster_node me = node("a", 7000, BRK_CLUSTER_PRIMARY);

	ck_assert_int_eq(brk_cluster_create(1, &cl), 0);
	ck_assert_uint_eq(cl->nshards, 1);
	ck_assert_uint_eq(cl->shards[0].first, 0);
	ck_assert_uint_eq(cl->shards[0].last, 16383);
	ck_assert_ptr_null(brk_cluster_primary(&cl->shards[0])); /* no front end yet */
	ck_assert_int_eq(brk_cluster_add_node(cl, 0, &me), 0);
	ck_assert_int_eq(brk_cluster_add_node(cl, 1, &me), -EINVAL);
	for (unsigned s = 0; s < BRK_CLUSTER_SLOTS; s += 1000) {
		ck_assert_ptr_eq(brk_cluster_shard_of(cl, s), &cl->shards[0]);
	}
	ck_assert_str_eq(brk_cluster_primary(brk_cluster_shard_of(cl, 16383))->id, "a");
	brk_cluster_destroy(cl);
	brk_cluster_destroy(NULL);
	ck_assert_int_eq(brk_cluster_create(0, &cl), -EINVAL);
	ck_assert_int_eq(brk_cluster_create(16385, &cl), -EINVAL);
}
END_TEST

START_TEST(map_n_shards)
{
	struct brk_cluster *cl = NULL;
	struct brk_cluster_node r = node("r", 7003, BRK_CLUSTER_REPLICA);
	struct brk_cluster_node p = node("p", 7001, BRK_CLUSTER_PRIMARY);
	unsigned next = 0;

	ck_assert_int_eq(brk_cluster_create(3, &cl), 0);
	/* the shards cut the slots in order, without gaps */
	for (size_t i = 0; i < cl->nshards; i++) {
		ck_assert_uint_eq(cl->shards[i].first, next);
		ck_assert_uint_ge(cl->shards[i].last, cl->shards[i].first);
		next = cl->shards[i].last + 1;
	}
	ck_assert_uint_eq(next, BRK_CLUSTER_SLOTS);
	ck_assert_uint_eq(cl->shards[0].last, 5460);
	ck_assert_ptr_eq(brk_cluster_shard_of(cl, 0), &cl->shards[0]);
	ck_assert_ptr_eq(brk_cluster_shard_of(cl, 5460), &cl->shards[0]);
	ck_assert_ptr_eq(brk_cluster_shard_of(cl, 5461), &cl->shards[1]);
	ck_assert_ptr_eq(brk_cluster_shard_of(cl, cl->shards[2].first), &cl->shards[2]);
	ck_assert_ptr_eq(brk_cluster_shard_of(cl, 16383), &cl->shards[2]);
	/* a shard with only a replica has no primary; one added later goes first */
	ck_assert_int_eq(brk_cluster_add_node(cl, 1, &r), 0);
	ck_assert_ptr_null(brk_cluster_primary(&cl->shards[1]));
	ck_assert_int_eq(brk_cluster_add_node(cl, 1, &p), 0);
	ck_assert_str_eq(brk_cluster_primary(&cl->shards[1])->id, "p");
	ck_assert_str_eq(cl->shards[1].nodes[1].id, "r");
	brk_cluster_destroy(cl);

	/* every slot its own shard */
	ck_assert_int_eq(brk_cluster_create(BRK_CLUSTER_SLOTS, &cl), 0);
	ck_assert_ptr_eq(brk_cluster_shard_of(cl, 12345), &cl->shards[12345]);
	ck_assert_uint_eq(cl->shards[12345].first, 12345);
	ck_assert_uint_eq(cl->shards[12345].last, 12345);
	brk_cluster_destroy(cl);
}
END_TEST

/* A standby is a replica of every shard that has a primary, after it and
 * with its epoch; NODES finds it once, under the first; a primary added
 * later still goes first; the nodes are counted once each. */
START_TEST(map_replicas)
{
	struct brk_cluster *cl = NULL;
	struct brk_cluster_node a = node("a", 7001, BRK_CLUSTER_PRIMARY);
	struct brk_cluster_node c = node("c", 7003, BRK_CLUSTER_PRIMARY);
	struct brk_cluster_node s = node("s", 7004, BRK_CLUSTER_PRIMARY);
	struct brk_cluster_node t = node("t", 7005, BRK_CLUSTER_REPLICA);

	ck_assert_int_eq(brk_cluster_create(3, &cl), 0);
	cl->self = s;
	cl->self.myself = true;
	/* no primary anywhere: a replica of nothing, the count has only myself */
	ck_assert_int_eq(brk_cluster_add_replica(cl, &t), 0);
	ck_assert_uint_eq(cl->shards[0].nnodes + cl->shards[1].nnodes + cl->shards[2].nnodes, 0);
	ck_assert_uint_eq(brk_cluster_nnodes(cl), 1);
	a.epoch = 4;
	c.epoch = 9;
	ck_assert_int_eq(brk_cluster_add_node(cl, 0, &a), 0);
	ck_assert_int_eq(brk_cluster_add_node(cl, 2, &c), 0);
	s.myself = true;
	ck_assert_int_eq(brk_cluster_add_replica(cl, &s), 0);
	ck_assert_int_eq(brk_cluster_add_replica(cl, &t), 0);
	/* shards 0 and 2: the primary, then s and t as replicas with its epoch */
	for (size_t i = 0; i < 3; i += 2) {
		const struct brk_cluster_shard *sh = &cl->shards[i];

		ck_assert_uint_eq(sh->nnodes, 3);
		ck_assert_str_eq(brk_cluster_primary(sh)->id, i == 0 ? "a" : "c");
		ck_assert_str_eq(sh->nodes[1].id, "s");
		ck_assert(sh->nodes[1].myself);
		ck_assert_str_eq(sh->nodes[2].id, "t");
		for (size_t j = 1; j < 3; j++) {
			ck_assert_int_eq(sh->nodes[j].role, BRK_CLUSTER_REPLICA);
			ck_assert_uint_eq(sh->nodes[j].epoch, i == 0 ? 4 : 9);
		}
	}
	/* shard 1 has no primary: no replica either */
	ck_assert_uint_eq(cl->shards[1].nnodes, 0);
	ck_assert_str_eq(brk_cluster_replica_of(cl, "s")->id, "a");
	ck_assert_str_eq(brk_cluster_replica_of(cl, "t")->id, "a");
	ck_assert_ptr_null(brk_cluster_replica_of(cl, "a"));
	ck_assert_ptr_null(brk_cluster_replica_of(cl, "x"));
	ck_assert(!brk_cluster_listed_before(cl, 0, 1));
	ck_assert(brk_cluster_listed_before(cl, 2, 1));
	ck_assert(brk_cluster_listed_before(cl, 2, 2));
	ck_assert(!brk_cluster_listed_before(cl, 2, 0));
	/* a, c, s, t: four nodes, myself among them */
	ck_assert_uint_eq(brk_cluster_nnodes(cl), 4);
	/* a primary for shard 1 goes before nothing: it is the shard's first */
	ck_assert_int_eq(brk_cluster_add_node(cl, 1, &(struct brk_cluster_node){
		.id = "b", .port = 7002, .role = BRK_CLUSTER_PRIMARY}), 0);
	ck_assert_str_eq(brk_cluster_primary(&cl->shards[1])->id, "b");
	ck_assert_uint_eq(brk_cluster_nnodes(cl), 5);
	brk_cluster_destroy(cl);
}
END_TEST

/* ------------------------------------------------------------------------
 * The node id
 * ---------------------------------------------------------------------- */

/* The ranges handed to the engine (postgres.shards) are the map's own cut. */
START_TEST(map_ranges)
{
	char buf[4096], small[16];
	struct brk_cluster *cl = NULL;
	char *p = buf;

	ck_assert_int_eq(brk_cluster_ranges(1, buf, sizeof(buf)), 0);
	ck_assert_str_eq(buf, "0-16383");
	ck_assert_int_eq(brk_cluster_ranges(3, buf, sizeof(buf)), 0);
	ck_assert_str_eq(buf, "0-5460,5461-10921,10922-16383");
	/* every count up to the bound fits the config line, and matches the map */
	ck_assert_int_eq(brk_cluster_ranges(BRK_CLUSTER_SHARDS_MAX, buf, sizeof(buf)), 0);
	ck_assert_int_eq(brk_cluster_create(BRK_CLUSTER_SHARDS_MAX, &cl), 0);
	for (size_t i = 0; i < cl->nshards; i++) {
		char *end;

		ck_assert_uint_eq(strtoul(p, &end, 10), cl->shards[i].first);
		ck_assert_int_eq(*end, '-');
		ck_assert_uint_eq(strtoul(end + 1, &p, 10), cl->shards[i].last);
		ck_assert_int_eq(*p, i + 1 < cl->nshards ? ',' : '\0');
		p++;
	}
	brk_cluster_destroy(cl);
	ck_assert_int_eq(brk_cluster_ranges(BRK_CLUSTER_SHARDS_MAX + 1, buf, sizeof(buf)), -EINVAL);
	ck_assert_int_eq(brk_cluster_ranges(0, buf, sizeof(buf)), -EINVAL);
	ck_assert_int_eq(brk_cluster_ranges(3, small, sizeof(small)), -ENOSPC);
}
END_TEST

START_TEST(node_id_kept)
{
	char dir[] = "/tmp/echd-test-cluster-XXXXXX", path[256], a[41], b[41];
	FILE *f;

	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/cluster-node-id", dir);
	ck_assert_int_eq(brk_cluster_node_id(dir, a), 0);
	ck_assert_uint_eq(strlen(a), 40);
	ck_assert_uint_eq(strspn(a, "0123456789abcdef"), 40);
	/* read back, not made again */
	ck_assert_int_eq(brk_cluster_node_id(dir, b), 0);
	ck_assert_str_eq(a, b);
	/* a file that holds no node id is refused, not replaced */
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs("not an id\n", f);
	fclose(f);
	ck_assert_int_eq(brk_cluster_node_id(dir, b), ECHD_ECORRUPT);
	unlink(path);
	ck_assert_int_eq(brk_cluster_node_id(dir, b), 0);
	ck_assert_str_ne(a, b);
	unlink(path);
	rmdir(dir);
}
END_TEST

/* ------------------------------------------------------------------------
 * The slot of a request
 * ---------------------------------------------------------------------- */

#define MAXARGS 16

/* brk_cluster_slot_add() of the NULL-terminated words given, from slot s:
 * the slot, or -2 for CROSSSLOT. */
static int
req_slot(int s, const char *first, ...)
{
	struct resp_arg args[MAXARGS];
	const struct brk_cmd *cmd;
	const char *w = first;
	int n = 0;
	va_list ap;

	va_start(ap, first);
	while (w != NULL && n < MAXARGS) {
		args[n].p = w;
		args[n].len = strlen(w);
		n++;
		w = va_arg(ap, const char *);
	}
	va_end(ap);
	cmd = brk_cmd_lookup(args[0].p, args[0].len);
	ck_assert_ptr_nonnull(cmd);
	return brk_cluster_slot_add(cmd, n, args, &s) ? s : -2;
}

START_TEST(request_slot)
{
	int a = (int)slot("a");

	ck_assert_int_ne(a, (int)slot("b"));
	ck_assert_int_eq(req_slot(-1, "PING", NULL), -1);
	ck_assert_int_eq(req_slot(-1, "XADD", "a", "*", "f", "v", NULL), a);
	ck_assert_int_eq(req_slot(-1, "XREAD", "STREAMS", "a", "b", "0", "0", NULL), -2);
	ck_assert_int_eq(req_slot(-1, "XREAD", "COUNT", "1", "STREAMS", "{a}1", "{a}2", "0", "0",
				 NULL),
		a);
	/* the group and consumer are not keys, whatever they are called */
	ck_assert_int_eq(req_slot(-1, "XREADGROUP", "GROUP", "b", "streams", "STREAMS", "a", ">",
				 NULL),
		a);
	ck_assert_int_eq(req_slot(-1, "DEL", "a", "{a}x", NULL), a);
	ck_assert_int_eq(req_slot(-1, "DEL", "a", "b", NULL), -2);
	ck_assert_int_eq(req_slot(-1, "RENAME", "a", "b", NULL), -2);
	/* shard channels count, as in Redis' getNodeByQuery() */
	ck_assert_int_eq(req_slot(-1, "SSUBSCRIBE", "a", "b", NULL), -2);
	/* a request that does not fit its specs: its handler refuses it */
	ck_assert_int_eq(req_slot(-1, "XREAD", "STREAMS", "a", "b", "0", NULL), -1);
	/* several requests (EXEC's queue): the slot carries over */
	ck_assert_int_eq(req_slot(a, "XADD", "{a}z", "*", "f", "v", NULL), a);
	ck_assert_int_eq(req_slot(a, "XADD", "b", "*", "f", "v", NULL), -2);
	ck_assert_int_eq(req_slot(a, "PING", NULL), a);
}
END_TEST

static Suite *
cluster_suite(void)
{
	Suite *s = suite_create("cluster");
	TCase *tc;

	tc = tcase_create("keyslot");
	tcase_add_test(tc, keyslot_as_redis);
	tcase_add_test(tc, keyslot_hash_tags);
	suite_add_tcase(s, tc);
	tc = tcase_create("map");
	tcase_add_test(tc, map_one_shard);
	tcase_add_test(tc, map_n_shards);
	tcase_add_test(tc, map_ranges);
	tcase_add_test(tc, map_replicas);
	suite_add_tcase(s, tc);
	tc = tcase_create("node_id");
	tcase_add_test(tc, node_id_kept);
	suite_add_tcase(s, tc);
	tc = tcase_create("request");
	tcase_add_test(tc, request_slot);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	SRunner *sr = srunner_create(cluster_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
