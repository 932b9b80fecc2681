/* acl.c - users, passwords and permissions: the subset of Redis ACL a
 * broker needs.
 *
 * A user is on or off, has passwords (kept as SHA-256 hex) or nopass,
 * key patterns limiting which streams it may touch, and a set of allowed
 * commands built from categories (+@read, -@admin, ...) and names. The
 * default user takes requirepass. Rules are the ACL SETUSER words, so the
 * aclfile, ACL SETUSER and ACL LIST speak one language.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "broker.h"

struct brk_user {
	char *name;
	bool enabled;
	bool nopass;
	char (*hashes)[65]; /* SHA-256 hex */
	int nhashes;
	char **patterns;    /* key globs; allkeys means "~*" */
	int npatterns;
	bool allkeys;
	char **channels;    /* Pub/Sub channel globs (&rules); allchannels means "&*" */
	int nchannels;
	bool allchannels;
	unsigned char allowed[BRK_MAX_PERMS]; /* by permission slot (brk_perm_of()) */
	char *rules;        /* the command rules as given, for ACL LIST */
	struct brk_user *next;
};

static const char *const categories[] = {"keyspace", "read", "write", "stream", "admin",
	"dangerous", "connection", "fast", "slow", "blocking", "transaction", "pubsub", NULL};

static void
sha256_hex(const void *p, size_t n, char out[65])
{
	unsigned char md[32];
	unsigned int len = 0;

	EVP_Digest(p, n, md, &len, EVP_sha256(), NULL);
	for (int i = 0; i < 32; i++) {
		snprintf(out + 2 * i, 3, "%02x", md[i]);
	}
	out[64] = '\0';
}

static void
strv_free(char **v, int n)
{
	for (int i = 0; i < n; i++) {
		echd_free(v[i]);
	}
	echd_free(v);
}

/* Appends a copy of p[0..len) to *v. */
static int
strv_add(char ***v, int *n, const char *p, size_t len)
{
	char **nv = echd_realloc(*v, (size_t)(*n + 1) * sizeof(*nv));

	if (nv == NULL) {
		return -ENOMEM;
	}
	*v = nv;
	nv[*n] = echd_strndup(p, len);
	if (nv[*n] == NULL) {
		return -ENOMEM;
	}
	(*n)++;
	return 0;
}

static void
user_free(struct brk_user *u)
{
	if (u == NULL) {
		return;
	}
	strv_free(u->patterns, u->npatterns);
	strv_free(u->channels, u->nchannels);
	echd_free(u->hashes);
	echd_free(u->rules);
	echd_free(u->name);
	echd_free(u);
}

struct brk_user *
brk_acl_find(struct brk_server *srv, const char *name, size_t len)
{
	for (struct brk_user *u = srv->users; u != NULL; u = u->next) {
		if (strlen(u->name) == len && memcmp(u->name, name, len) == 0) {
			return u;
		}
	}
	return NULL;
}

static bool
in_category(const char *p, const char *cat, size_t len)
{
	if (len == 3 && strncasecmp(cat, "all", 3) == 0) {
		return true;
	}
	while ((p = strchr(p, '@')) != NULL) {
		size_t l = strcspn(p + 1, " ");
		if (l == len && strncasecmp(p + 1, cat, len) == 0) {
			return true;
		}
		p += 1 + l;
	}
	return false;
}

static bool
known_category(const char *cat, size_t len)
{
	if (len == 3 && strncasecmp(cat, "all", 3) == 0) {
		return true;
	}
	for (int i = 0; categories[i] != NULL; i++) {
		if (strlen(categories[i]) == len && strncasecmp(categories[i], cat, len) == 0) {
			return true;
		}
	}
	return false;
}

static int
add_rule_text(struct brk_user *u, const char *w, size_t len)
{
	size_t old = u->rules ? strlen(u->rules) : 0;
	char *r = echd_realloc(u->rules, old + len + 2);

	if (r == NULL) {
		return -ENOMEM;
	}
	if (old > 0) {
		r[old++] = ' ';
	}
	memcpy(r + old, w, len);
	r[old + len] = '\0';
	u->rules = r;
	return 0;
}

/* Why apply_rule() last refused a word, in Redis' words (single-threaded). */
static const char *rule_why = "Syntax error";
/* Which rule brk_acl_setuser() last refused (its index), or -1. */
static int setuser_bad = -1;

/* "#<hash>" and "!<hash>": 64 lowercase hex digits, as Redis requires. */
static bool
hash_valid(const char *h, size_t len)
{
	if (len != 64) {
		return false;
	}
	for (size_t i = 0; i < len; i++) {
		if (!((h[i] >= '0' && h[i] <= '9') || (h[i] >= 'a' && h[i] <= 'f'))) {
			return false;
		}
	}
	return true;
}

/* Adds a password hash unless the user has it already. */
static int
hash_add(struct brk_user *u, const char *hex)
{
	char(*h)[65];

	for (int i = 0; i < u->nhashes; i++) {
		if (!strcmp(u->hashes[i], hex)) {
			return 0;
		}
	}
	h = echd_realloc(u->hashes, (size_t)(u->nhashes + 1) * sizeof(*h));
	if (h == NULL) {
		return -ENOMEM;
	}
	u->hashes = h;
	memcpy(u->hashes[u->nhashes++], hex, 65);
	u->nopass = false;
	return 0;
}

/* Removes a password hash; returns whether the user had it. */
static bool
hash_remove(struct brk_user *u, const char *hex)
{
	for (int i = 0; i < u->nhashes; i++) {
		if (!strcmp(u->hashes[i], hex)) {
			memmove(&u->hashes[i], &u->hashes[i + 1],
				(size_t)(u->nhashes - i - 1) * sizeof(u->hashes[0]));
			u->nhashes--;
			return true;
		}
	}
	return false;
}

/* Applies one ACL SETUSER word. Returns 0, -ENOMEM, or ECHD_EINVAL (with
 * rule_why set). */
static int
apply_rule(struct brk_user *u, const char *w, size_t len)
{
	size_t n = brk_perm_count();

	rule_why = "Syntax error";
	if (len == 2 && !strncasecmp(w, "on", 2)) {
		u->enabled = true;
	} else if (len == 3 && !strncasecmp(w, "off", 3)) {
		u->enabled = false;
	} else if (len == 6 && !strncasecmp(w, "nopass", 6)) {
		u->nopass = true;
		u->nhashes = 0;
	} else if (len == 9 && !strncasecmp(w, "resetpass", 9)) {
		u->nopass = false;
		u->nhashes = 0;
	} else if (len == 7 && !strncasecmp(w, "allkeys", 7)) {
		u->allkeys = true;
	} else if (len == 9 && !strncasecmp(w, "resetkeys", 9)) {
		for (int i = 0; i < u->npatterns; i++) {
			echd_free(u->patterns[i]);
		}
		u->npatterns = 0;
		u->allkeys = false;
	} else if (len == 11 && !strncasecmp(w, "allcommands", 11)) {
		memset(u->allowed, 1, sizeof(u->allowed));
		ECHD_FREE(u->rules);
		return add_rule_text(u, "+@all", 5);
	} else if (len == 10 && !strncasecmp(w, "nocommands", 10)) {
		memset(u->allowed, 0, sizeof(u->allowed));
		ECHD_FREE(u->rules);
		return add_rule_text(u, "-@all", 5);
	} else if (len == 5 && !strncasecmp(w, "reset", 5)) {
		apply_rule(u, "resetpass", 9);
		apply_rule(u, "resetkeys", 9);
		apply_rule(u, "resetchannels", 13);
		apply_rule(u, "nocommands", 10);
		u->enabled = false;
	} else if ((len == 13 && !strncasecmp(w, "resetchannels", 13)) ||
		   (len == 11 && !strncasecmp(w, "allchannels", 11)) || (len == 2 && w[0] == '&' && w[1] == '*')) {
		strv_free(u->channels, u->nchannels);
		u->channels = NULL;
		u->nchannels = 0;
		u->allchannels = len != 13;
	} else if (len >= 1 && w[0] == '&') {
		if (u->allchannels) {
			rule_why = "Adding a pattern after the * pattern (or the 'allchannels' flag) is "
				   "not valid and does not have any effect. Try 'resetchannels' to start "
				   "with an empty list of channels";
			return ECHD_EINVAL;
		}
		return strv_add(&u->channels, &u->nchannels, w + 1, len - 1);
	} else if ((len == 16 && !strncasecmp(w, "sanitize-payload", 16)) ||
		   (len == 21 && !strncasecmp(w, "skip-sanitize-payload", 21))) {
		/* RESTORE payloads do not exist in echd: the words are accepted
		 * (Redis writes them in every aclfile) and mean nothing here. */
	} else if (len >= 1 && (w[0] == '>' || w[0] == '<' || w[0] == '#' || w[0] == '!')) {
		char hex[65];
		if (w[0] == '>' || w[0] == '<') {
			sha256_hex(w + 1, len - 1, hex);
		} else if (!hash_valid(w + 1, len - 1)) {
			rule_why = "The password hash must be exactly 64 characters and contain "
				   "only lowercase hexadecimal characters";
			return ECHD_EINVAL;
		} else {
			memcpy(hex, w + 1, 64);
			hex[64] = '\0';
		}
		if (w[0] == '>' || w[0] == '#') {
			return hash_add(u, hex);
		}
		if (!hash_remove(u, hex)) {
			rule_why = "The password you are trying to remove from the user does not exist";
			return ECHD_EINVAL;
		}
	} else if (len >= 1 && w[0] == '~') {
		char **np;
		if (len == 2 && w[1] == '*') {
			u->allkeys = true;
			return 0;
		}
		np = echd_realloc(u->patterns, (size_t)(u->npatterns + 1) * sizeof(*np));
		if (np == NULL) {
			return -ENOMEM;
		}
		u->patterns = np;
		u->patterns[u->npatterns] = echd_strndup(w + 1, len - 1);
		if (u->patterns[u->npatterns] == NULL) {
			return -ENOMEM;
		}
		u->npatterns++;
	} else if (len >= 2 && (w[0] == '+' || w[0] == '-')) {
		unsigned char v = w[0] == '+';
		if (len == 5 && !strncasecmp(w + 1, "@all", 4)) {
			/* +@all and -@all say everything: the rules before them are moot */
			return apply_rule(u, v ? "allcommands" : "nocommands", v ? 11 : 10);
		}
		if (w[1] == '@') {
			if (!known_category(w + 2, len - 2)) {
				rule_why = "Unknown command or category name in ACL";
				return ECHD_EINVAL;
			}
			for (size_t i = 0; i < n; i++) {
				const struct brk_cmd *c;
				const struct brk_subcmd *sub;
				brk_perm_at(i, &c, &sub);
				if (in_category(sub != NULL ? sub->acl : c->acl, w + 2, len - 2)) {
					u->allowed[i] = v;
				}
			}
		} else {
			/* "+name" covers the command and every subcommand; "+name|sub"
			 * a subcommand with a permission of its own (acl|whoami) */
			const char *pipe = memchr(w + 1, '|', len - 1);
			size_t bar = pipe != NULL ? (size_t)(pipe - (w + 1)) : len - 1;
			const struct brk_cmd *c = brk_cmd_lookup(w + 1, bar < len - 1 ? bar : len - 1);
			const struct brk_subcmd *sub = NULL;
			bool found = false;
			if (c != NULL && bar < len - 1) {
				struct resp_arg sa = {w + 2 + bar, len - 2 - bar};
				sub = brk_subcmd_find(c, &sa);
				c = sub != NULL && sub->acl != NULL ? c : NULL;
			}
			for (size_t i = 0; c != NULL && i < n; i++) {
				const struct brk_cmd *ic;
				const struct brk_subcmd *isub;
				brk_perm_at(i, &ic, &isub);
				if (ic == c && (sub == NULL || isub == sub)) {
					u->allowed[i] = v;
					found = true;
				}
			}
			if (!found) {
				rule_why = "Unknown command or category name in ACL";
				return ECHD_EINVAL;
			}
		}
		return add_rule_text(u, w, len);
	} else {
		return ECHD_EINVAL;
	}
	return 0;
}

int
brk_acl_setuser(struct brk_server *srv, const char *name, size_t nlen, int nrules,
	const struct resp_arg *rules, char *err, size_t errlen)
{
	struct brk_user *u = brk_acl_find(srv, name, nlen), *fresh = NULL;
	struct brk_user tmp;
	int rc;

	if (u == NULL) {
		fresh = echd_calloc(1, sizeof(*fresh));
		if (fresh == NULL || (fresh->name = echd_strndup(name, nlen)) == NULL) {
			echd_free(fresh);
			return -ENOMEM;
		}
		rc = add_rule_text(fresh, "-@all", 5);
		if (rc != 0) {
			user_free(fresh);
			return rc;
		}
		u = fresh;
	}
	/* Apply to a copy: a bad word leaves the user as it was. */
	tmp = *u;
	tmp.patterns = NULL;
	tmp.channels = NULL;
	tmp.hashes = NULL;
	tmp.rules = NULL;
	tmp.npatterns = tmp.nchannels = tmp.nhashes = 0;
	rc = 0;
	for (int i = 0; i < u->nchannels && rc == 0; i++) {
		rc = strv_add(&tmp.channels, &tmp.nchannels, u->channels[i], strlen(u->channels[i]));
	}
	for (int i = 0; i < u->npatterns && rc == 0; i++) {
		/* a pattern may be as long as a request allows: no fixed buffer */
		size_t pl = strlen(u->patterns[i]);
		char *w = echd_malloc(pl + 2);
		if (w == NULL) {
			rc = -ENOMEM;
			break;
		}
		w[0] = '~';
		memcpy(w + 1, u->patterns[i], pl + 1);
		rc = apply_rule(&tmp, w, pl + 1);
		echd_free(w);
	}
	for (int i = 0; i < u->nhashes && rc == 0; i++) {
		char w[66];
		snprintf(w, sizeof(w), "#%s", u->hashes[i]);
		rc = apply_rule(&tmp, w, 65);
	}
	if (rc == 0 && u->rules) {
		rc = add_rule_text(&tmp, u->rules, strlen(u->rules));
	}
	tmp.nopass = u->nopass;
	setuser_bad = -1;
	for (int i = 0; i < nrules && rc == 0; i++) {
		rc = apply_rule(&tmp, rules[i].p, rules[i].len);
		if (rc == ECHD_EINVAL) {
			setuser_bad = i;
			snprintf(err, errlen, "Error in ACL SETUSER modifier '%.*s': %s",
				(int)rules[i].len, rules[i].p, rule_why);
		}
	}
	if (rc != 0) {
		strv_free(tmp.patterns, tmp.npatterns);
		strv_free(tmp.channels, tmp.nchannels);
		echd_free(tmp.hashes);
		echd_free(tmp.rules);
		user_free(fresh);
		return rc;
	}
	/* commit the copy */
	strv_free(u->patterns, u->npatterns);
	strv_free(u->channels, u->nchannels);
	echd_free(u->hashes);
	echd_free(u->rules);
	tmp.next = u->next;
	*u = tmp;
	if (fresh != NULL) {
		fresh->next = srv->users;
		srv->users = fresh;
	}
	srv->acl_generation++;
	brk_pubsub_acl_changed(srv);
	return 0;
}

int
brk_acl_deluser(struct brk_server *srv, const char *name, size_t len)
{
	for (struct brk_user **pp = &srv->users; *pp != NULL; pp = &(*pp)->next) {
		struct brk_user *u = *pp;
		if (strlen(u->name) == len && memcmp(u->name, name, len) == 0) {
			*pp = u->next;
			/* connections logged in as this user are closed (Redis does) */
			for (struct brk_conn *c = srv->conns; c != NULL; c = c->next) {
				if (c->user == u) {
					c->user = NULL;
					brk_conn_close_asap(c);
				}
			}
			user_free(u);
			srv->acl_generation++;
			return 1;
		}
	}
	return 0;
}

void
brk_acl_finish(struct brk_server *srv)
{
	while (srv->users != NULL) {
		struct brk_user *u = srv->users;
		srv->users = u->next;
		user_free(u);
	}
}

/* The rule that sets requirepass as the default user's password, ">pass"
 * in pw, or "nopass" without one. False if it does not fit, which the
 * bound on an option's value (BRK_CONFIG_VALUE_MAX) rules out. */
static bool
requirepass_rule(const struct brk_server *srv, char *pw, size_t cap, struct resp_arg *out)
{
	int l;

	if (srv->cfg.requirepass == NULL || srv->cfg.requirepass[0] == '\0') {
		*out = (struct resp_arg){"nopass", 6};
		return true;
	}
	l = snprintf(pw, cap, ">%s", srv->cfg.requirepass);
	if (l < 0 || (size_t)l >= cap) {
		return false;
	}
	*out = (struct resp_arg){pw, (size_t)l};
	return true;
}

/* The default user from requirepass: on, ~*, +@all, and the password. */
int
brk_acl_init(struct brk_server *srv, char *err, size_t errlen)
{
	struct resp_arg r[5];
	int n = 0, rc;
	char pw[BRK_CONFIG_LINE_MAX + 1];

	r[n++] = (struct resp_arg){"on", 2};
	r[n++] = (struct resp_arg){"~*", 2};
	r[n++] = (struct resp_arg){"&*", 2};
	r[n++] = (struct resp_arg){"+@all", 5};
	if (!requirepass_rule(srv, pw, sizeof(pw), &r[n++])) {
		snprintf(err, errlen, "requirepass is longer than %d bytes", BRK_CONFIG_LINE_MAX);
		return ECHD_EINVAL;
	}
	rc = brk_acl_setuser(srv, "default", 7, n, r, err, errlen);
	OPENSSL_cleanse(pw, sizeof(pw));
	if (rc == 0 && srv->cfg.aclfile && srv->cfg.aclfile[0]) {
		rc = brk_acl_load(srv, err, errlen);
	}
	return rc;
}

void
brk_acl_requirepass_changed(struct brk_server *srv)
{
	struct resp_arg r[2];
	char pw[BRK_CONFIG_LINE_MAX + 1], err[128];

	r[0] = (struct resp_arg){"resetpass", 9};
	if (!requirepass_rule(srv, pw, sizeof(pw), &r[1])) {
		echd_log(ECHD_LOG_WARNING, "requirepass is too long: the password is unchanged");
		return;
	}
	brk_acl_setuser(srv, "default", 7, 2, r, err, sizeof(err));
	OPENSSL_cleanse(pw, sizeof(pw));
}

bool
brk_acl_nopass_default(struct brk_server *srv)
{
	struct brk_user *u = brk_acl_find(srv, "default", 7);
	return u != NULL && u->enabled && u->nopass;
}

/* Constant-time over the hashes: the compare never stops early. */
static bool
hash_matches(const struct brk_user *u, const char *hex)
{
	bool ok = false;

	for (int i = 0; i < u->nhashes; i++) {
		ok |= CRYPTO_memcmp(u->hashes[i], hex, 64) == 0;
	}
	return ok;
}

struct brk_user *
brk_acl_check(struct brk_server *srv, const char *user, size_t ulen, const char *pass,
	size_t plen)
{
	struct brk_user *u = brk_acl_find(srv, user, ulen);
	char hex[65];
	bool ok;

	sha256_hex(pass, plen, hex);
	if (u == NULL || !u->enabled) {
		OPENSSL_cleanse(hex, sizeof(hex));
		return NULL;
	}
	ok = u->nopass || hash_matches(u, hex);
	OPENSSL_cleanse(hex, sizeof(hex));
	return ok ? u : NULL;
}

struct brk_user *
brk_user_next(const struct brk_user *u)
{
	return u->next;
}

const char *
brk_user_name(const struct brk_user *u)
{
	return u ? u->name : "default";
}

bool
brk_user_enabled(const struct brk_user *u)
{
	return u != NULL && u->enabled;
}

bool
brk_acl_cmd_allowed(const struct brk_user *u, const struct brk_cmd *cmd, int argc,
	const struct resp_arg *argv)
{
	if (u == NULL) {
		return false;
	}
	/* The commands a client may run before it authenticates are never
	 * denied by the rules either (Redis' no-auth flag): a user without
	 * +@connection can still AUTH as someone else, HELLO, RESET and QUIT. */
	if (cmd->flags & BRK_CMD_NOAUTH) {
		return true;
	}
	return u->allowed[brk_perm_of(cmd, argc, argv)];
}

/* The first key of the request that u may not touch (its argv index), or
 * -1 when it may touch them all. The keys are brk_keys_find()'s: every
 * spec the request fits counts, so one it does not fit (a request its
 * handler refuses) drops no key that another names. */
int
brk_acl_denied_key(const struct brk_user *u, const struct brk_cmd *cmd, int argc,
	const struct resp_arg *argv)
{
	struct brk_keys k;

	if (brk_keys_find(cmd, argc, argv, BRK_KEYS_PARTIAL, &k) != 0) {
		return -1; /* not reached: a partial search does not fail */
	}
	for (int j = 0; j < k.n; j++) {
		for (int i = k.r[j].first; i <= k.r[j].last; i += k.r[j].step) {
			if (!brk_acl_key_allowed(u, argv[i].p, argv[i].len)) {
				return i;
			}
		}
	}
	return -1;
}

bool
brk_acl_key_allowed(const struct brk_user *u, const void *key, size_t len)
{
	if (u == NULL) {
		return false;
	}
	if (u->allkeys) {
		return true;
	}
	for (int i = 0; i < u->npatterns; i++) {
		if (brk_glob_match(u->patterns[i], strlen(u->patterns[i]), key, len, false)) {
			return true;
		}
	}
	return false;
}

bool
brk_acl_channel_allowed(const struct brk_user *u, const void *name, size_t len, bool pattern)
{
	if (u == NULL) {
		return false;
	}
	if (u->allchannels) {
		return true;
	}
	for (int i = 0; i < u->nchannels; i++) {
		const char *c = u->channels[i];
		size_t cl = strlen(c);
		/* a pattern must be one of the user's own, word for word: what it
		 * matches cannot be compared with what the user's patterns match */
		if (pattern ? cl == len && memcmp(c, name, len) == 0
			    : brk_glob_match(c, cl, name, len, false)) {
			return true;
		}
	}
	return false;
}

/* The user's channel rules as ACL LIST and GETUSER show them. */
static void
describe_channels(const struct brk_user *u, struct resp_buf *b, bool reset_word)
{
	if (u->allchannels) {
		resp_buf_append(b, "&*", 2);
		return;
	}
	if (reset_word) {
		resp_buf_append(b, "resetchannels", 13);
	}
	for (int i = 0; i < u->nchannels; i++) {
		resp_buf_printf(b, "%s&%s", b->len > 0 ? " " : "", u->channels[i]);
	}
}

/* ACL LIST's line for u; appends to b. */
void
brk_acl_describe(const struct brk_user *u, struct resp_buf *b)
{
	resp_buf_append(b, "user ", 5);
	resp_buf_append(b, u->name, strlen(u->name));
	resp_buf_append(b, u->enabled ? " on" : " off", u->enabled ? 3 : 4);
	if (u->nopass) {
		resp_buf_append(b, " nopass", 7);
	}
	for (int i = 0; i < u->nhashes; i++) {
		resp_buf_append(b, " #", 2);
		resp_buf_append(b, u->hashes[i], 64);
	}
	if (u->allkeys) {
		resp_buf_append(b, " ~*", 3);
	}
	for (int i = 0; i < u->npatterns; i++) {
		resp_buf_append(b, " ~", 2);
		resp_buf_append(b, u->patterns[i], strlen(u->patterns[i]));
	}
	resp_buf_append(b, " ", 1);
	describe_channels(u, b, true);
	if (u->rules) {
		resp_buf_append(b, " ", 1);
		resp_buf_append(b, u->rules, strlen(u->rules));
	}
}

void
brk_acl_getuser_reply(struct resp_writer *w, const struct brk_user *u)
{
	struct resp_buf keys;

	resp_add_map(w, 6);
	resp_add_bulk_cstr(w, "flags");
	resp_add_array(w, u->nopass ? 2 : 1);
	resp_add_bulk_cstr(w, u->enabled ? "on" : "off");
	if (u->nopass) {
		resp_add_bulk_cstr(w, "nopass");
	}
	resp_add_bulk_cstr(w, "passwords");
	resp_add_array(w, (size_t)u->nhashes);
	for (int i = 0; i < u->nhashes; i++) {
		resp_add_bulk(w, u->hashes[i], 64);
	}
	resp_add_bulk_cstr(w, "commands");
	resp_add_bulk_cstr(w, u->rules != NULL ? u->rules : "-@all");
	resp_buf_init(&keys);
	if (u->allkeys) {
		resp_buf_append(&keys, "~*", 2);
	}
	for (int i = 0; i < u->npatterns; i++) {
		resp_buf_printf(&keys, "%s~%s", keys.len > 0 ? " " : "", u->patterns[i]);
	}
	resp_add_bulk_cstr(w, "keys");
	resp_add_bulk(w, keys.oom ? "" : keys.data, keys.oom ? 0 : keys.len);
	resp_buf_finish(&keys);
	resp_buf_init(&keys);
	describe_channels(u, &keys, false);
	resp_add_bulk_cstr(w, "channels");
	resp_add_bulk(w, keys.oom ? "" : keys.data, keys.oom ? 0 : keys.len);
	resp_buf_finish(&keys);
	resp_add_bulk_cstr(w, "selectors");
	resp_add_array(w, 0);
}

/* Splits a line into words on blanks (ACL rules have no quoting). */
static int
words(char *line, struct resp_arg *w, int max)
{
	int n = 0;
	char *save = NULL;

	for (char *p = strtok_r(line, " \t\r\n", &save); p && n < max;
		p = strtok_r(NULL, " \t\r\n", &save)) {
		w[n].p = p;
		w[n].len = strlen(p);
		n++;
	}
	return n;
}

#define ACL_LOAD_REFUSED \
	"WARNING: ACL errors detected, no change to the previously active ACL rules was performed"

int
brk_acl_load(struct brk_server *srv, char *err, size_t errlen)
{
	FILE *f;
	char line[8192];
	int lineno = 0, rc = 0;
	struct brk_user *old = srv->users, *keep_default = NULL;

	if (srv->cfg.aclfile == NULL || srv->cfg.aclfile[0] == '\0') {
		snprintf(err, errlen, "This Redis instance is not configured to use an ACL file. "
				      "You may want to specify users via the ACL SETUSER command and "
				      "then issue a CONFIG REWRITE (assuming you have a Redis "
				      "configuration file set) in order to store users in the Redis "
				      "configuration.");
		return ECHD_EINVAL;
	}
	f = fopen(srv->cfg.aclfile, "r");
	if (f == NULL) {
		if (errno == ENOENT && old != NULL && srv->users_loaded == 0) {
			return 0; /* no file yet at start: ACL SAVE will make it */
		}
		snprintf(err, errlen, "Error loading ACLs, opening file '%s': %s",
			srv->cfg.aclfile, strerror(errno));
		return -errno;
	}
	/* Build the new set aside; swap only if every line is good. */
	srv->users = NULL;
	while (rc == 0 && fgets(line, sizeof(line), f) != NULL) {
		struct resp_arg w[256];
		char sub[256];
		int n;

		lineno++;
		n = words(line, w, 256);
		if (n == 0 || w[0].p[0] == '#') {
			continue;
		}
		/* the errors are worded as Redis words them */
		if (n < 2 || w[0].len != 4 || strncmp(w[0].p, "user", 4) != 0) {
			snprintf(err, errlen, "%s:%d should start with user keyword followed by the "
					      "username. " ACL_LOAD_REFUSED, srv->cfg.aclfile, lineno);
			rc = ECHD_EINVAL;
			break;
		}
		rc = brk_acl_setuser(srv, w[1].p, w[1].len, n - 2, w + 2, sub, sizeof(sub));
		if (rc == ECHD_EINVAL && setuser_bad >= 0) {
			snprintf(err, errlen, "%s:%d: Error in applying operation '%.*s': %s. "
					      ACL_LOAD_REFUSED, srv->cfg.aclfile, lineno,
				(int)w[2 + setuser_bad].len, w[2 + setuser_bad].p, rule_why);
		} else if (rc != 0) {
			snprintf(err, errlen, "%s:%d: %s. " ACL_LOAD_REFUSED, srv->cfg.aclfile, lineno,
				sub);
		}
	}
	fclose(f);
	if (rc != 0) {
		brk_acl_finish(srv);
		srv->users = old;
		return rc;
	}
	if (brk_acl_find(srv, "default", 7) == NULL) {
		/* the file does not mention default: keep the one we had */
		struct brk_user **pp;
		for (pp = &old; *pp != NULL; pp = &(*pp)->next) {
			if (!strcmp((*pp)->name, "default")) {
				keep_default = *pp;
				*pp = keep_default->next;
				keep_default->next = srv->users;
				srv->users = keep_default;
				break;
			}
		}
	}
	/* connections keep their login only if their user still exists */
	for (struct brk_conn *c = srv->conns; c != NULL; c = c->next) {
		if (c->user != NULL) {
			struct brk_user *nu = brk_acl_find(srv, c->user->name, strlen(c->user->name));
			if (nu == NULL) {
				brk_conn_close_asap(c);
			}
			c->user = nu;
		}
	}
	while (old != NULL) {
		struct brk_user *u = old;
		old = u->next;
		user_free(u);
	}
	srv->users_loaded++;
	srv->acl_generation++;
	return 0;
}

int
brk_acl_save(struct brk_server *srv, char *err, size_t errlen)
{
	char tmp[4200];
	FILE *f;
	int rc = 0;

	if (srv->cfg.aclfile == NULL || srv->cfg.aclfile[0] == '\0') {
		snprintf(err, errlen, "This Redis instance is not configured to use an ACL file. "
				      "You may want to specify users via the ACL SETUSER command and "
				      "then issue a CONFIG REWRITE (assuming you have a Redis "
				      "configuration file set) in order to store users in the Redis "
				      "configuration.");
		return ECHD_EINVAL;
	}
	snprintf(tmp, sizeof(tmp), "%s.tmp", srv->cfg.aclfile);
	f = fopen(tmp, "w");
	if (f == NULL) {
		snprintf(err, errlen, "There was an error trying to save the ACLs. Please check "
				      "the server logs for more information");
		echd_log(ECHD_LOG_WARNING, "ACL SAVE: cannot open %s: %s", tmp, strerror(errno));
		return -errno;
	}
	for (struct brk_user *u = srv->users; u != NULL && rc == 0; u = u->next) {
		struct resp_buf b;
		resp_buf_init(&b);
		brk_acl_describe(u, &b);
		if (b.oom) {
			/* a cut-off line would save a user without its rules */
			rc = -ENOMEM;
		} else {
			fprintf(f, "%.*s\n", (int)b.len, b.data ? b.data : "");
		}
		resp_buf_finish(&b);
	}
	/* write, flush and rename: the file is replaced whole or not at all */
	if (rc == 0 && (fflush(f) != 0 || fsync(fileno(f)) != 0)) {
		rc = -errno;
	}
	if (fclose(f) != 0 && rc == 0) {
		rc = -errno;
	}
	if (rc == 0 && rename(tmp, srv->cfg.aclfile) != 0) {
		rc = -errno;
	}
	if (rc != 0) {
		unlink(tmp);
		snprintf(err, errlen, "There was an error trying to save the ACLs. Please check "
				      "the server logs for more information");
		echd_log(ECHD_LOG_WARNING, "ACL SAVE: writing %s: %s", srv->cfg.aclfile,
			strerror(-rc));
		return rc;
	}
	return 0;
}

int
brk_acl_categories(const char *const **out)
{
	*out = categories;
	return 0;
}

bool
brk_acl_in_category(const char *acl, const char *cat, size_t len)
{
	return in_category(acl, cat, len);
}

bool
brk_acl_known_category(const char *cat, size_t len)
{
	return known_category(cat, len);
}
