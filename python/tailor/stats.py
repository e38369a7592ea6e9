"""python -m tailor.stats: tailor's stats from the command line.

  python -m tailor.stats --serve [--addr 127.0.0.1:9464] [--backend cpu]
      a process that only runs the HTTP endpoint (/metrics, /stats,
      /healthz) of one runtime, until SIGINT or SIGTERM
  python -m tailor.stats [--prometheus] [--backend cpu]
      prints one snapshot (JSON, or the Prometheus text)

In a server, set Runtime(stats_addr=...) or $TAILOR_STATS_ADDR instead: the
endpoint then serves the server's own runtimes. `tailor.stats(runtime)`
(this module is callable as that function) returns a snapshot as a dict.
"""

import argparse
import json
import signal
import sys
import threading
import types

from tailor import _runtime


class _CallableModule(types.ModuleType):
    """Keeps tailor.stats(...) a function after `import tailor.stats`."""

    def __call__(self, runtime=None):
        return _runtime.stats(runtime)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m tailor.stats",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--serve", action="store_true",
                        help="run the HTTP endpoint until interrupted")
    parser.add_argument("--addr", default="127.0.0.1:9464",
                        help="host:port to listen on (port 0: a free one)")
    parser.add_argument("--backend", default="auto",
                        choices=["auto", "cpu", "cuda"])
    parser.add_argument("--device-index", type=int, default=0)
    parser.add_argument("--prometheus", action="store_true",
                        help="print the Prometheus text, not JSON")
    args = parser.parse_args(argv)
    runtime = _runtime.Runtime(
        backend=args.backend, device_index=args.device_index,
        stats_addr=args.addr if args.serve else None, log_level="warn")
    if not args.serve:
        print(runtime.stats_prometheus() if args.prometheus
              else json.dumps(runtime.stats(), indent=2))
        return 0
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    print(f"tailor stats endpoint: http://{runtime.stats_address}/metrics "
          f"({runtime.backend}, {runtime.device})", flush=True)
    stop.wait()
    runtime.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
else:
    sys.modules[__name__].__class__ = _CallableModule
