/* powercut.c: an LD_PRELOAD shim that lets a test simulate a power cut under echd.
 *
 * Why: SIGKILL keeps the page cache, so a crash test that only kills the process cannot tell
 * a missing fsync from a present one.  This shim keeps, next to every data file, a copy of
 * what a disk would hold after a power loss, so the test can kill echd and restart it on
 * "what was durable" instead of "what was written".
 *
 * How: every write to a tracked file goes to the real file as usual (the process, which
 * reads LMDB's data through its read-only mmap, sees nothing unusual), and is also appended
 * to a per-file pending log.  fsync/fdatasync of the file applies the pending log, in
 * order, to a per-file durable copy and empties the log -- no real sync is issued (speed;
 * ECHD_POWERCUT_REAL_SYNC=1 adds it).  After the test SIGKILLs echd (the "power cut"), it
 * builds the restart image from the durable copy, optionally plus part of the pending log
 * (tests/crash/driver.py, build_image: per 512-byte sector a prefix of the writes still
 * pending for it, which is every state a disk that writes back dirty pages in any order
 * could be in), and restarts echd on that image.
 *
 * Files, in ECHD_POWERCUT_STATE (default ECHD_POWERCUT_DIR/../powercut):
 *   NAME.durable   what the disk holds for NAME for sure
 *   NAME.pending   records {magic, kind, seq, off, len} + len bytes, in write order:
 *                  WRITE (bytes written at off), TRUNC (size set to off), SYNC (a marker:
 *                  a sync was being applied when the process died; the records before it
 *                  are to be applied too -- the sync had not returned, so that state is one
 *                  the disk may be in)
 *   stats          one line of counters (rewritten at every sync), for the test's sanity
 *                  checks: proof that the shim was loaded and saw the writes and syncs
 * A kill between the real write and its record loses the write (allowed: it was not
 * durable and the caller never saw it return); a torn last record is ignored.  When a
 * process first opens a file, its contents count as durable (the durable copy is made
 * then: the test starts each generation on an image it built); a pending log left by an
 * earlier process on the same directory stays pending (a process crash keeps the cache).
 *
 * The disk modelled: fsync/fdatasync of a file returns once all its earlier writes are on
 * the platter; unsynced writes reach it in any order, any time, each 512-byte sector whole
 * (at its latest content or an earlier one since the last sync, never older after newer).
 * LMDB relies on no more than that: it writes a commit's pages, fdatasyncs, and only then
 * writes the meta page that makes them reachable.
 *
 * What is tracked: regular files directly inside ECHD_POWERCUT_DIR (compared by their
 * /proc/self/fd path), except the names in ECHD_POWERCUT_EXCLUDE (comma-separated, default
 * "lock.mdb": LMDB rebuilds its lock file).  Intercepted: open/open64/openat/openat64/creat/
 * creat64 (and the _FORTIFY_SOURCE __open*_2), close, dup/dup2/dup3, write/writev/pwrite/
 * pwrite64/pwritev/pwritev64/pwritev2, ftruncate/ftruncate64, fsync/fdatasync, syncfs/sync,
 * mmap/mmap64 (a writable shared mapping of a tracked file would bypass the shim: it aborts
 * the process with a message instead).  sync_file_range and msync are passed through and
 * make nothing durable (they do not flush the disk's cache or the file's metadata).
 * Writes through an O_DSYNC/O_SYNC descriptor or with RWF_DSYNC/RWF_SYNC count as write +
 * fdatasync of the whole file: more durable than POSIX promises, which can only hide a bug
 * (echd opens LMDB with MDB_NOMETASYNC, where LMDB writes its meta page without O_DSYNC).
 * Not modelled: fcntl(F_DUPFD), rename/unlink of tracked files, directory entries (a file's
 * creation counts as durable at once; LMDB never fsyncs the directory).
 *
 * Broken builds, to show the test catches them:
 *   ECHD_POWERCUT_DROP_SYNC=1    fsync/fdatasync of tracked files (and O_DSYNC writes) make
 *                                nothing durable: what an MDB_NOSYNC build, or one that
 *                                replies before its flush, leaves on the disk
 *   ECHD_POWERCUT_WRITEBACK_MS=N like a kernel's writeback, apply the pending log at the
 *                                first write N ms after the last sync or writeback (any
 *                                mode; 0 = never, the default)
 *
 * Cutting at an I/O point: ECHD_POWERCUT_KILL_AT=N makes the process SIGKILL itself just
 * before its Nth write/sync/truncate of a tracked file, counted from when the file
 * ECHD_POWERCUT_STATE/arm appears (the test creates it when its clients start; so no cut
 * hits start-up or the test's checks), e.g. between a commit's data pages and their
 * fdatasync, or between the fdatasync and the meta page -- moments a kill from outside
 * rarely hits.
 *
 * The shim is not thread-hostile: one mutex serialises the tracked calls (writes of other
 * descriptors, e.g. sockets, take a lock-free look at a table and go straight on).
 */
/* Meson builds with -D_FILE_OFFSET_BITS=64, under which glibc's headers rename open to open64
 * and so on; this file defines both names itself. */
#undef _FILE_OFFSET_BITS
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

#define PC_MAGIC 0x54554350u /* "PCUT" */
enum { REC_WRITE = 1, REC_TRUNC = 2, REC_SYNC = 3 };

struct rec {
	uint32_t magic;
	uint32_t kind;
	uint64_t seq;
	uint64_t off;
	uint64_t len;
};

#define MAX_FILES 16
#define MAX_FD 65536
#define MAX_IOV 1024
#define FDF_DSYNC 1u
#define FDF_APPEND 2u

struct pfile {
	int used;
	dev_t dev;
	ino_t ino;
	char name[NAME_MAX + 1];
	int shadow_fd;
	int log_fd;
	uint64_t log_len;
	uint64_t seq;
};

/* ---- the real functions ------------------------------------------------ */

static int (*real_open)(const char *, int, ...);
static int (*real_open64)(const char *, int, ...);
static int (*real_openat)(int, const char *, int, ...);
static int (*real_openat64)(int, const char *, int, ...);
static int (*real_creat)(const char *, mode_t);
static int (*real_creat64)(const char *, mode_t);
static int (*real___open_2)(const char *, int);
static int (*real___open64_2)(const char *, int);
static int (*real___openat_2)(int, const char *, int);
static int (*real___openat64_2)(int, const char *, int);
static int (*real_close)(int);
static int (*real_dup)(int);
static int (*real_dup2)(int, int);
static int (*real_dup3)(int, int, int);
static ssize_t (*real_write)(int, const void *, size_t);
static ssize_t (*real_writev)(int, const struct iovec *, int);
static ssize_t (*real_pwrite)(int, const void *, size_t, off_t);
static ssize_t (*real_pwrite64)(int, const void *, size_t, off_t);
static ssize_t (*real_pwritev)(int, const struct iovec *, int, off_t);
static ssize_t (*real_pwritev64)(int, const struct iovec *, int, off_t);
static ssize_t (*real_pwritev2)(int, const struct iovec *, int, off_t, int);
static ssize_t (*real_pread)(int, void *, size_t, off_t);
static off_t (*real_lseek)(int, off_t, int);
static int (*real_ftruncate)(int, off_t);
static int (*real_ftruncate64)(int, off_t);
static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int (*real_syncfs)(int);
static void (*real_sync)(void);
static void *(*real_mmap)(void *, size_t, int, int, int, off_t);
static void *(*real_mmap64)(void *, size_t, int, int, int, off_t);

#define RESOLVE(f) \
	do { \
		if (real_##f == NULL) { \
			*(void **)&real_##f = dlsym(RTLD_NEXT, #f); \
		} \
	} while (0)

/* ---- state ------------------------------------------------------------- */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int enabled;
static int drop_sync;
static int real_sync_too;
static long writeback_ms;
static unsigned long long kill_at, io_ops;
static int armed;
static char arm_path[PATH_MAX + 8];
static struct timespec last_flush;
static char data_dir[PATH_MAX];
static size_t data_dir_len;
static char state_dir[PATH_MAX];
static char exclude[1024] = "lock.mdb";
static int stats_fd = -1;
static struct pfile files[MAX_FILES];
static unsigned char fd_slot[MAX_FD]; /* files index + 1; 0: not tracked */
static unsigned char fd_flags[MAX_FD];
static unsigned char scratch[1 << 20];
static struct {
	unsigned long long writes, bytes, syncs, dropped, writebacks, dsync_writes, truncs;
} st;

__attribute__((format(printf, 1, 2))) static void
say(const char *fmt, ...)
{
	char buf[1024];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf) - 1, fmt, ap);
	va_end(ap);
	if (n < 0) {
		return;
	}
	if ((size_t)n > sizeof(buf) - 2) {
		n = (int)sizeof(buf) - 2;
	}
	buf[n++] = '\n';
	RESOLVE(write);
	if (real_write != NULL) {
		ssize_t w = real_write(2, buf, (size_t)n);
		(void)w;
	}
}

__attribute__((noreturn, format(printf, 1, 2))) static void
die(const char *fmt, ...)
{
	char buf[900];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	say("powercut: FATAL: %s", buf);
	abort();
}

static void
resolve_all(void)
{
	RESOLVE(open);
	RESOLVE(open64);
	RESOLVE(openat);
	RESOLVE(openat64);
	RESOLVE(creat);
	RESOLVE(creat64);
	RESOLVE(__open_2);
	RESOLVE(__open64_2);
	RESOLVE(__openat_2);
	RESOLVE(__openat64_2);
	RESOLVE(close);
	RESOLVE(dup);
	RESOLVE(dup2);
	RESOLVE(dup3);
	RESOLVE(write);
	RESOLVE(writev);
	RESOLVE(pwrite);
	RESOLVE(pwrite64);
	RESOLVE(pwritev);
	RESOLVE(pwritev64);
	RESOLVE(pwritev2);
	RESOLVE(pread);
	RESOLVE(lseek);
	RESOLVE(ftruncate);
	RESOLVE(ftruncate64);
	RESOLVE(fsync);
	RESOLVE(fdatasync);
	RESOLVE(syncfs);
	RESOLVE(sync);
	RESOLVE(mmap);
	RESOLVE(mmap64);
}

__attribute__((constructor)) static void
powercut_init(void)
{
	const char *d = getenv("ECHD_POWERCUT_DIR");
	const char *s = getenv("ECHD_POWERCUT_STATE");
	const char *e = getenv("ECHD_POWERCUT_EXCLUDE");
	const char *v;

	resolve_all();
	if (d == NULL || d[0] == '\0') {
		say("powercut: ECHD_POWERCUT_DIR is not set: nothing is tracked");
		return;
	}
	if (realpath(d, data_dir) == NULL) {
		die("ECHD_POWERCUT_DIR %s: %s", d, strerror(errno));
	}
	data_dir_len = strlen(data_dir);
	if (s != NULL && s[0] != '\0') {
		if (strlen(s) >= sizeof(state_dir)) {
			die("ECHD_POWERCUT_STATE too long");
		}
		strcpy(state_dir, s);
	} else if (snprintf(state_dir, sizeof(state_dir), "%s/../powercut", data_dir) >=
		   (int)sizeof(state_dir)) {
		die("state path too long");
	}
	if (mkdir(state_dir, 0755) != 0 && errno != EEXIST) {
		die("cannot create %s: %s", state_dir, strerror(errno));
	}
	if (e != NULL) {
		snprintf(exclude, sizeof(exclude), "%s", e);
	}
	v = getenv("ECHD_POWERCUT_DROP_SYNC");
	drop_sync = v != NULL && atoi(v) != 0;
	v = getenv("ECHD_POWERCUT_REAL_SYNC");
	real_sync_too = v != NULL && atoi(v) != 0;
	v = getenv("ECHD_POWERCUT_WRITEBACK_MS");
	writeback_ms = v != NULL ? atol(v) : 0;
	v = getenv("ECHD_POWERCUT_KILL_AT");
	kill_at = v != NULL ? strtoull(v, NULL, 10) : 0;
	snprintf(arm_path, sizeof(arm_path), "%s/arm", state_dir);
	{
		char path[PATH_MAX + 16];
		snprintf(path, sizeof(path), "%s/stats", state_dir);
		stats_fd = real_open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (stats_fd < 0) {
			die("cannot create %s: %s", path, strerror(errno));
		}
	}
	clock_gettime(CLOCK_MONOTONIC, &last_flush);
	enabled = 1;
	say("powercut: tracking %s, durable copies in %s%s%s%s", data_dir, state_dir,
		drop_sync ? ", fsync/fdatasync DROPPED (broken-build mode)" : "",
		writeback_ms > 0 ? ", with writeback" : "",
		kill_at > 0 ? ", cut at a tracked I/O" : "");
}

/* ---- helpers (called with mu held unless said otherwise) ---------------- */

static void
pwrite_all(int fd, const void *buf, size_t n, uint64_t off, const char *what)
{
	const unsigned char *p = buf;

	while (n > 0) {
		ssize_t w = real_pwrite(fd, p, n, (off_t)off);
		if (w < 0 && errno == EINTR) {
			continue;
		}
		if (w <= 0) {
			die("writing %s: %s", what, w < 0 ? strerror(errno) : "short write");
		}
		p += w;
		n -= (size_t)w;
		off += (uint64_t)w;
	}
}

static size_t
pread_some(int fd, void *buf, size_t n, uint64_t off)
{
	size_t got = 0;

	while (got < n) {
		ssize_t r = real_pread(fd, (char *)buf + got, n - got, (off_t)(off + got));
		if (r < 0 && errno == EINTR) {
			continue;
		}
		if (r < 0) {
			die("pread: %s", strerror(errno));
		}
		if (r == 0) {
			break;
		}
		got += (size_t)r;
	}
	return got;
}

static void
write_stats(void)
{
	char line[512];
	int n;

	if (stats_fd < 0) {
		return;
	}
	n = snprintf(line, sizeof(line),
		"pid %d writes %llu bytes %llu syncs %llu dropped %llu writebacks %llu "
		"dsync_writes %llu truncs %llu\n",
		(int)getpid(), st.writes, st.bytes, st.syncs, st.dropped, st.writebacks,
		st.dsync_writes, st.truncs);
	pwrite_all(stats_fd, line, (size_t)n, 0, "stats");
	if (real_ftruncate(stats_fd, n) != 0) {
		die("truncating the stats file: %s", strerror(errno));
	}
}

/* Appends one record (header + the first len bytes of iov) to f's pending log. */
static void
log_append(struct pfile *f, uint32_t kind, uint64_t off, const struct iovec *iov, int iovcnt,
	uint64_t len)
{
	struct iovec v[MAX_IOV + 1];
	struct rec r = {PC_MAGIC, kind, ++f->seq, off, len};
	uint64_t left = len, total = sizeof(r), done = 0;
	int n = 1;

	v[0].iov_base = &r;
	v[0].iov_len = sizeof(r);
	for (int i = 0; i < iovcnt && left > 0; i++) {
		size_t take = iov[i].iov_len < left ? iov[i].iov_len : (size_t)left;
		if (take == 0) {
			continue;
		}
		v[n].iov_base = iov[i].iov_base;
		v[n].iov_len = take;
		n++;
		left -= take;
		total += take;
	}
	/* one pwritev, so a kill tears at most this last record */
	while (done < total) {
		ssize_t w;
		int k = 0;
		uint64_t skip = done;
		while (skip >= v[k].iov_len) {
			skip -= v[k].iov_len;
			k++;
		}
		v[k].iov_base = (char *)v[k].iov_base + skip;
		v[k].iov_len -= skip;
		w = real_pwritev(f->log_fd, v + k, n - k, (off_t)(f->log_len + done));
		v[k].iov_base = (char *)v[k].iov_base - skip;
		v[k].iov_len += skip;
		if (w < 0 && errno == EINTR) {
			continue;
		}
		if (w <= 0) {
			die("appending to the pending log of %s: %s", f->name,
				w < 0 ? strerror(errno) : "short write");
		}
		done += (uint64_t)w;
	}
	f->log_len += total;
}

/* Applies the pending log records [0, end) to the durable copy. */
static void
log_apply(struct pfile *f, uint64_t end)
{
	uint64_t pos = 0;

	while (pos + sizeof(struct rec) <= end) {
		struct rec r;
		if (pread_some(f->log_fd, &r, sizeof(r), pos) != sizeof(r) || r.magic != PC_MAGIC) {
			die("pending log of %s damaged at %llu", f->name, (unsigned long long)pos);
		}
		pos += sizeof(r);
		if (r.kind == REC_WRITE) {
			uint64_t done = 0;
			if (pos + r.len > end) {
				break; /* torn (only in recovery) */
			}
			while (done < r.len) {
				size_t n = r.len - done < sizeof(scratch) ? (size_t)(r.len - done)
									    : sizeof(scratch);
				if (pread_some(f->log_fd, scratch, n, pos + done) != n) {
					die("pending log of %s is short", f->name);
				}
				pwrite_all(f->shadow_fd, scratch, n, r.off + done, "durable copy");
				done += n;
			}
			pos += r.len;
		} else if (r.kind == REC_TRUNC) {
			if (real_ftruncate(f->shadow_fd, (off_t)r.off) != 0) {
				die("truncating the durable copy of %s: %s", f->name, strerror(errno));
			}
		} else if (r.kind == REC_SYNC) {
			break;
		}
	}
}

/* What fdatasync does: every pending write of f becomes durable. */
static void
file_sync(struct pfile *f)
{
	uint64_t end = f->log_len;

	if (end > 0) {
		/* the marker first: a kill during the apply leaves "apply all before me" */
		log_append(f, REC_SYNC, 0, NULL, 0, 0);
		log_apply(f, end);
		if (real_ftruncate(f->log_fd, 0) != 0) {
			die("truncating the pending log of %s: %s", f->name, strerror(errno));
		}
		f->log_len = 0;
	}
	clock_gettime(CLOCK_MONOTONIC, &last_flush);
}

static void
maybe_writeback(void)
{
	struct timespec now;
	long ms;

	if (writeback_ms <= 0) {
		return;
	}
	clock_gettime(CLOCK_MONOTONIC, &now);
	ms = (now.tv_sec - last_flush.tv_sec) * 1000 + (now.tv_nsec - last_flush.tv_nsec) / 1000000;
	if (ms < writeback_ms) {
		return;
	}
	for (int i = 0; i < MAX_FILES; i++) {
		if (files[i].used && files[i].log_len > 0) {
			file_sync(&files[i]);
		}
	}
	st.writebacks++;
	clock_gettime(CLOCK_MONOTONIC, &last_flush);
}

/* A pending log left by a process that died with this data dir (a process crash, not a
 * power cut: the page cache survives, so its pending writes stay pending). */
static void
log_recover(struct pfile *f)
{
	struct stat sb;
	uint64_t pos = 0, size;

	if (fstat(f->log_fd, &sb) != 0) {
		die("fstat: %s", strerror(errno));
	}
	size = (uint64_t)sb.st_size;
	while (pos + sizeof(struct rec) <= size) {
		struct rec r;
		if (pread_some(f->log_fd, &r, sizeof(r), pos) != sizeof(r) || r.magic != PC_MAGIC) {
			break;
		}
		if (r.kind == REC_SYNC) {
			log_apply(f, pos);
			pos = 0;
			break;
		}
		if (r.kind == REC_WRITE && pos + sizeof(r) + r.len > size) {
			break;
		}
		pos += sizeof(r) + (r.kind == REC_WRITE ? r.len : 0);
		if (r.seq > f->seq) {
			f->seq = r.seq;
		}
	}
	if (real_ftruncate(f->log_fd, (off_t)pos) != 0) {
		die("truncating the pending log of %s: %s", f->name, strerror(errno));
	}
	f->log_len = pos;
}

static int
excluded(const char *name)
{
	size_t n = strlen(name);
	const char *p = exclude;

	while (*p) {
		const char *c = strchr(p, ',');
		size_t len = c ? (size_t)(c - p) : strlen(p);
		if (len == n && memcmp(p, name, n) == 0) {
			return 1;
		}
		p += len + (c ? 1 : 0);
	}
	return 0;
}

static void
copy_file(const char *name, int dst)
{
	char path[PATH_MAX + NAME_MAX + 2];
	uint64_t off = 0;
	int src;

	snprintf(path, sizeof(path), "%s/%s", data_dir, name);
	src = real_open(path, O_RDONLY | O_CLOEXEC);
	if (src < 0) {
		die("cannot read %s: %s", path, strerror(errno));
	}
	for (;;) {
		size_t n = pread_some(src, scratch, sizeof(scratch), off);
		if (n == 0) {
			break;
		}
		pwrite_all(dst, scratch, n, off, "durable copy");
		off += n;
	}
	real_close(src);
}

/* Called after a successful open of fd: track it if it is one of the data files. */
static void
track(int fd, int flags)
{
	char link[64], path[PATH_MAX], sp[PATH_MAX + NAME_MAX + 16];
	struct stat sb;
	const char *name;
	struct pfile *f = NULL;
	ssize_t n;
	int fresh;

	if (!enabled || fd < 0) {
		return;
	}
	if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
		return;
	}
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = readlink(link, path, sizeof(path) - 1);
	if (n <= 0) {
		return;
	}
	path[n] = '\0';
	if ((size_t)n <= data_dir_len + 1 || memcmp(path, data_dir, data_dir_len) != 0 ||
		path[data_dir_len] != '/') {
		return;
	}
	name = path + data_dir_len + 1;
	if (strchr(name, '/') != NULL || excluded(name)) {
		return;
	}
	if (fd >= MAX_FD) {
		die("descriptor %d of %s is beyond the shim's table (%d)", fd, name, MAX_FD);
	}
	pthread_mutex_lock(&mu);
	for (int i = 0; i < MAX_FILES; i++) {
		if (files[i].used && files[i].dev == sb.st_dev && files[i].ino == sb.st_ino) {
			f = &files[i];
			break;
		}
	}
	if (f == NULL) {
		for (int i = 0; i < MAX_FILES && f == NULL; i++) {
			if (!files[i].used) {
				f = &files[i];
			}
		}
		if (f == NULL) {
			die("more than %d data files", MAX_FILES);
		}
		memset(f, 0, sizeof(*f));
		f->used = 1;
		f->dev = sb.st_dev;
		f->ino = sb.st_ino;
		snprintf(f->name, sizeof(f->name), "%s", name);
		snprintf(sp, sizeof(sp), "%s/%s.durable", state_dir, name);
		f->shadow_fd = real_open(sp, O_RDWR | O_CLOEXEC);
		fresh = f->shadow_fd < 0;
		if (fresh) {
			/* first sight: what the file holds now is on the disk */
			f->shadow_fd = real_open(sp, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
			if (f->shadow_fd < 0) {
				die("cannot create %s: %s", sp, strerror(errno));
			}
			copy_file(name, f->shadow_fd);
		}
		snprintf(sp, sizeof(sp), "%s/%s.pending", state_dir, name);
		f->log_fd = real_open(sp, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
		if (f->log_fd < 0) {
			die("cannot open %s: %s", sp, strerror(errno));
		}
		log_recover(f);
		if (!fresh && (flags & O_TRUNC)) {
			st.truncs++;
			log_append(f, REC_TRUNC, 0, NULL, 0, 0);
		}
		say("powercut: tracking %s (%s, %llu bytes)", name,
			fresh ? "durable copy made" : "durable copy kept",
			(unsigned long long)sb.st_size);
		write_stats();
	}
	__atomic_store_n(&fd_flags[fd],
		(unsigned char)(((flags & (O_DSYNC | O_SYNC)) ? FDF_DSYNC : 0) |
				((flags & O_APPEND) ? FDF_APPEND : 0)),
		__ATOMIC_RELAXED);
	__atomic_store_n(&fd_slot[fd], (unsigned char)(f - files + 1), __ATOMIC_RELEASE);
	pthread_mutex_unlock(&mu);
}

static struct pfile *
tracked(int fd)
{
	unsigned s;

	if (fd < 0 || fd >= MAX_FD) {
		return NULL;
	}
	s = __atomic_load_n(&fd_slot[fd], __ATOMIC_ACQUIRE);
	return s ? &files[s - 1] : NULL;
}

static void
untrack(int fd)
{
	if (tracked(fd) != NULL) {
		pthread_mutex_lock(&mu);
		__atomic_store_n(&fd_slot[fd], 0, __ATOMIC_RELEASE);
		fd_flags[fd] = 0;
		pthread_mutex_unlock(&mu);
	}
}

static void
copy_track(int from, int to)
{
	if (to < 0 || to == from) {
		return;
	}
	untrack(to);
	if (tracked(from) != NULL) {
		if (to >= MAX_FD) {
			die("descriptor %d is beyond the shim's table", to);
		}
		pthread_mutex_lock(&mu);
		fd_flags[to] = fd_flags[from];
		__atomic_store_n(&fd_slot[to], fd_slot[from], __ATOMIC_RELEASE);
		pthread_mutex_unlock(&mu);
	}
}

/* Every tracked write, sync and truncate comes here first (mu held). */
static void
io_point(const char *what, const struct pfile *f)
{
	if (kill_at == 0) {
		return;
	}
	if (!armed) {
		if (access(arm_path, F_OK) != 0) {
			return;
		}
		armed = 1;
	}
	if (++io_ops >= kill_at) {
		say("powercut: power cut before I/O #%llu (%s of %s)", io_ops, what, f->name);
		raise(SIGKILL);
	}
}

/* The bookkeeping of a write of w bytes (already done) at off; mu held. */
static void
written(struct pfile *f, int fd, uint64_t off, const struct iovec *iov, int iovcnt, ssize_t w,
	int durable)
{
	if (w > 0) {
		st.writes++;
		st.bytes += (uint64_t)w;
		log_append(f, REC_WRITE, off, iov, iovcnt, (uint64_t)w);
	}
	if (!drop_sync && (durable || (fd_flags[fd] & FDF_DSYNC))) {
		st.dsync_writes++;
		file_sync(f);
		st.syncs++;
		write_stats();
	} else {
		maybe_writeback();
	}
}

static uint64_t
cur_off(int fd)
{
	if (fd_flags[fd] & FDF_APPEND) {
		struct stat sb;
		if (fstat(fd, &sb) != 0) {
			die("fstat: %s", strerror(errno));
		}
		return (uint64_t)sb.st_size;
	}
	off_t o = real_lseek(fd, 0, SEEK_CUR);
	if (o < 0) {
		die("lseek: %s", strerror(errno));
	}
	return (uint64_t)o;
}

static ssize_t
do_write(int fd, const struct iovec *iov, int iovcnt, off_t off, int positional, int flags,
	int is_v)
{
	struct pfile *f = tracked(fd);
	uint64_t at;
	ssize_t w;

	if (iovcnt > MAX_IOV) {
		errno = EINVAL;
		return -1;
	}
	pthread_mutex_lock(&mu);
	f = tracked(fd); /* (closed meanwhile?) */
	if (f == NULL) {
		pthread_mutex_unlock(&mu);
		if (!is_v) {
			return positional ? real_pwrite(fd, iov[0].iov_base, iov[0].iov_len, off)
					  : real_write(fd, iov[0].iov_base, iov[0].iov_len);
		}
		if (flags != 0) {
			return real_pwritev2(fd, iov, iovcnt, positional ? off : (off_t)-1, flags);
		}
		return positional ? real_pwritev(fd, iov, iovcnt, off) : real_writev(fd, iov, iovcnt);
	}
	io_point("write", f);
	at = positional && off != (off_t)-1 ? (uint64_t)off : cur_off(fd);
	if (!is_v) {
		w = positional ? real_pwrite(fd, iov[0].iov_base, iov[0].iov_len, off)
			       : real_write(fd, iov[0].iov_base, iov[0].iov_len);
	} else if (flags != 0) {
		w = real_pwritev2(fd, iov, iovcnt, positional ? off : (off_t)-1, flags);
	} else {
		w = positional ? real_pwritev(fd, iov, iovcnt, off) : real_writev(fd, iov, iovcnt);
	}
	if (w >= 0) {
		int e = errno;
		written(f, fd, at, iov, iovcnt, w,
			(flags & (RWF_DSYNC | RWF_SYNC)) != 0);
		errno = e;
	}
	pthread_mutex_unlock(&mu);
	return w;
}

static int
do_sync(int fd, int (*real)(int))
{
	struct pfile *f = tracked(fd);

	if (f == NULL) {
		return real(fd);
	}
	pthread_mutex_lock(&mu);
	f = tracked(fd);
	if (f == NULL) {
		pthread_mutex_unlock(&mu);
		return real(fd);
	}
	io_point("sync", f);
	if (drop_sync) {
		st.dropped++;
	} else {
		file_sync(f);
		st.syncs++;
	}
	write_stats();
	pthread_mutex_unlock(&mu);
	return real_sync_too ? real(fd) : 0;
}

static void
sync_all(void)
{
	pthread_mutex_lock(&mu);
	for (int i = 0; i < MAX_FILES; i++) {
		if (files[i].used) {
			if (drop_sync) {
				st.dropped++;
			} else {
				file_sync(&files[i]);
				st.syncs++;
			}
		}
	}
	write_stats();
	pthread_mutex_unlock(&mu);
}

/* ---- the interposed functions ------------------------------------------ */

int __open_2(const char *path, int flags);
int __open64_2(const char *path, int flags);
int __openat_2(int dirfd, const char *path, int flags);
int __openat64_2(int dirfd, const char *path, int flags);

#define MODE_ARG(flags, mode) \
	do { \
		if ((flags) & (O_CREAT | O_TMPFILE)) { \
			va_list ap_; \
			va_start(ap_, flags); \
			mode = (mode_t)va_arg(ap_, int); \
			va_end(ap_); \
		} \
	} while (0)

EXPORT int
open(const char *path, int flags, ...)
{
	mode_t mode = 0;
	int fd;

	MODE_ARG(flags, mode);
	RESOLVE(open);
	fd = real_open(path, flags, mode);
	track(fd, flags);
	return fd;
}

EXPORT int
open64(const char *path, int flags, ...)
{
	mode_t mode = 0;
	int fd;

	MODE_ARG(flags, mode);
	RESOLVE(open64);
	fd = real_open64(path, flags, mode);
	track(fd, flags);
	return fd;
}

EXPORT int
openat(int dirfd, const char *path, int flags, ...)
{
	mode_t mode = 0;
	int fd;

	MODE_ARG(flags, mode);
	RESOLVE(openat);
	fd = real_openat(dirfd, path, flags, mode);
	track(fd, flags);
	return fd;
}

EXPORT int
openat64(int dirfd, const char *path, int flags, ...)
{
	mode_t mode = 0;
	int fd;

	MODE_ARG(flags, mode);
	RESOLVE(openat64);
	fd = real_openat64(dirfd, path, flags, mode);
	track(fd, flags);
	return fd;
}

EXPORT int
creat(const char *path, mode_t mode)
{
	int fd;

	RESOLVE(creat);
	fd = real_creat(path, mode);
	track(fd, O_CREAT | O_WRONLY | O_TRUNC);
	return fd;
}

EXPORT int
creat64(const char *path, mode_t mode)
{
	int fd;

	RESOLVE(creat64);
	fd = real_creat64(path, mode);
	track(fd, O_CREAT | O_WRONLY | O_TRUNC);
	return fd;
}

EXPORT int
__open_2(const char *path, int flags)
{
	int fd;

	RESOLVE(__open_2);
	fd = real___open_2(path, flags);
	track(fd, flags);
	return fd;
}

EXPORT int
__open64_2(const char *path, int flags)
{
	int fd;

	RESOLVE(__open64_2);
	fd = real___open64_2(path, flags);
	track(fd, flags);
	return fd;
}

EXPORT int
__openat_2(int dirfd, const char *path, int flags)
{
	int fd;

	RESOLVE(__openat_2);
	fd = real___openat_2(dirfd, path, flags);
	track(fd, flags);
	return fd;
}

EXPORT int
__openat64_2(int dirfd, const char *path, int flags)
{
	int fd;

	RESOLVE(__openat64_2);
	fd = real___openat64_2(dirfd, path, flags);
	track(fd, flags);
	return fd;
}

EXPORT int
close(int fd)
{
	RESOLVE(close);
	untrack(fd);
	return real_close(fd);
}

EXPORT int
dup(int fd)
{
	int r;

	RESOLVE(dup);
	r = real_dup(fd);
	copy_track(fd, r);
	return r;
}

EXPORT int
dup2(int fd, int to)
{
	int r;

	RESOLVE(dup2);
	r = real_dup2(fd, to);
	copy_track(fd, r);
	return r;
}

EXPORT int
dup3(int fd, int to, int flags)
{
	int r;

	RESOLVE(dup3);
	r = real_dup3(fd, to, flags);
	copy_track(fd, r);
	return r;
}

EXPORT ssize_t
write(int fd, const void *buf, size_t n)
{
	struct iovec v = {(void *)buf, n};

	RESOLVE(write);
	if (tracked(fd) == NULL) {
		return real_write(fd, buf, n);
	}
	return do_write(fd, &v, 1, 0, 0, 0, 0);
}

EXPORT ssize_t
writev(int fd, const struct iovec *iov, int iovcnt)
{
	RESOLVE(writev);
	if (tracked(fd) == NULL) {
		return real_writev(fd, iov, iovcnt);
	}
	return do_write(fd, iov, iovcnt, 0, 0, 0, 1);
}

EXPORT ssize_t
pwrite(int fd, const void *buf, size_t n, off_t off)
{
	struct iovec v = {(void *)buf, n};

	RESOLVE(pwrite);
	if (tracked(fd) == NULL) {
		return real_pwrite(fd, buf, n, off);
	}
	return do_write(fd, &v, 1, off, 1, 0, 0);
}

EXPORT ssize_t
pwrite64(int fd, const void *buf, size_t n, off_t off)
{
	struct iovec v = {(void *)buf, n};

	RESOLVE(pwrite64);
	if (tracked(fd) == NULL) {
		return real_pwrite64(fd, buf, n, off);
	}
	return do_write(fd, &v, 1, off, 1, 0, 0);
}

EXPORT ssize_t
pwritev(int fd, const struct iovec *iov, int iovcnt, off_t off)
{
	RESOLVE(pwritev);
	if (tracked(fd) == NULL) {
		return real_pwritev(fd, iov, iovcnt, off);
	}
	return do_write(fd, iov, iovcnt, off, 1, 0, 1);
}

EXPORT ssize_t
pwritev64(int fd, const struct iovec *iov, int iovcnt, off_t off)
{
	RESOLVE(pwritev64);
	if (tracked(fd) == NULL) {
		return real_pwritev64(fd, iov, iovcnt, off);
	}
	return do_write(fd, iov, iovcnt, off, 1, 0, 1);
}

EXPORT ssize_t
pwritev2(int fd, const struct iovec *iov, int iovcnt, off_t off, int flags)
{
	RESOLVE(pwritev2);
	if (tracked(fd) == NULL) {
		return real_pwritev2(fd, iov, iovcnt, off, flags);
	}
	/* off -1: the current offset, like writev */
	return do_write(fd, iov, iovcnt, off, off != (off_t)-1, flags == 0 ? 0 : flags, 1);
}

EXPORT int
ftruncate(int fd, off_t len)
{
	struct pfile *f = tracked(fd);
	int r;

	RESOLVE(ftruncate);
	if (f == NULL) {
		return real_ftruncate(fd, len);
	}
	pthread_mutex_lock(&mu);
	io_point("truncate", f);
	r = real_ftruncate(fd, len);
	if (r == 0) {
		st.truncs++;
		log_append(f, REC_TRUNC, (uint64_t)len, NULL, 0, 0);
	}
	pthread_mutex_unlock(&mu);
	return r;
}

EXPORT int
ftruncate64(int fd, off_t len)
{
	struct pfile *f = tracked(fd);
	int r;

	RESOLVE(ftruncate64);
	if (f == NULL) {
		return real_ftruncate64(fd, len);
	}
	pthread_mutex_lock(&mu);
	io_point("truncate", f);
	r = real_ftruncate64(fd, len);
	if (r == 0) {
		st.truncs++;
		log_append(f, REC_TRUNC, (uint64_t)len, NULL, 0, 0);
	}
	pthread_mutex_unlock(&mu);
	return r;
}

EXPORT int
fsync(int fd)
{
	RESOLVE(fsync);
	return do_sync(fd, real_fsync);
}

EXPORT int
fdatasync(int fd)
{
	RESOLVE(fdatasync);
	return do_sync(fd, real_fdatasync);
}

EXPORT int
syncfs(int fd)
{
	RESOLVE(syncfs);
	if (enabled) {
		sync_all();
	}
	return real_sync_too || !enabled ? real_syncfs(fd) : 0;
}

EXPORT void
sync(void)
{
	RESOLVE(sync);
	if (enabled) {
		sync_all();
	}
	if (real_sync_too || !enabled) {
		real_sync();
	}
}

static void
check_map(int fd, int prot, int flags)
{
	struct pfile *f = tracked(fd);

	if (f != NULL && (prot & PROT_WRITE) && (flags & MAP_SHARED)) {
		die("a writable shared mapping of %s (MDB_WRITEMAP?) would bypass the shim", f->name);
	}
}

EXPORT void *
mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	RESOLVE(mmap);
	check_map(fd, prot, flags);
	return real_mmap(addr, len, prot, flags, fd, off);
}

EXPORT void *
mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	RESOLVE(mmap64);
	check_map(fd, prot, flags);
	return real_mmap64(addr, len, prot, flags, fd, off);
}
