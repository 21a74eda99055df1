"""Verifiable tasks: the complementary-skill arithmetic families (docs/architecture.md, The task and the zoo) and
GSM8K/MATH.

`arith-ops` (an algorithm gap): S1 addition `37+48=`, S2 subtraction `91-56=`, S3 multiplication
by one digit `7*13=`. `arith-forms` (a format gap over addition): S1 `37+48=`, S2 `add 37 and 48:`,
S3 `37 plus 48 =`. Completions are the integer, then EOS. Splits are seeded: held-out test
problems never occur in training, RL-pool or leak sets.

The verifier parses an integer with a strict regular expression; text is never evaluated.
"""
from __future__ import annotations

import functools
import random
import re
import warnings
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from mrl.core.config import SKILLS, TaskConfig


@dataclass(frozen=True)
class Problem:
    """One prompt with its verifiable answer."""

    prompt: str
    answer: str
    skill: str
    pid: str


ARITH_OPS_TEMPLATES = {"S1": "{a}+{b}=", "S2": "{a}-{b}=", "S3": "{b}*{a}="}
ARITH_FORMS_TEMPLATES = {"S1": "{a}+{b}=", "S2": "add {a} and {b}:", "S3": "{a} plus {b} ="}
CANONICAL_INTEGER = re.compile(r"0|-?[1-9][0-9]{0,11}")


def _text(completion_text, name: str = "completion_text") -> str:
    if not isinstance(completion_text, str):
        raise TypeError(f"{name} must be a str (a decoded completion), got {type(completion_text).__name__}")
    return completion_text


def parse_integer(text: str) -> int | None:
    """The integer a completion states, or None. Only the canonical form counts: ASCII digits, no sign for 0,
    no leading zeros, no whitespace of any kind (the zoo's completions are decoded exactly, and a peer's
    " 18" or "018" is not the string our policies are trained to write), no eval."""
    text = _text(text)
    return int(text) if CANONICAL_INTEGER.fullmatch(text) else None


def verify_integer(completion_text: str, answer: str) -> float:
    """1.0 when the completion is exactly the canonical string of the answer's integer, else 0.0."""
    value = parse_integer(completion_text)
    return float(value is not None and value == int(answer))


def _arith_ops_problems(skill: str, max_operand: int) -> list[tuple[int, int, int]]:
    """All (a, b, answer) triples of a skill: S2 keeps b <= a, S3 multiplies by one digit."""
    rng = range(max_operand + 1)
    if skill == "S1":
        return [(a, b, a + b) for a in rng for b in rng]
    if skill == "S2":
        return [(a, b, a - b) for a in rng for b in rng if b <= a]
    return [(a, b, a * b) for a in rng for b in range(10)]


class ArithTask:
    """Seeded splits of an arithmetic task family.

    train[skill]: problems for warm-up and fresh RL prompts; test[skill]: held-out problems;
    pool[skill]: the fixed RL pool (a subset of train); leak[skill]: the fixed subset of train
    from which a warm-up leak of that skill is drawn.
    """

    verifier_id = "arith-integer"
    """names the verifier in the Success records this task's policies publish"""

    def __init__(self, config: TaskConfig):
        if config.name not in ("arith-ops", "arith-forms"):
            raise ValueError(f"ArithTask handles arith-ops and arith-forms, not {config.name!r}")
        self.config = config
        rng = random.Random(config.seed)
        if config.name == "arith-ops":
            self.templates = ARITH_OPS_TEMPLATES
            triples = {s: _arith_ops_problems(s, config.max_operand) for s in SKILLS}
            test_keys = {s: set(rng.sample(range(len(triples[s])), config.test_per_skill)) for s in SKILLS}
            split = {s: ([t for i, t in enumerate(triples[s]) if i not in test_keys[s]],
                         [t for i, t in enumerate(triples[s]) if i in test_keys[s]]) for s in SKILLS}
        else:
            # one shared algorithm: a pair held out is held out in every form
            self.templates = ARITH_FORMS_TEMPLATES
            pairs = _arith_ops_problems("S1", config.max_operand)
            held = set(rng.sample(range(len(pairs)), config.test_per_skill))
            train_pairs = [t for i, t in enumerate(pairs) if i not in held]
            test_pairs = [t for i, t in enumerate(pairs) if i in held]
            split = {s: (train_pairs, test_pairs) for s in SKILLS}
        self.train = {s: self._problems(s, split[s][0], "train") for s in SKILLS}
        self.test = {s: self._problems(s, split[s][1], "test") for s in SKILLS}
        self.pool = {s: rng.sample(self.train[s], min(config.pool_per_skill, len(self.train[s])))
                     for s in SKILLS} if config.pool_per_skill else {}
        self.leak = {s: rng.sample(self.train[s], min(config.leak_n, len(self.train[s]))) for s in SKILLS}
        # S3's two halves give each family a partial, different share of the shared skill
        order = rng.sample(self.train["S3"], len(self.train["S3"]))
        self.halves = {"S3.half0": order[: len(order) // 2], "S3.half1": order[len(order) // 2:]}

    def _problems(self, skill: str, triples: list, split: str) -> list[Problem]:
        return [Problem(self.templates[skill].format(a=a, b=b), str(c), skill, f"{split}/{skill}/{a}/{b}")
                for a, b, c in triples]

    def source(self, key: str) -> list[Problem]:
        """Problems behind a warm-up mixture key: S1, S3.half0, leak:S2, ..."""
        if key.startswith("leak:"):
            return self.leak[key[len("leak:"):]]
        if key in self.halves:
            return self.halves[key]
        return self.train[key]

    @cached_property
    def corpus(self) -> list[str]:
        """Every training prompt+answer of every skill: the tokenizers' training text."""
        return [p.prompt + p.answer for s in SKILLS for p in self.train[s]]

    def rl_prompts(self, step_rng: random.Random, n: int) -> list[Problem]:
        """n RL prompts with uniformly random skills: from the fixed pool, or fresh train prompts."""
        source = self.pool if self.config.pool_per_skill else self.train
        return [step_rng.choice(source[step_rng.choice(SKILLS)]) for _ in range(n)]

    def verify(self, completion_text: str, problem: Problem) -> float:
        return verify_integer(completion_text, problem.answer)


# ---------------------------------------------------------------------------------------------
# GSM8K / MATH: the paper profile's path, through `datasets` and math-verify
# ---------------------------------------------------------------------------------------------

GSM8K_FINAL = re.compile(r"####\s*(.+?)\s*$")


def question_prompt(question: str, instruction: str = "", chat: bool = False) -> str:
    """A question as a prompt: the user message of a chat (question, then the instruction) or the plain
    'Question: ...\nAnswer:' of a base model (the instruction on its own line before 'Answer:')."""
    if chat:
        return f"{question}\n{instruction}" if instruction else question
    return f"Question: {question}\n" + (f"{instruction}\n" if instruction else "") + "Answer:"


def load_gsm8k(data_files: str | Path | None = None, split: str = "train", instruction: str = "",
               chat: bool = False):
    """Rows of a math benchmark as a `datasets.Dataset`, in the GSM8K schema (question, answer '... #### 42') or
    MATH's (problem, answer: the final answer, as MATH-500 publishes it).

    data_files: a local JSON/JSONL file; None loads `openai/gsm8k` from the hub. Adds `question`, `prompt`
    (`question_prompt`) and `final_answer`; a GSM8K row without '####' raises ValueError naming the row.
    """
    import datasets

    if data_files is None:
        ds = datasets.load_dataset("openai/gsm8k", "main", split=split)
    else:
        ds = datasets.load_dataset("json", data_files=str(data_files), split="train")
    columns = set(ds.column_names)
    math_schema = {"problem", "answer"} <= columns
    missing = set() if math_schema else {"question", "answer"} - columns
    if missing:
        raise ValueError(f"{data_files or 'GSM8K'} lacks column(s) {sorted(missing)} of the GSM8K schema (question, "
                         f"answer) or MATH's (problem, answer); it has {ds.column_names}")

    def add_fields(row, idx):
        if math_schema:
            question, final = row["problem"], str(row["answer"]).strip()
        else:
            match = GSM8K_FINAL.search(row["answer"])
            if match is None:
                raise ValueError(f"GSM8K row {idx}: answer has no '#### <final answer>' line: "
                                 f"{row['answer'][-80:]!r}")
            question, final = row["question"], match.group(1).replace(",", "")
        return {"question": question, "prompt": question_prompt(question, instruction, chat), "final_answer": final}

    return ds.map(add_fields, with_indices=True)


def _normalized(question: str) -> str:
    return " ".join(question.lower().split())


def math_verify_reward(completion_text: str, final_answer: str) -> float:
    """1.0 when math-verify judges the completion's final answer equal to the gold answer."""
    from math_verify import parse, verify

    gold = parse(f"${final_answer}$")
    predicted = parse(_text(completion_text))
    if not gold or not predicted:
        return 0.0
    return float(verify(gold, predicted))


class Gsm8kTask:
    """GSM8K (or MATH in its schema) as a task with the arithmetic tasks' interface.

    Training rows come from `data_files`. With `test_files` each benchmark's own test split is a held-out skill
    ({name: rows}, up to test_per_skill each), and a training row whose question a test split holds is dropped
    (counted in `dropped_overlap`); without, the first `test_per_skill` training rows are held out as skill
    "gsm8k". Of the training rows a seeded `pool_per_skill` form the RL pool (0: fresh rows every step). The
    verifier is math-verify on the completion text.
    """

    verifier_id = "math-verify"
    """names the verifier in the Success records this task's policies publish"""

    def __init__(self, config: TaskConfig):
        self.config = config
        load = functools.partial(load_gsm8k, instruction=config.instruction, chat=config.chat_template)
        rows = load(config.data_files)
        problems = [Problem(row["prompt"], row["final_answer"], "gsm8k", f"gsm8k/{i}") for i, row in enumerate(rows)]
        self.dropped_overlap = 0
        if config.test_files:
            self.test, held_out = {}, set()
            for name, path in config.test_files.items():
                test_rows = load(path)
                self.test[name] = [Problem(row["prompt"], row["final_answer"], name, f"{name}/{i}")
                                   for i, row in enumerate(test_rows)][:config.test_per_skill]
                held_out |= {_normalized(q) for q in test_rows["question"]}
            train = [p for p, q in zip(problems, rows["question"]) if _normalized(q) not in held_out]
            self.dropped_overlap = len(problems) - len(train)
            if self.dropped_overlap:
                warnings.warn(f"{self.dropped_overlap} training row(s) of {config.data_files} ask a question of the "
                              f"test files {sorted(config.test_files)}; dropped from training", stacklevel=2)
        else:
            if len(problems) <= config.test_per_skill:
                raise ValueError(f"GSM8K data has {len(problems)} rows; test_per_skill={config.test_per_skill} "
                                 "leaves none to train on")
            self.test = {"gsm8k": problems[:config.test_per_skill]}
            train = problems[config.test_per_skill:]
        if not train:
            raise ValueError(f"{config.data_files} leaves no training rows")
        rng = random.Random(config.seed)
        self.train = {"gsm8k": train}
        self.pool = {"gsm8k": rng.sample(train, min(config.pool_per_skill, len(train)))} if config.pool_per_skill \
            else {}
        self.skills = tuple(self.test)

    def rl_prompts(self, step_rng: random.Random, n: int) -> list[Problem]:
        source = self.pool or self.train
        return [step_rng.choice(source["gsm8k"]) for _ in range(n)]

    def verify(self, completion_text: str, problem: Problem) -> float:
        return math_verify_reward(completion_text, problem.answer)


def make_task(config: TaskConfig):
    """The task of a config: ArithTask for arith-ops / arith-forms, Gsm8kTask for gsm8k (a local file)."""
    return Gsm8kTask(config) if config.name == "gsm8k" else ArithTask(config)
