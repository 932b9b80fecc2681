/* st_fwd.c - a storage backend for tests: "mem" behind the forwarding base
 * (forward.h), changing nothing.
 *
 * Two proofs in one engine: that the base forwards the whole contract (the
 * contract suites run on it: meson's storage-fwd, stream-fwd, group-fwd),
 * and that an engine with no optional interface, neither capacity nor HA,
 * keeps it (mem offers none, and the base passes on only what the inner
 * engine has). Compiled into echd like "fault", never for real data.
 */
#include <errno.h>

#include "echd.h"
#include "forward.h"

static void
fwd_close(struct storage *st)
{
	struct storage_fwd *f = (struct storage_fwd *)st;

	storage_fwd_finish(f);
	echd_free(f);
}

static int
fwd_open(const struct storage_opts *o, struct storage **out)
{
	struct storage_fwd *f;
	int rc;

	rc = storage_opts_read(o, "fwd", NULL, 0, NULL); /* it has none */
	if (rc != 0) {
		return rc;
	}
	f = echd_calloc(1, sizeof(*f));
	if (f == NULL) {
		return -ENOMEM;
	}
	storage_fwd_init(f, &st_fwd_ops, sizeof(struct storage_fwd_txn),
		sizeof(struct storage_fwd_cursor));
	rc = storage_open("mem", o, &f->inner);
	if (rc != 0) {
		f->inner = NULL;
		fwd_close(&f->base);
		return rc;
	}
	*out = &f->base;
	return 0;
}

const struct storage_ops st_fwd_ops = {
	.version = STORAGE_OPS_V2,
	.name = "fwd",
	.base = &storage_fwd_ops,
	.open = fwd_open,
	.close = fwd_close,
};
