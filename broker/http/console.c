/* console.c - GET /: the web console, one HTML page with its CSS and
 * JavaScript inline, built into the binary from broker/http/console/index.html
 * (meson turns it into console_html.h), so nothing is fetched from
 * elsewhere. The page only reads the JSON API (api.c) and posts its
 * actions; what a user sees there is what the API lets it see.
 */
#include <event2/buffer.h>

#include "broker.h"
#include "console_html.h"
#include "http.h"

int
brk_http_console(struct brk_http_req *r, struct evbuffer *out, const char **ctype)
{
	(void)r;
	evbuffer_add_reference(out, console_html, console_html_len, NULL, NULL);
	*ctype = "text/html; charset=utf-8";
	return 200;
}
