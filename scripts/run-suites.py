#!/usr/bin/env python3
"""Runs the workspace's test binaries, several at a time, against one cluster.

`cargo test` runs its test binaries one after another. Most of this
project's suites spend their time waiting on an API server (a Pod to be
bound, a garbage collector, a 30 s outage of a private control plane), so
they are run side by side instead:

    cargo test --no-run --message-format=json -p ... > artifacts.json
    scripts/run-suites.py [--jobs N] artifacts.json     # N at a time (default 2)

Each binary is run as cargo runs it (in its package's directory, with
`CARGO_MANIFEST_DIR` and `CARGO`), its output kept and printed whole when it
ends. The suites in `SHARED` touch cluster-wide objects other suites touch
too (the `greeter-webhooks` and `strict-webhooks` configurations and their
CRDs, cluster-scoped Tenants, Nodes the zone scheduler sees, the API
server's own request counters): they run one after another, in one lane,
beside the others. A new suite that installs or deletes something
cluster-wide belongs in `SHARED`.

Prints one closing line over every suite (`tests: N passed, M failed`),
names the suites that failed with the command that runs one again, and
exits non-zero when a suite failed. How long each suite took is kept in
`$CAPSTAN_CACHE/suite-seconds.json`: the next run starts the longest first.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

# The suites that share cluster-wide objects, in the order they run: the
# `greeter-webhooks` and `strict-webhooks` configurations and CRDs,
# cluster-scoped Tenants, RoleBindings and SelfSubjectAccessReviews counted
# on the API server (`hotload`, `tenant` count them; the others cause
# them).
SHARED = [
    "e2e_command",
    "generate",
    "fleet",
    "webhook_lifecycle",
    "webhook_policy",
    "webhooks",
    "webhook_ownership",
    "webhook_callers",
    "canary_webhooks",
    "tenant",
    "hotload",
    "idle",
    "hostile",
]

# Suites that start only once another has ended: the Nodes these create
# would be seen by the zone scheduler of `e2e_command`, whose scenarios
# expect to see their own alone.
AFTER = {"scheduler": "e2e_command", "traces": "e2e_command"}

# Seconds each suite took in a cold run (`traces` and `alertmanager_harness`
# build their Go tools then), for the order of a first run (longest first);
# replaced by what this machine measured once it has.
DEFAULT_SECONDS = {
    "traces": 280,
    "e2e_command": 250,
    "e2e_runs": 200,
    "silences": 107,
    "cluster": 105,
    "generate": 81,
    "new_command": 61,
    "alertmanager_harness": 55,
    "run": 51,
    "polyglot": 44,
    "oci": 31,
    "hostile_admission": 29,
    "faults": 27,
    "dev_command": 20,
}

RESULT = re.compile(r"^test result: \w+\. (\d+) passed; (\d+) failed")


class Suite:
    """One test binary of one package."""

    def __init__(self, artifact):
        target = artifact["target"]
        self.name = target["name"]
        self.kind = target["kind"][0]
        self.executable = artifact["executable"]
        self.directory = str(Path(artifact["manifest_path"]).parent)
        # `path+file:///…/host#capstan-host@0.1.0`, or `…/greeter#0.1.0`
        # when the package is named as its directory.
        fragment = artifact["package_id"].rpartition("#")[2]
        self.package = fragment.partition("@")[0] if "@" in fragment else Path(self.directory).name
        self.label = f"{self.package}/{self.name}" if self.kind == "test" else f"{self.package} ({self.kind})"
        self.seconds = 0.0
        self.status = None
        self.passed = 0
        self.failed = 0
        self.output = ""

    def rerun(self):
        """The command that runs this suite again on its own."""
        if self.kind == "test":
            return f"cargo test -p {self.package} --test {self.name}"
        return f"cargo test -p {self.package} --{'lib' if self.kind == 'lib' else 'bin ' + self.name}"

    def run(self, libtest_args):
        env = dict(os.environ, CARGO_MANIFEST_DIR=self.directory, CARGO=shutil.which("cargo") or "cargo")
        start = time.monotonic()
        with tempfile.TemporaryFile(mode="w+") as out:
            self.status = subprocess.call(
                [self.executable, *libtest_args],
                cwd=self.directory,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
            out.seek(0)
            self.output = out.read()
        self.seconds = time.monotonic() - start
        for line in self.output.splitlines():
            m = RESULT.match(line)
            if m:
                self.passed += int(m.group(1))
                self.failed += int(m.group(2))
        if self.status != 0 and self.failed == 0:
            # It ended before libtest could say (a crash, a signal).
            self.failed = 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("artifacts", help="the output of `cargo test --no-run --message-format=json`")
    # Two: measured side by side on the 2-core machine (same binaries, same
    # cluster), two at a time ran the suites in 565 s and three in 620 s;
    # they are CPU-bound there, and a third job only adds contention.
    parser.add_argument("--jobs", type=int, default=int(os.environ.get("CAPSTAN_TEST_JOBS", "2")))
    parser.add_argument("--count-also", metavar="FILE", help="libtest output run before (the doc tests), counted in the closing line")
    parser.add_argument("libtest", nargs="*", help="arguments for every test binary (after --)")
    args = parser.parse_args()

    suites = []
    for line in Path(args.artifacts).read_text().splitlines():
        if not line.startswith("{"):
            continue
        message = json.loads(line)
        if message.get("reason") == "compiler-artifact" and message.get("profile", {}).get("test") and message.get("executable"):
            suites.append(Suite(message))
    if not suites:
        sys.exit("run-suites: no test binaries in " + args.artifacts)

    cache = Path(os.environ.get("CAPSTAN_CACHE", Path.home() / ".cache/capstan")) / "suite-seconds.json"
    try:
        known = json.loads(cache.read_text())
    except (OSError, ValueError):
        known = {}
    expected = lambda s: known.get(s.label, DEFAULT_SECONDS.get(s.name, 10))  # noqa: E731

    lane = [s for name in SHARED for s in suites if s.kind == "test" and s.name == name]
    pool = sorted((s for s in suites if s not in lane), key=expected, reverse=True)
    lock = threading.Condition()
    started = time.monotonic()
    ended = set()

    def report(suite):
        with lock:
            ended.add(suite.name)
            lock.notify_all()
            verdict = "ok" if suite.status == 0 else f"FAILED (exit {suite.status})"
            print(f"\n== suite {suite.label}: {verdict} in {suite.seconds:.0f}s (at {time.monotonic() - started:.0f}s)")
            print(suite.output, end="" if suite.output.endswith("\n") else "\n", flush=True)

    def run_lane():
        for suite in lane:
            suite.run(args.libtest)
            report(suite)

    def ready(suite):
        after = AFTER.get(suite.name)
        return after is None or after in ended or not any(s.name == after for s in suites)

    def run_pool():
        while True:
            with lock:
                while pool and not any(ready(s) for s in pool):
                    lock.wait()
                if not pool:
                    return
                suite = next(s for s in pool if ready(s))
                pool.remove(suite)
            suite.run(args.libtest)
            report(suite)

    if args.jobs <= 1:
        # One at a time: the lane, then the rest.
        workers = [threading.Thread(target=lambda: (run_lane(), run_pool()))]
    else:
        workers = [threading.Thread(target=run_lane)] + [threading.Thread(target=run_pool) for _ in range(args.jobs - 1)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()

    known.update({s.label: round(s.seconds, 1) for s in suites if s.status == 0})
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps(known, indent=1, sort_keys=True))
    except OSError:
        pass

    failed = [s for s in suites if s.status != 0]
    print(f"\n== suites: {len(suites)} in {time.monotonic() - started:.0f}s, {args.jobs} at a time")
    for s in sorted(suites, key=lambda s: -s.seconds)[:8]:
        print(f"   {s.seconds:6.0f}s  {s.label}")
    for s in failed:
        print(f"failed: {s.label} (exit {s.status}); again: {s.rerun()}")
    passed, failed_tests = sum(s.passed for s in suites), sum(s.failed for s in suites)
    if args.count_also:
        for line in Path(args.count_also).read_text(errors="replace").splitlines():
            m = RESULT.match(line)
            if m:
                passed, failed_tests = passed + int(m.group(1)), failed_tests + int(m.group(2))
    print(f"tests: {passed} passed, {failed_tests} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
