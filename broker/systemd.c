/* systemd.c - service manager integration: readiness and watchdog
 * notifications, socket activation, and journald priorities.
 *
 * With libsystemd (an optional meson dependency) sd_notify() is used;
 * without it the same datagram goes to $NOTIFY_SOCKET directly: the
 * protocol is one sendmsg() of "KEY=VALUE\n" lines.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#ifdef HAVE_LIBSYSTEMD
#include <systemd/sd-daemon.h>
#endif

#include "broker.h"

/* A worker of cluster-shards-per-node (workers.c) tells its supervisor,
 * which speaks to systemd for all of them: -1 none. */
static int via_fd = -1;
static int via_worker;

void
brk_sd_notify_via(int fd, int worker)
{
	via_fd = fd;
	via_worker = worker;
}

int
brk_sd_notify(const char *state)
{
	if (via_fd >= 0) {
		char msg[512];
		int n = snprintf(msg, sizeof(msg), "%d:%s", via_worker, state);

		if (n < 0 || (size_t)n >= sizeof(msg)) {
			return -EMSGSIZE; /* a STATUS line that long is not worth splitting */
		}
		return send(via_fd, msg, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 ? -errno : 0;
	}
#ifdef HAVE_LIBSYSTEMD
	int rc = sd_notify(0, state);
	return rc < 0 ? rc : 0;
#else
	const char *path = getenv("NOTIFY_SOCKET");
	struct sockaddr_un sun;
	socklen_t len;
	ssize_t n;
	int fd, rc = 0;

	if (path == NULL || path[0] == '\0') {
		return 0; /* not under a service manager */
	}
	if ((path[0] != '/' && path[0] != '@') || strlen(path) >= sizeof(sun.sun_path)) {
		return -EINVAL;
	}
	memset(&sun, 0, sizeof(sun));
	sun.sun_family = AF_UNIX;
	memcpy(sun.sun_path, path, strlen(path));
	if (path[0] == '@') {
		sun.sun_path[0] = '\0'; /* abstract namespace */
	}
	len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(path));
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		return -errno;
	}
	n = sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sun, len);
	if (n < 0) {
		rc = -errno;
	}
	close(fd);
	return rc;
#endif
}

uint64_t
brk_sd_watchdog_usec(void)
{
	const char *usec = getenv("WATCHDOG_USEC");
	const char *pid = getenv("WATCHDOG_PID");
	long long v;

	if (usec == NULL || !brk_str2ll(usec, strlen(usec), &v) || v <= 0) {
		return 0;
	}
	if (pid != NULL) {
		long long p;
		if (!brk_str2ll(pid, strlen(pid), &p) || p != (long long)getpid()) {
			return 0; /* meant for another process */
		}
	}
	return (uint64_t)v;
}

int
brk_sd_listen_fds(void)
{
	const char *pid = getenv("LISTEN_PID");
	const char *fds = getenv("LISTEN_FDS");
	long long p, n;

	if (pid == NULL || fds == NULL) {
		return 0;
	}
	if (!brk_str2ll(pid, strlen(pid), &p) || p != (long long)getpid()) {
		return 0;
	}
	if (!brk_str2ll(fds, strlen(fds), &n) || n <= 0 || n > BRK_MAX_BIND) {
		return 0;
	}
	/* Not for our children. */
	unsetenv("LISTEN_PID");
	unsetenv("LISTEN_FDS");
	unsetenv("LISTEN_FDNAMES");
	for (int fd = BRK_SD_LISTEN_FDS_START; fd < BRK_SD_LISTEN_FDS_START + (int)n; fd++) {
		int fl = fcntl(fd, F_GETFD);
		if (fl < 0) {
			return -EBADF;
		}
		fcntl(fd, F_SETFD, fl | FD_CLOEXEC);
	}
	return (int)n;
}

bool
brk_sd_journal_stderr(void)
{
	const char *js = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;

	if (js == NULL || sscanf(js, "%llu:%llu", &dev, &ino) != 2) {
		return false;
	}
	if (fstat(STDERR_FILENO, &st) != 0) {
		return false;
	}
	/* stderr may have been redirected since: only then is it the journal */
	return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}
