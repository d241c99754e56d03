"""Kubernetes Status objects, as the API server returns them for errors."""

HTTP_REASONS = {
    400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound",
    405: "MethodNotAllowed", 409: "Conflict", 410: "Expired", 413: "RequestEntityTooLarge",
    415: "UnsupportedMediaType", 422: "Invalid", 429: "TooManyRequests",
    500: "InternalError", 503: "ServiceUnavailable", 504: "Timeout",
}


class ApiError(Exception):
    """An error answer: HTTP code plus a Status object."""

    def __init__(self, code, message, reason=None, details=None, headers=None):
        super().__init__(message)
        self.code = code
        self.headers = headers or {}
        self.status = status(code, message, reason, details)


def status(code, message, reason=None, details=None):
    s = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
         "message": message, "reason": reason or HTTP_REASONS.get(code, "Unknown"),
         "code": code}
    if details:
        s["details"] = details
    return s


def success(name, kind, uid=None):
    d = {"name": name, "kind": kind}
    if uid:
        d["uid"] = uid
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
            "details": d}


def not_found(resource, name, group=""):
    d = {"name": name, "kind": resource}
    if group:
        d["group"] = group
    return ApiError(404, '%s "%s" not found' % (_qualified(resource, group), name),
                    "NotFound", d)


def already_exists(resource, name, group=""):
    d = {"name": name, "kind": resource}
    if group:
        d["group"] = group
    return ApiError(409, '%s "%s" already exists' % (_qualified(resource, group), name),
                    "AlreadyExists", d)


def invalid(kind, name, causes, group="", code=422):
    """422 Invalid with details.causes, message in the API server's shape."""
    parts = ["%s: %s" % (c["field"], c["message"]) if c.get("field") else c["message"]
             for c in causes]
    msg = '%s "%s" is invalid: %s' % (kind, name or "", parts[0] if len(parts) == 1
                                      else "[" + ", ".join(parts) + "]")
    d = {"name": name or "", "kind": kind, "causes": causes}
    if group:
        d["group"] = group
    return ApiError(code, msg, "Invalid" if code == 422 else "BadRequest", d)


def _qualified(resource, group):
    return "%s.%s" % (resource, group) if group else resource


def expired(message):
    return status(410, message, "Expired")
