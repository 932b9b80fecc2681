/* listen.c - where clients come from: TCP and unix listeners, sockets
 * passed by systemd, accepting a connection (maxclients, protected mode),
 * the lock that keeps one echd per data directory, and the files echd makes
 * beside them (its unix socket, its pidfile), removed at exit only if they
 * are still its own.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/bufferevent.h>
#include <event2/listener.h>

#include "broker.h"
#include "server.h"

static void accept_common(struct brk_server *srv, evutil_socket_t fd, struct sockaddr *sa,
	bool is_tls);

static bool
is_loopback(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
		return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
	}
	if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in = (const struct sockaddr_in6 *)sa;
		static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
		if (IN6_IS_ADDR_LOOPBACK(&in->sin6_addr)) {
			return true;
		}
		return memcmp(in->sin6_addr.s6_addr, mapped, 12) == 0 &&
			in->sin6_addr.s6_addr[12] == 127;
	}
	return false;
}

static void
accept_cb(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen,
	void *arg)
{
	(void)l;
	(void)salen;
	accept_common(arg, fd, sa, false);
}

static void
accept_tls_cb(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen,
	void *arg)
{
	(void)l;
	(void)salen;
	accept_common(arg, fd, sa, true);
}

static void
accept_common(struct brk_server *srv, evutil_socket_t fd, struct sockaddr *sa, bool is_tls)
{
	static const char maxclients_msg[] = "-ERR max number of clients reached\r\n";
	static const char denied_msg[] =
		"-DENIED echd is running in protected mode because protected mode is enabled "
		"and no password is set for the default user. In this mode connections are "
		"only accepted from the loopback interface and unix sockets. Set a password "
		"(requirepass, or ACL users), or disable protected mode with "
		"'CONFIG SET protected-mode no' from the loopback interface.\r\n";
	char addr[64] = "", laddr[64] = "";
	struct sockaddr_storage ls;
	socklen_t lslen = sizeof(ls);
	bool is_unix = sa->sa_family == AF_UNIX;
	const char *refusal = NULL;
	struct brk_conn *c;

	if (srv->nconns >= (uint64_t)srv->cfg.maxclients && srv->unauth == NULL) {
		refusal = maxclients_msg;
		srv->stats.rejected_connections++;
		echd_log(ECHD_LOG_VERBOSE, "rejected a connection: max number of clients reached");
	} else if (srv->cfg.protected_mode && !is_unix && brk_acl_nopass_default(srv) &&
		   !is_loopback(sa)) {
		refusal = denied_msg;
		srv->stats.rejected_connections++;
		echd_log(ECHD_LOG_NOTICE, "protected mode: refused a non-loopback connection");
	} else if (srv->nconns >= (uint64_t)srv->cfg.maxclients) {
		/* No room: the oldest connection still in its handshake or not
		 * logged in makes way. Refusing the new one instead would let
		 * anyone who can open sockets keep every client out; this way a
		 * client gets in unless maxclients newer connections arrive
		 * before it has finished its handshake and login. */
		struct brk_conn *old = srv->unauth;
		echd_log(ECHD_LOG_VERBOSE,
			"closing client %s: not authenticated after %llu ms, and a new connection "
			"needs its slot",
			old->addr, (unsigned long long)(brk_now_ms() - old->ctime_ms));
		brk_conn_close_asap(old);
	}
	if (refusal != NULL && !is_tls) {
		ssize_t n = write(fd, refusal, strlen(refusal)); /* best effort, as Redis */
		(void)n;
		close(fd);
		return;
	}
	if (is_unix) {
		snprintf(addr, sizeof(addr), "%s:0", srv->cfg.unixsocket);
		snprintf(laddr, sizeof(laddr), "%s:0", srv->cfg.unixsocket);
	} else {
		char host[INET6_ADDRSTRLEN];
		int one = 1;
		if (sa->sa_family == AF_INET) {
			struct sockaddr_in *in = (struct sockaddr_in *)sa;
			inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
			snprintf(addr, sizeof(addr), "%s:%u", host, ntohs(in->sin_port));
		} else {
			struct sockaddr_in6 *in = (struct sockaddr_in6 *)sa;
			inet_ntop(AF_INET6, &in->sin6_addr, host, sizeof(host));
			snprintf(addr, sizeof(addr), "%s:%u", host, ntohs(in->sin6_port));
		}
		if (getsockname(fd, (struct sockaddr *)&ls, &lslen) == 0) {
			if (ls.ss_family == AF_INET) {
				struct sockaddr_in *in = (struct sockaddr_in *)&ls;
				inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
				snprintf(laddr, sizeof(laddr), "%s:%u", host, ntohs(in->sin_port));
			} else if (ls.ss_family == AF_INET6) {
				struct sockaddr_in6 *in = (struct sockaddr_in6 *)&ls;
				inet_ntop(AF_INET6, &in->sin6_addr, host, sizeof(host));
				snprintf(laddr, sizeof(laddr), "%s:%u", host, ntohs(in->sin6_port));
			}
		}
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		if (srv->cfg.tcp_keepalive > 0) {
			setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
		}
	}
	c = brk_conn_create(srv, fd, addr, laddr, is_unix, is_tls);
	if (c == NULL) {
		echd_log(ECHD_LOG_WARNING, "cannot set up a connection from %s: out of memory",
			addr);
		close(fd);
		return;
	}
	if (refusal != NULL) {
		/* Over TLS the refusal must be sent after the handshake, encrypted
		 * (plain bytes would read as a broken handshake); the connection
		 * then closes, or cron_cb closes it if the handshake never ends. */
		c->flags |= BRK_CONN_REFUSED | BRK_CONN_CLOSE_AFTER_REPLY;
		brk_conn_unauth_remove(c); /* it may not close another to make room */
		resp_buf_append(&c->out, refusal, strlen(refusal));
		brk_conn_flush(c, c->out.len);
		return;
	}
	srv->stats.total_connections++;
}

static void
listener_error_cb(struct evconnlistener *l, void *arg)
{
	int err = EVUTIL_SOCKET_ERROR();

	(void)l;
	(void)arg;
	/* EMFILE and friends: keep serving the connections we have. */
	echd_log(ECHD_LOG_WARNING, "accept failed: %s", evutil_socket_error_to_string(err));
}

int
brk_listen_tcp(struct brk_server *srv, const char *spec, int port, bool tls)
{
	bool optional = spec[0] == '-';
	const char *host = optional ? spec + 1 : spec;
	struct addrinfo hints, *res = NULL, *ai;
	char portbuf[16];
	int rc, bound = 0;

	if (!strcmp(host, "*")) {
		host = "0.0.0.0";
	}
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE | AI_NUMERICHOST;
	snprintf(portbuf, sizeof(portbuf), "%d", port);
	rc = getaddrinfo(host, portbuf, &hints, &res);
	if (rc != 0) {
		echd_log(optional ? ECHD_LOG_VERBOSE : ECHD_LOG_WARNING,
			"bind address '%s' is not a numeric address: %s", host, gai_strerror(rc));
		return optional ? 0 : -1;
	}
	for (ai = res; ai != NULL; ai = ai->ai_next) {
		struct evconnlistener *l;
		int fd, one = 1;

		if (srv->nlisteners >= 2 * BRK_MAX_BIND) {
			break;
		}
		fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd < 0) {
			continue;
		}
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (ai->ai_family == AF_INET6) {
			setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
		}
		if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
			int e = errno;
			close(fd);
			echd_log(optional ? ECHD_LOG_VERBOSE : ECHD_LOG_WARNING,
				"could not bind %s port %d: %s", host, port, strerror(e));
			continue;
		}
		l = evconnlistener_new(srv->base, tls ? accept_tls_cb : accept_cb, srv,
			LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, (int)srv->cfg.tcp_backlog, fd);
		if (l == NULL) {
			close(fd);
			continue;
		}
		evconnlistener_set_error_cb(l, listener_error_cb);
		srv->listeners[srv->nlisteners++] = l;
		if (tls && srv->bound_tls_port == 0) {
			struct sockaddr_storage ss;
			socklen_t sl = sizeof(ss);
			if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
				srv->bound_tls_port = ntohs(ss.ss_family == AF_INET
						? ((struct sockaddr_in *)&ss)->sin_port
						: ((struct sockaddr_in6 *)&ss)->sin6_port);
			}
		}
		if (!tls && srv->bound_port == 0) {
			struct sockaddr_storage ss;
			socklen_t sl = sizeof(ss);
			if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
				srv->bound_port = ntohs(ss.ss_family == AF_INET
						? ((struct sockaddr_in *)&ss)->sin_port
						: ((struct sockaddr_in6 *)&ss)->sin6_port);
			}
		}
		bound++;
	}
	freeaddrinfo(res);
	if (bound == 0 && !optional) {
		return -1;
	}
	return 0;
}

/* Remembers which file this process made at path, for brk_made_remove(). */
void
brk_made_note(const char *path, struct brk_made_file *m)
{
	struct stat sb;

	if (lstat(path, &sb) == 0) {
		m->dev = sb.st_dev;
		m->ino = sb.st_ino;
	}
}

/* Removes path if it is still the file brk_made_note() saw: not one that
 * another process put there since, and nothing at all if this process
 * never made one (it exits because it could not start, say, while the
 * echd that made them runs on). */
void
brk_made_remove(const char *path, struct brk_made_file *m)
{
	struct stat sb;

	if (m->ino != 0 && lstat(path, &sb) == 0 && sb.st_dev == m->dev && sb.st_ino == m->ino) {
		unlink(path);
	}
	m->ino = 0;
}

/* A socket file left at path by a process that died is removed; one that
 * a live process listens on, or a file that is no socket, is left alone
 * and refused. Returns 0 when path is free to bind. */
static int
stale_socket_gone(const char *path, const struct sockaddr_un *sun)
{
	struct stat sb;
	int fd, rc;

	if (lstat(path, &sb) != 0) {
		return 0;
	}
	if (!S_ISSOCK(sb.st_mode)) {
		echd_log(ECHD_LOG_WARNING, "unixsocket %s exists and is not a socket", path);
		return -1;
	}
	/* Non-blocking: a live listener with a full backlog says EAGAIN. */
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		return -1;
	}
	rc = connect(fd, (const struct sockaddr *)sun, sizeof(*sun)) == 0 ? 0 : errno;
	close(fd);
	if (rc == 0 || rc == EAGAIN) {
		echd_log(ECHD_LOG_WARNING, "unixsocket %s is in use by another process", path);
		return -1;
	}
	if (rc != ECONNREFUSED) {
		echd_log(ECHD_LOG_WARNING, "unixsocket %s: cannot tell whether it is in use: %s",
			path, strerror(rc));
		return -1;
	}
	unlink(path); /* nobody listens: left by a process that died */
	return 0;
}

int
brk_listen_unix(struct brk_server *srv)
{
	struct sockaddr_un sun;
	struct evconnlistener *l;
	int fd;

	if (strlen(srv->cfg.unixsocket) >= sizeof(sun.sun_path)) {
		echd_log(ECHD_LOG_WARNING, "unixsocket path too long: %s", srv->cfg.unixsocket);
		return -1;
	}
	memset(&sun, 0, sizeof(sun));
	sun.sun_family = AF_UNIX;
	strcpy(sun.sun_path, srv->cfg.unixsocket);
	if (stale_socket_gone(srv->cfg.unixsocket, &sun) != 0) {
		return -1;
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		return -1;
	}
	if (bind(fd, (struct sockaddr *)&sun, sizeof(sun)) != 0) {
		echd_log(ECHD_LOG_WARNING, "could not bind unix socket %s: %s",
			srv->cfg.unixsocket, strerror(errno));
		close(fd);
		return -1;
	}
	brk_made_note(srv->cfg.unixsocket, &srv->made_socket);
	if (srv->cfg.unixsocketperm) {
		chmod(srv->cfg.unixsocket, srv->cfg.unixsocketperm);
	}
	l = evconnlistener_new(srv->base, accept_cb, srv,
		LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, (int)srv->cfg.tcp_backlog, fd);
	if (l == NULL) {
		close(fd);
		return -1;
	}
	evconnlistener_set_error_cb(l, listener_error_cb);
	srv->listeners[srv->nlisteners++] = l;
	return 0;
}

/* Listens on sockets handed over by socket activation. */
int
brk_listen_activated(struct brk_server *srv, int n)
{
	for (int fd = BRK_SD_LISTEN_FDS_START; fd < BRK_SD_LISTEN_FDS_START + n; fd++) {
		struct evconnlistener *l;
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);

		evutil_make_socket_nonblocking(fd);
		l = evconnlistener_new(srv->base, accept_cb, srv, LEV_OPT_CLOSE_ON_FREE, -1, fd);
		if (l == NULL) {
			echd_log(ECHD_LOG_WARNING, "cannot use activated socket fd %d", fd);
			return -1;
		}
		evconnlistener_set_error_cb(l, listener_error_cb);
		srv->listeners[srv->nlisteners++] = l;
		if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0 && srv->bound_port == 0 &&
			(ss.ss_family == AF_INET || ss.ss_family == AF_INET6)) {
			srv->bound_port = ntohs(ss.ss_family == AF_INET
					? ((struct sockaddr_in *)&ss)->sin_port
					: ((struct sockaddr_in6 *)&ss)->sin6_port);
		}
	}
	echd_log(ECHD_LOG_NOTICE, "using %d socket(s) from socket activation", n);
	return 0;
}

int
brk_mkdir_p(const char *path)
{
	char buf[4096];
	size_t len = strlen(path);

	if (len >= sizeof(buf)) {
		return -ENAMETOOLONG;
	}
	memcpy(buf, path, len + 1);
	for (size_t i = 1; i <= len; i++) {
		if (buf[i] == '/' || buf[i] == '\0') {
			char c = buf[i];
			buf[i] = '\0';
			if (mkdir(buf, 0750) != 0 && errno != EEXIST) {
				return -errno;
			}
			buf[i] = c;
		}
	}
	return 0;
}

/* Takes dir/echd.lock for as long as this process lives: LMDB lets any
 * number of processes write one environment, but blocked readers, WATCH
 * and the group-commit order live in one echd's memory. echo-admin's
 * read-only opens do not take it. */
int
brk_lock_dir(struct brk_server *srv)
{
	char path[4096], pid[32];
	ssize_t n;
	int fd;

	if ((size_t)snprintf(path, sizeof(path), "%s/echd.lock", srv->cfg.dir) >= sizeof(path)) {
		echd_log(ECHD_LOG_WARNING, "data directory path too long: '%s'", srv->cfg.dir);
		return -1;
	}
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0640);
	if (fd < 0) {
		echd_log(ECHD_LOG_WARNING, "cannot open '%s': %s", path, strerror(errno));
		return -1;
	}
	if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
		int err = errno;
		n = pread(fd, pid, sizeof(pid) - 1, 0);
		pid[n > 0 ? n : 0] = '\0';
		pid[strcspn(pid, "\n")] = '\0';
		if (err == EWOULDBLOCK) {
			echd_log(ECHD_LOG_WARNING,
				"data directory '%s' is in use by another echd (pid %s); exiting",
				srv->cfg.dir, pid[0] ? pid : "unknown");
		} else {
			echd_log(ECHD_LOG_WARNING, "cannot lock '%s': %s", path, strerror(err));
		}
		close(fd);
		return -1;
	}
	n = snprintf(pid, sizeof(pid), "%d\n", (int)srv->pid);
	if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)n, 0) != n) {
		echd_log(ECHD_LOG_VERBOSE, "cannot write the pid to '%s': %s", path, strerror(errno));
	}
	srv->lock_fd = fd;
	return 0;
}
