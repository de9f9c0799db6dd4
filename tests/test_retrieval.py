"""Hand-computed cases for MemRL's retrieval math and the utility update (docs/design.md §4)."""

import numpy as np
import pytest

from memrl.memory.retrieval import (PhaseBOptions, phase_a, phase_b, similarity_quantile,
                                    update_q, zscore)


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
