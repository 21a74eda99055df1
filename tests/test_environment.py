"""environment.yml (conda) and pyproject.toml list the same dependencies with the same pins; the machine record."""
import tomllib

import yaml

from mrl.runtime.results import machine, repo_root


def test_environment_yml_matches_pyproject():
    root = repo_root()
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    declared = set(project["dependencies"]) | set(extras["test"])
    assert set(extras["thl"]) <= set(extras["test"])  # the THL tests use the real tokenizers
    assert set(extras["ray"]) <= set(extras["test"])  # the MWRA tests run the ray backend
    env = yaml.safe_load((root / "environment.yml").read_text())
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    listed = {line for line in pip_section if not line.startswith("-e")}
    assert listed == declared, {"only in environment.yml": listed - declared, "only in pyproject": declared - listed}
    assert "torch==2.13.0" in declared  # a loose torch pulls a CUDA build of several GB


def test_the_machine_record_names_the_cpu_and_whether_it_computes_bf16(tmp_path):
    emulated, native = tmp_path / "emulated", tmp_path / "native"
    emulated.write_text("model name\t: Intel(R) Xeon(R) Processor\nflags\t\t: fpu avx512f avx512_vnni\n")
    native.write_text("model name\t: AMD EPYC 9R14\nflags\t\t: fpu avx512f avx512_bf16\n")
    assert machine(emulated)["cpu"] == "Intel(R) Xeon(R) Processor" and not machine(emulated)["native_bf16"]
    assert machine(native)["cpu"] == "AMD EPYC 9R14" and machine(native)["native_bf16"]
    assert machine(tmp_path / "absent")["cpu_capability"]  # torch's, wherever /proc/cpuinfo is missing
