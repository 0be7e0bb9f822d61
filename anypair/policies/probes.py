"""The probe schedule: while a policy has paused drafting (length 0), one round now and then drafts
anyway (a probe), so the policy notices when the text becomes predictable again.

Probes back off but never stop: the first comes after `first_after` paused rounds, each probe that
fails doubles the wait up to `longest_wait`, and one that resumes drafting resets it. The text of one
request changes predictability many times (a function header, then a loop body that repeats names),
so a request that stopped probing after a few early misses ran the rest as the target alone: on
HumanEval/9 (Qwen2.5-Coder-1.5B, SmolLM2-135M) the policy that gave up after 3 failed probes
proposed 6 tokens in 127 rounds, while a constant 4-token draft kept 69% of its 120 proposed tokens
and took 44 rounds.

What a probe costs bounds the wait: one round of draft steps plus the draft's catch-up read of the
tokens committed since it last drafted (one batched forward; on 2 cores ~0.7 ms a token against
~3-8 ms a step). At the longest wait of 8 rounds a probe every ninth round costs a few percent of a
request in which drafting never pays again; the cross-request ledger (`policies.ledger`) is what
stops a pair that never pays.
"""
from __future__ import annotations


class ProbeSchedule:
    def __init__(self, first_after: int = 2, longest_wait: int = 8) -> None:
        if not 1 <= first_after <= longest_wait:
            raise ValueError(f"need 1 <= first_probe_after <= probe_every, got {first_after} and {longest_wait}")
        self.first_after = first_after
        self.longest_wait = longest_wait
        self.reset()

    def reset(self) -> None:
        self.idle_rounds = 0  # paused rounds since the last probe
        self.wait = self.first_after  # the paused round that probes
        self.failed_in_a_row = 0

    def due(self) -> bool:
        """Whether the next paused round is a probe."""
        return self.idle_rounds + 1 >= self.wait

    def record_paused_round(self) -> bool:
        """A paused round went by; returns whether it was the probe."""
        if self.due():
            self.idle_rounds = 0
            return True
        self.idle_rounds += 1
        return False

    def after_probe(self, drafting_resumed: bool) -> None:
        self.wait = self.first_after if drafting_resumed else min(self.longest_wait, 2 * self.wait)
        self.failed_in_a_row = 0 if drafting_resumed else self.failed_in_a_row + 1
