"""The zoo: tokenizers that split numbers differently, checkpoints that round-trip, a cache that rebuilds on change."""
import json

import pytest
import torch

from mrl.core.config import FamilyConfig, TaskConfig, WarmupConfig, ZooConfig
from mrl.core.tasks import ArithTask
from mrl.runtime.zoo import _build_family_with_threads, build_zoo, check_composition, family_dir, train_tokenizer

SMALL = dict(d_model=32, n_layers=2, n_heads=2, n_kv_heads=1, d_ff=64)


def test_tokenizers_differ_in_how_they_split_numbers(arith_task):
    splits, number_tokens = {}, {}
    numbers = "+".join(str(n) for n in range(10, 100))
    for kind, vocab in (("bpe", 48), ("unigram", 40), ("wordpiece", 60)):
        tok = train_tokenizer(kind, arith_task.corpus, vocab, 48)
        number_tokens[kind] = len(tok.encode(numbers, add_special_tokens=False))
        check_composition(tok, [p for s in arith_task.test for p in arith_task.test[s]])
        assert tok.pad_token_id == 0 and tok.eos_token_id == 1 and tok.unk_token_id == 2
        assert tok.padding_side == "left"
        splits[kind] = tok.convert_ids_to_tokens(tok.encode("37+48=85", add_special_tokens=False))
    assert number_tokens["bpe"] < number_tokens["unigram"] == 2 * 90 + 89  # BPE merges 2-digit numbers
    assert splits["unigram"][:3] == ["3", "7", "+"]        # Unigram on digits is character-level
    assert any(t.startswith("##") for t in splits["wordpiece"])  # WordPiece continuations
    assert len({tuple(s) for s in splits.values()}) == 3


def test_build_cache_and_roundtrip(tmp_path):
    task_cfg = TaskConfig(test_per_skill=20, pool_per_skill=5)
    zoo_cfg = ZooConfig(families=[FamilyConfig(name="A", arch="gpt2", tokenizer="bpe", **SMALL),
                                  FamilyConfig(name="B", arch="llama", tokenizer="unigram", vocab_size=40, **SMALL,
                                               warmup_mix={"S2": 1.0})],
                        warmup=WarmupConfig(steps=30, batch_size=32, lr_warmup_steps=5), workers=1)
    zoo = build_zoo(task_cfg, zoo_cfg, root=tmp_path, progress=False)
    for name, policy in zoo.items():
        losses = policy.record["warmup_loss"]
        assert len(losses) == 30 and sum(losses[-5:]) < sum(losses[:5])  # the warm-up learns
        assert (policy.path / "config.json").exists() and (policy.path / "tokenizer.json").exists()
    # a second build loads from the cache: same weights, nothing retrained
    stamp = (zoo["A"].path / "zoo.json").stat().st_mtime_ns
    again = build_zoo(task_cfg, zoo_cfg, root=tmp_path, progress=False)
    assert (again["A"].path / "zoo.json").stat().st_mtime_ns == stamp
    ids = torch.tensor([[3, 4, 5]])
    torch.testing.assert_close(again["A"].model(ids).logits, zoo["A"].model(ids).logits)
    # a changed family config gets its own folder; the other family stays cached
    changed = ZooConfig(families=[zoo_cfg.families[0], FamilyConfig(**{**zoo_cfg.families[1].__dict__, "d_ff": 96})],
                        warmup=zoo_cfg.warmup, workers=1)
    assert family_dir(tmp_path, task_cfg, changed.families[0], changed) == zoo["A"].path
    assert family_dir(tmp_path, task_cfg, changed.families[1], changed) != zoo["B"].path
    assert json.loads((zoo["B"].path / "zoo.json").read_text())["family"]["d_ff"] == 64


def test_a_family_built_twice_at_once_keeps_the_first(tmp_path):
    """Two processes (a notebook and a test, two notebooks) that build the same family at once each write their own
    folder; the one that finishes second finds the family built, keeps it and removes its own copy."""
    task_cfg = TaskConfig(test_per_skill=20, pool_per_skill=5)
    zoo_cfg = ZooConfig(families=[FamilyConfig(name="A", arch="gpt2", tokenizer="bpe", **SMALL)],
                        warmup=WarmupConfig(steps=5, batch_size=8, lr_warmup_steps=1), workers=1)
    first = build_zoo(task_cfg, zoo_cfg, root=tmp_path, progress=False)["A"]
    stamp = (first.path / "zoo.json").stat().st_mtime_ns
    again = _build_family_with_threads(task_cfg, zoo_cfg.families[0], zoo_cfg, first.path, 1, False, 0)
    assert again == str(first.path) and (first.path / "zoo.json").stat().st_mtime_ns == stamp
    assert [p.name for p in first.path.parent.iterdir()] == [first.path.name]  # no half-built copy left


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_parallel_build_equals_inline_build(tmp_path, precision):
    """Warm-up in spawned worker processes (1 thread each) is deterministic, under bf16 autocast too: same weights
    as inline."""
    task_cfg = TaskConfig(test_per_skill=20, pool_per_skill=5)
    families = [FamilyConfig(name=n, arch=a, tokenizer="bpe", **SMALL) for n, a in (("A", "gpt2"), ("B", "qwen2"))]
    warmup = WarmupConfig(steps=10, batch_size=16, lr_warmup_steps=2, precision=precision)
    inline = build_zoo(task_cfg, ZooConfig(families=families, warmup=warmup, workers=1), tmp_path / "i", False)
    spawned = build_zoo(task_cfg, ZooConfig(families=families, warmup=warmup, workers=2), tmp_path / "p", False)
    for name in ("A", "B"):
        for p, q in zip(inline[name].model.parameters(), spawned[name].model.parameters()):
            assert torch.equal(p, q)


def test_tokenizer_training_is_reproducible(arith_task):
    """Same corpus, same vocabulary and ids (the WordPiece trainer alone shuffles ids; we renumber)."""
    for kind, vocab in (("bpe", 48), ("unigram", 40), ("wordpiece", 60)):
        runs = [train_tokenizer(kind, arith_task.corpus, vocab, 48).get_vocab() for _ in range(3)]
        assert runs[0] == runs[1] == runs[2], kind


def test_unigram_ids_are_canonical_where_scores_tie():
    """arith-forms gives Unigram pieces of equal score, which its trainer orders run by run; ids follow the score,
    then the piece, so every build gets the same ids."""
    import json

    task = ArithTask(TaskConfig(name="arith-forms", test_per_skill=400, pool_per_skill=0, leak_n=20))
    vocab = json.loads(train_tokenizer("unigram", task.corpus, 24, 40).backend_tokenizer.to_str())["model"]["vocab"]
    learnt = [(piece, score) for piece, score in vocab[3:]]
    assert [piece for piece, _ in vocab[:3]] == ["<pad>", "<eos>", "<unk>"]
    assert learnt == sorted(learnt, key=lambda e: (-e[1], e[0]))
    assert len({score for _, score in learnt}) < len(learnt)   # the case that matters: some scores tie


UNGUARDED_SCRIPT = """
import sys
import mrl
from mrl.core.config import FamilyConfig, TaskConfig, WarmupConfig, ZooConfig
from mrl.runtime.zoo import build_zoo

small = dict(d_model=32, n_layers=1, n_heads=2, n_kv_heads=1, d_ff=64, warmup_mix={"S1": 1.0})
build_zoo(TaskConfig(max_operand=9, test_per_skill=10, pool_per_skill=5, leak_n=10),
          ZooConfig(families=[FamilyConfig(name="A", **small), FamilyConfig(name="B", arch="llama", **small)],
                    warmup=WarmupConfig(steps=2, batch_size=8, lr_warmup_steps=1), workers=2),
          root=sys.argv[1], progress=False)
"""


def test_a_script_without_its_main_guard_gets_an_error_naming_it_not_a_hang(tmp_path):
    """The zoo's warm-up workers re-import an unguarded script and cannot start: a clear error, within minutes."""
    import subprocess
    import sys

    script = tmp_path / "unguarded.py"
    script.write_text(UNGUARDED_SCRIPT)
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "models")], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode != 0
    assert "PoolBroken" in done.stderr and 'if __name__ == "__main__":' in done.stderr, done.stderr[-3000:]
