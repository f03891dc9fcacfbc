#!/bin/sh
# What operators look at (issue 27; docs/fleet.md, "Dashboard and alerts"):
#   1. pipelines/fleet/grafana-dashboard.json is valid JSON, a dashboard whose panels each query something, and
#      every personaplex_* family it and pipelines/fleet/prometheus-rules.yml use is one a running
#      personaplex-server's /metrics has (CPU, tiny model, 127.0.0.1);
#   2. `promtool check rules` accepts the rules and `promtool test rules` (tests/fleet/prometheus-rules-test.yml)
#      shows each alert fire on the series that should raise it, and none on a healthy server.
# Exit 77 (skip) without python3, or without promtool (Debian's prometheus; scripts/install-deps.sh --tests) once
# part 1 passed. Environment (tests/meson.build): PPX_SOURCE_ROOT, PPX_BUILD_ROOT.
set -u
src=${PPX_SOURCE_ROOT:?}
build=${PPX_BUILD_ROOT:?}
dash=$src/pipelines/fleet/grafana-dashboard.json
rules=$src/pipelines/fleet/prometheus-rules.yml
ppx_name=monitoring
# shellcheck source=tests/server/server-script.sh
. "$(dirname "$0")/server/server-script.sh"

# the families a server exports
ppx_make_model
ppx_serve "$tmp/server.log" --max-sessions 2
ppx_get "http://127.0.0.1:$port/metrics" > "$tmp/metrics.txt" || fail "/metrics"
ppx_stop

# 1. the dashboard, and the families both files use
python3 - "$dash" "$rules" "$tmp/metrics.txt" <<'PYEOF' || fail "the dashboard or the rules: see above"
import json, re, sys
dash = json.load(open(sys.argv[1]))  # raises on invalid JSON
rules_text = open(sys.argv[2]).read()
families = set(re.findall(r"^# TYPE (\S+) ", open(sys.argv[3]).read(), re.M))
assert dash.get("title") and dash.get("uid") and dash.get("panels"), "not a dashboard"
exprs = []
for p in dash["panels"]:
    assert p.get("title") and p.get("targets"), "panel %r has no title or no query" % p.get("id")
    for t in p["targets"]:
        assert t.get("expr"), "panel %r: a target without a query" % p["title"]
        exprs.append(t["expr"])
def used(text):
    return {re.sub(r"_(bucket|sum|count)$", "", n) for n in re.findall(r"\bpersonaplex_[a-z_]+", text)}
missing = (used(" ".join(exprs)) | used(rules_text)) - families
assert not missing, "families no server exports: %s" % sorted(missing)
for want in ("personaplex_capacity_calls", "personaplex_tick_duration_seconds", "personaplex_input_dropped_seconds_total",
             "personaplex_calls_refused_total", "personaplex_sessions_active"):
    assert want in used(" ".join(exprs)), "the dashboard does not show %s" % want
print("1. dashboard: %d panels, %d queries; the dashboard and the rules use %d of the server's %d families" %
      (len(dash["panels"]), len(exprs), len(used(" ".join(exprs)) | used(rules_text)), len(families)))
PYEOF

# 2. promtool
command -v promtool > /dev/null || { echo "SKIP: promtool not installed (Debian's prometheus; scripts/install-deps.sh --tests)" >&2; exit 77; }
promtool check rules "$rules" > "$tmp/check.txt" 2>&1 || { cat "$tmp/check.txt" >&2; fail "promtool check rules"; }
# rule_files in the test are relative to the test file
(cd "$(dirname "$0")/fleet" && promtool test rules prometheus-rules-test.yml) > "$tmp/test.txt" 2>&1 ||
  { cat "$tmp/test.txt" >&2; fail "promtool test rules"; }
echo "2. promtool: $(grep -o '[0-9]* rules found' "$tmp/check.txt"), rule tests $(grep -o 'SUCCESS' "$tmp/test.txt" | head -1)"
