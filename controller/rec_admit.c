/*
 * Admission: which queued sandboxes (pending, admitted_at NULL) may start.
 *
 * Run by the leader before its passes. Usage is summed from the admitted
 * live rows (pending, ready or deleting: a deleting sandbox still runs),
 * never kept in memory, and a row is admitted by one UPDATE guarded by
 * `admitted_at IS NULL` before it is launched; so a controller killed at
 * any point loses no queued row and admits none twice (the next leader
 * launches admitted rows that have no handle yet).
 *
 * Order (weighted fair share, docs/controller.md "Admission"): a class is
 * a tenant and the row's `group` label; each class is served first in,
 * first out. The next row comes from the tenant with the least dominant
 * share (its admitted cpu or memory, whichever is the larger fraction of
 * the capacity) divided by its weight, and within the tenant from the
 * class with the least share; ties go to the oldest head. Rows are taken
 * in that order while they fit; a class whose head does not fit waits
 * (later rows of it are not taken past it), other classes go on. The rest
 * get queue_position (1: next) and a queue_reason. A row larger than the
 * largest node fails at once (the api refuses those at create when it
 * knows the capacity already).
 */
#include "rec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "log.h"
#include "strutil.h"
#include "xalloc.h"

static const char usage_sql[] =
	"SELECT tenant_id, COALESCE(labels->>'group', ''), sum(cpu_millis), sum(memory_bytes)"
	" FROM sandboxes WHERE driver = $1 AND admitted_at IS NOT NULL"
	" AND state IN ('pending', 'ready', 'deleting') GROUP BY 1, 2";

static const char queued_sql[] =
	"SELECT s.id, s.tenant_id, t.weight, COALESCE(s.labels->>'group', ''), s.cpu_millis,"
	" s.memory_bytes FROM sandboxes s JOIN tenants t ON t.id = s.tenant_id"
	" WHERE s.driver = $1 AND s.state = 'pending' AND s.admitted_at IS NULL"
	" ORDER BY s.created_at, s.id LIMIT 10000";

static const char admit_sql[] =
	"UPDATE sandboxes SET admitted_at = now(), queue_position = NULL, queue_reason = NULL"
	" WHERE id = ANY($1::text[]) AND state = 'pending' AND admitted_at IS NULL RETURNING id";

static const char position_sql[] =
	"UPDATE sandboxes s SET queue_position = v.pos::int, queue_reason = v.reason"
	" FROM unnest($1::text[], $2::text[], $3::text[]) AS v(id, pos, reason)"
	" WHERE s.id = v.id AND s.state = 'pending' AND s.admitted_at IS NULL"
	" AND (s.queue_position IS DISTINCT FROM v.pos::int OR s.queue_reason IS DISTINCT FROM v.reason)";

static const char capacity_sql[] =
	"INSERT INTO driver_capacity (driver, nodes, cpu_millis, memory_bytes, node_cpu_millis,"
	" node_memory_bytes) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (driver) DO UPDATE SET"
	" nodes = $2, cpu_millis = $3, memory_bytes = $4, node_cpu_millis = $5,"
	" node_memory_bytes = $6, updated_at = now()";

struct tenant_share {
	int64_t id;
	int weight;
	double used;
};

struct class_share {
	int64_t tenant;
	char *group;
	double used;
	size_t *rows, n, head;
	int blocked;
};

struct queued {
	char *id;
	size_t cls;
	int64_t cpu, mem;
	int admit;
	int too_big;
	size_t position;         /* 0: not queued (admitted or failed) */
	const char *reason;
};

struct admission {
	struct tenant_share *t;
	size_t nt;
	struct class_share *c;
	size_t nc;
	struct queued *q;
	size_t nq;
	int64_t free_cpu, free_mem;
};

static struct tenant_share *tenant_get(struct admission *a, int64_t id, int weight)
{
	for (size_t i = 0; i < a->nt; i++)
		if (a->t[i].id == id)
			return &a->t[i];
	a->t = xrealloc(a->t, orc_mul_size(a->nt + 1, sizeof(*a->t)));
	a->t[a->nt] = (struct tenant_share){ .id = id, .weight = weight > 0 ? weight : 1 };
	return &a->t[a->nt++];
}

static size_t class_get(struct admission *a, int64_t tenant, const char *group)
{
	for (size_t i = 0; i < a->nc; i++)
		if (a->c[i].tenant == tenant && !strcmp(a->c[i].group, group))
			return i;
	a->c = xrealloc(a->c, orc_mul_size(a->nc + 1, sizeof(*a->c)));
	a->c[a->nc] = (struct class_share){ .tenant = tenant, .group = xstrdup(group) };
	return a->nc++;
}

static void admission_release(struct admission *a)
{
	for (size_t i = 0; i < a->nc; i++) {
		free(a->c[i].group);
		free(a->c[i].rows);
	}
	for (size_t i = 0; i < a->nq; i++)
		free(a->q[i].id);
	free(a->t);
	free(a->c);
	free(a->q);
	memset(a, 0, sizeof(*a));
}

/* The dominant share of cpu/mem in cap (DRF). */
static double dominant(const struct ctl_capacity *cap, int64_t cpu, int64_t mem)
{
	double c = cap->cpu_millis > 0 ? (double)cpu / (double)cap->cpu_millis : 0;
	double m = cap->memory_bytes > 0 ? (double)mem / (double)cap->memory_bytes : 0;

	return c > m ? c : m;
}

static int64_t col_i64(PGresult *res, int i, int j)
{
	int64_t v = 0;

	orc_parse_i64(&v, PQgetvalue(res, i, j), INT64_MIN, INT64_MAX);
	return v;
}

static int load(struct admission *a, struct rec *r, const struct ctl_capacity *cap)
{
	const char *p[1] = { r->cfg->driver };
	PGresult *res = NULL;
	int i, n, err;

	a->free_cpu = cap->cpu_millis;
	a->free_mem = cap->memory_bytes;
	if ((err = rec_db_query(r, &res, usage_sql, 1, p)) < 0)
		return err;
	for (i = 0; i < PQntuples(res); i++) {
		int64_t cpu = col_i64(res, i, 2), mem = col_i64(res, i, 3);
		double share = dominant(cap, cpu, mem);
		size_t c = class_get(a, col_i64(res, i, 0), PQgetvalue(res, i, 1));

		a->c[c].used += share;
		tenant_get(a, a->c[c].tenant, 1)->used += share;
		a->free_cpu -= cpu;
		a->free_mem -= mem;
	}
	PQclear(res);
	if ((err = rec_db_query(r, &res, queued_sql, 1, p)) < 0)
		return err;
	n = PQntuples(res);
	a->q = xcalloc(n ? (size_t)n : 1, sizeof(*a->q));
	for (i = 0; i < n; i++) {
		struct queued *q = &a->q[a->nq++];
		struct class_share *c;
		int64_t tenant = col_i64(res, i, 1);

		q->id = xstrdup(PQgetvalue(res, i, 0));
		tenant_get(a, tenant, (int)col_i64(res, i, 2))->weight = (int)col_i64(res, i, 2);
		q->cls = class_get(a, tenant, PQgetvalue(res, i, 3));
		q->cpu = col_i64(res, i, 4);
		q->mem = col_i64(res, i, 5);
		q->too_big = q->cpu > cap->node_cpu_millis || q->mem > cap->node_memory_bytes;
		c = &a->c[q->cls];
		c->rows = xrealloc(c->rows, orc_mul_size(c->n + 1, sizeof(*c->rows)));
		c->rows[c->n++] = (size_t)i;
	}
	PQclear(res);
	return 0;
}

/* c goes before best: the tenant with less share per weight, then within
 * one tenant the class with less share, then the oldest head. */
static int before(struct admission *a, const struct class_share *c, const struct class_share *best)
{
	const struct tenant_share *tc = tenant_get(a, c->tenant, 1);
	const struct tenant_share *tb = tenant_get(a, best->tenant, 1);
	double sc = tc->used / tc->weight, sb = tb->used / tb->weight;

	if (sc != sb)
		return sc < sb;
	if (c->tenant == best->tenant && c->used != best->used)
		return c->used < best->used;
	return c->rows[c->head] < best->rows[best->head];
}

/* The class the next row comes from, or NULL when every class is empty
 * (or, with skip_blocked, blocked). */
static struct class_share *next_class(struct admission *a, int skip_blocked)
{
	struct class_share *best = NULL;

	for (size_t i = 0; i < a->nc; i++) {
		struct class_share *c = &a->c[i];

		if (c->head >= c->n || (skip_blocked && c->blocked))
			continue;
		if (!best || before(a, c, best))
			best = c;
	}
	return best;
}

static void take(struct admission *a, struct class_share *c, const struct ctl_capacity *cap)
{
	struct queued *q = &a->q[c->rows[c->head++]];
	double share = dominant(cap, q->cpu, q->mem);

	c->used += share;
	tenant_get(a, c->tenant, 1)->used += share;
}

/* Decide: admit what fits in fair-share order, then number the rest. */
static void decide(struct admission *a, const struct ctl_capacity *cap)
{
	struct class_share *c;
	struct queued *q;
	size_t pos = 0;

	while ((c = next_class(a, 1)) != NULL) {
		q = &a->q[c->rows[c->head]];
		if (q->too_big) {
			c->head++;
			continue;
		}
		if (q->cpu > a->free_cpu || q->mem > a->free_mem) {
			c->blocked = 1;
			q->reason = "waiting for capacity: the sandboxes running now leave too little "
				    "cpu or memory for this one";
			continue;
		}
		q->admit = 1;
		a->free_cpu -= q->cpu;
		a->free_mem -= q->mem;
		take(a, c, cap);
	}
	while ((c = next_class(a, 0)) != NULL) {
		q = &a->q[c->rows[c->head]];
		if (!q->too_big) {
			q->position = ++pos;
			if (!q->reason)
				q->reason = "waiting for its turn: earlier sandboxes are served first "
					    "(fair share across tenants and groups)";
		}
		take(a, c, cap);
	}
}

static void fail_too_big(struct rec *r, const struct admission *a, const struct ctl_capacity *cap)
{
	for (size_t i = 0; i < a->nq; i++) {
		const struct queued *q = &a->q[i];
		char *msg;

		if (!q->too_big)
			continue;
		msg = xasprintf("larger than any node can hold: asks for %lld millicores and %lld bytes "
				"of memory; the largest node holds %lld millicores and %lld bytes",
				(long long)q->cpu, (long long)q->mem, (long long)cap->node_cpu_millis,
				(long long)cap->node_memory_bytes);
		rec_fail_sandbox(r, q->id, "pending", msg, NULL);
		free(msg);
	}
}

static void write_positions(struct rec *r, const struct admission *a)
{
	struct orc_pg_array ids = ORC_PG_ARRAY_INIT, pos = ORC_PG_ARRAY_INIT, why = ORC_PG_ARRAY_INIT;
	const char *p[3];
	char num[24];

	for (size_t i = 0; i < a->nq; i++) {
		if (!a->q[i].position)
			continue;
		snprintf(num, sizeof(num), "%zu", a->q[i].position);
		orc_pg_array_add(&ids, a->q[i].id);
		orc_pg_array_add(&pos, num);
		orc_pg_array_add(&why, a->q[i].reason);
	}
	if (ids.n) {
		p[0] = orc_pg_array_cstr(&ids);
		p[1] = orc_pg_array_cstr(&pos);
		p[2] = orc_pg_array_cstr(&why);
		rec_db_exec(r, position_sql, 3, p);
	}
	orc_pg_array_release(&ids);
	orc_pg_array_release(&pos);
	orc_pg_array_release(&why);
}

/* An admitted row is launched by the next pass. */
static void notify_admitted(struct rec *r, const char *id)
{
	if (r->notified.n < MAX_NOTIFIED)
		ctl_strv_push(&r->notified, id);
	else
		r->overflow = 1;
}

static void write_admitted(struct rec *r, const struct admission *a)
{
	struct orc_pg_array ids = ORC_PG_ARRAY_INIT;
	const char *p[1];
	PGresult *res = NULL;

	for (size_t i = 0; i < a->nq; i++)
		if (a->q[i].admit)
			orc_pg_array_add(&ids, a->q[i].id);
	if (!ids.n)
		goto done;
	p[0] = orc_pg_array_cstr(&ids);
	if (rec_db_query(r, &res, admit_sql, 1, p) < 0)
		goto done;
	for (int i = 0; i < PQntuples(res); i++) {
		orc_log(ORC_LOG_DEBUG, "sandbox admitted", "sandbox_id", PQgetvalue(res, i, 0), NULL);
		notify_admitted(r, PQgetvalue(res, i, 0));
	}
done:
	PQclear(res);
	orc_pg_array_release(&ids);
}

int rec_capacity_refresh(struct rec *r)
{
	struct ctl_capacity cap = { 0 };
	char nodes[16], cpu[24], mem[24], ncpu[24], nmem[24];
	const char *p[6] = { r->cfg->driver, nodes, cpu, mem, ncpu, nmem };
	int err;

	if (!r->drv->ops->capacity)
		return 0;
	/* ORC_EUNAVAIL: not known yet (kubernetes before its first node
	 * listing): admit as a driver without capacity does until it is. */
	err = r->drv->ops->capacity(r->drv, &cap);
	r->cap_unknown = err == ORC_EUNAVAIL && !r->have_cap;
	if (err < 0)
		return err == ORC_EUNAVAIL ? 0 : err;
	r->cap = cap;
	r->have_cap = 1;
	snprintf(nodes, sizeof(nodes), "%d", cap.nodes);
	snprintf(cpu, sizeof(cpu), "%lld", (long long)cap.cpu_millis);
	snprintf(mem, sizeof(mem), "%lld", (long long)cap.memory_bytes);
	snprintf(ncpu, sizeof(ncpu), "%lld", (long long)cap.node_cpu_millis);
	snprintf(nmem, sizeof(nmem), "%lld", (long long)cap.node_memory_bytes);
	if (r->db)
		rec_db_exec(r, capacity_sql, 6, p);
	return 0;
}

static const char admit_all_sql[] =
	"UPDATE sandboxes SET admitted_at = now() WHERE driver = $1 AND state = 'pending'"
	" AND admitted_at IS NULL RETURNING id";

void rec_admit(struct rec *r)
{
	struct admission a = { 0 };
	const char *p[1] = { r->cfg->driver };
	PGresult *res = NULL;

	r->freed = 0;
	if (!r->db)
		return;
	if (!r->have_cap) {
		/* A driver without capacity, or one that cannot tell yet:
		 * everything is admitted at once. */
		if ((r->drv->ops->capacity && !r->cap_unknown) ||
		    rec_db_query(r, &res, admit_all_sql, 1, p) < 0)
			return;
		for (int i = 0; i < PQntuples(res); i++)
			notify_admitted(r, PQgetvalue(res, i, 0));
		PQclear(res);
		return;
	}
	if (load(&a, r, &r->cap) == 0) {
		decide(&a, &r->cap);
		write_admitted(r, &a);
		write_positions(r, &a);
		fail_too_big(r, &a, &r->cap);
	}
	admission_release(&a);
}
