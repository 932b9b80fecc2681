/* adm_live.c - echo-admin over RESP: a blocking client on one socket.
 *
 * Requests are encoded straight into a resp_buf; replies are parsed with
 * proto/'s reply parser. The handshake asks for RESP3 (HELLO 3, with AUTH
 * when a password is given) and falls back to RESP2 and AUTH for servers
 * without HELLO; the readers below accept either shape (a map, or a flat
 * array of pairs). Each action is exactly one server command, so the
 * server applies it as one transaction; the reads around it only check
 * that what it names exists, to give exit status 1 rather than a silent 0.
 *
 * With --tls the socket is wrapped in OpenSSL: the connected fd is made
 * non-blocking and every SSL_* call that wants input or output waits in
 * poll() under the same --timeout as the plain socket.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "adm.h"
#include "echd.h"

#define PAGE      1000  /* XPENDING COUNT per round trip */
#define SCAN_HINT "200" /* SCAN COUNT */
#define READ_MIN  (64 * 1024)

#define TLS_FAILED (-1100) /* a TLS error: adm_conn.tls_err says which */

struct adm_conn {
	int fd;
	int proto; /* 2 or 3 after the handshake */
	int timeout_ms;
	char *in; /* received, not yet parsed */
	size_t in_len;
	size_t in_pos;
	size_t in_cap;
	struct resp_buf out;
	const char *where; /* for messages: host:port or the socket path */
	char where_buf[300];
	SSL_CTX *tls_ctx; /* NULL: plain */
	SSL *ssl;
	bool tls_dead;          /* after a fatal TLS error: no close_notify */
	unsigned long tls_code; /* OpenSSL's error of the last TLS_FAILED */
	char tls_err[256];      /* its reason, as text */
};

/* ---- the socket --------------------------------------------------------- */

static int
wait_fd(int fd, short events, int timeout_ms)
{
	struct pollfd p = {.fd = fd, .events = events};
	int rc;

	do {
		rc = poll(&p, 1, timeout_ms);
	} while (rc < 0 && errno == EINTR);
	if (rc < 0) {
		return -errno;
	}
	return rc == 0 ? -ETIMEDOUT : 0;
}

/* connect() bounded by the timeout: non-blocking, then poll. */
static int
connect_timeout(int fd, const struct sockaddr *sa, socklen_t len, int timeout_ms)
{
	int fl = fcntl(fd, F_GETFL), err = 0;
	socklen_t elen = sizeof(err);
	int rc;

	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) {
		return -errno;
	}
	rc = connect(fd, sa, len);
	if (rc < 0 && errno != EINPROGRESS) {
		return -errno;
	}
	if (rc < 0) {
		rc = wait_fd(fd, POLLOUT, timeout_ms);
		if (rc != 0) {
			return rc;
		}
		if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) < 0) {
			return -errno;
		}
		if (err != 0) {
			return -err;
		}
	}
	if (fcntl(fd, F_SETFL, fl) < 0) {
		return -errno;
	}
	return 0;
}

static int
open_unix(const char *path, int timeout_ms, int *out)
{
	struct sockaddr_un sun;
	int fd, rc;

	if (strlen(path) >= sizeof(sun.sun_path)) {
		return -ENAMETOOLONG;
	}
	memset(&sun, 0, sizeof(sun));
	sun.sun_family = AF_UNIX;
	strcpy(sun.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		return -errno;
	}
	rc = connect_timeout(fd, (const struct sockaddr *)&sun, sizeof(sun), timeout_ms);
	if (rc != 0) {
		close(fd);
		return rc;
	}
	*out = fd;
	return 0;
}

/* Tries each address of host:port in turn. *gai gets a getaddrinfo error. */
static int
open_tcp(const char *host, int port, int timeout_ms, int *out, int *gai)
{
	struct addrinfo hints, *res = NULL, *ai;
	char ports[16];
	int rc = -ECONNREFUSED;

	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	snprintf(ports, sizeof(ports), "%d", port);
	*gai = getaddrinfo(host, ports, &hints, &res);
	if (*gai != 0) {
		return -EHOSTUNREACH;
	}
	for (ai = res; ai != NULL; ai = ai->ai_next) {
		int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
		int one = 1;
		if (fd < 0) {
			rc = -errno;
			continue;
		}
		rc = connect_timeout(fd, ai->ai_addr, ai->ai_addrlen, timeout_ms);
		if (rc == 0) {
			setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
			*out = fd;
			break;
		}
		close(fd);
	}
	freeaddrinfo(res);
	return rc;
}

static int
set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) {
		return -errno;
	}
	return 0;
}

static int
sock_send(struct adm_conn *c, const char *p, size_t len)
{
	size_t off = 0;

	while (off < len) {
		ssize_t n = send(c->fd, p + off, len - off, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR) {
			continue;
		}
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			int rc = wait_fd(c->fd, POLLOUT, c->timeout_ms);
			if (rc != 0) {
				return rc;
			}
			continue;
		}
		if (n < 0) {
			return -errno;
		}
		off += (size_t)n;
	}
	return 0;
}

/* Makes room for at least READ_MIN more bytes. */
static int
in_reserve(struct adm_conn *c)
{
	size_t cap;
	char *p;

	if (c->in_cap - c->in_len >= READ_MIN) {
		return 0;
	}
	cap = c->in_cap ? c->in_cap * 2 : 2 * READ_MIN;
	p = echd_realloc(c->in, cap);
	if (p == NULL) {
		return -ENOMEM;
	}
	c->in = p;
	c->in_cap = cap;
	return 0;
}

/* ---- TLS ---------------------------------------------------------------- */

/* OpenSSL writes with write(2), which raises SIGPIPE once the server is
 * gone: ignore it for the call (as libcurl does), so that a lost server is
 * exit status 3 rather than death by signal. The old disposition comes back
 * after each call, so output to a closed pipe still ends the tool. */
static void
sigpipe_ignore(struct sigaction *old)
{
	struct sigaction ign;

	memset(&ign, 0, sizeof(ign));
	ign.sa_handler = SIG_IGN;
	sigemptyset(&ign.sa_mask);
	sigaction(SIGPIPE, &ign, old);
}

static void
sigpipe_restore(const struct sigaction *old)
{
	sigaction(SIGPIPE, old, NULL);
}

static int64_t
mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The reason of OpenSSL's first queued error ("wrong version number"), or
 * its whole text when the reason has no string. Empties the queue and
 * returns the error (0: none). */
static unsigned long
tls_reason(char *buf, size_t len)
{
	unsigned long e = ERR_peek_error();
	const char *r = e != 0 ? ERR_reason_error_string(e) : NULL;

	if (e == 0) {
		snprintf(buf, len, "unknown TLS error");
	} else if (r != NULL) {
		snprintf(buf, len, "%s", r);
	} else {
		ERR_error_string_n(e, buf, len);
	}
	ERR_clear_error();
	return e;
}

static bool
tls_reason_is(unsigned long e, int reason)
{
	return ERR_GET_LIB(e) == ERR_LIB_SSL && ERR_GET_REASON(e) == reason;
}

/* For messages: OpenSSL's "system library" text hides errno, so the files
 * are opened here first. Returns 0 or ADM_EXIT_CONNECT, reported. */
static int
file_check(const char *opt, const char *path, bool dir)
{
	struct stat sb;
	FILE *f;

	if (dir) {
		if (stat(path, &sb) != 0) {
			return adm_err(ADM_EXIT_CONNECT, "cannot load %s '%s': %s", opt, path,
				strerror(errno));
		}
		if (!S_ISDIR(sb.st_mode)) {
			return adm_err(ADM_EXIT_CONNECT, "cannot load %s '%s': not a directory",
				opt, path);
		}
		return 0;
	}
	f = fopen(path, "r");
	if (f == NULL) {
		return adm_err(
			ADM_EXIT_CONNECT, "cannot load %s '%s': %s", opt, path, strerror(errno));
	}
	fclose(f);
	return 0;
}

static int
load_failed(const char *opt, const char *path)
{
	char why[256];

	tls_reason(why, sizeof(why));
	return adm_err(ADM_EXIT_CONNECT, "cannot load %s '%s': %s", opt, path, why);
}

static int
load_trust(SSL_CTX *ctx, const struct adm_opts *o)
{
	int rc;

	if (o->cacert == NULL && o->cacertdir == NULL) {
		if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
			char why[256];
			tls_reason(why, sizeof(why));
			return adm_err(ADM_EXIT_CONNECT,
				"cannot load the system's CA certificates: %s", why);
		}
		return 0;
	}
	if (o->cacert != NULL && (rc = file_check("--cacert", o->cacert, false)) != 0) {
		return rc;
	}
	if (o->cacertdir != NULL && (rc = file_check("--cacertdir", o->cacertdir, true)) != 0) {
		return rc;
	}
	/* a directory is only looked at during the handshake: nothing to fail here */
	if (SSL_CTX_load_verify_locations(ctx, o->cacert, o->cacertdir) != 1) {
		return load_failed(o->cacert != NULL ? "--cacert" : "--cacertdir",
			o->cacert != NULL ? o->cacert : o->cacertdir);
	}
	return 0;
}

static int
load_identity(SSL_CTX *ctx, const struct adm_opts *o)
{
	unsigned long e;
	int rc;

	if ((rc = file_check("--cert", o->cert, false)) != 0 ||
		(rc = file_check("--key", o->key, false)) != 0) {
		return rc;
	}
	if (SSL_CTX_use_certificate_chain_file(ctx, o->cert) != 1) {
		return load_failed("--cert", o->cert);
	}
	if (SSL_CTX_use_PrivateKey_file(ctx, o->key, SSL_FILETYPE_PEM) != 1) {
		/* OpenSSL compares the key with the certificate here */
		e = ERR_peek_last_error();
		if (ERR_GET_LIB(e) == ERR_LIB_X509 &&
			(ERR_GET_REASON(e) == X509_R_KEY_VALUES_MISMATCH ||
				ERR_GET_REASON(e) == X509_R_KEY_TYPE_MISMATCH)) {
			ERR_clear_error();
			return adm_err(ADM_EXIT_CONNECT, "--key '%s' does not match --cert '%s'",
				o->key, o->cert);
		}
		return load_failed("--key", o->key);
	}
	return 0;
}

/* The one context of this run: protocol versions, trusted CAs, our
 * certificate. Files are read before connecting, so a wrong path fails
 * without touching the network. Returns an ADM_EXIT_ code, reported. */
static int
tls_ctx_create(const struct adm_opts *o, SSL_CTX **out)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	char why[256];
	int rc;

	if (ctx == NULL) {
		tls_reason(why, sizeof(why));
		return adm_err(ADM_EXIT_FAILED, "cannot create a TLS context: %s", why);
	}
	/* echd's own default; older versions are broken */
	SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
#ifdef SSL_OP_IGNORE_UNEXPECTED_EOF
	/* replies delimit themselves: a server closing without close_notify is
	 * "closed", and a reply it cut short is still caught by the parser */
	SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
#endif
	if (!o->insecure) {
		SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
		rc = load_trust(ctx, o);
		if (rc != 0) {
			goto fail;
		}
	}
	if (o->cert != NULL) {
		rc = load_identity(ctx, o);
		if (rc != 0) {
			goto fail;
		}
	}
	*out = ctx;
	return 0;
fail:
	SSL_CTX_free(ctx);
	return rc;
}

/* A failed SSL_* call (ret its return value) as a return code: -errno for
 * the socket, -ECONNRESET for a close, TLS_FAILED with c->tls_err set. */
static int
tls_error(struct adm_conn *c, int ret)
{
	int sys = errno;
	int e = SSL_get_error(c->ssl, ret);
	unsigned long q = ERR_peek_error();

	c->tls_dead = true;
	if (e == SSL_ERROR_ZERO_RETURN) {
		return -ECONNRESET;
	}
	if (e == SSL_ERROR_SYSCALL && q == 0) {
		return sys != 0 ? -sys : -ECONNRESET;
	}
	if (ERR_GET_LIB(q) == ERR_LIB_SYS) {
		ERR_clear_error();
		return ERR_GET_REASON(q) != 0 ? -ERR_GET_REASON(q) : -ECONNRESET;
	}
	if (tls_reason_is(q, SSL_R_CERTIFICATE_VERIFY_FAILED)) {
		/* say why: unknown CA, expired, name mismatch ... */
		long v = SSL_get_verify_result(c->ssl);
		snprintf(c->tls_err, sizeof(c->tls_err), "certificate verify failed: %s",
			X509_verify_cert_error_string(v));
		c->tls_code = q;
		ERR_clear_error();
		return TLS_FAILED;
	}
	c->tls_code = tls_reason(c->tls_err, sizeof(c->tls_err));
	return TLS_FAILED;
}

/* The poll() events a WANT_ result waits for; 0 for a real failure. */
static short
tls_want(struct adm_conn *c, int ret)
{
	switch (SSL_get_error(c->ssl, ret)) {
	case SSL_ERROR_WANT_READ:
		return POLLIN;
	case SSL_ERROR_WANT_WRITE:
		return POLLOUT;
	default:
		return 0;
	}
}

/* SSL_connect, the whole handshake bounded by the timeout. */
static int
tls_handshake(struct adm_conn *c)
{
	int64_t deadline = mono_ms() + c->timeout_ms;
	struct sigaction old;
	int rc = 0;

	sigpipe_ignore(&old);
	for (;;) {
		int64_t left;
		short ev;
		int n;

		ERR_clear_error();
		n = SSL_connect(c->ssl);
		if (n == 1) {
			break;
		}
		ev = tls_want(c, n);
		if (ev == 0) {
			rc = tls_error(c, n);
			break;
		}
		left = deadline - mono_ms();
		rc = left > 0 ? wait_fd(c->fd, ev, (int)left) : -ETIMEDOUT;
		if (rc != 0) {
			c->tls_dead = true;
			break;
		}
	}
	sigpipe_restore(&old);
	return rc;
}

static bool
is_ip(const char *host)
{
	unsigned char a[sizeof(struct in6_addr)];

	return inet_pton(AF_INET, host, a) == 1 || inet_pton(AF_INET6, host, a) == 1;
}

/* Wraps the connected socket and shakes hands. The server's certificate
 * must name --host: as an address when it is one, else as a DNS name,
 * which also goes out as SNI (RFC 6066 has no SNI for addresses). */
static int
tls_open(struct adm_conn *c, const struct adm_opts *o)
{
	bool ip = is_ip(o->host);
	int rc;

	c->ssl = SSL_new(c->tls_ctx);
	if (c->ssl == NULL) {
		c->tls_code = tls_reason(c->tls_err, sizeof(c->tls_err));
		return TLS_FAILED;
	}
	rc = set_nonblock(c->fd);
	if (rc != 0) {
		return rc;
	}
	if (SSL_set_fd(c->ssl, c->fd) != 1 ||
		(!ip && SSL_set_tlsext_host_name(c->ssl, o->host) != 1)) {
		goto fail;
	}
	if (!o->insecure) {
		if (ip ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(c->ssl), o->host) != 1
		       : SSL_set1_host(c->ssl, o->host) != 1) {
			goto fail;
		}
	}
	return tls_handshake(c);
fail:
	c->tls_dead = true;
	c->tls_code = tls_reason(c->tls_err, sizeof(c->tls_err));
	return TLS_FAILED;
}

/* A write found the connection closed. The reason may be waiting in an
 * alert the server sent before closing (TLS 1.3 refuses a client
 * certificate after our handshake ended, so we learn it here): prefer it. */
static int
tls_closed_why(struct adm_conn *c, int rc)
{
	char b[256];
	int n;

	ERR_clear_error();
	n = SSL_read(c->ssl, b, sizeof(b));
	if (n <= 0 && SSL_get_error(c->ssl, n) == SSL_ERROR_SSL) {
		c->tls_code = tls_reason(c->tls_err, sizeof(c->tls_err));
		return TLS_FAILED;
	}
	ERR_clear_error();
	return rc;
}

/* SSL_write never writes part of a buffer (no SSL_MODE_ENABLE_PARTIAL_WRITE):
 * after a WANT_ it is called again with the same arguments. */
static int
tls_send(struct adm_conn *c, const char *p, size_t len)
{
	struct sigaction old;
	size_t off = 0;
	int rc = 0;

	sigpipe_ignore(&old);
	while (off < len) {
		int chunk = len - off > INT_MAX ? INT_MAX : (int)(len - off);
		short ev;
		int n;

		ERR_clear_error();
		n = SSL_write(c->ssl, p + off, chunk);
		if (n > 0) {
			off += (size_t)n;
			continue;
		}
		ev = tls_want(c, n);
		if (ev == 0) {
			rc = tls_error(c, n);
			if (rc == -ECONNRESET || rc == -EPIPE) {
				rc = tls_closed_why(c, rc);
			}
			break;
		}
		rc = wait_fd(c->fd, ev, c->timeout_ms);
		if (rc != 0) {
			break;
		}
	}
	sigpipe_restore(&old);
	return rc;
}

/* in_fill() for TLS: SSL_read first, since OpenSSL may hold decrypted
 * bytes the socket no longer shows to poll(); then as in_fill(). */
static int
tls_fill(struct adm_conn *c)
{
	struct sigaction old;
	bool got = false;
	int rc;

	sigpipe_ignore(&old);
	for (;;) {
		size_t room;
		short ev;
		int n;

		rc = in_reserve(c);
		if (rc != 0) {
			break;
		}
		room = c->in_cap - c->in_len;
		ERR_clear_error();
		n = SSL_read(c->ssl, c->in + c->in_len, room > INT_MAX ? INT_MAX : (int)room);
		if (n > 0) {
			got = true;
			c->in_len += (size_t)n;
			continue;
		}
		ev = tls_want(c, n);
		if (ev == POLLIN && got) {
			break; /* drained */
		}
		if (ev == 0) {
			rc = tls_error(c, n);
			if (rc == -ECONNRESET && got) {
				rc = 0; /* closed: what came before still counts */
			}
			break;
		}
		rc = wait_fd(c->fd, ev, c->timeout_ms);
		if (rc != 0) {
			break;
		}
	}
	sigpipe_restore(&old);
	return rc;
}

static void
tls_close(struct adm_conn *c)
{
	struct sigaction old;

	if (c->ssl != NULL) {
		if (!c->tls_dead && SSL_is_init_finished(c->ssl)) {
			/* close_notify, without waiting for the server's */
			sigpipe_ignore(&old);
			SSL_shutdown(c->ssl);
			sigpipe_restore(&old);
		}
		SSL_free(c->ssl);
		c->ssl = NULL;
	}
	SSL_CTX_free(c->tls_ctx);
	c->tls_ctx = NULL;
	ERR_clear_error();
}

static void
conn_destroy(struct adm_conn *c)
{
	if (c == NULL) {
		return;
	}
	tls_close(c);
	if (c->fd >= 0) {
		close(c->fd);
	}
	echd_free(c->in);
	resp_buf_finish(&c->out);
	echd_free(c);
}

/* ---- requests ----------------------------------------------------------- */

static void
cmd_begin(struct adm_conn *c, size_t argc)
{
	char hdr[32];
	int n = snprintf(hdr, sizeof(hdr), "*%zu\r\n", argc);

	resp_buf_append(&c->out, hdr, (size_t)n);
}

static void
cmd_arg(struct adm_conn *c, const void *p, size_t len)
{
	char hdr[32];
	int n = snprintf(hdr, sizeof(hdr), "$%zu\r\n", len);

	resp_buf_append(&c->out, hdr, (size_t)n);
	resp_buf_append(&c->out, p, len);
	resp_buf_append(&c->out, "\r\n", 2);
}

static void
cmd_str(struct adm_conn *c, const char *s)
{
	cmd_arg(c, s, strlen(s));
}

static void
cmd_u64(struct adm_conn *c, uint64_t v)
{
	char buf[24];
	int n = snprintf(buf, sizeof(buf), "%llu", (unsigned long long)v);

	cmd_arg(c, buf, (size_t)n);
}

static void
cmd_id(struct adm_conn *c, const struct stream_id *id, bool exclusive)
{
	char buf[48];
	size_t n;

	buf[0] = '(';
	n = stream_id_format(id, buf + 1);
	cmd_arg(c, exclusive ? buf : buf + 1, exclusive ? n + 1 : n);
}

static int
conn_flush(struct adm_conn *c)
{
	int rc;

	if (c->out.oom) {
		resp_buf_truncate(&c->out, 0);
		c->out.oom = false;
		return -ENOMEM;
	}
	rc = c->ssl != NULL ? tls_send(c, c->out.data, c->out.len)
			    : sock_send(c, c->out.data, c->out.len);
	resp_buf_truncate(&c->out, 0);
	return rc;
}

/* Waits for input, then takes everything the socket holds: a reply is
 * parsed again once per burst of input, not once per packet. */
static int
in_fill(struct adm_conn *c)
{
	bool got = false;
	int rc;

	if (c->ssl != NULL) {
		return tls_fill(c);
	}
	rc = wait_fd(c->fd, POLLIN, c->timeout_ms);
	if (rc != 0) {
		return rc;
	}
	for (;;) {
		ssize_t n;

		rc = in_reserve(c);
		if (rc != 0) {
			return rc;
		}
		n = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len, MSG_DONTWAIT);
		if (n < 0 && errno == EINTR) {
			continue;
		}
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			return 0; /* drained (poll may wake without data: try again) */
		}
		if (n < 0) {
			return -errno;
		}
		if (n == 0) {
			/* closed: what came before still counts */
			return got ? 0 : -ECONNRESET;
		}
		got = true;
		c->in_len += (size_t)n;
	}
}

/* Reads one reply. */
static int
conn_read(struct adm_conn *c, struct resp_reply **out)
{
	for (;;) {
		size_t consumed;
		int rc;

		if (c->in_len > c->in_pos) {
			rc = resp_reply_parse(
				c->in + c->in_pos, c->in_len - c->in_pos, NULL, &consumed, out);
			if (rc == 0) {
				c->in_pos += consumed;
				if (c->in_pos == c->in_len) {
					c->in_pos = c->in_len = 0;
				}
				return 0;
			}
			if (rc != -EAGAIN) {
				return rc;
			}
		}
		if (c->in_pos > 0) {
			memmove(c->in, c->in + c->in_pos, c->in_len - c->in_pos);
			c->in_len -= c->in_pos;
			c->in_pos = 0;
		}
		rc = in_fill(c);
		if (rc != 0) {
			return rc;
		}
	}
}

/* A failure of the connection itself: exit status 3. */
static int
io_fail(struct adm_ctx *x, int rc)
{
	if (rc == ECHD_EPROTO) {
		return adm_err(ADM_EXIT_CONNECT, "%s: the server sent something that is not RESP",
			x->conn->where);
	}
	if (rc == -ETIMEDOUT) {
		return adm_err(ADM_EXIT_CONNECT, "%s: no reply within %d ms (--timeout)",
			x->conn->where, x->conn->timeout_ms);
	}
	if (rc == -ECONNRESET) {
		return adm_err(
			ADM_EXIT_CONNECT, "%s: the server closed the connection", x->conn->where);
	}
	if (rc == TLS_FAILED) {
		/* TLS 1.3: a refused client certificate is only seen on the first read */
		unsigned long e = x->conn->tls_code;
		bool hint = x->o->cert == NULL &&
			    tls_reason_is(e, SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED);
		return adm_err(ADM_EXIT_CONNECT, "%s: TLS: %s%s", x->conn->where, x->conn->tls_err,
			hint ? " (the server wants a client certificate: --cert and --key)" : "");
	}
	return adm_err(ADM_EXIT_CONNECT, "%s: %s", x->conn->where, echd_strerror(rc));
}

/* Sends what is queued and reads one reply. Returns an ADM_EXIT_ code. */
static int
call(struct adm_ctx *x, struct resp_reply **out)
{
	int rc = conn_flush(x->conn);

	if (rc == 0) {
		rc = conn_read(x->conn, out);
	}
	return rc == 0 ? ADM_EXIT_OK : io_fail(x, rc);
}

/* Reads the next reply of a pipeline. */
static int
next_reply(struct adm_ctx *x, struct resp_reply **out)
{
	int rc = conn_read(x->conn, out);

	return rc == 0 ? ADM_EXIT_OK : io_fail(x, rc);
}

/* ---- reading replies ---------------------------------------------------- */

static bool
is_err(const struct resp_reply *r)
{
	return r->type == RESP_REPLY_ERROR;
}

static bool
err_starts(const struct resp_reply *r, const char *prefix)
{
	return is_err(r) && strncmp(r->str, prefix, strlen(prefix)) == 0;
}

static bool
is_text(const struct resp_reply *r)
{
	return r->type == RESP_REPLY_BULK || r->type == RESP_REPLY_STRING ||
	       r->type == RESP_REPLY_VERBATIM;
}

static bool
is_list(const struct resp_reply *r)
{
	return r->type == RESP_REPLY_ARRAY || r->type == RESP_REPLY_SET ||
	       r->type == RESP_REPLY_MAP;
}

/* The value under name in a RESP3 map or a RESP2 array of pairs. */
static const struct resp_reply *
field(const struct resp_reply *r, const char *name)
{
	size_t n = strlen(name);

	if (!is_list(r)) {
		return NULL;
	}
	for (size_t i = 0; i + 1 < r->elements; i += 2) {
		const struct resp_reply *k = r->element[i];
		if (is_text(k) && k->len == n && memcmp(k->str, name, n) == 0) {
			return r->element[i + 1];
		}
	}
	return NULL;
}

static bool
rep_int(const struct resp_reply *r, int64_t *out)
{
	long long v;
	char *end;

	if (r == NULL) {
		return false;
	}
	if (r->type == RESP_REPLY_INTEGER) {
		*out = r->integer;
		return true;
	}
	if (!is_text(r) || r->len == 0) {
		return false;
	}
	errno = 0;
	v = strtoll(r->str, &end, 10);
	if (errno != 0 || end != r->str + r->len) {
		return false;
	}
	*out = v;
	return true;
}

static bool
rep_id(const struct resp_reply *r, struct stream_id *out)
{
	return r != NULL && is_text(r) && stream_id_parse(r->str, r->len, 0, false, out) == 0;
}

static struct st_buf
rep_buf(const struct resp_reply *r)
{
	struct st_buf b = {"", 0};

	if (r != NULL && is_text(r)) {
		b.data = r->str;
		b.len = r->len;
	}
	return b;
}

static int
bad_reply(const char *what, const struct resp_reply *r)
{
	if (r != NULL && is_err(r)) {
		return adm_err(ADM_EXIT_FAILED, "%s: %s", what, r->str);
	}
	return adm_err(ADM_EXIT_FAILED, "%s: unexpected reply (%s)", what,
		r != NULL ? resp_reply_type_name(r->type) : "missing");
}

/* Maps the server's "no such ..." errors to exit status 1. */
static int
server_err(const struct resp_reply *r, const char *stream, const char *group, const char *what)
{
	if (err_starts(r, "NOGROUP") || err_starts(r, "ERR The XGROUP subcommand requires")) {
		return adm_err(ADM_EXIT_NOTFOUND, "no stream '%s' or no group '%s' in it", stream,
			group != NULL ? group : "");
	}
	if (err_starts(r, "ERR no such key")) {
		return adm_err(ADM_EXIT_NOTFOUND, "no stream '%s'", stream);
	}
	if (err_starts(r, "WRONGTYPE")) {
		return adm_err(ADM_EXIT_NOTFOUND, "'%s' is not a stream", stream);
	}
	if (err_starts(r, "ERR Invalid stream ID") || err_starts(r, "ERR syntax") ||
		err_starts(r, "ERR value")) {
		return adm_err(ADM_EXIT_USAGE, "%s: %s", what, r->str);
	}
	return bad_reply(what, r);
}

/* Entry fields of an XRANGE-style [id, [f, v, ...]] into a buffer array. */
static int
entry_fields(const struct resp_reply *fields, struct st_buf **fv, size_t *cap, size_t *nfv)
{
	*nfv = 0;
	if (fields == NULL || !is_list(fields)) {
		return 0;
	}
	if (fields->elements > *cap) {
		struct st_buf *p = echd_realloc(*fv, fields->elements * sizeof(**fv));
		if (p == NULL) {
			return -ENOMEM;
		}
		*fv = p;
		*cap = fields->elements;
	}
	for (size_t i = 0; i < fields->elements; i++) {
		(*fv)[i] = rep_buf(fields->element[i]);
	}
	*nfv = fields->elements;
	return 0;
}

/* ---- open --------------------------------------------------------------- */

static bool
handshake_unknown(const struct resp_reply *r)
{
	return err_starts(r, "NOPROTO") || (is_err(r) && strstr(r->str, "unknown command"));
}

static int
auth_failed(const struct adm_ctx *x, const struct resp_reply *r)
{
	if (err_starts(r, "NOAUTH")) {
		return adm_err(ADM_EXIT_CONNECT,
			"%s: the server needs a password (--pass, or ECHD_AUTH in the environment)",
			x->conn->where);
	}
	/* the server's words: they never repeat the password */
	return adm_err(ADM_EXIT_CONNECT, "%s: authentication failed: %s", x->conn->where, r->str);
}

static int
handshake(struct adm_ctx *x)
{
	const struct adm_opts *o = x->o;
	struct adm_conn *c = x->conn;
	const char *user = o->user != NULL ? o->user : "default";
	struct resp_reply *r = NULL;
	int rc;

	cmd_begin(c, o->pass != NULL ? 5 : 2);
	cmd_str(c, "HELLO");
	cmd_str(c, "3");
	if (o->pass != NULL) {
		cmd_str(c, "AUTH");
		cmd_str(c, user);
		cmd_str(c, o->pass);
	}
	rc = call(x, &r);
	if (rc != 0) {
		return rc;
	}
	if (!is_err(r)) {
		c->proto = 3;
	} else if (handshake_unknown(r)) {
		/* no HELLO (or no RESP3): RESP2, and AUTH on its own */
		c->proto = 2;
		if (o->pass != NULL) {
			resp_reply_free(r);
			r = NULL;
			cmd_begin(c, o->user != NULL ? 3 : 2);
			cmd_str(c, "AUTH");
			if (o->user != NULL) {
				cmd_str(c, o->user);
			}
			cmd_str(c, o->pass);
			rc = call(x, &r);
			if (rc != 0) {
				return rc;
			}
			if (is_err(r)) {
				rc = auth_failed(x, r);
			}
		}
	} else {
		rc = auth_failed(x, r);
	}
	resp_reply_free(r);
	r = NULL;
	if (rc == 0 && o->db != 0) {
		cmd_begin(c, 2);
		cmd_str(c, "SELECT");
		cmd_u64(c, o->db);
		rc = call(x, &r);
		if (rc == 0 && is_err(r)) {
			rc = adm_err(ADM_EXIT_USAGE, "--db %u: %s", o->db, r->str);
		}
		resp_reply_free(r);
	}
	return rc;
}

/* Reports a failed tls_open(). */
static void
tls_open_failed(const struct adm_conn *c, const struct adm_opts *o, int rc)
{
	const char *hint = "";

	if (rc == -ETIMEDOUT) {
		adm_err(ADM_EXIT_CONNECT,
			"%s: TLS handshake: no answer within %d ms (--timeout): is it a TLS port?",
			c->where, c->timeout_ms);
		return;
	}
	if (rc == -ECONNRESET) {
		adm_err(ADM_EXIT_CONNECT,
			"%s: TLS handshake failed: the server closed the connection", c->where);
		return;
	}
	if (rc != TLS_FAILED) {
		adm_err(ADM_EXIT_CONNECT, "%s: TLS handshake failed: %s", c->where,
			echd_strerror(rc));
		return;
	}
	if (tls_reason_is(c->tls_code, SSL_R_WRONG_VERSION_NUMBER) ||
		tls_reason_is(c->tls_code, SSL_R_PACKET_LENGTH_TOO_LONG)) {
		/* what a plaintext reply to our hello looks like */
		hint = " (is it a TLS port?)";
	} else if (o->cert == NULL &&
		   tls_reason_is(c->tls_code, SSL_R_SSLV3_ALERT_HANDSHAKE_FAILURE)) {
		/* TLS 1.2's answer to a missing client certificate, among others */
		hint = " (does the server want a client certificate? --cert and --key)";
	}
	adm_err(ADM_EXIT_CONNECT, "%s: TLS handshake failed: %s%s", c->where, c->tls_err, hint);
}

int
adm_live_open(struct adm_ctx *x)
{
	const struct adm_opts *o = x->o;
	SSL_CTX *ctx = NULL;
	struct adm_conn *c;
	int rc, gai = 0;

	if (o->tls) {
		rc = tls_ctx_create(o, &ctx);
		if (rc != 0) {
			return rc;
		}
	}
	c = echd_calloc(1, sizeof(*c));
	if (c == NULL) {
		SSL_CTX_free(ctx);
		return adm_err(ADM_EXIT_FAILED, "out of memory");
	}
	c->tls_ctx = ctx;
	c->fd = -1;
	c->timeout_ms = o->timeout_ms;
	resp_buf_init(&c->out);
	if (o->unixsocket != NULL) {
		snprintf(c->where_buf, sizeof(c->where_buf), "%s", o->unixsocket);
		c->where = c->where_buf;
		rc = open_unix(o->unixsocket, o->timeout_ms, &c->fd);
	} else {
		snprintf(c->where_buf, sizeof(c->where_buf), "%s:%d", o->host, o->port);
		c->where = c->where_buf;
		rc = open_tcp(o->host, o->port, o->timeout_ms, &c->fd, &gai);
	}
	if (rc != 0) {
		if (gai != 0) {
			adm_err(ADM_EXIT_CONNECT, "%s: %s", c->where, gai_strerror(gai));
		} else {
			adm_err(ADM_EXIT_CONNECT, "cannot connect to %s: %s", c->where,
				rc == -ETIMEDOUT ? "timed out" : echd_strerror(rc));
		}
		conn_destroy(c);
		return ADM_EXIT_CONNECT;
	}
	if (c->tls_ctx != NULL) {
		rc = tls_open(c, o);
		if (rc != 0) {
			tls_open_failed(c, o, rc);
			conn_destroy(c);
			return ADM_EXIT_CONNECT;
		}
	}
	x->conn = c;
	x->live = true;
	x->now_ms = adm_now_ms();
	rc = handshake(x);
	if (rc != 0) {
		adm_live_close(x);
	}
	return rc;
}

void
adm_live_close(struct adm_ctx *x)
{
	conn_destroy(x->conn);
	x->conn = NULL;
}

/* ---- streams -------------------------------------------------------------- */

/* One XINFO STREAM reply into s (name set by the caller). */
static int
stream_info(const struct resp_reply *r, struct adm_stream_info *s)
{
	const struct resp_reply *first = field(r, "first-entry"), *last = field(r, "last-entry");
	int64_t len, groups, added;

	if (!rep_int(field(r, "length"), &len) || !rep_int(field(r, "groups"), &groups) ||
		!rep_int(field(r, "entries-added"), &added) ||
		!rep_id(field(r, "last-generated-id"), &s->last_generated) ||
		!rep_id(field(r, "max-deleted-entry-id"), &s->max_deleted)) {
		return -1;
	}
	s->length = (uint64_t)len;
	s->groups = (uint64_t)groups;
	s->entries_added = (uint64_t)added;
	s->empty = first == NULL || first->type == RESP_REPLY_NULL;
	if (!s->empty) {
		if (!is_list(first) || first->elements < 1 ||
			!rep_id(first->element[0], &s->first) || last == NULL || !is_list(last) ||
			last->elements < 1 || !rep_id(last->element[0], &s->last_entry)) {
			return -1;
		}
	}
	return 0;
}

int
adm_live_streams(struct adm_ctx *x)
{
	struct adm_conn *c = x->conn;
	struct adm_view *v = adm_view_streams_begin(x);
	char cursor[32] = "0";
	int rc = 0;

	if (v == NULL) {
		return ADM_EXIT_FAILED;
	}
	do {
		struct resp_reply *scan = NULL;
		const struct resp_reply *keys;

		cmd_begin(c, 4);
		cmd_str(c, "SCAN");
		cmd_str(c, cursor);
		cmd_str(c, "COUNT");
		cmd_str(c, SCAN_HINT);
		rc = call(x, &scan);
		if (rc != 0) {
			break;
		}
		if (scan->type != RESP_REPLY_ARRAY || scan->elements != 2 ||
			!is_text(scan->element[0]) || scan->element[0]->len >= sizeof(cursor) ||
			!is_list(scan->element[1])) {
			rc = bad_reply("SCAN", scan);
			resp_reply_free(scan);
			break;
		}
		memcpy(cursor, scan->element[0]->str, scan->element[0]->len + 1);
		keys = scan->element[1];
		/* one round trip for the whole batch */
		for (size_t i = 0; i < keys->elements; i++) {
			cmd_begin(c, 3);
			cmd_str(c, "XINFO");
			cmd_str(c, "STREAM");
			cmd_arg(c, keys->element[i]->str, keys->element[i]->len);
		}
		rc = conn_flush(c);
		if (rc != 0) {
			rc = io_fail(x, rc);
		}
		for (size_t i = 0; rc == 0 && i < keys->elements; i++) {
			struct adm_stream_info s;
			struct resp_reply *info = NULL;

			rc = next_reply(x, &info);
			if (rc != 0) {
				break;
			}
			memset(&s, 0, sizeof(s));
			s.name = rep_buf(keys->element[i]);
			if (err_starts(info, "ERR no such key") || err_starts(info, "WRONGTYPE")) {
				/* deleted since SCAN saw it, or not a stream */
			} else if (is_err(info) || stream_info(info, &s) != 0) {
				rc = bad_reply("XINFO STREAM", info);
			} else if (adm_view_stream(v, &s) != 0) {
				rc = adm_err(ADM_EXIT_FAILED, "out of memory");
			}
			resp_reply_free(info);
		}
		resp_reply_free(scan);
	} while (rc == 0 && strcmp(cursor, "0") != 0);
	adm_view_end(v, false);
	return rc;
}

/* ---- groups --------------------------------------------------------------- */

int
adm_live_groups(struct adm_ctx *x, const char *stream)
{
	struct adm_conn *c = x->conn;
	struct resp_reply *r = NULL;
	struct adm_view *v;
	int rc;

	cmd_begin(c, 3);
	cmd_str(c, "XINFO");
	cmd_str(c, "GROUPS");
	cmd_str(c, stream);
	rc = call(x, &r);
	if (rc != 0) {
		return rc;
	}
	if (is_err(r)) {
		rc = server_err(r, stream, NULL, "XINFO GROUPS");
		resp_reply_free(r);
		return rc;
	}
	if (!is_list(r)) {
		rc = bad_reply("XINFO GROUPS", r);
		resp_reply_free(r);
		return rc;
	}
	/* the oldest pending entry of every group, in one round trip */
	for (size_t i = 0; i < r->elements; i++) {
		struct st_buf name = rep_buf(field(r->element[i], "name"));
		cmd_begin(c, 6);
		cmd_str(c, "XPENDING");
		cmd_str(c, stream);
		cmd_arg(c, name.data, name.len);
		cmd_str(c, "-");
		cmd_str(c, "+");
		cmd_str(c, "1");
	}
	rc = conn_flush(c);
	if (rc != 0) {
		resp_reply_free(r);
		return io_fail(x, rc);
	}
	v = adm_view_groups_begin(x, stream);
	for (size_t i = 0; i < r->elements; i++) {
		const struct resp_reply *g = r->element[i];
		const struct resp_reply *er = field(g, "entries-read"), *lag = field(g, "lag");
		struct resp_reply *p = NULL;
		struct adm_group_info gi;
		int64_t pending, consumers;

		rc = next_reply(x, &p);
		if (rc != 0) {
			break;
		}
		memset(&gi, 0, sizeof(gi));
		gi.name = rep_buf(field(g, "name"));
		gi.entries_read = -1;
		if (!rep_int(field(g, "pending"), &pending) ||
			!rep_int(field(g, "consumers"), &consumers) ||
			!rep_id(field(g, "last-delivered-id"), &gi.last_delivered)) {
			rc = bad_reply("XINFO GROUPS", g);
			resp_reply_free(p);
			break;
		}
		gi.pending = (uint64_t)pending;
		gi.consumers = (uint64_t)consumers;
		if (er != NULL && er->type != RESP_REPLY_NULL) {
			rep_int(er, &gi.entries_read);
		}
		gi.lag_known = lag != NULL && lag->type != RESP_REPLY_NULL && rep_int(lag, &gi.lag);
		if (is_list(p) && p->elements == 1 && is_list(p->element[0]) &&
			p->element[0]->elements == 4 &&
			rep_id(p->element[0]->element[0], &gi.oldest_id) &&
			rep_int(p->element[0]->element[2], &gi.oldest_idle_ms)) {
			gi.has_oldest = true;
		}
		resp_reply_free(p);
		if (v != NULL && adm_view_group(v, &gi) != 0) {
			rc = adm_err(ADM_EXIT_FAILED, "out of memory");
			break;
		}
	}
	/* replies still owed after a failure are read by nobody: we exit */
	adm_view_end(v, false);
	resp_reply_free(r);
	return v == NULL ? ADM_EXIT_FAILED : rc;
}

/* ---- consumers ------------------------------------------------------------ */

/* XINFO CONSUMERS; *out owned. Returns an ADM_EXIT_ code. */
static int
xinfo_consumers(struct adm_ctx *x, const char *stream, const char *group, struct resp_reply **out)
{
	struct adm_conn *c = x->conn;
	struct resp_reply *r = NULL;
	int rc;

	cmd_begin(c, 4);
	cmd_str(c, "XINFO");
	cmd_str(c, "CONSUMERS");
	cmd_str(c, stream);
	cmd_str(c, group);
	rc = call(x, &r);
	if (rc != 0) {
		return rc;
	}
	if (is_err(r)) {
		rc = server_err(r, stream, group, "XINFO CONSUMERS");
	} else if (!is_list(r)) {
		rc = bad_reply("XINFO CONSUMERS", r);
	}
	if (rc != 0) {
		resp_reply_free(r);
		return rc;
	}
	*out = r;
	return 0;
}

static const struct resp_reply *
find_consumer(const struct resp_reply *list, const char *name)
{
	size_t n = strlen(name);

	for (size_t i = 0; i < list->elements; i++) {
		struct st_buf b = rep_buf(field(list->element[i], "name"));
		if (b.len == n && memcmp(b.data, name, n) == 0) {
			return list->element[i];
		}
	}
	return NULL;
}

int
adm_live_consumers(struct adm_ctx *x, const char *stream, const char *group)
{
	struct resp_reply *r = NULL;
	struct adm_view *v;
	int rc = xinfo_consumers(x, stream, group, &r);

	if (rc != 0) {
		return rc;
	}
	v = adm_view_consumers_begin(x, stream, group);
	for (size_t i = 0; v != NULL && i < r->elements; i++) {
		const struct resp_reply *e = r->element[i];
		struct adm_consumer_info ci;
		int64_t pending;

		memset(&ci, 0, sizeof(ci));
		ci.name = rep_buf(field(e, "name"));
		if (!rep_int(field(e, "pending"), &pending) ||
			!rep_int(field(e, "idle"), &ci.idle_ms)) {
			rc = bad_reply("XINFO CONSUMERS", e);
			break;
		}
		ci.pending = (uint64_t)pending;
		/* Redis before 7.2 has no "inactive": unknown, shown as never */
		if (!rep_int(field(e, "inactive"), &ci.inactive_ms)) {
			ci.inactive_ms = -1;
		}
		if (adm_view_consumer(v, &ci) != 0) {
			rc = adm_err(ADM_EXIT_FAILED, "out of memory");
			break;
		}
	}
	adm_view_end(v, false);
	resp_reply_free(r);
	return v == NULL ? ADM_EXIT_FAILED : rc;
}

/* ---- pending -------------------------------------------------------------- */

/* XPENDING pages of at most PAGE rows, resuming after the last id seen;
 * --payload pipelines one XRANGE per row of the page. */
int
adm_live_pending(struct adm_ctx *x, const char *stream, const char *group)
{
	const struct adm_opts *o = x->o;
	struct adm_conn *c = x->conn;
	struct stream_id after = {0, 0};
	bool first = true, end = false, truncated = false;
	uint64_t shown = 0;
	struct st_buf *fv = NULL;
	size_t fvcap = 0;
	struct adm_view *v = NULL;
	int rc = 0;

	if (o->consumer != NULL) {
		struct resp_reply *cl = NULL;
		rc = xinfo_consumers(x, stream, group, &cl);
		if (rc != 0) {
			return rc;
		}
		if (find_consumer(cl, o->consumer) == NULL) {
			rc = adm_err(ADM_EXIT_NOTFOUND, "no consumer '%s' in group '%s'",
				o->consumer, group);
		}
		resp_reply_free(cl);
		if (rc != 0) {
			return rc;
		}
	}
	while (!end && rc == 0) {
		struct resp_reply *page = NULL;
		uint64_t want = PAGE;
		size_t argc = 6 + (o->min_idle > 0 ? 2 : 0) + (o->consumer != NULL ? 1 : 0);

		if (o->limit >= 0 && o->min_deliveries < 0 && (uint64_t)o->limit - shown < want) {
			/* no client-side filter: ask for no more than is shown */
			want = (uint64_t)o->limit - shown + 1;
		}
		cmd_begin(c, argc);
		cmd_str(c, "XPENDING");
		cmd_str(c, stream);
		cmd_str(c, group);
		if (o->min_idle > 0) {
			cmd_str(c, "IDLE");
			cmd_u64(c, (uint64_t)o->min_idle);
		}
		if (first) {
			cmd_str(c, "-");
		} else {
			cmd_id(c, &after, true);
		}
		cmd_str(c, "+");
		cmd_u64(c, want);
		if (o->consumer != NULL) {
			cmd_str(c, o->consumer);
		}
		rc = call(x, &page);
		if (rc != 0) {
			break;
		}
		if (is_err(page) || !is_list(page)) {
			rc = is_err(page) ? server_err(page, stream, group, "XPENDING")
					  : bad_reply("XPENDING", page);
			resp_reply_free(page);
			break;
		}
		if (v == NULL) {
			/* the view opens after the first reply: NOGROUP prints nothing */
			v = adm_view_pending_begin(x, stream, group);
			if (v == NULL) {
				resp_reply_free(page);
				rc = ADM_EXIT_FAILED;
				break;
			}
		}
		first = false;
		end = page->elements < want;
		for (size_t i = 0; i < page->elements; i++) {
			const struct resp_reply *row = page->element[i];
			if (!is_list(row) || row->elements != 4 ||
				!rep_id(row->element[0], &after)) {
				rc = bad_reply("XPENDING", row);
				break;
			}
			if (o->payload) {
				cmd_begin(c, 4);
				cmd_str(c, "XRANGE");
				cmd_str(c, stream);
				cmd_id(c, &after, false);
				cmd_id(c, &after, false);
			}
		}
		if (rc == 0 && o->payload) {
			int frc = conn_flush(c);
			if (frc != 0) {
				rc = io_fail(x, frc);
			}
		}
		for (size_t i = 0; rc == 0 && i < page->elements; i++) {
			const struct resp_reply *row = page->element[i];
			struct resp_reply *ent = NULL;
			struct adm_pending_row pr;
			int64_t idle, count;

			if (o->payload) {
				rc = next_reply(x, &ent);
				if (rc != 0) {
					break;
				}
			}
			memset(&pr, 0, sizeof(pr));
			rep_id(row->element[0], &pr.id);
			pr.consumer = rep_buf(row->element[1]);
			if (!rep_int(row->element[2], &idle) || !rep_int(row->element[3], &count)) {
				rc = bad_reply("XPENDING", row);
				resp_reply_free(ent);
				break;
			}
			pr.idle_ms = idle;
			pr.deliveries = (uint64_t)count;
			if (o->min_deliveries >= 0 && count < o->min_deliveries) {
				resp_reply_free(ent);
				continue;
			}
			if (o->limit >= 0 && shown == (uint64_t)o->limit) {
				truncated = true;
				end = true;
				resp_reply_free(ent);
				break;
			}
			if (o->payload) {
				pr.with_payload = true;
				if (is_err(ent)) {
					rc = bad_reply("XRANGE", ent);
					resp_reply_free(ent);
					break;
				}
				pr.deleted = !is_list(ent) || ent->elements == 0;
				if (!pr.deleted && (!is_list(ent->element[0]) ||
							   ent->element[0]->elements != 2 ||
							   entry_fields(ent->element[0]->element[1],
								   &fv, &fvcap, &pr.nfv) != 0)) {
					rc = bad_reply("XRANGE", ent);
					resp_reply_free(ent);
					break;
				}
				pr.fv = fv;
			}
			if (adm_view_pending(v, &pr) != 0) {
				rc = adm_err(ADM_EXIT_FAILED, "out of memory");
			}
			shown++;
			resp_reply_free(ent);
		}
		if (rc == 0 && after.ms == UINT64_MAX && after.seq == UINT64_MAX) {
			end = true;
		}
		resp_reply_free(page);
	}
	adm_view_end(v, truncated);
	echd_free(fv);
	return rc;
}

/* ---- entry -------------------------------------------------------------- */

int
adm_live_entry(struct adm_ctx *x, const char *stream, const struct stream_id *id)
{
	struct adm_conn *c = x->conn;
	struct resp_reply *range = NULL, *groups = NULL, **pend = NULL;
	struct st_buf *fv = NULL;
	size_t fvcap = 0, nfv = 0, ng = 0;
	bool exists, held = false;
	struct adm_view *v = NULL;
	char idbuf[48];
	int rc;

	cmd_begin(c, 4);
	cmd_str(c, "XRANGE");
	cmd_str(c, stream);
	cmd_id(c, id, false);
	cmd_id(c, id, false);
	cmd_begin(c, 3);
	cmd_str(c, "XINFO");
	cmd_str(c, "GROUPS");
	cmd_str(c, stream);
	rc = call(x, &range);
	if (rc == 0) {
		rc = next_reply(x, &groups);
	}
	if (rc != 0) {
		goto out;
	}
	if (is_err(groups)) {
		rc = server_err(groups, stream, NULL, "XINFO GROUPS");
		goto out;
	}
	if (is_err(range) || !is_list(range) || !is_list(groups)) {
		rc = bad_reply("XRANGE", is_err(range) ? range : groups);
		goto out;
	}
	exists = range->elements == 1;
	if (exists &&
		(!is_list(range->element[0]) || range->element[0]->elements != 2 ||
			entry_fields(range->element[0]->element[1], &fv, &fvcap, &nfv) != 0)) {
		rc = bad_reply("XRANGE", range);
		goto out;
	}
	ng = groups->elements;
	pend = echd_calloc(ng ? ng : 1, sizeof(*pend));
	if (pend == NULL) {
		rc = adm_err(ADM_EXIT_FAILED, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < ng; i++) {
		struct st_buf name = rep_buf(field(groups->element[i], "name"));
		cmd_begin(c, 6);
		cmd_str(c, "XPENDING");
		cmd_str(c, stream);
		cmd_arg(c, name.data, name.len);
		cmd_id(c, id, false);
		cmd_id(c, id, false);
		cmd_str(c, "1");
	}
	rc = conn_flush(c);
	if (rc != 0) {
		rc = io_fail(x, rc);
		goto out;
	}
	for (size_t i = 0; i < ng; i++) {
		rc = next_reply(x, &pend[i]);
		if (rc != 0) {
			goto out;
		}
		held = held || (is_list(pend[i]) && pend[i]->elements == 1);
	}
	if (!exists && !held) {
		rc = adm_err(ADM_EXIT_NOTFOUND, "no entry %s in stream '%s'", adm_fmt_id(idbuf, id),
			stream);
		goto out;
	}
	v = adm_view_entry_begin(x, stream, id, exists, fv, nfv);
	for (size_t i = 0; v != NULL && i < ng; i++) {
		const struct resp_reply *g = groups->element[i];
		struct adm_entry_group eg;
		struct stream_id last;

		memset(&eg, 0, sizeof(eg));
		eg.name = rep_buf(field(g, "name"));
		eg.delivered = rep_id(field(g, "last-delivered-id"), &last) &&
			       stream_id_cmp(id, &last) <= 0;
		if (is_list(pend[i]) && pend[i]->elements == 1 && is_list(pend[i]->element[0]) &&
			pend[i]->element[0]->elements == 4) {
			const struct resp_reply *row = pend[i]->element[0];
			int64_t n = 0;
			eg.pending = true;
			eg.consumer = rep_buf(row->element[1]);
			rep_int(row->element[2], &eg.idle_ms);
			rep_int(row->element[3], &n);
			eg.deliveries = (uint64_t)n;
		}
		if (adm_view_entry_group(v, &eg) != 0) {
			rc = adm_err(ADM_EXIT_FAILED, "out of memory");
			break;
		}
	}
	if (v == NULL) {
		rc = ADM_EXIT_FAILED;
	}
	adm_view_end(v, false);
out:
	for (size_t i = 0; pend != NULL && i < ng; i++) {
		resp_reply_free(pend[i]);
	}
	echd_free(pend);
	echd_free(fv);
	resp_reply_free(range);
	resp_reply_free(groups);
	return rc;
}

/* ---- actions ------------------------------------------------------------ */

/* Exit status 1 unless the stream has the group (XACK and XCLAIM answer 0
 * or nothing for a missing one). */
static int
need_group(struct adm_ctx *x, const char *stream, const char *group)
{
	struct resp_reply *r = NULL;
	int rc = xinfo_consumers(x, stream, group, &r);

	resp_reply_free(r);
	return rc;
}

static bool
valid_ids(int n, char **ids)
{
	for (int i = 0; i < n; i++) {
		struct stream_id id;
		if (stream_id_parse(ids[i], strlen(ids[i]), 0, false, &id) != 0) {
			adm_err(ADM_EXIT_USAGE, "'%s' is not a stream id (ms-seq)", ids[i]);
			return false;
		}
	}
	return true;
}

static void
json_action_header(const char *action, const char *stream, const char *group)
{
	adm_json_obj();
	adm_json_key("action");
	adm_json_cstr(action);
	adm_json_key("stream");
	adm_json_cstr(stream);
	if (group != NULL) {
		adm_json_key("group");
		adm_json_cstr(group);
	}
}

int
adm_live_ack(struct adm_ctx *x, const char *stream, const char *group, int nids, char **ids)
{
	struct adm_conn *c = x->conn;
	struct resp_reply *r = NULL;
	int rc;

	if (!valid_ids(nids, ids)) {
		return ADM_EXIT_USAGE;
	}
	rc = need_group(x, stream, group);
	if (rc != 0) {
		return rc;
	}
	cmd_begin(c, 3 + (size_t)nids);
	cmd_str(c, "XACK");
	cmd_str(c, stream);
	cmd_str(c, group);
	for (int i = 0; i < nids; i++) {
		cmd_str(c, ids[i]);
	}
	rc = call(x, &r);
	if (rc != 0) {
		return rc;
	}
	if (r->type != RESP_REPLY_INTEGER) {
		rc = server_err(r, stream, group, "XACK");
	} else if (adm_out.json) {
		json_action_header("ack", stream, group);
		adm_json_key("requested");
		adm_json_int(nids);
		adm_json_key("acked");
		adm_json_int(r->integer);
		adm_json_obj_end();
		adm_json_done();
	} else {
		printf("acknowledged %lld of %d in group '%s'\n", r->integer, nids, group);
	}
	resp_reply_free(r);
	return rc;
}

static void
print_ids(const char *what, const struct resp_reply *list)
{
	size_t n = list != NULL && is_list(list) ? list->elements : 0;

	if (adm_out.json) {
		adm_json_key(what);
		adm_json_arr();
		for (size_t i = 0; i < n; i++) {
			struct st_buf b = rep_buf(list->element[i]);
			adm_json_str(b.data, b.len);
		}
		adm_json_arr_end();
		return;
	}
	printf("%s %zu", what, n);
	for (size_t i = 0; i < n && i < 20; i++) {
		struct st_buf b = rep_buf(list->element[i]);
		printf("%s%.*s", i == 0 ? ": " : " ", (int)b.len, (const char *)b.data);
	}
	printf("%s\n", n > 20 ? " ..." : "");
}

/* By ids: XCLAIM ... JUSTID (moves ownership, keeps delivery counts). By
 * idleness: one XAUTOCLAIM of up to --limit (default 100) entries. */
int
adm_live_claim(struct adm_ctx *x, const char *stream, const char *group, int nids, char **ids)
{
	const struct adm_opts *o = x->o;
	struct adm_conn *c = x->conn;
	uint64_t minidle = o->min_idle > 0 ? (uint64_t)o->min_idle : 0;
	struct resp_reply *r = NULL;
	int rc;

	if (!valid_ids(nids, ids)) {
		return ADM_EXIT_USAGE;
	}
	rc = need_group(x, stream, group);
	if (rc != 0) {
		return rc;
	}
	if (nids > 0) {
		cmd_begin(c, 6 + (size_t)nids);
		cmd_str(c, "XCLAIM");
		cmd_str(c, stream);
		cmd_str(c, group);
		cmd_str(c, o->to);
		cmd_u64(c, minidle);
		for (int i = 0; i < nids; i++) {
			cmd_str(c, ids[i]);
		}
		cmd_str(c, "JUSTID");
	} else {
		cmd_begin(c, 9);
		cmd_str(c, "XAUTOCLAIM");
		cmd_str(c, stream);
		cmd_str(c, group);
		cmd_str(c, o->to);
		cmd_u64(c, minidle);
		cmd_str(c, "0-0");
		cmd_str(c, "COUNT");
		cmd_u64(c, o->limit > 0 ? (uint64_t)o->limit : 100);
		cmd_str(c, "JUSTID");
	}
	rc = call(x, &r);
	if (rc != 0) {
		return rc;
	}
	if (is_err(r) || !is_list(r) || (nids == 0 && r->elements < 2)) {
		rc = is_err(r) ? server_err(r, stream, group, nids ? "XCLAIM" : "XAUTOCLAIM")
			       : bad_reply("XAUTOCLAIM", r);
		resp_reply_free(r);
		return rc;
	}
	if (adm_out.json) {
		json_action_header("claim", stream, group);
		adm_json_key("consumer");
		adm_json_cstr(o->to);
	} else {
		printf("to consumer '%s': ", o->to);
	}
	if (nids > 0) {
		print_ids("claimed", r);
	} else {
		struct st_buf next = rep_buf(r->element[0]);
		print_ids("claimed", r->element[1]);
		if (r->elements > 2) {
			if (!adm_out.json) {
				printf("  ");
			}
			print_ids("deleted", r->element[2]);
		}
		if (adm_out.json) {
			adm_json_key("next");
			adm_json_str(next.data, next.len);
		} else if (!(next.len == 3 && memcmp(next.data, "0-0", 3) == 0)) {
			printf("  more may be idle enough: the scan stopped at %.*s (--limit)\n",
				(int)next.len, (const char *)next.data);
		}
	}
	if (adm_out.json) {
		adm_json_obj_end();
		adm_json_done();
	}
	resp_reply_free(r);
	return 0;
}

int
adm_live_delconsumer(struct adm_ctx *x, const char *stream, const char *group, const char *consumer)
{
	struct adm_conn *c = x->conn;
	struct resp_reply *r = NULL;
	int rc = xinfo_consumers(x, stream, group, &r);

	if (rc != 0) {
		return rc;
	}
	if (find_consumer(r, consumer) == NULL) {
		resp_reply_free(r);
		return adm_err(
			ADM_EXIT_NOTFOUND, "no consumer '%s' in group '%s'", consumer, group);
	}
	resp_reply_free(r);
	r = NULL;
	cmd_begin(c, 5);
	cmd_str(c, "XGROUP");
	cmd_str(c, "DELCONSUMER");
	cmd_str(c, stream);
	cmd_str(c, group);
	cmd_str(c, consumer);
	rc = call(x, &r);
	if (rc != 0) {
		return rc;
	}
	if (r->type != RESP_REPLY_INTEGER) {
		rc = server_err(r, stream, group, "XGROUP DELCONSUMER");
	} else if (adm_out.json) {
		json_action_header("delconsumer", stream, group);
		adm_json_key("consumer");
		adm_json_cstr(consumer);
		adm_json_key("pending_dropped");
		adm_json_int(r->integer);
		adm_json_obj_end();
		adm_json_done();
	} else {
		printf("deleted consumer '%s' of group '%s'; %lld pending entr%s dropped\n",
			consumer, group, r->integer, r->integer == 1 ? "y" : "ies");
	}
	resp_reply_free(r);
	return rc;
}

int
adm_live_setid(struct adm_ctx *x, const char *stream, const char *group, const char *id)
{
	const struct adm_opts *o = x->o;
	struct adm_conn *c = x->conn;
	struct resp_reply *r = NULL;
	int rc;

	cmd_begin(c, o->entries_read >= -1 ? 7 : 5);
	cmd_str(c, "XGROUP");
	cmd_str(c, "SETID");
	cmd_str(c, stream);
	cmd_str(c, group);
	cmd_str(c, id);
	if (o->entries_read >= -1) {
		char buf[24];
		snprintf(buf, sizeof(buf), "%lld", (long long)o->entries_read);
		cmd_str(c, "ENTRIESREAD");
		cmd_str(c, buf);
	}
	rc = call(x, &r);
	if (rc != 0) {
		return rc;
	}
	if (is_err(r)) {
		rc = server_err(r, stream, group, "XGROUP SETID");
	} else if (adm_out.json) {
		json_action_header("setid", stream, group);
		adm_json_key("last_delivered_id");
		adm_json_cstr(id);
		adm_json_obj_end();
		adm_json_done();
	} else {
		printf("group '%s' of '%s': last-delivered-id set to %s\n", group, stream, id);
	}
	resp_reply_free(r);
	return rc;
}

int
adm_live_trim(struct adm_ctx *x, const char *stream)
{
	const struct adm_opts *o = x->o;
	struct adm_conn *c = x->conn;
	struct resp_reply *r = NULL;
	size_t argc = 4 + (o->approx ? 1 : 0) + (o->limit >= 0 ? 2 : 0);
	int rc;

	cmd_begin(c, 2);
	cmd_str(c, "EXISTS");
	cmd_str(c, stream);
	rc = call(x, &r);
	if (rc != 0) {
		return rc;
	}
	if (r->type != RESP_REPLY_INTEGER || r->integer != 1) {
		rc = r->type == RESP_REPLY_INTEGER
			     ? adm_err(ADM_EXIT_NOTFOUND, "no stream '%s'", stream)
			     : bad_reply("EXISTS", r);
		resp_reply_free(r);
		return rc;
	}
	resp_reply_free(r);
	r = NULL;
	cmd_begin(c, argc);
	cmd_str(c, "XTRIM");
	cmd_str(c, stream);
	cmd_str(c, o->minid != NULL ? "MINID" : "MAXLEN");
	if (o->approx) {
		cmd_str(c, "~");
	}
	if (o->minid != NULL) {
		cmd_str(c, o->minid);
	} else {
		cmd_u64(c, (uint64_t)o->maxlen);
	}
	if (o->limit >= 0) {
		cmd_str(c, "LIMIT");
		cmd_u64(c, (uint64_t)o->limit);
	}
	rc = call(x, &r);
	if (rc != 0) {
		return rc;
	}
	if (r->type != RESP_REPLY_INTEGER) {
		rc = server_err(r, stream, NULL, "XTRIM");
	} else if (adm_out.json) {
		json_action_header("trim", stream, NULL);
		adm_json_key("removed");
		adm_json_int(r->integer);
		adm_json_obj_end();
		adm_json_done();
	} else {
		char buf[40];
		printf("removed %s entr%s from '%s'\n", adm_fmt_count(buf, (uint64_t)r->integer),
			r->integer == 1 ? "y" : "ies", stream);
	}
	resp_reply_free(r);
	return rc;
}

/* ---- stats ---------------------------------------------------------------- */

/* The value of "key:" in INFO text, copied into buf ("" when missing). */
static const char *
info_get(const struct resp_reply *info, const char *key, char *buf, size_t cap)
{
	size_t kl = strlen(key);
	const char *p = info->str, *end = info->str + info->len;

	buf[0] = '\0';
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *le = nl != NULL ? nl : end;
		size_t l = (size_t)(le - p);
		if (l > 0 && p[l - 1] == '\r') {
			l--;
		}
		if (l > kl && memcmp(p, key, kl) == 0 && p[kl] == ':') {
			size_t vl = l - kl - 1 < cap - 1 ? l - kl - 1 : cap - 1;
			memcpy(buf, p + kl + 1, vl);
			buf[vl] = '\0';
			return buf;
		}
		p = le + 1;
	}
	return buf;
}

/* "p50=901.119,p99=5799.935" (microseconds) as "p50 0.90 ms, p99 5.80 ms". */
static const char *
fmt_pcts(const char *line, char *buf, size_t cap)
{
	size_t n = 0;

	buf[0] = '\0';
	while (*line != '\0' && n < cap) {
		const char *eq = strchr(line, '='), *comma = strchr(line, ',');
		size_t len = comma != NULL ? (size_t)(comma - line) : strlen(line);
		if (eq == NULL || (comma != NULL && eq > comma)) {
			break;
		}
		n += (size_t)snprintf(buf + n, cap - n, "%s%.*s %.2f ms", n ? ", " : "",
			(int)(eq - line), line, strtod(eq + 1, NULL) / 1000.0);
		line += len + (comma != NULL);
	}
	return buf;
}

static uint64_t
info_u64(const struct resp_reply *info, const char *key)
{
	char buf[64];
	uint64_t v = 0;

	adm_parse_u64(info_get(info, key, buf, sizeof(buf)), &v);
	return v;
}

int
adm_live_stats(struct adm_ctx *x)
{
	static const char *const raw[] = {
		"redis_version",
		"echd_version",
		"process_id",
		"tcp_port",
		"uptime_in_seconds",
		"connected_clients",
		"blocked_clients",
		"maxclients",
		"total_connections_received",
		"total_commands_processed",
		"instantaneous_ops_per_sec",
		"total_error_replies",
		"rejected_connections",
		"commits",
		"commit_failures",
		"fsyncs",
		"avg_batch_size",
		"appendfsync",
		"map_grows",
		"used_memory",
		"used_memory_rss",
		"lmdb_map_size",
		"lmdb_used_bytes",
		"lmdb_page_size",
		"maxdisk",
		"storage_backend",
	};
	/* how long commits and their flushes took: what every reply waits for */
	static const char *const pcts[] = {
		"commit_latency_percentiles_usec",
		"flush_latency_percentiles_usec",
	};
	struct adm_conn *c = x->conn;
	struct resp_reply *r = NULL;
	struct adm_view *v;
	char a[64], b[64], d[64], line[256], pl[1024];
	int rc;

	cmd_begin(c, 1);
	cmd_str(c, "INFO");
	rc = call(x, &r);
	if (rc != 0) {
		return rc;
	}
	if (!is_text(r)) {
		rc = bad_reply("INFO", r);
		resp_reply_free(r);
		return rc;
	}
	v = adm_view_stats_begin(x);
	if (v == NULL) {
		resp_reply_free(r);
		return ADM_EXIT_FAILED;
	}
	if (adm_out.json) {
		for (size_t i = 0; i < sizeof(raw) / sizeof(raw[0]); i++) {
			info_get(r, raw[i], a, sizeof(a));
			if (a[0] != '\0') {
				adm_view_stat(v, raw[i], NULL, NULL, a, true);
			}
		}
		for (size_t i = 0; i < sizeof(pcts) / sizeof(pcts[0]); i++) {
			info_get(r, pcts[i], pl, sizeof(pl));
			if (pl[0] != '\0') {
				adm_view_stat(v, pcts[i], NULL, NULL, pl, false);
			}
		}
	} else {
		char e[64], f[64];
		uint64_t map = info_u64(r, "lmdb_map_size"), used = info_u64(r, "lmdb_used_bytes");

		info_get(r, "echd_version", a, sizeof(a));
		info_get(r, "redis_version", b, sizeof(b));
		snprintf(line, sizeof(line), "echd %s (redis %s), pid %s", a[0] ? a : "?", b,
			info_get(r, "process_id", d, sizeof(d)));
		adm_view_stat(v, NULL, "server", line, NULL, false);
		adm_view_stat(v, NULL, "uptime",
			adm_fmt_duration(a, (int64_t)info_u64(r, "uptime_in_seconds") * 1000), NULL,
			false);
		snprintf(line, sizeof(line), "%s connected, %s blocked, %s max",
			adm_fmt_count(a, info_u64(r, "connected_clients")),
			adm_fmt_count(b, info_u64(r, "blocked_clients")),
			adm_fmt_count(d, info_u64(r, "maxclients")));
		adm_view_stat(v, NULL, "clients", line, NULL, false);
		snprintf(line, sizeof(line), "%s processed, %s/s now, %s error replies",
			adm_fmt_count(a, info_u64(r, "total_commands_processed")),
			adm_fmt_count(b, info_u64(r, "instantaneous_ops_per_sec")),
			adm_fmt_count(d, info_u64(r, "total_error_replies")));
		adm_view_stat(v, NULL, "commands", line, NULL, false);
		snprintf(line, sizeof(line), "%s (%s failed), avg batch %s, fsyncs %s",
			adm_fmt_count(a, info_u64(r, "commits")),
			adm_fmt_count(b, info_u64(r, "commit_failures")),
			info_get(r, "avg_batch_size", d, sizeof(d)),
			adm_fmt_count(e, info_u64(r, "fsyncs")));
		adm_view_stat(v, NULL, "commits", line, NULL, false);
		snprintf(line, sizeof(line), "appendfsync %s",
			info_get(r, "appendfsync", a, sizeof(a)));
		adm_view_stat(v, NULL, "durability", line, NULL, false);
		for (size_t i = 0; i < sizeof(pcts) / sizeof(pcts[0]); i++) {
			char h[512];
			if (info_get(r, pcts[i], pl, sizeof(pl))[0] != '\0') {
				adm_view_stat(v, NULL, i == 0 ? "commit time" : "flush time",
					fmt_pcts(pl, h, sizeof(h)), NULL, false);
			}
		}
		snprintf(line, sizeof(line), "%s used of a %s map (%.0f%%), page %s",
			adm_fmt_bytes(a, used), adm_fmt_bytes(b, map),
			map ? 100.0 * (double)used / (double)map : 0.0,
			adm_fmt_bytes(d, info_u64(r, "lmdb_page_size")));
		adm_view_stat(v, NULL, "storage", line, NULL, false);
		snprintf(line, sizeof(line), "%s used, %s resident",
			adm_fmt_bytes(a, info_u64(r, "used_memory")),
			adm_fmt_bytes(f, info_u64(r, "used_memory_rss")));
		adm_view_stat(v, NULL, "memory", line, NULL, false);
	}
	/* "db0:keys=3,expires=0,avg_ttl=0" lines */
	{
		const char *p = r->str, *end = r->str + r->len;
		if (adm_out.json) {
			adm_json_key("keyspace");
			adm_json_obj();
		}
		while (p < end) {
			const char *nl = memchr(p, '\n', (size_t)(end - p));
			const char *le = nl != NULL ? nl : end;
			unsigned db;
			unsigned long long keys;
			if (sscanf(p, "db%u:keys=%llu", &db, &keys) == 2) {
				if (adm_out.json) {
					snprintf(line, sizeof(line), "db%u", db);
					adm_json_key(line);
					adm_json_uint(keys);
				} else {
					snprintf(a, sizeof(a), "keys db%u", db);
					adm_view_stat(
						v, NULL, a, adm_fmt_count(b, keys), NULL, false);
				}
			}
			p = le + 1;
		}
		if (adm_out.json) {
			adm_json_obj_end();
		}
	}
	adm_view_end(v, false);
	resp_reply_free(r);
	return 0;
}

/* ---- the data directory ------------------------------------------------------ */

/* Whether the server runs on this machine, so that its pid means a process here. */
static bool
server_is_local(const struct adm_opts *o)
{
	return o->unixsocket != NULL || strcmp(o->host, "localhost") == 0 ||
	       strncmp(o->host, "127.", 4) == 0 || strcmp(o->host, "::1") == 0;
}

int
adm_live_data_dir(struct adm_ctx *x, char **out)
{
	struct adm_conn *c = x->conn;
	struct resp_reply *r = NULL, *info = NULL;
	const struct resp_reply *val = NULL;
	char path[PATH_MAX], pid[32];
	struct stat sb;
	int rc;

	cmd_begin(c, 3);
	cmd_str(c, "CONFIG");
	cmd_str(c, "GET");
	cmd_str(c, "dir");
	cmd_begin(c, 2);
	cmd_str(c, "INFO");
	cmd_str(c, "server");
	rc = call(x, &r);
	if (rc == 0) {
		rc = next_reply(x, &info);
	}
	if (rc != 0) {
		goto out;
	}
	val = field(r, "dir");
	if (val == NULL || !is_text(val) || val->len == 0 || val->len >= PATH_MAX / 2) {
		rc = adm_err(ADM_EXIT_FAILED, "CONFIG GET dir gave no directory: give --data-dir");
		goto out;
	}
	if (val->str[0] == '/') {
		snprintf(path, sizeof(path), "%s", val->str);
	} else {
		/* relative to the server's working directory: only readable when
		 * the server runs on this machine */
		char link[64], cwd[PATH_MAX / 2];
		ssize_t n;
		if (!server_is_local(x->o) || !is_text(info) ||
			info_get(info, "process_id", pid, sizeof(pid))[0] == '\0') {
			rc = adm_err(ADM_EXIT_FAILED,
				"the server's dir '%s' is relative: give --data-dir", val->str);
			goto out;
		}
		snprintf(link, sizeof(link), "/proc/%s/cwd", pid);
		n = readlink(link, cwd, sizeof(cwd) - 1);
		if (n < 0) {
			rc = adm_err(ADM_EXIT_FAILED,
				"the server's dir '%s' is relative and its working directory "
				"unknown "
				"(%s): give --data-dir",
				val->str, strerror(errno));
			goto out;
		}
		cwd[n] = '\0';
		snprintf(path, sizeof(path), "%s/%s", cwd, val->str);
	}
	if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
		rc = adm_err(ADM_EXIT_CONNECT,
			"the server's data directory %s is not reachable from here: give "
			"--data-dir",
			path);
		goto out;
	}
	*out = echd_strndup(path, strlen(path));
	if (*out == NULL) {
		rc = adm_err(ADM_EXIT_FAILED, "out of memory");
	}
out:
	resp_reply_free(r);
	resp_reply_free(info);
	return rc;
}
