/* st_mem.c - an in-memory storage backend: the second engine that keeps
 * the contract of storage.h, so that the contract is not LMDB's shape.
 *
 * Each table is a persistent (path-copying) AVL tree of refcounted nodes
 * over refcounted rows. A transaction holds one root per table: a read
 * transaction takes the committed roots, a write transaction the committed
 * ones too, a child its parent's. A write builds a new path to the root
 * (or changes in place the nodes its transaction alone holds) and leaves
 * every other version as it was, so readers keep their snapshot,
 * an aborted child drops its roots (the parent's are untouched) and a
 * committed child hands its roots to the parent. Nothing is written to
 * disk: the data lives as long as the struct storage, and a commit is
 * "durable" only in that sense (tests, and a proof of the interface): it
 * leaves durable_gen out (every commit is durable when it returns) and
 * offers no optional interface: no capacity (every write is admitted; it
 * never grows) and no HA (always active).
 *
 * Cursors hold a copy of the key they stand on, and a move is a search
 * from the root, or, with a read-ahead hint, the next of a batch of nodes
 * collected in one walk. storage.h's rule (a write to a table takes its
 * cursors' places, and a cursor must seek again) is what makes those
 * borrowed node pointers safe: no write reaches the tree while a batch is
 * in use. A B-tree or a SQL engine would lean on the rule the same way.
 */
#include <assert.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "echd.h"
#include "storage_impl.h"

/* An AVL tree of n nodes is at most 1.44 log2(n) high: 64 is past any
 * memory. A write makes at most three nodes per level (a double rotation). */
#define TREE_HEIGHT_MAX 64
#define NODES_PER_WRITE (3 * (TREE_HEIGHT_MAX + 2))
/* Freed nodes kept for the next writes, past what one write needs: a
 * write frees about as many as it makes, and malloc and free were a fifth
 * of lmdb-staged's instructions per XADD (its overlay is this engine). */
#define POOL_KEEP (4 * NODES_PER_WRITE)

/* One key and its value, shared by every tree version that holds it. */
struct mem_row {
	unsigned refs;
	size_t klen, vlen;
	unsigned char data[]; /* key, then value */
};

struct mem_node {
	unsigned refs;
	int height;
	struct mem_row *row;
	struct mem_node *left, *right;
	struct mem_node *next_free; /* in st_mem.pool */
};

struct mem_cursor;

struct mem_txn {
	struct storage_txn base;
	struct mem_node *root[STORAGE_T__COUNT]; /* one reference each */
	struct mem_txn *parent;
	uint64_t bytes; /* of keys and values, as this txn sees them */
	uint64_t rows;  /* and the rows, the same way */
	bool rdonly;
};

/* Where a cursor stands; the same edges as st_lmdb.c's, per storage.h. */
enum mem_pos {
	POS_UNSET,   /* never positioned: next() is first, prev() is last */
	POS_ON,      /* on the row with key */
	POS_BEFORE,  /* before the first row */
	POS_AFTER,   /* after the last row */
	POS_DELETED, /* its row (key) was deleted: next() is the row after it */
};

struct mem_cursor {
	struct storage_cursor base;
	enum storage_table tb;
	enum mem_pos pos;
	unsigned char *key; /* owned copy of the current row's key */
	size_t klen, kcap;
	unsigned ahead;          /* storage_cursor_ahead()'s hint */
	struct mem_node **batch; /* owned: the rows after key, read ahead */
	unsigned nbatch, ibatch; /* batch[ibatch..nbatch) are still to come */
	bool batch_fwd;          /* the direction they were read in */
};

struct st_mem {
	struct storage base;
	struct mem_node *root[STORAGE_T__COUNT]; /* the committed state */
	struct mem_node *pool;                   /* nodes allocated ahead of a write */
	unsigned npool;
	uint64_t bytes;                          /* of keys and values, committed */
	uint64_t rows;                           /* rows, committed */
	uint64_t commits, syncs, txn_id;
};

static struct st_mem *
mem_from(struct storage *st)
{
	assert(st->ops == &st_mem_ops);
	return (struct st_mem *)st;
}

static struct mem_txn *
txn_from(struct storage_txn *t)
{
	assert(t->st->ops == &st_mem_ops);
	return (struct mem_txn *)t;
}

static struct mem_cursor *
cursor_from(struct storage_cursor *c)
{
	assert(c->txn->st->ops == &st_mem_ops);
	return (struct mem_cursor *)c;
}

/* ---- rows and nodes ----------------------------------------------------- */

static const unsigned char *
row_key(const struct mem_row *r)
{
	return r->data;
}

static struct mem_row *
row_ref(struct mem_row *r)
{
	r->refs++;
	return r;
}

static void
row_unref(struct mem_row *r)
{
	if (r != NULL && --r->refs == 0) {
		echd_free(r);
	}
}

/* Memcmp order, a shorter key first on a tie: LMDB's default, and what
 * stream.c's big-endian keys are laid out for. */
static int
key_cmp(const void *a, size_t alen, const void *b, size_t blen)
{
	int c = memcmp(a, b, alen < blen ? alen : blen);

	if (c != 0) {
		return c;
	}
	return alen < blen ? -1 : alen > blen;
}

static int
node_cmp(const struct mem_node *n, const void *k, size_t klen)
{
	return key_cmp(row_key(n->row), n->row->klen, k, klen);
}

static int
height(const struct mem_node *n)
{
	return n == NULL ? 0 : n->height;
}

static struct mem_node *
node_ref(struct mem_node *n)
{
	if (n != NULL) {
		n->refs++;
	}
	return n;
}

/* Frees n's shell (not what it points to): back to the pool while it is
 * short of POOL_KEEP. */
static void
node_free(struct st_mem *s, struct mem_node *n)
{
	if (s->npool < POOL_KEEP) {
		n->next_free = s->pool;
		s->pool = n;
		s->npool++;
		return;
	}
	echd_free(n);
}

static void
node_unref(struct st_mem *s, struct mem_node *n)
{
	while (n != NULL && --n->refs == 0) {
		struct mem_node *right = n->right;

		node_unref(s, n->left);
		row_unref(n->row);
		node_free(s, n);
		n = right; /* the right spine without recursion */
	}
}

/* Fills the pool so that one write cannot run out half-way: a write either
 * fails here, with every tree as it was, or completes. */
static int
pool_fill(struct st_mem *s)
{
	while (s->npool < NODES_PER_WRITE) {
		struct mem_node *n = echd_malloc(sizeof(*n));

		if (n == NULL) {
			return -ENOMEM;
		}
		n->next_free = s->pool;
		s->pool = n;
		s->npool++;
	}
	return 0;
}

/* A new node over row, left and right (takes all three references). */
static struct mem_node *
mk(struct st_mem *s, struct mem_row *row, struct mem_node *left, struct mem_node *right)
{
	struct mem_node *n = s->pool;
	int hl = height(left), hr = height(right);

	assert(n != NULL);
	s->pool = n->next_free;
	s->npool--;
	n->refs = 1;
	n->height = (hl > hr ? hl : hr) + 1;
	n->row = row;
	n->left = left;
	n->right = right;
	return n;
}

/* mk() that restores the AVL balance (the sides differ by at most 2).
 * Takes row, left and right. */
static struct mem_node *
bal(struct st_mem *s, struct mem_row *row, struct mem_node *l, struct mem_node *r)
{
	struct mem_node *out;

	if (height(l) > height(r) + 1) {
		if (height(l->left) >= height(l->right)) {
			out = mk(s, row_ref(l->row), node_ref(l->left),
				mk(s, row, node_ref(l->right), r));
		} else {
			struct mem_node *lr = l->right;

			out = mk(s, row_ref(lr->row),
				mk(s, row_ref(l->row), node_ref(l->left),
					node_ref(lr->left)),
				mk(s, row, node_ref(lr->right), r));
		}
		node_unref(s, l);
		return out;
	}
	if (height(r) > height(l) + 1) {
		if (height(r->right) >= height(r->left)) {
			out = mk(s, row_ref(r->row), mk(s, row, l, node_ref(r->left)),
				node_ref(r->right));
		} else {
			struct mem_node *rl = r->left;

			out = mk(s, row_ref(rl->row),
				mk(s, row, l, node_ref(rl->left)),
				mk(s, row_ref(r->row), node_ref(rl->right),
					node_ref(r->right)));
		}
		node_unref(s, r);
		return out;
	}
	return mk(s, row, l, r);
}

/* The tree n with row in place of its key's (takes row); n is borrowed.
 * *was is the row it replaces, NULL if none (borrowed from n). */
static struct mem_node *
tree_put(struct st_mem *s, struct mem_node *n, struct mem_row *row, const struct mem_row **was)
{
	int c;

	if (n == NULL) {
		*was = NULL;
		return mk(s, row, NULL, NULL);
	}
	c = node_cmp(n, row_key(row), row->klen);
	if (c == 0) {
		*was = n->row;
		return mk(s, row, node_ref(n->left), node_ref(n->right));
	}
	if (c > 0) {
		return bal(s, row_ref(n->row), tree_put(s, n->left, row, was),
			node_ref(n->right));
	}
	return bal(s, row_ref(n->row), node_ref(n->left), tree_put(s, n->right, row, was));
}

/* The tree n without its leftmost row, which goes to *min (a reference). */
static struct mem_node *
tree_del_min(struct st_mem *s, struct mem_node *n, struct mem_row **min)
{
	if (n->left == NULL) {
		*min = row_ref(n->row);
		return node_ref(n->right);
	}
	return bal(s, row_ref(n->row), tree_del_min(s, n->left, min), node_ref(n->right));
}

/* The tree n without key k, which it holds (n borrowed). */
static struct mem_node *
tree_del(struct st_mem *s, struct mem_node *n, const void *k, size_t klen)
{
	int c = node_cmp(n, k, klen);
	struct mem_row *min;
	struct mem_node *right;

	if (c > 0) {
		return bal(s, row_ref(n->row), tree_del(s, n->left, k, klen), node_ref(n->right));
	}
	if (c < 0) {
		return bal(s, row_ref(n->row), node_ref(n->left), tree_del(s, n->right, k, klen));
	}
	if (n->left == NULL) {
		return node_ref(n->right);
	}
	if (n->right == NULL) {
		return node_ref(n->left);
	}
	right = tree_del_min(s, n->right, &min);
	return bal(s, min, node_ref(n->left), right);
}

/* ---- writes in place --------------------------------------------------------
 *
 * A node only one version reaches (refs == 1 all the way from a root that
 * the writer alone holds) is seen by no reader, snapshot or parent: the
 * writer may change it in place instead of copying it. A write
 * transaction's first write to a table copies the path (the committed
 * root is shared); the writes after it change their own nodes in place
 * and copy only where they reach shared ones. */

/* Balances n, which the caller owns: in place, or by bal() (a rotation)
 * taking n's references. Returns the subtree. */
static struct mem_node *
own_bal(struct st_mem *s, struct mem_node *n)
{
	int hl = height(n->left), hr = height(n->right);
	struct mem_node *out;

	if (hl <= hr + 1 && hr <= hl + 1) {
		n->height = (hl > hr ? hl : hr) + 1;
		return n;
	}
	out = bal(s, n->row, n->left, n->right);
	node_free(s, n);
	return out;
}

/* tree_put() that takes n: in place where the caller alone holds n (and
 * so, below it, wherever refs is 1), a copy from the first shared node
 * down. Takes row too; *gone is the key and value bytes of the row it
 * replaced, or -1 if none. */
static struct mem_node *
put_taking(struct st_mem *s, struct mem_node *n, struct mem_row *row, int64_t *gone)
{
	struct mem_node *out;
	int c;

	if (n == NULL) {
		*gone = -1;
		return mk(s, row, NULL, NULL);
	}
	if (n->refs > 1) {
		const struct mem_row *was;

		out = tree_put(s, n, row, &was);
		*gone = was != NULL ? (int64_t)(was->klen + was->vlen) : -1;
		node_unref(s, n); /* after reading was: it may free it */
		return out;
	}
	c = node_cmp(n, row_key(row), row->klen);
	if (c == 0) {
		*gone = (int64_t)(n->row->klen + n->row->vlen);
		row_unref(n->row);
		n->row = row;
		return n;
	}
	if (c > 0) {
		n->left = put_taking(s, n->left, row, gone);
	} else {
		n->right = put_taking(s, n->right, row, gone);
	}
	return own_bal(s, n);
}

/* tree_del() that takes n, which holds k, the same way. */
static struct mem_node *
del_taking(struct st_mem *s, struct mem_node *n, const void *k, size_t klen)
{
	struct mem_node *out;
	struct mem_row *min;
	int c;

	if (n->refs > 1) {
		out = tree_del(s, n, k, klen);
		node_unref(s, n);
		return out;
	}
	c = node_cmp(n, k, klen);
	if (c > 0) {
		n->left = del_taking(s, n->left, k, klen);
		return own_bal(s, n);
	}
	if (c < 0) {
		n->right = del_taking(s, n->right, k, klen);
		return own_bal(s, n);
	}
	if (n->left == NULL || n->right == NULL) {
		out = n->left != NULL ? n->left : n->right; /* n's reference, handed on */
		row_unref(n->row);
		node_free(s, n);
		return out;
	}
	out = tree_del_min(s, n->right, &min);
	node_unref(s, n->right);
	n->right = out;
	row_unref(n->row);
	n->row = min;
	return own_bal(s, n);
}

/* Searches: the node with k, or the nearest one on the side asked for. */
enum find_op { FIND_EQ, FIND_GE, FIND_GT, FIND_LE, FIND_LT };

static struct mem_node *
tree_find(struct mem_node *n, const void *k, size_t klen, enum find_op op)
{
	struct mem_node *best = NULL;

	while (n != NULL) {
		int c = node_cmp(n, k, klen);

		if (c == 0 && (op == FIND_EQ || op == FIND_GE || op == FIND_LE)) {
			return n;
		}
		if (op == FIND_EQ) {
			n = c > 0 ? n->left : n->right;
		} else if (op == FIND_GE || op == FIND_GT) {
			if (c > 0) {
				best = n;
				n = n->left;
			} else {
				n = n->right;
			}
		} else if (c < 0) {
			best = n;
			n = n->right;
		} else {
			n = n->left;
		}
	}
	return best;
}

static struct mem_node *
tree_edge(struct mem_node *n, bool last)
{
	while (n != NULL && (last ? n->right : n->left) != NULL) {
		n = last ? n->right : n->left;
	}
	return n;
}

/* ---- environment -------------------------------------------------------- */

static void
mem_close(struct storage *st)
{
	struct st_mem *s = mem_from(st);
	struct mem_node *n;

	for (int tb = 0; tb < STORAGE_T__COUNT; tb++) {
		node_unref(s, s->root[tb]);
	}
	while ((n = s->pool) != NULL) {
		s->pool = n->next_free;
		echd_free(n);
	}
	echd_free(s);
}

static int
mem_open(const struct storage_opts *o, struct storage **out)
{
	struct st_mem *s;
	int rc = storage_opts_read(o, "mem", NULL, 0, NULL); /* it has none */

	if (rc != 0) {
		return rc;
	}
	s = echd_calloc(1, sizeof(*s));
	if (s == NULL) {
		return -ENOMEM;
	}
	s->base.ops = &st_mem_ops;
	*out = &s->base;
	return 0;
}

static int
mem_stat(struct storage *st, struct storage_stat *out)
{
	struct st_mem *s = mem_from(st);

	memset(out, 0, sizeof(*out));
	out->used_bytes = s->bytes;
	out->rows = s->rows;
	out->last_txn_id = s->txn_id;
	out->commits = s->commits;
	out->syncs = s->syncs;
	return 0;
}

static int
mem_sync(struct storage *st)
{
	mem_from(st)->syncs++; /* nothing to flush */
	return 0;
}

static int
mem_copy(struct storage *st, const char *dir)
{
	return -ENOTSUP; /* nothing on disk to copy */
}

/* ---- transactions ------------------------------------------------------- */

static int
mem_txn_begin(struct storage *st, struct storage_txn *parent, unsigned flags,
	struct storage_txn **out)
{
	struct st_mem *s = mem_from(st);
	struct mem_txn *p = parent != NULL ? txn_from(parent) : NULL;
	bool rdonly = (flags & STORAGE_TXN_RDONLY) != 0;
	struct mem_node *const *from;
	struct mem_txn *t;

	/* storage.c has checked flags, parent and the writer slot. */
	t = echd_calloc(1, sizeof(*t));
	if (t == NULL) {
		return -ENOMEM;
	}
	t->base.st = st;
	t->rdonly = rdonly;
	t->parent = p;
	from = p != NULL ? p->root : s->root;
	t->bytes = p != NULL ? p->bytes : s->bytes;
	t->rows = p != NULL ? p->rows : s->rows;
	for (int tb = 0; tb < STORAGE_T__COUNT; tb++) {
		t->root[tb] = node_ref(from[tb]);
	}
	*out = &t->base;
	return 0;
}

/* Ends t (its roots already handed on, or to drop) and frees it. Its
 * cursors and child are gone already: storage.c ends them first. */
static void
txn_end(struct mem_txn *t)
{
	struct st_mem *s = mem_from(t->base.st);

	for (int tb = 0; tb < STORAGE_T__COUNT; tb++) {
		node_unref(s, t->root[tb]);
	}
	echd_free(t);
}

static void
mem_txn_abort(struct storage_txn *base)
{
	txn_end(txn_from(base));
}

static int
mem_txn_commit(struct storage_txn *base)
{
	struct mem_txn *t = txn_from(base);
	struct st_mem *s = mem_from(base->st);
	struct mem_node **to;

	if (!t->rdonly) {
		to = t->parent != NULL ? t->parent->root : s->root;
		for (int tb = 0; tb < STORAGE_T__COUNT; tb++) {
			struct mem_node *old = to[tb];

			to[tb] = t->root[tb]; /* the reference moves */
			t->root[tb] = old;    /* and the old one goes in txn_end() */
		}
		if (t->parent != NULL) {
			t->parent->bytes = t->bytes;
			t->parent->rows = t->rows;
		} else {
			s->bytes = t->bytes;
			s->rows = t->rows;
		}
		if (t->parent == NULL) {
			s->commits++;
			s->syncs++;
			s->txn_id++;
		}
	}
	txn_end(t);
	return 0;
}

/* ---- rows --------------------------------------------------------------- */

static bool
key_ok(const struct st_buf *k)
{
	return k->len > 0 && k->len <= STORAGE_KEY_MAX;
}

static int
mem_get(struct storage_txn *base, enum storage_table tb, const struct st_buf *k,
	struct st_buf *v)
{
	struct mem_txn *t = txn_from(base);
	struct mem_node *n;

	assert((unsigned)tb < STORAGE_T__COUNT);
	n = tree_find(t->root[tb], k->data, k->len, FIND_EQ);
	if (n == NULL) {
		return ECHD_ENOTFOUND;
	}
	v->data = n->row->data + n->row->klen;
	v->len = n->row->vlen;
	return 0;
}

/* Replaces t's root of tb with new_root (takes it). */
static int
mem_put(struct storage_txn *base, enum storage_table tb, const struct st_buf *k,
	const struct st_buf *v, unsigned flags)
{
	struct mem_txn *t = txn_from(base);
	struct st_mem *s = mem_from(base->st);
	struct mem_row *row;
	int64_t gone;
	int rc;

	assert((unsigned)tb < STORAGE_T__COUNT);
	if ((flags & ~STORAGE_PUT_APPEND) != 0 || !key_ok(k)) {
		return ECHD_EINVAL;
	}
	if (flags & STORAGE_PUT_APPEND) {
		struct mem_node *last = tree_edge(t->root[tb], true);

		if (last != NULL && node_cmp(last, k->data, k->len) >= 0) {
			return ECHD_EEXIST;
		}
	}
	rc = pool_fill(s);
	if (rc != 0) {
		return rc;
	}
	row = echd_malloc(sizeof(*row) + k->len + v->len);
	if (row == NULL) {
		return -ENOMEM;
	}
	row->refs = 1;
	row->klen = k->len;
	row->vlen = v->len;
	memcpy(row->data, k->data, k->len);
	if (v->len > 0) {
		memcpy(row->data + k->len, v->data, v->len);
	}
	t->root[tb] = put_taking(s, t->root[tb], row, &gone);
	if (gone >= 0) {
		t->bytes -= (uint64_t)gone;
	} else {
		t->rows++;
	}
	t->bytes += k->len + v->len;
	return 0;
}

static int
del_key(struct mem_txn *t, enum storage_table tb, const void *k, size_t klen)
{
	struct st_mem *s = mem_from(t->base.st);
	struct mem_node *old = tree_find(t->root[tb], k, klen, FIND_EQ);
	int rc;

	if (old == NULL) {
		return ECHD_ENOTFOUND;
	}
	rc = pool_fill(s);
	if (rc != 0) {
		return rc;
	}
	t->bytes -= old->row->klen + old->row->vlen;
	t->rows--;
	t->root[tb] = del_taking(s, t->root[tb], k, klen);
	return 0;
}

static int
mem_del(struct storage_txn *base, enum storage_table tb, const struct st_buf *k)
{
	assert((unsigned)tb < STORAGE_T__COUNT);
	return del_key(txn_from(base), tb, k->data, k->len);
}

/* ---- cursors ------------------------------------------------------------ */

static int
mem_cursor_open(struct storage_txn *base, enum storage_table tb, struct storage_cursor **out)
{
	struct mem_cursor *c;

	assert((unsigned)tb < STORAGE_T__COUNT);
	c = echd_calloc(1, sizeof(*c));
	if (c == NULL) {
		return -ENOMEM;
	}
	c->base.txn = base;
	c->tb = tb;
	*out = &c->base;
	return 0;
}

static void
mem_cursor_close(struct storage_cursor *base)
{
	struct mem_cursor *c = cursor_from(base);

	echd_free(c->batch);
	echd_free(c->key);
	echd_free(c);
}

/* Collects into c->batch up to c->ahead nodes after (fwd) or before c's
 * key, nearest first: one descent, then an in-order walk with a stack. */
static int
batch_fill(struct mem_cursor *c, struct mem_node *root, bool fwd)
{
	struct mem_node *stack[TREE_HEIGHT_MAX + 2], *n = root;
	unsigned depth = 0;

	c->nbatch = c->ibatch = 0;
	if (c->batch == NULL) {
		c->batch = echd_malloc(c->ahead * sizeof(*c->batch));
		if (c->batch == NULL) {
			return -ENOMEM;
		}
	}
	while (n != NULL) {
		int cmp = node_cmp(n, c->key, c->klen);

		if (fwd ? cmp > 0 : cmp < 0) {
			stack[depth++] = n;
			n = fwd ? n->left : n->right;
		} else {
			n = fwd ? n->right : n->left;
		}
	}
	while (depth > 0 && c->nbatch < c->ahead) {
		n = stack[--depth];
		c->batch[c->nbatch++] = n;
		for (n = fwd ? n->right : n->left; n != NULL; n = fwd ? n->left : n->right) {
			stack[depth++] = n;
		}
	}
	c->batch_fwd = fwd;
	return 0;
}

/* The node after (fwd) or before c's row: from the batch when there is
 * one, else by a search (filling a batch when c has a hint). */
static struct mem_node *
step(struct mem_cursor *c, struct mem_node *root, bool fwd)
{
	if (c->ahead > 1 && (c->ibatch == c->nbatch || c->batch_fwd != fwd)) {
		if (batch_fill(c, root, fwd) != 0) {
			c->nbatch = 0; /* a hint only: search instead */
		}
	}
	if (c->ibatch < c->nbatch && c->batch_fwd == fwd) {
		return c->batch[c->ibatch++];
	}
	return tree_find(root, c->key, c->klen, fwd ? FIND_GT : FIND_LT);
}

/* Stands c on n, or at the edge miss when n is NULL. */
static int
land(struct mem_cursor *c, struct mem_node *n, enum mem_pos miss, struct st_buf *key,
	struct st_buf *val)
{
	if (n == NULL) {
		c->pos = miss;
		c->nbatch = c->ibatch = 0;
		return ECHD_ENOTFOUND;
	}
	if (n->row->klen > c->kcap) {
		unsigned char *nk = echd_realloc(c->key, n->row->klen);

		if (nk == NULL) {
			c->pos = POS_UNSET;
			c->nbatch = c->ibatch = 0;
			return -ENOMEM;
		}
		c->key = nk;
		c->kcap = n->row->klen;
	}
	memcpy(c->key, row_key(n->row), n->row->klen);
	c->klen = n->row->klen;
	c->pos = POS_ON;
	if (key != NULL) {
		key->data = row_key(n->row);
		key->len = n->row->klen;
	}
	if (val != NULL) {
		val->data = n->row->data + n->row->klen;
		val->len = n->row->vlen;
	}
	return 0;
}

static struct mem_node *
cursor_root(struct mem_cursor *c)
{
	return txn_from(c->base.txn)->root[c->tb];
}

static int
mem_cursor_seek(struct storage_cursor *base, const struct st_buf *k, struct st_buf *key,
	struct st_buf *val)
{
	struct mem_cursor *c = cursor_from(base);
	struct mem_node *root = cursor_root(c);

	c->nbatch = c->ibatch = 0;
	if (k == NULL || k->len == 0) {
		return land(c, tree_edge(root, false), POS_AFTER, key, val);
	}
	return land(c, tree_find(root, k->data, k->len, FIND_GE), POS_AFTER, key, val);
}

static int
mem_cursor_seek_last(struct storage_cursor *base, const struct st_buf *k, struct st_buf *key,
	struct st_buf *val)
{
	struct mem_cursor *c = cursor_from(base);
	struct mem_node *root = cursor_root(c);

	c->nbatch = c->ibatch = 0;
	if (k == NULL) {
		return land(c, tree_edge(root, true), POS_BEFORE, key, val);
	}
	if (k->len == 0) {
		c->pos = POS_BEFORE; /* no key is <= the empty one */
		return ECHD_ENOTFOUND;
	}
	return land(c, tree_find(root, k->data, k->len, FIND_LE), POS_BEFORE, key, val);
}

static int
mem_cursor_next(struct storage_cursor *base, struct st_buf *key, struct st_buf *val)
{
	struct mem_cursor *c = cursor_from(base);
	struct mem_node *root = cursor_root(c);

	if (c->pos != POS_ON) {
		c->nbatch = c->ibatch = 0; /* a batch follows only a row */
	}
	switch (c->pos) {
	case POS_AFTER:
		return ECHD_ENOTFOUND;
	case POS_UNSET:
	case POS_BEFORE:
		return land(c, tree_edge(root, false), POS_AFTER, key, val);
	case POS_ON:
		return land(c, step(c, root, true), POS_AFTER, key, val);
	case POS_DELETED:
		break;
	}
	/* Its key is gone: the first key past it is the next row. */
	return land(c, tree_find(root, c->key, c->klen, FIND_GE), POS_AFTER, key, val);
}

static int
mem_cursor_prev(struct storage_cursor *base, struct st_buf *key, struct st_buf *val)
{
	struct mem_cursor *c = cursor_from(base);
	struct mem_node *root = cursor_root(c);

	if (c->pos != POS_ON) {
		c->nbatch = c->ibatch = 0;
	}
	switch (c->pos) {
	case POS_BEFORE:
		return ECHD_ENOTFOUND;
	case POS_UNSET:
	case POS_AFTER:
		return land(c, tree_edge(root, true), POS_BEFORE, key, val);
	case POS_ON:
		return land(c, step(c, root, false), POS_BEFORE, key, val);
	case POS_DELETED:
		break;
	}
	return land(c, tree_find(root, c->key, c->klen, FIND_LT), POS_BEFORE, key, val);
}

static int
mem_cursor_del(struct storage_cursor *base)
{
	struct mem_cursor *c = cursor_from(base);
	int rc;

	if (c->pos != POS_ON) {
		return ECHD_ENOTFOUND; /* only the row last returned may go */
	}
	rc = del_key(txn_from(base->txn), c->tb, c->key, c->klen);
	if (rc == 0) {
		c->pos = POS_DELETED;
		c->nbatch = c->ibatch = 0; /* the tree changed under the batch */
	}
	return rc;
}

static void
mem_cursor_ahead(struct storage_cursor *base, unsigned rows)
{
	struct mem_cursor *c = cursor_from(base);

	ECHD_FREE(c->batch);
	c->nbatch = c->ibatch = 0;
	c->ahead = rows;
}

const struct storage_ops st_mem_ops = {
	.version = STORAGE_OPS_V2,
	.name = "mem",
	.open = mem_open,
	.close = mem_close,
	.txn_begin = mem_txn_begin,
	.txn_commit = mem_txn_commit,
	.txn_abort = mem_txn_abort,
	.get = mem_get,
	.put = mem_put,
	.del = mem_del,
	.cursor_open = mem_cursor_open,
	.cursor_close = mem_cursor_close,
	.cursor_seek = mem_cursor_seek,
	.cursor_seek_last = mem_cursor_seek_last,
	.cursor_next = mem_cursor_next,
	.cursor_prev = mem_cursor_prev,
	.cursor_del = mem_cursor_del,
	.stat = mem_stat,
	.sync = mem_sync,
	.copy = mem_copy,
	.cursor_ahead = mem_cursor_ahead,
	/* No optional interface (iface NULL): no capacity, no HA (storage.h). */
};
