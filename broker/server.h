/* server.h - what the rooms of the server (server.c, commit.c, block.c,
 * keyspace.c, listen.c) share with each other and with nothing else of the
 * broker; the rest of broker/ sees them through broker.h.
 */
#ifndef ECHD_BROKER_SERVER_H
#define ECHD_BROKER_SERVER_H

#include <event2/util.h>

#include "broker.h"

/* ---- block.c ------------------------------------------------------------ */

/* Runs the blocked clients whose keys changed in the last commit. */
void brk_serve_ready(struct brk_server *srv);

/* ---- commit.c ----------------------------------------------------------- */

/* The end of a loop turn: deferred work, the commit, the release of the
 * replies it made durable, the wake-up of readers. */
void brk_batch_end(struct brk_server *srv);
/* flush-wait-us ran out: make the lone commit durable with a flush of its own. */
void brk_flush_timer_cb(evutil_socket_t fd, short what, void *arg);
/* appendfsync everysec: the once-a-second flush. */
void brk_fsync_timer_cb(evutil_socket_t fd, short what, void *arg);
/* Makes the last commit durable; 0 or the storage's error. */
int brk_storage_flush(struct brk_server *srv);
/* Sends the replies whose commit is durable; err: the flush failed, so
 * their clients are closed unanswered. */
int brk_release_durable(struct brk_server *srv, int err);

/* ---- keyspace.c --------------------------------------------------------- */

/* One turn's share of active expiry and of deferred deletion, in the batch. */
void brk_expire_step(struct brk_server *srv);
void brk_gc_step(struct brk_server *srv);

/* ---- listen.c ----------------------------------------------------------- */

/* Listeners from systemd's sockets (n of them), a TCP spec, the unix socket:
 * 0 or -1 (logged). */
int brk_listen_activated(struct brk_server *srv, int n);
int brk_listen_tcp(struct brk_server *srv, const char *spec, int port, bool tls);
int brk_listen_unix(struct brk_server *srv);
/* Takes the data directory's lock (one echd per directory): 0 or -1 (logged). */
int brk_lock_dir(struct brk_server *srv);
/* A file this process made at path (its unix socket, its pidfile), and its
 * removal at exit only if it is still that file. Borrows path. */
void brk_made_note(const char *path, struct brk_made_file *m);
void brk_made_remove(const char *path, struct brk_made_file *m);
int brk_mkdir_p(const char *path);
/* Writes this process' pid to the pidfile, if one is set (no file, no
 * error: as before), and removes it at exit if it is still that file. */
void brk_pidfile_write(struct brk_server *srv);
void brk_pidfile_remove(struct brk_server *srv);
/* (Re)opens the log (logfile, or stderr) at loglevel: 0 or -1 (said on stderr). */
int brk_log_open(struct brk_server *srv);

#endif
