/* test_pg.c - the postgres backend's own behaviour (st_pg.c): what comes
 * back from PostgreSQL after a reopen, what a commit leaves there, active
 * and standby front ends, fencing, a killed session and a round trip that
 * takes too long. The contract suites run on it too (test_storage.c with
 * ECHD_TEST_BACKEND=postgres).
 *
 * Needs a real server: ECHD_TEST_PG_URL, set by tests/helpers/pgtmp.py
 * (meson runs this under it). Each test works in its own schema and checks
 * PostgreSQL's side through a connection of its own.
 */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "echd.h"
#include "engines/st_pg_cache.h"
#include "engines/st_pg_test.h"
#include "storage.h"
#include "unit_assert.h"
#include "unit_opts.h"

static const char *pg_url;

/* ---- helpers -------------------------------------------------------------- */

static int64_t
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static struct storage_opts
opts(const char *schema, int port, unsigned timeout_ms)
{
	struct storage_opts o = {0};

	opt_clear(&o);
	opt_str(&o, "postgres.url", pg_url);
	opt_str(&o, "postgres.schema", schema);
	opt_str(&o, "postgres.ha-name", "echd");
	opt_str(&o, "postgres.announce-host", "127.0.0.1");
	opt_u64(&o, "postgres.announce-port", (uint64_t)port);
	opt_u64(&o, "postgres.timeout-ms", timeout_ms);
	return o;
}

static struct storage *
open_pg(const char *schema, int port)
{
	struct storage_opts o = opts(schema, port, 0);
	struct storage *st;

	OK(storage_open("postgres", &o, &st));
	return st;
}

/* A connection of the test's own, to look at PostgreSQL's side. */
static PGconn *
side(void)
{
	const char *keys[] = {"dbname", "application_name", NULL};
	const char *vals[] = {pg_url, "echd-test", NULL};
	PGconn *c = PQconnectdbParams(keys, vals, 1);

	ck_assert_msg(PQstatus(c) == CONNECTION_OK, "side connection: %s", PQerrorMessage(c));
	return c;
}

static void
sql_ok(PGconn *c, const char *sql)
{
	PGresult *r = PQexec(c, sql);
	ExecStatusType s = PQresultStatus(r);

	ck_assert_msg(s == PGRES_COMMAND_OK || s == PGRES_TUPLES_OK, "%s: %s", sql,
		PQresultErrorMessage(r));
	PQclear(r);
}

/* The first column of the first row, as an integer. */
static long long
sql_int(PGconn *c, const char *sql)
{
	PGresult *r = PQexec(c, sql);
	long long v;

	ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1, "%s: %s", sql,
		PQresultErrorMessage(r));
	v = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
	PQclear(r);
	return v;
}

static long long
rows_in(PGconn *c, const char *schema, const char *table)
{
	char sql[256];

	snprintf(sql, sizeof(sql), "SELECT count(*) FROM \"%s\".%s", schema, table);
	return sql_int(c, sql);
}

static void
put_s(struct storage_txn *t, enum storage_table tb, const char *k, const char *v)
{
	struct st_buf kb = {k, strlen(k)}, vb = {v, strlen(v)};

	OK(storage_put(t, tb, &kb, &vb, 0));
}

/* want NULL: absent. */
static void
get_is(struct storage_txn *t, enum storage_table tb, const char *k, const char *want)
{
	struct st_buf kb = {k, strlen(k)}, v;
	int rc = storage_get(t, tb, &kb, &v);

	if (want == NULL) {
		ck_assert_msg(rc == ECHD_ENOTFOUND, "get %s: %d, expected not found", k, rc);
		return;
	}
	ck_assert_msg(rc == 0, "get %s: %d", k, rc);
	ck_assert_msg(v.len == strlen(want) && memcmp(v.data, want, v.len) == 0,
		"get %s: '%.*s', expected '%s'", k, (int)v.len, (const char *)v.data, want);
}

/* st's HA interface, which postgres has. */
static struct storage_ha *
ha_of(struct storage *st)
{
	struct storage_ha *ha = storage_ha(st);

	ck_assert_ptr_nonnull(ha);
	return ha;
}

static enum storage_role
role(struct storage *st)
{
	return storage_ha_role(ha_of(st));
}

static enum storage_role
poll_role(struct storage *st, struct storage_ha_state *ha)
{
	struct storage_ha_state h;

	(void)storage_ha_poll(ha_of(st), ha != NULL ? ha : &h);
	return role(st);
}

/* Polls until st is active or ms pass; returns the last poll's answer. */
static struct storage_ha_state
poll_until_active(struct storage *st, int ms)
{
	int64_t end = now_ms() + ms;
	struct storage_ha_state ha;

	while (poll_role(st, &ha) != STORAGE_ROLE_ACTIVE && now_ms() < end) {
		usleep(50 * 1000);
	}
	return ha;
}

/* Opens front end port on schema with a lease (postgres.lease-ms). */
static struct storage *
open_leased(const char *schema, int port, unsigned lease_ms)
{
	struct storage_opts o = opts(schema, port, 0);
	struct storage *st;

	opt_u64(&o, "postgres.lease-ms", lease_ms);
	OK(storage_open("postgres", &o, &st));
	return st;
}

/* The first column of the first row of sql run on c, or -1 when c failed. */
static long long
try_int(PGconn *c, const char *sql)
{
	PGresult *r = PQexec(c, sql);
	long long v = -1;

	if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1) {
		v = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
	}
	PQclear(r);
	return v;
}

/* Runs sql on c; false (no assertion: for threads) when it failed. */
static bool
try_sql(PGconn *c, const char *sql)
{
	PGresult *r = PQexec(c, sql);
	ExecStatusType s = PQresultStatus(r);

	PQclear(r);
	return s == PGRES_COMMAND_OK || s == PGRES_TUPLES_OK;
}

/* Waits up to 10 s until the engine's session (application_name echd)
 * waits on a lock: its commit is in flight, held there. */
static bool
engine_waits_on_lock(PGconn *c)
{
	int64_t end = now_ms() + 10000;

	while (try_int(c, "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'echd' "
			  "AND wait_event_type = 'Lock'") != 1) {
		if (now_ms() > end) {
			return false;
		}
		usleep(10 * 1000);
	}
	return true;
}

/* What a test does from a thread while the main one commits: c[0] watches,
 * c[1] holds the table lock the commit waits on (SHARE: its transaction
 * open; readers pass), c[2] acts. Failures go to err (Check asserts from the main thread). */
struct inflight {
	PGconn *c[3];
	const char *schema;
	bool bumped_in_flight; /* the takeover's UPDATE returned while the commit waited */
	long long seen;        /* the commit's rows in the takeover's snapshot */
	char err[256];
};

/* A takeover while the commit is in flight, as try_takeover() does it once
 * it has the lock: bump gen (autocommit), then load in a snapshot. */
static void *
takeover_thread(void *arg)
{
	struct inflight *f = arg;
	char sql[256];
	int64_t end;

	if (!engine_waits_on_lock(f->c[0])) {
		snprintf(f->err, sizeof(f->err), "the commit never waited on the lock");
		(void)try_sql(f->c[1], "COMMIT");
		return NULL;
	}
	snprintf(sql, sizeof(sql), "UPDATE \"%s\".ha SET gen = gen + 1", f->schema);
	if (!PQsendQuery(f->c[2], sql)) {
		snprintf(f->err, sizeof(f->err), "send: %s", PQerrorMessage(f->c[2]));
		(void)try_sql(f->c[1], "COMMIT");
		return NULL;
	}
	/* FOR SHARE makes it wait for the commit; without, it is through at once */
	end = now_ms() + 500;
	while (now_ms() < end && PQconsumeInput(f->c[2]) && PQisBusy(f->c[2])) {
		usleep(5 * 1000);
	}
	f->bumped_in_flight = !PQisBusy(f->c[2]);
	if (!f->bumped_in_flight) {
		(void)try_sql(f->c[1], "COMMIT"); /* let the commit go on */
	}
	for (PGresult *r; (r = PQgetResult(f->c[2])) != NULL;) {
		if (PQresultStatus(r) != PGRES_COMMAND_OK) {
			snprintf(f->err, sizeof(f->err), "%.100s: %.100s", sql, PQresultErrorMessage(r));
		}
		PQclear(r);
	}
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM \"%s\".keys WHERE k = 'inflight'",
		f->schema);
	if (!try_sql(f->c[2], "BEGIN ISOLATION LEVEL REPEATABLE READ")) {
		snprintf(f->err, sizeof(f->err), "BEGIN failed");
	}
	f->seen = try_int(f->c[2], sql);
	(void)try_sql(f->c[2], "COMMIT");
	if (f->bumped_in_flight) {
		(void)try_sql(f->c[1], "COMMIT");
	}
	return NULL;
}

/* The engine's session ended while its commit waits, before COMMIT ran. */
static void *
terminate_thread(void *arg)
{
	struct inflight *f = arg;

	if (!engine_waits_on_lock(f->c[0])) {
		snprintf(f->err, sizeof(f->err), "the commit never waited on the lock");
	} else if (try_int(f->c[2], "SELECT count(pg_terminate_backend(pid)) FROM "
				   "pg_stat_activity WHERE application_name = 'echd'") != 1) {
		snprintf(f->err, sizeof(f->err), "no session to terminate");
	}
	usleep(100 * 1000);
	(void)try_sql(f->c[1], "COMMIT");
	return NULL;
}

/* Commits one row into table keys of st while fn runs in a thread with
 * keys locked by f->c[1]. Returns the commit's result. */
static int
commit_held(struct storage *st, struct inflight *f, void *(*fn)(void *))
{
	struct storage_txn *t;
	pthread_t th;
	char sql[128];
	int rc;

	for (int i = 0; i < 3; i++) {
		f->c[i] = side();
	}
	sql_ok(f->c[1], "BEGIN");
	snprintf(sql, sizeof(sql), "LOCK TABLE \"%s\".keys IN SHARE MODE", f->schema);
	sql_ok(f->c[1], sql);
	OK(storage_txn_begin(st, NULL, 0, &t));
	put_s(t, STORAGE_T_KEYS, "inflight", "1");
	ck_assert_int_eq(pthread_create(&th, NULL, fn, f), 0);
	rc = storage_txn_commit(t);
	ck_assert_int_eq(pthread_join(th, NULL), 0);
	ck_assert_msg(f->err[0] == '\0', "%s", f->err);
	for (int i = 0; i < 3; i++) {
		PQfinish(f->c[i]);
	}
	return rc;
}

/* ---- tests ----------------------------------------------------------------- */

START_TEST(test_reopen_keeps_rows)
{
	struct storage *st = open_pg("reopen", 7001);
	struct storage_txn *t;
	struct storage_cursor *c;
	struct st_buf key, val, kb = {"b", 1};

	ck_assert_ptr_nonnull(storage_ha(st));
	ck_assert_int_eq(role(st), STORAGE_ROLE_ACTIVE);
	ck_assert_ptr_null(storage_capacity(st)); /* no bounded store: mem's none passed on */
	OK(storage_txn_begin(st, NULL, 0, &t));
	put_s(t, STORAGE_T_KEYS, "a", "1");
	put_s(t, STORAGE_T_KEYS, "b", "2");
	put_s(t, STORAGE_T_KEYS, "c", "3");
	put_s(t, STORAGE_T_KEYS, "d", "4");
	put_s(t, STORAGE_T_ENTRIES, "a", "other table");
	OK(storage_txn_commit(t));
	/* A del, an overwrite and a cursor_del in a second commit. */
	OK(storage_txn_begin(st, NULL, 0, &t));
	OK(storage_del(t, STORAGE_T_KEYS, &kb));
	put_s(t, STORAGE_T_KEYS, "a", "one");
	OK(storage_cursor_open(t, STORAGE_T_KEYS, &c));
	OK(storage_cursor_seek_last(c, NULL, &key, &val));
	ck_assert(key.len == 1 && memcmp(key.data, "d", 1) == 0);
	OK(storage_cursor_del(c));
	storage_cursor_close(c);
	OK(storage_txn_commit(t));
	storage_close(st);

	st = open_pg("reopen", 7001);
	OK(storage_txn_begin(st, NULL, STORAGE_TXN_RDONLY, &t));
	get_is(t, STORAGE_T_KEYS, "a", "one");
	get_is(t, STORAGE_T_KEYS, "b", NULL);
	get_is(t, STORAGE_T_KEYS, "c", "3");
	get_is(t, STORAGE_T_KEYS, "d", NULL);
	get_is(t, STORAGE_T_ENTRIES, "a", "other table");
	get_is(t, STORAGE_T_ENTRIES, "c", NULL);
	OK(storage_cursor_open(t, STORAGE_T_KEYS, &c));
	OK(storage_cursor_seek(c, NULL, &key, &val));
	ck_assert(key.len == 1 && memcmp(key.data, "a", 1) == 0);
	OK(storage_cursor_next(c, &key, &val));
	ck_assert(key.len == 1 && memcmp(key.data, "c", 1) == 0);
	FAILS(storage_cursor_next(c, &key, &val), ECHD_ENOTFOUND);
	storage_cursor_close(c);
	storage_txn_abort(t);
	storage_close(st);
}
END_TEST

/* An aborted child's writes and an aborted top-level txn's reach nothing. */
START_TEST(test_aborts_write_nothing)
{
	struct storage *st = open_pg("aborts", 7001);
	struct storage_txn *t, *child;
	PGconn *pc = side();

	OK(storage_txn_begin(st, NULL, 0, &t));
	put_s(t, STORAGE_T_KEYS, "kept", "1");
	OK(storage_txn_begin(st, t, 0, &child));
	put_s(child, STORAGE_T_KEYS, "child", "2");
	put_s(child, STORAGE_T_KEYS, "kept", "overwritten by the child");
	storage_txn_abort(child);
	OK(storage_txn_commit(t));
	ck_assert_int_eq(rows_in(pc, "aborts", "keys"), 1);
	ck_assert_int_eq(sql_int(pc, "SELECT count(*) FROM aborts.keys WHERE k = 'kept' AND "
				     "v = '1'"),
		1);

	OK(storage_txn_begin(st, NULL, 0, &t));
	put_s(t, STORAGE_T_KEYS, "never", "1");
	put_s(t, STORAGE_T_PEL, "never", "1");
	storage_txn_abort(t);
	ck_assert_int_eq(rows_in(pc, "aborts", "keys"), 1);
	ck_assert_int_eq(rows_in(pc, "aborts", "pel"), 0);

	/* A child that commits into its parent is sent with it. */
	OK(storage_txn_begin(st, NULL, 0, &t));
	OK(storage_txn_begin(st, t, 0, &child));
	put_s(child, STORAGE_T_PEL, "from child", "1");
	OK(storage_txn_commit(child));
	OK(storage_txn_commit(t));
	ck_assert_int_eq(rows_in(pc, "aborts", "pel"), 1);
	PQfinish(pc);
	storage_close(st);
}
END_TEST

START_TEST(test_many_keys_one_commit)
{
	enum { N = 20000 };
	struct storage *st = open_pg("many", 7001);
	struct storage_txn *t;
	struct storage_cursor *c;
	struct st_buf key, val;
	PGconn *pc = side();
	char k[32], v[32];
	int rc, n = 0;

	OK(storage_txn_begin(st, NULL, 0, &t));
	for (int i = 0; i < N; i++) {
		snprintf(k, sizeof(k), "k%08d", i);
		snprintf(v, sizeof(v), "v%d", i);
		put_s(t, STORAGE_T_ENTRIES, k, v);
	}
	OK(storage_txn_commit(t));
	ck_assert_int_eq(rows_in(pc, "many", "entries"), N);
	storage_close(st);

	st = open_pg("many", 7001);
	OK(storage_txn_begin(st, NULL, STORAGE_TXN_RDONLY, &t));
	OK(storage_cursor_open(t, STORAGE_T_ENTRIES, &c));
	for (rc = storage_cursor_seek(c, NULL, &key, &val); rc == 0;
		rc = storage_cursor_next(c, &key, &val)) {
		snprintf(k, sizeof(k), "k%08d", n);
		snprintf(v, sizeof(v), "v%d", n);
		ck_assert(key.len == strlen(k) && memcmp(key.data, k, key.len) == 0);
		ck_assert(val.len == strlen(v) && memcmp(val.data, v, val.len) == 0);
		n++;
	}
	FAILS(rc, ECHD_ENOTFOUND);
	ck_assert_int_eq(n, N);
	storage_cursor_close(c);
	storage_txn_abort(t);

	/* Deleting them all is one commit too. */
	OK(storage_txn_begin(st, NULL, 0, &t));
	OK(storage_cursor_open(t, STORAGE_T_ENTRIES, &c));
	rc = storage_cursor_seek(c, NULL, &key, &val);
	while (rc == 0) {
		OK(storage_cursor_del(c));
		rc = storage_cursor_next(c, &key, &val);
	}
	storage_cursor_close(c);
	OK(storage_txn_commit(t));
	ck_assert_int_eq(rows_in(pc, "many", "entries"), 0);
	PQfinish(pc);
	storage_close(st);
}
END_TEST

/* Issue 35: PostgreSQL takes no value, nor message, past 1 GB, so a commit
 * whose arrays passed it failed for every client of the batch. A value over
 * the limit is refused at its put (that command fails, not the batch), and
 * arrays over the per-statement limit go as several statements. Scaled
 * down with st_pg_test_limits(); a statement-level trigger counts the
 * statements PostgreSQL ran. */
START_TEST(test_commit_split_under_limits)
{
	enum { N = 100 };
	struct storage *st = open_pg("split", 7001);
	struct storage_txn *t;
	struct storage_cursor *c;
	struct st_buf key, val, kb, vb;
	PGconn *pc = side();
	char k[32], v[1100];
	int rc, n = 0;

	sql_ok(pc, "CREATE TABLE split.stmts (op text)");
	sql_ok(pc, "CREATE FUNCTION split.count_ins() RETURNS trigger LANGUAGE plpgsql AS "
		   "$$BEGIN INSERT INTO split.stmts VALUES ('i'); RETURN NULL; END$$");
	sql_ok(pc, "CREATE FUNCTION split.count_del() RETURNS trigger LANGUAGE plpgsql AS "
		   "$$BEGIN INSERT INTO split.stmts VALUES ('d'); RETURN NULL; END$$");
	sql_ok(pc, "CREATE TRIGGER ins AFTER INSERT ON split.entries FOR EACH STATEMENT "
		   "EXECUTE FUNCTION split.count_ins()");
	sql_ok(pc, "CREATE TRIGGER del AFTER DELETE ON split.entries FOR EACH STATEMENT "
		   "EXECUTE FUNCTION split.count_del()");
	st_pg_test_limits(1024, 4096);

	/* a value over the limit is refused at its put; the rest commits */
	memset(v, 'x', sizeof(v));
	OK(storage_txn_begin(st, NULL, 0, &t));
	kb.data = "big";
	kb.len = 3;
	vb.data = v;
	vb.len = 1025;
	FAILS(storage_put(t, STORAGE_T_ENTRIES, &kb, &vb, 0), -EFBIG);
	vb.len = 1024;
	OK(storage_put(t, STORAGE_T_ENTRIES, &kb, &vb, 0));
	/* N rows of about 220 bytes: over 4096 bytes, in several statements */
	for (int i = 0; i < N; i++) {
		snprintf(k, sizeof(k), "k%08d", i);
		memset(v, 'a' + i % 26, 200);
		snprintf(v + 200, 20, "%d", i);
		put_s(t, STORAGE_T_ENTRIES, k, v);
	}
	OK(storage_txn_commit(t));
	ck_assert_int_eq(rows_in(pc, "split", "entries"), N + 1);
	/* (N * ~240 bytes + 1 KB) / 4096 bytes a statement */
	ck_assert_int_ge(sql_int(pc, "SELECT count(*) FROM split.stmts WHERE op = 'i'"), 6);
	/* an element alone over the statement limit goes alone */
	st_pg_test_limits(1024, 512);
	OK(storage_txn_begin(st, NULL, 0, &t));
	vb.len = 1000;
	OK(storage_put(t, STORAGE_T_ENTRIES, &kb, &vb, 0));
	put_s(t, STORAGE_T_ENTRIES, "small", "s");
	OK(storage_txn_commit(t));
	st_pg_test_limits(1024, 4096);
	storage_close(st);

	/* echd opens no schema whose tables have triggers (check_plain()) */
	sql_ok(pc, "DROP TRIGGER ins ON split.entries");
	sql_ok(pc, "DROP TRIGGER del ON split.entries");
	st = open_pg("split", 7001);
	sql_ok(pc, "CREATE TRIGGER del AFTER DELETE ON split.entries FOR EACH STATEMENT "
		   "EXECUTE FUNCTION split.count_del()");
	OK(storage_txn_begin(st, NULL, STORAGE_TXN_RDONLY, &t));
	OK(storage_cursor_open(t, STORAGE_T_ENTRIES, &c));
	for (rc = storage_cursor_seek(c, NULL, &key, &val); rc == 0;
		rc = storage_cursor_next(c, &key, &val)) {
		if (key.len == 3) {
			ck_assert_uint_eq(val.len, 1000); /* big */
			continue;
		}
		if (key.len == 5) {
			continue; /* small */
		}
		snprintf(k, sizeof(k), "k%08d", n);
		memset(v, 'a' + n % 26, 200);
		snprintf(v + 200, 20, "%d", n);
		ck_assert(key.len == strlen(k) && memcmp(key.data, k, key.len) == 0);
		ck_assert(val.len == strlen(v) && memcmp(val.data, v, val.len) == 0);
		n++;
	}
	FAILS(rc, ECHD_ENOTFOUND);
	ck_assert_int_eq(n, N);
	storage_cursor_close(c);
	storage_txn_abort(t);

	/* deleting them: a key array (N * 13 bytes) over the limit, several statements too */
	sql_ok(pc, "DELETE FROM split.stmts");
	st_pg_test_limits(1024, 256);
	OK(storage_txn_begin(st, NULL, 0, &t));
	for (int i = 0; i < N; i++) {
		snprintf(k, sizeof(k), "k%08d", i);
		kb.data = k;
		kb.len = strlen(k);
		OK(storage_del(t, STORAGE_T_ENTRIES, &kb));
	}
	OK(storage_txn_commit(t));
	ck_assert_int_eq(rows_in(pc, "split", "entries"), 2);
	ck_assert_int_ge(sql_int(pc, "SELECT count(*) FROM split.stmts WHERE op = 'd'"), 5);
	st_pg_test_limits(0, 0);
	PQfinish(pc);
	storage_close(st);
}
END_TEST

START_TEST(test_binary_and_large)
{
	struct storage *st = open_pg("binary", 7001);
	struct storage_txn *t;
	struct storage_cursor *c;
	static unsigned char big[1 << 20], longkey[STORAGE_KEY_MAX];
	const unsigned char z1[] = {0}, z2[] = {0, 0}, z3[] = {'a', 0, 'b'}, z4[] = {'a'};
	const struct st_buf keys[] = {{z1, 1}, {z2, 2}, {z4, 1}, {z3, 3}}; /* in key order */
	struct st_buf k, v, key, val;

	for (size_t i = 0; i < sizeof(big); i++) {
		big[i] = (unsigned char)(i * 7 + (i >> 9));
	}
	memset(longkey, 0xff, sizeof(longkey));
	longkey[0] = 0;
	OK(storage_txn_begin(st, NULL, 0, &t));
	for (int i = 3; i >= 0; i--) {
		v.data = keys[i].data;
		v.len = keys[i].len;
		OK(storage_put(t, STORAGE_T_CPEL, &keys[i], &v, 0));
	}
	k.data = longkey;
	k.len = sizeof(longkey);
	v.data = big;
	v.len = sizeof(big);
	OK(storage_put(t, STORAGE_T_META, &k, &v, 0));
	k.len = 1;
	v.len = 0; /* an empty value */
	OK(storage_put(t, STORAGE_T_META, &k, &v, 0));
	OK(storage_txn_commit(t));
	storage_close(st);

	st = open_pg("binary", 7001);
	OK(storage_txn_begin(st, NULL, STORAGE_TXN_RDONLY, &t));
	OK(storage_cursor_open(t, STORAGE_T_CPEL, &c));
	for (int i = 0; i < 4; i++) {
		OK(i == 0 ? storage_cursor_seek(c, NULL, &key, &val) :
			    storage_cursor_next(c, &key, &val));
		ck_assert_uint_eq(key.len, keys[i].len);
		ck_assert(memcmp(key.data, keys[i].data, key.len) == 0);
		ck_assert(val.len == key.len && memcmp(val.data, key.data, key.len) == 0);
	}
	FAILS(storage_cursor_next(c, &key, &val), ECHD_ENOTFOUND);
	k.len = sizeof(longkey);
	OK(storage_get(t, STORAGE_T_META, &k, &val));
	ck_assert_uint_eq(val.len, sizeof(big));
	ck_assert(memcmp(val.data, big, sizeof(big)) == 0);
	k.len = 1;
	OK(storage_get(t, STORAGE_T_META, &k, &val));
	ck_assert_uint_eq(val.len, 0);
	storage_txn_abort(t);
	storage_close(st);
}
END_TEST

/* A second front end is a standby that names the active one, and takes
 * over, with the data, when the first goes. */
START_TEST(test_standby_takes_over)
{
	struct storage *a = open_pg("ha", 7001), *b;
	struct storage_txn *t;
	struct storage_ha_state ha, hb;
	PGconn *pc = side();
	int64_t t0;

	ck_assert_int_eq(poll_role(a, &ha), STORAGE_ROLE_ACTIVE);
	ck_assert(!ha.became_active);
	ck_assert_str_eq(ha.active_host, "127.0.0.1");
	ck_assert_int_eq(ha.active_port, 7001);
	OK(storage_txn_begin(a, NULL, 0, &t));
	put_s(t, STORAGE_T_GROUPS, "g", "from a");
	OK(storage_txn_commit(t));

	b = open_pg("ha", 7002);
	ck_assert_int_eq(role(b), STORAGE_ROLE_STANDBY);
	ck_assert_int_eq(poll_role(b, &hb), STORAGE_ROLE_STANDBY);
	ck_assert_str_eq(hb.active_host, "127.0.0.1");
	ck_assert_int_eq(hb.active_port, 7001);
	ck_assert_uint_eq(hb.gen, ha.gen);
	FAILS(storage_txn_begin(b, NULL, 0, &t), ECHD_ESTANDBY);
	OK(storage_txn_begin(b, NULL, STORAGE_TXN_RDONLY, &t)); /* reads always run */
	storage_txn_abort(t);

	storage_close(a);
	t0 = now_ms();
	hb = poll_until_active(b, 5000);
	ck_assert_int_eq(hb.role, STORAGE_ROLE_ACTIVE);
	ck_assert(hb.became_active);
	ck_assert_uint_eq(hb.gen, ha.gen + 1);
	ck_assert_msg(now_ms() - t0 < 2000, "takeover took %lld ms", (long long)(now_ms() - t0));
	ck_assert_int_eq(hb.active_port, 7002);
	ck_assert_int_eq(sql_int(pc, "SELECT port FROM ha.ha"), 7002);
	ck_assert_int_eq(sql_int(pc, "SELECT gen FROM ha.ha"), (long long)hb.gen);
	OK(storage_txn_begin(b, NULL, 0, &t));
	get_is(t, STORAGE_T_GROUPS, "g", "from a");
	put_s(t, STORAGE_T_GROUPS, "g", "from b");
	OK(storage_txn_commit(t));
	ck_assert_int_eq(sql_int(pc, "SELECT count(*) FROM ha.groups WHERE v = 'from b'"), 1);
	/* A later poll changes nothing. */
	ck_assert_int_eq(poll_role(b, &hb), STORAGE_ROLE_ACTIVE);
	ck_assert(!hb.became_active);
	PQfinish(pc);
	storage_close(b);
}
END_TEST

/* A store of parts (postgres.shards, issue 36) opened by front end port
 * (node its postgres.node); *rc the open's result. */
static struct storage *
open_shards_in(const char *schema, const char *shards, int port, const char *node, int *rc)
{
	struct storage_opts o = opts(schema, port, 0);
	struct storage *st = NULL;

	opt_str(&o, "postgres.shards", shards);
	opt_str(&o, "postgres.node", node);
	*rc = storage_open("postgres", &o, &st);
	return st;
}

static struct storage *
open_shards(const char *shards, int port, const char *node, int *rc)
{
	return open_shards_in("sh", shards, port, node, rc);
}

/* As echo-admin shards opens a store's map: read_only, shards "map". */
static struct storage *
open_map(const char *schema, int *rc)
{
	struct storage_opts o = opts(schema, 0, 0);
	struct storage *st = NULL;

	o.read_only = true;
	opt_str(&o, "postgres.shards", "map");
	*rc = storage_open("postgres", &o, &st);
	return st;
}

static void
part_is(struct storage *st, size_t i, bool held, const char *node, int port)
{
	struct storage_ha_part p;

	OK(storage_ha_part(ha_of(st), i, &p));
	ck_assert_msg(p.held == held, "part %zu held %d", i, p.held);
	ck_assert_str_eq(p.node, node);
	ck_assert_int_eq(p.port, port);
}

/* Front end i of st's registry as its last poll read it: node, the part
 * it holds (-1: standby), a fresh row. */
static void
front_is(struct storage *st, size_t i, const char *node, int part)
{
	struct storage_ha_front f;

	OK(storage_ha_front(ha_of(st), i, &f));
	ck_assert_str_eq(f.node, node);
	ck_assert_int_eq(f.part, part);
	ck_assert_uint_lt(f.age_ms, 5000);
}

/* Each front end holds the first free part, a third stands by, every
 * poll reads who holds each part and writes its own row in the registry
 * (each lists the others', a stale one neither listed nor kept); the map
 * is the first open's (another, or one that does not parse, is refused);
 * the standby takes a part its front end left, with its rows. */
START_TEST(test_shards)
{
	struct storage *a, *b, *c;
	struct storage_ha_state h;
	struct storage_ha_part p;
	struct storage_ha_front f;
	struct storage_txn *t;
	PGconn *pc = side();
	int rc;

	a = open_shards("0-9,10-19", 7101, "node-a", &rc);
	OK(rc);
	b = open_shards("0-9,10-19", 7102, "node-b", &rc);
	OK(rc);
	c = open_shards("0-9,10-19", 7103, "node-c", &rc);
	OK(rc);
	ck_assert_uint_eq(storage_ha_nparts(ha_of(a)), 2);
	ck_assert_int_eq(poll_role(a, &h), STORAGE_ROLE_ACTIVE);
	ck_assert_int_eq(h.part, 0);
	ck_assert_int_eq(poll_role(b, &h), STORAGE_ROLE_ACTIVE);
	ck_assert_int_eq(h.part, 1);
	ck_assert_int_eq(poll_role(c, &h), STORAGE_ROLE_STANDBY);
	ck_assert_int_eq(h.part, -1);
	part_is(c, 0, true, "node-a", 7101);
	part_is(c, 1, true, "node-b", 7102);
	FAILS(storage_ha_part(ha_of(c), 2, &p), -EINVAL);
	/* the registry: c read a's and b's rows, not its own */
	ck_assert_uint_eq(storage_ha_nfronts(ha_of(c)), 2);
	front_is(c, 0, "node-a", 0);
	front_is(c, 1, "node-b", 1);
	FAILS(storage_ha_front(ha_of(c), 2, &f), -EINVAL);
	ck_assert_int_eq(poll_role(a, &h), STORAGE_ROLE_ACTIVE);
	ck_assert_uint_eq(storage_ha_nfronts(ha_of(a)), 2);
	front_is(a, 0, "node-b", 1);
	front_is(a, 1, "node-c", -1);
	ck_assert_int_eq(sql_int(pc, "SELECT port FROM sh.frontends WHERE node = 'node-c' "
				     "AND role = 'standby' AND shard IS NULL"), 7103);
	/* c's row goes stale (PostgreSQL's clock): not listed, and deleted */
	sql_ok(pc, "UPDATE sh.frontends SET seen = now() - interval '1 hour' "
		   "WHERE node = 'node-c'");
	ck_assert_int_eq(poll_role(a, &h), STORAGE_ROLE_ACTIVE);
	ck_assert_uint_eq(storage_ha_nfronts(ha_of(a)), 1);
	front_is(a, 0, "node-b", 1);
	ck_assert_int_eq(sql_int(pc, "SELECT count(*) FROM sh.frontends"), 2);
	ck_assert_int_eq(poll_role(c, &h), STORAGE_ROLE_STANDBY);
	ck_assert_int_eq(poll_role(a, &h), STORAGE_ROLE_ACTIVE);
	front_is(a, 1, "node-c", -1);
	ck_assert_int_eq(sql_int(pc, "SELECT count(*) FROM sh.shards"), 2);
	ck_assert_int_eq(sql_int(pc, "SELECT last FROM sh.shards WHERE schema = 'sh_s1'"), 19);
	/* b writes in its own part's schema */
	OK(storage_txn_begin(b, NULL, 0, &t));
	put_s(t, STORAGE_T_GROUPS, "g", "in s1");
	OK(storage_txn_commit(t));
	ck_assert_int_eq(rows_in(pc, "sh_s1", "groups"), 1);
	ck_assert_int_eq(rows_in(pc, "sh_s0", "groups"), 0);
	/* the map is the first open's */
	ck_assert_ptr_null(open_shards("0-19", 7104, "node-x", &rc));
	ck_assert_int_eq(rc, ECHD_EINVAL);
	ck_assert_ptr_null(open_shards("0-9,x", 7104, "node-x", &rc));
	ck_assert_int_eq(rc, ECHD_EINVAL);
	ck_assert_ptr_null(open_shards("9-0", 7104, "node-x", &rc));
	ck_assert_int_eq(rc, ECHD_EINVAL);
	{
		/* <schema>_s0 past 63 bytes: PostgreSQL would cut it */
		struct storage_opts o = opts(
			"a_schema_name_of_61_bytes_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", 7104, 0);
		struct storage *st = NULL;

		opt_str(&o, "postgres.shards", "0-9,10-19");
		FAILS(storage_open("postgres", &o, &st), ECHD_EINVAL);
		ck_assert_ptr_null(st);
	}
	/* b goes: c takes its part, with its rows; a sees who holds it now */
	storage_close(b);
	h = poll_until_active(c, 5000);
	ck_assert_int_eq(h.role, STORAGE_ROLE_ACTIVE);
	ck_assert(h.became_active);
	ck_assert_int_eq(h.part, 1);
	OK(storage_txn_begin(c, NULL, 0, &t));
	get_is(t, STORAGE_T_GROUPS, "g", "in s1");
	put_s(t, STORAGE_T_GROUPS, "g", "from c");
	OK(storage_txn_commit(t));
	ck_assert_int_eq(poll_role(a, &h), STORAGE_ROLE_ACTIVE);
	part_is(a, 1, true, "node-c", 7103);
	part_is(a, 0, true, "node-a", 7101);
	/* a goes and no one is left for its part: not held */
	storage_close(a);
	for (int64_t end = now_ms() + 3000; now_ms() < end; usleep(50 * 1000)) {
		/* its session ends a moment after the close */
		ck_assert_int_eq(poll_role(c, &h), STORAGE_ROLE_ACTIVE);
		OK(storage_ha_part(ha_of(c), 0, &p));
		if (!p.held) {
			break;
		}
	}
	part_is(c, 0, false, "node-a", 7101);
	/* echo-admin's open of the map: the parts, and the registry's rows
	 * (c's last, in node order; a's and b's until c's polls delete them) */
	{
		struct storage *m = open_map("sh", &rc);
		size_t n;

		OK(rc);
		ck_assert_uint_eq(storage_ha_nparts(ha_of(m)), 2);
		n = storage_ha_nfronts(ha_of(m));
		ck_assert_uint_ge(n, 1);
		front_is(m, n - 1, "node-c", 1);
		storage_close(m);
	}
	storage_close(c);
	/* a quote in the base schema's name: the map is found all the same */
	c = open_shards_in("q'sh", "0-19", 7105, "node-q", &rc);
	OK(rc);
	ck_assert_int_eq(poll_role(c, &h), STORAGE_ROLE_ACTIVE);
	{
		struct storage *m = open_map("q'sh", &rc);

		OK(rc);
		ck_assert_uint_eq(storage_ha_nparts(ha_of(m)), 1);
		front_is(m, 0, "node-q", 0);
		storage_close(m);
	}
	storage_close(c);
	PQfinish(pc);
}
END_TEST

/* The URL of database db on the test's server: another "server" to the
 * engine (its own sessions, its own advisory locks). */
static void
url_of_db(const char *db, char *out, size_t len)
{
	const char *p = NULL;

	/* the last "/postgres": the database (the first may be the user's) */
	for (const char *q = strstr(pg_url, "/postgres"); q != NULL; q = strstr(q + 1, "/postgres")) {
		p = q;
	}
	ck_assert_msg(p != NULL, "ECHD_TEST_PG_URL names no /postgres: %s", pg_url);
	snprintf(out, len, "%.*s/%s%s", (int)(p - pg_url), pg_url, db, p + strlen("/postgres"));
}

static PGconn *
side_on(const char *url)
{
	const char *keys[] = {"dbname", "application_name", NULL};
	const char *vals[] = {url, "echd-test", NULL};
	PGconn *c = PQconnectdbParams(keys, vals, 1);

	ck_assert_msg(PQstatus(c) == CONNECTION_OK, "side connection: %s", PQerrorMessage(c));
	return c;
}

/* st takes part 2 within 5 s, and reads there the row its front end wrote. */
static void
takes_part_2(struct storage *st)
{
	struct storage_ha_state h = poll_until_active(st, 5000);
	struct storage_txn *t;

	ck_assert_int_eq(h.role, STORAGE_ROLE_ACTIVE);
	ck_assert_int_eq(h.part, 2);
	OK(storage_txn_begin(st, NULL, 0, &t));
	get_is(t, STORAGE_T_GROUPS, "g", "in s2 on b");
	storage_txn_abort(t);
}

/* Shards on two servers (issue 36): a map of an older echd gets its url
 * column from the first front end; echo-admin's move of a part is refused
 * while it is held, or when its schema holds rows, and needs the new
 * server to answer; a standby running since before the move follows it at
 * its next polls; the part lives there (its rows, its lock, its takeover),
 * read with the others' in each poll. */
START_TEST(test_shard_servers)
{
	struct storage *a, *d, *e, *g, *m, *o;
	struct storage_ha_state h;
	struct storage_ha_part p;
	struct storage_txn *t;
	PGconn *pc = side(), *pb;
	char url_b[512], why[512], shown[512];
	int rc;

	url_of_db("echd_b", url_b, sizeof(url_b));
	sql_ok(pc, "DROP DATABASE IF EXISTS echd_b");
	sql_ok(pc, "CREATE DATABASE echd_b");
	pb = side_on(url_b);
	/* the map as an echd without servers left it */
	sql_ok(pc, "CREATE SCHEMA sv; CREATE TABLE sv.shards (ix int PRIMARY KEY, "
		   "schema text NOT NULL UNIQUE, first bigint NOT NULL, last bigint NOT NULL); "
		   "INSERT INTO sv.shards VALUES (0, 'sv_s0', 0, 9), (1, 'sv_s1', 10, 19), "
		   "(2, 'sv_s2', 20, 29)");
	a = open_shards_in("sv", "0-9,10-19,20-29", 7201, "node-a", &rc);
	OK(rc);
	ck_assert_int_eq(sql_int(pc, "SELECT count(*) FROM information_schema.columns WHERE "
				     "table_schema = 'sv' AND table_name = 'shards' AND "
				     "column_name = 'url'"),
		1);
	d = open_shards_in("sv", "0-9,10-19,20-29", 7202, "node-d", &rc);
	OK(rc);
	e = open_shards_in("sv", "0-9,10-19,20-29", 7203, "node-e", &rc);
	OK(rc);
	ck_assert_int_eq(poll_role(a, &h), STORAGE_ROLE_ACTIVE);
	ck_assert_int_eq(h.part, 0);
	ck_assert_int_eq(poll_role(d, &h), STORAGE_ROLE_ACTIVE);
	ck_assert_int_eq(h.part, 1);
	ck_assert_int_eq(poll_role(e, &h), STORAGE_ROLE_ACTIVE);
	ck_assert_int_eq(h.part, 2);
	/* o opens the map while every part is held: a standby */
	o = open_shards_in("sv", "0-9,10-19,20-29", 7205, "node-o", &rc);
	OK(rc);
	ck_assert_int_eq(role(o), STORAGE_ROLE_STANDBY);
	storage_close(e); /* part 2: free, its schema empty (o is not polled) */
	OK(storage_txn_begin(a, NULL, 0, &t));
	put_s(t, STORAGE_T_GROUPS, "g", "in s0");
	OK(storage_txn_commit(t));
	/* echo-admin reads a map without the column, and adds it to move */
	sql_ok(pc, "ALTER TABLE sv.shards DROP COLUMN url");
	m = open_map("sv", &rc);
	OK(rc);
	OK(storage_ha_part(ha_of(m), 2, &p));
	ck_assert(p.home);
	echd_url_redact(pg_url, shown, sizeof(shown));
	ck_assert_str_eq(p.server, shown);
	FAILS(storage_ha_part_move(ha_of(m), 0, url_b, why, sizeof(why)), -EBUSY);
	ck_assert_msg(strstr(why, "node-a") != NULL, "%s", why);
	FAILS(storage_ha_part_move(ha_of(m), 2,
		      "postgresql://127.0.0.1:1/postgres?connect_timeout=2", why, sizeof(why)),
		ECHD_EOFFLINE);
	for (int64_t end = now_ms() + 3000; now_ms() < end; usleep(50 * 1000)) {
		rc = storage_ha_part_move(ha_of(m), 2, url_b, why, sizeof(why));
		if (rc != -EBUSY) {
			break; /* e's session ends a moment after its close */
		}
	}
	OK(rc);
	storage_close(m);
	ck_assert_int_eq(sql_int(pc, "SELECT count(*) FROM sv.shards WHERE url IS NOT NULL"), 1);
	/* o, running since before the move, wins the part's lock on its old
	 * server: not taken there (the map says otherwise); the same poll
	 * reads the map, and the next takes the part on the second server */
	ck_assert_int_eq(poll_role(o, &h), STORAGE_ROLE_STANDBY);
	ck_assert_int_eq(sql_int(pc, "SELECT gen FROM sv_s2.ha"), 1);
	h = poll_until_active(o, 5000);
	ck_assert_int_eq(h.role, STORAGE_ROLE_ACTIVE);
	ck_assert_int_eq(h.part, 2);
	ck_assert_int_eq(sql_int(pc, "SELECT gen FROM sv_s2.ha"), 1);
	ck_assert_int_eq(sql_int(pb, "SELECT gen FROM sv_s2.ha"), 1);
	OK(storage_ha_part(ha_of(o), 2, &p));
	ck_assert(!p.home);
	echd_url_redact(url_b, shown, sizeof(shown));
	ck_assert_str_eq(p.server, shown);
	/* its rows are on the second server */
	OK(storage_txn_begin(o, NULL, 0, &t));
	put_s(t, STORAGE_T_GROUPS, "g", "in s2 on b");
	OK(storage_txn_commit(t));
	ck_assert_int_eq(rows_in(pb, "sv_s2", "groups"), 1);
	ck_assert_int_eq(rows_in(pc, "sv_s2", "groups"), 0);
	/* a front end started now reads who holds it there */
	g = open_shards_in("sv", "0-9,10-19,20-29", 7204, "node-g", &rc);
	OK(rc);
	ck_assert_int_eq(poll_role(g, &h), STORAGE_ROLE_STANDBY);
	part_is(g, 2, true, "node-o", 7205);
	part_is(g, 1, true, "node-d", 7202);
	part_is(g, 0, true, "node-a", 7201);
	/* it goes: the standby takes it over on the second server, rows there */
	storage_close(o);
	takes_part_2(g);
	storage_close(g);
	/* free but not empty: it stays */
	m = open_map("sv", &rc);
	OK(rc);
	for (int64_t end = now_ms() + 3000; now_ms() < end; usleep(50 * 1000)) {
		rc = storage_ha_part_move(ha_of(m), 2, NULL, why, sizeof(why));
		if (rc != -EBUSY) {
			break; /* g's session ends a moment after its close */
		}
	}
	ck_assert_int_eq(rc, -ENOTEMPTY);
	ck_assert_msg(strstr(why, "holds data") != NULL, "%s", why);
	OK(storage_ha_part_move(ha_of(m), 2, url_b, why, sizeof(why))); /* there already */
	storage_close(m);
	ck_assert_int_eq(sql_int(pc, "SELECT count(*) FROM sv.shards WHERE url IS NOT NULL"), 1);
	/* the second server lost: its part's front end leaves it, a (active
	 * on the home server, with a session there for its reads) stays */
	g = open_shards_in("sv", "0-9,10-19,20-29", 7204, "node-g", &rc);
	OK(rc);
	h = poll_until_active(g, 5000);
	ck_assert_int_eq(h.part, 2);
	ck_assert_int_eq(poll_role(a, &h), STORAGE_ROLE_ACTIVE);
	part_is(a, 2, true, "node-g", 7204);
	PQfinish(pb);
	sql_ok(pc, "ALTER DATABASE echd_b ALLOW_CONNECTIONS false");
	sql_ok(pc, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
		   "WHERE datname = 'echd_b'");
	for (int i = 0; i < 3; i++) {
		ck_assert_int_eq(poll_role(a, &h), STORAGE_ROLE_ACTIVE);
		ck_assert_int_eq(h.part, 0);
		usleep(50 * 1000);
	}
	OK(storage_txn_begin(a, NULL, 0, &t));
	put_s(t, STORAGE_T_GROUPS, "g", "a goes on");
	OK(storage_txn_commit(t));
	ck_assert_int_ne(poll_role(g, &h), STORAGE_ROLE_ACTIVE);
	ck_assert_int_eq(h.role, STORAGE_ROLE_STANDBY); /* it still reaches home */
	/* back: g takes its part again, its rows there */
	sql_ok(pc, "ALTER DATABASE echd_b ALLOW_CONNECTIONS true");
	takes_part_2(g);
	storage_close(g);
	storage_close(a);
	storage_close(d);
	PQfinish(pc);
}
END_TEST

/* Another front end's takeover (the generation bumped behind our back)
 * fails our next commit, which then leaves nothing in PostgreSQL. */
START_TEST(test_fenced_commit)
{
	struct storage *st = open_pg("fence", 7001);
	struct storage_txn *t;
	struct storage_ha_state ha;
	PGconn *pc = side();

	OK(storage_txn_begin(st, NULL, 0, &t));
	put_s(t, STORAGE_T_KEYS, "before", "1");
	OK(storage_txn_commit(t));
	sql_ok(pc, "UPDATE fence.ha SET gen = gen + 1");
	OK(storage_txn_begin(st, NULL, 0, &t));
	put_s(t, STORAGE_T_KEYS, "after", "1");
	put_s(t, STORAGE_T_PEL, "after", "1");
	FAILS(storage_txn_commit(t), ECHD_ESTANDBY);
	ck_assert_int_eq(role(st), STORAGE_ROLE_STANDBY);
	ck_assert_int_eq(rows_in(pc, "fence", "keys"), 1);
	ck_assert_int_eq(rows_in(pc, "fence", "pel"), 0);
	/* Nor is it in the cache. */
	OK(storage_txn_begin(st, NULL, STORAGE_TXN_RDONLY, &t));
	get_is(t, STORAGE_T_KEYS, "after", NULL);
	get_is(t, STORAGE_T_KEYS, "before", "1");
	storage_txn_abort(t);
	FAILS(storage_txn_begin(st, NULL, 0, &t), ECHD_ESTANDBY);
	/* It let go of the lock: nobody else holds it, so it may take over
	 * again, with a new generation. */
	ha = poll_until_active(st, 3000);
	ck_assert_int_eq(ha.role, STORAGE_ROLE_ACTIVE);
	ck_assert(ha.became_active);
	ck_assert_int_eq((long long)ha.gen, sql_int(pc, "SELECT gen FROM fence.ha"));
	PQfinish(pc);
	storage_close(st);
}
END_TEST

/* Issue 34: a takeover while a commit is in flight (between its fence
 * check and its COMMIT). The takeover bumps gen and then loads a snapshot;
 * the fence's FOR SHARE makes the bump wait for the commit, so whatever
 * the old active was told committed is in what the new one loaded. (Without
 * FOR SHARE the bump goes through at once, the snapshot misses the row, and
 * the commit still succeeds: acknowledged and lost.) */
START_TEST(test_takeover_during_commit)
{
	struct storage *st = open_pg("race", 7001);
	struct storage_txn *t;
	struct inflight f = {.schema = "race"};
	PGconn *pc = side();
	int rc;

	rc = commit_held(st, &f, takeover_thread);
	if (rc == 0) {
		ck_assert_msg(f.seen == 1, "committed, and not in the takeover's snapshot (%lld)",
			f.seen);
	} else {
		FAILS(rc, ECHD_ESTANDBY);
		ck_assert_int_eq(rows_in(pc, "race", "keys"), 0);
	}
	ck_assert_msg(!f.bumped_in_flight, "the takeover's UPDATE did not wait for the commit");
	/* It committed under the old generation: the next commit is fenced. */
	OK(storage_txn_begin(st, NULL, 0, &t));
	put_s(t, STORAGE_T_KEYS, "after", "1");
	FAILS(storage_txn_commit(t), ECHD_ESTANDBY);
	ck_assert_int_eq(sql_int(pc, "SELECT count(*) FROM race.keys WHERE k = 'after'"), 0);
	PQfinish(pc);
	storage_close(st);
}
END_TEST

/* Issue 34: the session ended while the commit waited in PostgreSQL (the
 * server said so, before COMMIT ran): nothing applied, ECHD_EOFFLINE, which
 * the broker answers with an error rather than closing the clients. */
START_TEST(test_lost_before_commit_ran)
{
	struct storage *st = open_pg("lostearly", 7001);
	struct inflight f = {.schema = "lostearly"};
	PGconn *pc = side();

	FAILS(commit_held(st, &f, terminate_thread), ECHD_EOFFLINE);
	ck_assert_int_eq(role(st), STORAGE_ROLE_OFFLINE);
	ck_assert_int_eq(rows_in(pc, "lostearly", "keys"), 0);
	PQfinish(pc);
	storage_close(st);
}
END_TEST

/* Whether a commit that wrote WAL waits over 150 ms on a fresh connection
 * (synchronous_commit on): waiting for a synchronous standby. The wait is
 * cancelled then (the commit is kept locally). */
static bool
commits_wait(void)
{
	PGconn *c = side();
	int64_t end = now_ms() + 150;
	bool busy;

	ck_assert(PQsendQuery(c, "CREATE TEMP TABLE probe (x int)"));
	while ((busy = PQconsumeInput(c) && PQisBusy(c)) && now_ms() < end) {
		usleep(5 * 1000);
	}
	if (busy) {
		PGcancel *cn = PQgetCancel(c);
		char err[256];

		(void)PQcancel(cn, err, sizeof(err));
		PQfreeCancel(cn);
	}
	for (PGresult *r; (r = PQgetResult(c)) != NULL;) {
		PQclear(r);
	}
	PQfinish(c);
	return busy;
}

/* Sets synchronous_standby_names (NULL: resets it) and waits until commits
 * wait for the standby named, or no longer do. */
static void
sync_standby(const char *names)
{
	PGconn *c = side();
	char sql[128];
	int64_t end = now_ms() + 10000;

	sql_ok(c, "SET synchronous_commit = local");
	if (names != NULL) {
		snprintf(sql, sizeof(sql), "ALTER SYSTEM SET synchronous_standby_names = '%s'", names);
		sql_ok(c, sql);
	} else {
		sql_ok(c, "ALTER SYSTEM RESET synchronous_standby_names");
	}
	sql_ok(c, "SELECT pg_reload_conf()");
	PQfinish(c);
	while (commits_wait() != (names != NULL)) {
		ck_assert_msg(now_ms() < end, "synchronous_standby_names %s not in effect",
			names != NULL ? names : "(reset)");
		usleep(50 * 1000);
	}
}

/* The teardown of the "indoubt" case (in the parent): never leave the
 * server waiting for a standby. */
static void
sync_standby_reset(void)
{
	const char *keys[] = {"dbname", NULL};
	const char *vals[] = {pg_url, NULL};
	PGconn *c = PQconnectdbParams(keys, vals, 1);

	(void)try_sql(c, "SET synchronous_commit = local");
	(void)try_sql(c, "ALTER SYSTEM RESET synchronous_standby_names");
	(void)try_sql(c, "SELECT pg_reload_conf()");
	PQfinish(c);
}

/* Issue 34: the connection lost after COMMIT was sent, its answer never
 * read: ECHD_EINDOUBT, and rightly, as PostgreSQL did commit it. COMMIT is
 * held by a synchronous standby that is not there (the commit is durable
 * locally and shown once the wait ends); storage-timeout-ms passes. */
START_TEST(test_lost_during_commit_in_doubt)
{
	struct storage_opts o = opts("indoubt", 7001, 500);
	struct storage *st;
	struct storage_txn *t;
	struct storage_ha_state ha;
	PGconn *pc = side();

	OK(storage_open("postgres", &o, &st));
	sql_ok(pc, "SET synchronous_commit = local");
	sync_standby("nobody");
	OK(storage_txn_begin(st, NULL, 0, &t));
	put_s(t, STORAGE_T_KEYS, "doubt", "1");
	FAILS(storage_txn_commit(t), ECHD_EINDOUBT);
	ck_assert_int_eq(role(st), STORAGE_ROLE_OFFLINE);
	/* its backend still waits for the standby; ended, it shows the commit */
	ck_assert_int_eq(sql_int(pc, "SELECT count(pg_terminate_backend(pid)) FROM "
				     "pg_stat_activity WHERE application_name = 'echd' AND "
				     "wait_event = 'SyncRep'"),
		1);
	sync_standby(NULL);
	ck_assert_int_eq(rows_in(pc, "indoubt", "keys"), 1);
	/* so a front end that takes over serves it */
	ha = poll_until_active(st, 10000);
	ck_assert_int_eq(ha.role, STORAGE_ROLE_ACTIVE);
	OK(storage_txn_begin(st, NULL, STORAGE_TXN_RDONLY, &t));
	get_is(t, STORAGE_T_KEYS, "doubt", "1");
	storage_txn_abort(t);
	PQfinish(pc);
	storage_close(st);
}
END_TEST

/* Issue 34: a stall of the process between sending COMMIT and reading its
 * answer, longer than timeout-ms: the answer is there, so the commit
 * succeeded, and is not declared in doubt. */
START_TEST(test_stall_after_commit_sent)
{
	struct storage_opts o = opts("stall", 7001, 300);
	struct storage *st;
	struct storage_txn *t;
	PGconn *pc = side();

	OK(storage_open("postgres", &o, &st));
	st_pg_test_stall(800);
	OK(storage_txn_begin(st, NULL, 0, &t));
	put_s(t, STORAGE_T_KEYS, "k", "1");
	OK(storage_txn_commit(t));
	st_pg_test_stall(0);
	ck_assert_int_eq(role(st), STORAGE_ROLE_ACTIVE);
	ck_assert_int_eq(rows_in(pc, "stall", "keys"), 1);
	PQfinish(pc);
	storage_close(st);
}
END_TEST

/* Issue 34: rows PostgreSQL did not store were acknowledged. A trigger
 * that drops them (RETURN NULL) answers INSERT 0 0; each statement now
 * checks its row count, and the commit fails (nothing of it anywhere, the
 * front end still active). Deletes likewise. */
START_TEST(test_rows_not_stored_fail_the_commit)
{
	struct storage *st = open_pg("dropped", 7001);
	struct storage_txn *t;
	struct st_buf kb = {"kept", 4};
	PGconn *pc = side();

	OK(storage_txn_begin(st, NULL, 0, &t));
	put_s(t, STORAGE_T_KEYS, "kept", "1");
	OK(storage_txn_commit(t));
	sql_ok(pc, "CREATE FUNCTION dropped.drop_row() RETURNS trigger LANGUAGE plpgsql AS "
		   "$$BEGIN RETURN NULL; END$$");
	sql_ok(pc, "CREATE TRIGGER drop_ins BEFORE INSERT OR UPDATE ON dropped.keys FOR EACH ROW "
		   "EXECUTE FUNCTION dropped.drop_row()");
	OK(storage_txn_begin(st, NULL, 0, &t));
	put_s(t, STORAGE_T_PEL, "p", "1");
	put_s(t, STORAGE_T_KEYS, "new", "1");
	FAILS(storage_txn_commit(t), -EIO);
	ck_assert_int_eq(role(st), STORAGE_ROLE_ACTIVE);
	ck_assert_int_eq(rows_in(pc, "dropped", "pel"), 0);
	/* an update dropped too */
	OK(storage_txn_begin(st, NULL, 0, &t));
	get_is(t, STORAGE_T_KEYS, "new", NULL);
	put_s(t, STORAGE_T_KEYS, "kept", "2");
	FAILS(storage_txn_commit(t), -EIO);
	sql_ok(pc, "DROP TRIGGER drop_ins ON dropped.keys");
	sql_ok(pc, "CREATE TRIGGER drop_del BEFORE DELETE ON dropped.keys FOR EACH ROW "
		   "EXECUTE FUNCTION dropped.drop_row()");
	OK(storage_txn_begin(st, NULL, 0, &t));
	get_is(t, STORAGE_T_KEYS, "kept", "1");
	OK(storage_del(t, STORAGE_T_KEYS, &kb));
	put_s(t, STORAGE_T_KEYS, "gone", "1");
	OK(storage_del(t, STORAGE_T_KEYS, &(struct st_buf){"gone", 4})); /* never in PostgreSQL */
	FAILS(storage_txn_commit(t), -EIO);
	OK(storage_txn_begin(st, NULL, STORAGE_TXN_RDONLY, &t));
	get_is(t, STORAGE_T_KEYS, "kept", "1");
	storage_txn_abort(t);
	sql_ok(pc, "DROP TRIGGER drop_del ON dropped.keys");
	/* without them, the same commits go through */
	OK(storage_txn_begin(st, NULL, 0, &t));
	OK(storage_del(t, STORAGE_T_KEYS, &kb));
	put_s(t, STORAGE_T_KEYS, "gone", "1");
	OK(storage_del(t, STORAGE_T_KEYS, &(struct st_buf){"gone", 4}));
	put_s(t, STORAGE_T_KEYS, "new", "1");
	OK(storage_txn_commit(t));
	ck_assert_int_eq(rows_in(pc, "dropped", "keys"), 1);
	ck_assert_int_eq(sql_int(pc, "SELECT count(*) FROM dropped.keys WHERE k = 'new'"), 1);
	PQfinish(pc);
	storage_close(st);
}
END_TEST

/* Issue 34: echd refuses to start on tables whose writes PostgreSQL may
 * change (a trigger, a rule, row level security), and a standby refuses
 * to take over on them. */
START_TEST(test_triggers_and_rules_refused)
{
	static const char *const bad[][2] = {
		{"CREATE TRIGGER t AFTER INSERT ON plain.pel FOR EACH STATEMENT "
		 "EXECUTE FUNCTION plain.nop()", "DROP TRIGGER t ON plain.pel"},
		{"CREATE RULE r AS ON INSERT TO plain.entries DO INSTEAD NOTHING",
			"DROP RULE r ON plain.entries"},
		{"ALTER TABLE plain.keys ENABLE ROW LEVEL SECURITY",
			"ALTER TABLE plain.keys DISABLE ROW LEVEL SECURITY"},
		{"CREATE TRIGGER t BEFORE UPDATE ON plain.ha FOR EACH ROW "
		 "EXECUTE FUNCTION plain.nop()", "DROP TRIGGER t ON plain.ha"},
	};
	struct storage_opts o = opts("plain", 7001, 0);
	struct storage *st = open_pg("plain", 7001), *b;
	struct storage_ha_state ha;
	PGconn *pc = side();

	storage_close(st);
	sql_ok(pc, "CREATE FUNCTION plain.nop() RETURNS trigger LANGUAGE plpgsql AS "
		   "$$BEGIN RETURN NEW; END$$");
	/* a table of the user's own in the schema may have them */
	sql_ok(pc, "CREATE TABLE plain.mine (x int)");
	sql_ok(pc, "CREATE TRIGGER t AFTER INSERT ON plain.mine FOR EACH ROW "
		   "EXECUTE FUNCTION plain.nop()");
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		sql_ok(pc, bad[i][0]);
		st = NULL;
		o = opts("plain", 7001, 0);
		FAILS(storage_open("postgres", &o, &st), -EPERM);
		ck_assert_ptr_null(st);
		sql_ok(pc, bad[i][1]);
	}
	/* a standby finds one at takeover: it stays a standby */
	st = open_pg("plain", 7001);
	b = open_pg("plain", 7002);
	ck_assert_int_eq(role(b), STORAGE_ROLE_STANDBY);
	sql_ok(pc, bad[0][0]);
	storage_close(st);
	usleep(200 * 1000);
	FAILS(storage_ha_poll(ha_of(b), &ha), -EPERM);
	ck_assert_int_eq(ha.role, STORAGE_ROLE_STANDBY);
	ck_assert_int_eq(poll_role(b, NULL), STORAGE_ROLE_STANDBY);
	sql_ok(pc, bad[0][1]);
	ha = poll_until_active(b, 3000);
	ck_assert_int_eq(ha.role, STORAGE_ROLE_ACTIVE);
	PQfinish(pc);
	storage_close(b);
}
END_TEST

/* Issue 34: a hung active front end (SIGSTOP, a VM pause) kept its session
 * and so its lock: no standby took over. With a lease PostgreSQL ends a
 * session idle that long; a standby takes over; the hung one, resumed,
 * serves no read from its old state (storage_ha_confirm()) and commits
 * nothing. A healthy one, polling, keeps its place. */
START_TEST(test_lease_replaces_hung_active)
{
	struct storage *a = open_leased("lease", 7001, 600), *b;
	struct storage_txn *t;
	struct storage_ha_state hb;
	PGconn *pc = side();
	int64_t t0;
	int rc;

	b = open_leased("lease", 7002, 600);
	ck_assert_int_eq(role(b), STORAGE_ROLE_STANDBY);
	/* healthy: both poll every 100 ms for three leases */
	for (t0 = now_ms(); now_ms() - t0 < 1800; usleep(100 * 1000)) {
		ck_assert_int_eq(poll_role(a, NULL), STORAGE_ROLE_ACTIVE);
		ck_assert_int_eq(poll_role(b, NULL), STORAGE_ROLE_STANDBY);
	}
	OK(storage_ha_confirm(ha_of(a)));
	/* a hangs: only b polls */
	t0 = now_ms();
	hb = poll_until_active(b, 5000);
	ck_assert_int_eq(hb.role, STORAGE_ROLE_ACTIVE);
	ck_assert_msg(now_ms() - t0 < 1500, "takeover %lld ms after the hang",
		(long long)(now_ms() - t0));
	OK(storage_txn_begin(b, NULL, 0, &t));
	put_s(t, STORAGE_T_KEYS, "from b", "1");
	OK(storage_txn_commit(t));
	/* a resumes: still active as far as it knows, but past its lease it
	 * must ask before answering a read */
	ck_assert_int_eq(role(a), STORAGE_ROLE_ACTIVE);
	rc = storage_ha_confirm(ha_of(a));
	ck_assert_msg(rc == ECHD_EOFFLINE || rc == ECHD_ESTANDBY, "confirm: %d", rc);
	ck_assert_int_ne(role(a), STORAGE_ROLE_ACTIVE);
	FAILS(storage_txn_begin(a, NULL, 0, &t), rc);
	ck_assert_int_eq(rows_in(pc, "lease", "keys"), 1);
	/* and it comes back as a standby */
	for (t0 = now_ms(); poll_role(a, NULL) != STORAGE_ROLE_STANDBY && now_ms() - t0 < 5000;) {
		usleep(50 * 1000);
	}
	ck_assert_int_eq(role(a), STORAGE_ROLE_STANDBY);
	PQfinish(pc);
	storage_close(a);
	storage_close(b);
}
END_TEST

/* A statement PostgreSQL refuses fails the commit alone: -EIO, nothing of
 * it kept anywhere, still active, and the next commit goes through. */
START_TEST(test_refused_commit)
{
	struct storage *st = open_pg("refused", 7001);
	struct storage_txn *t;
	PGconn *pc = side();

	sql_ok(pc, "ALTER TABLE refused.keys ADD CHECK (length(v) < 5)");
	OK(storage_txn_begin(st, NULL, 0, &t));
	put_s(t, STORAGE_T_PEL, "p", "1");
	put_s(t, STORAGE_T_KEYS, "k", "too long for the check");
	FAILS(storage_txn_commit(t), -EIO);
	ck_assert_int_eq(role(st), STORAGE_ROLE_ACTIVE);
	ck_assert_int_eq(rows_in(pc, "refused", "pel"), 0);
	OK(storage_txn_begin(st, NULL, 0, &t));
	get_is(t, STORAGE_T_PEL, "p", NULL);
	put_s(t, STORAGE_T_KEYS, "k", "ok");
	OK(storage_txn_commit(t));
	ck_assert_int_eq(rows_in(pc, "refused", "keys"), 1);
	PQfinish(pc);
	storage_close(st);
}
END_TEST

/* The active one's poll notices a takeover it did not commit through. */
START_TEST(test_poll_sees_takeover)
{
	struct storage *st = open_pg("pollfence", 7001);
	struct storage_txn *t;
	struct storage_ha_state ha;
	PGconn *pc = side();

	sql_ok(pc, "UPDATE pollfence.ha SET gen = gen + 1, host = 'elsewhere', port = 9");
	ck_assert_int_eq(poll_role(st, &ha), STORAGE_ROLE_STANDBY);
	FAILS(storage_txn_begin(st, NULL, 0, &t), ECHD_ESTANDBY);
	PQfinish(pc);
	storage_close(st);
}
END_TEST

/* The session killed under it: the next commit fails unacknowledged, and
 * polls reconnect and make it active again (nobody else holds the lock). */
START_TEST(test_killed_session)
{
	struct storage *st = open_pg("killed", 7001);
	struct storage_txn *t;
	struct storage_ha_state ha;
	PGconn *pc = side();
	uint64_t gen0;
	int rc;

	ck_assert_int_eq(poll_role(st, &ha), STORAGE_ROLE_ACTIVE);
	gen0 = ha.gen;
	ck_assert_int_eq(sql_int(pc, "SELECT count(pg_terminate_backend(pid)) FROM "
				     "pg_stat_activity WHERE application_name = 'echd'"),
		1);
	OK(storage_txn_begin(st, NULL, 0, &t));
	put_s(t, STORAGE_T_KEYS, "lost", "1");
	rc = storage_txn_commit(t);
	ck_assert_msg(rc == ECHD_EOFFLINE || rc == ECHD_EINDOUBT, "commit: %d (%s)", rc,
		echd_strerror(rc));
	ck_assert_int_eq(role(st), STORAGE_ROLE_OFFLINE);
	FAILS(storage_txn_begin(st, NULL, 0, &t), ECHD_EOFFLINE);
	ha = poll_until_active(st, 5000);
	ck_assert_int_eq(ha.role, STORAGE_ROLE_ACTIVE);
	ck_assert(ha.became_active);
	ck_assert_uint_eq(ha.gen, gen0 + 1);
	/* The cache was reloaded from PostgreSQL: the failed commit is in
	 * neither. */
	OK(storage_txn_begin(st, NULL, 0, &t));
	get_is(t, STORAGE_T_KEYS, "lost", NULL);
	put_s(t, STORAGE_T_KEYS, "after", "1");
	OK(storage_txn_commit(t));
	ck_assert_int_eq(rows_in(pc, "killed", "keys"), 1);
	PQfinish(pc);
	storage_close(st);
}
END_TEST

/* A killed session with no commit: the active one's poll notices. */
START_TEST(test_killed_session_poll)
{
	struct storage *st = open_pg("killedpoll", 7001);
	struct storage_ha_state ha;
	PGconn *pc = side();

	ck_assert_int_eq(sql_int(pc, "SELECT count(pg_terminate_backend(pid)) FROM "
				     "pg_stat_activity WHERE application_name = 'echd'"),
		1);
	usleep(100 * 1000);
	ck_assert_int_eq(poll_role(st, &ha), STORAGE_ROLE_OFFLINE);
	ck_assert_msg(ha.why[0] != '\0', "no reason given");
	ha = poll_until_active(st, 5000);
	ck_assert_int_eq(ha.role, STORAGE_ROLE_ACTIVE);
	PQfinish(pc);
	storage_close(st);
}
END_TEST

/* A round trip that takes longer than timeout_ms counts as a lost
 * connection: the commit comes back with an error in about that time. */
START_TEST(test_commit_times_out)
{
	struct storage_opts o = opts("slow", 7001, 500);
	struct storage *st;
	struct storage_txn *t;
	struct storage_ha_state ha;
	PGconn *pc = side();
	int64_t t0, took;
	int rc;

	OK(storage_open("postgres", &o, &st));
	ck_assert_int_eq(role(st), STORAGE_ROLE_ACTIVE);
	sql_ok(pc, "BEGIN");
	sql_ok(pc, "LOCK TABLE slow.entries IN ACCESS EXCLUSIVE MODE");
	OK(storage_txn_begin(st, NULL, 0, &t));
	put_s(t, STORAGE_T_ENTRIES, "stuck", "1");
	t0 = now_ms();
	rc = storage_txn_commit(t);
	took = now_ms() - t0;
	ck_assert_msg(rc == ECHD_EOFFLINE || rc == ECHD_EINDOUBT, "commit: %d (%s)", rc,
		echd_strerror(rc));
	ck_assert_msg(took >= 400 && took < 1500, "the commit took %lld ms", (long long)took);
	ck_assert_int_eq(role(st), STORAGE_ROLE_OFFLINE);
	sql_ok(pc, "ROLLBACK");
	/* Once the server has dropped the old session, it is active again,
	 * and the stuck row is not in the reloaded cache unless PostgreSQL
	 * has it (an in-doubt commit may have gone either way). */
	ha = poll_until_active(st, 10000);
	ck_assert_int_eq(ha.role, STORAGE_ROLE_ACTIVE);
	OK(storage_txn_begin(st, NULL, STORAGE_TXN_RDONLY, &t));
	get_is(t, STORAGE_T_ENTRIES, "stuck",
		rows_in(pc, "slow", "entries") == 1 ? "1" : NULL);
	storage_txn_abort(t);
	PQfinish(pc);
	storage_close(st);
}
END_TEST

/* Nothing listening: the open fails, within the timeout. */
START_TEST(test_open_unreachable)
{
	struct storage_opts o = opts("nowhere", 7001, 1000);
	struct storage *st = NULL;
	int64_t t0 = now_ms();

	opt_str(&o, "postgres.url", "postgresql://127.0.0.1:1/postgres");
	ck_assert_int_ne(storage_open("postgres", &o, &st), 0);
	ck_assert_ptr_null(st);
	ck_assert_int_lt(now_ms() - t0, 3000);
}
END_TEST

/* echo-admin's open: a snapshot, no lock, no writes; no schema made. */
START_TEST(test_read_only)
{
	struct storage *st = open_pg("ro", 7001), *ro;
	struct storage_opts o = opts("ro", 7009, 0);
	struct storage_txn *t;
	struct storage_ha_state ha;

	OK(storage_txn_begin(st, NULL, 0, &t));
	put_s(t, STORAGE_T_KEYS, "k", "v");
	OK(storage_txn_commit(t));
	o.read_only = true;
	OK(storage_open("postgres", &o, &ro));
	ck_assert_int_eq(poll_role(ro, &ha), STORAGE_ROLE_ACTIVE);
	FAILS(storage_txn_begin(ro, NULL, 0, &t), -EROFS);
	OK(storage_txn_begin(ro, NULL, STORAGE_TXN_RDONLY, &t));
	get_is(t, STORAGE_T_KEYS, "k", "v");
	storage_txn_abort(t);
	/* The writer stayed active: the read-only one took no lock. */
	ck_assert_int_eq(poll_role(st, NULL), STORAGE_ROLE_ACTIVE);
	storage_close(ro);
	storage_close(st);

	opt_str(&o, "postgres.schema", "ro_missing");
	ck_assert_int_ne(storage_open("postgres", &o, &ro), 0);
}
END_TEST

/* A schema of a later version is refused. */
START_TEST(test_newer_version_refused)
{
	struct storage *st = open_pg("newer", 7001);
	struct storage_opts o = opts("newer", 7001, 0);
	PGconn *pc = side();

	storage_close(st);
	sql_ok(pc, "UPDATE newer.version SET v = 2");
	st = NULL;
	FAILS(storage_open("postgres", &o, &st), -EPROTO);
	PQfinish(pc);
}
END_TEST


/* ---- the partial cache (cache-size) ---------------------------------------- */

static struct storage *
open_lazy(const char *schema, uint64_t cache_size)
{
	struct storage_opts o = opts(schema, 7001, 0);
	struct storage *st;
	char url[1024];

	/* as the HA recipe's URL asks: a fetch must still find its server (a
	 * read-only fetch session once failed read-write's test on every host) */
	snprintf(url, sizeof(url), "%s%ctarget_session_attrs=read-write", pg_url,
		strchr(pg_url, '?') != NULL ? '&' : '?');
	opt_str(&o, "postgres.url", url);
	opt_u64(&o, "postgres.cache-size", cache_size);
	OK(storage_open("postgres", &o, &st));
	ck_assert_ptr_nonnull(storage_fetch(st));
	return st;
}

/* An entry key as the model makes it: stream id, ms, seq. */
static struct st_buf
ekey(unsigned char k[24], uint64_t sid, uint64_t n)
{
	for (int i = 0; i < 8; i++) {
		k[i] = (unsigned char)(sid >> (56 - 8 * i));
		k[8 + i] = (unsigned char)(n >> (56 - 8 * i));
		k[16 + i] = 0;
	}
	return (struct st_buf){k, 24};
}

/* Writes rows n0..n1-1 of stream sid into entries, "v<n>" each. */
static void
put_entries(struct storage *st, uint64_t sid, uint64_t n0, uint64_t n1)
{
	struct storage_txn *t;
	unsigned char k[24];
	char v[32];

	OK(storage_txn_begin(st, NULL, 0, &t));
	for (uint64_t n = n0; n < n1; n++) {
		struct st_buf kb = ekey(k, sid, n), vb = {v, (size_t)snprintf(v, sizeof(v), "v%llu",
								    (unsigned long long)n)};
		OK(storage_put(t, STORAGE_T_ENTRIES, &kb, &vb, 0));
	}
	OK(storage_txn_commit(t));
}

/* Polls until a fetch lands (or 5 s); returns the state. */
static struct storage_fetch_state
fetch_wait(struct storage *st)
{
	struct storage_fetch *f = storage_fetch(st);
	struct storage_fetch_state fs;
	uint64_t landed;
	int64_t end = now_ms() + 5000;

	OK(storage_fetch_poll(f, &fs));
	landed = fs.landed;
	while (fs.busy && fs.landed == landed && now_ms() < end) {
		usleep(2000);
		OK(storage_fetch_poll(f, &fs));
	}
	ck_assert_msg(fs.landed != landed || !fs.busy, "no fetch landed within 5 s");
	return fs;
}

/* Reads stream sid's entries in order with a cursor, as the broker would:
 * on ECHD_EWOULDFETCH it starts over once the fetch landed. Checks each
 * row is the next one with its value; returns how many, and the restarts
 * in *rounds. */
static uint64_t
scan_entries(struct storage *st, uint64_t sid, unsigned ahead, int *rounds)
{
	unsigned char k[24];
	uint64_t n;
	int rc;

	*rounds = 0;
	for (;;) {
		struct storage_txn *t;
		struct storage_cursor *c;
		struct st_buf key, val, seek = ekey(k, sid, 0);

		seek.len = 8;
		OK(storage_txn_begin(st, NULL, STORAGE_TXN_RDONLY, &t));
		OK(storage_cursor_open(t, STORAGE_T_ENTRIES, &c));
		storage_cursor_ahead(c, ahead);
		n = 0;
		rc = storage_cursor_seek(c, &seek, &key, &val);
		while (rc == 0 && memcmp(key.data, k, 8) == 0) {
			char want[32];
			struct st_buf wk = ekey(k, sid, n);

			snprintf(want, sizeof(want), "v%llu", (unsigned long long)n);
			ck_assert_msg(key.len == 24 && memcmp(key.data, wk.data, 24) == 0,
				"row %llu out of place", (unsigned long long)n);
			ck_assert_msg(val.len == strlen(want) && memcmp(val.data, want, val.len) == 0,
				"row %llu: wrong value", (unsigned long long)n);
			n++;
			rc = storage_cursor_next(c, &key, &val);
		}
		storage_cursor_close(c);
		storage_txn_abort(t);
		if (rc != ECHD_EWOULDFETCH) {
			ck_assert_msg(rc == 0 || rc == ECHD_ENOTFOUND, "scan: %s", echd_strerror(rc));
			return n;
		}
		ck_assert_int_lt(++*rounds, 1000);
		(void)fetch_wait(st);
	}
}

/* Gets row n of stream sid, fetching it first when needed. */
static int
get_fetched(struct storage *st, uint64_t sid, uint64_t n)
{
	struct storage_txn *t;
	unsigned char k[24];
	struct st_buf kb = ekey(k, sid, n), v;
	int rc;

	for (int rounds = 0;; rounds++) {
		OK(storage_txn_begin(st, NULL, STORAGE_TXN_RDONLY, &t));
		rc = storage_get(t, STORAGE_T_ENTRIES, &kb, &v);
		storage_txn_abort(t);
		if (rc != ECHD_EWOULDFETCH) {
			return rc;
		}
		ck_assert_int_lt(rounds, 10);
		(void)fetch_wait(st);
	}
}

/* A takeover loads no entry; reads fetch what they need, in the right
 * order, and eviction keeps the cache near its size. */
START_TEST(test_lazy_reads)
{
	struct storage *st = open_pg("lazy", 7001);
	struct storage_fetch_state fs;
	struct storage_stat ss;
	struct storage_txn *t;
	unsigned char k[24];
	struct st_buf kb, v;
	int rounds;

	ck_assert_ptr_null(storage_fetch(st)); /* without cache-size: the whole schema */
	put_entries(st, 1, 0, 3000);
	put_entries(st, 2, 0, 10);
	put_entries(st, 4, 0, 10);
	OK(storage_txn_begin(st, NULL, 0, &t));
	put_s(t, STORAGE_T_KEYS, "meta", "1");
	OK(storage_txn_commit(t));
	storage_close(st);

	st = open_lazy("lazy", 64 * 1024);
	OK(storage_stat(st, &ss));
	ck_assert_uint_eq(ss.rows, 1); /* "meta": no entry came with the takeover */

	/* a row not held: not here yet, then here */
	OK(storage_txn_begin(st, NULL, STORAGE_TXN_RDONLY, &t));
	kb = ekey(k, 1, 1500);
	FAILS(storage_get(t, STORAGE_T_ENTRIES, &kb, &v), ECHD_EWOULDFETCH);
	storage_txn_abort(t);
	fs = fetch_wait(st);
	ck_assert_uint_ge(fs.misses, 1);
	OK(storage_txn_begin(st, NULL, STORAGE_TXN_RDONLY, &t));
	OK(storage_get(t, STORAGE_T_ENTRIES, &kb, &v));
	ck_assert(v.len == 5 && memcmp(v.data, "v1500", 5) == 0);
	/* a stream that is not in the store is known absent: no fetch */
	kb = ekey(k, 3, 0);
	FAILS(storage_get(t, STORAGE_T_ENTRIES, &kb, &v), ECHD_ENOTFOUND);
	storage_txn_abort(t);

	/* a whole stream bigger than the cache, in order, in a few rounds */
	ck_assert_uint_eq(scan_entries(st, 1, 100, &rounds), 3000);
	ck_assert_int_ge(rounds, 2);
	ck_assert_uint_eq(scan_entries(st, 2, 0, &rounds), 10);
	ck_assert_uint_eq(scan_entries(st, 4, 0, &rounds), 10);
	ck_assert_uint_eq(scan_entries(st, 3, 0, &rounds), 0);
	ck_assert_int_eq(rounds, 0);
	/* evicts, a bounded step a poll: busy and due at once while some are left */
	for (int i = 0; i < 1000; i++) {
		OK(storage_fetch_poll(storage_fetch(st), &fs));
		if (!fs.busy) {
			break;
		}
		ck_assert_uint_eq(fs.poll_ms, 0);
	}
	ck_assert(!fs.busy);
	ck_assert_uint_gt(fs.evicted_rows, 0);
	ck_assert_msg(fs.cache_bytes <= fs.cache_max, "cache %llu > %llu after eviction",
		(unsigned long long)fs.cache_bytes, (unsigned long long)fs.cache_max);
	/* and what was evicted is read again */
	ck_assert_uint_eq(scan_entries(st, 1, 0, &rounds), 3000);
	storage_close(st);
}
END_TEST

/* Writes faster than a poll's usual eviction step (a loader: more rows a
 * commit than PG_EVICT_ROWS) still leave the cache within its size after
 * each poll, the one the broker makes a loop turn. */
START_TEST(test_lazy_writes_stay_bounded)
{
	struct storage *st = open_lazy("lazyb", 64 * 1024);
	struct storage_fetch_state fs;
	uint64_t worst = 0;

	for (uint64_t c = 0; c < 20; c++) {
		put_entries(st, 9, c * 1000, (c + 1) * 1000);
		OK(storage_fetch_poll(storage_fetch(st), &fs));
		worst = fs.cache_bytes > worst ? fs.cache_bytes : worst;
	}
	ck_assert_uint_gt(fs.evicted_rows, 10000);
	ck_assert_msg(worst <= fs.cache_max, "the cache held %llu bytes after a poll, over %llu",
		(unsigned long long)worst, (unsigned long long)fs.cache_max);
	storage_close(st);
}
END_TEST

/* Backward reads (seek_last, prev) and writes into a stream not held. */
START_TEST(test_lazy_back_and_writes)
{
	struct storage *st = open_pg("lazyw", 7001);
	struct storage_txn *t;
	struct storage_cursor *c;
	unsigned char k[24], k2[24];
	struct st_buf kb, key, val, end;
	int rc, rounds;

	put_entries(st, 7, 0, 500);
	storage_close(st);
	st = open_lazy("lazyw", 1 << 20);
	/* the last row of stream 7, backward, as XADD finds its last node */
	for (rounds = 0;; rounds++) {
		OK(storage_txn_begin(st, NULL, STORAGE_TXN_RDONLY, &t));
		OK(storage_cursor_open(t, STORAGE_T_ENTRIES, &c));
		end = ekey(k2, 7, UINT64_MAX);
		rc = storage_cursor_seek_last(c, &end, &key, &val);
		if (rc == 0) {
			rc = storage_cursor_prev(c, &key, &val);
		}
		if (rc != ECHD_EWOULDFETCH) {
			break;
		}
		storage_cursor_close(c);
		storage_txn_abort(t);
		ck_assert_int_lt(rounds, 10);
		(void)fetch_wait(st);
	}
	OK(rc);
	kb = ekey(k, 7, 498);
	ck_assert(key.len == 24 && memcmp(key.data, kb.data, 24) == 0);
	storage_cursor_close(c);
	storage_txn_abort(t);

	/* appended rows and a delete, then the whole stream in order */
	put_entries(st, 7, 500, 600);
	OK(storage_txn_begin(st, NULL, 0, &t));
	kb = ekey(k, 7, 10);
	rc = storage_del(t, STORAGE_T_ENTRIES, &kb);
	ck_assert_int_eq(rc, ECHD_EWOULDFETCH); /* row 10 is not held: fetch it first */
	storage_txn_abort(t);
	(void)fetch_wait(st);
	OK(storage_txn_begin(st, NULL, 0, &t));
	OK(storage_del(t, STORAGE_T_ENTRIES, &kb));
	OK(storage_txn_commit(t));
	storage_close(st);

	/* what PostgreSQL has: rows 0 to 599 but 10 */
	st = open_lazy("lazyw", 1 << 20);
	ck_assert_int_eq(get_fetched(st, 7, 10), ECHD_ENOTFOUND);
	ck_assert_int_eq(get_fetched(st, 7, 11), 0); /* fetched with row 10's neighbours */
	ck_assert_int_eq(get_fetched(st, 7, 599), 0);
	ck_assert_int_eq(get_fetched(st, 7, 600), ECHD_ENOTFOUND);
	storage_close(st);
}
END_TEST

/* A row deleted while a fetch that still holds it is out does not come
 * back with the fetch. */
START_TEST(test_lazy_delete_during_fetch)
{
	struct storage *st = open_pg("lazyd", 7001);
	struct storage_txn *t;
	struct storage_cursor *c;
	unsigned char k[24];
	struct st_buf kb, key, val, seek;
	int rc;

	put_entries(st, 9, 0, 100);
	storage_close(st);
	st = open_lazy("lazyd", 16 << 20);
	put_entries(st, 9, 1000, 1001); /* held: written here */
	/* a fetch of stream 9 from its start, 2000 rows: row 1000 too */
	OK(storage_txn_begin(st, NULL, STORAGE_TXN_RDONLY, &t));
	OK(storage_cursor_open(t, STORAGE_T_ENTRIES, &c));
	storage_cursor_ahead(c, 2000);
	seek = ekey(k, 9, 0);
	FAILS(storage_cursor_seek(c, &seek, &key, &val), ECHD_EWOULDFETCH);
	storage_cursor_close(c);
	storage_txn_abort(t);
	usleep(300 * 1000); /* the fetch has run, row 1000 in its answer */
	/* deleted before the answer is read */
	OK(storage_txn_begin(st, NULL, 0, &t));
	kb = ekey(k, 9, 1000);
	OK(storage_del(t, STORAGE_T_ENTRIES, &kb));
	OK(storage_txn_commit(t));
	(void)fetch_wait(st);
	OK(storage_txn_begin(st, NULL, STORAGE_TXN_RDONLY, &t));
	rc = storage_get(t, STORAGE_T_ENTRIES, &kb, &val);
	ck_assert_msg(rc == ECHD_ENOTFOUND, "deleted row: %s", echd_strerror(rc));
	kb = ekey(k, 9, 99);
	OK(storage_get(t, STORAGE_T_ENTRIES, &kb, &val));
	storage_txn_abort(t);
	storage_close(st);
}
END_TEST

/* Big rows: one fetch brings about a megabyte of values, whatever rows it
 * asked for, and a scan still gets every row in order. */
START_TEST(test_lazy_big_rows)
{
	struct storage *st = open_pg("lazyb", 7001);
	struct storage_fetch_state fs;
	struct storage_txn *t;
	unsigned char k[24];
	static char big[64 * 1024];
	int rounds;

	memset(big, 'x', sizeof(big));
	OK(storage_txn_begin(st, NULL, 0, &t));
	for (uint64_t n = 0; n < 100; n++) {
		struct st_buf kb = ekey(k, 5, n), vb = {big, sizeof(big)};
		OK(storage_put(t, STORAGE_T_ENTRIES, &kb, &vb, 0));
	}
	OK(storage_txn_commit(t));
	storage_close(st);
	st = open_lazy("lazyb", 64 * 1024);
	ck_assert_int_eq(get_fetched(st, 5, 0), 0);
	OK(storage_fetch_poll(storage_fetch(st), &fs));
	ck_assert_msg(fs.fetched_rows <= 17, "one fetch brought %llu rows of 64 KiB",
		(unsigned long long)fs.fetched_rows);
	for (rounds = 0;; rounds++) {
		struct storage_cursor *c;
		struct st_buf key, val, seek = ekey(k, 5, 0);
		uint64_t n = 0;
		int rc;

		seek.len = 8;
		OK(storage_txn_begin(st, NULL, STORAGE_TXN_RDONLY, &t));
		OK(storage_cursor_open(t, STORAGE_T_ENTRIES, &c));
		rc = storage_cursor_seek(c, &seek, &key, &val);
		while (rc == 0 && memcmp(key.data, k, 8) == 0) {
			struct st_buf wk = ekey(k, 5, n++);
			ck_assert(memcmp(key.data, wk.data, 24) == 0 && val.len == sizeof(big));
			rc = storage_cursor_next(c, &key, &val);
		}
		storage_cursor_close(c);
		storage_txn_abort(t);
		if (rc != ECHD_EWOULDFETCH) {
			ck_assert_uint_eq(n, 100);
			break;
		}
		ck_assert_int_lt(rounds, 100);
		(void)fetch_wait(st);
	}
	ck_assert_int_ge(rounds, 5);
	storage_close(st);
}
END_TEST

/* The spans: merged, cut, and the gaps a fetch asks for. */
START_TEST(test_cache_spans)
{
	struct pgc_spans sp = {0};
	struct pgc_bound a, b, c, d, lo, hi, inf;

	pgc_bound_key(&a, "a", 1, false);
	pgc_bound_key(&b, "b", 1, false);
	pgc_bound_key(&c, "c", 1, false);
	pgc_bound_key(&d, "d", 1, false);
	pgc_bound_inf(&inf);
	OK(pgc_spans_add(&sp, &a, &b));
	OK(pgc_spans_add(&sp, &c, &d));
	ck_assert_uint_eq(sp.n, 2);
	ck_assert(pgc_spans_covered(&sp, &a, &b));
	ck_assert(!pgc_spans_covered(&sp, &a, &c));
	pgc_spans_gap_after(&sp, &a, &lo, &hi);
	ck_assert(pgc_bound_cmp(&lo, &b) == 0 && pgc_bound_cmp(&hi, &c) == 0);
	pgc_spans_gap_before(&sp, &d, &lo, &hi);
	ck_assert(pgc_bound_cmp(&lo, &b) == 0 && pgc_bound_cmp(&hi, &c) == 0);
	pgc_spans_gap_after(&sp, &d, &lo, &hi);
	ck_assert(pgc_bound_cmp(&lo, &d) == 0 && hi.inf);
	OK(pgc_spans_add(&sp, &b, &c)); /* touching both: one span */
	ck_assert_uint_eq(sp.n, 1);
	ck_assert(pgc_spans_covered(&sp, &a, &d));
	OK(pgc_spans_cut(&sp, &b, &c));
	ck_assert_uint_eq(sp.n, 2);
	ck_assert(!pgc_spans_covered(&sp, &a, &c));
	ck_assert(pgc_spans_covered(&sp, &c, &d));
	OK(pgc_spans_cut(&sp, &a, &inf));
	ck_assert_uint_eq(sp.n, 0);
	pgc_spans_clear(&sp);
}
END_TEST

/* ---- overlapped commits (issue 34, item 3) --------------------------------- */

/* Opens front end port on schema as the broker does (STORAGE_SYNC_DATA),
 * with depth commits left in flight; timeout_ms 0: the default. */
static struct storage *
open_overlapped(const char *schema, unsigned depth, unsigned timeout_ms)
{
	struct storage_opts o = opts(schema, 7001, timeout_ms);
	struct storage *st;

	o.sync_mode = STORAGE_SYNC_DATA;
	opt_u64(&o, "postgres.pipeline-depth", depth);
	OK(storage_open("postgres", &o, &st));
	ck_assert_int_eq(role(st), STORAGE_ROLE_ACTIVE);
	return st;
}

/* Holds the ha row of schema FOR UPDATE from c (until COMMIT or ROLLBACK):
 * every commit's fence waits in PostgreSQL behind it. */
static void
hold_fence(PGconn *c, const char *schema)
{
	char sql[128];

	sql_ok(c, "BEGIN");
	snprintf(sql, sizeof(sql), "SELECT gen FROM \"%s\".ha WHERE id = 1 FOR UPDATE", schema);
	sql_ok(c, sql);
}

static void
commit_one(struct storage *st, const char *k)
{
	struct storage_txn *t;

	OK(storage_txn_begin(st, NULL, 0, &t));
	put_s(t, STORAGE_T_KEYS, k, "1");
	OK(storage_txn_commit(t));
}

/* Two commits return while PostgreSQL still works on them: not durable
 * (nor in PostgreSQL) until their COMMITs are answered; a sync waits for
 * that. */
START_TEST(test_overlap_durable_later)
{
	struct storage *st = open_overlapped("ovl", 2, 0);
	PGconn *pc = side(), *lk = side();
	uint64_t g0 = storage_commit_gen(st);
	int fd;

	hold_fence(lk, "ovl");
	commit_one(st, "a");
	commit_one(st, "b");
	U64_EQ(storage_commit_gen(st), g0 + 2);
	OK(storage_inflight_poll(storage_inflight(st), &fd));
	ck_assert_int_ge(fd, 0); /* out: the socket to watch */
	U64_EQ(storage_durable_gen(st), g0);
	ck_assert_int_eq(rows_in(pc, "ovl", "keys"), 0);
	sql_ok(lk, "ROLLBACK");
	OK(storage_sync(st));
	U64_EQ(storage_durable_gen(st), g0 + 2);
	ck_assert_int_eq(rows_in(pc, "ovl", "keys"), 2);
	OK(storage_inflight_poll(storage_inflight(st), &fd));
	ck_assert_int_eq(fd, -1);
	/* without a sync: durable once the answers are read */
	commit_one(st, "c");
	for (int64_t end = now_ms() + 5000;
		storage_durable_gen(st) < g0 + 3 && now_ms() < end; usleep(1000)) {
		OK(storage_inflight_poll(storage_inflight(st), &fd));
	}
	U64_EQ(storage_durable_gen(st), g0 + 3);
	ck_assert_int_eq(rows_in(pc, "ovl", "keys"), 3);
	ck_assert_int_eq(role(st), STORAGE_ROLE_ACTIVE);
	/* and the pipeline ended: PostgreSQL counts the session idle (the
	 * lease, idle_session_timeout, runs only then) */
	ck_assert_int_eq(sql_int(pc, "SELECT count(*) FROM pg_stat_activity WHERE "
				     "application_name = 'echd' AND state = 'idle'"),
		1);
	PQfinish(lk);
	PQfinish(pc);
	storage_close(st);
}
END_TEST

/* The first of two commits in flight fails in PostgreSQL (a row it wrote
 * was not stored): PostgreSQL skips the second, which alone would have
 * gone through. Both were in the cache: the front end leaves the role, the
 * sync answers the failure, and neither generation becomes durable. */
START_TEST(test_overlap_first_fails)
{
	struct storage *st = open_overlapped("ovlfail", 2, 0);
	struct storage_txn *t;
	PGconn *pc = side(), *lk = side();
	uint64_t g0 = storage_commit_gen(st);

	sql_ok(pc, "CREATE FUNCTION ovlfail.drop_bad() RETURNS trigger LANGUAGE plpgsql AS "
		   "$$BEGIN IF NEW.k = 'bad'::bytea THEN RETURN NULL; END IF; RETURN NEW; END$$");
	sql_ok(pc, "CREATE TRIGGER drop_bad BEFORE INSERT ON ovlfail.keys FOR EACH ROW "
		   "EXECUTE FUNCTION ovlfail.drop_bad()");
	hold_fence(lk, "ovlfail");
	commit_one(st, "bad");
	commit_one(st, "good");
	U64_EQ(storage_durable_gen(st), g0);
	sql_ok(lk, "ROLLBACK");
	FAILS(storage_sync(st), -EIO);
	U64_EQ(storage_durable_gen(st), g0);
	ck_assert_int_eq(rows_in(pc, "ovlfail", "keys"), 0); /* "good" was skipped */
	ck_assert_int_eq(role(st), STORAGE_ROLE_STANDBY);
	FAILS(storage_txn_begin(st, NULL, 0, &t), ECHD_ESTANDBY);
	/* Told once (the broker closed the clients then): the next sync
	 * starts afresh. */
	OK(storage_sync(st));
	/* A takeover loads what PostgreSQL has: neither. */
	sql_ok(pc, "DROP TRIGGER drop_bad ON ovlfail.keys");
	ck_assert_int_eq(poll_until_active(st, 3000).role, STORAGE_ROLE_ACTIVE);
	OK(storage_txn_begin(st, NULL, STORAGE_TXN_RDONLY, &t));
	get_is(t, STORAGE_T_KEYS, "good", NULL);
	get_is(t, STORAGE_T_KEYS, "bad", NULL);
	storage_txn_abort(t);
	PQfinish(lk);
	PQfinish(pc);
	storage_close(st);
}
END_TEST

/* Fenced while two are out: a third commit waits behind them (pending) or
 * meets the failure; the sync answers ECHD_ESTANDBY for all. */
START_TEST(test_overlap_fenced)
{
	struct storage *st = open_overlapped("ovlfence", 2, 0);
	struct storage_txn *t;
	PGconn *pc = side(), *lk = side();
	uint64_t g0 = storage_commit_gen(st);
	int rc;

	hold_fence(lk, "ovlfence");
	commit_one(st, "a");
	commit_one(st, "b");
	sql_ok(lk, "UPDATE ovlfence.ha SET gen = gen + 1");
	sql_ok(lk, "COMMIT");
	OK(storage_txn_begin(st, NULL, 0, &t));
	put_s(t, STORAGE_T_KEYS, "c", "1");
	rc = storage_txn_commit(t);
	ck_assert_msg(rc == 0 || rc == ECHD_ESTANDBY, "commit: %d", rc);
	U64_EQ(storage_durable_gen(st), g0);
	FAILS(storage_sync(st), ECHD_ESTANDBY);
	U64_EQ(storage_durable_gen(st), g0);
	ck_assert_int_eq(role(st), STORAGE_ROLE_STANDBY);
	ck_assert_int_eq(rows_in(pc, "ovlfence", "keys"), 0);
	PQfinish(lk);
	PQfinish(pc);
	storage_close(st);
}
END_TEST

/* No answer to the batch out within timeout-ms: a poll (the broker's, as
 * it waits on the socket) finds it late, and it is in doubt. */
START_TEST(test_overlap_late_answer)
{
	struct storage *st = open_overlapped("ovllate", 1, 300);
	PGconn *lk = side();
	int64_t t0, end;
	int fd, rc = 0;

	hold_fence(lk, "ovllate");
	t0 = now_ms();
	commit_one(st, "a");
	for (end = now_ms() + 3000; rc == 0 && now_ms() < end; usleep(20 * 1000)) {
		rc = storage_inflight_poll(storage_inflight(st), &fd);
	}
	FAILS(rc, ECHD_EINDOUBT);
	ck_assert_int_ge(now_ms() - t0, 300);
	ck_assert_int_eq(role(st), STORAGE_ROLE_OFFLINE);
	FAILS(storage_sync(st), ECHD_EINDOUBT);
	sql_ok(lk, "ROLLBACK");
	PQfinish(lk);
	storage_close(st);
}
END_TEST

/* Depth 1: one batch out; the commits meanwhile wait in the cache and go
 * as one batch when it lands, each key's last state: durable together. A
 * failure of the batch out drops them unsent. */
START_TEST(test_overlap_pending_merged)
{
	struct storage *st = open_overlapped("ovlmerge", 1, 0);
	struct storage_txn *t;
	PGconn *pc = side(), *lk = side();
	uint64_t g0 = storage_commit_gen(st);
	struct st_buf kb = {"b", 1};

	hold_fence(lk, "ovlmerge");
	commit_one(st, "a");
	commit_one(st, "b");
	commit_one(st, "c");
	OK(storage_txn_begin(st, NULL, 0, &t));
	OK(storage_del(t, STORAGE_T_KEYS, &kb)); /* b: written and gone, never sent */
	put_s(t, STORAGE_T_KEYS, "c", "2");
	OK(storage_txn_commit(t));
	U64_EQ(storage_commit_gen(st), g0 + 4);
	U64_EQ(storage_durable_gen(st), g0);
	sql_ok(lk, "ROLLBACK");
	OK(storage_sync(st));
	U64_EQ(storage_durable_gen(st), g0 + 4);
	ck_assert_int_eq(rows_in(pc, "ovlmerge", "keys"), 2);
	ck_assert_int_eq(sql_int(pc, "SELECT count(*) FROM ovlmerge.keys WHERE k = 'c' AND "
				     "v = '2'"),
		1);
	/* a failed first one: the pending ones are never sent */
	sql_ok(pc, "CREATE FUNCTION ovlmerge.drop_bad() RETURNS trigger LANGUAGE plpgsql AS "
		   "$$BEGIN IF NEW.k = 'bad'::bytea THEN RETURN NULL; END IF; RETURN NEW; END$$");
	sql_ok(pc, "CREATE TRIGGER drop_bad BEFORE INSERT ON ovlmerge.keys FOR EACH ROW "
		   "EXECUTE FUNCTION ovlmerge.drop_bad()");
	hold_fence(lk, "ovlmerge");
	commit_one(st, "bad");
	commit_one(st, "d");
	sql_ok(lk, "ROLLBACK");
	FAILS(storage_sync(st), -EIO);
	U64_EQ(storage_durable_gen(st), g0 + 4);
	ck_assert_int_eq(rows_in(pc, "ovlmerge", "keys"), 2);
	ck_assert_int_eq(role(st), STORAGE_ROLE_STANDBY);
	PQfinish(lk);
	PQfinish(pc);
	storage_close(st);
}
END_TEST

/* The connection lost (no answer within timeout-ms) with two commits out,
 * their COMMITs sent: both in doubt. */
START_TEST(test_overlap_lost_in_doubt)
{
	struct storage *st = open_overlapped("ovllost", 2, 300);
	PGconn *pc = side(), *lk = side();
	uint64_t g0 = storage_commit_gen(st);

	hold_fence(lk, "ovllost");
	commit_one(st, "a");
	commit_one(st, "b");
	FAILS(storage_sync(st), ECHD_EINDOUBT);
	U64_EQ(storage_durable_gen(st), g0);
	ck_assert_int_eq(role(st), STORAGE_ROLE_OFFLINE);
	sql_ok(lk, "ROLLBACK");
	PQfinish(lk);
	PQfinish(pc);
	storage_close(st);
}
END_TEST

static Suite *
pg_suite(void)
{
	Suite *s = suite_create("postgres");
	TCase *tc = tcase_create("rows");

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_reopen_keeps_rows);
	tcase_add_test(tc, test_aborts_write_nothing);
	tcase_add_test(tc, test_many_keys_one_commit);
	tcase_add_test(tc, test_commit_split_under_limits);
	tcase_add_test(tc, test_binary_and_large);
	tcase_add_test(tc, test_refused_commit);
	tcase_add_test(tc, test_rows_not_stored_fail_the_commit);
	tcase_add_test(tc, test_triggers_and_rules_refused);
	suite_add_tcase(s, tc);

	tc = tcase_create("ha");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_standby_takes_over);
	tcase_add_test(tc, test_shards);
	tcase_add_test(tc, test_shard_servers);
	tcase_add_test(tc, test_fenced_commit);
	tcase_add_test(tc, test_poll_sees_takeover);
	tcase_add_test(tc, test_killed_session);
	tcase_add_test(tc, test_killed_session_poll);
	tcase_add_test(tc, test_commit_times_out);
	tcase_add_test(tc, test_takeover_during_commit);
	tcase_add_test(tc, test_lost_before_commit_ran);
	tcase_add_test(tc, test_stall_after_commit_sent);
	tcase_add_test(tc, test_lease_replaces_hung_active);
	suite_add_tcase(s, tc);

	/* alone: it makes the server wait for a synchronous standby; the
	 * teardown (in the parent) undoes that even when the test fails */
	tc = tcase_create("indoubt");
	tcase_set_timeout(tc, 120);
	tcase_add_unchecked_fixture(tc, NULL, sync_standby_reset);
	tcase_add_test(tc, test_lost_during_commit_in_doubt);
	suite_add_tcase(s, tc);

	tc = tcase_create("overlap");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_overlap_durable_later);
	tcase_add_test(tc, test_overlap_first_fails);
	tcase_add_test(tc, test_overlap_fenced);
	tcase_add_test(tc, test_overlap_lost_in_doubt);
	tcase_add_test(tc, test_overlap_pending_merged);
	tcase_add_test(tc, test_overlap_late_answer);
	suite_add_tcase(s, tc);

	tc = tcase_create("open");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_open_unreachable);
	tcase_add_test(tc, test_read_only);
	tcase_add_test(tc, test_newer_version_refused);
	suite_add_tcase(s, tc);

	tc = tcase_create("cache");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_cache_spans);
	tcase_add_test(tc, test_lazy_reads);
	tcase_add_test(tc, test_lazy_writes_stay_bounded);
	tcase_add_test(tc, test_lazy_back_and_writes);
	tcase_add_test(tc, test_lazy_delete_during_fetch);
	tcase_add_test(tc, test_lazy_big_rows);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	SRunner *sr;
	int failed;

	pg_url = getenv("ECHD_TEST_PG_URL");
	if (pg_url == NULL || pg_url[0] == '\0') {
		fprintf(stderr, "test-pg: ECHD_TEST_PG_URL is not set: run it under "
				"tests/helpers/pgtmp.py (meson test does)\n");
		return 1;
	}
	sr = srunner_create(pg_suite());
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? 0 : 1;
}
