"""The marginal probability of a text (mrl.core.marginal) against brute force, for each tokenizer kind of the zoo.

Brute force is independent of the lattice and of the KV-cache search: the tokenizations are found by extending token
prefixes with every non-special token through the tokenizer's own `decode`, and each is scored by one full forward
(mrl.runtime.rollout.completion_logprobs) of a float64 copy of the model. The search runs in float32, so it is compared
with a tolerance measured from float32 rounding on the same paths (`fp32_tolerance`), not a hand-picked one.
"""
import copy
import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from mrl.core.batch import encode_prompts, pad_completions
from mrl.core.config import FamilyConfig, TaskConfig
from mrl.core.marginal import lattice, marginal_logprobs, tokenizations
from mrl.core.tasks import ArithTask
from mrl.core.thl import ThlError, marginal_logprob
from mrl.runtime.rollout import completion_logprobs
from mrl.runtime.zoo import SPECIAL_TOKENS, build_model, train_tokenizer

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


# --- the ratio, selectable in the probes (tokenization: canonical | marginal) -----------------------------------

G = 4


@pytest.fixture(scope="module")
def forms():
    return ArithTask(TaskConfig(name="arith-forms", max_operand=99, test_per_skill=10, pool_per_skill=0, leak_n=5))


def make_batch(model, tok, problems, texts_per_prompt, verify):
    """(the learner's RolloutBatch whose completions are the given texts (canonical ids, EOS appended), its
    Learner)."""
    from mrl.core.batch import Learner, RolloutBatch
    from mrl.core.config import GrpoConfig

    texts = [t for row in texts_per_prompt for t in row]
    expanded = [p for p in problems for _ in range(G)]
    prompt_ids, prompt_mask = encode_prompts(tok, [p.prompt for p in expanded])
    ids, mask = pad_completions([tok(t, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for t in texts],
                                tok.pad_token_id, "cpu")
    rewards = torch.tensor([verify(t, p) for t, p in zip(texts, expanded)])
    return (RolloutBatch("L", 1, list(problems), G, prompt_ids, prompt_mask, ids, mask, torch.zeros(ids.shape),
                         rewards, GrpoConfig(group_size=G, lr=1e-3)),
            Learner(lambda *tensors: completion_logprobs(model, *tensors), tok, verify,
                    torch.Generator().manual_seed(0)))


def peer_view(tok, problems, texts_per_prompt, verify):
    """A peer P (tokenizer `tok`) whose samples are the given texts with drawn log-probs."""
    from mrl.core.probes import PeerView
    from mrl.core.see import Rollout

    gen = torch.Generator().manual_seed(1)
    rollout = {}
    for problem, texts in zip(problems, texts_per_prompt):
        rollout[problem.pid] = []
        for text in texts:
            ids = tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
            logps = (-0.1 - torch.rand(len(ids), generator=gen)).tolist()
            rollout[problem.pid].append(Rollout("run", "P", 0, problem.pid, problem.prompt, text, ids, logps,
                                                float(verify(text, problem)), "eos", "P:char"))
    return PeerView(rollout=rollout, tokenizers={"P": tok})


@pytest.fixture(scope="module")
def peer_case(zoo, forms):
    """A BPE learner (tiny GPT-2) whose groups all failed on two prompts, and a character-level peer with two
    right answers and two wrong ones each: every peer text has two BPE tokenizations or more."""
    tok, model, _ = zoo["bpe64"]
    problems = [p for p in forms.test["S1"] if lattice(tok, p.answer).count > 1][:2]   # BPE merged it: 10-19, 88-99
    wrong = ["16" if p.answer == "17" else "17" for p in problems]
    own = [[w] * G for w in wrong]
    peer = [[p.answer, p.answer, w, "1" + w] for p, w in zip(problems, wrong)]
    return (tok, model, *make_batch(model, tok, problems, own, forms.verify),
            peer_view(zoo["char48"][0], problems, peer, forms.verify), problems, peer)


def probe_tolerance(zoo, problems, peer) -> float:
    """Twice the largest `reference` tolerance of the peer texts: the probe's forward and the search's each round
    within one of the exact value."""
    return 2 * max(reference(zoo, "bpe64", p.prompt, t, True)[2] for p, texts in zip(problems, peer) for t in texts)


def expected_marginals(tok, model, problems, peer):
    """Each peer text's marginal and canonical log-prob under the learner, by the KV-cache search (EOS ended)."""
    prompts = [p.prompt for p, texts in zip(problems, peer) for _ in texts]
    return marginal_logprobs(model, tok, prompts, [t for texts in peer for t in texts], eos=True)


def test_the_probes_marginal_log_probs_equal_the_search(peer_case, zoo):
    from mrl.core.probes.terms import marginal_text_logprobs

    tok, model, batch, learner, _, problems, peer = peer_case
    prompts = [p.prompt for p, texts in zip(problems, peer) for _ in texts] + [problems[0].prompt]
    texts = [t for row in peer for t in row] + ["30:"]
    values, marginal = marginal_text_logprobs(batch, learner, prompts, texts, [True] * len(texts))
    assert values.requires_grad and all(marginal)
    search = marginal_logprobs(model, tok, prompts, texts, eos=True)
    for prompt, text, got, want in zip(prompts, texts, values.tolist(), search):
        _, _, tol = reference(zoo, "bpe64", prompt, text, True)
        assert got == pytest.approx(want.logp, abs=2 * tol)
    assert all(m.tokenizations >= 2 for m in search[:-1])
    wordpiece_tok, wordpiece_model, _ = zoo["wordpiece40"]
    wordpiece = make_batch(wordpiece_model, wordpiece_tok, problems[:1], [["18"] * G], lambda t, p: 0.0)
    _, written = marginal_text_logprobs(*wordpiece, [problems[0].prompt] * 2, ["30:", "18"], [True, True])
    assert written == [False, True]   # WordPiece cannot write '30:': the caller keeps the canonical


def peer_log_s(tok, model, problems, peer, zoo_char, normaliser: str):
    """log s of each peer text by hand: (log marginal - sum of the peer's log-probs) over the THL groups (thl) or
    log marginal / n_learner - mean peer log-prob (mean), clamped to +-10."""
    from mrl.core.thl import align

    out = []
    records = [r for p in problems for r in zoo_char.rollout[p.pid]]   # in the order of `peer`
    for record, m in zip(records, expected_marginals(tok, model, problems, peer)):
        alignment = align(record.completion, zoo_char.tokenizers["P"], tok, record.token_ids)
        source = sum(record.logps)
        value = (m.logp - source) / alignment.n_groups if normaliser == "thl" \
            else m.logp / len(alignment.dst_ids) - source / len(record.logps)
        out.append(min(max(value, -10.0), 10.0))
    return out


@pytest.mark.parametrize("ratio", ["thl", "mean"])
def test_hacpo_with_the_marginal_takes_the_texts_probability_in_its_ratio(peer_case, zoo, ratio):
    import numpy as np

    from mrl.core.probes import get_probe, probe_config

    tok, model, batch, learner, peers, problems, peer = peer_case
    hacpo = get_probe("hacpo").loss
    default = hacpo(batch, peers, learner, probe_config("hacpo", clipping="none", ratio=ratio))
    canonical = hacpo(batch, peers, learner, probe_config("hacpo", clipping="none", ratio=ratio, tokenization="canonical"))
    marginal = hacpo(batch, peers, learner, probe_config("hacpo", clipping="none", ratio=ratio, tokenization="marginal"))
    assert default.loss(0).item() == canonical.loss(0).item()   # today's behaviour is the default
    expected, tol = peer_log_s(tok, model, problems, peer, peers, ratio), probe_tolerance(zoo, problems, peer)
    stats = marginal.stats
    assert stats["log_s_mean_from_P"] == pytest.approx(np.mean(expected), abs=tol)
    assert stats["log_s_q50_from_P"] == pytest.approx(np.quantile(expected, 0.5), abs=tol)
    assert stats["marginal_fallback"] == 0 and stats["marginal_gap_from_P"] > 0
    assert stats["log_s_mean_from_P"] > canonical.stats["log_s_mean_from_P"]   # every text: marginal > canonical
    loss = marginal.loss(0)
    model.zero_grad(set_to_none=True)
    loss.backward()   # the gradient reaches the model through every tokenization
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    model.zero_grad(set_to_none=True)


def test_graft_compatibility_with_the_marginal(peer_case, zoo):
    import numpy as np

    from mrl.core.probes import get_probe, probe_config

    tok, model, batch, learner, peers, problems, peer = peer_case
    graft = get_probe("graft").loss
    canonical = graft(batch, peers, learner, probe_config("graft", delta=0.0))
    marginal = graft(batch, peers, learner, probe_config("graft", delta=0.0, tokenization="marginal"))
    assert marginal.stats["graft_samples"] == canonical.stats["graft_samples"] == 4   # both prompts' two successes
    from mrl.core.thl import align

    expected = []
    for p, texts in zip(problems, peer):
        for record, m in zip(peers.rollout[p.pid], expected_marginals(tok, model, [p], [texts])):
            if record.completion != p.answer:
                continue
            n_dst = len(align(record.completion, peers.tokenizers["P"], tok, record.token_ids).dst_ids)
            expected.append(math.exp(min(max(m.logp / n_dst - np.mean(record.logps), -10), 10)))
    assert marginal.stats["compatibility_mean"] == pytest.approx(np.mean(expected), rel=probe_tolerance(zoo, problems,
                                                                                                        peer))
    assert marginal.stats["compatibility_mean"] > canonical.stats["compatibility_mean"]
    assert marginal.stats["marginal_gap_from_P"] > 0 and "marginal_gap_from_P" not in canonical.stats


def test_prp_takes_the_marginal_at_the_sequence_level_only(peer_case, zoo):
    import numpy as np

    from mrl.core.config import ConfigError
    from mrl.core.probes import get_probe, probe_config

    tok, model, batch, learner, peers, problems, peer = peer_case
    with pytest.raises(ConfigError, match="tokenization"):
        probe_config("prp", tokenization="marginal")   # level token by default
    prp = get_probe("prp").loss
    canonical = prp(batch, peers, learner, probe_config("prp", level="sequence"))
    marginal = prp(batch, peers, learner, probe_config("prp", level="sequence", tokenization="marginal"))
    expected = []
    for p, texts in zip(problems, peer):
        for record, m in zip(peers.rollout[p.pid], expected_marginals(tok, model, [p], [texts])):
            expected.append(m.logp - sum(record.logps))
    tol = probe_tolerance(zoo, problems, peer)
    assert marginal.stats["mean_log_ratio"] == pytest.approx(np.mean(expected), abs=tol)   # no A = 0 sample here
    assert marginal.stats["mean_log_ratio"] > canonical.stats["mean_log_ratio"]
