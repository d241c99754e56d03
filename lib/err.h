#ifndef ORC_ERR_H
#define ORC_ERR_H
/*
 * Return codes shared by every module: 0 is success, negative is failure.
 * The expected failures have names; they map to HTTP status in one place
 * (api/reply.c). ORC_ERROR is everything unexpected.
 */
enum orc_err {
	ORC_OK = 0,
	ORC_ERROR = -1,        /* unexpected: 500 */
	ORC_ENOTFOUND = -2,    /* 404 */
	ORC_ECONFLICT = -3,    /* 409 */
	ORC_EINVALID = -4,     /* 400/422 */
	ORC_EUNAUTH = -5,      /* 401 */
	ORC_EFORBIDDEN = -6,   /* 403 */
	ORC_EUNAVAIL = -7,     /* 503 */
	ORC_ETOOBIG = -8,      /* 413 */
	ORC_ETIMEOUT = -9,     /* 408/504 */
	ORC_EQUOTA = -10,      /* 429 */
};

/* A short lowercase name for the code ("not_found", "conflict", ...). */
const char *orc_err_name(int err);

#endif
