"""Hand-computed cases for MemRL's retrieval math and the utility update (docs/design.md §4)."""

import numpy as np
import pytest

from memory_state import phase_b

from memrl.memory.retrieval import (
    TIE_TOL,
    PhaseBOptions,
    choose_key,
    epsilon_greedy,
    key_similarities,
    phase_a,
    pool_by_intent,
    rank_pool,
    similarity_quantile,
    zscore,
)
from memrl.memory.q_update import update_q


def test_phase_a_gate_keeps_only_sims_above_delta():
    sims = np.array([0.9, 0.5, 0.7, 0.3, 0.6])
    # > 0.6 strictly: indices 0 (0.9) and 2 (0.7); 0.6 itself is excluded
    assert phase_a(sims, delta=0.6, k1=10).tolist() == [0, 2]


def test_phase_a_k1_takes_most_similar_first():
    sims = np.array([0.1, 0.8, 0.95, 0.4, 0.85])
    assert phase_a(sims, delta=0.0, k1=3).tolist() == [2, 4, 1]


def test_phase_a_empty_when_nothing_passes_gate():
    assert phase_a(np.array([0.2, 0.3]), delta=0.5, k1=5).size == 0


def test_phase_a_without_gate_ignores_delta():
    assert phase_a(np.array([0.2, 0.3]), delta=0.5, k1=5, gate=False).tolist() == [1, 0]


def test_zscore_uses_pool_statistics():
    # mean 2, population std sqrt(2/3)
    z = zscore(np.array([1.0, 2.0, 3.0]))
    assert np.allclose(z, np.array([-1, 0, 1]) / np.sqrt(2 / 3))
    assert np.allclose(zscore(np.array([5.0, 5.0])), [0.0, 0.0])  # no spread: no signal


def test_phase_b_hand_computed_scores():
    # pool sims [0.9, 0.8, 0.7] -> z = [1.2247, 0, -1.2247]
    # pool Qs   [-1, 0, 1]      -> z = [-1.2247, 0, 1.2247]
    sims = np.array([0.9, 0.8, 0.7])
    qs = np.array([-1.0, 0.0, 1.0])
    c = np.sqrt(1.5)
    _, scores = phase_b(sims, qs, PhaseBOptions(lam=0.25, k2=3))
    # (1-λ)·zs + λ·zq with λ = 0.25
    assert np.allclose(scores, [0.75 * c - 0.25 * c, 0.0, -0.75 * c + 0.25 * c])
    top, _ = phase_b(sims, qs, PhaseBOptions(lam=0.75, k2=2))
    # λ=0.75 -> scores [-0.5c, 0, 0.5c] -> the high-Q, low-sim memory wins
    assert top.tolist() == [2, 1]


def test_lambda_zero_ranks_by_similarity_only():
    sims = np.array([0.70, 0.95, 0.80])
    qs = np.array([1.0, -1.0, 0.5])
    top, _ = phase_b(sims, qs, PhaseBOptions(lam=0.0, k2=3))
    assert top.tolist() == [1, 2, 0]


def test_lambda_one_ranks_by_q_only():
    sims = np.array([0.70, 0.95, 0.80])
    qs = np.array([1.0, -1.0, 0.5])
    top, _ = phase_b(sims, qs, PhaseBOptions(lam=1.0, k2=2))
    assert top.tolist() == [0, 2]


def test_phase_b_k2_truncates_and_ties_break_by_similarity():
    sims = np.array([0.7, 0.9, 0.8])
    qs = np.array([0.0, 0.0, 0.0])  # all Q equal: z(Q)=0; λ=1 -> all scores 0 -> by similarity
    top, _ = phase_b(sims, qs, PhaseBOptions(lam=1.0, k2=2))
    assert top.tolist() == [1, 2]


def test_phase_b_fixed_similarity_statistics_and_clip():
    sims = np.array([0.6, 0.4])
    qs = np.array([10.0, 0.0])
    opts = PhaseBOptions(lam=0.5, k2=2, sim_mean=0.5, sim_std=0.1, z_clip=0.5)
    _, scores = phase_b(sims, qs, opts)
    # z(sim) = [1, -1] with the fixed stats; z(Q) = [1, -1] clipped to [0.5, -0.5]
    assert np.allclose(scores, [0.75, -0.75])


def test_phase_b_without_normalisation_mixes_raw_values():
    _, scores = phase_b(np.array([0.9, 0.5]), np.array([0.2, 1.0]),
                        PhaseBOptions(lam=0.5, k2=2, normalize=False))
    assert np.allclose(scores, [0.55, 0.75])


def test_update_q_single_step_and_floor():
    assert update_q(0.0, 1.0, 0.3) == pytest.approx(0.3)
    assert update_q(0.3, -1.0, 0.3) == pytest.approx(0.3 + 0.3 * (-1.3))
    assert update_q(-0.9, -1.0, 0.5, floor=-0.5) == -0.5


def test_mean_q_converges_to_expected_reward_geometrically():
    """With Bernoulli rewards (+1 w.p. p, -1 otherwise), E[Q_t] = E[r] + (Q_0 - E[r])(1-α)^t."""
    rng = np.random.default_rng(0)
    alpha, p, chains, steps = 0.3, 0.7, 20000, 25
    expected_r = p * 1 + (1 - p) * -1  # 0.4
    q = np.zeros(chains)
    for t in range(1, steps + 1):
        r = np.where(rng.random(chains) < p, 1.0, -1.0)
        q = q + alpha * (r - q)
        predicted = expected_r + (0.0 - expected_r) * (1 - alpha) ** t
        assert q.mean() == pytest.approx(predicted, abs=0.02), t
    assert abs(q.mean() - expected_r) < 0.02


def test_similarity_quantile_on_known_vectors():
    # three unit vectors with pairwise cosines 0, 0.6, 0.8
    e = np.array([[1.0, 0.0], [0.0, 1.0], [0.8, 0.6]], dtype=np.float32)
    # pairwise sims: (0,1)=0, (0,2)=0.8, (1,2)=0.6; numpy linear quantile at 0.5 -> 0.6
    assert similarity_quantile(e, 0.5) == pytest.approx(0.6, abs=1e-6)
    with pytest.raises(ValueError):
        similarity_quantile(e[:1], 0.8)


# ---------------------------------------------------------------- keys, ties, official Phase A

def test_key_similarities_give_every_copy_of_a_key_its_best_similarity():
    # two copies of key "a" reported a hair apart (a re-normalised stored vector)
    sims = np.array([0.9, 0.8999996, 0.7])
    got = key_similarities(sims, ["a", "a", "b"])
    assert got.tolist() == [0.9, 0.9, 0.7]
    assert key_similarities(sims, None).tolist() == sims.tolist()


def test_phase_a_ties_include_takes_every_entry_tied_with_the_k1th():
    # a task replayed for 3 epochs: its own memories (key "own") tie at sim 1; k1 = 2
    sims = np.array([1.0, 1.0, 1.0, 0.8])
    orders = np.array([0, 1, 2, 3])
    keys = ["own", "own", "own", "other"]
    assert phase_a(sims, delta=0.5, k1=2, ties="include", keys=keys, orders=orders).tolist() == [0, 1, 2]
    # oldest (the old rule): the newest own memory is cut, so it is never retrieved
    assert phase_a(sims, delta=0.5, k1=2, ties="oldest", keys=keys, orders=orders).tolist() == [0, 1]
    # ties above the boundary are no cut: k1 = 3 takes all three own memories either way
    assert phase_a(sims, delta=0.5, k1=3, ties="oldest", keys=keys, orders=orders).tolist() == [0, 1, 2]


def test_phase_a_oldest_means_insertion_order_not_position():
    sims = np.array([0.9, 0.9, 0.9, 0.95])
    orders = np.array([7, 3, 5, 0])
    # 0.95 first; then two of the three tied 0.9 entries: the oldest are orders 3 and 5
    assert phase_a(sims, delta=0.0, k1=3, ties="oldest", orders=orders).tolist() == [3, 1, 2]
    assert phase_a(sims, delta=0.0, k1=3, ties="include", orders=orders).tolist() == [3, 1, 2, 0]


def test_tie_detection_is_a_tolerance_not_a_rounding_bin():
    # 0.7000004 and 0.7000006 round to different 6-digit bins but differ by 2e-7 < TIE_TOL
    a, b = 0.7000004, 0.7000006
    assert round(a, 6) != round(b, 6) and abs(a - b) <= TIE_TOL
    sims = np.array([0.9, a, b, 0.1])
    assert phase_a(sims, delta=0.0, k1=2, ties="include").tolist() == [0, 2, 1]
    # similarities further apart than the tolerance do not tie
    c, d = 0.3, 0.3 + 1.5 * TIE_TOL
    assert phase_a(np.array([0.9, d, c]), delta=0.0, k1=2, ties="include").tolist() == [0, 1]


def test_pool_by_intent_expands_the_top_k1_keys_into_their_buckets():
    # keys: A (sim .9, 3 memories), B (.8, 2), C (.7, 1), D (.4, below δ)
    keys = ["A", "B", "A", "C", "B", "A", "D"]
    sims = np.array([0.9, 0.8, 0.9, 0.7, 0.8, 0.9, 0.4])
    orders = np.array([10, 11, 12, 13, 14, 15, 16])
    # k1 = 2 keys -> A's bucket (oldest first: 0, 2, 5) then B's (1, 4): 5 memories, not 2
    assert pool_by_intent(sims, keys, delta=0.5, k1=2, orders=orders).tolist() == [0, 2, 5, 1, 4]
    assert pool_by_intent(sims, keys, delta=0.5, k1=3, orders=orders).tolist() == [0, 2, 5, 1, 4, 3]
    # the gate works on keys: D never enters; without it, k1 = 4 reaches D
    assert pool_by_intent(sims, keys, delta=0.5, k1=9, orders=orders).tolist() == [0, 2, 5, 1, 4, 3]
    assert pool_by_intent(sims, keys, delta=0.5, k1=4, gate=False, orders=orders).tolist() == [0, 2, 5, 1, 4, 3, 6]
    assert pool_by_intent(sims, keys, delta=0.95, k1=2, orders=orders).size == 0
    # a key exactly at the threshold passes the official gate (sim >= δ); the paper's is strict
    at = np.array([0.5, 0.5, 0.4])
    assert pool_by_intent(at, ["A", "A", "B"], delta=0.5, k1=2).tolist() == [0, 1]
    assert phase_a(at, delta=0.5, k1=2).size == 0


def test_pool_by_intent_ties_between_keys():
    # two keys tied at the k1-th key similarity: include takes both buckets, oldest the older key
    keys = ["new", "old", "top", "old"]
    sims = np.array([0.8, 0.8, 0.9, 0.8])
    orders = np.array([5, 1, 0, 2])
    assert pool_by_intent(sims, keys, delta=0.0, k1=2, ties="include", orders=orders).tolist() == [2, 1, 3, 0]
    assert pool_by_intent(sims, keys, delta=0.0, k1=2, ties="oldest", orders=orders).tolist() == [2, 1, 3]


def test_q_min_drops_memories_after_the_pool_statistics():
    # λ = 1: score = z(Q), z taken over all three Qs, then Q = -0.9 < q_min leaves the pool
    qs = np.array([1.0, 0.0, -0.9])
    mean = qs.mean()  # 0.0333...
    sd = qs.std()     # population std over the three = 0.77603
    ranked, scores = rank_pool(np.array([0.5, 0.5, 0.5]), qs, PhaseBOptions(lam=1.0, k2=3, q_min=-0.8))
    assert ranked.tolist() == [0, 1]
    assert scores[0] == pytest.approx((1.0 - mean) / sd) and scores[0] == pytest.approx(1.245657, abs=1e-5)
    assert scores[1] == pytest.approx((0.0 - mean) / sd)
    assert np.isnan(scores[2])
    # statistics after the drop would give ±1: not what the official code does
    assert scores[0] != pytest.approx(1.0)
    top, _ = phase_b(np.array([0.5, 0.5, 0.5]), qs, PhaseBOptions(lam=1.0, k2=3, q_min=-0.8))
    assert top.tolist() == [0, 1]


def test_epsilon_greedy_draws_only_from_the_ranked_candidates():
    ranked = np.array([4, 0, 2])  # 1 and 3 were dropped (q_min)
    rng = np.random.default_rng(0)
    assert epsilon_greedy(ranked, 2, 0.0, rng).tolist() == [4, 0]
    for seed in range(20):
        got = epsilon_greedy(ranked, 2, 1.0, np.random.default_rng(seed)).tolist()
        assert len(got) == 2 and set(got) <= {4, 0, 2}
        assert got == [x for x in ranked.tolist() if x in got]  # kept in rank order


def test_choose_key_takes_the_most_similar_key_above_the_threshold():
    assert choose_key(np.array([0.92, 0.95, 0.5]), threshold=0.9) == 1
    assert choose_key(np.array([0.95, 0.95]), threshold=0.9, orders=np.array([5, 2])) == 1  # older key
    assert choose_key(np.array([0.89, 0.5]), threshold=0.9) is None  # opens a key of its own
    assert choose_key(np.array([0.9]), threshold=0.9) == 0  # cos >= threshold joins
