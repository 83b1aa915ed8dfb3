"""The real server on a GPU against the same server on the CPU, over HTTP on localhost: every
model in ``--models`` answers the same sentences on both (same text; every attention matrix within
``--tolerance``), then one client's p50 latency and 32 clients' throughput on the GPU, greedy and
beam 5, every attention matrix in each answer.

    python bench/cuda_served.py --models gpu/models [--device cuda] [--requests 20]

Run it on a machine with a GPU (docs/gpu.md); ``--device cpu`` only checks the script. Prints a
Markdown table and writes it as JSON to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from attnscope.testing import server_process  # noqa: E402
from bench.cuda_parity import SENTENCES  # noqa: E402  (the same four sentences as the in-process parity)


def ask(client: httpx.Client, url: str, model: str, text: str, beam: int) -> dict[str, Any]:
    """One translation with every attention matrix (the default answer; a ``url`` ending in
    ``#on_demand`` asks for ``"attention": "on_demand"``: every matrix kept on the server, none sent)."""
    url, _, mode = url.partition("#")
    body = {"model": model, "text": text, "beam_size": beam, "max_length": 40} | ({"attention": mode} if mode else {})
    answer = client.post(f"{url}/api/translate", json=body, timeout=120)
    answer.raise_for_status()
    return answer.json()  # type: ignore[no-any-return]


def largest_difference(a: Any, b: Any) -> float:
    """The largest absolute difference between two nested lists of numbers of the same shape."""
    if isinstance(a, list):
        return max((largest_difference(x, y) for x, y in zip(a, b, strict=True)), default=0.0)
    return abs(float(a) - float(b))


def parity(cpu: str, gpu: str, models: list[str]) -> list[dict[str, Any]]:
    """Each model's answers on both servers: same text, the largest attention difference."""
    rows = []
    with httpx.Client() as client:
        for model in models:
            same, diff = 0, 0.0
            for text in SENTENCES:
                for beam in (1, 5):
                    a, b = ask(client, cpu, model, text, beam), ask(client, gpu, model, text, beam)
                    if a["translation"] == b["translation"]:
                        same += 1
                        for kind, matrices in a["attention"].items():
                            diff = max(diff, largest_difference(matrices, b["attention"][kind]))
            rows.append({"model": model, "same_text": f"{same}/{2 * len(SENTENCES)}", "max_attention_diff": diff})
            print(f"{model:28s} same text {same}/{2 * len(SENTENCES)}  max |attention cpu-gpu| {diff:.1e}", flush=True)
    return rows


def one_client_ms(url: str, model: str, beam: int, requests: int) -> float:
    """p50 of one client's sequential requests, ms."""
    times = []
    with httpx.Client() as client:
        ask(client, url, model, SENTENCES[0], beam)  # warm-up
        for i in range(requests):
            start = time.perf_counter()
            ask(client, url, model, SENTENCES[i % len(SENTENCES)], beam)
            times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def many_clients_rps(url: str, model: str, beam: int, clients: int, each: int) -> float:
    """Requests per second of ``clients`` concurrent clients, ``each`` requests apiece."""

    def client_loop(i: int) -> None:
        with httpx.Client() as client:
            for j in range(each):
                ask(client, url, model, SENTENCES[(i + j) % len(SENTENCES)], beam)

    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(client_loop, range(clients)))
    return clients * each / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="gpu/models")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--cpu-parity", action=argparse.BooleanOptionalAction, default=True,
                        help="also start a CPU server and compare every answer (default: yes)")  # fmt: skip
    parser.add_argument("--eager-too", action="store_true",
                        help="a second GPU server with ATTNSCOPE_CUDA_GRAPHS=0, timed interleaved with the first")  # fmt: skip
    parser.add_argument("--on-demand-too", action="store_true",
                        help="also time the default server answering with \"attention\": \"on_demand\"")  # fmt: skip
    parser.add_argument("--out", default="out/cuda-served.json")
    args = parser.parse_args()
    logs = Path(args.out).parent
    logs.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        gpus = {"default": stack.enter_context(server_process(args.models, logs / "gpu-server.log", args=("--device", args.device)))[0]}
        if args.eager_too:
            eager = server_process(args.models, logs / "gpu-eager-server.log", env={"ATTNSCOPE_CUDA_GRAPHS": "0"}, args=("--device", args.device))
            gpus["eager (ATTNSCOPE_CUDA_GRAPHS=0)"] = stack.enter_context(eager)[0]
        gpu = gpus["default"]
        if args.on_demand_too:
            gpus["default, attention on demand"] = gpu + "#on_demand"
        models = [m["id"] for m in httpx.get(f"{gpu}/api/models", timeout=30).json()["models"]]
        results: dict[str, Any] = {"parity": [], "speed": []}
        if args.cpu_parity:
            cpu = stack.enter_context(server_process(args.models, logs / "cpu-server.log"))[0]
            results["parity"] = parity(cpu, gpu, models)
        if args.eager_too:
            results["graphs_vs_eager"] = parity(gpus["eager (ATTNSCOPE_CUDA_GRAPHS=0)"], gpu, models)
        print("\n| model | server | 1 client greedy p50 (ms) | 1 client beam 5 p50 (ms) | 32 clients greedy (req/s) | 32 clients beam 5 (req/s) |")
        print("| --- | --- | ---: | ---: | ---: | ---: |")
        for model in models:
            rows = {name: {"model": model, "server": name} for name in gpus}
            for beam in (1, 5):
                times: dict[str, list[float]] = {name: [] for name in gpus}
                for _ in range(3):  # interleaved: a third of the requests on each server in turn
                    for name, url in gpus.items():
                        times[name].append(one_client_ms(url, model, beam, max(1, args.requests // 3)))
                for name, url in gpus.items():
                    rows[name][f"p50_beam{beam}_ms"] = statistics.median(times[name])
                    rows[name][f"rps_beam{beam}"] = many_clients_rps(url, model, beam, args.clients, 4)
            for row in rows.values():
                results["speed"].append(row)
                print(
                    f"| {model} | {row['server']} | {row['p50_beam1_ms']:.1f} | {row['p50_beam5_ms']:.1f} | {row['rps_beam1']:.0f} | {row['rps_beam5']:.0f} |",
                    flush=True,
                )
    Path(args.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
