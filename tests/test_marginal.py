"""The marginal probability of a text (mrl.marginal) against brute force, for each tokenizer kind of the zoo.

Brute force is independent of the lattice and of the KV-cache search: the tokenizations are found by extending token
prefixes with every non-special token through the tokenizer's own `decode`, and each is scored by one full forward
(mrl.rollout.completion_logprobs) of a float64 copy of the model. The search runs in float32, so it is compared with
a tolerance measured from float32 rounding on the same paths (`fp32_tolerance`), not a hand-picked one.
"""
import copy
import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from mrl.config import FamilyConfig, TaskConfig
from mrl.marginal import lattice, marginal_logprobs, tokenizations
from mrl.rollout import completion_logprobs, encode_prompts, pad_completions
from mrl.tasks import ArithTask
from mrl.thl import ThlError, marginal_logprob
from mrl.zoo import SPECIAL_TOKENS, build_model, train_tokenizer

TINY = dict(d_model=32, n_layers=2, n_heads=2, n_kv_heads=1, d_ff=64, warmup_mix={"S1": 1.0})
KINDS = {  # the zoo tokenizers (BPE 64, 48; Unigram 24; WordPiece 40; characters 48), each on an architecture
    "bpe64": ("bpe", 64, "gpt2"), "bpe48": ("bpe", 48, "gpt_neox"), "unigram24": ("unigram", 24, "llama"),
    "wordpiece40": ("wordpiece", 40, "qwen2"), "char48": ("char", 48, "mistral"), "unigram-pieces": (None, 0, "llama")}
UNIGRAM_PIECES = ["1", "2", "8", "9", "12", "21", "18", "89", "+", "=", " ", "a", "d", "n", "ad", "dd", "add", "an",
                  "and", " a", "p", "l", "u", "s", "plus", "lu"]
"""a Unigram tokenizer with pieces of several characters (the zoo's Unigram trains to single characters only)"""
ALPHABET = ["1", "2", "8", "9", "+", "=", ":", " ", "a", "d", "n", "p", "l", "u", "s", "add", " plus ", " and ", "18",
            "89"]
U32 = 2.0 ** -24   # float32's unit roundoff


def unigram_with_pieces() -> PreTrainedTokenizerFast:
    scores = [(t, 0.0) for t in SPECIAL_TOKENS] + [(p, -float(len(p) == 1)) for p in UNIGRAM_PIECES]
    tok = Tokenizer(models.Unigram(scores, unk_id=2))
    tok.pre_tokenizer = pre_tokenizers.Split(" ", "isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>",
                                   padding_side="left")


@pytest.fixture(scope="module")
def zoo():
    """{kind: (tokenizer, float32 model, float64 copy)}: the tokenizers trained on the held-out task's corpus, tiny
    randomly initialised models (their distributions are spread, so non-canonical paths carry mass)."""
    corpus = ArithTask(TaskConfig(name="arith-forms", max_operand=99, test_per_skill=10, pool_per_skill=0,
                                  leak_n=5)).corpus
    out = {}
    for name, (kind, vocab, arch) in KINDS.items():
        tok = unigram_with_pieces() if kind is None else train_tokenizer(kind, corpus, vocab, 40)
        model = build_model(FamilyConfig(name="X", arch=arch, tokenizer=kind or "unigram", vocab_size=vocab or 24,
                                         **TINY), len(tok), 64, seed=0).eval()
        out[name] = (tok, model, copy.deepcopy(model).double())
    return out


def brute_tokenizations(tokenizer, text: str) -> list[list[int]]:
    """Every sequence of non-special tokens that `tokenizer.decode` turns into `text` (ASCII text: a decoded prefix is
    a prefix of the text)."""
    vocab = [i for i in range(len(tokenizer)) if i not in set(tokenizer.all_special_ids)]
    found = []

    def walk(prefix: list[int]) -> None:
        written = tokenizer.decode(prefix, skip_special_tokens=True, clean_up_tokenization_spaces=False)
        if written == text:
            found.append(prefix)
            return
        if len(written) < len(text) and text.startswith(written):
            for token_id in vocab:
                walk(prefix + [token_id])

    walk([])
    return found


def path_logprobs(model, tokenizer, prompt: str, paths: list[list[int]], eos: bool) -> torch.Tensor:
    """log P(path | prompt) of each path by one full forward (no cache), in the model's dtype. (n_paths,)."""
    tail = [tokenizer.eos_token_id] if eos else []
    rows = [p + tail for p in paths]
    if not any(rows):
        return torch.zeros(len(rows), dtype=torch.float64)
    prompt_ids, prompt_mask = encode_prompts(tokenizer, [prompt] * len(rows))
    ids, mask = pad_completions(rows, tokenizer.pad_token_id, "cpu")
    with torch.no_grad():
        return (completion_logprobs(model, prompt_ids, prompt_mask, ids, mask) * mask).sum(-1).double()


def reference(zoo, kind: str, prompt: str, text: str, eos: bool) -> tuple[float, float, float]:
    """(log marginal by brute force in float64, log P of the canonical encoding (-inf when it is not a tokenization),
    tolerance): four times the largest float32 rounding of a path's log-probability measured on these paths, plus the
    float64 sum's (the search rounds in other orders than the full forward: of the same size, not the same bits)."""
    tok, model32, model64 = zoo[kind]
    paths = brute_tokenizations(tok, text)
    if not paths:
        return -math.inf, -math.inf, 0.0
    exact64 = path_logprobs(model64, tok, prompt, paths, eos)
    rounding = (path_logprobs(model32, tok, prompt, paths, eos) - exact64).abs().max().item()
    canonical = tok(text, add_special_tokens=False)["input_ids"]
    canonical_logp = exact64[paths.index(canonical)].item() if canonical in paths else -math.inf
    value = torch.logsumexp(exact64, 0).item()
    return value, canonical_logp, 4 * (rounding + U32 * (1 + abs(value)))


texts = st.lists(st.sampled_from(ALPHABET), max_size=4).map("".join).filter(lambda t: len(t) <= 9)
SETTINGS = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.mark.parametrize("kind", KINDS)
@SETTINGS
@given(text=texts)
def test_the_lattice_holds_every_tokenization_and_nothing_else(zoo, kind, text):
    tok = zoo[kind][0]
    graph = lattice(tok, text)
    assert sorted(tokenizations(graph)) == sorted(brute_tokenizations(tok, text))
    assert graph.count == len(tokenizations(graph))


@pytest.mark.parametrize("eos", [False, True])
@pytest.mark.parametrize("kind", KINDS)
@SETTINGS
@given(text=texts, prompt=st.sampled_from(["0 plus 18 =", "add 2 and 30:", "12+7="]))
def test_the_marginal_is_the_brute_force_sum_and_at_least_the_canonical(zoo, kind, eos, text, prompt):
    tok, model, _ = zoo[kind]
    result = marginal_logprob(model, tok, prompt, text, eos=eos)
    value, canonical, tol = reference(zoo, kind, prompt, text, eos)
    assert result.exact and result.covered == 1.0 and result.scored == result.tokenizations
    assert result.logp == pytest.approx(value, abs=tol) if value > -math.inf else result.logp == -math.inf
    assert result.canonical_logp == pytest.approx(canonical, abs=tol) if canonical > -math.inf \
        else result.canonical_logp == -math.inf
    assert result.logp >= result.canonical_logp   # the canonical term is one of the summands, in float64 too
    if kind.startswith("char") and value > -math.inf:   # one tokenization: the two are one number
        assert result.tokenizations == 1 and result.logp == result.canonical_logp and result.gap == 0.0


def test_a_longer_bpe_text_has_many_tokenizations_and_the_gap_is_positive(zoo):
    tok, model, _ = zoo["bpe64"]
    prompt, text = "add 2 and 30:", "32 plus 99 and add"
    result = marginal_logprob(model, tok, prompt, text, eos=True)
    value, canonical, tol = reference(zoo, "bpe64", prompt, text, True)
    assert result.tokenizations == len(brute_tokenizations(tok, text)) > 100
    assert result.logp == pytest.approx(value, abs=tol) and result.canonical_logp == pytest.approx(canonical, abs=tol)
    assert result.gap > 0 and 0 < result.canonical_share < 1


@pytest.mark.parametrize("kind", KINDS)
def test_batching_does_not_change_the_value(zoo, kind):
    tok, model, _ = zoo[kind]
    prompts = ["0 plus 18 =", "add 2 and 30:", "12+7=", "0 plus 18 =", "7"]
    batch = ["18", "89 plus 1", "1 and 2", "add 9", ""]
    together = marginal_logprobs(model, tok, prompts, batch, eos=True)
    for prompt, text, joint in zip(prompts, batch, together):
        alone = marginal_logprob(model, tok, prompt, text, eos=True)
        value, _, tol = reference(zoo, kind, prompt, text, True)
        assert joint.tokenizations == alone.tokenizations and joint.scored == alone.scored
        if value == -math.inf:
            assert joint.logp == alone.logp == -math.inf
        else:
            assert joint.logp == pytest.approx(alone.logp, abs=2 * tol)
            assert joint.canonical_logp == pytest.approx(alone.canonical_logp, abs=2 * tol)


@pytest.mark.parametrize("beam", [1, 2, 3])
def test_the_beam_bounds_the_marginal_and_keeps_the_canonical_path(zoo, beam):
    tok, model, _ = zoo["bpe64"]
    prompts, batch = ["add 2 and 30:", "12+7=", "0 plus 18 ="], ["32 plus 99 and add", "1 plus 1", "18"]
    exact = marginal_logprobs(model, tok, prompts, batch, eos=True)
    approx = marginal_logprobs(model, tok, prompts, batch, eos=True, exact_limit=0, beam=beam)
    for prompt, text, full, found in zip(prompts, batch, exact, approx):
        _, _, tol = reference(zoo, "bpe64", prompt, text, True)
        assert 1 <= found.scored <= full.scored and 0.0 <= found.covered <= 1.0
        assert found.exact == (found.scored == full.scored)
        if found.exact:
            assert found.covered == 1.0 and found.logp == pytest.approx(full.logp, abs=tol)
            continue
        # the found mass F and the pruned prefixes' bound R: F <= marginal <= F + R, with F / (F + R) = covered
        assert found.logp <= full.logp + tol
        assert full.logp <= found.logp - math.log(found.covered) + tol
        assert found.canonical_logp == pytest.approx(full.canonical_logp, abs=tol)


def test_a_wide_beam_is_exact(zoo):
    tok, model, _ = zoo["bpe64"]
    text = "32 plus 99 and add"
    full = marginal_logprob(model, tok, "add 2 and 30:", text, eos=True)
    wide = marginal_logprob(model, tok, "add 2 and 30:", text, eos=True, exact_limit=0, beam=full.tokenizations)
    assert wide.exact and wide.covered == 1.0 and wide.scored == full.scored
    assert wide.logp == full.logp   # the same rows in the same batches: the same bits


def test_a_text_the_tokenizer_cannot_write_has_probability_zero(zoo):
    tok, model, _ = zoo["wordpiece40"]
    assert lattice(tok, "30:").count == 0   # WordPiece writes a space before ':' (a word start) and has no '##:'
    result = marginal_logprob(model, tok, "add 2 and 30:", "30:")
    assert result.logp == result.canonical_logp == -math.inf and result.scored == 0


def test_a_decoder_that_is_not_piece_by_piece_is_refused():
    tok = Tokenizer(models.WordLevel({"<unk>": 0, "▁a": 1, "a": 2}, unk_token="<unk>"))
    tok.decoder = decoders.Metaspace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>")
    with pytest.raises(ThlError, match="Metaspace"):
        lattice(fast, "a")


def test_bad_arguments_are_refused(zoo):
    tok, model, _ = zoo["bpe64"]
    with pytest.raises(ValueError, match="one entry each"):
        marginal_logprobs(model, tok, ["1+1="], ["2", "3"])
    with pytest.raises(ValueError, match="beam=0"):
        marginal_logprobs(model, tok, ["1+1="], ["2"], beam=0)
    with pytest.raises(ThlError, match="more than limit=2"):
        tokenizations(lattice(tok, "32 plus 99"), limit=2)
