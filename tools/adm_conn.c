/* adm_conn.c - echo-admin's connection to a live echd: a blocking client on
 * one socket. It owns the socket, TLS, the handshake, encoding requests and
 * reading replies; the views and actions over it are in adm_live.c.
 *
 * Requests are encoded straight into a resp_buf; replies are parsed with
 * proto/'s reply parser. The handshake asks for RESP3 (HELLO 3, with AUTH
 * when a password is given) and falls back to RESP2 and AUTH for servers
 * without HELLO; the readers below accept either shape (a map, or a flat
 * array of pairs).
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

#include "adm_conn.h"
#include "echd.h"

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

void
adm_req_begin(struct adm_conn *c, size_t argc)
{
	char hdr[32];
	int n = snprintf(hdr, sizeof(hdr), "*%zu\r\n", argc);

	resp_buf_append(&c->out, hdr, (size_t)n);
}

void
adm_req_arg(struct adm_conn *c, const void *p, size_t len)
{
	char hdr[32];
	int n = snprintf(hdr, sizeof(hdr), "$%zu\r\n", len);

	resp_buf_append(&c->out, hdr, (size_t)n);
	resp_buf_append(&c->out, p, len);
	resp_buf_append(&c->out, "\r\n", 2);
}

void
adm_req_str(struct adm_conn *c, const char *s)
{
	adm_req_arg(c, s, strlen(s));
}

void
adm_req_u64(struct adm_conn *c, uint64_t v)
{
	char buf[24];
	int n = snprintf(buf, sizeof(buf), "%llu", (unsigned long long)v);

	adm_req_arg(c, buf, (size_t)n);
}

void
adm_req_id(struct adm_conn *c, const struct stream_id *id, bool exclusive)
{
	char buf[48];
	size_t n;

	buf[0] = '(';
	n = stream_id_format(id, buf + 1);
	adm_req_arg(c, exclusive ? buf : buf + 1, exclusive ? n + 1 : n);
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

/* Sends what is queued. Returns an ADM_EXIT_ code. */
int
adm_send(struct adm_ctx *x)
{
	int rc = conn_flush(x->conn);

	return rc == 0 ? ADM_EXIT_OK : io_fail(x, rc);
}

/* Sends what is queued and reads one reply. Returns an ADM_EXIT_ code. */
int
adm_call(struct adm_ctx *x, struct resp_reply **out)
{
	int rc = conn_flush(x->conn);

	if (rc == 0) {
		rc = conn_read(x->conn, out);
	}
	return rc == 0 ? ADM_EXIT_OK : io_fail(x, rc);
}

/* Reads the next reply of a pipeline. */
int
adm_next_reply(struct adm_ctx *x, struct resp_reply **out)
{
	int rc = conn_read(x->conn, out);

	return rc == 0 ? ADM_EXIT_OK : io_fail(x, rc);
}

/* ---- reading replies ---------------------------------------------------- */

bool
adm_rep_is_err(const struct resp_reply *r)
{
	return r->type == RESP_REPLY_ERROR;
}

bool
adm_rep_err_starts(const struct resp_reply *r, const char *prefix)
{
	return adm_rep_is_err(r) && strncmp(r->str, prefix, strlen(prefix)) == 0;
}

bool
adm_rep_is_text(const struct resp_reply *r)
{
	return r->type == RESP_REPLY_BULK || r->type == RESP_REPLY_STRING ||
	       r->type == RESP_REPLY_VERBATIM;
}

bool
adm_rep_is_list(const struct resp_reply *r)
{
	return r->type == RESP_REPLY_ARRAY || r->type == RESP_REPLY_SET ||
	       r->type == RESP_REPLY_MAP;
}

/* The value under name in a RESP3 map or a RESP2 array of pairs. */
const struct resp_reply *
adm_rep_field(const struct resp_reply *r, const char *name)
{
	size_t n = strlen(name);

	if (!adm_rep_is_list(r)) {
		return NULL;
	}
	for (size_t i = 0; i + 1 < r->elements; i += 2) {
		const struct resp_reply *k = r->element[i];
		if (adm_rep_is_text(k) && k->len == n && memcmp(k->str, name, n) == 0) {
			return r->element[i + 1];
		}
	}
	return NULL;
}

bool
adm_rep_int(const struct resp_reply *r, int64_t *out)
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
	if (!adm_rep_is_text(r) || r->len == 0) {
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

bool
adm_rep_id(const struct resp_reply *r, struct stream_id *out)
{
	return r != NULL && adm_rep_is_text(r) &&
	       stream_id_parse(r->str, r->len, 0, false, out) == 0;
}

struct st_buf
adm_rep_buf(const struct resp_reply *r)
{
	struct st_buf b = {"", 0};

	if (r != NULL && adm_rep_is_text(r)) {
		b.data = r->str;
		b.len = r->len;
	}
	return b;
}

int
adm_bad_reply(const char *what, const struct resp_reply *r)
{
	if (r != NULL && adm_rep_is_err(r)) {
		return adm_err(ADM_EXIT_FAILED, "%s: %s", what, r->str);
	}
	return adm_err(ADM_EXIT_FAILED, "%s: unexpected reply (%s)", what,
		r != NULL ? resp_reply_type_name(r->type) : "missing");
}

/* Maps the server's "no such ..." errors to exit status 1. */
int
adm_server_err(const struct resp_reply *r, const char *stream, const char *group, const char *what)
{
	if (adm_rep_err_starts(r, "NOGROUP") ||
		adm_rep_err_starts(r, "ERR The XGROUP subcommand requires")) {
		return adm_err(ADM_EXIT_NOTFOUND, "no stream '%s' or no group '%s' in it", stream,
			group != NULL ? group : "");
	}
	if (adm_rep_err_starts(r, "ERR no such key")) {
		return adm_err(ADM_EXIT_NOTFOUND, "no stream '%s'", stream);
	}
	if (adm_rep_err_starts(r, "WRONGTYPE")) {
		return adm_err(ADM_EXIT_NOTFOUND, "'%s' is not a stream", stream);
	}
	if (adm_rep_err_starts(r, "ERR Invalid stream ID") || adm_rep_err_starts(r, "ERR syntax") ||
		adm_rep_err_starts(r, "ERR value")) {
		return adm_err(ADM_EXIT_USAGE, "%s: %s", what, r->str);
	}
	return adm_bad_reply(what, r);
}

/* Entry fields of an XRANGE-style [id, [f, v, ...]] into a buffer array. */
int
adm_rep_entry_fields(const struct resp_reply *fields, struct st_buf **fv, size_t *cap, size_t *nfv)
{
	*nfv = 0;
	if (fields == NULL || !adm_rep_is_list(fields)) {
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
		(*fv)[i] = adm_rep_buf(fields->element[i]);
	}
	*nfv = fields->elements;
	return 0;
}

/* ---- open --------------------------------------------------------------- */

static bool
handshake_unknown(const struct resp_reply *r)
{
	return adm_rep_err_starts(r, "NOPROTO") ||
	       (adm_rep_is_err(r) && strstr(r->str, "unknown command"));
}

static int
auth_failed(const struct adm_ctx *x, const struct resp_reply *r)
{
	if (adm_rep_err_starts(r, "NOAUTH")) {
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

	adm_req_begin(c, o->pass != NULL ? 5 : 2);
	adm_req_str(c, "HELLO");
	adm_req_str(c, "3");
	if (o->pass != NULL) {
		adm_req_str(c, "AUTH");
		adm_req_str(c, user);
		adm_req_str(c, o->pass);
	}
	rc = adm_call(x, &r);
	if (rc != 0) {
		return rc;
	}
	if (!adm_rep_is_err(r)) {
		c->proto = 3;
	} else if (handshake_unknown(r)) {
		/* no HELLO (or no RESP3): RESP2, and AUTH on its own */
		c->proto = 2;
		if (o->pass != NULL) {
			resp_reply_free(r);
			r = NULL;
			adm_req_begin(c, o->user != NULL ? 3 : 2);
			adm_req_str(c, "AUTH");
			if (o->user != NULL) {
				adm_req_str(c, o->user);
			}
			adm_req_str(c, o->pass);
			rc = adm_call(x, &r);
			if (rc != 0) {
				return rc;
			}
			if (adm_rep_is_err(r)) {
				rc = auth_failed(x, r);
			}
		}
	} else {
		rc = auth_failed(x, r);
	}
	resp_reply_free(r);
	r = NULL;
	if (rc == 0 && o->db != 0) {
		adm_req_begin(c, 2);
		adm_req_str(c, "SELECT");
		adm_req_u64(c, o->db);
		rc = adm_call(x, &r);
		if (rc == 0 && adm_rep_is_err(r)) {
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
