/* st_pg.c - the postgres storage backend (issue 27): being written. Until
 * it lands, opening it fails. */
#include "echd.h"
#include "storage_impl.h"

static int
pg_open(const struct storage_opts *o, struct storage **out)
{
	(void)o;
	*out = NULL;
	return ECHD_EINVAL;
}

const struct storage_ops st_pg_ops = {
	.version = STORAGE_OPS_V1,
	.name = "postgres",
	.open = pg_open,
};
