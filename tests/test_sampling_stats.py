"""Goodness-of-fit statistics for the sampling tests (a helper module, not a test file).

Each check is a chi-square goodness-of-fit test of observed token counts against an exactly known
distribution, at a false-alarm rate ALPHA per check: a correct sampler fails a check with
probability ALPHA. The tests use fixed seeds, so a run is deterministic; ALPHA is the chance that
a given seed would have produced a spurious failure.
"""
from __future__ import annotations

import torch

ALPHA = 1e-3
#: bins whose expected count is below this are pooled (the chi-square approximation needs ~5)
MIN_EXPECTED = 5.0


def chi_square_p_value(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """p-value of observing `counts` [V] if samples were drawn from `probs` [V].

    A sample on a zero-probability token is impossible under `probs`: the p-value is then 0.
    """
    counts = counts.to(torch.float64)
    probs = probs.to(torch.float64) / probs.to(torch.float64).sum()
    if float(counts[probs == 0].sum()) > 0:
        return 0.0
    expected = probs * counts.sum()
    big = expected >= MIN_EXPECTED
    observed_bins = counts[big]
    expected_bins = expected[big]
    pooled_expected = expected[~big].sum()
    if pooled_expected >= MIN_EXPECTED:
        observed_bins = torch.cat([observed_bins, counts[~big].sum().reshape(1)])
        expected_bins = torch.cat([expected_bins, pooled_expected.reshape(1)])
    elif pooled_expected > 0:  # too small for a bin of its own: fold it into the smallest bin
        smallest = int(expected_bins.argmin())
        observed_bins[smallest] += counts[~big].sum()
        expected_bins[smallest] += pooled_expected
    degrees_of_freedom = observed_bins.numel() - 1
    if degrees_of_freedom < 1:
        return 1.0
    statistic = ((observed_bins - expected_bins) ** 2 / expected_bins).sum()
    return float(torch.special.gammaincc(torch.tensor(degrees_of_freedom / 2, dtype=torch.float64), statistic / 2))


def homogeneity_p_value(counts_a: torch.Tensor, counts_b: torch.Tensor) -> float:
    """p-value of the chi-square test that two samples (token counts [V] each) come from the same
    distribution. Tokens whose pooled expected count is below MIN_EXPECTED in either sample are
    merged into one bin (pooling decided on the sum of both samples, so it does not favour either)."""
    counts = torch.stack([counts_a.to(torch.float64), counts_b.to(torch.float64)])
    sizes = counts.sum(dim=1, keepdim=True)
    column_totals = counts.sum(dim=0)
    smaller_share = float(sizes.min() / sizes.sum())
    big = column_totals * smaller_share >= MIN_EXPECTED
    table = counts[:, big]
    rest = counts[:, ~big].sum(dim=1, keepdim=True)
    if float(rest.sum()) * smaller_share >= MIN_EXPECTED:
        table = torch.cat([table, rest], dim=1)
    elif float(rest.sum()) > 0 and table.shape[1] > 0:  # too small for a bin of its own
        smallest = int(table.sum(dim=0).argmin())
        table[:, smallest] += rest[:, 0]
    degrees_of_freedom = table.shape[1] - 1
    if degrees_of_freedom < 1:
        return 1.0
    expected = table.sum(dim=1, keepdim=True) * table.sum(dim=0, keepdim=True) / table.sum()
    statistic = ((table - expected) ** 2 / expected).sum()
    return float(torch.special.gammaincc(torch.tensor(degrees_of_freedom / 2, dtype=torch.float64), statistic / 2))


def total_variation(p: torch.Tensor, q: torch.Tensor) -> float:
    return 0.5 * float((p.to(torch.float64) - q.to(torch.float64)).abs().sum())


def test_p_value_matches_chi_square_table():
    # two equiprobable bins, 1 degree of freedom: statistic 10.828 is the 0.999 quantile
    n = 10_000
    half = n / 2
    shift = (10.828 * n / 4) ** 0.5  # (O-E)^2/E summed over both bins == 4 shift^2 / n
    counts = torch.tensor([half + shift, half - shift])
    assert abs(chi_square_p_value(counts, torch.tensor([0.5, 0.5])) - 1e-3) < 2e-5
    # 10 equiprobable bins, 9 degrees of freedom: 27.877 is the 0.999 quantile
    counts = torch.full((10,), 1000.0)
    counts[0] += (27.877 * 1000 / 2) ** 0.5
    counts[1] -= (27.877 * 1000 / 2) ** 0.5
    assert abs(chi_square_p_value(counts, torch.full((10,), 0.1)) - 1e-3) < 2e-5


def test_impossible_sample_gives_zero_p_value():
    assert chi_square_p_value(torch.tensor([10.0, 10.0, 1.0]), torch.tensor([0.5, 0.5, 0.0])) == 0.0


def test_correct_sampler_rarely_flagged_and_wrong_one_always():
    generator = torch.Generator().manual_seed(0)
    probs = torch.softmax(torch.randn(50, generator=generator) * 2, dim=0)
    wrong = torch.softmax(torch.log(probs) + 0.3 * torch.randn(50, generator=generator), dim=0)
    p_values_right, p_values_wrong = [], []
    for _ in range(200):
        draws = torch.multinomial(probs, 5000, replacement=True, generator=generator)
        p_values_right.append(chi_square_p_value(torch.bincount(draws, minlength=50), probs))
        draws = torch.multinomial(wrong, 5000, replacement=True, generator=generator)
        p_values_wrong.append(chi_square_p_value(torch.bincount(draws, minlength=50), probs))
    # under the null the p-value is ~uniform: about 10% of runs fall below 0.1
    assert 0.03 < sum(p < 0.1 for p in p_values_right) / 200 < 0.2
    assert all(p < ALPHA for p in p_values_wrong), total_variation(probs, wrong)


def test_homogeneity_false_alarms_near_alpha_and_differences_caught():
    """Two samples of the same law: p-values ~uniform; samples of laws 0.15 apart in TV: caught."""
    generator = torch.Generator().manual_seed(1)
    probs = torch.softmax(torch.randn(60, generator=generator) * 2, dim=0)
    other = torch.softmax(torch.log(probs) + 0.6 * torch.randn(60, generator=generator), dim=0)
    same, different = [], []
    for _ in range(200):
        draws_a = torch.bincount(torch.multinomial(probs, 600, replacement=True, generator=generator), minlength=60)
        draws_b = torch.bincount(torch.multinomial(probs, 900, replacement=True, generator=generator), minlength=60)
        draws_c = torch.bincount(torch.multinomial(other, 900, replacement=True, generator=generator), minlength=60)
        same.append(homogeneity_p_value(draws_a, draws_b))
        different.append(homogeneity_p_value(draws_a, draws_c))
    assert 0.03 < sum(p < 0.1 for p in same) / 200 < 0.2
    assert sum(p < ALPHA for p in different) / 200 > 0.95, total_variation(probs, other)
