#!/bin/sh
# The GPU live-run path, exercised on the CPU: packs this build's GStreamer runtime with
# scripts/device/device-pack-gst.sh (--allow-no-cuda), proves the pack runs on its own (its check.sh: `env -i`, a
# fresh registry, every library the processes load taken from the pack), then runs pipelines/gpu-live.sh
# through the pack on a tiny random model for 3 s with the CPU backend and checks personaplex-live-bench's
# summary and raw files:
#   - frames were stepped (3 s is about 37 frames), past the tiny model's 20-frame context, and frames.csv
#     has one row per frame with the element's own count;
#   - the latency query was answered: live, the element's own part 160 ms (one 80 ms frame plus the automatic
#     processing-deadline's 80 ms before its new engine has measured a tick, docs/element.md), and the
#     pipeline's latency covers it;
#   - the counters agree with the per-frame rows (overruns = steps over 80 ms, late buffers = rows with a
#     positive lateness); memory was sampled before, at the start and end, and after;
#   - real time was kept: 0 overruns, 0 late or dropped buffers, verdict PASS. A tiny step takes about 2 ms
#     of an 80 ms frame, but on a shared machine other work can hold the CPU for longer than a frame; the
#     summary measures that (CPU pressure, /proc/pressure/cpu) and above 25 % these real-time results are
#     reported, not asserted (the test suite does not time things: docs/testing.md).
#   - an unknown element property is refused with a message naming it;
#   - --calls 3 model-instance-id=calls: the measured call joins an engine two other live calls tick on; its own
#     latency is one frame + the measured tick p99 + margin + batch-deadline (under 180 ms when the machine is not
#     loaded) and is no lower at the end than at the start; --calls without a model-instance-id is refused.
# Environment (tests/meson.build): PPX_SOURCE_ROOT, PPX_BUILD_ROOT. Exit 77 (skip) without GStreamer's tools.
set -eu
src=${PPX_SOURCE_ROOT:?}
build=${PPX_BUILD_ROOT:?}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ppx-gpu-live-XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
fail () { echo "FAIL: $*" >&2; exit 1; }
for p in gst-launch-1.0 gst-inspect-1.0 ldd pkg-config; do
  command -v "$p" >/dev/null || { echo "SKIP: $p not installed" >&2; exit 77; }
done
# passive OpenMP waits: a spinning worker of the CPU backend competes with the streaming thread on a busy machine
export PPX_GST_REGISTRY="$tmp/registry" OMP_WAIT_POLICY=PASSIVE

"$build/tools/personaplex-make-model" --preset tiny --output-dir "$tmp/model" >/dev/null || fail "personaplex-make-model"
sh "$src/scripts/device/device-pack-gst.sh" --allow-no-cuda --no-check "$build" "$tmp/pack" > "$tmp/pack.log" 2>&1 ||
  { cat "$tmp/pack.log"; fail "device-pack-gst.sh"; }
cat "$tmp/pack.log"
sh "$tmp/pack/check.sh" "$tmp/model" > "$tmp/check.log" 2>&1 || { cat "$tmp/check.log"; fail "the pack's check.sh"; }
cat "$tmp/check.log"
grep -q "^check.sh: OK: .*personaplexduplex in a pipeline" "$tmp/check.log" || fail "check.sh did not run the element"

status=0
sh "$src/pipelines/gpu-live.sh" --pack "$tmp/pack" --model-dir "$tmp/model" --backend cpu --seconds 3 \
  --out "$tmp/out" > "$tmp/run.log" 2>&1 || status=$?
sed -n '/^== personaplex-live-bench: personaplexduplex/,/^-- values/p' "$tmp/run.log"
[ "$status" = 0 ] || [ "$status" = 3 ] || { cat "$tmp/run.log"; fail "gpu-live.sh exited $status"; }
for f in summary.txt frames.csv memory.csv run.log; do
  [ -s "$tmp/out/$f" ] || fail "$f was not written"
done
v () { sed -n "s/^$1=//p" "$tmp/out/summary.txt"; }
num_ge () { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 >= b + 0) }'; }

frames=$(v frames)
[ -n "$frames" ] && [ "$frames" -ge 30 ] || fail "stepped ${frames:-no} frames in 3 s (expected about 37)"
[ "$(v frames_past_context)" -gt 0 ] || fail "no frame past the 20-frame context"
rows=$(($(wc -l < "$tmp/out/frames.csv") - 1))
[ "$rows" = "$frames" ] || fail "frames.csv has $rows rows for $frames frames"
grep -q "the element's stats: $frames)" "$tmp/out/summary.txt" || fail "the element's frame count differs from $frames"
[ "$(v backend)" = cpu ] || fail "backend $(v backend), expected cpu"

[ "$(v latency_live)" = 1 ] || fail "the latency answer is missing or not live"
[ "$(v latency_own_ms)" = 160.000 ] || fail "the element's own latency is $(v latency_own_ms) ms, expected 160 (80 + 80)"
num_ge "$(v latency_pipeline_ms)" "$(v latency_min_ms)" ||
  fail "the pipeline latency $(v latency_pipeline_ms) ms is below the element's answer $(v latency_min_ms) ms"

over_rows=$(awk -F, 'NR > 1 && $4 > 80 { n++ } END { print n + 0 }' "$tmp/out/frames.csv")
late_rows=$(awk -F, 'NR > 1 && $5 != "" && $5 > 0 { n++ } END { print n + 0 }' "$tmp/out/frames.csv")
[ "$(v element_overruns)" = "$over_rows" ] ||
  fail "the element counted $(v element_overruns) overruns, frames.csv has $over_rows steps over 80 ms"
[ "$(v late_buffers)" = "$late_rows" ] ||
  fail "$(v late_buffers) late buffers counted, frames.csv has $late_rows rows with a positive lateness"
for when in before start end after; do
  grep -q "^$when," "$tmp/out/memory.csv" || fail "memory.csv has no '$when' sample"
done

pressure=$(v cpu_pressure_pct)
if num_ge "${pressure:--1}" 25; then
  echo "NOTE: CPU pressure $pressure % during the run (other work held the CPUs): real-time results not asserted:" \
       "overruns $(v element_overruns), late buffers $(v late_buffers), verdict $(v verdict)"
else
  [ "$(v element_overruns)" = 0 ] || fail "$(v element_overruns) steps longer than a frame (CPU pressure ${pressure} %)"
  [ "$(v late_buffers)" = 0 ] || fail "$(v late_buffers) late buffers at the sink (CPU pressure ${pressure} %)"
  [ "$(v sink_dropped)" = 0 ] || fail "the sink dropped $(v sink_dropped) buffers"
  [ "$(v verdict)" = PASS ] && [ "$status" = 0 ] || fail "verdict $(v verdict), exit $status"
fi

if "$tmp/pack/run" personaplex-live-bench --model-dir "$tmp/model" --seconds 1 no-such-property=1 \
    > "$tmp/bad.log" 2>&1; then
  fail "an unknown property was accepted"
fi
grep -q "no writable property 'no-such-property'" "$tmp/bad.log" || { cat "$tmp/bad.log"; fail "the error does not name the property"; }
# --calls: the measured call joins an engine that two other live calls tick on (model-instance-id required)
if "$tmp/pack/run" personaplex-live-bench --model-dir "$tmp/model" --seconds 1 --calls 2 > "$tmp/bad.log" 2>&1; then
  fail "--calls 2 without a model-instance-id was accepted"
fi
grep -q -- "--calls 2 needs model-instance-id" "$tmp/bad.log" || { cat "$tmp/bad.log"; fail "the --calls error is unclear"; }
status=0
"$tmp/pack/run" personaplex-live-bench --model-dir "$tmp/model" --backend cpu --seconds 2 --calls 3 --join-after 1 \
  model-instance-id=calls --output-dir "$tmp/calls" > "$tmp/calls.log" 2>&1 || status=$?
[ "$status" = 0 ] || [ "$status" = 3 ] || { cat "$tmp/calls.log"; fail "personaplex-live-bench --calls 3 exited $status"; }
c () { sed -n "s/^$1=//p" "$tmp/calls/summary.txt"; }
[ "$(c calls)" = 3 ] || fail "calls=$(c calls), expected 3"
[ "$(c frames)" -ge 15 ] || fail "the joining call stepped $(c frames) frames in 2 s"
# its own latency: one frame + the measured tick p99 + margin (>= 10 ms) + batch-deadline (20 ms), and never lower
# at the end than at the start (docs/element.md, "Latency")
num_ge "$(c latency_own_ms)" 110 || fail "the joining call's own latency is $(c latency_own_ms) ms, below 80 + 10 + 20"
num_ge "$(c latency_own_end_ms)" "$(c latency_own_ms)" ||
  fail "the joining call's own latency dropped from $(c latency_own_ms) to $(c latency_own_end_ms) ms"
if num_ge "$(c cpu_pressure_pct)" 25; then
  echo "NOTE: CPU pressure $(c cpu_pressure_pct) % in the --calls run: the measured start not asserted"
else
  # the engine had ticked for a second: the start is measured (a 2 ms tick: well below the 80 ms first guess)
  num_ge 179.999 "$(c latency_own_ms)" || fail "the joining call started from $(c latency_own_ms) ms, not the measured ticks"
fi
echo "gpu-live --calls 3: own latency $(c latency_own_ms) -> $(c latency_own_end_ms) ms," \
     "$(c latency_messages) latency message(s), tick p99 $(c tick_p99_ms) ms, CPU pressure $(c cpu_pressure_pct) %"

echo "gpu-live: $frames frames, latency $(v latency_min_ms) ms (own $(v latency_own_ms)), overruns $(v element_overruns)," \
     "late $(v late_buffers), CPU pressure ${pressure} %, verdict $(v verdict)"
