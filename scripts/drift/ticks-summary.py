#!/usr/bin/env python3
"""The ticks of a server's log at GST_DEBUG=personaplexticker:5, by stretch of the run (docs/server.md, "Clocks that
drift"): ticks per 80 ms period, rows a tick, ticks that left a member out, how long the oldest frame waited,
catch-up ticks.

  scripts/drift/ticks-summary.py SERVER.log [STRETCH_S] [--calls N]

Only the ticks from the first with N rows (--calls, default: the most rows seen) to the last count; stretches of
STRETCH_S seconds (default 10) from the first of them."""
import os, sys, statistics

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'pipelines', 'fleet'))
from tickerlog import TICK, lines  # noqa: E402


def ticks(path):
    out = []
    for t, line in lines(path):
        r = TICK.search(line)
        if r:
            out.append(dict(t=t, catch_up=r.group(1) != 'tick', rows=int(r.group(2)), missed=int(r.group(4)),
                            members=int(r.group(5)), waited=float(r.group(7)), ran=float(r.group(8))))
    return out


def main():
    args = sys.argv[1:]
    calls = None
    if '--calls' in args:
        i = args.index('--calls')
        calls = int(args[i + 1])
        del args[i:i + 2]
    path = args[0]
    stretch = float(args[1]) if len(args) > 1 else 10.0
    tk = ticks(path)
    if not tk:
        print('no ticks in %s' % path)
        return
    calls = calls or max(t['rows'] for t in tk)
    at = [i for i, t in enumerate(tk) if t['rows'] == calls]
    if not at:
        print('no tick of %d rows' % calls)
        return
    full = tk[at[0]:at[-1] + 1]
    t0, t1 = full[0]['t'], full[-1]['t']
    print('%d ticks from the first of all %d calls to the last, %.1f s' % (len(full), calls, t1 - t0))
    k = 0
    while t0 + k * stretch < t1:
        a, b = t0 + k * stretch, min(t0 + (k + 1) * stretch, t1)
        s = [t for t in full if a <= t['t'] < b]
        k += 1
        if not s or b - a < 1:
            continue
        periods = (b - a) / 0.080
        plain = [t for t in s if not t['catch_up']]
        waits = sorted(t['waited'] for t in plain)
        print('%5.0f-%3.0f s: %.2f ticks a period (%d catch-up), rows p50 %d min %d, %d of %d ticks left members out '
              '(%d member-ticks missed), oldest frame waited p50 %.1f p90 %.1f max %.1f ms, ran p50 %.1f ms' % (
                  a - t0, b - t0, len(s) / periods, len(s) - len(plain),
                  statistics.median(t['rows'] for t in s), min(t['rows'] for t in s),
                  sum(1 for t in plain if t['rows'] < calls), len(plain), sum(t['missed'] for t in plain),
                  statistics.median(waits), waits[int(0.9 * (len(waits) - 1))], waits[-1],
                  statistics.median(t['ran'] for t in s)))


main()
