"""Live metrics of a run: every policy's reward, loss, grad norm, evaluations and probe statistics per step,
sent to TensorBoard, Trackio, Weights & Biases or a table in the notebook while the run goes.

`RunnerConfig.report_to` picks the tracker (none | tensorboard | trackio | wandb; `make reproduce` uses none);
`run_concurrent(..., reporters=[...])` adds reporter objects of one's own (anything with `log` and `close`).
The runner hands its growing `RunRecord` to a `Reporting` after every step; it turns the rows added since the
last call into metrics named in TRL's convention, one namespace per policy:

    A/train/reward, A/train/loss, A/train/grad_norm, A/train/active_sequences, A/train/completion_tokens,
    A/probe/<statistic> (e.g. A/probe/rescue_size), A/timing/rollout_seconds, A/timing/update_seconds,
    A/eval/<split>/<skill> and A/eval/<split>/mean (greedy accuracy), exchange/<counter> (SEE's counters),

each logged at the step it belongs to. Reporting never changes what a run computes.
"""
from __future__ import annotations

import math
import os
from collections import defaultdict
from pathlib import Path
from typing import Callable

import yaml

from mrl.core.config import REPORT_TO
from mrl.paths import repo_root

TRAIN = ("reward", "loss", "grad_norm", "active_sequences", "completion_tokens")
TIMING = ("rollout_seconds", "update_seconds")
STEP_KEYS = ("policy", "step")


def step_metrics(row: dict) -> dict[str, float]:
    """One policy's step row (RunRecord.steps) as metrics: train/, timing/, and probe/ for every other
    number the probe reported. NaN and non-numbers are left out."""
    policy, metrics = row["policy"], {}
    for key, value in row.items():
        if key in STEP_KEYS or not _is_number(value):
            continue
        group = "train" if key in TRAIN else "timing" if key in TIMING else "probe"
        metrics[f"{policy}/{group}/{key}"] = float(value)
    return metrics


def eval_metrics(rows: list[dict]) -> dict[str, float]:
    """Evaluation rows of one step (policy, split, skill, accuracy) as A/eval/<split>/<skill> and, per policy
    and split, the mean over its skills as A/eval/<split>/mean."""
    metrics, groups = {}, defaultdict(list)
    for row in rows:
        metrics[f"{row['policy']}/eval/{row['split']}/{row['skill']}"] = float(row["accuracy"])
        groups[f"{row['policy']}/eval/{row['split']}/mean"].append(float(row["accuracy"]))
    metrics.update({name: sum(values) / len(values) for name, values in groups.items()})
    return metrics


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


class Reporting:
    """Sends what a RunRecord gained since the last `update` to every reporter, step by step in order.

    A step's metrics are sent once all its rows are in (the runner calls `update` after a step's rows are
    appended; the async clock appends a step once every worker has finished it)."""

    def __init__(self, reporters: list, reported=None):
        """reported: a RunRecord whose rows were reported before (a resumed run's), not sent again."""
        self.reporters = list(reporters)
        self._steps_seen = len(reported.steps) if reported is not None else 0
        self._evals_seen = len(reported.evals) if reported is not None else 0

    def update(self, record) -> None:
        if not self.reporters:
            return
        by_step: dict[int, dict[str, float]] = defaultdict(dict)
        for row in record.steps[self._steps_seen:]:
            by_step[int(row["step"])].update(step_metrics(row))
        evals = defaultdict(list)
        for row in record.evals[self._evals_seen:]:
            evals[int(row["step"])].append(row)
        for step, rows in evals.items():
            by_step[step].update(eval_metrics(rows))
        self._steps_seen, self._evals_seen = len(record.steps), len(record.evals)
        if by_step:
            last = max(by_step)
            by_step[last].update({f"exchange/{name}": float(count) for name, count in record.counters.items()
                                  if _is_number(count)})
        for step in sorted(by_step):
            for reporter in self.reporters:
                reporter.log(by_step[step], step)

    def close(self) -> None:
        for reporter in self.reporters:
            reporter.close()


class TensorBoardReporter:
    """Scalars to `<logging_dir>/<run_id>` for TensorBoard (`tensorboard --logdir <logging_dir>`), the run's
    config as text."""

    def __init__(self, run_id: str, logging_dir: str | Path, config: dict | None = None):
        from torch.utils.tensorboard import SummaryWriter

        self.path = Path(logging_dir) / run_id
        self.writer = SummaryWriter(log_dir=str(self.path))
        if config:
            self.writer.add_text("config", "```\n" + yaml.safe_dump(config, sort_keys=False) + "```")

    def log(self, metrics: dict[str, float], step: int) -> None:
        for name, value in metrics.items():
            self.writer.add_scalar(name, value, global_step=step)

    def close(self) -> None:
        self.writer.close()


class TrackioReporter:
    """A Trackio run named `run_id` in project `project`, stored locally (Trackio's TRACKIO_DIR, by default
    under the Hugging Face cache); `trackio show --project mrl` opens its dashboard."""

    def __init__(self, run_id: str, project: str = "mrl", config: dict | None = None):
        import trackio

        self.run = trackio.init(project=project, name=run_id, config=config or {}, embed=False,
                              auto_log_cpu=False)

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.run.log(metrics, step=step)

    def close(self) -> None:
        self.run.finish()


class WandbReporter:
    """A Weights & Biases run named `run_id` in project `project` (`pip install -e ".[wandb]"`), the run's config as
    its config. W&B's own settings apply: WANDB_MODE=offline keeps the run in `<dir>/wandb/` for a later
    `wandb sync`, WANDB_PROJECT and WANDB_ENTITY choose where it goes."""

    def __init__(self, run_id: str, project: str = "mrl", config: dict | None = None,
                 logging_dir: str | Path | None = None):
        import wandb

        if logging_dir is not None:
            Path(logging_dir).mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", project), name=run_id, config=config or {},
                              dir=str(logging_dir) if logging_dir is not None else None, reinit="create_new")

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.run.log(metrics, step=step)

    def close(self) -> None:
        self.run.finish()


def redraw(handle, shown):
    """Show `shown` in the notebook's output once, then replace it in place on every later call; returns the display
    handle to pass next time (None the first time)."""
    from IPython.display import display

    if handle is None:
        return display(shown, display_id=True)
    handle.update(shown)
    return handle


class NotebookTable:
    """A table of chosen metrics that redraws in place in a notebook as the run goes (one row per step, the
    last `rows` steps): `run_concurrent(..., reporters=[NotebookTable(["A/probe/rescue_size", ...])])`.
    Outside IPython it prints each row."""

    def __init__(self, columns: list[str], rows: int = 12, title: str = ""):
        self.columns, self.rows, self.title = list(columns), rows, title
        self.history: list[dict] = []
        self._handle = None

    def log(self, metrics: dict[str, float], step: int) -> None:
        chosen = {name: metrics[name] for name in self.columns if name in metrics}
        if not chosen:
            return
        self.history.append({"step": step, **chosen})
        self._show()

    def frame(self):
        """Every logged row as a DataFrame indexed by step (the columns that were ever logged)."""
        import pandas as pd

        return pd.DataFrame(self.history, columns=["step", *self.columns]).set_index("step").dropna(how="all",
                                                                                                 axis=1)

    def _show(self) -> None:
        try:
            from IPython import get_ipython
        except ImportError:
            get_ipython = None
        table = self.frame().tail(self.rows)
        if get_ipython is None or get_ipython() is None:
            print(table.tail(1).to_string(header=len(self.history) == 1))
            return
        self._handle = redraw(self._handle, table.style.format("{:.3g}").set_caption(self.title))

    def close(self) -> None:
        pass


class NotebookPlot:
    """Chosen metrics as line plots that redraw in place in a notebook as the run goes: one panel per metric, one
    line per policy, in colour(policy) when given (the reports' mrl.reports.palette.policy_colour), else matplotlib's
    cycle, e.g. `NotebookPlot(["train/reward", "probe/rescue_size"], policies=["A", "B"], colour=policy_colour)`.
    The figure is drawn off pyplot and
    shown as a PNG, so a cell shows it once and a long run keeps no open figures. Outside IPython it draws nothing
    (a NotebookTable beside it prints the rows)."""

    def __init__(self, metrics: list[str], policies: list[str], title: str = "", dpi: int = 80,
                 colour: Callable[[str], str] | None = None):
        self.metrics, self.policies, self.title, self.dpi = list(metrics), list(policies), title, dpi
        self.colour = colour
        self.history: list[dict] = []
        self._handle = None

    def log(self, metrics: dict[str, float], step: int) -> None:
        names = [f"{policy}/{metric}" for policy in self.policies for metric in self.metrics]
        chosen = {name: metrics[name] for name in names if name in metrics}
        if chosen:
            self.history.append({"step": step, **chosen})
            self._show()

    def figure(self):
        """The plot of every logged step (a matplotlib Figure, not registered with pyplot)."""
        import pandas as pd
        from matplotlib.figure import Figure
        from matplotlib.ticker import MaxNLocator

        frame = pd.DataFrame(self.history).set_index("step")
        fig = Figure(figsize=(3.2 * len(self.metrics), 2.6), dpi=self.dpi, layout="constrained")
        for ax, metric in zip(fig.subplots(1, len(self.metrics), squeeze=False)[0], self.metrics):
            for policy in self.policies:
                column = f"{policy}/{metric}"
                if column in frame:
                    ax.plot(frame.index, frame[column], marker=".", color=self.colour(policy) if self.colour else None,
                            label=policy)
            ax.set(title=metric, xlabel="step")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        fig.axes[0].legend(fontsize="small", frameon=False)
        if self.title:
            fig.suptitle(self.title)
        return fig

    def _show(self) -> None:
        try:
            from IPython import get_ipython
            from IPython.display import Image
        except ImportError:
            return
        if get_ipython() is None:
            return
        from io import BytesIO

        buffer = BytesIO()
        self.figure().savefig(buffer, format="png", metadata={"Software": None})
        self._handle = redraw(self._handle, Image(data=buffer.getvalue(), format="png"))

    def close(self) -> None:
        pass


def make_reporters(report_to: str, run_id: str, logging_dir: str | Path | None, config: dict | None = None) -> list:
    """The reporter `report_to` names (none: no reporter). logging_dir: TensorBoard's folder (default
    results/tensorboard), W&B's (default: W&B's, ./wandb)."""
    if report_to == "none":
        return []
    if report_to == "tensorboard":
        return [TensorBoardReporter(run_id, logging_dir or repo_root() / "results" / "tensorboard", config)]
    if report_to == "trackio":
        return [TrackioReporter(run_id, config=config)]
    if report_to == "wandb":
        return [WandbReporter(run_id, config=config, logging_dir=logging_dir)]
    raise ValueError(f"report_to={report_to!r}: allowed values are {list(REPORT_TO)}")
