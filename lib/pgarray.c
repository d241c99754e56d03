#include "pgarray.h"

#include <string.h>

void orc_pg_array_add(struct orc_pg_array *a, const char *s)
{
	if (a->closed) {
		/* Reopen: drop the '}' that orc_pg_array_cstr() appended. */
		a->buf.len--;
		a->buf.ptr[a->buf.len] = '\0';
		a->closed = 0;
	}
	orc_buf_addc(&a->buf, a->n++ ? ',' : '{');
	if (!s) {
		orc_buf_adds(&a->buf, "NULL");
		return;
	}
	/* Inside double quotes only '"' and '\' need a backslash. */
	orc_buf_addc(&a->buf, '"');
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			orc_buf_addc(&a->buf, '\\');
		orc_buf_addc(&a->buf, *s);
	}
	orc_buf_addc(&a->buf, '"');
}

const char *orc_pg_array_cstr(struct orc_pg_array *a)
{
	if (!a->n)
		return "{}";
	if (!a->closed) {
		orc_buf_addc(&a->buf, '}');
		a->closed = 1;
	}
	return a->buf.ptr;
}

void orc_pg_array_reset(struct orc_pg_array *a)
{
	orc_buf_reset(&a->buf);
	a->n = 0;
	a->closed = 0;
}

void orc_pg_array_release(struct orc_pg_array *a)
{
	orc_buf_release(&a->buf);
	a->n = 0;
	a->closed = 0;
}
