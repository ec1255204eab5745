"""The monitor page on a busy session, measured in headless Chromium for minutes (a script, not
a test: `make test` never runs it; tests/drivers/http/test_monitor_busy.py checks the bounds
without timing).

A ForEach of trivial steps with durability="step" runs in a worker process of its own (as
beside `tarry serve`), sharing a SQLite store with the server, paced to about `--rate` events
a second, while the page follows it. Every few seconds the script clicks
between two sessions' rows and times the click until the detail shows the clicked session
(click latency, goal <= 200 ms throughout), and reads the tab's JS heap after a garbage
collection (CDP `Performance.getMetrics`; goal: growth < 20 MB) and the DOM's element count.

    .venv/bin/python benchmarks/monitor_busy.py              # 2 minutes at ~1,000 events/s
    .venv/bin/python benchmarks/monitor_busy.py --seconds 10 # a smoke run
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import tarry
from tarry import Flow, ForEach

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support import live  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]
EVENTS_PER_ITEM = 4  # iteration started, node started, node completed, iteration completed
MB = 1024 * 1024


# In the page: from a click (its event's timestamp) to the next frame painted after the
# detail shows the clicked session.
PROBE = """
window.__lastClick = null;
document.addEventListener("click", (e) => {
  const t0 = e.timeStamp, row = e.target.closest("tr[data-session]");
  if (!row) return;
  const want = row.dataset.session;
  const check = () => {
    if (document.getElementById("detail-id").textContent === want) {
      requestAnimationFrame(() => {
        window.__lastClick = performance.now() - t0;
        const fetched = performance.getEntriesByType("resource").filter((r) => r.name.endsWith("/api/sessions/" + want));
        window.__lastFetch = fetched.length ? fetched[fetched.length - 1].duration : null;
        performance.clearResourceTimings();
      });
    } else requestAnimationFrame(check);
  };
  check();
}, true);
"""


def pct(values: list[float], p: float) -> float:
    return values[min(len(values) - 1, max(0, round(len(values) * p / 100) - 1))]


def busy_flow(items: int, pause: float, stop: Path) -> Flow:
    """A ForEach of `items` trivial steps, each sleeping `pause` until the file `stop` exists."""
    state = {"stopped": False}

    def step(ctx):
        if not state["stopped"]:
            if stop.exists():
                state["stopped"] = True
            else:
                time.sleep(pause)
        return ctx.index

    return Flow("busy", [ForEach("items", list(range(items)), step)])


def worker(db: str, items: int, pause: float, stop: Path) -> None:
    """The busy session, run in a process of its own (as a worker beside `tarry serve`)."""
    flow = busy_flow(items, pause, stop)
    tarry.Runtime(store=db, flows=[flow]).run(flow, durability="step")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--rate", type=float, default=1000.0, help="events a second, about")
    parser.add_argument("--every", type=float, default=3.0, help="seconds between samples")
    parser.add_argument(
        "--worker", nargs=4, metavar=("DB", "ITEMS", "PAUSE", "STOP"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.worker:
        db, items, pause, stop = args.worker
        worker(db, int(items), float(pause), Path(stop))
        return 0

    pause = EVENTS_PER_ITEM / args.rate
    items = int(args.seconds * args.rate / EVENTS_PER_ITEM * 2) + 1000
    tmp = Path(tempfile.mkdtemp())
    db, stop = f"sqlite:///{tmp}/busy.db", tmp / "stop"
    quick = Flow("quick", [lambda ctx: "done"])
    rt = tarry.Runtime(store=db, flows=[quick])
    other = rt.run(quick).session_id
    runner = subprocess.Popen(
        [sys.executable, __file__, "--worker", db, str(items), str(pause), str(stop)]
    )
    while not rt.sessions(flow="busy"):
        time.sleep(0.05)
    sid = rt.sessions(flow="busy")[0].session_id

    from playwright.sync_api import sync_playwright
    from tarry.drivers.http import create_app

    clicks: list[float] = []
    inpage: list[float] = []
    fetches: list[float] = []  # of those, the detail's GET /api/sessions/{id}
    samples: list[tuple[float, int, int, int]] = []  # seconds, heap, elements, events
    with live(create_app(rt, poll_interval=0.2)) as base, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1360, "height": 860})
        page.set_default_timeout(120_000)
        cdp = page.context.new_cdp_session(page)
        cdp.send("Performance.enable")

        def sample(t: float) -> None:
            cdp.send("HeapProfiler.collectGarbage")
            metrics = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
            elements = page.evaluate("document.getElementsByTagName('*').length")
            samples.append((t, int(metrics["JSHeapUsedSize"]), elements, seq()))

        def seq() -> int:
            return rt.session(sid).state.last_seq

        page.add_init_script(PROBE)
        page.goto(f"{base}/#session={sid}")
        page.wait_for_selector("#timeline li")
        start = time.monotonic()
        sample(0.0)
        target = [sid, other]
        while time.monotonic() - start < args.seconds:
            for who in target:
                t0 = time.perf_counter()
                page.click(f'#sessions tr[data-session="{who}"]')
                page.wait_for_function(
                    f"() => document.getElementById('detail-id').textContent === {who!r}"
                )
                clicks.append(time.perf_counter() - t0)
                inpage.append(page.evaluate("window.__lastClick"))
                fetches.append(page.evaluate("window.__lastFetch"))
            page.wait_for_timeout(args.every * 1000)
            sample(time.monotonic() - start)
        browser.close()
    stop.touch()
    runner.wait(300)

    first, last = samples[0], samples[-1]
    rate = (last[3] - first[3]) / max(1e-9, last[0] - first[0])
    growth = (last[1] - first[1]) / MB
    peak = (max(s[1] for s in samples) - first[1]) / MB
    ms = sorted(x for x in inpage if x is not None)
    driven = sorted(c * 1000 for c in clicks)
    print(f"session events/s (stored):   {rate:,.0f}")
    print(f"clicks:                      {len(ms)}")
    print(
        f"click latency p50/p95/max:   {pct(ms, 50):.0f} / {pct(ms, 95):.0f} / {ms[-1]:.0f} ms (goal <= 200 ms)"
    )
    print("  (in the page: the click event to the first frame painted with the clicked session)")
    print(
        f"  through Playwright p50/max: {pct(driven, 50):.0f} / {driven[-1]:.0f} ms (adds the driver's round trips)"
    )
    got = sorted(f for f in fetches if f is not None)
    if got:
        print(
            f"  of which GET the session p50/max: {pct(got, 50):.0f} / {got[-1]:.0f} ms (the server)"
        )
    print(f"JS heap start/end:           {first[1] / MB:.1f} / {last[1] / MB:.1f} MB")
    print(f"JS heap growth end/peak:     {growth:.1f} / {peak:.1f} MB (goal < 20 MB)")
    print(f"DOM elements max:            {max(s[2] for s in samples)}")
    ok = ms[-1] <= 200 and peak < 20
    print("goals met" if ok else "goals NOT met")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
