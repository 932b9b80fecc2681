/* st_pg_test.h - what tests/unit/test_pg.c may change in st_pg.c: the
 * limits that keep a commit under PostgreSQL's 1 GB, small enough to be
 * passed in a test, and a stall during a commit. Not for echd itself.
 */
#ifndef ECHD_STORAGE_ST_PG_TEST_H
#define ECHD_STORAGE_ST_PG_TEST_H

#include <stddef.h>

/* The largest value a put takes (bigger: -EFBIG) and the most bytes the
 * arrays of one statement carry (more: split into several statements);
 * 0 puts a default back. Process-wide; call between commits. */
void st_pg_test_limits(size_t value_max, size_t param_max);

/* Sleeps ms after each commit's COMMIT is sent, before its answer is
 * read: a stall of the process there (a VM pause, SIGSTOP). 0: none. */
void st_pg_test_stall(unsigned ms);

#endif
