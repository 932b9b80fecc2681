/* queue_worker.c - the clients of bench_queue.py's work-queue cycle, in C.
 *
 *   bench-queue-worker PORT STREAM GROUP WORKERS COUNT OUTDIR TIMEOUT_S [NSTREAMS]
 *
 * WORKERS threads, each with its own connection to 127.0.0.1:PORT and its
 * own consumer name wN, loop XREADGROUP GROUP GROUP wN COUNT COUNT STREAMS
 * STREAM > and XACK of the ids it got, until a read returns nothing. They
 * start together once all are connected. Each writes the ids it was given
 * to OUTDIR/wN, one per line, for bench_queue.py's exactly-once check.
 *
 * With NSTREAMS > 1 the streams are STREAM:0 .. STREAM:NSTREAMS-1, each
 * with its own group GROUP; every cycle reads a stream picked at random
 * among those not yet drained, and the lines are "STREAM:K ID". Nothing is
 * added during the run, so a stream whose '>' read came back empty is
 * drained for good: the first worker to see it says so to the others, and
 * a worker stops when every stream is drained.
 *
 * Output, one line per worker, then a summary line:
 *   worker IDX STATUS ACKED DELIVERED END_S CPU_S
 *   total WALL_S CPU_S
 * END_S is seconds from the common start to the worker's last XACK; CPU_S
 * is the thread's CPU time. Python clients spent more CPU than the server
 * on the machine this was written for; these leave it to the servers.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "resp.h"

#define MAX_WORKERS 1024
#define MAX_COUNT   1000
#define MAX_STREAMS 1000000

struct worker {
	pthread_t thread;
	int idx;
	int fd;
	const char *status;
	unsigned long long acked, delivered;
	double end_s, cpu_s;
	FILE *ids;
	uint64_t rng;
	char *in;
	size_t in_len, in_cap;
};

static int port;
static const char *stream, *group, *outdir;
static long count;
static double timeout_s;
static long nstreams = 1;
static atomic_uchar *drained; /* [nstreams], with NSTREAMS > 1 */
static atomic_long undrained;
static pthread_barrier_t start;
static double t0;

static double
now_s(clockid_t clk)
{
	struct timespec ts;
	clock_gettime(clk, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int
send_all(int fd, const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR) {
			continue;
		}
		if (w <= 0) {
			return -1;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Appends one bulk string to buf at *len (buf has room: callers size it). */
static void
put_bulk(char *buf, size_t *len, const char *s, size_t n)
{
	*len += (size_t)sprintf(buf + *len, "$%zu\r\n", n);
	memcpy(buf + *len, s, n);
	*len += n;
	memcpy(buf + *len, "\r\n", 2);
	*len += 2;
}

/* Reads one reply; NULL on a closed connection or a bad reply. */
static struct resp_reply *
read_reply(struct worker *w)
{
	for (;;) {
		struct resp_reply *r = NULL;
		size_t used = 0;
		ssize_t n;
		int rc = resp_reply_parse(w->in, w->in_len, NULL, &used, &r);

		if (rc == 0) {
			memmove(w->in, w->in + used, w->in_len - used);
			w->in_len -= used;
			return r;
		}
		if (rc != -EAGAIN) {
			return NULL;
		}
		if (w->in_cap - w->in_len < 65536) {
			char *p = realloc(w->in, w->in_cap * 2);
			if (p == NULL) {
				return NULL;
			}
			w->in = p;
			w->in_cap *= 2;
		}
		n = recv(w->fd, w->in + w->in_len, w->in_cap - w->in_len, 0);
		if (n < 0 && errno == EINTR) {
			continue;
		}
		if (n <= 0) {
			return NULL;
		}
		w->in_len += (size_t)n;
	}
}

/* A stream not yet drained, at random; -1 when all are. */
static long
pick(struct worker *w)
{
	long k;

	if (atomic_load(&undrained) == 0) {
		return -1;
	}
	w->rng ^= w->rng << 13; /* xorshift64 */
	w->rng ^= w->rng >> 7;
	w->rng ^= w->rng << 17;
	k = (long)(w->rng % (uint64_t)nstreams);
	for (long i = 0; i < nstreams; i++, k = (k + 1) % nstreams) {
		if (!atomic_load(&drained[k])) {
			return k;
		}
	}
	return -1;
}

/* One XREADGROUP + XACK; returns ids acked (0: the stream is drained), -1 on error. */
static long
cycle(struct worker *w, const char *key, char *cmd, size_t cap)
{
	struct resp_reply *r, *entries, *a;
	char name[32], cnt[32];
	size_t len = 0;
	long n;

	snprintf(name, sizeof(name), "w%d", w->idx);
	snprintf(cnt, sizeof(cnt), "%ld", count);
	len += (size_t)sprintf(cmd, "*9\r\n");
	put_bulk(cmd, &len, "XREADGROUP", 10);
	put_bulk(cmd, &len, "GROUP", 5);
	put_bulk(cmd, &len, group, strlen(group));
	put_bulk(cmd, &len, name, strlen(name));
	put_bulk(cmd, &len, "COUNT", 5);
	put_bulk(cmd, &len, cnt, strlen(cnt));
	put_bulk(cmd, &len, "STREAMS", 7);
	put_bulk(cmd, &len, key, strlen(key));
	put_bulk(cmd, &len, ">", 1);
	if (send_all(w->fd, cmd, len) != 0 || (r = read_reply(w)) == NULL) {
		return -1;
	}
	if (r->type == RESP_REPLY_NULL) {
		resp_reply_free(r);
		return 0;
	}
	/* [[stream, [[id, fields], ...]]] (RESP2) */
	if (r->type != RESP_REPLY_ARRAY || r->elements != 1 || r->element[0]->elements != 2) {
		resp_reply_free(r);
		return -1;
	}
	entries = r->element[0]->element[1];
	if (entries->elements == 0) {
		resp_reply_free(r);
		return 0;
	}
	len = (size_t)sprintf(cmd, "*%zu\r\n", entries->elements + 3);
	put_bulk(cmd, &len, "XACK", 4);
	put_bulk(cmd, &len, key, strlen(key));
	put_bulk(cmd, &len, group, strlen(group));
	for (size_t i = 0; i < entries->elements; i++) {
		const struct resp_reply *id = entries->element[i]->element[0];
		if (len + id->len + 32 > cap) {
			resp_reply_free(r);
			return -1;
		}
		put_bulk(cmd, &len, id->str, id->len);
		if (nstreams > 1) {
			fprintf(w->ids, "%s %s\n", key, id->str);
		} else {
			fprintf(w->ids, "%s\n", id->str);
		}
	}
	w->delivered += entries->elements;
	resp_reply_free(r);
	if (send_all(w->fd, cmd, len) != 0 || (a = read_reply(w)) == NULL) {
		return -1;
	}
	n = a->type == RESP_REPLY_INTEGER ? (long)a->integer : -1;
	resp_reply_free(a);
	return n;
}

static void *
run(void *arg)
{
	struct worker *w = arg;
	size_t cap = 256 + (size_t)count * 64;
	char *cmd = malloc(cap);
	double cpu0, deadline;
	long n;

	w->status = "ok";
	pthread_barrier_wait(&start);
	if (cmd == NULL) {
		w->status = "error:nomem";
		return NULL;
	}
	cpu0 = now_s(CLOCK_THREAD_CPUTIME_ID);
	deadline = t0 + timeout_s;
	for (;;) {
		char name[256];
		long k = 0;

		if (nstreams > 1) {
			if ((k = pick(w)) < 0) {
				n = 0;
				break;
			}
			snprintf(name, sizeof(name), "%s:%ld", stream, k);
		}
		n = cycle(w, nstreams > 1 ? name : stream, cmd, cap);
		if (n < 0) {
			break;
		}
		if (n == 0) {
			if (nstreams == 1) {
				break;
			}
			if (!atomic_exchange(&drained[k], 1)) {
				atomic_fetch_sub(&undrained, 1);
			}
			continue;
		}
		w->acked += (unsigned long long)n;
		if (now_s(CLOCK_MONOTONIC) > deadline) {
			w->status = "timeout";
			break;
		}
	}
	if (n < 0) {
		w->status = "error:connection";
	}
	w->end_s = now_s(CLOCK_MONOTONIC) - t0;
	w->cpu_s = now_s(CLOCK_THREAD_CPUTIME_ID) - cpu0;
	free(cmd);
	return NULL;
}

static int
connect_local(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0) {
		return -1;
	}
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
		close(fd);
		return -1;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

int
main(int argc, char **argv)
{
	static struct worker ws[MAX_WORKERS];
	int nw, rc = 0;
	double cpu = 0, wall = 0;

	if (argc != 8 && argc != 9) {
		fprintf(stderr,
			"usage: %s PORT STREAM GROUP WORKERS COUNT OUTDIR TIMEOUT_S [NSTREAMS]\n",
			argv[0]);
		return 2;
	}
	port = atoi(argv[1]);
	stream = argv[2];
	group = argv[3];
	nw = atoi(argv[4]);
	count = atol(argv[5]);
	outdir = argv[6];
	timeout_s = atof(argv[7]);
	nstreams = argc == 9 ? atol(argv[8]) : 1;
	if (port <= 0 || port > 65535 || nw <= 0 || nw > MAX_WORKERS || count <= 0 ||
		count > MAX_COUNT || timeout_s <= 0 || nstreams <= 0 || nstreams > MAX_STREAMS) {
		fprintf(stderr, "%s: bad arguments (workers 1..%d, count 1..%d, streams 1..%d)\n",
			argv[0], MAX_WORKERS, MAX_COUNT, MAX_STREAMS);
		return 2;
	}
	drained = calloc((size_t)nstreams, sizeof(*drained));
	if (drained == NULL) {
		return 1;
	}
	atomic_init(&undrained, nstreams);
	pthread_barrier_init(&start, NULL, (unsigned)nw + 1);
	for (int i = 0; i < nw; i++) {
		char path[4096];
		struct worker *w = &ws[i];

		w->idx = i;
		w->rng = 0x9e3779b97f4a7c15ULL * (uint64_t)(i + 1);
		w->in_cap = 1 << 20;
		w->in = malloc(w->in_cap);
		snprintf(path, sizeof(path), "%s/w%d", outdir, i);
		w->ids = fopen(path, "w");
		w->fd = connect_local();
		if (w->in == NULL || w->ids == NULL || w->fd < 0) {
			fprintf(stderr, "%s: worker %d: cannot start: %s\n", argv[0], i,
				strerror(errno));
			return 1; /* the process exit closes what is open */
		}
	}
	for (int i = 0; i < nw; i++) {
		if (pthread_create(&ws[i].thread, NULL, run, &ws[i]) != 0) {
			fprintf(stderr, "%s: cannot create thread %d\n", argv[0], i);
			return 1;
		}
	}
	t0 = now_s(CLOCK_MONOTONIC);
	pthread_barrier_wait(&start);
	for (int i = 0; i < nw; i++) {
		struct worker *w = &ws[i];

		pthread_join(w->thread, NULL);
		printf("worker %d %s %llu %llu %.6f %.6f\n", i, w->status, w->acked, w->delivered,
			w->end_s, w->cpu_s);
		cpu += w->cpu_s;
		wall = w->end_s > wall ? w->end_s : wall;
		rc |= strcmp(w->status, "ok") != 0;
		fclose(w->ids);
		close(w->fd);
		free(w->in);
	}
	printf("total %.6f %.6f\n", wall, cpu);
	pthread_barrier_destroy(&start);
	return rc;
}
