"""Load test of ``seqlab serve`` on loopback: single-request latency, then N requests from
C concurrent clients; zero errors required. Writes the ``## Serving`` section of
docs/results.md (with ``--write``).

    python benchmarks/serve_load.py --run runs/<multi30k-run>          # a trained model
    python benchmarks/serve_load.py                                   # trains a small one
    python benchmarks/serve_load.py --requests 500 --clients 16 --write
    python benchmarks/serve_load.py --run runs/<run> --compile      # the compiled step

The server runs in its own process (``python -m seqlab serve``), exactly as a user starts
it; the clients are asyncio + httpx in this process, each sending one Multi30k test2016
source sentence per request (beam ``--beam``). It stops by itself after ``--requests``.
Without ``--run`` it first trains a small Transformer de→en on the shipped Multi30k
(``--train-steps`` updates on 4,000 pairs, BPE 1,000) so the numbers need nothing else.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a plain script
    sys.path.insert(0, str(ROOT))

from benchmarks.results_doc import machine_description, write_section  # noqa: E402
from seqlab.data.multi30k import SHIPPED_DIR  # noqa: E402

RESULTS = ROOT / "docs" / "results.md"
HEADING = "## Serving"


def small_run(folder: Path, steps: int) -> Path:
    """A small Transformer de→en trained here on part of the shipped Multi30k."""
    from seqlab import api

    cfg = {
        "task": {"name": "translation", "vocab_size": 1000, "max_train_examples": 4000,
                 "valid_bleu_sentences": 50, "cache_dir": str(folder / "spm")},
        "model": {"name": "transformer", "d_model": 128, "n_heads": 4, "d_ff": 256,
                  "encoder_layers": 2, "decoder_layers": 2, "dropout": 0.1,
                  "share_embeddings": True},
        "train": {"max_steps": steps, "valid_every": steps, "save_every": steps,
                  "log_every": 50, "precision": "fp32", "progress": False,
                  "batch": {"max_tokens": 2048}, "optim": {"name": "adam", "lr": 1e-3}},
    }  # fmt: skip
    api.train(cfg, run_dir=folder / "run", quiet=True)
    return folder / "run"


def sentences() -> list[str]:
    with gzip.open(SHIPPED_DIR / "test_2016_flickr.de.gz", "rt", encoding="utf-8") as f:
        return [line.strip() for line in f if line.strip()]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def wait_ready(client: httpx.AsyncClient, proc: subprocess.Popen, limit_s: float) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited with code {proc.returncode}")
        try:
            if (await client.get("/health")).status_code == 200:
                return
        except httpx.TransportError:
            pass
        await asyncio.sleep(0.2)
    raise SystemExit(f"the server did not answer /health within {limit_s:.0f} s")


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile q ∈ (0, 100]."""
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(q / 100 * len(ordered)) - 1))]


async def measure(url: str, proc: subprocess.Popen, args: argparse.Namespace) -> dict:
    texts = sentences()
    limits = httpx.Limits(max_connections=args.clients + 4)
    async with httpx.AsyncClient(base_url=url, timeout=120.0, limits=limits) as client:
        await wait_ready(client, proc, 600.0)
        body = {"beam": args.beam}
        for text in texts[:3]:  # warm-up
            (await client.post("/translate", json={**body, "text": text})).raise_for_status()
        single = []
        for text in texts[3 : 3 + args.single]:
            start = time.perf_counter()
            (await client.post("/translate", json={**body, "text": text})).raise_for_status()
            single.append(time.perf_counter() - start)
        before = (await client.get("/info")).json()["batching"]

        latencies: list[float] = []
        errors: list[str] = []
        queue: asyncio.Queue[str] = asyncio.Queue()
        for i in range(args.requests):
            queue.put_nowait(texts[i % len(texts)])

        async def worker() -> None:
            while True:
                try:
                    text = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                start = time.perf_counter()
                try:
                    r = await client.post("/translate", json={**body, "text": text})
                    if r.status_code != 200:
                        errors.append(f"{r.status_code} {r.text[:200]}")
                    else:
                        latencies.append(time.perf_counter() - start)
                except httpx.HTTPError as exc:
                    errors.append(repr(exc))

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(args.clients)))
        wall = time.perf_counter() - start
        info = (await client.get("/info")).json()
    after = info["batching"]
    calls = after["decode_calls"] - before["decode_calls"]
    texts_done = after["texts"] - before["texts"]
    return {
        "model": f"{info['model']} ({info['parameters']:,} parameters)",
        "single_p50": statistics.median(single),
        "n_single": len(single),
        "requests": args.requests,
        "clients": args.clients,
        "errors": errors,
        "wall": wall,
        "throughput": len(latencies) / wall,
        "p50": percentile(latencies, 50),
        "p99": percentile(latencies, 99),
        "per_call": texts_done / calls if calls else 0.0,
    }


def section(r: dict, args: argparse.Namespace, command: str) -> str:
    load = os.getloadavg()[0]
    return "\n".join(
        [
            HEADING,
            "",
            f"`{command}` — {r['model']}, one Multi30k test2016 sentence per request, beam "
            f"{args.beam}, the server in its own process on loopback; {machine_description()}; "
            f"load average {load:.1f} at the end (other jobs shared the cores).",
            "",
            "| measure | value |",
            "|---|---|",
            f"| single request, alone (median of {r['n_single']}) "
            f"| {1000 * r['single_p50']:.0f} ms |",
            f"| load: requests × concurrent clients | {r['requests']} × {r['clients']} |",
            f"| errors | {len(r['errors'])} |",
            f"| throughput | {r['throughput']:.1f} requests/s ({r['wall']:.1f} s in all) |",
            f"| latency under load p50 / p99 | {1000 * r['p50']:.0f} / {1000 * r['p99']:.0f} ms |",
            f"| sentences per decode call (micro-batching) | {r['per_call']:.1f} |",
            "",
            "Throughput under load against 1 / single latency "
            f"({1 / r['single_p50']:.1f} requests/s) shows what micro-batching gains; "
            "docs/serving.md explains the batcher.",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="benchmarks/serve_load.py", description=__doc__.split("\n")[0])
    p.add_argument("--run", help="run or checkpoint to serve (default: train a small one)")
    p.add_argument("--requests", type=int, default=500)
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--single", type=int, default=30, help="sequential requests timed alone")
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--train-steps", type=int, default=300)
    p.add_argument("--write", action="store_true", help="update docs/results.md")
    p.add_argument(
        "--compile", action="store_true", help="serve with --compile (compiled decoder step)"
    )
    p.add_argument("--precision", default="fp32", help="serve with --precision (fp32, bf16, auto)")
    args = p.parse_args(argv)
    command = "python benchmarks/serve_load.py " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(args.run) if args.run else small_run(Path(tmp), args.train_steps)
        port = free_port()
        cmd = [sys.executable, "-m", "seqlab", "serve", str(run), "--port", str(port)]
        cmd += ["--precision", args.precision]
        if args.compile:
            cmd.append("--compile")  # compiled before /health answers (wait_ready's 600 s)
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            result = asyncio.run(measure(f"http://127.0.0.1:{port}", proc, args))
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    text = section(result, args, command.strip())
    print(text)
    if result["errors"]:
        print(f"{len(result['errors'])} errors, first: {result['errors'][0]}", file=sys.stderr)
        return 1
    if args.write:
        write_section(RESULTS, text, HEADING)
        print(f"wrote the '{HEADING}' section of {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
