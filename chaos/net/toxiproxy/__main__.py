"""``python -m chaos.net.toxiproxy [--host 127.0.0.1] [--port 8474] [--port-file PATH]``:
run the embedded Toxiproxy server until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading

from chaos.net.toxiproxy.server import serve


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos.net.toxiproxy", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8474, help="0: any free port")
    parser.add_argument("--port-file", help="write the API's port here once it listens")
    args = parser.parse_args(argv)
    httpd, state = serve(args.host, args.port)
    port = httpd.server_address[1]
    if args.port_file:
        tmp = args.port_file + ".tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(str(port))
        os.replace(tmp, args.port_file)  # a reader never sees half a number
    print(f"toxiproxy API on http://{args.host}:{port}", flush=True)

    def _stop(signum: int, frame: object) -> None:
        threading.Thread(target=httpd.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        httpd.serve_forever(poll_interval=0.2)
    finally:
        state.shutdown()
        httpd.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
