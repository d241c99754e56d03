#ifndef API_PG_JSON_H
#define API_PG_JSON_H
#include <libpq-fe.h>
#include <json-c/json.h>
/*
 * One column of a result row as a JSON value, for the views that turn
 * rows into answers (views.c, trajectory.c, tenants.c). Each returns a
 * new reference, NULL for SQL NULL (json_object_object_add stores NULL
 * as JSON null), unless it says otherwise. The rows are ours, so the
 * values are trusted: no error paths.
 */
/* text, invalid UTF-8 replaced (orc_json_new_text). */
json_object *api_col_str(PGresult *res, int row, int col);
/* int2/4/8. */
json_object *api_col_int(PGresult *res, int row, int col);
/* boolean; false for NULL (never NULL). */
json_object *api_col_bool(PGresult *res, int row, int col);
/* float8 with PostgreSQL's exact digits, as the job object has them. */
json_object *api_col_float(PGresult *res, int row, int col);
/* jsonb written by us. */
json_object *api_col_json(PGresult *res, int row, int col);
/* jsonb that must be an object: {} for NULL or anything else (never NULL). */
json_object *api_col_json_object(PGresult *res, int row, int col);
/* bytea (text format) as a JSON string, invalid UTF-8 replaced. */
json_object *api_col_bytea(PGresult *res, int row, int col);
#endif
