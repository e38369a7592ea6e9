"""bench/fp8/fp8_runner.py — the FP8 MoE GPU harness's driver: runs the
correctness cases (fp8_checks.py) and the bench grid (moe_fp8_bench.py) in
child processes, so that a kernel which faults (a dead CUDA context) or
hangs costs one case, not the run.

A child runs a list of named cases and reports each ("@@BEGIN id", "@@END id
PASS|FAIL detail"). When it dies or a case outlives its timeout (the child's
process group is killed), that case is recorded as CRASH or TIMEOUT and a new
child takes the cases after it; a kernel that crashed twice is skipped for
the rest of the run. Every phase gets a share of one time budget, so the
whole run fits one device call, and the table comes last.

  python3 fp8_runner.py --lib DIR [--out DIR] [--budget S] [--sanitize]
                        [--small] [--models ...] [--tokens ...]
Writes to --out ($OUT): checks.log, checks.json (every case), protocol.log
(the small suite on the cubin with the pipeline protocol checks), bench.log,
bench.json, fp8_ceilings.json, memcheck.log (--sanitize).
"""
import argparse
import json
import os
import select
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fp8_table  # noqa: E402


class Budget:
    def __init__(self, seconds):
        self.end = time.time() + seconds

    def left(self):
        return self.end - time.time()


def kernel_of(case):
    parts = case.split(":")
    return f"{parts[1]}_{parts[2]}" if parts[0] == "gemm" else parts[0]


def _child(cmd, log):
    log.write(f"$ {' '.join(cmd[:6])} ... ({len(cmd)} args)\n")
    log.flush()
    return subprocess.Popen(cmd, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)


def _kill(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


class Lines:
    """The child's output, line by line, with a time limit per wait (raw
    reads: a buffered reader would hide lines from select)."""

    def __init__(self, proc):
        self.fd, self.buffer, self.eof = proc.stdout.fileno(), b"", False

    def next(self, timeout):
        """A line; "" at the end of the output; None past the timeout."""
        end = time.time() + timeout
        while b"\n" not in self.buffer and not self.eof:
            ready = select.select([self.fd], [], [], max(0.0, end - time.time()))
            if not ready[0]:
                return None
            chunk = os.read(self.fd, 65536)
            self.eof = not chunk
            self.buffer += chunk
        if not self.buffer:
            return ""
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line.decode(errors="replace") + "\n"


class CaseRunner:
    """Runs named cases through children `cmd() + ['--cases', ...]`.

    results: {case: (status, detail)}, status PASS, FAIL, CRASH, TIMEOUT or
    SKIP. A case's time runs from the end of the one before it (a child's
    first case, which starts CUDA and torch, gets first_timeout). A child
    says "@@LAUNCH k" before it runs kernel k: a case that dies, hangs or
    raises is charged to the kernel in flight; a kernel charged twice (a hang
    counts twice) is left out of later cases (`bad`, passed on by cmd()); a
    case whose culprit was another kernel than its own runs once more."""

    def __init__(self, cmd, log, case_timeout, first_timeout, deadline):
        self.cmd, self.log = cmd, log
        self.case_timeout, self.first_timeout = case_timeout, first_timeout
        self.deadline = deadline
        self.results, self.charges, self.retried = {}, {}, set()
        self.bad = set()

    def charge(self, case, culprit, weight):
        culprit = culprit or kernel_of(case)
        self.charges[culprit] = self.charges.get(culprit, 0) + weight
        if self.charges[culprit] >= 2 or culprit != kernel_of(case):
            self.bad.add(culprit)
        if culprit != kernel_of(case) and case not in self.retried:
            self.retried.add(case)  # once more, without the culprit
            return False
        return True

    def finish(self, case, status, detail, culprit=None):
        failed_hard = status in ("CRASH", "TIMEOUT") or (
            status == "FAIL" and detail.startswith("raised"))
        if failed_hard:
            weight = 2 if status == "TIMEOUT" else 1
            if culprit:
                detail += f" [in flight: {culprit}]"
            if not self.charge(case, culprit, weight):
                return
        self.results[case] = (status, detail)

    def run(self, cases):
        pending = list(cases)
        while pending:
            if self.deadline() <= 5:
                for c in pending:
                    self.results[c] = ("SKIP", "out of time")
                break
            self.child(pending)
            pending = [c for c in pending if c not in self.results]
            for c in [c for c in pending if kernel_of(c) in self.bad and
                      c.startswith("gemm")]:
                self.results[c] = ("SKIP", f"kernel {kernel_of(c)} failed "
                                   "hard twice")
            pending = [c for c in pending if c not in self.results]
        return self.results

    def child(self, pending):
        proc = _child(self.cmd() + ["--cases", ",".join(pending)], self.log)
        lines = Lines(proc)
        current, culprit, tail = pending[0], None, []
        limit, started = self.first_timeout, time.time()
        while True:
            wait = min(limit - (time.time() - started), self.deadline())
            line = lines.next(wait)
            if line is None:  # the case outlived its time, or the phase's
                _kill(proc)
                if current and self.deadline() <= 0.5:
                    self.results[current] = ("SKIP", "out of time")
                elif current:
                    self.finish(current, "TIMEOUT", f"over {wait:.0f} s; " +
                                " | ".join(tail[-3:]), culprit)
                return
            if line == "":  # the child ended
                proc.wait()
                if current:
                    self.finish(current, "CRASH", f"rc {proc.returncode}: " +
                                " | ".join(tail[-4:]), culprit)
                return
            self.log.write(line)
            self.log.flush()
            line = line.rstrip("\n")
            if line.startswith("@@BEGIN "):
                current, culprit, tail = line[8:], None, []
            elif line.startswith("@@LAUNCH "):
                culprit = line.split()[1]
                culprit = None if culprit == "none" else culprit
            elif line.startswith("@@END "):
                case, status, detail = (line[6:].split(" ", 2) + ["", ""])[:3]
                self.finish(case, status, detail, culprit)
                current, culprit = None, None
                started, limit = time.time(), self.case_timeout
            else:
                tail.append(line.strip()[:300])


def list_check_cases(small):
    out = subprocess.run([sys.executable, os.path.join(HERE, "fp8_checks.py"),
                          "--list"] + (["--small"] if small else []),
                         capture_output=True, text=True, check=True)
    return out.stdout.split()


def phase_checks(args, budget, out):
    cases = list_check_cases(args.small)
    share = min(args.check_budget, budget.left() - args.reserve())
    end = time.time() + share
    with open(os.path.join(out, "checks.log"), "w") as log:
        runner = CaseRunner(None, log, 20, 45, lambda: end - time.time())
        runner.cmd = lambda: [sys.executable,
                              os.path.join(HERE, "fp8_checks.py"), "--lib",
                              args.lib, "--exclude",
                              ",".join(sorted(runner.bad)) or "-"]
        results = runner.run(cases)
    with open(os.path.join(out, "checks.json"), "w") as f:
        json.dump(results, f, indent=1)
    return cases, results


def phase_bench(args, budget, out, check_results):
    """Ceilings and anchors first, then model x T cases; kernels that crashed
    or hung in the checks are left out."""
    bad = sorted({kernel_of(c) for c, (s, d) in check_results.items()
                  if c.startswith("gemm") and (s in ("CRASH", "TIMEOUT") or
                                               d.startswith("raised"))})
    # T by T across the models: a run cut short still covers every model.
    cases = ["ceilings"] + [f"{m}:{t}" for t in args.tokens
                            for m in args.models] + ["deepgemm"]
    share = budget.left() - (args.sanitize_budget if args.sanitize else 0) - 10
    end = time.time() + share
    with open(os.path.join(out, "bench.log"), "w") as log:
        log.write(f"kernels left out (crashed in the checks): {bad}\n")
        runner = CaseRunner(None, log, 150, 200, lambda: end - time.time())
        runner.bad.update(bad)
        runner.cmd = lambda: [sys.executable,
                              os.path.join(HERE, "moe_fp8_bench.py"), "--lib",
                              args.lib, "--out", out, "--exclude",
                              ",".join(sorted(runner.bad)) or "-"]
        results = runner.run(cases)
    rows, ceil = [], None
    for case in cases:
        status, detail = results.get(case, ("SKIP", ""))
        if status == "PASS":
            data = json.loads(detail)
            if case == "ceilings":
                ceil = data
            elif case == "deepgemm":
                ceil = dict(ceil or {}, deepgemm=data)
            else:
                rows.append(data)
        elif case == "deepgemm":
            ceil = dict(ceil or {}, deepgemm={"error": f"{status} {detail}"})
    with open(os.path.join(out, "bench.json"), "w") as f:
        json.dump({"ceilings": ceil, "rows": rows, "cases": results,
                   "left_out": sorted(runner.bad)}, f, indent=1)
    return ceil, rows, results


def phase_protocol(args, budget, out):
    """The small suite on the cubin built with the pipeline protocol checks
    (TAILOR_PIPELINE_CHECKS: a broken handoff or a bad work item traps with
    a message naming it)."""
    cases = list_check_cases(small=True)
    end = time.time() + min(args.protocol_budget, budget.left() - 5)
    with open(os.path.join(out, "protocol.log"), "w") as log:
        runner = CaseRunner(None, log, 20, 45, lambda: end - time.time())
        runner.cmd = lambda: [sys.executable,
                              os.path.join(HERE, "fp8_checks.py"), "--lib",
                              args.lib, "--cubin", "moe_fp8_checked.cubin",
                              "--exclude", ",".join(sorted(runner.bad)) or "-"]
        results = runner.run(cases)
    bad = [f"{c} {s}" for c, (s, _) in results.items() if s != "PASS"]
    return (f"{len(cases) - len(bad)} of {len(cases)} pass" +
            (f"; not: {', '.join(bad[:6])}" if bad else ""))


def phase_memcheck(args, budget, out):
    """compute-sanitizer memcheck over the small suite."""
    tool = "/usr/local/cuda/bin/compute-sanitizer"
    for path in os.environ.get("PATH", "").split(":"):
        if os.path.exists(os.path.join(path, "compute-sanitizer")):
            tool = os.path.join(path, "compute-sanitizer")
    if not os.path.exists(tool):
        return {}, "not run: no compute-sanitizer on PATH or in /usr/local/cuda"
    cases = list_check_cases(small=True)
    end = time.time() + min(args.sanitize_budget, budget.left() - 5)
    with open(os.path.join(out, "memcheck.log"), "w") as log:
        runner = CaseRunner(None, log, 60, 90, lambda: end - time.time())
        runner.cmd = lambda: [tool, "--tool", "memcheck", sys.executable,
                              os.path.join(HERE, "fp8_checks.py"), "--lib",
                              args.lib, "--exclude",
                              ",".join(sorted(runner.bad)) or "-"]
        results = runner.run(cases)
    errors, processes = 0, 0
    with open(os.path.join(out, "memcheck.log")) as log:
        for line in log:
            if "ERROR SUMMARY:" in line:
                processes += 1
                errors += int(line.split("ERROR SUMMARY:")[1].split()[0])
    passed = sum(1 for s, _ in results.values() if s == "PASS")
    return results, (f"{errors} errors in {processes} processes, {passed} of "
                     f"{len(cases)} cases pass")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default=HERE)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--budget", type=float, default=520)
    ap.add_argument("--check-budget", type=float, default=170)
    ap.add_argument("--sanitize", action="store_true")
    ap.add_argument("--sanitize-budget", type=float, default=90)
    ap.add_argument("--protocol-budget", type=float, default=40)
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--no-bench", action="store_true")
    ap.add_argument("--no-checks", action="store_true")
    ap.add_argument("--models", nargs="*", default=fp8_table.MODELS)
    ap.add_argument("--tokens", nargs="*", type=int, default=fp8_table.TOKENS)
    args = ap.parse_args()
    args.reserve = lambda: (0 if args.no_bench else 200) + (
        args.sanitize_budget if args.sanitize else 0) + args.protocol_budget
    budget = Budget(args.budget)
    os.makedirs(args.out, exist_ok=True)
    cases, checks, protocol = [], {}, None
    if not args.no_checks:
        cases, checks = phase_checks(args, budget, args.out)
        try:
            protocol = phase_protocol(args, budget, args.out)
        except Exception as ex:  # the tables still come
            protocol = f"failed: {ex!r}"
        print(f"checks done, {budget.left():.0f} s left", flush=True)
    ceil, rows = None, []
    if not args.no_bench:
        try:
            ceil, rows, _ = phase_bench(args, budget, args.out, checks)
        except Exception as ex:  # the checks' table still comes
            print(f"bench failed: {ex!r}", flush=True)
        print(f"bench done, {budget.left():.0f} s left", flush=True)
    memcheck = None
    if args.sanitize:
        try:
            _, memcheck = phase_memcheck(args, budget, args.out)
        except Exception as ex:  # the tables still come
            memcheck = f"failed: {ex!r}"
    # The tables last, where the device call's output tail shows them.
    print("")
    if cases:
        print("\n".join(fp8_table.check_summary(cases, checks)))
        print(f"protocol-checked cubin, small suite: {protocol}")
    if memcheck:
        print(f"memcheck (small suite): {memcheck}")
    if not args.no_bench:
        print("\n".join(fp8_table.bench_table(ceil, rows)))


if __name__ == "__main__":
    main()
