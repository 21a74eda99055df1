"""A simulated Ray cluster on this machine, to try `--ray` without one: a head of no CPU and N nodes of one CPU
each (ray.cluster_utils.Cluster, as tests/test_cluster.py builds it), held until Ctrl-C or SIGTERM.

    .venv/bin/python benchmarks/simulated_cluster.py [--nodes 2] [--address-file tmp/ray_address]
    make reproduce PROFILE=smoke RAY_ADDRESS=$(cat tmp/ray_address)     # in another shell

It prints the cluster's address (and writes it to --address-file once every node has joined). Every node is a set
of Ray processes on this machine, listening on the loopback interface; the nodes share nothing with the driver but
what Ray sends, as machines of a real cluster would (docs/performance.md, On a Ray cluster).
"""
from __future__ import annotations

import argparse
import signal
import threading
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=2, help="nodes of one CPU each (default 2)")
    parser.add_argument("--address-file", type=Path, help="write the address here once the nodes have joined")
    args = parser.parse_args()

    from mrl.runtime.cluster import loopback_only

    loopback_only()   # every node advertises and binds 127.0.0.1, not this machine's network address
    from ray.cluster_utils import Cluster

    loopback = {"node_ip_address": "127.0.0.1"}
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False, **loopback})
    for _ in range(args.nodes):
        cluster.add_node(num_cpus=1, **loopback)
    cluster.wait_for_nodes()
    print(f"[simulated cluster] {args.nodes} nodes of one CPU at {cluster.address}", flush=True)
    if args.address_file:
        args.address_file.parent.mkdir(parents=True, exist_ok=True)
        args.address_file.write_text(cluster.address + "\n")
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    stop.wait()
    cluster.shutdown()
    print("[simulated cluster] shut down", flush=True)


if __name__ == "__main__":
    main()
