/* cmd_delpol.c - Redis 8.2's deletion policies: XDELEX, XACKDEL, and the
 * KEEPREF | DELREF | ACKED word with which XADD and XTRIM trim.
 *
 * KEEPREF deletes and leaves the groups' pending records pointing at
 * nothing (as XDEL does); DELREF drops those records from every group and
 * consumer; ACKED deletes only entries that no group holds (pending in it,
 * or past its last-delivered id). The deletions, the dropped records and
 * the group and consumer counts all change in the command's transaction. */
#include <errno.h>
#include <string.h>

#include "broker.h"

#define ERR_NUMIDS   "ERR Number of IDs must be a positive integer"
#define ERR_IDSCOUNT "ERR The `numids` parameter must match the number of arguments"

/* Per-id results, as Redis numbers them. */
#define DEL_NOTFOUND (-1) /* no such entry (XACKDEL: not pending in the group) */
#define DEL_DELETED  1
#define DEL_HELD     2    /* ACKED: a group still holds it */

bool
brk_parse_ref_policy(const struct resp_arg *a, enum stream_ref_policy *out)
{
	if (brk_arg_eq(a, "KEEPREF")) {
		*out = STREAM_REF_KEEP;
	} else if (brk_arg_eq(a, "DELREF")) {
		*out = STREAM_REF_DEL;
	} else if (brk_arg_eq(a, "ACKED")) {
		*out = STREAM_REF_ACKED;
	} else {
		return false;
	}
	return true;
}

/* Loads the groups when the policy needs them and the stream has any;
 * *out stays NULL otherwise (nothing is held, nothing to drop). */
static int
refs_for(struct storage_txn *t, const struct stream_meta *m, enum stream_ref_policy policy,
	struct group_refs **out)
{
	*out = NULL;
	if (policy == STREAM_REF_KEEP || m->groups == 0) {
		return 0;
	}
	return group_refs_create(t, m, out);
}

int
brk_trim_with_policy(struct storage_txn *t, struct stream_meta *m, struct stream_trim *tr,
	enum stream_ref_policy policy, uint64_t *removed)
{
	struct group_refs *refs;
	struct stream_refs hooks;
	int rc;

	/* Even with no group the policy counts: ~ trims differently under it. */
	refs = NULL;
	rc = policy == STREAM_REF_KEEP ? 0 : group_refs_create(t, m, &refs);
	if (rc != 0) {
		return rc;
	}
	if (refs != NULL) {
		group_refs_trim(refs, policy, &hooks);
		tr->refs = &hooks;
	}
	rc = stream_trim(t, m, tr, removed);
	tr->refs = NULL;
	if (rc == 0 && refs != NULL) {
		rc = group_refs_save(refs);
	}
	group_refs_destroy(refs);
	return rc;
}

/* ------------------------------------------------------------------------
 * [KEEPREF | DELREF | ACKED] IDS numids id [id ...]
 * ---------------------------------------------------------------------- */

struct del_args {
	enum stream_ref_policy policy;
	int first;             /* argv index of the first id */
	size_t n;
	struct stream_id *ids; /* owned: echd_free() */
	signed char *codes;    /* owned, n of them */
};

/* Parses the arguments from argv[from] on, as Redis does: the policy word
 * (at most one) and the IDS block, in either order (a second IDS block
 * wins). Replies the error and returns false when they are wrong. The ids
 * themselves are parsed by del_args_ids(), after the key is looked up;
 * every code starts as DEL_NOTFOUND. *rc: 0, or -ENOMEM. */
static bool
parse_del_args(struct brk_ctx *x, int from, struct del_args *d, int *rc)
{
	bool policy = false;

	memset(d, 0, sizeof(*d));
	*rc = 0;
	for (int i = from; i < x->argc; i++) {
		const struct resp_arg *o = &x->argv[i];
		long long n;

		if (!policy && brk_parse_ref_policy(o, &d->policy)) {
			policy = true;
			continue;
		}
		if (!brk_arg_eq(o, "IDS") || i + 1 >= x->argc) {
			resp_add_error(x->w, BRK_ERR_SYNTAX);
			return false;
		}
		if (!brk_str2ll(x->argv[i + 1].p, x->argv[i + 1].len, &n) || n <= 0) {
			resp_add_error(x->w, ERR_NUMIDS);
			return false;
		}
		if (n > x->argc - (i + 2)) {
			resp_add_error(x->w, ERR_IDSCOUNT);
			return false;
		}
		d->first = i + 2;
		d->n = (size_t)n;
		i += 1 + (int)n;
	}
	if (d->first == 0) {
		resp_add_error(x->w, "ERR IDS option is required");
		return false;
	}
	d->codes = echd_malloc(d->n);
	if (d->codes == NULL) {
		*rc = -ENOMEM;
		return false;
	}
	memset(d->codes, DEL_NOTFOUND, d->n);
	return true;
}

/* Parses d's ids, every one before anything is looked at; replies the
 * error and returns false when one is wrong (*rc: 0) or memory ran out. */
static bool
del_args_ids(struct brk_ctx *x, struct del_args *d, int *rc)
{
	*rc = 0;
	d->ids = echd_malloc(d->n * sizeof(*d->ids));
	if (d->ids == NULL) {
		*rc = -ENOMEM;
		return false;
	}
	for (size_t j = 0; j < d->n; j++) {
		if (!brk_parse_strict_id(x, &x->argv[d->first + (int)j], 0, &d->ids[j])) {
			return false;
		}
	}
	return true;
}

static void
del_args_finish(struct del_args *d)
{
	ECHD_FREE(d->ids);
	ECHD_FREE(d->codes);
}

static void
reply_codes(struct brk_ctx *x, const struct del_args *d)
{
	resp_add_array(x->w, d->n);
	for (size_t j = 0; j < d->n; j++) {
		resp_add_int(x->w, d->codes[j]);
	}
}

/* Deletes entry id under d's policy, with refs the stream's groups (NULL
 * when it has none or the policy needs none); *code gets the result and
 * *deleted counts an entry removed. */
static int
delete_one(struct storage_txn *t, struct stream_meta *m, struct group_refs *refs,
	enum stream_ref_policy policy, const struct stream_id *id, signed char *code,
	uint64_t *deleted)
{
	int rc;

	if (policy == STREAM_REF_ACKED && refs != NULL) {
		struct st_buf f;
		bool held, stop;
		rc = stream_get_entry(t, m, id, &f);
		if (rc == ECHD_ENOTFOUND) {
			*code = DEL_NOTFOUND;
			return 0;
		}
		if (rc == 0) {
			rc = group_refs_held(refs, id, id, &held, &stop);
		}
		if (rc != 0) {
			return rc;
		}
		if (held) {
			*code = DEL_HELD;
			return 0;
		}
	}
	rc = stream_delete_entry(t, m, id);
	if (rc != 0 && rc != ECHD_ENOTFOUND) {
		return rc;
	}
	*code = rc == 0 ? DEL_DELETED : DEL_NOTFOUND;
	if (rc == 0) {
		(*deleted)++;
	}
	/* DELREF drops the records even of an entry already gone. */
	if (policy == STREAM_REF_DEL && refs != NULL) {
		return group_refs_drop(refs, id, NULL);
	}
	return 0;
}

/* Saves what the deletions changed: the groups' records and the stream. */
static int
delete_done(struct brk_ctx *x, const struct st_buf *key, struct stream_meta *m,
	struct group_refs *refs, uint64_t deleted)
{
	int rc = refs != NULL ? group_refs_save(refs) : 0;

	if (rc == 0 && deleted > 0) {
		rc = stream_meta_save(x->txn, x->c->db, key, m);
		if (rc == 0) {
			brk_signal_key(x->srv, x->c->db, key->data, key->len);
		}
	}
	return rc;
}

/* XDELEX key [KEEPREF | DELREF | ACKED] IDS numids id [id ...] */
int
brk_cmd_xdelex(struct brk_ctx *x)
{
	struct st_buf key = {x->argv[1].p, x->argv[1].len};
	struct group_refs *refs = NULL;
	struct stream_meta m;
	struct del_args d;
	uint64_t deleted = 0;
	int rc;

	if (!parse_del_args(x, 2, &d, &rc)) {
		del_args_finish(&d);
		return rc;
	}
	/* No key: every id is -1, the ids unread (as Redis). */
	rc = brk_lookup(x, &key, &m);
	if (rc == ECHD_ENOTFOUND) {
		reply_codes(x, &d);
		del_args_finish(&d);
		return 0;
	}
	if (rc == 0 && !del_args_ids(x, &d, &rc)) {
		del_args_finish(&d);
		return rc;
	}
	if (rc == 0) {
		rc = refs_for(x->txn, &m, d.policy, &refs);
	}
	for (size_t j = 0; rc == 0 && j < d.n; j++) {
		rc = delete_one(x->txn, &m, refs, d.policy, &d.ids[j], &d.codes[j], &deleted);
	}
	if (rc == 0) {
		rc = delete_done(x, &key, &m, refs, deleted);
	}
	group_refs_destroy(refs);
	if (rc == 0) {
		x->dirty += deleted;
		reply_codes(x, &d);
	}
	del_args_finish(&d);
	return rc;
}

/* Acknowledges d's ids in group g (saved when any was pending); each one
 * pending gets DEL_DELETED in d->codes for now, the others stay
 * DEL_NOTFOUND. */
static int
ack_ids(struct brk_ctx *x, const struct st_buf *key, const struct stream_meta *m,
	const struct st_buf *gname, struct group_meta *g, struct del_args *d, uint64_t *acked)
{
	struct pel_run run = {0, 0};
	uint64_t before = g->pending;
	int rc;

	for (size_t j = 0; j < d->n; j++) {
		rc = pel_remove_run(x->txn, g, &d->ids[j], &run);
		if (rc == ECHD_ENOTFOUND) {
			continue;
		}
		if (rc != 0) {
			return rc;
		}
		d->codes[j] = DEL_DELETED;
		(*acked)++;
	}
	rc = pel_run_end(x->txn, g, &run);
	if (rc == 0 && *acked > 0) {
		rc = group_save(x->txn, m, gname, g);
	}
	if (rc == 0 && *acked > 0) {
		/* readers held back by MAXACKPENDING wake as for XACK */
		brk_policy_acked(x, key, g, before);
	}
	return rc;
}

/* XACKDEL key group [KEEPREF | DELREF | ACKED] IDS numids id [id ...] */
int
brk_cmd_xackdel(struct brk_ctx *x)
{
	struct st_buf key = {x->argv[1].p, x->argv[1].len};
	struct st_buf gname = {x->argv[2].p, x->argv[2].len};
	struct group_refs *refs = NULL;
	struct stream_meta m;
	struct group_meta g;
	struct del_args d;
	uint64_t acked = 0, deleted = 0;
	int rc;

	if (!parse_del_args(x, 3, &d, &rc)) {
		del_args_finish(&d);
		return rc;
	}
	/* No key or no group: nothing is pending, every id is -1. */
	rc = brk_lookup(x, &key, &m);
	if (rc == 0) {
		rc = group_lookup(x->txn, &m, &gname, &g);
	}
	if (rc == ECHD_ENOTFOUND) {
		reply_codes(x, &d);
		del_args_finish(&d);
		return 0;
	}
	if (rc == 0 && !del_args_ids(x, &d, &rc)) {
		del_args_finish(&d);
		return rc;
	}
	/* Acknowledge first: the group's own records must be gone before
	 * ACKED asks who still holds an entry. */
	if (rc == 0) {
		rc = ack_ids(x, &key, &m, &gname, &g, &d, &acked);
	}
	if (rc == 0 && acked > 0) {
		rc = refs_for(x->txn, &m, d.policy, &refs);
	}
	for (size_t j = 0; rc == 0 && j < d.n; j++) {
		signed char code = DEL_NOTFOUND; /* not set when delete_one() fails */
		if (d.codes[j] != DEL_DELETED) {
			continue;
		}
		rc = delete_one(x->txn, &m, refs, d.policy, &d.ids[j], &code, &deleted);
		/* acknowledged: deleted, or already gone (1), or held (2) */
		if (rc == 0) {
			d.codes[j] = code == DEL_HELD ? DEL_HELD : DEL_DELETED;
		}
	}
	if (rc == 0) {
		rc = delete_done(x, &key, &m, refs, deleted);
	}
	group_refs_destroy(refs);
	if (rc == 0) {
		x->dirty += acked + deleted;
		reply_codes(x, &d);
	}
	del_args_finish(&d);
	return rc;
}
