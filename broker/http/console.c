/* console.c - GET /: the web console, one HTML page with its CSS and
 * JavaScript inline, built into the binary from broker/http/console/index.html
 * (meson turns it into console_html.h), so nothing is fetched from
 * elsewhere. The page only reads the JSON API (api.c) and posts its
 * actions; what a user sees there is what the API lets it see.
 *
 * It is served with a Content-Security-Policy that embed.py derives from
 * the page: its own inline script and style (by their SHA-256 hashes) and
 * nothing else may run, and no page may frame it (frame-ancestors, and
 * X-Frame-Options from brk_http_reply() for older browsers), so its Ack,
 * Nack and Delete buttons cannot be clickjacked.
 */
#include <event2/buffer.h>
#include <event2/http.h>

#include "broker.h"
#include "console_html.h"
#include "http.h"

int
brk_http_console(struct brk_http_req *r, struct evbuffer *out, const char **ctype)
{
	evhttp_add_header(evhttp_request_get_output_headers(r->req), "Content-Security-Policy",
		console_html_csp);
	evbuffer_add_reference(out, console_html, console_html_len, NULL, NULL);
	*ctype = "text/html; charset=utf-8";
	return 200;
}
