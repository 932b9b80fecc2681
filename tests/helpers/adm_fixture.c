/* adm_fixture.c - test helper for tests/integration/09-admin.py: writes a
 * data directory through the storage interface, either to break one
 * invariant (so that `echo-admin check` has something to find) or to build
 * a big pending list faster than a million XADDs over the network could.
 * Never run it on data you keep.
 *
 *   adm-fixture DIR cpel-del STREAM GROUP CONSUMER
 *       deletes the first row of CONSUMER's PEL index (cpel)
 *   adm-fixture DIR group-pending STREAM GROUP
 *       adds one to the group's pending counter
 *   adm-fixture DIR consumer-pending STREAM GROUP CONSUMER
 *       adds one to the consumer's pending counter
 *   adm-fixture DIR released-time STREAM GROUP
 *       gives the group's first released (XNACK) pending entry a delivery time
 *   adm-fixture DIR due-shift STREAM GROUP
 *       moves the group's first due row (policy deadlines) one ms later
 *   adm-fixture DIR due-clear STREAM GROUP
 *       deletes every due row of the group, as an echd before them left it
 *   adm-fixture DIR length STREAM
 *       adds one to the stream's length
 *   adm-fixture DIR idmp-queue-del STREAM
 *       deletes the first row of the stream's idempotent records' queue
 *       (IDMP table, 'Q' rows; layout in storage/model/stream_idmp.c)
 *   adm-fixture DIR fill STREAM GROUP CONSUMER N
 *       creates STREAM with entries 1-1 .. N-1 (f v), GROUP at 0, and
 *       delivers every entry to CONSUMER: an N-entry PEL
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "echd.h"
#include "group.h"
#include "storage.h"
#include "stream.h"

static struct st_buf
cbuf(const char *s)
{
	struct st_buf b = {s, strlen(s)};
	return b;
}

static uint64_t
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Node limits as echd's defaults (stream-node-max-entries/-bytes). */
static int
fill(struct storage_txn *t, char **argv)
{
	struct st_buf sn = cbuf(argv[3]), gn = cbuf(argv[4]), cn = cbuf(argv[5]);
	struct st_buf fv[2] = {{"f", 1}, {"v", 1}};
	struct stream_id zero = {0, 0};
	unsigned long n = strtoul(argv[6], NULL, 10);
	uint64_t now = now_ms();
	struct stream_meta m;
	struct group_meta g;
	struct consumer_meta c;
	int rc;

	rc = stream_create(t, 0, &sn, &m);
	if (rc == 0) {
		rc = group_create(t, &m, &gn, &zero, 0, &g);
	}
	if (rc == 0) {
		rc = consumer_create(t, &g, &cn, now, &c);
	}
	for (unsigned long i = 1; rc == 0 && i <= n; i++) {
		struct stream_id id = {i, 1};
		rc = stream_append(t, &m, &id, fv, 2, 100, 4096);
		if (rc == 0) {
			group_advance(&m, &g, &id);
			rc = pel_deliver(t, &g, &c, &id, now);
		}
	}
	if (rc != 0) {
		return rc;
	}
	c.active_time = (int64_t)now;
	rc = consumer_save(t, &g, &cn, &c);
	if (rc == 0) {
		rc = group_save(t, &m, &gn, &g);
	}
	if (rc == 0) {
		rc = stream_meta_save(t, 0, &sn, &m);
	}
	return rc;
}

static int
damage(struct storage_txn *t, int argc, char **argv)
{
	const char *mode = argv[2];
	struct st_buf sn = cbuf(argv[3]), gn, cn;
	struct stream_meta m;
	struct group_meta g;
	struct consumer_meta c;
	int rc;

	if (strcmp(mode, "fill") == 0) {
		return argc == 7 ? fill(t, argv) : ECHD_EINVAL;
	}
	rc = stream_lookup(t, 0, &sn, &m);
	if (rc != 0) {
		return rc;
	}
	if (strcmp(mode, "length") == 0) {
		m.length++;
		return stream_meta_save(t, 0, &sn, &m);
	}
	if (strcmp(mode, "idmp-queue-del") == 0) {
		unsigned char k[9];
		struct st_buf seek = {k, 9}, key, val;
		struct storage_cursor *cur;

		echd_put_be64(k, m.sid);
		k[8] = 'Q';
		rc = storage_cursor_open(t, STORAGE_T_IDMP, &cur);
		if (rc != 0) {
			return rc;
		}
		rc = storage_cursor_seek(cur, &seek, &key, &val);
		if (rc == 0 && (key.len != 25 || memcmp(key.data, k, 9) != 0)) {
			rc = ECHD_ENOTFOUND;
		}
		if (rc == 0) {
			rc = storage_cursor_del(cur);
		}
		storage_cursor_close(cur);
		return rc;
	}
	if (argc < 5) {
		return ECHD_EINVAL;
	}
	gn = cbuf(argv[4]);
	rc = group_lookup(t, &m, &gn, &g);
	if (rc != 0) {
		return rc;
	}
	if (strcmp(mode, "group-pending") == 0) {
		g.pending++;
		return group_save(t, &m, &gn, &g);
	}
	if (strcmp(mode, "due-shift") == 0 || strcmp(mode, "due-clear") == 0) {
		bool shift = mode[4] == 's';
		unsigned char k[33];
		struct st_buf seek = {k, 8}, key, val, moved = {k, 33}, empty = {"", 0};
		struct storage_cursor *cur;

		echd_put_be64(k, g.gid);
		rc = storage_cursor_open(t, STORAGE_T_DUE, &cur);
		if (rc != 0) {
			return rc;
		}
		rc = storage_cursor_seek(cur, &seek, &key, &val);
		while (rc == 0 && key.len == 33 && memcmp(key.data, k, 8) == 0) {
			if (shift) {
				memcpy(k, key.data, 33);
				echd_put_be64(k + 9, echd_get_be64(k + 9) + 1);
			}
			rc = storage_cursor_del(cur);
			if (rc != 0 || shift) {
				break;
			}
			rc = storage_cursor_next(cur, &key, &val);
		}
		storage_cursor_close(cur);
		if (rc == ECHD_ENOTFOUND && !shift) {
			rc = 0;
		}
		return rc == 0 && shift ? storage_put(t, STORAGE_T_DUE, &moved, &empty, 0) : rc;
	}
	if (strcmp(mode, "released-time") == 0) {
		struct stream_id lo = {0, 0}, hi = {UINT64_MAX, UINT64_MAX};
		unsigned char k[24], v[24];
		struct st_buf kb = {k, 24}, vb = {v, 24};
		struct pel_iter *it;
		struct pel_row r;

		rc = pel_iter_create(t, &g, 0, &lo, &hi, &it);
		while (rc == 0 && (rc = pel_iter_next(it, &r)) == 0 && r.cid != PEL_UNOWNED) {
		}
		pel_iter_destroy(it);
		if (rc != 0) {
			return rc;
		}
		echd_put_be64(k, g.gid);
		echd_put_be64(k + 8, r.id.ms);
		echd_put_be64(k + 16, r.id.seq);
		echd_put_be64(v, PEL_UNOWNED);
		echd_put_be64(v + 8, 1);
		echd_put_be64(v + 16, r.delivery_count);
		return storage_put(t, STORAGE_T_PEL, &kb, &vb, 0);
	}
	if (argc < 6) {
		return ECHD_EINVAL;
	}
	cn = cbuf(argv[5]);
	rc = consumer_lookup(t, &g, &cn, &c);
	if (rc != 0) {
		return rc;
	}
	if (strcmp(mode, "consumer-pending") == 0) {
		c.pending++;
		return consumer_save(t, &g, &cn, &c);
	}
	if (strcmp(mode, "cpel-del") == 0) {
		unsigned char k[16];
		struct st_buf seek = {k, 16}, key, val;
		struct storage_cursor *cur;

		echd_put_be64(k, g.gid);
		echd_put_be64(k + 8, c.cid);
		rc = storage_cursor_open(t, STORAGE_T_CPEL, &cur);
		if (rc != 0) {
			return rc;
		}
		rc = storage_cursor_seek(cur, &seek, &key, &val);
		if (rc == 0 && (key.len != 32 || memcmp(key.data, k, 16) != 0)) {
			rc = ECHD_ENOTFOUND;
		}
		if (rc == 0) {
			rc = storage_cursor_del(cur);
		}
		storage_cursor_close(cur);
		return rc;
	}
	return ECHD_EINVAL;
}

int
main(int argc, char **argv)
{
	const struct storage_opt map_size = {"lmdb.map-size", "4294967296"};
	struct storage_opts so;
	struct storage *st;
	struct storage_txn *t;
	int rc;

	if (argc < 4) {
		fprintf(stderr, "usage: adm-fixture DIR MODE STREAM [GROUP [CONSUMER [N]]]\n");
		return 2;
	}
	memset(&so, 0, sizeof(so));
	so.dir = argv[1];
	/* room for a million-entry PEL in a fresh directory; the file is sparse */
	so.opt = &map_size;
	so.nopt = 1;
	rc = storage_open(NULL, &so, &st);
	if (rc == ECHD_EINVAL) {
		/* a copy of an lmdb-staged directory with staged rows: damage it
		 * through them (what echd and echo-admin read) */
		rc = storage_open("lmdb-staged", &so, &st);
	}
	if (rc != 0) {
		fprintf(stderr, "adm-fixture: open %s: %s\n", argv[1], echd_strerror(rc));
		return 1;
	}
	rc = storage_txn_begin(st, NULL, 0, &t);
	if (rc == 0) {
		rc = damage(t, argc, argv);
		if (rc == 0) {
			rc = storage_txn_commit(t);
		} else {
			storage_txn_abort(t);
		}
	}
	storage_close(st);
	if (rc != 0) {
		fprintf(stderr, "adm-fixture: %s: %s\n", argv[2], echd_strerror(rc));
		return 1;
	}
	return 0;
}
