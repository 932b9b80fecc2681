/* adm_view.c - what each listing shows, as a table or as JSON.
 *
 * The live and offline readers fill the same row structs (adm.h) and hand
 * them here one at a time, so both modes print the same columns and the
 * same JSON fields. JSON field names are part of echo-admin's interface:
 * add fields, never rename them (docs/echo-admin.1 lists them).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "adm.h"
#include "echd.h"

#define MAX_CELLS 8
/* The owner column of a pending entry XNACK released (XPENDING: ""). */
#define RELEASED "(released)"

enum view_kind { V_STREAMS, V_GROUPS, V_CONSUMERS, V_PENDING, V_ENTRY, V_STATS };

struct adm_view {
	enum view_kind kind;
	const struct adm_ctx *x;
	struct adm_table *t;
	struct adm_str cell[MAX_CELLS];
	uint64_t n;
	bool payload;
};

static const struct adm_col streams_cols[] = {
	{"STREAM", ADM_FLEX, 8},
	{"LENGTH", ADM_RIGHT, 0},
	{"FIRST ID", ADM_FLEX, 8},
	{"LAST ID", ADM_FLEX, 8},
	{"GROUPS", ADM_RIGHT, 0},
	{"LAST ENTRY", ADM_RIGHT, 0},
	{"IDMP", 0, 0},
};

static const struct adm_col groups_cols[] = {
	{"GROUP", ADM_FLEX, 8},
	{"LAST DELIVERED", ADM_FLEX, 8},
	{"READ", ADM_RIGHT, 0},
	{"LAG", ADM_RIGHT, 0},
	{"PENDING", ADM_RIGHT, 0},
	{"CONSUMERS", ADM_RIGHT, 0},
	{"OLDEST IDLE", ADM_RIGHT, 0},
};

static const struct adm_col consumers_cols[] = {
	{"CONSUMER", ADM_FLEX, 8},
	{"PENDING", ADM_RIGHT, 0},
	{"IDLE", ADM_RIGHT, 0},
	{"INACTIVE", ADM_RIGHT, 0},
};

static const struct adm_col pending_cols[] = {
	{"ID", ADM_FLEX, 8},
	{"CONSUMER", ADM_FLEX, 8},
	{"IDLE", ADM_RIGHT, 0},
	{"DELIVERIES", ADM_RIGHT, 0},
	{"PAYLOAD", ADM_FLEX, 10},
};

static const struct adm_col entry_cols[] = {
	{"GROUP", ADM_FLEX, 8},
	{"DELIVERED", 0, 0},
	{"PENDING", 0, 0},
	{"CONSUMER", ADM_FLEX, 8},
	{"IDLE", ADM_RIGHT, 0},
	{"DELIVERIES", ADM_RIGHT, 0},
};

static const struct adm_col stats_cols[] = {
	{"FIELD", 0, 0},
	{"VALUE", ADM_FLEX, 10},
};

static struct adm_view *
view_new(const struct adm_ctx *x, enum view_kind kind, const struct adm_col *cols, size_t ncols)
{
	struct adm_view *v = echd_calloc(1, sizeof(*v));

	if (v == NULL) {
		adm_err(ADM_EXIT_FAILED, "out of memory");
		return NULL;
	}
	v->kind = kind;
	v->x = x;
	if (!adm_out.json) {
		v->t = adm_table_create(cols, ncols);
		if (v->t == NULL) {
			echd_free(v);
			adm_err(ADM_EXIT_FAILED, "out of memory");
			return NULL;
		}
	}
	return v;
}

static void
cells_clear(struct adm_view *v)
{
	for (size_t i = 0; i < MAX_CELLS; i++) {
		adm_str_clear(&v->cell[i]);
	}
}

static int
emit(struct adm_view *v, size_t ncells)
{
	const char *cells[MAX_CELLS];

	for (size_t i = 0; i < ncells; i++) {
		cells[i] = v->cell[i].p != NULL ? v->cell[i].p : "";
	}
	return adm_table_row(v->t, cells);
}

static void
cell_count(struct adm_str *s, uint64_t n)
{
	char buf[40];

	adm_str_addf(s, "%s", adm_fmt_count(buf, n));
}

static void
cell_id(struct adm_str *s, const struct stream_id *id)
{
	char buf[48];

	adm_str_addf(s, "%s", adm_fmt_id(buf, id));
}

static void
cell_duration(struct adm_str *s, int64_t ms)
{
	char buf[32];

	adm_str_addf(s, "%s", adm_fmt_duration(buf, ms));
}

static void
json_stream_group_header(const char *stream, const char *group)
{
	adm_json_obj();
	adm_json_key("stream");
	adm_json_cstr(stream);
	if (group != NULL) {
		adm_json_key("group");
		adm_json_cstr(group);
	}
}

/* ---- streams -------------------------------------------------------------- */

struct adm_view *
adm_view_streams_begin(const struct adm_ctx *x)
{
	struct adm_view *v = view_new(x, V_STREAMS, streams_cols, 7);

	if (v != NULL && adm_out.json) {
		adm_json_obj();
		adm_json_key("db");
		adm_json_uint(x->o->db);
		adm_json_key("streams");
		adm_json_arr();
	}
	return v;
}

static int64_t
id_age(const struct adm_ctx *x, const struct stream_id *id)
{
	int64_t now = x->now_ms;

	return id->ms > (uint64_t)now ? 0 : now - (int64_t)id->ms;
}

int
adm_view_stream(struct adm_view *v, const struct adm_stream_info *s)
{
	v->n++;
	if (adm_out.json) {
		adm_json_obj();
		adm_json_key("name");
		adm_json_str(s->name.data, s->name.len);
		adm_json_key("length");
		adm_json_uint(s->length);
		adm_json_key("first_id");
		if (s->empty) {
			adm_json_null();
		} else {
			adm_json_id(&s->first);
		}
		adm_json_key("last_id");
		if (s->empty) {
			adm_json_null();
		} else {
			adm_json_id(&s->last_entry);
		}
		adm_json_key("last_generated_id");
		adm_json_id(&s->last_generated);
		adm_json_key("max_deleted_id");
		adm_json_id(&s->max_deleted);
		adm_json_key("entries_added");
		adm_json_uint(s->entries_added);
		adm_json_key("groups");
		adm_json_uint(s->groups);
		adm_json_key("last_entry_age_ms");
		if (s->empty) {
			adm_json_null();
		} else {
			adm_json_int(id_age(v->x, &s->last_entry));
		}
		adm_json_key("idmp");
		if (!s->idmp_known) {
			adm_json_null();
		} else {
			static const char *const keys[] = {"duration_s", "maxsize", "pids_tracked",
				"iids_tracked", "iids_added", "iids_duplicates"};
			const uint64_t vals[] = {s->idmp.duration_s, s->idmp.maxsize, s->idmp.pids,
				s->idmp.iids, s->idmp.added, s->idmp.duplicates};
			adm_json_obj();
			for (size_t i = 0; i < 6; i++) {
				adm_json_key(keys[i]);
				adm_json_uint(vals[i]);
			}
			adm_json_obj_end();
		}
		adm_json_obj_end();
		return 0;
	}
	cells_clear(v);
	adm_str_add_escaped(&v->cell[0], s->name.data, s->name.len);
	cell_count(&v->cell[1], s->length);
	if (s->empty) {
		adm_str_add(&v->cell[2], "-", 1);
		adm_str_add(&v->cell[3], "-", 1);
		adm_str_add(&v->cell[5], "-", 1);
	} else {
		cell_id(&v->cell[2], &s->first);
		cell_id(&v->cell[3], &s->last_entry);
		cell_duration(&v->cell[5], id_age(v->x, &s->last_entry));
	}
	cell_count(&v->cell[4], s->groups);
	if (!s->idmp_known || (s->idmp.added == 0 && s->idmp.pids == 0)) {
		adm_str_add(&v->cell[6], "-", 1); /* never used */
	} else {
		/* ids:durations/maxsize: the idempotent ids kept now and the
		 * stream's settings, narrow enough for 80 columns; --json has
		 * the other counters */
		adm_str_addf(&v->cell[6], "%llu:%llus/%llu", (unsigned long long)s->idmp.iids,
			(unsigned long long)s->idmp.duration_s, (unsigned long long)s->idmp.maxsize);
	}
	return emit(v, 7);
}

/* ---- groups --------------------------------------------------------------- */

struct adm_view *
adm_view_groups_begin(const struct adm_ctx *x, const char *stream)
{
	struct adm_view *v = view_new(x, V_GROUPS, groups_cols, 7);

	if (v != NULL && adm_out.json) {
		json_stream_group_header(stream, NULL);
		adm_json_key("groups");
		adm_json_arr();
	}
	return v;
}

int
adm_view_group(struct adm_view *v, const struct adm_group_info *g)
{
	v->n++;
	if (adm_out.json) {
		adm_json_obj();
		adm_json_key("name");
		adm_json_str(g->name.data, g->name.len);
		adm_json_key("last_delivered_id");
		adm_json_id(&g->last_delivered);
		adm_json_key("entries_read");
		if (g->entries_read < 0) {
			adm_json_null();
		} else {
			adm_json_int(g->entries_read);
		}
		adm_json_key("lag");
		if (g->lag_known) {
			adm_json_int(g->lag);
		} else {
			adm_json_null();
		}
		adm_json_key("pending");
		adm_json_uint(g->pending);
		adm_json_key("consumers");
		adm_json_uint(g->consumers);
		adm_json_key("oldest_pending_id");
		if (g->has_oldest) {
			adm_json_id(&g->oldest_id);
		} else {
			adm_json_null();
		}
		adm_json_key("oldest_pending_idle_ms");
		if (g->has_oldest) {
			adm_json_int(g->oldest_idle_ms);
		} else {
			adm_json_null();
		}
		if (g->has_policy) {
			/* echd's group policy: only for a group that has one */
			adm_json_key("policy");
			adm_json_obj();
			adm_json_key("ack_wait_ms");
			adm_json_int(g->ack_wait);
			adm_json_key("max_deliver");
			adm_json_int(g->max_deliver);
			adm_json_key("dead_letter");
			if (g->dead_letter.len > 0) {
				adm_json_str(g->dead_letter.data, g->dead_letter.len);
			} else {
				adm_json_null();
			}
			adm_json_key("max_ack_pending");
			adm_json_int(g->max_ack_pending);
			adm_json_key("dead_lettered");
			adm_json_int(g->dead_lettered);
			adm_json_obj_end();
		}
		adm_json_obj_end();
		return 0;
	}
	cells_clear(v);
	adm_str_add_escaped(&v->cell[0], g->name.data, g->name.len);
	cell_id(&v->cell[1], &g->last_delivered);
	if (g->entries_read < 0) {
		adm_str_add(&v->cell[2], "?", 1);
	} else {
		cell_count(&v->cell[2], (uint64_t)g->entries_read);
	}
	if (g->lag_known) {
		cell_count(&v->cell[3], (uint64_t)g->lag);
	} else {
		adm_str_add(&v->cell[3], "?", 1);
	}
	cell_count(&v->cell[4], g->pending);
	cell_count(&v->cell[5], g->consumers);
	if (g->has_oldest) {
		cell_duration(&v->cell[6], g->oldest_idle_ms);
	} else {
		adm_str_add(&v->cell[6], "-", 1);
	}
	return emit(v, 7);
}

/* ---- consumers ------------------------------------------------------------ */

struct adm_view *
adm_view_consumers_begin(const struct adm_ctx *x, const char *stream, const char *group)
{
	struct adm_view *v = view_new(x, V_CONSUMERS, consumers_cols, 4);

	if (v != NULL && adm_out.json) {
		json_stream_group_header(stream, group);
		adm_json_key("consumers");
		adm_json_arr();
	}
	return v;
}

int
adm_view_consumer(struct adm_view *v, const struct adm_consumer_info *c)
{
	v->n++;
	if (adm_out.json) {
		adm_json_obj();
		adm_json_key("name");
		adm_json_str(c->name.data, c->name.len);
		adm_json_key("pending");
		adm_json_uint(c->pending);
		adm_json_key("idle_ms");
		adm_json_int(c->idle_ms);
		adm_json_key("inactive_ms");
		if (c->inactive_ms < 0) {
			adm_json_null();
		} else {
			adm_json_int(c->inactive_ms);
		}
		adm_json_obj_end();
		return 0;
	}
	cells_clear(v);
	adm_str_add_escaped(&v->cell[0], c->name.data, c->name.len);
	cell_count(&v->cell[1], c->pending);
	cell_duration(&v->cell[2], c->idle_ms);
	if (c->inactive_ms < 0) {
		adm_str_add(&v->cell[3], "never", 5);
	} else {
		cell_duration(&v->cell[3], c->inactive_ms);
	}
	return emit(v, 4);
}

/* ---- pending -------------------------------------------------------------- */

struct adm_view *
adm_view_pending_begin(const struct adm_ctx *x, const char *stream, const char *group)
{
	bool payload = x->o->payload;
	struct adm_view *v = view_new(x, V_PENDING, pending_cols, payload ? 5 : 4);

	if (v == NULL) {
		return NULL;
	}
	v->payload = payload;
	if (adm_out.json) {
		json_stream_group_header(stream, group);
		adm_json_key("pending");
		adm_json_arr();
	}
	return v;
}

static void
json_fields(const struct st_buf *fv, size_t nfv)
{
	adm_json_arr();
	for (size_t i = 0; i + 1 < nfv; i += 2) {
		adm_json_arr();
		adm_json_str(fv[i].data, fv[i].len);
		adm_json_str(fv[i + 1].data, fv[i + 1].len);
		adm_json_arr_end();
	}
	adm_json_arr_end();
}

int
adm_view_pending(struct adm_view *v, const struct adm_pending_row *r)
{
	v->n++;
	if (adm_out.json) {
		adm_json_obj();
		adm_json_key("id");
		adm_json_id(&r->id);
		adm_json_key("consumer");
		adm_json_str(r->consumer.data, r->consumer.len);
		adm_json_key("idle_ms");
		adm_json_int(r->idle_ms);
		adm_json_key("deliveries");
		adm_json_uint(r->deliveries);
		if (r->with_payload) {
			adm_json_key("deleted");
			adm_json_bool(r->deleted);
			adm_json_key("fields");
			if (r->deleted) {
				adm_json_null();
			} else {
				json_fields(r->fv, r->nfv);
			}
		}
		adm_json_obj_end();
		return 0;
	}
	cells_clear(v);
	cell_id(&v->cell[0], &r->id);
	if (r->released) {
		adm_str_add(&v->cell[1], RELEASED, strlen(RELEASED));
		adm_str_add(&v->cell[2], "-", 1);
	} else {
		adm_str_add_escaped(&v->cell[1], r->consumer.data, r->consumer.len);
		cell_duration(&v->cell[2], r->idle_ms);
	}
	cell_count(&v->cell[3], r->deliveries);
	if (v->payload) {
		if (r->deleted) {
			adm_str_add(&v->cell[4], "(deleted)", 9);
		}
		for (size_t i = 0; !r->deleted && i + 1 < r->nfv; i += 2) {
			if (i > 0) {
				adm_str_add(&v->cell[4], " ", 1);
			}
			adm_str_add_escaped(&v->cell[4], r->fv[i].data, r->fv[i].len);
			adm_str_add(&v->cell[4], "=", 1);
			adm_str_add_escaped(&v->cell[4], r->fv[i + 1].data, r->fv[i + 1].len);
		}
	}
	return emit(v, v->payload ? 5 : 4);
}

/* ---- entry -------------------------------------------------------------- */

struct adm_view *
adm_view_entry_begin(const struct adm_ctx *x, const char *stream, const struct stream_id *id,
	bool exists, const struct st_buf *fv, size_t nfv)
{
	struct adm_view *v = view_new(x, V_ENTRY, entry_cols, 6);
	char buf[48];

	if (v == NULL) {
		return NULL;
	}
	if (adm_out.json) {
		json_stream_group_header(stream, NULL);
		adm_json_key("id");
		adm_json_id(id);
		adm_json_key("exists");
		adm_json_bool(exists);
		adm_json_key("age_ms");
		adm_json_int(id_age(x, id));
		adm_json_key("fields");
		if (exists) {
			json_fields(fv, nfv);
		} else {
			adm_json_null();
		}
		adm_json_key("groups");
		adm_json_arr();
		return v;
	}
	{
		struct adm_str s = {0};
		size_t fw = 0;

		adm_str_add_escaped(&s, stream, strlen(stream));
		printf("stream  %s\n", s.p);
		printf("id      %s\n", adm_fmt_id(buf, id));
		if (exists) {
			printf("state   in the stream, %zu field%s, age %s\n", nfv / 2,
				nfv == 2 ? "" : "s", adm_fmt_duration(buf, id_age(x, id)));
		} else {
			printf("state   deleted from the stream\n");
		}
		for (size_t i = 0; exists && i + 1 < nfv; i += 2) {
			adm_str_clear(&s);
			adm_str_add_escaped(&s, fv[i].data, fv[i].len);
			if (s.len > fw) {
				fw = s.len;
			}
		}
		for (size_t i = 0; exists && i + 1 < nfv; i += 2) {
			adm_str_clear(&s);
			adm_str_add_escaped(&s, fv[i].data, fv[i].len);
			printf("  %-*s  ", (int)(fw < 30 ? fw : 30), s.p);
			adm_str_clear(&s);
			adm_str_add_escaped(&s, fv[i + 1].data, fv[i + 1].len);
			printf("%s\n", s.p);
		}
		putchar('\n');
		adm_str_finish(&s);
	}
	return v;
}

int
adm_view_entry_group(struct adm_view *v, const struct adm_entry_group *g)
{
	v->n++;
	if (adm_out.json) {
		adm_json_obj();
		adm_json_key("name");
		adm_json_str(g->name.data, g->name.len);
		adm_json_key("delivered");
		adm_json_bool(g->delivered);
		adm_json_key("pending");
		adm_json_bool(g->pending);
		adm_json_key("consumer");
		if (g->pending) {
			adm_json_str(g->consumer.data, g->consumer.len);
		} else {
			adm_json_null();
		}
		adm_json_key("idle_ms");
		if (g->pending) {
			adm_json_int(g->idle_ms);
		} else {
			adm_json_null();
		}
		adm_json_key("deliveries");
		if (g->pending) {
			adm_json_uint(g->deliveries);
		} else {
			adm_json_null();
		}
		adm_json_obj_end();
		return 0;
	}
	cells_clear(v);
	adm_str_add_escaped(&v->cell[0], g->name.data, g->name.len);
	adm_str_addf(&v->cell[1], "%s", g->delivered ? "yes" : "no");
	adm_str_addf(&v->cell[2], "%s", g->pending ? "yes" : "no");
	if (g->pending && g->released) {
		adm_str_add(&v->cell[3], RELEASED, strlen(RELEASED));
		adm_str_add(&v->cell[4], "-", 1);
		cell_count(&v->cell[5], g->deliveries);
	} else if (g->pending) {
		adm_str_add_escaped(&v->cell[3], g->consumer.data, g->consumer.len);
		cell_duration(&v->cell[4], g->idle_ms);
		cell_count(&v->cell[5], g->deliveries);
	} else {
		adm_str_add(&v->cell[3], "-", 1);
		adm_str_add(&v->cell[4], "-", 1);
		adm_str_add(&v->cell[5], "-", 1);
	}
	return emit(v, 6);
}

/* ---- stats -------------------------------------------------------------- */

struct adm_view *
adm_view_stats_begin(const struct adm_ctx *x)
{
	struct adm_view *v = view_new(x, V_STATS, stats_cols, 2);

	if (v != NULL && adm_out.json) {
		adm_json_obj();
		adm_json_key("source");
		adm_json_cstr(x->live ? "live" : "offline");
	}
	return v;
}

int
adm_view_stat(struct adm_view *v, const char *key, const char *human_name, const char *human_value,
	const char *json_value, bool json_number)
{
	if (adm_out.json) {
		if (json_value == NULL) {
			return 0;
		}
		adm_json_key(key);
		if (json_number) {
			adm_json_number(json_value);
		} else {
			adm_json_cstr(json_value);
		}
		return 0;
	}
	if (human_name == NULL) {
		return 0;
	}
	cells_clear(v);
	adm_str_addf(&v->cell[0], "%s", human_name);
	adm_str_addf(&v->cell[1], "%s", human_value);
	return emit(v, 2);
}

/* ---- end ---------------------------------------------------------------- */

void
adm_view_end(struct adm_view *v, bool truncated)
{
	if (v == NULL) {
		return;
	}
	if (adm_out.json) {
		switch (v->kind) {
		case V_STATS:
			break;
		case V_PENDING:
			adm_json_arr_end();
			adm_json_key("count");
			adm_json_uint(v->n);
			adm_json_key("truncated");
			adm_json_bool(truncated);
			break;
		default:
			adm_json_arr_end();
			break;
		}
		adm_json_obj_end();
		adm_json_done();
	} else {
		adm_table_end(v->t);
		if (truncated) {
			fflush(stdout);
			fprintf(stderr,
				"echo-admin: stopped after %llu rows (--limit); more may match\n",
				(unsigned long long)v->n);
		}
	}
	for (size_t i = 0; i < MAX_CELLS; i++) {
		adm_str_finish(&v->cell[i]);
	}
	echd_free(v);
}
