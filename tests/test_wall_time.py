"""The plan before the run (mrl.reports.wall_time, `mrl plan --cores N`): the makespan of list scheduling against
hand-checkable cases, a job counted once in the notebook that first runs it, nothing built while planning, and the
command's output."""
import itertools

import pytest

from mrl.reports.wall_time import Job, Phase, least_cores, makespan, profile_plan


def best_makespan(seconds: list[float], cores: int) -> float:
    """The least makespan over every assignment of jobs to cores (brute force, for a few jobs)."""
    return min(max(sum(s for s, c in zip(seconds, assignment) if c == core) for core in range(cores))
               for assignment in itertools.product(range(cores), repeat=len(seconds)))


@pytest.mark.parametrize("seconds, cores", [([5, 4, 3, 3, 2, 2, 1], 3), ([7, 7, 6, 6, 5, 5, 4], 2),
                                             ([10, 1, 1, 1], 4), ([3, 3, 2, 2, 2], 2)])
def test_longest_first_is_within_four_thirds_of_the_best_order_and_bounded_below(seconds, cores):
    """Graham's bound for longest-first list scheduling; and never below the longest job or the work per core."""
    span, best = makespan(seconds, cores), best_makespan(seconds, cores)
    assert best <= span <= best * (4 / 3 - 1 / (3 * cores)) + 1e-9
    assert span >= max(seconds) and span >= sum(seconds) / cores


def test_a_phase_takes_its_longest_job_from_the_cores_that_hold_them_all_apart():
    phase = Phase("grid", tuple(Job(str(i), s) for i, s in enumerate([8, 4, 4, 2, 2])))
    assert phase.seconds(1) == 20 and phase.seconds(2) == 10 and phase.seconds(100) == 8 == phase.critical()
    assert least_cores(phase) == 3   # 8 | 4 + 2 | 4 + 2
    alone = Phase("timed", phase.jobs, alone=True)
    assert alone.seconds(512) == alone.critical() == 20


@pytest.fixture(scope="module")
def default_plan():
    return profile_plan("default", (2, 32, 512))[0]


def test_the_default_plan_counts_each_job_once_and_builds_nothing(default_plan, tmp_path):
    """From the profile's own grids: the zoo's three warm-ups in 00_zoo only (the notebooks after it read the cache),
    50_hacpo without the probe grid's runs it shares with 40_probe, the wall time falling with the cores down to the
    critical path and no further. Planning builds nothing: no zoo folder appears."""
    from mrl.profiles import load_profile
    from mrl.runtime.zoo_grid import build_zoo, planned_zoos

    rows = default_plan.set_index("notebook")
    assert rows.loc["00_zoo", "jobs"] == 3 and rows.loc["10_grpo_baseline", "jobs"] == 1
    config = load_profile("default")
    shared = set(config.experiment("probe").probes) & set(p for p in config.experiment("hacpo").probes
                                                           if isinstance(p, str))
    hacpo = config.experiment("hacpo")
    ablations = sum(len(arms) for arms in hacpo.ablations.values()) * len(hacpo.ablation_seeds)
    assert rows.loc["50_hacpo", "jobs"] <= (len(hacpo.probes) - len(shared)) * len(hacpo.seeds) + ablations
    for _, row in rows.iterrows():
        assert row["2 cores (min)"] >= row["32 cores (min)"] >= row["512 cores (min)"] >= row["critical path (min)"] \
            - 1e-9
    with planned_zoos() as planned:
        zoo = build_zoo(config.task, config.zoo, root=tmp_path)
    assert [f.name for _, f, _ in planned] == ["A", "B", "C"] and not list(tmp_path.iterdir())
    assert zoo["A"].model is None and zoo["A"].path.parent == tmp_path / config.task.name


def test_mrl_plan_cores_prints_each_notebook_and_the_whole(capsys):
    from mrl.command import main

    assert main(["plan", "--cores", "8"]) == 0
    out = capsys.readouterr().out
    assert "8 cores (min)" in out and "76_confirmatory_claims" in out and "critical path" in out
    assert "[mrl plan] the default profile from a fresh clone on 8 cores:" in out
    with pytest.raises(SystemExit):
        main(["plan", "--cores", "8", "--ray", "auto"])
    assert "--cores and --ray are not allowed together" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["plan", "--profile", "paper", "--cores", "8"])
    assert "expected a CPU profile" in capsys.readouterr().err


def test_the_claims_block_is_planned_from_what_its_committed_record_lacks(default_plan):
    """76_confirmatory_claims plans the runs its committed record lacks (as the notebook reads the record, under the
    recorded checksum) and the warm-ups of their zoo seeds, in run_claims_block's chunks."""
    from mrl.experiments.heldout import claims_block_runs
    from mrl.profiles import load_profile
    from mrl.reports.wall_time import JobCosts, Ledger, block_chunks, claims_block_phases, claims_block_todo

    config = load_profile("default")
    todo = claims_block_todo(config)
    assert len(todo) <= len(claims_block_runs(config))
    seeds = {label["zoo_seed"] for label, _ in todo}
    families = len(config.experiment("heldout").zoo.families)
    assert default_plan.set_index("notebook").loc["76_confirmatory_claims", "jobs"] == len(todo) + len(seeds) * families
    zoos_at_once, chunk = block_chunks()
    phases = claims_block_phases(config, Ledger(JobCosts({"grpo": 1.0}, 1.0, "a CPU", "default")))
    assert all(len(p.jobs) <= (chunk if p.what.startswith("runs") else zoos_at_once * families) for p in phases)
    assert sum(len(p.jobs) for p in phases if p.what.startswith("runs")) == len(todo)


def test_what_bounds_a_notebook_is_its_work_its_longest_job_or_a_cap():
    from mrl.reports.wall_time import Bound, bound

    grid = Phase("grid", tuple(Job(str(i), s) for i, s in enumerate([8, 4, 4, 2, 2])))
    chunks = [Phase("chunk", (Job("a", 5), Job("b", 5)), cap="2 runs at a time") for _ in range(3)]
    assert bound([], 8) is Bound.MEASURED
    assert bound([grid], 2) is Bound.WORK and bound([grid], 3) is Bound.LONGEST_JOB
    assert bound(chunks, 1) is Bound.WORK and bound(chunks, 512) is Bound.CAP
    assert bound([grid, chunks[0]], 512) is Bound.LONGEST_JOB   # the cap's 5 of 13 minutes: the grid's job binds


def test_the_whole_is_bound_by_the_notebook_that_takes_the_longest(default_plan):
    from mrl.reports.wall_time import binding

    for cores in (2, 32, 512):
        notebook, share, kind = binding(default_plan, cores)
        rows = default_plan.set_index("notebook")
        assert rows.loc[notebook, f"{cores} cores (min)"] == rows[f"{cores} cores (min)"].drop("total").max()
        assert share == rows.loc[notebook, f"{cores} cores (min)"] / rows.loc["total", f"{cores} cores (min)"]
        assert kind is rows.loc[notebook, f"bound at {cores} cores"]
