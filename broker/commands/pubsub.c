/* pubsub.c - Pub/Sub: channels, patterns and shard channels, and the
 * messages PUBLISH hands to their subscribers.
 *
 * Nothing here is stored. A message goes to the clients subscribed when it
 * is published and is then gone: the streams are the durable path. Like a
 * reply, a message waits in each subscriber's output until the end of the
 * loop turn, so it leaves after the commit of the turn it was published in
 * (Redis sends it after its AOF flush). A slow subscriber is closed by the
 * pubsub class of client-output-buffer-limit, and the slowest of all when
 * their output together passes maxmemory-clients (evict.c), never kept at
 * the server's expense.
 *
 * The server keeps three tables (channels, patterns, shard channels), each
 * mapping a name to its subscribers in the order they came; a connection
 * keeps the entries it is in, so that it can leave them all at RESET or when
 * it closes. echd is one shard: SSUBSCRIBE and SPUBLISH work as in a
 * Redis without cluster mode.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "broker.h"

enum { KIND_CHANNEL, KIND_PATTERN, KIND_SHARD, NKINDS };

/* A channel, pattern or shard channel with at least one subscriber. */
struct chan {
	char *name; /* owned */
	size_t len;
	struct brk_conn **subs; /* in subscription order */
	int nsubs, cap;
	struct chan *hnext;
};

struct table {
	struct chan **b;
	size_t size, count;
};

struct brk_pubsub {
	struct table tab[NKINDS];
};

/* What one connection is subscribed to, by kind, in subscription order. */
struct brk_psub {
	struct chan **in[NKINDS];
	int n[NKINDS], cap[NKINDS];
};

static const char *const sub_word[NKINDS] = {"subscribe", "psubscribe", "ssubscribe"};
static const char *const unsub_word[NKINDS] = {"unsubscribe", "punsubscribe", "sunsubscribe"};

/* ------------------------------------------------------------------------
 * Tables
 * ---------------------------------------------------------------------- */

static size_t
name_hash(const char *p, size_t len)
{
	size_t h = 14695981039346656037ull;

	for (size_t i = 0; i < len; i++) {
		h = (h ^ (unsigned char)p[i]) * 1099511628211ull;
	}
	return h;
}

static struct chan *
tab_find(const struct table *t, const char *name, size_t len)
{
	if (t->size == 0) {
		return NULL;
	}
	for (struct chan *ch = t->b[name_hash(name, len) & (t->size - 1)]; ch != NULL;
		ch = ch->hnext) {
		if (ch->len == len && memcmp(ch->name, name, len) == 0) {
			return ch;
		}
	}
	return NULL;
}

static int
tab_grow(struct table *t)
{
	size_t nsize = t->size ? t->size * 2 : 64;
	struct chan **nb = echd_calloc(nsize, sizeof(*nb));

	if (nb == NULL) {
		return -ENOMEM;
	}
	for (size_t i = 0; i < t->size; i++) {
		struct chan *ch = t->b[i], *next;
		for (; ch != NULL; ch = next) {
			size_t h = name_hash(ch->name, ch->len) & (nsize - 1);
			next = ch->hnext;
			ch->hnext = nb[h];
			nb[h] = ch;
		}
	}
	echd_free(t->b);
	t->b = nb;
	t->size = nsize;
	return 0;
}

/* The entry for name, made when there is none. NULL: out of memory. */
static struct chan *
tab_get(struct table *t, const char *name, size_t len)
{
	struct chan *ch = tab_find(t, name, len);
	size_t h;

	if (ch != NULL) {
		return ch;
	}
	if (t->count >= t->size && tab_grow(t) != 0) {
		return NULL;
	}
	ch = echd_calloc(1, sizeof(*ch));
	if (ch == NULL) {
		return NULL;
	}
	ch->name = echd_malloc(len + 1);
	if (ch->name == NULL) {
		echd_free(ch);
		return NULL;
	}
	memcpy(ch->name, name, len);
	ch->name[len] = '\0';
	ch->len = len;
	h = name_hash(name, len) & (t->size - 1);
	ch->hnext = t->b[h];
	t->b[h] = ch;
	t->count++;
	return ch;
}

/* Frees ch, whose last subscriber left. */
static void
tab_drop(struct table *t, struct chan *ch)
{
	struct chan **pp = &t->b[name_hash(ch->name, ch->len) & (t->size - 1)];

	while (*pp != ch) {
		pp = &(*pp)->hnext;
	}
	*pp = ch->hnext;
	t->count--;
	echd_free(ch->subs);
	echd_free(ch->name);
	echd_free(ch);
}

static void
tab_finish(struct table *t)
{
	for (size_t i = 0; i < t->size; i++) {
		struct chan *ch = t->b[i], *next;
		for (; ch != NULL; ch = next) {
			next = ch->hnext;
			echd_free(ch->subs);
			echd_free(ch->name);
			echd_free(ch);
		}
	}
	echd_free(t->b);
	memset(t, 0, sizeof(*t));
}

/* ------------------------------------------------------------------------
 * Subscriptions
 * ---------------------------------------------------------------------- */

static struct brk_pubsub *
pubsub_of(struct brk_server *srv)
{
	if (srv->pubsub == NULL) {
		srv->pubsub = echd_calloc(1, sizeof(*srv->pubsub));
	}
	return srv->pubsub;
}

/* Grows the array *a of *cap pointers to hold one more. */
static int
ptrs_reserve(void *a, int n, int *cap)
{
	void **p = *(void ***)a;
	int ncap;

	if (n < *cap) {
		return 0;
	}
	ncap = *cap ? *cap * 2 : 4;
	p = echd_realloc(p, (size_t)ncap * sizeof(*p));
	if (p == NULL) {
		return -ENOMEM;
	}
	*(void ***)a = p;
	*cap = ncap;
	return 0;
}

static int
sub_count(const struct brk_conn *c)
{
	const struct brk_psub *ps = c->psub;

	return ps == NULL ? 0 : ps->n[KIND_CHANNEL] + ps->n[KIND_PATTERN];
}

/* The count a (un)subscribe reply of kind shows: shard channels are counted
 * apart from the others, as in Redis. */
static int
reply_count(const struct brk_conn *c, int kind)
{
	if (kind == KIND_SHARD) {
		return c->psub == NULL ? 0 : c->psub->n[KIND_SHARD];
	}
	return sub_count(c);
}

int
brk_pubsub_subscriptions(const struct brk_conn *c)
{
	return c->psub == NULL ? 0 : sub_count(c) + c->psub->n[KIND_SHARD];
}

void
brk_pubsub_counts(const struct brk_conn *c, int *channels, int *patterns, int *shard)
{
	const struct brk_psub *ps = c->psub;

	*channels = ps ? ps->n[KIND_CHANNEL] : 0;
	*patterns = ps ? ps->n[KIND_PATTERN] : 0;
	*shard = ps ? ps->n[KIND_SHARD] : 0;
}

void
brk_pubsub_stats(struct brk_server *srv, uint64_t *channels, uint64_t *patterns,
	uint64_t *shard)
{
	const struct brk_pubsub *p = srv->pubsub;

	*channels = p ? p->tab[KIND_CHANNEL].count : 0;
	*patterns = p ? p->tab[KIND_PATTERN].count : 0;
	*shard = p ? p->tab[KIND_SHARD].count : 0;
}

/* Subscribes c to name. Returns 1 when new, 0 when c already was, or
 * -ENOMEM (nothing changed). */
static int
sub_add(struct brk_conn *c, int kind, const char *name, size_t len)
{
	struct brk_pubsub *p = pubsub_of(c->srv);
	struct table *t;
	struct chan *ch;
	struct brk_psub *ps;

	if (p == NULL) {
		return -ENOMEM;
	}
	if (c->psub == NULL && (c->psub = echd_calloc(1, sizeof(*c->psub))) == NULL) {
		return -ENOMEM;
	}
	ps = c->psub;
	t = &p->tab[kind];
	ch = tab_find(t, name, len);
	if (ch != NULL) {
		for (int i = 0; i < ps->n[kind]; i++) {
			if (ps->in[kind][i] == ch) {
				return 0;
			}
		}
	}
	if (ptrs_reserve(&ps->in[kind], ps->n[kind], &ps->cap[kind]) != 0) {
		return -ENOMEM;
	}
	ch = tab_get(t, name, len);
	if (ch == NULL) {
		return -ENOMEM;
	}
	if (ptrs_reserve(&ch->subs, ch->nsubs, &ch->cap) != 0) {
		if (ch->nsubs == 0) {
			tab_drop(t, ch);
		}
		return -ENOMEM;
	}
	ch->subs[ch->nsubs++] = c;
	ps->in[kind][ps->n[kind]++] = ch;
	return 1;
}

/* Takes c off the i-th entry of kind it is in. */
static void
sub_remove_at(struct brk_conn *c, int kind, int i)
{
	struct brk_psub *ps = c->psub;
	struct chan *ch = ps->in[kind][i];
	struct table *t = &c->srv->pubsub->tab[kind];

	memmove(&ps->in[kind][i], &ps->in[kind][i + 1],
		(size_t)(ps->n[kind] - i - 1) * sizeof(ps->in[kind][0]));
	ps->n[kind]--;
	for (int j = 0; j < ch->nsubs; j++) {
		if (ch->subs[j] == c) {
			memmove(&ch->subs[j], &ch->subs[j + 1],
				(size_t)(ch->nsubs - j - 1) * sizeof(ch->subs[0]));
			ch->nsubs--;
			break;
		}
	}
	if (ch->nsubs == 0) {
		tab_drop(t, ch);
	}
}

/* The index in c's list of kind of the entry named name, or -1. */
static int
sub_index(const struct brk_conn *c, int kind, const char *name, size_t len)
{
	const struct brk_psub *ps = c->psub;

	for (int i = 0; ps != NULL && i < ps->n[kind]; i++) {
		if (ps->in[kind][i]->len == len && memcmp(ps->in[kind][i]->name, name, len) == 0) {
			return i;
		}
	}
	return -1;
}

/* Writes one (un)subscribe confirmation: [word, name or null, count]. */
static void
add_confirm(struct resp_writer *w, const char *word, const char *name, size_t len, bool null,
	int count)
{
	resp_add_push(w, 3);
	resp_add_bulk_cstr(w, word);
	if (null) {
		resp_add_null(w);
	} else {
		resp_add_bulk(w, name, len);
	}
	resp_add_int(w, count);
}

void
brk_pubsub_leave_all(struct brk_conn *c)
{
	struct brk_psub *ps = c->psub;

	if (ps == NULL) {
		return;
	}
	for (int kind = 0; kind < NKINDS; kind++) {
		while (ps->n[kind] > 0) {
			sub_remove_at(c, kind, ps->n[kind] - 1);
		}
		echd_free(ps->in[kind]);
	}
	echd_free(ps);
	c->psub = NULL;
}

void
brk_pubsub_finish(struct brk_server *srv)
{
	if (srv->pubsub == NULL) {
		return;
	}
	for (int kind = 0; kind < NKINDS; kind++) {
		tab_finish(&srv->pubsub->tab[kind]);
	}
	ECHD_FREE(srv->pubsub);
}

/* ------------------------------------------------------------------------
 * Commands
 * ---------------------------------------------------------------------- */

static int
subscribe(struct brk_ctx *x, int kind)
{
	for (int i = 1; i < x->argc; i++) {
		int rc = sub_add(x->c, kind, x->argv[i].p, x->argv[i].len);
		if (rc < 0) {
			return rc;
		}
		add_confirm(x->w, sub_word[kind], x->argv[i].p, x->argv[i].len, false,
			reply_count(x->c, kind));
	}
	return 0;
}

static int
unsubscribe(struct brk_ctx *x, int kind)
{
	struct brk_conn *c = x->c;

	if (x->argc == 1) {
		/* all of them, in the order they were subscribed; none: one
		 * confirmation with a null name */
		if (c->psub == NULL || c->psub->n[kind] == 0) {
			add_confirm(x->w, unsub_word[kind], NULL, 0, true, reply_count(c, kind));
			return 0;
		}
		while (c->psub->n[kind] > 0) {
			struct chan *ch = c->psub->in[kind][0];
			/* the name is needed after the entry may be freed */
			resp_add_push(x->w, 3);
			resp_add_bulk_cstr(x->w, unsub_word[kind]);
			resp_add_bulk(x->w, ch->name, ch->len);
			sub_remove_at(c, kind, 0);
			resp_add_int(x->w, reply_count(c, kind));
		}
		return 0;
	}
	for (int i = 1; i < x->argc; i++) {
		int at = sub_index(c, kind, x->argv[i].p, x->argv[i].len);
		if (at >= 0) {
			sub_remove_at(c, kind, at);
		}
		add_confirm(x->w, unsub_word[kind], x->argv[i].p, x->argv[i].len, false,
			reply_count(c, kind));
	}
	return 0;
}

int
brk_cmd_subscribe(struct brk_ctx *x)
{
	return subscribe(x, KIND_CHANNEL);
}

int
brk_cmd_psubscribe(struct brk_ctx *x)
{
	return subscribe(x, KIND_PATTERN);
}

int
brk_cmd_ssubscribe(struct brk_ctx *x)
{
	return subscribe(x, KIND_SHARD);
}

int
brk_cmd_unsubscribe(struct brk_ctx *x)
{
	return unsubscribe(x, KIND_CHANNEL);
}

int
brk_cmd_punsubscribe(struct brk_ctx *x)
{
	return unsubscribe(x, KIND_PATTERN);
}

int
brk_cmd_sunsubscribe(struct brk_ctx *x)
{
	return unsubscribe(x, KIND_SHARD);
}

/* Queues one message in subscriber s's output, behind its replies of this
 * turn. pattern: NULL for a channel or shard message. */
static void
deliver(struct brk_conn *s, const char *word, const struct chan *pattern,
	const struct resp_arg *channel, const struct resp_arg *msg)
{
	if (s->flags & (BRK_CONN_CLOSING | BRK_CONN_FAILED)) {
		return;
	}
	/* bounded by the pubsub class: past its hard limit the message is
	 * dropped whole and the client closed (conn.c) */
	s->out.limit = brk_conn_obuf_hard(s);
	resp_add_push(&s->w, pattern != NULL ? 4 : 3);
	resp_add_bulk_cstr(&s->w, word);
	if (pattern != NULL) {
		resp_add_bulk(&s->w, pattern->name, pattern->len);
	}
	resp_add_bulk(&s->w, channel->p, channel->len);
	resp_add_bulk(&s->w, msg->p, msg->len);
	brk_conn_mark_held(s);
	brk_evict_note(s); /* maxmemory-clients: may close the biggest (s or another) */
}

/* Sends msg to the subscribers of channel, then to those of each matching
 * pattern (one message per pattern a client has), as Redis does. Returns
 * how many messages were queued. */
static long long
publish(struct brk_server *srv, int kind, const struct resp_arg *channel,
	const struct resp_arg *msg)
{
	struct brk_pubsub *p = srv->pubsub;
	const struct table *pt;
	struct chan *ch;
	long long n = 0;

	if (p == NULL) {
		return 0;
	}
	ch = tab_find(&p->tab[kind], channel->p, channel->len);
	for (int i = 0; ch != NULL && i < ch->nsubs; i++) {
		deliver(ch->subs[i], kind == KIND_SHARD ? "smessage" : "message", NULL, channel, msg);
		n++;
	}
	if (kind == KIND_SHARD) {
		return n;
	}
	pt = &p->tab[KIND_PATTERN];
	for (size_t b = 0; b < pt->size; b++) {
		for (struct chan *pat = pt->b[b]; pat != NULL; pat = pat->hnext) {
			if (!brk_glob_match(pat->name, pat->len, channel->p, channel->len, false)) {
				continue;
			}
			for (int i = 0; i < pat->nsubs; i++) {
				deliver(pat->subs[i], "pmessage", pat, channel, msg);
				n++;
			}
		}
	}
	return n;
}

long long
brk_pubsub_publish(struct brk_server *srv, const char *channel, const char *msg)
{
	struct resp_arg ch = {.p = channel, .len = strlen(channel)};
	struct resp_arg m = {.p = msg, .len = strlen(msg)};

	return publish(srv, KIND_CHANNEL, &ch, &m);
}

int
brk_cmd_publish(struct brk_ctx *x)
{
	resp_add_int(x->w, publish(x->srv, KIND_CHANNEL, &x->argv[1], &x->argv[2]));
	return 0;
}

int
brk_cmd_spublish(struct brk_ctx *x)
{
	resp_add_int(x->w, publish(x->srv, KIND_SHARD, &x->argv[1], &x->argv[2]));
	return 0;
}

static const char *const pubsub_help[] = {
	"PUBSUB <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
	"CHANNELS [<pattern>]",
	"    Return the currently active channels matching a <pattern> (default: '*').",
	"NUMPAT",
	"    Return number of subscriptions to patterns.",
	"NUMSUB [<channel> ...]",
	"    Return the number of subscribers for the specified channels, excluding",
	"    pattern subscriptions(default: no channels).",
	"SHARDCHANNELS [<pattern>]",
	"    Return the currently active shard level channels matching a <pattern> (default: '*').",
	"SHARDNUMSUB [<shardchannel> ...]",
	"    Return the number of subscribers for the specified shard level channel(s)",
	"HELP",
	"    Prints this help.",
};

/* PUBSUB CHANNELS / SHARDCHANNELS [pattern]: the names with subscribers. */
static void
list_channels(struct brk_ctx *x, const struct table *t)
{
	const struct resp_arg *pat = x->argc == 3 ? &x->argv[2] : NULL;
	size_t n = 0;

	for (int pass = 0; pass < 2; pass++) {
		if (pass == 1) {
			resp_add_array(x->w, n);
		}
		for (size_t b = 0; b < t->size; b++) {
			for (const struct chan *ch = t->b[b]; ch != NULL; ch = ch->hnext) {
				if (pat != NULL &&
					!brk_glob_match(pat->p, pat->len, ch->name, ch->len, false)) {
					continue;
				}
				if (pass == 0) {
					n++;
				} else {
					resp_add_bulk(x->w, ch->name, ch->len);
				}
			}
		}
	}
}

/* PUBSUB NUMSUB / SHARDNUMSUB [channel ...]: name, count pairs, flat in
 * RESP3 too, as Redis replies them. */
static void
count_subscribers(struct brk_ctx *x, const struct table *t)
{
	resp_add_array(x->w, 2 * (size_t)(x->argc - 2));
	for (int i = 2; i < x->argc; i++) {
		const struct chan *ch = tab_find(t, x->argv[i].p, x->argv[i].len);
		resp_add_bulk(x->w, x->argv[i].p, x->argv[i].len);
		resp_add_int(x->w, ch != NULL ? ch->nsubs : 0);
	}
}

int
brk_cmd_pubsub(struct brk_ctx *x)
{
	static const struct table none;
	const struct brk_pubsub *p = x->srv->pubsub;
	const struct table *chans = p ? &p->tab[KIND_CHANNEL] : &none;
	const struct table *shard = p ? &p->tab[KIND_SHARD] : &none;
	const struct resp_arg *sub = &x->argv[1];

	if ((brk_arg_eq(sub, "CHANNELS") || brk_arg_eq(sub, "SHARDCHANNELS")) && x->argc > 3) {
		brk_reply_subcommand_syntax(x, "PUBSUB");
	} else if (brk_arg_eq(sub, "HELP")) {
		BRK_REPLY_HELP(x->w, pubsub_help);
	} else if (brk_arg_eq(sub, "CHANNELS")) {
		list_channels(x, chans);
	} else if (brk_arg_eq(sub, "SHARDCHANNELS")) {
		list_channels(x, shard);
	} else if (brk_arg_eq(sub, "NUMSUB")) {
		count_subscribers(x, chans);
	} else if (brk_arg_eq(sub, "SHARDNUMSUB")) {
		count_subscribers(x, shard);
	} else {
		/* NUMPAT: the subcommand table let nothing else through */
		resp_add_int(x->w, p ? (long long)p->tab[KIND_PATTERN].count : 0);
	}
	return 0;
}

/* ------------------------------------------------------------------------
 * ACL
 * ---------------------------------------------------------------------- */

int
brk_pubsub_denied_channel(const struct brk_user *u, const struct brk_cmd *cmd, int argc,
	const struct resp_arg *argv)
{
	int last = (cmd->flags & BRK_CMD_CHAN_FIRST) ? 1 : argc - 1;
	bool pattern = (cmd->flags & BRK_CMD_CHAN_PATTERN) != 0;

	if (!(cmd->flags & (BRK_CMD_CHAN_FIRST | BRK_CMD_CHAN_ALL))) {
		return -1;
	}
	for (int i = 1; i <= last && i < argc; i++) {
		if (!brk_acl_channel_allowed(u, argv[i].p, argv[i].len, pattern)) {
			return i;
		}
	}
	return -1;
}

void
brk_pubsub_acl_changed(struct brk_server *srv)
{
	for (struct brk_conn *c = srv->conns; c != NULL; c = c->next) {
		const struct brk_psub *ps = c->psub;
		bool ok = true;
		if (ps == NULL || c->user == NULL || (c->flags & BRK_CONN_CLOSING)) {
			continue;
		}
		for (int kind = 0; kind < NKINDS && ok; kind++) {
			for (int i = 0; i < ps->n[kind] && ok; i++) {
				ok = brk_acl_channel_allowed(c->user, ps->in[kind][i]->name,
					ps->in[kind][i]->len, kind == KIND_PATTERN);
			}
		}
		if (!ok) {
			/* Redis closes such a client: it would go on hearing
			 * what it may no longer */
			echd_log(ECHD_LOG_NOTICE,
				"client id=%llu addr=%s closed: its user may no longer use a "
				"channel it is subscribed to",
				(unsigned long long)c->id, c->addr);
			brk_conn_close_asap(c);
		}
	}
}
