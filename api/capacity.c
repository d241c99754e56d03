/*
 * What a sandbox may ask for, given the capacity its driver's controller
 * last reported (the driver_capacity table, controller/rec_admit.c):
 * larger than the largest node is refused at create with a 422, since no
 * amount of waiting would admit it. Smaller requests are queued by the
 * controller when nothing is free now. Before any controller has reported,
 * nothing is refused here (the controller fails such rows instead).
 */
#include <stdio.h>
#include <stdlib.h>

#include "api.h"
#include "err.h"

int api_capacity_check(PGconn *db, int64_t cpu_millis, int64_t memory_bytes, struct api_req *r)
{
	const char *params[1] = { api_server.driver };
	PGresult *res = NULL;
	long long node_cpu, node_mem;
	int err;

	if ((err = orc_pg_query(&res, db, "SELECT node_cpu_millis, node_memory_bytes FROM driver_capacity"
				" WHERE driver = $1", 1, params)) < 0)
		return err;
	if (PQntuples(res) != 1)
		goto done;
	node_cpu = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
	node_mem = strtoll(PQgetvalue(res, 0, 1), NULL, 10);
	if (cpu_millis > node_cpu || memory_bytes > node_mem)
		err = api_fail(r, ORC_EINVALID, "the sandbox is larger than any node of the %s "
			       "driver can hold: it asks for %lld millicores and %lld bytes of "
			       "memory, the largest node holds %lld millicores and %lld bytes (after "
			       "reserve and overcommit; GET /v1/resources shows the capacity)",
			       api_server.driver, (long long)cpu_millis, (long long)memory_bytes,
			       node_cpu, node_mem);
done:
	PQclear(res);
	return err;
}
