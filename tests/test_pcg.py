"""PCG exactness (Yanuka et al. 2025, arXiv:2511.13732, Proposition): the emitted group is distributed as
Q_c; the residual sampler realises Eq. 8. Chi-square tests on small synthetic p, q with overlapping groups. The group
cache: .npz keyed by sha256, rebuilt when corrupt, never a pickle."""

import pickle

import numpy as np
import pytest

from engine.core.verify import pcg_residual, pcg_step, sample_categorical, sd_step
from engine.synthesis.coarse_grained_sampling import AcousticGroups


def chi2_critical(df: int, z: float = 3.29) -> float:
    """Upper critical value of chi-square (Wilson–Hilferty), z = 3.29 ≈ p 0.0005 (one-sided)."""
    return df * (1 - 2 / (9 * df) + z * np.sqrt(2 / (9 * df))) ** 3


@pytest.fixture(scope="module")
def setup():
    rng = np.random.default_rng(0)
    V = 12
    emb = rng.standard_normal((V, 4))
    G = AcousticGroups(emb, theta=0.3)
    p = rng.dirichlet(np.ones(V) * 0.7)
    q = rng.dirichlet(np.ones(V) * 0.7)
    return G, p, q


def test_groups_overlap_and_weights_split_each_token_equally(setup):
    G, p, q = setup
    assert any(n > 1 for n in G.N), "the test needs overlapping groups"
    assert G.M <= G.V
    for t in range(G.V):
        assert t in G.groups[G.group_of_token[t]]  # G(t) ∋ t
        assert all(t in G.groups[k] for k in G.S[t])
    # Eq. 2/4: coarse distributions sum to one without normalisation
    assert G.coarse_all(p).sum() == pytest.approx(1.0)
    assert G.coarse_all(q).sum() == pytest.approx(1.0)


def test_emitted_group_is_distributed_as_Qc(setup):
    G, p, q = setup
    rng = np.random.default_rng(1)
    n = 40000
    counts = np.zeros(G.M)
    acc = 0
    for _ in range(n):
        x = int(rng.choice(G.V, p=p))
        r = pcg_step(x, p, q, G, rng)
        counts[r.group] += 1
        acc += r.accepted
        assert r.token in G.groups[r.group]
    Qc = G.coarse_all(q)
    exp = Qc * n
    keep = exp > 5
    chi2 = ((counts[keep] - exp[keep]) ** 2 / exp[keep]).sum()
    assert chi2 < chi2_critical(int(keep.sum()) - 1), (chi2, counts, exp)
    # group-level acceptance is at least token-level acceptance Σ min(p, q)
    assert acc / n > np.minimum(p, q).sum() - 0.01


def test_residual_sampler_matches_eq8(setup):
    G, p, q = setup
    rng = np.random.default_rng(2)
    n = 20000
    counts = np.zeros(G.M)
    for _ in range(n):
        _, K, _ = pcg_residual(p, q, G, rng)
        counts[K] += 1
    R = np.maximum(G.coarse_all(q) - G.coarse_all(p), 0)
    R /= R.sum()
    exp = R * n
    assert counts[exp == 0].sum() == 0  # never a group with Q_c ≤ P_c
    keep = exp > 5
    chi2 = ((counts[keep] - exp[keep]) ** 2 / exp[keep]).sum()
    assert chi2 < chi2_critical(max(int(keep.sum()) - 1, 1)), (chi2, counts, exp)


def test_standard_speculative_sampling_is_exact_for_q(setup):
    G, p, q = setup
    rng = np.random.default_rng(3)
    n = 30000
    counts = np.zeros(G.V)
    for _ in range(n):
        x = int(rng.choice(G.V, p=p))
        counts[sd_step(x, p, q, rng).token] += 1
    exp = q * n
    keep = exp > 5
    chi2 = ((counts[keep] - exp[keep]) ** 2 / exp[keep]).sum()
    assert chi2 < chi2_critical(int(keep.sum()) - 1)


def test_inverse_cdf_sampler_is_exact_and_skips_zero_mass():
    rng = np.random.default_rng(5)
    p = np.array([0.0, 0.5, 0.0, 0.2, 0.3, 0.0]) * 3.0  # unnormalised, zeros at both ends and inside
    n = 30000
    counts = np.bincount([sample_categorical(p, rng) for _ in range(n)], minlength=len(p))
    assert counts[p == 0].sum() == 0
    exp = p / p.sum() * n
    keep = exp > 0
    chi2 = ((counts[keep] - exp[keep]) ** 2 / exp[keep]).sum()
    assert chi2 < chi2_critical(int(keep.sum()) - 1)


def _same(a, b):
    return [list(g) for g in a.groups] == [list(g) for g in b.groups] and list(a.N) == list(b.N)


def test_groups_are_cached_on_disk(tmp_path):
    emb = np.random.default_rng(4).standard_normal((20, 3))
    a = AcousticGroups.cached(emb, 0.4, tmp_path)
    files = list(tmp_path.glob("asg_*.npz"))
    assert len(files) == 1
    mtime = files[0].stat().st_mtime_ns
    b = AcousticGroups.cached(emb, 0.4, tmp_path)
    assert files[0].stat().st_mtime_ns == mtime  # read, not rewritten
    assert _same(a, b) and _same(a, AcousticGroups(emb, 0.4))
    c = AcousticGroups.cached(emb, 0.8, tmp_path)  # θ is part of the key
    assert len(list(tmp_path.glob("asg_*.npz"))) == 2 and c.M >= a.M
    with np.load(files[0], allow_pickle=False) as z:
        assert str(z["key"]) == AcousticGroups.cache_key(emb, 0.4)


@pytest.mark.parametrize("damage", ["garbage", "truncated", "other_key", "inconsistent"])
def test_corrupt_cache_is_rebuilt(tmp_path, damage):
    emb = np.random.default_rng(4).standard_normal((20, 3))
    ref = AcousticGroups.cached(emb, 0.4, tmp_path)
    f = next(tmp_path.glob("asg_*.npz"))
    if damage == "garbage":
        f.write_bytes(b"not an npz at all")
    elif damage == "truncated":
        f.write_bytes(f.read_bytes()[:60])
    elif damage == "other_key":
        AcousticGroups(emb, 0.9).save(f, "0" * 64)
    else:  # a token outside the group the file says it is in
        with np.load(f, allow_pickle=False) as z:
            d = dict(z)
        d["member"] = np.zeros_like(d["member"])
        with open(f, "wb") as fh:
            np.savez(fh, **d)
    g = AcousticGroups.cached(emb, 0.4, tmp_path)
    assert _same(g, ref)
    assert _same(AcousticGroups.load(f, AcousticGroups.cache_key(emb, 0.4)), ref)  # the file was rewritten


class _Trap:
    """Unpickling this touches a marker file: proof that a pickle was read."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def test_a_pickle_in_the_cache_is_never_read(tmp_path):
    emb = np.random.default_rng(4).standard_normal((20, 3))
    key = AcousticGroups.cache_key(emb, 0.4)
    marker = tmp_path / "unpickled"
    # the names the pickle cache used, and the .npz name holding a pickled object array
    (tmp_path / f"asg_{key[:16]}.pkl").write_bytes(pickle.dumps(_Trap(marker)))
    (tmp_path / f"asg_{key[:32]}.pkl").write_bytes(pickle.dumps(_Trap(marker)))
    with open(tmp_path / f"asg_{key[:32]}.npz", "wb") as f:
        np.savez(f, key=np.array(key), member=np.array([_Trap(marker)], dtype=object))
    g = AcousticGroups.cached(emb, 0.4, tmp_path)
    assert not marker.exists()
    assert _same(g, AcousticGroups(emb, 0.4))


def test_incremental_cache_sync_matches_sync_cache():
    """speculative_generate's O(new tokens) cache sync crops and feeds exactly as engine.core.verify.sync_cache, over a
    context that grows the way the sampler grows it (accepted drafts, then a replacement or bonus token)."""
    from engine.core.verify import sync_cache
    from engine.synthesis.coarse_grained_sampling import _sync

    class Cache:
        def __init__(self):
            self.n_past, self.crops = 0, []

        def crop(self, n):
            assert 0 <= n <= self.n_past
            self.n_past = n
            self.crops.append(n)

    rng = np.random.default_rng(0)
    for _ in range(200):
        ctx = [9]
        a, b = Cache(), Cache()
        ca: list[int] = []
        cb: list[int] = []
        ok = 0
        while len(ctx) < 40:
            feed_a = sync_cache(a, ca, ctx)
            feed_b, ok = _sync(b, cb, ctx, ok)
            assert feed_a == feed_b and ca == cb and a.crops == b.crops
            xs = [int(t) for t in rng.integers(0, 3, int(rng.integers(0, 4)))]  # drafts (small vocabulary:
            for c, lm, f in ((ca, a, feed_a), (cb, b, feed_b)):  # replacements often equal the draft)
                c += f + xs
                lm.n_past += len(f) + len(xs)
            ok = len(ctx)
            acc = int(rng.integers(0, len(xs) + 1))
            ctx += xs[:acc] + [int(rng.integers(0, 3))]
