#include "err.h"

const char *orc_err_name(int err)
{
	switch (err) {
	case ORC_OK: return "ok";
	case ORC_ENOTFOUND: return "not_found";
	case ORC_ECONFLICT: return "conflict";
	case ORC_EINVALID: return "invalid";
	case ORC_EUNAUTH: return "unauthorized";
	case ORC_EFORBIDDEN: return "forbidden";
	case ORC_EUNAVAIL: return "unavailable";
	case ORC_ETOOBIG: return "too_large";
	case ORC_ETIMEOUT: return "timeout";
	case ORC_EQUOTA: return "quota_exceeded";
	default: return "internal";
	}
}
