"""The files an operator loads into Prometheus and Grafana
(docs/observability.md, "Prometheus dashboard and rules"): the rule file passes a
strict checker (and `promtool check rules` where promtool is installed),
the Prometheus dashboard's JSON and queries parse, the Kubernetes scrape
settings point where the metrics are, and every metric any of them names is
on a running stack's /metrics (or recorded by a rule).
"""
import json
import os
import shutil
import subprocess

import pytest
import yaml

import promql_check
from test_metrics import madmin, mstack, scrape_api, scrape_controller  # noqa: F401 - fixtures

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
RULES = os.path.join(REPO, "docs", "dashboards", "orchard-rules.yml")
DASHBOARD = os.path.join(REPO, "docs", "dashboards", "orchard-prometheus.json")
SERVICE_MONITOR = os.path.join(REPO, "k8s", "monitoring", "servicemonitor.yaml")
API_MANIFEST = os.path.join(REPO, "k8s", "base", "api.yaml")
DS = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}


def dashboard():
    with open(DASHBOARD) as f:
        return json.load(f)


def dashboard_exprs(dash):
    for panel in dash["panels"]:
        for target in panel.get("targets", []):
            yield panel["title"], target["expr"]
    for ann in dash["annotations"]["list"]:
        if "expr" in ann:
            yield ann["name"], ann["expr"]


def test_the_rule_file_passes_the_strict_checker():
    recorded, used = promql_check.check_rule_file(RULES)
    assert len(recorded) >= 10 and len(used) >= 10


@pytest.mark.skipif(shutil.which("promtool") is None,
                    reason="promtool is not installed (Debian ships it only inside the prometheus server package)")
def test_promtool_accepts_the_rule_file():
    r = subprocess.run(["promtool", "check", "rules", RULES], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_checker_refuses_what_promtool_refuses(tmp_path):
    good = {"groups": [{"name": "g", "rules": [
        {"record": "a:b:rate5m", "expr": "sum(rate(x_total[5m]))"},
        {"alert": "A", "expr": "a:b:rate5m > 1", "for": "5m", "labels": {"severity": "warning"},
         "annotations": {"summary": "{{ $labels.job }} at {{ $value | humanize }}"}}]}]}

    def check(doc):
        p = tmp_path / "rules.yml"
        p.write_text(yaml.safe_dump(doc))
        return promql_check.check_rule_file(str(p))

    check(good)
    bad_exprs = ["rate(x_total)", "sum(rate(x_total[5m])", "x_total[5m] + 1", "histogram_quantile(x_bucket)",
                 "nosuchfunc(x)", "x{a=b}", "x{a=~\"(\"}", "sum by (le (x)", "x_total[5q]", "x y",
                 "rate(x_total[5m]) and 1", "sum(x_total[5m])", "x > bool", "abs(x) by (a)"]
    for expr in bad_exprs:
        doc = json.loads(json.dumps(good))
        doc["groups"][0]["rules"][0]["expr"] = expr
        with pytest.raises(AssertionError):
            check(doc)
    mutations = [
        lambda d: d["groups"][0]["rules"][0].update(alert="B"),               # record and alert
        lambda d: d["groups"][0]["rules"][1].update(**{"for": "5 minutes"}),
        lambda d: d["groups"][0]["rules"][1].update(labels={}),               # no severity
        lambda d: d["groups"][0]["rules"][1]["annotations"].update(summary="{{ $value"),
        lambda d: d["groups"][0]["rules"][0].update(record="a-b"),
        lambda d: d["groups"][0]["rules"].append(dict(d["groups"][0]["rules"][0])),   # twice
        lambda d: d["groups"].append(dict(d["groups"][0])),                   # group twice
        lambda d: d["groups"][0].update(extra=1),
        lambda d: d.update(other=1),
    ]
    for mutate in mutations:
        doc = json.loads(json.dumps(good))
        mutate(doc)
        with pytest.raises(AssertionError):
            check(doc)


def test_the_dashboard_parses_and_every_query_does():
    dash = dashboard()
    assert [i["name"] for i in dash["__inputs"]] == ["DS_PROMETHEUS"]
    assert dash["__inputs"][0]["pluginId"] == "prometheus"
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)) and len(ids) >= 20
    assert dash["uid"] != "orchard-overview"      # the SQL dashboard's
    for panel in dash["panels"]:
        grid = panel["gridPos"]
        assert 0 <= grid["x"] and grid["x"] + grid["w"] <= 24, panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == DS, panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert panel["targets"] and len(refs) == len(set(refs)), panel["title"]
        for t in panel["targets"]:
            assert t["datasource"] == DS, panel["title"]
    exprs = list(dashboard_exprs(dash))
    assert len(exprs) >= 30
    for title, expr in exprs:
        try:
            promql_check.check_expr(expr)
        except AssertionError as e:
            raise AssertionError("panel %r: %s" % (title, e))


def test_kubernetes_scrape_settings_point_at_the_metrics():
    with open(API_MANIFEST) as f:
        dep = [d for d in yaml.safe_load_all(f) if d and d["kind"] == "Deployment"][0]
    ann = dep["spec"]["template"]["metadata"]["annotations"]
    port = dep["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"]
    assert ann["prometheus.io/scrape"] == "true" and ann["prometheus.io/scheme"] == "https"
    assert ann["prometheus.io/path"] == "/v1/metrics" and ann["prometheus.io/port"] == str(port)
    with open(SERVICE_MONITOR) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    (sm,) = [d for d in docs if d["kind"] == "ServiceMonitor"]
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert sm["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/name": "orchard-api"}
    (ep,) = sm["spec"]["endpoints"]
    assert ep["port"] == "https" and ep["path"] == "/v1/metrics" and ep["scheme"] == "https"
    assert ep["authorization"]["credentials"]["name"], "the admin key comes from a Secret"
    assert ep["tlsConfig"]["ca"]["secret"]["name"]


def test_every_metric_named_exists_on_a_running_stack(mstack, madmin):  # noqa: F811
    """Rules and dashboard may name only what orchard-api and
    orchard-controller expose, or what a rule records."""
    exposed = set()
    for fams in (scrape_api(mstack, madmin), scrape_controller(mstack)):
        for name, fam in fams.items():
            exposed.add(name)
            if fam.type == "histogram":
                exposed |= {name + "_bucket", name + "_sum", name + "_count"}
    recorded, used = promql_check.check_rule_file(RULES)
    for _, expr in dashboard_exprs(dashboard()):
        used |= promql_check.check_expr(expr)
    missing = sorted(used - exposed - recorded)
    assert not missing, "named but not on /metrics nor recorded: %s" % missing
    # And the check is not vacuous: both services' families are used.
    assert any(n.startswith("orchard_api_") for n in used)
    assert any(n.startswith("orchard_controller_") for n in used)
    assert {"process_cpu_seconds_total", "orchard_build_info"} <= used
