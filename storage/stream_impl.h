/* stream_impl.h - helpers shared by stream.c and group.c (not API). */
#ifndef ECHD_STORAGE_STREAM_IMPL_H
#define ECHD_STORAGE_STREAM_IMPL_H

#include <stdint.h>

#include "storage.h"
#include "stream.h"

void st_put_u64(unsigned char *p, uint64_t v);
uint64_t st_get_u64(const unsigned char *p);
void st_put_id(unsigned char *p, const struct stream_id *id);
void st_get_id(const unsigned char *p, struct stream_id *id);

/* Allocates a fresh internal id (streams, groups and consumers share the
 * counter; 0 is never used). */
int st_next_id(struct storage_txn *t, uint64_t *out);

/* Rows still to delete: a whole stream, or one group of a stream. */
enum st_trash_kind { ST_TRASH_STREAM = 'S', ST_TRASH_GROUP = 'G' };
int st_trash_add(struct storage_txn *t, enum st_trash_kind kind, uint64_t id);

#endif
