#ifndef ORC_PGARRAY_H
#define ORC_PGARRAY_H
/*
 * PostgreSQL array literals for one parameter that carries many values
 * (`unnest($1::text[])`), so a batch of rows is one statement and one
 * commit instead of one per row.
 *
 *   struct orc_pg_array a = ORC_PG_ARRAY_INIT;
 *   orc_pg_array_add(&a, "x"); orc_pg_array_add(&a, NULL);
 *   param = orc_pg_array_cstr(&a);          // {"x",NULL}
 *   orc_pg_array_release(&a);
 */
#include <stddef.h>

#include "buf.h"

struct orc_pg_array {
	struct orc_buf buf;
	size_t n;
	int closed;    /* buf ends with the '}' orc_pg_array_cstr() added */
};

#define ORC_PG_ARRAY_INIT { ORC_BUF_INIT, 0, 0 }

/* Append one element, quoted (any bytes but NUL); NULL is SQL NULL. */
void orc_pg_array_add(struct orc_pg_array *a, const char *s);
/* The literal, "{}" when empty; valid until the next add or release. */
const char *orc_pg_array_cstr(struct orc_pg_array *a);
void orc_pg_array_reset(struct orc_pg_array *a);
void orc_pg_array_release(struct orc_pg_array *a);
#endif
