/* tls.c - TLS for client connections (OpenSSL through libevent's
 * bufferevent_openssl).
 *
 * One SSL_CTX serves new connections. Reloading (SIGHUP, CONFIG SET tls-*)
 * builds a new context from the files; only when that succeeds does it
 * replace the old one, so a bad certificate is refused with a logged
 * reason and the old one stays in use. Established connections keep the
 * context they started with (OpenSSL reference-counts it).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "broker.h"

static void
ssl_errstr(char *buf, size_t len)
{
	unsigned long e = ERR_get_error();

	if (e == 0) {
		snprintf(buf, len, "unknown error");
	} else {
		ERR_error_string_n(e, buf, len);
	}
	ERR_clear_error();
}

static int
pass_cb(char *buf, int size, int rwflag, void *ud)
{
	const char *pass = ud;
	int n;

	(void)rwflag;
	if (pass == NULL) {
		return 0;
	}
	n = (int)strlen(pass);
	if (n > size) {
		n = size;
	}
	memcpy(buf, pass, (size_t)n);
	return n;
}

/* Parses "TLSv1.2 TLSv1.3" into min/max versions. */
static int
protocols(const char *spec, int *min, int *max)
{
	char buf[128], *save = NULL;

	*min = *max = 0;
	if ((size_t)snprintf(buf, sizeof(buf), "%s", spec && spec[0] ? spec : "TLSv1.2 TLSv1.3") >=
		sizeof(buf)) {
		return -1; /* no list of versions is that long: refuse, do not cut it */
	}
	for (char *p = strtok_r(buf, " ,", &save); p; p = strtok_r(NULL, " ,", &save)) {
		int v;
		if (!strcasecmp(p, "TLSv1")) {
			v = TLS1_VERSION;
		} else if (!strcasecmp(p, "TLSv1.1")) {
			v = TLS1_1_VERSION;
		} else if (!strcasecmp(p, "TLSv1.2")) {
			v = TLS1_2_VERSION;
		} else if (!strcasecmp(p, "TLSv1.3")) {
			v = TLS1_3_VERSION;
		} else {
			return -1;
		}
		if (*min == 0 || v < *min) {
			*min = v;
		}
		if (v > *max) {
			*max = v;
		}
	}
	return *min == 0 ? -1 : 0;
}

/* Builds a context from the configured files. Returns it, or NULL with
 * a message naming what failed. */
static SSL_CTX *
ctx_build(const struct brk_config *cfg, char *err, size_t errlen)
{
	char e[256];
	SSL_CTX *ctx;
	int min, max, verify;

	if (!cfg->tls_cert_file || !cfg->tls_cert_file[0] || !cfg->tls_key_file ||
		!cfg->tls_key_file[0]) {
		snprintf(err, errlen, "tls-cert-file and tls-key-file must be set for tls-port and http-tls");
		return NULL;
	}
	ctx = SSL_CTX_new(TLS_server_method());
	if (ctx == NULL) {
		ssl_errstr(e, sizeof(e));
		snprintf(err, errlen, "cannot create a TLS context: %s", e);
		return NULL;
	}
	if (protocols(cfg->tls_protocols, &min, &max) != 0) {
		snprintf(err, errlen, "tls-protocols: expected TLSv1.2 and/or TLSv1.3, got '%s'",
			cfg->tls_protocols);
		goto fail;
	}
	SSL_CTX_set_min_proto_version(ctx, min);
	SSL_CTX_set_max_proto_version(ctx, max);
	SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
	if (cfg->tls_prefer_server_ciphers) {
		SSL_CTX_set_options(ctx, SSL_OP_CIPHER_SERVER_PREFERENCE);
	}
	SSL_CTX_set_session_cache_mode(ctx,
		cfg->tls_session_caching ? SSL_SESS_CACHE_SERVER : SSL_SESS_CACHE_OFF);
	SSL_CTX_set_session_id_context(ctx, (const unsigned char *)"echd", 4);
	SSL_CTX_set_default_passwd_cb(ctx, pass_cb);
	SSL_CTX_set_default_passwd_cb_userdata(ctx, cfg->tls_key_file_pass);
	if (SSL_CTX_use_certificate_chain_file(ctx, cfg->tls_cert_file) != 1) {
		ssl_errstr(e, sizeof(e));
		snprintf(err, errlen, "cannot load tls-cert-file '%s': %s", cfg->tls_cert_file, e);
		goto fail;
	}
	if (SSL_CTX_use_PrivateKey_file(ctx, cfg->tls_key_file, SSL_FILETYPE_PEM) != 1) {
		/* OpenSSL already compares the key with the certificate here */
		bool mismatch = ERR_GET_REASON(ERR_peek_last_error()) == X509_R_KEY_VALUES_MISMATCH;
		ssl_errstr(e, sizeof(e));
		if (mismatch) {
			snprintf(err, errlen, "tls-key-file '%s' does not match tls-cert-file '%s': %s",
				cfg->tls_key_file, cfg->tls_cert_file, e);
		} else {
			snprintf(err, errlen, "cannot load tls-key-file '%s': %s", cfg->tls_key_file, e);
		}
		goto fail;
	}
	if (SSL_CTX_check_private_key(ctx) != 1) {
		ssl_errstr(e, sizeof(e));
		snprintf(err, errlen, "tls-key-file '%s' does not match tls-cert-file '%s': %s",
			cfg->tls_key_file, cfg->tls_cert_file, e);
		goto fail;
	}
	if ((cfg->tls_ca_cert_file && cfg->tls_ca_cert_file[0]) ||
		(cfg->tls_ca_cert_dir && cfg->tls_ca_cert_dir[0])) {
		const char *file = cfg->tls_ca_cert_file && cfg->tls_ca_cert_file[0]
			? cfg->tls_ca_cert_file : NULL;
		const char *dir = cfg->tls_ca_cert_dir && cfg->tls_ca_cert_dir[0]
			? cfg->tls_ca_cert_dir : NULL;
		if (SSL_CTX_load_verify_locations(ctx, file, dir) != 1) {
			ssl_errstr(e, sizeof(e));
			snprintf(err, errlen, "cannot load tls-ca-cert-%s '%s': %s",
				file ? "file" : "dir", file ? file : dir, e);
			goto fail;
		}
	} else if (cfg->tls_auth_clients != BRK_TLS_AUTH_NO) {
		snprintf(err, errlen, "tls-auth-clients needs tls-ca-cert-file or tls-ca-cert-dir");
		goto fail;
	}
	if (cfg->tls_ciphers && cfg->tls_ciphers[0] &&
		SSL_CTX_set_cipher_list(ctx, cfg->tls_ciphers) != 1) {
		snprintf(err, errlen, "tls-ciphers: no cipher in '%s' is usable", cfg->tls_ciphers);
		goto fail;
	}
	if (cfg->tls_ciphersuites && cfg->tls_ciphersuites[0] &&
		SSL_CTX_set_ciphersuites(ctx, cfg->tls_ciphersuites) != 1) {
		snprintf(err, errlen, "tls-ciphersuites: no suite in '%s' is usable",
			cfg->tls_ciphersuites);
		goto fail;
	}
	switch (cfg->tls_auth_clients) {
	case BRK_TLS_AUTH_YES:
		verify = SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
		break;
	case BRK_TLS_AUTH_OPTIONAL:
		verify = SSL_VERIFY_PEER;
		break;
	default:
		verify = SSL_VERIFY_NONE;
		break;
	}
	SSL_CTX_set_verify(ctx, verify, NULL);
	return ctx;
fail:
	SSL_CTX_free(ctx);
	return NULL;
}

/* Formats t as "2026-01-31 12:00:00 UTC". */
static void
asn1_time_str(const ASN1_TIME *t, char *buf, size_t len)
{
	struct tm tm;

	if (ASN1_TIME_to_tm(t, &tm) != 1 || strftime(buf, len, "%Y-%m-%d %H:%M:%S UTC", &tm) == 0) {
		snprintf(buf, len, "an unreadable date");
	}
}

/* OpenSSL loads a certificate outside its validity period without a word,
 * and clients then refuse it: say so (the server's own and the chain's). */
static void
warn_validity(SSL_CTX *ctx, const char *file)
{
	STACK_OF(X509) *chain = NULL;
	int n;

	SSL_CTX_get0_chain_certs(ctx, &chain);
	n = chain ? sk_X509_num(chain) : 0;
	for (int i = -1; i < n; i++) {
		X509 *cert = i < 0 ? SSL_CTX_get0_certificate(ctx) : sk_X509_value(chain, i);
		char subject[256], when[64];
		const char *what;
		const ASN1_TIME *t;

		if (cert == NULL) {
			continue;
		}
		if (X509_cmp_current_time(X509_get0_notAfter(cert)) < 0) {
			what = "has expired: not valid after";
			t = X509_get0_notAfter(cert);
		} else if (X509_cmp_current_time(X509_get0_notBefore(cert)) > 0) {
			what = "is not valid yet: not before";
			t = X509_get0_notBefore(cert);
		} else {
			continue;
		}
		X509_NAME_oneline(X509_get_subject_name(cert), subject, sizeof(subject));
		asn1_time_str(t, when, sizeof(when));
		echd_log(ECHD_LOG_WARNING,
			"TLS: the certificate %s in tls-cert-file '%s' %s %s; clients that check it "
			"will refuse to connect",
			subject, file, what, when);
	}
}

int
brk_tls_init(struct brk_server *srv)
{
	char err[512];

	if (srv->cfg.tls_port == 0 && !srv->cfg.http_tls) {
		return 0;
	}
	srv->tls_ctx = ctx_build(&srv->cfg, err, sizeof(err));
	if (srv->tls_ctx == NULL) {
		echd_log(ECHD_LOG_WARNING, "TLS: %s", err);
		return -1;
	}
	warn_validity(srv->tls_ctx, srv->cfg.tls_cert_file);
	return 0;
}

int
brk_tls_reload(struct brk_server *srv, char *err, size_t errlen)
{
	SSL_CTX *ctx;

	if (srv->cfg.tls_port == 0 && !srv->cfg.http_tls) {
		return 0;
	}
	ctx = ctx_build(&srv->cfg, err, errlen);
	if (ctx == NULL) {
		echd_log(ECHD_LOG_WARNING, "TLS reload refused, keeping the certificate in use: %s",
			err);
		return -1;
	}
	SSL_CTX_free(srv->tls_ctx);
	srv->tls_ctx = ctx;
	echd_log(ECHD_LOG_NOTICE, "TLS certificates reloaded");
	warn_validity(ctx, srv->cfg.tls_cert_file);
	return 0;
}

void
brk_tls_finish(struct brk_server *srv)
{
	SSL_CTX_free(srv->tls_ctx);
	srv->tls_ctx = NULL;
}

struct bufferevent *
brk_tls_bufferevent(struct brk_server *srv, int fd)
{
	SSL *ssl = SSL_new(srv->tls_ctx);

	if (ssl == NULL) {
		return NULL;
	}
	/* BEV_OPT_CLOSE_ON_FREE also frees the SSL object */
	return bufferevent_openssl_socket_new(srv->base, fd, ssl, BUFFEREVENT_SSL_ACCEPTING,
		BEV_OPT_CLOSE_ON_FREE);
}

/* Why a socket failed under TLS with no OpenSSL error to tell. */
static const char reset_why[] = "connection reset or closed without a TLS close_notify";

void
brk_tls_describe_error(struct bufferevent *bev, char *buf, size_t len)
{
	unsigned long e = bufferevent_get_openssl_error(bev);

	if (e == 0) {
		snprintf(buf, len, "connection closed during or after the handshake");
		return;
	}
	if (ERR_GET_LIB(e) == 0) {
		/* libevent files SSL_get_error()'s code, not an OpenSSL error, for a
		 * failed read or write on the socket itself */
		snprintf(buf, len, "%s", ERR_GET_REASON(e) == SSL_ERROR_SYSCALL
				? reset_why
				: "TLS error without details");
		return;
	}
	ERR_error_string_n(e, buf, len);
	if (ERR_GET_LIB(e) == ERR_LIB_SSL &&
		ERR_GET_REASON(e) == SSL_R_CERTIFICATE_VERIFY_FAILED) {
		/* say why the client's certificate was refused (expired, unknown CA...) */
		SSL *ssl = bufferevent_openssl_get_ssl(bev);
		long v = ssl ? SSL_get_verify_result(ssl) : X509_V_OK;
		size_t n = strlen(buf);
		if (v != X509_V_OK && n < len) {
			snprintf(buf + n, len - n, " (%s)", X509_verify_cert_error_string(v));
		}
	}
}

/* The peer certificate's field named by tls-auth-clients-user (CN), or
 * 0 when there is none. */
int
brk_tls_peer_name(struct bufferevent *bev, char *buf, size_t len)
{
	SSL *ssl = bufferevent_openssl_get_ssl(bev);
	X509 *cert;
	int n;

	if (ssl == NULL) {
		return 0;
	}
	cert = SSL_get1_peer_certificate(ssl);
	if (cert == NULL) {
		return 0;
	}
	n = X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, buf,
		(int)len);
	X509_free(cert);
	return n > 0 ? n : 0;
}

/* Writes a reply at once, as the plain path writes its socket:
 * bufferevent_openssl 2.1 would add a write event, wait a poll round, write
 * and remove the event again (two epoll_ctl and a loop turn per reply).
 * Only once the handshake is over, when the bufferevent has nothing queued
 * (so no write of its own is half done), and for up to one TLS record, so
 * that the bufferevent's first write of its queue can repeat it.
 * Returns n when written; 0 when not tried; -EAGAIN when OpenSSL must wait
 * for the socket and then expects the same n bytes again (the caller
 * queues them in one piece); another negative errno when the connection
 * is broken (logged here; the caller closes it). */
ssize_t
brk_tls_write_now(struct bufferevent *bev, const char *addr, const void *p, size_t n)
{
	SSL *ssl = bufferevent_openssl_get_ssl(bev);
	char why[256];
	int r, err;

	/* A read waiting for bytes is no obstacle; a write of OpenSSL's own
	 * waiting for the socket is (a read that must write, say). */
	if (ssl == NULL || n == 0 || n > SSL3_RT_MAX_PLAIN_LENGTH || !SSL_is_init_finished(ssl) ||
		!(SSL_want_nothing(ssl) || SSL_want_read(ssl))) {
		return 0;
	}
	/* SSL_get_error() reads the thread's error queue: a stale entry
	 * would make a plain "socket full" look fatal. */
	ERR_clear_error();
	r = SSL_write(ssl, p, (int)n);
	if (r > 0) {
		return r; /* all of it: no SSL_MODE_ENABLE_PARTIAL_WRITE */
	}
	err = SSL_get_error(ssl, r);
	if (err == SSL_ERROR_WANT_WRITE || err == SSL_ERROR_WANT_READ) {
		return -EAGAIN;
	}
	if (err == SSL_ERROR_SYSCALL && ERR_peek_error() == 0) {
		snprintf(why, sizeof(why), "%s", reset_why);
	} else {
		ssl_errstr(why, sizeof(why));
	}
	/* Leave nothing for the next connection's SSL_get_error() to find. */
	ERR_clear_error();
	echd_log(ECHD_LOG_VERBOSE, "TLS connection from %s closed: %s", addr, why);
	return -EPIPE;
}
