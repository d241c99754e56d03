/*
 * Result columns as JSON values (pg_json.h).
 */
#include <stdlib.h>

#include "json.h"
#include "pg_json.h"

json_object *api_col_str(PGresult *res, int row, int col)
{
	if (PQgetisnull(res, row, col))
		return NULL;
	return orc_json_new_text(PQgetvalue(res, row, col), (size_t)PQgetlength(res, row, col));
}

json_object *api_col_int(PGresult *res, int row, int col)
{
	if (PQgetisnull(res, row, col))
		return NULL;
	return json_object_new_int64(strtoll(PQgetvalue(res, row, col), NULL, 10));
}

json_object *api_col_bool(PGresult *res, int row, int col)
{
	return json_object_new_boolean(!PQgetisnull(res, row, col) &&
				       PQgetvalue(res, row, col)[0] == 't');
}

json_object *api_col_float(PGresult *res, int row, int col)
{
	const char *v;

	if (PQgetisnull(res, row, col))
		return NULL;
	v = PQgetvalue(res, row, col);
	return json_object_new_double_s(strtod(v, NULL), v);
}

json_object *api_col_json(PGresult *res, int row, int col)
{
	if (PQgetisnull(res, row, col))
		return NULL;
	return json_tokener_parse(PQgetvalue(res, row, col));
}

json_object *api_col_json_object(PGresult *res, int row, int col)
{
	json_object *o = api_col_json(res, row, col);

	if (!o || !json_object_is_type(o, json_type_object)) {
		json_object_put(o);
		o = json_object_new_object();
	}
	return o;
}

json_object *api_col_bytea(PGresult *res, int row, int col)
{
	unsigned char *b;
	json_object *o;
	size_t n = 0;

	if (PQgetisnull(res, row, col))
		return NULL;
	if (!(b = PQunescapeBytea((const unsigned char *)PQgetvalue(res, row, col), &n)))
		return json_object_new_string("");
	o = orc_json_new_text((const char *)b, n);
	PQfreemem(b);
	return o;
}
