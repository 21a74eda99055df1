"""What a Ray grid task carries and checks (mrl.runtime.cluster), without a cluster: what a node must share with the
driver (NodeContract: the mode, the portable contract, and in native mode the driver's CPU itself), and the
environment its tasks get (the user's probe modules shipped, the driver's own import folders only)."""
import dataclasses
import importlib
import os
import sys

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


def test_a_users_probe_module_is_shipped_and_the_packages_are_not(tmp_path, monkeypatch):
    """A probe module of the user's own ships as its file; a module inside a package of the user's ships as the
    package's folder (so it imports under the same name), with the user's module it imports; mrl's ship nothing."""
    (tmp_path / "lab" / "probes").mkdir(parents=True)
    (tmp_path / "lab" / "__init__.py").write_text("")
    (tmp_path / "lab" / "probes" / "__init__.py").write_text("")
    (tmp_path / "helpers_of_mine.py").write_text("SCALE = 2\n")
    (tmp_path / "lab" / "probes" / "mine.py").write_text("import helpers_of_mine\n")
    (tmp_path / "single_probe.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    try:
        for name in ("lab.probes.mine", "single_probe"):
            importlib.import_module(name)
        assert cluster.shipped_sources(("lab.probes.mine",)) == sorted([str(tmp_path / "lab"),
                                                                         str(tmp_path / "helpers_of_mine.py")])
        assert cluster.shipped_sources(("single_probe",)) == [str(tmp_path / "single_probe.py")]
        assert cluster.shipped_sources(("mrl.core.probes.sgt", "json")) == []
        environment = cluster.task_environment(("single_probe", "mrl.core.probes.grpo"))
        assert environment["py_modules"] == [str(tmp_path / "single_probe.py")]
        assert "py_modules" not in cluster.task_environment(("mrl.core.probes.grpo",))
    finally:
        for name in ("lab.probes.mine", "lab.probes", "lab", "helpers_of_mine", "single_probe"):
            sys.modules.pop(name, None)


def test_the_tasks_path_holds_the_drivers_own_folders_not_its_interpreters(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    path = cluster.user_path().split(os.pathsep)
    assert str(tmp_path) in path
    assert not [entry for entry in path if "site-packages" in entry or entry.startswith(sys.base_prefix)]


def test_the_progress_bar_names_a_few_running_tasks_and_counts_the_rest():
    labels = [f"run {i}" for i in range(10)]
    assert cluster.running_postfix(labels[:2]) == "running: run 0, run 1"
    assert cluster.running_postfix(labels) == "running: run 0, run 1, run 2, run 3 and 6 more"


def test_an_http_address_is_refused_with_what_is_expected(monkeypatch, capsys):
    import pytest

    from mrl.core.validation import ConfigError
    from mrl.reproduce import main

    for address in ("10.0.0.5:6379", "auto", "ray://10.0.0.5:10001", "local"):
        assert cluster.checked_address(address, "--ray") == address
    monkeypatch.setenv(cluster.ADDRESS_ENV, "http://10.0.0.5:8265")
    with pytest.raises(ConfigError, match=r"MRL_RAY_ADDRESS='http://10.0.0.5:8265' is not allowed: an http\(s\):// "
                                          r"address is the Ray dashboard's job API"):
        cluster.grid_address()
    with pytest.raises(SystemExit):
        main(["--ray", "https://head:8265"])
    assert "--ray='https://head:8265' is not allowed" in capsys.readouterr().err
