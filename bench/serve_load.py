"""Load on ``kbpack serve``: N concurrent HTTP clients for a bounded time, against the fixtures
pack and a 100k-chunk synthetic pack, in bm25 and hybrid mode.

For each pack and mode, measured in the same run, one after the other:

* **serve**: ``kbpack serve PACK --port 0`` in its own process; ``--clients`` threads, each with
  its own keep-alive httpx client, send ``GET /api/search`` (the dev questions in turn) until
  ``--seconds`` have passed (and at most ``--max-requests`` in all). Requests/s, p50/p99
  latency, errors (anything but 200; must be 0), and the server's peak RSS (VmHWM).
* **library** (peer): the same searches called in-process, one after another, on the same
  pack (``kbpack.open(...).search``), no HTTP. Ratio serve / library: what concurrency buys
  (the server answers concurrent requests in batches, ``kbpack.serve.library.Batches``: one
  dense pass over the vectors per batch).
* **peer server** (``--peer-pythonpath DIR``): the same ``kbpack serve`` run from another
  checkout (e.g. the commit before batching), same clients, in the same run.
* **one worker** (``--one-worker``): ``kbpack serve --workers 1`` in the same run, against the
  default (one process per core) or ``--workers N``. The memory column is the PSS of the server
  and its workers at the end of the run (what they share, the vectors' copies made before the
  fork, counted once), beside the largest process's peak RSS.
* **http.server** (peer: the HTTP floor): Python's ThreadingHTTPServer answering every request
  with a fixed JSON body of the same size, same clients. Ratio serve / http.server: how much of
  a do-nothing server's rate is left after the search itself.

The clients run on the same machine as the server: on 2 shared cores they take CPU from it,
so absolute figures are a floor; the ratios come from the same conditions.

    python bench/serve_load.py                              # fixtures + synth 100k, 8 clients, 10 s
    python bench/serve_load.py --packs out/fixtures.kbpack --seconds 5 --json
    python bench/serve_load.py --packs out/bench/synth-100000.kbpack --modes hybrid \
        --clients 1 8 32 --no-floor --peer-pythonpath /tmp/before
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from dense import OUT, SYNTH_PACK, questions  # noqa: E402

FIXTURES_PACK = ROOT / "out" / "fixtures.kbpack"
SYNTH_100K = OUT / "synth-100000.kbpack"


def ensure(path: Path) -> Path:
    """Build a default pack when it is missing (the fixtures with the default model, or synth)."""
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    print(f"building {path}...", file=sys.stderr)
    if path == FIXTURES_PACK:
        cmd = [sys.executable, "-m", "kbpack", "build", str(ROOT / "fixtures" / "docs")]
        subprocess.run([*cmd, "-o", str(path), "--quiet", "--threads", "1"], check=True)
    elif path == SYNTH_100K:
        subprocess.run([*SYNTH_PACK, "100000", "-o", str(path)], check=True)
    else:
        raise SystemExit(f"{path}: no such pack")
    return path


def load(
    base: str, texts: list[str], mode: str, clients: int, seconds: float, cap: int, headers: Any
) -> dict[str, Any]:
    """``clients`` threads hammer ``base`` + /api/search; latencies in seconds."""
    import httpx

    lat: list[float] = []
    errors: list[str] = []
    sent = 0
    lock = threading.Lock()
    deadline = time.perf_counter() + seconds

    def client(i: int) -> None:
        nonlocal sent
        with httpx.Client(base_url=base, timeout=60) as c:
            n = i
            while time.perf_counter() < deadline:
                with lock:
                    if sent >= cap:
                        return
                    sent += 1
                q = texts[n % len(texts)]
                n += clients
                t = time.perf_counter()
                try:
                    r = c.get("/api/search", params={"q": q, "mode": mode, "k": 5}, headers=headers)
                    ok = r.status_code == 200
                    why = f"status {r.status_code}"
                except httpx.HTTPError as e:
                    ok, why = False, type(e).__name__
                dt = time.perf_counter() - t
                with lock:
                    (lat.append(dt) if ok else errors.append(why))

    return summary(lat, errors, run_clients(client, clients))


def run_clients(client: Callable[[int], None], clients: int) -> float:
    """Run ``client(0..clients-1)`` in threads at once; the wall seconds until all are done."""
    start = time.perf_counter()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - start


def summary(lat: list[float], errors: list[str], wall: float) -> dict[str, Any]:
    lat = sorted(lat)
    pct = (lambda p: round(lat[min(len(lat) - 1, int(p * len(lat)))] * 1000, 2)) if lat else None
    return {
        "requests": len(lat) + len(errors),
        "errors": len(errors),
        "error_kinds": sorted(set(errors)),
        "rps": round(len(lat) / wall, 1),
        "p50_ms": pct(0.50) if pct else None,
        "p99_ms": pct(0.99) if pct else None,
        "seconds": round(wall, 2),
    }


def serve_run(
    pack: Path,
    texts: list[str],
    mode: str,
    clients: int,
    args: argparse.Namespace,
    pythonpath: str | None = None,
    workers: int | None = None,
) -> dict[str, Any]:
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    proc = subprocess.Popen(
        [sys.executable, "-m", "kbpack", "serve", str(pack.resolve()), "--port", "0", "--json"]
        + ([] if pythonpath else ["--vector-memory", str(args.vector_memory)])
        + ([] if workers is None else ["--workers", str(workers)]),
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        # python -m puts the working directory first on sys.path, before PYTHONPATH: a peer
        # run from this checkout's directory would import this checkout's kbpack
        cwd=pythonpath or None,
    )
    try:
        assert proc.stdout is not None
        info = json.loads(proc.stdout.readline())
        base = f"http://127.0.0.1:{info['port']}"
        # warm-up: first requests, thread pool, and the batches' bfloat16 copies (made in a
        # thread on the first batch: ~1 s at 100k chunks with pieces here)
        load(base, texts[:8], mode, 8, 8.0, 400, None)
        out = load(base, texts, mode, clients, args.seconds, args.max_requests, None)
        out["workers"] = info.get("workers", 1)
        out["peak_rss_mb"] = peak_rss_mb(proc.pid)
        out["pss_mb"] = tree_pss_mb(proc.pid)
        return out
    finally:
        proc.send_signal(2)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def peak_rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return None


def tree_pss_mb(pid: int) -> float | None:
    """Proportional set size of the server and its workers, now (the end of the run): pages
    the workers share (the vectors' copies made before the fork) counted once in all."""
    total, todo = 0, [pid]
    try:
        while todo:
            p = todo.pop()
            for line in Path(f"/proc/{p}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
            kids = Path(f"/proc/{p}/task/{p}/children").read_text().split()
            todo.extend(int(k) for k in kids)
    except OSError:
        return None
    return round(total / 1024, 1)


def library_run(
    pack: Path, texts: list[str], mode: str, seconds: float, cap: int
) -> dict[str, Any]:
    """The library peer, run in a worker thread as the server runs its searches: on a busy
    machine llama.cpp embeds 10-20x slower when called from the main thread (its OpenMP
    threads spin; OMP_WAIT_POLICY=PASSIVE removes the gap), which would flatter the server."""
    out: dict[str, Any] = {}
    worker = threading.Thread(target=lambda: out.update(_library(pack, texts, mode, seconds, cap)))
    worker.start()
    worker.join()
    return out


def _library(pack: Path, texts: list[str], mode: str, seconds: float, cap: int) -> dict[str, Any]:
    import kbpack

    lat: list[float] = []
    with kbpack.open(pack) as p:
        for q in texts[:8]:  # the same warm-up as the server's
            p.search(q, k=5, mode=mode)
        p.search(texts[0], k=5, mode=mode)
        start = time.perf_counter()
        n = 0
        while time.perf_counter() - start < seconds and n < cap:
            t = time.perf_counter()
            p.search(texts[n % len(texts)], k=5, mode=mode)
            lat.append(time.perf_counter() - t)
            n += 1
        wall = time.perf_counter() - start
    return summary(lat, [], wall)


def batched_run(
    pack: Path,
    texts: list[str],
    mode: str,
    clients: int,
    seconds: float,
    cap: int,
    together: bool,
    vector_memory_mb: int = 1024,
) -> dict[str, Any]:
    """In-process, no HTTP: ``clients`` threads calling ``Library.search`` (the server's
    batches) for ``seconds``: what batching buys without the HTTP layer's cost. The bfloat16
    copies (``vector_memory_mb``; 0: none, the float16 batch scan) are made before the clock
    starts (a server makes them on its first batch)."""
    from kbpack.serve.library import Library

    lat: list[float] = []
    lock = threading.Lock()
    with Library(
        [pack], verify=False, embed_together=together, vector_memory_mb=vector_memory_mb
    ) as lib:
        lib.make_vector_copies()
        for q in texts[:8]:
            lib.search(None, q, k=5, mode=mode)
        deadline = time.perf_counter() + seconds
        sent = 0

        def client(i: int) -> None:
            nonlocal sent
            n = i
            while time.perf_counter() < deadline:
                with lock:
                    if sent >= cap:
                        return
                    sent += 1
                t = time.perf_counter()
                lib.search(None, texts[n % len(texts)], k=5, mode=mode)
                with lock:
                    lat.append(time.perf_counter() - t)
                n += clients

        wall = run_clients(client, clients)
        b = lib.get(None).batches
        out = summary(lat, [], wall)
        out["mean_batch"] = round(b.requests / b.batches, 2) if b.batches else None
        out["vector_copies_mb"] = round(lib.vector_memory.used / 2**20, 1)
        out["peak_rss_mb"] = peak_rss_mb(os.getpid())  # the whole bench process's, so far
        return out


def interleaved(
    pack: Path, texts: list[str], mode: str, args: argparse.Namespace
) -> dict[str, Any]:
    """``--rounds``: on a machine whose load changes by the second, the library peer and the
    in-process batches alternate in short windows, round after round; each round's ratio
    compares windows seconds apart. Batches: each query embedded alone with bfloat16 copies of
    the vectors (the server's default), alone with the float16 scan (``--vector-memory 0``),
    and embedded together with the copies."""
    out: dict[str, Any] = {}
    kinds = {
        "embed_alone": (False, args.vector_memory),
        "embed_alone_float16": (False, 0),
        "embed_together": (True, args.vector_memory),
    }
    for clients in args.clients:
        ratios: dict[str, list[float]] = {name: [] for name in kinds}
        p99: dict[str, list[float]] = {name: [] for name in ["library", *kinds]}
        runs: list[dict[str, Any]] = []
        for _ in range(args.rounds):
            lib = library_run(pack, texts, mode, args.seconds, args.max_requests)
            row = {"library": lib}
            p99["library"].append(lib["p99_ms"])
            for name, (together, memory) in kinds.items():
                b = batched_run(
                    pack,
                    texts,
                    mode,
                    clients,
                    args.seconds,
                    args.max_requests,
                    together,
                    memory,
                )
                p99[name].append(b["p99_ms"])
                row[name] = b
                ratios[name].append(b["rps"] / lib["rps"] if lib["rps"] else float("nan"))
            runs.append(row)
        out[str(clients)] = {
            "runs": runs,
            "median_ratio": {k: round(statistics.median(v), 2) for k, v in ratios.items()},
            "median_p99_ms": {k: round(statistics.median(v), 1) for k, v in p99.items()},
            "ratios": {k: [round(x, 2) for x in v] for k, v in ratios.items()},
        }
        if not args.json:
            print(f"{pack.name} {mode}, {clients} clients, rounds: {out[str(clients)]}", flush=True)
    return out


def http_server_run(
    body: bytes, clients: int, args: argparse.Namespace, texts: list[str]
) -> dict[str, Any]:
    class Fixed(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as uvicorn

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Fixed)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        return load(base, texts, "bm25", clients, args.seconds, args.max_requests, None)
    finally:
        server.shutdown()
        server.server_close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--packs", type=Path, nargs="+", default=[FIXTURES_PACK, SYNTH_100K])
    ap.add_argument("--modes", nargs="+", default=["bm25", "hybrid"])
    ap.add_argument("--clients", type=int, nargs="+", default=[8])
    ap.add_argument("--no-floor", action="store_true", help="skip the http.server floor")
    ap.add_argument("--peer-pythonpath", default=None, help="also serve from this checkout")
    ap.add_argument(
        "--in-process", action="store_true", help="also Library.search from threads, no HTTP"
    )
    ap.add_argument(
        "--rounds", type=int, default=0, help="only the in-process comparison, interleaved"
    )
    ap.add_argument(
        "--vector-memory", type=int, default=1024, help="MB of bfloat16 copies (serve's option)"
    )
    ap.add_argument(
        "--workers", type=int, default=None, help="serve's --workers (default: serve's default)"
    )
    ap.add_argument(
        "--one-worker", action="store_true", help="also serve with --workers 1 in the same run"
    )
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--max-requests", type=int, default=20000)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    texts = questions(1000)
    rows = []
    if args.rounds:
        for pack in args.packs:
            for mode in args.modes:
                rows.append(
                    {
                        "pack": pack.name,
                        "mode": mode,
                        **interleaved(ensure(pack), texts, mode, args),
                    }
                )
        if args.json:
            print(json.dumps({"machine": f"{os.cpu_count()} cores", "rounds": rows}, indent=2))
        return 0
    for pack in args.packs:
        ensure(pack)
        for mode in args.modes:
            import kbpack

            with kbpack.open(pack) as p:  # a real answer's size for the http.server body
                body = json.dumps({"pack": pack.stem, **p.search(texts[0], mode=mode).as_dict()})
            lib = library_run(pack, texts, mode, args.seconds, args.max_requests)
            for clients in args.clients:
                serve = serve_run(pack, texts, mode, clients, args, workers=args.workers)
                one = (
                    serve_run(pack, texts, mode, clients, args, workers=1)
                    if args.one_worker
                    else None
                )
                peer = (
                    serve_run(pack, texts, mode, clients, args, args.peer_pythonpath)
                    if args.peer_pythonpath
                    else None
                )
                inproc = (
                    {
                        f"embed_{k}": batched_run(
                            pack,
                            texts,
                            mode,
                            clients,
                            args.seconds,
                            args.max_requests,
                            k == "together",
                        )
                        for k in ("alone", "together")
                    }
                    if args.in_process
                    else None
                )
                floor = (
                    None if args.no_floor else http_server_run(body.encode(), clients, args, texts)
                )
                rows.append(
                    {
                        "pack": pack.name,
                        "mode": mode,
                        "clients": clients,
                        "serve": serve,
                        "library": lib,
                        "peer_serve": peer,
                        "one_worker": one,
                        "in_process_batched": inproc,
                        "http_server": floor,
                        "serve_vs_library": ratio(serve, lib),
                        "serve_vs_peer_serve": ratio(serve, peer),
                        "serve_vs_one_worker": ratio(serve, one),
                        "one_worker_vs_library": ratio(one, lib) if one else None,
                        "serve_vs_http_server": ratio(serve, floor),
                    }
                )
                if not args.json:
                    print(render(rows[-1]), flush=True)
    report = {"machine": f"{os.cpu_count()} cores", "rows": rows}
    if args.json:
        print(json.dumps(report, indent=2))
    return 0


def ratio(a: dict[str, Any], b: dict[str, Any] | None) -> float | None:
    return round(a["rps"] / b["rps"], 2) if b and b["rps"] else None


def render(row: dict[str, Any]) -> str:
    s, lib, fl, peer = row["serve"], row["library"], row["http_server"], row["peer_serve"]
    out = (
        f"{row['pack']} {row['mode']}, {row['clients']} clients: "
        f"serve ({s['workers']} workers) {s['rps']} req/s (p50 {s['p50_ms']} ms, p99 "
        f"{s['p99_ms']} ms, {s['errors']} errors of {s['requests']}, peak RSS "
        f"{s['peak_rss_mb']} MB, PSS {s['pss_mb']} MB) | "
        f"library {lib['rps']}/s (p99 {lib['p99_ms']} ms) -> {row['serve_vs_library']}x"
    )
    one = row["one_worker"]
    if one:
        out += (
            f" | serve --workers 1 {one['rps']} req/s (p99 {one['p99_ms']} ms, PSS "
            f"{one['pss_mb']} MB) -> {row['one_worker_vs_library']}x the library; "
            f"{row['serve_vs_one_worker']}x"
        )
    if peer:
        out += (
            f" | peer serve {peer['rps']} req/s (p50 {peer['p50_ms']} ms, p99 {peer['p99_ms']} "
            f"ms, {peer['errors']} errors) -> {row['serve_vs_peer_serve']}x"
        )
    for name, b in (row["in_process_batched"] or {}).items():
        out += (
            f" | in-process batched, {name}: {b['rps']}/s (p99 {b['p99_ms']} ms, mean batch "
            f"{b['mean_batch']}) -> {ratio(b, lib)}x"
        )
    if fl:
        out += f" | http.server fixed body {fl['rps']} req/s -> {row['serve_vs_http_server']}x"
    return out


if __name__ == "__main__":
    raise SystemExit(main())
