import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mrl.core.config import SKILLS, TaskConfig
from mrl.core.tasks import ArithTask, load_gsm8k, math_verify_reward, parse_integer, verify_integer


@pytest.mark.parametrize("name", ["arith-ops", "arith-forms"])
def test_splits_are_disjoint_and_seeded(name):
    task = ArithTask(TaskConfig(name=name, test_per_skill=100, pool_per_skill=30, leak_n=40))
    for skill in SKILLS:
        train = {p.prompt for p in task.train[skill]}
        test = {p.prompt for p in task.test[skill]}
        assert len(test) == 100 and not train & test
        assert {p.prompt for p in task.pool[skill]} <= train
        assert {p.prompt for p in task.leak[skill]} <= train
    again = ArithTask(TaskConfig(name=name, test_per_skill=100, pool_per_skill=30, leak_n=40))
    assert again.test == task.test and again.pool == task.pool
    other = ArithTask(TaskConfig(name=name, test_per_skill=100, pool_per_skill=30, leak_n=40, seed=1))
    assert other.test != task.test


def test_arith_forms_holds_out_the_same_pairs_in_every_form():
    task = ArithTask(TaskConfig(name="arith-forms", test_per_skill=50))
    answers = {s: sorted((p.pid.split("/")[2:], p.answer) for p in task.test[s]) for s in SKILLS}
    assert answers["S1"] == answers["S2"] == answers["S3"]
    assert task.test["S2"][0].prompt.startswith("add ")


def test_arith_ops_answers_are_right():
    task = ArithTask(TaskConfig(test_per_skill=20))
    for p in task.test["S1"] + task.test["S2"] + task.test["S3"]:
        a, op, b = p.prompt[:-1].replace("+", " + ").replace("-", " - ").replace("*", " * ").split()
        expected = {"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b)}[op]
        assert int(p.answer) == expected


def test_halves_partition_s3():
    task = ArithTask(TaskConfig())
    h0, h1 = ({p.prompt for p in task.source(k)} for k in ("S3.half0", "S3.half1"))
    assert not h0 & h1 and h0 | h1 == {p.prompt for p in task.train["S3"]}


@pytest.mark.parametrize("text,value", [("42", 42), ("-7", -7), ("0", 0), ("120", 120)])
def test_parse_integer_accepts_canonical_integers(text, value):
    assert parse_integer(text) == value


@pytest.mark.parametrize("text", ["40+2", "__import__('os')", "42abc", "4 2", "", "4.2", "1e3", "٤٢", "-0", "+7"])
def test_parse_integer_never_evaluates(text):
    assert parse_integer(text) is None


@pytest.mark.parametrize("forged", ["018", " 18 ", "18\n", "\xa018", "18\u3000", "\t18", "18 ", "0018"])
def test_a_padded_or_zero_led_answer_is_not_the_answer(forged):
    """A peer's success is re-verified with this verifier: only the string our policies write counts."""
    assert verify_integer(forged, "18") == 0.0 and verify_integer("18", "18") == 1.0


@pytest.mark.parametrize("value", [18, None, b"18", ["18"]])
def test_the_verifiers_refuse_what_is_not_text(value):
    with pytest.raises(TypeError, match="must be a str"):
        verify_integer(value, "18")
    with pytest.raises(TypeError, match="must be a str"):
        math_verify_reward(value, "18")


@given(st.text(max_size=20))
def test_verifier_accepts_only_text_that_is_the_integer(text):
    reward = verify_integer(text, "85")
    assert reward in (0.0, 1.0)
    if reward:
        assert text == "85", text


@given(st.integers(min_value=-10**6, max_value=10**6))
def test_verifier_on_integers(n):
    assert verify_integer(str(n), "85") == float(n == 85)
    assert verify_integer(f"{n}+0", "85") == 0.0


def test_gsm8k_loader_and_math_verify_reward(tmp_path):
    rows = [{"question": "Tom has 3 apples and buys 4 more. How many?", "answer": "3 + 4 = 7\n#### 7"},
            {"question": "What is 1,000 + 234?", "answer": "It is 1,234.\n#### 1,234"}]
    path = tmp_path / "gsm8k.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    ds = load_gsm8k(path)
    assert ds["final_answer"] == ["7", "1234"]
    assert ds[0]["prompt"].startswith("Question: Tom") and ds[0]["prompt"].endswith("Answer:")
    assert math_verify_reward("so the answer is $\\boxed{7}$", "7") == 1.0
    assert math_verify_reward("The total is 1234.", "1234") == 1.0
    assert math_verify_reward("I think 8", "7") == 0.0
    assert math_verify_reward("no number here", "7") == 0.0


def test_gsm8k_row_without_final_answer_is_named(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"question": "q", "answer": "7"}) + "\n")
    with pytest.raises(ValueError, match="GSM8K row 0"):
        load_gsm8k(path)


def test_gsm8k_missing_column_is_named(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"prompt": "q", "answer": "#### 7"}) + "\n")
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['question'\]"):
        load_gsm8k(path)


@pytest.mark.parametrize("experiment", ["main", "heldout"])
def test_a_correct_answer_as_the_zoos_tokenizers_decode_it_is_the_canonical_string(experiment):
    """The verifier takes no whitespace and no leading zero; this holds only if the text a policy's correct
    completion decodes to (`completion_texts`: the answer's ids, then EOS) is exactly the answer. Checked for
    every answer of the default profile's tasks and every zoo tokenizer: byte-level BPE decodes bytes, Unigram's
    Fuse concatenates pieces, WordPiece joins '##' continuations without a space."""
    import torch

    from mrl.profiles import load_profile
    from mrl.core.batch import completion_texts
    from mrl.runtime.zoo import train_tokenizer

    profile = load_profile("default")
    task_cfg, zoo = (profile.task, profile.zoo) if experiment == "main" else \
        (profile.experiment("heldout").task, profile.experiment("heldout").zoo)
    task = ArithTask(task_cfg)
    problems = [p for s in SKILLS for p in task.train[s] + task.test[s]]
    for family in zoo.families:
        tokenizer = train_tokenizer(family.tokenizer, task.corpus, family.vocab_size, zoo.max_positions)
        eos = tokenizer.eos_token_id
        encoded = tokenizer([p.answer for p in problems], add_special_tokens=False)["input_ids"]
        width = max(map(len, encoded)) + 1
        ids = torch.tensor([a + [eos] + [tokenizer.pad_token_id] * (width - len(a) - 1) for a in encoded])
        mask = torch.tensor([[1] * (len(a) + 1) + [0] * (width - len(a) - 1) for a in encoded])
        texts = completion_texts(tokenizer, ids, mask, eos)
        wrong = [(p.answer, text) for p, (text, ok) in zip(problems, texts)
                 if not ok or verify_integer(text, p.answer) != 1.0]
        assert not wrong, f"{family.name} ({family.tokenizer}): {wrong[:5]}"
