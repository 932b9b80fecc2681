/* main.c - echd's entry point: options, then the server loop. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "broker.h"
#include "cluster.h"

int
main(int argc, char **argv)
{
	struct brk_server srv;
	char err[512];
	int rc;

	memset(&srv, 0, sizeof(srv));
	brk_config_defaults(&srv.cfg);
	rc = brk_config_from_args(&srv.cfg, argc, argv, err, sizeof(err));
	if (rc == 1) {
		brk_config_finish(&srv.cfg);
		return 0;
	}
	if (rc != 0) {
		fprintf(stderr, "echd: %s\nTry 'echd --help' for the options.\n", err);
		brk_config_finish(&srv.cfg);
		return 2;
	}
	srv.exe_path = argv[0];
	srv.config_file = argc >= 2 && argv[1][0] != '-' ? argv[1] : NULL;
	if (srv.cfg.cluster_shards_per_node > 1) {
		bool worker;

		rc = brk_workers_run(&srv, &worker);
		if (!worker) {
			brk_config_finish(&srv.cfg);
			return rc;
		}
	}
	rc = brk_server_init(&srv);
	if (rc != 0) {
		echd_log(ECHD_LOG_WARNING, "echd could not start");
		brk_server_finish(&srv);
		return rc == BRK_INIT_CONFIG ? 2 : 1;
	}
	rc = brk_server_run(&srv);
	brk_server_finish(&srv);
	return rc;
}
