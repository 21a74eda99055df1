"""What a Ray node must share with the driver before it runs a grid task (mrl.runtime.cluster.NodeContract), checked
without a cluster: the mode, the portable contract, and in native mode the driver's CPU itself."""
import dataclasses

from mrl import numerics
from mrl.runtime import cluster


def test_a_node_in_the_drivers_mode_and_code_computes_as_the_driver_does():
    assert cluster.node_differences(cluster.driver_contract()) == []


def test_in_native_mode_a_node_of_another_cpu_runs_nothing(monkeypatch):
    """Native bits are the CPU's own: the node's CPU model, kernels and numerics state must equal the driver's."""
    monkeypatch.setattr(numerics, "mode", lambda: "native")
    driver = {"cpu": "AMD EPYC", "cpu_capability": "AVX2", "native_bf16": True, "numerics": {"mode": "native"}}
    monkeypatch.setattr(cluster, "native_cpu", lambda: driver)
    contract = cluster.driver_contract()
    assert contract.cpu == driver and cluster.node_differences(contract) == []
    monkeypatch.setattr(cluster, "native_cpu", lambda: {**driver, "cpu": "Intel Xeon", "cpu_capability": "AVX512"})
    differences = cluster.node_differences(contract)
    assert len(differences) == 2
    assert differences[0].startswith("in native numerics its cpu is 'Intel Xeon' (the driver's: 'AMD EPYC')")
    assert "cpu_capability is 'AVX512'" in differences[1]


def test_portable_mode_asks_no_cpu_of_the_nodes():
    contract = cluster.driver_contract()
    assert contract.numerics == "portable" and contract.cpu is None
    other = dataclasses.replace(contract, code="0123456789abcdef")
    assert cluster.node_differences(other)[0].startswith("its mrl code differs")
