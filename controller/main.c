/*
 * orchard-controller: configuration, signals, leader election, then the
 * reconcile loop until SIGTERM/SIGINT or the loss of the leader lock.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <curl/curl.h>

#include "ctl.h"
#include "ctl_metrics.h"
#include "driver.h"
#include "err.h"
#include "leader.h"
#include "log.h"
#include "reconcile.h"

volatile sig_atomic_t ctl_stopping;
static sigset_t wait_mask;   /* the mask ppoll runs with: stop signals open */

static void on_stop(int sig)
{
	(void)sig;
	ctl_stopping = 1;
}

void ctl_signals_init(void)
{
	struct sigaction sa;
	sigset_t block;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = SIG_IGN;
	sigaction(SIGPIPE, &sa, NULL);
	sa.sa_handler = on_stop;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigemptyset(&block);
	sigaddset(&block, SIGTERM);
	sigaddset(&block, SIGINT);
	sigprocmask(SIG_BLOCK, &block, &wait_mask);
	sigdelset(&wait_mask, SIGTERM);
	sigdelset(&wait_mask, SIGINT);
}

int ctl_wait(struct pollfd *fds, unsigned nfds, int64_t timeout_ms)
{
	struct timespec ts, *tp = NULL;

	if (ctl_stopping)
		return 0;
	if (timeout_ms >= 0) {
		ts.tv_sec = timeout_ms / 1000;
		ts.tv_nsec = (long)(timeout_ms % 1000) * 1000000L;
		tp = &ts;
	}
	return ppoll(fds, nfds, tp, &wait_mask);
}

/* orchard-controller reap: the driver's own list_owned and destroy tear
 * down every sandbox of the state dir (a stopped stack's, stack.sh down). */
static int reap_main(int argc, char **argv)
{
	struct ctl_config cfg = CTL_CONFIG_INIT;
	struct ctl_driver driver = { 0 };
	int err, status = 2;

	if ((err = ctl_config_load_reap(&cfg, argc, argv)) != 0) {
		status = err > 0 ? 0 : 2;
		goto done;
	}
	if (ctl_metrics_init() < 0 || ctl_driver_open(&driver, &cfg) < 0)
		goto done;
	status = ctl_driver_reap(&driver) < 0 ? 1 : 0;
done:
	ctl_driver_close(&driver);
	ctl_config_release(&cfg);
	return status;
}

int main(int argc, char **argv)
{
	struct ctl_config cfg = CTL_CONFIG_INIT;
	struct ctl_driver driver = { NULL, NULL, NULL };
	PGconn *leader = NULL;
	int err, status = 1;

	orc_log_init("controller");
	if (argc > 1 && !strcmp(argv[1], "reap"))
		return reap_main(argc - 1, argv + 1);
	if ((err = ctl_config_load(&cfg, argc, argv)) != 0) {
		status = err > 0 ? 0 : 2;
		goto done;
	}
	ctl_signals_init();
	curl_global_init(CURL_GLOBAL_DEFAULT);
	if (ctl_metrics_init() < 0 || ctl_metrics_serve(getenv("ORCHARD_CONTROLLER_METRICS")) < 0)
		goto done;
	if (ctl_driver_open(&driver, &cfg) < 0)
		goto done;
	orc_log(ORC_LOG_INFO, "starting", "driver", cfg.driver, "state_dir", cfg.state_dir,
		"agent_bin", cfg.agent_bin, "bwrap", cfg.bwrap_bin, NULL);
	if ((err = ctl_leader_acquire(&leader, cfg.database_url)) < 0) {
		status = ctl_stopping ? 0 : 1;
		goto done;
	}
	ctl_metrics_leader(1);
	err = ctl_reconcile_run(&cfg, &driver, leader);
	if (err < 0) {
		orc_log(ORC_LOG_ERROR, "stopping: no longer the leader; sandboxes keep running "
			"and the next leader adopts them", NULL);
		status = 1;
	} else {
		orc_log(ORC_LOG_INFO, "stopped; sandboxes keep running", NULL);
		status = 0;
	}
done:
	if (leader)
		PQfinish(leader);
	ctl_driver_close(&driver);
	ctl_config_release(&cfg);
	return status;
}
