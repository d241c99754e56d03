"""A strict checker of Prometheus rule files and of the PromQL in them and in
Grafana dashboards, for machines without promtool (Debian's promtool comes
only with the whole prometheus server package; docs/observability.md).

check_rule_file(path) -> (recorded names, metric names used) and raises
AssertionError on anything promtool's `check rules` would refuse that this
checks: unknown keys, missing or duplicate names, bad durations, label names,
templates, and PromQL that does not parse or mixes types (a range vector
where an instant one is needed and back).
"""
import re

import yaml

METRIC_RE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
LABEL_RE = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
DURATION_RE = re.compile(r"(\d+(ms|s|m|h|d|w|y))+\Z")

# Functions and their argument types: v instant vector, m range vector,
# s scalar, S string; a trailing "?" is optional. The last item is the result.
FUNCTIONS = {
    "abs": ("v", "v"), "absent": ("v", "v"), "absent_over_time": ("m", "v"),
    "ceil": ("v", "v"), "changes": ("m", "v"), "clamp": ("v", "s", "s", "v"),
    "clamp_max": ("v", "s", "v"), "clamp_min": ("v", "s", "v"), "delta": ("m", "v"),
    "deriv": ("m", "v"), "exp": ("v", "v"), "floor": ("v", "v"),
    "histogram_quantile": ("s", "v", "v"), "idelta": ("m", "v"), "increase": ("m", "v"),
    "irate": ("m", "v"), "label_replace": ("v", "S", "S", "S", "S", "v"), "ln": ("v", "v"),
    "log2": ("v", "v"), "log10": ("v", "v"), "predict_linear": ("m", "s", "v"),
    "rate": ("m", "v"), "resets": ("m", "v"), "round": ("v", "s?", "v"), "scalar": ("v", "s"),
    "sort": ("v", "v"), "sort_desc": ("v", "v"), "sqrt": ("v", "v"), "time": ("s",),
    "timestamp": ("v", "v"), "vector": ("s", "v"),
    "avg_over_time": ("m", "v"), "min_over_time": ("m", "v"), "max_over_time": ("m", "v"),
    "sum_over_time": ("m", "v"), "count_over_time": ("m", "v"), "last_over_time": ("m", "v"),
    "quantile_over_time": ("s", "m", "v"),
}
AGGREGATIONS = {"sum", "min", "max", "avg", "count", "stddev", "stdvar", "group",
                "topk", "bottomk", "quantile", "count_values"}
AGG_WITH_PARAM = {"topk", "bottomk", "quantile", "count_values"}
BINARY = {"+", "-", "*", "/", "%", "^", "==", "!=", ">", "<", ">=", "<=", "and", "or", "unless"}
COMPARISON = {"==", "!=", ">", "<", ">=", "<="}
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset",
            "and", "or", "unless"}

TOKEN_RE = re.compile(r"""
    (?P<ws>\s+)
  | (?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
  | (?P<duration>(?:\d+(?:ms|s|m|h|d|w|y))+(?![a-zA-Z0-9_]))
  | (?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?(?![a-zA-Z_])|0x[0-9a-fA-F]+|(?i:inf|nan)(?![a-zA-Z0-9_]))
  | (?P<ident>[a-zA-Z_][a-zA-Z0-9_:]*)
  | (?P<op>=~|!~|==|!=|>=|<=|[-+*/%^<>=,(){}\[\]:])
""", re.X)


def tokenize(expr):
    out, i = [], 0
    while i < len(expr):
        m = TOKEN_RE.match(expr, i)
        assert m, "cannot read %r at %r" % (expr, expr[i:i + 20])
        i = m.end()
        if m.lastgroup != "ws":
            out.append((m.lastgroup, m.group()))
    return out


class Parser:
    """Recursive descent over PromQL; collects the metric names it reads."""

    def __init__(self, expr):
        self.expr = expr
        self.toks = tokenize(expr)
        self.i = 0
        self.metrics = set()

    def peek(self, k=0):
        j = self.i + k
        return self.toks[j] if j < len(self.toks) else (None, None)

    def take(self, value=None, kind=None):
        t = self.peek()
        assert t[0] is not None, "%r: unexpected end" % self.expr
        assert value is None or t[1] == value, "%r: expected %r, got %r" % (self.expr, value, t[1])
        assert kind is None or t[0] == kind, "%r: expected a %s, got %r" % (self.expr, kind, t[1])
        self.i += 1
        return t

    def parse(self):
        typ = self.expression()
        assert self.peek()[0] is None, "%r: trailing %r" % (self.expr, self.peek()[1])
        return typ

    def expression(self):
        left = self.unary()
        while self.peek()[1] in BINARY:
            op = self.take()[1]
            if self.peek()[1] == "bool":
                assert op in COMPARISON, "%r: bool after %s" % (self.expr, op)
                self.take()
            if self.peek()[1] in ("on", "ignoring"):
                self.take()
                self.label_list()
                if self.peek()[1] in ("group_left", "group_right"):
                    self.take()
                    if self.peek()[1] == "(":
                        self.label_list()
            right = self.unary()
            assert left != "m" and right != "m", "%r: a range vector in arithmetic" % self.expr
            assert left not in ("S",) and right not in ("S",), "%r: a string operand" % self.expr
            if op in ("and", "or", "unless"):
                assert left == right == "v", "%r: %s needs two vectors" % (self.expr, op)
            left = "v" if "v" in (left, right) else "s"
        return left

    def unary(self):
        if self.peek()[1] in ("-", "+"):
            self.take()
            typ = self.unary()
            assert typ in ("v", "s"), "%r: unary minus on %s" % (self.expr, typ)
            return typ
        return self.postfix()

    def postfix(self):
        typ = self.primary()
        if self.peek()[1] == "[":
            self.take()
            self.take(kind="duration")
            if self.peek()[1] == ":":          # a subquery
                self.take()
                if self.peek()[0] == "duration":
                    self.take()
            else:
                assert typ == "sel", "%r: a range of a non-selector" % self.expr
            self.take("]")
            typ = "m"
        if self.peek()[1] == "offset":
            self.take()
            self.take(kind="duration")
        return "v" if typ == "sel" else typ

    def label_list(self):
        self.take("(")
        while self.peek()[1] != ")":
            name = self.take(kind="ident")[1]
            assert LABEL_RE.match(name), "%r: bad label %r" % (self.expr, name)
            if self.peek()[1] == ",":
                self.take()
        self.take(")")

    def matchers(self):
        self.take("{")
        while self.peek()[1] != "}":
            name = self.take(kind="ident")[1]
            assert LABEL_RE.match(name), "%r: bad label %r" % (self.expr, name)
            op = self.take()[1]
            assert op in ("=", "!=", "=~", "!~"), "%r: bad matcher %r" % (self.expr, op)
            value = self.take(kind="string")[1]
            if op in ("=~", "!~"):
                try:
                    re.compile(value[1:-1].encode().decode("unicode_escape"))
                except re.error as e:
                    raise AssertionError("%r: bad regex %s: %s" % (self.expr, value, e))
            if self.peek()[1] == ",":
                self.take()
        self.take("}")

    def primary(self):
        kind, value = self.peek()
        if kind == "number":
            self.take()
            return "s"
        if kind == "string":
            self.take()
            return "S"
        if value == "(":
            self.take()
            typ = self.expression()
            self.take(")")
            return typ
        if value == "{":
            self.matchers()
            return "sel"
        assert kind == "ident", "%r: unexpected %r" % (self.expr, value)
        assert value not in KEYWORDS, "%r: misplaced %r" % (self.expr, value)
        if value in AGGREGATIONS:
            return self.aggregation()
        if self.peek(1)[1] == "(":
            return self.call()
        self.take()
        assert METRIC_RE.match(value), "%r: bad metric %r" % (self.expr, value)
        self.metrics.add(value)
        if self.peek()[1] == "{":
            self.matchers()
        return "sel"

    def aggregation(self):
        name = self.take()[1]
        grouped = False
        if self.peek()[1] in ("by", "without"):
            self.take()
            self.label_list()
            grouped = True
        self.take("(")
        if name in AGG_WITH_PARAM:
            self.expression()
            self.take(",")
        typ = self.expression()
        assert typ == "v", "%r: %s of a %s" % (self.expr, name, typ)
        self.take(")")
        if not grouped and self.peek()[1] in ("by", "without"):
            self.take()
            self.label_list()
        return "v"

    def call(self):
        name = self.take()[1]
        assert name in FUNCTIONS, "%r: unknown function %s" % (self.expr, name)
        want = FUNCTIONS[name][:-1]
        self.take("(")
        got = []
        while self.peek()[1] != ")":
            got.append(self.expression())
            if self.peek()[1] == ",":
                self.take()
            else:
                break
        self.take(")")
        need = [w for w in want if not w.endswith("?")]
        assert len(need) <= len(got) <= len(want), "%r: %s takes %d arguments" % (self.expr, name, len(want))
        for w, g in zip(want, got):
            assert w.rstrip("?") == g, "%r: %s wants %s, got %s" % (self.expr, name, w, g)
        return FUNCTIONS[name][-1]


def check_expr(expr):
    """Parse a PromQL expression; the metric names it reads."""
    p = Parser(expr)
    p.parse()
    return p.metrics


def check_template(text, where):
    """Go templates in annotations: balanced {{ }} with something in them."""
    depth = 0
    for m in re.finditer(r"\{\{|\}\}", text):
        depth += 1 if m.group() == "{{" else -1
        assert depth in (0, 1), "%s: nested or unbalanced {{ }}" % where
    assert depth == 0, "%s: unclosed {{" % where
    for body in re.findall(r"\{\{(.*?)\}\}", text):
        assert body.strip(), "%s: empty {{ }}" % where
        assert re.match(r"\s*\$(labels\.[a-zA-Z_][a-zA-Z0-9_]*|value|externalLabels\.[a-zA-Z_]\w*)"
                        r"(\s*\|\s*[a-zA-Z]+)*\s*\Z", body), "%s: template %r" % (where, body)


def check_rule_file(path):
    """(names recorded, metric names read) of a rule file, checked strictly."""
    with open(path) as f:
        doc = yaml.safe_load(f)
    assert isinstance(doc, dict) and set(doc) == {"groups"}, "%s: only groups at the top" % path
    groups = doc["groups"]
    assert isinstance(groups, list) and groups, "%s: no groups" % path
    recorded, used, group_names, alert_names = set(), set(), set(), set()
    for g in groups:
        assert isinstance(g, dict) and set(g) <= {"name", "interval", "rules", "limit"}, g
        assert isinstance(g.get("name"), str) and g["name"], "a group without a name"
        assert g["name"] not in group_names, "group %s twice" % g["name"]
        group_names.add(g["name"])
        if "interval" in g:
            assert DURATION_RE.match(str(g["interval"])), "%s: interval" % g["name"]
        assert isinstance(g.get("rules"), list) and g["rules"], "%s: no rules" % g["name"]
        for r in g["rules"]:
            where = "%s: %s" % (g["name"], r.get("record") or r.get("alert"))
            assert isinstance(r, dict), where
            assert ("record" in r) != ("alert" in r), "%s: record or alert, one of them" % where
            assert isinstance(r.get("expr"), str) and r["expr"].strip(), "%s: expr" % where
            used |= check_expr(r["expr"])
            if "record" in r:
                assert set(r) <= {"record", "expr", "labels"}, "%s: keys %s" % (where, set(r))
                assert METRIC_RE.match(r["record"]), "%s: bad record name" % where
                assert r["record"].count(":") == 2, "%s: level:metric:operations" % where
                assert r["record"] not in recorded, "%s: recorded twice" % where
                recorded.add(r["record"])
            else:
                assert set(r) <= {"alert", "expr", "for", "keep_firing_for", "labels", "annotations"}, \
                    "%s: keys %s" % (where, set(r))
                assert LABEL_RE.match(r["alert"]), "%s: bad alert name" % where
                assert r["alert"] not in alert_names, "%s: alert twice" % where
                alert_names.add(r["alert"])
                if "for" in r:
                    assert DURATION_RE.match(str(r["for"])), "%s: for" % where
                assert r.get("labels", {}).get("severity") in ("critical", "warning", "info"), \
                    "%s: labels.severity" % where
                ann = r.get("annotations", {})
                assert isinstance(ann.get("summary"), str), "%s: annotations.summary" % where
                for k, v in ann.items():
                    assert LABEL_RE.match(k) and isinstance(v, str), "%s: annotation %s" % (where, k)
                    check_template(v, "%s annotation %s" % (where, k))
            for k, v in r.get("labels", {}).items():
                assert LABEL_RE.match(k) and not k.startswith("__"), "%s: label %s" % (where, k)
                assert isinstance(v, str), "%s: label %s must be a string" % (where, k)
    return recorded, used
