/* evict.c - maxmemory-clients: one bound on the output all clients hold
 * together, past which the biggest are closed (Redis' client eviction).
 *
 * Why. Each client's output is bounded by client-output-buffer-limit, but
 * not their sum: 40 subscribers that never read, each under its own 32 MB,
 * took 1.26 GB. What counts is a client's output not yet sent: its held
 * replies and messages (out) and what waits in its bufferevent for the
 * socket. The server keeps the sum (srv->clients_mem) as each changes: the
 * bufferevent's part through an evbuffer callback (libevent drains it as
 * the socket takes bytes), the held part at the points it grows (a flush,
 * a delivered message). After those points, if the sum is over the bound,
 * clients are closed from the biggest down until it is not; a client with
 * CLIENT NO-EVICT on counts but is never closed. Each closing is counted
 * in INFO's evicted_clients and logged.
 *
 * The bound is a byte count or a percentage of the machine's memory (of
 * its cgroup's memory.max when that is lower): echd has no maxmemory, the
 * base Redis takes a percentage of. Query buffers are bounded on their own
 * (client-query-buffer-limit) and not counted.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>

#include "broker.h"

/* Bytes of memory the machine (or the cgroup echd runs in) has; 0 when
 * unknown. */
static uint64_t
memory_total(void)
{
	long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
	uint64_t total = pages > 0 && psize > 0 ? (uint64_t)pages * (uint64_t)psize : 0;
	char line[512], path[600];
	FILE *f = fopen("/proc/self/cgroup", "r");

	/* cgroup v2: "0::/system.slice/echd.service" */
	while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
		if (strncmp(line, "0::", 3) == 0) {
			FILE *m;
			unsigned long long max;
			line[strcspn(line, "\n")] = '\0';
			snprintf(path, sizeof(path), "/sys/fs/cgroup%s/memory.max", line + 3);
			m = fopen(path, "r");
			if (m != NULL && fscanf(m, "%llu", &max) == 1 && max > 0 &&
				(total == 0 || max < total)) {
				total = max; /* "max" (no limit) does not scan */
			}
			if (m != NULL) {
				fclose(m);
			}
			break;
		}
	}
	if (f != NULL) {
		fclose(f);
	}
	return total;
}

uint64_t
brk_evict_limit(struct brk_server *srv)
{
	const struct brk_config *cfg = &srv->cfg;

	if (cfg->maxmemory_clients_pct > 0) {
		if (srv->mem_total == 0) {
			srv->mem_total = memory_total();
		}
		return srv->mem_total / 100 * (uint64_t)cfg->maxmemory_clients_pct;
	}
	return cfg->maxmemory_clients > 0 ? (uint64_t)cfg->maxmemory_clients : 0;
}

/* Sets c's counted bytes to held + queued (both 0 once it is closing). */
static void
recount(struct brk_conn *c, size_t held, size_t queued)
{
	struct brk_server *srv = c->srv;

	if (c->flags & BRK_CONN_CLOSING) {
		held = queued = 0;
	}
	srv->clients_mem = srv->clients_mem - c->mem_held - c->mem_queued + held + queued;
	c->mem_held = held;
	c->mem_queued = queued;
}

static size_t
queued_of(const struct brk_conn *c)
{
	return c->bev != NULL ? evbuffer_get_length(bufferevent_get_output(c->bev)) : 0;
}

void
brk_evict_obuf_cb(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
	struct brk_conn *c = arg;

	(void)info;
	recount(c, c->mem_held, evbuffer_get_length(buf));
}

/* Closes the biggest clients that may be evicted until the sum is within
 * limit, or none is left. O(connections) a client closed. */
static void
evict(struct brk_server *srv, uint64_t limit)
{
	while (srv->clients_mem > limit) {
		struct brk_conn *big = NULL;
		char mem[32];

		for (struct brk_conn *c = srv->conns; c != NULL; c = c->next) {
			if ((c->flags & (BRK_CONN_CLOSING | BRK_CONN_NO_EVICT)) ||
				c->mem_held + c->mem_queued == 0) {
				continue;
			}
			if (big == NULL ||
				c->mem_held + c->mem_queued > big->mem_held + big->mem_queued) {
				big = c;
			}
		}
		if (big == NULL) {
			return; /* what is left may not be evicted */
		}
		snprintf(mem, sizeof(mem), "%zu", big->mem_held + big->mem_queued);
		echd_log(ECHD_LOG_WARNING,
			"client id=%llu addr=%s evicted: its %s bytes of output are the most while "
			"the clients' output (%llu bytes) is over maxmemory-clients (%llu bytes)",
			(unsigned long long)big->id, big->addr, mem,
			(unsigned long long)srv->clients_mem, (unsigned long long)limit);
		srv->stats.evicted_clients++;
		brk_conn_close_asap(big); /* forgets its bytes */
	}
}

void
brk_evict_note(struct brk_conn *c)
{
	struct brk_server *srv = c->srv;
	uint64_t limit;

	recount(c, c->out.len, queued_of(c));
	limit = brk_evict_limit(srv);
	if (limit > 0 && srv->clients_mem > limit) {
		evict(srv, limit);
	}
}

void
brk_evict_forget(struct brk_conn *c)
{
	struct brk_server *srv = c->srv;

	srv->clients_mem -= c->mem_held + c->mem_queued;
	c->mem_held = c->mem_queued = 0;
}
